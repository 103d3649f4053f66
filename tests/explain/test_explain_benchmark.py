"""benchmarks/explain.py: presets, claims and checks, and a report from stored runs.

The faithfulness evaluation and the explained examples are tested in tests/explain/test_faithfulness.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

from pe_toolkit.bench import Result
from pe_toolkit.bench.config import load_config
from pe_toolkit.bench.report import write_report, write_results
from pe_toolkit.benchmarks import explain as bench

BENCHMARK = bench.Explain()
QUICK, _ = load_config(BENCHMARK, "quick")


def test_presets_load_and_the_full_and_gpu_ones_have_three_seeds():
    for name in ("quick", "full", "gpu"):
        config, _ = load_config(BENCHMARK, name)
        assert set(config.steps) == set(bench.TASKS) and set(config.task_options) == set(bench.TASKS)
    assert all(len(load_config(BENCHMARK, n)[0].seeds) >= 3 for n in ("full", "gpu"))
    with pytest.raises(ValueError, match="seeds must be a non-empty list of distinct values"):
        load_config(BENCHMARK, "quick", overrides=["seeds=[0, 0]"])
    with pytest.raises(ValueError, match=r"(?s)config.encodings.*Literal.*Got value: cope"):
        load_config(BENCHMARK, "quick", overrides=["encodings=[cope]"])
    with pytest.raises(ValueError, match=r"(?s)config.steps.*PositiveInt: 0"):
        load_config(BENCHMARK, "quick", overrides=["steps.copy=0"])
    with pytest.raises(ValueError, match=r"decay lacks the task\(s\) \['copy'\]; decay has \['sentiment'\]"):
        BENCHMARK.check(dataclasses.replace(QUICK, decay={"sentiment": 0}))  # a preset without the task's entry
    with pytest.raises(ValueError, match="lrs must be a non-empty list of distinct finite numbers > 0"):
        load_config(BENCHMARK, "quick", overrides=["lrs=[0.0]"])
    with pytest.raises(ValueError, match="config key 'seed' does not exist"):
        load_config(BENCHMARK, "quick", overrides=["seed=3"])


def test_runs_carry_only_their_tasks_settings():
    specs = BENCHMARK.runs(QUICK)
    assert [(s["task"], s["encoding"], s["seed"]) for s in specs] == [
        (t, e, s) for t in QUICK.tasks for e in QUICK.encodings for s in QUICK.seeds]
    copy = next(s for s in specs if s["task"] == "copy")
    assert copy["steps"] == QUICK.steps["copy"] and copy["task_options"] == QUICK.task_options["copy"]
    assert copy["model"] == {"dim": QUICK.model.dim, "num_heads": QUICK.model.num_heads,
                             "num_layers": QUICK.model.num_layers}


def model_row(encoding, seed, lrp_fraction, pa_fraction=0.6):
    return {"task": "copy", "encoding": encoding, "seed": seed, "accuracy": 1.0, "position_share": 0.1,
            "identity_residual_pa_lrp": 1e-7, "identity_residual_lrp": 2e-7, "input_fraction_pa_lrp": pa_fraction,
            "input_fraction_lrp": lrp_fraction, "position_fraction_pa_lrp": 0.1, "token_fraction_pa_lrp": 0.5,
            "token_fraction_lrp": 0.5}


def test_claims_from_paired_seed_differences_and_fractions():
    models = []
    for seed, shift in enumerate((0.05, 0.06, 0.055)):
        for encoding in ("learned", "rope"):
            methods = [{"task": "copy", "encoding": encoding, "seed": seed, "method": m, "top1_hit": 0.5,
                        "auc_morf": 0.3 - (shift if m == "pa_lrp" and encoding == "learned" else 0.0) + 0.02 * seed,
                        "auc_lerf": 0.5 + 0.01 * seed} for m in bench.METHODS]
            row = model_row(encoding, seed, lrp_fraction=0.5 + 0.001 * seed, pa_fraction=0.99 + 0.002 * seed)
            models.append({**row, "methods": methods})
    by = {(c["encoding"], c["claim"]): c for c in bench.claims(models)}
    morf = by[("learned", "PA-LRP more faithful than plain LRP (MoRF AUC)")]
    # paired: the seeds' common offset (0.02 * seed) cancels; unpaired, the spread would hide the 0.055 gain
    assert morf["verdict"] == "reproduced" and morf["paired"] and morf["test"].startswith("paired t")
    assert morf["difference"]["mean"] == pytest.approx(0.055) and morf["a"]["n"] == morf["b"]["n"] == 3
    assert morf["kind"] == "claim" and morf["claim_kind"] == "difference"
    assert morf["name"] == "PA-LRP more faithful than plain LRP (MoRF AUC): copy, learned"
    # identical LeRF areas per seed: a zero difference with zero spread is no effect
    assert by[("learned", "PA-LRP more faithful than plain LRP (LeRF AUC)")]["verdict"] == "inconclusive"
    assert by[("rope", "PA-LRP more faithful than plain LRP (MoRF AUC)")]["verdict"] == "inconclusive"
    lemma = "plain LRP loses the positional share (Lemma 3.1): PA-LRP's input fraction is higher"
    assert by[("learned", lemma)]["verdict"] == "reproduced"
    assert by[("rope", lemma)]["verdict"] == "untested" and "not applicable to RoPE" in by[("rope", lemma)]["reason"]
    assert {c["verdict"] for c in by.values()} <= {"reproduced", "contradicted", "inconclusive", "untested"}
    single = bench.claims(models[:2])
    assert {c["verdict"] for c in single} == {"untested"}
    assert {c["reason"] for c in single if c["encoding"] == "learned"} == {"1 seed(s), fewer than 3"}


def test_conservation_is_a_check_without_a_fraction_threshold():
    low = [model_row("learned", seed, lrp_fraction=0.5, pa_fraction=0.6 + 0.01 * seed) for seed in range(3)]
    check = bench.conservation_checks(low)[0]
    assert check["kind"] == "check" and check["holds"] and "verdict" not in check  # the ledger balances
    assert check["input_fraction_pa_lrp"]["mean"] == pytest.approx(0.61)  # reported, not judged
    broken = [{**row, "identity_residual_pa_lrp": 1e-2} for row in low]
    assert not bench.conservation_checks(broken)[0]["holds"]


def test_analysis_report_and_plots_from_model_rows(tmp_path):
    """What the runner does with finished runs (no training): comparisons, claims, report and plots."""
    models = []
    for encoding, pa in (("rope", 0.2), ("nope", 0.3)):
        for seed in (0, 1, 2):
            models.append({"kind": "model", **model_row(encoding, seed, 0.5), "examples": 2, "val_loss": 1.0,
                           "train_s": 1.0, "eval_s": 1.0,
                           "example": {"ids": [1, 4, 5, 3], "token": [0.1, 0.5, -0.2, 0.3], "plain": [0.1] * 4,
                                       "grad_x_input": [0.0] * 4, "position_terms": {}, "removable": [1, 2]},
                           "methods": [{"task": "copy", "encoding": encoding, "seed": seed, "method": m,
                                        "auc_morf": pa + 0.01 * seed if m == "pa_lrp" else 0.3 + 0.01 * seed,
                                        "auc_lerf": 0.5, "top1_hit": 0.5} for m in bench.METHODS]})
    config, _ = load_config(BENCHMARK, "full", overrides=["tasks=[copy]", "encodings=[rope, nope]"])
    result = Result(config=config, preset="full", rows=models, device={"accelerator": "cpu"})
    result.derived = BENCHMARK.analyze(result)
    claims = {(r["encoding"], r["claim"]): r["verdict"] for r in result.derived if r["kind"] == "claim"}
    assert claims[("rope", "PA-LRP more faithful than plain LRP (MoRF AUC)")] == "reproduced"  # -0.1 on every seed
    assert not any(encoding == "nope" for encoding, _ in claims)
    # the AUCs are areas under probability curves: their intervals stay in [0, 1] (t interval intersected)
    summaries = [r for r in result.derived if r["kind"] == "method_summary"]
    assert summaries and all(r[key]["method"] == "t within [0, 1]" and 0 <= r[key]["low"] <= r[key]["high"] <= 1
                             for r in summaries for key in bench.AUCS)
    figures = BENCHMARK.plot(result)
    assert sorted(figures) == ["heatmap_copy_nope.png", "heatmap_copy_rope.png", "perturbation_auc.png"]
    report = BENCHMARK.report(result)
    assert "PA-LRP more faithful than plain LRP" in report and "| copy | rope | 1 | pa_lrp |" in report
    assert "## Conservation (a property of the implementation, not a claim)" in report and "**reproduced**" in report
    write_results("explain", {}, result.rows + result.derived, 1.0, root=tmp_path)
    write_report("explain", BENCHMARK.title, report, root=tmp_path, command="test", quick=False)
    assert json.loads((tmp_path / "explain" / "results.json").read_text())["benchmark"] == "explain"


def test_the_tuning_loss_is_the_answer_loss_on_held_out_examples():
    """``val_loss`` (what the lr is chosen by) is the batch-weighted answer loss on the ``num_val`` validation
    examples -- drawn with another seed than the training ones -- of the trained model."""
    import torch

    from pe_toolkit.training import SequenceLMModule

    assert BENCHMARK.tuning(QUICK).metric == "val_loss" and not BENCHMARK.tuning(QUICK).maximize
    spec = {**BENCHMARK.runs(QUICK)[0], "steps": 3, "decay": 3, "num_train": 64, "num_val": 40, "batch_size": 16,
            "model": {"dim": 16, "num_heads": 2, "num_layers": 1}, "lr": 1e-3, "device": None}
    model, data, val_loss = bench.train(spec)
    val, train = data.examples("val"), data.examples("train")
    assert len(val) == 40 and val != train[:40]  # another draw of the training distribution
    module = SequenceLMModule(data.vocab_size, encoding=spec["encoding"], **spec["model"])
    module.model = model
    with torch.no_grad():
        losses = [(float(module.answer_loss(b)), module.batch_size_of(b)) for b in data.val_dataloader()]
    expected = sum(loss * n for loss, n in losses) / sum(n for _, n in losses)
    assert val_loss == pytest.approx(expected, rel=1e-5)
