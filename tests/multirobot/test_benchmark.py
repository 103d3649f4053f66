"""One tiny end-to-end run of benchmarks/multirobot.py: results.json, report.md and both plots."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import lightning
import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "multirobot.py"
_SPEC = importlib.util.spec_from_file_location("multirobot_benchmark", _SCRIPT)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

TINY = {"seeds": [0], "num_train": 16, "num_val": 8, "num_test": 12, "steps": 2, "batch_size": 8, "dim": 16,
        "num_heads": 4, "graph_layers": 1, "cross_layers": 1, "raw_frames": 2}


def test_tiny_end_to_end_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "QUICK", TINY)
    assert bench.main(["--quick", "--out", str(tmp_path), "--pes", "fourier", "none"]) == 0
    out = tmp_path / "multirobot"
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"benchmark", "config", "rows", "environment", "seconds"}
    assert {r["kind"] for r in results["rows"]} == {"run", "bandwidth", "summary"}
    methods = {r["method"] for r in results["rows"] if r["kind"] == "run"}
    assert methods == {"classical", "NOPE (fourier)", "NOPE (fourier)+procrustes", "NOPE (none)",
                       "NOPE (none)+procrustes"}
    nope = next(r for r in results["rows"] if r["method"] == "NOPE (none)")
    assert 0.0 <= nope["nda"] <= 1.0 and nope["threshold"] in bench.THRESHOLDS and nope["steps"] == 2
    raw = next(r for r in results["rows"] if r["method"] == "bandwidth" and "uncompressed" in r["payload"])
    assert raw["bytes"] == 640 * 480 * 5
    report = (out / "report.md").read_text()
    assert "qualitative claims" in report and "NOPE (none)" in report and "python" in report
    for png in ("alignment.png", "metrics.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_loads_the_trained_models_and_reports_the_same_metrics(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "QUICK", TINY)
    argv = ["--quick", "--out", str(tmp_path), "--pes", "none"]
    assert bench.main(argv) == 0
    out = tmp_path / "multirobot"
    first = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["kind"] == "run"]
    assert sorted(p.name for p in (out / "runs" / "quick").iterdir()) == ["none__seed0.json", "none__seed0.pt"]

    def no_fit(*args, **kwargs):
        raise AssertionError("a finished model was trained again")

    monkeypatch.setattr(lightning.Trainer, "fit", no_fit)
    assert bench.main([*argv, "--resume"]) == 0  # the stored weights are loaded and evaluated again
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["kind"] == "run"]
    assert again == first
    with pytest.raises(AssertionError, match="trained again"):
        bench.main([*argv, "--resume", "--steps", "3"])
