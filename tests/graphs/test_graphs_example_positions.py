"""Example positions of the graph encoders: the domain transforms on a fixed grid graph, and their patterns."""

from __future__ import annotations

import math

import networkx as nx
import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import from_networkx

import pe_toolkit as pet
from pe_toolkit.domains.graphs import (
    LaplacianEigenvectorPE,
    LapPEEncoder,
    LearnedRFPEncoder,
    RandomFeaturePropagation,
    RandomWalkPE,
    RFPEncoder,
    RWSEEncoder,
)
from pe_toolkit.domains.graphs.encoders import example_graph
from pe_toolkit.encoders.base import PositionalEncoding

NAMES = ("lap_pe", "rfp", "rfp_learned", "rwse")
LENGTHS = (4, 8, 16, 32)


def build(name: str, dim: int = 32, **options) -> PositionalEncoding:
    return pet.get_encoder(name, dim, 4, **{**pet.encoder_info(name).example_options, **options})


def grid_graph(n: int) -> Data:
    """The first ``n`` nodes (row-major) of a ``ceil(n / w) x w`` grid, ``w = ceil(sqrt(n))``, built with networkx."""
    width = math.ceil(math.sqrt(n))
    g = nx.grid_2d_graph(math.ceil(n / width), width)
    g = g.subgraph(sorted(g.nodes)[:n])
    g = nx.relabel_nodes(g, {(r, c): r * width + c for r, c in g.nodes})
    h = nx.Graph()
    h.add_nodes_from(range(n))
    h.add_edges_from(g.edges)
    data = from_networkx(h) if h.number_of_edges() else Data(edge_index=torch.zeros(2, 0, dtype=torch.long))
    data.num_nodes = n
    return data


def edge_set(edge_index: torch.Tensor) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in edge_index.t()}


# ----------------------------------------------------------------------------------------------- the graph
def test_example_graph_is_the_row_major_grid():
    data = example_graph(7)  # rows 0 1 2 / 3 4 5 / 6
    assert data.num_nodes == 7
    undirected = {(0, 1), (1, 2), (3, 4), (4, 5), (0, 3), (1, 4), (2, 5), (3, 6)}
    assert edge_set(data.edge_index) == undirected | {(b, a) for a, b in undirected}
    for n in (1, 2, 5, 16, 30):
        assert edge_set(example_graph(n).edge_index) == edge_set(grid_graph(n).edge_index)
    assert example_graph(1).edge_index.shape == (2, 0)


# ------------------------------------------------------------------------------ examples equal the transforms
@pytest.mark.parametrize("length", [5, 12, 16])
@pytest.mark.parametrize("walk", [3, 8])
def test_rwse_example_is_random_walk_pe_of_the_grid(length, walk):
    example = RWSEEncoder(32, 4, in_features=walk).example_positions(length)
    assert example.shape == (1, length, walk) and example.dtype == torch.float32
    torch.testing.assert_close(example[0], RandomWalkPE(walk)(grid_graph(length)).rw_pe)


def test_rwse_example_by_hand():
    p = RWSEEncoder(32, 4, in_features=2).example_positions(16)[0]  # 4 x 4 grid
    assert torch.equal(p[:, 0], torch.zeros(16))  # no self loops: no return after one step
    # two steps: sum over neighbours j of 1 / (deg_i deg_j); corner: 2 neighbours of degree 3
    assert p[0, 1].item() == pytest.approx(2 / (2 * 3))
    assert p[5, 1].item() == pytest.approx(2 / (4 * 3) + 2 / (4 * 4))  # inner node: two edge nbrs, two inner


@pytest.mark.parametrize("length", [3, 7, 12])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_lap_pe_example_is_laplacian_eigenvector_pe_of_the_grid(length, k):
    encoder = LapPEEncoder(32, 4, in_features=k)
    reference = LaplacianEigenvectorPE(k)(grid_graph(length))
    example = encoder.example_positions(length)
    assert example.shape == (1, length, k)
    torch.testing.assert_close(example[0], reference.lap_pe, atol=1e-5, rtol=0)
    data = encoder.example_data(length)
    assert torch.equal(data.lap_mask, reference.lap_mask)
    torch.testing.assert_close(data.lap_eigval, reference.lap_eigval)
    # each real column is an eigenvector of the normalised Laplacian with its eigenvalue
    adj = torch.zeros(length, length, dtype=torch.float64)
    adj[data.edge_index[0], data.edge_index[1]] = 1.0
    d = adj.sum(1).rsqrt()
    lap = torch.eye(length, dtype=torch.float64) - d[:, None] * adj * d[None, :]
    v, lam = example[0].double(), data.lap_eigval[0].double()
    real = data.lap_mask[0]
    torch.testing.assert_close((lap @ v)[:, real], (v * lam)[:, real], atol=1e-5, rtol=0)
    assert real.sum() == min(k, length - 1) and torch.equal(v[:, ~real], torch.zeros_like(v[:, ~real]))


@pytest.mark.parametrize(("in_features", "num_inits"), [(6, 2), (8, 2), (5, 1), (2, 2), (3, 3)])
def test_rfp_example_is_random_feature_propagation_of_the_grid(in_features, num_inits):
    length = 9
    example = RFPEncoder(32, 4, in_features=in_features, num_inits=num_inits).example_positions(length)
    assert example.shape == (1, length, in_features)
    width = in_features // num_inits
    if width > 1:  # one channel per init, width - 1 steps: exactly the transform's output
        reference = RandomFeaturePropagation(1, width - 1, num_inits=num_inits, seed=0)(grid_graph(length)).rfp
        torch.testing.assert_close(example[0], reference)
    blocks = example[0].double().unflatten(-1, (num_inits, width))
    torch.testing.assert_close(blocks.norm(dim=0), torch.ones(num_inits, width, dtype=torch.float64))  # l2 per column
    a_hat = torch.eye(length, dtype=torch.float64)
    data = example_graph(length)
    a_hat[data.edge_index[0], data.edge_index[1]] = 1.0
    d = a_hat.sum(1).rsqrt()
    a_hat = d[:, None] * a_hat * d[None, :]
    for step in range(1, width):  # X_l = normalise(A_hat X_{l-1})
        nxt = a_hat @ blocks[:, :, step - 1]
        torch.testing.assert_close(blocks[:, :, step], nxt / nxt.norm(dim=0), atol=1e-6, rtol=0)


