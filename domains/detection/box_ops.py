"""Box conversions, validation, IoU and generalized IoU (GIoU).

Box formats: ``xyxy`` = ``(x1, y1, x2, y2)``, ``cxcywh`` = ``(cx, cy, w, h)`` (the proposal boxes of
Sparse R-CNN / RecursiveDet, normalised to ``[0, 1]``), ``xywh`` = COCO's ``(x, y, w, h)``.

These are small re-implementations of ``torchvision.ops.box_iou`` / ``generalized_box_iou`` /
``box_convert``. Deviation from the issue: torchvision cannot be used in this project (its PyPI
wheels fail to load beside the pinned CPU torch build: "operator torchvision::nms does not exist").

GIoU: Rezatofighi et al. 2019, "Generalized Intersection over Union", arXiv:1902.09630:
``GIoU = IoU - |C \\ (A u B)| / |C|`` with ``C`` the smallest box enclosing ``A`` and ``B``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "box_area",
    "box_cxcywh_to_xyxy",
    "box_iou",
    "box_xywh_to_xyxy",
    "box_xyxy_to_cxcywh",
    "box_xyxy_to_xywh",
    "check_boxes",
    "generalized_box_iou",
]


def check_boxes(name: str, boxes: Tensor, *, fmt: str = "xyxy") -> Tensor:
    """Validate a ``(..., 4)`` floating box tensor: finite, and non-negative width and height.

    Args:
        name: the argument's name, used in error messages.
        boxes: ``(..., 4)`` in ``fmt``.
        fmt: ``"xyxy"`` (requires ``x2 >= x1`` and ``y2 >= y1``), ``"cxcywh"`` or ``"xywh"`` (require
            ``w >= 0`` and ``h >= 0``).

    Raises:
        TypeError: if ``boxes`` is not a floating tensor.
        ValueError: for a wrong last dimension, NaN / inf, or a negative width or height.
    """
    if not isinstance(boxes, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(boxes).__name__}")
    if not boxes.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got dtype {boxes.dtype}")
    if boxes.dim() < 1 or boxes.shape[-1] != 4:
        raise ValueError(f"{name} must have shape (..., 4), got {tuple(boxes.shape)}")
    if not torch.isfinite(boxes).all():
        raise ValueError(f"{name} contains NaN or inf")
    if fmt == "xyxy":
        size = boxes[..., 2:] - boxes[..., :2]
    elif fmt in ("cxcywh", "xywh"):
        size = boxes[..., 2:]
    else:
        raise ValueError(f"fmt must be 'xyxy', 'cxcywh' or 'xywh', got {fmt!r}")
    if (size < 0).any():
        bad = boxes[(size < 0).any(-1)][0].tolist()
        raise ValueError(f"{name} has a box with negative width or height ({fmt} {bad}); widths and heights "
                         "must be >= 0")
    return boxes


def box_cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """``(..., 4)`` ``(cx, cy, w, h)`` -> ``(x1, y1, x2, y2)``."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def box_xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """``(..., 4)`` ``(x1, y1, x2, y2)`` -> ``(cx, cy, w, h)``."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1], dim=-1)


def box_xywh_to_xyxy(boxes: Tensor) -> Tensor:
    """COCO ``(..., 4)`` ``(x, y, w, h)`` -> ``(x1, y1, x2, y2)``."""
    x, y, w, h = boxes.unbind(-1)
    return torch.stack([x, y, x + w, y + h], dim=-1)


def box_xyxy_to_xywh(boxes: Tensor) -> Tensor:
    """``(..., 4)`` ``(x1, y1, x2, y2)`` -> COCO ``(x, y, w, h)``."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack([x1, y1, x2 - x1, y2 - y1], dim=-1)


def box_area(boxes: Tensor) -> Tensor:
    """Areas ``(...,)`` of ``(..., 4)`` xyxy boxes."""
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def _inter_union(boxes1: Tensor, boxes2: Tensor) -> tuple[Tensor, Tensor]:
    area1, area2 = box_area(boxes1), box_area(boxes2)
    lt = torch.max(boxes1[:, None, :2], boxes2[None, :, :2])  # (N, M, 2)
    rb = torch.min(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = (rb - lt).clamp(min=0)  # disjoint boxes intersect in an empty box, not a negative one
    inter = wh[..., 0] * wh[..., 1]
    return inter, area1[:, None] + area2[None, :] - inter


def box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise IoU ``(N, M)`` of xyxy boxes ``(N, 4)`` and ``(M, 4)``.

    Raises:
        ValueError / TypeError: for invalid boxes (see :func:`check_boxes`), or if both boxes of a pair
            have zero area (IoU undefined).
    """
    check_boxes("boxes1", boxes1)
    check_boxes("boxes2", boxes2)
    if boxes1.dim() != 2 or boxes2.dim() != 2:
        raise ValueError(f"box_iou: boxes must be (N, 4) and (M, 4), got {tuple(boxes1.shape)}, {tuple(boxes2.shape)}")
    inter, union = _inter_union(boxes1, boxes2)
    if (union <= 0).any():
        raise ValueError("box_iou: a pair of zero-area boxes has an undefined IoU (union 0)")
    return inter / union


def generalized_box_iou(boxes1: Tensor, boxes2: Tensor) -> Tensor:
    """Pairwise GIoU ``(N, M)`` in ``[-1, 1]`` of xyxy boxes ``(N, 4)`` and ``(M, 4)``.

    Rezatofighi et al. 2019, arXiv:1902.09630. Differentiable in both arguments.

    Raises:
        ValueError / TypeError: as :func:`box_iou`.
    """
    iou = box_iou(boxes1, boxes2)
    _, union = _inter_union(boxes1, boxes2)
    lt = torch.min(boxes1[:, None, :2], boxes2[None, :, :2])
    rb = torch.max(boxes1[:, None, 2:], boxes2[None, :, 2:])
    wh = rb - lt  # enclosing box, never negative for valid boxes
    enclosing = wh[..., 0] * wh[..., 1]
    return iou - (enclosing - union) / enclosing
