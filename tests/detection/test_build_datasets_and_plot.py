"""The detection splits a benchmark or a user builds (shapes or COCO files), and the detections plot."""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.domains.detection.data import ShapesDetectionDataset, build_datasets

SIZES = {"image_size": 32, "num_classes": 2, "train_images": 6, "val_images": 2, "test_images": 3}


def test_shapes_splits_are_fixed_seeded_datasets():
    built = build_datasets("shapes", **SIZES)
    assert [len(built[k]) for k in ("train", "val", "test")] == [6, 2, 3]
    assert built["num_classes"] == 2 and built["categories"] == ["rectangle", "ellipse"]
    expected = ShapesDetectionDataset(3, image_size=32, num_classes=2, min_size=5, max_size=14, seed=2000)
    image, target = built["test"][1]
    assert torch.equal(image, expected[1][0]) and torch.equal(target["boxes"], expected[1][1]["boxes"])
    again = build_datasets("shapes", **SIZES)
    assert torch.equal(again["train"][0][0], built["train"][0][0])  # the same images every time


def test_bad_kinds_and_missing_coco_files_are_refused():
    with pytest.raises(ValueError, match="kind must be 'shapes' or 'coco', got 'voc'"):
        build_datasets("voc", **SIZES)
    with pytest.raises(ValueError, match=r"kind 'coco' needs coco\['train_annotations'\]"):
        build_datasets("coco", **SIZES)
    with pytest.raises(ValueError, match=r"needs coco\['test_annotations'\]"):
        build_datasets("coco", **SIZES, coco={"train_annotations": "a.json", "train_image_dir": "imgs"})


def test_coco_without_a_validation_file_needs_fewer_held_out_images(tmp_path):
    ShapesDetectionDataset(3, image_size=32, num_classes=2, seed=0).save_coco(tmp_path / "train")
    coco = {"train_annotations": str(tmp_path / "train" / "annotations.json"),
            "train_image_dir": str(tmp_path / "train" / "images"),
            "test_annotations": str(tmp_path / "train" / "annotations.json"),
            "test_image_dir": str(tmp_path / "train" / "images")}
    with pytest.raises(ValueError, match=r"val_images \(3\) must be below the 3 training images"):
        build_datasets("coco", **{**SIZES, "val_images": 3}, coco=coco)
    built = build_datasets("coco", **SIZES, coco=coco)
    assert [len(built[k]) for k in ("train", "val", "test")] == [1, 2, 3]


def test_plot_detections_draws_truth_and_confident_detections():
    pytest.importorskip("matplotlib")
    from pe_toolkit.domains.detection.plotting import plot_detections

    data = ShapesDetectionDataset(2, image_size=32, num_classes=2, seed=3)
    pred = {"boxes": [[1.0, 1.0, 9.0, 9.0], [2.0, 2.0, 5.0, 5.0]], "scores": [0.9, 0.1], "labels": [1, 0]}
    figure = plot_detections(data, {"a": [pred, pred], "b": [pred, pred]}, data.categories, threshold=0.3)
    axes = figure.axes
    assert len(axes) == 4 and axes[0].get_title() == "a" and axes[1].get_title() == "b"
    truth = len(data[0][1]["boxes"])
    assert len(axes[0].patches) == truth + 1  # the 0.1 detection is below the threshold
    assert [t.get_text() for t in axes[0].texts] == ["elli 0.90"]
    with pytest.raises(ValueError, match="same number of images"):
        plot_detections(data, {"a": [pred], "b": [pred, pred]}, data.categories)
    with pytest.raises(ValueError, match="at most the dataset's 2"):
        plot_detections(data, {"a": [pred] * 3}, data.categories)
