"""Peak memory of a forked child (pe_toolkit.bench.memory)."""

from __future__ import annotations

import os
import time

import pytest

from pe_toolkit.bench.memory import peak_memory_in_subprocess

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
