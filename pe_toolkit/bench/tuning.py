"""Tuning that reaches the optimum: a grid that extends itself past an edge optimum, with a stated cap.

The fairness rule (``docs/benchmarks.md``) gives every method in a comparison the same tuning budget
on the same validation data. A fixed grid is not enough: when the chosen value sits at the grid's edge,
the optimum may lie beyond it, and the method is compared at a setting that was never shown to be
its best. :func:`tune` therefore evaluates the starting grid, and while the best value is at an edge
it adds the next value past that edge (one grid step further, on the grid's own scale) until the best
is interior or ``max_extensions`` values have been added. The cap is the same for every method; a result
that stops at the cap says so (``cap_hit``), and reports flag it.

A value whose score is not finite (a diverged run) counts as the worst score, so a learning rate that
diverges bounds the search from above without being chosen.

Example:
    >>> result = tune(lambda lr: -(math.log10(lr) + 2.0) ** 2, [1e-4, 1e-3], higher_is_better=True)
    >>> result.chosen, result.cap_hit, [f"{v:g}" for v in result.values]
    (0.01, False, ['0.0001', '0.001', '0.01', '0.1'])
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GridSearch", "TuningResult", "extend_value", "tune"]

SCALES = ("log", "linear")


@dataclass(frozen=True)
class TuningResult:
    """The outcome of :func:`tune`.

    Attributes:
        chosen: the value with the best validation score.
        scores: every evaluated value's score (``nan`` for a non-finite one), in evaluation order.
        values: the evaluated values, sorted.
        extensions: how many values were added past the starting grid.
        cap_hit: the best value is still at an edge after ``max_extensions`` additions (or at an edge
            that cannot be extended: a value that would leave ``limits``).
        edge: ``"low"`` / ``"high"`` when ``cap_hit``, else ``None``.
    """

    chosen: float
    scores: dict[float, float]
    values: list[float]
    extensions: int
    cap_hit: bool
    edge: str | None = None
    details: dict[float, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "scores": {repr(k): v for k, v in self.scores.items()},
                "values": self.values, "extensions": self.extensions, "cap_hit": self.cap_hit, "edge": self.edge}


def extend_value(values: Sequence[float], edge: str, scale: str) -> float:
    """The next value past ``edge`` (``"low"`` / ``"high"``) of a sorted grid, one step on its scale.

    The step is the one between the two values nearest that edge (a ratio on the log scale, a
    difference on the linear one); a one-value grid steps by a factor of 10 (log) or by its own magnitude.
    The value is rounded to 12 significant digits (float noise from the ratio would otherwise name a run
    ``9.999999999999999e-05``).
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if edge not in ("low", "high"):
        raise ValueError(f"edge must be 'low' or 'high', got {edge!r}")
    v = sorted(values)
    if scale == "log":
        ratio = v[1] / v[0] if len(v) > 1 else 10.0
        new = v[0] / ratio if edge == "low" else v[-1] * (v[-1] / v[-2] if len(v) > 1 else ratio)
    else:
        step = (v[1] - v[0]) if edge == "low" and len(v) > 1 else (v[-1] - v[-2]) if len(v) > 1 else abs(v[0]) or 1.0
        new = v[0] - step if edge == "low" else v[-1] + step
    return float(f"{new:.12g}")  # 1e-4, not 9.999999999999999e-05: the value names a run in the store


def _rank_key(score: float, higher_is_better: bool) -> float:
    if not math.isfinite(score):
        return -math.inf
    return score if higher_is_better else -score


