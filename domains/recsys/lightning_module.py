"""Lightning training of SASRec: BCE with one sampled negative or full softmax cross-entropy.

``SASRecModule`` trains :class:`~pe_toolkit.domains.recsys.model.SASRec` and evaluates with full ranking
(:class:`FullRankingMetrics`, over :func:`~pe_toolkit.domains.recsys.metrics.ranking_metrics`), logging
``val/ndcg@10`` etc. for early stopping.
``SequentialRecDataModule`` serves the examples of :func:`~pe_toolkit.domains.recsys.split.sequential_split`
(leave-one-out or ratio splits; SASRec's shifted windows or RecBole's every-prefix training examples).

Resume without loss: the training loader is a :class:`~pe_toolkit.training.resumable.ResumableDataLoader`
(order a function of ``(seed, epoch)``, position saved in checkpoints); the BCE negatives of a batch come
from a generator seeded by ``(seed, epoch, batch position)``, and dropout in a training step from the global
RNG re-seeded by ``(run seed, global step, rank)``; a fit resumed with ``ckpt_path=`` ends with the same
weights as one that never stopped (on CPU).

Losses:

* ``"bce"``: SASRec's (Kang & McAuley 2018, arXiv:1808.09781): at every non-padding position, binary
  cross-entropy of the target against one negative drawn uniformly from the items the user has not
  interacted with in training;
* ``"ce"``: softmax cross-entropy over all items (Klenitskiy & Vasilev 2023, "Turning Dross Into Gold
  Loss: is BERT4Rec really better than SASRec?", RecSys, arXiv:2309.07602).
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.data import DataLoader, Dataset
from torchmetrics import Metric

from pe_toolkit.domains.recsys.data import UserSequences
from pe_toolkit.domains.recsys.metrics import TIE_POLICIES, check_ks, ranking_metrics
from pe_toolkit.domains.recsys.model import SASRec
from pe_toolkit.domains.recsys.split import EvalExamples, TrainExamples, sequential_split
from pe_toolkit.encoders.base import check_choice, check_float, check_int, constrain_encodings
from pe_toolkit.training.optim import adamw_with_warmup_cosine
from pe_toolkit.training.resumable import ResumableDataLoader, batch_seed, data_seed, seeded_step, trainer_shard

__all__ = ["LOSSES", "RANKINGS", "FullRankingMetrics", "SASRecModule", "SequentialRecDataModule", "sample_negatives"]

LOSSES = ("bce", "ce")
#: the two candidate sets every evaluation reports: every item, and every item outside the history
RANKINGS = ("all", "unseen")


def sample_negatives(
    seen: Tensor, users: Tensor, shape: tuple[int, ...], generator: torch.Generator | None = None
) -> Tensor:
    """Items drawn uniformly from ``1 .. N`` among those user ``users[b]`` has not seen (rejection sampling).

    Args:
        seen: ``(U, N + 1)`` bool, True where a user interacted with an item (column 0 = padding, ignored).
        users: ``(B,)`` long.
        shape: ``(B, ...)`` output shape.
    Returns:
        long tensor of ``shape``.
    Raises:
        ValueError: a user in ``users`` has seen every item.
    """
    num_items = seen.shape[1] - 1
    full = seen[users, 1:].all(1)
    if bool(full.any()):
        raise ValueError(f"sample_negatives: user(s) {users[full].tolist()[:5]} have seen all {num_items} items; "
                         "no negative exists")
    rows = users.view(-1, *([1] * (len(shape) - 1))).expand(shape)
    negatives = torch.randint(1, num_items + 1, shape, generator=generator)
    bad = seen[rows, negatives]
    while bool(bad.any()):
        negatives[bad] = torch.randint(1, num_items + 1, (int(bad.sum()),), generator=generator)
        bad = seen[rows, negatives]
    return negatives


class FullRankingMetrics(Metric):
    """Epoch averages of :func:`ranking_metrics`, summed across processes under DDP (torchmetrics).

    ``update(scores, target, exclude)`` adds a batch; ``compute()`` returns ``{"hr@5": mean, ...}``.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, ks: Sequence[int] = (5, 10, 20), ties: str = "pessimistic", **kwargs) -> None:
        super().__init__(**kwargs)
        self.ks = check_ks(ks)
        if ties not in TIE_POLICIES:
            raise ValueError(f"ties must be one of {TIE_POLICIES}, got {ties!r}")
        self.ties = ties
        self.names = [f"{m}@{k}" for k in self.ks for m in ("hr", "ndcg")] + ["mrr"]
        self.add_state("sums", default=torch.zeros(len(self.names), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, scores: Tensor, target: Tensor, exclude: Tensor | None = None) -> None:
        values = ranking_metrics(scores, target, exclude, ks=self.ks, ties=self.ties)
        self.sums += torch.stack([values[name].sum() for name in self.names])
        self.count += target.shape[0]

    def compute(self) -> dict[str, Tensor]:
        if float(self.count) == 0:
            return {name: torch.tensor(float("nan"), dtype=torch.float64) for name in self.names}
        return {name: self.sums[i] / self.count for i, name in enumerate(self.names)}


class _Rows(Dataset):
    def __init__(self, examples: TrainExamples | EvalExamples) -> None:
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> int:
        return index


class SequentialRecDataModule(L.LightningDataModule):
    """Chronological train / validation / test loaders over user sequences (leave-one-out by default).

    Batches are dicts: training ``users (B,)``, ``items (B, L)``, ``targets (B, L)``, ``times (B, L)`` and,
    with ``negatives=True``, ``negatives (B, L)`` (fresh each epoch, drawn from a generator seeded by
    ``(seed, epoch, batch position)``); validation / test ``users``,
    ``items``, ``times``, ``targets (B,)`` and ``history (B, H)`` (every item before the target,
    0-padded).

    Args:
        sequences: :class:`~pe_toolkit.domains.recsys.data.UserSequences`
            (e.g. ``build_sequences(load_interactions())``).
        max_len: window length (50).
        batch_size: users per batch (128).
        eval_batch_size: users per evaluation batch (default ``batch_size``).
        negatives: sample one negative per position for the BCE loss.
        train_users: if given, train on (and evaluate) only this many users, the first ones (a quick
            subset); ``None`` uses all.
        seed: seed of the training order and of the negatives; ``None``: ``torch.initial_seed()`` at
            construction (the seed given to ``seed_everything``).
        split, ratios, train_targets: see :func:`~pe_toolkit.domains.recsys.split.sequential_split`
            (``train_targets="prefixes"`` is RecBole's sequential protocol: every training prefix an example).
    """

    def __init__(self, sequences: UserSequences, *, max_len: int = 50, batch_size: int = 128,
                 eval_batch_size: int | None = None, negatives: bool = False, train_users: int | None = None,
                 seed: int | None = None, split: str = "leave_one_out", ratios: Sequence[float] = (0.8, 0.1, 0.1),
                 train_targets: str = "shifted") -> None:
        super().__init__()
        if not isinstance(sequences, UserSequences):
            raise TypeError(f"SequentialRecDataModule: sequences must be UserSequences, got {type(sequences).__name__}")
        self.max_len = check_int("SequentialRecDataModule: max_len", max_len)
        self.batch_size = check_int("SequentialRecDataModule: batch_size", batch_size)
        self.eval_batch_size = self.batch_size if eval_batch_size is None else check_int(
            "SequentialRecDataModule: eval_batch_size", eval_batch_size)
        self.negatives = bool(negatives)
        self.seed = data_seed("SequentialRecDataModule", seed)
        self._train_loader: ResumableDataLoader | None = None
        if train_users is not None:
            check_int("SequentialRecDataModule: train_users", train_users)
            if train_users > sequences.num_users:
                raise ValueError(f"SequentialRecDataModule: train_users={train_users} exceeds the "
                                 f"{sequences.num_users} users")
        self.num_items = sequences.num_items
        self.examples = sequential_split(sequences, max_len=max_len, split=split, ratios=tuple(ratios),
                                         train_targets=train_targets)
        if train_users is not None:
            self.examples = {stage: _head(ex, train_users) for stage, ex in self.examples.items()}
        # items each user interacted with in training (negatives must avoid them)
        train = self.examples["train"]
        self.seen = torch.zeros(sequences.num_users, self.num_items + 1, dtype=torch.bool)
        self.seen[train.users.unsqueeze(1), train.items] = True
        self.seen[train.users.unsqueeze(1), train.targets] = True
        self.seen[:, 0] = False

    def _collate_train(self, indices: list[int]) -> dict[str, Tensor]:
        ex: TrainExamples = self.examples["train"]
        idx = torch.tensor(indices, dtype=torch.long)
        batch = {"users": ex.users[idx], "items": ex.items[idx], "targets": ex.targets[idx], "times": ex.times[idx]}
        if self.negatives:
            # collated in the main process just before the batch is served: the loader's state is this
            # batch's (epoch, position), which a resumed loader reproduces
            loader = self._train_loader
            epoch, position = loader.position() if loader else (0, 0)
            generator = torch.Generator().manual_seed(batch_seed(self.seed, epoch, position))
            batch["negatives"] = sample_negatives(self.seen, batch["users"], tuple(batch["items"].shape),
                                                  generator=generator)
        return batch

    def _collate_eval(self, stage: str):
        ex: EvalExamples = self.examples[stage]

        def collate(indices: list[int]) -> dict[str, Tensor]:
            idx = torch.tensor(indices, dtype=torch.long)
            history = ex.history[idx]
            width = int((history != 0).sum(1).max()) if history.numel() else 0
            return {"users": ex.users[idx], "items": ex.items[idx], "times": ex.times[idx],
                    "targets": ex.targets[idx], "history": history[:, :max(width, 1)]}

        return collate

    def train_dataloader(self) -> ResumableDataLoader:
        rank, world = trainer_shard(self.trainer)
        self._train_loader = ResumableDataLoader(_Rows(self.examples["train"]), batch_size=self.batch_size,
                                                 seed=self.seed, collate_fn=self._collate_train, rank=rank,
                                                 world_size=world)
        return self._train_loader

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_Rows(self.examples["val"]), batch_size=self.eval_batch_size,
                          collate_fn=self._collate_eval("val"))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(_Rows(self.examples["test"]), batch_size=self.eval_batch_size,
                          collate_fn=self._collate_eval("test"))


