"""Hungarian matching of predictions to ground-truth boxes (DETR / Sparse R-CNN set prediction).

Carion et al. 2020, DETR, arXiv:2005.12872; Sun et al. 2021, Sparse R-CNN, arXiv:2011.12450 (focal-loss
class cost); the assignment is ``scipy.optimize.linear_sum_assignment`` on

    C = w_class * C_class + w_l1 * || b_pred - b_gt ||_1 - w_giou * GIoU(b_pred, b_gt)

with boxes as image-normalised xyxy and, for the focal class cost (Lin et al. 2017, arXiv:1708.02002),
``C_class = alpha (1 - p)^gamma (-log p) - (1 - alpha) p^gamma (-log(1 - p))`` at the target class.
"""

from __future__ import annotations

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from pe_toolkit.domains.detection.box_ops import box_cxcywh_to_xyxy, check_boxes, generalized_box_iou
from pe_toolkit.encoders.base import check_float

__all__ = ["HungarianMatcher", "focal_class_cost"]


def focal_class_cost(logits: Tensor, labels: Tensor, *, alpha: float = 0.25, gamma: float = 2.0) -> Tensor:
    """Focal class cost ``(N, M)`` of ``N`` predictions' logits ``(N, C)`` for ``M`` target labels ``(M,)``."""
    p = logits.sigmoid()
    neg = (1 - alpha) * p**gamma * -(1 - p + 1e-8).log()
    pos = alpha * (1 - p) ** gamma * -(p + 1e-8).log()
    return pos[:, labels] - neg[:, labels]


class HungarianMatcher:
    """One-to-one assignment of predictions to targets, per image, minimising the DETR matching cost.

    Args:
        cost_class, cost_l1, cost_giou: the weights of the three costs (RecursiveDet: 2, 5, 2).
        alpha, gamma: focal-cost parameters.

    Call with ``logits (B, N, C)``, ``boxes (B, N, 4)`` (normalised cxcywh) and targets, a list of ``B``
    dicts with ``labels (M_b,)`` long and ``boxes (M_b, 4)`` normalised cxcywh. Returns a list of ``B``
    pairs ``(pred_idx, target_idx)`` of long tensors of length ``min(N, M_b)`` (empty for an image
    without objects).
    """

    def __init__(self, *, cost_class: float = 2.0, cost_l1: float = 5.0, cost_giou: float = 2.0,
                 alpha: float = 0.25, gamma: float = 2.0) -> None:
        self.cost_class = check_float("cost_class", cost_class, positive=False, minimum=0.0)
        self.cost_l1 = check_float("cost_l1", cost_l1, positive=False, minimum=0.0)
        self.cost_giou = check_float("cost_giou", cost_giou, positive=False, minimum=0.0)
        self.alpha, self.gamma = check_float("alpha", alpha), check_float("gamma", gamma, positive=False, minimum=0.0)

    def cost_matrix(self, logits: Tensor, boxes: Tensor, labels: Tensor, target_boxes: Tensor) -> Tensor:
        """``(N, M)`` cost of one image: logits ``(N, C)``, boxes ``(N, 4)``, labels ``(M,)``, targets ``(M, 4)``."""
        pred_xyxy, tgt_xyxy = box_cxcywh_to_xyxy(boxes), box_cxcywh_to_xyxy(target_boxes)
        cost = self.cost_class * focal_class_cost(logits, labels, alpha=self.alpha, gamma=self.gamma)
        cost = cost + self.cost_l1 * torch.cdist(pred_xyxy, tgt_xyxy, p=1)
        return cost - self.cost_giou * generalized_box_iou(pred_xyxy, tgt_xyxy)

    @torch.no_grad()
    def __call__(self, logits: Tensor, boxes: Tensor, targets: list[dict[str, Tensor]]) -> list[tuple[Tensor, Tensor]]:
        if logits.dim() != 3 or boxes.shape != (*logits.shape[:2], 4):
            raise ValueError(f"matcher: logits must be (B, N, C) and boxes (B, N, 4), got {tuple(logits.shape)} "
                             f"and {tuple(boxes.shape)}")
        if len(targets) != logits.shape[0]:
            raise ValueError(f"matcher: got {len(targets)} targets for a batch of {logits.shape[0]} images")
        num_classes = logits.shape[-1]
        out = []
        for b, target in enumerate(targets):
            labels, tboxes = target["labels"], target["boxes"]
            check_boxes(f"targets[{b}]['boxes']", tboxes, fmt="cxcywh")
            if labels.shape != tboxes.shape[:1]:
                raise ValueError(f"matcher: targets[{b}] has {labels.shape[0]} labels for {tboxes.shape[0]} boxes")
            if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
                raise ValueError(f"matcher: targets[{b}] labels must lie in [0, {num_classes}), got "
                                 f"[{int(labels.min())}, {int(labels.max())}]")
            if labels.numel() == 0:
                empty = torch.zeros(0, dtype=torch.long, device=logits.device)
                out.append((empty, empty.clone()))
                continue
            cost = self.cost_matrix(logits[b], boxes[b], labels, tboxes).cpu()
            if not torch.isfinite(cost).all():
                raise ValueError(f"matcher: the cost matrix of image {b} has NaN or inf (are the predictions finite?)")
            rows, cols = linear_sum_assignment(cost.numpy())
            out.append((torch.as_tensor(rows, dtype=torch.long, device=logits.device),
                        torch.as_tensor(cols, dtype=torch.long, device=logits.device)))
        return out
