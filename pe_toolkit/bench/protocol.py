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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["Benchmark", "Result", "Tuning"]


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Equal-budget tuning: every ``group`` tries each of ``values`` for ``param`` on the first seed.

    The runner runs the first seed's spec of every group once per value (the same grid, the same
    validation data for every method), keeps per group the value with the best ``metric``, then runs
    the other seeds with it. A later version of the runner extends the grid when the choice sits at
    an edge (issue 39); benchmarks only state the grid.
    """

    param: str
    values: Sequence[Any]
    metric: str
    maximize: bool
    group: str = "method"

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"Tuning.values for {self.param!r} must not be empty")
        if len(set(map(repr, self.values))) != len(self.values):
            raise ValueError(f"Tuning.values for {self.param!r} must be distinct, got {list(self.values)}")


@dataclasses.dataclass
class Result:
    """What a benchmark's ``analyze`` / ``report`` / ``plot`` read.

    ``rows``: the final runs (chosen tuning values, every seed); ``trials``: every tuning run;
    ``chosen``: ``{group value: chosen value}``; ``derived``: what ``analyze`` returned.
    """

    config: Any
    preset: str
    rows: list[dict[str, Any]]
    trials: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    chosen: dict[str, Any] = dataclasses.field(default_factory=dict)
    derived: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    device: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    @property
    def quick(self) -> bool:
        return self.preset == "quick"


class Benchmark:
    """Subclass and set ``name``, ``title``, ``description``, ``Config``; override ``runs`` and ``run_one``.

    Class attributes:
        name: the registry name and the output folder ``<out>/<name>/``.
        title: the report's title.
        description: one line of what it measures (``pe-toolkit bench --list``).
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

    # ------------------------------------------------------------------ what a benchmark defines
    def check(self, config: Any) -> None:
        """Cross-field checks of a loaded config (types are checked already); ``ValueError`` naming the key."""

    def runs(self, config: Any) -> list[dict[str, Any]]:
        """One spec (a JSON-able dict) per run, every seed; the tuned parameter is filled in by the runner."""
        raise NotImplementedError

    def tuning(self, config: Any) -> Tuning | None:
        """The tuning grid, or ``None`` (no tuning)."""
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

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        """Summaries and claims computed from the rows (each a dict with a ``"kind"``)."""
        return []

    def report(self, result: Result) -> str:
        """The markdown body of ``report.md`` (the runner writes the title, command, date and quick-mode note)."""
        return ""

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
