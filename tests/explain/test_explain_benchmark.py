"""benchmarks/explain.py: pure helpers, evaluation on an untrained model, and a report from stored runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from benchmarks import explain as bench  # noqa: E402

QUICK = __import__("presets").load_preset(bench.NAME, "quick")


def test_presets_load_and_the_full_and_gpu_ones_have_three_seeds():
    presets = __import__("presets")
    for name in ("quick", "full", "gpu"):
        config = presets.load_preset(bench.NAME, name)
        bench.check_config(config)
        assert set(config["steps"]) == set(bench.TASKS) and set(config["task_options"]) == set(bench.TASKS)
    assert all(len(presets.load_preset(bench.NAME, n)["seeds"]) >= 3 for n in ("full", "gpu"))
    with pytest.raises(ValueError, match="seeds must be a non-empty list of distinct ints"):
        bench.check_config({**QUICK, "seeds": [0, 0]})
    with pytest.raises(ValueError, match=r"encodings must be a non-empty list"):
        bench.check_config({**QUICK, "encodings": ["cope"]})
    with pytest.raises(ValueError, match="preset key 'seed' does not exist"):
        presets.load_preset(bench.NAME, "quick", overrides=["seed=3"])


def model_row(encoding, seed, lrp_fraction, pa_fraction=0.6):
    return {"task": "copy", "encoding": encoding, "seed": seed, "accuracy": 1.0, "position_share": 0.1,
            "identity_residual_pa_lrp": 1e-7, "identity_residual_lrp": 2e-7, "input_fraction_pa_lrp": pa_fraction,
            "input_fraction_lrp": lrp_fraction, "position_fraction_pa_lrp": 0.1, "token_fraction_pa_lrp": 0.5,
            "token_fraction_lrp": 0.5}


def test_claims_from_paired_seed_differences_and_fractions():
    rows, models = [], []
    for seed, shift in enumerate((0.05, 0.06, 0.055)):
        for encoding in ("learned", "rope"):
            for m in bench.METHODS:
                morf = 0.3 - (shift if m == "pa_lrp" and encoding == "learned" else 0.0)
                rows.append({"task": "copy", "encoding": encoding, "seed": seed, "method": m, "auc_morf": morf,
                             "auc_lerf": 0.5 + 0.01 * seed, "top1_hit": 0.5})
            models.append(model_row(encoding, seed, lrp_fraction=0.5 + 0.001 * seed, pa_fraction=0.99 + 0.001 * seed))
    by = {(c["encoding"], c["claim"]): c for c in bench.claims(rows, models)}
    assert by[("learned", "PA-LRP more faithful than plain LRP (MoRF)")]["verdict"] == "reproduced"
    # LeRF: identical areas, the paired difference is 0 with no spread: a tie, not reproduced
    assert by[("learned", "PA-LRP more faithful than plain LRP (LeRF)")]["verdict"] == "not reproduced"
    assert by[("rope", "PA-LRP more faithful than plain LRP (MoRF)")]["verdict"] == "not reproduced"
    assert by[("learned", "plain LRP loses the positional share (Lemma 3.1)")]["verdict"] == "reproduced"
    assert by[("rope", "plain LRP loses the positional share (Lemma 3.1)")]["verdict"] == "untested"
    assert by[("learned", "PA-LRP conserves relevance (sum R_in = f(x))")]["verdict"] == "reproduced"
    summary = {m["encoding"]: m for m in bench.aggregate_models(models)}
    assert summary["learned"]["input_fraction_lrp"]["mean"] == pytest.approx(0.501)
    assert summary["learned"]["identity_residual_max"] == 2e-7
    # the fraction far below 1: conservation not reproduced even though the ledger balances
    low = [model_row("learned", s, 0.5, pa_fraction=0.6 + 0.01 * s) for s in range(3)]
    by = {c["claim"]: c for c in bench.claims([r for r in rows if r["encoding"] == "learned"], low)}
    assert by["PA-LRP conserves relevance (sum R_in = f(x))"]["verdict"] == "not reproduced"
    # a wide interval that merely contains 1 (mean 0.64) is no evidence of conservation
    wide = [model_row("learned", s, 0.5, pa_fraction=f) for s, f in enumerate((0.45, 0.55, 0.92))]
    by = {c["claim"]: c for c in bench.claims([r for r in rows if r["encoding"] == "learned"], wide)}
    assert bench.aggregate_models(wide)[0]["input_fraction_pa_lrp"]["high"] > 1.0
    assert by["PA-LRP conserves relevance (sum R_in = f(x))"]["verdict"] == "not reproduced"
    single = {c["claim"]: c for c in bench.claims([r for r in rows if r["seed"] == 0], models[:2])}
    assert {c["verdict"] for c in single.values()} == {"untested"}


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

    generator, vocab = bench.make_task(task, QUICK)
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
    # conservation as the identity (the ledger balances) and as fractions of the logit
    assert summary["identity_residual_pa_lrp"] < 1e-4 and summary["identity_residual_lrp"] < 1e-4
    assert summary["input_fraction_pa_lrp"] == pytest.approx(
        summary["token_fraction_pa_lrp"] + summary["position_fraction_pa_lrp"], abs=1e-6)
    assert summary["position_fraction_pa_lrp"] != 0.0 and summary["position_fraction_lrp"] == 0.0


def test_report_only_from_stored_runs(tmp_path):
    runs = tmp_path / "explain" / "runs" / "full"
    runs.mkdir(parents=True)
    for encoding, pa in (("rope", 0.2), ("nope", 0.3)):
        for seed in (0, 1, 2):
            run = {"config": {}, "model": {**model_row(encoding, seed, 0.5), "examples": 2},
                   "rows": [{"task": "copy", "encoding": encoding, "seed": seed, "method": m,
                             "auc_morf": pa + 0.01 * seed if m == "pa_lrp" else 0.3 + 0.01 * seed,
                             "auc_lerf": 0.5, "top1_hit": 0.5} for m in bench.METHODS]}
            (runs / f"copy_{encoding}_seed{seed}.json").write_text(json.dumps(run))
    argv = ["--report-only", "--tasks", "copy", "--encodings", "rope", "nope", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    result = json.loads((tmp_path / "explain" / "results.json").read_text())
    assert result["benchmark"] == "explain"
    comparisons = {(r["encoding"], r["seed"]): r for r in result["rows"] if r.get("kind") == "comparison"}
    assert comparisons[("rope", 1)]["pa_vs_lrp_morf"] == "better"
    assert comparisons[("nope", 2)]["pa_vs_lrp_morf"] == "tie"
    claims = {(r["encoding"], r["claim"]): r["verdict"] for r in result["rows"] if r.get("kind") == "claim"}
    assert claims[("rope", "PA-LRP more faithful than plain LRP (MoRF)")] == "reproduced"  # -0.1 on every seed
    assert not any(encoding == "nope" for encoding, _ in claims)
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
