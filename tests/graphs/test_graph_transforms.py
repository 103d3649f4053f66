"""Graph PE transforms: closed forms, PyG agreement, equivariance, edge cases and every error path."""

from __future__ import annotations

import copy
from math import comb

import networkx as nx
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Data
from torch_geometric.transforms import AddLaplacianEigenvectorPE, AddRandomWalkPE
from torch_geometric.utils import from_networkx

from pe_toolkit.domains.graphs import LaplacianEigenvectorPE, RandomFeaturePropagation, RandomWalkPE
from pe_toolkit.domains.graphs.transforms import laplacian_residual, random_walk_std


def graph(g: nx.Graph) -> Data:
    g = nx.convert_node_labels_to_integers(g)
    data = from_networkx(g) if g.number_of_edges() else Data(edge_index=torch.zeros(2, 0, dtype=torch.long))
    data.num_nodes = g.number_of_nodes()
    return data


def er_graph(n: int, p: float, seed: int) -> Data:
    return graph(nx.gnp_random_graph(n, p, seed=seed))


def assert_equal_up_to_sign(a: torch.Tensor, b: torch.Tensor, atol: float = 1e-5) -> None:
    signs = torch.sign((a * b).sum(0))
    signs[signs == 0] = 1
    torch.testing.assert_close(a, b * signs, atol=atol, rtol=0)


def snapshot(data: Data) -> dict:
    return {key: value.clone() if isinstance(value, torch.Tensor) else copy.copy(value) for key, value in data.items()}


# ------------------------------------------------------------------------------------------- closed forms
@pytest.mark.parametrize("n,k", [(12, 11), (12, 5), (30, 7)])
def test_cycle_laplacian_eigenvalues(n, k):
    out = LaplacianEigenvectorPE(k)(graph(nx.cycle_graph(n)))
    expected = np.sort(1 - np.cos(2 * np.pi * np.arange(1, n) / n))[:k]
    torch.testing.assert_close(out.lap_eigval[0].double(), torch.from_numpy(expected), atol=1e-6, rtol=0)
    assert (out.lap_eigval == out.lap_eigval[0]).all()  # repeated per node
    v = out.lap_pe.double()
    torch.testing.assert_close(v.T @ v, torch.eye(k, dtype=torch.float64), atol=1e-5, rtol=0)


