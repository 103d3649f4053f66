"""Lightning training of a :class:`~pe_toolkit.domains.music.models.PianoRollTransformer` on either task.

Loss: ``BCEWithLogitsLoss`` over every cell of the target roll (Agarwal et al. 2024, arXiv:2402.13301).
Optimiser: the toolkit recipe (AdamW, linear warmup, cosine decay; :mod:`pe_toolkit.training.optim`).
Logged per stage ``s``: ``s/loss`` (mean BCE per cell), ``s/nll`` (nats per step, summed over cells) and
``s/f1`` (teacher-forced frame-level F1 at probability 0.5), the last two accumulated over the epoch.
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

import dataclasses
from collections.abc import Sequence

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader

from pe_toolkit.domains.music.data import TASKS, WindowDataset
from pe_toolkit.domains.music.models import MusicModelConfig, PianoRollTransformer
from pe_toolkit.domains.music.scores import Piece
from pe_toolkit.encoders.base import check_choice, check_float, check_int, constrain_encodings
from pe_toolkit.training.optim import adamw_with_warmup_cosine
from pe_toolkit.training.resumable import ResumableDataLoader, data_seed, seeded_step, trainer_shard

__all__ = ["ChoraleDataModule", "PianoRollModule"]


class PianoRollModule(L.LightningModule):
    """BCE training of a piano-roll Transformer on :class:`~pe_toolkit.domains.music.data.WindowDataset` batches.

    Args:
        config: the model configuration (task, encoding, sizes), or its fields as a dict (how the
            checkpoint stores it: a checkpoint is read with ``weights_only=True``, which refuses classes).
        lr, weight_decay, betas, warmup_steps, max_steps: the optimiser recipe.
    """

    def __init__(self, config: MusicModelConfig | dict, *, lr: float = 1e-3, weight_decay: float = 0.01,
                 betas: Sequence[float] = (0.9, 0.98), warmup_steps: int = 0, max_steps: int | None = None) -> None:
        super().__init__()
        if isinstance(config, dict):
            config = MusicModelConfig(**config)
        if not isinstance(config, MusicModelConfig):
            raise TypeError(f"PianoRollModule: config must be a MusicModelConfig or a dict of its fields, got "
                            f"{type(config).__name__}")
        check_float("lr", lr)
        check_float("weight_decay", weight_decay, positive=False, minimum=0.0)
        check_int("warmup_steps", warmup_steps, minimum=0)
        if max_steps is not None:
            check_int("max_steps", max_steps)
        self.save_hyperparameters({"config": dataclasses.asdict(config), "lr": lr, "weight_decay": weight_decay,
                                   "betas": tuple(betas), "warmup_steps": warmup_steps, "max_steps": max_steps})
        self.model = PianoRollTransformer(config)
        self._sums: dict[str, Tensor] = {}

    def forward(self, inputs: Tensor, structure: Tensor) -> Tensor:
        return self.model(inputs, structure)

    def _step(self, batch: dict[str, Tensor], stage: str) -> Tensor:
        logits = self.model(batch["inputs"], batch["structure"])
        target = batch["targets"]
        loss = F.binary_cross_entropy_with_logits(logits, target)
        batch_size = target.shape[0]
        self.log(f"{stage}/loss", loss, prog_bar=stage == "train", on_step=stage == "train", on_epoch=True,
                 batch_size=batch_size)
        if stage != "train":
            with torch.no_grad():
                pred = (logits >= 0).float()
                sums = self._sums.setdefault(stage, torch.zeros(5, dtype=torch.float64))
                bce = F.binary_cross_entropy_with_logits(logits.double(), target.double(), reduction="sum")
                sums += torch.stack([
                    bce, torch.tensor(float(target.shape[0] * target.shape[1]), dtype=torch.float64),
                    (pred * target).sum().double(), (pred * (1 - target)).sum().double(),
                    ((1 - pred) * target).sum().double(),
                ]).cpu()
        return loss

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        with seeded_step(self):  # dropout drawn from (run seed, step): a resumed run draws the same masks
            return self._step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def _epoch_end(self, stage: str) -> None:
        sums = self._sums.pop(stage, None)
        if sums is None:
            return
        bce, steps, tp, fp, fn = sums.tolist()
        self.log(f"{stage}/nll", bce / max(steps, 1.0))
        denominator = 2 * tp + fp + fn
        self.log(f"{stage}/f1", 2 * tp / denominator if denominator else 1.0)

    def on_validation_epoch_end(self) -> None:
        self._epoch_end("val")

    def on_test_epoch_end(self) -> None:
        self._epoch_end("test")

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        constrain_encodings(self.model)

    def configure_optimizers(self) -> dict:
        hp = self.hparams
        return adamw_with_warmup_cosine(self.named_parameters(), lr=hp.lr, weight_decay=hp.weight_decay,
                                        betas=hp.betas, warmup_steps=hp.warmup_steps, max_steps=hp.max_steps)


class ChoraleDataModule(L.LightningDataModule):
    """Train / val / test :class:`WindowDataset` s from three lists of pieces.

    Args:
        splits: ``(train, val, test)`` lists of pieces (e.g. :meth:`ChoraleCorpus.split`).
        task, length: as :class:`WindowDataset`; stride: training stride (evaluation uses ``length``).
        batch_size: windows per batch.
        seed: seed of the training order (epoch ``e`` uses the permutation of ``(seed, e)``; the loader
            resumes mid-epoch from a checkpoint); ``None``: the run seed given to ``seed_everything``.
    """

    def __init__(self, splits: Sequence[Sequence[Piece]], *, task: str, length: int, stride: int | None = None,
                 batch_size: int = 16, seed: int | None = None) -> None:
        super().__init__()
        if len(splits) != 3:
            raise ValueError(f"ChoraleDataModule: splits must be (train, val, test), got {len(splits)} lists")
        self.task = check_choice("task", task, TASKS)
        self.batch_size = check_int("batch_size", batch_size)
        self.seed = data_seed("ChoraleDataModule", seed)
        self.train_set = WindowDataset(splits[0], task, length, stride)
        self.val_set = WindowDataset(splits[1], task, length)
        self.test_set = WindowDataset(splits[2], task, length)
        for name, ds in (("train", self.train_set), ("val", self.val_set), ("test", self.test_set)):
            if len(ds) == 0 and name == "train":
                raise ValueError(f"ChoraleDataModule: no {name} window of length {length} (all pieces shorter)")

    def train_dataloader(self) -> ResumableDataLoader:
        rank, world = trainer_shard(self.trainer)
        return ResumableDataLoader(self.train_set, batch_size=self.batch_size, seed=self.seed, rank=rank,
                                   world_size=world)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.batch_size)
