"""The ``Benchmark`` protocol: what a benchmark defines; everything else is the runner's.

A benchmark is a subclass of :class:`Benchmark` that names its typed config (a dataclass, loaded from
the YAML presets ``presets/<name>/{quick,full,gpu}.yaml`` beside its module), lists the runs a config
implies, runs one, and turns the rows into summaries, claims, a report and plots. The runner
(:mod:`pe_toolkit.bench.runner`) owns device and precision, seeds, the equal-budget tuning protocol,
the run store and resume, executors, progress and the output files, in the spirit of torchtune's
recipes and lm-evaluation-harness tasks::

    @dataclass
    class Config:
        seeds: list[int]
        lrs: list[float]

    class MyBenchmark(Benchmark):
        name, title = "mine", "My benchmark"
        Config = Config
        key_fields = ("method", "seed")

        def runs(self, config):
            return [{"method": m, "seed": s} for m in ("rope", "alibi") for s in config.seeds]

        def tuning(self, config):
            return Tuning(param="lr", values=config.lrs, metric="val_loss", maximize=False, group="method")

        def run_one(self, spec):
            return {"method": spec["method"], "seed": spec["seed"], "lr": spec["lr"], "val_loss": ...}
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["Benchmark", "Result", "Tuning"]


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Equal-budget tuning: every ``group`` tries each of ``values`` for ``param`` on the first seed.

    The runner runs the first seed's spec of every group once per value (the same grid, the same
    validation data for every method) and keeps per group the value with the best ``metric`` (the mean
    over the group's first-seed specs; a non-finite one counts as the worst). While a group's best value
    sits at an edge of what it has tried, the runner adds the next value past that edge, one grid step
    further on ``scale`` (:func:`pe_toolkit.bench.tuning.extend_value`), until the best is interior or
    ``max_extensions`` values were added: the same cap for every group, so every method gets the same
    budget. A group that stops at the cap is flagged (``cap_hit``) in the result and the report. Then the
    other seeds run with the chosen value.

    Attributes:
        param, values, metric, maximize, group: the tuned spec field, its starting grid (numbers), the row
            field that scores a trial, its direction, the spec field that names a group.
        scale: ``"log"`` (learning rates: extensions keep the grid's ratio) or ``"linear"``.
        max_extensions: the most values added past the grid per group (0: the grid as given; an edge
            choice is then flagged, not extended).
        limits: values outside ``[low, high]`` are never tried (an extension that would leave them is a cap hit).
        trials_on: a spec field (e.g. ``"task"``): only the first-seed specs with the group's first value of
            it are trials, and the chosen value serves the group's other specs too (tuning on one task of
            many). ``param`` and ``trials_on`` may name nested fields with dots (``"training.lr"``).
    """

    param: str
    values: Sequence[Any]
    metric: str
    maximize: bool
    group: str = "method"
    scale: str = "log"
    max_extensions: int = 0
    limits: tuple[float, float] = (-math.inf, math.inf)
    trials_on: str | None = None

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"Tuning.values for {self.param!r} must not be empty")
        if len(set(map(repr, self.values))) != len(self.values):
            raise ValueError(f"Tuning.values for {self.param!r} must be distinct, got {list(self.values)}")
        self.search()  # the grid, scale, cap and limits are checked where they are used

    def search(self) -> Any:
        """A fresh :class:`~pe_toolkit.bench.tuning.GridSearch` over this grid (one per group)."""
        from pe_toolkit.bench.tuning import GridSearch

        try:
            return GridSearch(self.values, higher_is_better=self.maximize, scale=self.scale,
                              max_extensions=self.max_extensions, limits=self.limits)
        except ValueError as error:
            raise ValueError(f"Tuning of {self.param!r}: {error}") from error


