"""Interleaved timing and paired ratios (pe_toolkit.bench.timing)."""

from __future__ import annotations

import math
import time

import pytest

from pe_toolkit.bench.timing import paired_ratios, time_interleaved


def test_time_interleaved_rotates_order_and_pairs_rounds():
    calls = []
    fns = {name: (lambda n=name: calls.append(n)) for name in "abc"}
    result = time_interleaved(fns, warmup=1, repeats=3)
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")
    assert all(r["repeats"] == 3 and len(r["times_s"]) == 3 for r in result.values())


def test_time_interleaved_budget_stops_early_but_not_before_min_repeats():
    fns = {"sleep": lambda: time.sleep(0.01)}
    result = time_interleaved(fns, warmup=0, repeats=100, budget_s=0.0, min_repeats=4)
    assert result["sleep"]["repeats"] == 4
    with pytest.raises(ValueError):
        time_interleaved(fns, warmup=0, repeats=2, min_repeats=3)
    with pytest.raises(ValueError):
        time_interleaved(fns, warmup=-1, repeats=2)


def test_time_interleaved_drop_errors_keeps_the_others():
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] == 3:
            raise MemoryError("too big")

    fns = {"ok": lambda: None, "flaky": flaky}
    result = time_interleaved(fns, warmup=1, repeats=5, drop_errors=True)
    assert result["flaky"] == {"error": "MemoryError: too big"}
    assert result["ok"]["repeats"] == 5
    calls["n"] = 0
    with pytest.raises(MemoryError):
        time_interleaved(fns, warmup=1, repeats=5)


def test_paired_ratios():
    stats = paired_ratios([2.0, 4.0, 6.0, 8.0], [1.0, 2.0, 3.0, 4.0])
    assert stats["ratio_median"] == 2.0 and stats["ratio_p25"] == 2.0 and stats["ratio_p75"] == 2.0
    assert math.isclose(stats["ratio_of_medians"], 2.0)
    with pytest.raises(ValueError):
        paired_ratios([1.0], [1.0, 2.0])
