"""Peak memory of a forked child (pe_toolkit.bench.memory)."""

from __future__ import annotations

import os
import time

import pytest

from pe_toolkit.bench.memory import memory_cap_bytes, peak_memory_in_subprocess, run_in_child

MB = 10**6


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
    result, peak = peak_memory_in_subprocess(_allocate, 200 * MB, timeout=60)
    assert result == 200 * MB
    assert peak >= 150 * MB
    assert peak < 400 * MB


def test_peak_memory_of_idle_child_is_small():
    result, peak = peak_memory_in_subprocess(_nothing, timeout=60)
    assert result == "done"
    assert 0 <= peak < 50 * MB


@pytest.mark.skipif(not os.access("/proc/self/clear_refs", os.W_OK), reason="cannot reset the RSS high-water mark")
def test_warmup_peak_is_not_counted():
    _, peak = peak_memory_in_subprocess(_nothing, warmup=lambda: _allocate(200 * MB), timeout=60)
    assert peak < 50 * MB


def test_child_exception_becomes_runtime_error_with_traceback():
    with pytest.raises(RuntimeError, match="ValueError: boom from the child") as info:
        peak_memory_in_subprocess(_raise, timeout=60)
    assert "Traceback" in str(info.value) and "_raise" in str(info.value)


def test_child_that_dies_is_reported():
    with pytest.raises(RuntimeError, match="died without a result"):
        peak_memory_in_subprocess(_exit_hard, timeout=60)


def test_unpicklable_result_is_reported():
    with pytest.raises(RuntimeError, match="failed"):
        peak_memory_in_subprocess(_unpicklable, timeout=60)


def test_hung_child_times_out():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out"):
        peak_memory_in_subprocess(time.sleep, 30, timeout=0.5)
    assert time.monotonic() - start < 15


def test_memory_limit_turns_oversized_child_into_error():
    with pytest.raises(RuntimeError, match="MemoryError"):
        peak_memory_in_subprocess(_allocate, 400 * MB, memory_limit_bytes=100 * MB, timeout=60)


def test_run_in_child_returns_result_and_peak():
    result, peak, error = run_in_child(_allocate, 50 * MB, timeout=60)
    assert result == 50 * MB and peak >= 40 * MB and error is None


@pytest.mark.parametrize(("fn", "error"), [
    (_raise, "ValueError: boom from the child"),
    (_exit_hard, "child running _exit_hard died without a result (exit code 3)"),
])
def test_run_in_child_reports_the_last_line_of_a_failure(fn, error):
    assert run_in_child(fn, timeout=60) == (None, None, error)


def test_memory_cap_of_given_gib():
    assert memory_cap_bytes(1.5) == 3 * 2**29


def test_memory_cap_defaults_to_a_fraction_of_available_memory():
    with open("/proc/meminfo") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    assert memory_cap_bytes(fraction=0.5) == pytest.approx(kib * 512, rel=0.2)  # MemAvailable moves a little
    assert memory_cap_bytes() == pytest.approx(kib * 1024 * 0.6, rel=0.2)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gib": 0}, "gib must be a number > 0 or None, got 0"),
    ({"gib": "2"}, "gib must be a number > 0 or None, got '2'"),
    ({"fraction": 1.5}, r"fraction must be a number in \(0, 1\], got 1.5"),
])
def test_memory_cap_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        memory_cap_bytes(**kwargs)
