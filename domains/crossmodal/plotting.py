"""Sounding-video clips drawn as pictures (matplotlib, the ``plot`` extra): frames over time and the spectrogram;
:func:`encode_picture` stores such a picture compactly in JSON (a benchmark's results) and :func:`decode_picture`
reads it back.

The figure is a plain :class:`matplotlib.figure.Figure` (no pyplot state, any backend).

>>> from pe_toolkit.domains.crossmodal import generate_clips
>>> from pe_toolkit.domains.crossmodal.plotting import plot_clips
>>> clips = generate_clips(2, seed=0)
>>> fig = plot_clips({"real": (clips.video[0], clips.audio[0])})  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from pe_toolkit.extras import require_extra

__all__ = ["decode_picture", "encode_picture", "plot_clips"]


def encode_picture(x: torch.Tensor) -> dict[str, Any]:
    """A tensor in [-1, 1] as 255 grey levels: ``{"shape", "int8_base64"}`` (one byte per value, base64).

    Values outside [-1, 1] are stored at the ends, as ``imshow(vmin=-1, vmax=1)`` draws them.

    Example:
        >>> encode_picture(torch.tensor([[-1.0, 0.0, 1.0]]))
        {'shape': [1, 3], 'int8_base64': 'gQB/'}
    """
    import base64

    levels = (x.detach().cpu().clamp(-1, 1) * 127).round().to(torch.int8)
    return {"shape": list(x.shape), "int8_base64": base64.b64encode(levels.numpy().tobytes()).decode("ascii")}


def decode_picture(encoded: dict[str, Any]) -> Any:
    """The float32 numpy array of :func:`encode_picture` (values in [-1, 1], steps of 1/127)."""
    import base64

    import numpy as np

    raw = np.frombuffer(base64.b64decode(encoded["int8_base64"]), dtype=np.int8)
    return raw.reshape(encoded["shape"]).astype(np.float32) / 127


def plot_clips(clips: Mapping[str, tuple[Any, Any]]) -> Any:
    """One row per named clip: its video frames side by side (a strip over time) and its spectrogram.

    Args:
        clips: ``{name: (video (T_v, H, W), audio (T_a, F))}``, tensors or arrays with values in [-1, 1] (drawn
            with that grey / colour range; values outside it at the ends).

    Raises:
        ValueError: no clip, or a video / audio of the wrong rank.
    """
    if not clips:
        raise ValueError("plot_clips: clips must name at least one clip")
    require_extra("plot", __name__)
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 1.6 * len(clips)))
    axes = fig.subplots(len(clips), 2, squeeze=False, gridspec_kw={"width_ratios": [3, 1]})
    for row, (name, (video, audio)) in enumerate(clips.items()):
        frames, spectrogram = torch.as_tensor(video), torch.as_tensor(audio)
        if frames.dim() != 3 or spectrogram.dim() != 2:
            raise ValueError(f"plot_clips: clip {name!r} needs video (T_v, H, W) and audio (T_a, F), got shapes "
                             f"{tuple(frames.shape)} and {tuple(spectrogram.shape)}")
        strip = frames.permute(1, 0, 2).reshape(frames.shape[1], -1)  # (H, T_v * W)
        axes[row, 0].imshow(strip.numpy(), cmap="gray", vmin=-1, vmax=1, aspect="auto")
        axes[row, 0].set_ylabel(name, fontsize=7)
        axes[row, 1].imshow(spectrogram.T.numpy(), origin="lower", aspect="auto", vmin=-1, vmax=1)
        for ax in axes[row]:
            ax.set_xticks([])
            ax.set_yticks([])
    axes[0, 0].set_title("video frames over time")
    axes[0, 1].set_title("spectrogram")
    fig.tight_layout()
    return fig
