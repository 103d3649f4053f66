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


def test_summary_verdicts_and_claim_check_use_only_the_rows():
    rows = [{"variant": v, "seed": s, "map": m, "map_50": m, "map_75": m, "val_map": m, "parameters": p}
            for v, p, ms in (("independent", 100, (0.2, 0.3, 0.4)), ("recursive_box_centerness", 60, (0.5, 0.55, 0.6)),
                             ("recursive", 50, (0.25, 0.3, 0.35)))
            for s, m in enumerate(ms)]
    summary = bench.summarize(rows)
    assert [r["variant"] for r in summary] == ["independent", "recursive_box_centerness", "recursive"]
    # mean 0.3, sd 0.1, t(0.975, 2) = 4.3027: half-width 0.24841
    assert summary[0]["map"] == pytest.approx(0.3) and summary[0]["map_ci"]["high"] == pytest.approx(0.54841, abs=1e-5)
    checks = {v["comparison"]: v for v in bench.verdicts(summary)}
    assert set(checks) == {"recursive_box_centerness vs independent", "recursive_box_centerness vs recursive",
                           "recursive vs independent"}
    assert checks["recursive_box_centerness vs recursive"]["verdict"] == "better"  # [0.426, 0.674] vs [0.126, 0.474]
    assert checks["recursive_box_centerness vs independent"]["verdict"] == "tie"  # [0.052, 0.548] overlaps
    assert checks["recursive vs independent"]["parameter_ratio"] == pytest.approx(0.5)
    text = bench.claim_check(summary)
    assert "60% of the parameters: tie" in text and "do not separate" in text
    one_seed = bench.summarize([r for r in rows if r["seed"] == 0])
    assert "tie" in bench.claim_check(one_seed)  # no interval from one seed
    assert "not both were run" in bench.claim_check(summary[:1])


def _tiny_config(tmp_path, **data):
    import yaml

    config = {"seeds": [0, 1], "model": {k: list(v) if isinstance(v, tuple) else v for k, v in TINY.items()
                                          if k != "num_classes"},
              "data": {"image_size": 32, "train_images": 8, "val_images": 4, "test_images": 4, **data},
              "training": {"steps": 2, "batch_size": 4, "lr": [1e-3]}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["--quick", "--config", str(path), "--accelerator", "cpu", "--out", str(tmp_path)]


def test_tiny_benchmark_run(tmp_path, monkeypatch):
    argv = [*_tiny_config(tmp_path), "--variants", "independent", "recursive_box_centerness"]
    assert bench.main(argv) == 0
    out = tmp_path / "detection"
    doc = json.loads((out / "results.json").read_text())
    runs = [r for r in doc["rows"] if r["kind"] == "run"]
    assert [(r["variant"], r["seed"]) for r in runs] == [("independent", 0), ("recursive_box_centerness", 0),
                                                         ("independent", 1), ("recursive_box_centerness", 1)]
    assert runs[1]["parameters"] < runs[0]["parameters"] and all(r["lr"] == 1e-3 for r in runs)
    assert doc["config"]["data"]["num_classes"] == 3 and doc["config"]["device"]["accelerator"] == "cpu"
    assert [r["verdict"] for r in doc["rows"] if r["kind"] == "verdict"][0] in ("better", "worse", "tie")
    assert (out / "map_vs_parameters.png").stat().st_size > 0 and (out / "predictions.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "Claim check" in report and "How the fairness rule is met" in report
    stored = {p.stem: json.loads(p.read_text()) for p in (out / "runs" / "quick").glob("*.json")}
    assert sorted(stored) == ["independent__seed0", "independent__seed1", "recursive_box_centerness__seed0",
                              "recursive_box_centerness__seed1"]
    assert stored["independent__seed0"]["map"] == runs[0]["map"]

    # --resume reuses the finished runs (training again would fail) and reports the same rows
    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench, "train_one", no_training)
    assert bench.main([*argv, "--resume"]) == 0
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["kind"] == "run"]
    assert again == runs
    with pytest.raises(AssertionError, match="trained again"):
        bench.main([*argv, "--resume", "--steps", "3"])
    with pytest.raises(AssertionError, match="trained again"):
        bench.main(argv)


def test_benchmark_reads_coco_files_of_mixed_sizes(tmp_path):
    import yaml
    from PIL import Image

    train = ShapesDetectionDataset(6, image_size=40, max_size=16, num_classes=2, seed=0)
    train.save_coco(tmp_path / "train")
    Image.new("RGB", (56, 40)).save(tmp_path / "train" / "images" / "000005.png")  # one wider image, no objects
    ann = json.loads((tmp_path / "train" / "annotations.json").read_text())
    ann["images"][5].update(width=56)
    ann["annotations"] = [a for a in ann["annotations"] if a["image_id"] != 5]
    (tmp_path / "train" / "annotations.json").write_text(json.dumps(ann))
    ShapesDetectionDataset(3, image_size=48, max_size=16, num_classes=2, seed=1).save_coco(tmp_path / "test")
    data = {"kind": "coco", "image_size": 32, "train_images": 1, "val_images": 2, "test_images": 1, "num_classes": 1,
            "coco": {"train_annotations": str(tmp_path / "train" / "annotations.json"),
                     "train_image_dir": str(tmp_path / "train" / "images"), "val_annotations": None,
                     "val_image_dir": None, "test_annotations": str(tmp_path / "test" / "annotations.json"),
                     "test_image_dir": str(tmp_path / "test" / "images")}}
    built = bench.build_datasets(data)
    assert built["num_classes"] == 2 and built["categories"] == ["rectangle", "ellipse"]  # from the file
    assert [len(built[k]) for k in ("train", "val", "test")] == [4, 2, 3]
    assert built["val"][1][0].shape == built["test"][0][0].shape == (3, 32, 32)  # letterboxed
    ShapesDetectionDataset(2, num_classes=3, seed=2).save_coco(tmp_path / "other")
    data["coco"]["test_annotations"] = str(tmp_path / "other" / "annotations.json")
    data["coco"]["test_image_dir"] = str(tmp_path / "other" / "images")
    with pytest.raises(ValueError, match="the test annotations have categories"):
        bench.build_datasets(data)
    config = yaml.safe_load((bench.Path(bench.__file__).parent / "presets" / "detection" / "quick.yaml").read_text())
    config["data"]["kind"] = "coco"
    with pytest.raises(ValueError, match="needs data.coco.train_annotations"):
        bench.check_preset(config)
    config["data"]["kind"] = "shapes"
    config["training"]["lr"] = 0.001
    with pytest.raises(ValueError, match="training.lr must be a non-empty list"):
        bench.check_preset(config)
