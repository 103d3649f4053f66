"""The one verdict rule: intervals of the difference, paired and equivalence tests, untested preconditions."""

import math

import pytest
from scipy import stats

from pe_toolkit.bench.verdict import VERDICTS, decide_claim, format_side, summarize, untested_claim


def test_summarize_matches_student_t():
    s = summarize([1.0, 2.0, 3.0])
    half = stats.t.ppf(0.975, 2) * 1.0 / math.sqrt(3)
    assert (s.mean, s.n, s.n_nonfinite) == (2.0, 3, 0)
    assert s.low == pytest.approx(2 - half) and s.high == pytest.approx(2 + half)


def test_summarize_counts_nonfinite_instead_of_dropping_silently():
    s = summarize([1.0, float("nan"), None, 3.0, float("inf")])
    assert (s.n, s.n_nonfinite) == (2, 3)
    assert s.values == (1.0, None, None, 3.0, None)
    assert "3 non-finite" in format_side(s)


def test_bounded_interval_stays_in_range_and_names_method():
    s = summarize([0.95, 1.0, 0.99], bounds=(0.0, 1.0))
    unbounded = summarize([0.95, 1.0, 0.99])
    assert unbounded.high > 1.0
    assert s.high == 1.0 and s.low == pytest.approx(unbounded.low)
    assert s.method == "t within [0, 1]"
    with pytest.raises(ValueError, match="outside the metric's bounds"):
        summarize([1.2], bounds=(0.0, 1.0))


def test_difference_uses_welch_interval_of_the_difference():
    a, b = [0.91, 0.93, 0.92], [0.85, 0.86, 0.88]
    claim = decide_claim(a, b, higher_is_better=True)
    reference = stats.ttest_ind(a, b, equal_var=False)
    assert claim.p_value == pytest.approx(reference.pvalue)
    ci = reference.confidence_interval(0.95)
    assert claim.difference["low"] == pytest.approx(ci.low) and claim.difference["high"] == pytest.approx(ci.high)
    assert claim.verdict == "reproduced" and claim.test.startswith("Welch t")


def test_overlapping_side_intervals_can_still_separate_in_the_difference():
    # Per-side 95 % intervals overlap (the old rule called this a tie); the difference's does not contain 0.
    a, b = [10.0, 11.0, 12.0, 10.5, 11.5, 11.0], [9.0, 10.0, 11.0, 9.5, 10.5, 10.0]
    sa, sb = summarize(a), summarize(b)
    assert sa.low < sb.high
    assert decide_claim(a, b, higher_is_better=True).verdict == "reproduced"


def test_lower_is_better_and_contradiction():
    # perplexity: a is higher (worse) than b everywhere
    claim = decide_claim([3.0, 3.1, 3.05], [2.0, 2.1, 2.05], higher_is_better=False)
    assert claim.verdict == "contradicted"
    assert claim.difference["mean"] == pytest.approx(-1.0)


def test_inconclusive_reports_min_detectable_effect():
    claim = decide_claim([0.5, 0.7, 0.6], [0.55, 0.5, 0.65], higher_is_better=True)
    assert claim.verdict == "inconclusive"
    se, df = claim.difference["se"], claim.difference["df"]
    expected = (stats.t.ppf(0.975, df) + stats.t.ppf(0.8, df)) * se
    assert claim.min_detectable_effect == pytest.approx(expected)


def test_paired_uses_per_seed_differences():
    # Large between-seed spread, constant within-seed gain: unpaired cannot see it, paired can.
    a, b = [1.1, 2.1, 3.1], [1.0, 2.0, 3.0]
    unpaired = decide_claim(a, b, higher_is_better=True)
    paired = decide_claim([1.1, 2.12, 3.09], b, higher_is_better=True, paired=True)
    assert unpaired.verdict == "inconclusive"
    assert paired.verdict == "reproduced" and paired.test.startswith("paired t")
    assert paired.p_value == pytest.approx(stats.ttest_rel([1.1, 2.12, 3.09], b).pvalue)
    with pytest.raises(ValueError, match="one value per replicate"):
        decide_claim([1.0, 2.0], [1.0], higher_is_better=True, paired=True)


def test_equivalence_needs_the_whole_tost_interval_inside_the_margin():
    # The FIRE case of the evidence issue: 2.75 [2.70, 2.81] -> 2.98 [2.72, 3.24] is not "does not rise".
    before, after = [2.72, 2.75, 2.78], [2.86, 2.95, 3.13]
    claim = decide_claim(after, before, kind="noninferiority", margin=0.1, higher_is_better=False)
    assert claim.verdict != "reproduced"
    tight = decide_claim([2.751, 2.752, 2.749], [2.75, 2.751, 2.748], kind="equivalence", margin=0.05,
                         higher_is_better=False)
    assert tight.verdict == "reproduced"
    assert -0.05 < tight.difference["tost_low"] and tight.difference["tost_high"] < 0.05
    far = decide_claim([3.5, 3.51, 3.49], [2.75, 2.76, 2.74], kind="equivalence", margin=0.05,
                       higher_is_better=False)
    assert far.verdict == "contradicted"


