"""Shared helpers for every benchmark script in ``benchmarks/``.

A benchmark is one script, ``python benchmarks/<name>.py [--quick] [--out DIR]``, that writes
(see the "Conventions" section of the architecture contract)::

    <out>/<name>/results.json   {"benchmark", "config", "rows", "environment", "seconds"}
    <out>/<name>/report.md      a title, the command and date that produced it, tables
    <out>/<name>/*.png          at least one plot

with ``<out>`` = ``results/`` at the repository root unless ``--out`` says otherwise. A benchmark
never prints or writes a number it did not measure in that run.

Typical use::

    from common import markdown_table, standard_argparser, write_report, write_results

    def main(argv=None):
        args = standard_argparser("What this measures").parse_args(argv)
        start = time.perf_counter()
        rows = [...]                                   # one dict per measured configuration
        write_results("mybench", config, rows, time.perf_counter() - start, root=args.out)
        write_report("mybench", "My benchmark", markdown_table(rows, ["name", "ms"]), root=args.out)

Measuring in forked children
----------------------------
:func:`peak_memory_in_subprocess` runs a function in a child made with ``fork`` and reports its peak
resident memory above the child's starting point. The *parent must not have run torch compute
before forking*: PyTorch's CPU build uses GNU OpenMP, which is not fork-safe once its thread pool
exists, and the child then hangs in its first parallel operation. Importing torch and building
small modules is fine; a large tensor operation (a matmul, an ``exp`` over millions of elements,
a forward pass) is not. Keep the parent a coordinator that builds configurations, forks children
that do all the work, and collects their picklable results. Pass ``timeout=`` so that a child that
hangs anyway becomes a ``RuntimeError`` instead of a stuck benchmark.

Linux only: memory is read from ``/proc/self/statm`` and ``resource.getrusage`` (KiB on Linux).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as _dt
import json
import math
import multiprocessing
import os
import platform
import resource
import shlex
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

# imported as benchmarks.common (the tests), presets must still import by name as the scripts do
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from presets import add_device_arguments, add_preset_arguments  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The repository root (the folder holding ``benchmarks/``)."""

DEFAULT_RESULTS_ROOT = REPO_ROOT / "results"
"""Where results go unless a script is given ``--out``."""

RESULT_KEYS = ("benchmark", "config", "rows", "environment", "seconds")
"""The exact top-level keys of every ``results.json``."""

__all__ = [
    "DEFAULT_RESULTS_ROOT",
    "REPO_ROOT",
    "RESULT_KEYS",
    "Progress",
    "command_line",
    "environment",
    "has_finite_data",
    "markdown_table",
    "nan_if_missing",
    "note_if_empty",
    "paired_ratios",
    "peak_memory_in_subprocess",
    "quiet",
    "results_dir",
    "standard_argparser",
    "summarize_times",
    "time_call",
    "time_interleaved",
    "write_report",
    "write_results",
]


