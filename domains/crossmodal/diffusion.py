"""Denoising diffusion for two modalities: noise schedule, per-modality timestep warping, joint DDIM sampling.

* Noise schedule: DDPM (Ho et al. 2020, arXiv:2006.11239) with the cosine ``alpha_bar`` of Nichol &
  Dhariwal 2021 (arXiv:2102.09672); timesteps ``t = 0 .. T`` with ``alpha_bar_0 = 1`` (clean data).
* Timestep adjustment (Ishii et al. 2024, arXiv:2409.17550, ``scheduler_ddim_rev.py``): at the same
  sampling step each modality sits at its own noise level, ``t' = round((t / T) ** gamma * T)``, with
  ``gamma_video = sqrt(gamma)`` and ``gamma_audio = 1 / sqrt(gamma)`` (``gamma = 1.5`` by default there).
  With ``gamma > 1`` the video is denoised ahead of the audio (``t'_video <= t <= t'_audio``).
* DDIM sampling (Song et al. 2020, arXiv:2010.02502, ``eta = 0``) of both modalities at once; each
  modality's model sees the other's current sample as its condition.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from pe_toolkit.encoders.base import check_choice, check_float, check_int

__all__ = ["cosine_alpha_bar", "modality_gammas", "warp_timesteps", "ddim_timesteps", "joint_ddim_sample"]


def cosine_alpha_bar(num_steps: int, *, s: float = 0.008, max_beta: float = 0.999) -> Tensor:
    """``alpha_bar_t`` for ``t = 0 .. T`` (float64, ``(T + 1,)``), cosine schedule, ``alpha_bar_0 = 1``.

    ``f(t) = cos((t/T + s) / (1 + s) * pi/2) ** 2``, ``alpha_bar_t = f(t) / f(0)``, with each step's
    ``beta_t = 1 - alpha_bar_t / alpha_bar_{t-1}`` capped at ``max_beta`` (Nichol & Dhariwal 2021).
    """
    check_int("num_steps", num_steps)
    t = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    alpha_bar = f / f[0]
    betas = (1 - alpha_bar[1:] / alpha_bar[:-1]).clamp(max=max_beta)  # the cap is part of the schedule
    return torch.cat((alpha_bar.new_ones(1), torch.cumprod(1 - betas, 0)))


def modality_gammas(gamma: float) -> tuple[float, float]:
    """``(gamma_video, gamma_audio) = (sqrt(gamma), 1 / sqrt(gamma))`` as in Ishii et al. 2024."""
    gamma = check_float("gamma", gamma)
    return math.sqrt(gamma), 1.0 / math.sqrt(gamma)


def warp_timesteps(t: Tensor, num_steps: int, gamma: float) -> Tensor:
    """``round((t / T) ** gamma * T)`` for integer timesteps ``t`` in ``[0, T]`` (any shape, long result).

    Raises:
        ValueError: a timestep outside ``[0, T]``, or ``gamma <= 0``.
        TypeError: ``t`` not an integer tensor.
    """
    check_int("num_steps", num_steps)
    gamma = check_float("gamma", gamma)
    if not isinstance(t, Tensor) or t.is_floating_point() or t.dtype == torch.bool:
        raise TypeError(f"warp_timesteps: t must be an integer tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    if t.numel() and (int(t.min()) < 0 or int(t.max()) > num_steps):
        raise ValueError(f"warp_timesteps: t must lie in [0, {num_steps}], got [{int(t.min())}, {int(t.max())}]")
    return torch.round((t.double() / num_steps) ** gamma * num_steps).long()


def ddim_timesteps(num_steps: int, sampling_steps: int) -> Tensor:
    """``sampling_steps + 1`` decreasing integer timesteps from ``T`` to ``0`` (evenly spaced, rounded)."""
    check_int("num_steps", num_steps)
    check_int("sampling_steps", sampling_steps)
    if sampling_steps > num_steps:
        raise ValueError(f"sampling_steps must be <= num_steps ({num_steps}), got {sampling_steps}")
    return torch.round(torch.linspace(num_steps, 0, sampling_steps + 1, dtype=torch.float64)).long()


PREDICTIONS = ("eps", "x0")


def _ddim_update(x: Tensor, output: Tensor, a_t: Tensor, a_next: Tensor, prediction: str) -> Tensor:
    """One deterministic DDIM step from noise level ``a_t`` to ``a_next`` (``alpha_bar`` values, ``(B,)``).

    ``output`` is the model's noise estimate (``prediction="eps"``) or clean-data estimate (``"x0"``).
    """
    shape = (-1,) + (1,) * (x.dim() - 1)
    a_t, a_next = a_t.view(shape).to(x.dtype), a_next.view(shape).to(x.dtype)
    x0 = output if prediction == "x0" else (x - (1 - a_t).sqrt() * output) / a_t.sqrt()
    x0 = x0.clamp(-1, 1)  # data lie in [-1, 1] (x0 clipping, Ho et al. 2020)
    eps = (x - a_t.sqrt() * x0) / (1 - a_t).sqrt().clamp(min=1e-8)
    return a_next.sqrt() * x0 + (1 - a_next).sqrt() * eps


@torch.no_grad()
def joint_ddim_sample(
    denoise: Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]],
    video_shape: tuple[int, ...],
    audio_shape: tuple[int, ...],
    alpha_bar: Tensor,
    *,
    sampling_steps: int = 25,
    gamma: float = 1.0,
    prediction: str = "eps",
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Sample video and audio together with DDIM and per-modality warped timesteps.

    Args:
        denoise: ``(video_t, audio_t, t_video, t_audio) -> (video_output, audio_output)``, timesteps ``(B,)``
            long; the outputs are noise estimates (``prediction="eps"``) or clean-data estimates (``"x0"``).
        video_shape, audio_shape: full shapes including the batch, e.g. ``(B, T_v, H, W)``, ``(B, T_a, F)``.
        alpha_bar: ``(T + 1,)`` from :func:`cosine_alpha_bar`.
        sampling_steps: DDIM steps.
        gamma: timestep adjustment (1 = none); see :func:`modality_gammas`.
        prediction: what ``denoise`` returns, ``"eps"`` or ``"x0"``.
    Returns:
        ``(video, audio)`` at ``t = 0``.
    """
    if video_shape[0] != audio_shape[0]:
        raise ValueError(f"joint_ddim_sample: batch sizes differ: video {video_shape[0]}, audio {audio_shape[0]}")
    check_choice("prediction", prediction, PREDICTIONS)
    num_steps = alpha_bar.shape[0] - 1
    gamma_v, gamma_a = modality_gammas(gamma)
    base = ddim_timesteps(num_steps, sampling_steps)
    t_video, t_audio = warp_timesteps(base, num_steps, gamma_v), warp_timesteps(base, num_steps, gamma_a)
    video = torch.randn(video_shape, generator=generator)
    audio = torch.randn(audio_shape, generator=generator)
    b = video_shape[0]
    for step in range(sampling_steps):
        tv, ta = t_video[step], t_audio[step]
        tv_next, ta_next = t_video[step + 1], t_audio[step + 1]
        if tv == tv_next and ta == ta_next:
            continue
        out_v, out_a = denoise(video, audio, tv.expand(b), ta.expand(b))
        if tv != tv_next:
            video = _ddim_update(video, out_v, alpha_bar[tv].expand(b), alpha_bar[tv_next].expand(b), prediction)
        if ta != ta_next:
            audio = _ddim_update(audio, out_a, alpha_bar[ta].expand(b), alpha_bar[ta_next].expand(b), prediction)
    return video, audio
