"""Procedural shapes, the COCO loader (round trip and bad files), COCO mAP on constructed cases, Lightning."""

from __future__ import annotations

import json

import pytest
import torch

from pe_toolkit.domains.detection.data import (
    CocoDetectionDataset,
    Letterbox,
    ShapesDetectionDataset,
    collate_detection,
    undo_letterbox,
)
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


def test_coco_loader_maps_categories_and_keeps_crowd_apart(tmp_path):
    ds = CocoDetectionDataset(_write(tmp_path, GOOD), tmp_path / "img")
    _, target = ds[0]
    assert ds.categories == ["x", "y"] and ds.num_classes == 2 and target["labels"].tolist() == [1]
    torch.testing.assert_close(target["boxes"], torch.tensor([[1.0, 2.0, 4.0, 6.0]]))
    assert target["crowd_labels"].tolist() == [0]  # kept for the metric, never a training target
    torch.testing.assert_close(target["crowd_boxes"], torch.tensor([[0.0, 0.0, 5.0, 5.0]]))


@pytest.mark.parametrize("bbox, ok", [([60, 60, 4.9, 4.9], True), ([63, 10, 1.9, 3], True), ([63, 10, 2.5, 3], False),
                                      ([-1.5, 0, 3, 3], False), ([200, 200, 10, 10], False)])
def test_coco_loader_rejects_a_box_outside_its_image(tmp_path, bbox, ok):
    data = json.loads(json.dumps(GOOD))
    data["annotations"][0]["id"] = 17
    data["annotations"][0]["bbox"] = bbox  # the image is 64 x 64; the tolerance is 1 pixel
    path = _write(tmp_path, data)
    if ok:
        assert CocoDetectionDataset(path, tmp_path / "img")[0][1]["boxes"].shape == (1, 4)
        return
    with pytest.raises(ValueError, match=r"ann\.json'.*annotation 17: bbox .* lies outside its image 'a\.png' "
                                         r"\(64 x 64 pixels"):
        CocoDetectionDataset(path, tmp_path / "img")


def test_coco_loader_checks_the_json_image_size_against_the_file(tmp_path):
    data = json.loads(json.dumps(GOOD))
    data["images"][0].update(width=64, height=48)
    with pytest.raises(ValueError, match="image 7 \\('a.png'\\) has height 48 in the JSON but 64 in the file"):
        CocoDetectionDataset(_write(tmp_path, data), tmp_path / "img")
    data["images"][0]["height"] = 64
    assert len(CocoDetectionDataset(_write(tmp_path, data), tmp_path / "img")) == 1


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
    with pytest.raises(ValueError, match="same shape.*Letterbox"):
        collate_detection([(torch.zeros(3, 8, 8), {}), (torch.zeros(3, 8, 9), {})])


def test_letterbox_scales_pads_and_moves_the_boxes():
    image = torch.full((3, 20, 40), 0.25)  # H = 20, W = 40 -> scale 0.8, 16 x 32, padded 8 rows above and below
    target = {**_t([[10, 5, 20, 15]], [0]), "crowd_boxes": torch.tensor([[0.0, 0.0, 40.0, 20.0]]),
              "crowd_labels": torch.tensor([1])}
    out, moved = Letterbox(32, fill=1.0)(image, target)
    assert out.shape == (3, 32, 32) and moved["letterbox"] == (0.8, 0.8, 0.0, 8.0, 20, 40)
    torch.testing.assert_close(moved["boxes"], torch.tensor([[8.0, 12.0, 16.0, 20.0]]))
    torch.testing.assert_close(moved["crowd_boxes"], torch.tensor([[0.0, 8.0, 32.0, 24.0]]))
    torch.testing.assert_close(out[:, 8:24], torch.full((3, 16, 32), 0.25))  # resampling keeps a constant image
    assert (out[:, :8] == 1.0).all() and (out[:, 24:] == 1.0).all()
    torch.testing.assert_close(undo_letterbox(moved["boxes"], moved["letterbox"]), target["boxes"])
    assert torch.equal(target["boxes"], torch.tensor([[10.0, 5.0, 20.0, 15.0]]))  # the input is not modified
    stretched, moved = Letterbox(32, keep_aspect=False)(image, target)
    assert stretched.shape == (3, 32, 32) and moved["letterbox"] == (0.8, 1.6, 0.0, 0.0, 20, 40)
    torch.testing.assert_close(moved["boxes"], torch.tensor([[8.0, 8.0, 16.0, 24.0]]))
    with pytest.raises(ValueError, match="size must be"):
        Letterbox(4)
    with pytest.raises(ValueError, match="fill must lie in"):
        Letterbox(32, fill=2.0)
    with pytest.raises(ValueError, match="letterbox must be"):
        undo_letterbox(moved["boxes"], (1.0, 1.0))


