"""CoPE: gates, contextual positions, interpolation of position logits, clamping, GQA."""

import math

import pytest
import torch

from pe_toolkit.encoders.base import causal_visibility
from pe_toolkit.encoders.contextual import CoPE, cope_positions, interpolate_position_logits


def reference_cope_bias(q, k, pos_emb, npos_max):
    """Float64 loops: g_it = sigmoid(q_i.k_t / sqrt(d)) for visible t, p_ij = sum_{t=j..i} g_it,
    clamped to npos_max - 1, z_i[p] = q_i.e[p] interpolated between floor and ceil, divided by sqrt(d).
    Keys are aligned bottom-right (query i sits at key index i + Lk - Lq)."""
    q, k, pos_emb = q.double(), k.double(), pos_emb.double()
    b, h, lq, d = q.shape
    lk = k.shape[-2]
    rep = h // k.shape[1]
    out = torch.zeros(b, h, lq, lk, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            kh = k[bi, hi // rep]
            for i in range(lq):
                last = i + lk - lq
                qi = q[bi, hi, i]
                gates = [torch.sigmoid(qi @ kh[t] / math.sqrt(d)).item() for t in range(lk)]
                for j in range(lk):
                    p = sum(gates[j : last + 1]) if j <= last else 0.0
                    p = min(p, npos_max - 1)
                    lo, hi_ = math.floor(p), math.ceil(p)
                    z_lo, z_hi = (qi @ pos_emb[lo]).item(), (qi @ pos_emb[hi_]).item()
                    out[bi, hi, i, j] = (z_lo + (p - lo) * (z_hi - z_lo)) / math.sqrt(d)
    return out


def orthogonal_qk(length, heads=1):
    """q_i = e0 and k_j = e1 for every i, j: every gate is sigmoid(0) = 1/2."""
    q = torch.zeros(1, heads, length, 2, dtype=torch.float64)
    k = torch.zeros(1, heads, length, 2, dtype=torch.float64)
    q[..., 0] = 1.0
    k[..., 1] = 1.0
    return q, k


def test_positions_half_gates_literal():
    q, k = orthogonal_qk(4)
    positions = cope_positions(q, k, causal_visibility(4, 4))
    # p_ij = 0.5 (i - j + 1) for j <= i, 0 for masked keys
    expected = torch.tensor(
        [[0.5, 0, 0, 0], [1.0, 0.5, 0, 0], [1.5, 1.0, 0.5, 0], [2.0, 1.5, 1.0, 0.5]], dtype=torch.float64
    )
    torch.testing.assert_close(positions[0, 0], expected, rtol=0, atol=0)


def test_positions_gradient_is_autograd_of_flipped_cumsum():
    """cope_positions has a hand-written backward (a forward cumsum); it must equal autograd's."""
    torch.manual_seed(0)
    q = torch.randn(2, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 5, 4, dtype=torch.float64, requires_grad=True)
    visible = causal_visibility(5, 5)
    weights = torch.randn(2, 2, 5, 5, dtype=torch.float64)
    ours = torch.autograd.grad((cope_positions(q, k, visible) * weights).sum(), (q, k))
    gates = torch.sigmoid(q @ k.transpose(-1, -2) / 2.0) * visible
    reference = torch.autograd.grad((gates.flip(-1).cumsum(-1).flip(-1) * weights).sum(), (q, k))
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a, b: cope_positions(a, b, visible), (q, k))
    assert torch.autograd.gradgradcheck(lambda a, b: cope_positions(a, b, visible), (q, k))


def test_bias_half_gates_literal_interpolation():
    enc = CoPE(2, 1, npos_max=8)  # head_dim 2
    with torch.no_grad():
        enc.pos_emb.zero_()
        enc.pos_emb[:, 0] = torch.arange(8.0) ** 2  # z[p] = q . e[p] = p^2 for q = e0
    q, k = orthogonal_qk(4)
    bias = enc.bias(q, k, torch.arange(4), torch.arange(4))
    # positions 0.5, 1, 1.5, 2 -> z = (0 + 1) / 2, 1, (1 + 4) / 2, 4 (linear between floor and ceil)
    expected = torch.tensor(
        [[0.5, 0, 0, 0], [1.0, 0.5, 0, 0], [2.5, 1.0, 0.5, 0], [4.0, 2.5, 1.0, 0.5]], dtype=torch.float64
    ) / math.sqrt(2)
    torch.testing.assert_close(bias[0, 0], expected, rtol=1e-12, atol=1e-12)


def test_positions_clamped_at_npos_max_minus_one():
    enc = CoPE(2, 1, npos_max=3)
    with torch.no_grad():
        enc.pos_emb[:, 0] = torch.tensor([0.0, 10.0, 30.0])
    q, k = orthogonal_qk(8)
    bias = enc.bias(q, k, torch.arange(8), torch.arange(8))[0, 0, 7] * math.sqrt(2)
    # row i = 7: p = 0.5 (8 - j) = 4, 3.5, 3, 2.5, 2, 1.5, 1, 0.5 -> clamped to 2 for the first five
    expected = torch.tensor([30.0, 30.0, 30.0, 30.0, 30.0, 20.0, 10.0, 5.0], dtype=torch.float64)
    torch.testing.assert_close(bias, expected, rtol=1e-12, atol=1e-12)


def test_interpolate_position_logits_literal():
    logits = torch.tensor([[[[1.0, 3.0, -1.0, 7.0]]]])  # z[0..3]
    positions = torch.tensor([[[[0.0, 0.25, 1.0, 1.5, 2.75, 3.0]]]])
    out = interpolate_position_logits(logits, positions)
    expected = torch.tensor([[[[1.0, 1.5, 3.0, 1.0, 5.0, 7.0]]]])
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bias_matches_loop_reference(dtype):
    enc = CoPE(16, 2, npos_max=4)  # head_dim 8; small npos_max so some positions clamp
    with torch.no_grad():
        enc.pos_emb.normal_()
    q = torch.randn(2, 2, 6, 8, dtype=dtype) * 2
    k = torch.randn(2, 2, 6, 8, dtype=dtype) * 2
    bias = enc.bias(q, k, torch.arange(6), torch.arange(6))
    assert bias.shape == (2, 2, 6, 6) and bias.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(bias.double(), reference_cope_bias(q, k, enc.pos_emb.detach(), 4), **tol)


def test_decoding_keys_aligned_bottom_right():
    enc = CoPE(8, 1, npos_max=16)
    with torch.no_grad():
        enc.pos_emb.normal_()
    q = torch.randn(1, 1, 1, 8, dtype=torch.float64)
    k = torch.randn(1, 1, 5, 8, dtype=torch.float64)
    bias = enc.bias(q, k, torch.tensor([4]), torch.arange(5))
    torch.testing.assert_close(bias, reference_cope_bias(q, k, enc.pos_emb.detach(), 16), rtol=1e-10, atol=1e-10)
    # the last query of a full pass sees the same keys, so it gets the same row
    q_full = torch.cat((torch.randn(1, 1, 4, 8, dtype=torch.float64), q), dim=2)
    full = enc.bias(q_full, k, torch.arange(5), torch.arange(5))
    torch.testing.assert_close(full[..., -1:, :], bias, rtol=1e-12, atol=1e-12)


def test_gqa_keys_repeated_to_query_heads():
    enc = CoPE(16, 4, npos_max=8)  # head_dim 4
    with torch.no_grad():
        enc.pos_emb.normal_()
    q = torch.randn(1, 4, 5, 4, dtype=torch.float64)
    k = torch.randn(1, 2, 5, 4, dtype=torch.float64)  # 2 kv heads: query heads 0, 1 -> kv 0; 2, 3 -> kv 1
    pos = torch.arange(5)
    bias = enc.bias(q, k, pos, pos)
    repeated = enc.bias(q, k[:, [0, 0, 1, 1]], pos, pos)
    torch.testing.assert_close(bias, repeated, rtol=0, atol=0)
    torch.testing.assert_close(bias, reference_cope_bias(q, k, enc.pos_emb.detach(), 8), rtol=1e-10, atol=1e-10)


def test_starts_as_nope_and_learns():
    enc = CoPE(8, 2)
    assert tuple(enc.pos_emb.shape) == (64, 4)
    q = torch.randn(1, 2, 5, 4, requires_grad=True)
    k = torch.randn(1, 2, 5, 4)
    bias = enc.bias(q, k, torch.arange(5), torch.arange(5))
    torch.testing.assert_close(bias, torch.zeros_like(bias), rtol=0, atol=0)
    bias.pow(2).add(bias).sum().backward()
    assert enc.pos_emb.grad is not None and enc.pos_emb.grad.abs().sum() > 0


def test_constructor_errors():
    with pytest.raises(ValueError, match="causal"):
        CoPE(8, 2, causal=False)
    with pytest.raises(ValueError, match="npos_max"):
        CoPE(8, 2, npos_max=1)
    with pytest.raises(TypeError, match="npos_max"):
        CoPE(8, 2, npos_max=8.0)
    with pytest.raises(ValueError, match="num_heads"):
        CoPE(8, 3)


def test_bfloat16_counts_positions_in_float32():
    enc = CoPE(64, 4, npos_max=256)
    q, k = torch.randn(1, 4, 128, 16), torch.randn(1, 4, 128, 16)
    pos = torch.arange(128)
    reference = enc.bias(q.double(), k.double(), pos, pos)
    low = enc.bias(q.bfloat16(), k.bfloat16(), pos, pos)
    # only the bf16 rounding of q and k remains: far below one whole position's worth of logit
    torch.testing.assert_close(low.double(), reference, atol=5e-2, rtol=5e-2)
