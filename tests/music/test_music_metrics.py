"""Metrics on constructed rolls: exact values, invariances and errors."""

from __future__ import annotations

import math

import pytest
import torch

from pe_toolkit.domains.music.metrics import (
    chroma_similarity,
    frame_f1,
    grooving_similarity,
    nll_per_step,
    note_density,
    note_density_distance,
    onsets,
    pitch_class_fold,
    self_similarity_matrix,
    ssm_distance,
)


def roll_of(notes, length=16, voices=1):
    """Roll ``(length, voices, 128)`` from ``(voice, pitch, start, end)`` tuples."""
    roll = torch.zeros(length, voices, 128)
    for v, p, a, b in notes:
        roll[a:b, v, p] = 1
    return roll


def test_onsets_mark_note_starts_only():
    roll = roll_of([(0, 60, 0, 4), (0, 60, 6, 8)], length=8)
    assert torch.nonzero(onsets(roll)[:, 0, 60]).flatten().tolist() == [0, 6]
    assert onsets(roll).sum() == 2


def test_pitch_class_fold_sums_octaves():
    x = torch.zeros(128)
    x[[0, 12, 127]] = 1  # C-1, C0, G9
    assert pitch_class_fold(x).tolist() == [2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]


def test_note_density_distance_constructed():
    ref = roll_of([(0, 60, 0, 4), (0, 64, 0, 4)], length=4)   # 2 notes per step
    pred = roll_of([(0, 60, 0, 2)], length=4)                  # 1, 1, 0, 0
    assert note_density(pred).tolist() == [1, 1, 0, 0]
    assert note_density_distance(pred, ref).item() == pytest.approx((1 + 1 + 2 + 2) / 4)
    assert note_density_distance(ref, ref).item() == 0


def test_chroma_similarity_identical_transposed_by_octave_and_disjoint():
    ref = roll_of([(0, 60, 0, 4), (0, 67, 4, 8), (0, 64, 8, 16)])
    assert chroma_similarity(ref, ref).item() == pytest.approx(100)
    octave = roll_of([(0, 72, 0, 4), (0, 55, 4, 8), (0, 76, 8, 16)])  # same pitch classes
    assert chroma_similarity(octave, ref).item() == pytest.approx(100)
    other = roll_of([(0, 61, 0, 4), (0, 66, 4, 8), (0, 63, 8, 16)])  # no shared pitch class
    assert chroma_similarity(other, ref).item() == pytest.approx(0)


def test_chroma_similarity_half_match_and_empty_units():
    # unit 1 (steps 0-7): ref onsets C and G, pred onset C only -> cos = 1 / sqrt(2); unit 2: both empty -> 1
    ref = roll_of([(0, 60, 0, 2), (0, 67, 2, 4)])
    pred = roll_of([(0, 60, 0, 4)])
    assert chroma_similarity(pred, ref).item() == pytest.approx(100 * (1 / math.sqrt(2) + 1) / 2)
    # voices are kept apart: the same note in another voice is not a match
    assert chroma_similarity(roll_of([(1, 60, 0, 8)], voices=2), roll_of([(0, 60, 0, 8)], voices=2)).item() == \
        pytest.approx(100 * (0 + 1) / 2)


def test_grooving_similarity_identical_and_constructed():
    ref = roll_of([(0, 60, 0, 4), (0, 62, 4, 8), (0, 64, 8, 16)])
    assert grooving_similarity(ref, ref).item() == pytest.approx(1.0)
    # pred has one onset, ref three: normalised curves are (1, 0 x15) and (1/sqrt3 at 0, 4, 8; 0 else);
    # with 20 bins over [0, 1]: pred has 15 zeros and a 1 (top bin), ref 13 zeros and three 0.577 (bin 11)
    pred = roll_of([(0, 60, 0, 16)])
    assert grooving_similarity(pred, ref).item() == pytest.approx(13 / 16)


def test_ssm_constructed_and_distance():
    # C major triad in 8th-note units alternating with G: units 0, 2 are C, units 1, 3 are G
    roll = roll_of([(0, 60, 0, 2), (0, 67, 2, 4), (0, 60, 4, 6), (0, 67, 6, 8)], length=8)
    ssm = self_similarity_matrix(roll)
    expected = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1]], dtype=torch.float64)
    torch.testing.assert_close(ssm, expected)
    held = roll_of([(0, 60, 0, 8)], length=8)  # all units identical: SSM of ones
    assert ssm_distance(held, roll).item() == pytest.approx(100 * 8 / 16)
    assert ssm_distance(roll, roll).item() == 0


def test_frame_f1_exact_and_empty():
    ref = roll_of([(0, 60, 0, 4)], length=4)           # 4 positive cells
    pred = roll_of([(0, 60, 0, 2), (0, 62, 0, 2)], length=4)  # TP 2, FP 2, FN 2
    assert frame_f1(pred, ref).item() == pytest.approx(2 * 2 / (2 * 2 + 2 + 2))
    empty = torch.zeros(4, 1, 128)
    assert frame_f1(empty, empty).item() == 1.0
    batch = torch.stack([pred, ref])
    assert frame_f1(batch, torch.stack([ref, ref])).tolist() == pytest.approx([0.5, 1.0])
    with pytest.raises(ValueError, match="binary"):
        frame_f1(pred * 0.5, ref)


