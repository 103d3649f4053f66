"""Training windows for the two tasks (Lightning data module: :mod:`pe_toolkit.domains.music.lightning_module`).

Tasks (Agarwal et al. 2024, arXiv:2402.13301, adapted to four-part chorales):

* ``"next_step"``: next-timestep prediction. Inputs are the flattened roll of steps ``0 .. L-1``
  (``V * 128`` features), targets the roll of steps ``1 .. L``, positions the structure of steps ``0 .. L-1``.
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

__all__ = ["TASKS", "WindowDataset", "task_features", "task_tensors"]

TASKS = ("next_step", "accompaniment")


def task_features(task: str, voices: int = 4) -> tuple[int, int]:
    """``(in_features, out_features)`` of a task for ``voices`` voices of 128 pitches."""
    check_choice("task", task, TASKS)
    if task == "next_step":
        return voices * 128, voices * 128
    if voices < 2:
        raise ValueError(f"accompaniment needs at least 2 voices (melody + accompaniment), got {voices}")
    return voices * 128, (voices - 1) * 128


def task_tensors(task: str, roll: Tensor, labels: Tensor) -> dict[str, Tensor]:
    """Inputs / targets / structure of one window.

    Args:
        roll: ``(T, V, 128)``: ``T = L + 1`` steps for ``next_step``, ``L`` for ``accompaniment``.
        labels: ``(T, len(LABEL_FIELDS))``.
    Returns:
        ``{"inputs": (L, in_features) float, "targets": (L, out_features) float, "structure": (L, F) long,
        "labels": (T, len(LABEL_FIELDS)) long}`` (``labels``: the window's score labels, e.g. for MIDI export).
    """
    check_choice("task", task, TASKS)
    roll = roll.float()
    if task == "next_step":
        flat = roll.flatten(-2)
        return {"inputs": flat[:-1], "targets": flat[1:], "structure": add_segment_fields(labels[:-1]),
                "labels": labels.long()}
    lower = roll[:, 1:].flatten(-2)
    shifted = torch.cat([torch.zeros_like(lower[:1]), lower[:-1]])
    return {"inputs": torch.cat([roll[:, 0], shifted], dim=-1), "targets": lower,
            "structure": add_segment_fields(labels), "labels": labels.long()}


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
        return task_tensors(self.task, piece.roll[start:start + self.need], piece.labels[start:start + self.need])
