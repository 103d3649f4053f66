"""Plot helpers for benchmark figures: missing metrics drawn as gaps, empty panels labelled."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EMPTY_PANEL_REASON", "finish", "has_finite_data", "interval_errors", "nan_if_missing", "new_figure",
           "note_if_empty", "plot_intervals"]

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



def new_figure(nrows: int = 1, ncols: int = 1, *, size: tuple[float, float] = (6.5, 4.0)) -> tuple[Any, Any]:
    """``(figure, axes)`` on the file-only Agg backend; ``axes`` is always a 2-D array (``axes[row][col]``).

    ``size`` is one panel's (width, height) in inches; the figure is ``ncols`` x ``nrows`` panels.
    """
    for name, value in (("nrows", nrows), ("ncols", ncols)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False)


def interval_errors(sides: Sequence[Mapping[str, Any] | None]) -> tuple[list[float], list[list[float]]]:
    """``(means, [below, above])`` for ``ax.errorbar`` from summary dicts (``mean``, ``low``, ``high``).

    A missing side or mean is NaN (not drawn); a missing interval (one seed) is a zero error bar.
    """
    means, below, above = [], [], []
    for side in sides:
        mean = nan_if_missing(None if side is None else side.get("mean"))
        low = nan_if_missing(None if side is None else side.get("low"))
        high = nan_if_missing(None if side is None else side.get("high"))
        means.append(mean)
        below.append(mean - low if math.isfinite(low) and math.isfinite(mean) else 0.0)
        above.append(high - mean if math.isfinite(high) and math.isfinite(mean) else 0.0)
    return means, [below, above]


def plot_intervals(ax: Any, xs: Sequence[Any], sides: Sequence[Mapping[str, Any] | None], **kwargs: Any) -> Any:
    """Means with their interval as error bars at ``xs`` (``kwargs`` go to ``ax.errorbar``: label, fmt, ...)."""
    if len(xs) != len(sides):
        raise ValueError(f"xs has {len(xs)} values but sides has {len(sides)}")
    means, errors = interval_errors(sides)
    kwargs.setdefault("capsize", 3)
    kwargs.setdefault("marker", "o")
    return ax.errorbar(list(xs), means, yerr=errors, **kwargs)


def finish(fig: Any, what: str, *, legend: bool = True, reason: str | None = None, **legend_options: Any) -> Any:
    """Close out a figure: every panel with no finite data gets :func:`note_if_empty`'s note (about ``what``),
    the others a legend (``legend=True``; only where something is labelled); then ``tight_layout``. Returns it."""
    legend_options.setdefault("fontsize", 8)
    for ax in fig.axes:
        if not note_if_empty(ax, what, reason=reason) and legend and ax.get_legend_handles_labels()[1]:
            ax.legend(**legend_options)
    fig.tight_layout()
    return fig
