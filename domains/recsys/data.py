"""Interaction logs for sequential recommendation: loading, chronological sequences, leave-one-out split.

MovieLens-100k (Harper & Konstan 2015, "The MovieLens Datasets: History and Context", ACM TiiS 5(4)) is
read offline from the copy that ships in the ``recbole`` wheel
(``recbole/dataset_example/ml-100k/ml-100k.inter``); the package is located with
``importlib.util.find_spec`` and never imported. A user's own file may be

* RecBole atomic ``.inter`` (Zhao et al. 2021, RecBole, arXiv:2011.01731): tab separated, a header of
  ``name:type`` fields that includes the user, item and (optional) time fields, by default ``user_id``,
  ``item_id`` and ``timestamp`` (any names: ``user_field=``, ``item_field=``, ``time_field=``); token ids
  may be any non-empty strings;
* MovieLens ``u.data`` (100k): ``user <tab> item <tab> rating <tab> timestamp``, no header, integer ids;
* MovieLens ``ratings.dat`` (1M / 10M): ``user::item::rating::timestamp``, integer ids.

Every interaction is kept (ratings are implicit feedback, as in SASRec, Kang & McAuley 2018,
arXiv:1808.09781). Each user's interactions are ordered by timestamp; equal timestamps keep their
order in the file (a stable sort): in MovieLens-100k 415 of 943 users have their last two interactions
at the same second, so the tie-break decides which one is the test item.

Files are UTF-8 by default (a byte-order mark is skipped); ``encoding=`` reads any other codec, and
bytes that do not decode raise a ``ValueError`` naming the file, the line and the byte.
:func:`filter_kcore` keeps the k-core of users and items (RecBole's interaction-count filters).

Leave-one-out (SASRec): for a user with items ``s_1 .. s_n`` (``n >= 3``), ``s_n`` is the test target
(history ``s_1 .. s_{n-1}``), ``s_{n-1}`` the validation target (history ``s_1 .. s_{n-2}``) and
``s_1 .. s_{n-2}`` the training sequence.

Item indices are ``1 .. num_items`` (``0`` is padding); user indices ``0 .. num_users - 1``.
"""

from __future__ import annotations

import dataclasses
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
    "filter_kcore",
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
        has_timestamps: False when the file had no timestamp column (``timestamps`` are then the
            line index, so chronology is file order).
    """

    users: np.ndarray
    items: np.ndarray
    timestamps: np.ndarray
    user_ids: tuple[str, ...]
    item_ids: tuple[str, ...]
    has_timestamps: bool = True

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


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _read_text(path: Path, encoding: str) -> str:
    """The file's text: a UTF-8 byte-order mark is dropped, a UTF-16 one selects UTF-16 (for ``"utf-8"``)."""
    raw = path.read_bytes()
    codec = encoding
    if encoding.lower().replace("_", "-") in ("utf-8", "utf8"):
        codec = "utf-16" if raw.startswith(_UTF16_BOMS) else "utf-8-sig"
    try:
        text = raw.decode(codec)
    except LookupError:
        raise ValueError(f"load_interactions: encoding {encoding!r} is not a known text encoding") from None
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ValueError(
            f"load_interactions: {path}: line {line} is not valid {encoding} (byte {error.start}: "
            f"{raw[error.start:error.start + 1]!r}, {error.reason}); pass encoding= the file's encoding, "
            "e.g. encoding='latin-1' or 'cp1252'"
        ) from None
    return text[1:] if text.startswith("\ufeff") else text