@dataclasses.dataclass
class Result:
    """What a benchmark's ``analyze`` / ``report`` / ``plot`` read.

    ``rows``: the final runs (chosen tuning values, every seed); ``trials``: every tuning run (the
    extensions included); ``chosen``: ``{group value: chosen value}``; ``tuning``: per group what the
    search did (``{"grid", "tried", "scores", "chosen", "extensions", "max_extensions", "cap_hit", "edge"}``);
    ``derived``: what ``analyze`` returned.
    """

    config: Any
    preset: str
    rows: list[dict[str, Any]]
    trials: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    chosen: dict[str, Any] = dataclasses.field(default_factory=dict)
    derived: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    device: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    tuning: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    @property
    def quick(self) -> bool:
        return self.preset == "quick"

    def derived_of(self, kind: str) -> list[dict[str, Any]]:
        """The entries of :attr:`derived` whose ``"kind"`` is ``kind`` (e.g. ``"summary"``, ``"claim"``)."""
        return [entry for entry in self.derived if entry.get("kind") == kind]


class Benchmark:
    """Subclass and set ``name``, ``title``, ``description``, ``Config``; override ``runs`` and ``run_one``.

    Class attributes:
        name: the registry name and the output folder ``<out>/<name>/``.
        title: the report's title.
        description: one line of what it measures; a registered benchmark's comes from the registry
            (:data:`pe_toolkit.bench.registry.BENCHMARKS`, what ``pe-toolkit bench --list`` prints), so set it only
            for a benchmark run as ``module:Class``.
        Config: a dataclass; every preset key is one of its fields (nested dataclasses for sections).
        key_fields: the spec fields that name a run in the run store (the tuned parameter is added).
        presets_dir: the folder of YAML presets (default ``presets/<name>/`` beside the module).
        exclusive: its runs must run alone (timings): the runner runs them one at a time, whatever ``--jobs``.
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Config: ClassVar[type]
    key_fields: ClassVar[tuple[str, ...]] = ("method", "seed")
    presets_dir: ClassVar[Path | None] = None
    exclusive: ClassVar[bool] = False

    # The default analysis and report (override analyze / report for anything else):
    summary_by: ClassVar[tuple[str, ...]] = ()
    """Fields that name a summary group (empty: no summary rows)."""
    summary_metrics: ClassVar[Mapping[str, tuple[float, float] | None]] = {}
    """``{metric: bounds or None}``: each summarised as mean and 95 % interval over the group's runs."""
    summary_keep: ClassVar[tuple[str, ...]] = ()
    """Fields copied from a group's first run into its summary (equal across seeds, e.g. a parameter count)."""
    run_columns: ClassVar[tuple[str | tuple[str, str], ...]] = ()
    """Columns of the report's "Every run" table (empty: no such table)."""
    number_format: ClassVar[str] = ".3f"
    """Format of the report's numbers."""
    held_out: ClassVar[str] = ""
    """How nothing from the test target reaches a model (the fairness section; empty: no such section)."""
    same_budget: ClassVar[str] = ""
    """What every method shares besides the tuning grid (the fairness section), e.g. "trains 500 steps"."""

    # ------------------------------------------------------------------ what a benchmark defines
    def check(self, config: Any) -> None:
        """Cross-field checks of a loaded config (types are checked already); ``ValueError`` naming the key."""

    def runs(self, config: Any) -> list[dict[str, Any]]:
        """One spec (a JSON-able dict) per run, every seed; the tuned parameter is filled in by the runner."""
        raise NotImplementedError

    def tuning(self, config: Any) -> Tuning | None:
        """The tuning grid, or ``None`` (no tuning)."""
        return None

    def fixed(self, config: Any) -> dict[str, Any] | None:
        """Per-method values the config fixes instead of tuning (e.g. an earlier search's choices), recorded in
        ``results.json`` (``config.fixed``) so a reader sees that they were not tuned in this run:
        ``{"param": ..., "group": ..., "values": {method: value}}``, or ``None`` (default)."""
        return None

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Run one spec (in a worker; ``spec["device"]`` and ``spec["threads"]`` set by the runner); a row."""
        raise NotImplementedError

    def expand(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        """The result rows of one run's row (default ``[row]``); a run that measures one trained model several
        ways (e.g. one row per sampling setting) keeps them in a field of its row and splits them here.

        The store, the executors and tuning see the run's row; ``Result.rows`` and ``results.json`` the expansion.
        """
        return [row]

    def extend(self, config: Any, result: Result) -> bool:
        """After a pass: add runs the result calls for (e.g. a swept value past an edge) and return ``True``.

        The runner then runs ``runs(config)`` again with ``resume`` on, so the runs already stored are reused
        and only the added ones train. Default: no further pass.
        """
        return False

    def write_artifacts(self, result: Result, folder: Path) -> None:
        """Outputs that are neither rows, report nor figures (e.g. MIDI files), written into ``folder``."""

    def claims(self, result: Result) -> list[dict[str, Any]]:
        """The claim rows (:func:`pe_toolkit.bench.verdict.claim_row`) of the default :meth:`analyze`."""
        return []

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        """Summaries and claims computed from the rows (each a dict with a ``"kind"``).

        Default: one ``"summary"`` row per :attr:`summary_by` group (:attr:`summary_metrics` as mean and
        interval), then :meth:`claims`.
        """
        from pe_toolkit.bench.summary import summarize_groups

        summaries = []
        if self.summary_by:
            summaries = [{"kind": "summary", **entry} for entry in summarize_groups(
                result.rows, self.summary_by, list(self.summary_metrics), bounds=dict(self.summary_metrics),
                keep=self.summary_keep)]
        return summaries + self.claims(result)

    def describe(self, result: Result) -> str:
        """The report's opening paragraph: data, model, training, device (default: none)."""
        return ""

    def fairness_notes(self, result: Result) -> list[str]:
        """Further bullets of the fairness section (what this benchmark does beyond the common rule)."""
        return []

    def report(self, result: Result) -> str:
        """The markdown body of ``report.md`` (the runner writes the title, command, date and quick-mode note,
        and appends the Tuning section and every figure the body does not show).

        Default: :meth:`describe`; the fairness section (:attr:`held_out`, :attr:`same_budget`,
        :meth:`fairness_notes`); the summary table; the claims table; every run (:attr:`run_columns`).
        """
        from pe_toolkit.bench.report import fairness_section, markdown_table
        from pe_toolkit.bench.summary import summary_table
        from pe_toolkit.bench.verdict import claims_table

        parts = [self.describe(result).strip()]
        if self.held_out:
            parts.append(fairness_section(self.tuning(result.config), getattr(result.config, "seeds", []),
                                          held_out=self.held_out, same_budget=self.same_budget,
                                          notes=self.fairness_notes(result)).strip())
        summaries = result.derived_of("summary")
        if summaries and self.summary_by:
            parts.append("## Mean [95 % interval] over seeds\n\n" + summary_table(
                summaries, [*self.summary_by, *self.summary_keep, "runs"], list(self.summary_metrics),
                self.number_format).strip())
        claims = result.derived_of("claim")
        if claims:
            parts.append("## Claims\n\n" + claims_table(claims, self.number_format).strip())
        if self.run_columns:
            numbers = {field: self.number_format for field in self.summary_metrics}
            parts.append("## Every run\n\n" + markdown_table(
                result.rows, list(self.run_columns), formats={**numbers, "lr": "g", "seconds": ".0f"}).strip())
        return "\n\n".join(part for part in parts if part) + "\n"

    def plot(self, result: Result) -> Mapping[str, Any]:
        """``{file name: matplotlib Figure}``; the runner titles (quick-mode note), saves and closes them."""
        return {}

    def progress_label(self, row: dict[str, Any]) -> str:
        """A short line for the progress display once a run finishes."""
        return " ".join(f"{k} {row.get(k)}" for k in self.key_fields)

    # ------------------------------------------------------------------ helpers
    @classmethod
    def preset_folder(cls) -> Path:
        if cls.presets_dir is not None:  # relative: to the current directory
            return Path(cls.presets_dir)
        return Path(inspect.getfile(cls)).resolve().parent / "presets" / cls.name

    @classmethod
    def preset_names(cls) -> list[str]:
        return sorted(p.stem for p in cls.preset_folder().glob("*.yaml"))
