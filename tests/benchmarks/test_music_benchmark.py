"""benchmarks/music.py: presets, the run list and tuning grid, lr selection, summaries and claims, MIDI export."""

from __future__ import annotations

import json
import math

import pytest
import torch

from pe_toolkit.bench import Result
from pe_toolkit.bench.config import load_config
from pe_toolkit.benchmarks import music as bench
from pe_toolkit.domains.music.structure import LABEL_FIELDS


def run_cli(argv):
    """``python benchmarks/music.py ARGV`` in this process (the harness's command line)."""
    from pe_toolkit.bench.cli import main

    return main(argv, name="music", prog="python benchmarks/music.py")


BENCHMARK = bench.Music()


def test_presets_load_and_bad_entries_are_named():
    for name in ("quick", "full", "gpu"):
        config, _ = load_config(BENCHMARK, name)
        assert config.tuning.seed in config.seeds
    assert all(len(load_config(BENCHMARK, n)[0].seeds) >= 3 for n in ("full", "gpu"))
    with pytest.raises(ValueError, match="tuning.seed 5 must be one of seeds"):
        load_config(BENCHMARK, "quick", overrides=["tuning.seed=5"])
    with pytest.raises(ValueError, match=r"(?s)config\.oracle.*Literal\['s_ape-oracle'.*Got value: s_ape"):
        load_config(BENCHMARK, "quick", overrides=["oracle=[s_ape]"])
    with pytest.raises(ValueError, match=r"(?s)config\.encodings.*Literal\['s_ape'.*Got value: cope"):
        load_config(BENCHMARK, "quick", overrides=["encodings=[cope]"])
    with pytest.raises(ValueError, match=r"(?s)config\.training\.steps.*Not of type PositiveInt: 0"):
        load_config(BENCHMARK, "quick", overrides=["training.steps=0"])
    with pytest.raises(ValueError, match=r"seeds must be a non-empty list of distinct values, got \[0, 0\]"):
        load_config(BENCHMARK, "quick", overrides=["seeds=[0, 0]"])
    with pytest.raises(ValueError, match=r"tuning.lrs must be a non-empty list of distinct values, got \[0.1, 0.1\]"):
        load_config(BENCHMARK, "quick", overrides=["tuning.lrs=[0.1, 0.1]"])
    with pytest.raises(ValueError, match="'window.size' does not exist"):
        load_config(BENCHMARK, "quick", overrides=["window.size=3"])


def test_runs_put_the_tuning_seed_first_and_tune_every_task_and_encoding_alike():
    config, _ = load_config(BENCHMARK, "quick", overrides=["seeds=[3, 1, 2]", "tuning.seed=1",
                                                           "oracle=[s_ape-oracle]", "tuning.lrs=[0.01, 0.003]"])
    specs = BENCHMARK.runs(config)
    arms = [f"{t}/{e}" for t in config.tasks for e in [*config.encodings, "s_ape-oracle"]]
    assert [(s["arm"], s["seed"]) for s in specs] == [(a, seed) for a in arms for seed in (1, 3, 2)]
    assert specs[0]["data"] == {"midi_folder": None, "limit": 40, "split_seed": 0}
    tuning = BENCHMARK.tuning(config)
    assert (tuning.param, list(tuning.values), tuning.metric, tuning.maximize, tuning.group) == (
        "lr", [0.01, 0.003], "val_nll", False, "arm")


def _row(task, encoding, seed, lr, value):
    row = {"task": task, "encoding": encoding, "seed": seed, "lr": lr, "val_nll": value,
           "reference_notes_per_voice": 2.0, "notes_per_voice_each": [1.0, 2.0, 3.0],
           "reference_notes_per_voice_each": [2.0, 2.0, 2.0]}
    fractions = {m: value / 10 for m in ("gen_f1", "test_f1", "drone_fraction")}  # they lie in [0, 1]
    return {**row, **{m: value for m in bench.METRICS}, **fractions}


