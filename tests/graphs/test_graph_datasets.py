"""Tests for domains/graphs/datasets.py: generated CSL, PATTERN, CLUSTER and the edge-list loader."""

import math
import os
from collections import Counter

import numpy as np
import pytest
import torch
from torch_geometric.utils import contains_self_loops, is_undirected

from pe_toolkit.domains.graphs.datasets import (
    CSL_SKIPS,
    FORMAT_VERSION,
    CLUSTERDataset,
    CSLDataset,
    PATTERNDataset,
    circulant_edge_index,
    csl_folds,
    load_edge_list,
    random_sparse_graph,
    sbm_splits,
)

SIZE_RANGE = (5, 34)  # the defaults: numpy randint(5, 35) of the Benchmarking GNNs notebooks


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("graph_datasets")


@pytest.fixture(scope="module")
def csl(root):
    return CSLDataset(root / "csl")


@pytest.fixture(scope="module")
def pattern(root):
    return PATTERNDataset(root / "pattern", num_graphs=60, num_patterns=12, seed=1)


@pytest.fixture(scope="module")
def cluster(root):
    return CLUSTERDataset(root / "cluster", num_graphs=40, seed=1)


def edge_set(edge_index):
    return set(map(tuple, edge_index.t().tolist()))


def assert_same_graphs(a, b):
    assert len(a) == len(b)
    for da, db in zip(a, b):
        assert da.num_nodes == db.num_nodes
        torch.testing.assert_close(da.edge_index, db.edge_index, rtol=0, atol=0)
        torch.testing.assert_close(da.x, db.x, rtol=0, atol=0)
        torch.testing.assert_close(da.y, db.y, rtol=0, atol=0)


def density_check(observed_edges, pairs, p, label):
    """Empirical edge density vs p, within 5 binomial standard deviations."""
    assert pairs > 0, label
    std = math.sqrt(p * (1 - p) / pairs)
    density = observed_edges / pairs
    assert abs(density - p) <= 5 * std + 1e-12, f"{label}: density {density:.4f} vs {p} (std {std:.4f}, {pairs} pairs)"


# ------------------------------------------------------------------------------------------------ CSL


def test_circulant_edge_index_small():
    edges = edge_set(circulant_edge_index(6, (1,)))
    assert edges == {(i, (i + 1) % 6) for i in range(6)} | {((i + 1) % 6, i) for i in range(6)}


def test_csl_structure(csl):
    assert len(csl) == 150
    assert Counter(csl.y.tolist()) == {c: 15 for c in range(10)}
    for data in csl:
        assert data.num_nodes == 41
        assert data.edge_index.shape == (2, 164)
        assert data.x.shape == (41, 1) and data.x.dtype == torch.float32 and not data.x.any()
        assert data.y.shape == (1,)
        assert is_undirected(data.edge_index, num_nodes=41)
        assert not contains_self_loops(data.edge_index)
        deg = torch.bincount(data.edge_index[0], minlength=41)
        assert (deg == 4).all()
        assert len(edge_set(data.edge_index)) == 164  # no duplicates


def test_csl_graphs_are_permuted_circulants(csl):
    perms_per_class = {}
    for data in csl:
        cls = int(data.y)
        skip = CSL_SKIPS[cls]
        assert int(data.skip) == skip
        perm = data.perm
        assert sorted(perm.tolist()) == list(range(41))
        base = circulant_edge_index(41, (1, skip))
        # the stored permutation maps C(41, {1, s}) exactly onto this graph: an explicit isomorphism
        assert edge_set(perm[base]) == edge_set(data.edge_index)
        perms_per_class.setdefault(cls, set()).add(tuple(perm.tolist()))
    assert all(len(p) == 15 for p in perms_per_class.values())  # 15 distinct permutations per class


