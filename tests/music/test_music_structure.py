"""Structure-label columns: runs and times within runs, chord labels."""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.domains.music.structure import (
    FIELDS,
    LABEL_FIELDS,
    NUM_CHORD_LABELS,
    add_segment_fields,
    chord_label,
    chord_labels_from_roll,
    field_index,
    segment_runs,
)


def test_segment_runs_hand_computed():
    run, tau = segment_runs(torch.tensor([5, 5, 2, 2, 2, 5, 7]))
    assert run.tolist() == [0, 0, 1, 1, 1, 2, 3]
    assert tau.tolist() == [0, 1, 0, 1, 2, 0, 0]


def test_segment_runs_batched_rows_are_independent():
    labels = torch.tensor([[1, 1, 1, 2], [3, 4, 4, 4]])
    run, tau = segment_runs(labels)
    assert run.tolist() == [[0, 0, 0, 1], [0, 1, 1, 1]]
    assert tau.tolist() == [[0, 1, 2, 0], [0, 0, 1, 2]]


def test_segment_runs_rejects_a_scalar():
    with pytest.raises(ValueError, match="labels"):
        segment_runs(torch.tensor(3))


def test_add_segment_fields_resets_time_and_adds_runs():
    labels = torch.zeros(5, len(LABEL_FIELDS), dtype=torch.long)
    labels[:, 0] = torch.arange(100, 105)  # a window cut from the middle of a piece
    labels[:, LABEL_FIELDS.index("chord")] = torch.tensor([3, 3, 9, 9, 3])
    labels[:, LABEL_FIELDS.index("phrase")] = torch.tensor([4, 4, 4, 5, 5])
    full = add_segment_fields(labels)
    assert full.shape == (5, len(FIELDS))
    assert full[:, field_index("time")].tolist() == [0, 1, 2, 3, 4]
    assert full[:, field_index("chord_run")].tolist() == [0, 0, 1, 1, 2]
    assert full[:, field_index("chord_tau")].tolist() == [0, 1, 0, 1, 0]
    assert full[:, field_index("phrase_run")].tolist() == [0, 0, 0, 1, 1]
    assert full[:, field_index("phrase_tau")].tolist() == [0, 1, 2, 0, 1]
    with pytest.raises(ValueError, match="labels must have shape"):
        add_segment_fields(torch.zeros(5, 3, dtype=torch.long))


def test_field_index_rejects_unknown_names():
    assert field_index("bar") == 1
    with pytest.raises(ValueError, match="unknown structure field 'tempo'"):
        field_index("tempo")


@pytest.mark.parametrize(("pitches", "root", "quality"), [
    ([60, 64, 67], 0, 0),          # C major
    ([57, 60, 64], 9, 1),          # A minor
    ([59, 62, 65], 11, 2),         # B diminished
    ([60, 64, 68], 0, 3),          # C augmented
    ([43, 59, 62, 65], 7, 0),      # G dominant seventh: music21 names the quality of its triad
    ([48, 67, 76], 0, 0),          # spread over octaves, still C major
])
def test_chord_label_root_and_quality(pitches, root, quality):
    assert chord_label(pitches) == 1 + 5 * root + quality


def test_chord_label_of_a_cluster_has_quality_other():
    assert (chord_label([60, 61, 62]) - 1) % 5 == 4


def test_chord_label_of_silence_is_zero_and_labels_fit_the_vocabulary():
    assert chord_label([]) == 0
    assert 0 <= chord_label([60, 64, 67]) < NUM_CHORD_LABELS


def test_chord_labels_from_roll_match_chord_label():
    roll = torch.zeros(3, 2, 128, dtype=torch.bool)
    roll[0, 0, [64, 67]] = True
    roll[0, 1, 48] = True          # C major across the voices
    roll[1, 0, 69] = True
    roll[1, 1, [48, 52]] = True    # A minor (A C E)
    assert chord_labels_from_roll(roll).tolist() == [chord_label([48, 64, 67]), chord_label([48, 52, 69]), 0]
    with pytest.raises(ValueError, match="roll must have shape"):
        chord_labels_from_roll(torch.zeros(3, 12))


def test_estimate_key_major_minor_and_silence():
    from pe_toolkit.domains.music.structure import estimate_key

    a_minor = torch.tensor([69, 71, 72, 74, 76, 77, 80, 81, 76, 72, 69, 69, 0])  # harmonic minor, tonic heavy
    assert estimate_key(a_minor) == 9 + 12
    assert estimate_key(torch.tensor([67, 71, 74, 79, 74, 71, 67, 66, 67])) == 7  # G major arpeggio, F# leading
    assert estimate_key(torch.zeros(5, dtype=torch.long)) == 0


def test_melody_chords_by_hand_and_errors():
    from pe_toolkit.domains.music.structure import melody_chords

    t = torch.arange(32)
    bar, beat = t // 16, t % 16
    # in C major: E+G (C major holds both), F+A (F major), B+D (G major), rest, C alone (I preferred over vi/IV)
    melody = torch.tensor([64] * 4 + [67] * 4 + [65] * 4 + [69] * 4 + [71] * 4 + [74] * 4 + [0] * 4 + [60] * 4)
    labels = melody_chords(melody, bar, beat, span=8, key=0)
    c, f, g = 1, 1 + 5 * 5, 1 + 5 * 7
    assert labels.tolist() == [c] * 8 + [f] * 8 + [g] * 8 + [c] * 8
    assert melody_chords(melody, bar, beat, span=4, key=0)[24:28].tolist() == [0] * 4  # a resting segment
    # in A minor a lone C: the tonic triad A minor (i: A C E) is preferred over C major (III)
    assert melody_chords(torch.full((8,), 60), t[:8] // 16, t[:8] % 16, key=9 + 12).tolist() == [1 + 5 * 9 + 1] * 8
    with pytest.raises(ValueError, match="span must be a positive int"):
        melody_chords(melody, bar, beat, span=0)
    with pytest.raises(ValueError, match="key must be an int in 0..23"):
        melody_chords(melody, bar, beat, key=24)
    with pytest.raises(ValueError, match="same length"):
        melody_chords(melody, bar[:5], beat)
    with pytest.raises(ValueError, match="melody must be a 1-D tensor"):
        melody_chords(melody[None], bar, beat)
