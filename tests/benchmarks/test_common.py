"""Tests of benchmarks/common.py: output files, tables, timing, forked memory.

The forked children here run pure Python (no torch compute), so they are safe even when earlier
tests in this pytest process used torch's OpenMP thread pool.
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest

from benchmarks import common

MB = 10**6


# ---------------------------------------------------------------------------------- output files
def test_results_dir_is_created_under_root(tmp_path):
    path = common.results_dir("demo", tmp_path)
    assert path == tmp_path / "demo" and path.is_dir()


def test_results_dir_defaults_to_repo_results():
    assert common.DEFAULT_RESULTS_ROOT == common.REPO_ROOT / "results"
    assert (common.REPO_ROOT / "benchmarks" / "common.py").is_file()


@pytest.mark.parametrize("bad", ["", "a/b", "..", "."])
def test_results_dir_rejects_non_plain_names(tmp_path, bad):
    with pytest.raises(ValueError, match="plain folder name"):
        common.results_dir(bad, tmp_path)


def test_write_results_has_exactly_the_contract_keys(tmp_path):
    rows = [{"encoder": "rope", "ms": 1.5}, {"encoder": "alibi", "ms": float("nan")}]
    path = common.write_results("demo", {"lengths": [32]}, rows, 2.5, root=tmp_path)
    assert path == tmp_path / "demo" / "results.json"
    document = json.loads(path.read_text())
    assert list(document) == ["benchmark", "config", "rows", "environment", "seconds"]
    assert set(document) == set(common.RESULT_KEYS)
    assert document["benchmark"] == "demo"
    assert document["config"] == {"lengths": [32]}
    assert document["rows"] == [
        {"encoder": "rope", "ms": 1.5},
        {"encoder": "alibi", "ms": None},
    ]  # NaN -> null
    assert document["seconds"] == 2.5
    env = document["environment"]
    for key in ("python", "torch", "platform", "cpu_count", "torch_threads", "date"):
        assert key in env


def test_write_results_rejects_non_dict_rows(tmp_path):
    with pytest.raises(TypeError, match="rows"):
        common.write_results("demo", {}, ["not a dict"], 1.0, root=tmp_path)


def test_markdown_table_exact_text():
    rows = [
        {"name": "rope", "ms": 1.23456, "mib": 10, "note": "a|b"},
        {"name": "alibi", "ms": None, "mib": 2.5},
    ]
    text = common.markdown_table(rows, ["name", ("ms", "time (ms)"), "mib", "note"], {"ms": ".2f", "mib": ".1f"})
    assert text == (
        "| name | time (ms) | mib | note |\n"
        "| --- | --- | --- | --- |\n"
        "| rope | 1.23 | 10.0 | a\\|b |\n"
        "| alibi | n/a | 2.5 | n/a |\n"
    )


def test_markdown_table_callable_format_and_empty_rows():
    assert common.markdown_table([{"x": 3}], ["x"], {"x": lambda v: f"<{v}>"}) == "| x |\n| --- |\n| <3> |\n"
    assert common.markdown_table([], ["a", "b"]) == "| a | b |\n| --- | --- |\n"
    with pytest.raises(ValueError):
        common.markdown_table([], [])


def test_write_report_states_command_and_date(tmp_path):
    path = common.write_report(
        "demo", "Demo title", "| a |\n| --- |\n", root=tmp_path, command="python benchmarks/demo.py --quick"
    )
    text = path.read_text()
    assert path == tmp_path / "demo" / "report.md"
    # a quick run says first that it is a pipeline check, then the title
    assert text.startswith("> **Quick mode: a pipeline check, not evidence**") and "\n# Demo title\n" in text
    assert "`python benchmarks/demo.py --quick`" in text
    assert time.strftime("%Y-", time.gmtime()) in text and "UTC" in text
    assert text.endswith("| a |\n| --- |\n")


def test_full_run_report_starts_with_its_title(tmp_path):
    for command in ("python benchmarks/demo.py", "python benchmarks/demo.py --preset full"):
        text = common.write_report("demo", "Demo title", "body", root=tmp_path, command=command).read_text()
        assert text.startswith("# Demo title\n") and "pipeline check" not in text
    preset_quick = common.write_report("demo", "Demo title", "body", root=tmp_path,
                                       command="python benchmarks/demo.py --preset quick").read_text()
    assert preset_quick.startswith("> **Quick mode")


def test_command_line_is_relative_to_repo():
    script = common.REPO_ROOT / "benchmarks" / "speed.py"
    assert common.command_line(["--quick"], script=script) == "python benchmarks/speed.py --quick"


def test_standard_argparser_options(tmp_path):
    parser = common.standard_argparser("demo")
    args = parser.parse_args([])
    assert args.quick is False and args.out == common.DEFAULT_RESULTS_ROOT
    args = parser.parse_args(["--quick", "--out", str(tmp_path)])
    assert args.quick is True and args.out == tmp_path


def test_progress_prints_one_flushed_line_per_step(capsys):
    progress = common.Progress(2, "demo", use_tqdm=False)
    progress("first")
    progress("second")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[demo 1/2 ") and lines[0].endswith("] first")
    assert lines[1].startswith("[demo 2/2 ") and lines[1].endswith("] second")


# ---------------------------------------------------------------------------------------- timing
def test_time_call_reports_median_and_min():
    result = common.time_call(lambda: time.sleep(0.002), warmup=1, repeats=5)
    assert result["repeats"] == 5 and len(result["times_s"]) == 5
    assert 0.002 <= result["min_s"] <= result["median_s"]
    assert result["median_s"] < 0.5


def test_time_interleaved_rotates_order_and_pairs_rounds():
    calls = []
    fns = {name: (lambda n=name: calls.append(n)) for name in "abc"}
    result = common.time_interleaved(fns, warmup=1, repeats=3)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")
    assert all(r["repeats"] == 3 and len(r["times_s"]) == 3 for r in result.values())


def test_time_interleaved_budget_stops_early_but_not_before_min_repeats():
    fns = {"sleep": lambda: time.sleep(0.01)}
    result = common.time_interleaved(fns, warmup=0, repeats=100, budget_s=0.0, min_repeats=4)
    assert result["sleep"]["repeats"] == 4
    with pytest.raises(ValueError):
        common.time_interleaved(fns, warmup=0, repeats=2, min_repeats=3)
    with pytest.raises(ValueError):
        common.time_interleaved(fns, warmup=-1, repeats=2)


def test_time_interleaved_drop_errors_keeps_the_others():
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] == 3:
            raise MemoryError("too big")

    fns = {"ok": lambda: None, "flaky": flaky}
    result = common.time_interleaved(fns, warmup=1, repeats=5, drop_errors=True)
    assert result["flaky"] == {"error": "MemoryError: too big"}
    assert result["ok"]["repeats"] == 5
    calls["n"] = 0
    with pytest.raises(MemoryError):
        common.time_interleaved(fns, warmup=1, repeats=5)


def test_paired_ratios():
    stats = common.paired_ratios([2.0, 4.0, 6.0, 8.0], [1.0, 2.0, 3.0, 4.0])
    assert stats["ratio_median"] == 2.0 and stats["ratio_p25"] == 2.0 and stats["ratio_p75"] == 2.0
    assert math.isclose(stats["ratio_of_medians"], 2.0)
    with pytest.raises(ValueError):
        common.paired_ratios([1.0], [1.0, 2.0])


# -------------------------------------------------------------------------------- forked memory
def _allocate(n_bytes: int) -> int:
    block = b"\x01" * n_bytes  # filled, so every page is touched
    return len(block)


def _nothing() -> str:
    return "done"


def _raise() -> None:
    raise ValueError("boom from the child")


def _exit_hard() -> None:
    os._exit(3)


def _unpicklable():
    return lambda: None


def test_peak_memory_of_200mb_child_is_reported():
    result, peak = common.peak_memory_in_subprocess(_allocate, 200 * MB, timeout=60)
    assert result == 200 * MB
    assert peak >= 150 * MB
    assert peak < 400 * MB


def test_peak_memory_of_idle_child_is_small():
    result, peak = common.peak_memory_in_subprocess(_nothing, timeout=60)
    assert result == "done"
    assert 0 <= peak < 50 * MB


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="cannot reset the RSS high-water mark")
def test_warmup_peak_is_not_counted():
    _, peak = common.peak_memory_in_subprocess(_nothing, warmup=lambda: _allocate(200 * MB), timeout=60)
    assert peak < 50 * MB


def test_child_exception_becomes_runtime_error_with_traceback():
    with pytest.raises(RuntimeError, match="ValueError: boom from the child") as info:
        common.peak_memory_in_subprocess(_raise, timeout=60)
    assert "Traceback" in str(info.value) and "_raise" in str(info.value)


def test_child_that_dies_is_reported():
    with pytest.raises(RuntimeError, match="died without a result"):
        common.peak_memory_in_subprocess(_exit_hard, timeout=60)


def test_unpicklable_result_is_reported():
    with pytest.raises(RuntimeError, match="failed"):
        common.peak_memory_in_subprocess(_unpicklable, timeout=60)


def test_hung_child_times_out():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out"):
        common.peak_memory_in_subprocess(time.sleep, 30, timeout=0.5)
    assert time.monotonic() - start < 15


def test_memory_limit_turns_oversized_child_into_error():
    with pytest.raises(RuntimeError, match="MemoryError"):
        common.peak_memory_in_subprocess(_allocate, 400 * MB, memory_limit_bytes=100 * MB, timeout=60)


def test_run_store_resumes_only_matching_complete_runs(tmp_path):
    RunStore = common.RunStore

    store = RunStore(tmp_path / "runs", resume=True)
    spec = {"steps": 2, "sizes": (1, 2)}
    store.save("rope__seed0", spec, {"loss": 0.5})
    assert store.load("rope__seed0", {"steps": 2, "sizes": [1, 2]})["loss"] == 0.5  # tuple == list after JSON
    assert store.load("rope__seed0", {"steps": 3, "sizes": [1, 2]}) is None
    assert store.load("alibi__seed0", spec) is None
    assert RunStore(tmp_path / "runs", resume=False).load("rope__seed0", spec) is None
    store.path("cut").write_text('{"loss": 0.')  # a file cut short by an interruption is run again
    assert store.load("cut", spec) is None
    assert not list((tmp_path / "runs").glob("*.tmp"))
    for bad in ("", "../x", ".hidden"):
        with pytest.raises(ValueError, match="run key must be a non-empty file name"):
            store.path(bad)


def test_device_options_default_to_auto_and_reach_the_trainer():
    """--accelerator/--devices/--precision (every benchmark's parser): auto by default, so a lent GPU is used."""
    from presets import device_options, trainer_options

    parser = common.standard_argparser("demo")
    args = parser.parse_args([])
    assert device_options(args) == {"accelerator": "auto", "devices": 1, "precision": "32-true"}
    args = parser.parse_args(["--accelerator", "cpu", "--devices", "2", "--precision", "bf16-mixed"])
    assert trainer_options(device_options(args)) == {"accelerator": "cpu", "devices": 2, "precision": "bf16-mixed"}
    for bad in (["--accelerator", "tpu"], ["--devices", "0"], ["--devices", "x"], ["--precision", "8"]):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)