@pytest.mark.parametrize("n", [20, 21])
def test_cycle_return_probabilities(n):
    steps = 10  # < n: no walk wraps around the cycle
    pe = RandomWalkPE(steps)(graph(nx.cycle_graph(n))).rw_pe
    expected = torch.tensor([comb(t, t // 2) / 2**t if t % 2 == 0 else 0.0 for t in range(1, steps + 1)])
    torch.testing.assert_close(pe, expected.expand(n, steps), atol=1e-6, rtol=0)


def test_path_of_three_by_hand():
    data = graph(nx.path_graph(3))
    pe = RandomWalkPE(4)(data).rw_pe
    torch.testing.assert_close(pe, torch.tensor([[0, .5, 0, .5], [0, 1, 0, 1], [0, .5, 0, .5]]), atol=1e-6, rtol=0)
    out = LaplacianEigenvectorPE(2)(data)
    torch.testing.assert_close(out.lap_eigval[0], torch.tensor([1.0, 2.0]), atol=1e-6, rtol=0)
    r = 2**-0.5  # canonical signs: the largest-magnitude entry positive, first in node order on ties
    expected = torch.tensor([[r, -0.5], [0.0, r], [-r, -0.5]])
    torch.testing.assert_close(out.lap_pe, expected, atol=1e-6, rtol=0)


def test_star_eigenvalues():
    out = LaplacianEigenvectorPE(4)(graph(nx.star_graph(4)))  # centre + 4 leaves: 0, 1, 1, 1, 2
    torch.testing.assert_close(out.lap_eigval[0], torch.tensor([1.0, 1.0, 1.0, 2.0]), atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------------- PyG agreement
def test_matches_pyg_laplacian_up_to_sign():
    data = er_graph(40, 0.15, seed=1)
    assert nx.is_connected(nx.gnp_random_graph(40, 0.15, seed=1))
    ours = LaplacianEigenvectorPE(4)(data).lap_pe
    theirs = AddLaplacianEigenvectorPE(4, attr_name="pe", is_undirected=True)(data).pe.float()
    assert_equal_up_to_sign(ours, theirs)


@pytest.mark.parametrize("directed", [False, True])
def test_matches_pyg_random_walk(directed):
    data = er_graph(40, 0.1, seed=2)
    if directed:
        data.edge_index = data.edge_index[:, data.edge_index[0] < data.edge_index[1]]
    data.edge_index = torch.cat([data.edge_index, torch.tensor([[5], [5]])], dim=1)  # a self-loop
    ours = RandomWalkPE(7)(data).rw_pe
    theirs = AddRandomWalkPE(7, attr_name="pe")(data).pe
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_weighted_random_walk_matches_dense_matrix_power():
    data = er_graph(25, 0.2, seed=3)
    w = torch.rand(data.edge_index.size(1), generator=torch.Generator().manual_seed(0)) + 0.1
    a = torch.zeros(25, 25, dtype=torch.float64)
    a[data.edge_index[0], data.edge_index[1]] = w.double()
    a = a + a.T  # symmetric weights
    data.edge_index, data.edge_weight = a.nonzero().T, a[a != 0].float()
    p = a / a.sum(1, keepdim=True).clamp(min=1e-12)
    expected = torch.stack([torch.linalg.matrix_power(p, t).diagonal() for t in range(1, 6)], dim=1)
    for block in (1, 7, 1024):
        got = RandomWalkPE(5, block_size=block, dtype=torch.float64)(data).rw_pe
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------------- equivariance
def test_permutation_equivariance():
    data = er_graph(30, 0.2, seed=4)
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(1))
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(30)
    permuted = Data(edge_index=inv[data.edge_index], num_nodes=30)  # node perm[i] of data is node i here
    rw, rw_p = RandomWalkPE(6)(data).rw_pe, RandomWalkPE(6)(permuted).rw_pe
    torch.testing.assert_close(rw[perm], rw_p, atol=1e-6, rtol=0)
    lap, lap_p = LaplacianEigenvectorPE(5)(data), LaplacianEigenvectorPE(5)(permuted)
    torch.testing.assert_close(lap.lap_eigval, lap_p.lap_eigval, atol=1e-5, rtol=0)
    assert (np.diff(lap.lap_eigval[0].numpy()) > 1e-4).all()  # simple eigenvalues: unique up to sign
    assert_equal_up_to_sign(lap.lap_pe[perm], lap_p.lap_pe)


def test_cycle_eigenspaces_agree_as_projectors():
    # eigenvalues of C_n come in pairs: compare projectors onto the pairs, not vectors
    data = graph(nx.cycle_graph(16))
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(2))
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(16)
    v = LaplacianEigenvectorPE(4)(data).lap_pe.double()[perm]
    w = LaplacianEigenvectorPE(4)(Data(edge_index=inv[data.edge_index], num_nodes=16)).lap_pe.double()
    for cols in (slice(0, 2), slice(2, 4)):
        torch.testing.assert_close(v[:, cols] @ v[:, cols].T, w[:, cols] @ w[:, cols].T, atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------------- solvers
@pytest.mark.parametrize("make", [lambda: er_graph(120, 0.06, seed=5),
                                  lambda: graph(nx.disjoint_union_all([nx.cycle_graph(9), nx.path_graph(40),
                                                                       nx.empty_graph(3),
                                                                       nx.gnp_random_graph(60, 0.1, seed=6)]))])
def test_dense_and_sparse_solvers_agree(make):
    data = make()
    dense = LaplacianEigenvectorPE(6, solver="dense", dtype=torch.float64)(data)
    sparse = LaplacianEigenvectorPE(6, solver="sparse", dtype=torch.float64)(data)
    torch.testing.assert_close(dense.lap_eigval, sparse.lap_eigval, atol=1e-8, rtol=0)
    vals = dense.lap_eigval[0].numpy()
    simple = [j for j in range(6) if min(abs(vals[j] - np.delete(vals, j)), default=1.0) > 1e-6]
    assert simple, "the test graph needs some simple eigenvalues"
    assert_equal_up_to_sign(dense.lap_pe[:, simple], sparse.lap_pe[:, simple], atol=1e-6)


def ring_plus_random_edges(n: int, seed: int = 0) -> Data:
    """Connected, mean degree ~6: the benchmark's random graphs."""
    import torch_geometric.utils as pyg_utils

    generator = torch.Generator().manual_seed(seed)
    ring = torch.arange(n)
    extra = torch.randint(0, n, (2, 2 * n), generator=generator)
    edge_index = torch.cat([torch.stack([ring, (ring + 1) % n]), extra], dim=1)
    edge_index = pyg_utils.to_undirected(pyg_utils.remove_self_loops(edge_index)[0], num_nodes=n)
    return Data(edge_index=edge_index, num_nodes=n)


def dense_laplacian(data: Data) -> np.ndarray:
    n = data.num_nodes
    adj = np.zeros((n, n))
    adj[data.edge_index[0].numpy(), data.edge_index[1].numpy()] = 1.0
    d = 1 / np.sqrt(adj.sum(1))
    return np.eye(n) - d[:, None] * adj * d[None, :]


def max_residual(lap: np.ndarray, vecs, vals) -> float:
    """``max_j |L v_j - lambda_j v_j|`` in float64 for unit-normalised ``v_j``."""
    v = np.asarray(vecs, dtype=np.float64)
    v = v / np.linalg.norm(v, axis=0)
    return float(np.linalg.norm(lap @ v - v * np.asarray(vals, dtype=np.float64), axis=0).max())


def test_precision_defaults_follow_the_output_dtype():
    single, double = LaplacianEigenvectorPE(8), LaplacianEigenvectorPE(8, dtype=torch.float64)
    assert (single.precision, single.tol) == ("single", 0.0) and (double.precision, double.tol) == ("double", 0.0)
    assert LaplacianEigenvectorPE(8, precision="double").tol == 1e-7
    assert "precision='single'" in repr(single)  # part of a dataset's pre_transform cache key
    with pytest.raises(ValueError, match="precision must be one of"):
        LaplacianEigenvectorPE(8, precision="half")


def test_float32_lanczos_is_as_accurate_as_pyg_with_exact_eigenvalues():
    """Float32 Lanczos + float64 Rayleigh-Ritz (the float32 default): residuals at PyG's level (PyG also runs
    float32 Lanczos), eigenvalues to ~1e-9 against a dense float64 reference; "double" keeps 1e-7 residuals."""
    data = ring_plus_random_edges(600)
    lap = dense_laplacian(data)
    ref_vals = np.linalg.eigvalsh(lap)[1:9]
    out = LaplacianEigenvectorPE(8, solver="sparse")(data)
    vals, vecs = out.lap_eigval[0].double().numpy(), out.lap_pe.double().numpy()
    np.testing.assert_allclose(vals, ref_vals, atol=1e-7, rtol=0)  # float32 storage: 1.5e-8 at lambda ~ 0.25
    ours = max_residual(lap, vecs, ref_vals)
    with torch.random.fork_rng():
        pyg = AddLaplacianEigenvectorPE(8, is_undirected=True)(data).laplacian_eigenvector_pe
    theirs = max_residual(lap, pyg.numpy(), ref_vals)
    assert ours < 1e-5 and ours < 3 * theirs, (ours, theirs)
    np.testing.assert_allclose(vecs.T @ vecs, np.eye(8), atol=1e-6)
    precise = LaplacianEigenvectorPE(8, solver="sparse", precision="double", dtype=torch.float64)(data)
    assert max_residual(lap, precise.lap_pe.numpy(), precise.lap_eigval[0].numpy()) < 1e-9
    np.testing.assert_allclose(precise.lap_eigval[0].numpy(), ref_vals, atol=1e-10, rtol=0)


def test_small_graph_connectivity_is_decided_exactly():
    """Small graphs skip component labelling only when lambda_1 clearly proves connectivity: two triangles joined
    by a 1e-12 edge are one component (one trivial vector) although lambda_1 ~ 1e-13; without it, two."""
    edges = [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (2, 3)]
    src, dst = zip(*edges)
    edge_index = torch.tensor([src + dst, dst + src])
    weight = torch.ones(edge_index.size(1), dtype=torch.float64)
    weight[[6, 13]] = 1e-12
    transform = LaplacianEigenvectorPE(4, dtype=torch.float64)
    vals, _, trivial = transform.eigenpairs(Data(edge_index=edge_index, edge_weight=weight, num_nodes=6))
    assert trivial == 1 and 0 < vals[0] < 1e-8
    vals, _, trivial = transform.eigenpairs(Data(edge_index=edge_index[:, [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]],
                                                 num_nodes=6))
    assert trivial == 2 and vals[0] > 1


def test_signs_are_deterministic_and_ignore_the_global_rng():
    data = er_graph(30, 0.2, seed=7)
    torch.manual_seed(1)
    a = LaplacianEigenvectorPE(5)(data).lap_pe
    state = torch.random.get_rng_state()
    torch.manual_seed(2)
    b = LaplacianEigenvectorPE(5)(data).lap_pe
    assert torch.equal(a, b)
    torch.manual_seed(1)
    LaplacianEigenvectorPE(5)(data)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG was not advanced
    idx = a.abs().argmax(0)
    assert (a[idx, torch.arange(5)] > 0).all()


def test_rw_normalization_rescales_sym_eigenvectors():
    data = er_graph(30, 0.2, seed=8)
    sym = LaplacianEigenvectorPE(3, dtype=torch.float64)(data)
    rw = LaplacianEigenvectorPE(3, normalization="rw", dtype=torch.float64)(data)
    torch.testing.assert_close(sym.lap_eigval, rw.lap_eigval)
    deg = torch.bincount(data.edge_index[0], minlength=30).double()
    u = sym.lap_pe / deg.sqrt()[:, None]
    assert_equal_up_to_sign(rw.lap_pe, u / u.norm(dim=0), atol=1e-8)


# ------------------------------------------------------------------------------------------- edge cases
def test_tiny_graph_is_padded_with_a_mask():
    out = LaplacianEigenvectorPE(4)(graph(nx.path_graph(3)))  # 2 non-trivial eigenvectors
    assert out.lap_pe.shape == out.lap_eigval.shape == out.lap_mask.shape == (3, 4)
    assert out.lap_mask.dtype == torch.bool
    assert out.lap_mask.all(0).tolist() == [True, True, False, False] and (out.lap_mask == out.lap_mask[0]).all()
    assert (out.lap_pe[:, 2:] == 0).all() and (out.lap_eigval[:, 2:] == 0).all()


def test_disconnected_graph_and_isolated_nodes():
    # triangle (0, 1.5, 1.5) + path P3 (0, 1, 2) + isolated node: 2 trivial eigenvectors, 4 non-trivial
    g = nx.disjoint_union_all([nx.cycle_graph(3), nx.path_graph(3), nx.empty_graph(1)])
    data = graph(g)
    out = LaplacianEigenvectorPE(5)(data)
    torch.testing.assert_close(out.lap_eigval[0], torch.tensor([1.0, 1.5, 1.5, 2.0, 0.0]), atol=1e-6, rtol=0)
    assert out.lap_mask[0].tolist() == [True, True, True, True, False]
    assert (out.lap_pe[6] == 0).all()  # the isolated node
    assert (out.lap_pe[:3, [0, 3]].abs() < 1e-6).all()  # path eigenvectors live on the path
    assert (out.lap_pe[3:6, [1, 2]].abs() < 1e-6).all()  # triangle eigenvectors live on the triangle
    rw = RandomWalkPE(4)(data).rw_pe
    assert (rw[6] == 0).all()


def test_many_components_are_solved_one_by_one():
    # 400 disjoint P3 (1,200 nodes): a global solve would need k + 400 pairs; per component it is instant
    data = graph(nx.disjoint_union_all([nx.path_graph(3)] * 400))
    out = LaplacianEigenvectorPE(3)(data)
    torch.testing.assert_close(out.lap_eigval[0], torch.tensor([1.0, 1.0, 1.0]), atol=1e-6, rtol=0)
    support = (out.lap_pe.abs() > 1e-8).nonzero()[:, 0] // 3
    assert support.tolist() == [0, 0, 1, 1, 2, 2]  # ties go to the lowest components, one column each
    r = 2**-0.5
    torch.testing.assert_close(out.lap_pe[:3, 0], torch.tensor([r, 0.0, -r]), atol=1e-6, rtol=0)


@pytest.mark.parametrize("n", [1, 3])
def test_graph_without_edges(n):
    data = graph(nx.empty_graph(n))
    out = LaplacianEigenvectorPE(2)(data)
    assert (out.lap_pe == 0).all() and not out.lap_mask.any()
    assert (RandomWalkPE(3)(data).rw_pe == 0).all()
    rfp = RandomFeaturePropagation(2, 2)(data).rfp
    assert rfp.shape == (n, 6) and torch.isfinite(rfp).all()


def test_self_loop_only_node_returns_with_probability_one():
    data = Data(edge_index=torch.tensor([[0, 1, 2], [0, 2, 1]]), num_nodes=3)
    pe = RandomWalkPE(3)(data).rw_pe
    torch.testing.assert_close(pe, torch.tensor([[1.0, 1, 1], [0, 1, 0], [0, 1, 0]]))


@pytest.mark.parametrize("transform", [LaplacianEigenvectorPE(3), RandomWalkPE(3), RandomFeaturePropagation(2, 2),
                                       RandomWalkPE(3, method="monte_carlo", num_walks=10)],
                         ids=["lap", "rw", "rfp", "rw_mc"])
def test_input_is_not_mutated_and_attr_name_none_concatenates(transform):
    data = er_graph(12, 0.3, seed=9)
    data.x = torch.randn(12, 2)
    before = snapshot(data)
    out = transform(data)
    after = snapshot(data)
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert torch.equal(value, after[key]) if isinstance(value, torch.Tensor) else value == after[key]
    assert out is not data
    pe = out[next(k for k in ("lap_pe", "rw_pe", "rfp") if k in out)]
    transform = copy.copy(transform)
    transform.attr_name = None
    cat = transform(data)
    assert cat.x.shape == (12, 2 + pe.shape[1])
    torch.testing.assert_close(cat.x[:, :2], data.x)
    torch.testing.assert_close(cat.x[:, 2:], pe)
    no_x = er_graph(12, 0.3, seed=9)
    assert transform(no_x).x.shape == cat.x[:, 2:].shape
    data.x = torch.ones(12, 2, dtype=torch.long)
    with pytest.raises(TypeError, match="floating x"):
        transform(data)


# ------------------------------------------------------------------------------------------- Monte Carlo
def test_monte_carlo_is_unbiased_within_its_stated_error():
    data = graph(nx.cycle_graph(9))
    walks = 4000
    exact = RandomWalkPE(6, dtype=torch.float64)(data).rw_pe
    est = RandomWalkPE(6, method="monte_carlo", num_walks=walks, seed=3, dtype=torch.float64)(data).rw_pe
    std = torch.from_numpy(random_walk_std(exact.numpy(), walks))
    assert ((est - exact).abs() <= 5 * std + 1e-12).all()
    assert ((est - exact).abs().mean() < 2 * std.mean())  # it is not trivially loose
    again = RandomWalkPE(6, method="monte_carlo", num_walks=walks, seed=3, dtype=torch.float64)(data).rw_pe
    assert torch.equal(est, again)


def test_monte_carlo_on_a_directed_weighted_graph_with_a_sink():
    # 0 -> 1 (weight 3), 0 -> 2 (1), 1 -> 0, 1 -> 3, 2 -> 0; node 3 has no out-edge (a walk there stops)
    data = Data(edge_index=torch.tensor([[0, 0, 1, 1, 2], [1, 2, 0, 3, 0]]),
                edge_weight=torch.tensor([3.0, 1, 1, 1, 1]), num_nodes=4)
    exact = RandomWalkPE(4, dtype=torch.float64)(data).rw_pe
    torch.testing.assert_close(exact[:, 1], torch.tensor([0.75 * 0.5 + 0.25, 0.5 * 0.75, 0.25, 0.0],
                                                          dtype=torch.float64))
    assert (exact[:, 0] == 0).all() and (exact[3] == 0).all()
    walks = 3000
    est = RandomWalkPE(4, method="monte_carlo", num_walks=walks, seed=0, dtype=torch.float64)(data).rw_pe
    std = torch.from_numpy(random_walk_std(exact.numpy(), walks))
    assert ((est - exact).abs() <= 5 * std + 1e-12).all()


# ------------------------------------------------------------------------------------------- RFP
def test_rfp_shape_determinism_and_global_rng_independence():
    data = er_graph(20, 0.2, seed=10)
    t = RandomFeaturePropagation(4, 3, num_inits=2, seed=5)
    torch.manual_seed(1)
    state = torch.random.get_rng_state()
    a = t(data).rfp
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(99)
    b = t(data).rfp
    assert a.shape == (20, t.out_features) == (20, 2 * 4 * 4)
    assert torch.equal(a, b)
    c = RandomFeaturePropagation(4, 3, num_inits=2, seed=6)(data).rfp
    assert not torch.allclose(a, c)
    blocks = a.view(20, 2, 4, 4)  # (N, init, step, feature)
    assert not torch.allclose(blocks[:, 0], blocks[:, 1])


@pytest.mark.parametrize("operator", ["sym", "rw"])
def test_rfp_l2_columns_are_unit_and_converge_to_the_top_eigenvector(operator):
    data = er_graph(25, 0.3, seed=11)
    pe = RandomFeaturePropagation(3, 300, operator=operator, normalization="l2", dtype=torch.float64)(data).rfp
    steps = pe.view(25, 301, 3)
    torch.testing.assert_close(steps.norm(dim=0), torch.ones(301, 3, dtype=torch.float64))
    deg = torch.bincount(data.edge_index[0], minlength=25).double() + 1  # + self-loop
    top = deg.sqrt() if operator == "sym" else torch.ones(25, dtype=torch.float64)
    top = top / top.norm()
    last = steps[:, -1]
    torch.testing.assert_close(last * torch.sign(last[0]), top[:, None].expand(25, 3), atol=1e-6, rtol=0)


def test_rfp_qr_is_orthonormal_and_pads_small_graphs():
    data = er_graph(20, 0.3, seed=12)
    pe = RandomFeaturePropagation(4, 2, normalization="qr", dtype=torch.float64)(data).rfp.view(20, 3, 4)
    for step in range(3):
        torch.testing.assert_close(pe[:, step].T @ pe[:, step], torch.eye(4, dtype=torch.float64))
    small = RandomFeaturePropagation(5, 1, normalization="qr", dtype=torch.float64)(graph(nx.path_graph(3)))
    blocks = small.rfp.view(3, 2, 5)
    assert (blocks[:, :, 3:] == 0).all()
    torch.testing.assert_close(blocks[:, 1, :3].T @ blocks[:, 1, :3], torch.eye(3, dtype=torch.float64))


def test_rfp_directed_allowed_for_rw_only():
    data = Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3)
    assert RandomFeaturePropagation(2, 2, operator="rw")(data).rfp.shape == (3, 6)
    with pytest.raises(ValueError, match="undirected"):
        RandomFeaturePropagation(2, 2, operator="sym")(data)


# ------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("build,error,match", [
    (lambda: LaplacianEigenvectorPE(0), ValueError, "k must be >= 1, got 0"),
    (lambda: LaplacianEigenvectorPE(2.0), TypeError, "k must be an int"),
    (lambda: LaplacianEigenvectorPE(True), TypeError, "k must be an int"),
    (lambda: LaplacianEigenvectorPE(2, "random"), ValueError, r"normalization must be one of \('sym', 'rw'\)"),
    (lambda: LaplacianEigenvectorPE(2, attr_name=3), TypeError, "attr_name"),
    (lambda: LaplacianEigenvectorPE(2, eigval_attr=None), TypeError, "eigval_attr"),
    (lambda: LaplacianEigenvectorPE(2, solver="arpack"), ValueError, "solver must be one of"),
    (lambda: LaplacianEigenvectorPE(2, tol=-1), ValueError, "tol"),
    (lambda: LaplacianEigenvectorPE(2, dtype=torch.int64), TypeError, "dtype"),
    (lambda: RandomWalkPE(0), ValueError, "walk_length must be >= 1, got 0"),
    (lambda: RandomWalkPE(3, method="exakt"), ValueError, "method must be one of"),
    (lambda: RandomWalkPE(3, block_size=0), ValueError, "block_size"),
    (lambda: RandomWalkPE(3, num_walks=0), ValueError, "num_walks"),
    (lambda: RandomWalkPE(3, seed=-1), ValueError, "seed"),
    (lambda: RandomFeaturePropagation(0, 2), ValueError, "num_features must be >= 1"),
    (lambda: RandomFeaturePropagation(2, 0), ValueError, "steps must be >= 1"),
    (lambda: RandomFeaturePropagation(2, 2, operator="lap"), ValueError, "operator must be one of"),
    (lambda: RandomFeaturePropagation(2, 2, normalization="l1"), ValueError, r"normalization must be one of"),
    (lambda: RandomFeaturePropagation(2, 2, num_inits=0), ValueError, "num_inits"),
    (lambda: RandomFeaturePropagation(2, 2, add_self_loops=1), TypeError, "add_self_loops"),
])
def test_constructor_errors(build, error, match):
    with pytest.raises(error, match=match):
        build()


