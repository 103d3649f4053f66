"""Learned graph encoders: registry, shapes, sign flips, SignNet invariance, end-to-end with the transforms."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
from torch_geometric.data import Batch
from torch_geometric.utils import from_networkx

import pe_toolkit as pet
import pe_toolkit.domains.graphs  # noqa: F401  (registers the graph encoders)
from pe_toolkit.domains.graphs import (
    LaplacianEigenvectorPE,
    LapPEEncoder,
    LearnedRFPEncoder,
    RandomFeaturePropagation,
    RandomWalkPE,
    RFPEncoder,
)

GRAPH_ENCODERS = pet.list_encoders(domain="graphs")


def make(name: str, dim: int = 16, num_heads: int = 4, **overrides):
    options = {**pet.encoder_info(name).example_options, **overrides}
    return pet.get_encoder(name, dim, num_heads, **options)


def ring(n: int) -> torch.Tensor:
    i = torch.arange(n)
    return torch.cat([torch.stack([i, (i + 1) % n]), torch.stack([(i + 1) % n, i])], dim=1)


def embed(enc, x, positions):
    """Call ``enc.embed``, with a ring graph over the nodes for encoders that need the edges."""
    if getattr(enc, "requires_edge_index", False):
        return enc.embed(x, positions, edge_index=ring(x.size(0)))
    return enc.embed(x, positions)


def test_registry_lists_the_graph_encoders():
    assert {"lap_pe", "rwse", "rfp", "rfp_learned"} <= set(GRAPH_ENCODERS)
    assert not {"lap_pe", "rwse", "rfp"} & set(pet.list_encoders(domain="sequence"))


@pytest.mark.parametrize("name", GRAPH_ENCODERS)
def test_metadata(name):
    info = pet.encoder_info(name)
    assert info.domain == "graphs" and info.hooks == ("embed",) and not info.relative
    assert "20" in info.reference and info.cls.__doc__


@pytest.mark.parametrize("name", GRAPH_ENCODERS)
@pytest.mark.parametrize("lead", [(7,), (2, 5)], ids=["flat", "dense"])
def test_embed_shapes_and_gradients(name, lead):
    enc = make(name).train()
    if getattr(enc, "requires_edge_index", False) and len(lead) > 1:
        pytest.skip("needs a flat node batch with edges")
    k = enc.in_features
    x = torch.randn(*lead, 16, requires_grad=True)
    positions = torch.randn(*lead, k)
    out = embed(enc, x, positions)
    assert out.shape == x.shape and torch.isfinite(out).all()
    out.sum().backward()
    assert all(p.grad is not None for p in enc.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", GRAPH_ENCODERS)
def test_embed_errors(name):
    enc = make(name)
    k = enc.in_features
    with pytest.raises(ValueError, match=r"positions has shape \(7, 99\), expected \(7, " + str(k)):
        embed(enc, torch.randn(7, 16), torch.randn(7, 99))
    with pytest.raises(ValueError, match="x must have shape"):
        embed(enc, torch.randn(7, 15), torch.randn(7, k))
    with pytest.raises(TypeError, match="floating"):
        embed(enc, torch.randn(7, 16), torch.ones(7, k, dtype=torch.long))
    with pytest.raises(ValueError, match="in_features must be >= 1"):
        make(name, in_features=0)


def test_constructor_option_errors():
    with pytest.raises(ValueError, match="sign_flip must be one of"):
        LapPEEncoder(8, 2, in_features=3, sign_flip="node")
    with pytest.raises(TypeError, match="signnet must be a bool"):
        LapPEEncoder(8, 2, in_features=3, signnet="yes")
    with pytest.raises(ValueError, match="norm must be one of"):
        pet.get_encoder("rwse", 8, 2, in_features=3, norm="group")
    with pytest.raises(ValueError, match=r"num_inits \(4\) must divide in_features \(6\)"):
        RFPEncoder(8, 2, in_features=6, num_inits=4)
    with pytest.raises(ValueError, match="use_eigenvalues=True needs eigenvalues"):
        LapPEEncoder(8, 2, in_features=3, use_eigenvalues=True).embed(torch.randn(4, 8), torch.randn(4, 3))


# ------------------------------------------------------------------------------------------- sign flips
def test_sign_flip_only_in_training():
    enc = LapPEEncoder(8, 2, in_features=5)
    v = torch.randn(10, 5)
    enc.eval()
    state = torch.random.get_rng_state()
    assert torch.equal(enc.flip_signs(v), v)
    assert torch.equal(torch.random.get_rng_state(), state)
    enc.train()
    seen = set()
    for _ in range(20):
        flipped = enc.flip_signs(v)
        ratio = flipped / v
        assert torch.equal(ratio.abs(), torch.ones_like(v))
        assert (ratio == ratio[0]).all()  # "batch": one sign per eigenvector, shared by all nodes
        seen.add(tuple(ratio[0].tolist()))
    assert len(seen) > 1
    assert torch.equal(LapPEEncoder(8, 2, in_features=5, sign_flip="none").train().flip_signs(v), v)


def test_sign_flip_per_graph():
    enc = LapPEEncoder(8, 2, in_features=4, sign_flip="graph").train()
    v = torch.randn(9, 4)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    seen_differ = False
    for _ in range(10):
        ratio = enc.flip_signs(v, batch) / v
        for g in range(3):
            rows = ratio[batch == g]
            assert (rows == rows[0]).all()
        seen_differ |= not (ratio == ratio[0]).all()
    assert seen_differ
    dense = torch.randn(3, 5, 4)
    ratio = enc.flip_signs(dense) / dense
    assert (ratio == ratio[:, :1]).all()
    with pytest.raises(ValueError, match="batch must have shape"):
        enc.flip_signs(v, batch[:4])


@pytest.mark.parametrize("use_eigenvalues", [False, True])
def test_signnet_is_sign_invariant(use_eigenvalues):
    enc = LapPEEncoder(16, 4, in_features=6, signnet=True, use_eigenvalues=use_eigenvalues, hidden=8).double().eval()
    x, v = torch.randn(11, 16, dtype=torch.float64), torch.randn(11, 6, dtype=torch.float64)
    lam = torch.rand(6, dtype=torch.float64).expand(11, 6)
    signs = torch.tensor([1.0, -1, -1, 1, -1, 1], dtype=torch.float64)
    ref = enc.embed(x, v, eigenvalues=lam)
    torch.testing.assert_close(enc.embed(x, -v, eigenvalues=lam), ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(enc.embed(x, v * signs, eigenvalues=lam), ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(enc.train().embed(x, v, eigenvalues=lam), ref, rtol=0, atol=1e-12)  # flips are moot
    plain = LapPEEncoder(16, 4, in_features=6).double().eval()
    assert not torch.allclose(plain.embed(x, -v), plain.embed(x, v))


@pytest.mark.parametrize("signnet", [False, True])
def test_mask_hides_padded_columns(signnet):
    enc = LapPEEncoder(8, 2, in_features=4, signnet=signnet, use_eigenvalues=True).eval()
    x, v, lam = torch.randn(5, 8), torch.randn(5, 4), torch.rand(5, 4)
    mask = torch.tensor([True, True, False, False]).expand(5, 4)
    garbage_v, garbage_lam = v.clone(), lam.clone()
    garbage_v[:, 2:] = 7.0
    garbage_lam[:, 2:] = -3.0
    zero_v, zero_lam = v * mask, lam * mask
    torch.testing.assert_close(enc.embed(x, garbage_v, eigenvalues=garbage_lam, mask=mask),
                               enc.embed(x, zero_v, eigenvalues=zero_lam, mask=mask))
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        enc.embed(x, v, eigenvalues=lam, mask=mask.float())


def test_rfp_encoder_is_invariant_to_the_order_of_inits():
    enc = RFPEncoder(8, 2, in_features=12, num_inits=3).eval()
    x, pe = torch.randn(6, 8), torch.randn(6, 12)
    shuffled = pe.view(6, 3, 4)[:, [2, 0, 1]].reshape(6, 12)
    torch.testing.assert_close(enc.embed(x, shuffled), enc.embed(x, pe))


def test_rwse_flat_and_dense_batches_agree_in_eval():
    enc = pet.get_encoder("rwse", 8, 2, in_features=3).eval()
    with torch.no_grad():
        enc.norm.running_mean.fill_(0.2)
        enc.norm.running_var.fill_(0.5)
    x, p = torch.randn(2, 5, 8), torch.rand(2, 5, 3)
    torch.testing.assert_close(enc.embed(x, p).view(10, 8), enc.embed(x.view(10, 8), p.view(10, 3)))
    for norm in ("layer", "none"):
        assert pet.get_encoder("rwse", 8, 2, in_features=3, norm=norm).embed(x, p).shape == x.shape


# ------------------------------------------------------------------------------------------- end to end
def test_transforms_feed_the_encoders_on_a_pyg_batch():
    graphs = [nx.cycle_graph(6), nx.path_graph(2), nx.petersen_graph()]
    transforms = [LaplacianEigenvectorPE(3), RandomWalkPE(4), RandomFeaturePropagation(2, 2, num_inits=2)]
    data_list = []
    for g in graphs:
        data = from_networkx(g)
        data.x = torch.randn(g.number_of_nodes(), 16)
        for t in transforms:
            data = t(data)
        data_list.append(data)
    batch = Batch.from_data_list(data_list)
    n = batch.num_nodes
    assert batch.lap_pe.shape == (n, 3) and batch.lap_mask[6:8].sum(1).tolist() == [1, 1]  # P2: 1 eigenvector
    lap = LapPEEncoder(16, 4, in_features=3, use_eigenvalues=True, sign_flip="graph").train()
    out = lap.embed(batch.x, batch.lap_pe, eigenvalues=batch.lap_eigval, mask=batch.lap_mask, batch=batch.batch)
    out = make("rwse", in_features=4).embed(out, batch.rw_pe)
    out = make("rfp", in_features=12, num_inits=2).embed(out, batch.rfp)
    assert out.shape == (n, 16) and torch.isfinite(out).all()


# ------------------------------------------------------------------------------------------- learned RFP
def test_learned_rfp_with_zero_attention_is_the_fixed_rw_operator():
    g = nx.petersen_graph()
    data = from_networkx(g)
    data = RandomFeaturePropagation(3, 4, operator="rw", normalization="l2", dtype=torch.float64)(data)
    enc = LearnedRFPEncoder(8, 2, in_features=3, steps=4).double()
    with torch.no_grad():
        enc.query.weight.zero_()  # uniform attention over N(i) + i = D^-1 (A + I)
    x = torch.randn(10, 8, dtype=torch.float64)
    got = enc.trajectory(x, data.rfp[:, :3], data.edge_index)
    torch.testing.assert_close(got, data.rfp)


def test_learned_rfp_is_permutation_equivariant_and_trains():
    n = 9
    edge_index = ring(n)
    enc = LearnedRFPEncoder(8, 2, in_features=3, steps=3).double()
    x, z = torch.randn(n, 8, dtype=torch.float64), torch.randn(n, 3, dtype=torch.float64)
    perm = torch.randperm(n)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n)
    out = enc.embed(x, z, edge_index=edge_index)
    out_p = enc.embed(x[perm], z[perm], edge_index=inv[edge_index])
    torch.testing.assert_close(out[perm], out_p)
    out.sum().backward()
    assert enc.query.weight.grad.abs().sum() > 0 and enc.key.weight.grad.abs().sum() > 0


def test_learned_rfp_normalises_per_graph_and_validates():
    enc = LearnedRFPEncoder(8, 2, in_features=2, steps=2).double()
    edge_index = torch.cat([ring(4), ring(5) + 4], dim=1)
    batch = torch.tensor([0] * 4 + [1] * 5)
    x, z = torch.randn(9, 8, dtype=torch.float64), torch.randn(9, 2, dtype=torch.float64)
    traj = enc.trajectory(x, z, edge_index, batch)
    for g in range(2):
        torch.testing.assert_close(traj[batch == g].norm(dim=0), torch.ones(6, dtype=torch.float64))
    alone = enc.trajectory(x[4:], z[4:], ring(5))
    torch.testing.assert_close(traj[4:], alone)
    with pytest.raises(ValueError, match="needs edge_index"):
        enc.embed(x, z)
    with pytest.raises(ValueError, match="flat"):
        enc.embed(x.view(1, 9, 8), z.view(1, 9, 2), edge_index=edge_index)
    with pytest.raises(ValueError, match="batch must have shape"):
        enc.trajectory(x, z, edge_index, batch[:3])
