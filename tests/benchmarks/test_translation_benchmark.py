"""The translation benchmark: presets and their errors, cells and run identity, intervals and verdicts (the oracle
an upper bound, never a claim), the agreement split, the plot, one tiny end-to-end run with --resume.

The end-to-end run goes through ``translation.main`` in a fresh interpreter, as a user runs it (see
tests/benchmarks/test_extrapolation.py for why a benchmark's workers are not started from the pytest process).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import translation as bench

presets = importlib.import_module("presets")  # the module translation imports (benchmarks/ is on sys.path)
ROOT = Path(bench.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def loaded():
    return {name: presets.load_preset("translation", name) for name in ("quick", "full", "gpu")}


# ------------------------------------------------------------------------------------------ presets
def test_presets_load_and_follow_the_fairness_rule(loaded):
    assert presets.available_presets("translation") == ["full", "gpu", "quick"]
    for name, preset in loaded.items():
        assert bench.check_preset(preset) is preset and preset["preset"] == name
        assert preset["variants"] == ["pe", "xl_input", "xl_head"] and preset["positions"] == ["reorderer", "oracle"]
    for name in ("full", "gpu"):
        preset = loaded[name]
        assert len(preset["seeds"]) >= 3
        assert len(preset["training"]["lr"]) >= 3  # a grid that can bracket each cell's optimum
    assert loaded["full"]["jobs"] == 2 and loaded["full"]["threads"] == 1


def _bad(loaded, edit):
    preset = copy.deepcopy(loaded["quick"])
    edit(preset)
    return preset


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda p: p.update(seeds=[]), "'seeds'"),
        (lambda p: p.update(seeds=[0, 0]), "'seeds'"),
        (lambda p: p.update(variants=["pe", "rope"]), "'variants'"),
        (lambda p: p.update(positions=["gold"]), "'positions'"),
        (lambda p: p.update(positions=[]), "'positions'"),
        (lambda p: p.update(jobs=-1), "'jobs'"),
        (lambda p: p["training"].update(lr=0.001), "'training.lr'"),
        (lambda p: p["training"].update(lr=[]), "'training.lr'"),
        (lambda p: p["training"].update(steps=0), "'training.steps'"),
        (lambda p: p["data"].update(train_pairs=1.5), "'data.train_pairs'"),
        (lambda p: p["data"].update(max_depth=-1), "'data.max_depth'"),
        (lambda p: p["model"].update(dim=30), "'model.dim'"),
        (lambda p: p["model"].update(dropout=1.0), "'model.dropout'"),
        (lambda p: p["reorderer"].update(epochs=0), "'reorderer.epochs'"),
        (lambda p: p["model"].pop("dim"), "'model'"),
        (lambda p: p.pop("reorderer"), "'reorderer'"),
        (lambda p: p.update(extra=1), "'extra'"),
    ],
)
def test_bad_preset_values_name_their_key(loaded, edit, key):
    with pytest.raises(ValueError, match=key):
        bench.check_preset(_bad(loaded, edit))


def test_bad_preset_keys_on_the_command_line_are_value_errors_naming_the_key(tmp_path):
    out = ["--out", str(tmp_path)]
    with pytest.raises(ValueError, match="'training.stepz' does not exist"):
        bench.main(["--quick", *out, "--set", "training.stepz=3"])
    with pytest.raises(ValueError, match="'data.pairs' does not exist"):
        bench.main(["--quick", *out, "--set", "data.pairs=3"])
    config = tmp_path / "typo.yaml"
    config.write_text("model: {layers: 3}\n")
    with pytest.raises(ValueError, match="'model.layers' does not exist"):
        bench.main(["--quick", *out, "--config", str(config)])
    with pytest.raises(ValueError, match="'training.lr' must be a non-empty list"):
        bench.main(["--quick", *out, "--set", "training.lr=0.001"])
    assert not (tmp_path / "translation" / "results.json").exists()  # nothing ran


def test_cells_specs_and_run_keys(loaded):
    preset = copy.deepcopy(loaded["quick"])
    assert bench.cells(preset) == [("pe", "-"), ("xl_input", "reorderer"), ("xl_input", "oracle"),
                                   ("xl_head", "reorderer"), ("xl_head", "oracle")]
    preset.update(seeds=[0, 1], variants=["xl_head", "pe"], positions=["reorderer"])
    device = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    specs = bench.run_specs(preset, device)
    assert [bench.run_key(s) for s in specs] == ["xl_head__reorderer__seed0", "pe__none__seed0",
                                                 "xl_head__reorderer__seed1", "pe__none__seed1"]
    assert all(s["device"] == device and s["threads"] == 1 and s["training"] == preset["training"] for s in specs)
    assert bench.run_specs({**preset, "jobs": 0, "threads": 2}, device)[0]["threads"] == 2


def test_best_trial_uses_validation_bleu_then_loss_then_grid_order():
    trials = [{"lr": 0.001, "val_bleu": 50.0, "val_loss": 1.0}, {"lr": 0.002, "val_bleu": 60.0, "val_loss": 2.0},
              {"lr": 0.004, "val_bleu": 60.0, "val_loss": 1.5}]
    assert bench.best_trial(trials)["lr"] == 0.004  # equal BLEU: the lower validation loss
    assert bench.best_trial(trials[:2])["lr"] == 0.002
    same = [{"lr": lr, "val_bleu": 1.0, "val_loss": 1.0} for lr in (0.001, 0.002)]
    assert bench.best_trial(same)["lr"] == 0.001  # a full tie: the earlier lr of the grid
    nan = [{"lr": 0.001, "val_bleu": float("nan"), "val_loss": 1.0}, {"lr": 0.002, "val_bleu": 0.0, "val_loss": 9.0}]
    assert bench.best_trial(nan)["lr"] == 0.002  # a NaN score never wins
    with pytest.raises(ValueError, match="no trials"):
        bench.best_trial([])


# ------------------------------------------------------------------------------------------ summaries
def _rows(cells):
    rows = []
    for (variant, positions), values in cells.items():
        for seed, bleu in enumerate(values):
            rows.append({"variant": variant, "positions": positions, "seed": seed, "bleu": bleu, "exact_match": 0.5,
                         "val_bleu": bleu, "parameters": 100, "lr": 0.002, "seconds": 1.0, "bleu_agree": bleu,
                         "bleu_differ": bleu - 10, "exact_match_differ": 0.25})
    return rows


CELLS = {("pe", "-"): (80.0, 81.0, 82.0), ("xl_input", "reorderer"): (90.0, 91.0, 92.0),
         ("xl_input", "oracle"): (95.0, 96.0, 97.0), ("xl_head", "reorderer"): (80.0, 82.0, 84.0),
         ("xl_head", "oracle"): (79.0, 80.0, 81.0)}


def test_summary_intervals_by_hand():
    summary = bench.summarize(_rows(CELLS))
    assert [(r["variant"], r["positions"]) for r in summary] == list(CELLS)
    head = summary[3]
    # mean 82, sd 2, t(0.975, 2) = 4.302653: half-width 4.302653 * 2 / sqrt(3) = 4.96827
    assert head["bleu"] == pytest.approx(82.0)
    assert head["bleu_ci"]["low"] == pytest.approx(77.03173, abs=1e-4)
    assert head["bleu_ci"]["high"] == pytest.approx(86.96827, abs=1e-4)
    assert head["bleu_pm"] == "82.00 [77.03, 86.97] (n=3)"
    assert [r["role"] for r in summary] == ["method", "method", "oracle upper bound (reads the reference)", "method",
                                            "oracle upper bound (reads the reference)"]
    assert summary[0]["bleu_differ"] == pytest.approx(71.0) and summary[0]["lrs"] == [0.002]


def test_verdicts_come_from_the_intervals_and_the_oracle_is_never_a_claim():
    checks = bench.verdicts(bench.summarize(_rows(CELLS)))
    by = {c["comparison"]: c for c in checks}
    claims = [c for c in checks if c["kind"] == "claim"]
    assert [c["comparison"] for c in claims] == ["xl_input (reorderer) vs pe", "xl_head (reorderer) vs pe"]
    assert by["xl_input (reorderer) vs pe"]["verdict"] == "better"  # [88.5, 93.5] above [78.5, 83.5]
    assert by["xl_input (reorderer) vs pe"]["claim"] == "reproduced"
    assert by["xl_head (reorderer) vs pe"]["verdict"] == "tie"  # [77.0, 87.0] overlaps
    assert by["xl_head (reorderer) vs pe"]["claim"] == "not reproduced"
    bounds = [c for c in checks if c["kind"] == "upper bound"]
    assert all("oracle" in c["comparison"] and "claim" not in c for c in bounds)
    assert by["xl_input (oracle) vs xl_input (reorderer)"]["verdict"] == "better"
    assert by["xl_head (oracle) vs xl_head (reorderer)"]["verdict"] == "tie"
    text = bench.verdict_sentence(by["xl_head (reorderer) vs pe"])
    assert text.startswith("xl_head (reorderer) vs pe: test BLEU 82.00 [77.03, 86.97] (n=3) vs 81.00")
    assert "overlap" in text and "**not reproduced**" in text
    one_seed = bench.verdicts(bench.summarize([r for r in _rows(CELLS) if r["seed"] == 0]))
    assert {c["claim"] for c in one_seed if c["kind"] == "claim"} == {"untested"}
    assert "fewer than 3" in bench.verdict_sentence(one_seed[0])


def test_agreement_subsets_split_the_test_set_where_the_positions_differ():
    from pe_toolkit.domains.translation import SentencePair
    from pe_toolkit.domains.translation.lightning_module import corpus_bleu

    pairs = [SentencePair(("a", "b"), ("A", "B"), ((0, 0), (1, 1))), SentencePair(("c",), ("C",), ((0, 0),)),
             SentencePair(("d", "e"), ("E", "D"), ((0, 1), (1, 0)))]
    data = {"pairs": {"test": pairs},
            "positions": {"oracle": {"test": [[0, 1], [0], [1, 0]]}, "reorderer": {"test": [[0, 1], [0], [0, 1]]}}}
    out = bench.agreement_subsets([["A", "B"], ["X"], ["E", "D"]], data)
    assert (out["test_agree"], out["test_differ"]) == (2, 1)
    assert out["exact_match_agree"] == 0.5 and out["exact_match_differ"] == 1.0
    assert out["bleu_agree"] == corpus_bleu([["A", "B"], ["X"]], [["A", "B"], ["C"]])
    assert out["bleu_differ"] == corpus_bleu([["E", "D"]], [["E", "D"]])
    data["positions"]["reorderer"]["test"] = data["positions"]["oracle"]["test"]
    out = bench.agreement_subsets([["A", "B"], ["X"], ["E", "D"]], data)
    assert out["test_differ"] == 0 and out["bleu_differ"] is None and out["exact_match_differ"] is None


def test_plot_takes_interval_rows_and_bare_rows(tmp_path):
    summary = bench.summarize(_rows(CELLS))
    bench.plot(summary, tmp_path / "bleu.png")
    bench.plot([{"variant": "pe", "positions": "-", "bleu": None, "bleu_std": None}], tmp_path / "empty.png")
    assert (tmp_path / "bleu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "empty.png").stat().st_size > 0


# ------------------------------------------------------------------------------------------ end to end
TINY = ["--quick", "--accelerator", "cpu", "--jobs", "0", "--variants", "pe", "xl_input",
        "--set", "data.train_pairs=24", "--set", "data.val_pairs=4", "--set", "data.test_pairs=6",
        "--set", "model.dim=8", "--set", "model.num_heads=2", "--set", "training.steps=2",
        "--set", "training.batch_size=4", "--set", "training.lr=[0.003]"]


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    code = "import sys; sys.path.insert(0, sys.argv[1]); from benchmarks import translation; " \
           "sys.exit(translation.main(sys.argv[2:]))"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run([sys.executable, "-c", code, str(ROOT), *TINY, "--out", str(out), *extra],
                               capture_output=True, text=True, timeout=600, env=env)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("translation_out")
    first = _run(out)
    document = json.loads((out / "translation" / "results.json").read_text())
    again = _run(out, "--resume")
    return out / "translation", first.stdout, again.stdout, document


def test_tiny_end_to_end_run_writes_results_report_and_plot(tiny_run):
    out, stdout, _, document = tiny_run
    assert set(document) == {"benchmark", "config", "rows", "environment", "seconds"}
    config = document["config"]
    assert config["preset"] == "quick" and config["device"]["accelerator"] == "cpu" and config["training"]["steps"] == 2
    assert config["runs_finished"] == config["runs_planned"] == 3
    runs = [r for r in document["rows"] if r["kind"] == "run"]
    assert [(r["variant"], r["positions"]) for r in runs] == [("pe", "-"), ("xl_input", "reorderer"),
                                                              ("xl_input", "oracle")]
    for row in runs:
        assert [t["lr"] for t in row["lr_tried"]] == [0.003] and row["lr"] == 0.003
        assert 0.0 <= row["bleu"] <= 100.0 and row["test_agree"] + row["test_differ"] == 6
    assert runs[2]["role"] == "oracle upper bound (reads the reference)" and runs[1]["role"] == "method"
    verdicts = [r for r in document["rows"] if r["kind"].startswith("verdict")]
    claim = next(r for r in verdicts if r["kind"] == "verdict (claim)")
    assert claim["comparison"] == "xl_input (reorderer) vs pe" and claim["claim"] == "untested"  # one seed
    report = (out / "report.md").read_text()
    for text in ("How the fairness rule is met", "oracle upper bound", "claim **untested**", "BLEU differ"):
        assert text in report
    assert (out / "bleu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.stem for p in (out / "runs" / "quick").glob("*.json")) == [
        "pe__none__seed0", "xl_input__oracle__seed0", "xl_input__reorderer__seed0"]
    assert "3 runs (0 reused)" in stdout


def test_resume_reuses_every_finished_run(tiny_run):
    out, _, again, document = tiny_run
    assert "3 runs (3 reused)" in again
    rerun = json.loads((out / "results.json").read_text())
    assert [r for r in rerun["rows"] if r["kind"] == "run"] == [r for r in document["rows"] if r["kind"] == "run"]
