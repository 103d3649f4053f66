"""The runner: one protocol for every benchmark (tuning, seeds, store, resume, executor, outputs).

:func:`run` takes a :class:`~pe_toolkit.bench.protocol.Benchmark`, its loaded config and the
:class:`~pe_toolkit.bench.config.RunOptions`:

1. ``benchmark.runs(config)`` lists the runs; the runner adds ``device`` and ``threads`` to every spec
   (they change the numbers, so they are part of a run's identity in the store).
2. With ``benchmark.tuning(config)``: the first seed of every group runs once per grid value (the
   same grid and validation data for every method); the best value by the stated metric is chosen
   per group; the other seeds run with it. Without: every spec runs.
3. Each batch goes through the run store (reuse a matching finished run; claim the rest so a
   concurrent process on the same folder does not run them too) and the executor; progress shows
   with tqdm (plain lines when stdout is not a terminal).
4. ``analyze``, ``report``, ``plot`` turn the rows into ``results.json``, ``report.md`` and PNGs.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from pe_toolkit.bench.config import RunOptions
from pe_toolkit.bench.executors import make_executor
from pe_toolkit.bench.protocol import Benchmark, Result
from pe_toolkit.bench.report import save_figure, write_report, write_results
from pe_toolkit.bench.store import RunStore, jsonable

__all__ = ["Progress", "run", "run_key", "run_specs"]

POLL_S = 0.5


class Progress:
    """tqdm when stdout is a terminal, else one flushed line per finished run: ``[vision lr 3/12 4.1s] ...``."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.count, self.start = total, desc, 0, time.perf_counter()
        self._bar = None
        if sys.stdout.isatty():
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=desc, leave=True)
            except ImportError:
                pass

    def __call__(self, label: str) -> None:
        self.count += 1
        if self._bar is not None:
            self._bar.set_postfix_str(label[:60])
            self._bar.update(1)
            if self.count >= self.total:
                self._bar.close()
            return
        elapsed = time.perf_counter() - self.start
        print(f"[{self.desc} {self.count}/{self.total} {elapsed:.1f}s] {label}", flush=True)


def run_key(benchmark: Benchmark, spec: dict[str, Any], tuned: str | None) -> str:
    """The run's file name in the store: its key fields (and tuned value), e.g. ``encoding=rope__seed=0__lr=0.003``."""
    fields = list(benchmark.key_fields) + ([tuned] if tuned and tuned not in benchmark.key_fields else [])
    missing = [f for f in fields if f not in spec]
    if missing:
        raise ValueError(f"{benchmark.name}: run spec lacks key field(s) {missing}; it has {sorted(spec)}")
    text = "__".join(f"{f}={spec[f]:g}" if isinstance(spec[f], float) else f"{f}={spec[f]}" for f in fields)
    return re.sub(r"[^A-Za-z0-9_.=+-]", "-", text)


def run_specs(benchmark: Benchmark, specs: list[dict[str, Any]], store: RunStore, executor: Any, label: str,
              tuned: str | None = None) -> list[dict[str, Any]]:
    """The rows of ``specs`` (in their order): reused from ``store``, else claimed and run on ``executor``.

    A spec claimed by another live process is waited for and its stored row reused; if that process
    gives its claim up without a row, this one runs the spec.
    """
    keys = [run_key(benchmark, spec, tuned) for spec in specs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"{benchmark.name}: two runs share a store key; add fields to key_fields "
                         f"{benchmark.key_fields}")
    rows: dict[int, dict[str, Any]] = {}
    progress = Progress(len(specs), f"{benchmark.name} {label}")
    try:
        while len(rows) < len(specs):
            mine = []
            for index, (key, spec) in enumerate(zip(keys, specs)):
                if index in rows:
                    continue
                row = store.load(key, spec)
                if row is None and store.claim(key):
                    row = store.load(key, spec)  # finished by another process just before the claim
                    if row is None:
                        mine.append(index)
                        continue
                    store.release(key)
                if row is not None:
                    rows[index] = row
                    progress(f"{benchmark.progress_label(row)} (stored)")
            for position, row in executor.map([(benchmark, specs[i]) for i in mine]):
                index = mine[position]
                row = jsonable(row)
                store.save(keys[index], specs[index], row)
                rows[index] = row
                progress(benchmark.progress_label(row))
            if len(rows) < len(specs) and not mine:
                time.sleep(POLL_S)  # runs claimed by another process: wait for their files
    finally:
        store.release_all()
    return [rows[i] for i in range(len(specs))]