# ------------------------------------------------------------------------------------ output files
def results_dir(name: str, root: str | os.PathLike | None = None) -> Path:
    """``<root>/<name>/``, created if missing; ``root`` defaults to ``results/`` at the repo root.

    Raises:
        ValueError: if ``name`` is empty or not a plain folder name (no ``/``, ``..``).
    """
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or os.sep in name:
        raise ValueError(f"benchmark name must be a plain folder name, got {name!r}")
    base = DEFAULT_RESULTS_ROOT if root is None else Path(root)
    path = base / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def environment() -> dict[str, Any]:
    """Where and when the benchmark ran: python, torch, platform, CPUs, torch threads, date (UTC).

    Reading the thread count does not start torch's thread pool, so this is safe before forking.
    """
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        env["cpu_affinity"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        env["cpu_affinity"] = None
    try:
        import torch

        env["torch"] = torch.__version__
        env["torch_threads"] = torch.get_num_threads()
        env["torch_interop_threads"] = torch.get_num_interop_threads()
    except ImportError:
        env["torch"] = None
        env["torch_threads"] = None
    env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS")
    try:  # other work on the machine makes timings slower and noisier: record how busy it was
        env["load_average_1_5_15min"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        env["load_average_1_5_15min"] = None
    return env


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # torch / numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"results.json: cannot serialise {type(value).__name__} value {value!r}")


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN/inf: store them as None so the file is valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def write_results(
    name: str,
    config: Mapping[str, Any],
    rows: Sequence[Mapping[str, Any]],
    seconds: float,
    *,
    root: str | os.PathLike | None = None,
) -> Path:
    """Write ``<root>/<name>/results.json`` with exactly the keys of :data:`RESULT_KEYS`.

    Args:
        name: the benchmark's name (its script's stem).
        config: what was run (lengths, sizes, repeats, ...).
        rows: one dict per measured configuration, with its metrics.
        seconds: wall time of the whole benchmark.
    Returns:
        the path written.
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    if isinstance(rows, (str, bytes)) or not all(isinstance(r, Mapping) for r in rows):
        raise TypeError("rows must be a sequence of dicts (one per measured configuration)")
    document = {
        "benchmark": name,
        "config": dict(config),
        "rows": [dict(r) for r in rows],
        "environment": environment(),
        "seconds": float(seconds),
    }
    path = results_dir(name, root) / "results.json"
    text = json.dumps(_finite_or_none(document), indent=2, default=_json_default, allow_nan=False)
    path.write_text(text + "\n")
    return path


def _format_cell(value: Any, fmt: str | Callable[[Any], str] | None) -> str:
    if value is None:
        return "n/a"
    if fmt is None:
        text = str(value)
    elif callable(fmt):
        text = fmt(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        text = format(value, fmt)
    else:
        text = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(
    rows: Iterable[Mapping[str, Any]],
    columns: Sequence[str | tuple[str, str]],
    formats: Mapping[str, str | Callable[[Any], str]] | None = None,
) -> str:
    """A GitHub-flavoured markdown table, one line per row, ending with a newline.

    Args:
        rows: dicts; a missing key or a ``None`` value prints ``n/a``.
        columns: the keys to show, in order; ``(key, header)`` pairs give a header other than the key.
        formats: per key, a format spec applied to numbers (``".2f"``) or a callable ``value -> str``.

    Example:
        >>> print(markdown_table([{"a": 1, "b": 2.5}], ["a", ("b", "B (ms)")], {"b": ".2f"}), end="")
        | a | B (ms) |
        | --- | --- |
        | 1 | 2.50 |
    """
    formats = dict(formats or {})
    keys, headers = [], []
    for column in columns:
        key, header = (column, column) if isinstance(column, str) else column
        keys.append(key)
        headers.append(header)
    if not keys:
        raise ValueError("markdown_table: columns must not be empty")
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join("---" for _ in keys) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(_format_cell(row.get(k), formats.get(k)) for k in keys) + " |")
    return "\n".join(lines) + "\n"


def command_line(argv: Sequence[str] | None = None, script: str | os.PathLike | None = None) -> str:
    """The shell command that reproduces this run, e.g. ``python benchmarks/speed.py --quick``.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).
        script: the script (default ``sys.argv[0]``); shown relative to the repo root when inside it.
    """
    script = Path(sys.argv[0] if script is None else script).resolve()
    try:
        shown = str(script.relative_to(REPO_ROOT))
    except ValueError:
        shown = str(script)
    args = list(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", shown, *args])


def write_report(
    name: str,
    title: str,
    body_markdown: str,
    *,
    root: str | os.PathLike | None = None,
    command: str | None = None,
) -> Path:
    """Write ``<root>/<name>/report.md``: the title, the command and date that produced it, the body.

    Args:
        command: the command line to show (default :func:`command_line` from ``sys.argv``).
    Returns:
        the path written.
    """
    command = command_line() if command is None else command
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    try:
        load = "load average {:.2f} / {:.2f} / {:.2f} (1 / 5 / 15 min) when written".format(*os.getloadavg())
    except OSError:
        load = "load average unknown"
    header = (
        f"# {title}\n\n"
        f"Produced by `{command}` on {date} "
        f"({platform.node() or 'unknown host'}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{load}).\n\n"
    )
    path = results_dir(name, root) / "report.md"
    path.write_text(header + body_markdown.rstrip() + "\n")
    return path


# ------------------------------------------------------------------------------------------- plots
EMPTY_PANEL_REASON = "a --quick run may train too little to measure it"
"""The second line of :func:`note_if_empty`'s note unless it is given another ``reason``."""


def nan_if_missing(value: Any) -> float:
    """``value`` as a float, with ``None`` (a metric that was not measured) as NaN.

    For plots: matplotlib leaves NaN points and bars out, so a missing metric is not drawn as a
    zero bar; :func:`note_if_empty` then tells an axes with nothing left.
    """
    return float("nan") if value is None else float(value)


def _all_finite(points: Any) -> bool:
    import numpy as np

    array = np.ma.filled(np.ma.asarray(points, dtype=float), np.nan)
    return array.size > 0 and bool(np.isfinite(array).all())


def _any_finite(values: Any) -> bool:
    import numpy as np

    array = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan)
    return bool(np.isfinite(array).any())