def test_selection_summaries_verdicts_and_claims():
    config, _ = load_config(BENCHMARK, "quick", overrides=["seeds=[0, 1, 2]", "tasks=[next_step]",
                                                           "encodings=[s_ape, sinusoidal, nope]",
                                                           "tuning.lrs=[0.001, 0.003, 0.01]"])
    trials = [_row("next_step", e, 0, lr, v) for e, best in (("s_ape", 0.003), ("sinusoidal", 0.01), ("nope", 0.01))
              for lr, v in ((0.001, 5.0), (0.003, 4.0 if best == 0.003 else 6.0), (0.01, 3.0 if best == 0.01 else 7.0))]
    chosen = {"next_step/s_ape": 0.003, "next_step/sinusoidal": 0.01, "next_step/nope": 0.01}
    # chroma (higher is better) and SSM distance (lower is better) both favour s_ape with tight intervals
    rows = []
    for e, base in (("s_ape", 1.0), ("sinusoidal", 2.0), ("nope", 3.0)):
        for seed, jitter in ((0, 0.0), (1, 0.01), (2, -0.01)):
            row = _row("next_step", e, seed, chosen[f"next_step/{e}"], base + jitter)
            row["chroma_similarity"] = 10.0 - base + jitter
            rows.append(row)
    result = Result(config=config, preset="quick", rows=rows, trials=trials, chosen=chosen)
    result.derived = BENCHMARK.analyze(result)
    summary = {s["encoding"]: s for s in result.derived if s["kind"] == "summary"}
    assert summary["s_ape"]["test_nll"]["mean"] == pytest.approx(1.0) and summary["s_ape"]["runs"] == 3
    assert summary["s_ape"]["test_nll"]["n"] == 3 and summary["s_ape"]["lr"] == 0.003
    assert summary["s_ape"]["notes_each"] == [1.0, 2.0, 3.0]
    found = {(c["metric"], c["encoding"], c["baseline"]): c for c in result.derived if c["kind"] == "claim"}
    chroma = found[("chroma_similarity", "s_ape", "nope")]
    assert chroma["verdict"] == "reproduced" and chroma["test"].startswith("Welch t") and not chroma["paired"]
    assert chroma["difference"]["mean"] == pytest.approx(2.0) and chroma["a"]["n"] == chroma["b"]["n"] == 3
    assert found[("ssm_distance", "s_ape", "sinusoidal")]["verdict"] == "reproduced"
    assert found[("test_nll", "s_ape", "nope")]["verdict"] == "reproduced"  # lower is better: 1 vs 3
    (claim,) = [c for c in result.derived if c["kind"] == "claim_summary"]
    assert claim["verdict"] == "reproduced" and "s_ape on chroma_similarity" in claim["better than both"]
    # two seeds: every comparison untested, and so the claim
    two = Result(config=config, preset="quick", rows=[r for r in rows if r["seed"] < 2], trials=trials, chosen=chosen)
    derived = BENCHMARK.analyze(two)
    assert {c["verdict"] for c in derived if c["kind"] in ("claim", "claim_summary")} == {"untested"}
    # an arm whose runs diverged is summarised with its non-finite runs counted, and its comparisons are untested
    diverged = [{**r, **{m: math.nan for m in bench.METRICS}} if r["encoding"] == "nope" else r for r in rows]
    derived = BENCHMARK.analyze(Result(config=config, preset="quick", rows=diverged, trials=trials, chosen=chosen))
    nope = next(s for s in derived if s["kind"] == "summary" and s["encoding"] == "nope")
    assert (nope["runs"], nope["test_nll"]["n"], nope["test_nll"]["n_nonfinite"]) == (3, 0, 3)
    against = [c for c in derived if c["kind"] == "claim" and c["baseline"] == "nope"]
    assert against and all(c["verdict"] == "untested" and c["reason"].startswith("non-finite runs") for c in against)
    (claim,) = [c for c in derived if c["kind"] == "claim_summary"]  # no longer better than both baselines
    assert claim["verdict"] == "inconclusive" and claim["better than both"] == "none"


