"""NoPE temperature / HeadScale (Wang et al. 2024) and BAM with Scalable-Softmax, against hand formulas."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.encoders import BAM, BAMSSMax, TemperatureNoPE


def test_uniform_temperature_scales_logits():
    enc = TemperatureNoPE(16, 2, scale=1.5)
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    pos = torch.arange(4)
    expected = 1.5 * (q @ k.transpose(-1, -2)) / math.sqrt(8)
    torch.testing.assert_close(pet.positional_logits(enc, q, k, pos, pos), expected)
    assert not list(enc.parameters())  # uniform scale is not trained


def test_head_scale_is_per_head_learned_and_clamped():
    enc = TemperatureNoPE(16, 2, scale=1.6, learned=True)
    with torch.no_grad():
        enc.head_scale.copy_(torch.tensor([2.0, 0.7]))
    q = torch.ones(1, 2, 3, 8)
    scaled, _ = enc.rotate(q, q, torch.arange(3), torch.arange(3))
    torch.testing.assert_close(scaled[0, :, 0, 0], torch.tensor([2.0, 0.7]))
    enc.constrain_()
    torch.testing.assert_close(enc.head_scale.detach(), torch.tensor([2.0, 1.0]))


def test_temperature_errors():
    with pytest.raises(ValueError, match="scale"):
        TemperatureNoPE(16, 2, scale=0.5)
    with pytest.raises(ValueError, match="scale must be > 0"):
        TemperatureNoPE(16, 2, scale=-1.0)
    with pytest.raises(TypeError, match="learned must be a bool"):
        TemperatureNoPE(16, 2, learned=1)


@pytest.mark.parametrize("causal", [True, False])
def test_ssmax_logits_by_hand(causal):
    torch.manual_seed(1)
    enc = BAMSSMax(16, 2, causal=causal).double()
    with torch.no_grad():
        enc.ssmax_scale.copy_(torch.tensor([1.0, 0.5]))
        enc.shape.copy_(torch.tensor([1.5, 0.8]))
        enc.loc.copy_(torch.tensor([0.2, -0.1]))
    q, k = torch.randn(1, 2, 5, 8, dtype=torch.float64), torch.randn(1, 2, 5, 8, dtype=torch.float64)
    pos = torch.arange(5)
    plain = BAM(16, 2, causal=causal).double()
    plain.load_state_dict({n: v for n, v in enc.state_dict().items() if n != "ssmax_scale"})
    base = pet.positional_logits(plain, q, k, pos, pos)
    got = pet.positional_logits(enc, q, k, pos, pos)
    for h, s in enumerate((1.0, 0.5)):
        for i in range(5):
            n = (i + 1) if causal else 5
            torch.testing.assert_close(got[0, h, i], base[0, h, i] * math.log(n) * s)


def test_ssmax_decoding_uses_the_query_position():
    enc = BAMSSMax(16, 2)
    q = torch.ones(1, 2, 1, 8)
    scaled, _ = enc.rotate(q, q, torch.tensor([9]), torch.tensor([9]))
    torch.testing.assert_close(scaled[0, :, 0, 0], torch.full((2,), math.log(10.0)))
