"""Perturbation tests of attributions: remove inputs in order of relevance, watch the prediction.

The faithfulness test of the PA-LRP and AttnLRP papers (Bakish et al. 2025, arXiv:2506.02138,
``eval_pert_*.py``; Achtibat et al. 2024): input tokens are replaced by a neutral token in order of
their score, a growing fraction at a time, and the probability of the originally explained class is
recorded. *Most relevant first* (MoRF): a faithful attribution makes the curve fall fast (low area
under the curve). *Least relevant first* (LeRF): the curve should stay high (high area).

Shapes: ``tokens (B, L)``, ``scores (B, L)``, ``removable`` bool ``(B, L)`` (positions that may be
replaced; e.g. the prompt content, not ``<bos>`` or the position being predicted).
"""

from __future__ import annotations

import torch
from torch import Tensor

ORDERS = ("morf", "lerf")


def removal_masks(scores: Tensor, removable: Tensor, fractions: Tensor, order: str = "morf") -> Tensor:
    """Bool ``(F, B, L)``: which positions are replaced at each fraction.

    At fraction ``f`` the ``round(f * n_b)`` removable positions with the highest (``"morf"``) or
    lowest (``"lerf"``) scores are replaced, ``n_b`` being the number of removable positions of example ``b``.
    Ties are broken by position (earlier first), so the order is deterministic.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if scores.shape != removable.shape or scores.dim() != 2:
        raise ValueError(f"scores and removable must both be (B, L), got {tuple(scores.shape)} and "
                         f"{tuple(removable.shape)}")
    if removable.dtype != torch.bool:
        raise TypeError(f"removable must be a bool tensor, got {removable.dtype}")
    if scores.is_floating_point() and not bool(torch.isfinite(scores).all()):
        # NaN would sort as the largest score: removed first under MoRF, with no error
        raise ValueError(f"scores hold NaN or inf ({int((~torch.isfinite(scores)).sum())} of {scores.numel()} "
                         f"entries); an attribution with non-finite scores has no removal order")
    if fractions.dim() != 1 or fractions.numel() == 0 or not bool(((fractions >= 0) & (fractions <= 1)).all()):
        raise ValueError(f"fractions must be a non-empty 1-D tensor in [0, 1], got {fractions.tolist()}")
    key = scores.double() if order == "morf" else -scores.double()
    key = key.masked_fill(~removable, float("-inf"))
    ranking = torch.sort(key, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(ranking)
    rank.scatter_(-1, ranking, torch.arange(scores.shape[1], device=scores.device).expand_as(ranking))
    counts = torch.round(fractions[:, None].double() * removable.sum(-1)[None].double()).long()  # (F, B)
    return (rank[None] < counts[:, :, None]) & removable[None]


@torch.no_grad()
def perturbation_curve(
    model, tokens: Tensor, scores: Tensor, *, target: Tensor, index: Tensor, removable: Tensor,
    replacement: int, fractions: Tensor, order: str = "morf",
) -> Tensor:
    """Probability of ``target`` at output ``index`` after each removal step, ``(F, B)``.

    Args:
        model: maps ``(N, L)`` tokens to logits ``(N, L, V)``.
        target, index: ``(B,)`` the explained class and output position of each example.
        replacement: the token id written into removed positions.
    """
    masks = removal_masks(scores, removable, fractions, order)                   # (F, B, L)
    perturbed = torch.where(masks, torch.full_like(tokens, replacement), tokens[None])
    f, b, seq = perturbed.shape
    logits = model(perturbed.reshape(f * b, seq)).reshape(f, b, seq, -1)
    rows = torch.arange(b, device=tokens.device)
    probs = logits[:, rows, index].softmax(-1)                                     # (F, B, V)
    return probs[:, rows, target]


def area_under_curve(curve: Tensor, fractions: Tensor) -> Tensor:
    """Trapezoidal area of ``curve (F, ...)`` over ``fractions (F,)``, per trailing index.

    Raises:
        ValueError: ``curve`` or ``fractions`` holding NaN or inf (a NaN area would average silently).
    """
    for name, value in (("curve", curve), ("fractions", fractions)):
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{name} holds NaN or inf ({int((~torch.isfinite(value)).sum())} of {value.numel()} "
                             f"entries)")
    return torch.trapezoid(curve, fractions.to(curve.dtype), dim=0)
