"""Detection domain: RecursiveDet's box and centerness PEs in a Sparse R-CNN-style recursive decoder.

Zhao, Sun, Li 2023, "RecursiveDet", arXiv:2307.13619. ``import pe_toolkit.domains.detection`` registers the encoders
under ``domain="detection"``:

>>> import pe_toolkit as pet, pe_toolkit.domains.detection
>>> pet.list_encoders(domain="detection")
['box_pe', 'centerness_pe']

torchvision cannot be loaded beside this project's CPU torch build, so RoI Align
(:mod:`pe_toolkit.domains.detection.roi_align`) and the box operations
(:mod:`pe_toolkit.domains.detection.box_ops`) are implemented
here, and COCO AP comes from pycocotools' COCOeval (:mod:`pe_toolkit.domains.detection.metrics`). Lightning is imported
only by :mod:`pe_toolkit.domains.detection.lightning_module`.
"""

from pe_toolkit.extras import require_extra

require_extra("detection", __name__)

from pe_toolkit.domains.detection.box_ops import (
    box_area,
    box_cxcywh_to_xyxy,
    box_iou,
    box_xywh_to_xyxy,
    box_xyxy_to_cxcywh,
    box_xyxy_to_xywh,
    generalized_box_iou,
)
from pe_toolkit.domains.detection.data import (
    SHAPE_CLASSES,
    CocoDetectionDataset,
    ShapesDetectionDataset,
    collate_detection,
)
from pe_toolkit.domains.detection.encoders import (
    BoxPE,
    CenternessPE,
    box_sine_embedding,
    centerness_grid,
    sine_position_map,
)
from pe_toolkit.domains.detection.loss import SetCriterion, sigmoid_focal_loss
from pe_toolkit.domains.detection.matcher import HungarianMatcher
from pe_toolkit.domains.detection.metrics import coco_map
from pe_toolkit.domains.detection.model import DETECTOR_VARIANTS, DetectorConfig, RecursiveDetector, count_parameters
from pe_toolkit.domains.detection.roi_align import roi_align

__all__ = [
    "DETECTOR_VARIANTS", "SHAPE_CLASSES", "BoxPE", "CenternessPE", "CocoDetectionDataset", "DetectorConfig",
    "HungarianMatcher",
    "RecursiveDetector", "SetCriterion", "ShapesDetectionDataset", "box_area", "box_cxcywh_to_xyxy", "box_iou",
    "box_sine_embedding", "box_xywh_to_xyxy", "box_xyxy_to_cxcywh", "box_xyxy_to_xywh", "centerness_grid",
    "coco_map", "collate_detection", "count_parameters", "generalized_box_iou", "roi_align", "sigmoid_focal_loss",
    "sine_position_map",
]