class GridSearch:
    """The search of :func:`tune`, driven in rounds: evaluate :meth:`pending`, :meth:`record` each score, repeat.

    The runner drives one search per method (group) and runs every group's pending values in one batch
    (in parallel on its executor); :func:`tune` drives one search with a callable. Both therefore extend a
    grid by the same rule. Arguments as in :func:`tune`.

    Example:
        >>> search = GridSearch([1e-3, 1e-2], higher_is_better=False, max_extensions=1)
        >>> for value in search.pending():
        ...     search.record(value, value)  # the lowest value scores best: extend downwards
        >>> [f"{v:g}" for v in search.pending()]
        ['0.0001']
        >>> search.record(1e-4, 1e-4)
        >>> search.done, search.result().cap_hit, search.result().edge
        (True, True, 'low')
    """

    def __init__(self, grid: Sequence[float], *, higher_is_better: bool, scale: str = "log", max_extensions: int = 2,
                 limits: tuple[float, float] = (-math.inf, math.inf)) -> None:
        if scale not in SCALES:
            raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
        values = list(grid)
        if not values:
            raise ValueError("grid must hold at least one value, got []")
        if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in values):
            raise ValueError(f"grid values must be finite numbers, got {values}")
        if len(set(values)) != len(values):
            raise ValueError(f"grid values must be distinct, got {values}")
        if scale == "log" and min(values) <= 0:
            raise ValueError(f"a log-scale grid needs positive values, got {values}")
        if any(not limits[0] <= v <= limits[1] for v in values):
            raise ValueError(f"grid values must lie within limits {limits}, got {values}")
        if isinstance(max_extensions, bool) or not isinstance(max_extensions, int) or max_extensions < 0:
            raise ValueError(f"max_extensions must be an int >= 0, got {max_extensions!r}")
        self.grid = values  # kept as given (an int grid stays int)
        self.higher_is_better, self.scale = bool(higher_is_better), scale
        self.max_extensions, self.limits = max_extensions, limits
        self.scores: dict[float, float] = {}
        self.details: dict[float, Any] = {}
        self.extensions = 0
        self._pending = list(values)
        self._result: TuningResult | None = None

    def pending(self) -> list[float]:
        """The values to evaluate before the search can go on (empty once it is done)."""
        return list(self._pending)

    @property
    def done(self) -> bool:
        return self._result is not None

    def result(self) -> TuningResult:
        if self._result is None:
            raise ValueError(f"the search is not done: values {self._pending} still need a score")
        return self._result

    def record(self, value: float, score: float | None, detail: Any = None) -> None:
        """The validation ``score`` of a pending ``value`` (non-finite or ``None``: a diverged run, the worst)."""
        if value not in self._pending:
            raise ValueError(f"value {value!r} is not pending; pending: {self._pending}")
        self._pending.remove(value)
        self.scores[value] = float(score) if score is not None and math.isfinite(float(score)) else math.nan
        if detail is not None:
            self.details[value] = detail
        if not self._pending:
            self._advance()

    def _advance(self) -> None:
        scores = self.scores
        order = list(scores)  # evaluation order: earlier wins ties
        best = max(order, key=lambda v: (_rank_key(scores[v], self.higher_is_better), -order.index(v)))
        tried = sorted(scores)
        if len(tried) == 1:
            edge = "high"  # one value: nothing says which side holds the optimum; extend upwards first
        else:
            edge = "low" if best == tried[0] else "high" if best == tried[-1] else None
        if edge is None:
            self._result = TuningResult(best, scores, tried, self.extensions, False, None, self.details)
            return
        candidate = extend_value(tried, edge, self.scale)
        if self.extensions >= self.max_extensions or not self.limits[0] <= candidate <= self.limits[1]:
            self._result = TuningResult(best, scores, tried, self.extensions, True, edge, self.details)
            return
        self._pending = [candidate]
        self.extensions += 1


def tune(evaluate: Callable[[float], float | tuple[float, Any]], grid: Sequence[float], *,
         higher_is_better: bool, scale: str = "log", max_extensions: int = 2,
         limits: tuple[float, float] = (-math.inf, math.inf)) -> TuningResult:
    """Evaluate ``grid``, then extend it past an edge optimum until interior or capped.

    Args:
        evaluate: maps a value to its validation score, or to ``(score, details)`` (details are kept in
            the result, e.g. the trained run's row, so the chosen run need not be trained again).
        grid: the starting values (at least 1, distinct; positive on the log scale).
        higher_is_better: the direction of the validation score.
        scale: ``"log"`` (learning rates) or ``"linear"``.
        max_extensions: the most values added past the starting grid (the same for every method).
        limits: values outside ``[low, high]`` are never tried (e.g. a dropout stays below 1).

    Ties on the score go to the value evaluated first (the starting grid's order), so the choice does
    not depend on floating-point noise in later evaluations.

    Raises:
        ValueError: an empty or repeated grid, a non-positive value on the log scale, a grid value
            outside ``limits``, a negative ``max_extensions``, an unknown ``scale``.
    """
    search = GridSearch(grid, higher_is_better=higher_is_better, scale=scale, max_extensions=max_extensions,
                        limits=limits)
    while not search.done:
        for value in search.pending():
            out = evaluate(value)
            score, detail = out if isinstance(out, tuple) else (out, None)
            search.record(value, score, detail)
    return search.result()
