"""Procedural shapes, the COCO loader (round trip and bad files), COCO mAP on constructed cases, Lightning."""

from __future__ import annotations

import json

import pytest
import torch

from pe_toolkit.domains.detection.data import CocoDetectionDataset, ShapesDetectionDataset, collate_detection
from pe_toolkit.domains.detection.metrics import coco_map


def _t(boxes, labels):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4), "labels": torch.tensor(labels).long()}


def _p(boxes, scores, labels):
    return {**_t(boxes, labels), "scores": torch.tensor(scores, dtype=torch.float32)}


def test_shapes_are_seeded_and_boxes_are_tight():
    a, b = ShapesDetectionDataset(6, seed=3), ShapesDetectionDataset(6, seed=3)
    c = ShapesDetectionDataset(6, seed=4)
    assert torch.equal(a[0][0], b[0][0]) and not torch.equal(a[0][0], c[0][0])
    for image, target in a:
        assert image.shape == (3, 64, 64) and 0 <= image.min() and image.max() <= 1
        boxes, labels = target["boxes"], target["labels"]
        assert 1 <= len(labels) <= 4 and labels.max() < 3
        assert (boxes[:, 2:] > boxes[:, :2]).all() and boxes.min() >= 0 and boxes.max() <= 64
        sizes = boxes[:, 2:] - boxes[:, :2]
        assert (sizes >= 3).all() and (sizes <= 28).all()


def test_rectangles_fill_their_box():
    ds = ShapesDetectionDataset(20, num_classes=1, noise=0.0, max_objects=1, seed=0)
    image, target = ds[0]
    x1, y1, x2, y2 = (int(v) for v in target["boxes"][0])
    inside = image[:, y1:y2, x1:x2]
    assert torch.equal(inside, inside[:, :1, :1].expand_as(inside))  # one colour inside the box
    assert not torch.equal(image[:, y1 - 1 if y1 else y2, x1], inside[:, 0, 0])


def test_empty_images_are_allowed():
    ds = ShapesDetectionDataset(10, min_objects=0, max_objects=0)
    assert all(t["boxes"].shape == (0, 4) and t["labels"].shape == (0,) for _, t in ds)


def test_dataset_errors():
    with pytest.raises(ValueError, match="num_classes must be <= 3"):
        ShapesDetectionDataset(2, num_classes=4)
    with pytest.raises(ValueError, match="max_size"):
        ShapesDetectionDataset(2, image_size=16, max_size=20)
    with pytest.raises(ValueError, match="max_objects must be >= 3"):
        ShapesDetectionDataset(2, min_objects=3, max_objects=2)


def test_coco_round_trip(tmp_path):
    ds = ShapesDetectionDataset(4, seed=1, min_objects=0)
    path = ds.save_coco(tmp_path)
    loaded = CocoDetectionDataset(path, tmp_path / "images")
    assert len(loaded) == 4 and loaded.categories == ["rectangle", "ellipse", "triangle"]
    for (img_a, tgt_a), (img_b, tgt_b) in zip(ds, loaded):
        torch.testing.assert_close(img_b, img_a, atol=0.5 / 255 + 1e-6, rtol=0)  # 8-bit PNG quantisation
        torch.testing.assert_close(tgt_b["boxes"], tgt_a["boxes"])
        assert torch.equal(tgt_b["labels"], tgt_a["labels"])
    images, targets = collate_detection([loaded[0], loaded[1]])
    assert images.shape == (2, 3, 64, 64) and len(targets) == 2


def _write(tmp_path, data, image=True):
    (tmp_path / "img").mkdir(exist_ok=True)
    if image:
        ShapesDetectionDataset(1).save_coco(tmp_path / "src")
        (tmp_path / "img" / "a.png").write_bytes((tmp_path / "src" / "images" / "000000.png").read_bytes())
    path = tmp_path / "ann.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


GOOD = {"images": [{"id": 7, "file_name": "a.png"}], "categories": [{"id": 3, "name": "x"}, {"id": 9, "name": "y"}],
        "annotations": [{"id": 1, "image_id": 7, "category_id": 9, "bbox": [1, 2, 3, 4]},
                        {"id": 2, "image_id": 7, "category_id": 3, "bbox": [0, 0, 5, 5], "iscrowd": 1}]}


