"""Training windows for the two tasks (Lightning data module: :mod:`pe_toolkit.domains.music.lightning_module`).

Tasks (Agarwal et al. 2024, arXiv:2402.13301, adapted to four-part chorales):

A step of a voice is :data:`CHANNELS` ``= 2`` rows of 128 pitches, *sounding* then *onset* (the note starts
at this step), so a re-struck pitch is not a held one: ``V * 256`` features per step for ``V`` voices
(:func:`step_features`). The binary cross-entropy covers both rows.

* ``"next_step"``: next-timestep prediction. Inputs are the steps ``0 .. L-1`` of all voices, targets
  steps ``1 .. L``, positions the structure of steps ``0 .. L-1``.
* ``"accompaniment"``: given the soprano, generate alto, tenor and bass. The input at step ``t`` is the
  soprano of step ``t`` and the lower voices of step ``t - 1`` (zeros at ``t = 0``: teacher forcing of an
  autoregressive decoder), the target the lower voices of step ``t``; positions the structure of step ``t``.

Structure positions are :func:`pe_toolkit.domains.music.structure.add_segment_fields` of the window's labels, so the
``time`` column and the segment runs start at the window.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset

from pe_toolkit.domains.music.scores import Piece
from pe_toolkit.domains.music.structure import add_segment_fields
from pe_toolkit.encoders.base import check_choice, check_int

__all__ = ["CHANNELS", "TASKS", "WindowDataset", "split_step_features", "step_features", "task_features",
           "task_tensors", "window_rolls"]

TASKS = ("next_step", "accompaniment")
#: Rows per voice and step: sounding, onset.
CHANNELS = 2


def task_features(task: str, voices: int = 4) -> tuple[int, int]:
    """``(in_features, out_features)`` of a task for ``voices`` voices (``CHANNELS x 128`` features each)."""
    check_choice("task", task, TASKS)
    per_voice = CHANNELS * 128
    if task == "next_step":
        return voices * per_voice, voices * per_voice
    if voices < 2:
        raise ValueError(f"accompaniment needs at least 2 voices (melody + accompaniment), got {voices}")
    return voices * per_voice, (voices - 1) * per_voice


def step_features(roll: Tensor, onsets: Tensor | None = None) -> Tensor:
    """``(..., V, 128)`` roll (and onsets) -> ``(..., V * 256)`` float features, per voice sounding then onset.

    ``onsets=None``: one onset where each run of sounding steps starts along the time axis, dim ``-3``
    (``(T, V, 128)`` or ``(B, T, V, 128)``).
    """
    if roll.dim() < 2 or roll.shape[-1] != 128:
        raise ValueError(f"step_features: roll must have shape (..., V, 128), got {tuple(roll.shape)}")
    if onsets is None:
        if roll.dim() < 3:
            raise ValueError("step_features: onsets are needed for a single step (no time axis to derive them)")
        from pe_toolkit.domains.music.scores import onsets_from_roll

        onsets = onsets_from_roll(roll.movedim(-3, 0)).movedim(0, -3)
    if onsets.shape != roll.shape:
        raise ValueError(f"step_features: onsets {tuple(onsets.shape)} must have the roll's shape {tuple(roll.shape)}")
    return torch.stack([roll.float(), onsets.float()], dim=-2).flatten(-3)


def split_step_features(features: Tensor, voices: int) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`step_features`: ``(..., voices * 256)`` -> ``(roll, onsets)``, each ``(..., voices, 128)``."""
    if features.shape[-1] != voices * CHANNELS * 128:
        raise ValueError(f"split_step_features: expected {voices} x {CHANNELS} x 128 = {voices * CHANNELS * 128} "
                         f"features, got {features.shape[-1]}")
    both = features.view(*features.shape[:-1], voices, CHANNELS, 128)
    return both[..., 0, :], both[..., 1, :]


