"""Cross-field checks of benchmark configs that the types alone do not express (``Benchmark.check``).

Each raises ``ValueError`` naming the config key, the value and what is allowed::

    def check(self, config):
        distinct("seeds", config.seeds)
        distinct("variants", config.variants, allowed=VARIANTS)
        positive("training.steps", config.training.steps)
        positives("training.lrs", config.training.lrs)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["distinct", "positive", "positives"]


def distinct(key: str, values: Sequence[Any], *, allowed: Iterable[Any] | None = None) -> None:
    """``values`` is a non-empty list of distinct entries (from ``allowed``, when given).

    Example:
        >>> distinct("seeds", [0, 0])
        Traceback (most recent call last):
        ...
        ValueError: seeds must be a non-empty list of distinct values, got [0, 0]
    """
    allowed = None if allowed is None else list(allowed)
    bad = [] if allowed is None else [v for v in values if v not in allowed]
    if not values or bad or len(set(map(repr, values))) != len(values):
        where = "" if allowed is None else f" from {allowed}"
        raise ValueError(f"{key} must be a non-empty list of distinct values{where}, got {list(values)!r}")


def positive(key: str, value: Any) -> None:
    """``value`` is a finite number > 0 (a count or a rate).

    Example:
        >>> positive("training.steps", 0)
        Traceback (most recent call last):
        ...
        ValueError: training.steps must be a finite number > 0, got 0
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{key} must be a finite number > 0, got {value!r}")


def positives(key: str, values: Sequence[Any]) -> None:
    """``values`` is a non-empty list of distinct finite numbers > 0 (a grid).

    Example:
        >>> positives("training.lrs", [0.001, -1.0])
        Traceback (most recent call last):
        ...
        ValueError: training.lrs must be a non-empty list of distinct finite numbers > 0, got [0.001, -1.0]
    """
    ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in values)
    if not values or not ok or len(set(values)) != len(values):
        raise ValueError(f"{key} must be a non-empty list of distinct finite numbers > 0, got {list(values)!r}")