def _any_finite_row(points: Any) -> bool:
    import numpy as np

    array = np.ma.filled(np.ma.asarray(points, dtype=float), np.nan)
    if array.size == 0:
        return False
    return bool(np.isfinite(array.reshape(len(array), -1)).all(axis=1).any())


def has_finite_data(ax: Any) -> bool:
    """Whether ``ax`` shows at least one finite data point.

    Counted: lines (a point with finite x and y), bars and other patches (all corners finite),
    scatter points and line collections (error bars), images (a finite pixel), all in data
    coordinates. Not counted: reference lines drawn across the axes (``axhline``, ``axvline``,
    whose transform is not the data transform), texts and legends.
    """
    data = ax.transData
    for line in ax.lines:
        if line.get_transform().contains_branch(data) and _any_finite_row(line.get_xydata()):
            return True
    for patch in ax.patches:
        if not patch.get_transform().contains_branch(data):
            continue
        corners = patch.get_patch_transform().transform(patch.get_path().vertices)
        if _all_finite(corners):
            return True
    for collection in ax.collections:
        offsets = collection.get_offsets()
        if len(offsets) and collection.get_offset_transform().contains_branch(data):
            if _any_finite_row(offsets):
                return True
        elif collection.get_transform().contains_branch(data):
            if any(_all_finite(path.vertices) for path in collection.get_paths()):
                return True
    for image in ax.images:
        array = image.get_array()
        if array is not None and _any_finite(array):
            return True
    return False


def note_if_empty(ax: Any, what: str, *, reason: str | None = None) -> bool:
    """Write a centred note on ``ax`` when it shows no finite data; return whether it did.

    A metric that is NaN or ``None`` in every row (quick runs often train too little to measure
    it) otherwise leaves empty axes that look like a broken plot. The note reads
    ``no finite values of <what> in this run`` and, on a second line, ``reason`` (default
    :data:`EMPTY_PANEL_REASON`). Call it after drawing the data and before ``ax.legend``
    (skip the legend when it returns True: there is nothing to label), and after setting the
    axis scales: a log-scaled axis of an empty panel is switched back to linear, since matplotlib
    cannot place log ticks without data and would fail when the figure is saved. The figure is
    still written; the run stays valid.

    Args:
        ax: a matplotlib ``Axes``; what counts as data is :func:`has_finite_data`.
        what: the metric, e.g. ``"passkey accuracy"``.
    Returns:
        True if the note was written (the axes had no finite data), False otherwise.
    """
    if has_finite_data(ax):
        return False
    for axis, set_scale in ((ax.xaxis, ax.set_xscale), (ax.yaxis, ax.set_yscale)):
        if axis.get_scale() in ("log", "logit"):
            set_scale("linear")
    text = f"no finite values of {what} in this run\n({EMPTY_PANEL_REASON if reason is None else reason})"
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.35",
            wrap=True, gid="note_if_empty")
    return True


# ------------------------------------------------------------------------------------------ timing
def summarize_times(times: Sequence[float]) -> dict[str, Any]:
    """Median, min, mean and count of a list of durations (seconds)."""
    if not times:
        raise ValueError("summarize_times: no times")
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "mean_s": statistics.fmean(times),
        "repeats": len(times),
    }


