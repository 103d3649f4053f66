"""The extrapolation benchmark: the variant table, the encoding swap, a fine-tune, one tiny end-to-end run.

The end-to-end run goes through ``extrapolation.main`` in a fresh interpreter: it forks a child for the
memory measurement, and a child forked from a process that already used torch's OpenMP pool (as this
pytest process may have) would hang. See benchmarks/common.py.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
import torch

import pe_toolkit as pet
from benchmarks import extrapolation as ext
from pe_toolkit.encoders.rotary import ROPE_SCALINGS

TINY_MODEL = {"dim": 16, "num_heads": 2, "num_layers": 2}


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the benchmark's workers set one thread; do not leak it into other tests


def test_variant_table_is_well_formed():
    names = pet.list_encoders()
    assert set(ext.QUICK_VARIANTS) <= set(ext.VARIANTS) and ext.FULL["variants"] == list(ext.VARIANTS)
    required = {"nope", "rope", "alibi", "t5", "kerple", "fire", "bam", "bam_ssmax"}
    assert required <= set(ext.BASE_ENCODERS)
    for preset in (ext.QUICK, ext.FULL):
        context = preset["training"]["context"]
        assert max(preset["evaluation"]["passkey_lengths"]) >= 16 * context
        for name, variant in ext.VARIANTS.items():
            assert variant.base in names, name
            assert variant.encoding is None or variant.encoding in names, name
            assert variant.finetune in (None, "positional", "full"), name
            options = ext.resolve_options(variant, preset)
            assert options.get("scaling") in ROPE_SCALINGS, name
            if variant.factor is not None:
                assert options["factor"] >= 1
            # every resolved option set builds an encoder
            pet.get_encoder(variant.encoding or variant.base, 32, 2, causal=True, **options)
    full = ext.FULL
    assert max(full["evaluation"]["passkey_lengths"]) == 64 * full["training"]["context"]
    assert max(full["evaluation"]["ppl_lengths"]) == 8192 and full["memory"]["length"] == 32768
    yarn = ext.resolve_options(ext.VARIANTS["rope+yarn"], full)
    assert yarn == {"scaling": "yarn", "factor": 64.0, "original_max_position": 256}
    assert ext.resolve_options(ext.VARIANTS["rope+linear+ft"], full) == {"scaling": "linear", "factor": 4.0}


def _tiny_transformer(encoding="nope"):
    return pet.Transformer(pet.TransformerConfig(vocab_size=64, **TINY_MODEL, encoding=encoding))


@pytest.mark.parametrize("per_layer", [False, True])
def test_swap_encoding_changes_only_the_encoding(per_layer):
    model = _tiny_transformer("nope")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ext.swap_encoding(model, "nope_temperature", {"scale": 1.6, "learned": True}, per_layer=per_layer)
    assert len(model.encodings) == (2 if per_layer else 1)
    layers = [model.encoding_for_layer(i) for i in range(2)]
    assert all(type(e).__name__ == "TemperatureNoPE" and e.learned for e in layers)
    assert (layers[0] is layers[1]) != per_layer
    assert model.config.encoding == "nope_temperature" and model.config.share_encoding != per_layer
    after = model.state_dict()
    for key, value in before.items():
        torch.testing.assert_close(after[key], value)
    assert all(k.startswith("encodings.") for k in set(after) - set(before))
    assert model(torch.randint(0, 64, (1, 12))).shape == (1, 12, 64)


def test_swap_rope_scaling_keeps_outputs_within_the_original_context():
    model = _tiny_transformer("rope").eval()
    tokens = torch.randint(0, 64, (1, 16))
    with torch.no_grad():
        plain = model(tokens)
        ext.swap_encoding(model, "rope", {"scaling": "dynamic", "factor": 4.0, "original_max_position": 32})
        dynamic = model(tokens)  # dynamic NTK is plain RoPE up to original_max_position
    assert model.encoding_for_layer(1).scaling == "dynamic"
    torch.testing.assert_close(dynamic, plain)


def _spec(name, steps=2):
    variant = ext.VARIANTS[name]
    preset = {
        "training": {
            "context": 112,
            "steps": steps,
            "batch_size": 4,
            "lr": 3e-3,
            "warmup_steps": 1,
            "weight_decay": 0.1,
            "passkey_fraction": 0.25,
            "passkey_template": "compact",
            "loss_average": "rows",
            "seed": 0,
        },
        "finetune": {"multiple": 2, "steps": 3, "batch_size": 2, "lr": 1e-3, "positional_lr": 0.05},
        "evaluation": {
            "ppl_lengths": [112, 224],
            "ppl_tokens": 224,
            "ppl_min_windows": 1,
            "ppl_max_windows": 2,
            "passkey_lengths": [112, 448],
            "passkey_depths": [0.0, 1.0],
            "passkey_tokens": 112,
            "passkey_max_samples": 1,
            "block_size": 64,
            "entropy_multiples": [1, 2],
        },
    }
    return {
        "name": name,
        "base": variant.base,
        "variant": dataclasses.asdict(variant),
        "options": ext.resolve_options(variant, preset),
        "finetune": preset["finetune"],
        "evaluation": preset["evaluation"],
        "model": TINY_MODEL,
        "training": preset["training"],
        "threads": 1,
    }


def test_headscale_finetune_trains_the_scales_only_and_evaluates(tmp_path):
    spec = _spec("nope+headscale")
    weights = tmp_path / "nope.pt"  # untrained weights stand in for a trained base; train_base runs end to end below
    torch.save(ext._module(spec).state_dict(), weights)
    state = torch.load(weights, weights_only=True)
    module, finetune = ext.build_variant(spec, str(weights))
    assert finetune["kind"] == "positional" and finetune["context"] == 224 and finetune["steps"] == 3
    assert module.hparams.loss_average == "rows"
    after = module.state_dict()
    for key, value in state.items():  # the trunk is frozen during a positional-only fine-tune
        torch.testing.assert_close(after[key], value)
    scales = torch.cat([module.model.encoding_for_layer(i).head_scale.detach() for i in range(2)])
    assert (
        scales.shape == (4,)
        and bool((scales >= 1.0).all())
        and not torch.equal(scales, torch.full((4,), 1.6))
    )

    row = ext.evaluate_variant(spec, str(weights))
    assert row["kind"] == "variant" and row["encoding"] == "nope_temperature"
    assert len([k for k in row["learned"] if k.endswith("head_scale")]) == 2
    assert [p["length"] for p in row["ppl"]] == [112, 224]
    assert all(math.isfinite(p["ppl"]) and p["ppl"] > 1 for p in row["ppl"])
    assert {(p["length"], p["depth"]) for p in row["passkey"]} == {
        (112, 0.0),
        (112, 1.0),
        (448, 0.0),
        (448, 1.0),
    }
    assert all(0 <= p["digit_accuracy"] <= 1 and p["exact_match"] in (0.0, 1.0) for p in row["passkey"])
    check = row["greedy_check"]
    assert check["greedy_exact_match"] == check["teacher_forced_exact_match"]
    assert [e["length"] for e in row["entropy"]] == [112, 224] and all(
        e["mean_bits"] >= 0 for e in row["entropy"]
    )


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("extrapolation_out")
    argv = ["--quick", "--variants", "rope+yarn", "--steps", "3", "--jobs", "1", "--memory-length", "1024",
            "--out", str(out)]
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from benchmarks import extrapolation; "
        "sys.exit(extrapolation.main(sys.argv[2:]))"
    )
    root = str(ext.Path(ext.__file__).resolve().parents[1])
    completed = subprocess.run(
        [sys.executable, "-c", code, root, *argv], capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return out / "extrapolation"


def test_tiny_end_to_end_run_writes_results_report_and_plots(quick_run):
    document = json.loads((quick_run / "results.json").read_text())
    assert set(document) == {"benchmark", "config", "rows", "environment", "seconds"}
    assert document["benchmark"] == "extrapolation" and document["config"]["variants"] == ["rope+yarn"]
    assert [r["kind"] for r in document["rows"]] == ["training", "variant", "memory"]
    training, variant, memory = document["rows"]
    assert training["base"] == "rope" and math.isfinite(training["final_train_loss"])
    assert variant["variant"] == "rope+yarn" and variant["options"]["scaling"] == "yarn"
    assert variant["options"]["factor"] == max(ext.QUICK["evaluation"]["passkey_lengths"]) / 128
    assert [p["length"] for p in variant["ppl"]] == ext.QUICK["evaluation"]["ppl_lengths"]
    assert all(p["ppl"] is not None and math.isfinite(p["ppl"]) and p["ppl"] > 1 for p in variant["ppl"])
    assert [p["length"] for p in variant["passkey_by_length"]] == ext.QUICK["evaluation"]["passkey_lengths"]
    assert memory["status"] == "ok" and memory["peak_mib"] > 0 and memory["length"] == 1024
    report = (quick_run / "report.md").read_text()
    assert "rope+yarn" in report and "Passkey" in report and "## Memory" in report
    for png in ("ppl_vs_length.png", "passkey_heatmap.png"):
        assert (quick_run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = quick_run / "runs" / "quick"
    assert (runs / "train__rope.pt").is_file() and (runs / "eval__rope+yarn.json").is_file()


def _row(name, ppl, exact=0.0, digits=0.1):
    return {
        "variant": name,
        "ppl": [{"length": 64, "ppl": ppl[0]}, {"length": 512, "ppl": ppl[1]}],
        "passkey_by_length": [{"length": 4096, "exact_match": exact, "digit_accuracy": digits}],
    }


def test_claims_and_tables_use_the_measured_ratios():
    rows = [_row("rope", (10.0, 40.0)), _row("alibi", (11.0, 11.5)), _row("bam", (11.0, 20.0), exact=0.5)]
    ppl_table, passkey_table = ext.summary_tables(rows, context=64)
    assert ppl_table[0] == {"variant": "rope", "x1": 10.0, "x8": 40.0, "ratio": 4.0}
    assert passkey_table[2] == {"variant": "bam", "x64": 0.5, "digits_last": 0.1}
    text = "\n".join(ext.claims(rows, context=64))
    assert "RoPE's perplexity blows up past the training context (PPL at 512 / PPL at 64: 4.000" in text
    assert "alibi keeps perplexity flat" in text and "1.045 (rope: 4.000); flat = at most 1.25): **holds**" in text
    assert "bam keeps perplexity flat" in text
    assert "1.818 (rope: 4.000); flat = at most 1.25): **does not hold**" in text
    assert "Passkey retrieval at 4096 bytes (64x the training context)" in text and "bam 0.50 (0.10)" in text


def test_claims_flag_passkey_not_learned_at_the_training_context():
    def row(name, digits_at_context):
        return {
            "variant": name,
            "ppl": [{"length": 64, "ppl": 10.0}, {"length": 512, "ppl": 12.0}],
            "passkey_by_length": [
                {"length": 64, "exact_match": 0.0, "digit_accuracy": digits_at_context},
                {"length": 4096, "exact_match": 0.0, "digit_accuracy": 0.1},
            ],
        }

    text = "\n".join(ext.claims([row("rope", 0.6), row("nope", 0.2), row("bam", 0.21)], context=64))
    assert "Passkey retrieval at the training context (64 bytes), exact match (digit accuracy): " in text
    assert "rope 0.00 (0.60), nope 0.00 (0.20), bam 0.00 (0.21)" in text
    assert "**not learned** by nope (digit accuracy at most 0.2" in text
    learned = "\n".join(ext.claims([row("rope", 0.6)], context=64))
    assert "Retrieval learned by all." in learned


def test_resume_reuses_only_a_matching_spec(tmp_path):
    path = tmp_path / "run.json"
    assert ext._load_if_same(path, {"a": 1}) is None
    path.write_text(json.dumps({"spec": {"a": 1, "lengths": [1, 2]}, "value": 3}))
    assert ext._load_if_same(path, {"a": 1, "lengths": (1, 2)})["value"] == 3
    assert ext._load_if_same(path, {"a": 2, "lengths": (1, 2)}) is None
