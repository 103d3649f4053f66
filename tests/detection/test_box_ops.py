"""Box conversions, IoU and GIoU on hand-computed boxes; bad boxes raise."""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.domains.detection.box_ops import (
    box_area,
    box_cxcywh_to_xyxy,
    box_iou,
    box_xywh_to_xyxy,
    box_xyxy_to_cxcywh,
    box_xyxy_to_xywh,
    check_boxes,
    generalized_box_iou,
)


def test_conversions_round_trip_and_values():
    xyxy = torch.tensor([[1.0, 2.0, 5.0, 8.0]])
    torch.testing.assert_close(box_xyxy_to_cxcywh(xyxy), torch.tensor([[3.0, 5.0, 4.0, 6.0]]))
    torch.testing.assert_close(box_xyxy_to_xywh(xyxy), torch.tensor([[1.0, 2.0, 4.0, 6.0]]))
    torch.testing.assert_close(box_cxcywh_to_xyxy(box_xyxy_to_cxcywh(xyxy)), xyxy)
    torch.testing.assert_close(box_xywh_to_xyxy(box_xyxy_to_xywh(xyxy)), xyxy)
    assert box_area(xyxy).item() == 24.0


def test_iou_and_giou_hand_computed():
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0]])
    b = torch.tensor([[1.0, 1.0, 3.0, 3.0], [0.0, 0.0, 2.0, 2.0], [3.0, 0.0, 4.0, 1.0]])
    # overlap 1, union 7; identical; disjoint: enclosing [0,0,4,2] = 8, union 5
    torch.testing.assert_close(box_iou(a, b), torch.tensor([[1 / 7, 1.0, 0.0]]))
    # GIoU: 1/7 - (9 - 7)/9 for the first (enclosing 3 x 3), 1 for identical, 0 - (8 - 5)/8 for disjoint
    torch.testing.assert_close(generalized_box_iou(a, b), torch.tensor([[1 / 7 - 2 / 9, 1.0, -3 / 8]]))


def test_giou_is_differentiable():
    a = torch.tensor([[0.0, 0.0, 2.0, 2.0]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[1.0, 0.5, 3.5, 3.0]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(generalized_box_iou, (a, b))


@pytest.mark.parametrize("bad, message", [
    (torch.tensor([[0.0, 0.0, -1.0, 2.0]]), "negative width or height"),
    (torch.tensor([[0.0, float("nan"), 1.0, 2.0]]), "NaN or inf"),
    (torch.tensor([[0.0, 0.0, 1.0]]), r"shape \(\.\.\., 4\)"),
])
def test_bad_boxes_raise(bad, message):
    with pytest.raises(ValueError, match=message):
        box_iou(bad, torch.tensor([[0.0, 0.0, 1.0, 1.0]]))


def test_check_boxes_errors():
    with pytest.raises(TypeError, match="floating"):
        check_boxes("boxes", torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="negative width"):
        check_boxes("boxes", torch.tensor([[0.5, 0.5, -0.1, 0.2]]), fmt="cxcywh")
    with pytest.raises(ValueError, match="fmt must be"):
        check_boxes("boxes", torch.ones(1, 4), fmt="yxyx")
    with pytest.raises(ValueError, match="undefined IoU"):
        box_iou(torch.zeros(1, 4), torch.zeros(1, 4))


def test_empty_box_sets():
    assert box_iou(torch.zeros(0, 4), torch.tensor([[0.0, 0.0, 1.0, 1.0]])).shape == (0, 1)
    assert generalized_box_iou(torch.tensor([[0.0, 0.0, 1.0, 1.0]]), torch.zeros(0, 4)).shape == (1, 0)
