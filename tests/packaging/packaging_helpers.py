"""Shared helpers of the packaging tests: run Python in a fresh interpreter, optionally with packages hidden."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The optional dependencies that a bare `pip install torch-pe-toolkit` does not bring (import names).
HEAVY = ("lightning", "pytorch_lightning", "lightning_utilities", "torch_geometric", "pretty_midi", "matplotlib",
         "music21", "jsonargparse", "torchmetrics", "networkx", "scipy", "tqdm", "transformers", "pycocotools",
         "sacrebleu", "PIL")


def run_python(code: str, *, hide: tuple[str, ...] = (), cwd: Path | None = None, env: dict | None = None,
               timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter; the modules in ``hide`` behave as if not installed.

    ``sys.modules[name] = None`` makes ``import name`` raise ``ModuleNotFoundError`` and
    ``importlib.util.find_spec(name)`` return ``None``, exactly as for a package that is absent.
    """
    prelude = f"import sys\nfor _name in {tuple(hide)!r}:\n    sys.modules[_name] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                          cwd=cwd or REPO, env={**os.environ, **(env or {})}, timeout=timeout)


def check(result: subprocess.CompletedProcess) -> str:
    """``result.stdout`` after asserting a zero exit status (stderr shown otherwise)."""
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stdout
