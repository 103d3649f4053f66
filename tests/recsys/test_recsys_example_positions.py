"""Example positions of the recsys encoders: a user's irregular timestamps (time_interval), indices (cape)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.domains.recsys import TimeIntervalBias, clipped_intervals
from pe_toolkit.domains.recsys.split import time_positions
from pe_toolkit.domains.recsys.time_interval import EXAMPLE_GAPS

NAMES = ("time_interval", "cape")
LENGTHS = (4, 8, 16, 32)


def build(name: str, dim: int = 32, **options):
    return pet.get_encoder(name, dim, 4, **{**pet.encoder_info(name).example_options, **options})


def test_time_interval_example_by_hand():
    positions = TimeIntervalBias(32, 4).example_positions(10)  # no max_len: no clamping
    assert positions.shape == (10, 2) and positions.dtype == torch.float64
    assert torch.equal(positions[:, 0], torch.arange(10, dtype=torch.float64))
    # gaps 1, 2, 1, 4, 1, 3, 30, 2, 1 minutes (the smallest gap, 60 s, is the user's unit)
    assert positions[:, 1].tolist() == [0, 1, 3, 4, 8, 9, 12, 42, 44, 45]


@pytest.mark.parametrize("length", [1, 2, 9, 40])
def test_time_interval_example_is_time_positions_of_the_gaps(length):
    positions = TimeIntervalBias(32, 4, max_len=16).example_positions(length)
    stamps = np.concatenate([[0], np.cumsum([EXAMPLE_GAPS[i % len(EXAMPLE_GAPS)] for i in range(length - 1)])])
    np.testing.assert_array_equal(positions[:, 1].numpy(), time_positions(stamps.astype(np.float64), length))
    assert torch.equal(positions[:, 0], torch.arange(length, dtype=torch.float64).clamp(max=15))
    times = positions[:, 1]
    assert (times[1:] > times[:-1]).all()  # strictly increasing
    if length > 3:
        assert len(set(torch.diff(times).tolist())) > 1  # irregular


def test_time_interval_pattern_is_the_interval_term_by_hand():
    encoder = TimeIntervalBias(32, 4, max_interval=8)  # no absolute table: the content reaches the bias as ones
    positions = encoder.example_positions(12)
    relation = clipped_intervals(positions[:, 1], positions[:, 1], 8)
    expected = (encoder.interval_emb.detach().sum(-1) / math.sqrt(8))[relation]  # ones . R[r_ij] / sqrt(d)
    pattern = encoder.positional_pattern(12)
    for h in range(4):
        torch.testing.assert_close(pattern[h], expected)
    assert (relation == 8).any() and (relation < 8).any()  # the session break is clipped, bursts are not


def test_cape_uses_the_default_positions_and_starts_as_nope():
    encoder = build("cape")
    assert torch.equal(encoder.example_positions(8), torch.arange(8))
    assert torch.equal(encoder.positional_pattern(8), torch.zeros(4, 8, 8))  # zero-initialised table
    with torch.no_grad():
        encoder.pos_emb.normal_()
    pattern = encoder.positional_pattern(8)
    assert torch.isfinite(pattern).all() and pattern.abs().max() > 0
