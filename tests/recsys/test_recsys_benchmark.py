"""The recsys benchmark: summary helpers, and a tiny real run of the whole script."""

from __future__ import annotations

import json

import pytest

from benchmarks import recsys


def row(dataset, encoding, seed, ndcg, hr=0.5):
    base = {m: 0.0 for m in recsys.METRICS}
    return {**base, "dataset": dataset, "encoding": encoding, "seed": seed, "ndcg@10": ndcg, "hr@10": hr,
            "epochs": 3, "seconds": 1.0, "positional_parameters": 0}


def test_mean_and_sample_std():
    assert recsys.mean_std([0.1, 0.3]) == (pytest.approx(0.2), pytest.approx(0.1414213562))
    assert recsys.mean_std([0.5]) == (0.5, 0.0)
    assert recsys.mean_std([None, float("nan")]) == (None, None)


def test_summarize_orders_encoders_and_pairs_seeds():
    rows = [row("ml-100k", "cape", 0, 0.3), row("ml-100k", "learned", 0, 0.2), row("ml-100k", "cape", 1, 0.1),
            row("ml-100k", "learned", 1, 0.2), row("ml-100k", "cape", 2, 0.5)]
    summary = recsys.summarize(rows)
    assert [r["encoding"] for r in summary] == ["learned", "cape"]
    assert summary[1]["seeds"] == 3 and summary[1]["ndcg@10"] == pytest.approx(0.3)
    gain = recsys.paired_gain(rows, "ml-100k", "cape", "learned", "ndcg@10")
    # seed 2 has no learned run: only seeds 0 and 1 pair up (+0.1, -0.1)
    assert gain["seeds"] == 2 and gain["mean"] == pytest.approx(0.0) and gain["wins"] == 1
    assert recsys.paired_gain(rows, "synthetic", "cape", "learned", "ndcg@10") is None


def test_tiny_run_writes_results_report_and_plot(tmp_path, monkeypatch):
    tiny = {"users": 30, "max_len": 16, "dim": 16, "num_heads": 2, "num_layers": 1, "dropout": 0.0, "lr": 3e-3,
            "batch_size": 16, "max_epochs": 2, "patience": 1}
    monkeypatch.setitem(recsys.QUICK, "synthetic", tiny)
    monkeypatch.setitem(recsys.SYNTHETIC, "length", [8, 12])
    args = ["--quick", "--out", str(tmp_path), "--datasets", "synthetic", "--encoders", "learned", "cape"]
    assert recsys.main(args) == 0
    out = tmp_path / "recsys"
    results = json.loads((out / "results.json").read_text())
    assert [(r["encoding"], r["seed"]) for r in results["rows"]] == [("learned", 0), ("cape", 0)]
    for r in results["rows"]:
        assert 0.0 <= r["ndcg@10"] <= r["hr@10"] <= 1.0 and r["users"] == 30 and 1 <= r["epochs"] <= 2
    report = (out / "report.md").read_text()
    assert "| cape | 1 |" in report and "cape - learned" in report and (out / "recsys_metrics.png").stat().st_size
    # --report-only rebuilds the report from the stored runs without training
    assert recsys.main(args + ["--report-only"]) == 0
    assert json.loads((out / "results.json").read_text())["rows"] == results["rows"]
