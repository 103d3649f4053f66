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
import multiprocessing
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

# imported as benchmarks.common (the tests), presets must still import by name as the scripts do
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from presets import add_device_arguments, add_preset_arguments  # noqa: E402

from pe_toolkit.atomic import atomic_write_text  # noqa: E402
from pe_toolkit.bench.executors import _exit_with_parent  # noqa: E402
from pe_toolkit.bench.memory import peak_memory_in_subprocess  # noqa: E402, F401
from pe_toolkit.bench.plots import EMPTY_PANEL_REASON, has_finite_data, nan_if_missing, note_if_empty  # noqa: E402, F401
from pe_toolkit.bench.report import _finite_or_none, environment, markdown_table  # noqa: E402, F401
from pe_toolkit.bench.stats import format_interval, interval_verdict, mean_interval  # noqa: E402, F401
from pe_toolkit.bench.store import json_default as _json_default  # noqa: E402
from pe_toolkit.bench.store import jsonable  # noqa: E402

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
    atomic_write_text(path, text + "\n")
    return path


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
    words = shlex.split(command)
    quick = "--quick" in words or any(a == "--preset" and b == "quick" for a, b in zip(words, words[1:]))
    from pe_toolkit.bench.report import QUICK_NOTE

    warning = (f"> **{QUICK_NOTE}**: a tiny preset, one seed, too little training to support any claim; run "
               "the full or gpu preset for numbers.\n\n") if quick else ""
    header = (
        f"{warning}# {title}\n\n"
        f"Produced by `{command}` on {date} "
        f"({platform.node() or 'unknown host'}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"{load}).\n\n"
    )
    path = results_dir(name, root) / "report.md"
    atomic_write_text(path, header + body_markdown.rstrip() + "\n")
    return path


# ------------------------------------------------------------------------------------------- plots
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
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    )


class RunStore:
    """Finished runs of a benchmark script not yet on the harness, one JSON file per run, so it resumes.

    ``save(key, spec, row)`` writes ``runs_dir/<key>.json`` (the row plus its ``spec``) through
    :func:`pe_toolkit.atomic.atomic_write` (a unique temporary name: two processes never collide); with
    ``resume=True``, ``load(key, spec)`` returns that row again when the stored spec equals ``spec``
    (after a JSON round trip), else ``None``; a damaged file is named on stderr and run again.
    Benchmarks on the harness use :class:`pe_toolkit.bench.store.RunStore` (claims per run key).

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
        except (OSError, ValueError) as error:
            print(f"run store: {path} is damaged or incomplete ({str(error)[:80]}); running it again",
                  file=sys.stderr, flush=True)
            return None
        if not isinstance(stored, dict) or stored.get("spec") != jsonable(spec):
            return None
        return stored

    def save(self, key: str, spec: dict[str, Any], row: dict[str, Any]) -> None:
        atomic_write_text(self.path(key), json.dumps({**row, "spec": spec}, indent=1, default=_json_default) + "\n")


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
