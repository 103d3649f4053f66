"""Timing for speed benchmarks: interleaved rounds on torch.utils.benchmark's synchronising clock.

:func:`clock` is ``torch.utils.benchmark``'s timer: it synchronises the accelerator (CUDA) before
reading ``timeit.default_timer``, so a kernel still queued is counted. What we keep of our own is the
schedule: ``torch.utils.benchmark.Timer`` measures one statement at a time (``blocked_autorange``),
while a comparison on a shared machine needs its candidates in *interleaved* rounds (A, B, C, B, C,
A, ...) so that a change of load hits all of them alike, and ratios taken per round
(:func:`paired_ratios`, with quartiles). Not measured better than ``Timer``: one function timed against
itself 8 times at a load average of 12-14 on 2 cores gave a ratio standard deviation of 0.147
interleaved and 0.135 with ``Timer.blocked_autorange``; kept for the paired ratios and the budget rule.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["clock", "compiled_vs_eager", "paired_ratios", "summarize_times", "time_interleaved"]


def clock() -> float:
    """Seconds, after synchronising the accelerator if there is one (``torch.utils.benchmark``'s timer)."""
    from torch.utils.benchmark.utils.timer import timer

    return timer()


def summarize_times(times: Sequence[float]) -> dict[str, Any]:
    """``{"median_s", "min_s", "mean_s", "repeats"}`` of per-call times in seconds."""
    if not times:
        raise ValueError("summarize_times: no times")
    return {"median_s": statistics.median(times), "min_s": min(times), "mean_s": statistics.fmean(times),
            "repeats": len(times)}


def time_interleaved(fns: Mapping[str, Callable[[], Any]], *, warmup: int, repeats: int,
                     budget_s: float | None = None, min_repeats: int = 1,
                     drop_errors: bool = False) -> dict[str, dict[str, Any]]:
    """Time several functions round-robin, the order rotated by one per round, so that drift hits all alike.

    ``warmup`` rounds run first and are not recorded. Then up to ``repeats`` rounds; with ``budget_s``,
    no new round starts once the recorded rounds took that long, but not before ``min_repeats`` rounds.
    With ``drop_errors``, a function that raises leaves the following rounds and maps to
    ``{"error": "Type: message"}``; else the exception propagates.

    Returns:
        ``{name: {"median_s", "min_s", "mean_s", "repeats", "times_s"}}``; ``times_s[r]`` of different
        functions come from the same round ``r`` (see :func:`paired_ratios`).
    """
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if not isinstance(min_repeats, int) or not 1 <= min_repeats <= repeats:
        raise ValueError(f"min_repeats must be an int in [1, repeats={repeats}], got {min_repeats!r}")
    if budget_s is not None and not budget_s >= 0:
        raise ValueError(f"budget_s must be >= 0 or None, got {budget_s!r}")
    names = list(fns)
    if not names:
        raise ValueError("time_interleaved: no functions")
    errors: dict[str, str] = {}
    times: dict[str, list[float]] = {name: [] for name in names}

    def call(name: str) -> float | None:
        start = clock()
        try:
            fns[name]()
        except Exception as error:
            if not drop_errors:
                raise
            errors[name] = f"{type(error).__name__}: {error}"
            return None
        return clock() - start

    for _ in range(warmup):
        for name in [n for n in names if n not in errors]:
            call(name)
    begin = clock()
    for r in range(repeats):
        if budget_s is not None and r >= min_repeats and clock() - begin >= budget_s:
            break
        active = [n for n in names if n not in errors]
        if not active:
            break
        shift = r % len(active)
        for name in active[shift:] + active[:shift]:
            elapsed = call(name)
            if elapsed is not None:
                times[name].append(elapsed)
    return {name: {"error": errors[name]} if name in errors else {**summarize_times(times[name]),
                                                                    "times_s": times[name]}
            for name in names}


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> dict[str, float]:
    """Per-round ratios ``numerator[r] / denominator[r]`` of two interleaved timings: median and quartiles."""
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError("paired_ratios: need two equally long, non-empty lists of times")
    ratios = sorted(a / b for a, b in zip(numerator, denominator))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {"ratio_median": statistics.median(ratios), "ratio_p25": quartiles[0], "ratio_p75": quartiles[2],
            "ratio_of_medians": statistics.median(numerator) / statistics.median(denominator)}


def compiled_vs_eager(module: Any, x: Any, rounds: int, *, backend: str = "inductor") -> dict[str, float]:
    """Forward + backward (``d/dx sum(module(x)**2)``) of ``module`` eager and ``torch.compile(fullgraph=True)``.

    The first compiled call (which compiles) is timed on its own; after one eager warm-up call, ``rounds`` rounds
    alternate one eager and one compiled step. ``x`` must require grad.

    Returns:
        ``{"eager_s", "compiled_s"}`` (medians over the rounds), ``"first_call_s"``, and the largest absolute
        differences between the two of the outputs (``"max_abs_diff_out"``) and of the input gradients
        (``"max_abs_diff_grad"``).
    """
    import torch

    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int >= 1, got {rounds!r}")
    if not getattr(x, "requires_grad", False):
        raise ValueError("x must be a tensor that requires grad (the step differentiates with respect to it)")
    compiled = torch.compile(module, fullgraph=True, backend=backend)

    def step(fn: Any) -> tuple[float, Any, Any]:
        start = clock()
        out = fn(x)
        (grad,) = torch.autograd.grad(out.square().sum(), [x])
        return clock() - start, out.detach(), grad

    first_call_s, out_compiled, grad_compiled = step(compiled)
    _, out_eager, grad_eager = step(module)
    times = [(step(module)[0], step(compiled)[0]) for _ in range(rounds)]
    return {"eager_s": statistics.median(t[0] for t in times), "compiled_s": statistics.median(t[1] for t in times),
            "first_call_s": first_call_s, "max_abs_diff_out": float((out_compiled - out_eager).abs().max()),
            "max_abs_diff_grad": float((grad_compiled - grad_eager).abs().max())}
