"""Lightning training for graph- and node-classification models, and a small PyG data module.

``GraphClassificationModule`` wraps any model mapping a PyG batch to logits (e.g.
:class:`~pe_toolkit.domains.graphs.models.GINModel`, :class:`~pe_toolkit.domains.graphs.models.GPSModel`): cross-entropy
loss, AdamW (optional linear warmup and cosine decay), and per stage ``<stage>/loss``,
``<stage>/acc`` (accuracy) and ``<stage>/weighted_acc`` (mean per-class recall, the Benchmarking-GNNs
metric for PATTERN / CLUSTER). Metrics are accumulated over the whole epoch in a confusion matrix
(``torchmetrics``, summed across processes under DDP) rather than averaged over batches.

``GraphDataModule`` turns a PyG dataset plus ``(train, val, test)`` index splits into loaders (the
training one a :class:`~pe_toolkit.training.resumable.ResumableDataLoader`, evaluation ones
``torch_geometric.loader.DataLoader`` s), optionally with an extra per-access transform.

Resume without loss: the training order is a function of ``(seed, epoch)`` and the loader's position
is saved in checkpoints; every random draw of a training step (dropout, LapPE sign flips, random walks,
random node features) comes from the global RNG re-seeded with ``(run seed, global step, rank)`` for
that step, and the per-access transforms of a training batch from it re-seeded with ``(seed, epoch,
batch position)``, so a fit resumed with ``ckpt_path=`` ends with the
same weights as one that never stopped (on CPU).
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

import copy
import math
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.data import Dataset
from torch_geometric.loader import DataLoader
from torch_geometric.loader.dataloader import Collater
from torch_geometric.transforms import Compose
from torchmetrics.classification import MulticlassConfusionMatrix

from pe_toolkit.domains.graphs.transforms import epoch_transforms
from pe_toolkit.encoders.base import check_float, check_int, constrain_encodings
from pe_toolkit.training.optim import adamw_with_warmup_cosine
from pe_toolkit.training.resumable import ResumableDataLoader, batch_seed, data_seed, seeded_step, trainer_shard

__all__ = ["GraphClassificationModule", "GraphDataModule", "accuracy", "confusion_matrix", "weighted_accuracy"]

STAGES = ("train", "val", "test")


def confusion_matrix(pred: Tensor, target: Tensor, num_classes: int) -> Tensor:
    """``(C, C)`` long counts, rows = true class, columns = predicted class."""
    check_int("confusion_matrix: num_classes", num_classes)
    pred, target = pred.reshape(-1).long(), target.reshape(-1).long()
    if pred.shape != target.shape:
        raise ValueError(f"confusion_matrix: pred and target must have the same number of elements, got "
                         f"{pred.numel()} and {target.numel()}")
    for name, t in (("pred", pred), ("target", target)):
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_classes):
            raise ValueError(f"confusion_matrix: {name} values must lie in [0, {num_classes}), got "
                             f"[{int(t.min())}, {int(t.max())}]")
    return torch.bincount(target * num_classes + pred, minlength=num_classes**2).view(num_classes, num_classes)


def accuracy_from_confusion(cm: Tensor) -> float:
    """Fraction of correct predictions; ``nan`` for an empty matrix."""
    total = int(cm.sum())
    return float(cm.diagonal().sum()) / total if total else math.nan


def weighted_accuracy_from_confusion(cm: Tensor) -> float:
    """Mean over the classes present in the targets of the per-class recall; ``nan`` if there are none."""
    support = cm.sum(dim=1)
    present = support > 0
    if not bool(present.any()):
        return math.nan
    recall = cm.diagonal()[present].double() / support[present].double()
    return float(recall.mean())


def accuracy(pred: Tensor, target: Tensor) -> float:
    """Plain accuracy of class predictions ``pred`` against ``target`` (same number of elements)."""
    pred, target = pred.reshape(-1), target.reshape(-1)
    if pred.shape != target.shape:
        raise ValueError(f"accuracy: pred and target must have the same number of elements, got "
                         f"{pred.numel()} and {target.numel()}")
    return float((pred == target).double().mean()) if target.numel() else math.nan


def weighted_accuracy(pred: Tensor, target: Tensor, num_classes: int) -> float:
    """Mean per-class recall ("weighted accuracy"), the Benchmarking-GNNs metric for PATTERN and CLUSTER.

    Dwivedi et al. 2020, arXiv:2003.00982, ``train/metrics.py: accuracy_SBM``. Each class present in
    ``target`` contributes its recall ``correct_c / support_c``; the result is their mean (a value in
    ``[0, 1]``; the paper reports it x100). Differences from the reference code, which evaluates it per
    batch and averages the batch values: here it is computed once over all the given nodes, and a class
    that only appears among the predictions does not count (``accuracy_SBM`` divides by the number of
    classes in the sklearn confusion matrix, i.e. those seen in targets *or* predictions).

    Args:
        pred: ``(N,)`` predicted classes (e.g. ``logits.argmax(-1)``).
        target: ``(N,)`` true classes.
        num_classes: ``C``; values must lie in ``[0, C)``.

    Returns:
        the weighted accuracy, or ``nan`` when ``target`` is empty.
    """
    return weighted_accuracy_from_confusion(confusion_matrix(pred, target, num_classes))


class GraphClassificationModule(L.LightningModule):
    """Cross-entropy training of a graph model, for graph-level (CSL) or node-level (PATTERN, CLUSTER) labels.

    The model maps a PyG batch to logits: ``(num_graphs, C)`` with ``batch.y`` ``(num_graphs,)`` for graph
    tasks, ``(num_nodes, C)`` with ``batch.y`` ``(num_nodes,)`` for node tasks (the shapes decide; there is
    nothing to configure). Optimiser: AdamW; learning rate ``lr * schedule(step)`` with a linear warmup over
    ``warmup_steps`` and, when ``max_steps`` is given, a cosine decay to ``0.1 * lr`` at ``max_steps``
    (otherwise constant). Weight decay applies to parameters of two or more dimensions only (not to norms
    or biases). After every training batch the encodings' constraints are re-imposed (``constrain_encodings``).

    Logged per stage ``s`` in ``train``, ``val``, ``test``: ``s/loss`` (per step in training, per epoch
    everywhere), ``s/acc`` and ``s/weighted_acc`` (per epoch, from a confusion matrix accumulated over the
    epoch). Use ``monitor="val/weighted_acc"`` for PATTERN / CLUSTER (the paper's metric), ``"val/acc"`` for CSL.

    Args:
        model: the network (an ``nn.Module`` taking the batch).
        num_classes: ``C`` (>= 2), for the metrics.
        lr, weight_decay, betas: AdamW.
        warmup_steps: linear warmup steps (0 = none).
        max_steps: total steps for the cosine decay (``None``: constant after warmup).
    """

    def __init__(self, model: nn.Module, *, num_classes: int, lr: float = 1e-3, weight_decay: float = 0.0,
                 betas: Sequence[float] = (0.9, 0.999), warmup_steps: int = 0, max_steps: int | None = None) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"GraphClassificationModule: model must be an nn.Module, got {type(model).__name__}")
        check_int("GraphClassificationModule: num_classes", num_classes, minimum=2)
        check_float("GraphClassificationModule: lr", lr)
        check_float("GraphClassificationModule: weight_decay", weight_decay, positive=False, minimum=0.0)
        betas = tuple(float(b) for b in betas)
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"GraphClassificationModule: betas must be two numbers in [0, 1), got {betas}")
        check_int("GraphClassificationModule: warmup_steps", warmup_steps, minimum=0)
        if max_steps is not None:
            check_int("GraphClassificationModule: max_steps", max_steps)
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.num_classes = num_classes
        # keyed "<stage>_cm": "train" would clash with nn.Module.train
        self.confusion = nn.ModuleDict({f"{s}_cm": MulticlassConfusionMatrix(num_classes) for s in STAGES})

    def forward(self, batch: Any) -> Tensor:
        return self.model(batch)

    def _targets(self, logits: Tensor, batch: Any) -> Tensor:
        y = getattr(batch, "y", None)
        if y is None:
            raise ValueError("GraphClassificationModule: the batch has no y (class labels)")
        y = y.reshape(-1).long()
        if logits.dim() != 2 or logits.size(0) != y.numel() or logits.size(1) != self.num_classes:
            raise ValueError(f"GraphClassificationModule: logits {tuple(logits.shape)} do not match y "
                             f"({y.numel()} labels) and num_classes={self.num_classes}: expected "
                             f"({y.numel()}, {self.num_classes})")
        return y

    def _step(self, batch: Any, stage: str) -> Tensor:
        logits = self(batch)
        y = self._targets(logits, batch)
        loss = F.cross_entropy(logits, y)
        size = int(getattr(batch, "num_graphs", 1) or 1)
        on_step = stage == "train"
        self.log(f"{stage}/loss", loss, on_step=on_step, on_epoch=True, prog_bar=on_step, batch_size=size,
                 sync_dist=not on_step)
        self.confusion[f"{stage}_cm"].update(logits.detach().argmax(-1), y)
        return loss

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        # the step's draws (dropout, sign flips, walks) from the global RNG seeded by (run seed, step, rank),
        # not from wherever the global RNG happens to be, so a resumed run draws the same; restored afterwards
        with seeded_step(self):
            return self._step(batch, "train")

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        constrain_encodings(self)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "val")

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._step(batch, "test")

    def _log_epoch(self, stage: str) -> None:
        metric = self.confusion[f"{stage}_cm"]
        cm = metric.compute()  # summed over processes by torchmetrics
        metric.reset()
        # every process holds the same synced values; no sync_dist needed
        self.log(f"{stage}/acc", accuracy_from_confusion(cm))
        self.log(f"{stage}/weighted_acc", weighted_accuracy_from_confusion(cm))

    def on_train_epoch_end(self) -> None:
        self._log_epoch("train")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def configure_optimizers(self):
        hp = self.hparams
        # the model's parameter names carry no "encodings." prefix: graph PEs' matrices are decayed
        return adamw_with_warmup_cosine(
            self.model.named_parameters(), lr=hp.lr, weight_decay=hp.weight_decay, betas=hp.betas,
            warmup_steps=hp.warmup_steps, max_steps=hp.max_steps,
        )


class _Split(Dataset):
    """One split of a :class:`GraphDataModule` whose graphs carry their dataset index (per-epoch transforms)."""

    def __init__(self, module: GraphDataModule, stage: str) -> None:
        self.module, self.stage = module, stage

    def __len__(self) -> int:
        return len(self.module.subsets[self.stage])

    def __getitem__(self, position: int) -> Any:
        return self.module._get(self.stage, position)


class _Indices(Dataset):
    """``0 .. size-1``: the training loader samples positions; :meth:`GraphDataModule._collate_train` fetches."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


class GraphDataModule(L.LightningDataModule):
    """Loaders over index splits of any PyG dataset (``torch_geometric.loader.DataLoader``).

    Args:
        dataset: a PyG ``Dataset`` (e.g. :class:`~pe_toolkit.domains.graphs.CSLDataset`); it is not modified.
        splits: ``(train_idx, val_idx, test_idx)``, each a sequence or long tensor of graph indices
            (e.g. one fold of :func:`~pe_toolkit.domains.graphs.csl_folds`, or
            :func:`~pe_toolkit.domains.graphs.sbm_splits`).
        transform: applied on every access, after the dataset's own ``transform`` (e.g. a PE transform
            whose randomness should be redrawn per access); ``None`` for none.

    Transforms that draw per epoch (those with ``set_epoch``, e.g.
    :class:`~pe_toolkit.domains.graphs.transforms.RandomFeaturePropagation`, found in ``transform``, the
    dataset's own ``transform`` and inside ``Compose``): before each training batch they are set to the
    loader's epoch, and every graph they see carries its index in ``dataset`` as the graph-level attribute
    they read (``index_attr``, default ``graph_id``), so their draws depend on ``(seed, epoch, graph
    index)`` only, not on the batch order, and a resumed run repeats them. Validation and test use their own
    copies of the transforms, at epoch 0, so evaluation draws the same starts every time.
        batch_size: graphs per batch; shuffle: shuffle the training split.
        num_workers: workers of the evaluation loaders (the training loader runs in the main process so
            that its position, and the transform's draws, are restored on resume).
        seed: the training order's seed (epoch ``e`` uses the permutation of ``(seed, e)``); ``None``:
            ``torch.initial_seed()`` at construction (the seed given to ``seed_everything``).
    """

    def __init__(self, dataset: Any, splits: Sequence[Any], *, transform: Any = None, batch_size: int = 32,
                 num_workers: int = 0, shuffle: bool = True, seed: int | None = None) -> None:
        super().__init__()
        if not hasattr(dataset, "index_select"):
            raise TypeError(f"GraphDataModule: dataset must be a torch_geometric Dataset, got {type(dataset).__name__}")
        if len(splits) != 3:
            raise ValueError(f"GraphDataModule: splits must be (train_idx, val_idx, test_idx), got {len(splits)} parts")
        if transform is not None and not callable(transform):
            raise TypeError(f"GraphDataModule: transform must be callable or None, got {type(transform).__name__}")
        self.dataset = dataset
        self.transform = transform
        self.batch_size = check_int("GraphDataModule: batch_size", batch_size)
        self.num_workers = check_int("GraphDataModule: num_workers", num_workers, minimum=0)
        self.shuffle = bool(shuffle)
        self.seed = data_seed("GraphDataModule", seed)
        n = len(dataset)
        self.splits = {}
        for stage, idx in zip(STAGES, splits):
            idx = torch.as_tensor(idx, dtype=torch.long).reshape(-1)
            if idx.numel() and (int(idx.min()) < -n or int(idx.max()) >= n):
                raise ValueError(f"GraphDataModule: {stage} indices must lie in [0, {n}), got "
                                 f"[{int(idx.min())}, {int(idx.max())}]")
            self.splits[stage] = idx
        self.subsets = {stage: self._subset(idx, stage) for stage, idx in self.splits.items()}
        # graph-level attributes that per-epoch transforms key their draws by (the graph's index in the dataset)
        self._index_attrs = sorted({attr for t in epoch_transforms(self.subsets["train"].transform)
                                    if (attr := getattr(t, "index_attr", None))})
        self._collater = Collater(self.subsets["train"])
        self._train_loader: ResumableDataLoader | None = None

    def _subset(self, idx: Tensor, stage: str) -> Any:
        subset = self.dataset.index_select(idx)  # a shallow copy: setting its transform leaves the dataset alone
        own = getattr(self.dataset, "transform", None)
        transform = own if self.transform is None else (self.transform if own is None else
                                                         Compose([own, self.transform]))
        if stage != "train" and epoch_transforms(transform):
            transform = copy.deepcopy(transform)  # evaluation keeps epoch 0 while training's copy moves on
        subset.transform = transform
        return subset

    def _get(self, stage: str, position: int) -> Any:
        """Graph ``position`` of a split, transformed; per-epoch transforms see its dataset index."""
        subset = self.subsets[stage]
        if not self._index_attrs:
            return subset[position]
        index = int(subset.indices()[position])
        data = copy.copy(subset.get(index))
        for attr in self._index_attrs:
            if attr not in data:
                data[attr] = index
        return data if subset.transform is None else subset.transform(data)

    def _loader(self, stage: str) -> DataLoader:
        dataset = self.subsets[stage] if not self._index_attrs else _Split(self, stage)
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=self.shuffle and stage == "train",
                          num_workers=self.num_workers)

    def train_dataloader(self) -> ResumableDataLoader:
        rank, world = trainer_shard(self.trainer)
        subset = self.subsets["train"]
        self._train_loader = ResumableDataLoader(
            _Indices(len(subset)), batch_size=self.batch_size, seed=self.seed, shuffle=self.shuffle,
            collate_fn=self._collate_train, rank=rank, world_size=world)
        return self._train_loader

    def _collate_train(self, indices: list[int]) -> Any:
        # fetched in the main process just before the batch is served: the loader's state is this batch's
        # (epoch, position), which a resumed loader reproduces, so random transforms draw the same
        loader = self._train_loader
        epoch, position = loader.position() if loader else (0, 0)
        for transform in epoch_transforms(self.subsets["train"].transform):
            transform.set_epoch(epoch)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(batch_seed(self.seed, epoch, position))
            graphs = [self._get("train", i) for i in indices]
        return self._collater(graphs)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")
