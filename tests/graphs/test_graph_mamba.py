"""Graph Mamba: the selective scan against the step-by-step recurrence, the Mamba and bidirectional blocks,
random-walk tokenization, degree ordering, and the model (shapes, permutation behaviour, a training step)."""

from __future__ import annotations

import pytest
import torch
from torch_geometric.data import Batch, Data

from pe_toolkit.domains.graphs import GraphMambaModel, RandomWalkPE
from pe_toolkit.domains.graphs.mamba import (
    BidirectionalMamba,
    MambaBlock,
    linear_scan,
    reverse_padded,
    selective_scan,
    selective_scan_reference,
)
from pe_toolkit.domains.graphs.tokenization import degree_order, random_walk_tokens, uniform_random_walks


def scan_inputs(b: int, length: int, e: int, n: int, dtype=torch.float64, requires_grad: bool = False):
    u = torch.randn(b, length, e, dtype=dtype)
    delta = torch.rand(b, length, e, dtype=dtype) + 0.05
    A = -(torch.rand(e, n, dtype=dtype) * 3 + 0.1)
    B = torch.randn(b, length, n, dtype=dtype)
    C = torch.randn(b, length, n, dtype=dtype)
    D = torch.randn(e, dtype=dtype)
    tensors = [u, delta, A, B, C, D]
    return [t.requires_grad_(requires_grad) for t in tensors]


def undirected(pairs: list[tuple[int, int]]) -> torch.Tensor:
    e = torch.tensor(pairs, dtype=torch.long).t()
    return torch.cat([e, e.flip(0)], dim=1)


# ------------------------------------------------------------------------------------------- selective scan


@pytest.mark.parametrize("length", [1, 2, 3, 7, 16, 33])
def test_selective_scan_equals_the_recurrence(length):
    inputs = scan_inputs(2, length, 3, 4)
    torch.testing.assert_close(selective_scan(*inputs), selective_scan_reference(*inputs), rtol=1e-12, atol=1e-12)
    no_d = inputs[:5]
    torch.testing.assert_close(selective_scan(*no_d), selective_scan_reference(*no_d), rtol=1e-12, atol=1e-12)


def test_selective_scan_hand_case():
    # one channel, one state, A = -log 2, delta = 1: a = 1/2; B = C = 1: y_t = sum_s 2^-(t-s) u_s
    u = torch.tensor([[[1.0], [2.0], [4.0]]], dtype=torch.float64)
    ones = torch.ones(1, 3, 1, dtype=torch.float64)
    A = torch.tensor([[-torch.log(torch.tensor(2.0)).item()]], dtype=torch.float64)
    y = selective_scan(u, ones, A, ones, ones)
    torch.testing.assert_close(y.view(-1), torch.tensor([1.0, 2.5, 5.25], dtype=torch.float64))


def test_selective_scan_gradients_equal_the_recurrence():
    inputs = scan_inputs(2, 11, 3, 2, requires_grad=True)
    grads = torch.autograd.grad(selective_scan(*inputs).square().sum(), inputs)
    ref = torch.autograd.grad(selective_scan_reference(*inputs).square().sum(), inputs)
    for g, r in zip(grads, ref):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("length", [1, 5, 8])
