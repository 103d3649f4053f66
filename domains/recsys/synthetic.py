"""A synthetic interaction log whose next item depends on a *contextual* count.

The case CAPE (Yuan, Cai, Dong 2025, arXiv:2502.09027) and CoPE (Golovneva et al. 2024,
arXiv:2405.18719) target: which earlier interaction matters is fixed by counting only some kinds of
interactions, not by the plain distance in the sequence.

Items are of two kinds: ``num_signal_items`` *signal* items (raw ids ``"1" .. "num_signal_items"``) and
``num_filler_items`` *filler* items (the following raw ids); signal items get the smaller indices in the
resulting :class:`~pe_toolkit.domains.recsys.data.Interactions`. Each user's sequence is generated step by
step; at every step

* with probability ``filler_prob`` the user consumes a uniformly random filler item;
* otherwise a signal step: a *recall* (probability ``recall_prob``, once the user has at least ``lag``
  signal items) re-consumes the signal item exactly ``lag`` signal items back, counting signal items
  only; or else a fresh uniformly random signal item.

The user's last two steps (the validation and test targets of leave-one-out) are always recalls. The
number of fillers between the target and the signal it copies is random (geometric), so the copied
item sits at a varying absolute distance but at a fixed contextual position: ``lag`` signal items
back. Timestamps increase with independent exponential gaps (they carry no information).
"""

from __future__ import annotations

import numpy as np

from pe_toolkit.domains.recsys.data import Interactions

__all__ = ["contextual_count_log"]


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"contextual_count_log: {name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"contextual_count_log: {name} must be >= {minimum}, got {value}")
    return value


def _check_prob(name: str, value, *, open_right: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"contextual_count_log: {name} must be a number, got {type(value).__name__}")
    ok = 0.0 <= value < 1.0 if open_right else 0.0 <= value <= 1.0
    if not ok:
        raise ValueError(f"contextual_count_log: {name} must be in [0, {'1)' if open_right else '1]'}, got {value}")
    return float(value)


def contextual_count_log(
    num_users: int = 1000,
    *,
    length: tuple[int, int] = (20, 40),
    num_signal_items: int = 100,
    num_filler_items: int = 50,
    lag: int = 3,
    filler_prob: float = 0.5,
    recall_prob: float = 0.5,
    seed: int = 0,
) -> Interactions:
    """Generate the log (see the module docstring).

    Args:
        num_users: users (each one sequence).
        length: inclusive range of sequence lengths, drawn uniformly per user; the minimum must leave
            room for ``lag`` signal items before the two final recalls (``>= lag + 2``).
        num_signal_items, num_filler_items: item counts of each kind.
        lag: the contextual distance of a recall, in signal items.
        filler_prob: probability that a step is a filler.
        recall_prob: probability that a signal step (after the first ``lag`` signals) is a recall.
        seed: NumPy seed; equal arguments give equal logs.

    Returns:
        :class:`~pe_toolkit.domains.recsys.data.Interactions` with user ids ``"0" ..``, item ids ``"1" ..`` (signal
        items first) and float timestamps.
    """
    _check_int("num_users", num_users, 1)
    _check_int("lag", lag, 1)
    _check_int("num_signal_items", num_signal_items, lag + 1)
    _check_int("num_filler_items", num_filler_items, 1)
    if not (isinstance(length, (tuple, list)) and len(length) == 2):
        raise TypeError(f"contextual_count_log: length must be a (min, max) pair, got {length!r}")
    low, high = (_check_int(f"length[{i}]", v, 1) for i, v in enumerate(length))
    if low < lag + 2 or high < low:
        raise ValueError(f"contextual_count_log: length must satisfy {lag + 2} <= min <= max, got {tuple(length)}")
    filler_prob = _check_prob("filler_prob", filler_prob, open_right=True)
    recall_prob = _check_prob("recall_prob", recall_prob, open_right=False)
    rng = np.random.default_rng(seed)
    users, items, times = [], [], []
    for u in range(num_users):
        n = int(rng.integers(low, high + 1))
        body = n - 2
        kinds = rng.random(body) < filler_prob  # True = filler
        # the first `lag` signal steps must exist before the final recalls: force them if missing
        signal_slots = np.flatnonzero(~kinds)
        if signal_slots.size < lag:
            kinds[np.flatnonzero(kinds)[: lag - signal_slots.size]] = False
        signals: list[int] = []
        sequence: list[int] = []
        for step in range(n):
            if step < body and kinds[step]:
                sequence.append(num_signal_items + 1 + int(rng.integers(num_filler_items)))
                continue
            recall = step >= body or (len(signals) >= lag and rng.random() < recall_prob)
            item = signals[-lag] if recall else 1 + int(rng.integers(num_signal_items))
            signals.append(item)
            sequence.append(item)
        users += [u] * n
        items += sequence
        times += list(np.cumsum(rng.exponential(3600.0, n)).round())
    return Interactions.from_arrays(users, items, times)
