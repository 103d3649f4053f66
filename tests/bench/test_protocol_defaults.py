"""The Benchmark protocol's default analysis and report, the runner's figure links and the seeds check."""

from __future__ import annotations

import dataclasses

import pytest
from tiny_benchmark import Tiny

from pe_toolkit.bench import Benchmark, RunOptions, load_config, run
from pe_toolkit.bench.config import Dropout
from pe_toolkit.bench.report import fairness_section
from pe_toolkit.bench.verdict import claim_row, decide_claim


class Declared(Tiny):
    """Tiny with the default analyze / report: only what it declares, plus its claim."""

    summary_by = ("method",)
    summary_metrics = {"val_loss": None}
    run_columns = ("method", "seed", "lr", "val_loss")
    number_format = ".4f"
    held_out = "the validation points are the last 16 of each seed's data"
    same_budget = "runs 40 steps"
    analyze = Benchmark.analyze
    report = Benchmark.report

    def claims(self, result):
        loss = {m: [r["val_loss"] for r in result.rows if r["method"] == m] for m in ("small", "large")}
        return [claim_row(decide_claim(loss["small"], loss["large"], higher_is_better=False, paired=True,
                                       name="small beats large"))]

    def describe(self, result):
        return f"Least squares, seeds {result.config.seeds}."

    def fairness_notes(self, result):
        return ["a benchmark's own note"]


def _run(tmp_path, cls, preset="full", overrides=()):
    config, _ = load_config(cls(), preset, overrides=list(overrides))
    return run(cls(), config, RunOptions(), preset=preset, out=tmp_path, command="tiny")


def test_default_analyze_summarises_each_group_then_adds_the_claims(tmp_path):
    result = _run(tmp_path, Declared)
    summaries, claims = result.derived_of("summary"), result.derived_of("claim")
    assert [(s["method"], s["runs"], s["val_loss"]["n"]) for s in summaries] == [("small", 3, 3), ("large", 3, 3)]
    small = [r["val_loss"] for r in result.rows if r["method"] == "small"]
    assert summaries[0]["val_loss"]["mean"] == pytest.approx(sum(small) / 3)
    assert [c["name"] for c in claims] == ["small beats large"] and claims[0]["test"].startswith("paired t")


def test_default_report_has_every_section_in_order_and_the_runner_links_the_figures(tmp_path):
    _run(tmp_path, Declared)
    report = (tmp_path / "tiny" / "report.md").read_text()
    order = ["Least squares, seeds [0, 1, 2].", "## How the fairness rule is met", "every method runs 40 steps",
             "* a benchmark's own note", "## Mean [95 % interval] over seeds", "| method | runs | val_loss |",
             "## Claims", "small beats large", "## Every run", "| method | seed | lr | val_loss |", "## Tuning",
             "## Figures", "![loss](loss.png)"]
    positions = [report.index(text) for text in order]
    assert positions == sorted(positions)


def test_a_figure_the_body_shows_is_not_linked_twice(tmp_path):
    class Shown(Tiny):
        def report(self, result):
            return "![the loss](loss.png)\n"

    _run(tmp_path, Shown)
    report = (tmp_path / "tiny" / "report.md").read_text()
    assert report.count("(loss.png)") == 1 and "## Figures" not in report


def test_without_declarations_the_defaults_write_nothing():
    class Bare(Benchmark):
        pass

    from pe_toolkit.bench import Result

    result = Result(config=None, preset="full", rows=[{"method": "a", "seed": 0}])
    assert Bare().analyze(result) == [] and Bare().report(result) == "\n"


def test_duplicate_seeds_are_refused_for_every_benchmark():
    with pytest.raises(ValueError, match=r"seeds must be a non-empty list of distinct values, got \[0, 0\]"):
        load_config(Tiny(), "full", overrides=["seeds=[0, 0]"])
    with pytest.raises(ValueError, match=r"seeds must be a non-empty list of distinct values, got \[\]"):
        load_config(Tiny(), "full", overrides=["seeds=[]"])


def test_fairness_selection_replaces_the_grid_sentence():
    text = fairness_section(None, [0, 1, 2], held_out="x", selection="thresholds tuned inside each run")
    assert "* Same budget for every method: thresholds tuned inside each run." in text
    assert "nothing is tuned" not in text


def test_run_one_gets_plain_json_types(tmp_path):
    from pe_toolkit.bench.executors import execute

    class Typed(Tiny):
        def run_one(self, spec):
            return {"types": sorted({type(v).__name__ for v in spec.values()})}

    from jsonargparse.typing import PositiveInt

    row = execute(Typed(), {"method": "small", "seed": PositiveInt(1), "steps": (1, 2), "threads": 1})
    assert row["types"] == ["int", "list", "str"]


