"""MIDI in and out: exact round trips on the 16th grid, time signatures, tempo changes, bad files."""

from __future__ import annotations

import pretty_midi
import pytest
import torch

from pe_toolkit.domains.music.midi import load_midi_folder, midi_to_piece, roll_to_midi
from pe_toolkit.domains.music.structure import LABEL_FIELDS


def test_chorale_round_trip_is_exact(bwv66, tmp_path):
    path = tmp_path / "bwv66.mid"
    roll_to_midi(bwv66.roll, path, labels=bwv66.labels, tempo=72.0, onsets=bwv66.onsets)
    back = midi_to_piece(path)
    assert torch.equal(back.roll, bwv66.roll) and torch.equal(back.onsets, bwv66.onsets)  # repeated notes too
    assert int(bwv66.onsets.sum()) > int(midi_to_piece(roll_to_midi(bwv66.roll)).onsets.sum())  # without: merged
    for name in ("bar", "beat", "key", "chord", "melody", "melody_chord", "time"):  # the pickup: a 1/4 bar
        assert torch.equal(back.label(name), bwv66.label(name)), name
    assert back.label("phrase").eq(0).all()  # fermatas are not stored in MIDI
    assert back.quantized_notes == 0 and back.name == "bwv66"


def test_random_roll_round_trip_is_exact(tmp_path):
    g = torch.Generator().manual_seed(1)
    roll = torch.rand(24, 3, 128, generator=g) < 0.03  # many short notes, repeated and overlapping
    roll[-1, 0, 60] = True  # the file ends with the roll (MIDI stores no trailing silence)
    roll_to_midi(roll, tmp_path / "r.mid", tempo=133.0)
    assert torch.equal(midi_to_piece(tmp_path / "r.mid").roll, roll)


def test_repeated_notes_survive_the_round_trip(tmp_path):
    roll = torch.zeros(12, 2, 128, dtype=torch.bool)
    roll[0:8, 0, 67] = True  # voice 0: G4 struck at 0 and again at 4 (two quarters)
    roll[8:12, 0, 65] = True
    roll[0:12, 1, 48] = True  # voice 1: C3 struck at 0, 2, 4, ... (six eighths)
    onsets = torch.zeros_like(roll)
    onsets[[0, 4], 0, 67] = True
    onsets[8, 0, 65] = True
    onsets[0:12:2, 1, 48] = True
    pm = roll_to_midi(roll, tmp_path / "repeat.mid", onsets=onsets)
    assert [len(i.notes) for i in pm.instruments] == [3, 6]
    assert [(round(n.start * pm.get_tempo_changes()[1][0] / 60 * 4), n.pitch) for n in pm.instruments[0].notes] == [
        (0, 67), (4, 67), (8, 65)]
    back = midi_to_piece(tmp_path / "repeat.mid")
    assert torch.equal(back.roll, roll) and torch.equal(back.onsets, onsets)
    assert [len(i.notes) for i in roll_to_midi(roll).instruments] == [2, 1]  # without onsets: merged
    with pytest.raises(ValueError, match="onsets has 1 onsets where the roll is silent"):
        bad = onsets.clone()
        bad[0, 0, 70] = True
        roll_to_midi(roll, onsets=bad)
    with pytest.raises(ValueError, match="onsets must have the roll's shape"):
        roll_to_midi(roll, onsets=onsets[:3])


