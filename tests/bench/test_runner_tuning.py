"""The runner's self-extending tuning grid: an edge choice extends until interior or the cap (the same for
every group), a cap hit is flagged in the result and the report, extended trials go through the run store."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import pytest

from pe_toolkit.bench import Benchmark, Result, RunOptions, Tuning, run
from pe_toolkit.bench.runner import tuning_section

OPTIMA = {"near": 3e-2, "far": 10.0}  # validation loss is lowest at these learning rates


@dataclasses.dataclass
class Config:
    methods: list[str]
    seeds: list[int]
    lrs: list[float]
    max_extensions: int
    log: str = ""


class Parabola(Benchmark):
    """No training: a run's validation loss is (log10 lr - log10 optimum)^2 + seed / 100."""

    name, title = "parabola", "Parabola"
    Config = Config
    key_fields = ("method", "seed")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        return [{"method": m, "seed": s, "log": config.log} for m in config.methods for s in config.seeds]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="lr", values=config.lrs, metric="val_loss", maximize=False, group="method",
                      max_extensions=config.max_extensions)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        if spec["log"]:
            with open(spec["log"], "a") as handle:
                handle.write(f"{spec['method']} {spec['seed']} {spec['lr']!r}\n")
        loss = (math.log10(spec["lr"]) - math.log10(OPTIMA[spec["method"]])) ** 2 + spec["seed"] / 100
        return {"method": spec["method"], "seed": spec["seed"], "lr": spec["lr"], "val_loss": loss}

    def report(self, result: Result) -> str:
        return "Body.\n"


def _run(tmp_path, methods=("near", "far"), lrs=(1e-4, 1e-3), cap=3, resume=False) -> Result:
    config = Config(methods=list(methods), seeds=[0, 1], lrs=list(lrs), max_extensions=cap,
                    log=str(tmp_path / "executed.log"))
    return run(Parabola(), config, RunOptions(resume=resume), preset="full", out=tmp_path / "out", command="p")


def _executed(tmp_path) -> list[str]:
    path = tmp_path / "executed.log"
    return path.read_text().splitlines() if path.exists() else []


def test_an_optimum_outside_the_grid_is_reached_by_extension(tmp_path):
    result = _run(tmp_path, methods=("near",))
    entry = result.tuning["near"]
    assert entry["tried"] == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1])  # two extensions: 1e-2 then 1e-1
    assert result.chosen["near"] == pytest.approx(1e-2) and entry["chosen"] == result.chosen["near"]
    assert entry["extensions"] == 2 and not entry["cap_hit"] and entry["edge"] is None
    assert entry["grid"] == [1e-4, 1e-3] and entry["max_extensions"] == 3
    assert [r["lr"] for r in result.rows] == [pytest.approx(1e-2)] * 2  # every seed runs with the choice
    assert len(result.trials) == 4
    assert len(_executed(tmp_path)) == 4 + 1  # the first seed's chosen trial is reused, the second seed runs
    report = (tmp_path / "out" / "parabola" / "report.md").read_text()
    assert "## Tuning" in report and "| near | 0.0001, 0.001, 0.01, 0.1 | 0.01 | interior after 2 extension(s) |" \
        in report and "cap hit" not in report


def test_a_group_at_the_cap_is_flagged_and_every_group_has_the_same_cap(tmp_path):
    result = _run(tmp_path, cap=2)
    near, far = result.tuning["near"], result.tuning["far"]
    assert not near["cap_hit"] and near["extensions"] == 2
    assert far["cap_hit"] and far["edge"] == "high" and far["extensions"] == 2  # stopped by the cap, not at 10
    assert far["tried"] == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1]) and result.chosen["far"] == pytest.approx(0.1)
    assert near["max_extensions"] == far["max_extensions"] == 2  # equal budget
    document = json.loads((tmp_path / "out" / "parabola" / "results.json").read_text())
    assert document["config"]["tuning"]["far"]["cap_hit"] is True
    assert document["config"]["tuned"] == {"param": "lr", "group": "method", "metric": "val_loss"}
    assert [r.get("kind") for r in document["rows"]].count("tuning_trial") == 8
    report = (tmp_path / "out" / "parabola" / "report.md").read_text()
    assert report.index("Body.") < report.index("## Tuning")
    assert "| far | 0.0001, 0.001, 0.01, 0.1 | 0.1 | **cap hit**: at the high edge after 2 extension(s) (cap 2) |" \
        in report
    assert "1 of 2 group(s) chose a value at an edge" in report


