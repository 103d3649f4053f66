"""benchmarks/explain.py: pure helpers, evaluation on an untrained model, and a report from stored runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import explain as bench  # noqa: E402


def test_compare_and_winner_line():
    assert bench.compare(0.01) == "better"
    assert bench.compare(-0.01) == "worse"
    assert bench.compare(0.0005) == "tie"
    rows = [{"task": "copy", "encoding": "rope", "method": m, "auc_morf": v, "auc_lerf": 0.5}
            for m, v in zip(bench.METHODS, (0.1, 0.2, 0.3, 0.4, 0.5, 0.6))]
    (line,) = bench.winner_line(rows)
    assert line["pa_minus_lrp_morf"] == pytest.approx(0.1 - 0.3)
    assert line["pa_vs_lrp_morf"] == "better" and line["pa_vs_lrp_lerf"] == "tie"
    assert line["best_morf"] == "pa_lrp"


@pytest.mark.parametrize("task", bench.TASKS)
def test_explain_set_and_evaluate_on_an_untrained_model(task):
    import pe_toolkit as pet

    generator, vocab = bench.make_task(task, bench.QUICK)
    items = bench.explain_set(task, generator, vocab, 4, seed=0)
    for item in items:
        assert item["index"] == len(item["ids"]) - 1
        assert set(item["truth"]) <= set(item["removable"])
    model = pet.Transformer(pet.TransformerConfig(vocab_size=len(vocab), dim=16, num_heads=2, num_layers=1,
                                                  encoding="rope")).eval()
    results, summary = bench.evaluate(model, items, seed=0)
    assert set(results) == set(bench.METHODS)
    for metrics in results.values():
        assert 0.0 <= metrics["auc_morf"] <= 1.0 and 0.0 <= metrics["top1_hit"] <= 1.0
        assert len(metrics["curve_morf"]) == len(bench.FRACTIONS)
    # MoRF and LeRF remove the same inputs at fraction 1 and none at fraction 0
    assert results["pa_lrp"]["curve_morf"][0] == pytest.approx(results["pa_lrp"]["curve_lerf"][0])
    assert results["pa_lrp"]["curve_morf"][-1] == pytest.approx(results["pa_lrp"]["curve_lerf"][-1])
    assert summary["examples"] == 4 and "example" in summary


def test_report_only_from_stored_runs(tmp_path):
    runs = tmp_path / "explain" / "runs" / "full"
    runs.mkdir(parents=True)
    for encoding, pa in (("rope", 0.2), ("nope", 0.3)):
        run = {"config": {}, "model": {"task": "copy", "encoding": encoding, "accuracy": 1.0, "examples": 2},
               "rows": [{"task": "copy", "encoding": encoding, "method": m, "auc_morf": pa if m == "pa_lrp" else 0.3,
                         "auc_lerf": 0.5, "top1_hit": 0.5} for m in bench.METHODS]}
        (runs / f"copy_{encoding}.json").write_text(json.dumps(run))
    assert bench.main(["--report-only", "--tasks", "copy", "--encodings", "rope", "nope", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "explain" / "results.json").read_text())
    assert result["benchmark"] == "explain"
    comparisons = {r["encoding"]: r for r in result["rows"] if r.get("kind") == "comparison"}
    assert comparisons["rope"]["pa_vs_lrp_morf"] == "better" and comparisons["nope"]["pa_vs_lrp_morf"] == "tie"
    assert (tmp_path / "explain" / "perturbation_auc.png").exists()
    assert "PA-LRP against plain LRP" in (tmp_path / "explain" / "report.md").read_text()
    assert bench.main(["--report-only", "--tasks", "sentiment", "--out", str(tmp_path)]) == 1  # nothing stored


def test_heatmap_png_is_written(tmp_path):
    from pe_toolkit.tasks import Vocabulary

    vocab = Vocabulary(["a", "b"])
    example = {"ids": [1, 4, 5, 3], "token": [0.1, 0.5, -0.2, 0.3], "plain": [0.1, 0.4, -0.1, 0.2],
               "grad_x_input": [0.0, 0.2, 0.1, 0.0], "position_terms": {"layer0.cos": [0.0, 0.1, -0.1, 0.0]},
               "removable": [1, 2]}
    path = tmp_path / "heatmap.png"
    bench.plot_heatmap(example, vocab, "demo", path)
    assert path.stat().st_size > 1000