def test_mixed_image_sizes_batch_after_letterbox(tmp_path):
    from PIL import Image

    (tmp_path / "img").mkdir()
    Image.new("RGB", (40, 20)).save(tmp_path / "img" / "wide.png")
    Image.new("RGB", (16, 32)).save(tmp_path / "img" / "tall.png")
    data = {"images": [{"id": 1, "file_name": "wide.png"}, {"id": 2, "file_name": "tall.png"}],
            "categories": [{"id": 1, "name": "a"}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 5, 10, 10]},
                            {"id": 2, "image_id": 2, "category_id": 1, "bbox": [0, 0, 16, 32]}]}
    (tmp_path / "ann.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="same shape"):
        collate_detection([CocoDetectionDataset(tmp_path / "ann.json", tmp_path / "img")[i] for i in range(2)])
    ds = CocoDetectionDataset(tmp_path / "ann.json", tmp_path / "img", transform=Letterbox(32))
    images, targets = collate_detection([ds[0], ds[1]])
    assert images.shape == (2, 3, 32, 32)
    torch.testing.assert_close(targets[0]["boxes"], torch.tensor([[8.0, 12.0, 16.0, 20.0]]))
    torch.testing.assert_close(targets[1]["boxes"], torch.tensor([[8.0, 0.0, 24.0, 32.0]]))  # 16 x 32 -> pad_x 8
    with pytest.raises(TypeError, match="transform must be callable"):
        CocoDetectionDataset(tmp_path / "ann.json", tmp_path / "img", transform=32)


def test_crowd_regions_are_ignored_as_cocoeval_ignores_them():
    # one object and a large crowd region; a detection inside the crowd (IoU with it = intersection over the
    # detection's area = 1) scores above the true positive: ignored it leaves AP = 1, as a false positive AP50 = 1/2
    target = {**_t([[50, 50, 60, 60]], [0]), "crowd_boxes": torch.tensor([[0.0, 0.0, 40.0, 40.0]]),
              "crowd_labels": torch.tensor([0])}
    prediction = _p([[5, 5, 15, 15], [50, 50, 60, 60]], [0.95, 0.9], [0, 0])
    assert coco_map([prediction], [target], num_classes=1)["map_50"] == pytest.approx(1.0)
    dropped = {k: target[k] for k in ("boxes", "labels")}
    assert coco_map([prediction], [dropped], num_classes=1)["map_50"] == pytest.approx(0.5, abs=0.01)
    # a crowd region nobody detects is no false negative either
    assert coco_map([_p([[50, 50, 60, 60]], [0.9], [0])], [target], num_classes=1)["map"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="both 'crowd_boxes' and 'crowd_labels'"):
        coco_map([prediction], [{**dropped, "crowd_boxes": target["crowd_boxes"]}], num_classes=1)
    with pytest.raises(ValueError, match="crowd_labels must lie in"):
        coco_map([prediction], [{**target, "crowd_labels": torch.tensor([3])}], num_classes=1)


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
