"""CAPE: contextual-aware position encoding for sequential recommendation.

Yuan, Cai, Dong 2025, "A Contextual-Aware Position Encoding for Sequential Recommendation", WWW'25
Companion, arXiv:2502.09027 (official code: yjdy/CAPE, ``fuxictr/pytorch/layers/attentions/
position_encoding.py: class CAPE``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionalEncoding, check_int
from pe_toolkit.encoders.contextual import interpolate_position_logits, position_visibility
from pe_toolkit.registry import register_encoder

__all__ = ["CAPE", "cape_positions"]


def cape_positions(logits: Tensor, visible: Tensor) -> Tensor:
    """CAPE's context positions ``p_ij = sum_{t=j..i} (1 - sigmoid(a_it))`` over visible keys ``t``.

    The gate ``1 - sigmoid(a)`` measures *dissimilarity* between the query and a key (CoPE counts
    similarity, ``sigmoid(a)``): a key unlike the query advances the position by up to one.

    Args:
        logits: ``(B, H, Lq, Lk)`` scaled attention logits ``a_ij = q_i . k_j / sqrt(d)``.
        visible: bool, broadcastable to ``logits``; False for keys that do not count (future keys).
    Returns:
        ``(B, H, Lq, Lk)`` float positions (zero where not visible). The sum runs over the visible keys
        from ``j`` to the last key; with causal visibility that is ``j .. i``.
    """
    gates = (1.0 - torch.sigmoid(logits)) * visible
    return gates.flip(-1).cumsum(-1).flip(-1)


@register_encoder(
    "cape",
    relative=False,  # positions depend on content, not only on i - j
    reference="Yuan, Cai, Dong 2025, A Contextual-Aware Position Encoding for Sequential Recommendation, "
    "arXiv:2502.09027",
    domain="recsys",
    example_options={"max_len": 16},
)
class CAPE(PositionalEncoding):
    """CAPE: dissimilarity gates, reverse-cumulative positions, interpolated position logits.

    For query ``i`` and key ``j`` with scaled logits ``a_ij = q_i . k_j / sqrt(d)``:

    1. gates ``g_ij = 1 - sigmoid(a_ij)``;
    2. positions ``p_ij = sum_{t=j..i} g_it``, clamped to ``max_len - 1``;
    3. ``E_ij = (p - floor p) * z_i[ceil p] + (1 - p + floor p) * z_i[floor p]`` with
       ``z_i[m] = phi(q_i) . e[m]``, ``e`` a zero-initialised table ``(max_len, C)`` shared by the heads of
       the layer, and ``phi`` the identity (``C = head_dim``) or, with ``position_dim=C``,
       ``SiLU(Linear(head_dim, C))`` (the official code's ``pre_proj``);
    4. ``E`` is added to the scaled logits before the softmax (no further ``1/sqrt(d)``, unlike CoPE).

    Because ``e`` starts at zero, CAPE starts as NoPE.

    Differences from the official code: there the causal and padding masks are already inside ``a``
    when CAPE reads it, so every masked key gets ``g = 1`` and shifts ``p`` by a per-row constant; here
    only visible keys count (the paper's ``sum_{k=j..i}``). With ``causal=False`` (target attention, as in
    DIN) every key counts and ``p_ij = sum_{t >= j} g_it``. Padding keys are not known to the bias hook:
    left padding (as SASRec uses) leaves every real key's position unchanged, right padding would not.

    Options:
        max_len: number of position embeddings (the official ``max_len``); positions are clamped to
            ``max_len - 1``.
        position_dim: width ``C`` of the position embeddings with the ``SiLU(Linear)`` projection of the
            queries; ``None`` (default) uses the queries as they are.

    Shapes: ``bias(q (B, H, Lq, d), k (B, Hkv, Lk, d), q_pos, k_pos) -> (B, H, Lq, Lk)``. Gates and
    positions are computed in float32 (float64 for float64 inputs).
    """

    def __init__(
        self, dim: int, num_heads: int, *, max_len: int = 64, position_dim: int | None = None, causal: bool = True
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.max_len = check_int("cape: max_len", max_len, minimum=2)
        self.position_dim = None if position_dim is None else check_int("cape: position_dim", position_dim)
        width = self.head_dim if position_dim is None else position_dim
        self.pre_proj = None if position_dim is None else nn.Linear(self.head_dim, position_dim)
        self.pos_emb = nn.Parameter(torch.zeros(self.max_len, width))

    def positions(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The clamped context positions ``p`` ``(B, H, Lq, Lk)`` (for inspection and tests)."""
        if k.shape[1] != q.shape[1]:
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        q, k = q.to(compute), k.to(compute)
        visible = position_visibility(q_pos, k_pos) if self.causal else torch.ones((), dtype=torch.bool)
        logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        return cape_positions(logits, visible.to(q.device)).clamp(max=self.max_len - 1)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        positions = self.positions(q, k, q_pos, k_pos)
        query = q.to(compute)
        if self.pre_proj is not None:
            query = F.silu(F.linear(query, self.pre_proj.weight.to(compute), self.pre_proj.bias.to(compute)))
        position_logits = query @ self.pos_emb.to(compute).transpose(0, 1)  # (B, H, Lq, max_len)
        return interpolate_position_logits(position_logits, positions)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", max_len={self.max_len}, position_dim={self.position_dim}"
