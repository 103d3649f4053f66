"""The mha2mla benchmark on the harness: presets, the paired claims, a tiny run and its resume, the HF path,
the decode table."""

from __future__ import annotations

import json

import pytest

from pe_toolkit.bench.cli import main
from pe_toolkit.bench.config import load_config
from pe_toolkit.benchmarks import mha2mla as bench

BENCH = bench.Mha2Mla()
TINY = """
seeds: [0]
model: {dim: 16, num_heads: 2, num_layers: 1}
context: 16
batch_size: 2
train_steps: 3
lrs: [0.003]
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


@pytest.fixture(autouse=True)
def threads():
    import torch

    count = torch.get_num_threads()
    yield
    torch.set_num_threads(count)  # the harness sets one thread per run; do not leak it into other tests


def test_presets_load_and_full_covers_the_decode_lengths_and_seeds():
    for name in ("full", "gpu"):
        config, _ = load_config(BENCH, name)
        assert len(config.seeds) >= 3
        assert min(config.decode_lengths) <= 512 and max(config.decode_lengths) >= 4096
    quick, _ = load_config(BENCH, "quick")
    assert [s["run"] for s in BENCH.runs(quick)] == ["mha__seed0", "decode"]
    for bad in ("[[mid, joint, 4, 8]]", "[[high, joint, 4]]", "[[high, joint, 0, 8]]"):
        with pytest.raises(ValueError, match="config.conversions"):
            load_config(BENCH, "quick", overrides=[f"conversions={bad}"])
    with pytest.raises(ValueError, match="decode_lengths must be a non-empty list of distinct values"):
        load_config(BENCH, "quick", overrides=["decode_lengths=[8, 8]"])


def test_the_mha_learning_rate_is_tuned_in_full_and_gpu():
    """Issue 39: the parent's lr is chosen on the first seed's validation loss, on a grid that can extend."""
    for name in ("full", "gpu"):
        config, _ = load_config(BENCH, name)
        tuning = BENCH.tuning(config)
        assert (tuning.param, tuning.metric, tuning.maximize, tuning.group) == ("lr", "val_loss_zero_shot", False,
                                                                                "parent")
        assert len(tuning.values) >= 3 and tuning.max_extensions == 2
        assert {s.get("parent") for s in BENCH.runs(config)} == {"mha", None}  # the decode run is not tuned


def test_tiny_tuned_run_keeps_each_seed_paired_with_its_parent(tmp_path, tiny):
    argv = ["--quick", "--config", str(tiny), "--out", str(tmp_path), "--accelerator", "cpu",
            "--set", "seeds=[0, 1]", "--set", "lrs=[0.0001, 0.03]"]
    assert main(argv, name="mha2mla") == 0
    document = json.loads((tmp_path / "mha2mla" / "results.json").read_text())
    trials = {t["lr"]: t for t in document["rows"] if t.get("kind") == "tuning_trial"}
    best = min(trials, key=lambda lr: trials[lr]["val_loss_zero_shot"])
    assert sorted(trials) == [0.0001, 0.03] and document["config"]["chosen"] == {"mha": best}
    seeds = [r for r in document["rows"] if "conversions" in r and r.get("kind") != "tuning_trial"]
    assert [(r["seed"], r["lr"]) for r in seeds] == [(0, best), (1, best)]
    assert seeds[0] == {k: v for k, v in trials[best].items() if k != "kind"}  # the first seed is its chosen trial
    # every conversion's loss change is against its own seed's fine-tuned parent
    for row in seeds:
        for c in row["conversions"]:
            assert c["seed"] == row["seed"]
            assert c["loss_change"] == pytest.approx(c["val_loss_finetuned"] - row["val_loss_finetuned"])


def _row(strategy, svd, d, changes, cache=80, reduction=0.95, r=4):
    return [{"model": "mla", "seed": s, "strategy": strategy, "svd": svd, "rope_dim": r, "latent_dim": d,
             "cache_per_token": cache, "cache_bytes_per_token": 4 * cache, "cache_reduction": reduction,
             "val_loss_zero_shot": 2.5, "val_loss_finetuned": 2.0 * (1 + c / 100), "loss_change_pct": c}
            for s, c in enumerate(changes)]


def _claims(rows):
    return {c["name"].split(" (")[0]: c for c in bench.claims(rows)}


def test_claims_are_paired_per_seed():
    # seeds spread widely, but every conversion of a seed moves with that seed's MHA model
    spread = lambda m: [m - 2.0, m, m + 2.0]  # noqa: E731
    rows = (_row("high", "joint", 8, spread(3.0)) + _row("uniform", "joint", 8, spread(8.0))
            + _row("low", "joint", 8, spread(9.0)) + _row("2-norm", "joint", 8, [0.3, 0.5, 0.4])
            + _row("2-norm", "split", 4, spread(12.0), cache=80))
    by = _claims(rows)
    cache = by[">= 90 % less KV cache for <= 1 % more loss after the same fine-tune"]
    assert cache["verdict"] == "reproduced" and cache["claim_kind"] == "noninferiority" and cache["margin"] == 1.0
    assert cache["paired"] and cache["b"]["values"] == [0.0, 0.0, 0.0]
    assert by["high beats uniform"]["verdict"] == "reproduced" and by["high beats uniform"]["test"].startswith("paired")
    assert by["uniform beats low"]["verdict"] == "reproduced"
    assert by["2-norm not worse than high"]["verdict"] == "reproduced"
    assert by["joint SVD beats split SVD at the same cache"]["verdict"] == "reproduced"
    # high no better than uniform: not reproduced (here the opposite effect is detected)
    rows = _row("high", "joint", 8, spread(8.5)) + [r for r in rows if r["strategy"] != "high"]
    assert _claims(rows)["high beats uniform"]["verdict"] == "contradicted"
    # a +3 % cost against a 1 % margin, seeds that disagree: neither reproduced nor contradicted
    assert _claims(_row("2-norm", "joint", 8, [0.0, 3.0, 6.0]))[
        ">= 90 % less KV cache for <= 1 % more loss after the same fine-tune"]["verdict"] == "inconclusive"
    single = bench.claims(_row("2-norm", "joint", 8, [0.5]))
    assert [c["verdict"] for c in single] == ["untested"] and "fewer than 3 seeds" in single[0]["reason"]
    none = bench.claims(_row("high", "joint", 8, [0.5] * 3))
    assert [c["verdict"] for c in none] == ["untested"] and "no 2-norm / joint" in none[0]["reason"]


def test_tiny_run_then_resume(tmp_path, monkeypatch, tiny):
    argv = ["--quick", "--config", str(tiny), "--out", str(tmp_path), "--accelerator", "cpu"]
    assert main(argv, name="mha2mla") == 0
    out = tmp_path / "mha2mla"
    every = json.loads((out / "results.json").read_text())["rows"]
    (seed, decode) = every[:2]
    (step,) = decode["steps"]
    assert step["cache_length"] == 8 and step["held_tokens"] == 9 and step["allocated_tokens"] == 9
    assert step["allocated_bytes"] == step["needed_bytes"] > 0  # preallocated exactly, as generate does
    rows = bench.model_rows([seed])
    assert [(r["model"], r["strategy"], r["seed"]) for r in rows] == [("mha", None, 0), ("mla", "high", 0),
                                                                      ("mla", "2-norm", 0)]
    assert {r["verdict"] for r in every if r.get("kind") == "claim"} == {"untested"}
    assert sorted(p.name for p in (out / "runs" / "quick").iterdir()) == ["run=decode.json",
                                                                          "run=mha__seed0__lr=0.003.json"]

    # a resumed run trains nothing: the seed's MHA model and its conversions are read back
    def no_training(*args, **kwargs):
        raise AssertionError("trained again")

    monkeypatch.setattr(bench, "train_language_model", no_training)
    assert main([*argv, "--resume"], name="mha2mla") == 0
    assert json.loads((out / "results.json").read_text())["rows"][0] == seed
    more = ["--set", "conversions=[[high, joint, 2, 4], [2-norm, split, 2, 4], [low, joint, 2, 4]]"]
    with pytest.raises(AssertionError, match="trained again"):  # another conversion list: the seed runs again
        main([*argv, "--resume", *more], name="mha2mla")


def test_tiny_hf_run(tmp_path, monkeypatch, tiny):
    """hf: true: the MHA model is an HF LlamaForCausalLM, trained as one, and convert_to_mla receives it as is."""
    pytest.importorskip("transformers")
    import pe_toolkit.conversion as conversion

    received = []
    original = conversion.convert_to_mla

    def recording(model, **options):
        received.append(type(model).__name__)
        return original(model, **options)

    monkeypatch.setattr(conversion, "convert_to_mla", recording)
    argv = ["--quick", "--config", str(tiny), "--set", "hf=true", "--out", str(tmp_path), "--accelerator", "cpu"]
    assert main(argv, name="mha2mla") == 0
    document = json.loads((tmp_path / "mha2mla" / "results.json").read_text())
    assert document["config"]["hf"] is True
    assert received == ["LlamaForCausalLM", "LlamaForCausalLM"]
    assert all(r["val_loss_finetuned"] < 10 for r in bench.model_rows(document["rows"]))
    assert (tmp_path / "mha2mla" / "runs" / "quick" / "run=mha-hf__seed0__lr=0.003.json").is_file()
    assert "Hugging Face `LlamaForCausalLM`" in (tmp_path / "mha2mla" / "report.md").read_text()


def test_decode_rows_compare_the_two_paths():
    """The decode table: one row per cache length, both paths timed, the same output."""
    rows = bench.decode_rows({"model": {"dim": 16, "num_heads": 2}, "decode_lengths": [8, 32], "decode_rounds": 3})
    assert [r["cache_length"] for r in rows] == [8, 32]
    assert all(r["plain_ms"] > 0 and r["absorbed_ms"] > 0 and r["max_abs_diff"] < 1e-5 for r in rows)