def test_equivalence_tost_p_value_matches_two_one_sided_tests():
    a, b = [1.00, 1.02, 0.99, 1.01], [1.0, 1.01, 1.0, 0.99]
    claim = decide_claim(a, b, kind="equivalence", margin=0.05, higher_is_better=True, paired=True)
    d = [x - y for x, y in zip(a, b)]
    lower = stats.ttest_1samp(d, -0.05, alternative="greater").pvalue
    upper = stats.ttest_1samp(d, 0.05, alternative="less").pvalue
    assert claim.p_value == pytest.approx(max(lower, upper))


def test_noninferiority_one_sided():
    ok = decide_claim([0.80, 0.81, 0.80], [0.81, 0.815, 0.805], kind="noninferiority", margin=0.05,
                      higher_is_better=True)
    assert ok.verdict == "reproduced"
    bad = decide_claim([0.60, 0.61, 0.60], [0.81, 0.815, 0.805], kind="noninferiority", margin=0.05,
                       higher_is_better=True)
    assert bad.verdict == "contradicted"


def test_untested_on_nonfinite_precondition_and_small_n():
    diverged = decide_claim([1.0, float("nan"), 2.0], [1.0, 1.5, 2.0], higher_is_better=True)
    assert diverged.verdict == "untested" and "non-finite" in diverged.reason
    assert diverged.a.n_nonfinite == 1
    gated = decide_claim([1.0, 2.0], [1.0, 2.0], higher_is_better=True,
                         preconditions=[(True, "ok"), (False, "nope not learned in distribution (IID 0.12)")])
    assert gated.verdict == "untested" and gated.reason.startswith("nope not learned")
    single = decide_claim([1.0], [2.0], higher_is_better=True)
    assert single.verdict == "untested" and "fewer than 2" in single.reason
    assert untested_claim("x", "metric unlike the paper's").verdict == "untested"


def test_every_verdict_in_vocabulary_and_row_is_complete():
    row = decide_claim([1.0, 2.0, 3.0], [1.0, 2.0, 2.5], higher_is_better=True, name="c").as_row()
    assert row["verdict"] in VERDICTS
    for key in ("a", "b", "difference", "test", "verdict", "reason", "paired", "alpha"):
        assert key in row
    for side in ("a", "b"):
        assert {"mean", "low", "high", "n", "n_nonfinite", "method", "values"} <= set(row[side])


@pytest.mark.parametrize("kwargs, match", [
    (dict(kind="tie"), "kind must be one of"),
    (dict(kind="equivalence"), "needs margin > 0"),
    (dict(kind="noninferiority", margin=-1.0), "needs margin > 0"),
    (dict(margin=0.1), "margin is for equivalence"),
    (dict(alpha=0.7), "alpha must be in"),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        decide_claim([1.0, 2.0], [1.0, 2.0], higher_is_better=True, **kwargs)


def test_bad_values():
    with pytest.raises(TypeError, match="numbers or None"):
        summarize(["a"])
    with pytest.raises(ValueError, match="confidence"):
        summarize([1.0], confidence=1.5)
    with pytest.raises(ValueError, match="bounds"):
        summarize([1.0], bounds=(1.0, 0.0))


def test_claims_table_prints_both_sides_the_difference_and_the_verdict():
    from pe_toolkit.bench.verdict import claims_table

    decided = decide_claim([0.91, 0.93, 0.92], [0.85, 0.86, 0.88], higher_is_better=True, bounds=(0.0, 1.0),
                           name="rope beats ape").as_row()
    untested = untested_claim("x beats y", "y not learned", [0.5], [0.2]).as_row()
    text = claims_table([{**decided, "note": "n1"}, untested], extra=[("note", "note")])
    lines = text.splitlines()
    assert lines[0] == ("| claim | note | a (favoured) | b (baseline) | a - b, paper's direction [95 %] | test | "
                        "verdict |")
    d = decided["difference"]
    assert lines[2].startswith(f"| rope beats ape | n1 | 0.920 [{decided['a']['low']:.3f}, "
                               f"{decided['a']['high']:.3f}] (n=3) | 0.863 [")
    assert f"| +0.057 [{d['low']:+.3f}, {d['high']:+.3f}] | Welch t (two-sided, alpha 0.05) | **reproduced** (" \
        in lines[2]
    assert lines[3] == "| x beats y | n/a | 0.500 (n=1) | 0.200 (n=1) | - | none | **untested** (y not learned) |"


def test_claim_row_keeps_the_claim_kind_beside_the_row_kind():
    from pe_toolkit.bench.verdict import claim_row

    claim = decide_claim([1.0, 1.1, 0.9], [1.0, 1.05, 0.95], kind="equivalence", margin=0.5, higher_is_better=True)
    row = claim_row(claim, task="copy")
    assert row["kind"] == "claim" and row["claim_kind"] == "equivalence" and row["task"] == "copy"
    assert row["margin"] == 0.5 and row["a"]["n"] == 3 and row["verdict"] == claim.verdict
