"""Every registered benchmark in turn, and ``<out>/summary.md``: ``pe-toolkit bench all --preset quick``.

Each benchmark runs as its own process (``python -m pe_toolkit.bench NAME ...``: a benchmark forks
children for its measurements, which must not inherit a process whose torch thread pool another
benchmark already started), one after the other (timings never share the machine with another run);
its output is shown live and saved to ``<out>/<name>/run.log``. Then ``<out>/summary.md`` has one line
per benchmark: status, seconds, the verdicts of its claims (the ``kind: claim`` rows of its
``results.json``) and a link to its report. Benchmarks not run this time keep their last line (kept in
``<out>/summary.json``).
"""

from __future__ import annotations

import collections
import datetime as _dt
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pe_toolkit.atomic import atomic_write_text
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.store import results_folder
from pe_toolkit.bench.verdict import VERDICTS

__all__ = ["claim_counts", "run_benchmark", "run_suite", "write_summary"]


def claim_counts(results: Path) -> str:
    """``"2 reproduced, 1 inconclusive"`` from the claim rows of ``results`` (a results.json); ``""`` if none."""
    try:
        rows = json.loads(results.read_text())["rows"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    counts = collections.Counter(r.get("verdict") for r in rows if isinstance(r, dict) and r.get("kind") == "claim")
    order = [v for v in VERDICTS if v in counts] + sorted(str(v) for v in counts if v not in VERDICTS)
    return ", ".join(f"{counts[v]} {v}" for v in order)


def output_name(name: str) -> str:
    """The folder a benchmark writes under ``--out``: its registered name, or a ``module:Class``'s ``name``."""
    from pe_toolkit.bench.registry import BENCHMARKS, get_benchmark

    return name if name in BENCHMARKS else get_benchmark(name).name


def run_benchmark(name: str, arguments: Sequence[str], out: Path, *, timeout: float | None = None) -> dict[str, Any]:
    """Run ``python -m pe_toolkit.bench NAME *arguments --out OUT``; tee its output to ``<out>/<name>/run.log``."""
    command = [sys.executable, "-m", "pe_toolkit.bench", name, *arguments, "--out", str(out)]
    folder = out / output_name(name)
    folder.mkdir(parents=True, exist_ok=True)
    report = folder / "report.md"
    before = report.stat().st_mtime_ns if report.exists() else None
    print(f"=== {name}: {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    with open(folder / "run.log", "w") as log, subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}) as process:
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            process.kill()

        timer = threading.Timer(timeout, expire) if timeout is not None else None
        if timer is not None:
            timer.start()
        try:
            for line in process.stdout:
                print(f"[{name}] {line}", end="", flush=True)
                log.write(line)
            code = process.wait()
        finally:
            if timer is not None:
                timer.cancel()
    seconds = time.perf_counter() - start
    if expired.is_set():
        status = f"failed (timed out after {timeout:.0f} s)"
    elif code != 0:
        status = f"failed (exit code {code})"
    elif not report.exists() or report.stat().st_mtime_ns == before:
        status = "failed (no report.md written)"
    else:
        status = "ok"
    print(f"=== {name}: {status} in {seconds:.1f} s", flush=True)
    return {"status": status, "seconds": round(seconds, 1), "claims": claim_counts(folder / "results.json"),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": " ".join(["pe-toolkit", "bench", name, *arguments])}


def write_summary(out: Path, entries: dict[str, dict[str, Any]], available: Sequence[str], command: str) -> Path:
    """Write ``<out>/summary.md`` (and ``summary.json``): one line per benchmark, registered or recorded."""
    rows = []
    for name in sorted(set(available) | set(entries)):
        entry = entries.get(name)
        if entry is None:
            rows.append({"benchmark": name, "status": "not run"})
            continue
        report = out / name / "report.md"
        rows.append({"benchmark": name, "seconds": entry["seconds"],
                     "status": entry["status"] + ("" if name in available or ":" in entry["command"]
                                                  else " (no longer registered)"),
                     "claims": entry.get("claims") or None, "command": f"`{entry['command']}`", "date": entry["date"],
                     "report": f"[{name}/report.md]({name}/report.md)" if report.exists() else None})
    table = markdown_table(rows, ["benchmark", ("seconds", "wall time (s)"), "status", ("claims", "claim verdicts"),
                                  "report", "command", "date"], {"seconds": ".1f"})
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    atomic_write_text(out / "summary.json", json.dumps(entries, indent=2, sort_keys=True) + "\n")
    path = out / "summary.md"
    atomic_write_text(path, f"# Benchmark summary\n\nLast updated by `{command}` on {date}.\n\n{table}")
    return path


def run_suite(names: Sequence[str], arguments: Sequence[str], out: Path, *, available: Sequence[str], command: str,
              timeout: float | None = None) -> int:
    """Run ``names`` (registered, or ``module:Class``) one after the other with ``arguments``; write the summary.

    The exit status: 0 if every one succeeded, else 1. ``ValueError`` before anything runs for a ``timeout`` that
    is not a positive number of seconds, or an ``out`` that cannot be a folder (a file, no permission).
    """
    if timeout is not None and not (isinstance(timeout, (int, float)) and 0 < timeout < math.inf):
        raise ValueError(f"timeout must be a positive, finite number of seconds (or None), got {timeout!r}")
    results_folder(out)
    try:
        entries = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        entries = {}
    if not isinstance(entries, dict):
        entries = {}
    folders = {output_name(name): name for name in names}  # a module:Class is listed under its own name
    for folder, name in folders.items():
        entries[folder] = run_benchmark(name, arguments, out, timeout=timeout)
    path = write_summary(out, entries, available, command)
    failed = [folder for folder in folders if entries[folder]["status"] != "ok"]
    total = sum(entries[folder]["seconds"] for folder in folders)
    print(f"wrote {path}: {len(names) - len(failed)} ok, {len(failed)} failed, {total:.1f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr, flush=True)
    return 1 if failed else 0
