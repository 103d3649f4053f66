"""The vision benchmark on the harness: a tiny end-to-end run (files, lr chosen on validation, resume), its verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pe_toolkit.bench.cli import main
from pe_toolkit.benchmarks import vision as bench

_SCRIPT = Path(bench.__file__).resolve()

TINY = {"seeds": [0, 1], "encodings": ["rope_axial", "learned_2d"],
        "data": {"train_size": 16, "test_sizes": [16, 24], "num_train": 16, "num_val": 8, "num_test": 8},
        "model": {"patch_size": 8, "dim": 16, "num_heads": 2, "num_layers": 1},
        "training": {"steps": 2, "batch_size": 8, "lrs": [0.001, 0.003], "warmup_steps": 1},
        "finetune": {"sizes": [], "steps": 1, "batch_size": 8}}  # the fine-tune path runs in --quick


def test_presets_share_their_keys():
    presets = {name: yaml.safe_load((_SCRIPT.parent / "presets" / "vision" / f"{name}.yaml").read_text())
               for name in ("quick", "full", "gpu")}
    shape = {k: sorted(v) if isinstance(v, dict) else None for k, v in presets["full"].items()}
    for name, preset in presets.items():
        assert {k: sorted(v) if isinstance(v, dict) else None for k, v in preset.items()} == shape, name
        assert preset["data"]["test_sizes"][0] == preset["data"]["train_size"]
    assert len(presets["full"]["seeds"]) >= 3 and len(presets["gpu"]["seeds"]) >= 3


def test_tiny_run_writes_results_and_resumes(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    args = ["vision", "--quick", "--config", str(config), "--accelerator", "cpu", "--out", str(tmp_path)]
    assert main(args) == 0
    out = tmp_path / "vision"
    results = json.loads((out / "results.json").read_text())
    runs = [r for r in results["rows"] if r["kind"] == "run"]
    trials = [r for r in results["rows"] if r.get("kind") == "tuning_trial"]
    assert len(runs) == 4 and len(trials) == 4  # 2 encodings x 2 seeds; seed 0 tried both lrs
    for encoding in TINY["encodings"]:
        chosen = results["config"]["chosen"][encoding]
        best = max((r for r in trials if r["encoding"] == encoding), key=lambda r: r["val_acc"])
        assert chosen == best["lr"] and {r["lr"] for r in runs if r["encoding"] == encoding} == {chosen}
    assert all(0 <= r["acc_16"] <= 1 and 0 <= r["acc_24"] <= 1 and r["cpu_seconds"] > 0 for r in runs)
    report = (out / "report.md").read_text()
    assert "rope_axial beats learned_2d at 24 px (trained at 16)" in report
    assert (out / "accuracy_vs_resolution.png").stat().st_size > 1000
    assert "## Tuning" in report and results["config"]["tuning"]["rope_axial"]["tried"] == [0.001, 0.003]
    assert "## How the fairness rule is met" in report and "same validation scenes" in report
    assert main(args + ["--resume"]) == 0  # every run reused: same rows again
    again = json.loads((out / "results.json").read_text())
    assert [r["acc_24"] for r in again["rows"] if r["kind"] == "run"] == [r["acc_24"] for r in runs]


def _rows(encoding: str, accs: list[float], val: float = 0.9) -> list[dict]:
    return [{"encoding": encoding, "seed": i, "val_acc": val, "acc_32": val, "acc_64": a} for i, a in enumerate(accs)]


def test_claims_are_decided_on_the_difference_with_the_task_caveat():
    rows = _rows("rope_mixed", [0.80, 0.82, 0.78]) + _rows("learned_2d", [0.50, 0.55, 0.45]) \
        + _rows("sincos_2d", [0.79, 0.83, 0.76])
    claims = bench.claims(rows, [32, 64], 32)
    assert [(c["comparison"], c["verdict"]) for c in claims] == [
        ("rope_mixed vs learned_2d", "reproduced"), ("rope_mixed vs sincos_2d", "inconclusive")]
    first = claims[0]
    assert first["kind"] == "claim" and first["test"].startswith("Welch t") and first["a"]["n"] == 3
    assert first["a"]["mean"] == pytest.approx(0.8) and first["b"]["mean"] == pytest.approx(0.5)
    assert first["difference"]["mean"] == pytest.approx(0.3) and first["a"]["high"] <= 1.0
    assert "favours learned_2d" in first["caveat"]
    assert claims[1]["min_detectable_effect"] > 0


def test_a_side_not_learned_or_one_seed_makes_the_claim_untested():
    rows = _rows("rope_axial", [0.8, 0.9, 0.85]) + _rows("sincos_2d", [0.3, 0.2, 0.25], val=0.3)
    claim = bench.claims(rows, [32, 64], 32)[0]
    assert claim["verdict"] == "untested" and claim["reason"] == (
        "sincos_2d not learned: validation accuracy 0.300 at 32 px < 0.5")
    one = bench.claims(_rows("rope_axial", [0.9]) + _rows("sincos_2d", [0.2]), [32, 64], 32)[0]
    assert one["verdict"] == "untested" and one["reason"].startswith("fewer than 2 replicates")


def test_no_claim_without_an_absolute_side():
    assert bench.claims(_rows("rope_axial", [0.9]), [32, 64], 32) == []
