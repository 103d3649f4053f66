"""Example boxes of the detection encoders, BoxPE's pattern and CenternessPE's (proposal, RoI cell) term."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.domains.detection.box_ops import box_cxcywh_to_xyxy, box_iou, check_boxes
from pe_toolkit.domains.detection.encoders import BoxPE, CenternessPE, centerness_grid, grid_boxes, sine_position_map
from pe_toolkit.domains.detection.roi_align import roi_align

NAMES = ("box_pe", "centerness_pe")
LENGTHS = (4, 8, 16, 32)


def build(name: str, dim: int = 32, **options):
    return pet.get_encoder(name, dim, 4, **{**pet.encoder_info(name).example_options, **options})


def pooled_image_pe(boxes: torch.Tensor, dim: int, resolution: int, size: int = 32) -> torch.Tensor:
    """The detector's RoI positions: the sine map of a ``size x size`` feature map pooled under each box."""
    pos_map = sine_position_map(size, size, dim // 2).unsqueeze(0)
    xyxy = box_cxcywh_to_xyxy(boxes) * size
    return roi_align(pos_map, xyxy.unsqueeze(0), resolution, sampling_ratio=2).flatten(2).transpose(1, 2)


# --------------------------------------------------------------------------------------------------- boxes
@pytest.mark.parametrize("count", [1, 2, 5, 16, 30])
def test_grid_boxes_tile_the_image_without_overlap(count):
    boxes = grid_boxes(count)
    assert boxes.shape == (count, 4) and boxes.dtype == torch.float32
    check_boxes("boxes", boxes, fmt="cxcywh")
    xyxy = box_cxcywh_to_xyxy(boxes)
    assert (xyxy >= 0).all() and (xyxy <= 1).all() and (boxes[:, 2:] > 0).all()
    iou = box_iou(xyxy, xyxy)
    assert torch.allclose(iou, torch.eye(count), atol=1e-6)  # distinct cells, no overlap
    cols = math.ceil(math.sqrt(count))
    assert torch.allclose(boxes[:, 2], torch.full((count,), 0.8 / cols))


def test_grid_boxes_by_hand():
    torch.testing.assert_close(grid_boxes(3), torch.tensor([[0.25, 0.25, 0.4, 0.4], [0.75, 0.25, 0.4, 0.4],
                                                             [0.25, 0.75, 0.4, 0.4]]))


def test_examples_are_the_grid_boxes():
    assert torch.equal(BoxPE(32, 4).example_positions(6), grid_boxes(6).unsqueeze(0))  # one image
    assert torch.equal(CenternessPE(32, 4).example_positions(6), grid_boxes(6))


# -------------------------------------------------------------------------------------------------- box_pe
@pytest.mark.parametrize("dim", [32, 64])
def test_box_pe_pattern_shape_and_hand_recipe(dim):
    encoder = BoxPE(dim, 4)
    for length in LENGTHS:
        pattern = encoder.positional_pattern(length)
        assert pattern.shape == (4, length, length) and torch.isfinite(pattern).all()
        assert torch.equal(pattern, encoder.positional_pattern(length))
    length, hd = 9, dim // 4
    with torch.no_grad():
        p = encoder.encode(grid_boxes(length))  # (L, dim)
        q = 1 + p + encoder.q_pos_proj(p)  # content + embed, then the rotate hook's query-side box term
        k = 1 + p + encoder.k_pos_proj(p)
    q, k = (t.view(length, 4, hd).transpose(0, 1) for t in (q, k))
    torch.testing.assert_close(encoder.positional_pattern(length), q @ k.transpose(-1, -2) / hd**0.5 - hd**0.5,
                               atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------- centerness_pe
@pytest.mark.parametrize("dim", [32, 64])
@pytest.mark.parametrize("resolution", [7, 4])
def test_centerness_pattern_is_the_roi_term_per_proposal_and_cell(dim, resolution):
    encoder = CenternessPE(dim, 4, resolution=resolution)
    for length in LENGTHS:
        pattern = encoder.positional_pattern(length)
        assert pattern.shape == (4, length, resolution**2) and torch.isfinite(pattern).all()
        assert torch.equal(pattern, encoder.positional_pattern(length))
        assert torch.equal(pattern, pattern[:1].expand_as(pattern))  # no heads: the same map for each
    boxes = grid_boxes(10)
    with torch.no_grad():
        expected = encoder.roi_term(torch.ones(10, dim), boxes, pooled_image_pe(boxes, dim, resolution))
    torch.testing.assert_close(encoder.positional_pattern(10)[0], expected)


def test_centerness_weighting_scales_each_cell_by_its_squared_centerness():
    """Without the projection biases, ``<W_r (c x), W_k (c g)> = c^2 <W_r x, W_k g>`` cell by cell."""
    weighted = CenternessPE(32, 4, resolution=7)
    for proj in (weighted.roi_proj, weighted.kernel_proj):
        torch.nn.init.zeros_(proj.bias)
    plain = CenternessPE(32, 4, resolution=7, weighting="none")
    plain.load_state_dict(weighted.state_dict())
    c = centerness_grid(7).flatten()
    assert c[24] == 1.0  # the centre cell of a 7 x 7 grid
    a, b = weighted.positional_pattern(12), plain.positional_pattern(12)
    torch.testing.assert_close(a, b * c**2, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(a[..., 24], b[..., 24])


def test_centerness_pattern_with_custom_boxes_and_bad_boxes():
    encoder = CenternessPE(32, 4)
    boxes = torch.tensor([[0.5, 0.5, 0.5, 0.3], [0.2, 0.7, 0.1, 0.2]])
    with torch.no_grad():
        expected = encoder.roi_term(torch.ones(2, 32), boxes, pooled_image_pe(boxes, 32, 7))
    torch.testing.assert_close(encoder.positional_pattern(2, positions=boxes)[3], expected)
    with pytest.raises(ValueError, match=r"\(3, 4\)"):
        encoder.positional_pattern(3, positions=boxes)
    with pytest.raises(TypeError):
        encoder.positional_pattern(2, positions=boxes.tolist())
    with pytest.raises(ValueError, match="w > 0"):
        encoder.positional_pattern(2, positions=torch.tensor([[0.5, 0.5, 0.0, 0.3], [0.2, 0.7, 0.1, 0.2]]))
