"""Piano rolls drawn as images (matplotlib, the ``plot`` extra): several rolls of one passage, one panel each.

The figure is a plain :class:`matplotlib.figure.Figure` (no pyplot state, any backend).

>>> from pe_toolkit.domains.music.plotting import plot_piano_rolls
>>> fig = plot_piano_rolls({"reference": piece.roll[:64], "generated": generated[0]})  # doctest: +SKIP
>>> fig.savefig("rolls.png")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pe_toolkit.extras import require_extra

__all__ = ["VOICE_COLOURS", "plot_piano_rolls"]

VOICE_COLOURS = ((0.85, 0.1, 0.1), (0.1, 0.6, 0.1), (0.1, 0.3, 0.9), (0.5, 0.2, 0.6))
"""RGB of voice 0, 1, 2, 3 (soprano red, alto green, tenor blue, bass purple); further voices cycle."""


def plot_piano_rolls(rolls: Mapping[str, Any], *, title: str | None = None, steps_per_bar: int = 16) -> Any:
    """One panel per roll, stacked: sounding cells in their voice's colour on white, pitch upwards.

    All panels show the pitch range of their own notes (2 semitones of margin; C2-C6 for an empty roll) and a
    grey line every ``steps_per_bar`` steps.

    Args:
        rolls: ``{label: (T, V, 128) roll}`` (a tensor or array, binary or bool), in panel order.
        title: the figure's title.
        steps_per_bar: steps between bar lines (16 sixteenths: a 4/4 bar).
    Returns:
        the :class:`matplotlib.figure.Figure`.
    Raises:
        ValueError: no roll, a roll not of shape ``(T, V, 128)``, or a value other than 0 / 1.
    """
    require_extra("plot", __name__)
    import numpy as np
    from matplotlib.figure import Figure

    if not rolls:
        raise ValueError("rolls must name at least one roll")
    if isinstance(steps_per_bar, bool) or not isinstance(steps_per_bar, int) or steps_per_bar < 1:
        raise ValueError(f"steps_per_bar must be a positive int, got {steps_per_bar!r}")
    arrays = {}
    for label, roll in rolls.items():
        array = np.asarray(roll)
        if array.ndim != 3 or array.shape[-1] != 128:
            raise ValueError(f"roll {label!r} must have shape (T, V, 128), got {tuple(array.shape)}")
        if not np.isin(array, (0, 1)).all():
            raise ValueError(f"roll {label!r} must be binary (0 / 1 or bool)")
        arrays[label] = array.astype(bool)
    fig = Figure(figsize=(10, 1.7 * len(arrays)))
    axes = fig.subplots(len(arrays), 1, squeeze=False)[:, 0]
    for ax, (label, r) in zip(axes, arrays.items()):
        image = np.ones((128, r.shape[0], 3))
        for v in range(r.shape[1]):
            image[r[:, v].T] = VOICE_COLOURS[v % len(VOICE_COLOURS)]
        pitches = np.nonzero(r.any((0, 1)))[0]
        lo, hi = (max(0, int(pitches.min()) - 2), min(127, int(pitches.max()) + 2)) if len(pitches) else (36, 84)
        ax.imshow(image[lo:hi + 1], origin="lower", aspect="auto", extent=(0, r.shape[0], lo, hi + 1),
                  interpolation="nearest")
        ax.set_ylabel(label, fontsize=8)
        for x in range(0, r.shape[0], steps_per_bar):
            ax.axvline(x, color="0.8", linewidth=0.5)
    axes[-1].set_xlabel("16th-note steps")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