def test_csl_classes_differ():
    """The 10 skips give pairwise non-isomorphic graphs: their adjacency spectra differ."""
    spectra = []
    for s in CSL_SKIPS:
        adj = torch.zeros(41, 41, dtype=torch.float64)
        adj[tuple(circulant_edge_index(41, (1, s)))] = 1.0
        spectra.append(torch.linalg.eigvalsh(adj))
    for i in range(len(spectra)):
        for j in range(i):
            assert (spectra[i] - spectra[j]).abs().max() > 1e-6, (CSL_SKIPS[i], CSL_SKIPS[j])


def test_csl_deterministic(tmp_path, csl):
    again = CSLDataset(tmp_path / "a")
    assert_same_graphs(csl, again)
    other = CSLDataset(tmp_path / "b", seed=1)
    assert any(not torch.equal(a.edge_index, b.edge_index) for a, b in zip(csl, other))


def test_csl_folds(csl):
    folds = csl_folds(csl, num_folds=5, seed=0)
    assert len(folds) == 5
    y = csl.y
    all_idx = set(range(150))
    test_union = []
    for train, val, test in folds:
        assert (len(train), len(val), len(test)) == (90, 30, 30)
        assert set(train.tolist()) | set(val.tolist()) | set(test.tolist()) == all_idx
        assert len(set(train.tolist()) & set(val.tolist())) == 0
        assert len(set(train.tolist()) & set(test.tolist())) == 0
        assert len(set(val.tolist()) & set(test.tolist())) == 0
        # stratified: 9 / 3 / 3 graphs of every class
        assert Counter(y[train].tolist()) == {c: 9 for c in range(10)}
        assert Counter(y[val].tolist()) == {c: 3 for c in range(10)}
        assert Counter(y[test].tolist()) == {c: 3 for c in range(10)}
        test_union.extend(test.tolist())
    assert sorted(test_union) == list(range(150))  # test folds partition the data

    again = csl_folds(csl, num_folds=5, seed=0)
    for f, g in zip(folds, again):
        for a, b in zip(f, g):
            assert torch.equal(a, b)
    other = csl_folds(csl, num_folds=5, seed=1)
    assert any(not torch.equal(f[2], g[2]) for f, g in zip(folds, other))


def test_csl_folds_rejects_bad_num_folds(csl):
    with pytest.raises(ValueError, match="num_folds"):
        csl_folds(csl, num_folds=1)
    with pytest.raises(ValueError, match="fewer than num_folds"):
        csl_folds(csl, num_folds=16)


def test_csl_rejects_bad_skips(tmp_path):
    with pytest.raises(ValueError, match="skip"):
        CSLDataset(tmp_path, skips=(2, 21))  # 21 >= 41 / 2: not 4-regular
    with pytest.raises(ValueError, match="distinct"):
        CSLDataset(tmp_path, skips=(2, 2))
    assert not (tmp_path / "processed").exists()


# ------------------------------------------------------------------------------------------------ PATTERN


def test_pattern_structure(pattern):
    assert len(pattern) == 60
    lo, hi = SIZE_RANGE
    pattern_sizes = {}
    for data in pattern:
        n = data.num_nodes
        assert data.x.shape == (n,) and data.x.dtype == torch.long
        assert 0 <= int(data.x.min()) and int(data.x.max()) < 3
        assert data.y.shape == (n,) and data.y.dtype == torch.long
        assert is_undirected(data.edge_index, num_nodes=n)
        assert not contains_self_loops(data.edge_index)
        sizes = torch.bincount(data.block, minlength=6)
        assert ((sizes[:5] >= lo) & (sizes[:5] <= hi)).all()
        m = int(sizes[5])
        assert lo <= m <= hi and n == int(sizes[:5].sum()) + m  # the pattern: 5..34 nodes, as the generator
        assert pattern_sizes.setdefault(int(data.pattern_id), m) == m  # one size per pattern
        # label 1 exactly on the pattern nodes
        assert torch.equal(data.y, (data.block == 5).long())
        assert int(data.y.sum()) == m
    assert len(set(pattern_sizes.values())) > 1


