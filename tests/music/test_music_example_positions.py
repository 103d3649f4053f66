"""Example structure positions of the music encoders: a consistent 4/4 piece, and the patterns drawn from it."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.domains.music.encoders import (
    EXAMPLE_CHORDS,
    EXAMPLE_MELODY,
    NonStationaryStructureRPE,
    StructureAPE,
    example_structure_positions,
)
from pe_toolkit.domains.music.structure import FIELDS, SEGMENT_FIELDS, chord_label, field_index, segment_runs

NAMES = ("s_ape", "s_rpe", "ns_rpe")
LENGTHS = (4, 8, 16, 32)


def build(name: str, dim: int = 32, **options):
    return pet.get_encoder(name, dim, 4, **{**pet.encoder_info(name).example_options, **options})


def column(positions: torch.Tensor, name: str) -> torch.Tensor:
    return positions[..., field_index(name)]


# ------------------------------------------------------------------------------------------------ the piece
@pytest.mark.parametrize("length", [1, 5, 16, 33, 80])
def test_example_has_every_field_and_a_4_4_grid(length):
    p = example_structure_positions(length)
    assert p.shape == (length, len(FIELDS)) and p.dtype == torch.int64
    t = torch.arange(length)
    assert torch.equal(column(p, "time"), t)
    assert torch.equal(column(p, "bar") * 16 + column(p, "beat"), t)  # 16 sixteenths per bar
    assert torch.equal(column(p, "phrase"), column(p, "bar") // 2)  # two-bar phrases
    assert torch.equal(column(p, "key"), torch.zeros(length, dtype=torch.long))  # C major


def test_example_chords_and_melody_by_hand():
    p = example_structure_positions(64)
    c_major, f_major, g_major = 1 + 5 * 0, 1 + 5 * 5, 1 + 5 * 7  # 1 + 5 root + quality (major = 0)
    assert [chord_label(c) for c in EXAMPLE_CHORDS] == [c_major, f_major, g_major, c_major]
    half_bars = column(p, "chord")[::8].tolist()
    assert half_bars == [c_major, f_major, g_major, c_major] * 2
    assert torch.equal(column(p, "chord").view(-1, 8), column(p, "chord")[::8, None].expand(-1, 8))
    melody = column(p, "melody")
    assert melody[::4].tolist() == list(EXAMPLE_MELODY) * 2
    for t in range(64):  # every melody note is a tone of the chord sounding with it
        pitch_classes = {q % 12 for q in EXAMPLE_CHORDS[(t // 8) % 4]}
        assert int(melody[t]) % 12 in pitch_classes


@pytest.mark.parametrize("length", [7, 32, 70])
def test_segment_columns_agree_with_the_labels(length):
    p = example_structure_positions(length)
    for name in SEGMENT_FIELDS:
        run, tau = segment_runs(column(p, name))
        assert torch.equal(column(p, f"{name}_run"), run)
        assert torch.equal(column(p, f"{name}_tau"), tau)
        labels, run, tau = column(p, name), column(p, f"{name}_run"), column(p, f"{name}_tau")
        change = torch.cat([torch.tensor([False]), labels[1:] != labels[:-1]])
        assert torch.equal(run, change.long().cumsum(0))  # a new run exactly where the label changes
        assert torch.equal(tau == 0, change | (torch.arange(length) == 0))  # tau restarts there
        assert torch.equal(tau[1:][~change[1:]], tau[:-1][~change[1:]] + 1)  # and counts up inside a run
    # I -> I across the phrase boundary at step 32: the chord run continues, the phrase run restarts
    if length > 32:
        assert column(p, "chord_run")[32] == column(p, "chord_run")[31]
        assert column(p, "phrase_tau")[32] == 0 and column(p, "chord_tau")[32] == column(p, "chord_tau")[31] + 1


@pytest.mark.parametrize("name", NAMES)
def test_encoders_use_the_example_and_it_is_deterministic(name):
    encoder = build(name)
    state = torch.get_rng_state()
    assert torch.equal(encoder.example_positions(24), example_structure_positions(24))
    assert torch.equal(encoder.example_positions(24), encoder.example_positions(24))
    assert torch.equal(state, torch.get_rng_state())


# ------------------------------------------------------------------------------------------------ patterns
@pytest.mark.parametrize("name", ["s_ape", "s_rpe"])
def test_steps_with_equal_labels_have_equal_rows(name):
    """The patterns read only the configured columns: steps that agree on all of them look the same."""
    pattern = build(name, structures=("chord", "phrase")).positional_pattern(32)
    for half_bar in range(4):  # chord and phrase are constant within each half bar
        rows = pattern[:, 8 * half_bar: 8 * half_bar + 8]
        torch.testing.assert_close(rows, rows[:, :1].expand_as(rows))
    # the steps of the two C major half bars of the phrase (0-7 and 24-31) have equal rows too
    torch.testing.assert_close(pattern[:, 0], pattern[:, 24])
    assert not torch.allclose(pattern[:, 0], pattern[:, 8])  # C major vs F major


def test_s_ape_pattern_is_the_gram_matrix_of_the_structure_sinusoids():
    encoder = StructureAPE(32, 4, structures=("melody", "chord", "phrase"))
    length = 16
    e = encoder.position_table(example_structure_positions(length), torch.float32)  # (L, dim)
    q = e.view(length, 4, 8).transpose(0, 1)
    torch.testing.assert_close(encoder.positional_pattern(length), q @ q.transpose(-1, -2) / 8**0.5)


def test_ns_rpe_segment_terms_vanish_across_segments():
    """With only the phrase segment, pairs in different phrases see the stationary terms alone."""
    ns = NonStationaryStructureRPE(32, 4, structures=("chord",), segments=("phrase",))
    s = pet.get_encoder("s_rpe", 32, 4, structures=("chord",))
    s.weights.load_state_dict(ns.weights.state_dict())
    a, b = ns.positional_pattern(64), s.positional_pattern(64)
    torch.testing.assert_close(a[:, :32, 32:], b[:, :32, 32:])  # phrase 0 queries, phrase 1 keys
    assert not torch.allclose(a[:, :32, :32], b[:, :32, :32])  # same phrase: the lag terms add
