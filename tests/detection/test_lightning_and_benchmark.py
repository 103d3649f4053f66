"""Lightning training / evaluation of the detector, and the detection benchmark (helpers and a tiny real run)."""

from __future__ import annotations

import json
import logging
import warnings

import pytest
import torch

from pe_toolkit.bench import Result, load_config
from pe_toolkit.bench.cli import main
from pe_toolkit.bench.verdict import decide_claim
from pe_toolkit.benchmarks import detection as bench
from pe_toolkit.domains.detection.data import ShapesDetectionDataset, build_datasets

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


def _rows(spec):
    return [{"variant": v, "seed": s, "map": m, "map_50": m, "map_75": m, "val_map": m, "parameters": p}
            for v, p, ms in spec for s, m in enumerate(ms)]


def test_summary_and_claims_use_only_the_rows():
    rows = _rows((("independent", 100, (0.2, 0.3, 0.4)), ("recursive_box_centerness", 60, (0.5, 0.55, 0.6)),
                  ("recursive", 50, (0.25, 0.3, 0.35)), ("recursive_box", 55, (0.3, 0.31, 0.32))))
    derived = bench.Detection().analyze(Result(config=None, preset="full", rows=rows))
    assert [r["kind"] for r in derived] == ["summary"] * 4 + ["claim"] * 5
    summary = derived[:4]
    assert [r["variant"] for r in summary] == ["independent", "recursive_box_centerness", "recursive", "recursive_box"]
    # mean 0.3, sd 0.1, t(0.975, 2) = 4.3027: half-width 0.24841
    assert summary[0]["map"]["mean"] == pytest.approx(0.3)
    assert summary[0]["map"]["high"] == pytest.approx(0.54841, abs=1e-5)
    assert summary[0]["map"]["low"] == pytest.approx(0.05159, abs=1e-5)
    claims = {c["comparison"]: c for c in bench.claims(rows)}
    assert set(claims) == {"recursive_box_centerness vs independent", "recursive_box_centerness vs recursive",
                           "recursive_box vs recursive", "recursive_box_centerness vs recursive_box",
                           "recursive vs independent"}
    assert all(c["kind"] == "claim" and c["metric"] == "map" for c in claims.values())
    expected = decide_claim([0.5, 0.55, 0.6], [0.25, 0.3, 0.35], higher_is_better=True, bounds=(0.0, 1.0))
    assert claims["recursive_box_centerness vs recursive"]["verdict"] == expected.verdict == "reproduced"
    assert claims["recursive_box_centerness vs recursive"]["difference"] == expected.difference
    paper = claims["recursive_box_centerness vs independent"]
    # the per-side intervals overlap ([0.43, 0.67] and [0.05, 0.55]); the difference's does not contain 0
    assert paper["verdict"] == "reproduced" and paper["parameter_ratio"] == pytest.approx(0.6)
    assert paper["difference"]["low"] > 0 and not paper["paired"] and paper["test"].startswith("Welch t")
    sharing = claims["recursive vs independent"]
    assert sharing["verdict"] == "inconclusive" and sharing["min_detectable_effect"] > 0
    centerness = claims["recursive_box_centerness vs recursive_box"]
    assert centerness["verdict"] == "untested" and "cancels in the dynamic layer's LayerNorm" in centerness["reason"]
    assert centerness["a"]["n"] == 3  # both sides still summarised for the record


def test_claims_need_learned_variants_fewer_parameters_and_two_seeds():
    unlearned = _rows((("independent", 100, (0.0, 0.01, 0.02)), ("recursive_box_centerness", 60, (0.5, 0.6, 0.7))))
    (claim,) = bench.claims(unlearned)
    assert claim["verdict"] == "untested" and claim["reason"] == (
        "independent is not learned (mean validation mAP 0.010 < 0.05)")
    larger = _rows((("independent", 100, (0.2, 0.3, 0.4)), ("recursive_box_centerness", 120, (0.5, 0.55, 0.6))))
    (claim,) = bench.claims(larger)
    assert claim["verdict"] == "untested" and "120% of independent's parameters, not fewer" in claim["reason"]
    (claim,) = bench.claims(_rows((("independent", 100, (0.3,)), ("recursive_box_centerness", 60, (0.5,)))))
    assert claim["verdict"] == "untested" and "fewer than 2 replicates" in claim["reason"]


def test_full_and_gpu_presets_tune_the_learning_rate_with_the_self_extending_grid():
    for preset in ("full", "gpu"):  # issue 39: a 3-value grid around today's value, up to 2 values added
        tuning = bench.Detection().tuning(load_config(bench.Detection(), preset)[0])
        assert (tuning.param, tuning.group, tuning.metric, tuning.maximize) == ("lr", "variant", "val_map", True)
        assert len(tuning.values) == 3 and 0.0005 in tuning.values and tuning.max_extensions == 2
        assert tuning.scale == "log"
    config = load_config(bench.Detection(), "quick", overrides=["training.max_extensions=1",
                                                                 "training.scale=linear"])[0]
    tuning = bench.Detection().tuning(config)
    assert (tuning.max_extensions, tuning.scale, list(tuning.values)) == (1, "linear", [0.0005])