def test_pattern_defaults_follow_the_released_generator(tmp_path):
    """100 patterns of 5..34 nodes (randint(5, 35)), 5 communities of 5..34 nodes, p = 0.5, q = 0.35,
    p_pattern = q_pattern = 0.5, 3 node types; node and edge counts as their expectations given the patterns."""
    ds = PATTERNDataset(tmp_path, num_graphs=300)  # 3 graphs per pattern
    assert (ds.num_patterns, ds.pattern_size_range, ds.community_size_range) == (100, (5, 34), (5, 34))
    assert (ds.num_communities, ds.p, ds.q, ds.p_pattern, ds.q_pattern, ds.num_node_types) == (5, 0.5, 0.35, 0.5,
                                                                                                0.5, 3)
    sizes = {}
    nodes, edges, expected_edges = [], [], []
    for data in ds:
        m = int(data.y.sum())
        assert sizes.setdefault(int(data.pattern_id), m) == m
        community = torch.bincount(data.block, minlength=6)[:5].double()
        total = float(community.sum())
        # expected undirected edges given this graph's block sizes
        within = float((community * (community - 1) / 2).sum()) * 0.5
        between = (total**2 - float((community**2).sum())) / 2 * 0.35
        expected_edges.append(within + between + m * total * 0.5 + m * (m - 1) / 2 * 0.5)
        nodes.append(data.num_nodes)
        edges.append(data.num_edges / 2)
        assert 30 <= data.num_nodes <= 204
    assert sorted(sizes) == list(range(100))
    drawn = np.array(list(sizes.values()))
    assert drawn.min() >= 5 and drawn.max() <= 34
    assert abs(drawn.mean() - 19.5) < 4 * 8.66 / 10  # uniform 5..34: mean 19.5, std 8.66, 100 draws
    assert len(np.unique(drawn)) > 15
    # node count: 5 communities (mean 19.5 each) + the pattern; edges: their expectation, within 1 %
    mean_pattern = np.mean([sizes[int(d.pattern_id)] for d in ds])
    assert abs(np.mean(nodes) - (97.5 + mean_pattern)) < 4 * math.sqrt(5 * 74.92 / len(ds))
    assert abs(np.sum(edges) / np.sum(expected_edges) - 1) < 0.01
    # the v1 generator: a fixed size
    fixed = PATTERNDataset(tmp_path / "v1", num_graphs=4, num_patterns=2, pattern_size=20)
    assert all(int(d.y.sum()) == 20 for d in fixed) and fixed.pattern_size_range == (20, 20)
    with pytest.raises(ValueError, match="pattern_size must satisfy min <= max"):
        PATTERNDataset(tmp_path / "bad", pattern_size=(9, 5))


def test_pattern_is_the_same_pattern_per_id(pattern):
    """Graphs with the same pattern_id carry the same pattern: same features, edges and degrees inside P."""
    signatures = {}
    for data in pattern:
        nodes = torch.nonzero(data.y).flatten()
        mask = data.y.bool()
        inside = mask[data.edge_index[0]] & mask[data.edge_index[1]]
        sub = data.edge_index[:, inside]
        degrees = torch.bincount(sub[0], minlength=data.num_nodes)[nodes]
        # degree-feature pairs are invariant under the node shuffle
        signature = (int(inside.sum()), tuple(sorted(zip(degrees.tolist(), data.x[nodes].tolist()))))
        k = int(data.pattern_id)
        signatures.setdefault(k, set()).add(signature)
    assert len(signatures) == 12
    assert all(len(s) == 1 for s in signatures.values())