def test_coco_loader_maps_categories_and_skips_crowd(tmp_path):
    ds = CocoDetectionDataset(_write(tmp_path, GOOD), tmp_path / "img")
    _, target = ds[0]
    assert ds.categories == ["x", "y"] and target["labels"].tolist() == [1]
    torch.testing.assert_close(target["boxes"], torch.tensor([[1.0, 2.0, 4.0, 6.0]]))


@pytest.mark.parametrize("mutate, error, message", [
    (lambda d: d.pop("categories"), ValueError, "must hold 'images'"),
    (lambda d: d["annotations"][0].update(bbox=[1, 2, -3, 4]), ValueError, "width and height must be >= 0"),
    (lambda d: d["annotations"][0].update(bbox=[1, 2, 3]), ValueError, "four finite numbers"),
    (lambda d: d["annotations"][0].update(image_id=99), ValueError, "image_id 99 is not in 'images'"),
    (lambda d: d["annotations"][0].update(category_id=5), ValueError, "category_id 5 is not in 'categories'"),
    (lambda d: d["images"][0].update(file_name="missing.png"), FileNotFoundError, "missing.png"),
])
def test_coco_loader_errors(tmp_path, mutate, error, message):
    data = json.loads(json.dumps(GOOD))
    mutate(data)
    with pytest.raises(error, match=message):
        CocoDetectionDataset(_write(tmp_path, data), tmp_path / "img")


def test_coco_loader_bad_files(tmp_path):
    with pytest.raises(ValueError, match="not valid JSON"):
        CocoDetectionDataset(_write(tmp_path, "{oops", image=False), tmp_path / "img")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        CocoDetectionDataset(tmp_path / "nope.json", tmp_path)


def test_collate_rejects_mixed_sizes():
    with pytest.raises(ValueError, match="same shape"):
        collate_detection([(torch.zeros(3, 8, 8), {}), (torch.zeros(3, 8, 9), {})])


TARGETS = [_t([[0, 0, 10, 10], [20, 20, 40, 40]], [0, 1]), _t([], []), _t([[5, 5, 25, 30]], [0])]


def test_map_perfect_predictions_is_one():
    preds = [_p(t["boxes"].tolist(), [0.9] * len(t["labels"]), t["labels"].tolist()) for t in TARGETS]
    result = coco_map(preds, TARGETS, num_classes=2)
    assert result == pytest.approx({"map": 1.0, "map_50": 1.0, "map_75": 1.0})


def test_map_without_predictions_is_zero():
    preds = [_p([], [], []) for _ in TARGETS]
    assert coco_map(preds, TARGETS, num_classes=2) == {"map": 0.0, "map_50": 0.0, "map_75": 0.0}


def test_map_half_right():
    # class 0 (two objects): both found -> AP 1; class 1 (one object): predicted with the wrong box -> AP 0
    preds = [_p([[0, 0, 10, 10], [50, 50, 60, 60]], [0.9, 0.8], [0, 1]), _p([], [], []),
             _p([[5, 5, 25, 30]], [0.7], [0])]
    assert coco_map(preds, TARGETS, num_classes=2) == pytest.approx({"map": 0.5, "map_50": 0.5, "map_75": 0.5})


def test_map_iou_thresholds():
    # one object, one detection with IoU 0.6: counted at IoU 0.5, 0.55, 0.6 -> AP50 = 1, AP75 = 0, mAP = 3/10
    targets = [_t([[0, 0, 10, 10]], [0])]
    preds = [_p([[0, 0, 10, 6]], [0.9], [0])]
    result = coco_map(preds, targets, num_classes=1)
    assert result == pytest.approx({"map": 0.3, "map_50": 1.0, "map_75": 0.0})


def test_map_errors():
    with pytest.raises(ValueError, match="no image has a ground-truth object"):
        coco_map([_p([], [], [])], [_t([], [])], num_classes=1)
    with pytest.raises(ValueError, match="2 predictions for 1 targets"):
        coco_map([_p([], [], [])] * 2, [_t([[0, 0, 1, 1]], [0])], num_classes=1)
    with pytest.raises(ValueError, match="labels must lie in"):
        coco_map([_p([[0, 0, 1, 1]], [0.5], [3])], [_t([[0, 0, 1, 1]], [0])], num_classes=1)
    with pytest.raises(ValueError, match="negative width"):
        coco_map([_p([[2, 0, 1, 1]], [0.5], [0])], [_t([[0, 0, 1, 1]], [0])], num_classes=1)
