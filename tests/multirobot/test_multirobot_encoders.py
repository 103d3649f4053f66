"""Object PEs (2-D rotary, Fourier features) and the edge-aware graph attention encoding."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
import pe_toolkit.domains.multirobot  # noqa: F401  (registers the encoders)
from pe_toolkit.domains.multirobot.encoders import EdgeAwareGraphEncoding, FourierFeatureEncoding, Rotary2DEncoding
from pe_toolkit.nn.attention import MultiHeadAttention, positional_logits


def test_registered_under_multirobot():
    assert pet.list_encoders(domain="multirobot") == ["edge_aware_graph", "object_fourier", "object_rope2d"]
    for name in pet.list_encoders(domain="multirobot"):
        info = pet.encoder_info(name)
        assert "20" in info.reference and info.cls.__doc__
        enc = pet.get_encoder(name, 16, 2, **info.example_options)
        assert enc.position_vector_dims == 1
    assert pet.encoder_info("object_rope2d").hooks == ("rotate",)
    assert pet.encoder_info("object_fourier").hooks == ("embed",)
    assert set(pet.encoder_info("edge_aware_graph").hooks) == {"rotate", "bias"}


def test_axial_rope2d_matches_the_formula():
    enc = Rotary2DEncoding(4, 1, min_wavelength=0.5, max_wavelength=2.0).double()  # head_dim 4: one pair per axis
    # wavelengths: a single value per axis -> logspace(2, 0.5, 1) = [2.0]
    omega = 2 * math.pi / 2.0
    q = torch.tensor([[[[1.0, 0.0, 0.0, 1.0]]]], dtype=torch.float64)  # pairs (q0, q2) and (q1, q3)
    pos = torch.tensor([[0.3, -0.2]], dtype=torch.float64)
    q_rot, _ = enc.rotate(q, q, pos, pos)
    ax, ay = omega * 0.3, omega * -0.2
    expected = torch.tensor([math.cos(ax), -math.sin(ay), math.sin(ax), math.cos(ay)], dtype=torch.float64)
    torch.testing.assert_close(q_rot[0, 0, 0], expected)


@pytest.mark.parametrize("mode", ["axial", "mixed"])
def test_rope2d_logits_depend_only_on_relative_positions(mode):
    enc = Rotary2DEncoding(32, 4, mode=mode).double()
    q, k = torch.randn(2, 4, 5, 8, dtype=torch.float64), torch.randn(2, 4, 7, 8, dtype=torch.float64)
    q_pos, k_pos = torch.randn(2, 5, 2, dtype=torch.float64), torch.randn(2, 7, 2, dtype=torch.float64)
    shift = torch.tensor([3.0, -1.5], dtype=torch.float64)
    base = positional_logits(enc, q, k, q_pos, k_pos)
    torch.testing.assert_close(positional_logits(enc, q, k, q_pos + shift, k_pos + shift), base)
    assert not torch.allclose(positional_logits(enc, q, k, q_pos, k_pos + shift), base)


def test_rope2d_in_core_cross_attention_and_errors():
    attn = MultiHeadAttention(32, 4, encoding=Rotary2DEncoding(32, 4))
    x, ctx = torch.randn(2, 3, 32), torch.randn(2, 6, 32)
    out = attn(x, ctx, q_pos=torch.randn(2, 3, 2), k_pos=torch.randn(2, 6, 2))
    assert out.shape == (2, 3, 32)
    with pytest.raises(ValueError, match="divisible by 4"):
        Rotary2DEncoding(24, 4)  # head_dim 6
    with pytest.raises(ValueError, match="min_wavelength < max_wavelength"):
        Rotary2DEncoding(32, 4, min_wavelength=2.0, max_wavelength=1.0)
    with pytest.raises(ValueError, match="mode"):
        Rotary2DEncoding(32, 4, mode="spiral")
    with pytest.raises(ValueError, match=r"positions must have shape \(L, 2\)"):
        Rotary2DEncoding(32, 4).angles(torch.zeros(3, 3), torch.float32)


def test_mixed_rope2d_learns_its_frequencies():
    enc = Rotary2DEncoding(16, 2, mode="mixed")
    q = torch.randn(1, 2, 4, 8)
    pos = torch.randn(4, 2)
    qr, kr = enc.rotate(q, q, pos, pos)
    (qr * kr.roll(1, dims=2)).sum().backward()
    assert enc.frequencies.grad is not None and enc.frequencies.grad.abs().sum() > 0


def test_fourier_features_formula_shape_and_gradients():
    enc = FourierFeatureEncoding(16, 2, num_features=8, gamma=2.0)
    pos = torch.randn(3, 5, 2)
    z = pos @ enc.projection.weight.T
    torch.testing.assert_close(enc.features(pos), torch.cat([z.cos(), z.sin()], -1) / math.sqrt(8))
    x = torch.randn(3, 5, 16)
    out = enc.embed(x, pos)
    assert out.shape == x.shape and not torch.allclose(out, enc.embed(x, pos + 0.5))
    out.sum().backward()
    assert enc.projection.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="num_features must be even"):
        FourierFeatureEncoding(16, 2, num_features=7)
    with pytest.raises(ValueError, match="do not match"):
        enc.embed(x, torch.randn(3, 4, 2))


def _graph_positions(xy: torch.Tensor, edges: torch.Tensor) -> torch.Tensor:
    return torch.cat([xy, edges], dim=-1)


def test_edge_aware_attention_follows_the_graph():
    enc = EdgeAwareGraphEncoding(16, 2).double()
    attn = MultiHeadAttention(16, 2, encoding=enc).double()
    # a path 0 - 1 - 2 and an isolated node 3 (which sees only itself)
    edges = torch.full((4, 4), -1.0, dtype=torch.float64)
    edges.fill_diagonal_(0.0)
    edges[0, 1] = edges[1, 0] = 0.5
    edges[1, 2] = edges[2, 1] = 0.7
    pos = _graph_positions(torch.randn(4, 2, dtype=torch.float64), edges).unsqueeze(0)
    x = torch.randn(1, 4, 16, dtype=torch.float64)
    out = attn(x, q_pos=pos)
    moved = x.clone()
    moved[0, 2] += 5.0  # node 2 is not a neighbour of node 0 or node 3
    out2 = attn(moved, q_pos=pos)
    torch.testing.assert_close(out2[0, 0], out[0, 0])
    torch.testing.assert_close(out2[0, 3], out[0, 3])
    assert not torch.allclose(out2[0, 1], out[0, 1])
    # the edge term: bias = A_ij (q_i . w_h) / sqrt(d) on edges
    q = torch.randn(1, 2, 4, 8, dtype=torch.float64)
    bias = enc.bias(q, q, pos, pos)
    expected = edges[0, 1] * (q[0, 1, 0] @ enc.edge_weight[1]) / math.sqrt(8)
    torch.testing.assert_close(bias[0, 1, 0, 1], expected)
    assert torch.isneginf(bias[0, :, 0, 2]).all() and (bias[0, :, 3, 3] == 0).all()


def test_edge_aware_with_rope2d_and_bad_positions():
    enc = EdgeAwareGraphEncoding(32, 4, object_pe="rope2d")
    edges = torch.zeros(2, 3, 3)
    attn = MultiHeadAttention(32, 4, encoding=enc)
    assert attn(torch.randn(2, 3, 32), q_pos=_graph_positions(torch.randn(2, 3, 2), edges)).shape == (2, 3, 32)
    with pytest.raises(ValueError, match=r"\(L, 2 \+ L\)"):
        enc.bias(torch.zeros(2, 4, 3, 8), torch.zeros(2, 4, 3, 8), torch.zeros(2, 3, 2), torch.zeros(2, 3, 2))
    bad = _graph_positions(torch.zeros(1, 2, 2), -torch.ones(1, 2, 2))
    # the per-layer bias reads nothing from the device: the attention's entry checks the self loops, once
    with pytest.raises(ValueError, match=r"diagonal of the edge-length matrix \(q_pos\[\.\.\., 2:\]\)"):
        attn(torch.randn(1, 2, 32), q_pos=bad)
    with pytest.raises(ValueError, match="diagonal"):
        enc.positional_pattern(2, positions=bad[0])
    with pytest.raises(ValueError, match="object_pe"):
        EdgeAwareGraphEncoding(32, 4, object_pe="fourier")
