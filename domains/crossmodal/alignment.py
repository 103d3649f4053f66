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

AV-Align rewards events that coincide by chance, so a generator that draws many events scores well above zero
without aligning anything. :func:`chance_floor` scores the same clips re-paired (clip ``i``'s audio with clip
``i + 1``'s video): the same event counts, no shared time line. ``AV-Align - floor`` is the alignment itself.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["audio_onsets", "av_align", "av_align_batch", "chance_floor", "reference_levels", "video_motion_peaks"]

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


def _check_clip(owner: str, name: str, value, dims: int, layout: str) -> None:
    """A finite real tensor with ``dims`` dimensions: NaN would compare False with every threshold and count
    as "no event", so a corrupted clip would score as a silent one instead of failing."""
    if not isinstance(value, Tensor) or value.dtype == torch.bool or value.is_complex():
        got = getattr(value, "dtype", type(value).__name__)
        raise TypeError(f"{owner}: {name} must be a real tensor {layout}, got {got}")
    if value.dim() != dims:
        raise ValueError(f"{owner}: {name} must have shape {layout}, got {tuple(value.shape)}")
    if value.is_floating_point() and not bool(torch.isfinite(value).all()):
        bad = (~torch.isfinite(value)).nonzero()[0].tolist()
        raise ValueError(f"{owner}: {name} holds NaN or inf ({int((~torch.isfinite(value)).sum())} of "
                         f"{value.numel()} entries, first at {bad}); a non-finite clip has no events to align")


def _check_threshold(owner: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{owner}: {name} must be a finite number, got {value!r}")


def audio_onsets(spectrogram: Tensor, *, threshold: float = AUDIO_THRESHOLD, radius: int = 2) -> list[int]:
    """Onset frames of one spectrogram ``(T_a, F)``: frame ``t`` where the flux from ``t-1`` to ``t`` peaks.

    Raises:
        ValueError: ``spectrogram`` not 2-D or holding NaN / inf; a non-finite ``threshold``.
    """
    _check_clip("audio_onsets", "spectrogram", spectrogram, 2, "(T_a, F)")
    _check_threshold("audio_onsets", "threshold", threshold)
    flux = (spectrogram[1:] - spectrogram[:-1]).clamp(min=0).sum(-1)
    return [i + 1 for i in _local_peaks(flux, threshold, radius)]


def video_motion_peaks(video: Tensor, *, threshold: float = VIDEO_THRESHOLD, radius: int = 1) -> list[int]:
    """Frames of one video ``(T_v, H, W)`` (values in ``[-1, 1]``) where the object's acceleration peaks.

    Raises:
        ValueError: ``video`` not 3-D or holding NaN / inf; a non-finite ``threshold``.
    """
    _check_clip("video_motion_peaks", "video", video, 3, "(T_v, H, W)")
    _check_threshold("video_motion_peaks", "threshold", threshold)
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
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0 \
            or not math.isfinite(tolerance):
        raise ValueError(f"av_align: tolerance must be a finite number >= 0, got {tolerance!r}")
    for name, times in (("onsets", onsets), ("peaks", peaks)):
        bad = [t for t in times if not math.isfinite(t)]
        if bad:
            raise ValueError(f"av_align: {name} must be finite event times, got {bad[:5]}")
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
        ValueError: different numbers of clips, or no clips; ``video`` or ``audio`` of the wrong rank or
            holding NaN / inf (a NaN clip would otherwise score as a clip without events).
    """
    _check_clip("av_align_batch", "video", video, 4, "(N, T_v, H, W)")
    _check_clip("av_align_batch", "audio", audio, 3, "(N, T_a, F)")
    if video.shape[0] != audio.shape[0]:
        raise ValueError(f"av_align_batch: video has {video.shape[0]} clips but audio has {audio.shape[0]}")
    if video.shape[0] == 0:
        raise ValueError("av_align_batch: no clips")
    if audio.shape[1] == 0 or video.shape[1] == 0:
        raise ValueError(f"av_align_batch: empty time axis: video {tuple(video.shape)}, audio {tuple(audio.shape)}")
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


def chance_floor(video: Tensor, audio: Tensor, **options: float) -> dict[str, float]:
    """:func:`av_align_batch` of the clips re-paired: clip ``i``'s audio with clip ``i + 1``'s video (cyclically).

    Event counts stay those of the clips, and no pair shares a time line: the score of these event statistics
    without any alignment. ``options`` go to :func:`av_align_batch`.

    Raises:
        ValueError: fewer than 2 clips (nothing to re-pair with), or what :func:`av_align_batch` refuses.

    Example:
        >>> from pe_toolkit.domains.crossmodal import generate_clips
        >>> clips = generate_clips(16, seed=1)
        >>> real, floor = av_align_batch(clips.video, clips.audio), chance_floor(clips.video, clips.audio)
        >>> floor["av_align"] < 0.5 < real["av_align"], floor["audio_events"] == real["audio_events"]
        (True, True)
    """
    if video.shape[0] < 2:
        raise ValueError(f"chance_floor: needs >= 2 clips to re-pair, got {video.shape[0]}")
    return av_align_batch(torch.roll(video, 1, dims=0), audio, **options)


def reference_levels(video: Tensor, audio: Tensor) -> dict[str, float]:
    """Real clips' levels: ``{"real", "shuffled", "real_audio_events", "real_video_events"}``, the AV-Align as drawn
    (the ceiling) and re-paired (:func:`chance_floor`), and the events per clip."""
    real = av_align_batch(video, audio)
    return {"real": real["av_align"], "shuffled": chance_floor(video, audio)["av_align"],
            "real_audio_events": real["audio_events"], "real_video_events": real["video_events"]}
