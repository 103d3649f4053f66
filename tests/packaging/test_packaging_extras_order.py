"""Every toolkit module checks its extra before a third-party import can fail.

Statically, for every module: nothing but the docstring, ``from __future__``, standard-library
imports, core imports and ``from pe_toolkit.extras import require_extra`` comes before its first module-level
``require_extra`` call (torch and numpy, the core's, may). Behaviourally, for each extra, its packages are hidden
(``sys.modules[name] = None``, as if not installed) and every module that calls ``require_extra``
is imported in one fresh interpreter: it imports, or fails with the toolkit's ``install the 'X'
extra`` message; a bare ``ModuleNotFoundError`` raised by an import statement in the toolkit's own
code means a module imports a package before the check (for four extras; see below). Importing
all 130 modules this way took minutes per extra on a busy 2-core machine (a failed heavy import is
retried by every module), so only the modules that call ``require_extra`` are imported.

A failure raised inside a third-party package is not counted: with a package hidden this way, its
distribution metadata is still installed, so a library that probes optional packages through
metadata (lightning, torchmetrics) then imports it and fails, which cannot happen when the
package is really absent.
"""

from __future__ import annotations

import ast
import json
import sys

import pytest
from packaging_helpers import REPO, check, run_python

from pe_toolkit.extras import EXTRAS

SCAN = f"""
import importlib, json, traceback
import pe_toolkit
names = {{names!r}}
found = []
for name in names:
    try:
        importlib.import_module(name)
    except ImportError as error:
        if "install the '" in str(error):
            continue
        frames = [f for f in traceback.extract_tb(error.__traceback__) if "importlib" not in f.filename]
        if frames and frames[-1].filename.startswith({str(REPO)!r}) and "site-packages" not in frames[-1].filename:
            found.append([name, f"{{frames[-1].filename}}:{{frames[-1].lineno}}", str(error)])
print(json.dumps({{"modules": len(names), "bare": found}}))
"""


TOOLKIT = REPO / "pe_toolkit"
CORE = {"torch", "numpy"}  # what a bare install has


def module_name(path) -> str:
    parts = path.relative_to(TOOLKIT).with_suffix("").parts
    return ".".join(("pe_toolkit", *parts[:-1], *([] if parts[-1] == "__init__" else [parts[-1]])))


def _calls_require_extra(node) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and getattr(node.value.func, "id", None) == "require_extra")


FILES = sorted({*TOOLKIT.rglob("*.py"), *(TOOLKIT / "domains").resolve().rglob("*.py")})
CHECKING = sorted(module_name(p if p.is_relative_to(TOOLKIT) else TOOLKIT / "domains" /
                              p.relative_to((TOOLKIT / "domains").resolve()))
                  for p in FILES if any(_calls_require_extra(n) for n in ast.parse(p.read_text()).body))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name if p.name != "__init__.py" else p.parent.name)
def test_nothing_is_imported_before_the_extra_check(path):
    body = ast.parse(path.read_text()).body
    first = next((i for i, node in enumerate(body) if _calls_require_extra(node)), None)
    if first is None:
        return
    for node in body[:first]:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        assert isinstance(node, (ast.Import, ast.ImportFrom)), f"{path}: {ast.unparse(node)} before require_extra"
        names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
        for name in names:
            top = name.split(".")[0]
            allowed = name in ("__future__", "pe_toolkit.extras") or top in CORE or top in sys.stdlib_module_names
            assert allowed, f"{path}:{node.lineno}: imports {name} before its require_extra check"


def test_the_extra_checking_modules_are_found():
    assert {"pe_toolkit.training", "pe_toolkit.plotting", "pe_toolkit.domains.graphs.lightning_module",
            "pe_toolkit.integrations.hf"} <= set(CHECKING)


# train (lightning), plot, graphs and hf: the extras most modules ask for; each run imports the heavy
# libraries of the others (10-60 s), so the remaining extras rely on the static test above
@pytest.mark.parametrize("extra", ["graphs", "hf", "plot", "train"])
def test_missing_extra_speaks_before_any_third_party_import(extra):
    scan = SCAN.replace("{names!r}", repr(CHECKING))
    result = json.loads(check(run_python(scan, hide=tuple(EXTRAS[extra]), timeout=600)).strip().splitlines()[-1])
    assert result["modules"] == len(CHECKING)
    assert result["bare"] == [], f"with the '{extra}' extra missing: {result['bare']}"
