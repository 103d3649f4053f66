"""Bug class: positional encodings losing precision in bfloat16 at far positions.

Public reports (RoPE in half precision at long context; ALiBi biases built from positions cast to
the model dtype) describe the same failure: angles ``position * frequency`` or biases computed in
bfloat16, whose 8 significant bits cannot tell position 999,996 from 1,000,000, so attention at
long context is wrong by O(1) logits while short-context tests pass. The toolkit computes angles in
float64 and biases in float32 and only rounds the result.

Check: every encoder that acts in attention, in bfloat16, at positions up to 1e6 (a window near
1e6, and queries at 1e6 against keys at 0..3), gives logits within bfloat16 rounding of a float64
reference computed from the same (bfloat16-rounded) q, k and learned parameters:
``|err| <= 2**-5 * (|ref| + 1)``, eight bfloat16 ulps (BAM-SSMax scales the query by
log n = 13.8 at n = 1e6 before it is rounded to bfloat16: 0.023 here; the others stay below 0.016).
The two naive variants below (RoPE angles and an ALiBi bias computed in bfloat16) miss that bound
by 60x and 20x (errors 1.96 and 0.71). Found here: Sandwich's frequency buffer was
rounded by ``.bfloat16()`` (error 0.18 at distance 1e6); it is now kept in float64 as RoPE's is.
"""

from __future__ import annotations

import math

import pytest
import torch
from zoo_helpers import IN_ATTENTION, make_encoder

import pe_toolkit as pet

POSITIONS = torch.cat([torch.arange(4), 999_996 + torch.arange(5)])  # up to 1,000,000
BOUND = 2.0 ** -5


def relative_error(encoding_bf16, encoding_f64) -> float:
    """max |bf16 logits - float64 logits| / (|float64 logits| + 1) at POSITIONS."""
    q = torch.randn(1, 4, len(POSITIONS), 8).bfloat16()
    k = torch.randn(1, 4, len(POSITIONS), 8).bfloat16()
    ref = pet.positional_logits(encoding_f64, q.double(), k.double(), POSITIONS, POSITIONS)
    got = pet.positional_logits(encoding_bf16, q, k, POSITIONS, POSITIONS).double()
    assert torch.isfinite(ref).all()
    return float(((got - ref).abs() / (ref.abs() + 1)).max())


@pytest.mark.parametrize("name", IN_ATTENTION)
def test_bf16_logits_at_far_positions_match_float64(name):
    enc = make_encoder(name).to(torch.bfloat16)
    # the reference has the same (bf16-rounded) learned parameters; its fixed tables are float64
    f64 = make_encoder(name).double()
    f64.load_state_dict({k: v for k, v in enc.state_dict().items() if k in dict(enc.named_parameters())},
                        strict=False)
    with torch.no_grad():
        error = relative_error(enc, f64)
    assert error <= BOUND, f"{name}: bf16 error {error:.3g} at positions up to 1e6 (bound {BOUND:.3g})"


class NaiveBF16RoPE:
    """RoPE with angles computed in the query's dtype (the bug)."""

    def __init__(self, head_dim: int = 8, base: float = 10000.0):
        self.inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)

    def _rotate(self, x, pos):
        angles = pos.to(x.dtype)[:, None] * self.inv_freq.to(x.dtype)  # bf16 positions and products
        cos, sin = angles.cos().repeat_interleave(2, -1), angles.sin().repeat_interleave(2, -1)
        pairs = torch.stack([-x[..., 1::2], x[..., ::2]], dim=-1).flatten(-2)
        return x * cos + pairs * sin

    def rotate(self, q, k, q_pos, k_pos):
        return self._rotate(q, q_pos), self._rotate(k, k_pos)

    def bias(self, q, k, q_pos, k_pos):
        return None


class NaiveBF16ALiBi:
    """ALiBi with the bias built as ``slope * i - slope * j`` in the query's dtype (the bug)."""

    def __init__(self, num_heads: int = 4):
        self.slopes = torch.tensor([2.0 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)], dtype=torch.float64)

    def rotate(self, q, k, q_pos, k_pos):
        return q, k

    def bias(self, q, k, q_pos, k_pos):
        s = self.slopes.to(q.dtype)[:, None, None]
        return -(s * q_pos.to(q.dtype)[:, None] - s * k_pos.to(q.dtype)[None, :]).abs()


@pytest.mark.parametrize("naive", [NaiveBF16RoPE, NaiveBF16ALiBi])
def test_the_check_fails_on_naive_bf16_positions(naive):
    with torch.no_grad():
        error = relative_error(naive(), naive())  # the float64 reference runs the same code in float64
    assert error > 4 * BOUND, f"{naive.__name__}: error {error:.3g} should exceed the bound"
    assert not math.isnan(error)
