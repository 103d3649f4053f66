"""The built site: strict and quiet, every code block rendered as code, every anchor resolved.

One build (``mkdocs build --strict``, as ``make docs`` runs it) into a temporary folder, then checks
on its HTML. The build draws nothing: figures are committed (``docs/scripts/gallery.py``,
``docs/scripts/tutorial_figures.py``), so it takes seconds.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import pe_toolkit as pet
from pe_toolkit.extras import EXTRAS

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
# what `make docs` sets: the theme's and properdocs' notices off
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}
# this project's tracker ("issue 27", "issues 28 and 30"); an upstream reference ("PyTorch issue #25104") is fine
TRACKER = re.compile(r"\bissues? \d+", re.I)


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=config.parent, capture_output=True, text=True, env={**os.environ, **QUIET}, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("site")
    result = build(REPO / "mkdocs.yml", site)
    assert result.returncode == 0, result.stdout + result.stderr
    # nothing but mkdocs' own INFO lines: no banner, no warning
    output = (result.stdout + result.stderr).splitlines()
    noise = [line for line in output if line.strip() and not line.startswith("INFO")]
    assert not noise, "\n".join(noise)
    return site


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def outside_code(html: str) -> str:
    """The page without its <pre> blocks and inline <code>."""
    return re.sub(r"<(pre|code)\b.*?</\1>", "", html, flags=re.S)


def test_no_literal_fence_outside_code(site):
    leftovers = {p.relative_to(site).as_posix(): outside_code(p.read_text()).count("```") for p in pages(site)}
    assert not {k: v for k, v in leftovers.items() if v}, leftovers


def test_every_fenced_block_renders_as_code(site):
    """As many <pre><code> blocks on each page as fences in its Markdown; no prose inside a code box."""
    for source in [*DOCS.glob("*.md"), *DOCS.glob("tutorials/*.md")]:
        if ":::" in source.read_text():
            continue  # the API reference: its code blocks come from docstrings
        relative = source.relative_to(DOCS).with_suffix("")
        html_path = site / ("index.html" if relative.name == "index" else relative / "index.html")
        html = html_path.read_text()
        fences = len(re.findall(r"^```\S", source.read_text(), re.M))
        assert html.count("<pre") == len(re.findall(r"<pre[^>]*>(?:<span></span>)?<code", html)), source.name
        assert html.count("<pre") == fences, f"{source.name}: {fences} fences, {html.count('<pre')} code blocks"
        boxed_headings = [m for m in re.findall(r"<pre.*?</pre>", html, re.S) if re.search(r"^#+ \w", m, re.M)
                          and "language-sh" not in m and "language-python" not in m]
        assert not boxed_headings, f"{source.name}: a Markdown heading inside a code box"


def test_no_tracker_numbers_on_users_pages(site):
    found = {p.relative_to(site).as_posix(): TRACKER.findall(re.sub(r"<[^>]+>", " ", p.read_text()))
             for p in pages(site)}
    assert not {k: v for k, v in found.items() if v}, found
    assert not TRACKER.findall((REPO / "README.md").read_text())


def test_broken_anchor_fails_the_strict_build(tmp_path):
    """The site's own `validation` settings turn an unknown anchor into a failed --strict build."""
    validation = yaml.safe_load((REPO / "mkdocs.yml").read_text())["validation"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n[there](other.md#no-such-heading)\n")
    (tmp_path / "docs" / "other.md").write_text("# Other\n\n## A heading\n")
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump({"site_name": "t", "validation": validation}))
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert result.returncode != 0
    assert "does not contain an anchor '#no-such-heading'" in result.stderr


def test_gallery_lists_every_registered_encoder(site):
    gallery = (site / "gallery" / "index.html").read_text()
    for name in pet.list_encoders():
        assert (DOCS / "gallery" / f"{name}.png").stat().st_size > 1000, name
        assert f'src="{name}.png"' in gallery or f"{name}.png" in gallery, name


def test_tutorial_figures_are_shown_with_their_caption(site):
    for tutorial in (DOCS / "tutorials").glob("*.md"):
        names = re.findall(r"\]\(figures/([\w.-]+\.png)\)", tutorial.read_text())
        assert names, f"{tutorial.name} shows no figure of its own code"
        html = (site / "tutorials" / tutorial.stem / "index.html").read_text()
        for name in names:
            assert (site / "tutorials" / "figures" / name).stat().st_size > 1000, name
        assert html.count("The figure shows the run of the code block above") == len(names), tutorial.name


def test_home_page_example_prints_what_the_page_says():
    text = (DOCS / "index.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S)[1]
    shown = re.search(r"It prints:\n\n```text\n(.*?)```", text, re.S)[1]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/index.md", "exec"), {"__name__": "__docs__"})
    assert printed.getvalue() == shown
    assert len(code.strip().splitlines()) <= 10
    for target in ("tutorials/", "benchmarks.md", "gallery.md"):
        assert f"]({target}" in text, target
    for extra, modules in EXTRAS.items():  # the extras table, as in the README
        row = next((line for line in text.splitlines() if line.startswith(f"| `{extra}` |")), None)
        assert row is not None and all(distribution in row for distribution in modules.values()), extra


def _hooks():
    sys.path.insert(0, str(DOCS / "scripts"))
    try:
        import hooks
    finally:
        sys.path.pop(0)
    return hooks


def test_doctest_fence_options_are_dropped_for_rendering_only():
    hooks = _hooks()
    text = "```python continuation\nx = 1\n```\n\n~~~py notest fixture:tmp_path\ny\n~~~\n\n```python\nz\n```\n"
    assert hooks.strip_doctest_options(text) == "```python\nx = 1\n```\n\n~~~py\ny\n~~~\n\n```python\nz\n```\n"
    assert hooks.strip_doctest_options("```python title=\"a.py\"\n```") == "```python title=\"a.py\"\n```"


def test_a_figure_whose_code_changed_fails_the_build():
    from mkdocs.exceptions import PluginError

    hooks = _hooks()
    page = (DOCS / "tutorials" / "music.md").read_text()
    assert "The figure shows the run" in hooks.caption_figures(page, "tutorials/music.md")
    name, code = next(iter(hooks.tutorial_figures.figure_blocks(page).items()))
    with pytest.raises(PluginError, match=f"the code that draws figures/{name} changed.*tutorial_figures.py"):
        hooks.caption_figures(page.replace(code, code + "\nprint()"), "tutorials/music.md")
    with pytest.raises(PluginError, match="not preceded by the python block"):
        hooks.caption_figures("![x](figures/missing.png)\n", "tutorials/x.md")
