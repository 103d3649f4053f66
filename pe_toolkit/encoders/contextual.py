"""Contextual position encoding (CoPE): positions that count what the context gates in.

Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count What's Important",
arXiv:2405.18719 (official code: facebookresearch/RAM, projects/cope).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionalEncoding, check_int
from pe_toolkit.registry import register_encoder


def cope_positions(q: Tensor, k: Tensor, visible: Tensor) -> Tensor:
    """CoPE's contextual positions ``p_ij = sum_{t=j..i} sigmoid(q_i . k_t / sqrt(d))``.

    Args:
        q: ``(B, H, Lq, d)``; k: ``(B, H, Lk, d)``.
        visible: bool ``(Lq, Lk)`` (or broadcastable), False where a key is masked.
    Returns:
        ``(B, H, Lq, Lk)`` float positions (zero where not visible).
    """
    gates = torch.sigmoid((q / math.sqrt(q.shape[-1])) @ k.transpose(-1, -2)) * visible
    return _ReverseCumsum.apply(gates)


class _ReverseCumsum(torch.autograd.Function):
    """``y_j = sum_{t >= j} x_t`` over the last dim; its gradient is the forward cumsum.

    Autograd of ``flip(cumsum(flip(x)))`` would flip the ``(Lq, Lk)`` gradient four more times.
    """

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        return x.flip(-1).cumsum(-1).flip(-1)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return grad.cumsum(-1)


def position_visibility(q_pos: Tensor, k_pos: Tensor) -> Tensor:
    """Bool ``(1 or B, 1, Lq, Lk)``: key ``j`` counts for query ``i`` iff ``k_pos[j] <= q_pos[i]``.

    Equal to the causal mask for increasing positions, and independent of how the queries are cut
    into blocks or cached.
    """
    visible = k_pos.unsqueeze(-2) <= q_pos.unsqueeze(-1)
    return visible.unsqueeze(-3) if visible.dim() == 3 else visible[None, None]


def interpolate_position_logits(position_logits: Tensor, positions: Tensor) -> Tensor:
    """Read ``z[p]`` at fractional ``p`` by linear interpolation between floor and ceil.

    Computed as ``z[floor p] + (p - floor p) * (z[floor p + 1] - z[floor p])`` with the differences
    taken on the small ``(..., npos)`` tensor, so the ``(Lq, Lk)``-sized work is one index and two
    gathers. At an integer ``p`` this is ``z[p]``, as interpolating between floor and ceil (the
    derivative in ``p`` there is the right-hand one, ``z[p + 1] - z[p]``; elsewhere both agree).

    Args:
        position_logits: ``(B, H, Lq, npos)``, ``z_i[p] = q_i . e[p]`` for integer ``p``.
        positions: ``(B, H, Lq, Lk)`` in ``[0, npos - 1]``.
    Returns:
        ``(B, H, Lq, Lk)``.
    """
    floor = positions.floor()
    index = floor.long()
    # z[p + 1] - z[p]; the last entry is 0 (p = npos - 1 has weight 0 anyway)
    step = torch.nn.functional.pad(position_logits.diff(dim=-1), (0, 1))
    return position_logits.gather(-1, index) + (positions - floor) * step.gather(-1, index)


@register_encoder(
    "cope",
    relative=False,  # positions depend on content, not only on i - j
    reference="Golovneva et al. 2024, Contextual Position Encoding: Learning to Count What's "
    "Important, arXiv:2405.18719",
)
class CoPE(PositionalEncoding):
    """CoPE: gates ``g_ij = sigmoid(q_i.k_j / sqrt(d))``, positions ``p_ij = sum_{t=j..i} g_it``.

    Positions are clamped to ``npos_max - 1``; the bias is ``z_i[p_ij] / sqrt(d)`` with
    ``z_i[p] = q_i . e[p]`` interpolated between ``floor(p)`` and ``ceil(p)`` (interpolating logits,
    not vectors, as the paper does). The embeddings ``e`` ``(npos_max, head_dim)`` are shared by all
    heads of a layer and start at zero, so CoPE starts as NoPE.

    Options:
        npos_max: number of position embeddings (64).

    Gates and positions are computed in float32 (float64 for float64 inputs). Causal only
    (positions count the keys between ``j`` and ``i``): a key counts for a query when its position is
    not after the query's and the attention lets the query see it (``visible``: padding, packed
    documents), so blocks of queries, KV-cache steps and packed documents give the same positions. For
    grouped-query attention the keys are repeated to the query heads.
    """

    def __init__(self, dim: int, num_heads: int, *, npos_max: int = 64, causal: bool = True) -> None:
        super().__init__(dim, num_heads, causal=causal)
        if not causal:
            raise ValueError("cope: needs causal=True (contextual positions count keys up to the query)")
        self.npos_max = check_int("npos_max", npos_max, minimum=2)
        self.pos_emb = nn.Parameter(torch.zeros(self.npos_max, self.head_dim))

    bias_uses_visibility = True  # gates count only keys the query can attend (packed documents, padding)
    causal_only = True  # positions count the keys from j up to the query i

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, visible: Tensor | None = None) -> Tensor:
        """``(B, H, Lq, Lk)``; a key counts when its position is not after the query's and it is ``visible``."""
        if k.shape[1] != q.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        # half-precision cumulative sums drift by whole positions: count in float32
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        q, k = q.to(compute), k.to(compute)
        counted = position_visibility(q_pos, k_pos)
        if visible is not None:
            counted = counted & visible
        positions = cope_positions(q, k, counted).clamp(max=self.npos_max - 1)
        # z / sqrt(d) on the small (B, H, Lq, npos) tensor, not on the (Lq, Lk) bias
        position_logits = q @ (self.pos_emb.to(compute).transpose(0, 1) / math.sqrt(q.shape[-1]))
        return interpolate_position_logits(position_logits, positions)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", npos_max={self.npos_max}"
