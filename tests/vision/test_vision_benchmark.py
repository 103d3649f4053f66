"""The vision benchmark on the harness: a tiny end-to-end run (files, lr chosen on validation, resume), its verdicts."""

from __future__ import annotations

import json
import math
from pathlib import Path

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
    assert "rope_axial vs learned_2d" in report and (out / "accuracy_vs_resolution.png").stat().st_size > 1000
    assert "## How the fairness rule is met" in report and "same validation scenes" in report
    assert main(args + ["--resume"]) == 0  # every run reused: same rows again
    again = json.loads((out / "results.json").read_text())
    assert [r["acc_24"] for r in again["rows"] if r["kind"] == "run"] == [r["acc_24"] for r in runs]


def _summary(mean: float, half: float) -> dict:
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": 3}


def test_verdicts_follow_the_intervals():
    summary = [{"encoding": "rope_mixed", "acc_64": _summary(0.8, 0.05), "acc_96": _summary(0.6, 0.2)},
               {"encoding": "learned_2d", "acc_64": _summary(0.5, 0.05), "acc_96": _summary(0.5, 0.05)}]
    rows = bench.verdicts(summary, [32, 64, 96], 32)
    assert rows == [{"comparison": "rope_mixed vs learned_2d", "at_64": "better (0.800 vs 0.500)",
                     "at_96": "tie (0.600 vs 0.500)"}]
    sentence = bench.claim_sentence(rows, [32, 64, 96], 32)
    assert sentence == "rope_mixed vs learned_2d: is better at 64 px, tied elsewhere."
    one_seed = {"mean": 0.9, "low": math.nan, "high": math.nan, "n": 1}
    assert bench.verdicts([{"encoding": "rope_axial", "acc_64": one_seed},
                           {"encoding": "sincos_2d", "acc_64": _summary(0.2, 0.01)}], [64], 32)[0]["at_64"] \
        .startswith("untested")


def test_claim_sentence_without_evidence():
    assert bench.claim_sentence([], [32, 64], 32).startswith("Not tested")
    assert bench.claim_sentence([{"comparison": "a vs b"}], [32], 32).startswith("Not tested")
