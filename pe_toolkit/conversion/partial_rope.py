"""Partial-RoPE dimension selection for MHA -> MLA conversion (Ji et al. 2025, MHA2MLA).

Ji et al. 2025, "Towards Economical Inference: Enabling DeepSeek's Multi-Head Latent Attention in
Any Transformer-based LLMs", arXiv:2502.14837, Section 3.1. Of the ``P = rotary_dim / 2`` frequency
pairs of every key head, ``keep`` stay rotated (they become MLA's decoupled rope key); the others lose
their rotation and join the low-rank latent. Four strategies choose the kept pairs:

* ``"high"`` (``S_high``): the highest frequencies, pairs ``k in [0, keep)``;
* ``"low"`` (``S_low``): the lowest frequencies, pairs ``k in [P - keep, P)``;
* ``"uniform"`` (``S_uniform``): every ``P / keep``-th pair from ``start``;
* ``"2-norm"`` (``S_2-norm``, contribution-aware): per key head, the ``keep`` pairs with the largest
  ``mean_t ||q_t^(k)|| * mean_t ||k_t^(k)||`` on calibration data (query scores summed over the query
  heads sharing that key head under GQA), as the paper's ``2_norm.py``.

Pair ``k`` means the two dims that RoPE rotates together: ``(k, k + P)`` in the half-split layout and
``(2k, 2k + 1)`` in the interleaved one (:func:`pair_dims`); the frequency is ``theta_k`` either way.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pe_toolkit.encoders.base import check_int

PARTIAL_ROPE_STRATEGIES = ("high", "low", "uniform", "2-norm")


def pair_dims(num_pairs: int, interleaved: bool) -> tuple[Tensor, Tensor]:
    """The first and second dim of every rotary pair ``k = 0 .. num_pairs - 1``: two ``(P,)`` long tensors.

    Half-split: ``(k, k + P)``; interleaved: ``(2k, 2k + 1)`` (see :mod:`pe_toolkit.encoders.rotary`).
    """
    k = torch.arange(num_pairs)
    return (2 * k, 2 * k + 1) if interleaved else (k, k + num_pairs)


def pair_norms(x: Tensor, num_pairs: int, interleaved: bool) -> Tensor:
    """The 2-norm of every rotary pair of ``x (..., head_dim)``: ``(..., num_pairs)``.

    Rotation does not change these norms, so rotated and unrotated vectors give the same values.
    """
    first, second = pair_dims(num_pairs, interleaved)
    first, second = first.to(x.device), second.to(x.device)
    return torch.sqrt(x[..., first] ** 2 + x[..., second] ** 2)


def two_norm_scores(query_pair_norms: Tensor, key_pair_norms: Tensor) -> Tensor:
    """MHA2MLA's contribution score per key head and pair, ``(H_kv, P)``.

    Args:
        query_pair_norms: mean pair norms of the queries, ``(H, P)``.
        key_pair_norms: mean pair norms of the keys, ``(H_kv, P)``; ``H_kv`` must divide ``H``.
    Returns:
        ``sum_{h in group g} q_norm[h] * k_norm[g]``: the product bounds pair ``k``'s share of the
        logit ``|q^(k) . k^(k)| <= ||q^(k)|| ||k^(k)||`` (Cauchy-Schwarz).
    """
    heads, pairs = query_pair_norms.shape
    kv_heads = key_pair_norms.shape[0]
    if key_pair_norms.shape[1] != pairs or heads % kv_heads:
        raise ValueError(
            f"query_pair_norms {tuple(query_pair_norms.shape)} and key_pair_norms {tuple(key_pair_norms.shape)} "
            "must be (H, P) and (H_kv, P) with H_kv dividing H"
        )
    group = heads // kv_heads
    return (query_pair_norms.view(kv_heads, group, pairs) * key_pair_norms[:, None, :]).sum(1)


def select_rope_pairs(
    strategy: str,
    num_pairs: int,
    keep: int,
    num_kv_heads: int,
    *,
    scores: Tensor | None = None,
    start: int = 0,
) -> Tensor:
    """Indices of the kept rotary pairs per key head, ``(H_kv, keep)`` long, ascending.

    Args:
        strategy: one of :data:`PARTIAL_ROPE_STRATEGIES`.
        num_pairs: ``P``, the rotary pairs of a head (``rotary_dim / 2``).
        keep: pairs kept rotated per head, ``1 <= keep <= P``.
        num_kv_heads: key heads.
        scores: ``(H_kv, P)`` contribution scores, required by ``"2-norm"`` (:func:`two_norm_scores`).
        start: first pair of ``"uniform"``, ``0 <= start < P // keep``.
    Raises:
        ValueError: unknown strategy, ``keep`` out of range, ``"uniform"`` with ``keep`` not dividing
            ``P`` or ``start`` out of range, ``"2-norm"`` without scores of the right shape.
    """
    if strategy not in PARTIAL_ROPE_STRATEGIES:
        raise ValueError(f"strategy must be one of {PARTIAL_ROPE_STRATEGIES}, got {strategy!r}")
    check_int("num_pairs", num_pairs)
    check_int("keep", keep)
    check_int("num_kv_heads", num_kv_heads)
    if keep > num_pairs:
        raise ValueError(f"keep must be <= num_pairs ({num_pairs}), got {keep}")
    if strategy != "2-norm" and scores is not None:
        raise ValueError(f"scores apply to strategy '2-norm' only, got strategy {strategy!r}")
    if strategy == "high":
        pairs = torch.arange(keep)
    elif strategy == "low":
        pairs = torch.arange(num_pairs - keep, num_pairs)
    elif strategy == "uniform":
        if num_pairs % keep:
            raise ValueError(f"uniform: keep ({keep}) must divide num_pairs ({num_pairs})")
        step = num_pairs // keep
        check_int("start", start, minimum=0)
        if start >= step:
            raise ValueError(f"uniform: start must be in [0, {step}) (the step num_pairs // keep), got {start}")
        pairs = torch.arange(start, num_pairs, step)
    else:
        if scores is None:
            raise ValueError("strategy '2-norm' needs scores (H_kv, num_pairs); see two_norm_scores")
        if tuple(scores.shape) != (num_kv_heads, num_pairs):
            raise ValueError(f"scores must have shape ({num_kv_heads}, {num_pairs}), got {tuple(scores.shape)}")
        if not torch.isfinite(scores).all():
            raise ValueError("scores contain NaN or inf")
        # stable sort: ties go to the lower (higher-frequency) pair
        order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
        return order[:, :keep].sort(dim=-1).values
    return pairs.expand(num_kv_heads, keep).clone()
