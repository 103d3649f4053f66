"""The runner: equal-budget tuning, run order, outputs, the quick-mode warning, resume, executors."""

from __future__ import annotations

import importlib.util
import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from tiny_benchmark import Tiny  # noqa: E402

from pe_toolkit.bench import RunOptions, load_config, run  # noqa: E402
from pe_toolkit.bench.report import QUICK_NOTE, RESULT_KEYS, save_figure  # noqa: E402
from pe_toolkit.bench.runner import run_key  # noqa: E402


def _run(tmp_path, preset="full", overrides=(), **options):
    config, _ = load_config(Tiny(), preset, overrides=[f"log={tmp_path / 'executed.log'}", *overrides])
    return run(Tiny(), config, RunOptions(**options), preset=preset, out=tmp_path / "out", command="tiny")


def _executed(tmp_path):
    path = tmp_path / "executed.log"
    return path.read_text().splitlines() if path.exists() else []


def test_tuning_gives_every_method_the_same_grid_then_runs_the_seeds(tmp_path):
    result = _run(tmp_path)
    assert [(t["method"], t["seed"], t["lr"]) for t in result.trials] == [
        (m, 0, lr) for m in ("small", "large") for lr in (0.01, 0.1, 0.3)]
    for method in ("small", "large"):
        trials = [t for t in result.trials if t["method"] == method]
        assert result.chosen[method] == min(trials, key=lambda t: t["val_loss"])["lr"]
    assert result.chosen == {"small": 0.3, "large": 0.1}  # the grids differ in where they reach the optimum
    assert [(r["method"], r["seed"], r["lr"]) for r in result.rows] == [
        ("small", 0, 0.3), ("small", 1, 0.3), ("small", 2, 0.3), ("large", 0, 0.1), ("large", 1, 0.1),
        ("large", 2, 0.1)]
    assert len(_executed(tmp_path)) == 6 + 4  # the first seed's chosen trial is not run again
    document = json.loads((tmp_path / "out" / "tiny" / "results.json").read_text())
    assert tuple(document) == RESULT_KEYS
    assert document["config"]["chosen"] == {"small": 0.3, "large": 0.1}
    assert document["config"]["command"] == "tiny"  # the command that produced it (the guide cites it)
    assert [r.get("kind") for r in document["rows"]] == [None] * 6 + ["tuning_trial"] * 6 + ["summary"] * 2
    assert document["environment"]["torch_threads"] >= 1
    report = (tmp_path / "out" / "tiny" / "report.md").read_text()
    assert report.startswith("# Tiny: least squares\n\nProduced by `tiny` on ")
    assert "- large seed 2: " in report and QUICK_NOTE not in report
    assert (tmp_path / "out" / "tiny" / "loss.png").stat().st_size > 0


def test_quick_mode_says_it_is_a_pipeline_check(tmp_path):
    _run(tmp_path, preset="quick")
    report = (tmp_path / "out" / "tiny" / "report.md").read_text()
    assert report.startswith(f"> **{QUICK_NOTE}**")
    figure, ax = plt.subplots()
    ax.set_title("loss")
    save_figure(figure, tmp_path / "quick.png", quick=True)
    assert figure._suptitle.get_text() == QUICK_NOTE
    assert (tmp_path / "quick.png").stat().st_size > 0
    # a constrained-layout figure with a colorbar (tight_layout would refuse it) keeps its own layout
    figure, axes = plt.subplots(1, 2, layout="constrained")
    figure.colorbar(axes[0].imshow([[0.0, 1.0]]), ax=axes)
    save_figure(figure, tmp_path / "constrained.png", quick=True)
    assert figure._suptitle.get_text() == QUICK_NOTE and (tmp_path / "constrained.png").stat().st_size > 0


def test_the_thread_count_is_in_the_spec_and_reaches_the_run(tmp_path):
    rows = _run(tmp_path, preset="quick", threads=2).rows
    assert {r["threads"] for r in rows} == {2}
    spec = json.loads(next((tmp_path / "out" / "tiny" / "runs" / "quick").glob("*.json")).read_text())["spec"]
    assert spec["threads"] == 2 and spec["device"] == {"accelerator": "auto", "devices": 1, "precision": "32-true"}


def test_resume_reuses_only_runs_whose_whole_spec_matches(tmp_path):
    first = _run(tmp_path, preset="quick")
    (tmp_path / "executed.log").write_text("")
    again = _run(tmp_path, preset="quick", resume=True)
    assert _executed(tmp_path) == [] and again.rows == first.rows
    _run(tmp_path, preset="quick", resume=True, threads=2)  # another thread count: another run
    assert len(_executed(tmp_path)) == 4
    (tmp_path / "executed.log").write_text("")
    _run(tmp_path, preset="quick", resume=True, overrides=["steps.count=21"])  # another setting
    assert len(_executed(tmp_path)) == 4
    (tmp_path / "executed.log").write_text("")
    _run(tmp_path, preset="quick")  # no --resume: a fresh benchmark
    assert len(_executed(tmp_path)) == 4


