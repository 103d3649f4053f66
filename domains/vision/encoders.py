"""Positional encodings of image patches (and video / multimodal tokens), registered under ``domain="vision"``.

Positions are vectors, ``(L, A)`` or ``(B, L, A)`` with ``A = 2`` (row, column) or ``3`` (time, row,
column): :func:`~pe_toolkit.domains.vision.positions.patch_positions` builds them for an image of any size.
Every encoder here declares ``position_vector_dims = 1`` and refuses positions of another arity by name.

* ``rope_axial``: :class:`AxialRoPE`, one axis per rotation pair (RoPE-Axial, DINOv3, Pixtral and
  Qwen2-VL vision layouts), ``rotate`` hook.
* ``rope_mixed``: :class:`MixedRoPE`, learned per-head frequencies mixing the axes (RoPE-Mixed).
* ``mrope``: :class:`MRoPE`, Qwen2-VL's multimodal RoPE over ``(t, h, w)``; text has ``t = h = w``.
* ``sincos_2d``: :class:`SinCos2D`, the fixed 2-D sin-cos table of MAE / timm, ``embed`` hook.
* ``learned_2d``: :class:`Learned2D`, a learned ``(rows, columns)`` table read with bicubic interpolation,
  ``embed`` hook: at another resolution it is the table resized bicubically (ViT / DeiT fine-tuning).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.domains.vision.positions import mrope_positions, raster_grid_positions
from pe_toolkit.encoders.base import (
    PositionalEncoding,
    PositionCheck,
    check_choice,
    check_float,
    check_int,
    require_all,
    takes_checked,
)
from pe_toolkit.encoders.multi_axis import (
    AXIAL_LAYOUTS,
    MultiAxisRotary,
    axial_frequencies,
    check_base,
    check_sections,
    default_sections,
)
from pe_toolkit.registry import register_encoder

__all__ = ["AxialRoPE", "Learned2D", "MRoPE", "MixedRoPE", "SinCos2D", "mrope_default_sections",
           "sincos_2d_table"]


def _check_axes(owner: str, axes: int) -> int:
    if isinstance(axes, bool) or not isinstance(axes, int):
        raise TypeError(f"{owner}: axes must be an int (2 or 3), got {axes!r}")
    return check_choice(f"{owner}: axes", axes, (2, 3))


def _check_vector_positions(owner: str, positions: Tensor, axes: int, name: str = "positions") -> None:
    if not isinstance(positions, Tensor):
        raise TypeError(f"{owner}: {name} must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"{owner}: {name} must hold integer or float coordinates, got {positions.dtype}")
    if positions.dim() not in (2, 3) or positions.shape[-1] != axes:
        raise ValueError(f"{owner}: {name} must have shape (L, {axes}) or (B, L, {axes}) ({axes} coordinates per "
                         f"token), got {tuple(positions.shape)}")


def _check_embed_input(owner: str, dim: int, x: Tensor, positions: Tensor) -> None:
    if x.dim() != 3 or x.shape[-1] != dim:
        raise ValueError(f"{owner}: x must have shape (B, L, {dim}), got {tuple(x.shape)}")
    if positions.shape[-2] != x.shape[1] or (positions.dim() == 3 and positions.shape[0] != x.shape[0]):
        raise ValueError(f"{owner}: positions {tuple(positions.shape)} do not match x {tuple(x.shape)}")


@register_encoder(
    "rope_axial",
    domain="vision",
    relative=True,
    reference="Heo et al. 2024, Rotary Position Embedding for Vision Transformer, arXiv:2403.13298 (RoPE-Axial); "
    "Simeoni et al. 2025, DINOv3, arXiv:2508.10104; Su et al. 2021, RoFormer, arXiv:2104.09864",
    example_options={},
)
class AxialRoPE(MultiAxisRotary):
    """Axial multi-axis RoPE: each rotation pair turns with one coordinate of the position.

    Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298 (RoPE-Axial):
    pair ``k`` turns by ``scale * theta_k * p_{a(k)}``; ``q_i . k_j`` then depends on ``p_j - p_i`` only,
    axis by axis. The layouts of :func:`pe_toolkit.encoders.multi_axis.axial_frequencies` reproduce the
    published models (tested against HF transformers):

    * RoPE-ViT axial: ``layout="per_axis"``, ``base=100``, ``interleaved=True``, positions ``(x, y)``.
    * DINOv3 (Simeoni et al. 2025, arXiv:2508.10104): ``"per_axis"``, ``base=100``, ``scale=2 pi``,
      positions ``patch_positions(..., layout="normalized")``.
    * Qwen2-VL's vision encoder (Wang et al. 2024, arXiv:2409.12191): ``"per_axis"``, ``base=10000``.
    * Pixtral (Mistral AI 2024): ``"interleaved"``, ``base=10000``.

    Options:
        axes: 2 (row, column) or 3 (time, row, column).
        sections: rotation pairs per axis (``sum = head_dim / 2``, any split; default even).
        base: the frequency ladder's base (100, RoPE-ViT's ``theta``).
        layout: ``"per_axis"``, ``"interleaved"``, ``"sections"`` or ``"sections_interleaved"``.
        scale: multiplies every angle (1; DINOv3 uses ``2 pi``).
        interleaved: pair layout within a head (False: half-split, as HF).

    Shapes: q ``(B, H, Lq, hd)``, k ``(B, H_kv, Lk, hd)``; positions ``(L, axes)`` or ``(B, L, axes)``.

    Raises:
        ValueError: odd ``head_dim``, sections that do not add up to ``head_dim / 2``, ``base <= 1``,
            positions with another number of coordinates than ``axes``.
    """

    def __init__(self, dim: int, num_heads: int, *, axes: int = 2, sections: Sequence[int] | None = None,
                 base: float = 100.0, layout: str = "per_axis", scale: float = 1.0, interleaved: bool = False,
                 causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        owner = self.registry_name
        self.axes = _check_axes(owner, axes)
        pairs = self.head_dim // 2
        self.sections = (default_sections(pairs, self.axes) if sections is None
                         else check_sections(owner, sections, pairs, self.axes))
        self.base = check_base(owner, base)
        self.layout = check_choice(f"{owner}: layout", layout, AXIAL_LAYOUTS)
        self.scale = check_float(f"{owner}: scale", scale)
        if not isinstance(interleaved, bool):
            raise TypeError(f"{owner}: interleaved must be a bool, got {interleaved!r}")
        self.interleaved = interleaved
        theta, axis = axial_frequencies(self.sections, self.base, self.layout)
        matrix = torch.zeros(pairs, self.axes, dtype=torch.float64)
        matrix[torch.arange(pairs), axis] = theta
        self.register_buffer("frequencies", matrix.float(), persistent=False)  # (P, A)
        self.register_buffer("frequencies64", matrix, persistent=False)

    def frequency_matrix(self, dtype: torch.dtype = torch.float32) -> Tensor:
        # the float64 ladder for float64 angles, so that double-precision checks are exact
        return self.frequencies64 if dtype == torch.float64 else self.frequencies.to(dtype)

    def example_positions(self, length: int) -> Tensor:
        """The first ``length`` patches of a near-square grid in raster order, ``(length, axes)`` (frame 0)."""
        return raster_grid_positions(check_int("length", length), axes=self.axes)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, axes={self.axes}, sections={self.sections}, base={self.base}, "
                f"layout={self.layout}, scale={self.scale:g}, interleaved={self.interleaved}")


def _random_rotation(axes: int, generator: torch.Generator | None) -> Tensor:
    """A uniformly random rotation of ``R^axes`` (float64)."""
    if axes == 2:
        turn = float(torch.rand((), generator=generator, dtype=torch.float64)) * 2 * math.pi
        return torch.tensor([[math.cos(turn), -math.sin(turn)], [math.sin(turn), math.cos(turn)]], dtype=torch.float64)
    q, r = torch.linalg.qr(torch.randn(axes, axes, generator=generator, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))  # Haar-distributed orthogonal matrix
    if torch.det(q) < 0:
        q[:, 0] = -q[:, 0]
    return q


@register_encoder(
    "rope_mixed",
    domain="vision",
    relative=True,
    reference="Heo et al. 2024, Rotary Position Embedding for Vision Transformer, arXiv:2403.13298 (RoPE-Mixed)",
    example_options={},
)
class MixedRoPE(MultiAxisRotary):
    """RoPE-Mixed: learned per-head frequency vectors that mix the axes.

    Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298, Eq. 11: pair
    ``k`` of head ``h`` turns by ``p . f_{h,k}`` with a learned ``f_{h,k} in R^A``, so a pair can follow
    a diagonal direction; still relative, since ``q_i . k_j`` depends on ``p_j - p_i`` only. The paper's
    initialisation (its official code, ``init_random_2d_freqs``): the axial frequencies
    ``theta ** (-j / n)`` of each axis (``theta = 10``) turned by a random angle per head, i.e. the first
    half of the pairs point at angle ``a_h``, the second half at ``a_h + pi / 2``. With ``axes=3`` the
    axial frequencies are turned by a random rotation of space per head. The frequencies are one
    parameter per encoder; the paper learns them per layer (``Transformer(share_encoding=False)``).

    Options:
        axes: 2 or 3 coordinates.
        base: ``theta`` of the initial magnitudes (10, the paper's RoPE-Mixed value).
        rotate: turn each head's frequencies by a random rotation at init (True, the paper); False keeps
            them axial (RoPE-Mixed then starts as RoPE-Axial).
        interleaved: pair layout within a head (False: half-split).

    Shapes: q and k ``(B, H, L, hd)`` (one rotation per head, so no grouped-query keys); positions
    ``(L, axes)`` or ``(B, L, axes)``.

    Raises:
        ValueError: odd ``head_dim``, positions of the wrong arity, keys with fewer heads than queries.
    """

    def __init__(self, dim: int, num_heads: int, *, axes: int = 2, base: float = 10.0, rotate: bool = True,
                 interleaved: bool = False, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.axes = _check_axes("rope_mixed", axes)
        self.base = check_base("rope_mixed", base)
        for name, value in (("rotate", rotate), ("interleaved", interleaved)):
            if not isinstance(value, bool):
                raise TypeError(f"rope_mixed: {name} must be a bool, got {value!r}")
        self.rotate_init, self.interleaved = rotate, interleaved
        pairs = self.head_dim // 2
        theta, axis = axial_frequencies(default_sections(pairs, self.axes), self.base, "per_axis")
        axial = torch.zeros(pairs, self.axes, dtype=torch.float64)
        axial[torch.arange(pairs), axis] = theta
        heads = []
        for _ in range(num_heads):
            turn = _random_rotation(self.axes, None) if rotate else torch.eye(self.axes, dtype=torch.float64)
            heads.append(axial @ turn.T)  # each frequency vector turned by the head's rotation
        self.frequencies = nn.Parameter(torch.stack(heads).float())  # (H, P, A)

    def frequency_matrix(self, dtype: torch.dtype = torch.float32) -> Tensor:
        return self.frequencies.to(dtype)

    def example_positions(self, length: int) -> Tensor:
        """The first ``length`` patches of a near-square grid in raster order, ``(length, axes)``."""
        return raster_grid_positions(check_int("length", length), axes=self.axes)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, axes={self.axes}, base={self.base}, interleaved={self.interleaved}"


def mrope_default_sections(num_pairs: int) -> tuple[int, int, int]:
    """Qwen2-VL's split of the rotation pairs over ``(t, h, w)``: a quarter for time, the rest halved.

    ``(16, 24, 24)`` for ``head_dim = 128``, the ``mrope_section`` of the released models.

    Example:
        >>> mrope_default_sections(64)
        (16, 24, 24)
    """
    check_int("num_pairs", num_pairs)
    t = num_pairs // 4
    h = (num_pairs - t) // 2
    return t, h, num_pairs - t - h


@register_encoder(
    "mrope",
    domain="vision",
    relative=True,
    reference="Wang et al. 2024, Qwen2-VL: Enhancing Vision-Language Model's Perception of the World at Any "
    "Resolution, arXiv:2409.12191 (M-RoPE)",
    example_options={},
)
class MRoPE(AxialRoPE):
    """Multimodal RoPE (M-RoPE) over ``(time, height, width)`` positions, as in Qwen2-VL.

    Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191, Sec. 2.1: the rotary pairs of ordinary RoPE (one
    ladder ``theta_k = base ** (-2k / head_dim)``) are cut into three consecutive sections
    (``mrope_section``); section ``a`` turns with coordinate ``a`` of ``(t, h, w)``. A text token has
    ``t = h = w`` = its index, so on text M-RoPE *is* 1-D RoPE; an image's patches share ``t`` and take
    their row and column (:func:`~pe_toolkit.domains.vision.positions.mrope_positions` builds a whole
    sequence, as HF's ``get_rope_index``). ``layout="sections_interleaved"`` is Qwen3-VL's variant
    (pairs dealt t, h, w, t, h, w, ...).

    Options:
        sections: pairs for ``(t, h, w)``, adding up to ``head_dim / 2`` (default
            :func:`mrope_default_sections`, ``(16, 24, 24)`` at ``head_dim = 128``).
        base: RoPE base (10000; the Qwen2-VL checkpoints use 1e6).
        layout: ``"sections"`` (Qwen2-VL, Qwen2.5-VL) or ``"sections_interleaved"`` (Qwen3-VL).
        causal: set by the Transformer (M-RoPE serves causal language models as well as encoders).

    Shapes: q ``(B, H, Lq, hd)``, k ``(B, H_kv, Lk, hd)``; positions ``(L, 3)`` or ``(B, L, 3)``.

    Raises:
        ValueError: sections that do not add up to ``head_dim / 2`` (named), positions without 3 coordinates.
    """

    def __init__(self, dim: int, num_heads: int, *, sections: Sequence[int] | None = None, base: float = 10_000.0,
                 layout: str = "sections", causal: bool = False) -> None:
        check_choice("mrope: layout", layout, ("sections", "sections_interleaved"))
        valid = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (dim, num_heads))
        if sections is None and valid and dim % num_heads == 0 and dim // num_heads >= 2:
            sections = mrope_default_sections(dim // num_heads // 2)
        super().__init__(dim, num_heads, axes=3, sections=sections, base=base, layout=layout, causal=causal)

    def example_positions(self, length: int) -> Tensor:
        """A short multimodal sequence of ``length`` tokens, ``(length, 3)`` long: text, an image, text.

        Two text tokens, then the largest near-square image grid ``(1, h, w)`` that leaves room, then text
        (:func:`~pe_toolkit.domains.vision.positions.mrope_positions`); only text below 6 tokens.
        """
        check_int("length", length)
        if length < 6:
            return mrope_positions([("text", length)])
        h = int(math.isqrt(length - 3))
        w = (length - 3) // h
        rest = length - 2 - h * w
        return mrope_positions([("text", 2), ("image", (1, h, w))] + ([("text", rest)] if rest else []))


def sincos_2d_table(positions: Tensor, dim: int, temperature: float = 10_000.0) -> Tensor:
    """The 2-D (or 3-D) sin-cos embedding of positions ``(..., A)``: ``(..., dim)`` in float64.

    Per axis ``a`` a block ``[sin(p_a w_j), cos(p_a w_j)]``, ``w_j = temperature ** (-j / n)``,
    ``n = dim / (2A)``; blocks in axis order (HF ``ViTMAE``'s ``get_2d_sincos_pos_embed``, timm's
    ``build_sincos2d_pos_embed``: ``[sin h, cos h, sin w, cos w]`` for ``(h, w)``).
    """
    axes = positions.shape[-1]
    n = dim // (2 * axes)
    omega = temperature ** (-torch.arange(n, dtype=torch.float64, device=positions.device) / n)
    angles = positions.to(torch.float64).unsqueeze(-1) * omega  # (..., A, n)
    return torch.cat([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (..., A * 2n)


@register_encoder(
    "sincos_2d",
    domain="vision",
    relative=False,
    reference="He et al. 2021, Masked Autoencoders Are Scalable Vision Learners, arXiv:2111.06377 (2-D sin-cos); "
    "Vaswani et al. 2017, arXiv:1706.03762",
    example_options={},
)
class SinCos2D(PositionalEncoding):
    """Fixed 2-D sin-cos position embedding added to the patch features (``embed`` hook).

    He et al. 2021, "Masked Autoencoders Are Scalable Vision Learners", arXiv:2111.06377: the 1-D
    sinusoidal code of Vaswani et al. per axis, on a quarter of the channels each for ``sin`` and ``cos``
    (:func:`sincos_2d_table`), ``x <- x + PE(p)``. Absolute; at another resolution the patch indices
    simply extend (timm recomputes the table for the new grid).

    Options:
        axes: 2 (row, column) or 3 (time, row, column); ``dim`` must be divisible by ``2 * axes``.
        temperature: the ladder's base (10000).

    Shapes: x ``(B, L, dim)``; positions ``(L, axes)`` or ``(B, L, axes)``.
    """

    position_vector_dims = 1

    def __init__(self, dim: int, num_heads: int, *, axes: int = 2, temperature: float = 10_000.0,
                 causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.axes = _check_axes("sincos_2d", axes)
        if dim % (2 * self.axes):
            raise ValueError(f"sincos_2d: dim must be divisible by 2 * axes = {2 * self.axes} (a sin and a cos block "
                             f"per axis), got dim={dim}")
        self.temperature = check_base("sincos_2d", temperature)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        _check_vector_positions("sincos_2d", positions, self.axes)
        _check_embed_input("sincos_2d", self.dim, x, positions)
        return x + sincos_2d_table(positions, self.dim, self.temperature).to(x.dtype)

    def example_positions(self, length: int) -> Tensor:
        """The first ``length`` patches of a near-square grid in raster order, ``(length, axes)``."""
        return raster_grid_positions(check_int("length", length), axes=self.axes)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, axes={self.axes}, temperature={self.temperature:g}"


def _grid_size(value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return check_int("learned_2d: grid_size", value), value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == 2:
        return check_int("learned_2d: grid_size[0]", value[0]), check_int("learned_2d: grid_size[1]", value[1])
    raise TypeError(f"learned_2d: grid_size must be an int or (rows, columns), got {value!r}")


@register_encoder(
    "learned_2d",
    domain="vision",
    relative=False,
    reference="Dosovitskiy et al. 2020, An Image is Worth 16x16 Words (ViT), arXiv:2010.11929 (learned position "
    "embeddings, bicubic resize for fine-tuning at a higher resolution); Touvron et al. 2020, DeiT, arXiv:2012.12877",
    example_options={"grid_size": 8},
)
class Learned2D(PositionalEncoding):
    """A learned ``(rows, columns, dim)`` position table, read with bicubic interpolation (``embed`` hook).

    Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words", arXiv:2010.11929, Sec. 3.2: a ViT's learned
    position embeddings are resized to a new patch grid by 2-D interpolation, bicubic in the released
    code (DeiT, MAE, HF ``ViTEmbeddings.interpolate_pos_encoding``: ``F.interpolate(mode="bicubic",
    align_corners=False)``). Here the table is *sampled* at the positions (``grid_sample``, bicubic,
    border taps clamped), which is that resize done pointwise: at integer positions it is the table
    itself, and at the centres of another grid expressed in table units (``patch_positions(...,
    layout="resample", reference_grid=grid_size)``) it equals ``F.interpolate`` of the table to that grid.

    Options:
        grid_size: the table's patch grid (an int or ``(rows, columns)``), the training grid (8).
        init_std: standard deviation of the truncated-normal init (0.02, as ViT).

    Shapes: x ``(B, L, dim)``; positions ``(L, 2)`` or ``(B, L, 2)`` in table units (row, column),
    each within ``[-0.5, size - 0.5]`` (the table's extent: outside it nothing was learned).

    Raises:
        ValueError: positions of the wrong arity or outside the table.
    """

    position_vector_dims = 1
    axes = 2

    def __init__(self, dim: int, num_heads: int, *, grid_size: int | Sequence[int] = 8, init_std: float = 0.02,
                 causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.grid_size = _grid_size(grid_size)
        self.init_std = check_float("learned_2d: init_std", init_std)
        self.table = nn.Parameter(torch.empty(dim, *self.grid_size))  # (dim, rows, columns), image layout
        nn.init.trunc_normal_(self.table, std=self.init_std, a=-2 * self.init_std, b=2 * self.init_std)

    def position_checks(self, positions: Tensor, name: str = "positions") -> list[PositionCheck]:
        """The positions lie within the table (outside it nothing was learned; ``grid_sample`` would clamp)."""
        if positions.dim() not in (2, 3) or positions.shape[-1] != 2 or positions.dtype == torch.bool:
            return []  # the hook raises the shape error
        rows, cols = self.grid_size
        p = positions.to(self.table.dtype)
        inside = (p >= -0.5).all() & (p[..., 0] <= rows - 0.5).all() & (p[..., 1] <= cols - 0.5).all()
        return [(inside,
                 f"learned_2d: {name} must lie within the table, rows in [-0.5, {rows - 0.5}] and columns in "
                 f"[-0.5, {cols - 0.5}] (grid_size {self.grid_size}); resample them onto it "
                 "(patch_positions(layout='resample'))",
                 lambda: f", got rows in [{float(p[..., 0].min())}, {float(p[..., 0].max())}] and columns in "
                         f"[{float(p[..., 1].min())}, {float(p[..., 1].max())}]")]

    def lookup(self, positions: Tensor, *, checked: bool = False) -> Tensor:
        """Bicubic samples of the table at positions ``(L, 2)`` / ``(B, L, 2)``: ``(1 or B, L, dim)``.

        ``checked``: the caller ran :meth:`position_checks` (otherwise they run here, one host read)."""
        _check_vector_positions("learned_2d", positions, 2)
        if not checked:
            require_all(self.position_checks(positions))
        rows, cols = self.grid_size
        p = positions.to(self.table.dtype)
        if p.dim() == 2:
            p = p.unsqueeze(0)
        # grid_sample's (x, y) = (column, row), normalised so that -1 / +1 are the table's outer edges
        grid = torch.stack([(2 * p[..., 1] + 1) / cols - 1, (2 * p[..., 0] + 1) / rows - 1], dim=-1)
        table = self.table.unsqueeze(0).expand(grid.shape[0], -1, -1, -1)
        out = F.grid_sample(table, grid.unsqueeze(1), mode="bicubic", padding_mode="border", align_corners=False)
        return out[:, :, 0].transpose(1, 2)  # (B, L, dim)

    def resized(self, rows: int, columns: int) -> Tensor:
        """The table resized to ``rows x columns`` as ViT fine-tuning does: ``(rows, columns, dim)``.

        ``F.interpolate(mode="bicubic", align_corners=False)``; equal to :meth:`lookup` at that grid's
        ``"resample"`` positions.
        """
        check_int("rows", rows)
        check_int("columns", columns)
        out = F.interpolate(self.table.unsqueeze(0), size=(rows, columns), mode="bicubic", align_corners=False)
        return out[0].permute(1, 2, 0)

    @takes_checked
    def embed(self, x: Tensor, positions: Tensor, *, checked: bool = False) -> Tensor:
        _check_vector_positions("learned_2d", positions, 2)
        _check_embed_input("learned_2d", self.dim, x, positions)
        return x + self.lookup(positions, checked=checked).to(x.dtype)

    def example_positions(self, length: int) -> Tensor:
        """``length`` patches of a near-square grid resampled onto the table (``"resample"``), ``(length, 2)``."""
        return raster_grid_positions(check_int("length", length), grid=self.grid_size)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, grid_size={self.grid_size}"
