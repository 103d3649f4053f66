"""Box PE and centerness PE: exact values on hand-computed boxes, hooks, registry, errors."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
import pe_toolkit.domains.detection  # noqa: F401  (registers the detection encoders)
from pe_toolkit.domains.detection.encoders import (
    BoxPE,
    CenternessPE,
    box_sine_embedding,
    centerness_grid,
    sine_position_map,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_registry():
    assert pet.list_encoders(domain="detection") == ["box_pe", "centerness_pe"]
    assert pet.encoder_info("box_pe").hooks == ("embed", "rotate")
    assert pet.encoder_info("centerness_pe").hooks == ("bias",)
    for name in ("box_pe", "centerness_pe"):
        info = pet.encoder_info(name)
        assert "2307.13619" in info.reference and not info.relative and info.cls.__doc__
        assert isinstance(pet.get_encoder(name, 16, 4, **info.example_options), info.cls)


def test_box_sine_embedding_hand_computed():
    box = torch.tensor([0.5, 0.25, 0.1, 0.2], dtype=torch.float64)  # (cx, cy, w, h)
    code = box_sine_embedding(box, 4)  # F = 4: frequencies 1, 1, 1/100, 1/100 (T = 10000)

    def expected(u):
        a0, a1 = 2 * math.pi * u, 2 * math.pi * u / 100
        return [math.sin(a0), math.cos(a0), math.sin(a1), math.cos(a1)]

    want = expected(0.25) + expected(0.5) + expected(0.1) + expected(0.2)  # order (y, x, w, h)
    torch.testing.assert_close(code, torch.tensor(want, dtype=torch.float64))


def test_box_sine_embedding_batched_and_errors():
    boxes = torch.rand(2, 5, 4)
    assert box_sine_embedding(boxes, 8).shape == (2, 5, 32)
    with pytest.raises(ValueError, match="even"):
        box_sine_embedding(boxes, 3)
    with pytest.raises(ValueError, match="negative width"):
        box_sine_embedding(torch.tensor([[0.5, 0.5, -0.1, 0.2]]), 4)
    with pytest.raises(ValueError, match="NaN"):
        box_sine_embedding(torch.tensor([[0.5, float("nan"), 0.1, 0.2]]), 4)


def test_centerness_grid_hand_computed():
    c = centerness_grid(3)  # centres 0.5, 1.5, 2.5: ratios 0.2, 1, 0.2
    want = torch.tensor([[0.2, math.sqrt(0.2), 0.2], [math.sqrt(0.2), 1.0, math.sqrt(0.2)],
                         [0.2, math.sqrt(0.2), 0.2]])
    torch.testing.assert_close(c, want)
    c7 = centerness_grid(7)
    assert c7[3, 3] == 1.0 and torch.equal(c7, c7.T) and torch.equal(c7, c7.flip(0))
    assert c7[0, 0].item() == pytest.approx(0.5 / 6.5)  # sqrt((0.5 / 6.5)^2)


def test_sine_position_map_matches_formula():
    pos = sine_position_map(2, 3, 4)
    assert pos.shape == (8, 2, 3)
    y = 2 * 2 * math.pi / (2 + 1e-6)  # row 2 of 2
    x = 1 * 2 * math.pi / (3 + 1e-6)  # column 1 of 3
    torch.testing.assert_close(pos[:, 1, 0], torch.tensor([math.sin(y), math.cos(y), math.sin(y / 100),
                                                           math.cos(y / 100), math.sin(x), math.cos(x),
                                                           math.sin(x / 100), math.cos(x / 100)]))


def test_box_pe_adds_projected_code_to_queries_and_keys_only():
    enc = BoxPE(8, 2)
    boxes = torch.rand(2, 3, 4)
    q, k = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
    q2, k2 = enc.rotate(q, k, boxes, boxes)
    p = enc.mlp(box_sine_embedding(boxes, 4))
    torch.testing.assert_close(q2 - q, enc.q_pos_proj(p).view(2, 3, 2, 4).transpose(1, 2))
    torch.testing.assert_close(k2 - k, enc.k_pos_proj(p).view(2, 3, 2, 4).transpose(1, 2))
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(enc.embed(x, boxes), x + p)
    # in attention the values carry no position: with every logit equal the output ignores the boxes
    attn = pet.MultiHeadAttention(8, 2, encoding=enc)
    out = attn(x, q_pos=boxes)
    assert out.shape == (2, 3, 8)
    assert not torch.allclose(out, attn(x, q_pos=torch.rand(2, 3, 4)))


def test_box_pe_errors():
    with pytest.raises(ValueError, match="dim must be even"):
        BoxPE(9, 3)
    enc = BoxPE(8, 2)
    with pytest.raises(ValueError, match="negative width"):
        enc.embed(torch.randn(1, 1, 8), torch.tensor([[[0.5, 0.5, -0.2, 0.1]]]))
    with pytest.raises(ValueError, match="positions"):
        enc.embed(torch.randn(1, 2, 8), torch.rand(1, 3, 4))
    attn = pet.MultiHeadAttention(8, 2, encoding=enc)
    with pytest.raises(ValueError, match="q_pos"):
        attn(torch.randn(1, 2, 8), q_pos=torch.rand(1, 3, 4))


def test_centerness_term_hand_computed():
    dim, r = 4, 3
    enc = CenternessPE(dim, 1, resolution=r)
    features, boxes = torch.randn(2, dim), torch.tensor([[0.5, 0.5, 0.5, 0.25], [0.3, 0.6, 0.2, 0.4]])
    roi_pos = torch.randn(2, r * r, dim)
    term = enc.roi_term(features, boxes, roi_pos)
    c = centerness_grid(r).flatten()
    for k in range(2):
        g = box_sine_embedding(boxes[k], dim // 2)[:dim] * enc.query_scale(features[k])
        ref = enc.ref_head(features[k]).sigmoid()
        g = torch.cat([g[:2] * ref[1] / boxes[k, 3], g[2:] * ref[0] / boxes[k, 2]])  # y-half by h, x-half by w
        for j in range(r * r):
            want = enc.roi_proj(c[j] * roi_pos[k, j]) @ enc.kernel_proj(c[j] * g)
            torch.testing.assert_close(term[k, j], want)
    bias = enc.bias(features[:, None, None], None, boxes[:, None], roi_pos)
    torch.testing.assert_close(bias, term[:, None, None])


def test_centerness_weighting_none_is_the_ablation():
    enc = CenternessPE(4, 1, resolution=3, weighting="none")
    assert torch.equal(enc.centerness, torch.ones(9))
    with pytest.raises(ValueError, match="weighting must be one of"):
        CenternessPE(4, 1, weighting="gauss")


def test_centerness_errors():
    enc = CenternessPE(4, 1, resolution=3)
    f, roi = torch.randn(1, 4), torch.randn(1, 9, 4)
    with pytest.raises(ValueError, match="w > 0 and h > 0"):
        enc.roi_term(f, torch.tensor([[0.5, 0.5, 0.0, 0.2]]), roi)
    with pytest.raises(ValueError, match="NaN"):
        enc.roi_term(f, torch.tensor([[0.5, float("nan"), 0.1, 0.2]]), roi)
    with pytest.raises(ValueError, match="expected features"):
        enc.roi_term(f, torch.tensor([[0.5, 0.5, 0.1, 0.2]]), torch.randn(1, 4, 4))
    with pytest.raises(ValueError, match="resolution must be >= 1"):
        CenternessPE(4, 1, resolution=0)