def time_interleaved(
    fns: Mapping[str, Callable[[], Any]],
    *,
    warmup: int,
    repeats: int,
    budget_s: float | None = None,
    min_repeats: int = 1,
    drop_errors: bool = False,
) -> dict[str, dict[str, Any]]:
    """Time several functions round-robin (A, B, C, B, C, A, ...) so that drift hits all alike.

    Each round calls every function once, in an order rotated by one per round (so no function
    always runs right after the same neighbour). ``warmup`` rounds run first and are not recorded.
    Times come from :func:`time.perf_counter`; torch's thread count is not changed.

    Args:
        repeats: number of recorded rounds (the most, when ``budget_s`` is given).
        budget_s: stop starting new rounds once the recorded rounds took this long in total, but
            not before ``min_repeats`` rounds.
        drop_errors: if a function raises (``Exception``), drop it from the following rounds and
            report ``{"error": "Type: message"}`` for it instead of timings; by default the
            exception propagates.

    Returns:
        ``{name: {"median_s", "min_s", "mean_s", "repeats", "times_s": [per-round times]}}``;
        ``times_s[r]`` of different functions come from the same round ``r`` (see :func:`paired_ratios`).
        With ``drop_errors``, a function that failed maps to ``{"error": ...}`` only.
    """
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if not isinstance(min_repeats, int) or not 1 <= min_repeats <= repeats:
        raise ValueError(f"min_repeats must be an int in [1, repeats={repeats}], got {min_repeats!r}")
    if budget_s is not None and not budget_s >= 0:
        raise ValueError(f"budget_s must be >= 0 or None, got {budget_s!r}")
    names = list(fns)
    if not names:
        raise ValueError("time_interleaved: no functions")
    errors: dict[str, str] = {}
    clock = time.perf_counter

    def call(name: str) -> float | None:
        start = clock()
        try:
            fns[name]()
        except Exception as error:
            if not drop_errors:
                raise
            errors[name] = f"{type(error).__name__}: {error}"
            return None
        return clock() - start

    for _ in range(warmup):
        for name in [n for n in names if n not in errors]:
            call(name)
    times: dict[str, list[float]] = {name: [] for name in names}
    begin = clock()
    for r in range(repeats):
        if budget_s is not None and r >= min_repeats and clock() - begin >= budget_s:
            break
        active = [n for n in names if n not in errors]
        if not active:
            break
        shift = r % len(active)
        for name in active[shift:] + active[:shift]:
            if name in errors:
                continue
            elapsed = call(name)
            if elapsed is not None:
                times[name].append(elapsed)
    return {
        name: {"error": errors[name]} if name in errors else {**summarize_times(times[name]), "times_s": times[name]}
        for name in names
    }


def time_call(fn: Callable[[], Any], *, warmup: int, repeats: int) -> dict[str, Any]:
    """Median and min wall time of ``fn()`` over ``repeats`` calls after ``warmup`` calls.

    Returns:
        ``{"median_s", "min_s", "mean_s", "repeats", "times_s"}``.
    """
    return time_interleaved({"fn": fn}, warmup=warmup, repeats=repeats)["fn"]


def paired_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> dict[str, float]:
    """Per-round ratios ``numerator[r] / denominator[r]`` of two interleaved timings, summarised.

    Returns:
        ``{"ratio_median", "ratio_p25", "ratio_p75", "ratio_of_medians"}``.
    """
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError("paired_ratios: need two equally long, non-empty lists of times")
    ratios = sorted(a / b for a, b in zip(numerator, denominator))
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {
        "ratio_median": statistics.median(ratios),
        "ratio_p25": quartiles[0],
        "ratio_p75": quartiles[2],
        "ratio_of_medians": statistics.median(numerator) / statistics.median(denominator),
    }


