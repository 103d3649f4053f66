"""A tiny end-to-end run of benchmarks/mha2mla.py, and --resume reusing its trained model and conversions."""

from __future__ import annotations

import json

import pytest

from benchmarks import mha2mla as bench

TINY = {
    "model": {"dim": 16, "num_heads": 2, "num_layers": 1},
    "context": 16, "batch_size": 2, "train_steps": 3, "lr": 3e-3,
    "finetune_steps": 2, "finetune_lr": 1e-3, "max_bytes": 20_000, "val_windows": 2, "calibration_windows": 2,
    "conversions": [("high", "joint", 2, 4), ("2-norm", "split", 2, 4)],
}


def test_tiny_run_then_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "QUICK", TINY)
    argv = ["--quick", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    out = tmp_path / "mha2mla"
    rows = json.loads((out / "results.json").read_text())["rows"]
    assert [(r["model"], r["strategy"]) for r in rows] == [("mha", None), ("mla", "high"), ("mla", "2-norm")]
    assert sorted(p.name for p in (out / "runs" / "quick").iterdir()) == [
        "mha.json", "mha.pt", "mla__2-norm__split__r2__d4.json", "mla__high__joint__r2__d4.json"]

    # a resumed run trains nothing: the MHA weights, its losses and both conversions are read back
    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(bench, "train_language_model", no_training)
    assert bench.main([*argv, "--resume"]) == 0
    assert json.loads((out / "results.json").read_text())["rows"] == rows
    # a new conversion on the reused model is fine-tuned (and only it)
    monkeypatch.setitem(TINY, "conversions", [*TINY["conversions"], ("low", "joint", 2, 4)])
    with pytest.raises(AssertionError, match="trained again"):
        bench.main([*argv, "--resume"])
