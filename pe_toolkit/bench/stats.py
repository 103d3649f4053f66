"""Per-seed statistics of the benchmarks' tables: mean and Student-t interval, and its text.

Claims are decided by :mod:`pe_toolkit.bench.verdict` (the interval of the difference, paired and
equivalence tests, bounded intervals), never from whether two of these intervals overlap.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["format_interval", "mean_interval"]


def mean_interval(values: Iterable[float], confidence: float = 0.95) -> dict[str, Any]:
    """Mean and Student-t ``confidence`` interval of per-seed values: ``{"mean", "low", "high", "n"}``.

    Non-finite values are dropped (``n`` counts what remains). One value has no interval: ``low``
    and ``high`` are ``nan`` (unknown), as everything is for no value.

    Example:
        >>> r = mean_interval([1.0, 2.0, 3.0])
        >>> r["mean"], round(r["low"], 3), round(r["high"], 3), r["n"]
        (2.0, -0.484, 4.484, 3)
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(finite)
    if n == 0:
        return {"mean": math.nan, "low": math.nan, "high": math.nan, "n": 0}
    mean = statistics.fmean(finite)
    if n == 1:
        return {"mean": mean, "low": math.nan, "high": math.nan, "n": 1}
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * statistics.stdev(finite) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def format_interval(summary: Mapping[str, Any], fmt: str = ".3f") -> str:
    """``"0.512 [0.498, 0.526] (n=3)"``; ``"0.512 (n=1)"`` without an interval; ``"-"`` for no value."""
    if summary["n"] == 0:
        return "-"
    if not math.isfinite(summary["low"]):
        return f"{summary['mean']:{fmt}} (n={summary['n']})"
    return f"{summary['mean']:{fmt}} [{summary['low']:{fmt}}, {summary['high']:{fmt}}] (n={summary['n']})"
