"""Rotary position embedding (RoPE) and xPos, applied to queries and keys through ``rotate``.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", arXiv:2104.09864.
Sun et al. 2022, "A Length-Extrapolatable Transformer" (xPos), arXiv:2212.10554.

Two layouts pair the rotated dimensions differently::

    half-split (interleaved=False, HF Llama / GPT-NeoX):  pairs (i, i + d/2)
        x = [x0 x1 x2 x3 | x4 x5 x6 x7]   ->  (x0,x4) (x1,x5) (x2,x6) (x3,x7)
    interleaved (interleaved=True, GPT-J / Meta Llama / rotary-embedding-torch): pairs (2i, 2i+1)
        x = [x0 x1 | x2 x3 | x4 x5 | x6 x7] ->  (x0,x1) (x2,x3) (x4,x5) (x6,x7)

Pair ``k`` rotates by ``t * theta_k`` with ``theta_k = base ** (-2k / d_rot)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from pe_toolkit.encoders.base import PositionalEncoding, check_float
from pe_toolkit.registry import register_encoder

XPOS_GAMMA = 0.4
# xPos multiplies keys by zeta ** (-t / scale_base); keep that factor below exp(85) ~ 8e36 so it and
# its inverse stay normal float32 / bfloat16 numbers.
XPOS_MAX_LOG_SCALE = 85.0


def rope_inverse_frequencies(rotary_dim: int, base: float = 10_000.0) -> Tensor:
    """``theta_k = base ** (-2k / rotary_dim)`` for ``k = 0 .. rotary_dim/2 - 1``, float64."""
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def xpos_decay(rotary_dim: int, gamma: float = XPOS_GAMMA) -> Tensor:
    """xPos per-pair decay ``zeta_k = (2k / d + gamma) / (1 + gamma)``, float64 ``(rotary_dim/2,)``."""
    return (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim + gamma) / (1 + gamma)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, *, interleaved: bool = False) -> Tensor:
    """Rotate the last dim of ``x`` by the angles whose cos / sin are given (one per pair).

    Args:
        x: ``(..., L, d_rot)``.
        cos: ``(L, d_rot/2)`` or broadcastable to ``(..., L, d_rot/2)``, same dtype as ``x``.
        sin: same shape and dtype as ``cos``.
        interleaved: pair layout, see the module docstring.
    Returns:
        ``(..., L, d_rot)``: ``(x1 cos - x2 sin, x2 cos + x1 sin)`` per pair ``(x1, x2)``.
    """
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).flatten(-2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((torch.addcmul(x1 * cos, x2, sin, value=-1), torch.addcmul(x2 * cos, x1, sin)), dim=-1)


@register_encoder(
    "rope",
    relative=True,
    reference="Su et al. 2021, RoFormer: Enhanced Transformer with Rotary Position Embedding, arXiv:2104.09864",
)
class RotaryEncoding(PositionalEncoding):
    """RoPE: rotate query/key dimension pairs by ``position * theta_k`` so ``q_i . k_j`` depends on ``i - j``.

    Options:
        base: frequency base (10,000).
        rotary_fraction: fraction of each head's dims that are rotated (partial RoPE; the first
            ``int(fraction * head_dim)`` dims, which must be even). Kazemnejad et al. 2023 rotate 25 %.
        interleaved: pair layout (False = half-split as in HF Llama; True = adjacent pairs).
        xpos: multiply queries by ``zeta ** (i / xpos_scale_base)`` and keys by its inverse
            (Sun et al. 2022); needs ``causal=True``. Positions are limited to
            ``xpos_max_position`` so the key factor stays finite in float32 / bfloat16.
        xpos_scale_base: the ``B`` of xPos (512).

    Precision: angles are computed in float64 and cached as float32 cos/sin (float64 for float64
    inputs); half-precision queries are rotated in float32 and cast back, so a bfloat16 query at
    position 10,000 matches a float64 reference to bfloat16 rounding.

    Shapes: q ``(B, H, Lq, hd)``, k ``(B, Hkv, Lk, hd)``, positions ``(L,)`` or ``(B, L)``.

    Raises:
        ValueError: odd rotary dim, fraction outside (0, 1], xpos without causal, positions past
            ``xpos_max_position``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        base: float = 10_000.0,
        rotary_fraction: float = 1.0,
        interleaved: bool = False,
        xpos: bool = False,
        xpos_scale_base: float = 512.0,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.base = check_float("base", base)
        fraction = check_float("rotary_fraction", rotary_fraction)
        if fraction > 1.0:
            raise ValueError(f"rope: rotary_fraction must be in (0, 1], got {fraction}")
        self.rotary_dim = int(fraction * self.head_dim)
        if self.rotary_dim < 2 or self.rotary_dim % 2:
            raise ValueError(
                f"rope: the rotated dims int(rotary_fraction * head_dim) = int({fraction} * {self.head_dim}) "
                f"= {self.rotary_dim} must be even and >= 2 (head_dim must be even for full RoPE)"
            )
        if not isinstance(interleaved, bool) or not isinstance(xpos, bool):
            raise TypeError("rope: interleaved and xpos must be bools")
        if xpos and not causal:
            raise ValueError("rope: xpos=True needs causal=True (its decay assumes keys precede queries)")
        self.interleaved = interleaved
        self.xpos = xpos
        self.xpos_scale_base = check_float("xpos_scale_base", xpos_scale_base)
        zeta = xpos_decay(self.rotary_dim)
        self.xpos_max_position = int(XPOS_MAX_LOG_SCALE * self.xpos_scale_base / -math.log(zeta.min().item()))
        self.register_buffer("inv_freq", self.compute_inverse_frequencies(), persistent=False)
        self.register_buffer("xpos_zeta", zeta, persistent=False)
        self.register_buffer("cos_cached", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self.register_buffer("sin_cached", torch.empty(0, self.rotary_dim // 2), persistent=False)

    # ---------------------------------------------------------------------- frequencies & cache
    def compute_inverse_frequencies(self) -> Tensor:
        """``(rotary_dim/2,)`` float64 inverse frequencies; scaled variants override this."""
        return rope_inverse_frequencies(self.rotary_dim, self.base)

    def angles(self, positions: Tensor) -> Tensor:
        """``positions[..., None] * theta`` in float64: ``(..., rotary_dim/2)``."""
        return positions.to(torch.float64).unsqueeze(-1) * self.inv_freq.to(torch.float64)

    def _grow_cache(self, length: int) -> None:
        size = max(1024, 1 << (length - 1).bit_length())
        angles = self.angles(torch.arange(size, device=self.inv_freq.device))
        self.cos_cached = angles.cos().float()
        self.sin_cached = angles.sin().float()

    def cos_sin(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles, ``(..., rotary_dim/2)`` in ``dtype`` (float32/64).

        Non-negative integer positions are read from the float32 cache (grown on demand, never
        truncated); float positions, negative positions and float64 requests are computed directly.
        """
        if dtype == torch.float32 and not positions.is_floating_point() and positions.numel():
            lo, hi = int(positions.min()), int(positions.max())
            if lo >= 0:
                if hi >= self.cos_cached.shape[0]:
                    self._grow_cache(hi + 1)
                return self.cos_cached[positions], self.sin_cached[positions]
        angles = self.angles(positions)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def _apply(self, fn: Callable, recurse: bool = True):
        # .half() / .bfloat16() must not round the frequency tables (a classic RoPE bug).
        result = super()._apply(fn, recurse)
        self.inv_freq = self.compute_inverse_frequencies().to(self.inv_freq.device)
        self.xpos_zeta = xpos_decay(self.rotary_dim).to(self.inv_freq.device)
        self.cos_cached = torch.empty(0, self.rotary_dim // 2, device=self.inv_freq.device)
        self.sin_cached = torch.empty(0, self.rotary_dim // 2, device=self.inv_freq.device)
        return result

    # ---------------------------------------------------------------------------------- hook
    def _xpos_scale(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        if positions.numel() and positions.abs().max() > self.xpos_max_position:
            raise ValueError(
                f"rope: xpos supports |position| <= xpos_max_position={self.xpos_max_position} "
                f"(xpos_scale_base={self.xpos_scale_base}), got {positions.abs().max().item()}"
            )
        power = positions.to(torch.float64).unsqueeze(-1) / self.xpos_scale_base
        return (self.xpos_zeta.to(torch.float64) ** power).to(dtype)

    def rotate_one(self, x: Tensor, positions: Tensor, *, inverse_xpos: bool = False) -> Tensor:
        """Rotate one tensor ``(B, H, L, hd)`` at ``positions`` ``(L,)`` or ``(B, L)``."""
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        cos, sin = self.cos_sin(positions, compute)
        if self.xpos:
            scale = self._xpos_scale(positions, compute)
            scale = scale.reciprocal() if inverse_xpos else scale
            cos, sin = cos * scale, sin * scale
        if positions.dim() == 2:  # per-batch positions: (B, L, d/2) -> (B, 1, L, d/2)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        rd = self.rotary_dim
        x_rot = x[..., :rd] if rd < x.shape[-1] else x
        out = apply_rope(x_rot.to(compute), cos, sin, interleaved=self.interleaved).to(x.dtype)
        return out if rd == x.shape[-1] else torch.cat((out, x[..., rd:]), dim=-1)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return self.rotate_one(q, q_pos), self.rotate_one(k, k_pos, inverse_xpos=True)

    def extra_repr(self) -> str:
        return (
            super().extra_repr()
            + f", base={self.base}, rotary_dim={self.rotary_dim}, interleaved={self.interleaved}, xpos={self.xpos}"
        )
