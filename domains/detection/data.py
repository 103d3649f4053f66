"""Detection data: seeded procedural shape images with COCO-format boxes, and a COCO JSON + images loader.

Every sample is ``(image, target)``: ``image (3, H, W)`` float in ``[0, 1]`` and ``target`` a dict with
``boxes (M, 4)`` float xyxy in pixels, ``labels (M,)`` long in ``[0, num_classes)`` and ``image_id`` (int).
An image without objects has ``boxes (0, 4)`` and ``labels (0,)``. COCO ``iscrowd`` regions are kept apart, in
``crowd_boxes (K, 4)`` and ``crowd_labels (K,)``: nothing trains on them, and :func:`to_coco` /
:func:`~pe_toolkit.domains.detection.metrics.coco_map` hand them to COCOeval as ``iscrowd = 1`` (a detection on a
crowd region is ignored, neither a true nor a false positive).

Images of different sizes batch after :class:`Letterbox` (scale to fit a square, keeping the aspect ratio, pad;
boxes scaled and shifted with the image; :func:`undo_letterbox` maps predictions back).

:class:`ShapesDetectionDataset` draws 1..``max_objects`` filled rectangles, ellipses and triangles (the class
is the shape, the colour is random) of random sizes on a noisy random background; objects may overlap up to
``max_overlap`` IoU (the later one occludes the earlier). :meth:`ShapesDetectionDataset.save_coco` writes
it as PNG files plus a COCO JSON, which :class:`CocoDetectionDataset` reads back (as it reads a user's own
COCO-format annotations). COCO boxes are ``[x, y, width, height]``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from pe_toolkit.atomic import atomic_write_text
from pe_toolkit.domains.detection.box_ops import box_xywh_to_xyxy, box_xyxy_to_xywh
from pe_toolkit.encoders.base import check_float, check_int

__all__ = ["SHAPE_CLASSES", "CocoDetectionDataset", "Letterbox", "ShapesDetectionDataset", "build_datasets",
           "collate_detection", "to_coco", "undo_letterbox"]

SHAPE_CLASSES = ("rectangle", "ellipse", "triangle")
_NO_BOXES = torch.zeros(0, 4)
_NO_LABELS = torch.zeros(0, dtype=torch.long)


def _shape_mask(kind: int, x1: int, y1: int, w: int, h: int, size: int) -> np.ndarray:
    """Bool ``(size, size)`` mask of a shape filling the box ``[x1, x1 + w) x [y1, y1 + h)``."""
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float64) + 0.5  # pixel centres
    u, v = (xs - x1) / w, (ys - y1) / h  # box coordinates in [0, 1]
    inside = (u >= 0) & (u <= 1) & (v >= 0) & (v <= 1)
    if kind == 0:
        return inside
    if kind == 1:
        return (u - 0.5) ** 2 + (v - 0.5) ** 2 <= 0.25
    return inside & (np.abs(u - 0.5) <= 0.5 * v)  # apex at the top centre, base along the bottom edge


def _mask_box(mask: np.ndarray) -> tuple[float, float, float, float]:
    rows, cols = np.nonzero(mask.any(1))[0], np.nonzero(mask.any(0))[0]
    return float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)


def _iou(a: Sequence[float], b: Sequence[float]) -> float:
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


class ShapesDetectionDataset(Dataset):
    """Seeded images of rectangles, ellipses and triangles with tight xyxy boxes (all generated in ``__init__``).

    Args:
        num_images: dataset size.
        image_size: square image side in pixels.
        num_classes: 1..3, the first shapes of :data:`SHAPE_CLASSES`.
        min_objects, max_objects: objects per image, drawn uniformly (``min_objects = 0`` allows empty images).
        min_size, max_size: box side range in pixels.
        max_overlap: the largest IoU allowed between two objects' boxes.
        noise: std of the Gaussian pixel noise.
        seed: everything is drawn from ``numpy.random.default_rng(seed)``.
    """

    def __init__(self, num_images: int, *, image_size: int = 64, num_classes: int = 3, min_objects: int = 1,
                 max_objects: int = 4, min_size: int = 10, max_size: int = 28, max_overlap: float = 0.3,
                 noise: float = 0.05, seed: int = 0) -> None:
        check_int("num_images", num_images)
        check_int("image_size", image_size, minimum=8)
        check_int("num_classes", num_classes)
        if num_classes > len(SHAPE_CLASSES):
            raise ValueError(f"num_classes must be <= {len(SHAPE_CLASSES)} ({SHAPE_CLASSES}), got {num_classes}")
        check_int("min_objects", min_objects, minimum=0)
        check_int("max_objects", max_objects, minimum=min_objects)
        check_int("min_size", min_size, minimum=3)
        check_int("max_size", max_size, minimum=min_size)
        if max_size > image_size:
            raise ValueError(f"max_size ({max_size}) must be <= image_size ({image_size})")
        check_float("max_overlap", max_overlap, positive=False, minimum=0.0)
        check_float("noise", noise, positive=False, minimum=0.0)
        self.image_size, self.num_classes = image_size, num_classes
        self.categories = list(SHAPE_CLASSES[:num_classes])
        rng = np.random.default_rng(seed)
        self.images: list[Tensor] = []
        self.targets: list[dict[str, Any]] = []
        for index in range(num_images):
            image, boxes, labels = self._draw(rng, image_size, num_classes, min_objects, max_objects, min_size,
                                              max_size, max_overlap, noise)
            self.images.append(torch.from_numpy(image).permute(2, 0, 1).contiguous())
            self.targets.append({"boxes": torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4),
                                 "labels": torch.tensor(labels, dtype=torch.long), "image_id": index})

    @staticmethod
    def _draw(rng: np.random.Generator, size: int, num_classes: int, min_objects: int, max_objects: int,
              min_size: int, max_size: int, max_overlap: float, noise: float):
        background = rng.uniform(0.0, 0.4, size=3)
        image = np.broadcast_to(background, (size, size, 3)).copy()
        boxes: list[tuple[float, float, float, float]] = []
        labels: list[int] = []
        wanted = int(rng.integers(min_objects, max_objects + 1))
        for _ in range(50 * max(wanted, 1)):  # rejection sampling of positions that overlap too much
            if len(boxes) == wanted:
                break
            kind = int(rng.integers(num_classes))
            w, h = (int(v) for v in rng.integers(min_size, max_size + 1, size=2))
            x1, y1 = int(rng.integers(0, size - w + 1)), int(rng.integers(0, size - h + 1))
            mask = _shape_mask(kind, x1, y1, w, h, size)
            box = _mask_box(mask)
            if any(_iou(box, other) > max_overlap for other in boxes):
                continue
            colour = rng.uniform(0.5, 1.0, size=3)  # brighter than the background
            image[mask] = colour
            boxes.append(box)
            labels.append(kind)
        image = np.clip(image + rng.normal(0.0, noise, size=image.shape), 0.0, 1.0).astype(np.float32)
        return image, boxes, labels

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[Tensor, dict[str, Any]]:
        return self.images[index], self.targets[index]

    def save_coco(self, directory: str | Path) -> Path:
        """Write ``images/<id>.png`` and ``annotations.json`` (COCO) under ``directory``; returns the JSON path."""
        from PIL import Image

        root = Path(directory)
        (root / "images").mkdir(parents=True, exist_ok=True)
        names = []
        for image, target in zip(self.images, self.targets):
            name = f"{target['image_id']:06d}.png"
            array = (image.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            Image.fromarray(array).save(root / "images" / name)
            names.append(name)
        path = root / "annotations.json"
        atomic_write_text(path, json.dumps(to_coco(self.targets, self.categories, self.image_size, self.image_size,
                                                   names)))
        return path


def to_coco(targets: Sequence[dict[str, Any]], categories: Sequence[str], height: int, width: int,
            file_names: Sequence[str] | None = None) -> dict[str, Any]:
    """A COCO detection dict (``images``, ``annotations``, ``categories``) of xyxy pixel targets.

    Category ids are ``label + 1`` and annotation ids start at 1 (COCOeval treats id 0 as "unmatched").
    A target's ``crowd_boxes`` / ``crowd_labels`` (optional) become annotations with ``iscrowd = 1``.
    """
    images, annotations = [], []
    for i, target in enumerate(targets):
        image_id = int(target["image_id"])
        images.append({"id": image_id, "width": int(width), "height": int(height),
                       "file_name": file_names[i] if file_names is not None else f"{image_id:06d}.png"})
        crowd = (target.get("crowd_boxes", _NO_BOXES), target.get("crowd_labels", _NO_LABELS))
        for iscrowd, (boxes, labels) in enumerate(((target["boxes"], target["labels"]), crowd)):
            for box, label in zip(box_xyxy_to_xywh(boxes).tolist(), labels.tolist()):
                annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": int(label) + 1,
                                    "bbox": [float(v) for v in box], "area": float(box[2] * box[3]),
                                    "iscrowd": iscrowd})
    cats = [{"id": i + 1, "name": name} for i, name in enumerate(categories)]
    return {"images": images, "annotations": annotations, "categories": cats}


class Letterbox:
    """Resize an ``(image, target)`` pair to a ``size`` x ``size`` square; boxes follow the image.

    ``keep_aspect=True`` (letterbox): scale by ``s = size / max(H, W)``, place the resized image in the centre
    and pad the rest with ``fill``; a box ``(x1, y1, x2, y2)`` becomes ``s * box + (pad_x, pad_y, pad_x, pad_y)``.
    ``keep_aspect=False``: stretch to the square (``s_x = size / W``, ``s_y = size / H``, no padding). The
    image is resampled bilinearly (``antialias=True`` when shrinking). The target gets ``letterbox =
    (s_x, s_y, pad_x, pad_y, H, W)`` for :func:`undo_letterbox`; ``boxes`` and ``crowd_boxes`` are rescaled, the
    input is not modified.

    Args:
        size: output side in pixels.
        keep_aspect: letterbox (True) or stretch (False).
        fill: padding value in ``[0, 1]``.
    """

    def __init__(self, size: int, *, keep_aspect: bool = True, fill: float = 0.0) -> None:
        self.size = check_int("size", size, minimum=8)
        if not isinstance(keep_aspect, bool):
            raise TypeError(f"keep_aspect must be a bool, got {type(keep_aspect).__name__}")
        self.keep_aspect = keep_aspect
        self.fill = check_float("fill", fill, positive=False, minimum=0.0)
        if self.fill > 1.0:
            raise ValueError(f"fill must lie in [0, 1], got {fill}")

    def geometry(self, height: int, width: int) -> tuple[float, float, float, float, int, int]:
        """``(s_x, s_y, pad_x, pad_y, new_h, new_w)`` for an ``height`` x ``width`` image."""
        if self.keep_aspect:
            scale = self.size / max(height, width)
            new_h, new_w = max(1, round(height * scale)), max(1, round(width * scale))
            return new_w / width, new_h / height, (self.size - new_w) // 2, (self.size - new_h) // 2, new_h, new_w
        return self.size / width, self.size / height, 0, 0, self.size, self.size

    def __call__(self, image: Tensor, target: dict[str, Any]) -> tuple[Tensor, dict[str, Any]]:
        if not isinstance(image, Tensor) or image.dim() != 3:
            raise ValueError(f"Letterbox: image must be a (C, H, W) tensor, got {getattr(image, 'shape', image)!r}")
        height, width = image.shape[-2:]
        sx, sy, pad_x, pad_y, new_h, new_w = self.geometry(height, width)
        resized = torch.nn.functional.interpolate(image[None].float(), size=(new_h, new_w), mode="bilinear",
                                                  align_corners=False, antialias=new_h < height or new_w < width)[0]
        out = torch.full((image.shape[0], self.size, self.size), self.fill, dtype=resized.dtype)
        out[:, pad_y:pad_y + new_h, pad_x:pad_x + new_w] = resized.clamp(0.0, 1.0)
        scale = torch.tensor([sx, sy, sx, sy])
        shift = torch.tensor([pad_x, pad_y, pad_x, pad_y], dtype=torch.float32)
        new = dict(target)
        for key in ("boxes", "crowd_boxes"):
            if key in target:
                new[key] = target[key] * scale + shift
        new["letterbox"] = (sx, sy, float(pad_x), float(pad_y), int(height), int(width))
        return out, new


def undo_letterbox(boxes: Tensor, letterbox: Sequence[float]) -> Tensor:
    """Boxes ``(K, 4)`` xyxy in letterboxed pixels back to the original image (the inverse of :class:`Letterbox`)."""
    if len(letterbox) != 6:
        raise ValueError(f"letterbox must be (s_x, s_y, pad_x, pad_y, H, W), got {letterbox!r}")
    sx, sy, pad_x, pad_y = (float(v) for v in letterbox[:4])
    shift = boxes.new_tensor([pad_x, pad_y, pad_x, pad_y])
    return (boxes - shift) / boxes.new_tensor([sx, sy, sx, sy])


def _is_coco_id(value: Any) -> bool:
    """An id is an int (not a bool) or a float with an integer value (some tools write ``1.0``)."""
    return (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and value.is_integer())


def _coco_id(value: Any, what: str) -> int:
    if not _is_coco_id(value):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    return int(value)


class CocoDetectionDataset(Dataset):
    """A user's COCO-format detection annotations (JSON) plus an image folder.

    Categories are mapped to contiguous labels ``0..C-1`` in increasing category id (``self.categories``
    holds their names, ``num_classes`` their count). ``iscrowd`` annotations are kept apart as
    ``crowd_boxes`` / ``crowd_labels`` (nothing trains on them; COCOeval ignores detections on them, see the
    module docstring). Images are read with Pillow as RGB when accessed, then passed through ``transform``.

    Every box must lie inside its image: an annotation whose box leaves the image by more than
    ``box_tolerance`` pixels on any side is rejected (boxes are never clipped silently). The image size is the
    file's (read from its header up front); an ``images`` entry's ``width`` / ``height``, when given, must agree.

    Args:
        annotation_file: the COCO JSON (``images`` with ``id`` and ``file_name``; ``annotations`` with ``id``,
            ``image_id``, ``category_id``, ``bbox`` = ``[x, y, w, h]``; ``categories`` with ``id``, ``name``).
        image_dir: folder that ``file_name`` is relative to.
        transform: ``(image, target) -> (image, target)``, e.g. :class:`Letterbox` to batch mixed sizes.
        box_tolerance: pixels a box may extend past the image border (annotation tools round; default 1).

    Raises:
        FileNotFoundError: for a missing JSON, folder, or image file (checked up front).
        ValueError: for malformed JSON or annotations (missing keys, unknown image or category ids, a bbox that
            is not four finite numbers, has a negative width / height or lies outside its image), naming the
            file and the annotation.
    """

    def __init__(self, annotation_file: str | Path, image_dir: str | Path, *, transform=None,
                 box_tolerance: float = 1.0) -> None:
        path, self.image_dir = Path(annotation_file), Path(image_dir)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable (image, target) -> (image, target), got "
                            f"{type(transform).__name__}")
        self.transform = transform
        tolerance = check_float("box_tolerance", box_tolerance, positive=False, minimum=0.0)
        if not path.is_file():
            raise FileNotFoundError(f"annotation_file {str(path)!r} does not exist")
        if not self.image_dir.is_dir():
            raise FileNotFoundError(f"image_dir {str(self.image_dir)!r} is not a folder")
        try:
            data = json.loads(path.read_text(encoding="utf-8-sig"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"annotation_file {str(path)!r} is not valid JSON: {err}") from err
        where = f"annotation_file {str(path)!r}"
        if not isinstance(data, dict) or not {"images", "annotations", "categories"} <= set(data):
            keys = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"{where} must hold 'images', 'annotations' and 'categories', got {keys}")
        for key in ("images", "annotations", "categories"):
            if not isinstance(data[key], list):
                raise ValueError(f"{where}: {key!r} must be a list, got {type(data[key]).__name__}")
        try:
            cat_list = [_coco_id(c["id"], "category id") for c in data["categories"]]
            names = {_coco_id(c["id"], "category id"): str(c.get("name", c["id"])) for c in data["categories"]}
            image_list = [_coco_id(im["id"], "image id") for im in data["images"]]
            self.file_names = {_coco_id(im["id"], "image id"): str(im["file_name"]) for im in data["images"]}
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{where}: every category needs an integer 'id' and every image an integer 'id' and a "
                             f"'file_name' ({err!r})") from err
        for what, ids in (("category", cat_list), ("image", image_list)):
            if len(set(ids)) != len(ids):
                repeated = sorted({i for i in ids if ids.count(i) > 1})
                raise ValueError(f"{where}: {what} id(s) {repeated} appear more than once")
        cat_ids = sorted(cat_list)
        self.cat_to_label = {cid: i for i, cid in enumerate(cat_ids)}
        self.categories = [names[c] for c in cat_ids]
        self.image_ids = sorted(self.file_names)
        self.sizes = self._image_sizes(data["images"], where)
        kept: dict[int, dict[str, list]] = {i: {"boxes": [], "labels": [], "crowd_boxes": [], "crowd_labels": []}
                                            for i in self.image_ids}
        for ann in data["annotations"]:
            ident = ann.get("id", "?") if isinstance(ann, dict) else "?"
            if not isinstance(ann, dict) or not {"image_id", "category_id", "bbox"} <= set(ann):
                raise ValueError(f"{where}: annotation {ident} needs 'image_id', 'category_id' and 'bbox', got {ann!r}")
            if not _is_coco_id(ann["image_id"]) or ann["image_id"] not in kept:
                raise ValueError(f"{where}: annotation {ident}: image_id {ann['image_id']!r} is not in 'images'")
            if not _is_coco_id(ann["category_id"]) or ann["category_id"] not in self.cat_to_label:
                raise ValueError(f"{where}: annotation {ident}: category_id {ann['category_id']!r} is not in "
                                 f"'categories' {cat_ids}")
            bbox = ann["bbox"]
            if (not isinstance(bbox, list) or len(bbox) != 4
                    or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)
                               for v in bbox)):
                raise ValueError(f"{where}: annotation {ident}: bbox must be four finite numbers [x, y, w, h], got "
                                 f"{bbox!r}")
            if bbox[2] < 0 or bbox[3] < 0:
                raise ValueError(f"{where}: annotation {ident}: bbox width and height must be >= 0, got {bbox!r}")
            height, width = self.sizes[int(ann["image_id"])]
            x, y, w, h = bbox
            if x < -tolerance or y < -tolerance or x + w > width + tolerance or y + h > height + tolerance:
                raise ValueError(f"{where}: annotation {ident}: bbox {bbox!r} lies outside its image "
                                 f"{self.file_names[int(ann['image_id'])]!r} ({width} x {height} pixels, tolerance "
                                 f"{tolerance} px)")
            crowd = ann.get("iscrowd", 0)
            if crowd not in (0, 1, True, False):
                raise ValueError(f"{where}: annotation {ident}: iscrowd must be 0 or 1, got {crowd!r}")
            prefix = "crowd_" if crowd else ""
            kept[int(ann["image_id"])][f"{prefix}boxes"].append(bbox)
            kept[int(ann["image_id"])][f"{prefix}labels"].append(self.cat_to_label[ann["category_id"]])
        self.targets = []
        for i in self.image_ids:
            target: dict[str, Any] = {"image_id": i}
            for prefix in ("", "crowd_"):
                target[f"{prefix}boxes"] = box_xywh_to_xyxy(
                    torch.tensor(kept[i][f"{prefix}boxes"], dtype=torch.float32).reshape(-1, 4))
                target[f"{prefix}labels"] = torch.tensor(kept[i][f"{prefix}labels"], dtype=torch.long)
            self.targets.append(target)

    def _image_sizes(self, images: list[dict[str, Any]], where: str) -> dict[int, tuple[int, int]]:
        """``{image id: (height, width)}`` from each file's header, checked against the JSON's width / height."""
        from PIL import Image, UnidentifiedImageError

        sizes = {}
        for entry in images:
            image_id = int(entry["id"])
            file = self.image_dir / self.file_names[image_id]
            if not file.is_file():
                raise FileNotFoundError(f"image {self.file_names[image_id]!r} (id {image_id}) not found in "
                                        f"{str(self.image_dir)!r}")
            try:
                with Image.open(file) as im:
                    width, height = im.size
            except (UnidentifiedImageError, OSError) as err:
                raise ValueError(f"{where}: image {str(file)!r} (id {image_id}) cannot be read: {err}") from err
            for key, value in (("width", width), ("height", height)):
                if key in entry and entry[key] != value:
                    raise ValueError(f"{where}: image {image_id} ({self.file_names[image_id]!r}) has {key} "
                                     f"{entry[key]!r} in the JSON but {value} in the file")
            sizes[image_id] = (height, width)
        return sizes

    @property
    def num_classes(self) -> int:
        return len(self.categories)

    def __len__(self) -> int:
        return len(self.image_ids)

    def __getitem__(self, index: int) -> tuple[Tensor, dict[str, Any]]:
        from PIL import Image

        image_id = self.image_ids[index]
        with Image.open(self.image_dir / self.file_names[image_id]) as im:
            array = np.asarray(im.convert("RGB"), dtype=np.float32) / 255.0
        image, target = torch.from_numpy(array).permute(2, 0, 1).contiguous(), self.targets[index]
        return self.transform(image, target) if self.transform is not None else (image, target)


def collate_detection(batch: Sequence[tuple[Tensor, dict[str, Any]]]) -> tuple[Tensor, list[dict[str, Any]]]:
    """Stack same-sized images ``(B, 3, H, W)`` and keep the targets as a list.

    Raises:
        ValueError: if the images do not all have the same size (no silent resizing or padding).
    """
    images = [image for image, _ in batch]
    shapes = {tuple(image.shape) for image in images}
    if len(shapes) != 1:
        raise ValueError(f"collate_detection: images must all have the same shape, got {sorted(shapes)}; give the "
                         "dataset a transform such as Letterbox(size) to batch images of different sizes")
    return torch.stack(images), [target for _, target in batch]


def build_datasets(kind: str, *, image_size: int, num_classes: int, train_images: int, val_images: int,
                   test_images: int, coco: dict[str, str | None] | None = None) -> dict[str, Any]:
    """Fixed train / validation / test splits: ``{"train", "val", "test", "num_classes", "categories"}``.

    Args:
        kind: ``"shapes"``: :class:`ShapesDetectionDataset` splits of ``train_images`` / ``val_images`` /
            ``test_images`` images of side ``image_size`` with ``num_classes`` shape classes (seeds 1000, 1500,
            2000; object sides 10/64 to 28/64 of the image). ``"coco"``: the COCO files named in ``coco``
            (``{train,val,test}_annotations`` and ``{train,val,test}_image_dir``; the val pair may be ``None``),
            every split letterboxed to ``image_size``; the class count is the categories' (``num_classes`` and
            the image counts other than ``val_images`` are not used).
        val_images: coco without a validation file: the last ``val_images`` training images are held out for
            validation.

    Raises:
        ValueError: an unknown ``kind``, a coco split missing, ``val_images`` not below the training images when
            they are held out, or splits whose categories differ.

    Example:
        >>> splits = build_datasets("shapes", image_size=32, num_classes=2, train_images=4, val_images=2,
        ...                         test_images=2)
        >>> [len(splits[k]) for k in ("train", "val", "test")], splits["categories"]
        ([4, 2, 2], ['rectangle', 'ellipse'])
    """
    from torch.utils.data import Subset

    if kind == "shapes":
        options = {"image_size": image_size, "num_classes": num_classes,
                   "min_size": max(3, round(image_size * 10 / 64)), "max_size": max(3, round(image_size * 28 / 64))}
        train = ShapesDetectionDataset(train_images, seed=1000, **options)
        return {"train": train, "val": ShapesDetectionDataset(val_images, seed=1500, **options),
                "test": ShapesDetectionDataset(test_images, seed=2000, **options),
                "num_classes": train.num_classes, "categories": train.categories}
    if kind != "coco":
        raise ValueError(f"build_datasets: kind must be 'shapes' or 'coco', got {kind!r}")
    coco = coco or {}
    for split in ("train", "test"):
        if not coco.get(f"{split}_annotations") or not coco.get(f"{split}_image_dir"):
            raise ValueError(f"build_datasets: kind 'coco' needs coco['{split}_annotations'] and "
                             f"coco['{split}_image_dir'], got {coco!r}")
    letterbox = Letterbox(image_size)
    train = CocoDetectionDataset(coco["train_annotations"], coco["train_image_dir"], transform=letterbox)
    test = CocoDetectionDataset(coco["test_annotations"], coco["test_image_dir"], transform=letterbox)
    if coco.get("val_annotations"):
        val = CocoDetectionDataset(coco["val_annotations"], coco["val_image_dir"], transform=letterbox)
        fit = train
    else:
        if val_images >= len(train):
            raise ValueError(f"build_datasets: val_images ({val_images}) must be below the {len(train)} training "
                             "images when no validation file is given")
        cut = len(train) - val_images
        fit, val = Subset(train, range(cut)), Subset(train, range(cut, len(train)))
    for name, other in (("test", test), ("val", val.dataset if isinstance(val, Subset) else val)):
        if other.categories != train.categories:
            raise ValueError(f"the {name} annotations have categories {other.categories}, the training annotations "
                             f"{train.categories}; every split needs the same categories")
    return {"train": fit, "val": val, "test": test, "num_classes": train.num_classes, "categories": train.categories}
