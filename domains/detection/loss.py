"""Set-prediction loss of Sparse R-CNN / RecursiveDet: sigmoid focal loss, L1 and GIoU on matched pairs.

Sun et al. 2021, Sparse R-CNN, arXiv:2011.12450; Zhao, Sun, Li 2023, RecursiveDet, arXiv:2307.13619 (weights:
class 2, L1 5, GIoU 2; focal alpha 0.25, gamma 2; deep supervision: the loss of every stage is summed).

For one stage, with ``n = max(number of target boxes in the batch, 1)``:

* ``loss_class = sum over all predictions and classes of FL(p, y) / n``, where ``y`` is one-hot at the
  matched target's class and all-zero for unmatched predictions (Lin et al. 2017, arXiv:1708.02002:
  ``FL = -alpha_t (1 - p_t)^gamma log p_t``);
* ``loss_l1 = sum over matched pairs of || b - b_gt ||_1 / n`` on image-normalised xyxy boxes;
* ``loss_giou = sum over matched pairs of (1 - GIoU(b, b_gt)) / n``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from pe_toolkit.domains.detection.box_ops import box_cxcywh_to_xyxy, generalized_box_iou
from pe_toolkit.domains.detection.matcher import HungarianMatcher
from pe_toolkit.encoders.base import check_float

__all__ = ["SetCriterion", "sigmoid_focal_loss"]


def sigmoid_focal_loss(logits: Tensor, targets: Tensor, *, alpha: float = 0.25, gamma: float = 2.0) -> Tensor:
    """Elementwise focal loss of logits and {0, 1} targets of the same shape (``torchvision.ops.sigmoid_focal_loss``
    with ``reduction="none"``; re-implemented because torchvision cannot be loaded here)."""
    p = logits.sigmoid()
    ce = F.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
    return alpha_t * (1 - p_t) ** gamma * ce


class SetCriterion:
    """Hungarian-matched detection loss, summed over the decoder stages (deep supervision).

    Args:
        matcher: the :class:`HungarianMatcher`.
        weight_class, weight_l1, weight_giou: loss weights (2, 5, 2 in RecursiveDet).
        alpha, gamma: focal-loss parameters.

    Call with ``stages``, a list of ``(logits (B, N, C), boxes (B, N, 4) normalised cxcywh)`` per stage,
    and ``targets`` (see :class:`HungarianMatcher`). Returns a dict with ``loss`` (weighted total over stages)
    and the unweighted ``loss_class``, ``loss_l1``, ``loss_giou`` of the last stage.
    """

    def __init__(self, matcher: HungarianMatcher | None = None, *, weight_class: float = 2.0, weight_l1: float = 5.0,
                 weight_giou: float = 2.0, alpha: float = 0.25, gamma: float = 2.0) -> None:
        self.matcher = matcher if matcher is not None else HungarianMatcher()
        self.weight_class = check_float("weight_class", weight_class, positive=False, minimum=0.0)
        self.weight_l1 = check_float("weight_l1", weight_l1, positive=False, minimum=0.0)
        self.weight_giou = check_float("weight_giou", weight_giou, positive=False, minimum=0.0)
        self.alpha, self.gamma = alpha, gamma

    def stage_losses(self, logits: Tensor, boxes: Tensor, targets: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        """Unweighted ``loss_class``, ``loss_l1``, ``loss_giou`` of one stage."""
        indices = self.matcher(logits, boxes, targets)
        num_boxes = max(sum(int(t["labels"].numel()) for t in targets), 1)
        onehot = torch.zeros_like(logits)
        batch_idx = torch.cat([torch.full_like(src, b) for b, (src, _) in enumerate(indices)])
        src_idx = torch.cat([src for src, _ in indices])
        tgt_labels = torch.cat([t["labels"][tgt] for t, (_, tgt) in zip(targets, indices)])
        onehot[batch_idx, src_idx, tgt_labels] = 1.0
        loss_class = sigmoid_focal_loss(logits, onehot, alpha=self.alpha, gamma=self.gamma).sum() / num_boxes
        if src_idx.numel() == 0:  # no objects anywhere in the batch: only the "nothing here" class loss
            zero = boxes.sum() * 0.0
            return {"loss_class": loss_class, "loss_l1": zero, "loss_giou": zero}
        pred = box_cxcywh_to_xyxy(boxes[batch_idx, src_idx])
        tgt = box_cxcywh_to_xyxy(torch.cat([t["boxes"][tgt] for t, (_, tgt) in zip(targets, indices)]))
        loss_l1 = (pred - tgt).abs().sum() / num_boxes
        loss_giou = (1 - torch.diag(generalized_box_iou(pred, tgt))).sum() / num_boxes
        return {"loss_class": loss_class, "loss_l1": loss_l1, "loss_giou": loss_giou}

    def __call__(self, stages: list[tuple[Tensor, Tensor]], targets: list[dict[str, Tensor]]) -> dict[str, Tensor]:
        if not stages:
            raise ValueError("SetCriterion: stages must hold at least one (logits, boxes) pair")
        total = 0.0
        for logits, boxes in stages:
            parts = self.stage_losses(logits, boxes, targets)
            total = total + (self.weight_class * parts["loss_class"] + self.weight_l1 * parts["loss_l1"]
                             + self.weight_giou * parts["loss_giou"])
        return {"loss": total, **parts}
