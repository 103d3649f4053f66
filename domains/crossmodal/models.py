"""Two small denoisers (video frames, audio spectrogram) joined by cross-modal connectors.

Each modality is a sequence of per-time-step vectors (a video frame flattened to ``H * W`` pixels, an
audio frame of ``F`` bins). A :class:`ModalityDenoiser` embeds them (MLP), adds a diffusion-time
embedding and the sinusoidal temporal PE (``embed`` hook of the toolkit's ``"sinusoidal"`` encoding), runs
bidirectional :class:`~pe_toolkit.nn.block.TransformerBlock` s and predicts the noise ``eps``. After each
block a connector (:mod:`pe_toolkit.domains.crossmodal.conditioning`) mixes in the other modality: its current
noisy sample and noise level, encoded per time step by a small MLP (the paper's ``connector_out``). The
paper feeds the other model's current x0-prediction concatenated with ``x_t``; using ``x_t`` alone keeps
one denoiser pass per modality and step (the x0-prediction would need a second pass of the other model).

This stands in for the paper's pretrained AudioLDM / AnimateDiff UNets (Ishii et al. 2024,
arXiv:2409.17550), which are far beyond a CPU; as there, the connectors of both directions are trained
jointly with one shared diffusion timestep for the two targets and an independent noise level for the
connector inputs (``t_con``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pe_toolkit.domains.crossmodal.conditioning import make_connector
from pe_toolkit.encoders.absolute import sinusoidal_table
from pe_toolkit.encoders.base import check_int, require_finite
from pe_toolkit.nn.block import TransformerBlock, make_norm
from pe_toolkit.registry import get_encoder

__all__ = ["JointDenoiser", "ModalityDenoiser"]


def _mlp(a: int, hidden: int, b: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(a, hidden), nn.GELU(), nn.Linear(hidden, b))


class _TimeEmbedding(nn.Module):
    """Sinusoid of the diffusion timestep -> MLP, ``(B,) -> (B, dim)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.mlp = _mlp(dim, 2 * dim, dim)

    def forward(self, t: Tensor) -> Tensor:
        return self.mlp(sinusoidal_table(t.float(), self.dim))


