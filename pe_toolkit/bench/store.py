"""The run store: one JSON file per finished run, safe under faults and concurrent writers.

``<folder>/<key>.json`` holds ``{"spec", "row", "written"}``. Every write goes through
:func:`pe_toolkit.atomic.atomic_write` (unique temporary name, flush, fsync, rename), so a reader sees
the old file or the new one, never half of one. Before running a key, a process *claims* it:
``<key>.claim`` created with ``O_CREAT | O_EXCL`` (exactly one process succeeds) holding its host, pid
and time; the claim goes when the run is saved or fails. A claim whose process is gone (same host,
pid not alive) is stale and taken over; a claim from another host counts as live for ``stale_after_s``
(its process cannot be checked from here). So two processes on one folder never write the same run
twice and never lose one: the second waits for the first's file and reuses it.

A run file is reused only when its stored spec equals the spec asked for (settings, seed, device,
thread count: everything the runner puts into a spec), after a JSON round trip; with ``resume=False``
only files written since this store was opened (by a concurrent process) are reused. A damaged or
incomplete file is reported by its path (:attr:`RunStore.damaged`, and on stderr) and run again.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

from pe_toolkit.atomic import atomic_write

__all__ = ["RunStore", "json_default", "jsonable", "results_folder"]


def results_folder(path: Path, what: str = "out") -> Path:
    """Create the folder ``path`` (and its parents) for results; ``ValueError`` naming ``what`` and ``path`` when it
    cannot be one (a file stands there, no permission, a read-only disk)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{what} {str(path)!r} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"{what} {str(path)!r} cannot be created as a folder: {error.strerror or error}") from error
    return path


def json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # torch / numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot serialise {type(value).__name__} value {value!r} to JSON")


def jsonable(value: Any) -> Any:
    """``value`` after a JSON round trip (tuples become lists, NaN stays NaN), as stored specs compare."""
    return json.loads(json.dumps(value, default=json_default))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunStore:
    """Finished runs of one benchmark preset (see the module docstring).

    Example:
        >>> import tempfile
        >>> store = RunStore(tempfile.mkdtemp(), resume=True)
        >>> store.claim("a")
        True
        >>> store.save("a", {"steps": 2}, {"loss": 0.5})
        >>> store.load("a", {"steps": 2}), store.load("a", {"steps": 3})
        ({'loss': 0.5}, None)
    """

    def __init__(self, folder: str | os.PathLike, *, resume: bool, stale_after_s: float = 6 * 3600) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.resume = bool(resume)
        self.opened = time.time()
        self.stale_after_s = float(stale_after_s)
        self.damaged: list[str] = []
        self._held: set[str] = set()
        self._identity = f"{socket.gethostname()} {os.getpid()}"

    def path(self, key: str) -> Path:
        if not isinstance(key, str) or not key or "/" in key or os.sep in key or key.startswith("."):
            raise ValueError(f"run key must be a non-empty file name without '/', got {key!r}")
        return self.folder / f"{key}.json"

    def _claim_path(self, key: str) -> Path:
        return self.path(key).with_suffix(".claim")

    # ------------------------------------------------------------------ reading
    def load(self, key: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        """The stored row of ``key`` if its spec matches ``spec`` (and, without resume, it is fresh), else None."""
        path = self.path(key)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            stored = json.loads(text)
            if not (isinstance(stored, dict) and isinstance(stored.get("row"), dict) and "spec" in stored
                    and isinstance(stored.get("written"), (int, float))):
                raise ValueError("it lacks one of 'spec', 'row', 'written'")
        except ValueError as error:
            if str(path) not in self.damaged:
                self.damaged.append(str(path))
                print(f"run store: {path} is damaged or incomplete ({str(error)[:80]}); running it again",
                      file=sys.stderr, flush=True)
            return None
        if not self.resume and stored["written"] < self.opened:
            return None
        if stored["spec"] != jsonable(spec):
            return None
        return stored["row"]

    # ------------------------------------------------------------------ claims
    def claim(self, key: str) -> bool:
        """Claim ``key`` for this process; False while another live process holds it."""
        if key in self._held:
            return True
        path = self._claim_path(key)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                if not self._stale(path):
                    return False
                try:
                    path.unlink()
                except FileNotFoundError:
                    pass
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(f"{self._identity} {time.time()}\n")
            self._held.add(key)
            return True
        return False

    def _stale(self, path: Path) -> bool:
        try:
            host, pid, since = path.read_text().split()
            pid, since = int(pid), float(since)
        except FileNotFoundError:
            return True
        except ValueError:  # being written right now, or damaged: stale only once old
            try:
                return time.time() - path.stat().st_mtime > 60
            except FileNotFoundError:
                return True
        if host == socket.gethostname():
            return not _pid_alive(pid)
        return not math.isfinite(since) or time.time() - since > self.stale_after_s

    def release(self, key: str) -> None:
        """Give up the claim on ``key`` (after a failed run: another process may take it)."""
        if key in self._held:
            self._held.discard(key)
            try:
                self._claim_path(key).unlink()
            except FileNotFoundError:
                pass

    def release_all(self) -> None:
        for key in list(self._held):
            self.release(key)

    # ------------------------------------------------------------------ writing
    def save(self, key: str, spec: dict[str, Any], row: dict[str, Any]) -> None:
        """Store ``row`` under ``key`` atomically and release the claim."""
        document = {"spec": spec, "row": row, "written": time.time()}
        text = json.dumps(document, indent=1, default=json_default) + "\n"
        with atomic_write(self.path(key), "w") as handle:
            handle.write(text)
        self.release(key)
