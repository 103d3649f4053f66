"""Every benchmark script answers ``--help`` (a ``%`` in a help string once made ``speed.py --help`` crash)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HELPERS = ("common", "presets")
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem not in HELPERS and not p.stem.startswith("_"))


def test_every_benchmark_script_is_listed():
    assert {"speed", "extrapolation", "length_generalization", "run_all"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_usage_and_exits_cleanly(name, capsys):
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")