def test_a_cap_of_zero_keeps_the_grid_and_flags_the_edge(tmp_path):
    result = _run(tmp_path, cap=0)
    assert [result.tuning[m]["tried"] for m in ("near", "far")] == [[1e-4, 1e-3]] * 2
    assert result.tuning["near"]["cap_hit"] and result.tuning["near"]["edge"] == "high"
    assert len(result.trials) == 4


def test_resume_reuses_the_extended_trials(tmp_path):
    first = _run(tmp_path, cap=2)
    assert len(_executed(tmp_path)) == 8 + 2
    os.remove(tmp_path / "executed.log")
    again = _run(tmp_path, cap=2, resume=True)
    assert _executed(tmp_path) == []  # every trial, the extensions included, came from the store
    assert again.rows == first.rows and again.trials == first.trials and again.tuning == first.tuning
    stored = sorted(p.name for p in (tmp_path / "out" / "parabola" / "runs" / "full").glob("method=far*.json"))
    assert stored == sorted(f"method=far__seed=0__lr={lr}.json" for lr in ("0.0001", "0.001", "0.01", "0.1")) + [
        "method=far__seed=1__lr=0.1.json"]


def test_a_diverged_trial_is_the_worst_and_bounds_the_extension(tmp_path):
    class Diverges(Parabola):
        def run_one(self, spec):
            row = super().run_one(spec)
            return {**row, "val_loss": math.nan} if spec["lr"] > 5e-2 else row

    config = Config(methods=["far"], seeds=[0], lrs=[1e-3, 1e-2], max_extensions=3)
    result = run(Diverges(), config, RunOptions(), preset="full", out=tmp_path, command="d")
    entry = result.tuning["far"]
    assert result.chosen["far"] == pytest.approx(1e-2) and not entry["cap_hit"]
    assert math.isnan(entry["scores"][-1]) and entry["tried"][-1] == pytest.approx(0.1)


def test_tuning_checks_its_grid_and_cap():
    with pytest.raises(ValueError, match="Tuning of 'lr': max_extensions must be an int >= 0, got -1"):
        Tuning(param="lr", values=[1e-3], metric="loss", maximize=False, max_extensions=-1)
    with pytest.raises(ValueError, match="Tuning of 'lr': a log-scale grid needs positive values"):
        Tuning(param="lr", values=[0.0, 1e-3], metric="loss", maximize=False)
    with pytest.raises(ValueError, match="Tuning of 'lr': scale must be one of"):
        Tuning(param="lr", values=[1e-3], metric="loss", maximize=False, scale="cubic")
    with pytest.raises(ValueError, match="Tuning of 'p': grid values must be finite numbers"):
        Tuning(param="p", values=["adam", "sgd"], metric="loss", maximize=False)


def test_a_one_value_grid_is_flagged_as_not_tuned():
    tuning = Tuning(param="lr", values=[1e-3], metric="loss", maximize=False)
    record = {"a": {"grid": [1e-3], "tried": [1e-3], "scores": [1.0], "chosen": 1e-3, "extensions": 0,
                    "max_extensions": 0, "cap_hit": True, "edge": "high"}}
    text = tuning_section(tuning, record)
    assert "| a | 0.001 | 0.001 | **one value: not tuned** (cap 0) |" in text
    assert text.endswith("1 of 1 group(s) tried a single value: `lr` was not tuned.\n") and "at an edge" not in text


