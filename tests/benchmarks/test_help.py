"""Every benchmark answers ``--help`` (a ``%`` in a help string once made ``speed.py --help`` crash).

Every benchmark runs on the harness (``pe_toolkit.bench``) and shares its parser: each one's help is
checked in this process; one script is also run as ``python benchmarks/<name>.py --help``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pe_toolkit.bench.cli import main
from pe_toolkit.bench.registry import BENCHMARKS as REGISTERED

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_"))


def test_every_benchmark_script_is_registered():
    assert set(SCRIPTS) == set(REGISTERED)


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_the_harness_usage(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"], name=name, prog=f"python benchmarks/{name}.py")
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python benchmarks/{name}.py [-h] [--list] [--quick]")
    assert "--executor {local,ray}" in out and "--accelerator" in out


def test_a_script_runs_the_harness_cli():
    result = subprocess.run([sys.executable, str(BENCHMARKS / "speed.py"), "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python benchmarks/speed.py [-h] [--list] [--quick]")
