"""Atomic file writes: a file that a later call reads is either the old one or the new one, never torn.

Every file the toolkit writes and reads back later (checkpoints, run stores, caches of generated data)
goes through :func:`atomic_write`: the bytes go to a unique temporary file in the same folder, are
flushed and ``fsync``-ed, and the temporary file is renamed over the target with :func:`os.replace`
(atomic on POSIX and Windows within one filesystem). A write that fails midway (disk full, permission,
an exception in the caller's code, a kill) leaves the previous file untouched; the temporary file is
removed where the process lives long enough to do so, and its name (``.<name>.<random>.tmp``) never
collides with another writer's.

Example::

    from pe_toolkit.atomic import atomic_write, atomic_torch_save

    with atomic_write("results/run.json", "w") as f:
        json.dump(row, f)
    atomic_torch_save(model.state_dict(), "model.pt")
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["AtomicWriteError", "atomic_write", "atomic_write_bytes", "atomic_write_text", "atomic_torch_save"]


class AtomicWriteError(OSError):
    """A write that could not complete; the file at ``path`` is unchanged (the previous version, or absent)."""


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable on a power cut; some filesystems refuse O_RDONLY on a folder.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", *, encoding: str | None = None) -> Iterator[IO[Any]]:
    """Open a unique temporary file beside ``path``; on a clean exit rename it over ``path``.

    Args:
        path: the file to (re)place. Its folder must exist.
        mode: ``"wb"`` (bytes) or ``"w"`` (text).
        encoding: text encoding for ``mode="w"`` (default UTF-8).

    Raises:
        ValueError: ``mode`` is not ``"w"`` or ``"wb"``.
        AtomicWriteError: the write, flush or rename failed (e.g. disk full, permission); the message
            names ``path`` and the cause, and ``path`` still holds its previous content.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as error:
        raise AtomicWriteError(error.errno, f"cannot write {str(target)!r}: {error.strerror or error}") from error
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, mode, encoding=(encoding or "utf-8") if mode == "w" else None) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(error, OSError) and not isinstance(error, AtomicWriteError):
            raise AtomicWriteError(
                error.errno, f"cannot write {str(target)!r} (the previous file is unchanged): {error}"
            ) from error
        raise
    _fsync_dir(folder)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "wb") as handle:
        handle.write(data)


def atomic_write_text(path: str | os.PathLike, text: str, *, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "w", encoding=encoding) as handle:
        handle.write(text)


class _RecordingWriter:
    """A file wrapper that remembers the ``OSError`` of a failed ``write``: torch's zip writer swallows it and
    reports only ``unexpected pos``, which names neither the cause (disk full, file too large) nor its errno."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        self.error: OSError | None = None

    def write(self, data: bytes) -> int:
        try:
            return self.handle.write(data)
        except OSError as error:
            self.error = error
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)


def atomic_torch_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save(obj, path)`` through :func:`atomic_write`: a kill or full disk leaves the old file, and a
    failed write raises :class:`AtomicWriteError` naming ``path`` and the operating system's cause."""
    import torch

    writer: _RecordingWriter | None = None
    try:
        with atomic_write(path, "wb") as handle:
            writer = _RecordingWriter(handle)
            torch.save(obj, writer)
    except RuntimeError as error:  # torch reports a failed write of its zip container as RuntimeError
        cause = writer.error if writer is not None else None
        if cause is not None:
            raise AtomicWriteError(cause.errno, f"cannot write {str(path)!r} (the previous file is unchanged): "
                                                f"{cause.strerror or cause}") from error
        raise AtomicWriteError(f"cannot write {str(path)!r} (the previous file is unchanged): {error}") from error