def _check_signal(owner: str, name: str, x, dims: int) -> None:
    """``x`` must be a finite float tensor with ``dims`` dimensions (errors name ``name``)."""
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise TypeError(f"{owner}: {name} must be a float tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.dim() != dims:
        raise ValueError(f"{owner}: {name} must have {dims} dimensions, got shape {tuple(x.shape)}")
    require_finite(f"{owner}: {name}", x)


def _check_timesteps(owner: str, name: str, t, batch: int) -> None:
    """``t`` must be a real tensor of ``batch`` finite diffusion timesteps (errors name ``name``)."""
    if not isinstance(t, Tensor) or t.dtype == torch.bool or t.is_complex():
        raise TypeError(f"{owner}: {name} must be a tensor of diffusion timesteps, got "
                        f"{getattr(t, 'dtype', type(t).__name__)}")
    if tuple(t.shape) != (batch,):
        raise ValueError(f"{owner}: {name} must have shape ({batch},), got {tuple(t.shape)}")
    require_finite(f"{owner}: {name}", t)


class ModalityDenoiser(nn.Module):
    """Noise predictor for one modality, ``(B, T, D) -> (B, T, D)``, with optional cross-modal connectors.

    Args:
        features: ``D``, the size of one time step (pixels of a frame, bins of a spectrogram frame).
        cond_features: ``D_c`` of the other modality's time steps.
        dim, num_heads, num_layers: trunk sizes.
        connector: ``"none"``, ``"cmc_pe"`` or ``"cross_attention"`` (one per block).
        connector_options: extra options of the connector (e.g. ``time_encoding="rope"``).
    """

    def __init__(self, features: int, cond_features: int, *, dim: int = 64, num_heads: int = 4,
                 num_layers: int = 3, connector: str = "cmc_pe", connector_options: dict | None = None) -> None:
        super().__init__()
        self.features = check_int("features", features)
        self.cond_features = check_int("cond_features", cond_features)
        check_int("num_layers", num_layers)
        self.embed_in = _mlp(features, 2 * dim, dim)
        self.time = _TimeEmbedding(dim)
        self.position = get_encoder("sinusoidal", dim, num_heads)
        self.blocks = nn.ModuleList(
            TransformerBlock(dim, num_heads, causal=False, norm="layernorm", mlp="gelu") for _ in range(num_layers)
        )
        connectors = [make_connector(connector, dim, num_heads, dim, **dict(connector_options or {}))
                      for _ in range(num_layers)]
        self.connector_kind = connector
        self.connectors = nn.ModuleList(connectors) if connector != "none" else None
        self.cond_encoder = _mlp(cond_features, 2 * dim, dim) if connector != "none" else None
        self.cond_time = _TimeEmbedding(dim) if connector != "none" else None
        self.norm = make_norm("layernorm", dim)
        self.head = _mlp(dim, 2 * dim, features)

    def forward(self, x: Tensor, t: Tensor, cond: Tensor | None = None, t_cond: Tensor | None = None) -> Tensor:
        """``x (B, T, D)``, ``t (B,)`` long; ``cond (B, T_c, D_c)`` and ``t_cond (B,)`` (connectors only).

        Raises:
            TypeError / ValueError: an argument of the wrong type, dtype or shape, or holding NaN / inf (named).
        """
        owner = "ModalityDenoiser"
        _check_signal(owner, "x", x, 3)
        if x.shape[-1] != self.features:
            raise ValueError(f"ModalityDenoiser: x must have shape (B, T, {self.features}), got {tuple(x.shape)}")
        _check_timesteps(owner, "t", t, x.shape[0])
        h = self.embed_in(x) + self.time(t)[:, None, :]
        h = self.position.embed(h, torch.arange(x.shape[1], device=x.device))
        c = None
        if self.connectors is not None:
            if cond is None or t_cond is None:
                raise ValueError(f"ModalityDenoiser: a {self.connector_kind!r} connector needs cond and t_cond")
            _check_signal(owner, "cond", cond, 3)
            if cond.shape[-1] != self.cond_features:
                raise ValueError(f"ModalityDenoiser: cond must have shape (B, T_c, {self.cond_features}), got "
                                 f"{tuple(cond.shape)}")
            if cond.shape[0] != x.shape[0]:
                raise ValueError(f"ModalityDenoiser: batch sizes differ: x has {x.shape[0]}, cond has "
                                 f"{cond.shape[0]}")
            if cond.shape[1] == 0:
                raise ValueError(f"ModalityDenoiser: cond has an empty time axis, shape {tuple(cond.shape)}")
            _check_timesteps(owner, "t_cond", t_cond, x.shape[0])
            c = self.cond_encoder(cond) + self.cond_time(t_cond)[:, None, :]
        for i, block in enumerate(self.blocks):
            h = block(h)
            if c is not None:
                h = self.connectors[i](h, c)
        return self.head(self.norm(h))


class JointDenoiser(nn.Module):
    """Video and audio denoisers, each conditioned on the other through its connectors.

    Args:
        video_shape: ``(T_v, H, W)``; audio_shape: ``(T_a, F)``.
        connector, connector_options, dim, num_heads, num_layers: see :class:`ModalityDenoiser`.

    ``forward(video_t (B, T_v, H, W), audio_t (B, T_a, F), t_video (B,), t_audio (B,), video_cond,
    audio_cond, t_video_cond, t_audio_cond) -> (eps_video, eps_audio)``: the video model's connectors see
    ``audio_cond`` at noise level ``t_audio_cond`` and vice versa (defaults: the inputs themselves).
    """

    def __init__(self, video_shape: tuple[int, int, int], audio_shape: tuple[int, int], *, connector: str = "cmc_pe",
                 connector_options: dict | None = None, dim: int = 64, num_heads: int = 4,
                 num_layers: int = 3) -> None:
        super().__init__()
        if len(video_shape) != 3 or len(audio_shape) != 2:
            raise ValueError(f"JointDenoiser: video_shape must be (T_v, H, W) and audio_shape (T_a, F), got "
                             f"{tuple(video_shape)} and {tuple(audio_shape)}")
        self.video_shape, self.audio_shape = tuple(video_shape), tuple(audio_shape)
        pixels = video_shape[1] * video_shape[2]
        options = {"dim": dim, "num_heads": num_heads, "num_layers": num_layers, "connector": connector,
                   "connector_options": connector_options}
        self.video = ModalityDenoiser(pixels, audio_shape[1], **options)
        self.audio = ModalityDenoiser(audio_shape[1], pixels, **options)

    def forward(self, video_t: Tensor, audio_t: Tensor, t_video: Tensor, t_audio: Tensor,
                video_cond: Tensor | None = None, audio_cond: Tensor | None = None,
                t_video_cond: Tensor | None = None, t_audio_cond: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Noise predictions ``(eps_video, eps_audio)`` (see the class docstring).

        Raises:
            TypeError / ValueError: an argument of the wrong type, dtype or shape, or holding NaN / inf; the
                error names it (``video_t``, ``audio_t``, ``t_video``, ``t_audio``, ``video_cond``, ...).
        """
        owner = "JointDenoiser"
        _check_signal(owner, "video_t", video_t, 4)
        _check_signal(owner, "audio_t", audio_t, 3)
        for name, value, shape in (("video_t", video_t, self.video_shape), ("audio_t", audio_t, self.audio_shape)):
            if tuple(value.shape[1:]) != shape:
                raise ValueError(f"JointDenoiser: {name} must have shape (B, {', '.join(map(str, shape))}), got "
                                 f"{tuple(value.shape)}")
        if video_t.shape[0] != audio_t.shape[0]:
            raise ValueError(f"JointDenoiser: batch sizes differ: video_t {video_t.shape[0]}, audio_t "
                             f"{audio_t.shape[0]}")
        b = video_t.shape[0]
        _check_timesteps(owner, "t_video", t_video, b)
        _check_timesteps(owner, "t_audio", t_audio, b)
        for name, value, dims, trailing in (("video_cond", video_cond, 4, self.video_shape[1:]),
                                            ("audio_cond", audio_cond, 3, self.audio_shape[1:])):
            if value is not None:
                _check_signal(owner, name, value, dims)
                if value.shape[0] != b or tuple(value.shape[2:]) != tuple(trailing) or value.shape[1] == 0:
                    raise ValueError(f"JointDenoiser: {name} must have shape ({b}, T >= 1, "
                                     f"{', '.join(map(str, trailing))}), got {tuple(value.shape)}")
        for name, value in (("t_video_cond", t_video_cond), ("t_audio_cond", t_audio_cond)):
            if value is not None:
                _check_timesteps(owner, name, value, b)
        video_cond = video_t if video_cond is None else video_cond
        audio_cond = audio_t if audio_cond is None else audio_cond
        t_video_cond = t_video if t_video_cond is None else t_video_cond
        t_audio_cond = t_audio if t_audio_cond is None else t_audio_cond
        t_v = video_t.shape[1]
        flat_video = video_t.reshape(b, t_v, -1)
        flat_video_cond = video_cond.reshape(b, video_cond.shape[1], -1)
        eps_video = self.video(flat_video, t_video, audio_cond, t_audio_cond).view_as(video_t)
        eps_audio = self.audio(audio_t, t_audio, flat_video_cond, t_video_cond)
        return eps_video, eps_audio