def load_interactions(
    path: str | os.PathLike | None = None,
    *,
    format: str = "auto",
    user_field: str = "user_id",
    item_field: str = "item_id",
    time_field: str | None = "timestamp",
    encoding: str = "utf-8",
) -> Interactions:
    """Read an interaction file (default: MovieLens-100k from the recbole wheel).

    Args:
        path: the file; ``None`` reads :func:`movielens_100k_path`.
        format: ``"recbole"`` (``.inter``), ``"movielens_tab"`` (``u.data``), ``"movielens_dat"``
            (``ratings.dat``) or ``"auto"``: by suffix, ``.inter`` -> recbole, ``.dat`` -> movielens_dat,
            anything else -> movielens_tab.
        user_field, item_field, time_field: header names of the user, item and time columns of a RecBole
            file (RecBole's ``USER_ID_FIELD``, ``ITEM_ID_FIELD``, ``TIME_FIELD``; the ``:type`` suffix of a
            header entry is not part of its name). ``time_field=None``: the file has no timestamp (or it
            is ignored); each user's interactions keep their file order, and the timestamps become the
            line index (0, 1, 2, ...; ``Interactions.has_timestamps`` is False). The MovieLens formats
            have fixed columns: only ``time_field=None`` applies there (the 4th column is then ignored).
        encoding: text encoding. With ``"utf-8"`` (default) a UTF-8 byte-order mark is skipped and a
            UTF-16 byte-order mark reads the file as UTF-16; any codec Python knows may be named
            (``"latin-1"``, ``"cp1252"``, ...).

    Returns:
        the :class:`Interactions`, in file order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an unknown format or encoding; bytes that are not valid in ``encoding``; a missing
            header column; a line with the wrong number of fields; an empty id; a non-integer id in a
            MovieLens file; a timestamp that is not a finite number; a file without interactions.
            Messages name the file and the line.
    """
    if format not in FORMATS:
        raise ValueError(f"load_interactions: format must be one of {FORMATS}, got {format!r}")
    for name, value in (("user_field", user_field), ("item_field", item_field)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"load_interactions: {name} must be a non-empty string, got {value!r}")
    if time_field is not None and (not isinstance(time_field, str) or not time_field):
        raise ValueError(f"load_interactions: time_field must be a non-empty string or None, got {time_field!r}")
    if len({user_field, item_field, time_field} - {None}) != 2 + (time_field is not None):
        raise ValueError(f"load_interactions: user_field, item_field and time_field must differ, got "
                         f"{user_field!r}, {item_field!r}, {time_field!r}")
    if not isinstance(encoding, str) or not encoding:
        raise ValueError(f"load_interactions: encoding must be a non-empty string, got {encoding!r}")
    path = movielens_100k_path() if path is None else Path(os.fspath(path))
    if not path.is_file():
        raise FileNotFoundError(f"load_interactions: no such file {str(path)!r}")
    kind = _detect_format(path) if format == "auto" else format
    lines = _read_text(path, encoding).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    users: list[str] = []
    items: list[str] = []
    times: list[float] = []
    if kind == "recbole":
        if not lines or not lines[0].strip():
            raise ValueError(f"load_interactions: {path} is empty (a RecBole .inter file needs a header line)")
        names = [field.split(":", 1)[0].strip() for field in lines[0].split("\t")]
        wanted = [user_field, item_field] + ([time_field] if time_field is not None else [])
        missing = [c for c in wanted if c not in names]
        if missing:
            hint = "" if time_field is None or missing != [time_field] else (
                "; a file without timestamps: pass time_field=None (file order is then the chronology)")
            raise ValueError(
                f"load_interactions: {path}: header lacks column(s) {missing}; found {names} "
                f"(fields asked for: user_field={user_field!r}, item_field={item_field!r}, "
                f"time_field={time_field!r}){hint}"
            )
        duplicated = sorted({c for c in wanted if names.count(c) > 1})
        if duplicated:
            raise ValueError(f"load_interactions: {path}: header names column(s) {duplicated} more than once: {names}")
        columns = [names.index(c) for c in wanted]
        width, sep, first, integer_ids = len(names), "\t", 2, False
        body = lines[1:]
    else:
        columns = [0, 1, 3] if time_field is not None else [0, 1]
        width, sep, first, integer_ids = 4, ("::" if kind == "movielens_dat" else "\t"), 1, True
        body = lines
    for lineno, line in enumerate(body, start=first):
        if not line.strip():
            continue
        fields = line.split(sep)
        where = f"load_interactions: {path}, line {lineno}"
        if len(fields) != width:
            raise ValueError(
                f"{where}: expected {width} fields separated by {sep!r}, got {len(fields)}: {line!r}"
            )
        values = [fields[c].strip() for c in columns]
        for name, value in (("user id", values[0]), ("item id", values[1])):
            if not value:
                raise ValueError(f"{where}: empty {name}")
            if integer_ids and not _INT.fullmatch(value):
                raise ValueError(f"{where}: {name} must be an integer in this MovieLens format, got {value!r}")
        if time_field is not None:
            stamp = values[2]
            try:
                t = float(stamp)
            except ValueError:
                raise ValueError(f"{where}: timestamp must be a number, got {stamp!r}") from None
            if not np.isfinite(t):
                raise ValueError(f"{where}: timestamp must be finite, got {stamp!r}")
        else:
            t = float(len(times))
        users.append(values[0])
        items.append(values[1])
        times.append(t)
    if not users:
        raise ValueError(f"load_interactions: {path} holds no interactions")
    log = Interactions.from_arrays(users, items, times)
    return log if time_field is not None else dataclasses.replace(log, has_timestamps=False)


def filter_kcore(interactions: Interactions, *, user_core: int = 5, item_core: int = 5) -> Interactions:
    """The k-core of a log: drop users with fewer than ``user_core`` and items with fewer than ``item_core``
    interactions, repeatedly, until every remaining user and item has enough (RecBole's
    ``user_inter_num_interval`` / ``item_inter_num_interval`` lower bounds, applied until stable).

    Interactions keep their file order; users and items are renumbered (ids in sorted order, as
    :meth:`Interactions.from_arrays`).

    Raises:
        ValueError: a core below 1, or nothing left.
    """
    if not isinstance(interactions, Interactions):
        raise TypeError(f"filter_kcore: interactions must be Interactions, got {type(interactions).__name__}")
    for name, value in (("user_core", user_core), ("item_core", item_core)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"filter_kcore: {name} must be an int >= 1, got {value!r}")
    keep = np.ones(len(interactions), dtype=bool)
    while True:
        user_counts = np.bincount(interactions.users[keep], minlength=interactions.num_users)
        item_counts = np.bincount(interactions.items[keep], minlength=interactions.num_items + 1)
        drop = keep & ((user_counts[interactions.users] < user_core) | (item_counts[interactions.items] < item_core))
        if not drop.any():
            break
        keep &= ~drop
    if not keep.any():
        raise ValueError(f"filter_kcore: no interaction survives the {user_core}-core of users and the "
                         f"{item_core}-core of items")
    users = np.asarray(interactions.user_ids, dtype=object)[interactions.users[keep]]
    items = np.asarray(interactions.item_ids, dtype=object)[interactions.items[keep] - 1]
    out = Interactions.from_arrays(users.tolist(), items.tolist(), interactions.timestamps[keep])
    return dataclasses.replace(out, has_timestamps=interactions.has_timestamps)


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
