"""RoI Align against hand-computed bilinear values (torchvision semantics), gradients and errors."""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.domains.detection.roi_align import roi_align


def ramp(h: int = 4, w: int = 4, dtype=torch.float32) -> torch.Tensor:
    return torch.arange(h * w, dtype=dtype).view(1, 1, h, w)  # value = 4 y + x at pixel (y, x)


def test_aligned_bins_average_pixel_blocks():
    # box [0, 4] x [0, 4] with aligned=True: sample points at 0.5 and 2.5 -> the mean of 2 x 2 pixel blocks
    out = roi_align(ramp(), [torch.tensor([[0.0, 0.0, 4.0, 4.0]])], 2, sampling_ratio=1)
    torch.testing.assert_close(out, torch.tensor([[[[2.5, 4.5], [10.5, 12.5]]]]))


def test_bilinear_interpolation_of_a_linear_map_is_exact():
    # f = 4 y + x is linear, so bilinear interpolation returns f at the sample point. Box [1, 1.5, 3, 3.5],
    # output 1x1, 2x2 samples: x in {1.5 - 0.5, 2.5 - 0.5} -> mean x = 1.5; y in {2 - .5, 3 - .5} -> mean y = 2.
    out = roi_align(ramp(), [torch.tensor([[1.0, 1.5, 3.0, 3.5]])], 1, sampling_ratio=2)
    assert out.item() == pytest.approx(4 * 2.0 + 1.5)


def test_hand_computed_single_sample_with_weights():
    # features [[0, 1], [2, 10]]; box [0.25, 0.5, 1.75, 1.5] -> one sample at (x, y) = (0.5, 0.5) after the
    # half-pixel shift: 0.25 * (0 + 1 + 2 + 10) = 3.25.
    f = torch.tensor([[[[0.0, 1.0], [2.0, 10.0]]]])
    out = roi_align(f, [torch.tensor([[0.25, 0.5, 1.75, 1.5]])], 1, sampling_ratio=1)
    assert out.item() == pytest.approx(3.25)
    # a sample at (x, y) = (0.25, 0.75): (1 - .25)(1 - .75) * 0 + .25 * .25 * 1 + .75 * .75 * 2 + .25 * .75 * 10
    out = roi_align(f, [torch.tensor([[0.5, 1.0, 1.0, 1.5]])], 1, sampling_ratio=1)
    assert out.item() == pytest.approx(0.0625 + 1.125 + 1.875)


def test_border_clamp_and_zero_outside():
    f = torch.tensor([[[[0.0, 1.0], [2.0, 10.0]]]])
    # sample at (-0.5, -0.5) (within one pixel of the map): clamped to pixel (0, 0)
    assert roi_align(f, [torch.tensor([[-0.5, -0.5, 0.5, 0.5]])], 1, sampling_ratio=1).item() == 0.0
    f2 = f + 1
    assert roi_align(f2, [torch.tensor([[-0.5, -0.5, 0.5, 0.5]])], 1, sampling_ratio=1).item() == 1.0
    # a sample at x = 2.6 > W = 2 lies outside the margin: 0
    assert roi_align(f2, [torch.tensor([[2.6, 0.6, 3.6, 1.6]])], 1, sampling_ratio=1).item() == 0.0
    # a sample at x = 2.0 = W is inside the margin: clamped to the last column
    assert roi_align(f2, [torch.tensor([[2.0, 0.5, 3.0, 1.5]])], 1, sampling_ratio=1).item() == pytest.approx(
        f2[0, 0, :, 1].mean().item())


def test_spatial_scale_unaligned_and_batching():
    f = torch.stack([ramp()[0], 100 + ramp()[0]])  # (2, 1, 4, 4)
    # image coordinates are twice the feature coordinates; aligned=False: no half-pixel shift
    boxes = [torch.tensor([[2.0, 2.0, 4.0, 4.0]]), torch.tensor([[0.0, 0.0, 2.0, 2.0], [4.0, 4.0, 6.0, 6.0]])]
    out = roi_align(f, boxes, 1, spatial_scale=0.5, sampling_ratio=1, aligned=False)
    # sample points: (1.5, 1.5) -> 7.5; (0.5, 0.5) -> 102.5; (2.5, 2.5) -> 112.5
    torch.testing.assert_close(out.flatten(), torch.tensor([7.5, 102.5, 112.5]))
    # a (B, N, 4) tensor is the same as a list of B (N, 4) tensors
    dense = torch.stack([boxes[1], boxes[1]])
    torch.testing.assert_close(roi_align(f, dense, 2, sampling_ratio=2), roi_align(f, list(dense), 2, sampling_ratio=2))


def test_empty_boxes_give_an_empty_result():
    out = roi_align(torch.randn(2, 3, 4, 4), [torch.zeros(0, 4), torch.zeros(0, 4)], (2, 3))
    assert out.shape == (0, 3, 2, 3)


def test_gradcheck_float64():
    f = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    boxes = torch.tensor([[[0.7, 1.2, 3.3, 4.1], [1.1, 0.3, 2.9, 2.2]]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: roi_align(a, b, 2, sampling_ratio=2), (f, boxes))


def test_errors():
    f = torch.randn(1, 1, 4, 4)
    box = [torch.tensor([[0.0, 0.0, 2.0, 2.0]])]
    with pytest.raises(ValueError, match="features must be"):
        roi_align(torch.randn(1, 4, 4), box, 2)
    with pytest.raises(ValueError, match="sampling_ratio must be a positive int"):
        roi_align(f, box, 2, sampling_ratio=0)
    with pytest.raises(ValueError, match="output_size"):
        roi_align(f, box, 0)
    with pytest.raises(ValueError, match="spatial_scale"):
        roi_align(f, box, 2, spatial_scale=-1.0)
    with pytest.raises(ValueError, match="list of 1"):
        roi_align(f, box * 2, 2)
    with pytest.raises(ValueError, match="negative width"):
        roi_align(f, [torch.tensor([[2.0, 0.0, 1.0, 2.0]])], 2)
    with pytest.raises(ValueError, match="NaN"):
        roi_align(f, [torch.tensor([[float("nan"), 0.0, 1.0, 2.0]])], 2)