# ----------------------------------------------------------------------------- forked measurements
# ------------------------------------------------------------------------------------ seeds and intervals
def mean_interval(values: Iterable[float], confidence: float = 0.95) -> dict[str, Any]:
    """Mean and Student-t ``confidence`` interval of per-seed values: ``{"mean", "low", "high", "n"}``.

    Non-finite values are dropped (``n`` counts what remains). One value has no interval: ``low``
    and ``high`` are ``nan`` (unknown), as everything is for no value.

    Example:
        >>> r = mean_interval([1.0, 2.0, 3.0])
        >>> r["mean"], round(r["low"], 3), round(r["high"], 3), r["n"]
        (2.0, -0.484, 4.484, 3)
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(finite)
    if n == 0:
        return {"mean": math.nan, "low": math.nan, "high": math.nan, "n": 0}
    mean = statistics.fmean(finite)
    if n == 1:
        return {"mean": mean, "low": math.nan, "high": math.nan, "n": 1}
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * statistics.stdev(finite) / math.sqrt(n)
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def format_interval(summary: Mapping[str, Any], fmt: str = ".3f") -> str:
    """``"0.512 [0.498, 0.526] (n=3)"``; ``"0.512 (n=1)"`` without an interval; ``"-"`` for no value."""
    if summary["n"] == 0:
        return "-"
    if not math.isfinite(summary["low"]):
        return f"{summary['mean']:{fmt}} (n={summary['n']})"
    return f"{summary['mean']:{fmt}} [{summary['low']:{fmt}}, {summary['high']:{fmt}}] (n={summary['n']})"


def interval_verdict(a: Mapping[str, Any], b: Mapping[str, Any], *, higher_is_better: bool) -> str:
    """``"better"``, ``"worse"`` or ``"tie"`` for ``a`` against ``b``, from their intervals.

    ``a`` is better only when its whole interval lies on the better side of ``b``'s (no overlap);
    overlapping intervals, or a missing interval (fewer than 2 seeds), are a ``"tie"``: the runs do
    not separate the two.

    Example:
        >>> interval_verdict({"low": 0.8, "high": 0.9}, {"low": 0.5, "high": 0.7}, higher_is_better=True)
        'better'
    """
    values = [a["low"], a["high"], b["low"], b["high"]]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        return "tie"
    if a["low"] > b["high"]:
        return "better" if higher_is_better else "worse"
    if a["high"] < b["low"]:
        return "worse" if higher_is_better else "better"
    return "tie"


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


# ------------------------------------------------------------------------------------ resumable runs
def worker_pool(jobs: int) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``jobs`` spawned worker processes that exit when this process dies.

    Spawned, not forked: a child forked after torch has used OpenMP can hang (see the module
    docstring). A ``ProcessPoolExecutor`` worker outlives a parent killed by a signal (``kill``,
    ``pkill -f``) and keeps computing its task; these workers watch their parent and exit
    within a second of it going away.

    A spawned worker starts with Python's default warning filters and logging setup, not its
    parent's, so each one also runs :func:`quiet` when it starts.
    """
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=(os.getpid(),),
    )


def _init_worker(parent_pid: int) -> None:  # runs in each worker of worker_pool
    quiet()
    _exit_with_parent(parent_pid)


def _exit_with_parent(parent_pid: int) -> None:
    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class RunStore:
    """Finished runs of a benchmark, one JSON file per run, so an interrupted benchmark resumes.

    ``save(key, spec, row)`` writes ``runs_dir/<key>.json`` (the row plus its ``spec``) as soon as a
    run finishes; with ``resume=True``, ``load(key, spec)`` returns that row again when the stored spec
    equals ``spec`` (compared after a JSON round trip, so tuples and lists match), else ``None``.

    Example:
        >>> import tempfile
        >>> store = RunStore(Path(tempfile.mkdtemp()), resume=True)
        >>> store.load("a", {"steps": 2}) is None
        True
        >>> store.save("a", {"steps": 2}, {"loss": 0.5})
        >>> store.load("a", {"steps": 2})["loss"], store.load("a", {"steps": 3})
        (0.5, None)
    """

    def __init__(self, runs_dir: str | os.PathLike, *, resume: bool) -> None:
        self.runs_dir = Path(runs_dir)
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.resume = bool(resume)

    def path(self, key: str) -> Path:
        if not key or "/" in key or key.startswith("."):
            raise ValueError(f"run key must be a non-empty file name without '/', got {key!r}")
        return self.runs_dir / f"{key}.json"

    def load(self, key: str, spec: dict[str, Any]) -> dict[str, Any] | None:
        path = self.path(key)
        if not self.resume or not path.exists():
            return None
        try:
            stored = json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # a run file cut short by the interruption: run it again
        if not isinstance(stored, dict) or stored.get("spec") != json.loads(json.dumps(spec, default=_json_default)):
            return None
        return stored

    def save(self, key: str, spec: dict[str, Any], row: dict[str, Any]) -> None:
        path = self.path(key)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({**row, "spec": spec}, indent=1, default=_json_default) + "\n")
        tmp.replace(path)  # atomic: an interruption never leaves half a file under the run's name