def test_linear_scan_gradcheck(length):
    a = (torch.rand(2, length, 3, dtype=torch.float64) * 0.9 + 0.05).requires_grad_()
    b = torch.randn(2, length, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(linear_scan, (a, b))
    assert torch.autograd.gradgradcheck(linear_scan, (a, b)) if length == 1 else True


def test_linear_scan_long_sequence_is_stable_in_float32():
    # sum of log a reaches -1500: the cumsum-of-logs form exp(S_t) cumsum(exp(-S_t) b) would overflow
    length = 1500
    a = torch.full((1, length, 2), 0.37)
    b = torch.randn(1, length, 2)
    h = linear_scan(a, b)
    ref = torch.zeros(2, dtype=torch.float64)
    for t in range(length):
        ref = 0.37 * ref + b[0, t].double()
    assert torch.isfinite(h).all()
    torch.testing.assert_close(h[0, -1].double(), ref, rtol=1e-5, atol=1e-5)


def test_scan_bad_input():
    u, delta, A, B, C, D = scan_inputs(2, 4, 3, 5)
    with pytest.raises(ValueError, match=r"delta must have the shape of u \(2, 4, 3\)"):
        selective_scan(u, delta[:, :3], A, B, C)
    with pytest.raises(ValueError, match=r"A must have shape \(E, N\) = \(3, N\)"):
        selective_scan(u, delta, A[:2], B, C)
    with pytest.raises(ValueError, match=r"C must have shape \(B, L, N\) = \(2, 4, 5\)"):
        selective_scan(u, delta, A, B, C[..., :4])
    with pytest.raises(ValueError, match=r"D must have shape \(E,\) = \(3,\)"):
        selective_scan(u, delta, A, B, C, D[:2])
    with pytest.raises(ValueError, match=r"u must have shape \(B, L, E\)"):
        selective_scan(u[0], delta, A, B, C)
    with pytest.raises(TypeError, match="B must be a floating tensor"):
        selective_scan(u, delta, A, B.long(), C)
    with pytest.raises(ValueError, match="a and b must have the same shape"):
        linear_scan(torch.rand(2, 3), torch.rand(2, 4))
    with pytest.raises(TypeError, match="a must be a floating tensor"):
        linear_scan(torch.ones(2, 3, dtype=torch.long), torch.rand(2, 3))


# ----------------------------------------------------------------------------------------------- blocks


def test_mamba_block_is_causal_and_its_conv_equals_conv1d():
    block = MambaBlock(8, d_state=4, expand=2, d_conv=3).double()
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    y = block(x)
    assert y.shape == (2, 9, 8)
    x2 = x.clone()
    x2[:, 5:] = torch.randn(2, 4, 8, dtype=torch.float64)
    torch.testing.assert_close(block(x2)[:, :5], y[:, :5])
    assert not torch.allclose(block(x2)[:, 5:], y[:, 5:])
    u = torch.randn(2, 9, 16, dtype=torch.float64)
    ref = block.conv(u.transpose(1, 2))[..., :9].transpose(1, 2)
    torch.testing.assert_close(block.causal_conv(u), ref)


def test_mamba_block_every_parameter_gets_a_gradient():
    block = MambaBlock(8, d_state=4)
    block(torch.randn(3, 6, 8)).square().mean().backward()
    for name, p in block.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_reverse_padded():
    x = torch.arange(10.0).view(2, 5, 1)
    out = reverse_padded(x, torch.tensor([3, 5]))
    torch.testing.assert_close(out.view(2, 5), torch.tensor([[2.0, 1, 0, 3, 4], [9, 8, 7, 6, 5]]))
    torch.testing.assert_close(reverse_padded(out, torch.tensor([3, 5])), x)
    torch.testing.assert_close(reverse_padded(x), x.flip(1))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, 5\]"):
        reverse_padded(x, torch.tensor([3, 6]))
    with pytest.raises(ValueError, match=r"lengths must have shape \(2,\)"):
        reverse_padded(x, torch.tensor([3]))


def test_bidirectional_block_sees_both_directions_and_ignores_padding():
    block = BidirectionalMamba(8, d_state=4, expand=1).double().eval()
    x = torch.randn(1, 7, 8, dtype=torch.float64)
    y = block(x)
    x2 = x.clone()
    x2[:, -1] += torch.randn(8, dtype=torch.float64)  # the last input reaches output 0 only backwards
    assert not torch.allclose(block(x2)[:, 0], y[:, 0])
    # a 4-token sequence padded to 7 in a batch gives its own outputs and zeros at the padding
    short = torch.randn(1, 4, 8, dtype=torch.float64)
    padded = torch.cat([torch.cat([short, torch.randn(1, 3, 8, dtype=torch.float64)], 1), x])
    out = block(padded, torch.tensor([4, 7]))
    torch.testing.assert_close(out[0, :4], block(short)[0])
    torch.testing.assert_close(out[1], y[0])
    assert out[0, 4:].abs().max() == 0
    # forward_block alone is one direction: with the backward block zeroed, output 0 ignores the last input
    with torch.no_grad():
        block.backward_block.out_proj.weight.zero_()
        block.backward_block.out_proj.bias.zero_()
    torch.testing.assert_close(block(x2)[:, 0], block(x)[:, 0])


