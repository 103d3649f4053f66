"""The extrapolation benchmark on the harness: presets, the protocol (dynamic NTK, equal tokens, zero-shot
data), run specs, the encoding swap, a fine-tune, the claims (pe_toolkit.bench.verdict), one tiny run and
its resume.

The memory measurement forks a child from a freshly spawned process (``memory_row``), so the tiny run may go
through ``pe_toolkit.bench.cli.main`` in this pytest process even after torch ran here.
"""

from __future__ import annotations

import dataclasses
import json
import math
from types import SimpleNamespace

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.bench.config import load_config
from pe_toolkit.benchmarks import extrapolation as ext
from pe_toolkit.encoders.rotary import ROPE_SCALINGS, rope_inverse_frequencies

BENCH = ext.Extrapolation()
TINY_MODEL = {"dim": 16, "num_heads": 2, "num_layers": 2}
CPU = {"accelerator": "cpu", "devices": 1, "precision": "32-true"}


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)  # the harness sets one thread per run; do not leak it into other tests


@pytest.fixture(scope="module")
def loaded():
    return {name: dataclasses.asdict(load_config(BENCH, name)[0]) for name in ("quick", "full", "gpu")}


# ------------------------------------------------------------------------------------------ presets
def test_presets_load_validate_and_build_every_variant(loaded):
    assert BENCH.preset_names() == ["full", "gpu", "quick"]
    names = pet.list_encoders()
    for preset in loaded.values():
        assert set(preset["variants"]) <= set(ext.VARIANTS)
        for variant_name in preset["variants"]:
            variant = ext.VARIANTS[variant_name]
            assert variant.base in names and (variant.encoding is None or variant.encoding in names)
            options = ext.resolve_options(variant, preset)
            assert options.get("scaling") in ROPE_SCALINGS
            pet.get_encoder(variant.encoding or variant.base, preset["model"]["dim"], preset["model"]["num_heads"],
                            causal=True, **options)
    full, gpu = loaded["full"], loaded["gpu"]
    for preset in (full, gpu):  # the protocol
        assert len(preset["seeds"]) >= 3 and preset["passkey_modes"] == ["zero_shot", "trained"]
        assert preset["evaluation"]["passkey_samples"] >= 50
        assert {2, 4, 8, 16} <= set(preset["scalings"]["sweep_factors"])
        assert preset["variants"] == list(ext.VARIANTS)
        context = preset["training"]["context"]  # Wang et al. is read at 8x and 16x: both are measured
        assert {8 * context, 16 * context} <= set(preset["evaluation"]["ppl_lengths"])
    assert gpu["model"]["dim"] > full["model"]["dim"] and gpu["training"]["steps"] > full["training"]["steps"]
    context = full["training"]["context"]
    assert ext.resolve_options(ext.VARIANTS["rope+yarn"], full) == {
        "scaling": "yarn", "factor": 8.0, "original_max_position": context}
    assert ext.resolve_options(ext.VARIANTS["rope+yarn"], full, 16) == {
        "scaling": "yarn", "factor": 16.0, "original_max_position": context}
    assert ext.resolve_options(ext.VARIANTS["rope+linear+ft"], full) == {"scaling": "linear", "factor": 4.0}
    assert ext.resolve_options(ext.VARIANTS["rope+dynamic"], full)["factor"] == 1.0


def test_command_line_overrides_reach_the_config():
    config, run = load_config(BENCH, "quick", overrides=[
        "scalings.factor=16", "seeds=[3, 4, 5]", "training.steps=7", "variants=[rope, alibi]", "run.jobs=1"])
    assert config.scalings.factor == 16 and config.seeds == [3, 4, 5] and config.training.steps == 7
    assert config.variants == ["rope", "alibi"] and run == {"jobs": 1, "threads": 1}
    with pytest.raises(ValueError, match="'scalings.factr' does not exist"):
        load_config(BENCH, "quick", overrides=["scalings.factr=2"])


