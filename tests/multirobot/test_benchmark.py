"""Tiny end-to-end runs of benchmarks/multirobot.py: results.json, report.md, both plots, the fairness rule."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import lightning
import pytest
import yaml

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "multirobot.py"
_SPEC = importlib.util.spec_from_file_location("multirobot_benchmark", _SCRIPT)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

TINY = {"seeds": [0, 1], "data": {"num_train": 16, "num_val": 8, "num_test": 12},
        "model": {"dim": 16, "num_heads": 4, "graph_layers": 1, "cross_layers": 1},
        "training": {"steps": 2, "batch_size": 8}, "train_eval_pairs": 6, "raw_frames": 2,
        "tuning": {"nope_match_threshold": [0.1, 0.3, 0.5, 0.7], "baseline_ratio": [0.8, 1.0],
                   "baseline_inlier_threshold": [0.5, 1.0]}}


@pytest.fixture()
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return ["--quick", "--config", str(path), "--accelerator", "cpu", "--out", str(tmp_path)]


def test_tiny_end_to_end_run(tmp_path, tiny):
    assert bench.main([*tiny, "--pes", "fourier", "none", "--set", "training.steps=1"]) == 0
    out = tmp_path / "multirobot"
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"benchmark", "config", "rows", "environment", "seconds"}
    assert {r["kind"] for r in results["rows"]} == {"run", "bandwidth", "summary", "verdict"}
    runs = [r for r in results["rows"] if r["kind"] == "run"]
    assert {r["method"] for r in runs} == {"classical", "NOPE (fourier)", "NOPE (fourier)+procrustes",
                                           "NOPE (none)", "NOPE (none)+procrustes"}
    assert sorted({r["seed"] for r in runs}) == [0, 1]
    for row in runs:
        if row["method"] == "classical":  # tuned on the validation pairs, from its own grid
            assert row["ratio"] in TINY["tuning"]["baseline_ratio"]
            assert row["inlier_threshold"] in TINY["tuning"]["baseline_inlier_threshold"]
        else:
            assert row["threshold"] in TINY["tuning"]["nope_match_threshold"] and row["steps"] == 1
        assert 0.0 <= row["nda"] <= 1.0 and 0.0 <= row["val_score"] <= 1.0
    assert results["config"]["device"]["accelerator"] == "cpu"
    summary = next(r for r in results["rows"] if r["kind"] == "summary" and r["method"] == "classical")
    assert summary["nda_ci"]["n"] == 2 and summary["nda_ci"]["low"] <= summary["nda"] <= summary["nda_ci"]["high"]
    verdicts = [r for r in results["rows"] if r["kind"] == "verdict"]
    assert verdicts and {v["verdict"] for v in verdicts} <= {"better", "worse", "tie"}
    raw = next(r for r in results["rows"] if r["method"] == "bandwidth" and "uncompressed" in r["payload"])
    assert raw["bytes"] == 640 * 480 * 5
    report = (out / "report.md").read_text()
    assert "How the fairness rule is met" in report and "4 configurations" in report and "train vs test" in report
    for png in ("alignment.png", "metrics.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_loads_the_trained_models_and_reports_the_same_metrics(tmp_path, tiny, monkeypatch):
    argv = [*tiny, "--pes", "none", "--seeds", "0"]
    assert bench.main(argv) == 0
    out = tmp_path / "multirobot"
    first = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["kind"] == "run"]
    assert sorted(p.name for p in (out / "runs" / "quick").iterdir()) == ["none__seed0.json", "none__seed0.pt"]

    def no_fit(*args, **kwargs):
        raise AssertionError("a finished model was trained again")

    monkeypatch.setattr(lightning.Trainer, "fit", no_fit)
    assert bench.main([*argv, "--resume"]) == 0  # the stored weights are loaded and evaluated again
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["kind"] == "run"]
    assert [{k: v for k, v in r.items() if k != "train_seconds"} for r in again] == \
        [{k: v for k, v in r.items() if k != "train_seconds"} for r in first]
    with pytest.raises(AssertionError, match="trained again"):
        bench.main([*argv, "--resume", "--steps", "3"])


def test_unequal_tuning_budgets_are_refused(tiny):
    with pytest.raises(ValueError, match="tuning budgets differ: NOPE gets 4 match thresholds, the baseline 2 "
                                         r"ratios x 1 inlier thresholds = 2"):
        bench.main([*tiny, "--set", "tuning.baseline_inlier_threshold=[0.5]"])
    with pytest.raises(ValueError, match="seeds must be distinct"):
        bench.main([*tiny, "--seeds", "1", "1"])


def test_tune_baseline_takes_the_best_validation_configuration():
    from pe_toolkit.domains.multirobot.baseline import ClassicalBaseline
    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_baseline
    from pe_toolkit.domains.multirobot.simulator import SimConfig, simulate_pairs

    pairs = simulate_pairs(12, 3, SimConfig())
    ratios, inliers = [0.7, 1.0], [0.2, 1.0]
    chosen = bench.tune_baseline(pairs, ratios, inliers, seed=0)
    scores = {(r, t): bench.tuning_score(evaluate_predictions(pairs, predict_baseline(
        pairs, ClassicalBaseline(ratio=r, inlier_threshold=t, seed=0)))) for r, t in itertools.product(ratios, inliers)}
    assert chosen["score"] == max(scores.values()) == scores[(chosen["ratio"], chosen["inlier_threshold"])]
    assert chosen["edge"] is False  # a grid of two values has no interior
