"""Lightning training of the small ViT: cross-entropy image classification, accuracy at any test resolution.

``ViTClassifier`` trains a :class:`~pe_toolkit.domains.vision.model.ViT` (AdamW, warmup and cosine decay,
:func:`pe_toolkit.training.optim.adamw_with_warmup_cosine`) and logs ``<stage>/loss`` and ``<stage>/acc``;
``ImageDataModule`` serves any map-style image datasets (:class:`~pe_toolkit.domains.vision.data.ShapeRelations`,
:class:`~pe_toolkit.domains.vision.data.ImageFolderDataset`), the training split through the resumable
loader. :func:`accuracy` evaluates a model on a dataset at whatever resolution its images have.
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from pe_toolkit.domains.vision.model import ViT, ViTConfig
from pe_toolkit.encoders.base import check_float, check_int
from pe_toolkit.training.optim import adamw_with_warmup_cosine
from pe_toolkit.training.resumable import ResumableDataLoader, seeded_step, trainer_shard

__all__ = ["ImageDataModule", "ViTClassifier", "accuracy"]


class ViTClassifier(L.LightningModule):
    """Trains a :class:`ViT` on ``(images (B, C, H, W), labels (B,))`` batches.

    Args:
        config: the model configuration.
        lr, weight_decay: AdamW (weight decay on matrices, not on norms, biases or encodings).
        warmup_steps, max_steps: the learning-rate schedule.
        label_smoothing: of the cross-entropy.
    """

    def __init__(self, config: ViTConfig, *, lr: float = 1e-3, weight_decay: float = 0.05, warmup_steps: int = 0,
                 max_steps: int | None = None, label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.save_hyperparameters({"config": config.to_dict(), "lr": lr, "weight_decay": weight_decay,
                                   "warmup_steps": warmup_steps, "max_steps": max_steps,
                                   "label_smoothing": label_smoothing})
        self.model = ViT(config)
        self.lr = check_float("lr", lr)
        self.weight_decay = check_float("weight_decay", weight_decay, positive=False, minimum=0.0)
        self.warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0)
        self.max_steps = max_steps
        self.label_smoothing = check_float("label_smoothing", label_smoothing, positive=False, minimum=0.0)

    def forward(self, images: Tensor) -> Tensor:
        return self.model(images)

    def _step(self, batch: tuple[Tensor, Tensor], stage: str) -> Tensor:
        images, labels = batch
        logits = self.model(images)
        loss = F.cross_entropy(logits, labels, label_smoothing=self.label_smoothing if stage == "train" else 0.0)
        size = labels.shape[0]
        self.log(f"{stage}/loss", loss, batch_size=size, prog_bar=True)
        self.log(f"{stage}/acc", (logits.argmax(-1) == labels).float().mean(), batch_size=size, prog_bar=True)
        return loss

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        with seeded_step(self):  # dropout drawn from (run seed, step): a resumed run draws the same masks
            return self._step(batch, "train")

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._step(batch, "test")

    def configure_optimizers(self) -> dict:
        return adamw_with_warmup_cosine(self.named_parameters(), lr=self.lr, weight_decay=self.weight_decay,
                                        betas=(0.9, 0.999), warmup_steps=self.warmup_steps, max_steps=self.max_steps)


class ImageDataModule(L.LightningDataModule):
    """Train / val / test image datasets (any resolution each) for :class:`ViTClassifier`.

    Args:
        train, val, test: map-style datasets of ``(image, label)``; ``val`` and ``test`` may be ``None``.
        batch_size: examples per batch.
        seed: the training order's seed (epoch ``e`` is the permutation of ``(seed, e)``).
    """

    def __init__(self, train: Dataset, val: Dataset | None = None, test: Dataset | None = None, *,
                 batch_size: int = 64, seed: int = 0) -> None:
        super().__init__()
        self.train, self.val, self.test = train, val, test
        self.batch_size = check_int("batch_size", batch_size)
        self.seed = check_int("seed", seed, minimum=0)

    def train_dataloader(self) -> ResumableDataLoader:
        rank, world = trainer_shard(self.trainer)
        return ResumableDataLoader(self.train, batch_size=self.batch_size, seed=self.seed, rank=rank,
                                   world_size=world)

    def val_dataloader(self) -> DataLoader:
        if self.val is None:
            raise ValueError("ImageDataModule has no val dataset")
        return DataLoader(self.val, batch_size=self.batch_size)

    def test_dataloader(self) -> DataLoader:
        if self.test is None:
            raise ValueError("ImageDataModule has no test dataset")
        return DataLoader(self.test, batch_size=self.batch_size)


@torch.no_grad()
def accuracy(model: ViT, dataset: Dataset, *, batch_size: int = 256, device: str | torch.device | None = None) -> float:
    """Top-1 accuracy of ``model`` on ``dataset`` (at the resolution of its images), in eval mode."""
    check_int("batch_size", batch_size)
    was_training = model.training
    model.eval()
    device = device if device is not None else next(model.parameters()).device
    correct = total = 0
    try:
        for images, labels in DataLoader(dataset, batch_size=batch_size):
            predicted = model(images.to(device)).argmax(-1).cpu()
            correct += int((predicted == labels).sum())
            total += labels.shape[0]
    finally:
        model.train(was_training)
    if total == 0:
        raise ValueError("accuracy: the dataset is empty")
    return correct / total