def test_specs_without_a_group_run_untuned_and_each_group_tunes_on_its_own_first_seed(tmp_path):
    class Mixed(Parabola):
        def runs(self, config):
            timing = [{"timing": n, "log": config.log} for n in (1, 2)]
            return timing + [{"method": "near", "seed": s, "log": config.log} for s in (0, 1)] + [
                {"method": "far", "seed": s, "log": config.log} for s in (5, 6)]

        def run_one(self, spec):
            return {"timing": spec["timing"]} if "timing" in spec else super().run_one(spec)

    Mixed.key_fields = ("method", "seed")
    config = Config(methods=[], seeds=[], lrs=[1e-4, 1e-3], max_extensions=0)
    with pytest.raises(ValueError, match="run spec lacks key field"):  # the timing specs need their own key
        run(Mixed(), config, RunOptions(), preset="full", out=tmp_path, command="m")

    class Keyed(Mixed):
        key_fields = ("run",)

        def runs(self, config):
            return [{**s, "run": f"{s.get('timing', '')}{s.get('method', '')}{s.get('seed', '')}"}
                    for s in super().runs(config)]

    result = run(Keyed(), config, RunOptions(), preset="full", out=tmp_path / "k", command="k")
    assert [r.get("timing") for r in result.rows[:2]] == [1, 2]  # untuned, in place
    assert [(r["method"], r["seed"], r["lr"]) for r in result.rows[2:]] == [
        ("near", 0, 1e-3), ("near", 1, 1e-3), ("far", 5, 1e-3), ("far", 6, 1e-3)]
    assert sorted((t["method"], t["seed"]) for t in result.trials) == [("far", 5)] * 2 + [("near", 0)] * 2


# ------------------------------------------------------------------ a nested parameter, tuned on one task of many
class Tasks(Parabola):
    """Two tasks per method; the learning rate lives in ``spec["training"]["lr"]``; the trials are the first task's."""

    name = "tasks"
    key_fields = ("method", "task", "seed")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        return [{"method": m, "task": t, "seed": s, "training": {"lr": 1.0, "steps": 5}, "log": config.log}
                for m in config.methods for t in ("first", "second") for s in config.seeds]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="training.lr", values=config.lrs, metric="val_loss", maximize=False, group="method",
                      max_extensions=config.max_extensions, trials_on="task")

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        lr = spec["training"]["lr"]
        with open(spec["log"], "a") as handle:
            handle.write(f"{spec['method']} {spec['task']} {spec['seed']} {lr!r}\n")
        assert spec["training"]["steps"] == 5  # the rest of the nested dict is kept
        loss = (math.log10(lr) - math.log10(OPTIMA[spec["method"]])) ** 2 + spec["seed"] / 100
        return {"method": spec["method"], "task": spec["task"], "seed": spec["seed"], "lr": lr, "val_loss": loss}


def test_a_nested_parameter_tuned_on_the_first_task_serves_every_task(tmp_path):
    config = Config(methods=["near"], seeds=[0, 1], lrs=[1e-3, 1e-2, 1e-1], max_extensions=2,
                    log=str(tmp_path / "executed.log"))
    result = run(Tasks(), config, RunOptions(), preset="full", out=tmp_path / "out", command="t")
    assert result.chosen == {"near": 1e-2}  # 3e-2 lies between 1e-2 and 1e-1; 1e-2 is nearer on the log scale
    executed = _executed(tmp_path)
    # trials: the first task, first seed, every grid value; then the rest once with the choice
    assert sorted(executed) == sorted(["near first 0 0.001", "near first 0 0.01", "near first 0 0.1",
                                       "near first 1 0.01", "near second 0 0.01", "near second 1 0.01"])
    assert [(r["task"], r["seed"], r["lr"]) for r in result.rows] == [
        ("first", 0, 1e-2), ("first", 1, 1e-2), ("second", 0, 1e-2), ("second", 1, 1e-2)]
    assert sorted(p.name for p in (tmp_path / "out" / "tasks" / "runs" / "full").glob("*.json"))[0] == \
        "method=near__task=first__seed=0__training.lr=0.001.json"


