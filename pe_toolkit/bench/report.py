"""The output files of a benchmark: ``results.json``, ``report.md``, plots, and the environment record.

    <out>/<name>/results.json   {"benchmark", "config", "rows", "environment", "seconds"}
    <out>/<name>/report.md      title, the command and date that produced it, (quick: a warning), body
    <out>/<name>/*.png          the benchmark's plots

Every file is written atomically (:mod:`pe_toolkit.atomic`). The environment record is our own short
one (python, torch, CUDA device, CPUs, threads, load): ``torch.utils.collect_env.get_env_info()`` takes
8.6 s here (it runs ``pip list`` and probes compilers), longer than a quick benchmark's runs.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pe_toolkit.atomic import atomic_write, atomic_write_text
from pe_toolkit.bench.store import json_default

__all__ = ["QUICK_NOTE", "RESULT_KEYS", "environment", "fairness_section", "markdown_table", "results_dir",
           "write_report", "write_results"]

RESULT_KEYS = ("benchmark", "config", "rows", "environment", "seconds")
"""The exact top-level keys of every ``results.json``."""

QUICK_NOTE = "Quick mode: a pipeline check, not evidence"
"""The first line of a quick run's report and the start of its plots' titles."""


def results_dir(name: str, root: str | os.PathLike) -> Path:
    """``<root>/<name>/``, created if missing. ``ValueError`` unless ``name`` is a plain folder name."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or os.sep in name:
        raise ValueError(f"benchmark name must be a plain folder name, got {name!r}")
    path = Path(root) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def environment() -> dict[str, Any]:
    """Where and when the benchmark ran: python, torch, CUDA device, platform, CPUs, threads, load, date (UTC).

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
    import torch

    env["torch"] = torch.__version__
    env["torch_threads"] = torch.get_num_threads()
    env["torch_interop_threads"] = torch.get_num_interop_threads()
    env["cuda"] = torch.version.cuda
    env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS")
    try:  # other work on the machine makes timings slower and noisier: record how busy it was
        env["load_average_1_5_15min"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        env["load_average_1_5_15min"] = None
    return env


def _finite_or_none(value: Any) -> Any:
    """JSON has no NaN/inf: store them as None so the file is valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value




def write_results(name: str, config: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], seconds: float, *,
                  root: str | os.PathLike) -> Path:
    """Write ``<root>/<name>/results.json`` with exactly the keys of :data:`RESULT_KEYS`; its path."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a mapping, got {type(config).__name__}")
    if isinstance(rows, (str, bytes)) or not all(isinstance(r, Mapping) for r in rows):
        raise TypeError("rows must be a sequence of dicts (one per measured configuration)")
    document = {"benchmark": name, "config": dict(config), "rows": [dict(r) for r in rows],
                "environment": environment(), "seconds": float(seconds)}
    path = results_dir(name, root) / "results.json"
    atomic_write_text(path, json.dumps(_finite_or_none(document), indent=2, default=json_default,
                                       allow_nan=False) + "\n")
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


def fairness_section(tuning: Any, seeds: Sequence[Any], *, held_out: str, same_budget: str = "",
                     notes: Sequence[str] = (), selection: str | None = None) -> str:
    """The report's "How the fairness rule is met" section (``docs/benchmarks.md``), the same words everywhere.

    Args:
        tuning: the benchmark's :class:`~pe_toolkit.bench.Tuning` (or ``None``: one setting, nothing tuned).
        seeds: the seeds every method ran.
        held_out: how nothing from the test target reaches a model (one sentence).
        same_budget: what every method shares besides the grid (steps, data, width), one clause.
        notes: further bullets specific to the benchmark.
        selection: how values are chosen, when not by the runner's grid (e.g. thresholds tuned inside each run);
            replaces the grid sentence.
    """
    if not held_out:
        raise ValueError("held_out must say how the test target is kept from the models")
    budget = f"every {tuning.group if tuning else 'method'} {same_budget}".rstrip() if same_budget else ""
    if selection is not None:
        grid = selection
    elif tuning is None:
        grid = "one setting for every method (nothing is tuned)"
    else:
        direction = "highest" if tuning.maximize else "lowest"
        on = f" and its first `{tuning.trials_on}`" if tuning.trials_on else ""
        grid = (f"the same `{tuning.param}` grid {list(tuning.values)} per `{tuning.group}`, tried on the first "
                f"seed{on} and chosen by the {direction} `{tuning.metric}`, extended past an edge choice by at most "
                f"{tuning.max_extensions} value(s) (the Tuning section); the other runs reuse the choice")
    lines = ["## How the fairness rule is met", "",
             f"* Same budget for every method: {grid}" + (f"; {budget}" if budget else "") + ".",
             f"* Nothing from the test target reaches a model: {held_out.rstrip('.')}.",
             f"* {len(seeds)} seeds {list(seeds)}: mean and Student-t 95 % interval, non-finite runs counted, never "
             "dropped; every verdict from `pe_toolkit.bench.verdict.decide_claim` (paired per-seed differences where "
             "both sides share weights or a start, Welch otherwise; a claim of no difference needs the whole interval "
             "of the difference inside its stated margin).",
             *(f"* {note}" for note in notes), ""]
    return "\n".join(lines) + "\n"


def write_report(name: str, title: str, body_markdown: str, *, root: str | os.PathLike, command: str,
                 quick: bool) -> Path:
    """Write ``<root>/<name>/report.md``: (quick: :data:`QUICK_NOTE`), the title, the command and date, the body."""
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    try:
        load = "load average {:.2f} / {:.2f} / {:.2f} (1 / 5 / 15 min) when written".format(*os.getloadavg())
    except OSError:
        load = "load average unknown"
    warning = (f"> **{QUICK_NOTE}**: a tiny preset, too little data and training to support any claim; run "
               "the full or gpu preset for numbers.\n\n") if quick else ""
    header = (f"{warning}# {title}\n\nProduced by `{command}` on {date} ({platform.node() or 'unknown host'}, "
              f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {load}).\n\n")
    path = results_dir(name, root) / "report.md"
    atomic_write_text(path, header + body_markdown.rstrip() + "\n")
    return path


def save_figure(figure: Any, path: Path, *, quick: bool) -> Path:
    """Save a matplotlib figure atomically (quick: its title starts with :data:`QUICK_NOTE`) and close it."""
    import matplotlib.pyplot as plt
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    if quick:
        existing = figure._suptitle.get_text() if figure._suptitle is not None else ""
        figure.suptitle(f"{QUICK_NOTE}" + (f"\n{existing}" if existing else ""), fontsize=9, color="firebrick")
        if not isinstance(figure.get_layout_engine(), ConstrainedLayoutEngine):  # constrained: places it itself
            figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, dpi=120, format=path.suffix.lstrip(".") or "png")
    plt.close(figure)
    return path
