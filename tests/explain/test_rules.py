"""Each LRP rule against its formula (AttnLRP, Achtibat et al. 2024; PA-LRP, Bakish et al. 2025)."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from pe_toolkit.encoders.rotary import apply_rope
from pe_toolkit.explain import rules

D = torch.float64


def relevance_of(fn, inputs, seed_relevance):
    """Run ``fn(*inputs)`` and propagate ``seed_relevance`` back: the 'gradient' of each input is its relevance."""
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*leaves)
    grads = torch.autograd.grad(out, leaves, grad_outputs=seed_relevance, allow_unused=True)
    return out, grads


def test_linear_epsilon_rule_formula_and_bias_absorption():
    x = torch.randn(2, 3, 4, dtype=D)
    w, b = torch.randn(5, 4, dtype=D), torch.randn(5, dtype=D)
    r = torch.randn(2, 3, 5, dtype=D)
    ledger = rules.RelevanceLedger(2, D)
    eps = 0.1
    z, (r_x,) = relevance_of(lambda t: rules.linear(t, w, b, eps=eps, ledger=ledger), [x], r)
    # R_x[i] = sum_j x_i w_ji R_j / (z_j + eps sign z_j)
    expected = torch.einsum("bti,ji,btj->bti", x, w, r / (z + eps * torch.sign(z)))
    assert_close(r_x, expected)
    assert_close(ledger.totals["stabiliser"], (r.sum((1, 2)) - expected.sum((1, 2))))
    # without bias and stabiliser the rule is exactly conservative
    _, (r_x,) = relevance_of(lambda t: rules.linear(t, w), [x], r)
    z = x @ w.T
    assert_close(r_x.sum(), (r * z / z).sum())


def test_add_epsilon_rule_and_constant_share_is_recorded():
    a, b = torch.randn(3, 5, dtype=D), torch.randn(3, 5, dtype=D)
    r = torch.randn(3, 5, dtype=D)
    _, (r_a, r_b) = relevance_of(lambda s, t: rules.add(s, t), [a, b], r)
    assert_close(r_a, a * r / (a + b))
    assert_close(r_b, b * r / (a + b))
    assert_close(r_a + r_b, r)
    ledger = rules.RelevanceLedger(3, D)
    a_leaf = a.clone().requires_grad_(True)
    out = rules.add(a_leaf, b, ledger=ledger, constant_tag="ignored_position")
    (r_a,) = torch.autograd.grad(out, a_leaf, grad_outputs=r)
    assert_close(ledger.totals["ignored_position"], (b * r / (a + b)).sum(1))
    assert_close(r_a.sum(1) + ledger.totals["ignored_position"], r.sum(1))
    with pytest.raises(ValueError, match="same shape"):
        rules.add(a, b[:, :2])


def test_multiply_uniform_rule_halves_and_sums_over_broadcast():
    a, b = torch.randn(2, 3, 4, dtype=D), torch.randn(2, 3, 1, dtype=D)
    r = torch.randn(2, 3, 4, dtype=D)
    out, (r_a, r_b) = relevance_of(rules.multiply, [a, b], r)
    assert_close(out, a * b)
    assert_close(r_a, r / 2)
    assert_close(r_b, (r / 2).sum(-1, keepdim=True))
    # a constant factor passes everything to the variable
    a_leaf = a.clone().requires_grad_(True)
    (r_a,) = torch.autograd.grad(rules.multiply(a_leaf, b), a_leaf, grad_outputs=r)
    assert_close(r_a, r)


def test_matmul_uniform_epsilon_rule_matches_the_sum_over_products():
    a, b = torch.randn(2, 3, 4, dtype=D), torch.randn(2, 4, 5, dtype=D)
    r = torch.randn(2, 3, 5, dtype=D)
    scale, eps = 0.5, 0.01
    z, (r_a, r_b) = relevance_of(lambda s, t: rules.matmul(s, t, scale=scale, eps=eps), [a, b], r)
    assert_close(z, scale * a @ b)
    share = r / (z + eps * torch.sign(z)) / 2
    expected_a = torch.einsum("nik,nkj,nij->nik", a, b, share) * scale
    expected_b = torch.einsum("nik,nkj,nij->nkj", a, b, share) * scale
    assert_close(r_a, expected_a)
    assert_close(r_b, expected_b)
    _, (r_a, r_b) = relevance_of(lambda s, t: rules.matmul(s, t, scale=scale), [a, b], r)
    assert_close(r_a.sum() + r_b.sum(), r.sum())  # conservative without stabiliser


def test_softmax_rule_taylor_formula_mask_and_remainder():
    x = torch.randn(2, 1, 3, 3, dtype=D)
    visible = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
    r = torch.randn(2, 1, 3, 3, dtype=D) * visible
    ledger = rules.RelevanceLedger(2, D)
    s, (r_x,) = relevance_of(lambda t: rules.softmax(t, visible, ledger=ledger), [x], r)
    assert_close(s, torch.softmax(x.masked_fill(~visible, float("-inf")), -1))
    expected = (x * (r - s * r.sum(-1, keepdim=True))) * visible
    assert_close(r_x, expected)
    assert (r_x[..., ~visible] == 0).all()
    assert_close(ledger.totals["softmax"], r.sum((1, 2, 3)) - expected.sum((1, 2, 3)))
    # the rule is shift-invariant in total: sum_j (x_j - xbar) R_j
    shifted = x + 3.0
    _, (r_shift,) = relevance_of(lambda t: rules.softmax(t, visible), [shifted], r)
    assert_close(r_shift.sum(-1), r_x.sum(-1))


def test_passthrough_is_the_identity_rule():
    x = torch.randn(2, 6, dtype=D)
    r = torch.randn(2, 6, dtype=D)
    out, (r_x,) = relevance_of(lambda t: rules.passthrough(t, torch.nn.functional.silu), [x], r)
    assert_close(out, torch.nn.functional.silu(x))
    assert_close(r_x, r)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_from_rules_equals_apply_rope_and_conserves(interleaved):
    x = torch.randn(2, 3, 5, 8, dtype=D)
    angles = torch.randn(5, 4, dtype=D)
    cos, sin = angles.cos().expand(2, 3, 5, 4), angles.sin().expand(2, 3, 5, 4)
    r = torch.randn(2, 3, 5, 8, dtype=D)

    def rope(t, c, s):
        if interleaved:
            cf, sf = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
        else:
            cf, sf = torch.cat((c, c), -1), torch.cat((s, s), -1)
        return rules.add(rules.multiply(t, cf), rules.multiply(rules.rotate_half(t, interleaved=interleaved), sf))

    out, (r_x, r_cos, r_sin) = relevance_of(rope, [x, cos, sin], r)
    assert_close(out, apply_rope(x, angles.cos(), angles.sin(), interleaved=interleaved))
    assert_close(r_x.sum() + r_cos.sum() + r_sin.sum(), r.sum())
    # half of each product goes to the table: the cos term's share is half of x*cos's epsilon share
    cf = cos.repeat_interleave(2, -1) if interleaved else torch.cat((cos, cos), -1)
    share_cos = x * cf * r / out
    if interleaved:
        expected_cos = (share_cos / 2).unflatten(-1, (4, 2)).sum(-1)
    else:
        expected_cos = (share_cos / 2).unflatten(-1, (2, 4)).sum(-2)
    assert_close(r_cos, expected_cos)


def test_rotate_half_moves_relevance_with_the_pair_without_sign():
    x = torch.arange(1.0, 5.0, dtype=D)[None]
    r = torch.tensor([[10.0, 20.0, 30.0, 40.0]], dtype=D)
    out, (r_x,) = relevance_of(lambda t: rules.rotate_half(t), [x], r)
    assert out.tolist() == [[-3.0, -4.0, 1.0, 2.0]]
    assert r_x.tolist() == [[30.0, 40.0, 10.0, 20.0]]
    out, (r_x,) = relevance_of(lambda t: rules.rotate_half(t, interleaved=True), [x], r)
    assert out.tolist() == [[-2.0, 1.0, -4.0, 3.0]]
    assert r_x.tolist() == [[20.0, 10.0, 40.0, 30.0]]


def test_zero_output_without_stabiliser_absorbs_instead_of_nan():
    z = torch.tensor([[0.0, 2.0]], dtype=D)
    r = torch.tensor([[1.0, 4.0]], dtype=D)
    assert rules.divide(r, z, 0.0).tolist() == [[0.0, 2.0]]
    assert_close(rules.stabilise(torch.tensor([0.0, -1.0]), 0.5), torch.tensor([0.5, -1.5]))


def test_ledger_rejects_unknown_tag():
    with pytest.raises(ValueError, match="ledger tag"):
        rules.RelevanceLedger(1, D).add("bogus", torch.zeros(1, dtype=D))
