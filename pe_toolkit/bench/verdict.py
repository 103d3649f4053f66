"""One verdict rule for every benchmark claim: reproduced / contradicted / inconclusive / untested.

A claim compares two sides (``a``, the method the paper favours, and ``b``, its baseline) on one
metric over replicates (seeds, folds). The rule decides from the confidence interval of the
*difference* ``a - b`` (signed so that a positive value is the paper's direction), never from whether
two per-side intervals overlap (that test is far too conservative: with 3 seeds, two 95 % intervals
can overlap while the difference is clearly non-zero):

=================  ===========================================================================
verdict            when
=================  ===========================================================================
``reproduced``     the effect the paper reports, in its direction, is detected
``contradicted``   the opposite effect is detected
``inconclusive``   neither; the row gives the smallest effect this ``n`` could have detected
``untested``       a stated precondition fails (a side not learned, a diverged run, < 2 finite
                   replicates, a metric or task unlike the paper's); the row says which
=================  ===========================================================================

Three kinds of claim:

* ``"difference"``: "``a`` is better than ``b``". Welch's t interval on the difference of means
  (unpaired: independent trainings), or the paired t interval on per-replicate differences when both
  sides share their weights or start (``paired=True``: inference-time variants of one model, a
  conversion from one parent). Reproduced when the two-sided ``1 - alpha`` interval lies above 0,
  contradicted when it lies below 0.
* ``"equivalence"``: "``a`` and ``b`` do not differ by more than ``margin``" (e.g. "competitive").
  Two one-sided tests (TOST, Schuirmann 1987) at level ``alpha``: reproduced when the ``1 - 2 alpha``
  interval of the difference lies inside ``(-margin, margin)``; contradicted when the ``1 - alpha``
  interval lies entirely outside it.
* ``"noninferiority"``: "``a`` is not worse than ``b`` by more than ``margin``" (e.g. "does not
  rise", "not worse"). One-sided: reproduced when the ``1 - 2 alpha`` interval's lower end is above
  ``-margin``; contradicted when the ``1 - alpha`` interval's upper end is below ``-margin``.

A claim of no difference is therefore never "reproduced" by a wide interval that happens to include
0: it needs a margin, stated in the claim, and an interval narrow enough to fit inside it.

Non-finite replicates (a diverged run) are counted and reported, never dropped: a side with any
non-finite value makes the claim ``untested`` (the precondition "every run finished" fails).
Bounded metrics (accuracy in ``[0, 1]``) get per-side t intervals intersected with their range; the
intersection keeps the interval's coverage (the true mean lies in the range) and the row names the
method, so nothing is clipped silently.

The t quantiles and tails come from scipy (the ``stats`` extra, ``pip install 'torch-pe-toolkit[stats]'``);
without it an interval or a decision raises the toolkit's ``ImportError`` naming that extra.

Example:
    >>> claim = decide_claim([0.91, 0.93, 0.92], [0.85, 0.86, 0.88], kind="difference",
    ...                      higher_is_better=True, bounds=(0.0, 1.0), name="rope beats ape")
    >>> claim.verdict
    'reproduced'
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

VERDICTS = ("reproduced", "contradicted", "inconclusive", "untested")
CLAIM_KINDS = ("difference", "equivalence", "noninferiority")

__all__ = [
    "CLAIM_KINDS",
    "VERDICTS",
    "ClaimResult",
    "SideSummary",
    "claim_row",
    "claims_table",
    "decide_claim",
    "format_side",
    "summarize",
    "untested_claim",
]


def _scipy_stats():
    """``scipy.stats``, or the toolkit's ``ImportError`` naming the ``stats`` extra (the t distribution's quantiles
    and tails come from it; nothing else of the harness needs scipy)."""
    from pe_toolkit.extras import require_extra

    require_extra("stats", __name__)
    from scipy import stats

    return stats


def _t_quantile(probability: float, df: float) -> float:
    return float(_scipy_stats().t.ppf(probability, df))


@dataclass(frozen=True)
class SideSummary:
    """One side of a claim: mean and interval of its finite replicates, and what was not finite.

    Attributes:
        mean, low, high: the mean and the ``confidence`` interval (``nan`` with fewer than 2 finite values).
        n: number of finite replicates; ``n_nonfinite``: replicates that were ``nan`` / ``inf`` / ``None``.
        method: how the interval was made (``"t"`` or ``"t within [lo, hi]"`` for a bounded metric).
        values: the replicates as given (non-finite ones as ``None``), so a reader can recompute.
    """

    mean: float
    low: float
    high: float
    n: int
    n_nonfinite: int
    method: str
    values: tuple[float | None, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["values"] = list(self.values)
        return out


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"replicate values must be numbers or None, got {value!r}") from error
    return number if math.isfinite(number) else None


def _check_confidence(confidence: float) -> None:
    if not isinstance(confidence, (int, float)) or not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")


def _check_bounds(bounds: tuple[float, float] | None) -> None:
    if bounds is None:
        return
    if len(bounds) != 2 or not all(isinstance(b, (int, float)) for b in bounds) or not bounds[0] < bounds[1]:
        raise ValueError(f"bounds must be (low, high) with low < high, got {bounds!r}")


def summarize(values: Iterable[Any], *, confidence: float = 0.95,
              bounds: tuple[float, float] | None = None) -> SideSummary:
    """Mean and Student-t ``confidence`` interval of replicates, counting (not dropping) non-finite ones.

    Args:
        values: one number per replicate; ``None``, ``nan`` and ``inf`` count as non-finite.
        confidence: the interval's coverage, in (0, 1).
        bounds: the metric's range (e.g. ``(0, 1)`` for an accuracy); the interval is intersected with it.

    Raises:
        ValueError: ``confidence`` or ``bounds`` out of range, or a finite value outside ``bounds``.
        TypeError: a value that is not a number.
    """
    _check_confidence(confidence)
    _check_bounds(bounds)
    raw = [_finite(v) for v in values]
    finite = [v for v in raw if v is not None]
    if bounds is not None:
        outside = [v for v in finite if not bounds[0] <= v <= bounds[1]]
        if outside:
            raise ValueError(f"values {outside} lie outside the metric's bounds {bounds}")
    method = "t" if bounds is None else f"t within [{bounds[0]:g}, {bounds[1]:g}]"
    n = len(finite)
    nonfinite = len(raw) - n
    if n == 0:
        return SideSummary(math.nan, math.nan, math.nan, 0, nonfinite, method, tuple(raw))
    mean = math.fsum(finite) / n
    if n == 1:
        return SideSummary(mean, math.nan, math.nan, 1, nonfinite, method, tuple(raw))
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in finite) / (n - 1))
    half = _t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return SideSummary(mean, low, high, n, nonfinite, method, tuple(raw))


def format_side(side: SideSummary | dict[str, Any], fmt: str = ".3f") -> str:
    """``"0.512 [0.498, 0.526] (n=3)"``; ``"0.512 (n=1)"``; ``"- (n=0)"``; non-finite runs are named."""
    s = side.as_dict() if isinstance(side, SideSummary) else side
    extra = f", {s['n_nonfinite']} non-finite" if s.get("n_nonfinite") else ""
    if s["n"] == 0:
        return f"- (n=0{extra})"
    if not math.isfinite(s["low"]):
        return f"{s['mean']:{fmt}} (n={s['n']}{extra})"
    return f"{s['mean']:{fmt}} [{s['low']:{fmt}}, {s['high']:{fmt}}] (n={s['n']}{extra})"


@dataclass(frozen=True)
class ClaimResult:
    """A decided claim: both sides, the difference, the test, and the computed verdict.

    ``difference`` is ``a - b`` signed so that positive is the paper's direction (``higher_is_better``
    folded in); ``low`` / ``high`` of the difference are its two-sided ``1 - alpha`` interval and
    ``tost_low`` / ``tost_high`` its ``1 - 2 alpha`` interval (the one TOST reads).
    ``min_detectable_effect``: for an ``inconclusive`` difference claim, the smallest true difference this
    ``n`` and spread would detect with 80 % power at ``alpha`` (in the metric's units).
    """

    name: str
    kind: str
    verdict: str
    reason: str
    test: str
    a: SideSummary
    b: SideSummary
    difference: dict[str, float]
    higher_is_better: bool
    paired: bool
    alpha: float
    margin: float | None = None
    p_value: float | None = None
    min_detectable_effect: float | None = None

    def as_row(self) -> dict[str, Any]:
        """The results.json form: plain JSON types, every field present."""
        row = asdict(self)
        row["a"] = self.a.as_dict()
        row["b"] = self.b.as_dict()
        return row


def untested_claim(name: str, reason: str, a: Iterable[Any] = (), b: Iterable[Any] = (), *,
                   kind: str = "difference", higher_is_better: bool = True, paired: bool = False,
                   margin: float | None = None, alpha: float = 0.05,
                   bounds: tuple[float, float] | None = None) -> ClaimResult:
    """A claim whose precondition failed, with both sides summarised for the record."""
    if kind not in CLAIM_KINDS:
        raise ValueError(f"kind must be one of {CLAIM_KINDS}, got {kind!r}")
    nan = math.nan
    return ClaimResult(
        name=name, kind=kind, verdict="untested", reason=reason, test="none",
        a=summarize(a, confidence=1 - alpha, bounds=bounds), b=summarize(b, confidence=1 - alpha, bounds=bounds),
        difference={"mean": nan, "low": nan, "high": nan, "tost_low": nan, "tost_high": nan, "se": nan, "df": nan},
        higher_is_better=higher_is_better, paired=paired, alpha=alpha, margin=margin,
    )


def _difference(a: Sequence[float], b: Sequence[float], *, paired: bool) -> tuple[float, float, float, str]:
    """Mean difference ``a - b``, its standard error and degrees of freedom, and the test's name."""
    if paired:
        d = [x - y for x, y in zip(a, b, strict=True)]
        n = len(d)
        mean = math.fsum(d) / n
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in d) / (n - 1))
        return mean, sd / math.sqrt(n), float(n - 1), "paired t"
    na, nb = len(a), len(b)
    ma, mb = math.fsum(a) / na, math.fsum(b) / nb
    va = math.fsum((v - ma) ** 2 for v in a) / (na - 1)
    vb = math.fsum((v - mb) ** 2 for v in b) / (nb - 1)
    se2 = va / na + vb / nb
    if se2 == 0.0:
        return ma - mb, 0.0, float(na + nb - 2), "Welch t"
    df = se2**2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1))  # Welch-Satterthwaite
    return ma - mb, math.sqrt(se2), df, "Welch t"