def test_a_missing_nested_key_field_is_named(tmp_path):
    class Broken(Tasks):
        key_fields = ("method", "task", "seed", "training.steps")

        def runs(self, config):
            return [{"method": "near", "task": "first", "seed": 0, "training": {"lr": 1.0}, "log": config.log}]

    config = Config(methods=["near"], seeds=[0], lrs=[1e-2], max_extensions=0, log=str(tmp_path / "x.log"))
    with pytest.raises(ValueError, match=r"tasks: run spec lacks key field\(s\) \['training.steps'\]"):
        run(Broken(), config, RunOptions(), preset="full", out=tmp_path / "out", command="t")


@pytest.mark.parametrize(("param", "trials_on", "message"), [
    ("training.rate", "task", r"spec field 'training.rate': training has no 'rate' \(it has \['lr', 'steps'\]\)"),
    ("optim.lr", "task", r"spec field 'optim.lr': the spec has no 'optim' \(it has \['device', 'log', 'method'"),
    ("training.lr.x", "task", r"spec field 'training.lr.x': training.lr has no 'x' \(it has a float, not a mapping\)"),
    ("training.lr", "tsak", r"spec field 'tsak': the spec has no 'tsak'"),
])
def test_a_misspelt_tuning_field_is_named_before_any_run(tmp_path, param, trials_on, message):
    class Misspelt(Tasks):
        def tuning(self, config):
            return Tuning(param=param, values=config.lrs, metric="val_loss", maximize=False, group="method",
                          trials_on=trials_on)

    config = Config(methods=["near"], seeds=[0], lrs=[1e-2], max_extensions=0, log=str(tmp_path / "x.log"))
    with pytest.raises(ValueError, match=message):
        run(Misspelt(), config, RunOptions(), preset="full", out=tmp_path / "out", command="t")
    assert not (tmp_path / "x.log").exists()  # nothing ran


def test_with_value_refuses_a_nested_field_the_spec_lacks():
    from pe_toolkit.bench.runner import spec_value, with_value

    spec = {"training": {"lr": 1.0, "steps": 5}, "seed": 0}
    assert with_value(spec, "training.lr", 2.0) == {"training": {"lr": 2.0, "steps": 5}, "seed": 0}
    assert spec["training"]["lr"] == 1.0 and spec_value(spec, "training.steps") == 5
    assert with_value(spec, "lr", 2.0) == {**spec, "lr": 2.0}  # a top-level field may be new
    with pytest.raises(ValueError, match=r"spec field 'training.lrr': training has no 'lrr'"):
        with_value(spec, "training.lrr", 2.0)


class FixedParabola(Parabola):
    """Every method's lr fixed by the config (e.g. an earlier search's choices): nothing tuned."""

    def runs(self, config: Config) -> list[dict[str, Any]]:
        return [{**spec, "lr": config.lrs[0]} for spec in super().runs(config)]

    def tuning(self, config: Config) -> None:
        return None

    def fixed(self, config: Config) -> dict[str, Any]:
        return {"param": "lr", "group": "method", "values": dict.fromkeys(config.methods, config.lrs[0])}


def test_values_a_benchmark_fixes_are_recorded_beside_an_empty_tuning(tmp_path):
    config = Config(methods=["near", "far"], seeds=[0], lrs=[1e-3], max_extensions=0)
    run(FixedParabola(), config, RunOptions(), preset="full", out=tmp_path, command="p")
    document = json.loads((tmp_path / "parabola" / "results.json").read_text())["config"]
    assert document["tuned"] is None and document["tuning"] == {}
    assert document["fixed"] == {"param": "lr", "group": "method", "values": {"near": 1e-3, "far": 1e-3}}
    run(Parabola(), config, RunOptions(), preset="full", out=tmp_path / "tuned", command="p")
    assert json.loads((tmp_path / "tuned" / "parabola" / "results.json").read_text())["config"]["fixed"] is None
