"""Draw the tutorials' figures: ``python docs/scripts/tutorial_figures.py [PAGE ...]``.

In a tutorial, a ``python`` code block that ends with a matplotlib figure in the variable ``fig``
and is followed by an image ``![...](figures/NAME.png)`` is run here, and ``fig`` is written to
``docs/tutorials/figures/NAME.png``, which is committed. The same block runs in ``make test``
(pytest-markdown-docs), so the picture on the page is what the tested code produces. A figure block
must stand alone (no ``continuation``). Some blocks train small models (the Hugging Face tutorial's
context-extension figure takes about 15 s), so the site build does not run them: it uses the
committed files and fails, naming this command, when a block's code no longer matches the hash in
``docs/tutorials/figures/manifest.json`` (``docs/scripts/hooks.py``).

With page names (``huggingface``), only their figures are redrawn.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tempfile
import types
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
TUTORIALS = DOCS / "tutorials"
FIGURES = TUTORIALS / "figures"
MANIFEST = FIGURES / "manifest.json"
COMMAND = "python docs/scripts/tutorial_figures.py"
# one python block (its code never crosses a closing fence), then blank lines, then the image
FIGURE_BLOCK = re.compile(r"```python[ \t]*\n(?P<code>(?:(?!```).)*?)\n```[ \t]*\n+"
                          r"!\[[^\]]*\]\(figures/(?P<name>[\w.-]+\.png)\)", re.S)
FIGURE_IMAGE = re.compile(r"(?P<image>!\[[^\]]*\]\(figures/(?P<name>[\w.-]+\.png)\))")


def figure_blocks(markdown: str) -> dict[str, str]:
    """``{figure file name: the code of the block that draws it}`` for one tutorial's Markdown."""
    return {m["name"]: m["code"] for m in FIGURE_BLOCK.finditer(markdown)}


def figure_links(markdown: str) -> set[str]:
    """Every ``figures/NAME.png`` image of one tutorial's Markdown."""
    return {m["name"] for m in FIGURE_IMAGE.finditer(markdown)}


def code_hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def read_manifest() -> dict[str, dict[str, str]]:
    return json.loads(MANIFEST.read_text()) if MANIFEST.is_file() else {}


def run_figure_block(code: str, where: str):
    # a real module: dataclasses and typing.get_type_hints look a class's module up in sys.modules
    module = types.ModuleType("__tutorial__")
    sys.modules[module.__name__] = module
    namespace = module.__dict__
    previous = os.getcwd()
    with tempfile.TemporaryDirectory() as scratch:
        os.chdir(scratch)  # a block that writes files leaves nothing in the repository
        try:
            exec(compile(code, where, "exec"), namespace)
        finally:
            os.chdir(previous)
    figure = namespace.get("fig")
    if figure is None or not hasattr(figure, "savefig"):
        raise RuntimeError(f"{where}: the code block before a figures/ image must leave a figure in `fig`")
    return figure


def main(pages: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    known = {page.stem: page for page in sorted(TUTORIALS.glob("*.md"))}
    unknown = sorted(set(pages) - set(known))
    if unknown:
        raise SystemExit(f"unknown tutorial(s) {unknown}; known: {', '.join(known)}")
    FIGURES.mkdir(exist_ok=True)
    manifest = read_manifest()
    for stem, page in known.items():
        if pages and stem not in pages:
            continue
        text = page.read_text()
        blocks = figure_blocks(text)
        missing = sorted(figure_links(text) - set(blocks))
        if missing:
            raise SystemExit(f"{page.name}: figures {missing} are not preceded by the python block that draws them")
        for name, code in blocks.items():
            figure = run_figure_block(code, f"{page.name} (figures/{name})")
            figure.savefig(FIGURES / name, format="png", dpi=80, metadata={"Software": None})
            manifest[name] = {"page": f"tutorials/{page.name}", "code_sha256": code_hash(code)}
            print(f"{page.name}: figures/{name}")
    MANIFEST.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