def _head(examples: TrainExamples | EvalExamples, users: int) -> TrainExamples | EvalExamples:
    keep = examples.users < users
    return type(examples)(**{name: getattr(examples, name)[keep] for name in examples.__dataclass_fields__})


class SASRecModule(L.LightningModule):
    """SASRec trained with ``loss="bce"`` or ``"ce"``, evaluated by full ranking.

    Logged: ``train/loss`` (per step and epoch), and per evaluation stage ``s``: ``s/hr@K``, ``s/ndcg@K``
    for ``K`` in ``ks`` and ``s/mrr`` (epoch values over all queries; candidates = every item except the
    user's history unless ``exclude_history=False``, the target always included; ties by ``ties``).
    Both rankings are also logged under their own names, so each protocol's numbers come from the same
    model: ``s/all/...`` ranks every item (RecBole's full ranking for sequential models) and
    ``s/unseen/...`` excludes the history (SASRec's). Monitor ``"val/ndcg@10"`` with ``mode="max"`` for
    early stopping.

    Args:
        num_items: items ``1 .. num_items``.
        max_len, dim, num_heads, num_layers, dropout, encoding, encoding_options, share_encoding: see
            :class:`~pe_toolkit.domains.recsys.model.SASRec`.
        loss: ``"bce"`` (needs batches with ``negatives``) or ``"ce"``.
        lr, weight_decay, betas, warmup_steps, max_steps: AdamW with linear warmup and cosine decay
            (:func:`pe_toolkit.training.optim.adamw_with_warmup_cosine`).
        ks: ranking cut-offs; ties: tie policy (:data:`~pe_toolkit.domains.recsys.metrics.TIE_POLICIES`).
        exclude_history: drop the user's earlier items from the candidates (SASRec's protocol, right for
            MovieLens where an item is rated once); ``False`` ranks every item, as needed where users
            re-consume items (the synthetic recall log, whose targets are always in the history).
    """

    def __init__(
        self,
        num_items: int,
        *,
        max_len: int = 50,
        dim: int = 64,
        num_heads: int = 2,
        num_layers: int = 2,
        dropout: float = 0.2,
        encoding: str = "learned",
        encoding_options: dict[str, Any] | None = None,
        share_encoding: bool | None = None,
        loss: str = "ce",
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        betas: Sequence[float] = (0.9, 0.98),
        warmup_steps: int = 0,
        max_steps: int | None = None,
        ks: Sequence[int] = (5, 10, 20),
        ties: str = "pessimistic",
        exclude_history: bool = True,
    ) -> None:
        super().__init__()
        check_choice("SASRecModule: loss", loss, LOSSES)
        if not isinstance(exclude_history, bool):
            raise TypeError(f"SASRecModule: exclude_history must be a bool, got {type(exclude_history).__name__}")
        check_float("SASRecModule: lr", lr)
        check_float("SASRecModule: weight_decay", weight_decay, positive=False, minimum=0.0)
        check_int("SASRecModule: warmup_steps", warmup_steps, minimum=0)
        self.save_hyperparameters()
        self.model = SASRec(num_items, max_len=max_len, dim=dim, num_heads=num_heads, num_layers=num_layers,
                            dropout=dropout, encoding=encoding, encoding_options=encoding_options,
                            share_encoding=share_encoding)
        self.metrics = torch.nn.ModuleDict({f"{s}_{r}": FullRankingMetrics(tuple(ks), ties)
                                            for s in ("val", "test") for r in RANKINGS})

    def forward(self, items: Tensor, times: Tensor | None = None) -> Tensor:
        return self.model(items, times)

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        hidden = self.model(batch["items"], batch["times"])
        targets = batch["targets"]
        real = targets != 0
        if self.hparams.loss == "ce":
            logits = self.model.scores(hidden[real])
            return F.cross_entropy(logits, targets[real])
        if "negatives" not in batch:
            raise ValueError("SASRecModule: loss='bce' needs batches with 'negatives' "
                             "(SequentialRecDataModule(negatives=True))")
        table = self.model.item_embedding.weight
        h = hidden[real]
        positive = (h * table[targets[real]]).sum(-1)
        negative = (h * table[batch["negatives"][real]]).sum(-1)
        return F.binary_cross_entropy_with_logits(
            torch.cat([positive, negative]), torch.cat([torch.ones_like(positive), torch.zeros_like(negative)])
        )

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        # dropout from the global RNG seeded by (run seed, step, rank), so a resumed run draws the same masks
        with seeded_step(self):
            loss = self.loss(batch)
        self.log("train/loss", loss, on_step=True, on_epoch=True, prog_bar=True, batch_size=batch["items"].shape[0])
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        constrain_encodings(self)

    def rank_scores(self, batch: dict[str, Tensor], exclude_history: bool | None = None) -> tuple[Tensor, Tensor]:
        """Scores ``(B, N + 1)`` of every item after each history, and the exclusion mask (padding, and the
        history when ``exclude_history``, by default the module's)."""
        hidden = self.model(batch["items"], batch["times"])[:, -1]
        scores = self.model.scores(hidden)
        return scores, self._exclusion(scores, batch, self.hparams.exclude_history if exclude_history is None
                                       else exclude_history)

    @staticmethod
    def _exclusion(scores: Tensor, batch: dict[str, Tensor], exclude_history: bool) -> Tensor:
        exclude = torch.zeros_like(scores, dtype=torch.bool)
        if exclude_history:
            exclude.scatter_(1, batch["history"], True)
        exclude[:, 0] = True
        return exclude

    def _evaluate(self, batch: dict[str, Tensor], stage: str) -> None:
        scores, _ = self.rank_scores(batch)
        for ranking in RANKINGS:
            exclude = self._exclusion(scores, batch, ranking == "unseen")
            self.metrics[f"{stage}_{ranking}"].update(scores, batch["targets"], exclude)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def _log_epoch(self, stage: str) -> None:
        primary = "unseen" if self.hparams.exclude_history else "all"
        for ranking in RANKINGS:
            values = self.metrics[f"{stage}_{ranking}"].compute()
            self.metrics[f"{stage}_{ranking}"].reset()
            for name, value in values.items():
                self.log(f"{stage}/{ranking}/{name}", value.float())
                if ranking == primary:
                    self.log(f"{stage}/{name}", value.float(), prog_bar=name == "ndcg@10")

    def on_validation_epoch_end(self) -> None:
        self._log_epoch("val")

    def on_test_epoch_end(self) -> None:
        self._log_epoch("test")

    def configure_optimizers(self):
        hp = self.hparams
        return adamw_with_warmup_cosine(
            self.named_parameters(), lr=hp.lr, weight_decay=hp.weight_decay, betas=hp.betas,
            warmup_steps=hp.warmup_steps, max_steps=hp.max_steps,
        )