def test_oracle_rows_are_compared_with_the_same_labels_given_as_input_features():
    assert bench.encoding_spec("next_step", bench.LABELS_ARM) == ("sinusoidal", {})
    config, _ = load_config(BENCHMARK, "quick", overrides=["seeds=[0, 1, 2]", "tasks=[accompaniment]",
                                                           "encodings=[s_ape, sinusoidal, nope]",
                                                           f"oracle=[s_ape-oracle, {bench.LABELS_ARM}]"])
    rows = []
    for e, base in (("s_ape-oracle", 1.0), (bench.LABELS_ARM, 2.0), ("s_ape", 2.2), ("sinusoidal", 2.5), ("nope", 3.0)):
        for seed, jitter in ((0, 0.0), (1, 0.01), (2, -0.01)):
            row = _row("accompaniment", e, seed, 0.003, base + jitter)
            row["chroma_similarity"] = 10.0 - base + jitter
            rows.append(row)
    derived = BENCHMARK.analyze(Result(config=config, preset="quick", rows=rows))
    pairs = {(c["encoding"], c["baseline"]) for c in derived if c["kind"] == "claim"}
    assert pairs == {("s_ape", "sinusoidal"), ("s_ape", "nope"), ("s_ape-oracle", bench.LABELS_ARM)}
    chroma = next(c for c in derived if c["kind"] == "claim" and c["baseline"] == bench.LABELS_ARM
                  and c["metric"] == "chroma_similarity")
    assert chroma["name"] == f"s_ape-oracle beats {bench.LABELS_ARM} on chroma_similarity (accompaniment)"
    assert chroma["verdict"] == "reproduced" and chroma["difference"]["mean"] == pytest.approx(1.0)
    assert chroma["a"]["n"] == chroma["b"]["n"] == 3
    fair, labels = [c for c in derived if c["kind"] == "claim_summary"]
    assert fair["claim"].startswith("structure-informed PE") and fair["verdict"] == "reproduced"
    assert labels["claim"].startswith("given the reference labels") and labels["verdict"] == "reproduced"
    assert labels["reason"] == "better than the baseline on a structural metric, worse on none"
    assert labels["better than both"] == "s_ape-oracle on chroma_similarity, s_ape-oracle on ssm_distance"


def test_write_midi_from_a_rows_sparse_rolls(tmp_path):
    labels = [[t, 0, t, 0, 0, 0, 0, 0] for t in range(4)]  # time, bar, beat, ... (LABEL_FIELDS)
    window = {"generated": [[0, 0, 60], [1, 0, 60], [2, 1, 64]], "generated_onsets": [[0, 0, 60], [2, 1, 64]],
              "reference": [[0, 0, 62]], "reference_onsets": [[0, 0, 62]], "labels": labels}
    row = {"task": "next_step", "encoding": "s_ape", "seed": 0, "example": {"length": 4}, "midi": [window]}
    bench.write_midi([row], tmp_path)
    assert (tmp_path / "next_step" / "s_ape_seed0_0.mid").stat().st_size > 0
    assert (tmp_path / "next_step" / "reference_0.mid").stat().st_size > 0


def test_tiny_run_writes_report_plots_and_midi_then_resumes(tmp_path, monkeypatch):
    argv = ["--quick", "--out", str(tmp_path), "--accelerator", "cpu", "--set", "data.limit=12",
            "--set", "training.steps=2", "--set", "seeds=[0]", "--set", "tasks=[accompaniment]",
            "--set", "encodings=[s_ape, nope]", "--set", f"oracle=[{bench.LABELS_ARM}]",
            "--set", "generation.windows=2"]
    assert run_cli(argv) == 0
    out = tmp_path / "music"
    rows = [r for r in json.loads((out / "results.json").read_text())["rows"] if "kind" not in r]
    assert [(r["task"], r["encoding"], r["seed"]) for r in rows] == [
        ("accompaniment", "s_ape", 0), ("accompaniment", "nope", 0), ("accompaniment", bench.LABELS_ARM, 0)]
    # the labels arm: a sinusoidal model (no positional parameters, as nope) plus one table per label of dim 16
    corpus, _ = bench.load_pieces({"limit": 12, "split_seed": 0, "midi_folder": None})
    labels = torch.cat([piece.labels for piece in corpus.pieces])
    ids = sum(int(labels[:, LABEL_FIELDS.index(f)].max()) + 1 for f in bench.ORACLE_LABELS)
    assert rows[2]["oracle"] and rows[2]["parameters"] - rows[1]["parameters"] == 16 * ids
    assert (out / "metrics.png").stat().st_size > 0 and (out / "rolls_accompaniment.png").stat().st_size > 0
    assert (out / "midi" / "accompaniment" / "s_ape_seed0_0.mid").stat().st_size > 0
    assert "## How the fairness rule is met" in (out / "report.md").read_text()

    def no_training(spec):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench.Music, "run_one", staticmethod(no_training))
    assert run_cli([*argv, "--resume"]) == 0
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if "kind" not in r]
    assert [r["test_nll"] for r in again] == [r["test_nll"] for r in rows]
