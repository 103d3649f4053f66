"""Lightning training / evaluation of the detector, and the detection benchmark (helpers and a tiny real run)."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch

from benchmarks import detection as bench
from pe_toolkit.domains.detection.data import ShapesDetectionDataset

TINY = dict(num_classes=3, dim=16, num_heads=2, ffn_dim=32, dynamic_dim=4, pooler_resolution=3, num_proposals=4,
            num_stages=3, backbone_channels=(8, 8))


def test_training_step_and_test_metrics():
    import lightning as L

    from pe_toolkit.domains.detection.lightning_module import DetectionDataModule, DetectionModule

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    train, test = ShapesDetectionDataset(8, image_size=32, max_size=12, seed=0), ShapesDetectionDataset(
        4, image_size=32, max_size=12, seed=1)
    module = DetectionModule(dict(TINY, recursive=True, box_pe=True, centerness_pe=True), warmup_steps=1, max_steps=3)
    before = [p.detach().clone() for p in module.parameters()]
    trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    data = DetectionDataModule(train, test=test, batch_size=4)
    trainer.fit(module, data)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))
    result = trainer.test(module, data, verbose=False)[0]
    assert set(result) == {"test/map", "test/map_50", "test/map_75"}
    assert all(0.0 <= v <= 1.0 for v in result.values())
    with pytest.raises(ValueError, match="no val dataset"):
        data.val_dataloader()


def test_summary_and_claim_check_use_only_the_rows():
    rows = [{"variant": v, "seed": s, "map": m, "map_50": m, "map_75": m, "parameters": p}
            for v, p, ms in (("independent", 100, (0.2, 0.4)), ("recursive_box_centerness", 60, (0.35, 0.45)))
            for s, m in enumerate(ms)]
    summary = bench.summarize(rows)
    assert [r["variant"] for r in summary] == ["independent", "recursive_box_centerness"]
    assert summary[0]["map_mean"] == pytest.approx(0.3) and summary[0]["map_std"] == pytest.approx(0.1)
    text = bench.claim_check(summary)
    assert "+0.1000" in text and "60% of the parameters" in text and "matches or beats" in text
    worse = bench.claim_check([dict(summary[0]), dict(summary[1], map_mean=0.05, map_std=0.01)])
    assert "is worse than the independent" in worse
    assert "too little training" in bench.claim_check([dict(s, map_mean=0.0) for s in summary])
    assert "not both were run" in bench.claim_check(summary[:1])


def test_tiny_benchmark_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "MODEL", {k: v for k, v in TINY.items() if k != "num_classes"})
    monkeypatch.setitem(bench.PRESETS, "quick", {"train_images": 8, "test_images": 4, "steps": 2, "batch_size": 4,
                                                 "seeds": [0], "lr": 1e-3})
    assert bench.main(["--quick", "--out", str(tmp_path), "--variants", "independent", "recursive_box_centerness"]) == 0
    out = tmp_path / "detection"
    doc = json.loads((out / "results.json").read_text())
    assert [r["variant"] for r in doc["rows"]] == ["independent", "recursive_box_centerness"]
    assert doc["rows"][1]["parameters"] < doc["rows"][0]["parameters"]
    assert (out / "map_vs_parameters.png").stat().st_size > 0 and (out / "predictions.png").stat().st_size > 0
    assert "Claim check" in (out / "report.md").read_text()
    stored = {p.stem: json.loads(p.read_text()) for p in (out / "runs" / "quick").glob("*.json")}
    assert sorted(stored) == ["independent__seed0", "recursive_box_centerness__seed0"]
    assert stored["independent__seed0"]["map"] == doc["rows"][0]["map"]

    # --resume reuses both finished runs (training again would fail) and reports the same rows
    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench, "train_one", no_training)
    argv = ["--quick", "--out", str(tmp_path), "--variants", "independent", "recursive_box_centerness"]
    assert bench.main([*argv, "--resume"]) == 0
    assert json.loads((out / "results.json").read_text())["rows"] == doc["rows"]
    # a changed configuration is not reused; without --resume nothing is
    with pytest.raises(AssertionError, match="trained again"):
        bench.main([*argv, "--resume", "--steps", "3"])
    with pytest.raises(AssertionError, match="trained again"):
        bench.main(argv)