def test_block_bad_options():
    with pytest.raises(ValueError, match="dt_min must be <= dt_max"):
        MambaBlock(8, dt_min=0.5, dt_max=0.1)
    with pytest.raises(ValueError, match="MambaBlock: d_state must be >= 1, got 0"):
        MambaBlock(8, d_state=0)
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, 8\)"):
        MambaBlock(8)(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, 8\)"):
        BidirectionalMamba(8)(torch.randn(3, 8))


# ------------------------------------------------------------------------------------------- tokenization


def bfs_distance(edge_index: torch.Tensor, n: int, source: int) -> list[float]:
    dist = [float("inf")] * n
    dist[source], frontier = 0, [source]
    while frontier:
        nxt = []
        for v in frontier:
            for w in edge_index[1][edge_index[0] == v].tolist():
                if dist[w] == float("inf"):
                    dist[w] = dist[v] + 1
                    nxt.append(w)
        frontier = nxt
    return dist


def test_walks_follow_edges_and_stay_at_isolated_nodes():
    edge_index = undirected([(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)])  # node 4 is isolated
    gen = torch.Generator().manual_seed(1)
    walks = uniform_random_walks(edge_index, torch.tensor([0, 1, 4, 4]), 6, 5, generator=gen)
    assert walks.shape == (4, 7)
    edges = set(map(tuple, edge_index.t().tolist()))
    for w in walks[:2]:
        assert all((int(a), int(b)) in edges for a, b in zip(w[:-1], w[1:]))
    assert (walks[2:] == 4).all()
    # the neighbour is uniform: from node 0 (neighbours 1, 2, 3) each is drawn about a third of the time
    first = uniform_random_walks(edge_index, torch.zeros(3000, dtype=torch.long), 1, 5, generator=gen)[:, 1]
    freq = torch.bincount(first, minlength=5)[1:4].double() / 3000
    torch.testing.assert_close(freq, torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.04, rtol=0)