def task_tensors(task: str, roll: Tensor, labels: Tensor, onsets: Tensor | None = None) -> dict[str, Tensor]:
    """Inputs / targets / structure of one window.

    Args:
        roll: ``(T, V, 128)``: ``T = L + 1`` steps for ``next_step``, ``L`` for ``accompaniment``.
        labels: ``(T, len(LABEL_FIELDS))``.
        onsets: ``(T, V, 128)`` note starts (:attr:`Piece.onsets`); ``None``: derived from the roll.
    Returns:
        ``{"inputs": (L, in_features) float, "targets": (L, out_features) float, "structure": (L, F) long,
        "labels": (T, len(LABEL_FIELDS)) long}`` (``labels``: the window's score labels, e.g. for MIDI export).
    """
    check_choice("task", task, TASKS)
    if roll.dim() != 3 or roll.shape[-1] != 128:
        raise ValueError(f"task_tensors: roll must have shape (T, V, 128), got {tuple(roll.shape)}")
    features = step_features(roll, onsets)  # (T, V * 256)
    if task == "next_step":
        return {"inputs": features[:-1], "targets": features[1:], "structure": add_segment_fields(labels[:-1]),
                "labels": labels.long()}
    per_voice = CHANNELS * 128
    lower = features[:, per_voice:]
    shifted = torch.cat([torch.zeros_like(lower[:1]), lower[:-1]])
    return {"inputs": torch.cat([features[:, :per_voice], shifted], dim=-1), "targets": lower,
            "structure": add_segment_fields(labels), "labels": labels.long()}


def window_rolls(task: str, inputs: Tensor, targets: Tensor, voices: int = 4) -> tuple[Tensor, Tensor]:
    """The whole window as a roll, back from its task tensors: the inverse of :func:`task_tensors`.

    Args:
        inputs, targets: ``(..., L, in_features)`` and ``(..., L, out_features)`` of one window or a batch.
        voices: voices of the roll (the top voice is the given one in ``"accompaniment"``).
    Returns:
        ``(roll, onsets)``, each ``(..., T, voices, 128)`` float: ``"next_step"``: ``T = L + 1`` (the first input
        step, then the targets); ``"accompaniment"``: ``T = L``, the given top voice above the target voices.
    """
    check_choice("task", task, TASKS)
    if task == "next_step":
        return split_step_features(torch.cat([inputs[..., :1, :], targets], dim=-2), voices)
    top = split_step_features(inputs[..., :CHANNELS * 128], 1)
    lower = split_step_features(targets, voices - 1)
    return torch.cat([top[0], lower[0]], dim=-2), torch.cat([top[1], lower[1]], dim=-2)


class WindowDataset(Dataset):
    """Fixed-length windows (stride ``stride``) cut from pieces; pieces too short for one window are skipped.

    Args:
        pieces: :class:`Piece` s with the same number of voices.
        task: ``"next_step"`` or ``"accompaniment"``.
        length: ``L``, model steps per window.
        stride: steps between window starts (default ``length``: no overlap).

    Attributes:
        skipped: names of the pieces shorter than one window.
    """

    def __init__(self, pieces: Sequence[Piece], task: str, length: int, stride: int | None = None) -> None:
        self.task = check_choice("task", task, TASKS)
        self.length = check_int("length", length)
        self.stride = check_int("stride", stride if stride is not None else length)
        need = length + 1 if task == "next_step" else length
        voices = {p.roll.shape[1] for p in pieces}
        if len(voices) > 1:
            raise ValueError(f"WindowDataset: pieces have different numbers of voices: {sorted(voices)}")
        self.pieces = list(pieces)
        self.need = need
        self.index: list[tuple[int, int]] = []
        self.skipped: list[str] = []
        for i, piece in enumerate(self.pieces):
            if len(piece) < need:
                self.skipped.append(piece.name)
                continue
            self.index += [(i, s) for s in range(0, len(piece) - need + 1, self.stride)]

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, item: int) -> dict[str, Tensor]:
        i, start = self.index[item]
        piece = self.pieces[i]
        window = slice(start, start + self.need)
        onsets = piece.onsets[window].clone()
        onsets[0] |= piece.roll[start]  # a note held into the window starts (for the model) at its first step
        return task_tensors(self.task, piece.roll[window], piece.labels[window], onsets)
