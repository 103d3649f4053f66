"""Leave-one-out examples for SASRec: left-padded windows, targets, time positions, full histories.

SASRec (Kang & McAuley 2018, arXiv:1808.09781) trains on each user's training sequence
``s_1 .. s_{n-2}`` shifted by one (input ``s_1 .. s_{n-3}``, target ``s_2 .. s_{n-2}``, a target at every
position) and scores the next item after the validation history ``s_1 .. s_{n-2}`` and the test history
``s_1 .. s_{n-1}``. Sequences longer than ``max_len`` keep their most recent ``max_len`` items; shorter
ones are padded with item 0 on the left, so the most recent item is always in the last slot.

Time positions follow TiSASRec (Li, Wang, McAuley 2020, "Time Interval Aware Self-Attention for
Sequential Recommendation", WSDM): a user's timestamps are divided by that user's smallest non-zero
gap between consecutive interactions and rounded, ``tau = round((t - t_first) / r_u)``. Here ``r_u``
comes from the training part ``s_1 .. s_{n-2}`` only (TiSASRec uses the whole sequence), so validation
and test timestamps do not shape the scale; ``r_u = 1`` when the training part has no non-zero gap.
Padding slots repeat the time of the first real item of their window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pe_toolkit.domains.recsys.data import UserSequences

__all__ = ["EvalExamples", "TrainExamples", "leave_one_out", "left_pad", "time_positions"]


def left_pad(values: np.ndarray, length: int, fill: float | int = 0) -> np.ndarray:
    """The last ``length`` entries of ``values``, padded on the left with ``fill`` to exactly ``length``."""
    values = values[-length:] if length else values[:0]
    out = np.full(length, fill, dtype=values.dtype)
    if values.size:
        out[length - values.size:] = values
    return out


def time_positions(timestamps: np.ndarray, scale_from: int) -> np.ndarray:
    """TiSASRec's personalised time positions ``round((t - t_0) / r_u)`` of one user (float64).

    Args:
        timestamps: ``(n,)`` the user's chronological timestamps.
        scale_from: ``r_u`` is the smallest non-zero gap among ``timestamps[:scale_from]`` (1 if none).
    """
    gaps = np.diff(timestamps[:scale_from])
    gaps = gaps[gaps > 0]
    scale = float(gaps.min()) if gaps.size else 1.0
    return np.round((timestamps - timestamps[0]) / scale)


@dataclass
class TrainExamples:
    """One training window per user with at least two training items.

    Attributes:
        users: ``(M,)`` long.
        items: ``(M, L)`` long inputs, left-padded with 0.
        targets: ``(M, L)`` long next items (0 where the input is padding).
        times: ``(M, L)`` float64 time positions of the inputs.
    """

    users: Tensor
    items: Tensor
    targets: Tensor
    times: Tensor

    def __len__(self) -> int:
        return int(self.users.shape[0])


@dataclass
class EvalExamples:
    """One validation or test query per user.

    Attributes:
        users: ``(M,)`` long.
        items: ``(M, L)`` long history windows, left-padded with 0.
        times: ``(M, L)`` float64 time positions of the window.
        targets: ``(M,)`` long items to rank.
        history: ``(M, H)`` long every item before the target (not only the window), right-padded with
            0; these are excluded from the ranking except the target itself.
    """

    users: Tensor
    items: Tensor
    times: Tensor
    targets: Tensor
    history: Tensor

    def __len__(self) -> int:
        return int(self.users.shape[0])


def leave_one_out(sequences: UserSequences, max_len: int = 50) -> dict[str, TrainExamples | EvalExamples]:
    """SASRec's leave-one-out examples: ``{"train": TrainExamples, "val": EvalExamples, "test": EvalExamples}``.

    Raises:
        ValueError: ``max_len < 1``, or a user with fewer than 3 interactions (see
            :meth:`UserSequences.check_splittable`).
    """
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"leave_one_out: max_len must be an int >= 1, got {max_len!r}")
    sequences.check_splittable(3)
    train: dict[str, list] = {"users": [], "items": [], "targets": [], "times": []}
    stages: dict[str, dict[str, list]] = {s: {"users": [], "items": [], "times": [], "targets": [], "history": []}
                                          for s in ("val", "test")}
    for u in range(sequences.num_users):
        items, stamps = sequences.user(u)
        n = items.shape[0]
        tau = time_positions(stamps, n - 2)
        if n - 2 >= 2:
            inputs, inputs_tau = items[: n - 3], tau[: n - 3]
            train["users"].append(u)
            train["items"].append(left_pad(inputs, max_len))
            train["targets"].append(left_pad(items[1 : n - 2], max_len))
            train["times"].append(left_pad(inputs_tau, max_len, fill=inputs_tau[-max_len:][0]))
        for stage, end in (("val", n - 2), ("test", n - 1)):
            hist, hist_tau = items[:end], tau[:end]
            part = stages[stage]
            part["users"].append(u)
            part["items"].append(left_pad(hist, max_len))
            part["times"].append(left_pad(hist_tau, max_len, fill=hist_tau[-max_len:][0]))
            part["targets"].append(int(items[end]))
            part["history"].append(hist)
    out: dict[str, TrainExamples | EvalExamples] = {
        "train": TrainExamples(
            users=torch.tensor(train["users"], dtype=torch.long),
            items=torch.from_numpy(np.stack(train["items"]) if train["items"] else np.zeros((0, max_len), np.int64)),
            targets=torch.from_numpy(
                np.stack(train["targets"]) if train["targets"] else np.zeros((0, max_len), np.int64)
            ),
            times=torch.from_numpy(np.stack(train["times"]) if train["times"] else np.zeros((0, max_len))),
        )
    }
    for stage, part in stages.items():
        width = max(h.shape[0] for h in part["history"])
        out[stage] = EvalExamples(
            users=torch.tensor(part["users"], dtype=torch.long),
            items=torch.from_numpy(np.stack(part["items"])),
            times=torch.from_numpy(np.stack(part["times"])),
            targets=torch.tensor(part["targets"], dtype=torch.long),
            history=torch.from_numpy(np.stack([np.pad(h, (0, width - h.shape[0])) for h in part["history"]])),
        )
    return out