def test_random_walk_tokens_are_neighbourhoods():
    n = 7
    edge_index = undirected([(i, i + 1) for i in range(5)] + [(2, 5)])  # node 6 is isolated
    m, s, walks = 3, 2, 4
    tokens = random_walk_tokens(edge_index, n, walk_length=m, num_walks=walks, repeats=s,
                                generator=torch.Generator().manual_seed(0))
    assert tokens.tokens_per_node == m * s
    assert tokens.count.shape == (n * m * s,)
    pairs = set(zip(tokens.token.tolist(), tokens.node.tolist()))
    assert len(pairs) == tokens.token.numel()  # no duplicate (token, node)
    for v in range(n):
        dist = bfs_distance(edge_index, n, v)
        for j in range(m * s):
            members = [u for t, u in pairs if t == v * m * s + j]
            length = m - j // s  # slots are ordered by walk length, largest first
            assert v in members
            assert all(dist[u] <= length for u in members)
            assert len(members) == tokens.count[v * m * s + j]
            assert len(members) <= walks * length + 1
    isolated = [u for t, u in pairs if t // (m * s) == 6]
    assert isolated == [6] * (m * s)
    # a leaf's 1-step token is always {leaf, its neighbour}
    leaf = [sorted(u for t, u in pairs if t == 0 * m * s + j) for j in range(m * s) if m - j // s == 1]
    assert leaf == [[0, 1]] * s
    # mean pooling over members
    h = torch.randn(n, 3)
    pooled = tokens.pool(h)
    assert pooled.shape == (n, m * s, 3)
    members = [u for t, u in pairs if t == 2 * m * s]
    torch.testing.assert_close(pooled[2, 0], h[members].mean(0))


def test_tokens_are_reproducible_with_a_generator():
    edge_index = undirected([(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)])
    a, b = (random_walk_tokens(edge_index, 5, walk_length=2, num_walks=3, generator=torch.Generator().manual_seed(5))
            for _ in range(2))
    assert torch.equal(a.token, b.token) and torch.equal(a.node, b.node)


def test_degree_order():
    # graph 0: star centre 0 (degree 3), leaves 1..3; graph 1: a path 4-5-6
    edge_index = undirected([(0, 1), (0, 2), (0, 3), (4, 5), (5, 6)])
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    torch.testing.assert_close(degree_order(edge_index, batch), torch.tensor([1, 2, 3, 0, 4, 6, 5]))
    perm = degree_order(edge_index, batch, random_ties=True, generator=torch.Generator().manual_seed(3))
    assert perm[3] == 0 and perm[6] == 5 and set(perm[:3].tolist()) == {1, 2, 3} and set(perm[4:6].tolist()) == {4, 6}


def test_tokenization_bad_input():
    edge_index = undirected([(0, 1)])
    with pytest.raises(ValueError, match=r"walk_length must be >= 1, got 0"):
        random_walk_tokens(edge_index, 2, walk_length=0, num_walks=2)
    with pytest.raises(ValueError, match=r"edge_index holds node ids in \[0, 1\], allowed \[0, 0\]"):
        random_walk_tokens(edge_index, 1, walk_length=1, num_walks=2)
    with pytest.raises(TypeError, match="edge_index must be an integer tensor"):
        uniform_random_walks(edge_index.float(), torch.tensor([0]), 2, 2)
    with pytest.raises(ValueError, match=r"start holds node ids in \[3, 3\]"):
        uniform_random_walks(edge_index, torch.tensor([3]), 2, 2)


# ------------------------------------------------------------------------------------------------- model


def irregular_graph() -> Data:
    """7 nodes, degrees 6, 5, 4, 4, 3, 2, 2 (a simple graph always has two nodes of equal degree)."""
    pairs = [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (0, 6), (1, 2), (1, 3), (1, 4), (1, 5), (2, 3), (2, 4), (3, 6)]
    data = Data(x=torch.linspace(-1, 1, 7).unsqueeze(-1), edge_index=undirected(pairs), num_nodes=7)
    return RandomWalkPE(4)(data)


def permute(data: Data, perm: torch.Tensor) -> Data:
    """Node ``i`` of ``data`` becomes node ``perm[i]``."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    return RandomWalkPE(4)(Data(x=data.x[inv], edge_index=perm[data.edge_index], num_nodes=data.num_nodes))


def test_irregular_graph_degrees():
    assert torch.bincount(irregular_graph().edge_index[0]).tolist() == [6, 5, 4, 4, 3, 2, 2]


def test_exactly_equivariant_with_node_tokens_for_tie_preserving_relabellings():
    """Eval, node tokenization: a relabelling that keeps the id order of equal-degree nodes permutes the output."""
    model = GraphMambaModel(num_classes=3, hidden=8, layers=2, task="node", in_features=1, walk_length=0, pe="rwse",
                            pe_options={"in_features": 4}).double().eval()
    g = irregular_graph()
    for _ in range(3):
        perm = torch.randperm(7)
        for a, b in ((2, 3), (5, 6)):  # the tied pairs keep their relative order
            if perm[a] > perm[b]:
                perm[[a, b]] = perm[[b, a]]
        h = permute(g, perm)
        with torch.no_grad():
            out = model(g.update({"x": g.x.double(), "rw_pe": g.rw_pe.double()}))
            out_perm = model(h.update({"x": h.x.double(), "rw_pe": h.rw_pe.double()}))
        torch.testing.assert_close(out_perm[perm], out)


def test_ties_and_walks_break_equivariance():
    """The node sequence is an order: relabelling tied nodes (or redrawing walks) changes the output."""
    ring = Data(x=torch.linspace(-1, 1, 6).unsqueeze(-1), edge_index=undirected([(i, (i + 1) % 6) for i in range(6)]),
                num_nodes=6)
    model = GraphMambaModel(num_classes=3, hidden=8, layers=2, task="node", in_features=1, walk_length=0).eval()
    perm = torch.tensor([3, 0, 4, 1, 5, 2])
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(6)
    relabelled = Data(x=ring.x[inv], edge_index=perm[ring.edge_index], num_nodes=6)
    with torch.no_grad():
        assert not torch.allclose(model(relabelled)[perm], model(ring), atol=1e-4)
    walker = GraphMambaModel(num_classes=3, hidden=8, layers=2, task="node", in_features=1, walk_length=2, seed=0)
    walker.eval()
    with torch.no_grad():
        a = walker(irregular_graph())
        walker.seed = 1  # other walks
        assert not torch.allclose(walker(irregular_graph()), a, atol=1e-4)


def test_eval_is_deterministic_and_training_resamples():
    model = GraphMambaModel(num_classes=3, hidden=8, layers=2, in_features=1, walk_length=2, num_walks=2, repeats=2)
    g = irregular_graph()
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(g), model(g))
    model.train()
    torch.manual_seed(0)
    first = model.tokens_and_order(g.edge_index, torch.zeros(7, dtype=torch.long))[0]
    second = model.tokens_and_order(g.edge_index, torch.zeros(7, dtype=torch.long))[0]
    assert not (torch.equal(first.token, second.token) and torch.equal(first.node, second.node))


def test_node_tokens_padding_does_not_leak_between_graphs():
    model = GraphMambaModel(num_classes=3, hidden=8, layers=2, task="node", in_features=1, walk_length=0).eval()
    small = Data(x=torch.randn(3, 1), edge_index=undirected([(0, 1), (1, 2)]), num_nodes=3)
    with torch.no_grad():
        alone = model(Batch.from_data_list([small]))
        mixed = model(Batch.from_data_list([small, irregular_graph()]))
    torch.testing.assert_close(mixed[:3], alone, rtol=1e-5, atol=1e-5)


def test_a_training_step_reduces_the_loss():
    torch.manual_seed(0)
    graphs = [irregular_graph(), Data(x=torch.randn(5, 1), edge_index=undirected([(0, 1), (1, 2), (2, 3)]),
                                            num_nodes=5)]
    graphs[1] = RandomWalkPE(4)(graphs[1])
    for i, g in enumerate(graphs):
        g.y = torch.tensor([i])
    batch = Batch.from_data_list(graphs)
    model = GraphMambaModel(num_classes=2, hidden=8, layers=1, in_features=1, pe="rwse", pe_options={"in_features": 4},
                            walk_length=2, num_walks=2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.eval()
    with torch.no_grad():
        before = torch.nn.functional.cross_entropy(model(batch), batch.y)
    model.train()
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(batch), batch.y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    # every parameter is trained, except the decay of the token stage's backward direction: the node's
    # summary is the last row, which the reverse scan reaches at its first step (h = b, no decay yet)
    silent = {n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0}
    assert silent == {"convs.0.token_mamba.backward_block.A_log"}
    model.eval()
    with torch.no_grad():
        assert torch.nn.functional.cross_entropy(model(batch), batch.y) < before


@pytest.mark.parametrize("kwargs,error,match", [
    ({"walk_length": -1}, ValueError, "GraphMambaModel: walk_length must be >= 0, got -1"),
    ({"num_walks": 0}, ValueError, "GraphMambaModel: num_walks must be >= 1, got 0"),
    ({"repeats": 0}, ValueError, "GraphMambaModel: repeats must be >= 1, got 0"),
    ({"d_state": 1.5}, TypeError, "GraphMambaModel: d_state must be an int"),
    ({"seed": -3}, ValueError, "GraphMambaModel: seed must be >= 0"),
])
def test_model_bad_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        GraphMambaModel(num_classes=3, hidden=8, in_features=1, **kwargs)