TRANSFORMS = [LaplacianEigenvectorPE(2), RandomWalkPE(2), RandomFeaturePropagation(2, 2)]
IDS = ["lap", "rw", "rfp"]


@pytest.mark.parametrize("transform", TRANSFORMS, ids=IDS)
@pytest.mark.parametrize("data,error,match", [
    (Data(edge_index=torch.zeros(2, 0, dtype=torch.long), num_nodes=0), ValueError, "0 nodes"),
    (Data(num_nodes=3), ValueError, "edge_index is None"),
    (Data(edge_index=torch.tensor([[0, 1], [1, 5]]), num_nodes=3), ValueError, r"allowed \[0, 2\]"),
    (Data(edge_index=torch.tensor([[0.0], [1.0]]), num_nodes=2), TypeError, "integer"),
    (Data(edge_index=torch.tensor([[0, 1], [1, 0]]), edge_weight=torch.tensor([-1.0, -1.0]), num_nodes=2),
     ValueError, ">= 0"),
    ({"edge_index": torch.tensor([[0], [1]])}, TypeError, "Data"),
], ids=["empty", "no_edges_attr", "out_of_range", "float_index", "negative_weight", "not_data"])
def test_data_errors(transform, data, error, match):
    with pytest.raises(error, match=match):
        transform.forward(data)


