"""Two robots' views drawn in robot a's frame (matplotlib, the ``plot`` extra): the true and predicted alignments.

The figure is a plain :class:`matplotlib.figure.Figure` (no pyplot state, any backend).

>>> from pe_toolkit.domains.multirobot.plotting import plot_alignment
>>> from pe_toolkit.domains.multirobot.simulator import simulate_pairs
>>> pair = simulate_pairs(1, seed=0)[0]
>>> fig = plot_alignment(pair, {"truth again": pair.pose})  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pe_toolkit.domains.multirobot.geometry import from_frame
from pe_toolkit.domains.multirobot.simulator import PairSample, SimConfig
from pe_toolkit.extras import require_extra

__all__ = ["plot_alignment"]

STYLES = (("x", "tab:red"), ("^", "tab:purple"), ("+", "tab:orange"), ("s", "tab:brown"), ("v", "tab:pink"))


def plot_alignment(pair: PairSample, predictions: Mapping[str, Sequence[float] | None], *,
                   config: SimConfig | None = None, title: str = "Two robots' views: true vs. predicted alignment"
                   ) -> Any:
    """Robot a's field-of-view cone and detections; robot b's cone and detections mapped by the true ``T_ab``;
    and b's detections mapped by each method's predicted pose.

    Args:
        pair: the two observations and the true pose ``T_ab`` (b's frame to a's).
        predictions: ``{method: pose (x, y, theta) or None}``; ``None`` (the method decided "no overlap") is
            listed in the legend and not drawn. At most ``len(STYLES)`` methods.
        config: the simulator whose field of view is drawn (default ``SimConfig()``).

    Raises:
        ValueError: more methods than styles, or a pose that is not 3 numbers.
    """
    if len(predictions) > len(STYLES):
        raise ValueError(f"plot_alignment: at most {len(STYLES)} methods, got {len(predictions)}")
    require_extra("plot", __name__)
    from matplotlib.figure import Figure

    config = config or SimConfig()
    fig = Figure(figsize=(7, 6))
    ax = fig.subplots()
    arc = np.linspace(-config.fov_angle / 2, config.fov_angle / 2, 30)
    cone = np.concatenate([[[0.0, 0.0]], config.fov_range * np.stack([np.cos(arc), np.sin(arc)], 1), [[0.0, 0.0]]])
    ax.plot(cone[:, 0], cone[:, 1], color="tab:blue", lw=1, label="robot a's cone")
    b_cone = from_frame(pair.pose, cone)
    ax.plot(b_cone[:, 0], b_cone[:, 1], color="tab:green", lw=1, label="robot b's cone (true pose)")
    ax.scatter(*pair.a.positions.T, s=40, color="tab:blue", label="a's detections")
    ax.scatter(*from_frame(pair.pose, pair.b.positions).T, s=90, facecolors="none", edgecolors="tab:green",
               label="b's detections, true T_ab")
    for (name, pose), (marker, colour) in zip(predictions.items(), STYLES):
        if pose is None:
            ax.plot([], [], " ", label=f"{name}: no overlap decided")
            continue
        pose = np.asarray(pose, dtype=float)
        if pose.shape != (3,):
            raise ValueError(f"plot_alignment: the pose of {name!r} must be (x, y, theta), got shape {pose.shape}")
        ax.scatter(*from_frame(pose, pair.b.positions).T, marker=marker, s=60, color=colour,
                   label=f"b's detections, {name}")
    ax.set_aspect("equal")
    ax.set(xlabel="x in robot a's frame (m)", ylabel="y (m)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig
