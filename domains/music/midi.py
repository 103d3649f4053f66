"""MIDI in and out with ``pretty_midi``: piano rolls on the 16th grid <-> ``.mid`` files.

* :func:`roll_to_midi` writes one instrument per voice; consecutive active steps of one pitch in one voice
  become one note unless ``onsets`` marks a re-strike (then a repeated note stays two notes). Optional
  structure labels write the bars as time signatures, so a pickup survives the round trip.
* :func:`midi_to_piece` reads any MIDI file: note times are converted to 16th steps through the file's own
  tempo map (MIDI ticks / resolution), bars and beats come from its time-signature track (each change starts
  a new bar), the key from its first key signature, chords and the melody from the notes. A first bar
  shorter than the second whose time signature differs is read as a pickup and right-aligned, which undoes
  what :func:`roll_to_midi` writes for a pickup. Note starts become the piece's ``onsets``.
* :func:`load_midi_folder` reads every MIDI file of a folder (a user's corpus) into a
  :class:`~pe_toolkit.domains.music.scores.ChoraleCorpus`; a bad file is an error naming it (or, with
  ``skip_errors=True``, recorded with its reason).

``piece -> midi -> piece`` is exact on the grid (roll, onsets, bars, beats, chords, melody; phrases are not
stored in MIDI and read back as 0, the key only if given).
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path

import torch
from torch import Tensor

from pe_toolkit.domains.music.scores import (
    STEPS_PER_QUARTER,
    ChoraleCorpus,
    Piece,
    melody_from_roll,
    onsets_from_roll,
)
from pe_toolkit.domains.music.structure import LABEL_FIELDS, chord_labels_from_roll, melody_chords

__all__ = ["MIDI_SUFFIXES", "bar_lengths", "load_midi_folder", "midi_to_piece", "roll_to_midi"]

#: File suffixes :func:`load_midi_folder` reads (case-insensitive).
MIDI_SUFFIXES = (".mid", ".midi")

VOICE_NAMES = ("Soprano", "Alto", "Tenor", "Bass")


MAX_STEPS = 100_000  # default limit of midi_to_piece, in 16th steps


def bar_lengths(bar: Tensor) -> list[int]:
    """Lengths in steps of the consecutive bars of a ``bar`` label column ``(T,)``."""
    _, counts = torch.unique_consecutive(bar, return_counts=True)
    return counts.tolist()


def _time_signature_for(steps: int) -> tuple[int, int]:
    # a bar of n 16ths: n/4 quarters -> "n/4 over 4" when whole quarters, else n/16
    if steps % STEPS_PER_QUARTER == 0:
        return steps // STEPS_PER_QUARTER, 4
    return steps, 16


def roll_to_midi(roll: Tensor, path: str | os.PathLike | None = None, *, tempo: float = 90.0,
                 labels: Tensor | None = None, velocity: int = 80, program: int = 0,
                 voice_names: tuple[str, ...] | None = None, onsets: Tensor | None = None):
    """Write a piano roll ``(T, V, 128)`` as MIDI (one instrument per voice); returns the ``PrettyMIDI``.

    Args:
        roll: bool or {0, 1} ``(T, V, 128)`` (or ``(T, 128)`` for one voice).
        path: if given, the ``.mid`` file to write.
        tempo: quarter notes per minute.
        labels: optional ``(T, len(LABEL_FIELDS))`` structure labels: their bars become time signatures
            (a pickup becomes a short first bar), their ``key`` the key signature. Default: 4/4 throughout.
        velocity, program: of every note.
        voice_names: instrument names (default Soprano, Alto, Tenor, Bass, then ``Voice <n>``).
        onsets: optional, the roll's shape: where a note starts (a re-struck pitch ends the note before it).
            Default: a note starts where a run of sounding steps starts.

    Raises:
        TypeError / ValueError: for a roll of another shape or with values other than 0 / 1, bad labels,
            onsets of another shape or where the roll does not sound, or a non-positive tempo.
    """
    import pretty_midi

    if not isinstance(roll, Tensor):
        raise TypeError(f"roll_to_midi: roll must be a Tensor, got {type(roll).__name__}")
    if roll.dim() == 2:
        roll = roll.unsqueeze(1)
    if roll.dim() != 3 or roll.shape[-1] != 128:
        raise ValueError(f"roll_to_midi: roll must have shape (T, V, 128) or (T, 128), got {tuple(roll.shape)}")
    if roll.dtype != torch.bool:
        if not bool(((roll == 0) | (roll == 1)).all()):
            raise ValueError("roll_to_midi: roll must be binary (0/1 or bool); binarise probabilities first")
        roll = roll.bool()
    if not (isinstance(tempo, (int, float)) and math.isfinite(tempo) and tempo > 0):
        raise ValueError(f"roll_to_midi: tempo must be a positive number, got {tempo!r}")
    if onsets is None:
        onsets = onsets_from_roll(roll)
    else:
        if not isinstance(onsets, Tensor):
            raise TypeError(f"roll_to_midi: onsets must be a Tensor, got {type(onsets).__name__}")
        if onsets.dim() == 2:
            onsets = onsets.unsqueeze(1)
        if onsets.shape != roll.shape:
            raise ValueError(f"roll_to_midi: onsets must have the roll's shape {tuple(roll.shape)}, "
                             f"got {tuple(onsets.shape)}")
        if onsets.dtype != torch.bool and not bool(((onsets == 0) | (onsets == 1)).all()):
            raise ValueError("roll_to_midi: onsets must be binary (0/1 or bool)")
        onsets = onsets.bool()
        if bool((onsets & ~roll).any()):
            raise ValueError(f"roll_to_midi: onsets has {int((onsets & ~roll).sum())} onsets where the roll is silent")
        onsets = onsets | onsets_from_roll(roll)
    length, voices, _ = roll.shape
    if labels is not None and tuple(labels.shape) != (length, len(LABEL_FIELDS)):
        raise ValueError(f"roll_to_midi: labels must have shape ({length}, {len(LABEL_FIELDS)}), "
                         f"got {tuple(labels.shape)}")
    names = voice_names or tuple(VOICE_NAMES[v] if v < len(VOICE_NAMES) else f"Voice {v + 1}" for v in range(voices))
    if len(names) != voices:
        raise ValueError(f"roll_to_midi: voice_names has {len(names)} names for {voices} voices")
    resolution = 480
    pm = pretty_midi.PrettyMIDI(resolution=resolution, initial_tempo=float(tempo))
    step_seconds = 60.0 / tempo / STEPS_PER_QUARTER

    # notes of every (voice, pitch) at once: a note starts at an onset and ends at the next onset or silence
    sounding = roll.permute(1, 2, 0)  # (V, 128, T)
    starts = torch.nonzero(onsets.permute(1, 2, 0))  # rows (v, pitch, t), sorted
    next_sounding = torch.nn.functional.pad(sounding, (0, 1))[..., 1:]
    next_onset = torch.nn.functional.pad(onsets.permute(1, 2, 0), (0, 1))[..., 1:]
    ends = torch.nonzero(sounding & (~next_sounding | next_onset))  # last step of each note, sorted the same
    ends[:, 2] += 1
    for v in range(voices):
        instrument = pretty_midi.Instrument(program=program, name=names[v])
        for (_, pitch, on), (_, _, off) in zip(starts[starts[:, 0] == v].tolist(), ends[ends[:, 0] == v].tolist()):
            instrument.notes.append(pretty_midi.Note(velocity=velocity, pitch=pitch, start=on * step_seconds,
                                                     end=off * step_seconds))
        instrument.notes.sort(key=lambda n: (n.start, n.pitch))
        pm.instruments.append(instrument)

    if labels is None:
        pm.time_signature_changes.append(pretty_midi.TimeSignature(4, 4, 0.0))
    else:
        step, previous = 0, None
        for n in bar_lengths(labels[:, LABEL_FIELDS.index("bar")]):  # a pickup is a short bar of its own
            signature = _time_signature_for(n)
            if signature != previous:
                pm.time_signature_changes.append(pretty_midi.TimeSignature(*signature, step * step_seconds))
                previous = signature
            step += n
        key = int(labels[0, LABEL_FIELDS.index("key")])
        if 0 <= key < 24:
            pm.key_signature_changes.append(pretty_midi.KeySignature(key, 0.0))
    if path is not None:
        pm.write(str(path))
    return pm


def midi_to_piece(source, *, num_voices: int | None = None, name: str | None = None,
                  max_steps: int = MAX_STEPS) -> Piece:
    """Read a MIDI file (path, bytes, binary file object or ``PrettyMIDI``) into a :class:`Piece` on the 16th grid.

    Each non-drum instrument is one voice, in file order (instruments named Soprano, Alto, Tenor, Bass, as
    :func:`roll_to_midi` names them, go to their own voice, so a silent voice keeps its place). Note starts
    and ends are rounded to the nearest 16th of the file's own tempo map (``Piece.quantized_notes`` counts
    those that moved); a note shorter than a 16th lasts one step.

    Args:
        source: a path to a ``.mid`` file (``str`` or ``os.PathLike``), the file's content (``bytes``,
            ``bytearray``, ``memoryview``), a file object opened in binary mode, or a ``pretty_midi.PrettyMIDI``.
        num_voices: pad with silent voices up to this many (an instrument without notes is not stored in
            a MIDI file); more instruments than this is an error.
        name: stored in the piece (default the file stem).
        max_steps: the longest piece read, in 16th steps (default 100,000, about 4 hours at 100 bpm); a
            corrupted file whose notes end millions of steps later would otherwise allocate gigabytes.

    Raises:
        FileNotFoundError: if the path does not exist.
        TypeError: if ``source`` is none of these (or a file object opened in text mode).
        ValueError: if the file is not a readable MIDI file, has no notes, or has more voices than
            ``num_voices``, or is longer than ``max_steps``; if ``num_voices`` or ``max_steps`` is not a
            positive integer.
    """
    import pretty_midi

    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"midi_to_piece: max_steps must be a positive integer, got {max_steps!r}")
    if num_voices is not None and (isinstance(num_voices, bool) or not isinstance(num_voices, int)
                                   or num_voices < 1):
        raise ValueError(f"midi_to_piece: num_voices must be a positive integer or None, got {num_voices!r}")
    if isinstance(source, pretty_midi.PrettyMIDI):
        pm, name = source, name or "midi"
    elif isinstance(source, (bytes, bytearray, memoryview)) or hasattr(source, "read"):
        # MIDI data in memory (bytes) or an open binary file: read from a buffer, no path involved
        if hasattr(source, "read"):
            label = str(getattr(source, "name", "") or "<file object>")
            try:
                data = source.read()
            except Exception as error:  # noqa: BLE001 - whatever the file object raises
                raise ValueError(f"midi_to_piece: could not read source {label} ({type(error).__name__}: "
                                 f"{error})") from error
            if not isinstance(data, (bytes, bytearray)):
                raise TypeError(f"midi_to_piece: source must be opened in binary mode ('rb'); its read() "
                                f"returned {type(data).__name__}")
        else:
            label, data = "<bytes>", bytes(source)
        if not data:
            raise ValueError(f"midi_to_piece: source {label} is empty (0 bytes), not MIDI data")
        try:
            pm = pretty_midi.PrettyMIDI(io.BytesIO(bytes(data)))
        except Exception as error:  # noqa: BLE001 - mido / pretty_midi raise many types for bad data
            raise ValueError(f"midi_to_piece: source {label} is not readable MIDI data ({type(error).__name__}: "
                             f"{error})") from error
        name = name or (Path(label).stem if label[:1] != "<" else "midi")
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise FileNotFoundError(f"midi_to_piece: no such file: {path}")
        if path.is_dir():
            raise ValueError(f"midi_to_piece: {path} is a directory, not a MIDI file (load_midi_folder reads "
                             f"a folder)")
        try:
            pm = pretty_midi.PrettyMIDI(str(path))
        except Exception as error:  # noqa: BLE001 - mido / pretty_midi raise many types for a bad file
            raise ValueError(f"midi_to_piece: {path} is not a readable MIDI file ({type(error).__name__}: "
                             f"{error})") from error
        name = name or path.stem
    else:
        raise TypeError(f"midi_to_piece: source must be a path (str or os.PathLike), MIDI bytes, a binary file "
                        f"object or a pretty_midi.PrettyMIDI, got {type(source).__name__}")
    instruments = [i for i in pm.instruments if not i.is_drum and i.notes]
    if not instruments:
        raise ValueError(f"midi_to_piece: {name} contains no (non-drum) notes")
    voices = len(instruments)
    if num_voices is not None:
        if voices > num_voices:
            raise ValueError(f"midi_to_piece: {name} has {voices} instruments with notes, more than "
                             f"num_voices={num_voices}")
        voices = num_voices
    # Instruments named Soprano / Alto / Tenor / Bass (as roll_to_midi writes them) keep their voice even when a
    # voice above them is silent (a MIDI file stores no instrument without notes); otherwise: file order.
    names = [i.name for i in instruments]
    if len(set(names)) == len(names) and all(n in VOICE_NAMES[:voices] for n in names):
        slots = [VOICE_NAMES.index(n) for n in names]
    else:
        slots = list(range(len(instruments)))
    per_step = pm.resolution / STEPS_PER_QUARTER  # ticks per 16th
    counter = 0

    def to_step(seconds: float) -> int:
        nonlocal counter
        exact = pm.time_to_tick(seconds) / per_step
        rounded = round(exact)
        if abs(exact - rounded) > 1e-3:
            counter += 1
        return int(rounded)

    spans = [[(to_step(n.start), to_step(n.end), n.pitch) for n in inst.notes] for inst in instruments]
    length = max(max(max(a + 1, b) for a, b, _ in notes) for notes in spans)
    if length > max_steps:
        raise ValueError(f"midi_to_piece: {name} lasts {length} 16th steps, more than max_steps={max_steps} "
                         f"(a corrupted file, or pass a larger max_steps)")
    roll = torch.zeros(length, voices, 128, dtype=torch.bool)
    onsets = torch.zeros_like(roll)
    for v, notes in zip(slots, spans):
        for start, end, pitch in notes:
            roll[start:max(end, start + 1), v, pitch] = True
            onsets[start, v, pitch] = True

    # bars: every time-signature change starts a bar; default 4/4 from step 0
    changes = sorted((to_step(ts.time), ts.numerator, ts.denominator) for ts in pm.time_signature_changes)
    if not changes or changes[0][0] > 0:
        changes.insert(0, (0, 4, 4))
    bar = torch.zeros(length, dtype=torch.long)
    beat = torch.zeros(length, dtype=torch.long)
    bar_starts: list[int] = []
    for i, (start, numerator, denominator) in enumerate(changes):
        stop = changes[i + 1][0] if i + 1 < len(changes) else length
        bar_len = numerator * STEPS_PER_QUARTER * 4 // denominator
        if bar_len <= 0:
            raise ValueError(f"midi_to_piece: {name} has an unusable time signature {numerator}/{denominator}")
        bar_starts += list(range(start, min(stop, length), bar_len))
    starts = torch.tensor(bar_starts, dtype=torch.long)
    steps = torch.arange(length)
    bar = torch.searchsorted(starts, steps, right=True) - 1
    beat = steps - starts[bar]
    lengths = torch.diff(torch.cat([starts, torch.tensor([length])]))
    # a short first bar under its own time signature, followed by a longer bar: a pickup, right-aligned
    if len(changes) > 1 and changes[1][0] == lengths[0] and len(lengths) > 1 and lengths[0] < lengths[1]:
        beat[: int(lengths[0])] += int(lengths[1] - lengths[0])
    key = pm.key_signature_changes[0].key_number if pm.key_signature_changes else -1
    columns = {
        "time": steps,
        "bar": bar,
        "beat": beat,
        "phrase": torch.zeros(length, dtype=torch.long),
        "key": torch.full((length,), key, dtype=torch.long),
        "chord": chord_labels_from_roll(roll),
        "melody": melody_from_roll(roll, 0),
    }
    columns["melody_chord"] = melody_chords(columns["melody"], bar, beat)
    labels = torch.stack([columns[f] for f in LABEL_FIELDS], dim=-1)
    return Piece(name=name, roll=roll, labels=labels, quantized_notes=counter, onsets=onsets)


def load_midi_folder(folder: str | os.PathLike, *, num_voices: int | None = None, recursive: bool = False,
                     skip_errors: bool = False, max_steps: int = MAX_STEPS) -> ChoraleCorpus:
    """Every MIDI file (:data:`MIDI_SUFFIXES`) of ``folder`` as :class:`Piece` s, sorted by path.

    Each file goes through :func:`midi_to_piece` (labels from the file: bars and beats from its time
    signatures, phrases 0 since MIDI has no fermatas). With ``num_voices`` every piece gets that many voices
    (missing instruments are silent voices), so the pieces can be windowed together.

    Args:
        folder: a directory of ``.mid`` / ``.midi`` files.
        num_voices: voices per piece (``None``: as many as each file has; the pieces must then agree).
        recursive: also read the files of sub-folders.
        skip_errors: record a file that cannot be read in ``ChoraleCorpus.skipped`` (name -> reason) instead of
            raising.
        max_steps: as :func:`midi_to_piece`.

    Raises:
        FileNotFoundError: if ``folder`` does not exist.
        ValueError: if it is not a directory, holds no MIDI file, a file is unreadable / empty / too long (the
            message names the file), or (``num_voices=None``) the files have different numbers of voices.
    """
    root = Path(folder)
    if not root.exists():
        raise FileNotFoundError(f"load_midi_folder: no such folder: {root}")
    if not root.is_dir():
        raise ValueError(f"load_midi_folder: folder must be a directory, got the file {root}")
    pattern = "**/*" if recursive else "*"
    paths = sorted(p for p in root.glob(pattern) if p.is_file() and p.suffix.lower() in MIDI_SUFFIXES)
    if not paths:
        raise ValueError(f"load_midi_folder: {root} holds no MIDI file (suffixes {', '.join(MIDI_SUFFIXES)}"
                         f"{'' if recursive else '; sub-folders are read with recursive=True'})")
    pieces: list[Piece] = []
    skipped: dict[str, str] = {}
    for path in paths:
        name = str(path.relative_to(root))
        try:
            piece = midi_to_piece(path, num_voices=num_voices, name=name, max_steps=max_steps)
        except ValueError as error:
            if not skip_errors:
                raise ValueError(f"load_midi_folder: {path}: {error}") from error
            skipped[name] = str(error)[:300]
            continue
        pieces.append(piece)
    voices = sorted({p.roll.shape[1] for p in pieces})
    if len(voices) > 1:
        counts = {v: next(p.name for p in pieces if p.roll.shape[1] == v) for v in voices}
        raise ValueError(f"load_midi_folder: the files of {root} have different numbers of voices {voices} "
                         f"(e.g. {counts}); pass num_voices= to pad them to one number")
    return ChoraleCorpus(pieces=pieces, skipped=skipped, cache_file=None)
