"""Every registered encoder, in every domain, has example positions and a positional pattern.

The contract of ``PositionalEncoding.example_positions`` / ``positional_pattern`` that the plotting
helper, ``pe-toolkit plot`` and the docs gallery rely on. What each example *is* is tested per domain
(``tests/<domain>/test_<domain>_example_positions.py``); exact pattern values in ``test_plotting.py``.
"""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet

ALL_ENCODERS = pet.list_encoders()
MASKING = {"edge_aware_graph"}  # its bias is -inf on pairs that are not graph edges


def build(name: str, dim: int = 32, heads: int = 4):
    return pet.get_encoder(name, dim, heads, **pet.encoder_info(name).example_options)


@pytest.mark.parametrize("name", ALL_ENCODERS)
def test_pattern_shape_values_and_determinism(name):
    for dim in (32, 64):
        encoder = build(name, dim)
        for length in (1, 4, 8, 16, 32):
            pattern = encoder.positional_pattern(length)
            assert pattern.dim() == 3 and pattern.shape[:2] == (4, length), pattern.shape
            assert not pattern.isnan().any() and (pattern < float("inf")).all()
            assert torch.isfinite(pattern).any(-1).all()  # every query reaches some key
            assert torch.isfinite(pattern).all() or name in MASKING
            torch.testing.assert_close(encoder.positional_pattern(length), pattern, rtol=0, atol=0)
            first, second = encoder.example_positions(length), encoder.example_positions(length)
            assert torch.equal(first, second)


@pytest.mark.parametrize("name", ALL_ENCODERS)
def test_no_global_rng_and_modes_restored(name):
    encoder = build(name)
    encoder.train()
    state = torch.get_rng_state()
    encoder.example_positions(16)
    encoder.positional_pattern(16)
    assert torch.equal(state, torch.get_rng_state())
    assert all(m.training for m in encoder.modules())
    encoder.eval()
    encoder.positional_pattern(16)
    assert not any(m.training for m in encoder.modules())


@pytest.mark.parametrize("name", ALL_ENCODERS)
@pytest.mark.parametrize(("length", "error"), [(0, ValueError), (-1, ValueError), (2.5, TypeError),
                                               (True, TypeError)])
def test_bad_length(name, length, error):
    encoder = build(name)
    with pytest.raises(error, match="length"):
        encoder.example_positions(length)
    with pytest.raises(error, match="length"):
        encoder.positional_pattern(length)
