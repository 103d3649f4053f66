"""Lightning training of :class:`~pe_toolkit.domains.detection.model.RecursiveDetector`; shapes or COCO data module.

``DetectionModule``: the set-prediction loss (:class:`~pe_toolkit.domains.detection.loss.SetCriterion`, deep supervision
over all stages), the toolkit's AdamW + warmup + cosine recipe, and per validation / test epoch COCO
``<stage>/map``, ``<stage>/map_50``, ``<stage>/map_75`` (:func:`~pe_toolkit.domains.detection.metrics.coco_map`,
pycocotools) over all images of the epoch.

``DetectionDataModule``: ``train`` / ``val`` / ``test`` datasets of ``(image, target)`` pairs (e.g.
:class:`~pe_toolkit.domains.detection.data.ShapesDetectionDataset` or
:class:`~pe_toolkit.domains.detection.data.CocoDetectionDataset`) batched with
:func:`~pe_toolkit.domains.detection.data.collate_detection`.
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

from typing import Any

import lightning as L
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from pe_toolkit.domains.detection.box_ops import box_xyxy_to_cxcywh
from pe_toolkit.domains.detection.data import collate_detection
from pe_toolkit.domains.detection.loss import SetCriterion
from pe_toolkit.domains.detection.metrics import coco_map
from pe_toolkit.domains.detection.model import DetectorConfig, RecursiveDetector
from pe_toolkit.encoders.base import check_float, check_int
from pe_toolkit.training.optim import adamw_with_warmup_cosine
from pe_toolkit.training.resumable import ResumableDataLoader, data_seed, seeded_step, trainer_shard

__all__ = ["DetectionDataModule", "DetectionModule", "normalise_targets"]


def normalise_targets(targets: list[dict[str, Any]], height: int, width: int) -> list[dict[str, Tensor]]:
    """Pixel xyxy targets -> image-normalised cxcywh boxes (the model's and the loss's format)."""
    out = []
    for t in targets:
        scale = t["boxes"].new_tensor([width, height, width, height])
        out.append({"boxes": box_xyxy_to_cxcywh(t["boxes"] / scale), "labels": t["labels"]})
    return out


class DetectionModule(L.LightningModule):
    """Train and evaluate a :class:`RecursiveDetector`.

    Args:
        config: the detector's :class:`DetectorConfig` (or its dict).
        lr, weight_decay, betas, warmup_steps, max_steps: the optimiser recipe
            (:func:`pe_toolkit.training.optim.adamw_with_warmup_cosine`).
        weight_class, weight_l1, weight_giou: loss weights (RecursiveDet: 2, 5, 2).
    """

    def __init__(self, config: DetectorConfig | dict, *, lr: float = 2.5e-4, weight_decay: float = 1e-4,
                 betas: tuple[float, float] = (0.9, 0.999), warmup_steps: int = 50, max_steps: int | None = None,
                 weight_class: float = 2.0, weight_l1: float = 5.0, weight_giou: float = 2.0) -> None:
        super().__init__()
        config = DetectorConfig(**config) if isinstance(config, dict) else config
        self.save_hyperparameters({"config": config.to_dict(), "lr": lr, "weight_decay": weight_decay,
                                   "betas": tuple(betas), "warmup_steps": warmup_steps, "max_steps": max_steps})
        self.config = config
        self.model = RecursiveDetector(config)
        self.criterion = SetCriterion(weight_class=weight_class, weight_l1=weight_l1, weight_giou=weight_giou)
        self.lr = check_float("lr", lr)
        self.weight_decay = check_float("weight_decay", weight_decay, positive=False, minimum=0.0)
        self.betas = tuple(betas)
        self.warmup_steps = check_int("warmup_steps", warmup_steps, minimum=0)
        self.max_steps = max_steps
        self._outputs: dict[str, tuple[list, list]] = {}

    def forward(self, images: Tensor) -> list[tuple[Tensor, Tensor]]:
        return self.model(images)

    def training_step(self, batch: tuple[Tensor, list[dict]], batch_idx: int) -> Tensor:
        images, targets = batch
        with seeded_step(self):  # dropout drawn from (run seed, step): a resumed run draws the same masks
            losses = self.criterion(self.model(images), normalise_targets(targets, *images.shape[-2:]))
        batch_size = images.shape[0]
        for name, value in losses.items():
            self.log(f"train/{name}", value, prog_bar=name == "loss", batch_size=batch_size)
        return losses["loss"]

    def _eval_step(self, stage: str, batch: tuple[Tensor, list[dict]]) -> None:
        images, targets = batch
        preds, gts = self._outputs.setdefault(stage, ([], []))
        preds.extend({k: v.cpu() for k, v in p.items()} for p in self.model.predict(images))
        # crowd regions go to COCOeval as iscrowd (ignored there); nothing trains on them
        gts.extend({k: t[k].cpu() for k in ("boxes", "labels", "crowd_boxes", "crowd_labels") if k in t}
                   for t in targets)

    def _eval_end(self, stage: str) -> None:
        preds, gts = self._outputs.pop(stage, ([], []))
        if not gts:
            return
        for name, value in coco_map(preds, gts, num_classes=self.config.num_classes).items():
            self.log(f"{stage}/{name}", value, prog_bar=name == "map")

    def validation_step(self, batch: tuple[Tensor, list[dict]], batch_idx: int) -> None:
        self._eval_step("val", batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_end("val")

    def test_step(self, batch: tuple[Tensor, list[dict]], batch_idx: int) -> None:
        self._eval_step("test", batch)

    def on_test_epoch_end(self) -> None:
        self._eval_end("test")

    def configure_optimizers(self) -> dict:
        return adamw_with_warmup_cosine(self.named_parameters(), lr=self.lr, weight_decay=self.weight_decay,
                                        betas=self.betas, warmup_steps=self.warmup_steps, max_steps=self.max_steps)


class DetectionDataModule(L.LightningDataModule):
    """Loaders over given train / val / test datasets of ``(image (3, H, W), target)`` pairs.

    Args:
        train, val, test: the datasets (``val`` / ``test`` optional).
        batch_size: images per batch; num_workers: DataLoader workers.
        seed: seed of the training order (epoch ``e`` uses the permutation of ``(seed, e)``; the loader
            resumes mid-epoch from a checkpoint); ``None``: the run seed given to ``seed_everything``.
    """

    def __init__(self, train: Dataset, val: Dataset | None = None, test: Dataset | None = None, *,
                 batch_size: int = 16, num_workers: int = 0, seed: int | None = 0) -> None:
        super().__init__()
        self.train_set, self.val_set, self.test_set = train, val, test
        self.batch_size = check_int("batch_size", batch_size)
        self.num_workers = check_int("num_workers", num_workers, minimum=0)
        self.seed = data_seed("DetectionDataModule", seed)

    def _loader(self, dataset: Dataset | None, name: str) -> DataLoader:
        if dataset is None:
            raise ValueError(f"DetectionDataModule: no {name} dataset was given")
        return DataLoader(dataset, batch_size=self.batch_size, collate_fn=collate_detection,
                          num_workers=self.num_workers)

    def train_dataloader(self) -> ResumableDataLoader:
        if self.train_set is None:
            raise ValueError("DetectionDataModule: no train dataset was given")
        rank, world = trainer_shard(self.trainer)
        return ResumableDataLoader(self.train_set, batch_size=self.batch_size, seed=self.seed,
                                   collate_fn=collate_detection, num_workers=self.num_workers, rank=rank,
                                   world_size=world)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, "val")

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, "test")
