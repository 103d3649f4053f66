"""Example object layouts of the multirobot encoders and the patterns drawn from them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.domains.multirobot.encoders import (
    EdgeAwareGraphEncoding,
    FourierFeatureEncoding,
    Rotary2DEncoding,
    object_layout,
)
from pe_toolkit.domains.multirobot.graph import NO_EDGE, delaunay_edges, edge_distance_matrix
from pe_toolkit.domains.multirobot.simulator import SimConfig, in_fov

NAMES = ("object_rope2d", "object_fourier", "edge_aware_graph")
LENGTHS = (4, 8, 16, 32)


def build(name: str, dim: int = 32, **options):
    return pet.get_encoder(name, dim, 4, **{**pet.encoder_info(name).example_options, **options})


@pytest.mark.parametrize("count", [1, 3, 10, 32])
def test_layout_lies_in_the_default_sensing_cone(count):
    xy = object_layout(count)
    assert xy.shape == (count, 2) and xy.dtype == torch.float32
    config = SimConfig()
    assert in_fov(xy.double().numpy() * config.fov_range, config.fov_range, config.fov_angle).all()
    assert xy.norm(dim=-1).max() <= 1.0 and (xy[:, 0] > 0).all()  # ahead of the robot, within range
    assert len({tuple(p) for p in xy.tolist()}) == count  # no two objects coincide
    if count >= 3:
        assert np.linalg.matrix_rank(xy.double().numpy() - xy.double().numpy().mean(0), tol=1e-6) == 2
        assert delaunay_edges(xy.numpy())[0].shape[1] >= 2 * (count - 1)  # a real triangulation


def test_layout_by_hand():
    xy = object_layout(2).double()
    r0, r1 = math.sqrt(0.25), math.sqrt(0.75)
    golden = (math.sqrt(5) - 1) / 2
    b0, b1 = math.radians(100) * (0.5 * golden - 0.5), math.radians(100) * (1.5 * golden - 0.5)
    torch.testing.assert_close(xy, torch.tensor([[r0 * math.cos(b0), r0 * math.sin(b0)],
                                                 [r1 * math.cos(b1), r1 * math.sin(b1)]], dtype=torch.float64),
                               atol=1e-6, rtol=0)


def test_examples_are_the_layout_in_each_format():
    xy = object_layout(9)
    assert torch.equal(Rotary2DEncoding(32, 4).example_positions(9), xy)
    assert torch.equal(FourierFeatureEncoding(32, 4).example_positions(9), xy)
    assert torch.equal(FourierFeatureEncoding(32, 4, position_dims=1).example_positions(9), xy[:, :1])
    three = FourierFeatureEncoding(32, 4, position_dims=3).example_positions(9)
    assert torch.equal(three[:, :2], xy) and torch.equal(three[:, 2], torch.zeros(9))  # on the ground plane
    graph = EdgeAwareGraphEncoding(32, 4).example_positions(9)
    assert graph.shape == (9, 11) and torch.equal(graph[:, :2], xy)
    torch.testing.assert_close(graph[:, 2:], torch.from_numpy(edge_distance_matrix(xy.numpy())).float())
    edges = graph[:, 2:]
    assert torch.equal(edges, edges.T) and torch.equal(edges.diagonal(), torch.zeros(9))
    assert (edges == NO_EDGE).any()  # a Delaunay graph of 9 points is not complete


@pytest.mark.parametrize("mode", ["axial", "mixed"])
def test_rope2d_pattern_depends_only_on_coordinate_differences(mode):
    encoder = Rotary2DEncoding(32, 4, mode=mode)
    xy = encoder.example_positions(12)
    pattern = encoder.positional_pattern(12)
    for shift in ([0.3, -0.7], [-2.0, 1.5]):
        shifted = encoder.positional_pattern(12, positions=xy + torch.tensor(shift))
        torch.testing.assert_close(shifted, pattern, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(encoder.positional_pattern(12, positions=2 * xy), pattern, atol=1e-3)  # not scale
    torch.testing.assert_close(pattern.diagonal(dim1=-2, dim2=-1), torch.zeros(4, 12), atol=1e-5, rtol=0)


def test_edge_aware_pattern_is_the_edge_term_on_edges_and_masked_elsewhere():
    encoder = EdgeAwareGraphEncoding(32, 4)
    positions = encoder.example_positions(10)
    edges = positions[:, 2:]
    query_term = encoder.edge_weight.detach().sum(-1) / math.sqrt(8)  # ones . w_h / sqrt(d), per head
    expected = (edges.clamp_min(0) * query_term[:, None, None]).masked_fill(edges < 0, float("-inf"))
    pattern = encoder.positional_pattern(10)
    torch.testing.assert_close(pattern, expected)  # attention never reaches a pair that is not an edge
    assert (edges < 0).any() and torch.isfinite(pattern[:, edges >= 0]).all()


def test_edge_aware_pattern_with_rope2d_adds_the_rotary_change():
    encoder = EdgeAwareGraphEncoding(32, 4, object_pe="rope2d")
    positions = encoder.example_positions(8)
    rotary = encoder.rotary.positional_pattern(8, positions=positions[:, :2])
    pattern = encoder.positional_pattern(8)
    is_edge = positions[:, 2:] >= 0
    assert torch.isneginf(pattern[:, ~is_edge]).all() and torch.isfinite(pattern[:, is_edge]).all()
    # an object's edge to itself has length 0: no edge term, only the rotary change (0 at distance 0)
    torch.testing.assert_close(pattern.diagonal(dim1=-2, dim2=-1), rotary.diagonal(dim1=-2, dim2=-1))
    assert not torch.allclose(pattern[:, is_edge], rotary[:, is_edge])  # the edge term is there
    with pytest.raises(ValueError, match="2 \\+ L"):
        encoder.positional_pattern(8, positions=positions[:, :2])