def test_directed_graph_is_rejected_by_the_laplacian():
    with pytest.raises(ValueError, match="LaplacianEigenvectorPE: data.edge_index must describe an undirected"):
        LaplacianEigenvectorPE(2)(Data(edge_index=torch.tensor([[0, 1], [1, 2]]), num_nodes=3))


# ------------------------------------------------------------------------------------------- properties
@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 25), p=st.floats(0.0, 0.5), seed=st.integers(0, 10_000), k=st.integers(1, 6))
def test_random_graphs_satisfy_the_definitions(n, p, seed, k):
    g = nx.gnp_random_graph(n, p, seed=seed)
    data = graph(g)
    a = nx.to_numpy_array(g, nodelist=range(n))
    deg = a.sum(1)
    # Laplacian: L v = lambda v, orthonormal, orthogonal to every trivial vector D^1/2 1_component
    out = LaplacianEigenvectorPE(k, solver="dense", dtype=torch.float64)(data)
    m = int(out.lap_mask[0].sum()) if n else 0
    comps = [list(c) for c in nx.connected_components(g) if len(c) > 1]
    assert m == min(k, int((deg > 0).sum()) - len(comps))
    v, lam = out.lap_pe[:, :m].numpy(), out.lap_eigval[0, :m].numpy()
    d_is = np.where(deg > 0, 1 / np.sqrt(np.where(deg > 0, deg, 1)), 0)
    lap = np.diag((deg > 0).astype(float)) - d_is[:, None] * a * d_is[None, :]
    np.testing.assert_allclose(lap @ v, v * lam, atol=1e-8)
    np.testing.assert_allclose(v.T @ v, np.eye(m), atol=1e-8)
    assert (np.diff(lam) >= -1e-10).all() and (lam > 1e-10).all()
    for comp in comps:
        trivial = np.zeros(n)
        trivial[comp] = np.sqrt(deg[comp])
        np.testing.assert_allclose(trivial @ v, 0, atol=1e-8)
    # random walk: diag(P^t) from dense matrix powers
    pmat = a / np.where(deg > 0, deg, 1)[:, None]
    expected = np.stack([np.diag(np.linalg.matrix_power(pmat, t)) for t in range(1, 5)], axis=1)
    np.testing.assert_allclose(RandomWalkPE(4, block_size=7, dtype=torch.float64)(data).rw_pe.numpy(), expected,
                               atol=1e-10)


