"""BAM: the generalized-Gaussian log-prior bias, its ALiBi initialisation and hand-computed values."""

import math

import pytest
import torch

from pe_toolkit.encoders.base import causal_visibility
from pe_toolkit.encoders.bayesian import BAM
from pe_toolkit.encoders.bias import ALiBi, alibi_slopes


def bias_of(enc, positions, dtype=torch.float64):
    positions = torch.as_tensor(positions)
    q = torch.zeros(1, enc.num_heads, positions.shape[-1], enc.head_dim, dtype=dtype)
    return enc.bias(q, q, positions, positions)


@pytest.mark.parametrize("num_heads", [1, 4, 6, 12])
@pytest.mark.parametrize("causal", [True, False])
def test_init_attention_equals_alibi(num_heads, causal):
    bam, alibi = BAM(12 * num_heads, num_heads), ALiBi(12 * num_heads, num_heads)
    positions = torch.arange(9)
    logits = torch.randn(1, num_heads, 9, 9, dtype=torch.float64)
    mask = causal_visibility(9, 9) if causal else torch.ones(9, 9, dtype=torch.bool)
    with torch.no_grad():
        p_bam = torch.softmax((logits + bias_of(bam, positions)).masked_fill(~mask, -math.inf), dim=-1)
        p_alibi = torch.softmax((logits + bias_of(alibi, positions)).masked_fill(~mask, -math.inf), dim=-1)
    # BAM's scale is stored in float32, so slopes agree to float32 rounding
    torch.testing.assert_close(p_bam, p_alibi, rtol=1e-6, atol=1e-7)


def test_init_differs_from_alibi_by_a_per_head_constant():
    bam, alibi = BAM(16, 4).double(), ALiBi(16, 4)
    with torch.no_grad():
        bam.scale.copy_(alibi_slopes(4).log())  # undo the float32 rounding of the stored init
        diff = bias_of(bam, torch.arange(6)) - bias_of(alibi, torch.arange(6))
    slopes = alibi_slopes(4)
    for h in range(4):  # -slope * (|d| + 1e-5) + slope * |d| = -slope * 1e-5
        torch.testing.assert_close(diff[0, h], torch.full((6, 6), -slopes[h].item() * 1e-5, dtype=torch.float64),
                                   rtol=1e-9, atol=1e-15)


def test_init_parameters():
    bam = BAM(16, 4)
    torch.testing.assert_close(bam.shape.detach(), torch.ones(4), rtol=0, atol=0)
    torch.testing.assert_close(bam.loc.detach(), torch.zeros(4), rtol=0, atol=0)
    torch.testing.assert_close(bam.scale.detach().exp().double(), alibi_slopes(4), rtol=1e-6, atol=0)
    assert all(p.requires_grad for p in (bam.shape, bam.scale, bam.loc))
    assert sum(p.numel() for p in bam.parameters()) == 3 * 4


def test_hand_computed_shape_two_with_location():
    bam = BAM(8, 2)
    with torch.no_grad():
        bam.shape.copy_(torch.tensor([2.0, 0.5]))
        bam.scale.copy_(torch.tensor([math.log(0.5), 0.0]))  # exp(scale) = 0.5, 1
        bam.loc.copy_(torch.tensor([math.asinh(0.5), 0.0]))  # mu = 2 sinh(loc) = 1, 0
    torch.testing.assert_close(bam.location().detach().double(), torch.tensor([1.0, 0.0], dtype=torch.float64),
                               rtol=1e-6, atol=1e-7)
    bias = bias_of(bam, [0, 1, 2])[0]
    # delta = j - i = [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]
    # head 0: -0.5 * (|delta - 1| + 1e-5) ** 2 with |delta - 1| = [[1, 0, 1], [2, 1, 0], [3, 2, 1]]
    e = 1e-5
    head0 = torch.tensor(
        [
            [-0.5 * (1 + e) ** 2, -0.5 * e**2, -0.5 * (1 + e) ** 2],
            [-0.5 * (2 + e) ** 2, -0.5 * (1 + e) ** 2, -0.5 * e**2],
            [-0.5 * (3 + e) ** 2, -0.5 * (2 + e) ** 2, -0.5 * (1 + e) ** 2],
        ],
        dtype=torch.float64,
    )
    # head 1: -(|delta| + 1e-5) ** 0.5
    head1 = torch.tensor(
        [[-(abs(j - i) + e) ** 0.5 for j in range(3)] for i in range(3)], dtype=torch.float64
    )
    torch.testing.assert_close(bias[0], head0, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(bias[1], head1, rtol=1e-6, atol=1e-9)
    # spelled out: i = 2, j = 0 on head 0 is -0.5 * 3.00001 ** 2
    assert bias[0, 2, 0].item() == pytest.approx(-4.50003000005, rel=1e-6)


def test_float32_bias_and_gradients():
    bam = BAM(8, 2)
    with torch.no_grad():
        bam.shape.copy_(torch.tensor([1.5, 0.7]))
        bam.loc.copy_(torch.tensor([0.3, -0.2]))
    bias = bias_of(bam, torch.arange(5), dtype=torch.float32)
    assert bias.dtype == torch.float32
    bias.sum().backward()
    for p in (bam.shape, bam.scale, bam.loc):
        assert p.grad is not None and torch.isfinite(p.grad).all()


def test_gradient_of_scale_and_shape_literal():
    bam = BAM(4, 1)
    with torch.no_grad():
        bam.scale.fill_(0.0)
        bam.shape.fill_(2.0)
    bias_of(bam, [0, 1]).sum().backward()
    # bias = -exp(s) (|d| + e)^b over d in {0, 1, -1, 0}: d/ds = bias sum, d/db = -sum (|d|+e)^b log(|d|+e)
    e = 1e-5
    values = [e**2, (1 + e) ** 2, (1 + e) ** 2, e**2]
    assert bam.scale.grad.item() == pytest.approx(-sum(values), rel=1e-5)
    expected_shape_grad = -(2 * e**2 * math.log(e) + 2 * (1 + e) ** 2 * math.log(1 + e))
    assert bam.shape.grad.item() == pytest.approx(expected_shape_grad, rel=1e-3, abs=1e-6)


def test_trainability_flags():
    bam = BAM(8, 2, train_shape=False, train_scale=True, train_loc=False)
    assert (bam.shape.requires_grad, bam.scale.requires_grad, bam.loc.requires_grad) == (False, True, False)


@pytest.mark.parametrize("flag", ["train_shape", "train_scale", "train_loc"])
def test_non_bool_flags_raise(flag):
    with pytest.raises(TypeError, match=flag):
        BAM(8, 2, **{flag: 1})
