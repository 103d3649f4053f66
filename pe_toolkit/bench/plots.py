"""Plot helpers for benchmark figures: missing metrics drawn as gaps, empty panels labelled."""

from __future__ import annotations

from typing import Any

__all__ = ["EMPTY_PANEL_REASON", "has_finite_data", "nan_if_missing", "note_if_empty"]

EMPTY_PANEL_REASON = "a --quick run may train too little to measure it"
"""The second line of :func:`note_if_empty`'s note unless it is given another ``reason``."""


def nan_if_missing(value: Any) -> float:
    """``value`` as a float, with ``None`` (a metric that was not measured) as NaN.

    For plots: matplotlib leaves NaN points and bars out, so a missing metric is not drawn as a
    zero bar; :func:`note_if_empty` then tells an axes with nothing left.
    """
    return float("nan") if value is None else float(value)


def _all_finite(points: Any) -> bool:
    import numpy as np

    array = np.ma.filled(np.ma.asarray(points, dtype=float), np.nan)
    return array.size > 0 and bool(np.isfinite(array).all())


def _any_finite(values: Any) -> bool:
    import numpy as np

    array = np.ma.filled(np.ma.asarray(values, dtype=float), np.nan)
    return bool(np.isfinite(array).any())


def _any_finite_row(points: Any) -> bool:
    import numpy as np

    array = np.ma.filled(np.ma.asarray(points, dtype=float), np.nan)
    if array.size == 0:
        return False
    return bool(np.isfinite(array.reshape(len(array), -1)).all(axis=1).any())


def has_finite_data(ax: Any) -> bool:
    """Whether ``ax`` shows at least one finite data point.

    Counted: lines (a point with finite x and y), bars and other patches (all corners finite),
    scatter points and line collections (error bars), images (a finite pixel), all in data
    coordinates. Not counted: reference lines drawn across the axes (``axhline``, ``axvline``,
    whose transform is not the data transform), texts and legends.
    """
    data = ax.transData
    for line in ax.lines:
        if line.get_transform().contains_branch(data) and _any_finite_row(line.get_xydata()):
            return True
    for patch in ax.patches:
        if not patch.get_transform().contains_branch(data):
            continue
        corners = patch.get_patch_transform().transform(patch.get_path().vertices)
        if _all_finite(corners):
            return True
    for collection in ax.collections:
        offsets = collection.get_offsets()
        if len(offsets) and collection.get_offset_transform().contains_branch(data):
            if _any_finite_row(offsets):
                return True
        elif collection.get_transform().contains_branch(data):
            if any(_all_finite(path.vertices) for path in collection.get_paths()):
                return True
    for image in ax.images:
        array = image.get_array()
        if array is not None and _any_finite(array):
            return True
    return False


def note_if_empty(ax: Any, what: str, *, reason: str | None = None) -> bool:
    """Write a centred note on ``ax`` when it shows no finite data; return whether it did.

    A metric that is NaN or ``None`` in every row (quick runs often train too little to measure
    it) otherwise leaves empty axes that look like a broken plot. The note reads
    ``no finite values of <what> in this run`` and, on a second line, ``reason`` (default
    :data:`EMPTY_PANEL_REASON`). Call it after drawing the data and before ``ax.legend``
    (skip the legend when it returns True: there is nothing to label), and after setting the
    axis scales: a log-scaled axis of an empty panel is switched back to linear, since matplotlib
    cannot place log ticks without data and would fail when the figure is saved. The figure is
    still written; the run stays valid.

    Args:
        ax: a matplotlib ``Axes``; what counts as data is :func:`has_finite_data`.
        what: the metric, e.g. ``"passkey accuracy"``.
    Returns:
        True if the note was written (the axes had no finite data), False otherwise.
    """
    if has_finite_data(ax):
        return False
    for axis, set_scale in ((ax.xaxis, ax.set_xscale), (ax.yaxis, ax.set_yscale)):
        if axis.get_scale() in ("log", "logit"):
            set_scale("linear")
    text = f"no finite values of {what} in this run\n({EMPTY_PANEL_REASON if reason is None else reason})"
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=8, color="0.35",
            wrap=True, gid="note_if_empty")
    return True

