"""The multi-robot benchmark on the harness: a tiny end-to-end run (results.json, report.md, both plots, resume), the
fairness rule, and the claims (pose claims untested unless the pose source fits its own training pairs)."""

from __future__ import annotations

import json

import pytest
import yaml

from pe_toolkit.bench import Result, load_config
from pe_toolkit.bench.cli import main
from pe_toolkit.bench.verdict import decide_claim
from pe_toolkit.benchmarks import multirobot as bench

TINY = {"seeds": [0, 1], "data": {"num_train": 16, "num_val": 8, "num_test": 12},
        "model": {"dim": 16, "num_heads": 4, "graph_layers": 1, "cross_layers": 1},
        "training": {"steps": 2, "batch_size": 8}, "train_eval_pairs": 6, "raw_frames": 2,
        "tuning": {"nope_match_threshold": [0.1, 0.3, 0.5, 0.7], "baseline_ratio": [0.8, 1.0],
                   "baseline_inlier_threshold": [0.5, 1.0]}}


@pytest.fixture()
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return ["multirobot", "--quick", "--config", str(path), "--accelerator", "cpu", "--out", str(tmp_path)]


def test_tiny_end_to_end_run_and_resume(tmp_path, tiny, monkeypatch):
    argv = [*tiny, "--set", "pes=[fourier, none]", "--set", "training.steps=1", "--set", "training.lrs=[0.001, 0.01]"]
    assert main(argv) == 0
    out = tmp_path / "multirobot"
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"benchmark", "config", "rows", "environment", "seconds"}
    assert {r["kind"] for r in results["rows"]} == {"run", "bandwidth", "setting", "summary", "claim", "tuning_trial"}
    # issue 39: NOPE's lr is tuned per object PE on the first seed by its validation score; the baseline has no lr
    trials = [r for r in results["rows"] if r["kind"] == "tuning_trial"]
    assert sorted((t["arm"], t["seed"], t["rows"][0]["lr"]) for t in trials) == [
        (pe, 0, lr) for pe in ("fourier", "none") for lr in (0.001, 0.01)]
    for pe in ("fourier", "none"):
        chosen = results["config"]["chosen"][pe]
        assert max(t["val_score"] for t in trials if t["arm"] == pe) == next(
            t["val_score"] for t in trials if t["arm"] == pe and t["rows"][0]["lr"] == chosen)
        assert {r["lr"] for r in results["rows"] if r["kind"] == "run" and r["object_pe"] == pe} == {chosen}
    runs = [r for r in results["rows"] if r["kind"] == "run"]
    assert [(r["method"], r["seed"]) for r in runs] == [
        (m, s) for s in (0, 1) for m in ("classical", "NOPE (fourier)", "NOPE (fourier)+procrustes", "NOPE (none)",
                                         "NOPE (none)+procrustes")]  # one NOPE run gives a row per pose source
    for row in runs:
        if row["method"] == "classical":  # tuned on the validation pairs, from its own grid
            assert row["ratio"] in TINY["tuning"]["baseline_ratio"]
            assert row["inlier_threshold"] in TINY["tuning"]["baseline_inlier_threshold"]
        else:
            assert row["threshold"] in TINY["tuning"]["nope_match_threshold"] and row["steps"] == 1
        assert 0.0 <= row["nda"] <= 1.0 and 0.0 <= row["val_score"] <= 1.0
        assert ("predictions" in row) == (row["seed"] == 0)  # the first seed's test predictions, for the plot
    assert results["config"]["device"]["accelerator"] == "cpu"
    summary = next(r for r in results["rows"] if r["kind"] == "summary" and r["method"] == "classical")
    assert summary["nda"]["n"] == 2 and summary["nda"]["low"] <= summary["nda"]["mean"] <= summary["nda"]["high"]
    claims = [r for r in results["rows"] if r["kind"] == "claim"]
    assert claims and {c["verdict"] for c in claims} <= {"reproduced", "contradicted", "inconclusive", "untested"}
    assert all(c["paired"] and c["a"]["n"] + c["a"]["n_nonfinite"] == 2 for c in claims)
    raw = next(r for r in results["rows"] if r["kind"] == "bandwidth" and "uncompressed" in r["payload"])
    assert raw["bytes"] == 640 * 480 * 5
    report = (out / "report.md").read_text()
    assert "How the fairness rule is met" in report and "4 configurations" in report and "train vs test" in report
    for png in ("alignment.png", "metrics.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    def no_run(*args, **kwargs):
        raise AssertionError("a finished run was run again")

    for name in ("run_nope", "run_classical", "run_bandwidth"):
        monkeypatch.setattr(bench, name, no_run)
    assert main([*argv, "--resume"]) == 0  # every run reused: the same rows
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["kind"] == "run"]
    assert again == runs
    with pytest.raises(AssertionError, match="run again"):
        main([*argv, "--resume", "--set", "training.steps=3"])


