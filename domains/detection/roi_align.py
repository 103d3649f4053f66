"""RoI Align (He et al. 2017, Mask R-CNN, arXiv:1703.06870) with ``torch.nn.functional.grid_sample``.

Deviation from the issue: the issue asks for ``torchvision.ops.roi_align``; torchvision cannot be used in
this project (its PyPI wheels fail to load beside the pinned CPU torch build: "operator torchvision::nms
does not exist"), so this is a re-implementation with the same semantics as torchvision's ``roi_align``
for a fixed positive ``sampling_ratio``:

* box coordinates are multiplied by ``spatial_scale``; with ``aligned=True`` half a pixel is subtracted
  (pixel ``i`` covers ``[i, i + 1)`` and its centre is at ``i + 0.5`` in box coordinates); with
  ``aligned=False`` nothing is subtracted and the RoI is at least 1 x 1;
* each of the ``PH x PW`` bins is sampled on a regular ``sampling_ratio x sampling_ratio`` grid at
  ``y = y1 + (ph + (iy + 0.5) / s) * bin_h`` (same for x) and the samples are averaged;
* a sample is bilinearly interpolated from the four nearest pixel centres; a sample further than one pixel
  outside the map (``y < -1`` or ``y > H``) counts as 0, one within that margin is clamped to the border.

``grid_sample(..., align_corners=True, padding_mode="border")`` performs exactly that clamped bilinear
interpolation; the zero beyond the one-pixel margin is a mask. Unlike torchvision's kernel, gradients also
flow into the box coordinates (RecursiveDet detaches boxes between stages anyway).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from pe_toolkit.domains.detection.box_ops import check_boxes

__all__ = ["roi_align"]


def _pair(name: str, value: int | Sequence[int]) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) and not isinstance(value, bool) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in pair):
        raise ValueError(f"{name} must be a positive int or a pair of positive ints, got {value!r}")
    return pair  # type: ignore[return-value]


def roi_align(
    features: Tensor,
    boxes: Tensor | Sequence[Tensor],
    output_size: int | Sequence[int],
    *,
    spatial_scale: float = 1.0,
    sampling_ratio: int = 2,
    aligned: bool = True,
) -> Tensor:
    """Bilinear RoI Align of xyxy boxes over a batch of feature maps.

    Args:
        features: ``(B, C, H, W)`` feature maps.
        boxes: a ``(B, N, 4)`` tensor (``N`` boxes per image) or a list of ``B`` tensors ``(N_b, 4)``;
            xyxy in input-image coordinates (multiplied by ``spatial_scale`` to reach feature coordinates).
        output_size: ``PH`` or ``(PH, PW)``.
        spatial_scale: feature-map size / image size (e.g. ``1 / stride``).
        sampling_ratio: sample points per bin along each axis (a positive int; torchvision's adaptive
            ``sampling_ratio <= 0`` is not supported because it gives every RoI a different grid).
        aligned: subtract half a pixel (the "aligned" RoIAlign of Detectron2); see the module docstring.

    Returns:
        ``(K, C, PH, PW)`` with ``K = sum_b N_b``, RoIs in image order then box order.

    Raises:
        TypeError / ValueError: for a non-4-D ``features``, a wrong number of box tensors, invalid boxes
            (NaN, negative width), a non-positive ``sampling_ratio`` / ``spatial_scale``.
    """
    if not isinstance(features, Tensor) or features.dim() != 4:
        got = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
        raise ValueError(f"roi_align: features must be a (B, C, H, W) tensor, got {got}")
    ph, pw = _pair("output_size", output_size)
    if isinstance(sampling_ratio, bool) or not isinstance(sampling_ratio, int) or sampling_ratio < 1:
        raise ValueError(f"roi_align: sampling_ratio must be a positive int, got {sampling_ratio!r}")
    if not isinstance(spatial_scale, (int, float)) or isinstance(spatial_scale, bool) or not spatial_scale > 0:
        raise ValueError(f"roi_align: spatial_scale must be a positive number, got {spatial_scale!r}")
    if not isinstance(aligned, bool):
        raise TypeError(f"roi_align: aligned must be a bool, got {aligned!r}")
    b, c, h, w = features.shape
    per_image = list(boxes.unbind(0)) if isinstance(boxes, Tensor) and boxes.dim() == 3 else boxes
    if isinstance(per_image, Tensor) or len(per_image) != b:
        n = "a tensor" if isinstance(per_image, Tensor) else f"{len(per_image)} tensors"
        raise ValueError(f"roi_align: boxes must be a (B={b}, N, 4) tensor or a list of {b} (N_b, 4) tensors, got {n}")
    counts = []
    for i, bx in enumerate(per_image):
        check_boxes(f"boxes[{i}]", bx)
        if bx.dim() != 2:
            raise ValueError(f"roi_align: boxes[{i}] must have shape (N, 4), got {tuple(bx.shape)}")
        counts.append(bx.shape[0])
    n_max = max(counts, default=0)
    if n_max == 0:
        return features.new_zeros(0, c, ph, pw)
    padded = features.new_zeros(b, n_max, 4)  # every image gets n_max boxes; the padding is dropped below
    for i, bx in enumerate(per_image):
        padded[i, : bx.shape[0]] = bx.to(features.dtype)

    s = sampling_ratio
    offset = 0.5 if aligned else 0.0
    x1 = padded[..., 0] * spatial_scale - offset  # (B, N)
    y1 = padded[..., 1] * spatial_scale - offset
    roi_w = padded[..., 2] * spatial_scale - offset - x1
    roi_h = padded[..., 3] * spatial_scale - offset - y1
    if not aligned:  # legacy RoIAlign forces malformed RoIs to be 1 x 1
        roi_w, roi_h = roi_w.clamp(min=1.0), roi_h.clamp(min=1.0)
    # Sample offsets inside the RoI, in units of the RoI size: (ph * s + iy + 0.5) / (PH * s).
    fy = (torch.arange(ph * s, device=features.device, dtype=features.dtype) + 0.5) / (ph * s)
    fx = (torch.arange(pw * s, device=features.device, dtype=features.dtype) + 0.5) / (pw * s)
    ys = y1[..., None] + fy * roi_h[..., None]  # (B, N, PH*s)
    xs = x1[..., None] + fx * roi_w[..., None]  # (B, N, PW*s)
    gy = ys[..., :, None].expand(b, n_max, ph * s, pw * s)
    gx = xs[..., None, :].expand(b, n_max, ph * s, pw * s)
    # align_corners=True maps -1 / +1 to the centres of the first / last pixel (coordinates 0 and W - 1).
    grid = torch.stack([gx / max(w - 1, 1) * 2 - 1, gy / max(h - 1, 1) * 2 - 1], dim=-1)
    grid = grid.reshape(b, n_max * ph * s, pw * s, 2)
    samples = F.grid_sample(features, grid, mode="bilinear", padding_mode="border", align_corners=True)
    inside = (gy >= -1) & (gy <= h) & (gx >= -1) & (gx <= w)  # (B, N, PH*s, PW*s)
    if not bool(inside.all()):  # samples beyond the one-pixel margin count as 0
        samples = samples * inside.reshape(b, 1, n_max * ph * s, pw * s).to(samples.dtype)
    # Rows of each RoI are a contiguous block of PH * s rows, so s x s pooling never mixes two RoIs.
    pooled = F.avg_pool2d(samples, kernel_size=s, stride=s)  # (B, C, N * PH, PW): mean of each bin's samples
    pooled = pooled.view(b, c, n_max, ph, pw).transpose(1, 2).reshape(b * n_max, c, ph, pw)
    keep = torch.cat([torch.arange(k, device=features.device) + i * n_max for i, k in enumerate(counts)])
    return pooled[keep]
