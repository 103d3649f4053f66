"""Scores to 16th-note piano rolls with structure labels, and the Bach chorales of the music21 corpus.

Structure labels come from the score, not from MIDI (a MIDI export loses the pickup, so downbeats
computed from it are wrong): bars and their offsets from music21 measures (a first bar shorter than its
time signature is a pickup and is right-aligned), phrases from fermatas, the key from music21's key
analysis, chords from the vertical sonority, the melody from the top voice. See
:mod:`pe_toolkit.domains.music.structure` for the columns.

The corpus is parsed once and cached as a compressed ``.npz`` of plain arrays (no pickles) under
``$PE_TOOLKIT_CACHE/music/`` (default ``~/.cache/pe_toolkit/music/``); the file name holds the format
version and a hash of the source list (file names and sizes), so a different subset or corpus version
never loads a stale cache. Chorales that fail to parse or do not have exactly four parts are skipped and
counted, not crashed on.

Reference: Agarwal, Wang, Richard 2024, arXiv:2402.13301 (structure labels for structure-informed PEs).
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from pe_toolkit.atomic import atomic_write
from pe_toolkit.domains.music.structure import LABEL_FIELDS, chord_labels_from_roll, melody_chords

__all__ = [
    "FORMAT_VERSION",
    "STEPS_PER_QUARTER",
    "VOICES",
    "ChoraleCorpus",
    "Piece",
    "bach_chorale_paths",
    "default_cache_dir",
    "load_bach_chorales",
    "load_score_file",
    "melody_from_roll",
    "onsets_from_roll",
    "score_to_piece",
]

#: Bumped whenever the cached format or the conversion changes; part of the cache file name.
FORMAT_VERSION = 2
#: Grid resolution: 4 steps per quarter note = 16th notes.
STEPS_PER_QUARTER = 4
#: Voice order of a chorale roll.
VOICES: tuple[str, ...] = ("soprano", "alto", "tenor", "bass")


@dataclass
class Piece:
    """One piece on the 16th grid.

    Attributes:
        name: identifier (corpus file stem or user file name).
        roll: ``(T, V, 128)`` bool, ``roll[t, v, p]`` = voice ``v`` sounds MIDI pitch ``p`` during step ``t``.
        labels: ``(T, len(LABEL_FIELDS))`` int64 structure labels (columns :data:`LABEL_FIELDS`).
        quantized_notes: notes whose onset or end was not on the 16th grid and were rounded to it.
        onsets: ``(T, V, 128)`` bool, ``onsets[t, v, p]`` = voice ``v`` *starts* pitch ``p`` at step ``t``; it
            tells a re-struck note from a held one (two quarter notes on the same pitch are two onsets). Every
            onset sounds (``onsets <= roll``) and every run of sounding steps starts with one. ``None``
            (default): one onset at the start of each run (:func:`onsets_from_roll`: repeated notes merge).
    """

    name: str
    roll: Tensor
    labels: Tensor
    quantized_notes: int = 0
    onsets: Tensor | None = None

    def __post_init__(self) -> None:
        if self.roll.dim() != 3 or self.roll.shape[-1] != 128:
            raise ValueError(f"Piece {self.name!r}: roll must have shape (T, voices, 128), "
                             f"got {tuple(self.roll.shape)}")
        if tuple(self.labels.shape) != (self.roll.shape[0], len(LABEL_FIELDS)):
            raise ValueError(f"Piece {self.name!r}: labels must have shape ({self.roll.shape[0]}, {len(LABEL_FIELDS)}),"
                             f" got {tuple(self.labels.shape)}")
        if self.onsets is None:
            self.onsets = onsets_from_roll(self.roll)
        elif not isinstance(self.onsets, Tensor) or self.onsets.shape != self.roll.shape:
            shape = tuple(self.onsets.shape) if isinstance(self.onsets, Tensor) else type(self.onsets).__name__
            raise ValueError(f"Piece {self.name!r}: onsets must have the roll's shape {tuple(self.roll.shape)}, "
                             f"got {shape}")
        else:
            onsets, roll = self.onsets.bool(), self.roll.bool()
            if bool((onsets & ~roll).any()):
                raise ValueError(f"Piece {self.name!r}: onsets has {int((onsets & ~roll).sum())} onsets where the "
                                 "roll does not sound")
            missing = onsets_from_roll(roll) & ~onsets
            if bool(missing.any()):
                raise ValueError(f"Piece {self.name!r}: {int(missing.sum())} runs of sounding steps start without an "
                                 "onset (every note starts with one)")
            self.onsets = onsets

    def __len__(self) -> int:
        return self.roll.shape[0]

    def label(self, name: str) -> Tensor:
        """The ``(T,)`` column ``name`` of :data:`LABEL_FIELDS`."""
        if name not in LABEL_FIELDS:
            raise ValueError(f"unknown label {name!r}; allowed: {', '.join(LABEL_FIELDS)}")
        return self.labels[:, LABEL_FIELDS.index(name)]


def default_cache_dir() -> Path:
    """``$PE_TOOLKIT_CACHE/music`` (``~/.cache/pe_toolkit/music`` if unset)."""
    base = os.environ.get("PE_TOOLKIT_CACHE") or str(Path.home() / ".cache" / "pe_toolkit")
    return Path(base).expanduser() / "music"


def onsets_from_roll(roll: Tensor) -> Tensor:
    """One onset where each run of sounding steps starts: ``roll[t] & ~roll[t - 1]``, bool, same shape.

    What a roll alone can tell (a re-struck note of the same pitch is not visible in it).

    Example:
        >>> onsets_from_roll(torch.tensor([[[1]], [[1]], [[0]], [[1]]]).bool()).flatten().tolist()
        [True, False, False, True]
    """
    roll = roll.bool()
    previous = torch.zeros_like(roll)
    previous[1:] = roll[:-1]
    return roll & ~previous


def melody_from_roll(roll: Tensor, voice: int = 0) -> Tensor:
    """Highest MIDI pitch of ``voice`` per step, 0 where it rests: ``(T,)`` int64 from ``(T, V, 128)``."""
    active = roll[:, voice].bool()
    top = 127 - active.flip(-1).long().argmax(-1)
    return torch.where(active.any(-1), top, torch.zeros_like(top))


def _to_step(quarters: float, what: str, counter: list[int]) -> int:
    steps = float(quarters) * STEPS_PER_QUARTER
    rounded = round(steps)
    if abs(steps - rounded) > 1e-6:
        counter[0] += 1
    return int(rounded)


def _has_fermata(element) -> bool:
    return any("Fermata" in e.classes for e in getattr(element, "expressions", ()))


def score_to_piece(score, *, name: str = "score", num_voices: int | None = 4) -> Piece:
    """Convert a music21 ``Score`` to a :class:`Piece` (roll + structure labels from the score).

    Each part is one voice (a chord inside a part sets all its pitches; grace notes are skipped). Bars
    come from the first part's measures; a first bar shorter than its time signature's bar is a pickup,
    right-aligned in the bar (``beat`` = 16 - length ... 15 in 4/4). A phrase ends where a fermata note
    of the first part ends. Repeats are not expanded (the score is read as written).

    Args:
        score: a ``music21.stream.Score``.
        name: identifier stored in the piece.
        num_voices: required number of parts (``None``: any).

    Raises:
        TypeError: if ``score`` is not a music21 Score.
        ValueError: if it has the wrong number of parts, no measures or no notes.
    """
    from music21 import stream

    if not isinstance(score, stream.Score):
        raise TypeError(f"score_to_piece: score must be a music21 Score, got {type(score).__name__}")
    parts = list(score.parts)
    if num_voices is not None and len(parts) != num_voices:
        raise ValueError(f"score_to_piece: {name} has {len(parts)} parts, expected {num_voices}")
    if not parts:
        raise ValueError(f"score_to_piece: {name} has no parts")
    counter = [0]
    length = _to_step(score.highestTime, "end", counter)
    if length <= 0:
        raise ValueError(f"score_to_piece: {name} is empty (highestTime {score.highestTime})")
    roll = torch.zeros(length, len(parts), 128, dtype=torch.bool)
    onsets = torch.zeros_like(roll)
    notes = 0
    for v, part in enumerate(parts):
        for n in part.flatten().notes:
            if n.duration.isGrace or n.quarterLength == 0:
                continue
            start = _to_step(n.offset, "onset", counter)
            end = _to_step(n.offset + n.quarterLength, "end", counter)
            # a note tied from the previous one (across a barline) continues it: no new onset
            tied_over = n.tie is not None and n.tie.type in ("stop", "continue")
            for p in n.pitches:
                roll[start:max(end, start + 1), v, int(p.midi)] = True
                if not tied_over:
                    onsets[start, v, int(p.midi)] = True
            notes += 1
    onsets |= onsets_from_roll(roll)  # a tie whose first note was skipped still starts a note
    if notes == 0:
        raise ValueError(f"score_to_piece: {name} has no notes")

    measures = list(parts[0].getElementsByClass("Measure"))
    if not measures:
        raise ValueError(f"score_to_piece: {name} has no measures in its first part")
    bar = torch.full((length,), -1, dtype=torch.long)
    beat = torch.zeros(length, dtype=torch.long)
    for i, m in enumerate(measures):
        start = _to_step(m.offset, "bar", counter)
        end = min(length, _to_step(m.offset + m.duration.quarterLength, "bar", counter))
        pad = 0
        if i == 0:
            full = _to_step(m.barDuration.quarterLength, "bar", counter)
            pad = max(0, full - (end - start))
        bar[start:end] = i
        beat[start:end] = torch.arange(end - start) + pad
    if bool((bar < 0).any()):  # steps after the last measure (should not happen): extend the last bar
        last = int(torch.nonzero(bar >= 0).max())
        missing = torch.arange(last + 1, length)
        bar[missing] = bar[last]
        beat[missing] = beat[last] + torch.arange(1, len(missing) + 1)

    ends = sorted({_to_step(n.offset + n.quarterLength, "fermata", counter)
                   for n in parts[0].flatten().notesAndRests if _has_fermata(n)})
    phrase = torch.searchsorted(torch.tensor(ends, dtype=torch.long), torch.arange(length), right=True)

    key = score.analyze("key")
    key_label = int(key.tonic.pitchClass) + (12 if key.mode == "minor" else 0)
    melody = melody_from_roll(roll, 0)
    columns = {
        "time": torch.arange(length),
        "bar": bar,
        "beat": beat,
        "phrase": phrase,
        "key": torch.full((length,), key_label, dtype=torch.long),
        "chord": chord_labels_from_roll(roll),
        "melody": melody,
        "melody_chord": melody_chords(melody, bar, beat),  # from the melody and meter only
    }
    labels = torch.stack([columns[f] for f in LABEL_FIELDS], dim=-1)
    return Piece(name=name, roll=roll, labels=labels, quantized_notes=counter[0], onsets=onsets)


def load_score_file(path: str | os.PathLike, *, num_voices: int | None = None) -> Piece:
    """Read a user's score file (MusicXML ``.xml`` / ``.mxl`` / ``.musicxml``, Humdrum ``.krn``, ABC, ...; anything
    music21 parses) into a :class:`Piece` with labels from the score (see :func:`score_to_piece`).

    Raises:
        FileNotFoundError: if the path does not exist.
        ValueError: if music21 cannot parse it as a score, or :func:`score_to_piece` rejects it.
    """
    from music21 import converter, stream

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"load_score_file: no such file: {path}")
    try:
        score = converter.parse(str(path))
    except Exception as error:  # noqa: BLE001 - music21 raises many types for an unreadable file
        raise ValueError(f"load_score_file: {path} is not a score music21 can read ({type(error).__name__}: "
                         f"{error})"[:300]) from error
    if isinstance(score, stream.Opus):
        raise ValueError(f"load_score_file: {path} holds {len(score.scores)} scores (an opus); pass one score")
    if not isinstance(score, stream.Score):  # a single part: wrap it
        wrapped = stream.Score()
        wrapped.insert(0, score)
        score = wrapped
    return score_to_piece(score, name=path.stem, num_voices=num_voices)


def bach_chorale_paths() -> list[Path]:
    """The Bach files of the installed music21 corpus, sorted by name (no parsing)."""
    from music21 import corpus

    return sorted((Path(p) for p in corpus.getComposer("bach")), key=lambda p: p.name)


@dataclass
class ChoraleCorpus:
    """The converted chorales plus what was skipped.

    Attributes:
        pieces: converted four-part chorales.
        skipped: ``{file name: reason}`` for every source file that was not converted.
        cache_file: the ``.npz`` the pieces were read from / written to (``None`` without a cache).
    """

    pieces: list[Piece]
    skipped: dict[str, str] = field(default_factory=dict)
    cache_file: Path | None = None

    def split(self, fractions: Sequence[float] = (0.8, 0.1, 0.1), *, seed: int = 0) -> tuple[list[Piece], ...]:
        """Random split by piece (never inside a piece) into ``len(fractions)`` lists."""
        if not fractions or any(f < 0 for f in fractions) or not math.isclose(sum(fractions), 1.0):
            raise ValueError(f"split: fractions must be non-negative and sum to 1, got {tuple(fractions)}")
        order = torch.randperm(len(self.pieces), generator=torch.Generator().manual_seed(seed)).tolist()
        bounds = np.round(np.cumsum([0.0, *fractions]) * len(order)).astype(int)
        return tuple([self.pieces[i] for i in order[bounds[k]:bounds[k + 1]]] for k in range(len(fractions)))


def _source_hash(paths: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for p in paths:
        digest.update(f"{p.name}:{p.stat().st_size};".encode())
    return digest.hexdigest()[:16]


def _save(path: Path, pieces: list[Piece], skipped: dict[str, str], source_hash: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lengths = np.array([len(p) for p in pieces], dtype=np.int64)
    rolls = np.concatenate([p.roll.numpy() for p in pieces]) if pieces else np.zeros((0, 4, 128), bool)
    onsets = np.concatenate([p.onsets.numpy() for p in pieces]) if pieces else np.zeros((0, 4, 128), bool)
    labels = np.concatenate([p.labels.numpy() for p in pieces]) if pieces else np.zeros((0, len(LABEL_FIELDS)))
    # a unique temporary name, flushed and renamed (pe_toolkit.atomic): two processes filling the same cache,
    # or a kill mid-write, never leave a torn file or overwrite each other's half-written one
    with atomic_write(path, "wb") as handle:
        np.savez_compressed(
            handle, format_version=np.int64(FORMAT_VERSION), source_hash=np.array(source_hash),
            names=np.array([p.name for p in pieces], dtype=str), lengths=lengths,
            rolls=np.packbits(rolls, axis=-1), onsets=np.packbits(onsets, axis=-1), labels=labels.astype(np.int64),
            quantized=np.array([p.quantized_notes for p in pieces], dtype=np.int64),
            skipped_names=np.array(list(skipped), dtype=str),
            skipped_reasons=np.array(list(skipped.values()), dtype=str),
            label_fields=np.array(LABEL_FIELDS, dtype=str),
        )


def _load(path: Path, source_hash: str) -> tuple[list[Piece], dict[str, str]] | None:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    with data:
        if (int(data["format_version"]) != FORMAT_VERSION or str(data["source_hash"]) != source_hash
                or tuple(data["label_fields"].tolist()) != LABEL_FIELDS):
            return None
        rolls = np.unpackbits(data["rolls"], axis=-1, count=128).astype(bool)
        onsets = np.unpackbits(data["onsets"], axis=-1, count=128).astype(bool)
        labels, lengths = data["labels"], data["lengths"]
        starts = np.concatenate([[0], np.cumsum(lengths)])
        pieces = [
            Piece(name=str(n), roll=torch.from_numpy(rolls[a:b].copy()), labels=torch.from_numpy(labels[a:b].copy()),
                  quantized_notes=int(q), onsets=torch.from_numpy(onsets[a:b].copy()))
            for n, a, b, q in zip(data["names"], starts[:-1], starts[1:], data["quantized"])
        ]
        skipped = dict(zip(data["skipped_names"].tolist(), data["skipped_reasons"].tolist()))
    return pieces, skipped


def load_bach_chorales(
    *, limit: int | None = None, cache_dir: str | os.PathLike | None = None, use_cache: bool = True,
    progress: bool = False,
) -> ChoraleCorpus:
    """The four-part Bach chorales of the music21 corpus as :class:`Piece` s (cached after the first run).

    Args:
        limit: convert only the first ``limit`` corpus files (sorted by name); ``None`` = all (~433 files,
            about 2 minutes of parsing the first time).
        cache_dir: where the ``.npz`` cache lives (default :func:`default_cache_dir`).
        use_cache: read / write the cache.
        progress: print one line per 50 files while parsing.

    Returns:
        a :class:`ChoraleCorpus`; files with other than four parts or that fail to parse are in ``skipped``.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"load_bach_chorales: limit must be a positive int or None, got {limit!r}")
    paths = bach_chorale_paths()
    if limit is not None:
        paths = paths[:limit]
    source_hash = _source_hash(paths)
    cache_file = None
    if use_cache:
        cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
        cache_file = cache_dir / f"bach_chorales_v{FORMAT_VERSION}_{source_hash}.npz"
        if cache_file.exists():
            loaded = _load(cache_file, source_hash)
            if loaded is not None:
                return ChoraleCorpus(pieces=loaded[0], skipped=loaded[1], cache_file=cache_file)
    from music21 import converter

    pieces: list[Piece] = []
    skipped: dict[str, str] = {}
    for i, path in enumerate(paths):
        if progress and i % 50 == 0:
            print(f"load_bach_chorales: {i}/{len(paths)} files", flush=True)
        try:
            score = converter.parse(str(path))
            pieces.append(score_to_piece(score, name=path.stem, num_voices=4))
        except Exception as error:  # noqa: BLE001 - any parse failure: skip and count, never crash
            skipped[path.name] = f"{type(error).__name__}: {error}"[:200]
    if cache_file is not None:
        _save(cache_file, pieces, skipped, source_hash)
    return ChoraleCorpus(pieces=pieces, skipped=skipped, cache_file=cache_file)