def test_pattern_edge_densities(pattern):
    counts = {"p": [0, 0], "q": [0, 0], "q_pattern": [0, 0], "p_pattern": [0, 0]}
    seen_patterns = set()
    for data in pattern:
        block = data.block
        is_p = block == 5
        same = block[:, None] == block[None, :]
        n = data.num_nodes
        adj = torch.zeros(n, n, dtype=torch.bool)
        adj[data.edge_index[0], data.edge_index[1]] = True
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        comm = ~is_p
        masks = {
            "p": same & comm[:, None] & comm[None, :],
            "q": ~same & comm[:, None] & comm[None, :],
            "q_pattern": (is_p[:, None] & comm[None, :]) | (comm[:, None] & is_p[None, :]),
        }
        if int(data.pattern_id) not in seen_patterns:  # the pattern's own edges are fixed per pattern
            seen_patterns.add(int(data.pattern_id))
            masks["p_pattern"] = is_p[:, None] & is_p[None, :]
        for key, mask in masks.items():
            mask = mask & upper
            counts[key][0] += int((adj & mask).sum())
            counts[key][1] += int(mask.sum())
    for key, prob in {"p": 0.5, "q": 0.35, "q_pattern": 0.5, "p_pattern": 0.5}.items():
        density_check(*counts[key], prob, f"PATTERN {key}")


def test_pattern_custom_sizes_and_determinism(tmp_path):
    kwargs = dict(num_graphs=8, num_communities=3, community_size_range=(4, 6), pattern_size=5, num_patterns=2)
    a = PATTERNDataset(tmp_path / "a", **kwargs)
    b = PATTERNDataset(tmp_path / "b", **kwargs)
    assert_same_graphs(a, b)
    for data in a:
        assert 3 * 4 + 5 <= data.num_nodes <= 3 * 6 + 5
        assert int(data.y.sum()) == 5
    c = PATTERNDataset(tmp_path / "c", **kwargs, seed=3)
    assert [d.edge_index.tolist() for d in a] != [d.edge_index.tolist() for d in c]


# ------------------------------------------------------------------------------------------------ CLUSTER


def test_cluster_structure(cluster):
    assert len(cluster) == 40
    assert cluster.num_node_types == 7
    lo, hi = SIZE_RANGE
    for data in cluster:
        n = data.num_nodes
        assert 6 * lo <= n <= 6 * hi
        assert data.x.shape == (n,) and data.x.dtype == torch.long
        assert data.y.shape == (n,) and data.y.dtype == torch.long
        assert is_undirected(data.edge_index, num_nodes=n)
        assert not contains_self_loops(data.edge_index)
        sizes = torch.bincount(data.y, minlength=6)
        assert len(sizes) == 6 and ((sizes >= lo) & (sizes <= hi)).all()
        # exactly one labelled node per cluster; its feature is cluster id + 1; every other feature is 0
        labelled = torch.nonzero(data.x).flatten()
        assert len(labelled) == 6
        assert sorted(data.y[labelled].tolist()) == list(range(6))
        assert torch.equal(data.x[labelled], data.y[labelled] + 1)


def test_cluster_edge_densities(cluster):
    within = [0, 0]
    between = [0, 0]
    for data in cluster:
        n = data.num_nodes
        adj = torch.zeros(n, n, dtype=torch.bool)
        adj[data.edge_index[0], data.edge_index[1]] = True
        upper = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
        same = data.y[:, None] == data.y[None, :]
        for counts, mask in ((within, same & upper), (between, ~same & upper)):
            counts[0] += int((adj & mask).sum())
            counts[1] += int(mask.sum())
    density_check(*within, 0.55, "CLUSTER p")
    density_check(*between, 0.25, "CLUSTER q")


