"""benchmarks/attention_stability.py: presets, the interval statistics and claims, a tiny run and --resume."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pe_toolkit.bench import Result
from pe_toolkit.bench.config import load_config
from pe_toolkit.benchmarks import attention_stability as bench


def run_cli(argv):
    """``python benchmarks/attention_stability.py ARGV`` in this process (the harness's command line)."""
    from pe_toolkit.bench.cli import main

    return main(argv, name="attention_stability", prog="python benchmarks/attention_stability.py")

TINY = """
model: {dim: 16, num_heads: 2, num_layers: 1}
mla: {latent_dim: 8, rope_head_dim: 4, nope_head_dim: 4, query_latent_dim: 8}
context: 16
batch_size: 2
steps: 3
lrs: [0.001, 1.0]
seeds: [0]
max_bytes: 20000
val_windows: 2
monitor_every: 1
qk_clip: {tau: 0.5, measure: forward}
"""


def test_every_preset_loads_and_the_full_one_meets_the_protocol():
    benchmark = bench.AttentionStability()
    assert benchmark.preset_names() == ["full", "gpu", "quick"]
    for name in ("quick", "full", "gpu"):
        config, _ = load_config(benchmark, name)
        assert set(config.configs) == set(bench.CONFIGS)
        assert config.mla.query_latent_dim > 0  # q_down exists, so the rule's coverage of it is exercised
    for name in ("full", "gpu"):
        config, _ = load_config(benchmark, name)
        assert len(config.seeds) >= 3 and config.steps >= 1000 and len(config.lrs) >= 5
    with pytest.raises(ValueError, match="seeds must be a non-empty list of distinct values"):
        load_config(benchmark, "quick", overrides=["seeds=[1, 1]"])
    with pytest.raises(ValueError, match="lrs must be a non-empty list of distinct finite numbers > 0"):
        load_config(benchmark, "quick", overrides=["lrs=[0.1, -1.0]"])
    with pytest.raises(ValueError, match=r"(?s)config.qk_clip.tau.*PositiveFloat: 0"):
        load_config(benchmark, "quick", overrides=["qk_clip.tau=0"])
    with pytest.raises(ValueError, match=r"(?s)config.configs.*Literal.*Got value: gqa"):
        load_config(benchmark, "quick", overrides=["configs=[mha, gqa]"])
    with pytest.raises(ValueError, match="configs must be a non-empty list of distinct values"):
        load_config(benchmark, "quick", overrides=["configs=[mha, mha]"])
    with pytest.raises(ValueError, match="'qk_lr.evry' does not exist"):
        load_config(benchmark, "quick", overrides=["qk_lr.evry=2"])


def test_runs_cover_every_config_lr_and_seed_plus_the_edge_extensions():
    benchmark = bench.AttentionStability()
    config, _ = load_config(benchmark, "quick", overrides=["configs=[mha, mla]", "seeds=[0, 1]", "lrs=[0.03, 0.003]"])
    specs = benchmark.runs(config)
    assert [(s["config"], s["lr"], s["seed"]) for s in specs] == [
        (c, lr, s) for c in ("mha", "mla") for lr in (0.003, 0.03) for s in (0, 1)]
    assert specs[0]["model"] == dataclasses.asdict(config.model) and specs[0]["qk_clip"]["tau"] == 10.0
    benchmark.extended = {"mla": [0.3]}
    assert [s["lr"] for s in benchmark.runs(config) if s["config"] == "mla"] == [0.003, 0.003, 0.03, 0.03, 0.3, 0.3]


def runs(config, lr, losses):
    """The run rows of one (configuration, lr): seed ``i`` has loss ``losses[i]``."""
    return [{"config": config, "lr": lr, "seed": seed, "val_loss": loss} for seed, loss in enumerate(losses)]


def analyzed(rows):
    return bench.claims(rows, bench.summarize_configs(bench.summarize_lrs(rows, unigram=10.0)))


def test_summaries_cap_diverged_runs_flag_grid_edges_and_find_the_stable_lr():
    rows = runs("mha", 0.01, [2.0, 2.1, 2.05]) + runs("mha", 0.1, [1.9, 1.95, 1.92]) + runs(
        "mha", 1.0, [float("nan"), 9.0, 2.5])
    lr_rows = bench.summarize_lrs(rows, unigram=3.0)
    top = lr_rows[-1]
    assert top["kind"] == "summary" and top["runs"] == 3
    assert top["diverged"]["values"] == [1.0, 1.0, 0.0] and top["val_loss"]["n"] == 3  # nan and 9: ln 256, kept
    assert top["val_loss"]["values"] == [math.log(256), math.log(256), 2.5]
    assert top["val_loss"]["mean"] == pytest.approx((2 * math.log(256) + 2.5) / 3)
    (summary,) = bench.summarize_configs(lr_rows)
    assert summary["best_lr"] == 0.1 and summary["best_lr_at_grid_edge"] is None
    assert summary["highest_stable_lr"] == 0.1
    edge_rows = runs("mla", 0.01, [1.0, 1.1, 1.05]) + runs("mla", 0.1, [2.0, 2.1, 2.2]) + runs("mla", 1.0, [3.0] * 3)
    edge = bench.summarize_configs(bench.summarize_lrs(edge_rows, unigram=10.0))
    assert edge[0]["best_lr_at_grid_edge"] == "low"
    benchmark = bench.AttentionStability()
    config, _ = load_config(benchmark, "quick", overrides=["extend_edges=1"])
    result = Result(config=config, preset="quick", rows=edge_rows, derived=edge)
    assert benchmark.extend(config, result) and benchmark.extended == {"mla": [pytest.approx(0.001)]}
    assert not benchmark.extend(config, result)  # extend_edges passes at most


def test_claims_are_paired_per_seed_and_competitive_is_non_inferiority():
    tight = lambda m: [m - 0.01, m, m + 0.02]  # noqa: E731  (the same seed effect in every configuration)
    rows = []
    for lr, base, rule in ((0.01, 2.0, 2.0), (0.1, 1.8, 1.8), (1.0, 3.0, 2.0)):
        rows += runs("mha", lr, tight(base)) + runs("mha+qk_lr", lr, tight(rule))
    rows += [r for lr in (0.01, 0.1, 1.0) for r in runs("mha+qknorm", lr, tight(1.5))]
    found = analyzed(rows)
    summaries = {c["claim"]: c for c in found if c["kind"] == "claim_summary"}
    by_name = {c["name"]: c for c in found if c["kind"] == "claim"}
    higher = "mha+qk_lr allows a higher base lr than mha"
    assert summaries[higher]["verdict"] == "reproduced"  # lower loss at lr 1, the only lr above mha's best
    assert summaries[higher]["parts"] == ["mha+qk_lr beats mha at lr 1 (above mha's best lr 0.1)"]
    at_one = by_name["mha+qk_lr beats mha at lr 1 (above mha's best lr 0.1)"]
    assert at_one["verdict"] == "reproduced" and at_one["paired"] and at_one["claim"] == higher
    assert at_one["difference"]["mean"] == pytest.approx(1.0) and at_one["a"]["n"] == 3
    competitive = next(c for c in found if c.get("claim") == "mha+qk_lr is competitive with mha+qknorm")
    assert competitive["claim_kind"] == "noninferiority" and competitive["margin"] == bench.COMPETITIVE_MARGIN
    assert competitive["verdict"] == "contradicted"  # 1.8 vs 1.5: worse by 0.3, far past the margin
    assert summaries["mla+qk_lr allows a higher base lr than mla"]["verdict"] == "untested"  # not run
    assert summaries["mla+qk_lr allows a higher base lr than mla"]["reason"].startswith("configurations not run")
    # within the margin on every seed: competitive is reproduced
    close = runs("mha+qk_lr", 0.1, tight(1.51)) + runs("mha+qknorm", 0.1, tight(1.5))
    assert next(c for c in analyzed(close) if c["kind"] == "claim")["verdict"] == "reproduced"
    # a spread that does not cancel by seed: inconclusive, never "not reproduced"
    wide = [r for c in ("mha", "mha+qk_lr") for lr in (0.01, 0.1, 1.0)
            for r in runs(c, lr, [1.0, 3.0, 2.0] if c == "mha" else [3.0, 1.0, 2.0])]
    by = {c["claim"]: c for c in analyzed(wide) if c["kind"] == "claim_summary"}
    assert by[higher]["verdict"] == "inconclusive"
    # the lrs disagree (reproduced at one, contradicted at another): inconclusive
    mixed = [r for lr, base, rule in ((0.01, 1.0, 1.0), (0.1, 2.0, 1.0), (1.0, 2.0, 3.0))
             for r in runs("mha", lr, tight(base)) + runs("mha+qk_lr", lr, tight(rule))]
    by = {c["claim"]: c for c in analyzed(mixed) if c["kind"] == "claim_summary"}
    assert by[higher]["verdict"] == "inconclusive" and "reproduced" in by[higher]["evidence"]
    # one seed: untested
    single = [r for c in ("mha", "mha+qk_lr") for lr in (0.01, 0.1) for r in runs(c, lr, [2.0])]
    by = {c["claim"]: c for c in analyzed(single) if c["kind"] == "claim_summary"}
    assert by[higher]["verdict"] == "untested"
    assert {c["verdict"] for c in analyzed(single)} == {"untested"}


def test_tiny_run_then_resume(tmp_path, monkeypatch):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    argv = ["--quick", "--config", str(config), "--out", str(tmp_path), "--set", "configs=[mla+qk_clip]",
            "--accelerator", "cpu"]
    assert run_cli(argv) == 0
    out = tmp_path / "attention_stability"
    document = json.loads((out / "results.json").read_text())
    rows = [r for r in document["rows"] if "kind" not in r]
    assert [(r["config"], r["lr"], r["seed"]) for r in rows] == [("mla+qk_clip", 1e-3, 0), ("mla+qk_clip", 1.0, 0)]
    assert all(r["qk_clip_heads"] >= 0 and len(r["train_losses"]) == 3 for r in rows)
    claims = [r for r in document["rows"] if r.get("kind") == "claim"]
    assert {c["verdict"] for c in claims} == {"untested"}  # one seed
    assert len(list((out / "runs" / "quick").glob("*.json"))) == 2
    assert (out / "loss_vs_lr.png").stat().st_size > 0 and "Paper claims" in (out / "report.md").read_text()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench.AttentionStability, "run_one", staticmethod(no_training))
    run_cli([*argv, "--resume"])
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if "kind" not in r]
    assert json.dumps(again) == json.dumps(rows)  # as text: a diverged run's loss is inf or nan
    with pytest.raises(AssertionError, match="trained again"):
        run_cli([*argv, "--resume", "--set", "steps=4"])
