"""Peak memory of a function run in a forked child (Linux): :func:`peak_memory_in_subprocess`, :func:`run_in_child`.

The *parent must not have run torch compute before forking*: PyTorch's CPU build uses GNU OpenMP,
which is not fork-safe once its thread pool exists, and the child then hangs in its first parallel
operation. Importing torch and building small modules is fine; a large tensor operation is not. Keep
the parent a coordinator (the runner is one) and pass ``timeout=`` so a hung child becomes an error.
Memory is read from ``/proc/self/statm`` and ``resource.getrusage`` (KiB on Linux).
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import time
import traceback
from collections.abc import Callable
from typing import Any

__all__ = ["memory_cap_bytes", "peak_memory_in_subprocess", "run_in_child"]


def _current_rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError as error:
        raise RuntimeError("peak_memory_in_subprocess needs Linux's /proc/self/statm") from error


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _reset_peak_rss() -> None:
    """Reset the kernel's high-water mark (Linux >= 4.0) so a warm-up's peak does not count."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _virtual_size_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _child_main(conn, fn, args, warmup, memory_limit_bytes) -> None:  # runs in the forked child
    try:
        if memory_limit_bytes is not None:
            limit = _virtual_size_bytes() + int(memory_limit_bytes)
            hard = resource.getrlimit(resource.RLIMIT_AS)[1]
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        if warmup is not None:
            warmup()
        _reset_peak_rss()
        start = _current_rss_bytes()
        result = fn(*args)
        peak = max(0, _peak_rss_bytes() - start)
        conn.send(("ok", result, peak))
    except BaseException:  # noqa: B036  (report everything, including KeyboardInterrupt/SystemExit)
        try:
            conn.send(("error", traceback.format_exc()))
        except BaseException:  # noqa: B036
            pass
    finally:
        conn.close()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (SIGKILL: often the out-of-memory killer)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit code {code}"


def peak_memory_in_subprocess(
    fn: Callable[..., Any],
    *args: Any,
    warmup: Callable[[], Any] | None = None,
    timeout: float | None = None,
    memory_limit_bytes: int | None = None,
) -> tuple[Any, int]:
    """Run ``fn(*args)`` in a forked child; return its result and its peak RSS growth in bytes.

    The child reads its resident set size from ``/proc/self/statm`` when it starts (after the
    optional ``warmup()``, whose own peak is then reset), runs ``fn``, and reads its peak RSS from
    ``resource.getrusage(RUSAGE_SELF).ru_maxrss``; the difference is reported (>= 0). Pages shared
    with the parent that the child only reads are not counted; memory the child touches is.

    ``fn``, ``args`` and ``warmup`` need not be picklable (fork copies them); the result must be.

    The parent must not have run torch compute before calling this (see the module docstring:
    OpenMP is not fork-safe once used; the child would hang). ``timeout`` guards against that.

    Args:
        warmup: called in the child before the baseline is read, e.g. a tiny forward pass that
            loads the code paths (library pages faulted in on first use would otherwise count).
        timeout: seconds to wait for the child; on expiry it is killed and RuntimeError raised.
        memory_limit_bytes: cap the child's address-space *growth* (RLIMIT_AS above its size at
            start), so that an oversized configuration fails with an allocation error in the child
            (reported as RuntimeError) instead of waking the machine's out-of-memory killer.
    Returns:
        ``(result, peak_bytes)``.
    Raises:
        RuntimeError: if the child raised (the message holds its traceback), died (signal, OOM),
            timed out, or the result could not be pickled.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child_main, args=(sender, fn, args, warmup, memory_limit_bytes), daemon=True)
    process.start()
    sender.close()
    name = getattr(fn, "__qualname__", repr(fn))
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            if receiver.poll(wait):
                try:
                    message = receiver.recv()
                except EOFError:  # the child closed the pipe without sending: it died
                    process.join(5)
                    raise RuntimeError(
                        f"child running {name} died without a result ({_describe_exit(process.exitcode)})"
                    ) from None
                break
            if not process.is_alive():
                if receiver.poll(0):  # it sent its message just before exiting
                    continue
                raise RuntimeError(f"child running {name} died without a result ({_describe_exit(process.exitcode)})")
            if deadline is not None and time.monotonic() >= deadline:
                process.kill()
                raise RuntimeError(
                    f"child running {name} timed out after {timeout} s and was killed (if it hung "
                    "in its first torch operation, the parent had run torch compute before forking)"
                )
    finally:
        receiver.close()
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join()
    if message[0] == "error":
        raise RuntimeError(f"child running {name} failed:\n{message[1]}")
    _, result, peak = message
    return result, peak



def run_in_child(fn: Callable[..., Any], *args: Any, **options: Any) -> tuple[Any, int | None, str | None]:
    """:func:`peak_memory_in_subprocess` that reports a failure instead of raising it.

    Returns:
        ``(result, peak_bytes, None)``, or ``(None, None, error)`` where ``error`` is the last line of what
        went wrong: the child's exception (``"ValueError: ..."``), or why it died or timed out.
    """
    try:
        result, peak = peak_memory_in_subprocess(fn, *args, **options)
    except RuntimeError as failure:
        lines = [line.strip() for line in str(failure).splitlines() if line.strip()]
        return None, None, lines[-1] if lines else "failed"
    return result, peak, None


def memory_cap_bytes(gib: float | None = None, *, fraction: float = 0.6) -> int | None:
    """A cap for ``memory_limit_bytes``: ``gib`` GiB, or (``gib=None``) ``fraction`` of the memory available now
    (``MemAvailable`` of ``/proc/meminfo``; ``None`` where that cannot be read)."""
    if gib is not None:
        if isinstance(gib, bool) or not isinstance(gib, (int, float)) or not gib > 0:
            raise ValueError(f"gib must be a number > 0 or None, got {gib!r}")
        return int(gib * 2**30)
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"fraction must be a number in (0, 1], got {fraction!r}")
    try:
        with open("/proc/meminfo") as f:
            kib = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None
    return int(kib * 1024 * fraction)