@pytest.mark.parametrize("kind", ["path", "random"])
def test_sparse_solver_and_its_fallback_match_dense(kind):
    """A long path makes Lanczos ("SA") give up and shift-invert take over; a random graph does not."""
    import torch_geometric.utils as pyg_utils

    n = 400
    if kind == "path":
        src = torch.arange(n - 1)
        edge_index = torch.stack([torch.cat([src, src + 1]), torch.cat([src + 1, src])])
    else:
        generator = torch.Generator().manual_seed(0)
        ring = torch.arange(n)
        extra = torch.randint(0, n, (2, 2 * n), generator=generator)
        edge_index = torch.cat([torch.stack([ring, (ring + 1) % n]), extra], dim=1)
        edge_index = pyg_utils.to_undirected(pyg_utils.remove_self_loops(edge_index)[0], num_nodes=n)
    data = Data(x=torch.zeros(n, 1), edge_index=edge_index, num_nodes=n)
    dense = LaplacianEigenvectorPE(4, solver="dense")(data)
    # float64 Lanczos: the path's eigenvalues are 1e-4 apart, which float32 Lanczos resolves only to ~1e-2
    sparse = LaplacianEigenvectorPE(4, solver="sparse", precision="double")(data)
    torch.testing.assert_close(sparse.lap_eigval, dense.lap_eigval, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(sparse.lap_pe.abs(), dense.lap_pe.abs(), atol=1e-5, rtol=1e-4)
    single = LaplacianEigenvectorPE(4, solver="sparse")(data)  # float32 Lanczos: exact eigenvalues, PyG's residuals
    torch.testing.assert_close(single.lap_eigval, dense.lap_eigval, atol=1e-7, rtol=1e-6)
    lap = dense_laplacian(data)
    assert max_residual(lap, single.lap_pe.numpy(), single.lap_eigval[0].numpy()) < 1e-5


@pytest.mark.parametrize("method", ["exact", "monte_carlo"])
def test_random_walk_pe_on_a_subset_of_nodes(method):
    data = er_graph(40, 0.15, seed=3)
    transform = RandomWalkPE(6, method=method, block_size=3, num_walks=200, seed=4)
    nodes = [7, 0, 31, 7]
    part = transform.return_probabilities(data, nodes=torch.tensor(nodes))
    assert part.shape == (4, 6)
    if method == "exact":  # same rows as the full computation (blocks of 3 columns, unordered ids, a repeat)
        np.testing.assert_allclose(part, transform.return_probabilities(data)[nodes], atol=1e-12, rtol=0)
    else:  # an unbiased estimate of the exact rows within 5 standard errors
        exact = RandomWalkPE(6).return_probabilities(data)[nodes]
        assert np.all(np.abs(part - exact) <= 5 * random_walk_std(exact, 200) + 1e-12)
    with pytest.raises(ValueError, match=r"nodes must lie in \[0, 39\], got \[0, 40\]"):
        transform.return_probabilities(data, nodes=[0, 40])
    with pytest.raises(TypeError, match="nodes must be a 1-D sequence of integer node ids"):
        transform.return_probabilities(data, nodes=[[1, 2]])


# ------------------------------------------------------------------------------- exact RWSE: every path
@pytest.mark.parametrize("directed", [False, True])
def test_random_walk_paths_match_dense_matrix_powers(directed):
    gen = torch.Generator().manual_seed(5)
    n = 60
    edge_index = torch.randint(0, n, (2, 240), generator=gen)
    if not directed:
        edge_index = torch.cat([edge_index, edge_index.flip(0)], dim=1)
    data = Data(edge_index=edge_index, num_nodes=n)  # duplicates and self-loops included
    a = torch.zeros(n, n, dtype=torch.float64)
    a.index_put_((edge_index[0], edge_index[1]), torch.ones(edge_index.size(1), dtype=torch.float64), accumulate=True)
    p = a / a.sum(1, keepdim=True).clamp(min=1e-300)
    expected = torch.stack([torch.linalg.matrix_power(p, t).diagonal() for t in range(1, 10)], dim=1)
    for options in ({"dense_threshold": 1000}, {"dense_threshold": 0}, {"dense_threshold": 0, "block_size": 7},
                    {"dense_threshold": 0, "dense_fraction": 1e-9}, {"dense_threshold": 0, "dense_fraction": 1.0}):
        got = torch.from_numpy(RandomWalkPE(9, **options).return_probabilities(data))
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0, msg=str(options))
        pe = RandomWalkPE(9, dtype=torch.float64, **options)(data).rw_pe
        torch.testing.assert_close(pe, expected, atol=1e-12, rtol=0, msg=str(options))
    with pytest.raises(ValueError, match="dense_fraction"):
        RandomWalkPE(4, dense_fraction=0)
    with pytest.raises(ValueError, match="dense_threshold"):
        RandomWalkPE(4, dense_threshold=-1)


