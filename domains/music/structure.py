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
``chord_run``  index of the run of equal ``chord`` labels the step belongs to (0, 1, ... in the sequence)
``chord_tau``  steps since the start of that run (0 at the first step of each run)
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
    "field_index",
    "segment_runs",
]

#: Score-derived label columns, in order.
LABEL_FIELDS: tuple[str, ...] = ("time", "bar", "beat", "phrase", "key", "chord", "melody")
#: Structures whose runs / times-within-run are precomputed for NS-RPE.
SEGMENT_FIELDS: tuple[str, ...] = ("chord", "phrase")
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