def decide_claim(a: Iterable[Any], b: Iterable[Any], *, kind: str = "difference", higher_is_better: bool,
                 paired: bool = False, margin: float | None = None, alpha: float = 0.05,
                 bounds: tuple[float, float] | None = None, name: str = "",
                 preconditions: Sequence[tuple[bool, str]] = ()) -> ClaimResult:
    """Decide one claim about ``a`` against ``b`` (see the module docstring for the rule).

    Args:
        a, b: per-replicate values of the metric for the favoured side and the baseline. With
            ``paired=True`` they are aligned (replicate ``i`` of both comes from the same seed / weights).
        kind: ``"difference"``, ``"equivalence"`` or ``"noninferiority"``.
        higher_is_better: the metric's direction (accuracy: True; perplexity, error: False).
        paired: test per-replicate differences (same weights or same start per seed).
        margin: for equivalence / non-inferiority, the largest difference that counts as none, in the
            metric's units (> 0); must be stated by the claim, never derived from the data.
        alpha: the test's level; intervals are ``1 - alpha`` (two-sided) and ``1 - 2 alpha`` (TOST).
        bounds: the metric's range, for the per-side intervals.
        name: the claim's text, carried into the row.
        preconditions: ``(holds, reason)`` pairs; the first that does not hold makes the claim untested.

    Raises:
        ValueError: an unknown ``kind``, a missing or non-positive ``margin`` for equivalence /
            non-inferiority (or a margin given to a difference claim), ``alpha`` outside (0, 0.5),
            paired sides of different lengths.
    """
    if kind not in CLAIM_KINDS:
        raise ValueError(f"kind must be one of {CLAIM_KINDS}, got {kind!r}")
    if not isinstance(alpha, (int, float)) or not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if kind == "difference":
        if margin is not None:
            raise ValueError(f"margin is for equivalence / noninferiority claims; got margin={margin!r} "
                             "with kind='difference'")
    elif not isinstance(margin, (int, float)) or not math.isfinite(margin) or margin <= 0:
        raise ValueError(f"kind={kind!r} needs margin > 0 (the claim's stated tolerance), got {margin!r}")
    a, b = list(a), list(b)
    if paired and len(a) != len(b):
        raise ValueError(f"paired claims need one value per replicate on both sides, got {len(a)} and {len(b)}")
    common = dict(kind=kind, higher_is_better=higher_is_better, paired=paired, margin=margin, alpha=alpha,
                  bounds=bounds)
    side_a = summarize(a, confidence=1 - alpha, bounds=bounds)
    side_b = summarize(b, confidence=1 - alpha, bounds=bounds)
    for holds, reason in preconditions:
        if not holds:
            return untested_claim(name, reason, a, b, **common)
    if side_a.n_nonfinite or side_b.n_nonfinite:
        return untested_claim(
            name, f"non-finite runs (diverged or missing): a {side_a.n_nonfinite} of {len(a)}, "
            f"b {side_b.n_nonfinite} of {len(b)}", a, b, **common)
    if side_a.n < 2 or side_b.n < 2:
        return untested_claim(name, f"fewer than 2 replicates per side (a {side_a.n}, b {side_b.n}): no interval",
                              a, b, **common)

    sign = 1.0 if higher_is_better else -1.0
    raw_mean, se, df, test = _difference([float(v) for v in a], [float(v) for v in b], paired=paired)
    mean = sign * raw_mean
    t_two = _t_quantile(1 - alpha / 2, df)
    t_one = _t_quantile(1 - alpha, df)
    diff = {"mean": mean, "low": mean - t_two * se, "high": mean + t_two * se,
            "tost_low": mean - t_one * se, "tost_high": mean + t_one * se, "se": se, "df": df}
    stats = _scipy_stats()
    mde = None
    if kind == "difference":
        p = float(2 * stats.t.sf(abs(mean) / se, df)) if se > 0 else (0.0 if mean != 0 else 1.0)
        if diff["low"] > 0:
            verdict, reason = "reproduced", "the difference's interval lies above 0"
        elif diff["high"] < 0:
            verdict, reason = "contradicted", "the difference's interval lies below 0 (the opposite effect)"
        else:
            verdict, reason = "inconclusive", "the difference's interval contains 0"
            mde = (t_two + _t_quantile(0.8, df)) * se
        test = f"{test} (two-sided, alpha {alpha:g})"
    elif kind == "equivalence":
        m = float(margin)
        p = float(max(stats.t.sf((mean + m) / se, df), stats.t.sf((m - mean) / se, df))) if se > 0 else (
            0.0 if abs(mean) < m else 1.0)
        if -m < diff["tost_low"] and diff["tost_high"] < m:
            verdict, reason = "reproduced", f"the {1 - 2 * alpha:.0%} interval lies within +-{m:g}"
        elif diff["low"] > m or diff["high"] < -m:
            verdict, reason = "contradicted", f"the {1 - alpha:.0%} interval lies outside +-{m:g}"
        else:
            verdict, reason = "inconclusive", f"the interval reaches past +-{m:g}"
        test = f"TOST on the {test} difference (margin {m:g}, alpha {alpha:g})"
    else:  # noninferiority
        m = float(margin)
        p = float(stats.t.sf((mean + m) / se, df)) if se > 0 else (0.0 if mean > -m else 1.0)
        if diff["tost_low"] > -m:
            verdict, reason = "reproduced", f"the {1 - 2 * alpha:.0%} interval's lower end lies above -{m:g}"
        elif diff["high"] < -m:
            verdict, reason = "contradicted", f"the {1 - alpha:.0%} interval lies below -{m:g} (worse by more)"
        else:
            verdict, reason = "inconclusive", f"the interval reaches below -{m:g}"
        test = f"one-sided {test} non-inferiority (margin {m:g}, alpha {alpha:g})"
    return ClaimResult(name=name, kind=kind, verdict=verdict, reason=reason, test=test, a=side_a, b=side_b,
                       difference=diff, higher_is_better=higher_is_better, paired=paired, alpha=alpha,
                       margin=margin, p_value=p, min_detectable_effect=mde)


