"""The cross-modal benchmark on the harness: presets and their errors, the chance floor, intervals and claims (a
connector comparison untested unless one side aligns beyond its floor), the plots, one tiny end-to-end run with
--resume."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from pe_toolkit.bench import Benchmark, Result, load_config
from pe_toolkit.bench.cli import main
from pe_toolkit.bench.verdict import decide_claim
from pe_toolkit.benchmarks import crossmodal as bench


# ------------------------------------------------------------------------------------------ presets
def test_presets_load_and_pass_the_checks():
    loaded = {name: load_config(bench.CrossModal(), name)[0] for name in ("quick", "full", "gpu")}
    for name, config in loaded.items():
        assert set(config.variants) == set(bench.VARIANTS), name
        assert 1.0 in config.sampling.gammas and bench.PAPER_GAMMA in config.sampling.gammas
    assert len(loaded["full"].seeds) >= 3 and len(loaded["gpu"].seeds) >= 3
    assert loaded["gpu"].training.steps > loaded["full"].training.steps


@pytest.mark.parametrize("override, key", [
    ("seeds=[]", "seeds"),
    ("seeds=[0, 0]", "seeds"),
    ("variants=[cmc_pe, film]", "variants"),
    ("variants=[cmc_pe, cmc_pe]", "variants"),
    ("data.eval_clips=1", "data.eval_clips"),
    ("data.train_clips=0", "data.train_clips"),
    ("model.dim=2.5", "dim"),
    ("training.lrs=[-0.001]", "training.lrs"),
    ("training.lrs=[.nan]", "training.lrs"),
    ("sampling.gammas=[]", "sampling.gammas"),
    ("sampling.gammas=[1.0, 0.0]", "sampling.gammas"),
    ("sampling.sampling_steps=0", "sampling.sampling_steps"),
    ("training.stepz=3", "training.stepz"),
    ("training.max_extensions=-1", "training.max_extensions"),
    ("training.scale=exp", "training.scale"),
])
def test_bad_preset_values_name_their_key(override, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        load_config(bench.CrossModal(), "quick", overrides=[override])


def test_full_and_gpu_presets_tune_the_learning_rate_with_the_self_extending_grid():
    for preset, around in (("full", 0.002), ("gpu", 0.001)):  # issue 39: 3 values around today's, up to 2 added
        tuning = bench.CrossModal().tuning(load_config(bench.CrossModal(), preset)[0])
        assert (tuning.param, tuning.group, tuning.metric, tuning.maximize) == ("lr", "variant", "val_loss", False)
        assert len(tuning.values) == 3 and around in tuning.values and tuning.max_extensions == 2
    config = load_config(bench.CrossModal(), "quick", overrides=["training.max_extensions=1",
                                                                  "training.scale=linear"])[0]
    tuning = bench.CrossModal().tuning(config)
    assert (tuning.max_extensions, tuning.scale) == (1, "linear")


# ------------------------------------------------------------------------------------------ summary and claims
def _summary(rows: list[dict]) -> list[dict]:
    derived = Benchmark.analyze(bench.CrossModal(), Result(config=None, preset="full", rows=rows))
    return [entry for entry in derived if entry["kind"] == "summary"]


def _rows(variant: str, gamma: float, gains: list[float], floors: list[float] | None = None) -> list[dict]:
    floors = floors or [0.2 + 0.01 * s for s in range(len(gains))]
    return [{"variant": variant, "gamma": gamma, "seed": s, "av_align": f + g, "floor": f, "gain": g,
             "audio_events": 2.0, "video_events": 2.5, "silent_clips": 0.0, "val_loss": 0.1}
            for s, (g, f) in enumerate(zip(gains, floors))]


def test_summary_intervals_by_hand():
    (entry,) = _summary(_rows("cmc_pe", 1.5, [0.1, 0.2, 0.3]))
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t_{0.975, 2} * stdev / sqrt(n)
    assert entry["runs"] == 3 and entry["gain"]["mean"] == pytest.approx(0.2)
    assert entry["gain"]["low"] == pytest.approx(0.2 - half) and entry["gain"]["high"] == pytest.approx(0.2 + half)
    assert entry["floor"]["mean"] == pytest.approx(0.21) and entry["av_align"]["high"] <= 1.0  # bounded
    (silent,) = _summary([{**r, "av_align": None} for r in _rows("none", 1.0, [0.0, 0.1])])
    assert (silent["av_align"]["n"], silent["av_align"]["n_nonfinite"]) == (0, 2)  # counted, not dropped


def _claims(rows: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in bench.claims(rows)}


ALIGNS_15 = "cmc_pe (gamma 1.5) aligns beyond its chance floor (a = AV-Align, b = floor)"
VS_CROSS = "CMC-PE aligns better than cross-attention (gain, gamma 1.5)"
VS_ROPE = "CMC-PE aligns better than cross-attention with RoPE (an extra baseline; gain, gamma 1.5)"
GAMMA = "the timestep adjustment (gamma 1.5) improves CMC-PE over gamma 1 (gain)"
CONTROL = ("none (gamma 1): the control does not align (AV-Align within 0.05 of its chance floor; a = floor, "
           "b = AV-Align)")


def test_connector_comparisons_are_untested_when_nothing_beats_its_floor():
    rows = (_rows("none", 1.0, [0.0, 0.01, -0.01]) + _rows("cmc_pe", 1.5, [0.01, -0.02, 0.0])
            + _rows("cross_attention", 1.5, [0.0, 0.02, -0.01]) + _rows("cmc_pe", 1.0, [0.0, 0.01, -0.01]))
    claims = _claims(rows)
    assert claims[CONTROL]["verdict"] == "reproduced"  # the paired gains lie well inside the 0.05 margin
    assert claims[CONTROL]["claim_kind"] == "noninferiority" and claims[CONTROL]["paired"]
    assert claims[ALIGNS_15]["verdict"] == "inconclusive"
    for name in (VS_CROSS, GAMMA):
        assert claims[name]["verdict"] == "untested" and "neither side aligns" in claims[name]["reason"]
    summary = _summary(rows)
    note = bench.why_not_note(summary, list(claims.values()), {"real_audio_events": 2.7, "real_video_events": 2.6})
    assert note.startswith("**No connector aligns beyond its chance floor") and "2.70 and 2.60" in note


def test_connector_comparisons_come_from_the_interval_of_the_gain_difference():
    cmc, cross, cmc_1 = [0.30, 0.32, 0.31], [0.0, 0.01, -0.01], [0.29, 0.33, 0.31]
    rows = _rows("cmc_pe", 1.5, cmc) + _rows("cross_attention", 1.5, cross) + _rows("cmc_pe", 1.0, cmc_1)
    claims = _claims(rows)
    assert claims[ALIGNS_15]["verdict"] == "reproduced" and claims[ALIGNS_15]["paired"]
    expected = decide_claim(cmc, cross, higher_is_better=True, bounds=(-1.0, 1.0))
    assert claims[VS_CROSS]["verdict"] == "reproduced" and not claims[VS_CROSS]["paired"]
    assert claims[VS_CROSS]["difference"] == expected.difference
    gamma = decide_claim(cmc, cmc_1, higher_is_better=True, paired=True, bounds=(-1.0, 1.0))
    assert claims[GAMMA]["paired"] and claims[GAMMA]["difference"] == gamma.difference
    assert claims[GAMMA]["verdict"] == gamma.verdict == "inconclusive"
    assert bench.why_not_note(_summary(rows), list(claims.values()), {}) == ""
    reversed_rows = _rows("cmc_pe", 1.5, cross) + _rows("cross_attention", 1.5, cmc)
    assert _claims(reversed_rows)[VS_CROSS]["verdict"] == "contradicted"
    with_rope = _claims(rows + _rows("cross_attention_rope", 1.5, [0.25, 0.35, 0.30]))
    assert with_rope[VS_ROPE]["verdict"] == "inconclusive" and VS_ROPE not in claims


def test_a_control_that_aligns_is_contradicted_and_one_seed_is_untested():
    claims = _claims(_rows("none", 1.0, [0.3, 0.31, 0.32]) + _rows("cmc_pe", 1.5, [0.3]))
    assert claims[CONTROL]["verdict"] == "contradicted"
    assert claims[ALIGNS_15]["verdict"] == "untested" and "fewer than 2" in claims[ALIGNS_15]["reason"]


def test_plots_draw_intervals_floors_and_samples():
    from pe_toolkit.domains.crossmodal.plotting import decode_picture, encode_picture, plot_clips

    summary = _summary(_rows("cmc_pe", 1.5, [0.1, 0.2, 0.3]) + _rows("none", 1.5, [0.0, 0.01, -0.01]))
    figure = bench.plot_scores(summary, {"real": 0.95, "shuffled": 0.15})
    ax = figure.axes[0]
    (intervals,) = ax.containers  # one gamma: one set of means with error bars, one per variant
    means = [summary[0]["av_align"]["mean"], summary[1]["av_align"]["mean"]]
    assert list(intervals.lines[0].get_ydata()) == pytest.approx(means)
    assert list(ax.collections[-1].get_offsets()[:, 1]) == pytest.approx([0.21, 0.21])  # the floors' ticks
    assert not any(t.get_gid() == "note_if_empty" for t in ax.texts)
    clip = [encode_picture(torch.zeros(4, 3, 5)), encode_picture(torch.zeros(8, 6))]
    samples = plot_clips({"cmc_pe": tuple(map(decode_picture, clip))})
    assert samples.axes[0].images[0].get_array().shape == (3, 4 * 5)  # the frames side by side


# ------------------------------------------------------------------------------------------ end to end
TINY = {"seeds": [0, 1], "variants": ["none", "cmc_pe"], "data": {"train_clips": 32, "eval_clips": 4},
        "model": {"dim": 16, "num_heads": 4, "num_layers": 1, "num_steps": 20},
        "training": {"steps": 2, "batch_size": 8, "lrs": [0.002]}, "sampling": {"sampling_steps": 3}}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossmodal_out")
    (out / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    args = ["crossmodal", "--quick", "--config", str(out / "tiny.yaml"), "--accelerator", "cpu", "--out", str(out)]
    assert main(args) == 0
    document = json.loads((out / "crossmodal" / "results.json").read_text())
    runs = out / "crossmodal" / "runs" / "quick"
    written = {p.name: json.loads(p.read_text())["written"] for p in runs.glob("*.json")}
    assert main([*args, "--resume"]) == 0
    rewritten = {p.name: json.loads(p.read_text())["written"] for p in runs.glob("*.json")}
    return out / "crossmodal", document, written, rewritten


def test_tiny_end_to_end_run_writes_results_report_and_plots(tiny_run):
    out, document, _, _ = tiny_run
    assert document["config"]["device"]["accelerator"] == "cpu" and document["config"]["training"]["steps"] == 2
    runs = [r for r in document["rows"] if r["kind"] == "run"]
    assert [(r["variant"], r["seed"], r["gamma"]) for r in runs] == [
        (v, s, g) for s in (0, 1) for v in ("none", "cmc_pe") for g in (1.0, 1.5)]  # one row per gamma
    for row in runs:
        assert row["gain"] is None or row["gain"] == pytest.approx(row["av_align"] - row["floor"])
        assert ("clip" in row) == (row["seed"] == 1 and row["gamma"] == 1.0)  # the last seed's first sample
        if "clip" in row:
            assert [c["shape"] for c in row["clip"]] == [[32, 16, 16], [64, 16]]
    kinds = {r["kind"] for r in document["rows"]}
    assert {"reference", "summary", "claim", "tuning_trial"} <= kinds
    for claim in (r for r in document["rows"] if r["kind"] == "claim"):
        assert claim["verdict"] in ("reproduced", "contradicted", "inconclusive", "untested")
        assert {"a", "b", "difference", "test"} <= set(claim)
    report = (out / "report.md").read_text()
    for text in ("How the fairness rule is met", "chance floor", "## Claims"):
        assert text in report
    for image in ("av_align.png", "samples.png"):
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((out / "runs" / "quick").glob("*.json"))) == 4


def test_resume_reuses_every_finished_run(tiny_run):
    out, document, written, rewritten = tiny_run
    assert len(written) == 4 and rewritten == written  # no run file written again
    rerun = json.loads((out / "results.json").read_text())
    assert [r for r in rerun["rows"] if r["kind"] == "run"] == [r for r in document["rows"] if r["kind"] == "run"]