@pytest.mark.parametrize(("override", "named"), [
    ("seeds=[0, 0]", "seeds"),
    ("seeds=[]", "seeds"),
    ("passkey_modes=[zero-shot]", "passkey_modes"),
    ("variants=[rope+yran]", "variants"),
    ("scalings.factor=0.5", "scalings.factor"),
    ("scalings.sweep_factors=[2, x]", "sweep_factors"),
    ("evaluation.ppl_tokens=1000", "evaluation.ppl_tokens"),
    ("evaluation.ppl_lengths=[256, 128]", "evaluation.ppl_lengths"),
    ("evaluation.passkey_samples=0", "evaluation.passkey_samples"),
    ("training.passkey_fraction=0.0", "training.passkey_fraction"),
    ("trained_variants=[t5]", "trained_variants"),  # not among the quick preset's variants
    ("trained_variants=[]", "trained_variants"),
])
def test_bad_configs_are_value_errors_naming_the_key(override, named):
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        load_config(BENCH, "quick", overrides=[override])


def test_runs_one_per_trained_model_with_its_variants(loaded):
    """One run per (base, mode, seed), its spec holding every variant it evaluates; plus the memory run."""
    full = loaded["full"]
    specs = BENCH.runs(load_config(BENCH, "full")[0])
    assert specs[0]["run"] == "memory__bam_L32768" and specs[0]["memory"]["encoding"] == "bam"
    runs = {s["run"]: s for s in specs[1:]}
    assert len(runs) == len(specs) - 1 == 3 * (8 + 4)  # 8 bases zero-shot, 4 trained-mode bases; 3 seeds
    rope = runs["train__rope__zero_shot__s0"]
    assert [v["name"] for v in rope["variants"]] == [n for n in full["variants"] if n.startswith("rope")]
    assert rope["finetune"] == full["finetune"] and runs["train__alibi__zero_shot__s0"]["finetune"] is None
    assert "lrs" not in rope["training"] and "lr" not in rope  # the runner adds the tuned lr; the grid is no identity
    yarn = next(v for v in rope["variants"] if v["name"] == "rope+yarn")
    assert yarn["options"] == ext.resolve_options(ext.VARIANTS["rope+yarn"], full)
    assert [s["factor"] for s in yarn["sweep"]] == [2.0, 4.0, 8.0, 16.0]
    trained = runs["train__rope__trained__s0"]
    assert [v["name"] for v in trained["variants"]] == ["rope"]  # trained_variants; sweeps on text-only models
    assert list(runs)[:2] == ["train__rope__zero_shot__s0", "train__rope__trained__s0"]  # longest runs first
    # a spec changes with everything that changes its numbers
    steps = ext.run_spec({**full, "training": {**full["training"], "steps": 1}}, "rope", "zero_shot", 0)
    factor = ext.run_spec({**full, "scalings": {**full["scalings"], "factor": 2}}, "rope", "zero_shot", 0)
    assert steps != rope and factor != rope and ext.run_spec(full, "rope", "zero_shot", 0) == rope
    memory_only = BENCH.runs(load_config(BENCH, "quick", overrides=["memory_only=true"])[0])
    assert [s["run"] for s in memory_only] == ["memory__bam_L4096"]


def test_trained_mode_evaluates_only_the_trained_variants(loaded):
    """The trained mode carries passkey claims only: a preset may restrict it to the variants they compare."""
    full = loaded["full"]
    assert ext.mode_variants(full, "zero_shot") == full["variants"]
    trained = ext.mode_variants(full, "trained")
    assert trained == [v for v in full["variants"] if v in full["trained_variants"]] and len(trained) < len(
        full["variants"])
    lengths = full["evaluation"]["passkey_lengths"]
    rows = [_variant_row(v, s, [10.0] * 5, exact=[0.5 + 0.01 * s] * len(lengths), mode=m, lengths=lengths)
            for m in full["passkey_modes"] for v in ext.mode_variants(full, m) for s in range(3)]
    passkey_trained = [c for c in ext.claims(rows, full) if c["mode"] == "trained"]
    assert passkey_trained and all("not measured" not in c["reason"] for c in passkey_trained)
    quick = loaded["quick"]
    assert quick["trained_variants"] is None and ext.mode_variants(quick, "trained") == quick["variants"]


