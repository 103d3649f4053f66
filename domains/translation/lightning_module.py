"""Lightning training for translation: a dataset with cross-lingual positions, a data module, BLEU.

``TranslationDataset`` holds encoded sentence pairs and one cross-lingual position per source token
(from the alignment, :func:`oracle_positions`, or from a source-only
:class:`~pe_toolkit.domains.translation.reorderer.BTGReorderer`). ``TranslationModule`` trains a
:class:`~pe_toolkit.domains.translation.model.TranslationModel` with cross-entropy and the toolkit's AdamW + warmup +
cosine recipe, and reports corpus BLEU (``sacrebleu``, Papineni et al. 2002; Post 2018) and exact match of
greedy translations for validation and test.
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

from collections.abc import Sequence
from typing import Any

import lightning as L
import sacrebleu
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

from pe_toolkit.domains.translation.data import SentencePair, Vocabulary
from pe_toolkit.domains.translation.model import TranslationModel
from pe_toolkit.domains.translation.task import oracle_positions  # here too: its home before the task module
from pe_toolkit.training.optim import adamw_with_warmup_cosine
from pe_toolkit.training.resumable import ResumableDataLoader, data_seed, seeded_step, trainer_shard

__all__ = ["TranslationDataModule", "TranslationDataset", "TranslationModule", "corpus_bleu", "oracle_positions"]


def corpus_bleu(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU (0-100) of token lists with sacrebleu, on the given tokens (``tokenize="none"``).

    Raises:
        ValueError: different numbers of hypotheses and references, or none at all.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu: {len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("corpus_bleu: no sentences")
    hyps = [" ".join(h) for h in hypotheses]
    refs = [" ".join(r) for r in references]
    return float(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score)


class TranslationDataset(Dataset):
    """Encoded pairs with cross-lingual positions.

    Args:
        pairs: sentence pairs.
        source_vocab, target_vocab: vocabularies.
        xl_positions: one list per pair, a permutation of ``range(len(source))``.
    Raises:
        ValueError: a different number of position lists than pairs, or a list that is not a permutation
            of its sentence's token indices.
    """

    def __init__(self, pairs: Sequence[SentencePair], source_vocab: Vocabulary, target_vocab: Vocabulary,
                 xl_positions: Sequence[Sequence[int]]) -> None:
        if len(pairs) != len(xl_positions):
            raise ValueError(f"TranslationDataset: {len(pairs)} pairs but {len(xl_positions)} xl_positions lists")
        self.items = []
        for index, (pair, xl) in enumerate(zip(pairs, xl_positions)):
            if sorted(xl) != list(range(len(pair.source))):
                raise ValueError(f"TranslationDataset: xl_positions[{index}] must be a permutation of "
                                 f"0..{len(pair.source) - 1}, got {list(xl)!r}")
            target = [target_vocab.bos_id, *target_vocab.encode(pair.target), target_vocab.eos_id]
            self.items.append((source_vocab.encode(pair.source), list(xl), target, list(pair.target)))

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> tuple:
        return self.items[index]

    @staticmethod
    def collate(items: Sequence[tuple]) -> dict[str, Any]:
        """Pad to the longest sentence: ``source``, ``source_mask``, ``xl_positions`` ``(B, S)``; ``target``,
        ``target_mask`` ``(B, T)``; ``references`` (token lists)."""
        b = len(items)
        s = max(len(i[0]) for i in items)
        t = max(len(i[2]) for i in items)
        source = torch.zeros(b, s, dtype=torch.long)
        xl = torch.zeros(b, s, dtype=torch.long)
        target = torch.zeros(b, t, dtype=torch.long)
        for row, (src, pos, tgt, _) in enumerate(items):
            source[row, : len(src)] = torch.tensor(src)
            xl[row, : len(pos)] = torch.tensor(pos)
            target[row, : len(tgt)] = torch.tensor(tgt)
        lengths = torch.tensor([len(i[0]) for i in items])
        target_lengths = torch.tensor([len(i[2]) for i in items])
        return {
            "source": source, "source_mask": torch.arange(s) < lengths[:, None], "xl_positions": xl,
            "target": target, "target_mask": torch.arange(t) < target_lengths[:, None],
            "references": [i[3] for i in items],
        }


class TranslationDataModule(L.LightningDataModule):
    """Loaders over train / val / test :class:`TranslationDataset` s (train shuffled with ``seed``)."""

    def __init__(self, train: TranslationDataset, val: TranslationDataset, test: TranslationDataset | None = None,
                 *, batch_size: int = 64, seed: int = 0) -> None:
        super().__init__()
        self.train, self.val, self.test = train, val, test if test is not None else val
        self.batch_size, self.seed = batch_size, data_seed("TranslationDataModule", seed)

    def train_dataloader(self) -> ResumableDataLoader:
        # epoch e's order is the permutation of (seed, e); the loader resumes mid-epoch from a checkpoint
        rank, world = trainer_shard(self.trainer)
        return ResumableDataLoader(self.train, batch_size=self.batch_size, seed=self.seed,
                                   collate_fn=TranslationDataset.collate, rank=rank, world_size=world)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val, batch_size=self.batch_size, collate_fn=TranslationDataset.collate)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test, batch_size=self.batch_size, collate_fn=TranslationDataset.collate)


class TranslationModule(L.LightningModule):
    """Trains a :class:`TranslationModel`; validation and test log ``<stage>/bleu`` and ``<stage>/exact_match``.

    Args:
        target_tokens: the target vocabulary's ``itos`` list (to turn decoded ids into tokens for BLEU).
        source_vocab: source vocabulary size.
        model_options: keyword options of :class:`TranslationModel` (``dim``, ``encoding``, ...).
        lr, weight_decay, betas, warmup_steps, max_steps: optimisation (:func:`adamw_with_warmup_cosine`).
        max_decode_extra: decoding budget beyond the longest reference in the batch.

    After ``trainer.validate`` / ``trainer.test``, :attr:`results` holds ``{"bleu", "exact_match"}`` of that
    stage and :attr:`hypotheses` the decoded token lists.
    """

    def __init__(self, target_tokens: Sequence[str], source_vocab: int, model_options: dict[str, Any] | None = None,
                 lr: float = 2e-3, weight_decay: float = 0.01, betas: Sequence[float] = (0.9, 0.98),
                 warmup_steps: int = 50, max_steps: int = 0, max_decode_extra: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.target_tokens = list(target_tokens)
        self.model = TranslationModel(source_vocab, len(self.target_tokens), **dict(model_options or {}))
        self._outputs: list[tuple[list[str], list[str]]] = []
        self.results: dict[str, float] = {}
        self.hypotheses: list[list[str]] = []

    def loss(self, batch: dict[str, Any]) -> torch.Tensor:
        target = batch["target"]
        logits = self.model(batch["source"], batch["source_mask"], target[:, :-1], batch["xl_positions"])
        labels = target[:, 1:].masked_fill(~batch["target_mask"][:, 1:], -100)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        with seeded_step(self):  # dropout drawn from (run seed, step): a resumed run draws the same masks
            loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["source"].shape[0])
        return loss

    def _decode(self, batch: dict[str, Any]) -> None:
        budget = max(len(r) for r in batch["references"]) + self.hparams.max_decode_extra
        ids = self.model.translate(batch["source"], batch["source_mask"], batch["xl_positions"], max_length=budget)
        for row, reference in zip(ids, batch["references"]):
            self._outputs.append(([self.target_tokens[i] for i in row], list(reference)))

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/loss", self.loss(batch), batch_size=batch["source"].shape[0])
        self._decode(batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._decode(batch)

    def _finish(self, stage: str) -> None:
        hyps = [h for h, _ in self._outputs]
        refs = [r for _, r in self._outputs]
        self._outputs = []
        if not hyps:
            return
        self.results = {"bleu": corpus_bleu(hyps, refs),
                        "exact_match": sum(h == r for h, r in zip(hyps, refs)) / len(hyps)}
        self.hypotheses = hyps
        for key, value in self.results.items():
            self.log(f"{stage}/{key}", value)

    def on_validation_epoch_end(self) -> None:
        self._finish("val")

    def on_test_epoch_end(self) -> None:
        self._finish("test")

    def configure_optimizers(self):
        hp = self.hparams
        return adamw_with_warmup_cosine(self.named_parameters(), lr=hp.lr, weight_decay=hp.weight_decay,
                                        betas=hp.betas, warmup_steps=hp.warmup_steps, max_steps=hp.max_steps)
