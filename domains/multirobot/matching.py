"""Partial assignment between two observation graphs: log-space Sinkhorn with a dustbin, match extraction,
the assignment loss and the shared overlap decision rule.

Sarlin et al. 2020, "SuperGlue: Learning Feature Matching with Graph Neural Networks", arXiv:1911.11763
(Sec. 3.2: the score matrix is augmented with a dustbin row and column filled with a learned score
``alpha``; Sinkhorn iterations in log space solve the optimal-transport problem with marginals
``a = [1_M, N]`` and ``b = [1_N, M]``; the loss is the negative log-likelihood of the ground-truth
partial assignment). NOPE (Huang et al. 2025, arXiv:2506.14180) decides "no overlap" when the assignment
is empty; :func:`decide_overlap` generalises this to "fewer than ``min_matches`` correspondences".

Batches are padded: ``mask_a (B, M)`` / ``mask_b (B, N)`` mark real nodes. Padded rows and columns get
zero marginal (log ``-inf``), so each sample is solved exactly as if it stood alone, with its own
``M = mask_a.sum()`` and ``N = mask_b.sum()``.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from pe_toolkit.encoders.base import check_choice, check_float, check_int

__all__ = ["assignment_loss", "decide_overlap", "extract_matches", "log_sinkhorn_dustbin"]


def _masks(scores: Tensor, mask_a: Tensor | None, mask_b: Tensor | None) -> tuple[Tensor, Tensor]:
    b, m, n = scores.shape
    mask_a = torch.ones(b, m, dtype=torch.bool, device=scores.device) if mask_a is None else mask_a
    mask_b = torch.ones(b, n, dtype=torch.bool, device=scores.device) if mask_b is None else mask_b
    for name, mask, shape in (("mask_a", mask_a, (b, m)), ("mask_b", mask_b, (b, n))):
        if mask.dtype != torch.bool or tuple(mask.shape) != shape:
            raise ValueError(f"{name} must be a bool tensor of shape {shape}, got {mask.dtype} {tuple(mask.shape)}")
    return mask_a, mask_b


def log_sinkhorn_dustbin(scores: Tensor, alpha: Tensor, *, iterations: int = 50, mask_a: Tensor | None = None,
                         mask_b: Tensor | None = None) -> Tensor:
    """Log of the soft partial assignment with dustbins, ``(B, M + 1, N + 1)`` (SuperGlue Sec. 3.2).

    With ``P = exp(result)``, for each sample with ``m`` real rows and ``n`` real columns (after enough
    iterations): every real row of ``P`` sums to 1, every real column sums to 1, the dustbin row sums to
    ``n`` and the dustbin column to ``m``; padded rows and columns are 0 (log ``-inf``). A sample with
    no node on either side puts its whole mass 1 on the dustbin-dustbin cell.

    Args:
        scores: ``(B, M, N)`` similarity scores.
        alpha: scalar tensor, the dustbin score (learned).
        iterations: Sinkhorn iterations (>= 1).
        mask_a, mask_b: bool ``(B, M)`` / ``(B, N)``, True for real nodes (default: all real).
    """
    if scores.dim() != 3:
        raise ValueError(f"scores must have shape (B, M, N), got {tuple(scores.shape)}")
    check_int("iterations", iterations)
    if alpha.numel() != 1:
        raise ValueError(f"alpha must be a scalar tensor, got shape {tuple(alpha.shape)}")
    mask_a, mask_b = _masks(scores, mask_a, mask_b)
    b, m, n = scores.shape
    dtype = scores.dtype
    alpha = alpha.to(dtype).reshape(1, 1, 1)
    couplings = torch.cat([
        torch.cat([scores, alpha.expand(b, m, 1)], dim=-1),
        torch.cat([alpha.expand(b, 1, n), alpha.expand(b, 1, 1)], dim=-1),
    ], dim=1)  # (B, M+1, N+1)
    rows, cols = mask_a.sum(1).to(dtype), mask_b.sum(1).to(dtype)  # m, n per sample
    empty = (rows + cols) == 0
    norm = -(rows + cols).clamp_min(1).log()  # (B,)
    neg_inf = torch.tensor(float("-inf"), dtype=dtype, device=scores.device)
    log_mu = torch.cat([
        torch.where(mask_a, norm[:, None], neg_inf),
        torch.where(empty, 0.0, cols.log() + norm)[:, None],
    ], dim=1)  # (B, M+1)
    log_nu = torch.cat([
        torch.where(mask_b, norm[:, None], neg_inf),
        torch.where(empty, 0.0, rows.log() + norm)[:, None],
    ], dim=1)  # (B, N+1)
    u, v = torch.zeros_like(log_mu), torch.zeros_like(log_nu)
    for _ in range(iterations):
        u = log_mu - torch.logsumexp(couplings + v[:, None, :], dim=2)
        v = log_nu - torch.logsumexp(couplings + u[:, :, None], dim=1)
    total = torch.where(empty, 0.0, norm)
    return couplings + u[:, :, None] + v[:, None, :] - total[:, None, None]


def assignment_loss(log_assignment: Tensor, match_a: Tensor, mask_a: Tensor, match_b: Tensor, mask_b: Tensor) -> Tensor:
    """SuperGlue's negative log-likelihood of the ground-truth partial assignment, averaged per sample.

    ``-( sum_{(i,j) matched} log P_ij + sum_{i unmatched} log P_{i,N} + sum_{j unmatched} log P_{M,j} )``
    divided by the sample's number of terms, then averaged over the batch. A non-overlapping pair has
    every node in a dustbin.

    Args:
        log_assignment: ``(B, M + 1, N + 1)`` from :func:`log_sinkhorn_dustbin`.
        match_a: long ``(B, M)``: the index in b of node i's match, or -1.
        match_b: long ``(B, N)``: the index in a of node j's match, or -1.
        mask_a, mask_b: bool real-node masks.
    """
    b, m1, n1 = log_assignment.shape
    m, n = m1 - 1, n1 - 1
    if tuple(match_a.shape) != (b, m) or tuple(match_b.shape) != (b, n):
        raise ValueError(f"match_a / match_b must have shapes ({b}, {m}) / ({b}, {n}), got "
                         f"{tuple(match_a.shape)} / {tuple(match_b.shape)}")
    target_a = torch.where(match_a >= 0, match_a, n)  # column of each row: its match or the dustbin
    rows = log_assignment[:, :m, :].gather(2, target_a.clamp(0, n).unsqueeze(-1)).squeeze(-1)  # (B, M)
    row_terms = torch.where(mask_a, rows, 0.0).sum(1)
    unmatched_b = mask_b & (match_b < 0)
    col_terms = torch.where(unmatched_b, log_assignment[:, m, :n], 0.0).sum(1)
    count = (mask_a.sum(1) + unmatched_b.sum(1)).clamp_min(1)
    return (-(row_terms + col_terms) / count).mean()


def extract_matches(log_assignment: Tensor, *, threshold: float = 0.2, method: str = "mutual",
                    mask_a: Tensor | None = None, mask_b: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Hard correspondences from a soft assignment.

    * ``method="mutual"`` (SuperGlue): ``i -> j`` when ``j = argmax_j P_ij`` and ``i = argmax_i P_ij``
      (mutual best over the real part) and ``P_ij > threshold``.
    * ``method="hungarian"`` (NOPE's high level): a one-to-one assignment maximising ``sum P_ij``
      (``scipy.optimize.linear_sum_assignment`` per sample), keeping pairs with ``P_ij > threshold``.

    Returns:
        ``match_a`` long ``(B, M)`` (index in b or -1) and ``score_a`` ``(B, M)`` (``P_ij``, 0 if unmatched).
    """
    check_choice("method", method, ("mutual", "hungarian"))
    threshold = check_float("threshold", threshold, positive=False, minimum=0.0)
    prob = log_assignment[:, :-1, :-1].exp()
    mask_a, mask_b = _masks(prob, mask_a, mask_b)
    prob = prob * (mask_a[:, :, None] & mask_b[:, None, :])
    b, m, n = prob.shape
    if m == 0 or n == 0:
        return torch.full((b, m), -1, dtype=torch.long, device=prob.device), torch.zeros(b, m, dtype=prob.dtype)
    if method == "mutual":
        best_a, index_a = prob.max(2)  # (B, M)
        _, index_b = prob.max(1)  # (B, N)
        mutual = index_b.gather(1, index_a) == torch.arange(m, device=prob.device)
        keep = mutual & (best_a > threshold) & mask_a
        return torch.where(keep, index_a, -1), torch.where(keep, best_a, 0.0)
    match = np.full((b, m), -1, dtype=np.int64)
    score = np.zeros((b, m))
    p = prob.detach().cpu().double().numpy()
    for s in range(b):  # scipy's solver works on one matrix at a time
        rows, cols = linear_sum_assignment(p[s], maximize=True)
        keep = p[s, rows, cols] > threshold
        match[s, rows[keep]] = cols[keep]
        score[s, rows[keep]] = p[s, rows[keep], cols[keep]]
    return torch.from_numpy(match).to(prob.device), torch.from_numpy(score).to(prob)


def decide_overlap(num_matches, min_matches: int = 3):
    """The overlap decision shared by NOPE and the classical baseline: at least ``min_matches`` accepted
    correspondences (NOPE's rule "an empty assignment means no overlap" is ``min_matches=1``)."""
    check_int("min_matches", min_matches)
    return num_matches >= min_matches
