"""Optional dependencies: which extra provides which module, and the error when one is missing.

``pip install torch-pe-toolkit`` installs the core: the sequence encoders, attention, the Transformer,
tasks and conversion, on torch alone. Everything else comes with an extra (``pyproject.toml``), and
the module that needs it calls :func:`require_extra` before its imports, so a missing package is an
``ImportError`` that names the package and the exact command to run, instead of a bare
``ModuleNotFoundError`` from deep inside an import chain:

>>> require_extra("train", "pe_toolkit.training")   # nothing happens when lightning & co. are installed

``EXTRAS`` maps each extra to the import names it provides and their distributions; a test checks it
against ``pyproject.toml``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

DISTRIBUTION = "torch-pe-toolkit"
"""The name on the package index (``pe-toolkit`` there is an unrelated project)."""

EXTRAS: Mapping[str, Mapping[str, str]] = {
    # extra: {import name: distribution}
    "train": {"lightning": "lightning", "jsonargparse": "jsonargparse", "torchmetrics": "torchmetrics", "tqdm": "tqdm"},
    "plot": {"matplotlib": "matplotlib"},
    "graphs": {"torch_geometric": "torch-geometric", "scipy": "scipy"},
    "music": {"pretty_midi": "pretty-midi", "music21": "music21", "torchmetrics": "torchmetrics"},
    "recsys": {},
    "detection": {"scipy": "scipy", "pycocotools": "pycocotools", "PIL": "pillow"},
    "multirobot": {"scipy": "scipy"},
    "crossmodal": {},
    "translation": {"sacrebleu": "sacrebleu"},
    "vision": {"PIL": "pillow"},
    "hf": {"transformers": "transformers", "peft": "peft"},
    "stats": {"scipy": "scipy"},
    "ray": {"ray": "ray"},
}


def install_command(*extras: str) -> str:
    """The ``pip install`` line for ``extras``, e.g. ``pip install 'torch-pe-toolkit[graphs,train]'``."""
    unknown = [e for e in extras if e not in EXTRAS]
    if unknown:
        raise ValueError(f"install_command: unknown extra(s) {unknown}; known: {', '.join(EXTRAS)}")
    return f"pip install '{DISTRIBUTION}[{','.join(extras)}]'" if extras else f"pip install {DISTRIBUTION}"


def missing_modules(extra: str) -> list[str]:
    """Import names of ``extra`` that cannot be found in this environment (none imported)."""
    if extra not in EXTRAS:
        raise ValueError(f"missing_modules: unknown extra {extra!r}; known: {', '.join(EXTRAS)}")
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require_extra(extra: str, by: str) -> None:
    """Raise ``ImportError`` unless every module of ``extra`` is installed.

    Args:
        extra: the extra's name, a key of :data:`EXTRAS`.
        by: the module that needs it (its ``__name__``), named in the message.

    Raises:
        ImportError: naming the missing distributions and the ``pip install`` command to run;
            its ``name`` attribute is the first missing import name.
        ValueError: if ``extra`` is unknown.
    """
    missing = missing_modules(extra)
    if missing:
        distributions = ", ".join(sorted({EXTRAS[extra][m] for m in missing}))
        raise ImportError(
            f"{by} needs {distributions}, which {'is' if len(missing) == 1 else 'are'} not installed; "
            f"install the '{extra}' extra: {install_command(extra)}",
            name=missing[0],
        )