def test_laplacian_residual_by_hand_and_on_both_libraries():
    # one edge: L = [[1, -1], [-1, 1]]; v = (1, 0) gives L v = (1, -1), Rayleigh quotient 1
    edge = Data(edge_index=torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    assert laplacian_residual(edge, np.array([[1.0], [0.0]])) == pytest.approx(1.0)  # |(1, -1) - (1, 0)|
    assert laplacian_residual(edge, np.array([[3.0], [0.0]]), [0.0]) == pytest.approx(2 ** 0.5)  # unit-normalised
    pair = torch.tensor([[1.0, 1.0, 0.0], [-1.0, 1.0, 0.0]])  # eigenvectors (lambda 2, 0) and a padding column
    assert laplacian_residual(edge, pair, torch.tensor([2.0, 0.0])) == pytest.approx(0.0, abs=1e-15)
    looped = Data(edge_index=torch.tensor([[0, 1, 0], [1, 0, 0]]), num_nodes=2)  # a self-loop is ignored
    assert laplacian_residual(looped, np.array([[1.0], [0.0]])) == pytest.approx(1.0)
    # the toolkit's pairs and PyG's vectors on a 300-node ring plus random edges (float32 Lanczos: ~1e-6)
    from pe_toolkit.domains.graphs import random_sparse_graph

    data = random_sparse_graph(300)
    ours = LaplacianEigenvectorPE(8)(data)
    assert laplacian_residual(data, ours.lap_pe, ours.lap_eigval[0]) < 1e-5
    with torch.random.fork_rng():
        theirs = AddLaplacianEigenvectorPE(8, is_undirected=True)(data).laplacian_eigenvector_pe
    assert laplacian_residual(data, theirs) < 1e-4
    assert laplacian_residual(data, torch.rand(300, 2)) > 1e-2  # random vectors are far from eigenvectors
    with pytest.raises(ValueError, match=r"vectors must have shape \(num_nodes=2, k\), got \(3, 1\)"):
        laplacian_residual(edge, np.ones((3, 1)))
    with pytest.raises(ValueError, match="at least 2 entries"):
        laplacian_residual(edge, pair, [2.0])
