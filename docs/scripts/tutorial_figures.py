"""Docs build step (mkdocs-gen-files): the figures that the tutorials' own code draws.

In a tutorial, a ``python`` code block that ends with a matplotlib figure in the variable ``fig``
and is followed by an image ``![...](figures/NAME.png)`` is run here, and ``fig`` is written to
``tutorials/figures/NAME.png``. The same block runs in ``make test`` (pytest-markdown-docs), so the
picture on the page is what the tested code produces. A figure block must stand alone (no
``continuation``), and a figure link without such a block fails the build.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import types
from pathlib import Path

import mkdocs_gen_files

DOCS = Path(__file__).resolve().parents[1]
# one python block (its code never crosses a closing fence), then blank lines, then the image
FIGURE_BLOCK = re.compile(r"```python[ \t]*\n(?P<code>(?:(?!```).)*?)\n```[ \t]*\n+"
                          r"!\[[^\]]*\]\(figures/(?P<name>[\w.-]+\.png)\)", re.S)
FIGURE_LINK = re.compile(r"!\[[^\]]*\]\(figures/(?P<name>[\w.-]+\.png)\)")


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


for page in sorted((DOCS / "tutorials").glob("*.md")):
    text = page.read_text()
    blocks = {m["name"]: m["code"] for m in FIGURE_BLOCK.finditer(text)}
    missing = sorted({m["name"] for m in FIGURE_LINK.finditer(text)} - set(blocks))
    if missing:
        raise RuntimeError(f"{page.name}: figures {missing} are not preceded by the python block that draws them")
    for name, code in blocks.items():
        figure = run_figure_block(code, f"{page.name} (figures/{name})")
        with mkdocs_gen_files.open(f"tutorials/figures/{name}", "wb") as handle:
            figure.savefig(handle, format="png", dpi=80)