def test_cluster_deterministic(tmp_path, cluster):
    again = CLUSTERDataset(tmp_path / "a", num_graphs=40, seed=1)
    assert_same_graphs(cluster, again)
    other = CLUSTERDataset(tmp_path / "b", num_graphs=40, seed=2)
    assert [d.num_nodes for d in other] != [d.num_nodes for d in cluster]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(p=1.5), "p must be in"),
        (dict(q=-0.1), "q must be in"),
        (dict(cluster_size_range=(10, 5)), "min <= max"),
        (dict(num_graphs=0), "num_graphs"),
    ],
)
def test_cluster_rejects_bad_parameters(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        CLUSTERDataset(tmp_path, **kwargs)


# ------------------------------------------------------------------------------------------------ splits


def test_sbm_splits(pattern, cluster):
    for ds, paper in ((pattern, (10, 2, 2)), (cluster, (10, 1, 1))):
        train, val, test = sbm_splits(ds, seed=0)
        n = len(ds)
        assert sorted(torch.cat([train, val, test]).tolist()) == list(range(n))
        for part, share in zip((train, val, test), paper):
            assert abs(len(part) - share / sum(paper) * n) < 1.5
        again = sbm_splits(ds, seed=0)
        assert all(torch.equal(a, b) for a, b in zip((train, val, test), again))
        assert not torch.equal(train, sbm_splits(ds, seed=1)[0])

    train, val, test = sbm_splits(pattern, fractions=(0.5, 0.25, 0.25), seed=0)
    assert (len(train), len(val), len(test)) == (30, 15, 15)
    # stratified by pattern: each part gets floor or ceil of its share of every pattern's 5 graphs
    ids = pattern.pattern_id
    for part, share in zip((train, val, test), (0.5, 0.25, 0.25)):
        counts = torch.bincount(ids[part], minlength=12)
        assert ((counts >= math.floor(5 * share)) & (counts <= math.ceil(5 * share))).all()
    with pytest.raises(ValueError, match="fractions"):
        sbm_splits(cluster, fractions=(0.5, 0.5, 0.5))


# ------------------------------------------------------------------------------------------------ caching


def test_cache_reuse_and_invalidation(tmp_path, monkeypatch):
    first = CLUSTERDataset(tmp_path, num_graphs=5, cluster_size_range=(5, 8))
    path = first.processed_paths[0]
    name = os.path.basename(path)
    assert name.startswith(f"CLUSTER_v{FORMAT_VERSION}_") and "g5" in name and "s5-8" in name and "p0.55" in name
    assert sorted(os.listdir(os.path.dirname(path))) == sorted([name, "pre_filter.pt", "pre_transform.pt"])

    def fail(self):
        raise AssertionError("regenerated although a processed file exists")

    monkeypatch.setattr(CLUSTERDataset, "_generate", fail)
    reused = CLUSTERDataset(tmp_path, num_graphs=5, cluster_size_range=(5, 8))
    assert reused.processed_paths[0] == path
    assert_same_graphs(first, reused)

    # any changed parameter (or a pre_transform) means a different file, which must be generated
    for kwargs in (dict(num_graphs=6), dict(p=0.6), dict(seed=1), dict(pre_transform=lambda d: d)):
        with pytest.raises(AssertionError, match="regenerated"):
            CLUSTERDataset(tmp_path, **{**dict(num_graphs=5, cluster_size_range=(5, 8)), **kwargs})
    monkeypatch.undo()
    changed = CLUSTERDataset(tmp_path, num_graphs=5, cluster_size_range=(5, 8), p=0.6)
    assert changed.processed_paths[0] != path and os.path.exists(path)


def test_pre_transform_applied_and_cached_separately(tmp_path):
    def add_degree(data):
        data = data.clone()
        data.deg = torch.bincount(data.edge_index[0], minlength=data.num_nodes)
        return data

    plain = CSLDataset(tmp_path, graphs_per_class=1)
    with_deg = CSLDataset(tmp_path, graphs_per_class=1, pre_transform=add_degree)
    assert plain.processed_paths[0] != with_deg.processed_paths[0]
    assert "deg" not in plain[0] and (with_deg[0].deg == 4).all()


def test_default_root_and_no_question_mark_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PE_TOOLKIT_CACHE", str(tmp_path / "cache"))
    ds = CSLDataset(graphs_per_class=1)
    assert len(ds) == 10
    assert ds.root == str(tmp_path / "cache" / "graphs" / "CSL")
    assert os.path.exists(ds.processed_paths[0])
    assert not (tmp_path / "???").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # nothing written into the cwd


# ------------------------------------------------------------------------------------------------ edge lists


def test_load_edge_list(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("# a triangle and a tail\n0 1\n1\t2  # inline comment\n\n2 0\n2 3\n1 0\n")
    data = load_edge_list(path)
    assert data.num_nodes == 4
    assert edge_set(data.edge_index) == {(0, 1), (1, 0), (1, 2), (2, 1), (0, 2), (2, 0), (2, 3), (3, 2)}
    assert data.edge_index.shape == (2, 8)  # the duplicate "1 0" is merged
    assert is_undirected(data.edge_index)

    directed = load_edge_list(path, undirected=False)
    assert edge_set(directed.edge_index) == {(0, 1), (1, 2), (2, 0), (2, 3), (1, 0)}

    padded = load_edge_list(path, num_nodes=6)  # isolated nodes 4 and 5 kept
    assert padded.num_nodes == 6

    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    assert load_edge_list(empty).num_nodes == 0 and load_edge_list(empty).edge_index.shape == (2, 0)


@pytest.mark.parametrize(
    "text, kwargs, match",
    [
        ("0 1\n1 2 3\n", {}, r"line 2: expected 2"),
        ("0 1\n\n5\n", {}, r"line 3: expected 2"),
        ("0 1\n1 x\n", {}, r"line 2: node id must be an integer, got 'x'"),
        ("0 1.5\n", {}, r"line 1: node id must be an integer"),
        ("# c\n0 -1\n", {}, r"line 2: node ids must be >= 0"),
        ("0 1\n1 4\n", {"num_nodes": 4}, r"line 2: node id 4 out of range for num_nodes=4"),
    ],
)
def test_load_edge_list_errors(tmp_path, text, kwargs, match):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match) as info:
        load_edge_list(path, **kwargs)
    assert str(path) in str(info.value)


def test_load_edge_list_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_edge_list(tmp_path / "missing.txt")


def test_random_sparse_graph_is_a_connected_seeded_ring_plus_random_edges():
    from scipy.sparse.csgraph import connected_components
    from torch_geometric.utils import to_scipy_sparse_matrix

    data = random_sparse_graph(500)
    assert data.num_nodes == 500 and 5.0 < data.num_edges / data.num_nodes < 6.5  # mean degree ~ 2 + 2 * 2
    assert connected_components(to_scipy_sparse_matrix(data.edge_index, num_nodes=500))[0] == 1
    assert is_undirected(data.edge_index) and not contains_self_loops(data.edge_index)
    assert torch.equal(data.edge_index, random_sparse_graph(500).edge_index)  # seeded
    assert not torch.equal(data.edge_index, random_sparse_graph(500, seed=1).edge_index)
    ring = random_sparse_graph(6, edges_per_node=0)  # no random edges: the 6-cycle itself
    assert torch.equal(ring.edge_index, circulant_edge_index(6))
    # the random edges by hand: numpy's default_rng(3) draws the first endpoints, then the second ones
    rng = np.random.default_rng(3)
    u, v = rng.integers(0, 8, 8), rng.integers(0, 8, 8)
    pairs = {(i, (i + 1) % 8) for i in range(8)} | {(a, b) for a, b in zip(u.tolist(), v.tolist()) if a != b}
    expected = sorted(pairs | {(b, a) for a, b in pairs})
    assert random_sparse_graph(8, seed=3, edges_per_node=1).edge_index.t().tolist() == [list(e) for e in expected]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"num_nodes": 0}, ValueError, "num_nodes must be >= 1, got 0"),
    ({"num_nodes": 2.5}, TypeError, "num_nodes must be an int"),
    ({"num_nodes": 5, "seed": -1}, ValueError, "seed must be >= 0, got -1"),
    ({"num_nodes": 5, "edges_per_node": -1}, ValueError, "edges_per_node must be >= 0, got -1"),
])
def test_random_sparse_graph_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        random_sparse_graph(**kwargs)
