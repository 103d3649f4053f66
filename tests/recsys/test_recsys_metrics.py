"""Full-ranking HR@K / NDCG@K / MRR on hand-computed rankings: exclusion, ties, K beyond the candidates."""

from __future__ import annotations

import math

import pytest
import torch
from torchmetrics.functional.retrieval import (
    retrieval_hit_rate,
    retrieval_normalized_dcg,
    retrieval_reciprocal_rank,
)

from pe_toolkit.domains.recsys import ranking_metrics, target_rank_counts
from pe_toolkit.domains.recsys.lightning_module import FullRankingMetrics


def metrics(scores, target, exclude=None, **kw):
    out = ranking_metrics(torch.tensor([scores], dtype=torch.float64), torch.tensor([target]),
                          None if exclude is None else torch.tensor([exclude]), **kw)
    return {k: float(v[0]) for k, v in out.items()}


def test_hand_computed_rank_with_exclusion():
    # items 0..5; target 3 scores 0.5; items 1 (0.9) and 4 (0.7) beat it, but item 1 is in the history
    scores = [-1.0, 0.9, 0.1, 0.5, 0.7, 0.2]
    exclude = [True, True, False, False, False, False]
    m = metrics(scores, 3, exclude, ks=(1, 2, 3))
    # rank 2 among candidates {2, 3, 4, 5}
    assert m["hr@1"] == 0.0 and m["hr@2"] == 1.0 and m["hr@3"] == 1.0
    assert m["ndcg@1"] == 0.0 and m["ndcg@2"] == pytest.approx(1 / math.log2(3))
    assert m["mrr"] == pytest.approx(0.5)
    assert [int(t) for t in target_rank_counts(torch.tensor([scores]), torch.tensor([3]),
                                               torch.tensor([exclude]))] == [1, 0, 4]


def test_target_in_history_stays_a_candidate():
    scores, exclude = [0.0, 0.3, 0.8, 0.1], [True, False, True, False]
    assert metrics(scores, 2, exclude, ks=(1,))["hr@1"] == 1.0  # item 2 is excluded as history, not as target
    assert metrics(scores, 1, exclude, ks=(1,))["hr@1"] == 1.0  # only item 3 (0.1) competes


def test_tie_policies():
    # target 0 ties with two other candidates, one candidate is strictly better: g = 1, e = 2
    scores = [0.4, 0.9, 0.4, 0.4, 0.1]
    pess = metrics(scores, 0, ks=(2, 3), ties="pessimistic")
    opt = metrics(scores, 0, ks=(2, 3), ties="optimistic")
    exp = metrics(scores, 0, ks=(2, 3), ties="expected")
    assert pess["mrr"] == pytest.approx(1 / 4) and pess["hr@3"] == 0.0
    assert opt["mrr"] == pytest.approx(1 / 2) and opt["hr@2"] == 1.0
    # expected: rank uniform on {2, 3, 4}
    assert exp["mrr"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert exp["hr@2"] == pytest.approx(1 / 3) and exp["hr@3"] == pytest.approx(2 / 3)
    assert exp["ndcg@3"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(4)) / 3)
    # constant scores: pessimistic gives the last rank, expected the middle
    flat = [1.0] * 10
    assert metrics(flat, 4, ks=(10,), ties="pessimistic")["mrr"] == pytest.approx(0.1)
    assert metrics(flat, 4, ks=(5,), ties="expected")["hr@5"] == pytest.approx(0.5)


def test_excluded_items_do_not_tie():
    scores, exclude = [0.5, 0.5, 0.5], [False, True, True]
    assert metrics(scores, 0, exclude, ks=(1,))["hr@1"] == 1.0


def test_k_larger_than_the_candidates():
    scores, exclude = [0.1, 0.9, 0.5, 0.7], [False, False, True, True]  # candidates {0, 1}
    m = metrics(scores, 0, exclude, ks=(1, 50))
    assert m["hr@1"] == 0.0 and m["hr@50"] == 1.0
    assert m["ndcg@50"] == pytest.approx(1 / math.log2(3))


def test_agrees_with_torchmetrics_without_ties():
    scores = torch.randn(6, 30, dtype=torch.float64)
    target = torch.randint(0, 30, (6,))
    ours = ranking_metrics(scores, target, ks=(5, 10))
    for b in range(6):
        relevant = torch.zeros(30, dtype=torch.bool)
        relevant[target[b]] = True
        assert float(ours["hr@5"][b]) == pytest.approx(float(retrieval_hit_rate(scores[b], relevant, top_k=5)))
        assert float(ours["ndcg@10"][b]) == pytest.approx(
            float(retrieval_normalized_dcg(scores[b], relevant, top_k=10)))
        # MRR against the position in a full sort (torchmetrics' reciprocal rank returns 0 for some deep
        # ranks in this version)
        position = int((scores[b].argsort(descending=True) == target[b]).nonzero()) + 1
        assert float(ours["mrr"][b]) == pytest.approx(1 / position)
        if position <= 10:
            assert float(ours["mrr"][b]) == pytest.approx(float(retrieval_reciprocal_rank(scores[b], relevant)))


def test_epoch_metric_averages_over_users():
    metric = FullRankingMetrics(ks=(1,), ties="pessimistic")
    metric.update(torch.tensor([[0.0, 1.0, 0.5]]), torch.tensor([1]))  # rank 1
    metric.update(torch.tensor([[0.0, 1.0, 0.5], [0.9, 0.1, 0.2]]), torch.tensor([2, 1]))  # ranks 2, 3
    out = metric.compute()
    assert float(out["hr@1"]) == pytest.approx(1 / 3)
    assert float(out["mrr"]) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    metric.reset()
    with pytest.warns(UserWarning, match="before the ``update``"):
        assert math.isnan(float(metric.compute()["mrr"]))


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"scores": torch.zeros(3, dtype=torch.long)}, TypeError, "scores must be a float tensor"),
        ({"target": torch.tensor([0.0, 1.0])}, TypeError, "target must be an integer tensor"),
        ({"target": torch.tensor([0])}, ValueError, r"target must have shape \(2,\)"),
        ({"target": torch.tensor([0, 4])}, ValueError, r"target items must lie in \[0, 4\), got \[0, 4\]"),
        ({"scores": torch.tensor([[0.0, float("nan"), 0, 0], [0, 0, 0, 0]])}, ValueError, "NaN"),
        ({"exclude": torch.zeros(2, 4)}, TypeError, "exclude must be a bool tensor"),
        ({"exclude": torch.zeros(2, 3, dtype=torch.bool)}, ValueError, r"exclude must have shape \(2, 4\)"),
        ({"ks": (0,)}, ValueError, "ks must hold ints >= 1"),
        ({"ks": 10}, TypeError, "ks must be a non-empty list or tuple"),
        ({"ties": "random"}, ValueError, "ties must be one of"),
    ],
)
def test_bad_input(kwargs, error, match):
    args = {"scores": torch.zeros(2, 4), "target": torch.tensor([0, 1]), "exclude": None, **kwargs}
    extra = {k: args.pop(k) for k in ("ks", "ties") if k in args}
    with pytest.raises(error, match=match):
        ranking_metrics(args["scores"], args["target"], args["exclude"], **extra)