@pytest.mark.parametrize("override, match", [
    ("tuning.baseline_inlier_threshold=[0.5]", "tuning budgets differ: NOPE gets 9 match thresholds, the baseline 3 "
                                               r"ratios x 1 inlier thresholds = 3"),
    ("seeds=[1, 1]", "seeds must be"),
    ("pes=[fourier, sine]", r"(?s)config\.pes.*Literal\['fourier', 'rope2d', 'none'\]. Got value: sine"),
    ("pes=[fourier, fourier]", "pes must be a non-empty list of distinct values"),
    ("training.lrs=[0.001, 0]", r"training\.lrs must be a non-empty list of distinct finite numbers > 0"),
    ("training.lr=0.001", "training.lr"),
    ("training.max_extensions=-1", r"(?s)config\.training\.max_extensions.*NonNegativeInt"),
    ("data.num_val=0", r"(?s)config\.data\.num_val.*PositiveInt: 0 does not conform to restriction v>0"),
    ("tuning.baseline_ratio=[]", "tuning.baseline_ratio must be a non-empty list"),
    ("raw_frames=0", r"(?s)config\.raw_frames.*PositiveInt: 0 does not conform to restriction v>0"),
])
def test_bad_configs_are_refused_naming_the_key(override, match):
    with pytest.raises(ValueError, match=match):
        load_config(bench.MultiRobot(), "quick", overrides=[override])


def test_full_and_gpu_presets_tune_nopes_learning_rate_with_the_self_extending_grid():
    for preset, around in (("full", 0.001), ("gpu", 0.0005)):  # issue 39: 3 values around today's, up to 2 added
        config = load_config(bench.MultiRobot(), preset)[0]
        tuning = bench.MultiRobot().tuning(config)
        assert (tuning.param, tuning.group, tuning.metric, tuning.maximize) == ("lr", "pe", "val_score", True)
        assert len(tuning.values) == 3 and around in tuning.values and tuning.max_extensions == 2
        assert [s["arm"] for s in bench.MultiRobot().runs(config) if tuning.group in s] == config.pes * 3


def _rows(method: str, pe: str | None, values: dict[str, list[float]]) -> list[dict]:
    n = len(next(iter(values.values())))
    return [{"method": method, "object_pe": pe, "seed": s, **{k: v[s] for k, v in values.items()}} for s in range(n)]


def test_pose_claims_need_the_pose_source_to_fit_its_training_pairs():
    classical = _rows("classical", None, {"nda": [0.80, 0.82, 0.84], "f1": [0.7, 0.71, 0.72],
                                          "success": [0.7, 0.72, 0.75], "te_median": [0.2, 0.25, 0.22],
                                          "train_success": [0.7, 0.7, 0.7]})
    head = _rows("NOPE (fourier)", "fourier", {"nda": [0.90, 0.93, 0.94], "f1": [0.6, 0.62, 0.61],
                                               "success": [0.8, 0.85, 0.9], "te_median": [0.1, 0.12, 0.11],
                                               "train_success": [0.0, 0.01, 0.0]})
    procrustes = _rows("NOPE (fourier)+procrustes", "fourier", {"nda": [0.90, 0.93, 0.94], "f1": [0.6, 0.62, 0.61],
                                                                "success": [0.8, 0.85, 0.9],
                                                                "te_median": [0.1, 0.12, 0.11],
                                                                "train_success": [0.6, 0.7, 0.65]})
    claims = {(c["comparison"], c["metric"]): c for c in bench.claims(classical + head + procrustes)}
    nda = claims[("NOPE (fourier) vs classical", "nda")]
    expected = decide_claim([0.90, 0.93, 0.94], [0.80, 0.82, 0.84], higher_is_better=True, paired=True,
                            bounds=(0.0, 1.0))
    assert nda["verdict"] == expected.verdict == "reproduced" and nda["difference"] == expected.difference
    assert claims[("NOPE (fourier) vs classical", "f1")]["verdict"] == "contradicted"
    for metric in ("success", "te_median"):  # the head fits none of its training pairs: its pose claims are untested
        claim = claims[("NOPE (fourier) vs classical", metric)]
        assert claim["verdict"] == "untested" and claim["pose"] and claim["reason"] == (
            "NOPE (fourier) does not fit its own training pairs (mean training-pair success 0.003 < 0.5): its pose "
            "is not learned")
    fitted = claims[("NOPE (fourier)+procrustes vs classical", "success")]
    assert fitted["verdict"] == "reproduced"  # Procrustes fits 65 % of its training pairs: the claim is decided
    head_fit = [{**r, "train_success": 0.9} for r in head]
    te = {(c["comparison"], c["metric"]): c for c in bench.claims(classical + head_fit)}[
        ("NOPE (fourier) vs classical", "te_median")]
    assert te["verdict"] == "reproduced" and not te["higher_is_better"]  # lower translation error is better


def test_plots_show_the_example_pair_and_the_metrics():
    from pe_toolkit.domains.multirobot.plotting import plot_alignment
    from pe_toolkit.domains.multirobot.simulator import SimConfig, simulate_pairs

    pairs = simulate_pairs(6, 2, SimConfig())
    index = next(i for i, p in enumerate(pairs) if p.overlap)
    pose = [float(x) for x in pairs[index].pose]
    figure = plot_alignment(pairs[index], {"classical": pose, "NOPE (none)": None})
    labels = figure.axes[0].get_legend_handles_labels()[1]
    assert "b's detections, classical" in labels and "NOPE (none): no overlap decided" in labels
    values = {k: [0.5, 0.7 if k == "nda" else 0.6] for k in bench.METRICS}
    summary = bench.MultiRobot().analyze(Result(config=None, preset="full", rows=[
        {**r, "kind": "run"} for r in _rows("classical", None, values)]))[1:]
    (intervals,) = bench.plot_metrics(summary).axes[0].containers  # one method: F1, NDA, coverage, success
    assert summary[0]["success"]["n"] == 2 and list(intervals.lines[0].get_ydata()) == pytest.approx(
        [0.55, 0.6, 0.55, 0.55])