def test_load_midi_folder_reads_sorted_files_and_names_a_bad_one(tmp_path):
    roll = torch.zeros(16, 2, 128, dtype=torch.bool)
    roll[:, 0, 72] = roll[:, 1, 60] = True
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    roll_to_midi(roll, folder / "b.mid")
    roll_to_midi(roll[:8], folder / "a.MIDI")
    roll_to_midi(roll[:4, :1], folder / "sub" / "c.mid")
    (folder / "notes.txt").write_text("ignored: not a MIDI suffix")
    corpus = load_midi_folder(folder)
    assert [p.name for p in corpus.pieces] == ["a.MIDI", "b.mid"] and [len(p) for p in corpus.pieces] == [8, 16]
    with pytest.raises(ValueError, match="different numbers of voices"):
        load_midi_folder(folder, recursive=True)
    both = load_midi_folder(folder, recursive=True, num_voices=2)
    assert [p.name for p in both.pieces] == ["a.MIDI", "b.mid", "sub/c.mid"] and both.pieces[2].roll.shape[1] == 2
    (folder / "broken.mid").write_bytes(b"MThd not really")
    with pytest.raises(ValueError, match=r"load_midi_folder: .*broken\.mid: .*not a readable MIDI file"):
        load_midi_folder(folder)
    skipped = load_midi_folder(folder, skip_errors=True)
    assert list(skipped.skipped) == ["broken.mid"] and len(skipped.pieces) == 2
    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_midi_folder(tmp_path / "missing")
    with pytest.raises(ValueError, match="must be a directory"):
        load_midi_folder(folder / "b.mid")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no MIDI file"):
        load_midi_folder(tmp_path / "empty")


def test_time_signature_change_gives_bars_and_beats(tmp_path):
    pm = pretty_midi.PrettyMIDI(resolution=480, initial_tempo=120.0)  # a quarter = 0.5 s, a 16th = 0.125 s
    inst = pretty_midi.Instrument(0)
    inst.notes.append(pretty_midi.Note(80, 60, 0.0, 4.0))  # 32 steps
    pm.instruments.append(inst)
    pm.time_signature_changes += [pretty_midi.TimeSignature(4, 4, 0.0), pretty_midi.TimeSignature(3, 4, 2.0)]
    pm.write(str(tmp_path / "ts.mid"))
    piece = midi_to_piece(tmp_path / "ts.mid")
    assert len(piece) == 32
    assert piece.label("bar").tolist() == [0] * 16 + [1] * 12 + [2] * 4
    assert piece.label("beat").tolist() == list(range(16)) + list(range(12)) + list(range(4))
    assert piece.label("key").eq(-1).all()  # no key signature in the file


def test_tempo_change_keeps_the_grid(tmp_path):
    # 4/4; 120 bpm for the first bar (2 s), then 60 bpm: a note at 3.0 s is one beat after the bar line
    pm = pretty_midi.PrettyMIDI(resolution=480, initial_tempo=120.0)
    pm._tick_scales = [(0, 60.0 / (120.0 * 480)), (1920, 60.0 / (60.0 * 480))]
    pm._update_tick_to_time(4000)
    inst = pretty_midi.Instrument(0)
    inst.notes += [pretty_midi.Note(80, 60, 0.0, 2.0), pretty_midi.Note(80, 62, 3.0, 4.0)]
    pm.instruments.append(inst)
    pm.write(str(tmp_path / "tempo.mid"))
    piece = midi_to_piece(tmp_path / "tempo.mid")
    assert torch.nonzero(piece.roll[:, 0, 62]).flatten().tolist() == [20, 21, 22, 23]
    assert piece.label("beat")[20].item() == 4 and piece.label("bar")[20].item() == 1


def test_off_grid_notes_are_rounded_and_counted(tmp_path):
    pm = pretty_midi.PrettyMIDI(resolution=480, initial_tempo=120.0)
    inst = pretty_midi.Instrument(0)
    inst.notes.append(pretty_midi.Note(80, 60, 0.02, 0.5))  # starts 0.16 of a 16th late
    pm.instruments.append(inst)
    piece = midi_to_piece(pm)
    assert piece.quantized_notes == 1 and piece.roll[:, 0, 60].tolist() == [True] * 4


def test_bad_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("this is not a MIDI file")
    with pytest.raises(ValueError, match="not a readable MIDI file"):
        midi_to_piece(text)
    empty = tmp_path / "empty.mid"
    pretty_midi.PrettyMIDI().write(str(empty))
    with pytest.raises(ValueError, match="contains no"):
        midi_to_piece(empty)
    with pytest.raises(FileNotFoundError):
        midi_to_piece(tmp_path / "missing.mid")
    roll = torch.zeros(4, 3, 128, dtype=torch.bool)
    roll[:, :, 60] = True
    roll_to_midi(roll, tmp_path / "three.mid")
    with pytest.raises(ValueError, match="more than num_voices=2"):
        midi_to_piece(tmp_path / "three.mid", num_voices=2)
    assert midi_to_piece(tmp_path / "three.mid", num_voices=5).roll.shape == (4, 5, 128)  # padded with silence