# ---------------------------------------------------------------------------------------- intervals
def test_mean_interval_is_the_student_t_interval():
    from scipy import stats

    values = [0.2, 0.5, 0.3, 0.9]
    r = common.mean_interval(values)
    low, high = stats.t.interval(0.95, 3, loc=np.mean(values), scale=stats.sem(values))
    assert r["n"] == 4 and r["mean"] == pytest.approx(np.mean(values))
    assert r["low"] == pytest.approx(low) and r["high"] == pytest.approx(high)
    one = common.mean_interval([0.4, float("nan")])
    assert one["n"] == 1 and one["mean"] == 0.4 and math.isnan(one["low"]) and math.isnan(one["high"])
    assert common.mean_interval([])["n"] == 0
    with pytest.raises(ValueError, match="confidence must be in"):
        common.mean_interval(values, confidence=1.0)


def test_interval_verdict_needs_separated_intervals():
    hi, lo = {"low": 0.8, "high": 0.9}, {"low": 0.5, "high": 0.7}
    assert common.interval_verdict(hi, lo, higher_is_better=True) == "better"
    assert common.interval_verdict(hi, lo, higher_is_better=False) == "worse"
    assert common.interval_verdict(lo, hi, higher_is_better=False) == "better"
    assert common.interval_verdict(hi, {"low": 0.6, "high": 0.85}, higher_is_better=True) == "tie"
    assert common.interval_verdict(hi, {"low": math.nan, "high": math.nan}, higher_is_better=True) == "tie"
    assert common.format_interval(common.mean_interval([1.0, 2.0, 3.0]), ".2f") == "2.00 [-0.48, 4.48] (n=3)"
    assert common.format_interval(common.mean_interval([1.0]), ".1f") == "1.0 (n=1)"
    assert common.format_interval(common.mean_interval([])) == "-"
