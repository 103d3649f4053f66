"""CAPE and the time-interval bias: exact values against the formulas, invariances, gradients, bad input."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.domains.recsys import CAPE, TimeIntervalBias, cape_positions, clipped_intervals

RECSYS = ["cape", "time_interval"]


def naive_cape(q, k, table, max_len, causal=True, proj=None):
    """CAPE by loops, straight from the paper: g = 1 - sigmoid(q.k/sqrt(d)), p = sum_{t=j..i} g_it."""
    b, h, lq, d = q.shape
    lk = k.shape[2]
    out = torch.zeros(b, h, lq, lk, dtype=q.dtype)
    for bi in range(b):
        for hi in range(h):
            for i in range(lq):
                query = q[bi, hi, i] if proj is None else proj(q[bi, hi, i])
                last = i if causal else lk - 1
                for j in range(lk):
                    if causal and j > i:
                        continue
                    p = sum(1 - torch.sigmoid(q[bi, hi, i] @ k[bi, hi, t] / math.sqrt(d)) for t in range(j, last + 1))
                    p = min(float(p), max_len - 1)
                    lo, hi_ = math.floor(p), math.ceil(p)
                    z_lo, z_hi = query @ table[lo], query @ table[hi_]
                    out[bi, hi, i, j] = (p - lo) * z_hi + (1 - p + lo) * z_lo
    return out


def test_registered_under_recsys():
    assert set(RECSYS) <= set(pet.list_encoders(domain="recsys"))
    for name in RECSYS:
        info = pet.encoder_info(name)
        assert info.domain == "recsys" and "20" in info.reference and info.hooks
        assert info.cls.__doc__
    assert pet.encoder_info("cape").hooks == ("bias",)
    assert pet.encoder_info("time_interval").hooks == ("embed", "bias")


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("position_dim", [None, 3])
def test_cape_matches_the_formula(causal, position_dim):
    enc = CAPE(8, 2, max_len=4, position_dim=position_dim, causal=causal).double()
    with torch.no_grad():
        enc.pos_emb.normal_()
    q, k = torch.randn(1, 2, 5, 4, dtype=torch.float64) * 2, torch.randn(1, 2, 5, 4, dtype=torch.float64) * 2
    pos = torch.arange(5)
    bias = enc.bias(q, k, pos, pos)
    proj = None if position_dim is None else (lambda x: torch.nn.functional.silu(enc.pre_proj(x)))
    expected = naive_cape(q, k, enc.pos_emb.detach(), 4, causal, proj)
    mask = torch.ones(5, 5, dtype=torch.bool).tril() if causal else torch.ones(5, 5, dtype=torch.bool)
    torch.testing.assert_close(bias[..., mask], expected[..., mask])


def test_cape_gate_is_dissimilarity():
    # a key equal to a large query has logit >> 0, gate ~0: it does not advance the position
    q = torch.tensor([[[[10.0, 0.0]]]])
    k = torch.tensor([[[[10.0, 0.0], [-10.0, 0.0], [10.0, 0.0]]]])
    positions = cape_positions(q @ k.transpose(-1, -2) / math.sqrt(2), torch.ones((), dtype=torch.bool))
    torch.testing.assert_close(positions[0, 0, 0], torch.tensor([1.0, 1.0, 0.0]), atol=1e-6, rtol=0)


def test_cape_starts_as_nope_and_past_positions_ignore_the_future():
    enc = CAPE(8, 2, max_len=8)
    q, k = torch.randn(2, 2, 6, 4), torch.randn(2, 2, 6, 4)
    pos = torch.arange(6)
    assert torch.count_nonzero(enc.bias(q, k, pos, pos)) == 0  # zero-initialised table
    p = enc.positions(q, k, pos, pos)
    k2 = k.clone()
    k2[:, :, 4:] = torch.randn(2, 2, 2, 4)
    p2 = enc.positions(q, k2, pos, pos)
    torch.testing.assert_close(p[:, :, :4, :4], p2[:, :, :4, :4])
    assert float(p.max()) <= 7 and float(p.min()) >= 0


def test_cape_gradcheck():
    enc = CAPE(4, 1, max_len=3, position_dim=2).double()
    with torch.no_grad():
        enc.pos_emb.normal_()
    q = torch.randn(1, 1, 3, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 1, 3, 4, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(3)
    assert torch.autograd.gradcheck(lambda a, b: enc.bias(a, b, pos, pos), (q, k))


def test_cape_in_attention_with_gqa_and_left_padding_invariance():
    enc = CAPE(16, 4, max_len=8)
    with torch.no_grad():
        enc.pos_emb.normal_()
    attn = pet.MultiHeadAttention(16, 4, num_kv_heads=2, causal=True, encoding=enc)
    x = torch.randn(1, 5, 16)
    out = attn(x)
    padded = torch.cat([torch.randn(1, 3, 16), x], dim=1)
    mask = torch.tensor([[False] * 3 + [True] * 5])
    out_padded = attn(padded, key_padding_mask=mask)
    torch.testing.assert_close(out_padded[:, 3:], out, atol=1e-5, rtol=1e-5)


def test_cape_bad_options():
    with pytest.raises(ValueError, match="max_len must be >= 2"):
        CAPE(8, 2, max_len=1)
    with pytest.raises(TypeError, match="position_dim must be an int"):
        CAPE(8, 2, position_dim=2.0)


# ---------------------------------------------------------------------------------------- time interval
def test_clipped_intervals():
    r = clipped_intervals(torch.tensor([0.0, 2.0, 10.0]), torch.tensor([0.0, 2.0, 10.0]), 5)
    assert r.tolist() == [[0, 2, 5], [2, 0, 5], [5, 5, 0]]
    batched = clipped_intervals(torch.tensor([[0.0, 1.5]]), torch.tensor([[0.0, 1.5]]), 9)
    assert batched.shape == (1, 2, 2) and batched.tolist() == [[[0, 1], [1, 0]]]


def test_time_interval_bias_matches_the_formula():
    enc = TimeIntervalBias(8, 2, max_interval=4).double()
    q, k = torch.randn(2, 2, 3, 4, dtype=torch.float64), torch.randn(2, 2, 3, 4, dtype=torch.float64)
    times = torch.tensor([[0.0, 1.0, 7.0], [0.0, 0.0, 2.0]], dtype=torch.float64)
    positions = torch.stack([torch.arange(3, dtype=torch.float64).expand(2, 3), times], dim=-1)
    bias = enc.bias(q, k, positions, positions).detach()
    table = enc.interval_emb.detach()
    for b in range(2):
        for h in range(2):
            for i in range(3):
                for j in range(3):
                    r = min(int(abs(times[b, i] - times[b, j])), 4)
                    assert float(bias[b, h, i, j]) == pytest.approx(float(q[b, h, i] @ table[r] / 2.0))


def test_time_interval_depends_on_gaps_not_on_the_clock():
    enc = TimeIntervalBias(8, 2, max_interval=16)
    q, k = torch.randn(1, 2, 4, 4), torch.randn(1, 2, 4, 4)
    index = torch.arange(4.0)
    t = torch.tensor([0.0, 3.0, 4.0, 9.0])
    a = enc.bias(q, k, torch.stack([index, t], -1), torch.stack([index, t], -1))
    b = enc.bias(q, k, torch.stack([index, t + 1000], -1), torch.stack([index, t + 1000], -1))
    torch.testing.assert_close(a, b)


def test_time_interval_embed_and_attention():
    enc = TimeIntervalBias(8, 2, max_interval=8, max_len=6)
    x = torch.randn(2, 4, 8)
    positions = torch.stack([torch.arange(4.0).expand(2, 4), torch.tensor([[0.0, 1, 2, 3], [0, 0, 5, 9]])], -1)
    torch.testing.assert_close(enc.embed(x, positions), x + enc.table(torch.arange(4)))
    out = pet.MultiHeadAttention(8, 2, causal=True, encoding=enc)(x, q_pos=positions)
    assert out.shape == (2, 4, 8) and torch.isfinite(out).all()
    assert TimeIntervalBias(8, 2).embed(x, positions) is x  # no absolute table by default


def test_time_interval_bad_input():
    enc = TimeIntervalBias(8, 2, max_len=4)
    x = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match=r"must have shape \(L, 2\) or \(B, L, 2\)"):
        enc.embed(x, torch.arange(3))
    with pytest.raises(ValueError, match="must be whole numbers"):
        enc.embed(x, torch.tensor([[0.5, 0.0], [1.0, 0.0], [2.0, 0.0]]))
    with pytest.raises(ValueError, match=r"must lie in \[0, max_len=4\)"):
        enc.embed(x, torch.tensor([[2.0, 0.0], [3.0, 0.0], [4.0, 0.0]]))
    with pytest.raises(ValueError, match="max_interval must be >= 1"):
        TimeIntervalBias(8, 2, max_interval=0)