def test_a_silent_voice_keeps_its_place(tmp_path):
    roll = torch.zeros(4, 4, 128, dtype=torch.bool)
    roll[:, 0, 72] = roll[:, 2, 55] = roll[:, 3, 48] = True  # the alto rests throughout
    roll_to_midi(roll, tmp_path / "no_alto.mid")
    assert torch.equal(midi_to_piece(tmp_path / "no_alto.mid", num_voices=4).roll, roll)


def test_roll_to_midi_errors():
    with pytest.raises(ValueError, match="binary"):
        roll_to_midi(torch.full((4, 1, 128), 0.5))
    with pytest.raises(ValueError, match="shape"):
        roll_to_midi(torch.zeros(4, 1, 64))
    with pytest.raises(ValueError, match="tempo"):
        roll_to_midi(torch.zeros(4, 1, 128), tempo=0)
    with pytest.raises(ValueError, match="labels must have shape"):
        roll_to_midi(torch.zeros(4, 1, 128), labels=torch.zeros(3, len(LABEL_FIELDS), dtype=torch.long))
    with pytest.raises(TypeError, match="Tensor"):
        roll_to_midi([[0]])


def test_midi_data_as_bytes_bytearray_memoryview_or_binary_file(tmp_path):
    """Issue 29: ``midi_to_piece(b"...")`` raised a pathlib TypeError; MIDI data in memory is read as a file."""
    roll = torch.zeros(6, 2, 128, dtype=torch.bool)
    roll[:3, 0, 60] = True
    roll[2:, 1, 48] = True
    roll_to_midi(roll, tmp_path / "two.mid")
    data = (tmp_path / "two.mid").read_bytes()
    from_path = midi_to_piece(tmp_path / "two.mid")
    for source in (data, bytearray(data), memoryview(data)):
        piece = midi_to_piece(source)
        assert torch.equal(piece.roll, from_path.roll) and torch.equal(piece.onsets, from_path.onsets)
        assert piece.name == "midi"
    with open(tmp_path / "two.mid", "rb") as handle:
        piece = midi_to_piece(handle)
    assert torch.equal(piece.roll, from_path.roll) and piece.name == "two"
    assert midi_to_piece(data, name="mine").name == "mine"


@pytest.mark.parametrize("source, error, match", [
    (b"", ValueError, "source <bytes> is empty"),
    (b"not a MIDI file at all", ValueError, "source <bytes> is not readable MIDI data"),
    (b"MThd\x00\x00\x00\x06\x00\x01", ValueError, "source <bytes> is not readable MIDI data"),
    (12, TypeError, "source must be a path .* got int"),
    (None, TypeError, "source must be a path .* got NoneType"),
    ([b"MThd"], TypeError, "source must be a path .* got list"),
])
def test_bad_midi_sources_name_the_argument(source, error, match):
    with pytest.raises(error, match=match):
        midi_to_piece(source)


def test_text_mode_file_directory_and_bad_limits_are_refused(tmp_path):
    roll = torch.zeros(4, 1, 128, dtype=torch.bool)
    roll[:, 0, 60] = True
    roll_to_midi(roll, tmp_path / "one.mid")
    (tmp_path / "notes.txt").write_text("text")
    with open(tmp_path / "notes.txt") as handle, pytest.raises(TypeError, match="binary mode"):
        midi_to_piece(handle)
    with pytest.raises(ValueError, match="is a directory"):
        midi_to_piece(tmp_path)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="max_steps must be a positive integer"):
            midi_to_piece(tmp_path / "one.mid", max_steps=bad)
        with pytest.raises(ValueError, match="num_voices must be a positive integer"):
            midi_to_piece(tmp_path / "one.mid", num_voices=bad)
