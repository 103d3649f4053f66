"""A tiny end-to-end run of benchmarks/attention_stability.py, and --resume reusing its finished runs."""

from __future__ import annotations

import json

import pytest

from benchmarks import attention_stability as bench

TINY = {
    "model": {"dim": 16, "num_heads": 2, "num_layers": 1},
    "mla": {"latent_dim": 8, "rope_head_dim": 4, "nope_head_dim": 4},
    "context": 16, "batch_size": 2, "steps": 3, "lrs": [1e-3, 1.0],
    "max_bytes": 20_000, "val_windows": 2, "monitor_every": 1,
}


def test_tiny_run_then_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "QUICK", TINY)
    argv = ["--quick", "--out", str(tmp_path), "--configs", "mha", "mla"]
    bench.main(argv)
    out = tmp_path / "attention_stability"
    rows = [r for r in json.loads((out / "results.json").read_text())["rows"] if r.get("kind") != "summary"]
    assert [(r["config"], r["lr"]) for r in rows] == [("mha", 1e-3), ("mha", 1.0), ("mla", 1e-3), ("mla", 1.0)]
    assert len(list((out / "runs" / "quick").glob("*.json"))) == 4
    assert (out / "loss_vs_lr.png").stat().st_size > 0 and "mla" in (out / "report.md").read_text()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench, "run_one", no_training)
    bench.main([*argv, "--resume"])
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if r.get("kind") != "summary"]
    assert json.dumps(again) == json.dumps(rows)  # as text: a diverged run's loss is inf or nan
    with pytest.raises(AssertionError, match="trained again"):
        bench.main([*argv, "--resume", "--steps", "4"])
