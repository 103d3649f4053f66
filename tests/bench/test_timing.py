"""Interleaved timing and paired ratios (pe_toolkit.bench.timing)."""

from __future__ import annotations

import math
import time

import pytest

from pe_toolkit.bench.timing import compiled_vs_eager, paired_ratios, time_interleaved


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


def test_compiled_vs_eager_times_both_and_compares_outputs_and_gradients():
    import torch

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    result = compiled_vs_eager(module, torch.randn(5, 8, requires_grad=True), 3, backend="eager")
    assert set(result) == {"eager_s", "compiled_s", "first_call_s", "max_abs_diff_out", "max_abs_diff_grad"}
    assert result["eager_s"] > 0 and result["compiled_s"] > 0 and result["first_call_s"] > 0
    assert result["max_abs_diff_out"] < 1e-6 and result["max_abs_diff_grad"] < 1e-6  # the same function


def test_compiled_vs_eager_sees_a_different_compiled_function(monkeypatch):
    import torch

    monkeypatch.setattr(torch, "compile", lambda module, **options: lambda x: module(x) + 1.0)
    result = compiled_vs_eager(torch.nn.Linear(3, 2), torch.randn(4, 3, requires_grad=True), 1)
    assert result["max_abs_diff_out"] == pytest.approx(1.0) and result["max_abs_diff_grad"] > 0.1


@pytest.mark.parametrize(("rounds", "requires_grad", "message"), [
    (0, True, "rounds must be an int >= 1, got 0"), (2, False, "x must be a tensor that requires grad")])
def test_compiled_vs_eager_rejects_bad_arguments(rounds, requires_grad, message):
    import torch

    with pytest.raises(ValueError, match=message):
        compiled_vs_eager(torch.nn.Linear(3, 2), torch.randn(4, 3, requires_grad=requires_grad), rounds)
