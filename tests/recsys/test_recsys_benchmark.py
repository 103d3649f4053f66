"""The recsys benchmark: presets, intervals and verdicts, and a tiny real run of the whole script."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pe_toolkit.bench import Result, load_config
from pe_toolkit.bench.cli import main
from pe_toolkit.benchmarks import recsys


def row(dataset, encoding, seed, ndcg, hr=0.5, protocol="recbole"):
    base = {m: 0.0 for m in recsys.METRICS}
    base.update({f"{r}/{m}": 0.0 for r in ("all", "unseen") for m in recsys.METRICS})
    return {**base, "dataset": dataset, "protocol": protocol, "encoding": encoding, "seed": seed, "ndcg@10": ndcg,
            "hr@10": hr, "epochs": 3, "seconds": 1.0, "positional_parameters": 0, "converged": True,
            "ranking": "all"}


def test_every_preset_is_valid():
    for name in ("quick", "full", "gpu"):
        config, _ = load_config(recsys.Recsys(), name)
        preset = dataclasses.asdict(config)
        assert set(preset["encoders"]) <= set(recsys.ENCODERS) and set(preset["datasets"]) <= set(recsys.DATASETS)
        assert set(preset["protocols"]) <= set(recsys.PROTOCOLS) and preset["protocols"][0] == "recbole"
        assert set(preset["training"]) == set(recsys.DATASETS)
        if name != "quick":
            assert len(preset["seeds"]) >= 3 and {"learned", "rope", "cope", "cape"} <= set(preset["encoders"])


def test_protocols_decide_the_history_exclusion():
    assert not recsys.excludes_history("ml-100k", "recbole")
    assert recsys.excludes_history("ml-100k", "sasrec")
    assert not recsys.excludes_history("synthetic", "sasrec")  # recalls: the target is in the history
    with pytest.raises(ValueError, match="protocol must be one of"):
        recsys.excludes_history("ml-100k", "bert4rec")


def test_summary_intervals_and_claims():
    # cape 0.30 / 0.31 / 0.32 against learned 0.20 / 0.21 / 0.22: the difference 0.10 +- 0.023 -> reproduced
    rows = [row("ml-100k", "cape", s, 0.30 + 0.01 * s) for s in range(3)]
    rows += [row("ml-100k", "learned", s, 0.20 + 0.01 * s) for s in range(3)]
    rows += [row("ml-100k", "rope", s, 0.31 + 0.01 * (-1) ** s) for s in range(3)]
    summary = [r for r in recsys.Recsys().analyze(Result(config=None, preset="quick", rows=rows))
               if r["kind"] == "summary"]
    assert [r["encoding"] for r in summary] == ["cape", "learned", "rope"]
    cape = summary[0]["ndcg@10"]
    half = 4.302652729911275 * 0.01 / 3**0.5  # t(0.975, 2) * sd / sqrt(n)
    assert cape["mean"] == pytest.approx(0.31) and cape["high"] - cape["mean"] == pytest.approx(half)
    found = {(c["comparison"], c["metric"]): c for c in recsys.claims(rows)}
    assert set(found) == {(f"cape vs {o}", m) for o in ("learned", "rope") for m in ("ndcg@10", "hr@10")}
    better = found[("cape vs learned", "ndcg@10")]
    assert better["kind"] == "claim" and better["verdict"] == "reproduced" and better["test"].startswith("Welch t")
    assert better["difference"]["mean"] == pytest.approx(0.10) and better["a"]["n"] == better["b"]["n"] == 3
    assert better["name"] == "cape beats learned: ml-100k (recbole), NDCG@10"
    assert found[("cape vs rope", "ndcg@10")]["verdict"] == "inconclusive"
    assert found[("cape vs rope", "ndcg@10")]["min_detectable_effect"] > 0
    assert found[("cape vs learned", "hr@10")]["verdict"] == "inconclusive"  # identical values
    one_seed = recsys.claims(rows[:1] + rows[3:4])
    assert {c["verdict"] for c in one_seed} == {"untested"}


def tiny_run_args(out, max_epochs: int, *extra: str) -> list[str]:
    """CLI arguments of a seconds-long run: learned and CAPE on a 30-user synthetic log, dim 8, 2 batches an epoch."""
    tiny = ["--set", "training.synthetic.users=30", "--set", "training.synthetic.max_len=12",
            "--set", "training.synthetic.dim=8", "--set", "training.synthetic.batches_per_epoch=2",
            "--set", f"training.synthetic.max_epochs={max_epochs}", "--set", "synthetic.length=[8,12]", *extra]
    return ["recsys", "--quick", "--out", str(out), "--set", "datasets=[synthetic]", "--set", "encoders=[learned,cape]",
            "--jobs", "1", "--accelerator", "cpu", *tiny]


def test_tiny_run_writes_results_report_and_plot(tmp_path):
    args = tiny_run_args(tmp_path, 1)
    assert main(args) == 0
    out = tmp_path / "recsys"
    results = json.loads((out / "results.json").read_text())
    runs = [r for r in results["rows"] if "kind" not in r]
    assert [(r["encoding"], r["seed"], r["protocol"]) for r in runs] == [("learned", 0, "recbole"),
                                                                         ("cape", 0, "recbole")]
    assert [r["kind"] for r in results["rows"][2:4]] == ["tuning_trial"] * 2  # a one-value lr grid
    assert [(r["kind"], r["encoding"], r["runs"]) for r in results["rows"][4:6]] == [("summary", "learned", 1),
                                                                                       ("summary", "cape", 1)]
    assert [(r["kind"], r["comparison"], r["metric"], r["verdict"]) for r in results["rows"][6:]] == [
        ("claim", "cape vs learned", "ndcg@10", "untested"), ("claim", "cape vs learned", "hr@10", "untested")]
    assert {r["lr"] for r in runs} == {0.003}
    for r in runs:
        assert 0.0 <= r["ndcg@10"] <= r["hr@10"] <= 1.0 and r["users"] == 30 and r["epochs"] == 1
        assert r["ndcg@10"] == r["all/ndcg@10"] and r["ranking"] == "all"  # RecBole: nothing excluded
        assert r["steps"] == 2  # 1 epoch of batches_per_epoch = 2 batches
    assert results["config"]["device"]["accelerator"] == "cpu"
    key = "dataset=synthetic__protocol=recbole__encoding=cape__seed=0__lr=0.003"
    stored = json.loads((out / "runs" / "quick" / f"{key}.json").read_text())
    assert stored["spec"]["device"] == {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    report = (out / "report.md").read_text()
    assert "| synthetic | recbole | cape | all |" in report
    assert "cape beats learned: synthetic (recbole), NDCG@10" in report
    assert "**untested** (fewer than 2 replicates" in report and "## Tuning" in report
    assert "## How the fairness rule is met" in report and (out / "recsys_metrics.png").stat().st_size
    # --resume rebuilds the report from the stored runs without training (a new run would differ in "seconds")
    assert main(args + ["--resume"]) == 0
    assert json.loads((out / "results.json").read_text())["rows"] == results["rows"]


def test_a_mistyped_key_names_itself(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["recsys", "--quick", "--out", str(tmp_path), "--set", "training.synthetic.epochs=3"])
    assert exit_info.value.code == 2
    assert "config key 'training.synthetic.epochs' does not exist; allowed keys here: [" in capsys.readouterr().err


def test_converged_flag_survives_testing_the_best_checkpoint(tmp_path):
    # trainer.test(ckpt_path=best) restores EarlyStopping's state from a checkpoint saved before the stop
    # (stopped_epoch 0); the flag is read after fit, so a run stopped by patience is reported as converged
    assert main(tiny_run_args(tmp_path, 12, "--set", "training.synthetic.patience=1")) == 0
    rows = [r for r in json.loads((tmp_path / "recsys" / "results.json").read_text())["rows"] if "kind" not in r]
    assert len(rows) == 2
    assert all(r["converged"] == (r["epochs"] < 12) for r in rows)
    assert any(r["converged"] for r in rows)
    report = (tmp_path / "recsys" / "report.md").read_text()
    assert f"{sum(r['converged'] for r in rows)} of 2 runs stopped by patience" in report