def test_nll_per_step_matches_manual_bce():
    logits = torch.tensor([[0.0, 2.0], [-1.0, 3.0]])
    target = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    manual = (math.log(2) + math.log1p(math.exp(2)) + math.log1p(math.exp(-1)) + math.log1p(math.exp(-3))) / 2
    assert nll_per_step(logits, target).item() == pytest.approx(manual)
    with pytest.raises(ValueError, match="differ"):
        nll_per_step(logits, target[:1])


def test_metrics_are_per_sample_on_batches():
    a = roll_of([(0, 60, 0, 8)])
    b = roll_of([(0, 61, 0, 8)])
    values = chroma_similarity(torch.stack([a, a]), torch.stack([a, b]))
    assert values.shape == (2,) and values.tolist() == pytest.approx([100.0, 50.0])


def test_bad_input():
    roll = torch.zeros(4, 1, 128)
    with pytest.raises(ValueError, match="same shape"):
        ssm_distance(roll, torch.zeros(5, 1, 128))
    with pytest.raises(ValueError, match="128 pitches"):
        chroma_similarity(torch.zeros(4, 1, 12), torch.zeros(4, 1, 12))
    with pytest.raises(ValueError, match=r"\(T, V, 128\)"):
        note_density_distance(torch.zeros(4, 128), torch.zeros(4, 128))
    with pytest.raises(TypeError, match="Tensor"):
        note_density_distance([0], roll)
    with pytest.raises(ValueError, match="unit"):
        chroma_similarity(roll, roll, unit=0)
    with pytest.raises(ValueError, match="bins"):
        grooving_similarity(roll, roll, bins=0)


def test_given_onsets_count_repeated_notes_and_note_counts():
    from pe_toolkit.domains.music.metrics import note_counts

    roll = torch.zeros(8, 2, 128)
    roll[:, 0, 60] = 1.0  # voice 0 sounds C4 throughout...
    roll[:4, 1, 48] = 1.0
    struck = torch.zeros_like(roll)
    struck[[0, 2, 4, 6], 0, 60] = 1.0  # ... struck four times
    struck[0, 1, 48] = 1.0
    assert note_counts(struck).tolist() == [4.0, 1.0]
    assert note_counts(onsets(roll)).tolist() == [1.0, 1.0]  # from the roll alone: a drone
    assert note_counts(torch.stack([struck, onsets(roll)])).tolist() == [[4.0, 1.0], [1.0, 1.0]]
    # chroma per half note (8 steps), per voice: with the onsets given, voice 0 alone has pred 4 C onsets and ref 1
    # (cosine 1); both voices: (4, 1) against (1, 1), cosine 5 / sqrt(34); grooving sees the re-strikes
    assert chroma_similarity(roll[:, :1], roll[:, :1], pred_onsets=struck[:, :1],
                             ref_onsets=onsets(roll[:, :1])).item() == pytest.approx(100.0)
    assert chroma_similarity(roll, roll, pred_onsets=struck, ref_onsets=onsets(roll)).item() == pytest.approx(
        100 * 5 / math.sqrt(34))
    same = grooving_similarity(roll, roll).item()
    different = grooving_similarity(roll, roll, pred_onsets=struck, ref_onsets=onsets(roll)).item()
    assert same == 1.0 and different < 1.0
    with pytest.raises(ValueError, match="pred_onsets must have the roll's shape"):
        chroma_similarity(roll, roll, pred_onsets=struck[:4])


def test_generation_metrics_equal_each_metric_per_sample():
    from pe_toolkit.domains.music.metrics import generation_metrics

    pred = torch.stack([roll_of([(0, 60, 0, 8), (1, 48, 0, 16)], voices=2), roll_of([(1, 50, 4, 12)], voices=2)])
    ref = torch.stack([roll_of([(0, 60, 0, 16), (1, 48, 8, 16)], voices=2), roll_of([(0, 62, 0, 4)], voices=2)])
    struck = onsets(pred)
    struck[0, 4, 0, 60] = 1.0  # a re-strike only the given onsets know
    values = generation_metrics(pred, ref, pred_onsets=struck, ref_onsets=onsets(ref))
    assert list(values) == ["frame_f1", "note_density_distance", "chroma_similarity", "grooving_similarity",
                            "ssm_distance"]
    # sample 0, by hand: 16 cells found, 8 wrongly, 8 missed: F1 = 32 / 48; densities 2 then 1 against 1 then 2
    assert values["frame_f1"][0].item() == pytest.approx(32 / 48)
    assert values["note_density_distance"][0].item() == pytest.approx(1.0)
    torch.testing.assert_close(values["chroma_similarity"],
                               chroma_similarity(pred, ref, pred_onsets=struck, ref_onsets=onsets(ref)))
    torch.testing.assert_close(values["grooving_similarity"],
                               grooving_similarity(pred, ref, pred_onsets=struck, ref_onsets=onsets(ref)))
    torch.testing.assert_close(values["ssm_distance"], ssm_distance(pred, ref))
    assert all(v.shape == (2,) and v.dtype == torch.float64 for v in values.values())
    with pytest.raises(ValueError, match="pred_onsets must have the roll's shape"):
        generation_metrics(pred, ref, pred_onsets=struck[:, :4])
