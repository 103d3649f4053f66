"""Detections drawn on images (matplotlib, the ``plot`` extra): several models' predictions side by side.

The figure is a plain :class:`matplotlib.figure.Figure` (no pyplot state, any backend).

>>> from pe_toolkit.domains.detection.plotting import plot_detections
>>> fig = plot_detections(test_set, {"recursive": model_predictions}, test_set.categories)  # doctest: +SKIP
>>> fig.savefig("predictions.png")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pe_toolkit.extras import require_extra

__all__ = ["plot_detections"]

COLOURS = ("tab:red", "tab:green", "tab:blue")


def plot_detections(dataset: Any, predictions: Mapping[str, Sequence[Mapping[str, Sequence[Any]]]],
                    categories: Sequence[str], *, threshold: float = 0.3) -> Any:
    """One column per model, one row per image: image ``i`` of ``dataset`` with its ground-truth boxes (white,
    dashed) and the model's ``predictions[model][i]`` with score >= ``threshold`` (coloured by class, labelled).

    Args:
        dataset: ``dataset[i] -> (image (3, H, W) in [0, 1], {"boxes": (M, 4) xyxy, ...})`` as the detection datasets.
        predictions: per model, one dict per image with ``boxes`` (xyxy), ``scores`` and ``labels`` (lists or
            tensors), as :meth:`~pe_toolkit.domains.detection.RecursiveDetector.predict` returns; every model the same
            number of images.
        categories: the class names (``labels`` index them).

    Raises:
        ValueError: no model, or models with different numbers of images, or more images than ``dataset`` has.
    """
    require_extra("plot", __name__)
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    counts = {name: len(per_image) for name, per_image in predictions.items()}
    if not counts or len(set(counts.values())) != 1 or next(iter(counts.values())) > len(dataset):
        raise ValueError(f"predictions must give every model the same number of images (at most the dataset's "
                         f"{len(dataset)}), got {counts}")
    rows, cols = next(iter(counts.values())), len(counts)
    fig = Figure(figsize=(2.6 * cols, 2.6 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for col, (name, per_image) in enumerate(predictions.items()):
        for row, pred in enumerate(per_image):
            ax = axes[row][col]
            image, target = dataset[row]
            ax.imshow(image.permute(1, 2, 0).numpy())
            for x1, y1, x2, y2 in target["boxes"].tolist():
                ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, ec="white", ls="--", lw=1))
            for (x1, y1, x2, y2), score, label in zip(pred["boxes"], pred["scores"], pred["labels"]):
                if score >= threshold:
                    colour = COLOURS[int(label) % len(COLOURS)]
                    ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, ec=colour, lw=1.5))
                    ax.text(x1, y1, f"{categories[int(label)][:4]} {float(score):.2f}", color=colour, fontsize=6,
                            va="bottom")
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(name, fontsize=8)
    fig.suptitle(f"ground truth (white, dashed), detections with score >= {threshold}", fontsize=9)
    fig.tight_layout()
    return fig