def _tiny_config(tmp_path, **data):
    import yaml

    config = {"seeds": [0, 1], "model": {k: list(v) if isinstance(v, tuple) else v for k, v in TINY.items()
                                          if k != "num_classes"},
              "data": {"image_size": 32, "train_images": 8, "val_images": 4, "test_images": 4, **data},
              "training": {"steps": 2, "batch_size": 4, "lrs": [1e-3, 2e-3]}}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["detection", "--quick", "--config", str(path), "--accelerator", "cpu", "--out", str(tmp_path)]


def test_tiny_benchmark_run(tmp_path, monkeypatch):
    argv = [*_tiny_config(tmp_path), "--set", "variants=[independent, recursive_box_centerness]"]
    assert main(argv) == 0
    out = tmp_path / "detection"
    doc = json.loads((out / "results.json").read_text())
    runs = [r for r in doc["rows"] if r["kind"] == "run"]
    trials = [r for r in doc["rows"] if r["kind"] == "tuning_trial"]
    assert [(r["variant"], r["seed"]) for r in runs] == [("independent", 0), ("recursive_box_centerness", 0),
                                                         ("independent", 1), ("recursive_box_centerness", 1)]
    assert len(trials) == 4  # seed 0 of each variant tried both lrs; the chosen one is used for seed 1
    for variant in ("independent", "recursive_box_centerness"):
        chosen = doc["config"]["chosen"][variant]
        best = max((t for t in trials if t["variant"] == variant), key=lambda t: t["val_map"])
        assert chosen == best["lr"] and {r["lr"] for r in runs if r["variant"] == variant} == {chosen}
    assert runs[1]["parameters"] < runs[0]["parameters"]
    assert [("predictions" in r) for r in runs] == [False, False, True, True]  # the last seed draws
    assert doc["config"]["device"]["accelerator"] == "cpu"
    (claim,) = [r for r in doc["rows"] if r["kind"] == "claim"]
    assert claim["verdict"] in ("reproduced", "contradicted", "inconclusive", "untested")
    assert (out / "map_vs_parameters.png").stat().st_size > 0 and (out / "predictions.png").stat().st_size > 0
    report = (out / "report.md").read_text()
    assert "## Claims" in report and "How the fairness rule is met" in report
    stored = {json.loads(p.read_text())["row"]["map"] for p in (out / "runs" / "quick").glob("*.json")}
    assert len(list((out / "runs" / "quick").glob("*.json"))) == 6 and runs[0]["map"] in stored

    # --resume reuses the finished runs (training again would fail) and reports the same rows
    def no_training(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench.Detection, "run_one", staticmethod(no_training))
    assert main([*argv, "--resume"]) == 0
    again = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["kind"] == "run"]
    assert again == runs
    with pytest.raises(AssertionError, match="trained again"):
        main([*argv, "--resume", "--set", "training.steps=3"])
    with pytest.raises(AssertionError, match="trained again"):
        main(argv)


def test_benchmark_reads_coco_files_of_mixed_sizes(tmp_path):
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
    built = build_datasets(**data)
    assert built["num_classes"] == 2 and built["categories"] == ["rectangle", "ellipse"]  # from the file
    assert [len(built[k]) for k in ("train", "val", "test")] == [4, 2, 3]
    assert built["val"][1][0].shape == built["test"][0][0].shape == (3, 32, 32)  # letterboxed
    ShapesDetectionDataset(2, num_classes=3, seed=2).save_coco(tmp_path / "other")
    data["coco"]["test_annotations"] = str(tmp_path / "other" / "annotations.json")
    data["coco"]["test_image_dir"] = str(tmp_path / "other" / "images")
    with pytest.raises(ValueError, match="the test annotations have categories"):
        build_datasets(**data)


@pytest.mark.parametrize("override, match", [
    ("data.kind=coco", "needs data.coco.train_annotations"),
    ("data.kind=voc", r"(?s)config\.data\.kind.*Expected a typing\.Literal\['shapes', 'coco'\]. Got value: voc"),
    ("training.lrs=0.001", "lrs"),
    ("training.lrs=[]", "training.lrs must be a non-empty list"),
    ("variants=[independent, shared]", r"(?s)config\.variants.*Literal\['independent', .*Got value: shared"),
    ("variants=[independent, independent]", "variants must be a non-empty list of distinct values"),
    ("seeds=[1, 1]", "seeds must be"),
    ("data.image_size=0", r"(?s)config\.data\.image_size.*0 does not conform to restriction v>0"),
    ("training.lr=[0.001]", "training.lr"),
    ("training.max_extensions=-1", r"(?s)config\.training\.max_extensions.*NonNegativeInt"),
    ("training.scale=exp", r"(?s)config\.training\.scale.*Literal\['log', 'linear'\]. Got value: exp"),
])
def test_bad_config_values_name_their_key(override, match):
    with pytest.raises(ValueError, match=match):
        load_config(bench.Detection(), "quick", overrides=[override])
