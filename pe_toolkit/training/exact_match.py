"""Shared evaluation for prompt/answer tasks: exact match per length bucket, summed across processes."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch

from pe_toolkit.encoders.base import constrain_encodings
from pe_toolkit.training.optim import adamw_with_warmup_cosine

# How a decoded answer compares with its reference (see ExactMatchModule.answer_outcomes).
OUTCOMES = ("correct", "stopped_early", "ran_over", "wrong_tokens")


class ExactMatchModule(L.LightningModule):
    """Base for task models: AdamW with warmup + cosine schedule, exact-match accuracy per length.

    Subclasses implement ``answer_loss(batch) -> Tensor`` and ``decode_answers(batch) -> (generated,
    references)`` (greedy token-id rows, and the reference answers without ``<eos>``);
    ``exact_match(batch) -> LongTensor (B,)`` is 1 where the decoded answer, cut at ``<eos>``, equals
    the reference. Validation logs the loss and ``val/exact_match``; both stages log
    ``<stage>/exact_match_len_<n>`` per length measure ``n``. After ``trainer.validate`` /
    ``trainer.test``, :attr:`val_results` / :attr:`test_results` hold ``{length: (correct, total)}`` and
    :attr:`val_outcomes` / :attr:`test_outcomes` hold ``{length: {outcome: count}}`` over
    :data:`OUTCOMES` (how the wrong answers went wrong), identical on every process.

    After every training batch the encodings' constraints are re-imposed (``constrain_encodings``).
    Expects ``self.hparams`` to hold ``lr``, ``weight_decay``, ``betas``, ``warmup_steps``, ``max_steps``.
    """

    def __init__(self) -> None:
        super().__init__()
        self._counts: dict[str, torch.Tensor] = {}
        self.val_results: dict[int, tuple[int, int]] = {}
        self.test_results: dict[int, tuple[int, int]] = {}
        self.val_outcomes: dict[int, dict[str, int]] = {}
        self.test_outcomes: dict[int, dict[str, int]] = {}

    def answer_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        raise NotImplementedError

    def decode_answers(self, batch: dict[str, Any]) -> tuple[list[list[int]], list[list[int]]]:
        raise NotImplementedError

    def exact_match(self, batch: dict[str, Any]) -> torch.Tensor:
        generated, references = self.decode_answers(batch)
        correct = self.compare_answers(generated, references, self.hparams.eos_id)
        return torch.tensor(correct, dtype=torch.long, device=self.device)

    @staticmethod
    def batch_size_of(batch: dict[str, Any]) -> int:
        return int(batch["length_measure"].shape[0]) if "length_measure" in batch else len(next(iter(batch.values())))

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self.answer_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=self.batch_size_of(batch))
        return loss

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        constrain_encodings(self)  # e.g. HeadScale's lambda >= 1 after every optimizer step

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/loss", self.answer_loss(batch), batch_size=self.batch_size_of(batch), sync_dist=True)
        self._accumulate("val", batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._accumulate("test", batch)

    def on_validation_epoch_end(self) -> None:
        self.val_results, self.val_outcomes = self._finish("val")

    def on_test_epoch_end(self) -> None:
        self.test_results, self.test_outcomes = self._finish("test")

    def configure_optimizers(self):
        hp = self.hparams
        return adamw_with_warmup_cosine(
            self.named_parameters(), lr=hp.lr, weight_decay=hp.weight_decay, betas=hp.betas,
            warmup_steps=hp.warmup_steps, max_steps=hp.max_steps,
        )

    @staticmethod
    def compare_answers(generated: list[list[int]], references: list[list[int]], eos_id: int) -> list[bool]:
        """True where a generated row holds the reference followed by ``<eos>`` (it must also stop)."""
        return [outcome == 0 for outcome in ExactMatchModule.answer_outcomes(generated, references, eos_id)]

    @staticmethod
    def answer_outcomes(generated: list[list[int]], references: list[list[int]], eos_id: int) -> list[int]:
        """Index into :data:`OUTCOMES` of each generated row against its reference.

        The answer is the row up to its first ``<eos>`` (the whole row if there is none).
        ``correct``: it equals the reference and ends with ``<eos>``; ``stopped_early``: ``<eos>`` came
        after a strict prefix of the reference; ``ran_over``: the reference was emitted in full but not
        followed by ``<eos>``; ``wrong_tokens``: a token differs from the reference.
        """
        outcomes = []
        for row, ref in zip(generated, references):
            stopped = eos_id in row
            answer = row[: row.index(eos_id)] if stopped else row
            if stopped and answer == ref:
                outcomes.append(0)
            elif stopped and len(answer) < len(ref) and answer == ref[: len(answer)]:
                outcomes.append(1)
            elif answer[: len(ref)] == ref:
                outcomes.append(2)
            else:
                outcomes.append(3)
        return outcomes

    def _accumulate(self, stage: str, batch: dict[str, Any]) -> None:
        generated, references = self.decode_answers(batch)
        outcomes = torch.tensor(self.answer_outcomes(generated, references, self.hparams.eos_id),
                                dtype=torch.long, device=self.device)
        lengths = batch["length_measure"].to(self.device)
        rows = 1 + len(OUTCOMES)  # totals, then one row per outcome
        size = int(lengths.max()) + 1
        counts = self._counts.setdefault(stage, torch.zeros(rows, 0, dtype=torch.long, device=self.device))
        if counts.shape[1] < size:
            counts = torch.cat((counts, counts.new_zeros(rows, size - counts.shape[1])), dim=1)
        counts.view(-1).index_add_(0, lengths, torch.ones_like(lengths))
        counts.view(-1).index_add_(0, (1 + outcomes) * counts.shape[1] + lengths, torch.ones_like(lengths))
        self._counts[stage] = counts

    def _finish(self, stage: str) -> tuple[dict[int, tuple[int, int]], dict[int, dict[str, int]]]:
        rows = 1 + len(OUTCOMES)
        counts = self._counts.pop(stage, torch.zeros(rows, 0, dtype=torch.long, device=self.device))
        # processes may have seen different maximum lengths: pad to a common width before summing
        width = int(self.all_gather(torch.tensor(counts.shape[1], device=counts.device)).max())
        counts = torch.cat((counts, counts.new_zeros(rows, width - counts.shape[1])), dim=1)
        gathered = self.all_gather(counts)
        totals = gathered.sum(0) if gathered.dim() == 3 else gathered
        seen = [n for n in range(width) if totals[0, n] > 0]
        results = {n: (int(totals[1, n]), int(totals[0, n])) for n in seen}
        outcomes = {n: {name: int(totals[1 + i, n]) for i, name in enumerate(OUTCOMES)} for n in seen}
        correct = sum(c for c, _ in results.values())
        total = sum(t for _, t in results.values())
        # the counts are already summed over processes; sync_dist only averages identical values
        self.log(f"{stage}/exact_match", correct / max(total, 1), sync_dist=True)
        for n, (c, t) in results.items():
            self.log(f"{stage}/exact_match_len_{n}", c / t, sync_dist=True)
        return results, outcomes
