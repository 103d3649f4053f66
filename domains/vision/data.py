"""Images for the vision domain, offline: a seeded procedural dataset renderable at any resolution, and ImageFolder.

:class:`ShapeRelations` draws scenes in continuous coordinates (the unit square) and renders them at any
pixel size, so one scene can be shown to a model at 32, 48, 64 or 96 pixels. The label is a *spatial
relation*: where the blue square sits relative to the red disc (right, left, below, above: the dominant
axis of their offset). The two shapes' sizes vary by a factor of 2.5 and their distance by a factor of
about 5, distractor shapes (other colours) clutter the scene, and the background tint varies, so the
relation must be read across patches at several scales; without positions a model can only guess
(25 %).

:class:`ImageFolderDataset` reads a user's folder in torchvision's ImageFolder layout
(``root/<class>/<image>``, classes sorted by name) with Pillow (the ``vision`` extra);
:func:`save_image_folder` writes a dataset in that layout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import Dataset

from pe_toolkit.encoders.base import check_int

CLASSES = ("right", "left", "below", "above")
"""Where the square is relative to the disc (image rows grow downwards)."""

ANCHOR_COLOURS = {"disc": (0.9, 0.15, 0.1), "square": (0.1, 0.3, 0.95)}
DISTRACTOR_COLOURS = ((0.1, 0.8, 0.2), (0.95, 0.85, 0.1), (0.85, 0.2, 0.85), (0.1, 0.85, 0.85))
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".ppm", ".tif", ".tiff")

__all__ = ["CLASSES", "ImageFolderDataset", "Scene", "Shape", "ShapeRelations", "make_scene", "render_scene",
           "save_image_folder"]


@dataclass(frozen=True)
class Shape:
    """One shape in unit coordinates: ``kind`` ``"disc"``, ``"square"`` or ``"triangle"``, centre ``(x, y)``
    (``y`` downwards), ``size`` (radius / half side), RGB ``colour`` in [0, 1]."""

    kind: str
    x: float
    y: float
    size: float
    colour: tuple[float, float, float]


@dataclass(frozen=True)
class Scene:
    """Shapes painted in order over a ``background`` colour, and the class index of the relation."""

    shapes: tuple[Shape, ...]
    background: tuple[float, float, float]
    label: int


def _size_pair(name: str, value: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return check_int(name, value), value
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) and len(value) == 2:
        return check_int(f"{name}[0]", value[0]), check_int(f"{name}[1]", value[1])
    raise TypeError(f"{name} must be an int or (height, width), got {value!r}")


def make_scene(seed: int, index: int, *, max_distractors: int = 3) -> Scene:
    """Scene ``index`` of the seeded family ``seed`` (deterministic; no global random state used).

    The disc and the square do not overlap, each lies inside the image, and the dominant axis of
    their offset wins by at least 0.05 (so the label is never a coin flip at the boundary).
    """
    check_int("seed", seed, minimum=0)
    check_int("index", index, minimum=0)
    check_int("max_distractors", max_distractors, minimum=0)
    g = torch.Generator().manual_seed(seed * 1_000_003 + index)

    def uniform(low: float, high: float) -> float:
        return low + (high - low) * float(torch.rand((), generator=g, dtype=torch.float64))

    while True:
        r_disc, r_square = uniform(0.06, 0.15), uniform(0.06, 0.15)
        disc = (uniform(r_disc, 1 - r_disc), uniform(r_disc, 1 - r_disc))
        square = (uniform(r_square, 1 - r_square), uniform(r_square, 1 - r_square))
        dx, dy = square[0] - disc[0], square[1] - disc[1]
        apart = math.hypot(dx, dy) > (r_disc + r_square * math.sqrt(2)) + 0.02
        if apart and abs(abs(dx) - abs(dy)) >= 0.05:
            break
    label = (0 if dx > 0 else 1) if abs(dx) > abs(dy) else (2 if dy > 0 else 3)
    shapes = []
    count = int(torch.randint(0, max_distractors + 1, (), generator=g)) if max_distractors else 0
    for _ in range(count):
        kind = ("disc", "square", "triangle")[int(torch.randint(0, 3, (), generator=g))]
        colour = DISTRACTOR_COLOURS[int(torch.randint(0, len(DISTRACTOR_COLOURS), (), generator=g))]
        size = uniform(0.04, 0.12)
        shapes.append(Shape(kind, uniform(size, 1 - size), uniform(size, 1 - size), size, colour))
    anchors = [Shape("disc", *disc, r_disc, ANCHOR_COLOURS["disc"]),
               Shape("square", *square, r_square, ANCHOR_COLOURS["square"])]
    if float(torch.rand((), generator=g)) < 0.5:
        anchors.reverse()
    tint = tuple(uniform(0.05, 0.35) for _ in range(3))
    return Scene(tuple(shapes + anchors), tint, label)  # anchors painted last: never hidden by a distractor


def _coverage(shape: Shape, x: Tensor, y: Tensor) -> Tensor:
    dx, dy = x - shape.x, y - shape.y
    if shape.kind == "disc":
        return (dx.square() + dy.square() <= shape.size**2).float()
    if shape.kind == "square":
        return ((dx.abs() <= shape.size) & (dy.abs() <= shape.size)).float()
    # an upright isosceles triangle inscribed in the square of half side `size`
    top, bottom = shape.y - shape.size, shape.y + shape.size
    half_width = shape.size * (y - top) / (bottom - top)
    return ((y >= top) & (y <= bottom) & (dx.abs() <= half_width)).float()


def render_scene(scene: Scene, image_size: int | Sequence[int], *, supersample: int = 4) -> Tensor:
    """The scene as an RGB image ``(3, H, W)`` float32 in ``[0, 1]``, anti-aliased.

    Each pixel averages ``supersample x supersample`` samples of the continuous scene, so a scene
    rendered at 64 pixels and box-downsampled to 32 is close to its 32-pixel rendering.
    """
    height, width = _size_pair("image_size", image_size)
    check_int("supersample", supersample)
    ys = (torch.arange(height * supersample, dtype=torch.float32) + 0.5) / (height * supersample)
    xs = (torch.arange(width * supersample, dtype=torch.float32) + 0.5) / (width * supersample)
    y, x = torch.meshgrid(ys, xs, indexing="ij")
    image = torch.tensor(scene.background, dtype=torch.float32).view(3, 1, 1).expand(3, *y.shape).clone()
    rows, cols = y.shape
    for shape in scene.shapes:
        # only the samples inside the shape's bounding box can change (a shape covers a few % of the image)
        r0, r1 = (max(0, int((shape.y - shape.size) * rows) - 1), min(rows, int((shape.y + shape.size) * rows) + 2))
        c0, c1 = (max(0, int((shape.x - shape.size) * cols) - 1), min(cols, int((shape.x + shape.size) * cols) + 2))
        if r0 >= r1 or c0 >= c1:
            continue
        mask = _coverage(shape, x[r0:r1, c0:c1], y[r0:r1, c0:c1])
        colour = torch.tensor(shape.colour, dtype=torch.float32).view(3, 1, 1)
        window = image[:, r0:r1, c0:c1]
        image[:, r0:r1, c0:c1] = window * (1 - mask) + colour * mask
    return F.avg_pool2d(image.unsqueeze(0), supersample)[0]


class ShapeRelations(Dataset):
    """``num_samples`` seeded scenes rendered at ``image_size``: items ``(image (3, H, W), label)``.

    Args:
        num_samples: how many scenes (indices ``offset .. offset + num_samples - 1`` of family ``seed``).
        image_size: pixels, an int or ``(height, width)``; the same scenes at any size.
        seed: the scene family; different seeds give disjoint-looking datasets (use one per split).
        offset: the first scene index (e.g. a test split of the same family).
        max_distractors: up to this many distractor shapes per scene (3).

    Attributes:
        images: ``(N, 3, H, W)`` float32, rendered once at construction.
        labels: ``(N,)`` long, indices into :data:`CLASSES`.

    Example:
        >>> data = ShapeRelations(4, 32, seed=0)
        >>> data[0][0].shape, data.classes
        (torch.Size([3, 32, 32]), ('right', 'left', 'below', 'above'))
    """

    classes = CLASSES

    def __init__(self, num_samples: int, image_size: int | Sequence[int] = 32, *, seed: int = 0, offset: int = 0,
                 max_distractors: int = 3) -> None:
        self.num_samples = check_int("num_samples", num_samples)
        self.image_size = _size_pair("image_size", image_size)
        self.seed = check_int("seed", seed, minimum=0)
        self.offset = check_int("offset", offset, minimum=0)
        self.max_distractors = check_int("max_distractors", max_distractors, minimum=0)
        self.scenes = [make_scene(seed, offset + i, max_distractors=max_distractors) for i in range(num_samples)]
        self.images = torch.stack([render_scene(s, self.image_size) for s in self.scenes])
        self.labels = torch.tensor([s.label for s in self.scenes], dtype=torch.long)

    def at_resolution(self, image_size: int | Sequence[int]) -> ShapeRelations:
        """The same scenes rendered at another size."""
        return ShapeRelations(self.num_samples, image_size, seed=self.seed, offset=self.offset,
                              max_distractors=self.max_distractors)

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return self.images[index], int(self.labels[index])


class ImageFolderDataset(Dataset):
    """Images in ImageFolder layout, ``root/<class name>/<file>``, read with Pillow: ``(image (3, H, W), label)``.

    Classes are the sub-folders sorted by name (label ``i`` = ``classes[i]``), files sorted within each;
    only files with an image extension count. Images are converted to RGB and, with ``image_size``, resized
    (bicubic) to it; values are float32 in ``[0, 1]``.

    Args:
        root: the folder.
        image_size: an int or ``(height, width)``; ``None`` keeps each image's own size (then batch only
            images of one size).

    Raises:
        ValueError: ``root`` is not a folder, has no class sub-folders, or a class has no image; reading an
            item whose file is not a readable image (corrupt, truncated, not an image) names the file.
        ImportError: Pillow is missing (the ``vision`` extra).
    """

    def __init__(self, root: str | Path, image_size: int | Sequence[int] | None = None) -> None:
        from pe_toolkit.extras import require_extra

        require_extra("vision", "pe_toolkit.domains.vision.data.ImageFolderDataset")
        self.root = Path(root)
        if not self.root.is_dir():
            raise ValueError(f"root {str(self.root)!r} is not a folder (expected root/<class>/<image files>)")
        self.image_size = None if image_size is None else _size_pair("image_size", image_size)
        self.classes = tuple(sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")))
        if not self.classes:
            raise ValueError(f"root {str(self.root)!r} has no class sub-folders (expected root/<class>/<image files>)")
        self.samples: list[tuple[Path, int]] = []
        for label, name in enumerate(self.classes):
            files = sorted(p for p in (self.root / name).iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
            if not files:
                raise ValueError(f"class folder {str(self.root / name)!r} holds no image "
                                 f"(extensions {', '.join(IMAGE_EXTENSIONS)})")
            self.samples += [(path, label) for path in files]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        from PIL import Image

        path, label = self.samples[index]
        try:
            with Image.open(path) as image:
                image = image.convert("RGB")  # decodes the pixels: a truncated file fails here
                if self.image_size is not None:
                    height, width = self.image_size
                    image = image.resize((width, height), Image.Resampling.BICUBIC)
                pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
                tensor = pixels.view(image.height, image.width, 3).permute(2, 0, 1).float() / 255.0
        except (OSError, ValueError, SyntaxError) as error:  # PIL: UnidentifiedImageError, truncated data, bad headers
            raise ValueError(f"ImageFolderDataset: {str(path)!r} (item {index}, class {self.classes[label]!r}) is "
                             f"not a readable image ({type(error).__name__}: {error})") from error
        return tensor, label


def save_image_folder(dataset: Dataset, root: str | Path, classes: Sequence[str] | None = None) -> Path:
    """Write ``dataset``'s ``(image (3, H, W) in [0, 1], label)`` items as PNGs in ImageFolder layout.

    Files are ``root/<class>/<index>.png`` (``classes`` default: ``dataset.classes``); returns ``root``.
    """
    from pe_toolkit.extras import require_extra

    require_extra("vision", "pe_toolkit.domains.vision.data.save_image_folder")
    from PIL import Image

    root = Path(root)
    names = tuple(classes if classes is not None else dataset.classes)
    for index in range(len(dataset)):
        image, label = dataset[index]
        folder = root / names[int(label)]
        folder.mkdir(parents=True, exist_ok=True)
        pixels = (image.clamp(0, 1) * 255).round().to(torch.uint8).permute(1, 2, 0).contiguous().numpy()
        Image.fromarray(pixels).save(folder / f"{index:06d}.png")
    return root
