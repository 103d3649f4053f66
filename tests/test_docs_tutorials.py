"""Each tutorial starts with the install line it needs: its extras cover every import of its code.

Nothing is installed. The extras a tutorial needs are read from its code blocks' imports: a
third-party module must be provided by one of the extras on its install line
(``pe_toolkit.extras.EXTRAS``), and a ``pe_toolkit`` module needs every extra that it, its parent
packages or the toolkit modules they import at module level ask for with ``require_extra`` (anywhere
in those files, so an extra that one function asks for counts too). A ``notest`` block is optional
code that says what else it needs (e.g. FluidSynth) and is not checked.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest

from pe_toolkit.extras import EXTRAS

REPO = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((REPO / "docs" / "tutorials").glob("*.md"))
CORE = {"torch", "numpy", "pe_toolkit"}  # what `pip install torch-pe-toolkit` brings
FENCE = re.compile(r"^```(?P<info>[^\n]*)\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
INSTALL = re.compile(r"^pip install '\.\[(?P<extras>[\w,-]+)\]'(?:[ \t]+#.*)?$")


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """``(language, code)`` of each fenced block, in order; a ``python notest`` block's language is ``notest``."""
    blocks = []
    for match in FENCE.finditer(markdown):
        info = match["info"].split() or [""]
        blocks.append(("notest" if "notest" in info[1:] else info[0], match["code"]))
    return blocks


def imported_modules(code: str) -> set[str]:
    """Absolute module names imported anywhere in ``code`` (``from a.b import c`` gives ``a.b`` and ``a.b.c``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _source(module: str) -> Path | None:
    """The file of a ``pe_toolkit`` module or package (None for a name that is not a module, e.g. a class)."""
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_level_imports(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Absolute names imported at the top level of ``module`` (relative imports resolved)."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in tree.body:  # module level only: an import inside a function is not run on import
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            names.add(base)
            names |= {f"{base}.{alias.name}" for alias in node.names}
    return names


@functools.cache
def _file_facts(name: str) -> tuple[frozenset[str], frozenset[str]]:
    """``(extras its file asks for, pe_toolkit modules it imports at module level)`` of one toolkit module."""
    path = _source(name)
    if path is None:
        return frozenset(), frozenset()
    tree = ast.parse(path.read_text())
    # every require_extra call of the file, also one inside a function (vision's ImageFolderDataset asks
    # for Pillow only when it is built): a tutorial importing the module may call it
    extras = {node.args[0].value for node in ast.walk(tree)
              if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require_extra"}
    imports = {n for n in _module_level_imports(tree, name, path.name == "__init__.py") if n.startswith("pe_toolkit.")}
    return frozenset(extras), frozenset(imports)


@functools.cache
def toolkit_extras(module: str) -> frozenset[str]:
    """Extras that importing ``module`` (a ``pe_toolkit`` module) asks for, following module-level imports."""
    needed: set[str] = set()
    seen: set[str] = set()
    stack = [module]
    while stack:
        parts = stack.pop().split(".")
        for depth in range(1, len(parts) + 1):  # the parent packages run first
            name = ".".join(parts[:depth])
            if name in seen:
                continue
            seen.add(name)
            extras, imports = _file_facts(name)
            needed |= extras
            stack += imports
    return frozenset(needed)


def required(module: str, extras: set[str]) -> str | None:
    """Why ``module`` cannot be imported with ``extras`` installed, or None if it can."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in CORE - {"pe_toolkit"}:
        return None
    if top == "pe_toolkit":
        missing = toolkit_extras(module) - extras
        return f"{module} needs the extra(s) {sorted(missing)}" if missing else None
    if any(top in EXTRAS[extra] for extra in extras if extra in EXTRAS):
        return None
    providers = sorted(extra for extra, names in EXTRAS.items() if top in names)
    return f"{module} comes with {providers or 'no extra'}, not with {sorted(extras)}"


@pytest.mark.parametrize("page", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_starts_with_the_install_line_its_imports_need(page):
    blocks = code_blocks(page.read_text())
    assert blocks, f"{page.name} has no code"
    language, first = blocks[0]
    lines = [line for line in first.splitlines() if line.strip() and not line.startswith("#")]
    assert language == "sh" and len(lines) == 1 and INSTALL.match(lines[0]), (
        f"{page.name}: the first code block must be the install line, e.g. ```sh / pip install '.[graphs,train]', "
        f"got {first!r}")
    extras = set(INSTALL.match(lines[0])["extras"].split(","))
    assert extras <= set(EXTRAS), f"{page.name}: unknown extra(s) {sorted(extras - set(EXTRAS))}"
    modules = set().union(*(imported_modules(code) for language, code in blocks if language == "python"))
    problems = sorted(filter(None, (required(module, extras) for module in modules)))
    assert not problems, f"{page.name} installs {sorted(extras)}: " + "; ".join(problems)
    # an extra that installs packages is there for the code (an empty one, e.g. recsys, only names the domain)
    unused = {e for e in extras if EXTRAS[e] and not any(required(m, extras - {e}) for m in modules)}
    assert not unused, f"{page.name}: the install line asks for extras its code does not use: {sorted(unused)}"


def test_toolkit_extras_follow_parent_packages_and_imports():
    """The analysis itself, on modules whose extras are known."""
    assert toolkit_extras("pe_toolkit.encoders.rotary") == frozenset()
    assert toolkit_extras("pe_toolkit.plotting") == {"plot"}
    assert toolkit_extras("pe_toolkit.domains.graphs.lightning_module") == {"graphs", "train"}
    assert toolkit_extras("pe_toolkit.integrations.hf") == {"hf"}
    assert toolkit_extras("pe_toolkit.domains.vision") == {"vision"}  # asked for inside ImageFolderDataset
    assert required("lightning", {"graphs"}) == "lightning comes with ['train'], not with ['graphs']"
    assert required("pytest", {"vision"}) == "pytest comes with no extra, not with ['vision']"
    assert required("scipy.sparse", {"multirobot"}) is None
    assert required("pe_toolkit.domains.music", {"graphs"}) == "pe_toolkit.domains.music needs the extra(s) ['music']"
