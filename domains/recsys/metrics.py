"""Full-ranking metrics for next-item recommendation: HR@K, NDCG@K and MRR, with an explicit tie policy.

Every item is a candidate (full ranking, as Krichene & Rendle 2020, "On Sampled Metrics for Item
Recommendation", KDD, recommend over sampled negatives) except the *excluded* ones: the padding index 0
and the user's earlier items, the history (SASRec's protocol, Kang & McAuley 2018, arXiv:1808.09781).
The target itself is always a candidate, even when it also occurs in the history.

With ``g`` candidates scoring strictly higher than the target and ``e`` other candidates scoring equal,
the target's rank ``r`` is

* ``"pessimistic"`` (default): ``r = g + e + 1`` (the target loses every tie; a model that scores every
  item alike gets the worst rank, never a lucky one);
* ``"optimistic"``: ``r = g + 1``;
* ``"expected"``: the expectation over a uniformly random order of the tied items, i.e. each metric is
  averaged over ``r`` in ``g + 1 .. g + e + 1``.

Then ``HR@K = [r <= K]``, ``NDCG@K = [r <= K] / log2(r + 1)`` (one relevant item, so the ideal DCG is 1)
and ``MRR = 1 / r`` (no cut-off). ``K`` may exceed the number of candidates ``c``: then ``r <= c <= K``
and ``HR@K = 1``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["TIE_POLICIES", "check_ks", "ranking_metrics", "target_rank_counts"]

TIE_POLICIES = ("pessimistic", "optimistic", "expected")


def check_ks(ks: Sequence[int]) -> tuple[int, ...]:
    if isinstance(ks, int) or not isinstance(ks, (list, tuple)) or not ks:
        raise TypeError(f"ks must be a non-empty list or tuple of ints, got {ks!r}")
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"ks must hold ints >= 1, got {k!r} in {ks!r}")
    return tuple(ks)


def target_rank_counts(scores: Tensor, target: Tensor, exclude: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Counts that fix the target's rank among the candidates.

    Args:
        scores: ``(B, N)`` float scores of every item.
        target: ``(B,)`` long target item per row, in ``[0, N)``.
        exclude: ``(B, N)`` bool, True for items that are not candidates (the target's entry is ignored:
            the target is always a candidate); ``None`` excludes nothing.

    Returns:
        ``(greater, tied, candidates)``, each ``(B,)`` long: candidates scoring strictly higher than the
        target, *other* candidates scoring equal to it, and the number of candidates (target included).

    Raises:
        TypeError / ValueError: wrong dtypes or shapes, targets out of range, NaN scores.
    """
    if not isinstance(scores, Tensor) or not scores.is_floating_point() or scores.dim() != 2:
        raise TypeError(f"scores must be a float tensor of shape (B, N), got {getattr(scores, 'shape', scores)!r}")
    b, n = scores.shape
    if not isinstance(target, Tensor) or target.is_floating_point() or target.dtype == torch.bool:
        raise TypeError(f"target must be an integer tensor of shape ({b},), got {getattr(target, 'dtype', target)!r}")
    if tuple(target.shape) != (b,):
        raise ValueError(f"target must have shape ({b},), got {tuple(target.shape)}")
    if target.numel() and (int(target.min()) < 0 or int(target.max()) >= n):
        raise ValueError(f"target items must lie in [0, {n}), got [{int(target.min())}, {int(target.max())}]")
    if torch.isnan(scores).any():
        raise ValueError("scores contain NaN")
    rows = torch.arange(b, device=scores.device)
    candidate = torch.ones_like(scores, dtype=torch.bool)
    if exclude is not None:
        if not isinstance(exclude, Tensor) or exclude.dtype != torch.bool:
            got = getattr(exclude, "dtype", exclude)
            raise TypeError(f"exclude must be a bool tensor of shape ({b}, {n}), got {got!r}")
        if tuple(exclude.shape) != (b, n):
            raise ValueError(f"exclude must have shape ({b}, {n}), got {tuple(exclude.shape)}")
        candidate = ~exclude
    candidate[rows, target] = True
    target_score = scores[rows, target].unsqueeze(1)
    greater = ((scores > target_score) & candidate).sum(1)
    tied = ((scores == target_score) & candidate).sum(1) - 1
    return greater, tied, candidate.sum(1)


def _prefix(values: Tensor) -> Tensor:
    return torch.cat([values.new_zeros(1), values.cumsum(0)])


def ranking_metrics(
    scores: Tensor,
    target: Tensor,
    exclude: Tensor | None = None,
    *,
    ks: Sequence[int] = (5, 10, 20),
    ties: str = "pessimistic",
) -> dict[str, Tensor]:
    """Per-row ``hr@K``, ``ndcg@K`` (for each ``K`` in ``ks``) and ``mrr``, each ``(B,)`` float64.

    Args:
        scores, target, exclude: see :func:`target_rank_counts`.
        ks: cut-offs (ints >= 1; may exceed the number of candidates).
        ties: one of :data:`TIE_POLICIES` (see the module docstring).
    """
    ks = check_ks(ks)
    if ties not in TIE_POLICIES:
        raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}")
    greater, tied, _ = target_rank_counts(scores, target, exclude)
    if ties == "pessimistic":
        low = high = greater + tied + 1
    elif ties == "optimistic":
        low = high = greater + 1
    else:
        low, high = greater + 1, greater + tied + 1
    n = scores.shape[1]
    ranks = torch.arange(1, n + 1, dtype=torch.float64, device=scores.device)
    width = (high - low + 1).to(torch.float64)

    def mean_over_ranks(prefix: Tensor, cutoff: int) -> Tensor:
        # mean of f(r) * [r <= cutoff] over r in low .. high, from prefix sums F[r] = sum_{s <= r} f(s)
        top = high.clamp(max=cutoff)
        bottom = (low - 1).clamp(max=cutoff)
        return (prefix[top] - prefix[bottom]) / width

    out: dict[str, Tensor] = {}
    hit, gain = _prefix(torch.ones_like(ranks)), _prefix(1.0 / torch.log2(ranks + 1))
    for k in ks:
        out[f"hr@{k}"] = mean_over_ranks(hit, k)
        out[f"ndcg@{k}"] = mean_over_ranks(gain, k)
    out["mrr"] = mean_over_ranks(_prefix(1.0 / ranks), n)
    return out