def claim_row(claim: ClaimResult, /, **extra: Any) -> dict[str, Any]:
    """A results.json row of ``claim``: :meth:`ClaimResult.as_row` with ``kind`` ``"claim"`` (the claim's own
    kind, difference / equivalence / noninferiority, moves to ``claim_kind``) and ``extra`` fields (any name,
    ``claim`` included).

    Example:
        >>> row = claim_row(untested_claim("a beats b", "b not learned"), task="copy")
        >>> row["kind"], row["claim_kind"], row["verdict"], row["task"]
        ('claim', 'difference', 'untested', 'copy')
    """
    row = claim.as_row()
    return {**row, "kind": "claim", "claim_kind": row["kind"], **extra}


def claims_table(rows: Sequence[dict[str, Any]], fmt: str = ".3f", *, extra: Sequence[tuple[str, str]] = ()) -> str:
    """A markdown table of claim rows (:meth:`ClaimResult.as_row`): both sides, the difference, test, verdict.

    Args:
        rows: claim rows; ``a`` / ``b`` sides print as ``mean [low, high] (n=...)``, the difference (signed:
            positive is the paper's direction) with its two-sided interval.
        fmt: the number format.
        extra: ``(key, header)`` columns of the rows to add after the claim's name (e.g. a caveat).
    """
    from pe_toolkit.bench.report import markdown_table

    def difference(row: dict[str, Any]) -> str:
        d = row["difference"]
        if d.get("mean") is None or not math.isfinite(d["mean"]):
            return "-"
        return f"{d['mean']:+{fmt}} [{d['low']:+{fmt}}, {d['high']:+{fmt}}]"

    def verdict(row: dict[str, Any]) -> str:
        mde = row.get("min_detectable_effect")
        detail = f"; detectable at this n: {mde:{fmt}}" if mde is not None and math.isfinite(mde) else ""
        return f"**{row['verdict']}** ({row['reason']}{detail})"

    table = [{"claim": r["name"], **{k: r.get(k) for k, _ in extra}, "a": format_side(r["a"], fmt),
              "b": format_side(r["b"], fmt), "difference": difference(r), "test": r["test"], "verdict": verdict(r)}
             for r in rows]
    return markdown_table(table, [("claim", "claim"), *extra, ("a", "a (favoured)"), ("b", "b (baseline)"),
                                  ("difference", "a - b, paper's direction [95 %]"), ("test", "test"),
                                  ("verdict", "verdict")])
