"""A seeded sounding-video toy: a bouncing ball whose wall bounces click in the soundtrack.

Testbed 9 of the domain-paper notes for Ishii et al. 2024, "A Simple but Strong Baseline for Sounding
Video Generation", arXiv:2409.17550 (their data, Greatest Hits, is 8 fps video of hits with their sounds;
it cannot be downloaded here). Each clip has:

* **video** ``(T_v, H, W)`` in ``[-1, 1]``: a Gaussian blob moving at constant speed inside the frame and
  reflecting off the walls;
* **audio** ``(T_a, F)``: the log-magnitude STFT (``torch.stft``) of a waveform made of low background
  noise plus, at the exact (sub-frame) time of each bounce, a click, an exponentially decaying sinusoid
  whose pitch is drawn per click; scaled to roughly ``[-1, 1]``;
* **bounces**: the bounce times in video frames (float).

The audio frame rate is ``T_a / T_v`` times the video frame rate, so the two modalities have different
time axes (CMC-PE interpolates between them).

Example:
    >>> clips = generate_clips(2, seed=0)
    >>> clips.video.shape, clips.audio.shape
    (torch.Size([2, 32, 16, 16]), torch.Size([2, 64, 16]))
"""

from __future__ import annotations

import math
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["AVClips", "generate_clips", "load_av_npz", "audio_config"]


@dataclass(frozen=True)
class AVClips:
    """A batch of clips: ``video (N, T_v, H, W)``, ``audio (N, T_a, F)``, ``bounces`` (per clip, video frames)."""

    video: Tensor
    audio: Tensor
    bounces: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        if self.video.dim() != 4:
            raise ValueError(f"AVClips: video must have shape (N, T_v, H, W), got {tuple(self.video.shape)}")
        if self.audio.dim() != 3:
            raise ValueError(f"AVClips: audio must have shape (N, T_a, F), got {tuple(self.audio.shape)}")
        if self.video.shape[0] != self.audio.shape[0]:
            raise ValueError(f"AVClips: video has {self.video.shape[0]} clips but audio has {self.audio.shape[0]}")
        if self.bounces and len(self.bounces) != self.video.shape[0]:
            raise ValueError(f"AVClips: {len(self.bounces)} bounce lists for {self.video.shape[0]} clips")

    def __len__(self) -> int:
        return self.video.shape[0]


