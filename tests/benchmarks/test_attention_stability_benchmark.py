"""benchmarks/attention_stability.py: presets, the interval statistics and claims, a tiny run and --resume."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pe_toolkit.bench.config import load_config
from pe_toolkit.bench.verdict import summarize
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


def lr_row(config, lr, losses, diverged=0):
    return {"kind": "lr_summary", "config": config, "lr": lr, "runs": len(losses), "diverged": diverged,
            "val_loss": summarize(losses).as_dict(), "seed_list": list(range(len(losses)))}


def test_summaries_cap_diverged_runs_flag_grid_edges_and_find_the_stable_lr():
    rows = [{"config": "mha", "lr": lr, "seed": s, "val_loss": v}
            for lr, values in ((0.01, [2.0, 2.1, 2.05]), (0.1, [1.9, 1.95, 1.92]), (1.0, [float("nan"), 9.0, 2.5]))
            for s, v in enumerate(values)]
    lr_rows = bench.summarize_lrs(rows, unigram=3.0)
    top = lr_rows[-1]
    assert top["diverged"] == 2 and top["val_loss"]["n"] == 3  # nan and 9 count as ln 256, never dropped
    assert top["val_loss"]["values"] == [math.log(256), math.log(256), 2.5] and top["seed_list"] == [0, 1, 2]
    assert top["val_loss"]["mean"] == pytest.approx((2 * math.log(256) + 2.5) / 3)
    (summary,) = bench.summarize_configs(lr_rows)
    assert summary["best_lr"] == 0.1 and summary["best_lr_at_grid_edge"] is None
    assert summary["highest_stable_lr"] == 0.1
    edge = bench.summarize_configs([lr_row("mla", 0.01, [1.0, 1.1, 1.05]), lr_row("mla", 0.1, [2.0, 2.1, 2.2]),
                                    lr_row("mla", 1.0, [3.0, 3.1, 3.2])])
    assert edge[0]["best_lr_at_grid_edge"] == "lowest"
    assert bench.edge_extensions(edge) == {"mla": pytest.approx(0.001)}


def test_claims_are_paired_per_seed_and_competitive_is_non_inferiority():
    tight = lambda m: [m - 0.01, m, m + 0.02]  # noqa: E731  (the same seed effect in every configuration)
    lr_rows = []
    for lr, base, rule in ((0.01, 2.0, 2.0), (0.1, 1.8, 1.8), (1.0, 3.0, 2.0)):
        lr_rows += [lr_row("mha", lr, tight(base)), lr_row("mha+qk_lr", lr, tight(rule))]
    lr_rows += [lr_row("mha+qknorm", lr, tight(1.5)) for lr in (0.01, 0.1, 1.0)]
    found = bench.claims(lr_rows, bench.summarize_configs(lr_rows))
    summaries = {c["claim"]: c for c in found if c["kind"] == "claim_summary"}
    rows = {c["name"]: c for c in found if c["kind"] == "claim"}
    higher = "mha+qk_lr allows a higher base lr than mha"
    assert summaries[higher]["verdict"] == "reproduced"  # lower loss at lr 1, the only lr above mha's best
    assert summaries[higher]["parts"] == ["mha+qk_lr beats mha at lr 1 (above mha's best lr 0.1)"]
    at_one = rows["mha+qk_lr beats mha at lr 1 (above mha's best lr 0.1)"]
    assert at_one["verdict"] == "reproduced" and at_one["paired"] and at_one["claim"] == higher
    assert at_one["difference"]["mean"] == pytest.approx(1.0) and at_one["a"]["n"] == 3
    competitive = next(c for c in found if c.get("claim") == "mha+qk_lr is competitive with mha+qknorm")
    assert competitive["claim_kind"] == "noninferiority" and competitive["margin"] == bench.COMPETITIVE_MARGIN
    assert competitive["verdict"] == "contradicted"  # 1.8 vs 1.5: worse by 0.3, far past the margin
    assert summaries["mla+qk_lr allows a higher base lr than mla"]["verdict"] == "untested"  # not run
    assert summaries["mla+qk_lr allows a higher base lr than mla"]["reason"].startswith("configurations not run")
    # within the margin on every seed: competitive is reproduced
    close = [lr_row(c, lr, tight(m)) for c, m in (("mha+qk_lr", 1.51), ("mha+qknorm", 1.5)) for lr in (0.1,)]
    competitive = next(c for c in bench.claims(close, bench.summarize_configs(close)) if c["kind"] == "claim")
    assert competitive["verdict"] == "reproduced"
    # a spread that does not cancel by seed: inconclusive, never "not reproduced"
    wide = [lr_row(c, lr, [1.0, 3.0, 2.0] if c == "mha" else [3.0, 1.0, 2.0]) for c in ("mha", "mha+qk_lr")
            for lr in (0.01, 0.1, 1.0)]
    by = {c["claim"]: c for c in bench.claims(wide, bench.summarize_configs(wide)) if c["kind"] == "claim_summary"}
    assert by[higher]["verdict"] == "inconclusive"
    # one seed: untested
    single = [lr_row(c, lr, [2.0]) for c in ("mha", "mha+qk_lr") for lr in (0.01, 0.1)]
    by = {c["claim"]: c for c in bench.claims(single, bench.summarize_configs(single)) if c["kind"] == "claim_summary"}
    assert by[higher]["verdict"] == "untested"
    assert {c["verdict"] for c in bench.claims(single, bench.summarize_configs(single))} == {"untested"}


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
