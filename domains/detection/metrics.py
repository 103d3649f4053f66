"""COCO mAP, AP50 and AP75 with the official evaluator, ``pycocotools.cocoeval.COCOeval``.

Deviation from the issue: the issue asks for ``torchmetrics.detection.MeanAveragePrecision``, which needs
torchvision; torchvision cannot be used in this project (its wheels fail to load beside the pinned CPU torch
build), so this calls pycocotools' COCOeval directly (the backend torchmetrics itself wraps).

``map`` is AP averaged over IoU thresholds 0.50:0.05:0.95 (COCO's primary metric, ``stats[0]``), ``map_50``
and ``map_75`` are AP at IoU 0.5 and 0.75, all with at most 100 detections per image and COCO's 101-point
interpolated precision.

Crowd regions (a target's optional ``crowd_boxes`` / ``crowd_labels``, from COCO ``iscrowd = 1``) are handed to
COCOeval as ``iscrowd`` annotations, so they count as COCO counts them: a detection matched to a crowd region
(IoU = intersection over the detection's area) is ignored, neither a true nor a false positive, and a crowd
region missed is not a false negative.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from typing import Any

from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from pe_toolkit.domains.detection.box_ops import box_xyxy_to_xywh, check_boxes
from pe_toolkit.domains.detection.data import to_coco

__all__ = ["coco_map"]


def coco_map(predictions: Sequence[dict[str, Any]], targets: Sequence[dict[str, Any]], *,
             num_classes: int) -> dict[str, float]:
    """COCO box AP of predictions against targets.

    Args:
        predictions: per image, ``boxes (K, 4)`` xyxy pixels, ``scores (K,)``, ``labels (K,)`` long.
        targets: per image, ``boxes (M, 4)`` xyxy pixels and ``labels (M,)`` (images without objects allowed),
            optionally ``crowd_boxes (K, 4)`` and ``crowd_labels (K,)`` (COCO ``iscrowd`` regions, ignored as
            COCOeval ignores them).
        num_classes: labels lie in ``[0, num_classes)``.

    Returns:
        ``{"map", "map_50", "map_75"}`` in ``[0, 1]``; 0 for every metric when there are no predictions at all.

    Raises:
        ValueError: if the two lists differ in length, a box is invalid, a label is out of range, or no image
            has a ground-truth object (COCO AP is then undefined).
    """
    if len(predictions) != len(targets):
        raise ValueError(f"coco_map: {len(predictions)} predictions for {len(targets)} targets")
    for name, items in (("predictions", predictions), ("targets", targets)):
        for i, item in enumerate(items):
            prefixes = ("", "crowd_") if name == "targets" and "crowd_boxes" in item else ("",)
            if name == "targets" and ("crowd_boxes" in item) != ("crowd_labels" in item):
                raise ValueError(f"coco_map: targets[{i}] needs both 'crowd_boxes' and 'crowd_labels' or neither")
            for prefix in prefixes:
                boxes, labels = item[f"{prefix}boxes"], item[f"{prefix}labels"]
                check_boxes(f"{name}[{i}]['{prefix}boxes']", boxes)
                if labels.shape != boxes.shape[:1]:
                    raise ValueError(f"coco_map: {name}[{i}] has {labels.numel()} {prefix}labels for "
                                     f"{boxes.shape[0]} {prefix}boxes")
                if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
                    raise ValueError(f"coco_map: {name}[{i}] {prefix}labels must lie in [0, {num_classes}), got "
                                     f"[{int(labels.min())}, {int(labels.max())}]")
    if sum(int(t["labels"].numel()) for t in targets) == 0:
        raise ValueError("coco_map: no image has a ground-truth object; COCO AP is undefined")
    indexed = [{**t, "image_id": i} for i, t in enumerate(targets)]
    every = [b for t in targets for b in (t["boxes"], t.get("crowd_boxes")) if b is not None and b.numel()]
    width = max([1.0] + [float(b[:, 2].max()) for b in every])
    height = max([1.0] + [float(b[:, 3].max()) for b in every])
    gt_dict = to_coco(indexed, [str(c) for c in range(num_classes)], int(height), int(width))
    detections = []
    for i, pred in enumerate(predictions):
        if "scores" not in pred or pred["scores"].shape != pred["labels"].shape:
            raise ValueError(f"coco_map: predictions[{i}] needs 'scores' with one score per box")
        for box, score, label in zip(box_xyxy_to_xywh(pred["boxes"]).tolist(), pred["scores"].tolist(),
                                     pred["labels"].tolist()):
            detections.append({"image_id": i, "category_id": int(label) + 1, "bbox": box, "score": float(score)})
    if not detections:  # COCO.loadRes cannot load an empty list; nothing detected means AP = 0
        return {"map": 0.0, "map_50": 0.0, "map_75": 0.0}
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress and the summary table
        gt = COCO()
        gt.dataset = gt_dict
        gt.createIndex()
        dt = gt.loadRes(detections)
        evaluator = COCOeval(gt, dt, iouType="bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    stats = evaluator.stats
    # COCOeval reports -1 only where a metric has no ground truth; with >= 1 object these three are defined.
    return {"map": float(stats[0]), "map_50": float(stats[1]), "map_75": float(stats[2])}
