"""A tiny end-to-end run of benchmarks/mha2mla.py, and --resume reusing its trained model and conversions."""

from __future__ import annotations

import json

import pytest

from benchmarks import mha2mla as bench

TINY = {
    "model": {"dim": 16, "num_heads": 2, "num_layers": 1},
    "context": 16, "batch_size": 2, "train_steps": 3, "lr": 3e-3,
    "finetune_steps": 2, "finetune_lr": 1e-3, "max_bytes": 20_000, "val_windows": 2, "calibration_windows": 2,
    "decode_lengths": [8], "decode_rounds": 2,
    "conversions": [("high", "joint", 2, 4), ("2-norm", "split", 2, 4)],
}


def test_tiny_run_then_resume(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "QUICK", TINY)
    argv = ["--quick", "--out", str(tmp_path)]
    assert bench.main(argv) == 0
    out = tmp_path / "mha2mla"
    every = json.loads((out / "results.json").read_text())["rows"]
    rows = [r for r in every if r.get("kind") != "decode_step"]
    assert [r["cache_length"] for r in every if r.get("kind") == "decode_step"] == [8]
    assert [(r["model"], r["strategy"]) for r in rows] == [("mha", None), ("mla", "high"), ("mla", "2-norm")]
    assert sorted(p.name for p in (out / "runs" / "quick").iterdir()) == [
        "mha.json", "mha.pt", "mla__2-norm__split__r2__d4.json", "mla__high__joint__r2__d4.json"]

    # a resumed run trains nothing: the MHA weights, its losses and both conversions are read back
    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(bench, "train_language_model", no_training)
    assert bench.main([*argv, "--resume"]) == 0
    assert [r for r in json.loads((out / "results.json").read_text())["rows"] if r.get("kind") != "decode_step"] == rows
    # a new conversion on the reused model is fine-tuned (and only it)
    monkeypatch.setitem(TINY, "conversions", [*TINY["conversions"], ("low", "joint", 2, 4)])
    with pytest.raises(AssertionError, match="trained again"):
        bench.main([*argv, "--resume"])


def test_tiny_hf_run(tmp_path, monkeypatch):
    """--hf: the MHA model is an HF LlamaForCausalLM, trained as one, and convert_to_mla receives it as is."""
    pytest.importorskip("transformers")
    import pe_toolkit.conversion as conversion

    monkeypatch.setattr(bench, "QUICK", TINY)
    received = []
    original = conversion.convert_to_mla

    def recording(model, **options):
        received.append(type(model).__name__)
        return original(model, **options)

    monkeypatch.setattr(conversion, "convert_to_mla", recording)
    assert bench.main(["--quick", "--hf", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "mha2mla" / "results.json").read_text())
    assert document["config"]["hf"] is True
    assert received == ["LlamaForCausalLM", "LlamaForCausalLM"]
    assert all(r["val_loss_finetuned"] < 10 for r in document["rows"] if r.get("kind") != "decode_step")
    assert (tmp_path / "mha2mla" / "runs" / "quick-hf" / "mha.pt").is_file()
    assert "Hugging Face `LlamaForCausalLM`" in (tmp_path / "mha2mla" / "report.md").read_text()


def test_decode_rows_compare_the_two_paths():
    """The decode table: one row per cache length, both paths timed, the same output."""
    import torch

    rows = bench.decode_rows({"model": {"dim": 16, "num_heads": 2}, "decode_lengths": [8, 32], "decode_rounds": 3},
                             torch)
    assert [r["cache_length"] for r in rows] == [8, 32]
    assert all(r["plain_ms"] > 0 and r["absorbed_ms"] > 0 and r["max_abs_diff"] < 1e-5 for r in rows)
