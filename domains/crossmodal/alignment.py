"""Audio-video alignment: audio onsets, video motion peaks, and the AV-Align score.

AV-Align (Yariv et al. 2024, "Diverse and Aligned Audio-to-Video Generation via Text-to-Video Model
Adaptation", arXiv:2309.16429; used by Ishii et al. 2024, arXiv:2409.17550,
``py_scripts/evaluation/av_align.py``) compares audio onsets with video motion peaks:

* ``p1``: the share of audio onsets within ``tolerance`` frames of a video peak,
* ``p2``: the share of video peaks within ``tolerance`` frames of an audio onset,
* ``AV-Align = p1 p2 / (p1 + p2 - p1 p2)`` (an IoU of the two hit rates).

The reference uses librosa onsets and optical-flow peaks. Here, for one bright object on a dark
background: audio onsets are peaks of the spectral flux (sum over bins of the positive frame-to-frame
increase of the log spectrogram); video peaks are peaks of the change of the object's velocity
``|v_t - v_{t-1}|``, with the position the intensity-weighted centroid of each frame (a bounce is a
peak of this acceleration, as it is a jump of the optical flow). When only one modality has events the
score is 0.0; when neither has any it is undefined (``nan``), and :func:`av_align_batch` averages over the
clips where it is defined and reports the share of such silent clips.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["audio_onsets", "av_align", "av_align_batch", "video_motion_peaks"]

AUDIO_THRESHOLD = 5.0   # spectral flux (16 bins in [-1, 1]): background ~0-3, a click ~8-16 on the toy data
VIDEO_THRESHOLD = 0.15  # pixels / frame^2: a wall bounce changes one velocity component by 0.5-1.2


def _local_peaks(signal: Tensor, threshold: float, radius: int) -> list[int]:
    """Indices where ``signal (T,)`` exceeds ``threshold`` and is the maximum of its ``+-radius`` window."""
    if signal.numel() == 0:
        return []
    padded = torch.nn.functional.pad(signal[None, None], (radius, radius), value=float("-inf"))
    window_max = torch.nn.functional.max_pool1d(padded, 2 * radius + 1, stride=1)[0, 0]
    mask = (signal >= window_max) & (signal > threshold)
    return mask.nonzero().flatten().tolist()


def audio_onsets(spectrogram: Tensor, *, threshold: float = AUDIO_THRESHOLD, radius: int = 2) -> list[int]:
    """Onset frames of one spectrogram ``(T_a, F)``: frame ``t`` where the flux from ``t-1`` to ``t`` peaks."""
    if spectrogram.dim() != 2:
        raise ValueError(f"audio_onsets: spectrogram must have shape (T_a, F), got {tuple(spectrogram.shape)}")
    flux = (spectrogram[1:] - spectrogram[:-1]).clamp(min=0).sum(-1)
    return [i + 1 for i in _local_peaks(flux, threshold, radius)]


def video_motion_peaks(video: Tensor, *, threshold: float = VIDEO_THRESHOLD, radius: int = 1) -> list[int]:
    """Frames of one video ``(T_v, H, W)`` (values in ``[-1, 1]``) where the object's acceleration peaks."""
    if video.dim() != 3:
        raise ValueError(f"video_motion_peaks: video must have shape (T_v, H, W), got {tuple(video.shape)}")
    weight = ((video.float() + 1) / 2).clamp(min=0) ** 2
    total = weight.sum(dim=(1, 2)).clamp(min=1e-6)
    ys = torch.arange(video.shape[1], dtype=torch.float32)
    xs = torch.arange(video.shape[2], dtype=torch.float32)
    centroid = torch.stack(((weight.sum(2) * ys).sum(1) / total, (weight.sum(1) * xs).sum(1) / total), dim=-1)
    velocity = centroid[1:] - centroid[:-1]                        # (T_v - 1, 2): v_t between frames t and t+1
    accel = (velocity[1:] - velocity[:-1]).norm(dim=-1)           # (T_v - 2,): at frame t + 1
    return [i + 1 for i in _local_peaks(accel, threshold, radius)]


def av_align(onsets: list[float], peaks: list[float], *, tolerance: float = 1.0) -> float:
    """AV-Align of event times on one time axis (video frames): ``p1 p2 / (p1 + p2 - p1 p2)``.

    ``nan`` when there are no events at all (undefined), 0.0 when only one modality has events.
    """
    if tolerance < 0:
        raise ValueError(f"av_align: tolerance must be >= 0, got {tolerance}")
    if not onsets and not peaks:
        return math.nan
    if not onsets or not peaks:
        return 0.0
    a, v = torch.tensor(onsets, dtype=torch.float64), torch.tensor(peaks, dtype=torch.float64)
    close = (a[:, None] - v[None, :]).abs() <= tolerance + 1e-9
    p1 = float(close.any(1).double().mean())
    p2 = float(close.any(0).double().mean())
    return 0.0 if p1 + p2 == 0 else p1 * p2 / (p1 + p2 - p1 * p2)


def av_align_batch(video: Tensor, audio: Tensor, *, tolerance: float = 1.0, audio_threshold: float = AUDIO_THRESHOLD,
                   video_threshold: float = VIDEO_THRESHOLD) -> dict[str, float]:
    """Mean AV-Align of clips ``video (N, T_v, H, W)`` and ``audio (N, T_a, F)``, onsets mapped to video frames.

    Returns ``{"av_align", "audio_events", "video_events", "silent_clips"}``: the mean AV-Align over the clips
    with at least one event (``nan`` if none has any), mean events per clip, and the share of clips without
    any event.

    Raises:
        ValueError: different numbers of clips, or no clips.
    """
    if video.dim() != 4 or audio.dim() != 3:
        raise ValueError(f"av_align_batch: expected video (N, T_v, H, W) and audio (N, T_a, F), got "
                         f"{tuple(video.shape)} and {tuple(audio.shape)}")
    if video.shape[0] != audio.shape[0]:
        raise ValueError(f"av_align_batch: video has {video.shape[0]} clips but audio has {audio.shape[0]}")
    if video.shape[0] == 0:
        raise ValueError("av_align_batch: no clips")
    scale = video.shape[1] / audio.shape[1]
    scores, n_audio, n_video = [], 0, 0
    for v, a in zip(video, audio):
        onsets = [t * scale for t in audio_onsets(a, threshold=audio_threshold)]
        peaks = [float(t) for t in video_motion_peaks(v, threshold=video_threshold)]
        scores.append(av_align(onsets, peaks, tolerance=tolerance))
        n_audio += len(onsets)
        n_video += len(peaks)
    n = video.shape[0]
    defined = [x for x in scores if not math.isnan(x)]
    return {"av_align": sum(defined) / len(defined) if defined else math.nan, "audio_events": n_audio / n,
            "video_events": n_video / n, "silent_clips": (n - len(defined)) / n}
