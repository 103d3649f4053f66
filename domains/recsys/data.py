"""Interaction logs for sequential recommendation: loading, chronological sequences, leave-one-out split.

MovieLens-100k (Harper & Konstan 2015, "The MovieLens Datasets: History and Context", ACM TiiS 5(4)) is
read offline from the copy that ships in the ``recbole`` wheel
(``recbole/dataset_example/ml-100k/ml-100k.inter``); the package is located with
``importlib.util.find_spec`` and never imported. A user's own file may be

* RecBole atomic ``.inter`` (Zhao et al. 2021, RecBole, arXiv:2011.01731): tab separated, a header of
  ``name:type`` fields that includes ``user_id``, ``item_id`` and ``timestamp``; token ids may be any
  non-empty strings;
* MovieLens ``u.data`` (100k): ``user <tab> item <tab> rating <tab> timestamp``, no header, integer ids;
* MovieLens ``ratings.dat`` (1M / 10M): ``user::item::rating::timestamp``, integer ids.

Every interaction is kept (ratings are implicit feedback, as in SASRec, Kang & McAuley 2018,
arXiv:1808.09781). Each user's interactions are ordered by timestamp; equal timestamps keep their
order in the file (a stable sort): in MovieLens-100k 415 of 943 users have their last two interactions
at the same second, so the tie-break decides which one is the test item.

Leave-one-out (SASRec): for a user with items ``s_1 .. s_n`` (``n >= 3``), ``s_n`` is the test target
(history ``s_1 .. s_{n-1}``), ``s_{n-1}`` the validation target (history ``s_1 .. s_{n-2}``) and
``s_1 .. s_{n-2}`` the training sequence.

Item indices are ``1 .. num_items`` (``0`` is padding); user indices ``0 .. num_users - 1``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "FORMATS",
    "Interactions",
    "UserSequences",
    "build_sequences",
    "load_interactions",
    "movielens_100k_path",
]

FORMATS = ("auto", "recbole", "movielens_tab", "movielens_dat")
_INT = re.compile(r"[+-]?\d+")
_REQUIRED = ("user_id", "item_id", "timestamp")


def movielens_100k_path() -> Path:
    """Path of ``ml-100k.inter`` inside the installed ``recbole`` wheel (recbole is not imported).

    Raises:
        FileNotFoundError: recbole is not installed (``pip install --no-deps recbole==1.2.1``) or the
            wheel lacks the file.
    """
    spec = importlib.util.find_spec("recbole")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "MovieLens-100k is read from the recbole wheel, which is not installed: "
            "run `pip install --no-deps recbole==1.2.1` (only its data file is used)"
        )
    for root in spec.submodule_search_locations:
        path = Path(root) / "dataset_example" / "ml-100k" / "ml-100k.inter"
        if path.is_file():
            return path
    raise FileNotFoundError(f"no dataset_example/ml-100k/ml-100k.inter under {list(spec.submodule_search_locations)}")


@dataclass(frozen=True)
class Interactions:
    """A log of interactions in file order.

    Attributes:
        users: ``(N,)`` int64 user index in ``[0, num_users)``.
        items: ``(N,)`` int64 item index in ``[1, num_items]`` (0 is reserved for padding).
        timestamps: ``(N,)`` float64.
        user_ids: original id of each user index.
        item_ids: original id of each item index ``i`` at ``item_ids[i - 1]``.
    """

    users: np.ndarray
    items: np.ndarray
    timestamps: np.ndarray
    user_ids: tuple[str, ...]
    item_ids: tuple[str, ...]

    @property
    def num_users(self) -> int:
        return len(self.user_ids)

    @property
    def num_items(self) -> int:
        return len(self.item_ids)

    def __len__(self) -> int:
        return int(self.users.shape[0])

    @classmethod
    def from_arrays(cls, users, items, timestamps) -> Interactions:
        """Build from raw id sequences (any hashable ids) and numeric timestamps, in the given order.

        Ids are mapped to indices in sorted order (numerically when every id is an integer).

        Raises:
            ValueError: different lengths, no interactions, or non-finite timestamps.
        """
        users, items = [str(u) for u in users], [str(i) for i in items]
        timestamps = np.asarray(timestamps, dtype=np.float64).reshape(-1)
        if not (len(users) == len(items) == timestamps.shape[0]):
            raise ValueError(
                f"Interactions: users, items and timestamps must have the same length, got "
                f"{len(users)}, {len(items)}, {timestamps.shape[0]}"
            )
        if not users:
            raise ValueError("Interactions: no interactions")
        if not np.isfinite(timestamps).all():
            raise ValueError("Interactions: timestamps must be finite numbers")
        user_ids, user_index = _index(users)
        item_ids, item_index = _index(items)
        return cls(user_index, item_index + 1, timestamps, user_ids, item_ids)


def _index(ids: list[str]) -> tuple[tuple[str, ...], np.ndarray]:
    unique = set(ids)
    key = (lambda s: (int(s), s)) if all(_INT.fullmatch(s) for s in unique) else None
    ordered = tuple(sorted(unique, key=key))
    lookup = {s: i for i, s in enumerate(ordered)}
    return ordered, np.fromiter((lookup[s] for s in ids), dtype=np.int64, count=len(ids))


def _detect_format(path: Path) -> str:
    if path.suffix == ".inter":
        return "recbole"
    if path.suffix == ".dat":
        return "movielens_dat"
    return "movielens_tab"


def load_interactions(path: str | os.PathLike | None = None, *, format: str = "auto") -> Interactions:
    """Read an interaction file (default: MovieLens-100k from the recbole wheel).

    Args:
        path: the file; ``None`` reads :func:`movielens_100k_path`.
        format: ``"recbole"`` (``.inter``), ``"movielens_tab"`` (``u.data``), ``"movielens_dat"``
            (``ratings.dat``) or ``"auto"``: by suffix, ``.inter`` -> recbole, ``.dat`` -> movielens_dat,
            anything else -> movielens_tab.

    Returns:
        the :class:`Interactions`, in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an unknown format; a missing header column; a line with the wrong number of
            fields; an empty id; a non-integer id in a MovieLens file; a timestamp that is not a
            finite number; a file without interactions. Messages name the file and the line.
    """
    if format not in FORMATS:
        raise ValueError(f"load_interactions: format must be one of {FORMATS}, got {format!r}")
    path = movielens_100k_path() if path is None else Path(os.fspath(path))
    if not path.is_file():
        raise FileNotFoundError(f"load_interactions: no such file {str(path)!r}")
    kind = _detect_format(path) if format == "auto" else format
    users: list[str] = []
    items: list[str] = []
    times: list[float] = []
    with path.open(encoding="utf-8") as f:
        if kind == "recbole":
            header = f.readline().rstrip("\r\n")
            if not header:
                raise ValueError(f"load_interactions: {path} is empty (a RecBole .inter file needs a header line)")
            names = [field.split(":", 1)[0].strip() for field in header.split("\t")]
            missing = [c for c in _REQUIRED if c not in names]
            if missing:
                raise ValueError(
                    f"load_interactions: {path}: header lacks column(s) {missing}; found {names} "
                    f"(a RecBole .inter file needs {list(_REQUIRED)})"
                )
            columns = [names.index(c) for c in _REQUIRED]
            width, sep, first, integer_ids = len(names), "\t", 2, False
        else:
            columns = [0, 1, 3]
            width, sep, first, integer_ids = 4, ("::" if kind == "movielens_dat" else "\t"), 1, True
        for lineno, line in enumerate(f, start=first):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split(sep)
            where = f"load_interactions: {path}, line {lineno}"
            if len(fields) != width:
                raise ValueError(
                    f"{where}: expected {width} fields separated by {sep!r}, got {len(fields)}: {line!r}"
                )
            user, item, stamp = (fields[c].strip() for c in columns)
            for name, value in (("user id", user), ("item id", item)):
                if not value:
                    raise ValueError(f"{where}: empty {name}")
                if integer_ids and not _INT.fullmatch(value):
                    raise ValueError(f"{where}: {name} must be an integer in this MovieLens format, got {value!r}")
            try:
                t = float(stamp)
            except ValueError:
                raise ValueError(f"{where}: timestamp must be a number, got {stamp!r}") from None
            if not np.isfinite(t):
                raise ValueError(f"{where}: timestamp must be finite, got {stamp!r}")
            users.append(user)
            items.append(item)
            times.append(t)
    if not users:
        raise ValueError(f"load_interactions: {path} holds no interactions")
    return Interactions.from_arrays(users, items, times)


@dataclass(frozen=True)
class UserSequences:
    """Every user's interactions in chronological order, stored flat (a ragged array).

    User ``u``'s items are ``items[offsets[u]:offsets[u + 1]]`` (and likewise ``timestamps``).

    Attributes:
        items: ``(N,)`` int64 item indices (``1 .. num_items``).
        timestamps: ``(N,)`` float64.
        offsets: ``(num_users + 1,)`` int64.
        num_items: number of items (the largest valid index).
    """

    items: np.ndarray
    timestamps: np.ndarray
    offsets: np.ndarray
    num_items: int

    @property
    def num_users(self) -> int:
        return int(self.offsets.shape[0] - 1)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def user(self, u: int) -> tuple[np.ndarray, np.ndarray]:
        """``(items, timestamps)`` of user ``u`` in chronological order."""
        start, end = int(self.offsets[u]), int(self.offsets[u + 1])
        return self.items[start:end], self.timestamps[start:end]

    def check_splittable(self, min_length: int = 3) -> None:
        """Raise ValueError naming the users with fewer than ``min_length`` interactions.

        Leave-one-out needs three per user: one to train on, one to validate, one to test.
        """
        short = np.flatnonzero(self.lengths < min_length)
        if short.size:
            shown = ", ".join(f"user {int(u)} ({int(self.lengths[u])})" for u in short[:5])
            raise ValueError(
                f"leave-one-out needs >= {min_length} interactions per user; {short.size} user(s) have fewer: "
                f"{shown}{' ...' if short.size > 5 else ''}; drop them first (build_sequences(min_length=...))"
            )


def build_sequences(interactions: Interactions, *, min_length: int | None = None) -> UserSequences:
    """Order each user's interactions by timestamp, ties broken by file order (stable).

    Args:
        interactions: the log.
        min_length: if given, drop users with fewer interactions (and renumber the rest in order);
            ``None`` keeps every user.

    Returns:
        the :class:`UserSequences` (users keep their indices unless ``min_length`` drops some).

    Raises:
        ValueError: ``min_length`` leaves no user.
    """
    order = np.lexsort((np.arange(len(interactions)), interactions.timestamps, interactions.users))
    users = interactions.users[order]
    counts = np.bincount(users, minlength=interactions.num_users)
    items, times = interactions.items[order], interactions.timestamps[order]
    if min_length is not None:
        if isinstance(min_length, bool) or not isinstance(min_length, int) or min_length < 1:
            raise ValueError(f"build_sequences: min_length must be an int >= 1 or None, got {min_length!r}")
        keep_user = counts >= min_length
        if not keep_user.any():
            raise ValueError(f"build_sequences: no user has >= {min_length} interactions")
        keep = keep_user[users]
        items, times, counts = items[keep], times[keep], counts[keep_user]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return UserSequences(items, times, offsets, interactions.num_items)