def audio_config(video_frames: int, audio_frames: int, freq_bins: int) -> dict[str, int]:
    """STFT settings giving exactly ``audio_frames`` frames and ``freq_bins`` bins (``n_fft = 2 * freq_bins``)."""
    n_fft = 2 * freq_bins
    hop = n_fft // 2
    samples = hop * audio_frames  # centred STFT gives samples // hop + 1 frames; the last one is dropped
    return {"n_fft": n_fft, "hop": hop, "samples": samples, "sample_rate": samples * 8 // video_frames}


def _positions(start: Tensor, velocity: Tensor, low: float, high: float, times: Tensor) -> Tensor:
    """Reflected motion: position at ``times`` of a point bouncing between ``low`` and ``high`` (triangle wave)."""
    span = high - low
    raw = (start - low)[:, None] + velocity[:, None] * times[None, :]
    folded = torch.remainder(raw, 2 * span)
    return low + torch.where(folded > span, 2 * span - folded, folded)


def _bounce_times(start: Tensor, velocity: Tensor, low: float, high: float, duration: float) -> list[list[float]]:
    """Times in ``[0, duration)`` at which the reflected motion hits ``low`` or ``high``."""
    span = high - low
    out = []
    for s, v in zip(start.tolist(), velocity.tolist()):
        if v == 0:
            out.append([])
            continue
        # the unfolded coordinate crosses a wall at low + k * span for integer k
        u0, u1 = s - low, s - low + v * duration
        k_lo, k_hi = sorted((u0 / span, u1 / span))
        ks = range(math.floor(k_lo) + 1, math.ceil(k_hi))
        out.append(sorted((k * span - u0) / v for k in ks))
    return out


def generate_clips(
    num_clips: int, *, seed: int, video_frames: int = 32, frame_size: int = 16, audio_frames: int = 64,
    freq_bins: int = 16, speed: tuple[float, float] = (0.25, 0.6), radius: float = 2.0,
) -> AVClips:
    """``num_clips`` seeded bouncing-ball clips (see the module docstring).

    Args:
        num_clips: >= 1.
        seed: RNG seed (the same seed gives the same clips).
        video_frames, frame_size: ``T_v`` and ``H = W``.
        audio_frames, freq_bins: ``T_a`` and ``F`` of the spectrogram.
        speed: range of the ball's speed per axis, pixels per frame.
        radius: blob radius (pixels, the Gaussian's standard deviation).
    """
    for name, value in (("num_clips", num_clips), ("video_frames", video_frames), ("frame_size", frame_size),
                        ("audio_frames", audio_frames), ("freq_bins", freq_bins)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"generate_clips: {name} must be an int >= 1, got {value!r}")
    if frame_size < 6:
        raise ValueError(f"generate_clips: frame_size must be >= 6, got {frame_size}")
    if not 0 < speed[0] <= speed[1]:
        raise ValueError(f"generate_clips: speed must be a range 0 < low <= high, got {speed!r}")
    g = torch.Generator().manual_seed(seed)
    n, t_v, size = num_clips, video_frames, frame_size
    low, high = 1.5 * radius, size - 1 - 1.5 * radius

    def uniform(a: float, b: float, shape=(n,)) -> Tensor:
        return a + (b - a) * torch.rand(shape, generator=g, dtype=torch.float64)

    def signs() -> Tensor:
        return torch.randint(0, 2, (n,), generator=g).double() * 2 - 1

    start_x, start_y = uniform(low, high), uniform(low, high)
    vel_x, vel_y = uniform(*speed) * signs(), uniform(*speed) * signs()
    frames = torch.arange(t_v, dtype=torch.float64)
    xs = _positions(start_x, vel_x, low, high, frames)  # (N, T_v)
    ys = _positions(start_y, vel_y, low, high, frames)
    grid = torch.arange(size, dtype=torch.float64)
    blob_x = torch.exp(-((grid[None, None, :] - xs[..., None]) ** 2) / (2 * radius**2))  # (N, T_v, W)
    blob_y = torch.exp(-((grid[None, None, :] - ys[..., None]) ** 2) / (2 * radius**2))  # (N, T_v, H)
    video = (blob_y[..., :, None] * blob_x[..., None, :]) * 2 - 1                       # (N, T_v, H, W)

    duration = float(t_v)
    bounces = [sorted(bx + by) for bx, by in zip(_bounce_times(start_x, vel_x, low, high, duration),
                                                  _bounce_times(start_y, vel_y, low, high, duration))]

    cfg = audio_config(t_v, audio_frames, freq_bins)
    samples, sr = cfg["samples"], cfg["sample_rate"]
    time = torch.arange(samples, dtype=torch.float64) / sr                               # seconds
    wave = 0.003 * torch.randn(n, samples, generator=g, dtype=torch.float64)
    seconds_per_frame = samples / sr / t_v
    for i, clip_bounces in enumerate(bounces):
        for b in clip_bounces:
            onset = b * seconds_per_frame
            pitch = float(uniform(0.15, 0.35, (1,))) * sr
            dt = (time - onset).clamp(min=0)
            wave[i] += torch.where(time >= onset, torch.sin(2 * math.pi * pitch * dt) * torch.exp(-dt * sr / 40), 0.0)
    spec = torch.stft(wave.float(), n_fft=cfg["n_fft"], hop_length=cfg["hop"], window=torch.hann_window(cfg["n_fft"]),
                      return_complex=True).abs()                                         # (N, F + 1, T_a + 1)
    log_spec = torch.log10(spec[:, 1:, :audio_frames] + 1e-3)                            # drop DC and last frame
    audio = ((log_spec + 1.5) / 1.5).clamp(-1, 1).transpose(1, 2).contiguous()           # (N, T_a, F)
    return AVClips(video.float(), audio, tuple(tuple(b) for b in bounces))


def load_av_npz(path: str | Path) -> AVClips:
    """Load clips saved with ``numpy.savez(path, video=(N, T_v, H, W), audio=(N, T_a, F))`` (values ~[-1, 1]).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a missing array, wrong dimensions, different clip counts, or non-finite values.
    """
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_av_npz: no such file {str(path)!r}")
    # a truncated or corrupted file fails in numpy, zipfile or zlib with many exception types
    unreadable = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error)
    try:
        data = np.load(path, allow_pickle=False)
    except unreadable as error:
        raise ValueError(f"load_av_npz: {path} is not a readable .npz file "
                         f"({type(error).__name__}: {error})") from error
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"load_av_npz: {path} is a single .npy array, not an .npz archive with 'video' and 'audio'")
    with data:
        for key in ("video", "audio"):
            if key not in data:
                raise ValueError(f"load_av_npz: {path} has no array {key!r} (found {sorted(data.files)})")
        try:
            raw = {key: data[key] for key in ("video", "audio")}
        except unreadable as error:
            raise ValueError(f"load_av_npz: {path} has a corrupted array ({type(error).__name__}: {error})") from error
    arrays = {}
    for key, value in raw.items():
        if value.dtype.kind not in "biuf":
            raise ValueError(f"load_av_npz: {path} array {key!r} must be numeric, got dtype {value.dtype}")
        arrays[key] = torch.from_numpy(np.asarray(value, dtype=np.float32))
    video, audio = arrays["video"], arrays["audio"]
    for key, value in (("video", video), ("audio", audio)):
        if not torch.isfinite(value).all():
            raise ValueError(f"load_av_npz: {path} array {key!r} holds NaN or inf")
    try:
        return AVClips(video, audio, ())
    except ValueError as error:  # shapes / clip counts: say which file
        raise ValueError(f"load_av_npz: {path}: {error}") from error
