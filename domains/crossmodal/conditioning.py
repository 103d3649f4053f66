"""Cross-modal conditioning of one modality's denoiser on the other: CMC-PE and a cross-attention baseline.

Ishii, Hayakawa, Shibuya, Mitsufuji 2024, "A Simple but Strong Baseline for Sounding Video Generation",
arXiv:2409.17550 (code: ``SonyResearch/SVG_baseline``, ``AdditiveCondition``). **CMC-PE** (cross-modal
conditioning as positional encoding) turns the other modality's features into a per-time-step signal and
adds it to this modality's hidden states *like a positional encoding*:

1. the other modality's features ``c (B, T_c, *space, C_in)`` go through a GEGLU feed-forward layer;
2. they are averaged over every axis except time and group-normalised: ``(B, T_c, dim)``;
3. linearly interpolated onto this modality's time axis ``(B, L, dim)`` (tiled over its space axes);
4. added to the hidden states, ``h + c~``, which then pass a self-attention + feed-forward block whose
   output projection is zero-initialised and added back residually (so training starts from the
   unconditioned model).

The baseline is cross-attention from this modality's hidden states to the other modality's per-time-step
features, optionally with RoPE on query and key *times* (the key times rescaled onto the query axis) so
that it can align by time too (``time_encoding="rope"``); without it (``"none"``, as CoDi-style
cross-attention) it sees no time information on the other side.

Shapes: hidden ``h (B, L, dim)``; the other modality's features ``(B, T_c, C_in)`` or
``(B, T_c, S, C_in)`` (``S`` = flattened space).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionalEncoding, check_choice, check_int, require_finite
from pe_toolkit.nn import MultiHeadAttention
from pe_toolkit.nn.block import TransformerBlock, make_norm
from pe_toolkit.registry import get_encoder, register_encoder

__all__ = ["CMCPositionalEncoding", "CrossAttentionConnector", "CMCPEConnector", "GEGLU", "interpolate_time",
           "make_connector", "CONNECTORS"]

CONNECTORS = ("none", "cmc_pe", "cross_attention")


def interpolate_time(signal: Tensor, length: int, *, mode: str = "linear") -> Tensor:
    """Resample a per-time-step signal ``(B, T_src, C)`` onto ``length`` steps: ``(B, length, C)``.

    Uses ``F.interpolate`` with ``align_corners=False``: step ``j`` of the output reads the source at
    ``(j + 0.5) * T_src / length - 0.5`` (half-step centres, i.e. both axes cover the same time span),
    linearly between neighbours and held constant beyond the ends.

    Raises:
        ValueError: ``signal`` not 3-D, an empty time axis, ``length < 1`` or an unknown ``mode``.
    """
    if not isinstance(signal, Tensor) or signal.dim() != 3:
        raise ValueError(f"interpolate_time: signal must have shape (B, T, C), got "
                         f"{tuple(signal.shape) if isinstance(signal, Tensor) else type(signal).__name__}")
    if signal.shape[1] < 1:
        raise ValueError("interpolate_time: signal has an empty time axis")
    check_int("interpolate_time: length", length)
    check_choice("interpolate_time: mode", mode, ("linear", "nearest"))
    out = F.interpolate(signal.transpose(1, 2), size=length, mode=mode,
                        **({"align_corners": False} if mode == "linear" else {}))
    return out.transpose(1, 2)


class GEGLU(nn.Module):
    """``W_o (a * gelu(b))`` with ``[a, b] = W_i x`` (Shazeer 2020, arXiv:2002.05202)."""

    def __init__(self, in_features: int, out_features: int, hidden: int | None = None) -> None:
        super().__init__()
        hidden = hidden or 4 * out_features
        self.proj_in = nn.Linear(in_features, 2 * hidden)
        self.proj_out = nn.Linear(hidden, out_features)

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.proj_in(x).chunk(2, dim=-1)
        return self.proj_out(a * F.gelu(b))


@register_encoder(
    "cmc_pe",
    domain="crossmodal",
    relative=False,
    reference="Ishii, Hayakawa, Shibuya, Mitsufuji 2024, A Simple but Strong Baseline for Sounding Video "
    "Generation, arXiv:2409.17550",
    example_options={"in_features": 8},
)
class CMCPositionalEncoding(PositionalEncoding):
    """CMC-PE: the other modality's features as an additive positional signal (steps 1-3 of the module doc).

    ``embed(x, positions)`` takes as ``positions`` the other modality's features ``(B, T_c, C_in)`` or
    ``(B, T_c, S, C_in)`` and returns ``x + interpolate(GroupNorm(mean_space(GEGLU(c))))`` with ``x`` of
    shape ``(B, L, dim)`` or ``(B, L, S', dim)`` (tiled over ``S'``). Integer position tensors (the
    default ``arange`` positions) are not features and raise.

    Options:
        in_features: ``C_in`` of the other modality's features.
        groups: GroupNorm groups (must divide ``dim``; default the largest of 32, 16, 8, 4, 2, 1 that does).
        mode: interpolation, ``"linear"`` (default) or ``"nearest"``.
    """

    def __init__(self, dim: int, num_heads: int, *, in_features: int, groups: int | None = None,
                 mode: str = "linear", causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.in_features = check_int("cmc_pe: in_features", in_features)
        if groups is None:
            groups = next(g for g in (32, 16, 8, 4, 2, 1) if dim % g == 0)
        check_int("cmc_pe: groups", groups)
        if dim % groups:
            raise ValueError(f"cmc_pe: groups ({groups}) must divide dim ({dim})")
        self.mode = check_choice("cmc_pe: mode", mode, ("linear", "nearest"))
        self.ffn = GEGLU(in_features, dim)
        self.norm = nn.GroupNorm(groups, dim)

    def signal(self, features: Tensor, length: int) -> Tensor:
        """The conditioning signal ``(B, length, dim)`` from features ``(B, T_c, [S,] C_in)``."""
        if not isinstance(features, Tensor) or not features.is_floating_point():
            raise TypeError("cmc_pe: positions must be the other modality's float features (B, T_c, [S,] C_in), "
                            f"got {getattr(features, 'dtype', type(features).__name__)}")
        if features.dim() not in (3, 4) or features.shape[-1] != self.in_features:
            raise ValueError(f"cmc_pe: features must have shape (B, T_c, C_in={self.in_features}) or "
                             f"(B, T_c, S, {self.in_features}), got {tuple(features.shape)}")
        if features.shape[1] == 0:
            raise ValueError(f"cmc_pe: features (the positions) have an empty time axis, shape {tuple(features.shape)}")
        # NaN features would make the whole signal NaN after GroupNorm, silently
        require_finite("cmc_pe: positions (the other modality's features)", features)
        c = self.ffn(features.to(self.ffn.proj_in.weight.dtype))
        if c.dim() == 4:
            c = c.mean(dim=2)                                           # mean over space: (B, T_c, dim)
        c = self.norm(c.transpose(1, 2)).transpose(1, 2)                # GroupNorm over channels
        return interpolate_time(c, length, mode=self.mode)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        if x.dim() not in (3, 4):
            raise ValueError(f"cmc_pe: x must have shape (B, L, dim) or (B, L, S, dim), got {tuple(x.shape)}")
        if positions.shape[0] != x.shape[0]:
            raise ValueError(f"cmc_pe: batch sizes differ: x has {x.shape[0]}, the features have {positions.shape[0]}")
        c = self.signal(positions, x.shape[1]).to(x.dtype)
        return x + (c if x.dim() == 3 else c.unsqueeze(2))

    def example_positions(self, length: int) -> Tensor:
        """The soundtrack of a clip of ``length`` video frames, ``(1, 2 * length, in_features)`` float32.

        The log-magnitude spectrogram (``in_features`` frequency bins, two audio frames per video frame) of
        the domain's bouncing-ball toy, :func:`~pe_toolkit.domains.crossmodal.data.generate_clips` with seed 0
        (its own generator): low noise plus a click at each wall bounce. It is the other modality that
        conditions the video denoiser's ``length`` frames; the batch dimension of one clip is what
        :meth:`embed` requires to match ``x (1, length, dim)``.
        """
        from pe_toolkit.domains.crossmodal.data import generate_clips

        check_int("length", length)
        return generate_clips(1, seed=0, video_frames=length, audio_frames=2 * length, freq_bins=self.in_features).audio


class CMCPEConnector(nn.Module):
    """``h + proj_out(Block(norm(h) + c~))``: CMC-PE, then self-attention + FFN, zero-initialised ``proj_out``."""

    def __init__(self, dim: int, num_heads: int, cond_features: int) -> None:
        super().__init__()
        self.norm = make_norm("layernorm", dim)
        self.pe = CMCPositionalEncoding(dim, num_heads, in_features=cond_features)
        self.block = TransformerBlock(dim, num_heads, causal=False, norm="layernorm", mlp="gelu")
        self.proj_out = nn.Linear(dim, dim)
        nn.init.zeros_(self.proj_out.weight)
        nn.init.zeros_(self.proj_out.bias)

    def forward(self, h: Tensor, cond: Tensor) -> Tensor:
        return h + self.proj_out(self.block(self.pe.embed(self.norm(h), cond)))


class CrossAttentionConnector(nn.Module):
    """``h + proj_out(CrossAttn(norm(h), c))`` with zero-initialised ``proj_out`` (the baseline).

    ``time_encoding="rope"`` rotates queries at their step index and keys at their step index rescaled onto
    the query axis (``(j + 0.5) L / T_c - 0.5``), so attention can prefer time-aligned keys; ``"none"``
    gives the keys no time information.
    """

    def __init__(self, dim: int, num_heads: int, cond_features: int, *, time_encoding: str = "none") -> None:
        super().__init__()
        self.time_encoding = check_choice("cross_attention: time_encoding", time_encoding, ("none", "rope"))
        self.norm = make_norm("layernorm", dim)
        self.cond_proj = nn.Sequential(nn.Linear(cond_features, dim), nn.GELU(), nn.Linear(dim, dim))
        self.encoding = get_encoder("rope", dim, num_heads, causal=False) if time_encoding == "rope" else None
        self.attn = MultiHeadAttention(dim, num_heads, encoding=self.encoding)
        self.proj_out = nn.Linear(dim, dim)
        nn.init.zeros_(self.proj_out.weight)
        nn.init.zeros_(self.proj_out.bias)

    def forward(self, h: Tensor, cond: Tensor) -> Tensor:
        if cond.dim() == 4:
            cond = cond.mean(dim=2)
        if cond.shape[0] != h.shape[0]:
            raise ValueError(f"cross_attention: batch sizes differ: h has {h.shape[0]}, cond has {cond.shape[0]}")
        context = self.cond_proj(cond)
        length, cond_length = h.shape[1], context.shape[1]
        q_pos = torch.arange(length, device=h.device, dtype=torch.float32)
        k_pos = (torch.arange(cond_length, device=h.device, dtype=torch.float32) + 0.5) * length / cond_length - 0.5
        return h + self.proj_out(self.attn(self.norm(h), context, q_pos=q_pos, k_pos=k_pos))


def make_connector(kind: str, dim: int, num_heads: int, cond_features: int, **options) -> nn.Module | None:
    """``"cmc_pe"`` -> :class:`CMCPEConnector`, ``"cross_attention"`` -> :class:`CrossAttentionConnector`,
    ``"none"`` -> ``None``."""
    check_choice("connector", kind, CONNECTORS)
    if kind == "none":
        return None
    if kind == "cmc_pe":
        return CMCPEConnector(dim, num_heads, cond_features)
    return CrossAttentionConnector(dim, num_heads, cond_features, **options)
