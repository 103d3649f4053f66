"""Mean and Student-t interval of a set of replicates (pe_toolkit.bench.stats)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pe_toolkit.bench.stats import mean_interval


# ---------------------------------------------------------------------------------------- intervals
def test_mean_interval_is_the_student_t_interval():
    from scipy import stats

    values = [0.2, 0.5, 0.3, 0.9]
    r = mean_interval(values)
    low, high = stats.t.interval(0.95, 3, loc=np.mean(values), scale=stats.sem(values))
    assert r["n"] == 4 and r["mean"] == pytest.approx(np.mean(values))
    assert r["low"] == pytest.approx(low) and r["high"] == pytest.approx(high)
    one = mean_interval([0.4, float("nan")])
    assert one["n"] == 1 and one["mean"] == 0.4 and math.isnan(one["low"]) and math.isnan(one["high"])
    assert mean_interval([])["n"] == 0
    with pytest.raises(ValueError, match="confidence must be in"):
        mean_interval(values, confidence=1.0)
