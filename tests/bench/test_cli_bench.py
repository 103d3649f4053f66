"""``pe-toolkit bench``: --list and --help name every benchmark on the harness; config errors name the key."""

from __future__ import annotations

import os
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


def test_all_runs_each_benchmark_in_its_own_process_and_writes_the_summary(tmp_path):
    out = tmp_path / "results"
    result = _bench("all", "--preset", "quick", "--only", "tiny_benchmark:Tiny", "--out", str(out))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "=== tiny_benchmark:Tiny: -m pe_toolkit.bench tiny_benchmark:Tiny --preset quick --out" in result.stdout
    assert (out / "tiny" / "report.md").is_file() and (out / "tiny" / "run.log").read_text()
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# Benchmark summary\n\nLast updated by `pe-toolkit bench all --preset quick --only "
                              "tiny_benchmark:Tiny --out ")
    assert "| benchmark | wall time (s) | status | claim verdicts | report | command | date |" in summary
    (line,) = [row for row in summary.splitlines() if row.startswith("| tiny |")]
    assert "| ok | n/a | [tiny/report.md](tiny/report.md) | `pe-toolkit bench tiny_benchmark:Tiny --preset quick` |" \
        in line
    for name in list_benchmarks():  # registered but not run this time: listed as such
        assert f"| {name} | n/a | not run |" in summary


def test_all_summary_counts_claim_verdicts_and_keeps_earlier_lines(tmp_path):
    import json

    from pe_toolkit.bench.suite import claim_counts, write_summary

    (tmp_path / "a").mkdir()
    rows = [{"kind": "claim", "verdict": v} for v in ("inconclusive", "reproduced", "reproduced")] + [{"kind": "x"}]
    (tmp_path / "a" / "results.json").write_text(json.dumps({"rows": rows}))
    assert claim_counts(tmp_path / "a" / "results.json") == "2 reproduced, 1 inconclusive"
    assert claim_counts(tmp_path / "missing.json") == ""
    (tmp_path / "a" / "report.md").write_text("# a\n")
    entry = {"status": "ok", "seconds": 12.34, "claims": "2 reproduced, 1 inconclusive", "date": "d",
             "command": "pe-toolkit bench a --preset quick"}
    failed = {**entry, "status": "failed (exit code 1)", "claims": ""}
    write_summary(tmp_path, {"a": entry, "gone": failed}, ["a", "b"], "pe-toolkit bench all")
    text = (tmp_path / "summary.md").read_text()
    assert "| a | 12.3 | ok | 2 reproduced, 1 inconclusive | [a/report.md](a/report.md) |" in text
    assert "| b | n/a | not run |" in text
    assert "| gone | 12.3 | failed (exit code 1) (no longer registered) | n/a | n/a |" in text
    assert json.loads((tmp_path / "summary.json").read_text())["a"] == entry


def test_all_rejects_an_unknown_name_and_one_benchmarks_settings(tmp_path):
    result = _bench("all", "--quick", "--only", "no_such", "--out", str(tmp_path))
    assert result.returncode == 2 and "--only: unknown benchmark(s) ['no_such']; registered: " in result.stderr
    result = _bench("all", "--quick", "--set", "seeds=[0]", "--out", str(tmp_path))
    assert result.returncode == 2 and "all takes no --config / --set" in result.stderr
    result = _bench("vision", "--quick", "--only", "speed", "--out", str(tmp_path))
    assert result.returncode == 2 and "--only and --timeout go with all" in result.stderr
    for bad in ("-5", "0", "nan", "inf"):
        result = _bench("all", "--quick", "--only", "speed", "--timeout", bad, "--out", str(tmp_path))
        assert result.returncode == 2, result.stdout
        assert f"--timeout must be a positive, finite number of seconds (or None), got {float(bad)!r}" in result.stderr
    assert not list(tmp_path.iterdir())


def test_an_output_folder_that_cannot_be_one_is_named_before_anything_runs(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    for out, message in ((afile, f"--out {str(afile)!r} is a file, not a folder"),
                         (afile / "x", f"--out {str(afile / 'x')!r} cannot be created as a folder: Not a directory")):
        for args in (("extreme_inputs", "--quick"), ("all", "--only", "extreme_inputs", "--quick")):
            result = _bench(*args, "--out", str(out))
            assert result.returncode == 2 and message in result.stderr, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and afile.read_text() == "mine\n"


def test_a_failing_run_keeps_its_traceback_under_pe_toolkit_bench(tmp_path):
    """The top-level command no longer reduces a run's exception to its message: the run is named, the traceback
    shown (as under python -m pe_toolkit.bench)."""
    (tmp_path / "presets" / "failing").mkdir(parents=True)
    (tmp_path / "presets" / "failing" / "quick.yaml").write_text("seeds: [3]\n")
    (tmp_path / "failing_bench.py").write_text(
        "import dataclasses\nfrom pe_toolkit.bench import Benchmark\n\n"
        "@dataclasses.dataclass\nclass Config:\n    seeds: list[int]\n\n"
        "class Failing(Benchmark):\n    name, title, Config, key_fields = 'failing', 'F', Config, ('seed',)\n"
        "    presets_dir = 'presets/failing'\n\n"
        "    def runs(self, config):\n        return [{'seed': s} for s in config.seeds]\n\n"
        "    def run_one(self, spec):\n        raise RuntimeError('boom in run_one')\n")
    result = subprocess.run([sys.executable, "-m", "pe_toolkit", "bench", "failing_bench:Failing", "--quick",
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, cwd=tmp_path,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 1
    assert "failing: the run seed=3 failed (RuntimeError: boom in run_one)" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert "failing_bench.py" in result.stderr
