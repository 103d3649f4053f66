"""``pe-toolkit bench``: --list and --help name every benchmark on the harness; config errors name the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pe_toolkit.bench.registry import list_benchmarks

REPO = Path(__file__).resolve().parents[2]


def _bench(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pe_toolkit", "bench", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_list_names_every_benchmark_with_what_it_measures():
    result = _bench("--list")
    assert result.returncode == 0, result.stderr
    for name, description in list_benchmarks().items():
        assert f"  {name}" in result.stdout and description in result.stdout
    assert {"vision", "extreme_inputs"} <= set(list_benchmarks())


def test_help_lists_the_benchmarks_too():
    result = _bench("--help")
    assert result.returncode == 0, result.stderr
    assert "benchmarks:\n" in result.stdout
    assert all(name in result.stdout for name in list_benchmarks())


def test_a_mistyped_config_key_is_an_error_naming_it(tmp_path):
    result = _bench("vision", "--quick", "--set", "training.stepz=3", "--out", str(tmp_path))
    assert result.returncode == 2
    assert ("config key 'training.stepz' does not exist; allowed keys here: ['batch_size', 'lrs', "
            "'max_extensions', 'steps', 'warmup_steps', 'weight_decay']") in result.stderr
    assert not (tmp_path / "vision").exists()


def test_a_benchmark_of_ones_own_runs_by_module_and_class(tmp_path):
    result = _bench("tiny_benchmark:Tiny", "--quick", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "tiny" / "report.md").read_text().startswith("> **Quick mode: a pipeline check")
    assert "Produced by `pe-toolkit bench tiny_benchmark:Tiny --quick --out " in (
        tmp_path / "tiny" / "report.md").read_text()