# ------------------------------------------------------------------------------------ command line
def quiet() -> None:
    """Silence known third-party noise in this process: :func:`pe_toolkit.quiet.quiet_third_party`.

    Every benchmark's run starts in :func:`standard_argparser`, which calls this; the workers of
    :func:`worker_pool` call it when they start; children of :func:`peak_memory_in_subprocess`
    are forked and inherit it. Idempotent. Imported here, not at the top of this module, so that
    importing ``common`` changes no warning filter and does not import ``pe_toolkit``.
    """
    from pe_toolkit.quiet import quiet_third_party

    quiet_third_party()


def standard_argparser(description: str, *, presets: str | None = None) -> argparse.ArgumentParser:
    """An ``ArgumentParser`` with the options every benchmark takes.

    ``--quick``: a short run (what ``make bench`` uses); ``--out DIR``: results root (default
    ``results/`` at the repo root; the benchmark writes ``DIR/<name>/``); ``--accelerator``,
    ``--devices``, ``--precision``: where its training runs go (see :mod:`presets`,
    :func:`presets.device_options`). With ``presets=NAME`` (a benchmark whose presets are the YAML
    files ``benchmarks/presets/NAME/*.yaml``) also ``--preset``, ``--config`` and ``--set``
    (:func:`presets.preset_from_args` reads them).

    Every benchmark builds its parser first thing in ``main``, so this is also where its run is
    made quiet: it calls :func:`quiet` (known third-party warnings and Lightning's info banners
    filtered, see :mod:`pe_toolkit.quiet`; the project's own warnings still show).
    """
    quiet()
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="short run with fewer sizes and repeats")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_RESULTS_ROOT,
        help=f"results root; the benchmark writes OUT/<name>/ (default: {DEFAULT_RESULTS_ROOT})",
    )
    add_device_arguments(parser)
    if presets is not None:
        add_preset_arguments(parser, presets)
    return parser


class Progress:
    """One line per configuration: ``[3/12 4.1s] rope L=2048``, flushed at once.

    Uses ``tqdm`` when it is installed and stdout is a terminal; plain lines otherwise (logs, CI,
    ``run_all.py``).

    Example:
        >>> progress = Progress(2, "demo", stream=sys.stdout, use_tqdm=False)
        >>> progress("first")  # doctest: +ELLIPSIS
        [demo 1/2 ...s] first
    """

    def __init__(self, total: int, desc: str = "", *, stream=None, use_tqdm: bool | None = None) -> None:
        self.total, self.desc, self.count = total, desc, 0
        self.stream = sys.stdout if stream is None else stream
        self.start = time.perf_counter()
        self._bar = None
        if use_tqdm is None:
            use_tqdm = bool(getattr(self.stream, "isatty", lambda: False)())
        if use_tqdm:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=desc, file=self.stream, leave=True)
            except ImportError:
                self._bar = None

    def __call__(self, label: str) -> None:
        self.count += 1
        if self._bar is not None:
            self._bar.set_postfix_str(label)
            self._bar.update(1)
            if self.count >= self.total:
                self._bar.close()
            return
        elapsed = time.perf_counter() - self.start
        prefix = f"{self.desc} " if self.desc else ""
        print(f"[{prefix}{self.count}/{self.total} {elapsed:.1f}s] {label}", file=self.stream, flush=True)
