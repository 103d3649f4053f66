"""Absolute positional encodings, applied once to the input features through the ``embed`` hook.

* ``sinusoidal`` — Vaswani et al. 2017, "Attention Is All You Need", arXiv:1706.03762.
* ``scaled_sinusoidal`` — sinusoids times a learned scalar gain (Hua et al. 2022, "Transformer
  Quality in Linear Time", arXiv:2202.10447; as in x-transformers' ``ScaledSinusoidalEmbedding``).
* ``learned`` — a learned table of ``max_len`` position vectors (Gehring et al. 2017; GPT-2).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionalEncoding, check_float, check_int, require, takes_bounds
from pe_toolkit.registry import register_encoder


def sinusoidal_table(positions: Tensor, dim: int, base: float = 10_000.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """Sinusoidal position vectors, ``pe[t, 2k] = sin(t w_k)``, ``pe[t, 2k+1] = cos(t w_k)``.

    ``w_k = base ** (-2k / dim)`` (Vaswani et al. 2017, Sec. 3.5). Angles are computed in float64 so
    that large positions keep their precision, then cast to ``dtype``.

    Args:
        positions: integer or float positions, any shape ``(...)``.
        dim: even feature size.
    Returns:
        ``(..., dim)`` tensor in ``dtype``.
    """
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim)
    angles = positions.to(torch.float64).unsqueeze(-1) * inv_freq
    return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2).to(dtype)


def _compute_dtype(x: Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _broadcast_to_features(pe: Tensor, x: Tensor) -> Tensor:
    # pe is (L, dim) or (B, L, dim); x is (B, L, dim)
    return pe if pe.dim() == 3 else pe.unsqueeze(0)


@register_encoder(
    "sinusoidal",
    relative=False,
    reference="Vaswani et al. 2017, Attention Is All You Need, arXiv:1706.03762",
)
class SinusoidalEncoding(PositionalEncoding):
    """Fixed sinusoidal absolute PE added to the input features (Vaswani et al. 2017).

    Options:
        base: wavelength base (default 10,000).

    Shapes: ``embed(x (B, L, dim), positions (L,) | (B, L)) -> (B, L, dim)``; positions may be
    float (interpolation). ``dim`` must be even.
    """

    def __init__(self, dim: int, num_heads: int, *, base: float = 10_000.0, causal: bool = True) -> None:
        super().__init__(dim, num_heads, causal=causal)
        if dim % 2:
            raise ValueError(f"sinusoidal: dim must be even, got {dim}")
        self.base = check_float("base", base)

    def position_table(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        return sinusoidal_table(positions, self.dim, self.base, dtype)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        pe = self.position_table(positions, _compute_dtype(x))
        return (x.to(pe.dtype) + _broadcast_to_features(pe, x)).to(x.dtype)


@register_encoder(
    "scaled_sinusoidal",
    relative=False,
    reference="Hua et al. 2022, Transformer Quality in Linear Time, arXiv:2202.10447",
)
class ScaledSinusoidalEncoding(SinusoidalEncoding):
    """Sinusoidal PE times one learned scalar gain ``g`` (initialised to ``dim ** -0.5``).

    ``embed(x) = x + g * pe(positions)``. Options: ``base`` (10,000), ``init_gain`` (``dim**-0.5``).
    """

    def __init__(
        self, dim: int, num_heads: int, *, base: float = 10_000.0, init_gain: float | None = None,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, base=base, causal=causal)
        gain = dim**-0.5 if init_gain is None else check_float("init_gain", init_gain, positive=False)
        self.gain = nn.Parameter(torch.tensor(float(gain)))

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        pe = self.position_table(positions, _compute_dtype(x))
        return (x.to(pe.dtype) + self.gain.to(pe.dtype) * _broadcast_to_features(pe, x)).to(x.dtype)


@register_encoder(
    "learned",
    relative=False,
    reference="Gehring et al. 2017, Convolutional Sequence to Sequence Learning, arXiv:1705.03122",
    example_options={"max_len": 64},
)
class LearnedEncoding(PositionalEncoding):
    """A learned absolute position table ``P (max_len, dim)`` added to the input: ``x + P[t]``.

    Options:
        max_len: number of positions (required). Positions must be integers in ``[0, max_len)``;
            anything else raises (a learned table cannot extrapolate).
        init_std: std of the normal initialisation (0.02, as GPT-2).
    """

    def __init__(self, dim: int, num_heads: int, *, max_len: int, init_std: float = 0.02, causal: bool = True) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.max_len = check_int("max_len", max_len)
        self.table = nn.Embedding(max_len, dim)
        nn.init.normal_(self.table.weight, std=check_float("init_std", init_std))

    @takes_bounds
    def embed(self, x: Tensor, positions: Tensor, *, bounds: tuple[int, int] | None = None) -> Tensor:
        if positions.is_floating_point():
            raise TypeError(f"learned: positions must be integers, got dtype {positions.dtype}")
        if bounds is not None:  # known on the host (the Transformer's entry read them): no device read
            if bounds[0] < 0 or bounds[1] >= self.max_len:
                raise ValueError(f"learned: positions must lie in [0, max_len={self.max_len}), "
                                 f"got range [{bounds[0]}, {bounds[1]}]")
        elif positions.numel():
            require(((positions >= 0) & (positions < self.max_len)).all(),
                    f"learned: positions must lie in [0, max_len={self.max_len})",
                    lambda: f", got range [{int(positions.min())}, {int(positions.max())}]")
        return x + _broadcast_to_features(self.table(positions), x).to(x.dtype)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", max_len={self.max_len}"
