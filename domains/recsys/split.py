"""Chronological splits for SASRec: left-padded windows, targets, time positions, full histories.

SASRec (Kang & McAuley 2018, arXiv:1808.09781) trains on each user's training sequence
``s_1 .. s_{n-2}`` shifted by one (input ``s_1 .. s_{n-3}``, target ``s_2 .. s_{n-2}``, a target at every
position) and scores the next item after the validation history ``s_1 .. s_{n-2}`` and the test history
``s_1 .. s_{n-1}``. Sequences longer than ``max_len`` keep their most recent ``max_len`` items; shorter
ones are padded with item 0 on the left, so the most recent item is always in the last slot.

RecBole's sequential protocol (Zhao et al. 2021, arXiv:2011.01731; ``SequentialDataset.data_augmentation``)
instead makes every training prefix an example: the item ``s_t`` is the target of the input
``s_{t-L} .. s_{t-1}`` (``train_targets="prefixes"``), so no training target is lost to the window.
Ratio splits (RecBole's ``RS`` with temporal order) give every validation and test item its own query.

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

__all__ = [
    "SPLITS", "TRAIN_TARGETS", "EvalExamples", "TrainExamples", "leave_one_out", "left_pad", "sequential_split",
    "split_points", "time_positions",
]


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
    """Training windows: one per user (``"shifted"``) or one per training target (``"prefixes"``).

    Attributes:
        users: ``(M,)`` long.
        items: ``(M, L)`` long inputs, left-padded with 0.
        targets: ``(M, L)`` long next items (0 where there is no target: padding, and with ``"prefixes"``
            every slot but the last).
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
    """Validation or test queries: one per target (leave-one-out: one per user).

    Attributes:
        users: ``(M,)`` long.
        items: ``(M, L)`` long history windows, left-padded with 0.
        times: ``(M, L)`` float64 time positions of the window.
        targets: ``(M,)`` long items to rank.
        history: ``(M, H)`` long every item before the target (not only the window), right-padded with
            0; a ranking that excludes the history drops these, except the target itself.
    """

    users: Tensor
    items: Tensor
    times: Tensor
    targets: Tensor
    history: Tensor

    def __len__(self) -> int:
        return int(self.users.shape[0])


SPLITS = ("leave_one_out", "ratio")
TRAIN_TARGETS = ("shifted", "prefixes")


def _check_ratios(ratios) -> tuple[float, float, float]:
    if not isinstance(ratios, (list, tuple)) or len(ratios) != 3:
        raise ValueError(f"sequential_split: ratios must be three numbers (train, validation, test), got {ratios!r}")
    values = []
    for r in ratios:
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0.0 < float(r) < 1.0:
            raise ValueError(f"sequential_split: ratios must lie in (0, 1), got {ratios!r}")
        values.append(float(r))
    if abs(sum(values) - 1.0) > 1e-6:
        raise ValueError(f"sequential_split: ratios must sum to 1, got {ratios!r} (sum {sum(values):g})")
    return values[0], values[1], values[2]


def split_points(n: int, split: str = "leave_one_out", ratios=(0.8, 0.1, 0.1)) -> tuple[int, int]:
    """``(train_end, val_end)`` of a user's ``n`` chronological items: training ``[0, train_end)``,
    validation targets ``[train_end, val_end)``, test targets ``[val_end, n)``.

    ``"leave_one_out"``: ``(n - 2, n - 1)``. ``"ratio"`` (RecBole's ``RS`` split with temporal order,
    grouped by user): validation and test each get ``floor(ratio * n)`` items, at least one; training the
    rest, at least one.

    Raises:
        ValueError: an unknown split, bad ratios, or ``n`` too small for one item per part.
    """
    if split not in SPLITS:
        raise ValueError(f"sequential_split: split must be one of {SPLITS}, got {split!r}")
    if split == "leave_one_out":
        return n - 2, n - 1
    _, val_ratio, test_ratio = _check_ratios(ratios)
    n_test = max(1, int(test_ratio * n))
    n_val = max(1, int(val_ratio * n))
    return n - n_val - n_test, n - n_test


