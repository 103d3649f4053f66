"""Config checks: each error names the key, the value and what is allowed."""

import math

import pytest

from pe_toolkit.bench.checks import distinct, positive, positives


def test_distinct():
    distinct("seeds", [0, 1, 2])
    distinct("variants", ["a"], allowed=("a", "b"))
    for values, allowed, message in (([], None, r"seeds must be a non-empty list of distinct values, got \[\]"),
                                     ([0, 0], None, r"got \[0, 0\]"),
                                     (["a", "c"], ("a", "b"), r"from \['a', 'b'\], got \['a', 'c'\]")):
        with pytest.raises(ValueError, match=message):
            distinct("seeds", values, allowed=allowed)


def test_positive_and_positives():
    positive("training.steps", 3)
    positive("training.lr", 1e-3)
    for value in (0, -1.0, math.nan, math.inf, True, "3"):
        with pytest.raises(ValueError, match=f"training.steps must be a finite number > 0, got {value!r}"):
            positive("training.steps", value)
    positives("training.lrs", [1e-3, 3e-3])
    for values in ([], [1e-3, 1e-3], [1e-3, 0.0], [math.nan]):
        with pytest.raises(ValueError, match="training.lrs must be a non-empty list of distinct finite numbers > 0"):
            positives("training.lrs", values)
