"""Positions of image patches (any image size, with class / register tokens) and of Qwen2-VL token sequences.

A ViT cuts an image of ``H x W`` pixels into a ``(H / p) x (W / p)`` grid of patches and reads them in
raster order (row by row). :func:`patch_positions` gives each token its ``(row, column)`` coordinate in one
of three conventions:

* ``"index"``: the patch indices ``(i, j)``; at a larger image the grid simply grows (RoPE-ViT's
  extrapolation, Heo et al. 2024, arXiv:2403.13298; MAE / timm 2-D sincos).
* ``"resample"``: the patch centres in the index units of a ``reference_grid`` (the training grid),
  ``(i + 0.5) * G0 / G - 0.5``: exactly what a bicubic resize of a ``G0``-grid table to ``G`` samples
  (``F.interpolate(..., align_corners=False)``, the ViT / DeiT / MAE fine-tuning trick); equal to
  ``"index"`` at the reference grid itself.
* ``"normalized"``: the patch centres scaled to ``[-1, 1]``, ``2 (i + 0.5) / G - 1`` (DINOv3).

Prefix tokens (a class token, register tokens) come first and get the coordinate 0 on every axis:
for a rotary encoding that is no rotation at all, which is how DINOv3 and RoPE-ViT leave them. With
``axes=3`` a leading time coordinate (``frame``) is added, the ``(t, h, w)`` of M-RoPE.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from pe_toolkit.encoders.base import check_choice, check_int

LAYOUTS = ("index", "resample", "normalized")

__all__ = ["LAYOUTS", "mrope_positions", "patch_grid", "patch_positions", "raster_grid_positions"]


def patch_grid(height: int, width: int, patch_size: int) -> tuple[int, int]:
    """The patch grid ``(rows, columns)`` of an ``height x width`` image.

    Raises:
        TypeError: a size that is not an int.
        ValueError: a size < 1, or an image side not divisible by ``patch_size`` (named, with the sizes
            that would be).

    Example:
        >>> patch_grid(32, 48, 4)
        (8, 12)
    """
    check_int("patch_size", patch_size)
    for name, side in (("image height", height), ("image width", width)):
        check_int(name, side)
        if side % patch_size:
            lower = side - side % patch_size
            raise ValueError(f"{name} {side} is not divisible by patch_size {patch_size}; use a multiple of "
                             f"{patch_size} such as {max(lower, patch_size)} or {lower + patch_size}")
    return height // patch_size, width // patch_size


def _grid_pair(name: str, value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return check_int(name, value), value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == 2:
        return check_int(f"{name}[0]", value[0]), check_int(f"{name}[1]", value[1])
    raise TypeError(f"{name} must be an int or a pair of ints (rows, columns), got {value!r}")


def patch_positions(
    grid_h: int,
    grid_w: int,
    *,
    layout: str = "index",
    reference_grid: int | Sequence[int] | None = None,
    num_prefix_tokens: int = 0,
    axes: int = 2,
    frame: float = 0.0,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Coordinates of the tokens of a ``grid_h x grid_w`` patch grid in raster order, prefix tokens first.

    Args:
        grid_h, grid_w: patch rows and columns (:func:`patch_grid`).
        layout: ``"index"``, ``"resample"`` or ``"normalized"`` (module docstring).
        reference_grid: ``"resample"`` only: the grid ``G0`` (an int or ``(rows, columns)``) whose index
            units the centres are given in.
        num_prefix_tokens: class / register tokens before the patches, all at coordinate 0.
        axes: 2 (``(row, column)``) or 3 (``(frame, row, column)``).
        frame: the time coordinate of every patch when ``axes=3``.

    Returns:
        ``(num_prefix_tokens + grid_h * grid_w, axes)``.

    Example:
        >>> patch_positions(2, 2, num_prefix_tokens=1).tolist()
        [[0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]]
    """
    check_int("grid_h", grid_h)
    check_int("grid_w", grid_w)
    check_choice("layout", layout, LAYOUTS)
    check_int("num_prefix_tokens", num_prefix_tokens, minimum=0)
    check_choice("axes", axes, (2, 3))
    rows = torch.arange(grid_h, dtype=torch.float64)
    cols = torch.arange(grid_w, dtype=torch.float64)
    if layout == "resample":
        if reference_grid is None:
            raise ValueError("layout 'resample' needs reference_grid (the grid whose index units the centres use)")
        ref_h, ref_w = _grid_pair("reference_grid", reference_grid)
        rows = (rows + 0.5) * ref_h / grid_h - 0.5
        cols = (cols + 0.5) * ref_w / grid_w - 0.5
    elif reference_grid is not None:
        raise ValueError(f"reference_grid is for layout 'resample' only, got layout {layout!r}")
    if layout == "normalized":
        rows = 2 * (rows + 0.5) / grid_h - 1
        cols = 2 * (cols + 0.5) / grid_w - 1
    grid = torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1).reshape(-1, 2)  # (h * w, 2)
    if axes == 3:
        grid = torch.cat([torch.full((grid.shape[0], 1), float(frame), dtype=torch.float64), grid], dim=-1)
    prefix = torch.zeros(num_prefix_tokens, axes, dtype=torch.float64)
    return torch.cat([prefix, grid]).to(dtype=dtype, device=device)


