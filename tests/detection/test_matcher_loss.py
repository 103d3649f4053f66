"""Hungarian matching and the set-prediction loss on constructed cases."""

from __future__ import annotations

import math

import pytest
import torch

from pe_toolkit.domains.detection.loss import SetCriterion, sigmoid_focal_loss
from pe_toolkit.domains.detection.matcher import HungarianMatcher, focal_class_cost

BIG = 8.0  # a logit whose sigmoid is ~1


def _targets():
    return [{"labels": torch.tensor([1, 0]), "boxes": torch.tensor([[0.2, 0.2, 0.1, 0.1], [0.7, 0.6, 0.3, 0.2]])}]


def test_matching_recovers_a_permutation():
    targets = _targets()
    # prediction 2 = target 0, prediction 0 = target 1, prediction 1 is far away from both
    boxes = torch.tensor([[[0.7, 0.6, 0.3, 0.2], [0.5, 0.95, 0.05, 0.05], [0.2, 0.2, 0.1, 0.1]]])
    logits = torch.full((1, 3, 2), -BIG)
    logits[0, 2, 1] = logits[0, 0, 0] = BIG
    (rows, cols), = HungarianMatcher()(logits, boxes, targets)
    assert dict(zip(rows.tolist(), cols.tolist())) == {2: 0, 0: 1}


def test_cost_matrix_hand_computed():
    matcher = HungarianMatcher(cost_class=0.0, cost_l1=1.0, cost_giou=0.0)
    boxes = torch.tensor([[0.5, 0.5, 0.2, 0.2]])  # xyxy 0.4 .. 0.6
    target = torch.tensor([[0.6, 0.5, 0.2, 0.4]])  # xyxy 0.5, 0.3, 0.7, 0.7
    cost = matcher.cost_matrix(torch.zeros(1, 2), boxes, torch.tensor([0]), target)
    torch.testing.assert_close(cost, torch.tensor([[0.1 + 0.1 + 0.1 + 0.1]]))
    matcher = HungarianMatcher(cost_class=0.0, cost_l1=0.0, cost_giou=1.0)
    cost = matcher.cost_matrix(torch.zeros(1, 2), boxes, torch.tensor([0]), target)
    # intersection 0.1 x 0.2 = 0.02, union 0.04 + 0.08 - 0.02 = 0.1, enclosing 0.3 x 0.4 = 0.12
    torch.testing.assert_close(cost, torch.tensor([[-(0.2 - 0.02 / 0.12)]]))


def test_focal_class_cost_formula():
    logits = torch.tensor([[0.0, 2.0]])
    p = torch.sigmoid(torch.tensor(2.0))
    want = 0.25 * (1 - p) ** 2 * -torch.log(p) - 0.75 * p**2 * -torch.log(1 - p)
    torch.testing.assert_close(focal_class_cost(logits, torch.tensor([1]))[0, 0], want, atol=1e-6, rtol=1e-6)


def test_more_targets_than_predictions_and_empty_images():
    matcher = HungarianMatcher()
    logits, boxes = torch.zeros(2, 1, 2), torch.full((2, 1, 4), 0.5)
    targets = _targets() + [{"labels": torch.zeros(0, dtype=torch.long), "boxes": torch.zeros(0, 4)}]
    (r0, c0), (r1, c1) = matcher(logits, boxes, targets)
    assert r0.numel() == c0.numel() == 1 and r1.numel() == c1.numel() == 0


def test_matcher_errors():
    matcher = HungarianMatcher()
    logits, boxes = torch.zeros(1, 3, 2), torch.full((1, 3, 4), 0.5)
    with pytest.raises(ValueError, match="labels must lie in"):
        matcher(logits, boxes, [{"labels": torch.tensor([5]), "boxes": torch.tensor([[0.5, 0.5, 0.1, 0.1]])}])
    with pytest.raises(ValueError, match="negative width"):
        matcher(logits, boxes, [{"labels": torch.tensor([0]), "boxes": torch.tensor([[0.5, 0.5, -0.1, 0.1]])}])
    with pytest.raises(ValueError, match="2 targets for a batch of 1"):
        matcher(logits, boxes, _targets() * 2)
    bad = boxes.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        matcher(logits, bad, _targets())


