"""Score -> piano roll + structure labels: a hand-checked chorale, synthetic scores, the cached corpus."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from music_helpers import make_score

from pe_toolkit.domains.music.scores import (
    ChoraleCorpus,
    Piece,
    load_bach_chorales,
    load_score_file,
    melody_from_roll,
    score_to_piece,
)
from pe_toolkit.domains.music.structure import LABEL_FIELDS, chord_label


def test_bwv66_bars_beats_and_pickup(bwv66):
    # 36 quarters (a quarter-note pickup, 8 bars of 4/4, a last bar of 3 quarters) = 144 steps
    assert len(bwv66) == 144 and bwv66.roll.shape == (144, 4, 128)
    bar, beat = bwv66.label("bar"), bwv66.label("beat")
    assert bar[:4].tolist() == [0, 0, 0, 0] and beat[:4].tolist() == [12, 13, 14, 15]  # right-aligned pickup
    assert bar[4:20].tolist() == [1] * 16 and beat[4:20].tolist() == list(range(16))
    assert bar[-12:].tolist() == [9] * 12 and beat[-12:].tolist() == list(range(12))  # short last bar
    assert int(bar.max()) == 9


def test_bwv66_phrases_end_at_fermatas(bwv66):
    # soprano fermatas on beat 3 of bars 1, 2, 3, 5, 7 and 9 (bar k starts at step 4 + 16 (k - 1)); each is a
    # quarter note except bar 7's half-note G#4, so phrases start at 16, 32, 48, 80 and 108 + 8 = 116
    phrase = bwv66.label("phrase")
    starts = torch.nonzero(phrase[1:] != phrase[:-1]).flatten() + 1
    assert starts.tolist() == [16, 32, 48, 80, 116]
    assert phrase.tolist()[-1] == 5


def test_bwv66_key_melody_and_chords(bwv66):
    assert set(bwv66.label("key").tolist()) == {6 + 12}  # F# minor
    # soprano: C#5 B4 (eighths of the pickup), then A4 B4 C#5(fermata) E5
    assert bwv66.label("melody")[:20].tolist() == [73, 73, 71, 71] + [69] * 4 + [71] * 4 + [73] * 4 + [76] * 4
    sounding = lambda t: torch.nonzero(bwv66.roll[t].any(0)).flatten().tolist()  # noqa: E731
    assert bwv66.label("chord")[4].item() == chord_label(sounding(4)) == 1 + 5 * 6 + 1  # F# minor on the downbeat
    assert bwv66.quantized_notes == 0


def test_synthetic_score_with_pickup_meter_change_and_fermata():
    score = make_score(
        [[[(72, 1.0)], [(71, 1.0), (69, 2.0), (67, 1.0)], [(65, 3.0)]],
         [[(60, 1.0)], [(62, 4.0)], [(53, 3.0)]]],
        time_signatures={0: "4/4", 2: "3/4"}, fermatas=[(0, 1, 2)],
    )
    piece = score_to_piece(score, num_voices=2, name="synthetic")
    assert len(piece) == 32
    assert piece.label("bar").tolist() == [0] * 4 + [1] * 16 + [2] * 12
    assert piece.label("beat").tolist() == [12, 13, 14, 15] + list(range(16)) + list(range(12))
    assert piece.label("phrase").tolist() == [0] * 20 + [1] * 12  # the fermata G ends at step 20
    assert piece.label("melody").tolist() == [72] * 4 + [71] * 4 + [69] * 8 + [67] * 4 + [65] * 12
    assert piece.roll[:, 1].any(-1).all() and piece.roll[4:20, 1, 62].all()


def test_rests_and_off_grid_notes():
    score = make_score([[[(None, 1.0), (60, 1.0 / 3), (62, 1.0 / 3), (64, 1.0 / 3), (65, 2.0)]]])
    piece = score_to_piece(score, num_voices=1)
    assert piece.label("melody")[:4].tolist() == [0, 0, 0, 0]  # rest
    assert piece.quantized_notes > 0  # the triplets were rounded to the grid


def test_score_errors():
    with pytest.raises(TypeError, match="music21 Score"):
        score_to_piece("not a score")
    score = make_score([[[(60, 4.0)]], [[(55, 4.0)]], [[(48, 4.0)]]])
    with pytest.raises(ValueError, match="has 3 parts, expected 4"):
        score_to_piece(score, num_voices=4)
    with pytest.raises(ValueError, match="no notes"):
        score_to_piece(make_score([[[(None, 4.0)]]]), num_voices=1)


def test_piece_checks_shapes():
    with pytest.raises(ValueError, match="roll must have shape"):
        Piece("x", torch.zeros(4, 4, 12, dtype=torch.bool), torch.zeros(4, len(LABEL_FIELDS), dtype=torch.long))
    with pytest.raises(ValueError, match="labels must have shape"):
        Piece("x", torch.zeros(4, 4, 128, dtype=torch.bool), torch.zeros(3, len(LABEL_FIELDS), dtype=torch.long))
    piece = Piece("x", torch.zeros(4, 1, 128, dtype=torch.bool), torch.zeros(4, len(LABEL_FIELDS), dtype=torch.long))
    with pytest.raises(ValueError, match="unknown label"):
        piece.label("tempo")


def test_melody_from_roll_takes_the_highest_pitch():
    roll = torch.zeros(3, 1, 128, dtype=torch.bool)
    roll[0, 0, [60, 64]] = True
    roll[2, 0, 0] = True
    assert melody_from_roll(roll).tolist() == [64, 0, 0]


def test_corpus_cache_round_trip_and_skipped_files(tmp_path):
    # The first three corpus files: bwv1.6 has five parts (skipped and counted), the others four.
    first = load_bach_chorales(limit=3, cache_dir=tmp_path)
    assert [p.name for p in first.pieces] == ["bwv10.7", "bwv101.7"]
    assert list(first.skipped) == ["bwv1.6.mxl"] and "5 parts" in first.skipped["bwv1.6.mxl"]
    assert first.cache_file.exists() and first.cache_file.parent == tmp_path
    with np.load(first.cache_file, allow_pickle=False) as data:  # plain arrays, no pickles
        assert int(data["format_version"]) == 2
    again = load_bach_chorales(limit=3, cache_dir=tmp_path)
    assert again.skipped == first.skipped
    for a, b in zip(first.pieces, again.pieces):
        assert a.name == b.name and torch.equal(a.roll, b.roll) and torch.equal(a.labels, b.labels)
        assert torch.equal(a.onsets, b.onsets)
    first.cache_file.write_bytes(b"corrupt")  # a damaged cache is rebuilt, not trusted
    rebuilt = load_bach_chorales(limit=3, cache_dir=tmp_path)
    assert torch.equal(rebuilt.pieces[0].roll, first.pieces[0].roll)
    with pytest.raises(ValueError, match="limit"):
        load_bach_chorales(limit=0)


def test_corpus_split_is_by_piece_and_seeded():
    pieces = [Piece(str(i), torch.zeros(2, 4, 128, dtype=torch.bool), torch.zeros(2, len(LABEL_FIELDS),
                                                                                   dtype=torch.long))
              for i in range(10)]
    corpus = ChoraleCorpus(pieces)
    train, val, test = corpus.split((0.8, 0.1, 0.1), seed=3)
    assert (len(train), len(val), len(test)) == (8, 1, 1)
    assert sorted(p.name for p in train + val + test) == sorted(p.name for p in pieces)
    assert [p.name for p in corpus.split(seed=3)[0]] == [p.name for p in train]
    with pytest.raises(ValueError, match="fractions"):
        corpus.split((0.5, 0.2))


def test_user_score_file_and_bad_files(tmp_path, bwv66):
    from music21 import corpus

    path = tmp_path / "chorale.musicxml"
    corpus.parse("bach/bwv66.6").write("musicxml", fp=str(path))
    piece = load_score_file(path, num_voices=4)
    n = len(bwv66)  # music21's export may pad the short last bar with rests
    assert len(piece) >= n and not piece.roll[n:].any()
    assert torch.equal(piece.roll[:n], bwv66.roll) and torch.equal(piece.labels[:n], bwv66.labels)
    bad = tmp_path / "bad.musicxml"
    bad.write_text("<score-partwise><part id='P1'><measure")
    with pytest.raises(ValueError, match="not a score music21 can read"):
        load_score_file(bad)
    with pytest.raises(FileNotFoundError):
        load_score_file(tmp_path / "missing.xml")


def test_repeated_notes_are_two_onsets_and_a_tie_is_one():
    from music21 import note, stream, tie

    score = make_score([[[(67, 1.0), (67, 1.0), (65, 2.0)], [(65, 4.0)]]], time_signatures={0: "4/4"})
    measures = list(score.parts[0].getElementsByClass("Measure"))
    last_of_bar0 = measures[0].notes[-1]
    first_of_bar1 = measures[1].notes[0]
    last_of_bar0.tie, first_of_bar1.tie = tie.Tie("start"), tie.Tie("stop")  # F4 tied across the barline
    piece = score_to_piece(score, num_voices=1)
    assert isinstance(first_of_bar1, note.Note) and isinstance(score, stream.Score)
    assert piece.roll[:, 0, 67].tolist() == [True] * 8 + [False] * 24  # two G4 quarters: one run of 8 steps
    assert torch.nonzero(piece.onsets[:, 0].any(-1)).flatten().tolist() == [0, 4, 8]  # G, G again, F (tied on)
    assert int(piece.onsets.sum()) == 3


def test_piece_onsets_are_checked():
    roll = torch.zeros(4, 1, 128, dtype=torch.bool)
    roll[:, 0, 60] = True
    labels = torch.zeros(4, len(LABEL_FIELDS), dtype=torch.long)
    assert Piece("held", roll, labels).onsets[:, 0, 60].tolist() == [True, False, False, False]
    struck = torch.zeros_like(roll)
    struck[[0, 2], 0, 60] = True
    assert Piece("struck", roll, labels, onsets=struck).onsets.sum() == 2
    with pytest.raises(ValueError, match="'bad': onsets must have the roll's shape"):
        Piece("bad", roll, labels, onsets=struck[:2])
    silent = struck.clone()
    silent[1, 0, 61] = True
    with pytest.raises(ValueError, match="'bad': onsets has 1 onsets where the roll does not sound"):
        Piece("bad", roll, labels, onsets=silent)
    with pytest.raises(ValueError, match="'bad': 1 runs of sounding steps start without an onset"):
        Piece("bad", roll, labels, onsets=torch.zeros_like(roll))


def test_bwv66_melody_chords_come_from_the_soprano_only(bwv66):
    from pe_toolkit.domains.music.structure import melody_chords

    column = bwv66.label("melody_chord")
    assert torch.equal(column, melody_chords(bwv66.label("melody"), bwv66.label("bar"), bwv66.label("beat")))
    changed = bwv66.roll.clone()
    changed[:, 1:] = False  # the lower voices removed: the inferred chords do not change
    again = Piece("soprano only", changed, bwv66.labels)
    assert torch.equal(melody_chords(again.labels[:, LABEL_FIELDS.index("melody")], bwv66.label("bar"),
                                     bwv66.label("beat")), column)
    # key estimated from the melody: F# minor. Steps 4-11 (first half of bar 1): A4 B4, no triad holds both; of
    # those holding half, the tonic triad F# minor (F# A C#) is preferred. Steps 12-19: C#5 E5, held wholly by
    # A major (A C# E) and by F# minor only in half
    assert column[4:12].tolist() == [1 + 5 * 6 + 1] * 8
    assert column[12:20].tolist() == [1 + 5 * 9 + 0] * 8