def sequential_split(
    sequences: UserSequences,
    *,
    max_len: int = 50,
    split: str = "leave_one_out",
    ratios=(0.8, 0.1, 0.1),
    train_targets: str = "shifted",
) -> dict[str, TrainExamples | EvalExamples]:
    """Chronological train / validation / test examples: ``{"train", "val", "test"}``.

    Args:
        sequences: chronological user sequences.
        max_len: window length ``L``.
        split: ``"leave_one_out"`` (the last item is the test target, the one before the validation target)
            or ``"ratio"`` (each user's first / middle / last ``ratios`` of items; every validation and
            test item is a target, after its whole earlier history), see :func:`split_points`.
        ratios: ``(train, validation, test)`` fractions of ``"ratio"``.
        train_targets: ``"shifted"`` (SASRec, Kang & McAuley 2018: one window per user, the training part
            shifted by one, a target at every position; a part longer than ``L + 1`` keeps only its last
            ``L`` targets) or ``"prefixes"`` (RecBole's sequential data augmentation, Zhao et al. 2021:
            every training item ``s_t``, ``t >= 2``, is the target of its own example whose input is the last
            ``L`` items before it; the target sits in the last slot).

    Raises:
        ValueError: ``max_len < 1``, an unknown split or ``train_targets``, bad ratios, or a user with
            fewer than 3 interactions (see :meth:`UserSequences.check_splittable`).
    """
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"leave_one_out: max_len must be an int >= 1, got {max_len!r}")
    if train_targets not in TRAIN_TARGETS:
        raise ValueError(f"sequential_split: train_targets must be one of {TRAIN_TARGETS}, got {train_targets!r}")
    split_points(3, split, ratios)  # validates split and ratios
    sequences.check_splittable(3)
    train: dict[str, list] = {"users": [], "items": [], "targets": [], "times": []}
    stages: dict[str, dict[str, list]] = {s: {"users": [], "items": [], "times": [], "targets": [], "history": []}
                                          for s in ("val", "test")}
    for u in range(sequences.num_users):
        items, stamps = sequences.user(u)
        n = items.shape[0]
        train_end, val_end = split_points(n, split, ratios)
        tau = time_positions(stamps, train_end)
        if train_targets == "shifted" and train_end >= 2:
            inputs, inputs_tau = items[: train_end - 1], tau[: train_end - 1]
            train["users"].append(np.array([u]))
            train["items"].append(left_pad(inputs, max_len)[None])
            train["targets"].append(left_pad(items[1:train_end], max_len)[None])
            train["times"].append(left_pad(inputs_tau, max_len, fill=inputs_tau[-max_len:][0])[None])
        elif train_targets == "prefixes" and train_end >= 2:
            # row t - 1 of the sliding windows over the left-padded part is items[t - L : t], the input of target t
            windows = np.lib.stride_tricks.sliding_window_view(
                np.concatenate([np.zeros(max_len, items.dtype), items[: train_end - 1]]), max_len)[1:]
            # padding slots repeat the time of the window's first real item, which is item 0 wherever there is padding
            time_windows = np.lib.stride_tricks.sliding_window_view(
                np.concatenate([np.full(max_len, tau[0]), tau[: train_end - 1]]), max_len)[1:]
            targets = np.zeros_like(windows)
            targets[:, -1] = items[1:train_end]
            train["users"].append(np.full(windows.shape[0], u))
            train["items"].append(windows)
            train["targets"].append(targets)
            train["times"].append(time_windows)
        for stage, (lo, hi) in (("val", (train_end, val_end)), ("test", (val_end, n))):
            part = stages[stage]
            for end in range(lo, hi):
                hist, hist_tau = items[:end], tau[:end]
                part["users"].append(u)
                part["items"].append(left_pad(hist, max_len))
                part["times"].append(left_pad(hist_tau, max_len, fill=hist_tau[-max_len:][0]))
                part["targets"].append(int(items[end]))
                part["history"].append(hist)

    def stack(parts: list[np.ndarray], dtype) -> Tensor:
        return torch.from_numpy(np.concatenate(parts).astype(dtype) if parts else np.zeros((0, max_len), dtype))

    out: dict[str, TrainExamples | EvalExamples] = {
        "train": TrainExamples(
            users=torch.from_numpy(np.concatenate(train["users"]).astype(np.int64) if train["users"]
                                   else np.zeros(0, np.int64)),
            items=stack(train["items"], np.int64),
            targets=stack(train["targets"], np.int64),
            times=stack(train["times"], np.float64),
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


def leave_one_out(
    sequences: UserSequences, max_len: int = 50, *, train_targets: str = "shifted"
) -> dict[str, TrainExamples | EvalExamples]:
    """SASRec's leave-one-out examples: ``{"train": TrainExamples, "val": EvalExamples, "test": EvalExamples}``
    (:func:`sequential_split` with ``split="leave_one_out"``).

    Raises:
        ValueError: ``max_len < 1``, or a user with fewer than 3 interactions (see
            :meth:`UserSequences.check_splittable`).
    """
    return sequential_split(sequences, max_len=max_len, split="leave_one_out", train_targets=train_targets)