@pytest.mark.parametrize("steps", [1, 3])
def test_rfp_learned_example_and_the_mean_operator(steps):
    length, r = 10, 4
    encoder = LearnedRFPEncoder(32, 4, in_features=r, steps=steps)
    example = encoder.example_positions(length)
    reference = RandomFeaturePropagation(r, steps, operator="rw", normalization="l2", seed=0)(grid_graph(length)).rfp
    assert example.shape == (length, r)
    torch.testing.assert_close(example, reference[:, :r])
    # with x = 0 every attention score is 0: the learned operator is the fixed "rw" mean over N(i) + i
    with torch.no_grad():
        trajectory = encoder.trajectory(torch.zeros(length, 32), example, example_graph(length).edge_index)
    torch.testing.assert_close(trajectory, reference, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------------ patterns
def embed_only_pattern(e: torch.Tensor, heads: int = 4) -> torch.Tensor:
    """The documented pattern of an ``embed``-only encoding: ``e_i . e_j / sqrt(head_dim)`` per head, ``e (N, dim)``."""
    n, dim = e.shape
    hd = dim // heads
    q = e.reshape(n, heads, hd).transpose(0, 1)
    return q @ q.transpose(-1, -2) / math.sqrt(hd)


@pytest.mark.parametrize("name", ["rwse", "rfp", "lap_pe"])
def test_dense_patterns_equal_the_base_recipe(name):
    encoder = build(name).eval()
    length = 12  # > in_features + 1: no padded Laplacian columns, so the mask changes nothing
    example = encoder.example_positions(length)
    base = PositionalEncoding.positional_pattern(encoder, length, positions=example)
    torch.testing.assert_close(encoder.positional_pattern(length), base)
    with torch.no_grad():
        e = encoder.embed(torch.zeros(1, length, 32), example)[0]
    torch.testing.assert_close(base, embed_only_pattern(e), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("options", [{"use_eigenvalues": True}, {"signnet": True},
                                     {"signnet": True, "use_eigenvalues": True}])
def test_lap_pe_pattern_passes_eigenvalues_and_mask(options):
    encoder = LapPEEncoder(32, 4, in_features=6, **options).eval()
    length = 5  # 4 non-trivial eigenvectors for 6 features: padded columns, masked
    data = encoder.example_data(length)
    with torch.no_grad():
        e = encoder.embed(torch.zeros(length, 32), data.lap_pe, eigenvalues=data.lap_eigval, mask=data.lap_mask)
    torch.testing.assert_close(encoder.positional_pattern(length), embed_only_pattern(e), atol=1e-5, rtol=1e-5)
    if encoder.use_eigenvalues:
        with pytest.raises(ValueError, match="eigenvalues"):
            encoder.positional_pattern(length, positions=encoder.example_positions(length))


def test_rfp_learned_pattern_by_hand_and_with_explicit_edges():
    encoder = LearnedRFPEncoder(32, 4, in_features=4, steps=2)
    length = 9
    example = encoder.example_positions(length)
    reference = RandomFeaturePropagation(4, 2, operator="rw", normalization="l2", seed=0)(grid_graph(length)).rfp
    with torch.no_grad():
        e = encoder.proj(reference)
    torch.testing.assert_close(encoder.positional_pattern(length), embed_only_pattern(e), atol=1e-5, rtol=1e-5)
    path = torch.tensor([[i for i in range(length - 1)] + [i + 1 for i in range(length - 1)],
                         [i + 1 for i in range(length - 1)] + [i for i in range(length - 1)]])
    on_path = encoder.positional_pattern(length, positions=example, edge_index=path)
    assert on_path.shape == (4, length, length) and not torch.allclose(on_path, encoder.positional_pattern(length))
    with pytest.raises(ValueError, match="positions has shape"):
        encoder.positional_pattern(length + 1, positions=example)


def test_patterns_leave_modes_and_batchnorm_statistics_unchanged():
    encoder = build("rwse")  # BatchNorm1d on the return probabilities
    encoder.norm(torch.rand(20, 4))  # some running statistics to keep
    encoder.train()
    before = {k: v.clone() for k, v in encoder.norm.state_dict().items()}
    pattern = encoder.positional_pattern(16)
    assert all(m.training for m in encoder.modules())
    for key, value in encoder.norm.state_dict().items():
        assert torch.equal(value, before[key]), key
    torch.testing.assert_close(pattern, encoder.eval().positional_pattern(16))  # computed in eval mode
    for name in NAMES:
        encoder = build(name)
        encoder.train()
        encoder.positional_pattern(8)
        assert all(m.training for m in encoder.modules())
        encoder.eval()
        encoder.positional_pattern(8)
        assert not any(m.training for m in encoder.modules())


def test_lap_pe_pattern_draws_no_sign_flips_in_training_mode():
    encoder = LapPEEncoder(32, 4, in_features=4, sign_flip="batch")
    encoder.train()
    assert torch.equal(encoder.positional_pattern(10), encoder.eval().positional_pattern(10))
