"""The cross-modal benchmark: presets and their errors, the chance floor, intervals and verdicts (a connector
comparison untested unless one side aligns beyond its floor), the plot, one tiny end-to-end run with --resume.

The end-to-end run goes through ``crossmodal.main`` in a fresh interpreter, as a user runs it (see
tests/benchmarks/test_extrapolation.py for why a benchmark's workers are not started from the pytest process).
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import crossmodal as bench

presets = importlib.import_module("presets")  # the module crossmodal imports (benchmarks/ is on sys.path)
ROOT = Path(bench.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def loaded():
    return {name: presets.load_preset("crossmodal", name) for name in ("quick", "full", "gpu")}


# ------------------------------------------------------------------------------------------ presets
def test_presets_load_and_pass_the_checks(loaded):
    for name, preset in loaded.items():
        bench.check_preset(preset)
        assert preset["preset"] == name
        assert set(preset["variants"]) == set(bench.VARIANTS), name
        assert 1.0 in preset["sampling"]["gammas"] and bench.PAPER_GAMMA in preset["sampling"]["gammas"]
    assert len(loaded["full"]["seeds"]) >= 3 and len(loaded["gpu"]["seeds"]) >= 3
    assert loaded["gpu"]["training"]["steps"] > loaded["full"]["training"]["steps"]


@pytest.mark.parametrize("edit, key", [
    (lambda p: p.update(seeds=[]), "seeds"),
    (lambda p: p.update(seeds=[0, 0]), "seeds"),
    (lambda p: p.update(seeds=[True]), "seeds"),
    (lambda p: p.update(variants=["cmc_pe", "film"]), "variants"),
    (lambda p: p.update(variants=["cmc_pe", "cmc_pe"]), "variants"),
    (lambda p: p["data"].update(eval_clips=1), "data.eval_clips"),
    (lambda p: p["data"].update(train_clips=0), "data.train_clips"),
    (lambda p: p["model"].update(dim=2.5), "model.dim"),
    (lambda p: p["training"].update(steps=True), "training.steps"),
    (lambda p: p["training"].update(lr=-1e-3), "training.lr"),
    (lambda p: p["training"].update(lr=float("nan")), "training.lr"),
    (lambda p: p["sampling"].update(gammas=[]), "sampling.gammas"),
    (lambda p: p["sampling"].update(gammas=[1.0, 0.0]), "sampling.gammas"),
    (lambda p: p["sampling"].update(sampling_steps=0), "sampling.sampling_steps"),
])
def test_bad_preset_values_name_their_key(loaded, edit, key):
    preset = copy.deepcopy(loaded["quick"])
    edit(preset)
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        bench.check_preset(preset)


def test_bad_preset_keys_on_the_command_line_are_value_errors_naming_the_key(tmp_path):
    with pytest.raises(ValueError, match="training.stepz"):
        bench.main(["--quick", "--out", str(tmp_path), "--set", "training.stepz=3"])


# ------------------------------------------------------------------------------------------ the floor
def test_chance_floor_repairs_clip_i_audio_with_the_next_clips_video():
    from pe_toolkit.domains.crossmodal import generate_clips
    from pe_toolkit.domains.crossmodal.alignment import av_align_batch

    clips = generate_clips(24, seed=3)
    floor = bench.chance_floor(clips.video, clips.audio)
    assert floor == av_align_batch(torch.roll(clips.video, 1, dims=0), clips.audio)
    real = av_align_batch(clips.video, clips.audio)
    assert real["av_align"] > 0.9 and floor["av_align"] < 0.4  # real clips align, re-paired ones do not
    assert floor["audio_events"] == real["audio_events"]  # the same events, only re-paired
    levels = bench.reference_levels(clips)
    assert levels["real"] == real["av_align"] and levels["shuffled"] == floor["av_align"]
    with pytest.raises(ValueError, match="needs >= 2 clips"):
        bench.chance_floor(clips.video[:1], clips.audio[:1])


# ------------------------------------------------------------------------------------------ summary and verdicts
def _rows(variant: str, gamma: float, gains: list[float], floor: float = 0.2) -> list[dict]:
    return [{"variant": variant, "gamma": gamma, "seed": s, "av_align": floor + g, "floor": floor, "gain": g,
             "audio_events": 2.0, "video_events": 2.5, "silent_clips": 0.0, "val_loss": 0.1}
            for s, g in enumerate(gains)]


def test_summary_intervals_by_hand():
    summary = bench.summarize(_rows("cmc_pe", 1.5, [0.1, 0.2, 0.3]))
    (entry,) = summary
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t_{0.975, 2} * stdev / sqrt(n)
    assert entry["seeds"] == 3 and entry["gain"] == pytest.approx(0.2)
    assert entry["gain_ci"]["low"] == pytest.approx(0.2 - half)
    assert entry["gain_ci"]["high"] == pytest.approx(0.2 + half)
    assert entry["av_align"] == pytest.approx(0.4) and entry["floor_ci"]["low"] == pytest.approx(0.2)


def _verdicts(rows: list[dict]) -> dict[str, str]:
    return {c["claim"]: c["verdict"] for c in bench.claims(bench.summarize(rows))}


def test_connector_comparisons_are_untested_when_nothing_beats_its_floor():
    rows = (_rows("none", 1.0, [0.0, 0.01, -0.01]) + _rows("cmc_pe", 1.5, [0.01, -0.02, 0.0])
            + _rows("cross_attention", 1.5, [0.0, 0.02, -0.01]) + _rows("cmc_pe", 1.0, [0.0, 0.01, -0.01]))
    verdicts = _verdicts(rows)
    assert verdicts["none (gamma 1) the control does not align (gain interval not above 0)"] == "reproduced"
    assert verdicts["cmc_pe (gamma 1.5) aligns beyond its chance floor (gain > 0)"] == "not reproduced"
    assert verdicts["CMC-PE aligns better than cross-attention (gain, gamma 1.5)"].startswith("untested")
    assert verdicts["the timestep adjustment (gamma 1.5) improves CMC-PE over gamma 1 (gain)"].startswith("untested")
    note = bench.why_not_note(bench.summarize(rows), {"real_audio_events": 2.7, "real_video_events": 2.6})
    assert note.startswith("**No connector aligns beyond its chance floor") and "2.70 and 2.60" in note


def test_connector_comparisons_come_from_the_gain_intervals():
    rows = (_rows("cmc_pe", 1.5, [0.30, 0.32, 0.31]) + _rows("cross_attention", 1.5, [0.0, 0.01, -0.01])
            + _rows("cmc_pe", 1.0, [0.29, 0.33, 0.31]))
    verdicts = _verdicts(rows)
    assert verdicts["cmc_pe (gamma 1.5) aligns beyond its chance floor (gain > 0)"] == "reproduced"
    assert verdicts["CMC-PE aligns better than cross-attention (gain, gamma 1.5)"] == "reproduced"
    assert verdicts["the timestep adjustment (gamma 1.5) improves CMC-PE over gamma 1 (gain)"] == "not reproduced (tie)"
    assert bench.why_not_note(bench.summarize(rows), {}) == ""
    reversed_rows = _rows("cmc_pe", 1.5, [0.0, 0.01, -0.01]) + _rows("cross_attention", 1.5, [0.30, 0.32, 0.31])
    assert _verdicts(reversed_rows)["CMC-PE aligns better than cross-attention (gain, gamma 1.5)"] == \
        "not reproduced (reversed)"
    with_rope = _verdicts(rows + _rows("cross_attention_rope", 1.5, [0.25, 0.35, 0.30]))
    assert with_rope["CMC-PE aligns better than cross-attention with RoPE (an extra baseline; gain, gamma 1.5)"] \
        == "not reproduced (tie)"
    assert "CMC-PE aligns better than cross-attention with RoPE (an extra baseline; gain, gamma 1.5)" not in verdicts


def test_a_control_that_aligns_is_flagged_and_one_seed_is_untested():
    verdicts = _verdicts(_rows("none", 1.0, [0.3, 0.31, 0.32]) + _rows("cmc_pe", 1.5, [0.3]))
    assert verdicts["none (gamma 1) the control does not align (gain interval not above 0)"] == "not reproduced"
    assert verdicts["cmc_pe (gamma 1.5) aligns beyond its chance floor (gain > 0)"] == "untested"


def test_plot_draws_intervals_and_floors(tmp_path):
    summary = bench.summarize(_rows("cmc_pe", 1.5, [0.1, 0.2, 0.3]) + _rows("none", 1.5, [0.0, 0.01, -0.01]))
    bench.plot_scores(summary, {"real": 0.95, "shuffled": 0.15}, tmp_path / "scores.png")
    assert (tmp_path / "scores.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------ end to end
TINY = ["--quick", "--accelerator", "cpu", "--jobs", "1", "--variants", "none", "cmc_pe", "--seeds", "0", "1",
        "--set", "data.train_clips=32", "--set", "data.eval_clips=4", "--set", "model.dim=16",
        "--set", "training.steps=2", "--set", "training.batch_size=8", "--set", "sampling.sampling_steps=3"]


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    code = "import sys; sys.path.insert(0, sys.argv[1]); from benchmarks import crossmodal; " \
           "sys.exit(crossmodal.main(sys.argv[2:]))"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run([sys.executable, "-c", code, str(ROOT), *TINY, "--out", str(out), *extra],
                               capture_output=True, text=True, timeout=600, env=env)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("crossmodal_out")
    first = _run(out)
    document = json.loads((out / "crossmodal" / "results.json").read_text())
    again = _run(out, "--resume")
    return out / "crossmodal", first.stdout, again.stdout, document


def test_tiny_end_to_end_run_writes_results_report_and_plots(tiny_run):
    out, stdout, _, document = tiny_run
    config = document["config"]
    assert config["preset"] == "quick" and config["device"]["accelerator"] == "cpu"
    assert config["training"]["steps"] == 2 and config["models_finished"] == config["models_planned"] == 4
    runs = [r for r in document["rows"] if r["kind"] == "run"]
    assert sorted((r["variant"], r["seed"], r["gamma"]) for r in runs) == sorted(
        (v, s, g) for v in ("none", "cmc_pe") for s in (0, 1) for g in (1.0, 1.5))
    for row in runs:
        assert row["gain"] is None or row["gain"] == pytest.approx(row["av_align"] - row["floor"])
    assert any(r["kind"] == "verdict" for r in document["rows"])
    report = (out / "report.md").read_text()
    for text in ("How the fairness rule is met", "chance floor", "## Verdicts"):
        assert text in report
    for image in ("av_align.png", "samples.png"):
        assert (out / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.stem for p in (out / "runs" / "quick").glob("*.json")) == [
        "cmc_pe__seed0", "cmc_pe__seed1", "none__seed0", "none__seed1"]
    assert "4 runs (0 reused)" in stdout


def test_resume_reuses_every_finished_run(tiny_run):
    out, _, again, document = tiny_run
    assert "4 runs (4 reused)" in again
    rerun = json.loads((out / "results.json").read_text())
    assert [r for r in rerun["rows"] if r["kind"] == "run"] == [r for r in document["rows"] if r["kind"] == "run"]