def _tune(benchmark: Benchmark, specs: list[dict[str, Any]], tuning: Any, store: RunStore, executor: Any
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Every first-seed spec once per grid value; per group the value with the best mean metric over the
    group's first-seed trials; the other seeds with it. Rows in the order of ``specs``."""
    first_seed = specs[0]["seed"]
    first = [s for s in specs if s["seed"] == first_seed]
    trial_specs = [{**s, tuning.param: value} for s in first for value in tuning.values]
    trials = run_specs(benchmark, trial_specs, store, executor, tuning.param, tuning.param)
    chosen: dict[str, Any] = {}
    for group in dict.fromkeys(s[tuning.group] for s in first):
        def mean_score(value: Any, group: Any = group) -> float:
            scores = [_score(t, tuning) for t, s in zip(trials, trial_specs)
                      if s[tuning.group] == group and s[tuning.param] == value]
            return sum(scores) / len(scores)

        chosen[group] = (max if tuning.maximize else min)(tuning.values, key=mean_score)
    rest_specs = [{**s, tuning.param: chosen[s[tuning.group]]} for s in specs if s["seed"] != first_seed]
    rest = iter(run_specs(benchmark, rest_specs, store, executor, "seeds", tuning.param))
    by_spec = {json.dumps(s, sort_keys=True, default=str): t for t, s in zip(trials, trial_specs)}
    rows = [by_spec[json.dumps({**s, tuning.param: chosen[s[tuning.group]]}, sort_keys=True, default=str)]
            if s["seed"] == first_seed else next(rest) for s in specs]
    return rows, trials, chosen


def _score(row: dict[str, Any], tuning: Any) -> float:
    value = row.get(tuning.metric)
    if value is None or value != value:  # a diverged trial never wins
        return -float("inf") if tuning.maximize else float("inf")
    return float(value)


def run(benchmark: Benchmark, config: Any, options: RunOptions, *, preset: str, out: str | Path,
        command: str | None = None) -> Result:
    """Run ``benchmark`` with ``config``; write ``<out>/<name>/`` (results.json, report.md, plots); the result.

    ``command``: the command line shown in the report (default ``pe-toolkit bench <name> --preset <preset>``).
    """
    if command is None:
        command = shlex.join(["pe-toolkit", "bench", benchmark.name, "--preset", preset])
    start = time.perf_counter()
    device = options.device()
    specs = [{**spec, "device": device, "threads": options.threads} for spec in benchmark.runs(config)]
    if not specs:
        raise ValueError(f"{benchmark.name}: the config implies no runs")
    store = RunStore(Path(out) / benchmark.name / "runs" / preset, resume=options.resume)
    jobs = 1 if benchmark.exclusive else options.jobs  # runs that must run alone (timings): one at a time
    executor = make_executor(options.executor, jobs=jobs, address=options.ray_address)
    try:
        tuning = benchmark.tuning(config)
        if tuning is None:
            rows, trials, chosen = run_specs(benchmark, specs, store, executor, "runs"), [], {}
        else:
            rows, trials, chosen = _tune(benchmark, specs, tuning, store, executor)
    finally:
        executor.close()
    rows = [expanded for row in rows for expanded in benchmark.expand(row)]
    result = Result(config=config, preset=preset, rows=rows, trials=trials, chosen=chosen, device=device,
                    seconds=time.perf_counter() - start)
    result.derived = benchmark.analyze(result)
    folder = Path(out) / benchmark.name
    run_config = {"preset": preset, **dataclasses.asdict(config), "device": device, "chosen": chosen,
                  "executor": options.executor, "jobs": jobs, "threads": options.threads,
                  "damaged_run_files": store.damaged}
    trial_rows = [{**t, "kind": "tuning_trial"} for t in trials]
    write_results(benchmark.name, run_config, rows + trial_rows + result.derived, result.seconds, root=out)
    for name, figure in benchmark.plot(result).items():
        save_figure(figure, folder / name, quick=result.quick)
    write_report(benchmark.name, benchmark.title, benchmark.report(result), root=out, command=command,
                 quick=result.quick)
    return result
