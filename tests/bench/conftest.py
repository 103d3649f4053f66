"""The harness tests import ``tiny_benchmark`` by name; spawned workers, subprocesses and Ray tasks find it
through ``PYTHONPATH`` (this folder and the repository root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(autouse=True)
def importable_tiny(monkeypatch):
    parts = [str(HERE), str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(dict.fromkeys(parts)))
    monkeypatch.syspath_prepend(str(HERE))
