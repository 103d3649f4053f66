"""Lightning training of the joint audio-video denoiser, and a data module over :class:`AVClips`.

``JointDiffusionModule`` trains :class:`~pe_toolkit.domains.crossmodal.models.JointDenoiser` with the DDPM loss on
both modalities, predicting the clean sample (``prediction="x0"``, default) or the noise (``"eps"``):
one timestep ``t ~ U{1..T}`` shared by the two targets, and independent
levels ``t_con ~ U{0..T}`` for the other modality's input to each connector (Ishii et al. 2024,
arXiv:2409.17550, ``train_svg.py``). :meth:`JointDiffusionModule.sample` draws clips with joint DDIM and the
timestep adjustment ``gamma``; :meth:`JointDiffusionModule.evaluate_alignment` samples and scores AV-Align.
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from pe_toolkit.domains.crossmodal.alignment import av_align_batch
from pe_toolkit.domains.crossmodal.data import AVClips
from pe_toolkit.domains.crossmodal.diffusion import PREDICTIONS, cosine_alpha_bar, joint_ddim_sample
from pe_toolkit.domains.crossmodal.models import JointDenoiser
from pe_toolkit.encoders.base import check_choice, check_int
from pe_toolkit.training.optim import adamw_with_warmup_cosine
from pe_toolkit.training.resumable import ResumableDataLoader, data_seed, seeded_step, trainer_shard

__all__ = ["AVDataModule", "JointDiffusionModule"]


class AVDataModule(L.LightningDataModule):
    """Train / validation loaders of ``(video, audio)`` pairs (train shuffled with ``seed``).

    Raises:
        ValueError: train and validation clips of different shapes.
    """

    def __init__(self, train: AVClips, val: AVClips, *, batch_size: int = 32, seed: int = 0) -> None:
        super().__init__()
        if train.video.shape[1:] != val.video.shape[1:] or train.audio.shape[1:] != val.audio.shape[1:]:
            raise ValueError("AVDataModule: train and val clips must have the same video and audio shapes")
        self.train, self.val = train, val
        self.batch_size, self.seed = check_int("batch_size", batch_size), data_seed("AVDataModule", seed)

    def train_dataloader(self) -> ResumableDataLoader:
        # epoch e's order is the permutation of (seed, e); the loader resumes mid-epoch from a checkpoint
        rank, world = trainer_shard(self.trainer)
        return ResumableDataLoader(TensorDataset(self.train.video, self.train.audio), batch_size=self.batch_size,
                                   seed=self.seed, drop_last=True, rank=rank, world_size=world)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.val.video, self.val.audio), batch_size=self.batch_size)


class JointDiffusionModule(L.LightningModule):
    """Joint DDPM training of the video and audio denoisers with cross-modal connectors.

    Args:
        video_shape: ``(T_v, H, W)``; audio_shape: ``(T_a, F)``.
        connector: ``"none"``, ``"cmc_pe"`` or ``"cross_attention"``; connector_options: e.g.
            ``{"time_encoding": "rope"}`` for cross-attention.
        dim, num_heads, num_layers: denoiser sizes.
        num_steps: diffusion steps ``T``.
        prediction: the denoisers' target, ``"x0"`` (clean data; default) or ``"eps"`` (noise, Ho et al. 2020).
            Each time step of a modality is read through a ``dim``-wide token, too narrow to carry the
            ``H * W``-dimensional noise of a video frame but wide enough for the frame's content (one
            object), so the small models here predict ``x0``; DDIM converts either into the other.
        lr, weight_decay, betas, warmup_steps, max_steps: optimisation (:func:`adamw_with_warmup_cosine`).
    """

    def __init__(self, video_shape: Sequence[int] = (32, 16, 16), audio_shape: Sequence[int] = (64, 16), *,
                 connector: str = "cmc_pe", connector_options: dict[str, Any] | None = None, dim: int = 64,
                 num_heads: int = 4, num_layers: int = 3, num_steps: int = 200, prediction: str = "x0",
                 lr: float = 1e-3, weight_decay: float = 0.01, betas: Sequence[float] = (0.9, 0.99),
                 warmup_steps: int = 50,
                 max_steps: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = JointDenoiser(tuple(video_shape), tuple(audio_shape), connector=connector,
                                   connector_options=connector_options, dim=dim, num_heads=num_heads,
                                   num_layers=num_layers)
        self.num_steps = check_int("num_steps", num_steps)
        self.prediction = check_choice("prediction", prediction, PREDICTIONS)
        self.register_buffer("alpha_bar", cosine_alpha_bar(num_steps).float(), persistent=False)

    def _noise(self, x: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.alpha_bar[t].view((-1,) + (1,) * (x.dim() - 1))
        eps = torch.randn_like(x)
        return a.sqrt() * x + (1 - a).sqrt() * eps, eps

    def loss(self, video: torch.Tensor, audio: torch.Tensor) -> torch.Tensor:
        """Sum of the two modalities' MSEs (on ``x0`` or on the noise) for a batch of clean clips."""
        b = video.shape[0]
        if audio.shape[0] != b:
            raise ValueError(f"JointDiffusionModule: video has batch size {b} but audio has {audio.shape[0]}")
        t = torch.randint(1, self.num_steps + 1, (b,), device=video.device)
        t_video_con = torch.randint(0, self.num_steps + 1, (b,), device=video.device)
        t_audio_con = torch.randint(0, self.num_steps + 1, (b,), device=video.device)
        video_t, eps_video = self._noise(video, t)
        audio_t, eps_audio = self._noise(audio, t)
        video_con, _ = self._noise(video, t_video_con)
        audio_con, _ = self._noise(audio, t_audio_con)
        pred_video, pred_audio = self.model(video_t, audio_t, t, t, video_con, audio_con, t_video_con, t_audio_con)
        if self.prediction == "x0":
            return F.mse_loss(pred_video, video) + F.mse_loss(pred_audio, audio)
        return F.mse_loss(pred_video, eps_video) + F.mse_loss(pred_audio, eps_audio)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        with seeded_step(self):  # noise and timesteps drawn from (run seed, step): a resumed run draws the same
            loss = self.loss(*batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch[0].shape[0])
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", self.loss(*batch), batch_size=batch[0].shape[0])

    @torch.no_grad()
    def sample(self, num_clips: int, *, sampling_steps: int = 25, gamma: float = 1.0,
               seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Joint DDIM samples ``(video (N, T_v, H, W), audio (N, T_a, F))`` with timestep adjustment ``gamma``."""
        check_int("num_clips", num_clips)
        was_training = self.training
        self.eval()
        hp = self.hparams
        video, audio = joint_ddim_sample(
            lambda v, a, tv, ta: self.model(v, a, tv, ta), (num_clips, *hp.video_shape), (num_clips, *hp.audio_shape),
            self.alpha_bar.double(), sampling_steps=sampling_steps, gamma=gamma,
            prediction=self.prediction, generator=torch.Generator().manual_seed(seed))
        self.train(was_training)
        return video, audio

    def evaluate_alignment(self, num_clips: int, *, sampling_steps: int = 25, gamma: float = 1.0, seed: int = 0,
                           tolerance: float = 1.0) -> dict[str, float]:
        """Sample ``num_clips`` clips; :func:`~pe_toolkit.domains.crossmodal.alignment.av_align_batch` of them."""
        video, audio = self.sample(num_clips, sampling_steps=sampling_steps, gamma=gamma, seed=seed)
        return av_align_batch(video, audio, tolerance=tolerance)

    def configure_optimizers(self):
        hp = self.hparams
        return adamw_with_warmup_cosine(self.named_parameters(), lr=hp.lr, weight_decay=hp.weight_decay,
                                        betas=hp.betas, warmup_steps=hp.warmup_steps, max_steps=hp.max_steps)