def test_sigmoid_focal_loss_formula():
    logits, targets = torch.tensor([0.3, -1.2]), torch.tensor([1.0, 0.0])
    p = torch.sigmoid(logits)
    want = torch.stack([-0.25 * (1 - p[0]) ** 2 * torch.log(p[0]), -0.75 * p[1] ** 2 * torch.log(1 - p[1])])
    torch.testing.assert_close(sigmoid_focal_loss(logits, targets), want)


def test_loss_is_near_zero_for_perfect_predictions_and_large_otherwise():
    targets = _targets()
    boxes = torch.tensor([[[0.7, 0.6, 0.3, 0.2], [0.5, 0.95, 0.05, 0.05], [0.2, 0.2, 0.1, 0.1]]])
    logits = torch.full((1, 3, 2), -BIG)
    logits[0, 2, 1] = logits[0, 0, 0] = BIG
    crit = SetCriterion()
    good = crit([(logits, boxes)], targets)
    assert good["loss_l1"].item() == pytest.approx(0.0, abs=1e-6)
    assert good["loss_giou"].item() == pytest.approx(0.0, abs=1e-6)
    assert good["loss_class"].item() < 1e-3
    wrong = crit([(-logits, boxes.flip(1))], targets)
    assert wrong["loss"] > 100 * good["loss"]


def test_loss_hand_computed_single_pair():
    targets = [{"labels": torch.tensor([0]), "boxes": torch.tensor([[0.5, 0.5, 0.2, 0.2]])}]
    boxes = torch.tensor([[[0.6, 0.5, 0.2, 0.2]]])  # shifted by 0.1 in x: L1 (xyxy) = 0.2
    logits = torch.tensor([[[0.0, 0.0]]])
    parts = SetCriterion()([(logits, boxes)], targets)
    assert parts["loss_l1"].item() == pytest.approx(0.2)
    # IoU = 0.1 * 0.2 / (0.04 + 0.04 - 0.02) = 1/3, enclosing = union -> GIoU = 1/3
    assert parts["loss_giou"].item() == pytest.approx(2 / 3)
    fl = 0.25 * 0.25 * math.log(2) + 0.75 * 0.25 * math.log(2)  # p = 0.5 for the target class, and for the other
    assert parts["loss_class"].item() == pytest.approx(fl)
    assert parts["loss"].item() == pytest.approx(2 * fl + 5 * 0.2 + 2 * 2 / 3)


def test_deep_supervision_sums_stages_and_gradients_flow():
    targets = _targets()
    logits = torch.randn(1, 3, 2, requires_grad=True)
    boxes = torch.tensor([[[0.3, 0.3, 0.2, 0.2], [0.6, 0.6, 0.2, 0.2], [0.5, 0.5, 0.5, 0.5]]], requires_grad=True)
    crit = SetCriterion()
    one = crit([(logits, boxes)], targets)["loss"]
    two = crit([(logits, boxes), (logits, boxes)], targets)["loss"]
    torch.testing.assert_close(two, 2 * one)
    two.backward()
    assert logits.grad.abs().sum() > 0 and boxes.grad.abs().sum() > 0


def test_batch_without_objects_has_only_the_class_loss():
    targets = [{"labels": torch.zeros(0, dtype=torch.long), "boxes": torch.zeros(0, 4)}]
    logits = torch.zeros(1, 3, 2, requires_grad=True)
    parts = SetCriterion()([(logits, torch.full((1, 3, 4), 0.5))], targets)
    assert parts["loss_l1"].item() == 0.0 and parts["loss_giou"].item() == 0.0
    # every one of the 6 outputs is a negative at p = 0.5; n = max(0, 1) = 1
    assert parts["loss_class"].item() == pytest.approx(6 * 0.75 * 0.25 * math.log(2))
    parts["loss"].backward()
    assert (logits.grad > 0).all()
    with pytest.raises(ValueError, match="at least one"):
        SetCriterion()([], targets)
