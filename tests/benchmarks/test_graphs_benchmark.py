"""The graph-PE benchmark: pure helpers, and tiny real runs of each section."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from pe_toolkit.bench import Result, load_config
from pe_toolkit.bench.cli import main
from pe_toolkit.benchmarks import graphs

SCRIPT = graphs.__file__


def test_summary_gives_bounded_student_t_intervals_over_replicates_and_counts_nan_runs():
    cells = [("rwse", "gin", 0.7), ("rwse", "gin", 0.8), ("rwse", "gin", 0.9), ("none", "gps", 0.1),
             ("none", "gin", 0.1), ("none", "gin", float("nan"))]
    rows = [{"section": "csl", "task": "csl", "pe": pe, "model": model, "metric": "acc", "test_metric": v,
             "seconds": 1.0, "fold": fold, "seed": 0} for fold, (pe, model, v) in enumerate(cells)]
    result = Result(config=None, preset="quick", rows=rows)
    summary = [r for r in graphs.Graphs().analyze(result) if r["kind"] == "summary"]
    assert [(r["model"], r["pe"]) for r in summary] == [("gin", "none"), ("gin", "rwse"), ("gps", "none")]
    none, rwse = summary[0]["test_metric"], summary[1]["test_metric"]
    assert summary[1]["runs"] == 3 and rwse["n"] == 3 and summary[1]["metric"] == "acc"
    half = 4.302653 * 0.1 / 3 ** 0.5  # t(0.975, 2) * sample std / sqrt(n), by hand
    assert rwse["mean"] == pytest.approx(0.8) and rwse["method"] == "t within [0, 1]"
    assert (rwse["low"], rwse["high"]) == (pytest.approx(0.8 - half, abs=1e-6), 1.0)  # 0.8 + half > 1: bounded
    # the NaN run is counted, never dropped: one finite value (no interval) and one non-finite
    assert (summary[0]["runs"], none["n"], none["n_nonfinite"], none["mean"]) == (2, 1, 1, 0.1)


def _runs(task, model, pe, values):
    return [{"task": task, "model": model, "pe": pe, "fold": i if task == "csl" else 0, "seed": 0 if task == "csl"
             else i, "test_metric": v} for i, v in enumerate(values)]


def test_claims_are_decided_on_the_difference_and_untested_where_the_task_is_not_learned():
    rows = (_runs("csl", "gin", "none", [0.1, 0.1, 0.12]) + _runs("csl", "gin", "lap_pe", [0.6, 0.65, 0.7])
            + _runs("csl", "gin", "rwse", [0.05, 0.35, 0.2]) + _runs("csl", "gps", "none", [0.1, 0.1, 0.1])
            + _runs("csl", "gps", "rwse", [0.9]) + _runs("pattern", "gin", "rfp", [0.80, 0.81, 0.79])
            + _runs("pattern", "gin", "lap_pe", [0.85, 0.86, 0.84]) + _runs("cluster", "gin", "rfp", [0.30, 0.34, 0.23])
            + _runs("cluster", "gin", "random_features", [0.25, 0.24, 0.26]))
    decided = graphs.Graphs().claims(Result(None, "full", rows))
    found = {(r["claim"].split(" (")[0], r["task"], r["model"]): r for r in decided}
    assert {k: r["verdict"] for k, r in found.items()} == {
        ("LapPE beats no PE", "csl", "gin"): "reproduced",
        ("RWSE beats no PE", "csl", "gin"): "inconclusive",  # the difference's interval contains 0
        ("RWSE beats no PE", "csl", "gps"): "untested",  # one replicate: no interval
        ("RFP beats LapPE", "pattern", "gin"): "contradicted",
        ("RFP beats random features", "cluster", "gin"): "untested",  # CLUSTER not learned
    }
    lap = found[("LapPE beats no PE", "csl", "gin")]
    assert lap["kind"] == "claim" and lap["test"].startswith("Welch t") and lap["a"]["n"] == lap["b"]["n"] == 3
    assert lap["a"]["mean"] == pytest.approx(0.65) and 0.0 <= lap["b"]["low"] and lap["a"]["high"] <= 1.0
    assert found[("RWSE beats no PE", "csl", "gin")]["min_detectable_effect"] > 0
    assert found[("RFP beats random features", "cluster", "gin")]["reason"] == (
        "CLUSTER not learned by gin: best mean test accuracy 29.0 % (rfp) < 58.3 % (halfway from chance 16.7 % "
        "to 100 %)")
    assert found[("RWSE beats no PE", "csl", "gps")]["reason"].startswith("fewer than 2 replicates")
    # a diverged fold is counted, never dropped: the claim is untested
    nan = _runs("csl", "gin", "none", [0.1, float("nan"), 0.1]) + _runs("csl", "gin", "lap_pe", [0.6, 0.65, 0.7])
    (claim,) = [r for r in graphs.Graphs().claims(Result(None, "full", nan)) if r["claim"].startswith("LapPE")]
    assert claim["verdict"] == "untested" and claim["reason"].startswith("non-finite runs")


def test_pyg_memory_estimate_and_skip():
    # dense path up to 2,000 nodes: three float32 N x N matrices
    assert graphs.estimate_pyg_bytes("pyg_rwse", 1_000) == 3 * 4 * 1_000**2
    # sparse powers fill in to N^2 entries on a 100k-node expander: far beyond any RAM here
    assert graphs.estimate_pyg_bytes("pyg_rwse", 100_000) > 100 * 2**30
    # the Laplacian eigensolver stays linear in N
    assert graphs.estimate_pyg_bytes("pyg_lap_pe", 100_000) < 2**30
    reason = graphs.pyg_skip_reason("pyg_rwse", 100_000, memory_bytes=16 * 2**30)
    assert reason is not None and reason.startswith("skipped: would need") and "GiB" in reason
    assert graphs.pyg_skip_reason("pyg_rwse", 1_000, memory_bytes=16 * 2**30) is None
    with pytest.raises(ValueError, match="method"):
        graphs.estimate_pyg_bytes("rwse", 10)


def test_speedups_only_where_both_measured():
    rows = [
        {"method": "rwse", "input": "10", "status": "ok", "min_s": 1.0, "peak_mib": 5.0},
        {"method": "pyg_rwse", "input": "10", "status": "ok", "min_s": 3.0, "peak_mib": 50.0},
        {"method": "rwse", "input": "20", "status": "ok", "min_s": 1.0, "peak_mib": 6.0},
        {"method": "pyg_rwse", "input": "20", "status": "skipped: would need 9.0 GiB"},
        {"method": "lap_pe", "input": "csl", "status": "ok", "min_s": 0.5, "peak_mib": 1.0, "max_residual": 1e-7},
        {"method": "pyg_lap_pe", "input": "csl", "status": "ok", "min_s": 1.0, "peak_mib": 2.0, "max_residual": 1e-6},
    ]
    assert graphs.speedups(rows) == [
        {"encoding": "rwse", "input": "10", "toolkit_s": 1.0, "toolkit_mib": 5.0, "pyg_s": 3.0, "pyg_mib": 50.0,
         "speedup": 3.0},
        {"encoding": "rwse", "input": "20", "toolkit_s": 1.0, "toolkit_mib": 6.0,
         "note": "PyG: skipped: would need 9.0 GiB"},
        {"encoding": "lap_pe", "input": "csl", "toolkit_s": 0.5, "toolkit_mib": 1.0, "toolkit_residual": 1e-7,
         "pyg_s": 1.0, "pyg_mib": 2.0, "pyg_residual": 1e-6, "speedup": 2.0},
    ]


def test_rwse_bar_is_checked_against_the_measurement():
    row = {"method": "rwse", "num_nodes": 100_000, "status": "ok", "min_s": 12.5, "peak_mib": 700.0, "walk_length": 8}
    assert graphs.rwse_bar([row]).endswith(": met.") and "12.5 s" in graphs.rwse_bar([row])
    assert graphs.rwse_bar([{**row, "min_s": 75.0}]).endswith("not met.")
    assert graphs.rwse_bar([{**row, "status": "timeout after 300 s"}]).endswith("not met.")
    assert graphs.rwse_bar([{**row, "num_nodes": 1000}]) is None


def test_presets_are_yaml_files_with_the_same_keys():
    benchmark = graphs.Graphs()
    assert benchmark.preset_names() == ["full", "gpu", "quick"]
    loaded = {name: load_config(benchmark, name) for name in ("quick", "full", "gpu")}
    keys = {name: set(dataclasses.asdict(c)) | {f"precompute.{k}" for k in dataclasses.asdict(c.precompute)}
            for name, (c, _) in loaded.items()}
    assert keys["quick"] == keys["full"] == keys["gpu"]
    assert {name: run for name, (_, run) in loaded.items()} == {"quick": {"jobs": 2, "threads": 1},
                                                                "full": {"jobs": 2, "threads": 1},
                                                                "gpu": {"jobs": 8, "threads": 2}}
    full = loaded["full"][0].precompute
    assert full.sizes == [1_000, 10_000, 100_000] and full.walk_length == 8 and full.k == 8
    assert set(full.datasets) == {"csl", "pattern"}
    changed, _ = load_config(benchmark, "quick", overrides=["precompute.sizes=[500]"])
    assert changed.precompute.sizes == [500]
    with pytest.raises(ValueError, match="'precompute.size' does not exist"):
        load_config(benchmark, "quick", overrides=["precompute.size=[500]"])


def test_runs_put_the_scale_table_first_then_fold_zero_and_sbm():
    config, _ = load_config(graphs.Graphs(), "quick", overrides=["folds=2", "models=[gin]"])
    names = [spec["run"] for spec in graphs.Graphs().runs(config)]
    assert names == ["precompute__1000", "precompute__2000", "precompute__csl", "precompute__pattern",
                     "csl__none__gin__fold0", "csl__rwse__gin__fold0",
                     "pattern__none__gin__seed0", "pattern__rwse__gin__seed0",
                     "cluster__none__gin__seed0", "cluster__rwse__gin__seed0",
                     "csl__none__gin__fold1", "csl__rwse__gin__fold1"]


def test_timing_lock_excludes_training_and_build_lock_excludes_builders(tmp_path):
    import fcntl

    with graphs._data_lock(tmp_path, "timing", exclusive=True):
        with open(tmp_path / ".timing.lock", "a") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # a training run would wait here
    with graphs._data_lock(tmp_path, "timing", exclusive=False):
        with open(tmp_path / ".timing.lock", "a") as other:
            fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # training runs share it
            fcntl.flock(other, fcntl.LOCK_UN)


def test_every_model_and_pe_of_the_config_has_an_entry():
    from pe_toolkit.domains import graphs as domain

    config, _ = load_config(graphs.Graphs(), "full")
    assert all(hasattr(domain, graphs.MODELS[m][0]) for m in config.models)
    assert set(config.pes) == set(graphs.PE_NAMES)
    rfp = graphs.pe_settings("rfp", dataclasses.asdict(config.rfp))
    assert rfp["model"]["in_features"] == graphs.make_transform(rfp, per_access=True).out_features


@pytest.mark.parametrize("preset, sizes", [("quick", (8, 8, 4)), ("full", (8, 8, 4)), ("gpu", (64, 16, 4))])
def test_rfp_runs_at_the_references_sizes_in_gpu(preset, sizes):
    # Eliasof et al.'s reference sizes: 64 random channels, 16 propagation steps (CPU presets: 8 x 8, too costly)
    config, _ = load_config(graphs.Graphs(), preset, overrides=["pes=[rfp]", "sections=[csl, sbm, precompute]"])
    specs = graphs.Graphs().runs(config)
    features, steps, inits = sizes
    train = [s for s in specs if s["section"] != "precompute"]
    assert train and all(s["pe_settings"]["options"] == {"num_features": features, "steps": steps, "num_inits": inits,
                                                          "normalization": "qr"} for s in train)
    assert all(s["pe_settings"]["model"]["in_features"] == inits * (steps + 1) * features for s in train)
    assert all(s["rfp"] == {"features": features, "steps": steps, "inits": inits}
               for s in specs if s["section"] == "precompute")


def test_rfp_claims_state_a_departure_from_the_references_sizes():
    rows = _runs("csl", "gin", "rfp", [0.6, 0.65, 0.7]) + _runs("csl", "gin", "random_features", [0.1, 0.1, 0.12])
    for preset, departure in (("full", True), ("gpu", False)):
        config, _ = load_config(graphs.Graphs(), preset)
        (claim,) = graphs.Graphs().claims(Result(config, preset, rows))
        assert ("RFP 8 x 8, not the reference's 64 x 16" in claim["name"]) is departure, claim["name"]
        assert departure is ("RFP 8 channels x 8 steps" in graphs.Graphs().describe(Result(config, preset, rows)))


def test_precompute_section_in_subprocess(tmp_path):
    # forked children: run in a fresh interpreter so no torch compute has happened before forking
    cmd = [sys.executable, SCRIPT, "--quick", "--set", "sections=[precompute]", "--set", "precompute.sizes=[150, 300]",
           "--set", "precompute.repeats=1", "--set", "precompute.timeout_s=300", "--set", "precompute.datasets=[csl]",
           "--set", f"data_root={tmp_path / 'data'}", "--out", str(tmp_path)]
    subprocess.run(cmd, check=True, timeout=900, capture_output=True)  # generous: the machine may be loaded
    out = tmp_path / "graphs"
    document = json.loads((out / "results.json").read_text())
    assert set(document) == {"benchmark", "config", "rows", "environment", "seconds"}
    assert document["config"]["precompute"]["walk_length"] == 8 and document["config"]["preset"] == "quick"
    inputs = [r for r in document["rows"] if r.get("section") == "precompute"]
    assert [r["input"] for r in inputs] == ["150", "300", "csl"]
    rows = [cell for r in inputs for cell in r["measurements"]]
    assert {(r["method"], r["input"]) for r in rows} == {
        (m, n) for m in graphs.PRECOMPUTE_METHODS for n in ("150", "300", "csl")
    }
    for r in rows:
        assert r["section"] == "precompute"
        assert r["status"] == "ok", r
        assert r["min_s"] > 0 and r["peak_mib"] >= 0 and r["repeats"] == 1
        if r["method"] in ("lap_pe", "pyg_lap_pe"):
            assert r["max_residual"] < 1e-4
    assert next(r for r in rows if r["input"] == "csl")["graphs"] == 150
    speedup = [r for r in document["rows"] if r.get("kind") == "speedup"]
    assert {(r["encoding"], r["input"]) for r in speedup} == {(e, n) for e in ("rwse", "lap_pe")
                                                              for n in ("150", "300", "csl")}
    report = (out / "report.md").read_text()
    assert "Scale: RWSE and LapPE against PyG" in report and "PyG / toolkit" in report
    assert "| rwse | csl |" in report and "| lap_pe | 300 |" in report
    assert (out / "precompute_time.png").stat().st_size > 0


def _main(argv):
    return main(argv, name="pe_toolkit.benchmarks.graphs:Graphs", prog="python benchmarks/graphs.py")


def test_csl_section_tiny_run_and_resume(tmp_path):
    argv = ["--quick", "--set", "sections=[csl]", "--set", "folds=1", "--set", "csl.epochs=1", "--set",
            "pes=[none, rwse]", "--set", "models=[gin]", "--jobs", "1", "--set", f"data_root={tmp_path / 'data'}",
            "--out", str(tmp_path)]
    assert _main(argv) == 0
    out = tmp_path / "graphs"
    rows = [r for r in json.loads((out / "results.json").read_text())["rows"] if "kind" not in r]
    assert {(r["task"], r["pe"], r["model"], r["fold"]) for r in rows} == {("csl", "none", "gin", 0),
                                                                         ("csl", "rwse", "gin", 0)}
    for r in rows:
        assert r["metric"] == "acc" and 0.0 <= r["test_metric"] <= 1.0
        assert r["test_graphs"] == 30 and r["train_graphs"] == 90
        assert r["lr"] == 0.003 and 0.0 <= r["val_metric"] <= 1.0  # the validation split: for the lr choice
    stored = sorted((out / "runs" / "quick").glob("*.json"))
    assert [p.name for p in stored] == ["run=csl__none__gin__fold0__lr=0.003.json",
                                        "run=csl__rwse__gin__fold0__lr=0.003.json"]
    spec = json.loads(stored[0].read_text())["spec"]
    assert spec["device"] == {"accelerator": "auto", "devices": 1, "precision": "32-true"}  # --accelerator
    assert (out / "csl_accuracy.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "| csl | gin | rwse | acc | 1 | " in report and "(n=1)" in report
    assert "## How the fairness rule is met" in report and "## Tuning" in report
    assert "| RWSE beats no PE (Rampasek et al.): csl, gin |" in report and "**untested** (" in report
    # the stored runs are reused, row for row
    before = {p.name: json.loads(p.read_text())["written"] for p in stored}
    assert _main([*argv, "--resume"]) == 0
    assert {p.name: json.loads(p.read_text())["written"] for p in stored} == before
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if "kind" not in r]
    assert again == rows


def test_sbm_section_tiny_run(tmp_path):
    argv = ["--set", "sections=[sbm]", "--set", "sbm.epochs=1", "--set", "sbm_num_graphs={pattern: 10, cluster: 10}",
            "--set", "pes=[rfp]", "--set", "models=[gin]", "--jobs", "1", "--out", str(tmp_path),
            "--set", "sbm_seeds=[0, 1]", "--set", f"data_root={tmp_path / 'data'}", "--quick"]
    assert _main(argv) == 0
    out = tmp_path / "graphs"
    rows = [r for r in json.loads((out / "results.json").read_text())["rows"] if "kind" not in r]
    assert sorted((r["task"], r["seed"]) for r in rows) == [("cluster", 0), ("cluster", 1), ("pattern", 0),
                                                            ("pattern", 1)]
    assert sorted(p.name for p in (out / "runs" / "quick").glob("*.json")) == [
        f"run={t}__rfp__gin__seed{s}__lr=0.003.json" for t in ("cluster", "pattern") for s in (0, 1)]
    first, second = (next(r for r in rows if r["task"] == "pattern" and r["seed"] == s) for s in (0, 1))
    assert (first["test_metric"], first["train_metric"]) != (second["test_metric"], second["train_metric"])
    assert all(r["metric"] == "weighted_acc" and 0.0 <= r["test_metric"] <= 1.0 for r in rows)
    assert (out / "sbm_accuracy.png").stat().st_size > 0
    assert "PATTERN / CLUSTER" in (out / "report.md").read_text()


DISTINCT = "sbm_seeds must be a non-empty list of distinct values, got "


@pytest.mark.parametrize("seeds, message", [("[]", DISTINCT + "[]"), ("[0, 0]", DISTINCT + "[0, 0]"),
                                            ("[-1]", "Not of type NonNegativeInt: -1 does not conform"),
                                            ("3", "config.sbm_seeds"), ("[0.5]", "config.sbm_seeds")])
def test_bad_sbm_seeds_are_named(tmp_path, capsys, seeds, message):
    with pytest.raises(SystemExit):
        _main(["--set", "sections=[sbm]", "--out", str(tmp_path), "--set", f"sbm_seeds={seeds}"])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("override, message", [
    ("sections=[csl, qm9]", "\"config.sections\":\n  Expected a typing.Literal['csl', 'sbm', 'precompute']. "
                            "Got value: qm9"),
    ("pes=[lappe]", "\"config.pes\":\n  Expected a typing.Literal['none', 'random_features', 'lap_pe', 'rwse', "),
    ("precompute.datasets=[zinc]", "\"config.precompute.datasets\":\n  Expected a typing.Literal['csl', 'pattern']"),
    ("folds=6", "\"config.folds\":\n  Expected a typing.Literal[1, 2, 3, 4, 5]. Got value: 6"),
    ("precompute.sizes=[0]", "\"config.precompute.sizes\":\n  Not of type PositiveInt: 0 does not conform"),
    ("sbm_fractions=[0.5, 0.5, 0]", "\"config.sbm_fractions\":\n  Not of type OpenUnitInterval: 0 does not conform")])
def test_bad_choices_are_named(tmp_path, capsys, override, message):
    with pytest.raises(SystemExit):
        _main(["--set", override, "--out", str(tmp_path)])
    assert message in capsys.readouterr().err
