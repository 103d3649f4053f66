"""A tiny end-to-end run of benchmarks/mha2mla.py, and --resume reusing its trained model and conversions."""

from __future__ import annotations

import json

import pytest

from benchmarks import mha2mla as bench

TINY = """
seeds: [0]
model: {dim: 16, num_heads: 2, num_layers: 1}
context: 16
batch_size: 2
train_steps: 3
lr: 0.003
finetune_steps: 2
finetune_lr: 0.001
max_bytes: 20000
val_windows: 2
calibration_windows: 2
decode_lengths: [8]
decode_rounds: 2
conversions: [[high, joint, 2, 4], [2-norm, split, 2, 4]]
"""


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def test_presets_load_and_full_covers_the_decode_lengths_and_seeds():
    presets = __import__("presets")
    for name in ("quick", "full", "gpu"):
        bench.check_preset(presets.load_preset(bench.NAME, name))
    for name in ("full", "gpu"):
        preset = presets.load_preset(bench.NAME, name)
        assert len(preset["seeds"]) >= 3
        assert min(preset["decode_lengths"]) <= 512 and max(preset["decode_lengths"]) >= 4096
    with pytest.raises(ValueError, match="conversions entries must be"):
        bench.check_preset({**presets.load_preset(bench.NAME, "quick"), "conversions": [["mid", "joint", 4, 8]]})


def summary_row(strategy, svd, d, losses, change, cache=80, reduction=0.95):
    from benchmarks.common import mean_interval

    return {"kind": "summary", "model": "mla", "strategy": strategy, "svd": svd, "rope_dim": 4, "latent_dim": d,
            "cache_per_token": cache, "cache_reduction": reduction, "seeds": len(losses),
            "val_loss_finetuned": mean_interval(losses), "loss_change_pct": mean_interval(change)}


def test_claims_from_intervals():
    tight = lambda m: [m - 0.001, m, m + 0.001]  # noqa: E731
    summary = [summary_row("high", "joint", 8, tight(2.0), tight(3.0)),
               summary_row("uniform", "joint", 8, tight(2.1), tight(8.0)),
               summary_row("low", "joint", 8, tight(2.2), tight(9.0)),
               summary_row("2-norm", "joint", 8, tight(2.0), tight(0.5)),
               summary_row("2-norm", "split", 4, tight(2.3), tight(12.0))]
    by = {c["claim"].split(" (")[0]: c for c in bench.claims(summary)}
    assert by[">= 90 % less KV cache for <= 1 % more loss"]["verdict"] == "reproduced"  # 2-norm: +0.5 %
    assert by["ordering 2-norm >~ high > uniform > low"]["verdict"] == "reproduced"
    assert by["joint SVD > split SVD at the same cache"]["verdict"] == "reproduced"
    summary[0] = summary_row("high", "joint", 8, tight(2.15), tight(3.0))  # high no better than uniform
    by = {c["claim"].split(" (")[0]: c for c in bench.claims(summary)}
    assert by["ordering 2-norm >~ high > uniform > low"]["verdict"] == "not reproduced"
    single = [summary_row("2-norm", "joint", 8, [2.0], [0.5])]
    assert [c["verdict"] for c in bench.claims(single)] == ["untested"]


def test_tiny_run_then_resume(tmp_path, monkeypatch, tiny):
    argv = ["--quick", "--config", str(tiny), "--out", str(tmp_path), "--accelerator", "cpu"]
    assert bench.main(argv) == 0
    out = tmp_path / "mha2mla"
    every = json.loads((out / "results.json").read_text())["rows"]
    rows = [r for r in every if "kind" not in r]
    (decode,) = [r for r in every if r.get("kind") == "decode_step"]
    assert decode["cache_length"] == 8 and decode["held_tokens"] == 9 and decode["allocated_tokens"] == 9
    assert decode["allocated_bytes"] == decode["needed_bytes"] > 0  # preallocated exactly, as generate does
    assert [(r["model"], r["strategy"], r["seed"]) for r in rows] == [("mha", None, 0), ("mla", "high", 0),
                                                                      ("mla", "2-norm", 0)]
    assert {r["verdict"] for r in every if r.get("kind") == "claim"} <= {"untested"}
    assert sorted(p.name for p in (out / "runs" / "quick").iterdir()) == [
        "mha__seed0.json", "mha__seed0.pt", "mla__2-norm__split__r2__d4__seed0.json",
        "mla__high__joint__r2__d4__seed0.json"]

    # a resumed run trains nothing: the MHA weights, its losses and both conversions are read back
    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(bench, "train_language_model", no_training)
    assert bench.main([*argv, "--resume"]) == 0
    assert [r for r in json.loads((out / "results.json").read_text())["rows"] if "kind" not in r] == rows
    # a new conversion on the reused model is fine-tuned (and only it)
    more = ["--set", "conversions=[[high, joint, 2, 4], [2-norm, split, 2, 4], [low, joint, 2, 4]]"]
    with pytest.raises(AssertionError, match="trained again"):
        bench.main([*argv, "--resume", *more])


def test_tiny_hf_run(tmp_path, monkeypatch, tiny):
    """--hf: the MHA model is an HF LlamaForCausalLM, trained as one, and convert_to_mla receives it as is."""
    pytest.importorskip("transformers")
    import pe_toolkit.conversion as conversion

    received = []
    original = conversion.convert_to_mla

    def recording(model, **options):
        received.append(type(model).__name__)
        return original(model, **options)

    monkeypatch.setattr(conversion, "convert_to_mla", recording)
    assert bench.main(["--quick", "--config", str(tiny), "--hf", "--out", str(tmp_path), "--accelerator", "cpu"]) == 0
    document = json.loads((tmp_path / "mha2mla" / "results.json").read_text())
    assert document["config"]["hf"] is True
    assert received == ["LlamaForCausalLM", "LlamaForCausalLM"]
    assert all(r["val_loss_finetuned"] < 10 for r in document["rows"] if "kind" not in r)
    assert (tmp_path / "mha2mla" / "runs" / "quick-hf" / "mha__seed0.pt").is_file()
    assert "Hugging Face `LlamaForCausalLM`" in (tmp_path / "mha2mla" / "report.md").read_text()


def test_decode_rows_compare_the_two_paths():
    """The decode table: one row per cache length, both paths timed, the same output."""
    import torch

    rows = bench.decode_rows({"model": {"dim": 16, "num_heads": 2}, "decode_lengths": [8, 32], "decode_rounds": 3},
                             torch)
    assert [r["cache_length"] for r in rows] == [8, 32]
    assert all(r["plain_ms"] > 0 and r["absorbed_ms"] > 0 and r["max_abs_diff"] < 1e-5 for r in rows)
