"""Lightning training of NOPE: SuperGlue's assignment loss plus the chordal pose loss on overlapping pairs.

Huang et al. 2025, arXiv:2506.14180: the high-level (matching) and low-level (pose) losses are summed;
the pose loss only counts pairs that overlap (for the others the pose is not estimated). Logged per stage:
``<stage>/loss``, ``<stage>/match_loss``, ``<stage>/pose_loss``, ``<stage>/nda`` (overlap decisions right)
and ``<stage>/match_f1`` (correspondence F1 over the batch).
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

import lightning as L
from torch import Tensor

from pe_toolkit.domains.multirobot.geometry import chordal_pose_loss
from pe_toolkit.domains.multirobot.matching import assignment_loss
from pe_toolkit.domains.multirobot.model import NOPE, NOPEConfig
from pe_toolkit.encoders.base import check_float, check_int
from pe_toolkit.training.optim import adamw_with_warmup_cosine
from pe_toolkit.training.resumable import seeded_step

__all__ = ["NOPEModule", "batch_match_f1"]


def batch_match_f1(match_a: Tensor, target_a: Tensor, mask_a: Tensor) -> float:
    """Micro F1 of predicted correspondences ``match_a (B, M)`` against ``target_a (B, M)`` (-1 = none)."""
    predicted = (match_a >= 0) & mask_a
    actual = (target_a >= 0) & mask_a
    hits = int((predicted & (match_a == target_a)).sum())
    p, r = hits / max(int(predicted.sum()), 1), hits / max(int(actual.sum()), 1)
    return 2 * p * r / (p + r) if p + r else 0.0


class NOPEModule(L.LightningModule):
    """Trains :class:`~pe_toolkit.domains.multirobot.model.NOPE` (AdamW, optional warmup and cosine decay).

    Args:
        config: the model configuration.
        lr: learning rate (the paper: Adam, 1e-3).
        weight_decay: AdamW weight decay on matrices.
        warmup_steps, max_steps: learning-rate schedule (see
            :func:`pe_toolkit.training.optim.adamw_with_warmup_cosine`).
        pose_weight: weight of the pose loss against the assignment loss.
        rotation_weight: weight of the chordal rotation term inside the pose loss.
    """

    def __init__(self, config: NOPEConfig, *, lr: float = 1e-3, weight_decay: float = 0.0, warmup_steps: int = 0,
                 max_steps: int | None = None, pose_weight: float = 1.0, rotation_weight: float = 1.0) -> None:
        super().__init__()
        self.save_hyperparameters({"config": config.to_dict(), "lr": lr, "weight_decay": weight_decay,
                                   "warmup_steps": warmup_steps, "max_steps": max_steps,
                                   "pose_weight": pose_weight, "rotation_weight": rotation_weight})
        self.model = NOPE(config)
        self.lr = check_float("lr", lr)
        self.weight_decay = check_float("weight_decay", weight_decay, positive=False, minimum=0.0)
        self.warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0)
        self.max_steps = max_steps
        self.pose_weight = check_float("pose_weight", pose_weight, positive=False, minimum=0.0)
        self.rotation_weight = check_float("rotation_weight", rotation_weight, positive=False, minimum=0.0)

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        return self.model(batch)

    def losses(self, batch: dict[str, Tensor], out: dict[str, Tensor]) -> dict[str, Tensor]:
        """``match_loss``, ``pose_loss`` (0 when no pair of the batch overlaps) and their weighted sum ``loss``."""
        match = assignment_loss(out["log_assignment"], batch["match_a"], batch["mask_a"], batch["match_b"],
                                batch["mask_b"])
        overlap = batch["overlap"]
        if bool(overlap.any()):
            pose = chordal_pose_loss(out["pose"][overlap], batch["pose"][overlap],
                                     rotation_weight=self.rotation_weight).mean()
        else:
            pose = out["pose"].sum() * 0.0
        return {"loss": match + self.pose_weight * pose, "match_loss": match, "pose_loss": pose}

    def _step(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        out = self.model(batch)
        losses = self.losses(batch, out)
        size = batch["overlap"].shape[0]
        for name, value in losses.items():
            self.log(f"{stage}/{name}", value, batch_size=size, prog_bar=name == "loss")
        self.log(f"{stage}/nda", (out["overlap"] == batch["overlap"]).float().mean(), batch_size=size)
        self.log(f"{stage}/match_f1", batch_match_f1(out["match_a"], batch["match_a"], batch["mask_a"]),
                 batch_size=size)
        return losses["loss"]

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        with seeded_step(self):  # dropout drawn from (run seed, step): a resumed run draws the same masks
            return self._step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> dict:
        return adamw_with_warmup_cosine(self.named_parameters(), lr=self.lr, weight_decay=self.weight_decay,
                                        betas=(0.9, 0.999), warmup_steps=self.warmup_steps, max_steps=self.max_steps)