def test_run_key_names_the_run():
    spec = {"method": "rope/x", "seed": 0, "lr": 0.003, "other": 1}
    assert run_key(Tiny(), spec, "lr") == "method=rope-x__seed=0__lr=0.003"
    with pytest.raises(ValueError, match=r"tiny: run spec lacks key field\(s\) \['seed'\]"):
        run_key(Tiny(), {"method": "a"}, None)


def test_local_processes_give_the_rows_of_one_process(tmp_path):
    one = _run(tmp_path / "one", preset="quick").rows
    two = _run(tmp_path / "two", preset="quick", jobs=2).rows
    assert two == one


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="ray is not installed (the 'ray' extra: pip install 'torch-pe-toolkit[ray]')")
def test_a_local_ray_instance_gives_the_rows_of_local_processes(tmp_path):
    local = _run(tmp_path / "local", preset="quick").rows
    ray_rows = _run(tmp_path / "ray", preset="quick", executor="ray", jobs=2).rows
    assert ray_rows == local
    assert len(_executed(tmp_path / "ray")) == 4


class TwoTasks(Tiny):
    """Two specs per method and seed (20 and 40 steps): one learning rate per method, chosen by the mean."""

    key_fields = ("method", "seed", "steps")

    def runs(self, config):
        return [{**spec, "steps": steps} for spec in super().runs(config) for steps in (20, 40)]


def test_a_group_with_several_runs_gets_one_value_chosen_by_the_mean(tmp_path):
    config, _ = load_config(TwoTasks(), "quick")
    result = run(TwoTasks(), config, RunOptions(), preset="quick", out=tmp_path, command="two")
    for method in ("small", "large"):
        means = {lr: sum(t["val_loss"] for t in result.trials if t["method"] == method and t["lr"] == lr) / 2
                 for lr in config.lrs}
        assert result.chosen[method] == min(means, key=means.get)
    assert [(r["method"], r["lr"]) for r in result.rows] == [(m, result.chosen[m]) for m in ("small", "large")
                                                            for _ in range(2)]
    assert len(result.trials) == 2 * 2 * 2  # methods x step counts x learning rates


class Halves(Tiny):
    """A multi-row run: a loss per half of the validation set in the run's row, split into two rows by ``expand``."""

    def run_one(self, spec):
        row = super().run_one(spec)
        return {**row, "halves": [{"half": h, "loss": row["val_loss"] * (h + 1)} for h in (0, 1)]}

    def expand(self, row):
        shared = {k: v for k, v in row.items() if k != "halves"}
        return [{**shared, **half} for half in row["halves"]]


def test_expand_splits_a_run_into_rows_after_tuning_and_storing(tmp_path):
    config, _ = load_config(Halves(), "quick")
    result = run(Halves(), config, RunOptions(), preset="quick", out=tmp_path, command="halves")
    assert [(r["method"], r["seed"], r["half"]) for r in result.rows] == [("small", 0, 0), ("small", 0, 1),
                                                                          ("large", 0, 0), ("large", 0, 1)]
    assert all(r["loss"] == r["val_loss"] * (r["half"] + 1) and "halves" not in r for r in result.rows)
    assert all("halves" in t for t in result.trials)  # tuning and the store see the run's own row
    for method in ("small", "large"):
        trials = [t for t in result.trials if t["method"] == method]
        assert result.chosen[method] == min(trials, key=lambda t: t["val_loss"])["lr"]
    stored = [json.loads(p.read_text())["row"] for p in (tmp_path / "tiny" / "runs" / "quick").glob("*.json")]
    assert len(stored) == 4 and all(len(row["halves"]) == 2 for row in stored)
    document = json.loads((tmp_path / "tiny" / "results.json").read_text())
    assert [r.get("half") for r in document["rows"] if r.get("kind") is None] == [0, 1, 0, 1]


class TinyAlone(Tiny):
    exclusive = True  # e.g. timings: its runs must not share the machine with another run


@pytest.mark.parametrize("cls, used", [(Tiny, 2), (TinyAlone, 1)])
def test_runs_that_must_run_alone_get_one_worker_whatever_jobs_says(tmp_path, monkeypatch, cls, used):
    from pe_toolkit.bench import runner

    made = []
    real = runner.make_executor

    def spy(kind, *, jobs, address=None):
        made.append(jobs)
        return real(kind, jobs=1, address=address)  # in this process: the test counts the workers asked for

    monkeypatch.setattr(runner, "make_executor", spy)
    config, _ = load_config(cls(), "quick", overrides=[f"log={tmp_path / 'executed.log'}"])
    run(cls(), config, RunOptions(jobs=2), preset="quick", out=tmp_path / "out", command="tiny")
    assert made == [used]
    document = json.loads((tmp_path / "out" / "tiny" / "results.json").read_text())
    assert document["config"]["jobs"] == used
