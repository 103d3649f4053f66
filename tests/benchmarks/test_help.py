"""Every benchmark script answers ``--help`` (a ``%`` in a help string once made ``speed.py --help`` crash).

Benchmarks on the harness (``pe_toolkit.bench``) share its parser: ``python benchmarks/<name>.py --help``
is checked for them, the scripts' own ``main`` for the others.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from pe_toolkit.bench.registry import BENCHMARKS as REGISTERED

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
HELPERS = ("common", "presets")
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if p.stem not in HELPERS and not p.stem.startswith("_"))
# registered, or a script that already runs the harness's command line (not yet in the registry)
ON_HARNESS = set(REGISTERED) | {name for name in SCRIPTS
                                if "from pe_toolkit.bench.cli import main" in (BENCHMARKS / f"{name}.py").read_text()}
LEGACY = [name for name in SCRIPTS if name not in ON_HARNESS]


def test_every_benchmark_script_is_listed():
    assert {"speed", "vision"} <= set(SCRIPTS) and "run_all" not in SCRIPTS  # pe-toolkit bench all runs them all


@pytest.mark.parametrize("name", LEGACY)
def test_help_prints_usage_and_exits_cleanly(name, capsys):
    module = importlib.import_module(f"benchmarks.{name}")
    with pytest.raises(SystemExit) as exit_info:
        module.main(["--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


@pytest.mark.parametrize("name", sorted(ON_HARNESS))
def test_a_harness_script_runs_the_harness_cli(name):
    result = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python benchmarks/{name}.py [-h] [--list] [--quick]")
    assert "--executor {local,ray}" in result.stdout and "--accelerator" in result.stdout
