"""The runner: one protocol for every benchmark (tuning, seeds, store, resume, executor, outputs).

:func:`run` takes a :class:`~pe_toolkit.bench.protocol.Benchmark`, its loaded config and the
:class:`~pe_toolkit.bench.config.RunOptions`:

1. ``benchmark.runs(config)`` lists the runs; the runner adds ``device`` and ``threads`` to every spec
   (they change the numbers, so they are part of a run's identity in the store).
2. With ``benchmark.tuning(config)``: the first seed of every group runs once per grid value (the
   same grid and validation data for every method); the best value by the stated metric is chosen
   per group, the grid extended past an edge choice up to the tuning's cap (the same for every group;
   a cap hit is flagged in the report's "Tuning" section); the other seeds run with it. Without:
   every spec runs.
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
from pe_toolkit.bench.report import markdown_table, save_figure, write_report, write_results
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
    values, missing = {}, []
    for f in fields:
        try:
            values[f] = spec_value(spec, f)
        except ValueError:
            missing.append(f)
    if missing:
        raise ValueError(f"{benchmark.name}: run spec lacks key field(s) {missing}; it has {sorted(spec)}")
    text = "__".join(f"{f}={v:g}" if isinstance(v, float) else f"{f}={v}" for f, v in values.items())
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


def spec_value(spec: dict[str, Any], field: str) -> Any:
    """``spec[field]``; a dotted ``field`` reads a nested value (``"training.lr"``: ``spec["training"]["lr"]``)."""
    value = spec
    for depth, part in enumerate(field.split(".")):
        if not isinstance(value, dict) or part not in value:
            where = ".".join(field.split(".")[:depth]) or "the spec"
            allowed = sorted(value) if isinstance(value, dict) else f"a {type(value).__name__}, not a mapping"
            raise ValueError(f"spec field {field!r}: {where} has no {part!r} (it has {allowed})")
        value = value[part]
    return value


def with_value(spec: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    """A copy of ``spec`` with ``field`` (dotted: nested) set to ``value``; the other entries are shared.

    A top-level ``field`` may be new (a tuned ``lr`` that the runs read with a default); a dotted one must
    exist (a ``ValueError`` names it otherwise): a nested mapping holds a config section's fields, and a
    misspelt one would add a value that nothing reads.
    """
    if "." in field:
        spec_value(spec, field)
    head, _, rest = field.partition(".")
    return {**spec, head: with_value(spec[head], rest, value) if rest else value}


def _tune(benchmark: Benchmark, specs: list[dict[str, Any]], tuning: Any, store: RunStore, executor: Any
          ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], dict[str, dict[str, Any]]]:
    """Every first-seed spec once per grid value; per group the value with the best mean metric over the
    group's first-seed trials, the grid extended past an edge choice up to ``tuning.max_extensions``
    values (:class:`~pe_toolkit.bench.tuning.GridSearch`, one per group; each round's values of every
    group run as one batch through the store); the other specs with the chosen value.

    The first seed is per group (the seed of the group's first spec); with ``tuning.trials_on`` only the
    first-seed specs that share the group's first spec's value of that field are trials (e.g. its first
    task), and the chosen value serves the group's other first-seed specs too. A spec without the
    ``tuning.group`` field is not tuned: it runs once, before the tuning trials (e.g. a timing run).

    Returns the rows in the order of ``specs``, every trial, ``{group: chosen}`` and per group the search's
    record (grid, tried values, scores, extensions, cap hit and edge).
    """
    group_of, param = (lambda s: s[tuning.group]), tuning.param
    untuned = [s for s in specs if tuning.group not in s]
    untuned_rows = iter(run_specs(benchmark, untuned, store, executor, "runs") if untuned else [])
    leader: dict[Any, dict[str, Any]] = {}  # each group's first spec
    for s in specs:
        if tuning.group in s:
            leader.setdefault(group_of(s), s)

    def is_trial(s: dict[str, Any]) -> bool:
        lead = leader[group_of(s)]
        return s["seed"] == lead["seed"] and (tuning.trials_on is None
                                              or spec_value(s, tuning.trials_on) == spec_value(lead, tuning.trials_on))

    for s in leader.values():  # a misspelt field fails here, before any run, naming the field
        with_value(s, param, None)
        if tuning.trials_on is not None:
            spec_value(s, tuning.trials_on)
    first = [s for s in specs if tuning.group in s and is_trial(s)]
    searches = {group: tuning.search() for group in leader}
    trial_specs: list[dict[str, Any]] = []
    trials: list[dict[str, Any]] = []
    round_ = 0
    while not all(search.done for search in searches.values()):
        pending = {group: search.pending() for group, search in searches.items()}
        batch = [with_value(s, param, value) for s in first for value in pending[group_of(s)]]
        label = param if round_ == 0 else f"{param} extension {round_}"
        rows = run_specs(benchmark, batch, store, executor, label, param)
        trial_specs += batch
        trials += rows
        for group, values in pending.items():
            for value in values:
                scores = [_score(t, tuning) for t, s in zip(rows, batch)
                          if group_of(s) == group and spec_value(s, param) == value]
                searches[group].record(value, sum(scores) / len(scores))
        round_ += 1
    chosen = {group: search.result().chosen for group, search in searches.items()}
    record = {}
    for group, search in searches.items():
        outcome = search.result()
        record[group] = {"grid": list(tuning.values), "tried": outcome.values,
                         "scores": [outcome.scores[v] for v in outcome.values], "chosen": outcome.chosen,
                         "extensions": outcome.extensions, "max_extensions": tuning.max_extensions,
                         "cap_hit": outcome.cap_hit, "edge": outcome.edge}
    rest_specs = [with_value(s, param, chosen[group_of(s)]) for s in specs if tuning.group in s and not is_trial(s)]
    rest = iter(run_specs(benchmark, rest_specs, store, executor, "seeds", param))
    by_spec = {json.dumps(s, sort_keys=True, default=str): t for t, s in zip(trials, trial_specs)}
    rows = [next(untuned_rows) if tuning.group not in s
            else by_spec[json.dumps(with_value(s, param, chosen[group_of(s)]), sort_keys=True, default=str)]
            if is_trial(s) else next(rest) for s in specs]
    return rows, trials, chosen, record


def _score(row: dict[str, Any], tuning: Any) -> float:
    value = row.get(tuning.metric)
    if value is None or value != value:  # a diverged trial never wins
        return float("nan")
    return float(value)


def tuning_section(tuning: Any, record: dict[str, dict[str, Any]]) -> str:
    """The report's "Tuning" section: per group the values tried, the choice, and a flag at a cap hit."""
    direction = "highest" if tuning.maximize else "lowest"
    on = f" and its first `{tuning.trials_on}`" if tuning.trials_on else ""
    lines = [f"## Tuning\n\n`{tuning.param}` per `{tuning.group}`: the {direction} `{tuning.metric}` on the "
             f"first seed{on}; the grid extends past an edge choice ({tuning.scale} scale) by at most "
             f"{tuning.max_extensions} value(s), the same for every group.\n"]
    rows = []
    for group, entry in record.items():
        if not entry["cap_hit"]:
            flag = "interior" + (f" after {entry['extensions']} extension(s)" if entry["extensions"] else "")
        elif len(entry["tried"]) == 1:
            flag = "**one value: not tuned** (cap 0)"
        else:
            flag = (f"**cap hit**: at the {entry['edge']} edge after {entry['extensions']} extension(s) "
                    f"(cap {entry['max_extensions']})")
        rows.append({"group": group, "tried": ", ".join(f"{v:g}" for v in entry["tried"]),
                     "chosen": f"{entry['chosen']:g}", "flag": flag})
    single = sum(entry["cap_hit"] and len(entry["tried"]) == 1 for entry in record.values())
    hits = sum(entry["cap_hit"] for entry in record.values()) - single
    lines.append(markdown_table(rows, [("group", tuning.group), ("tried", f"{tuning.param} tried"),
                                       ("chosen", "chosen"), ("flag", "flag")]))
    if hits:
        lines.append(f"{hits} of {len(record)} group(s) chose a value at an edge of what they tried: their "
                     "optimum may lie beyond it.\n")
    if single:
        lines.append(f"{single} of {len(record)} group(s) tried a single value: `{tuning.param}` was not tuned.\n")
    return "\n".join(lines)


def run(benchmark: Benchmark, config: Any, options: RunOptions, *, preset: str, out: str | Path,
        command: str | None = None) -> Result:
    """Run ``benchmark`` with ``config``; write ``<out>/<name>/`` (results.json, report.md, plots); the result.

    ``command``: the command line shown in the report (default ``pe-toolkit bench <name> --preset <preset>``).
    While ``benchmark.extend(config, result)`` adds runs, another pass runs with ``resume`` on (the stored
    runs are reused) and rewrites the outputs.
    """
    if command is None:
        command = shlex.join(["pe-toolkit", "bench", benchmark.name, "--preset", preset])
    start = time.perf_counter()
    result = _run_pass(benchmark, config, options, preset=preset, out=out, command=command, start=start)
    while benchmark.extend(config, result):
        options = dataclasses.replace(options, resume=True)
        result = _run_pass(benchmark, config, options, preset=preset, out=out, command=command, start=start)
    return result


def _run_pass(benchmark: Benchmark, config: Any, options: RunOptions, *, preset: str, out: str | Path,
              command: str, start: float) -> Result:
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
            rows, trials, chosen, record = run_specs(benchmark, specs, store, executor, "runs"), [], {}, {}
        else:
            rows, trials, chosen, record = _tune(benchmark, specs, tuning, store, executor)
    finally:
        executor.close()
    rows = [expanded for row in rows for expanded in benchmark.expand(row)]
    result = Result(config=config, preset=preset, rows=rows, trials=trials, chosen=chosen, device=device,
                    seconds=time.perf_counter() - start, tuning=record)
    result.derived = benchmark.analyze(result)
    folder = Path(out) / benchmark.name
    run_config = {"preset": preset, **dataclasses.asdict(config), "device": device, "chosen": chosen,
                  "tuning": record, "tuned": None if tuning is None else
                  {"param": tuning.param, "group": tuning.group, "metric": tuning.metric},
                  "fixed": benchmark.fixed(config),
                  "executor": options.executor, "jobs": jobs, "threads": options.threads,
                  "damaged_run_files": store.damaged, "command": command}
    trial_rows = [{**t, "kind": "tuning_trial"} for t in trials]
    write_results(benchmark.name, run_config, rows + trial_rows + result.derived, result.seconds, root=out)
    figures = list(benchmark.plot(result).items())
    for name, figure in figures:
        save_figure(figure, folder / name, quick=result.quick)
    benchmark.write_artifacts(result, folder)
    body = benchmark.report(result)
    if tuning is not None:
        body = body.rstrip() + "\n\n" + tuning_section(tuning, record)
    shown = [f"![{Path(name).stem.replace('_', ' ')}]({name})" for name, _ in figures if f"({name})" not in body]
    if shown:
        body = body.rstrip() + "\n\n## Figures\n\n" + "\n\n".join(shown) + "\n"
    write_report(benchmark.name, benchmark.title, body, root=out, command=command, quick=result.quick)
    return result
