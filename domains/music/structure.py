"""Structure labels of a piano roll, stored as one integer vector per 16th-note step.

A music "position" here is not one index but a vector of structure labels (Agarwal, Wang, Richard 2024,
"Structure-informed Positional Encoding for Music Generation", ICASSP 2024, arXiv:2402.13301): the
structure-informed encoders of :mod:`pe_toolkit.domains.music.encoders` read the columns they are configured
with, the sequence baselines (sinusoidal, RoPE, ...) read the ``time`` column only.

Columns (:data:`FIELDS`), all ``int64``:

============== ==========================================================================================
``time``       step index inside the sequence (0, 1, 2, ...): the plain position of the baselines
``bar``        bar index from the start of the piece (0 = the first bar written, pickup or not)
``beat``       position inside the bar in 16ths (0 = downbeat); a pickup bar is right-aligned, so a
               quarter-note pickup in 4/4 has positions 12..15
``phrase``     phrase index: 0 until the end of the first fermata note, then 1, ...
``key``        tonic pitch class + 12 for minor (0..23), from the score
``chord``      0 = silence, else ``1 + 5 * root_pc + quality`` (qualities :data:`CHORD_QUALITIES`) of the
               vertical sonority sounding at that step
``melody``     MIDI pitch of the top voice (soprano), 0 during a rest
``melody_chord`` a chord label (same code as ``chord``) *inferred from the melody alone* per half bar
               (:func:`melody_chords`): what an accompaniment model may be given, since the melody is its input,
               where ``chord`` describes the harmony of all voices (an oracle for any task that generates them)
``chord_run``  index of the run of equal ``chord`` labels the step belongs to (0, 1, ... in the sequence)
``chord_tau``  steps since the start of that run (0 at the first step of each run)
``melody_chord_run``, ``melody_chord_tau``: the same for ``melody_chord``
``phrase_run`` index of the run of equal ``phrase`` labels
``phrase_tau`` steps since the start of the phrase run
============== ==========================================================================================

The ``*_run`` / ``*_tau`` columns are derived from the others by :func:`add_segment_fields`; they depend
on where a sequence starts (a window cut from a piece starts a new run at its first step), so they are
recomputed for every window. NS-RPE needs them precomputed because during KV-cache decoding an encoder
sees one step at a time, not the history that defines its segment.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

__all__ = [
    "CHORD_QUALITIES",
    "FIELDS",
    "LABEL_FIELDS",
    "NUM_CHORD_LABELS",
    "SEGMENT_FIELDS",
    "add_segment_fields",
    "chord_label",
    "chord_labels_from_roll",
    "estimate_key",
    "field_index",
    "melody_chords",
    "segment_runs",
]

#: Score-derived label columns, in order.
LABEL_FIELDS: tuple[str, ...] = ("time", "bar", "beat", "phrase", "key", "chord", "melody", "melody_chord")
#: Structures whose runs / times-within-run are precomputed for NS-RPE.
SEGMENT_FIELDS: tuple[str, ...] = ("chord", "phrase", "melody_chord")
#: Every column of a structure-position tensor ``(..., L, len(FIELDS))``.
FIELDS: tuple[str, ...] = LABEL_FIELDS + tuple(f"{s}_{kind}" for s in SEGMENT_FIELDS for kind in ("run", "tau"))
#: Chord qualities as music21 names them, in label order.
CHORD_QUALITIES: tuple[str, ...] = ("major", "minor", "diminished", "augmented", "other")
#: Number of chord labels (silence + 12 roots x 5 qualities).
NUM_CHORD_LABELS = 1 + 12 * len(CHORD_QUALITIES)


def field_index(name: str) -> int:
    """Column of ``name`` in :data:`FIELDS` (ValueError listing them if unknown)."""
    if name not in FIELDS:
        raise ValueError(f"unknown structure field {name!r}; allowed: {', '.join(FIELDS)}")
    return FIELDS.index(name)


def segment_runs(labels: Tensor) -> tuple[Tensor, Tensor]:
    """Runs of equal consecutive labels: run index and time since the run started, per step.

    Vectorised (no loop over steps): a run starts where the label differs from the previous step.

    Args:
        labels: ``(..., L)`` integer labels.
    Returns:
        ``(run, tau)``, both ``(..., L)`` int64: ``run[t]`` counts the label changes up to ``t``;
        ``tau[t] = t - start(run[t])``.

    Example:
        >>> segment_runs(torch.tensor([5, 5, 2, 2, 2, 5]))
        (tensor([0, 0, 1, 1, 1, 2]), tensor([0, 1, 0, 1, 2, 0]))
    """
    if labels.dim() == 0:
        raise ValueError("segment_runs: labels must have a length dim, got a scalar")
    length = labels.shape[-1]
    if length == 0:
        return labels.long(), labels.long()
    change = torch.zeros_like(labels, dtype=torch.bool)
    change[..., 1:] = labels[..., 1:] != labels[..., :-1]
    run = change.long().cumsum(-1)
    steps = torch.arange(length, device=labels.device).expand_as(labels)
    starts = torch.where(change, steps, torch.zeros_like(steps)).cummax(-1).values
    return run, steps - starts


def add_segment_fields(labels: Tensor) -> Tensor:
    """Full structure positions ``(..., L, len(FIELDS))`` from label columns ``(..., L, len(LABEL_FIELDS))``.

    ``time`` is reset to ``0 .. L-1`` and the run / tau columns of :data:`SEGMENT_FIELDS` are computed for
    this sequence (see :func:`segment_runs`).
    """
    if labels.dim() < 2 or labels.shape[-1] != len(LABEL_FIELDS):
        raise ValueError(f"add_segment_fields: labels must have shape (..., L, {len(LABEL_FIELDS)}) "
                         f"(columns {LABEL_FIELDS}), got {tuple(labels.shape)}")
    labels = labels.long().clone()
    length = labels.shape[-2]
    labels[..., 0] = torch.arange(length, device=labels.device)
    extra = []
    for name in SEGMENT_FIELDS:
        run, tau = segment_runs(labels[..., LABEL_FIELDS.index(name)])
        extra += [run, tau]
    return torch.cat([labels, torch.stack(extra, dim=-1)], dim=-1)


@functools.lru_cache(maxsize=4096)
def _chord_of_mask(mask: int) -> int:
    from music21 import chord

    pcs = [pc for pc in range(12) if mask >> pc & 1]
    if not pcs:
        return 0
    c = chord.Chord(pcs)
    quality = c.quality if c.quality in CHORD_QUALITIES else "other"
    return 1 + 5 * c.root().pitchClass + CHORD_QUALITIES.index(quality)


def chord_label(pitches) -> int:
    """Chord label of a set of sounding MIDI pitches (see the ``chord`` column; music21 root and quality).

    Example:
        >>> chord_label([60, 64, 67]) == 1 + 5 * 0 + 0   # C major
        True
    """
    mask = 0
    for p in pitches:
        mask |= 1 << (int(p) % 12)
    return _chord_of_mask(mask)


def chord_labels_from_roll(roll: Tensor) -> Tensor:
    """Chord label per step of a piano roll ``(T, V, 128)`` (any voices): ``(T,)`` int64.

    Pitch-class sets are folded into 12-bit masks; music21 names each distinct mask once (cached).
    """
    if roll.dim() != 3 or roll.shape[-1] != 128:
        raise ValueError(f"chord_labels_from_roll: roll must have shape (T, voices, 128), got {tuple(roll.shape)}")
    active = roll.bool().any(1)  # (T, 128)
    pc = torch.zeros(active.shape[0], 12, dtype=torch.bool)
    for octave_start in range(0, 128, 12):
        chunk = active[:, octave_start:octave_start + 12]
        pc[:, :chunk.shape[1]] |= chunk
    masks = (pc.long() << torch.arange(12)).sum(-1)
    unique, inverse = torch.unique(masks, return_inverse=True)
    table = torch.tensor([_chord_of_mask(int(m)) for m in unique], dtype=torch.long)
    return table[inverse]


# Krumhansl & Kessler (1982) key profiles, tonic first (Krumhansl 1990, "Cognitive Foundations of Musical Pitch").
_MAJOR_PROFILE = (6.35, 2.23, 3.48, 2.33, 4.38, 4.09, 2.52, 5.19, 2.39, 3.66, 2.29, 2.88)
_MINOR_PROFILE = (6.33, 2.68, 3.52, 5.38, 2.60, 3.53, 2.54, 4.75, 3.98, 2.69, 3.34, 3.17)
# Diatonic triads (root in semitones above the tonic, quality 0 major / 1 minor) and a preference by harmonic
# function (tonic > dominant > subdominant > the others), used only to break ties between chords that hold the
# melody equally well. Minor keys use the harmonic-minor dominant (V major).
_DIATONIC = {
    "major": ((0, 0, 0.3), (7, 0, 0.25), (5, 0, 0.2), (9, 1, 0.1), (2, 1, 0.1), (4, 1, 0.05)),
    "minor": ((0, 1, 0.3), (7, 0, 0.25), (5, 1, 0.2), (8, 0, 0.1), (3, 0, 0.1)),
}


def estimate_key(pitches: Tensor) -> int:
    """Key of a pitch sequence by the Krumhansl-Schmuckler method: ``tonic + 12 * minor`` (the ``key`` code).

    The pitch-class histogram (one count per step, rests ``<= 0`` ignored) is correlated with the 24 rotated
    Krumhansl-Kessler profiles; the best correlation wins (ties: the lower code). No pitch: 0 (C major).

    Example:
        >>> estimate_key(torch.tensor([60, 62, 64, 65, 67, 69, 71, 72, 67, 64, 60]))   # C major scale
        0
    """
    pitches = torch.as_tensor(pitches).reshape(-1)
    sounding = pitches[pitches > 0].long()
    if sounding.numel() == 0:
        return 0
    histogram = torch.bincount(sounding % 12, minlength=12).double()
    profiles = torch.tensor([_MAJOR_PROFILE, _MINOR_PROFILE], dtype=torch.float64)
    rolled = torch.stack([torch.roll(profiles, shifts=t, dims=-1) for t in range(12)], dim=1)  # (2, 12, 12)
    rolled = rolled.reshape(24, 12)
    if bool((histogram == histogram[0]).all()):
        return 0
    h = histogram - histogram.mean()
    r = rolled - rolled.mean(-1, keepdim=True)
    correlation = (r @ h) / (r.norm(dim=-1) * h.norm())
    return int(correlation.argmax())


def _triad_templates() -> Tensor:
    """``(24, 12)`` pitch-class sets of the major (rows 0..11) and minor (12..23) triads on each root."""
    rows = []
    for third in (4, 3):  # major, then minor
        for root in range(12):
            row = torch.zeros(12, dtype=torch.float64)
            row[[root, (root + third) % 12, (root + 7) % 12]] = 1.0
            rows.append(row)
    return torch.stack(rows)


def melody_chords(melody: Tensor, bar: Tensor, beat: Tensor, *, span: int = 8, key: int | None = None) -> Tensor:
    """Chord labels inferred from a melody alone, one per ``span`` steps of each bar (default a half bar of 4/4).

    A rule-based harmonisation that sees only what an accompanist is given (the melody and the meter), so its
    labels may feed a model that generates the other voices without leaking them. Per segment (steps with the
    same ``bar`` and ``beat // span``): the melody's pitch-class durations ``h``; each major / minor triad
    ``c`` scores ``h . c / sum(h)`` (the fraction of the melody it holds) plus a preference for the diatonic
    triads of the key by function (I/i 0.3, V 0.25, IV/iv 0.2, others 0.1 or less, non-diatonic 0), so the
    chord that holds most of the melody wins and the key decides ties. ``key`` defaults to
    :func:`estimate_key` of the melody. A segment where the melody rests gets 0 (silence).

    Args:
        melody: ``(T,)`` MIDI pitches of the top voice, 0 for a rest (the ``melody`` column).
        bar, beat: ``(T,)`` the ``bar`` / ``beat`` columns.
        span: steps per segment (positive int).
        key: ``tonic + 12 * minor`` (0..23), or ``None`` to estimate it from the melody.

    Returns:
        ``(T,)`` int64 labels coded as the ``chord`` column (``1 + 5 * root + quality``, quality 0 major, 1 minor).

    Example:
        >>> t = torch.arange(16)
        >>> melody = torch.tensor([64] * 8 + [65] * 8)        # E then F, in C major
        >>> melody_chords(melody, t // 16, t % 16, key=0).tolist() == [1] * 8 + [1 + 5 * 5] * 8   # C, then F
        True
    """
    if isinstance(span, bool) or not isinstance(span, int) or span < 1:
        raise ValueError(f"melody_chords: span must be a positive int (steps), got {span!r}")
    for name, column in (("melody", melody), ("bar", bar), ("beat", beat)):
        if not isinstance(column, Tensor) or column.dim() != 1:
            raise ValueError(f"melody_chords: {name} must be a 1-D tensor, got "
                             f"{tuple(column.shape) if isinstance(column, Tensor) else type(column).__name__}")
    if not melody.shape == bar.shape == beat.shape:
        raise ValueError(f"melody_chords: melody, bar and beat must have the same length, got "
                         f"{melody.shape[0]}, {bar.shape[0]}, {beat.shape[0]}")
    if key is not None and (isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < 24):
        raise ValueError(f"melody_chords: key must be an int in 0..23 (tonic + 12 * minor) or None, got {key!r}")
    length = melody.shape[0]
    if length == 0:
        return melody.long()
    melody, bar, beat = melody.long(), bar.long(), beat.long()
    key = estimate_key(melody) if key is None else key
    tonic, mode = key % 12, ("minor" if key >= 12 else "major")
    preference = torch.zeros(24, dtype=torch.float64)
    for degree, quality, weight in _DIATONIC[mode]:
        preference[12 * quality + (tonic + degree) % 12] = weight
    segment_key = torch.stack([bar, beat.div(span, rounding_mode="floor")], dim=-1)
    change = torch.zeros(length, dtype=torch.bool)
    change[1:] = (segment_key[1:] != segment_key[:-1]).any(-1)
    segment = change.long().cumsum(0)
    sounding = melody > 0
    pcs = torch.nn.functional.one_hot(melody % 12, 12).double() * sounding[:, None]
    durations = torch.zeros(int(segment[-1]) + 1, 12, dtype=torch.float64).index_add_(0, segment, pcs)
    total = durations.sum(-1, keepdim=True)
    scores = durations @ _triad_templates().t() / total.clamp_min(1.0) + preference  # (S, 24)
    best = scores.argmax(-1)
    root, quality = best % 12, best // 12
    labels = torch.where(total[:, 0] > 0, 1 + 5 * root + quality, torch.zeros_like(root))
    return labels[segment]