# ------------------------------------------------------------------------------------------ protocol
def test_dynamic_ntk_follows_the_evaluated_length_as_hf_does(loaded):
    """At every evaluated length the swapped-in encoder uses HF's dynamic base for that length."""
    rope_utils = pytest.importorskip("transformers.modeling_rope_utils")

    preset = loaded["full"]
    context, head_dim = preset["training"]["context"], preset["model"]["dim"] // preset["model"]["num_heads"]
    options = ext.resolve_options(ext.VARIANTS["rope+dynamic"], preset)
    assert options == {"scaling": "dynamic", "factor": 1.0, "original_max_position": context}
    for factor in (options["factor"], 2.0):  # the preset's, and another: HF's rule 1 + f (l / L0 - 1)
        encoder = pet.get_encoder("rope", preset["model"]["dim"], preset["model"]["num_heads"], causal=True,
                                  **{**options, "factor": factor})
        # what _compute_dynamic_ntk_parameters reads from a model config (a LlamaConfig costs seconds to import)
        config = SimpleNamespace(hidden_size=preset["model"]["dim"], num_attention_heads=preset["model"]["num_heads"],
                                 max_position_embeddings=context, standardize_rope_params=lambda: None,
                                 rope_parameters={"rope_type": "dynamic", "rope_theta": 10_000.0, "factor": factor})
        for length in preset["evaluation"]["ppl_lengths"] + preset["evaluation"]["passkey_lengths"]:
            scale = factor * max(length, context) / context - (factor - 1)
            if factor == 1.0:
                assert scale == pytest.approx(max(1.0, length / context))  # the scale is the length multiple
            hf_freq, _ = rope_utils._compute_dynamic_ntk_parameters(config, "cpu", seq_len=length)
            ours = encoder.traced_inverse_frequencies(length)  # what rotate uses at current length `length`
            torch.testing.assert_close(ours.float(), hf_freq.float(), rtol=1e-6, atol=0)
            expected_base = 10_000.0 * scale ** (head_dim / (head_dim - 2))
            torch.testing.assert_close(ours, rope_inverse_frequencies(head_dim, expected_base).to(ours.dtype))
    # factor 2: scale 7 at 4x (never the old constant factor 64 l / L0 - 63), 1 below the context
    torch.testing.assert_close(encoder.traced_inverse_frequencies(4 * context), rope_inverse_frequencies(
        head_dim, 10_000.0 * 7.0 ** (head_dim / (head_dim - 2))).to(ours.dtype))
    torch.testing.assert_close(encoder.traced_inverse_frequencies(context // 2),
                               rope_inverse_frequencies(head_dim).to(ours.dtype))


def test_zero_shot_training_data_has_no_passkey_rows(loaded):
    training = {**loaded["quick"]["training"], "passkey_fraction": 0.5, "max_bytes": 200_000}
    zero = ext.training_data(training, "zero_shot", 0, 128, 8, 3)
    trained = ext.training_data(training, "trained", 0, 128, 8, 3)
    assert zero.passkey_rows == 0 and trained.passkey_rows == 4

    def rows_with_a_needle(data):
        count = 0
        for batch in data.train_dataloader():
            for ids, targets in zip(batch["input_ids"], batch["targets"]):
                if b"The pass key is" in bytes(ids.tolist()):
                    count += 1
                    assert (targets == -100).any()  # a passkey row is scored on its answer only
                else:
                    assert (targets != -100).all()
        return count

    assert rows_with_a_needle(zero) == 0
    assert rows_with_a_needle(trained) == 3 * 4
    # one document split for every seed (the same held-out text), other training windows
    other = ext.training_data(training, "zero_shot", 1, 128, 8, 3)
    torch.testing.assert_close(other.val_bytes, zero.val_bytes)
    first = next(iter(zero.train_dataloader()))["input_ids"]
    assert not torch.equal(next(iter(other.train_dataloader()))["input_ids"], first)
    with pytest.raises(ValueError, match="mode"):
        ext.training_data(training, "zero-shot", 0, 128, 8, 3)


# ------------------------------------------------------------------------------------------ variants
def test_longrope_variant_takes_its_factors_from_ntk_by_parts():
    from pe_toolkit.encoders.rotary import longrope_factors_from_yarn

    preset = {"training": {"context": 16}, "model": TINY_MODEL, "scalings": {"factor": 4}}
    options = ext.resolve_options(ext.VARIANTS["rope+longrope"], preset)
    assert options == {"scaling": "longrope", "factor": 4.0, "original_max_position": 16,
                       **longrope_factors_from_yarn(8, 10_000.0, 4.0, 16)}
    model = pet.Transformer(pet.TransformerConfig(vocab_size=64, **TINY_MODEL, encoding="rope")).eval()
    model.replace_encoding("rope", options)
    assert model.encoding_for_layer(1).scaling == "longrope"
    assert torch.isfinite(model(torch.randint(0, 64, (1, 40)))).all()


def _spec(name, steps=2, mode="zero_shot"):
    """The run spec of ``name``'s base merged with ``name``'s entry: what ``evaluate_variant`` receives."""
    preset = {
        "model": TINY_MODEL, "variants": [name], "trained_variants": None,
        "training": {
            "context": 112, "steps": steps, "batch_size": 4, "lrs": [3e-3], "warmup_steps": 1, "weight_decay": 0.1,
            "passkey_fraction": 0.25, "passkey_template": "compact", "split_seed": 0, "max_bytes": 300_000,
            "loss_average": "rows",
        },
        "scalings": {"factor": 2, "sweep_factors": [2, 4], "dynamic_factor": 1.0},
        "finetune": {"multiple": 2, "steps": 3, "batch_size": 2, "lr": 1e-3, "positional_lr": 0.05},
        "evaluation": {
            "ppl_lengths": [112, 224], "ppl_tokens": 448, "passkey_lengths": [112, 224],
            "passkey_depths": [0.0, 1.0], "passkey_samples": 2, "passkey_batch_tokens": 512, "greedy_samples": 1,
            "block_size": 64, "entropy_multiples": [1, 2],
        },
    }
    spec = ext.run_spec(preset, ext.VARIANTS[name].base, mode, 0)
    return {**spec, **spec["variants"][0], "lr": 3e-3, "device": CPU}


def test_headscale_finetune_trains_the_scales_only_and_evaluates():
    spec = _spec("nope+headscale")
    state = ext._module(spec).state_dict()  # untrained weights stand in for a trained base (trained in the run below)
    module, finetune = ext.build_variant(spec, {k: v.clone() for k, v in state.items()})
    assert finetune["kind"] == "positional" and finetune["context"] == 224 and finetune["steps"] == 3
    after = module.state_dict()
    for key, value in state.items():  # the trunk is frozen during a positional-only fine-tune
        torch.testing.assert_close(after[key], value)
    scales = torch.cat([module.model.encoding_for_layer(i).head_scale.detach() for i in range(2)])
    assert scales.shape == (4,) and bool((scales >= 1.0).all()) and not torch.equal(scales, torch.full((4,), 1.6))


def test_evaluate_variant_measures_every_length_and_the_sweep():
    spec = _spec("rope+yarn")
    row = ext.evaluate_variant(spec, ext._module(spec).state_dict())
    assert row["kind"] == "variant" and row["mode"] == "zero_shot" and row["options"]["factor"] == 2.0
    assert [(p["length"], p["tokens"]) for p in row["ppl"]] == [(112, 448), (224, 448)]
    assert all(math.isfinite(p["ppl"]) and p["ppl"] > 1 for p in row["ppl"])
    assert [s["factor"] for s in row["sweep"]] == [2.0, 4.0]
    assert row["sweep"][0]["ppl"] == row["ppl"]  # the preset's factor is not evaluated twice
    assert row["sweep"][1]["ppl"][1]["ppl"] != row["ppl"][1]["ppl"]
    assert {(p["length"], p["depth"], p["samples"]) for p in row["passkey"]} == {
        (112, 0.0, 2), (112, 1.0, 2), (224, 0.0, 2), (224, 1.0, 2)}
    check = row["greedy_check"]
    assert check["greedy_exact_match"] == check["teacher_forced_exact_match"]
    assert [e["length"] for e in row["entropy"]] == [112, 224]


# ------------------------------------------------------------------------------------ claims, tables
LENGTHS = [64, 128, 256, 512]


def _variant_row(name, seed, ppl, exact=(0.0, 0.0), mode="zero_shot", lengths=(64, 512)):
    return {
        "variant": name, "mode": mode, "seed": seed, "description": name, "finetune": None,
        "ppl": [{"length": n, "ppl": v} for n, v in zip(LENGTHS, ppl)], "sweep": [],
        "passkey": [{"length": n, "depth": 0.5, "samples": 50, "digit_accuracy": e, "exact_match": e}
                    for n, e in zip(lengths, exact)],
        "passkey_by_length": [{"length": n, "examples": 50, "digit_accuracy": e, "exact_match": e}
                              for n, e in zip(lengths, exact)],
        "greedy_check": {"greedy_exact_match": 0.0, "teacher_forced_exact_match": 0.0},
        "entropy": [{"multiple": 1, "mean_bits": 2.0}],
    }


def _config(modes=("zero_shot",)):
    return {"training": {"context": 64}, "scalings": {"factor": 4}, "finetune": {"multiple": 2},
            "passkey_modes": list(modes), "evaluation": {"ppl_lengths": LENGTHS, "passkey_lengths": [64, 512]}}


def _ppl_rows():
    rows = []
    for seed, jitter in enumerate((0.0, 2.0, -2.0)):  # seeds differ a lot; variants of one model move together
        rows.append(_variant_row("rope", seed, [10 + jitter, 14 + jitter, 20 + jitter, 30 + jitter]))
        rows.append(_variant_row("rope+yarn", seed, [10 + jitter, 12 + jitter, 19 + jitter, 25 + jitter]))
        rows.append(_variant_row("rope+ntk", seed, [11, 13, 12 + jitter / 20, 26]))
        rows.append(_variant_row("alibi", seed, [10.5 + jitter / 20, 10.4, 10.6, [10.52, 10.58, 10.4][seed]]))
        # the FIRE: 2.75 [2.70, 2.81] at the context, 2.98 [2.72, 3.24] at 8x
        rows.append(_variant_row("fire", seed, [[2.73, 2.75, 2.77][seed], 2.8, 2.9, [2.87, 2.98, 3.09][seed]]))
    return rows


def _by_name(claims):
    return {c["name"]: c for c in claims}


def test_claims_are_decided_from_the_difference_paired_for_one_model():
    rows = _ppl_rows()
    summary = ext.summarize(rows)
    assert [(s["variant"], s["runs"]) for s in summary][0] == ("rope", 3)
    rope = next(s for s in summary if s["variant"] == "rope")
    assert rope["ppl@512"]["mean"] == pytest.approx(30.0) and rope["ppl@64"]["n"] == 3
    assert rope["ppl@512"]["values"] == [30.0, 32.0, 28.0]  # in seed order
    assert rope["exact@64"]["method"] == "t within [0, 1]" and rope["ppl@64"]["method"] == "t"
    found = _by_name(ext.claims(rows, _config()))
    assert all(c["kind"] == "claim" and c["verdict"] in ("reproduced", "contradicted", "inconclusive", "untested")
               for c in found.values())
    rises = found["RoPE's perplexity rises past the training context"]
    assert rises["verdict"] == "reproduced" and rises["paired"] and rises["test"].startswith("paired t")
    assert rises["a"]["values"] == pytest.approx([math.log(10), math.log(12), math.log(8)])
    # one model's variants move together over seeds: YaRN's gain is detected paired, though seeds spread widely
    yarn = found["rope+yarn at inference beats plain RoPE at 4x the context"]
    assert yarn["verdict"] == "reproduced" and yarn["paired"]
    from pe_toolkit.bench.verdict import decide_claim

    unpaired = decide_claim(yarn["a"]["values"], yarn["b"]["values"], higher_is_better=False)
    assert unpaired.verdict == "inconclusive"
    # ntk is far better than YaRN at 256 here: the opposite effect is detected
    assert found["YaRN beats ntk at the same factor without fine-tuning"]["verdict"] == "contradicted"
    assert found["ALiBi extrapolates better than RoPE"]["verdict"] == "reproduced"
    assert not found["ALiBi extrapolates better than RoPE"]["paired"]  # two trainings: Welch
    no_rise = "perplexity does not rise past the training context (8x; non-inferiority, margin +5 % perplexity)"
    alibi = found[f"alibi's {no_rise}"]
    assert alibi["verdict"] == "reproduced" and alibi["claim_kind"] == "noninferiority"
    assert alibi["margin"] == pytest.approx(math.log(1.05))
    # FIRE's +8 % with overlapping intervals is not a reproduced "does not rise" (issue 39)
    fire = found[f"fire's {no_rise}"]
    assert fire["verdict"] == "inconclusive" and fire["difference"]["tost_low"] < -math.log(1.05)
    llama = found["rope+llama3 at inference beats plain RoPE at 4x the context"]
    assert llama["verdict"] == "untested" and "not measured" in llama["reason"]
    # Wang et al.: read at 8x (512); the preset has no 16x
    wang = [c for c in found.values() if c["name"].startswith("NoPE extends")]
    assert [c["name"] for c in wang] == ["NoPE extends past its training context further than RoPE (read at 8x)"]
    diverged = [{**r, "ppl": [*r["ppl"][:3], {"length": 512, "ppl": math.nan}]}
                if r["variant"] == "rope" and r["seed"] == 1 else r for r in rows]
    rises = _by_name(ext.claims(diverged, _config()))["RoPE's perplexity rises past the training context"]
    assert rises["verdict"] == "untested" and "non-finite runs" in rises["reason"]  # counted, never dropped
    assert rises["b"]["n"] == 2 and rises["b"]["n_nonfinite"] == 1
    one_seed = _by_name(ext.claims([r for r in rows if r["seed"] == 0], _config()))
    assert one_seed["RoPE's perplexity rises past the training context"]["verdict"] == "untested"
    assert "fewer than 2 seeds" in one_seed["RoPE's perplexity rises past the training context"]["reason"]


def test_wang_is_read_at_8x_and_16x_where_measured():
    config = {**_config(), "evaluation": {"ppl_lengths": [64, 128, 512, 1024], "passkey_lengths": [64]}}
    rows = [{**_variant_row(v, s, [1.0] * 4), "ppl": [{"length": n, "ppl": p + s / 10} for n, p in
                                                      zip([64, 128, 512, 1024], ([3.0, 3, 3, 3] if v == "nope"
                                                                                 else [2.0, 2, 9, 20]))]}
            for v in ("nope", "rope") for s in range(3)]
    wang = [c for c in ext.claims(rows, config) if c["name"].startswith("NoPE extends")]
    assert [c["name"].split("RoPE ")[1] for c in wang] == ["(read at 8x)", "(read at 16x)"]
    assert [c["verdict"] for c in wang] == ["reproduced", "reproduced"]


def test_passkey_claims_per_mode_and_not_learned_flag():
    rows = []
    for seed, j in enumerate((0.0, 0.02, -0.02)):
        for mode in ("zero_shot", "trained"):
            good = (0.9 + j, 0.6 + j) if mode == "trained" else (0.05 + j / 4, 0.05 + j / 4)
            rows.append(_variant_row("bam_ssmax", seed, [10, 10, 10, 10], exact=good, mode=mode))
            rows.append(_variant_row("alibi", seed, [10, 10, 10, 10], exact=(0.9 + j, 0.1 + j), mode=mode))
    found = [c for c in ext.claims(rows, _config(("zero_shot", "trained")))
             if c["name"].startswith("BAM-SSMax retrieves the passkey past the training context better than alibi")]
    assert {c["mode"]: c["verdict"] for c in found} == {"zero_shot": "contradicted", "trained": "reproduced"}
    assert all(c["a"]["method"] == "t within [0, 1]" for c in found)  # exact match is bounded
    assert ext.passkey_learned(ext.summarize(rows), 64) == {"zero_shot": ["bam_ssmax"]}


def test_passkey_claims_are_untested_when_nothing_is_retrieved_at_the_context():
    """0 of every prompt at 1x on both sides: equal zeros at 8x say nothing about extrapolation."""
    rows = []
    for seed in range(3):
        rows.append(_variant_row("bam_ssmax", seed, [10, 10, 10, 10], exact=(0.0, 0.0), mode="trained"))
        rows.append(_variant_row("alibi", seed, [10, 10, 10, 10], exact=(0.0, 0.0), mode="trained"))
    found = [c for c in ext.claims(rows, _config(("trained",))) if c["name"].endswith("better than alibi")]
    assert [c["verdict"] for c in found] == ["untested"]
    assert "bam_ssmax, alibi: no passkey retrieved at the training context" in found[0]["reason"]


# ------------------------------------------------------------------------------------------ end to end
TINY_RUN = ["--quick", "--set", "variants=[rope+yarn]", "--set", "training.steps=3", "--set",
            "training.warmup_steps=1", "--jobs", "1", "--set", "memory.length=1024", "--set", "seeds=[0]",
            "--set", "passkey_modes=[zero_shot]", "--set", "evaluation.passkey_samples=1",
            "--set", "evaluation.ppl_lengths=[128,256]", "--set", "evaluation.passkey_lengths=[128,256]",
            "--set", "scalings.sweep_factors=[2]", "--set", "training.max_bytes=300000", "--accelerator", "cpu",
            "--set", "training.lrs=[0.001,0.03]"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    from pe_toolkit.bench.cli import main

    out = tmp_path_factory.mktemp("extrapolation_out")
    assert main([*TINY_RUN, "--out", str(out)], name="extrapolation") == 0
    return out


def test_tiny_end_to_end_run_writes_results_report_and_plots(quick_run):
    folder = quick_run / "extrapolation"
    document = json.loads((folder / "results.json").read_text())
    assert set(document) == {"benchmark", "config", "rows", "environment", "seconds"}
    config = document["config"]
    assert config["variants"] == ["rope+yarn"] and config["seeds"] == [0] and config["device"]["accelerator"] == "cpu"
    kinds = [r["kind"] for r in document["rows"]]
    assert kinds[:5] == ["memory", "training", "tuning_trial", "tuning_trial", "summary"]
    assert set(kinds[5:]) == {"claim"}
    memory, training = document["rows"][:2]
    assert training["base"] == "rope" and training["mode"] == "zero_shot"
    (variant,) = training["variants"]
    assert variant["options"] == {"scaling": "yarn", "factor": 4.0, "original_max_position": 128}
    assert [(p["length"], p["tokens"]) for p in variant["ppl"]] == [(128, 4096), (256, 4096)]
    assert [s["factor"] for s in variant["sweep"]] == [2.0]
    assert memory["status"] == "ok" and memory["peak_mib"] > 0 and memory["length"] == 1024
    claims = [r for r in document["rows"] if r["kind"] == "claim"]
    assert {c["verdict"] for c in claims} == {"untested"}  # one seed: no interval
    assert all({"a", "b", "test", "verdict", "difference"} <= set(c) for c in claims)
    report = (folder / "report.md").read_text()
    assert "Against the papers' claims" in report and "**untested**" in report and "## Memory" in report
    for png in ("ppl_vs_length.png", "passkey_heatmap.png"):
        assert (folder / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = sorted(p.name for p in (folder / "runs" / "quick").iterdir())
    assert runs == ["run=memory__bam_L1024.json", "run=train__rope__zero_shot__s0__lr=0.001.json",
                    "run=train__rope__zero_shot__s0__lr=0.03.json"]


def test_the_base_learning_rate_is_tuned_by_validation_loss(quick_run, loaded):
    """Issue 39: each base's learning rate is chosen from a grid on the first seed by validation loss."""
    document = json.loads((quick_run / "extrapolation" / "results.json").read_text())
    trials = [r for r in document["rows"] if r["kind"] == "tuning_trial"]
    assert sorted(t["lr"] for t in trials) == [0.001, 0.03] and {t["base"] for t in trials} == {"rope"}
    best = min(trials, key=lambda t: t["val_loss"])
    training = next(r for r in document["rows"] if r["kind"] == "training")
    assert document["config"]["chosen"] == {"rope": best["lr"]} and training["lr"] == best["lr"]
    assert training["val_loss"] == best["val_loss"] and trials[0]["val_loss"] != trials[1]["val_loss"]
    assert "## Tuning" in (quick_run / "extrapolation" / "report.md").read_text()
    for name in ("full", "gpu"):  # the same grid for every base, extended up to twice past an edge choice
        tuning = BENCH.tuning(load_config(BENCH, name)[0])
        assert (tuning.param, tuning.group, tuning.metric, tuning.maximize) == ("lr", "base", "val_loss", False)
        assert list(tuning.values) == [1e-3, 3e-3, 1e-2] and tuning.max_extensions == 2
    assert loaded["quick"]["training"]["lrs"] == [3e-3] and loaded["quick"]["training"]["max_extensions"] == 0


def test_validation_loss_is_scored_after_the_perplexity_bytes(monkeypatch):
    """Tuning never sees the bytes the perplexity claims are scored on: it scores the next ppl_tokens bytes."""
    from pe_toolkit.data import equal_token_windows

    seen = []
    monkeypatch.setattr(ext, "_fit", lambda module, data, steps, device: seen.append(data.val_bytes) or 1.0)
    spec = _spec("rope")
    row, state = ext.train_base(spec)
    tokens, context = spec["evaluation"]["ppl_tokens"], spec["training"]["context"]
    windows = equal_token_windows(seen[0][tokens + 1:], [context], tokens)[context]
    module = ext._module(spec)
    module.load_state_dict(state)
    assert row["lr"] == 3e-3 and row["val_loss"] == pytest.approx(math.log(module.perplexity(windows)))
    assert row["val_loss"] != pytest.approx(math.log(module.perplexity(
        equal_token_windows(seen[0], [context], tokens)[context])))


def test_resume_reuses_the_trained_and_evaluated_model(quick_run, monkeypatch):
    from pe_toolkit.bench.cli import main

    def no_training(spec):
        raise AssertionError("trained again")

    monkeypatch.setattr(ext, "train_base", no_training)
    before = json.loads((quick_run / "extrapolation" / "results.json").read_text())["rows"][1]
    assert main([*TINY_RUN, "--out", str(quick_run), "--resume"], name="extrapolation") == 0
    after = json.loads((quick_run / "extrapolation" / "results.json").read_text())["rows"][1]
    assert after == before
    with pytest.raises(AssertionError, match="trained again"):  # another factor: another run
        main([*TINY_RUN, "--out", str(quick_run), "--resume", "--set", "scalings.factor=2"], name="extrapolation")