def test_a_failing_run_is_named_and_its_exception_goes_on_unchanged(capsys):
    from pe_toolkit.bench.executors import execute

    class Failing(Tiny):
        def run_one(self, spec):
            raise KeyError("the user's bug")

    with pytest.raises(KeyError, match="the user's bug"):
        execute(Failing(), {"method": "small", "seed": 2, "threads": 1})
    assert capsys.readouterr().err == ("tiny: the run method='small' seed=2 failed (KeyError: \"the user's bug\"); the "
                                       "runs finished before it are stored (rerun with --resume)\n")


@pytest.mark.parametrize("row", [[1, 2], None, 0.5])
def test_a_row_that_is_not_a_dict_is_a_type_error_naming_the_run(row):
    from pe_toolkit.bench.executors import execute

    class Wrong(Tiny):
        def run_one(self, spec):
            return row

    with pytest.raises(TypeError) as error:
        execute(Wrong(), {"method": "large", "seed": 0, "threads": 1})
    assert str(error.value) == (f"tiny: run_one must return one row, a dict; the run method='large' seed=0 returned "
                                f"{type(row).__name__} {row!r}")


def test_model_size_is_checked_by_type():
    from pe_toolkit.bench.config import ModelSize, to_dataclass

    assert to_dataclass(ModelSize, {"dim": 8, "num_heads": 2, "num_layers": 1}) == ModelSize(8, 2, 1)
    with pytest.raises(ValueError, match=r"(?s)config\.num_heads.*PositiveInt"):
        to_dataclass(ModelSize, {"dim": 8, "num_heads": 0, "num_layers": 1})


@dataclasses.dataclass
class _WithDropout:
    dropout: Dropout = 0.0


def test_dropout_type_is_in_zero_one():
    from pe_toolkit.bench.config import to_dataclass

    Model = _WithDropout
    assert to_dataclass(Model, {"dropout": 0.5}).dropout == 0.5
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="(?s)config.dropout.*Dropout"):
            to_dataclass(Model, {"dropout": bad})


def test_training_grid_builds_the_lr_tuning():
    from pe_toolkit.bench.config import TrainingGrid, to_dataclass

    grid = to_dataclass(TrainingGrid, {"steps": 10, "batch_size": 4, "lrs": [0.001, 0.003], "max_extensions": 2})
    tuning = grid.lr_tuning(metric="val_loss", maximize=False, group="variant")
    assert (tuning.param, list(tuning.values), tuning.metric, tuning.maximize, tuning.group) == (
        "lr", [0.001, 0.003], "val_loss", False, "variant")
    assert (tuning.max_extensions, tuning.scale) == (2, "log")
    with pytest.raises(ValueError, match="(?s)config.scale"):
        to_dataclass(TrainingGrid, {"steps": 10, "batch_size": 4, "lrs": [0.001], "scale": "exp"})


@pytest.mark.parametrize("preset", ["full", "gpu"])
def test_every_tuned_evidence_preset_extends_an_edge_choice(preset):
    """A full or gpu preset that tunes a parameter lets the grid extend past an edge choice (issue 39: no chosen
    value may sit at an unextended edge); length_generalization's families / gpu presets tune nothing, its full
    preset fixes the choices of its lr_search preset."""
    from pe_toolkit.bench.registry import get_benchmark, list_benchmarks

    tuned = 0
    for name in list_benchmarks():
        benchmark = get_benchmark(name)
        if preset not in benchmark.preset_names():
            continue
        tuning = benchmark.tuning(load_config(benchmark, preset)[0])
        if tuning is not None:
            tuned += 1
            assert tuning.max_extensions >= 1, f"{name} {preset}: max_extensions {tuning.max_extensions}"
    assert tuned >= 10


@pytest.mark.parametrize(("target", "message"), [
    ("tiny_benchmark:Nope", "'tiny_benchmark:Nope': module 'tiny_benchmark' has no attribute 'Nope'; "
                            "pe_toolkit.bench.Benchmark subclasses there: ['Tiny']"),
    ("tiny_benchmark:Config", "'tiny_benchmark:Config': module 'tiny_benchmark' has an attribute that is not a "
                              "Benchmark subclass: 'Config'; pe_toolkit.bench.Benchmark subclasses there: ['Tiny']"),
    ("no_such_module_here:Tiny", "'no_such_module_here:Tiny': no module 'no_such_module_here' here (run from its "
                                 "folder, or put that folder on PYTHONPATH)"),
    ("nope", "unknown benchmark 'nope'; available: attention_stability, "),
])
def test_an_unknown_benchmark_target_names_what_is_there(target, message):
    from pe_toolkit.bench.registry import get_benchmark

    with pytest.raises(ValueError) as error:
        get_benchmark(target)
    assert str(error.value).startswith(message)
    assert type(get_benchmark("tiny_benchmark:Tiny")).__name__ == "Tiny"


def test_a_missing_dependency_of_a_benchmark_module_is_not_called_a_missing_module(tmp_path, monkeypatch):
    (tmp_path / "needs_absent.py").write_text("import absent_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from pe_toolkit.bench.registry import get_benchmark

    with pytest.raises(ModuleNotFoundError, match="absent_dependency_xyz"):
        get_benchmark("needs_absent:Whatever")
