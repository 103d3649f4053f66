"""Run every benchmark (or one) and write ``results/summary.md``.

Usage::

    python benchmarks/run_all.py [--quick] [--only NAME] [--out DIR]

Every ``benchmarks/<name>.py`` except ``common.py``, ``presets.py``, ``run_all.py``, ``__init__.py`` and files whose
name starts with ``_`` is a benchmark. Each runs as its own subprocess (``--quick`` passed on when
given, ``--out`` always), its output is shown live and saved to ``<out>/<name>/run.log``. Then
``<out>/summary.md`` lists every benchmark with its status, wall time and a link to its report;
benchmarks not run this time keep their last recorded status (kept in ``<out>/summary.json``).

Exit status: 0 if every benchmark run this time succeeded (exit code 0 and a ``report.md``
written), 1 otherwise; 2 for bad arguments (an unknown ``--only`` name lists the available ones).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

if __package__:
    from .common import DEFAULT_RESULTS_ROOT, command_line, markdown_table, results_dir
else:  # run as a script: benchmarks/ is on sys.path
    from common import DEFAULT_RESULTS_ROOT, command_line, markdown_table, results_dir

BENCHMARKS_DIR = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"common.py", "presets.py", "run_all.py", "__init__.py", "conftest.py"}


def discover(directory: Path = BENCHMARKS_DIR) -> dict[str, Path]:
    """``{name: path}`` of the benchmark scripts in ``directory``, sorted by name."""
    return {
        p.stem: p for p in sorted(directory.glob("*.py")) if p.name not in NOT_BENCHMARKS and not p.name.startswith("_")
    }


def run_one(name: str, script: Path, *, quick: bool, out: Path, timeout: float | None) -> dict:
    """Run one benchmark script as a subprocess, tee its output to ``<out>/<name>/run.log``."""
    command = [sys.executable, str(script), *(["--quick"] if quick else []), "--out", str(out)]
    log_path = results_dir(name, out) / "run.log"
    report = out / name / "report.md"
    report_mtime = report.stat().st_mtime if report.exists() else None
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    print(f"=== {name}: {' '.join(command)}", flush=True)
    start = time.perf_counter()
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            cwd=BENCHMARKS_DIR.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
        )
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            process.kill()

        timer = threading.Timer(timeout, expire) if timeout is not None else None
        if timer is not None:
            timer.start()
        try:
            assert process.stdout is not None
            for line in process.stdout:
                print(f"[{name}] {line}", end="", flush=True)
                log.write(line)
            code = process.wait()
        finally:
            if timer is not None:
                timer.cancel()
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stdout is not None:
                process.stdout.close()  # else a ResourceWarning (unclosed file) under -W default
    seconds = time.perf_counter() - start
    timed_out = expired.is_set()
    fresh_report = report.exists() and report.stat().st_mtime != report_mtime
    if timed_out:
        status = f"failed (timed out after {timeout:.0f} s)"
    elif code != 0:
        status = f"failed (exit code {code})"
    elif not fresh_report:
        status = "failed (no report.md written)"
    else:
        status = "ok"
    print(f"=== {name}: {status} in {seconds:.1f} s", flush=True)
    return {
        "status": status,
        "seconds": round(seconds, 1),
        "quick": quick,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", f"benchmarks/{script.name}", *command[2:]]),
    }


def write_summary(out: Path, entries: dict[str, dict], available: list[str], command: str) -> Path:
    """Write ``<out>/summary.md`` (and ``summary.json``) from the recorded entries."""
    rows = []
    for name in sorted(set(available) | set(entries)):
        entry = entries.get(name)
        if entry is None:
            rows.append({"benchmark": name, "status": "not run"})
            continue
        report = out / name / "report.md"
        rows.append(
            {
                "benchmark": name,
                "status": entry["status"] + ("" if name in available else " (script no longer present)"),
                "seconds": entry["seconds"],
                "mode": "quick" if entry["quick"] else "full",
                "date": entry["date"],
                "report": f"[{name}/report.md]({name}/report.md)" if report.exists() else None,
                "log": f"[{name}/run.log]({name}/run.log)" if (out / name / "run.log").exists() else None,
            }
        )
    table = markdown_table(
        rows,
        ["benchmark", "status", ("seconds", "wall time (s)"), "mode", "date", "report", "log"],
        {"seconds": ".1f"},
    )
    date = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    text = f"# Benchmark summary\n\nLast updated by `{command}` on {date}.\n\n{table}"
    (out / "summary.json").write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    path = out / "summary.md"
    path.write_text(text)
    return path


def main(argv: list[str] | None = None) -> int:
    benchmarks = discover()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="run each benchmark in --quick mode")
    parser.add_argument("--only", metavar="NAME", help=f"run one benchmark ({', '.join(benchmarks) or 'none found'})")
    parser.add_argument("--out", type=Path, default=DEFAULT_RESULTS_ROOT, help=f"results root ({DEFAULT_RESULTS_ROOT})")
    parser.add_argument("--timeout", type=float, default=None, help="seconds after which a benchmark is killed")
    args = parser.parse_args(argv)
    if args.only is not None and args.only not in benchmarks:
        parser.error(f"unknown benchmark {args.only!r}; available: {', '.join(benchmarks) or 'none'}")
    if not benchmarks:
        parser.error(f"no benchmark scripts found in {BENCHMARKS_DIR}")
    selected = [args.only] if args.only else list(benchmarks)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)

    summary_json = out / "summary.json"
    try:
        entries = json.loads(summary_json.read_text()) if summary_json.exists() else {}
    except (OSError, json.JSONDecodeError):
        entries = {}
    failed = []
    for name in selected:
        entries[name] = run_one(name, benchmarks[name], quick=args.quick, out=out, timeout=args.timeout)
        if entries[name]["status"] != "ok":
            failed.append(name)
    command = command_line(sys.argv[1:] if argv is None else argv, script=__file__)
    path = write_summary(out, entries, list(benchmarks), command)
    total = sum(entries[n]["seconds"] for n in selected)
    print(f"wrote {path}: {len(selected) - len(failed)} ok, {len(failed)} failed, {total:.1f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