def raster_grid_positions(length: int, *, axes: int = 2, grid: tuple[int, int] | None = None) -> Tensor:
    """The first ``length`` cells of a near-square patch grid in raster order, ``(length, axes)`` float32.

    The grid has ``ceil(sqrt(length))`` columns unless ``grid`` (rows, columns) is given, in which case the
    cells are those of ``length`` patches resampled onto ``grid`` (layout ``"resample"``), so they stay
    inside it. Used as the encoders' example positions.
    """
    check_int("length", length)
    columns = 1
    while columns * columns < length:
        columns += 1
    rows = -(-length // columns)
    if grid is None:
        positions = patch_positions(rows, columns, axes=axes)
    else:
        positions = patch_positions(rows, columns, layout="resample", reference_grid=grid, axes=axes)
    return positions[:length]


def mrope_positions(segments: Sequence[tuple[str, int | Sequence[int]]], *, spatial_merge_size: int = 1) -> Tensor:
    """Qwen2-VL's M-RoPE position ids ``(L, 3)`` (time, height, width) of a sequence of text and image / video runs.

    Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191, as HF transformers' ``Qwen2VLModel.get_rope_index``
    builds them: a text token has ``t = h = w`` = its index, continuing from the previous run; an image
    or video with a ``(T, H, W)`` patch grid (after merging ``spatial_merge_size`` patches per side)
    gets ``(s + t, s + i, s + j)`` with ``s`` the next free position, and the text after it continues
    from ``s + max(H, W)`` (as transformers 5.x does, also for a video with more frames than that).

    Args:
        segments: ``("text", n)`` for ``n`` text tokens, ``("image", (T, H, W))`` / ``("video", (T, H, W))``
            for a vision run, in sequence order.
        spatial_merge_size: patches merged per side before the language model (2 in Qwen2-VL); ``H`` and
            ``W`` must be divisible by it.

    Returns:
        long ``(L, 3)``.

    Example:
        >>> mrope_positions([("text", 2), ("image", (1, 2, 2)), ("text", 1)]).T.tolist()
        [[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]]
    """
    check_int("spatial_merge_size", spatial_merge_size)
    if isinstance(segments, (str, bytes)) or not isinstance(segments, Sequence):
        raise TypeError(f"segments must be a sequence of (kind, size) pairs, got {type(segments).__name__}")
    pieces, start = [], 0
    for index, segment in enumerate(segments):
        if not (isinstance(segment, Sequence) and len(segment) == 2):
            raise TypeError(f"segments[{index}] must be a (kind, size) pair, got {segment!r}")
        kind, size = segment
        check_choice(f"segments[{index}] kind", kind, ("text", "image", "video"))
        if kind == "text":
            n = check_int(f"segments[{index}] text length", size)
            pieces.append(torch.arange(start, start + n).unsqueeze(-1).expand(n, 3))
            start += n
            continue
        if not (isinstance(size, Sequence) and len(size) == 3):
            raise TypeError(f"segments[{index}]: an {kind} needs a (T, H, W) grid, got {size!r}")
        t, h, w = (check_int(f"segments[{index}] grid[{a}]", v) for a, v in enumerate(size))
        if h % spatial_merge_size or w % spatial_merge_size:
            raise ValueError(f"segments[{index}]: grid H = {h} and W = {w} must be divisible by spatial_merge_size "
                             f"{spatial_merge_size}")
        h, w = h // spatial_merge_size, w // spatial_merge_size
        grid = torch.stack(torch.meshgrid(torch.arange(t), torch.arange(h), torch.arange(w), indexing="ij"), -1)
        pieces.append(grid.reshape(-1, 3) + start)
        start += max(h, w)
    if not pieces:
        raise ValueError("segments must not be empty")
    return torch.cat(pieces).long()
