"""``SequenceLMModule``: train a ``Transformer`` on prompt/answer tasks, evaluate by greedy decoding."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F

from pe_toolkit.nn import Transformer, TransformerConfig
from pe_toolkit.tasks import Vocabulary

IGNORE_INDEX = -100


class SequenceLMModule(L.LightningModule):
    """A causal ``Transformer`` trained with cross-entropy on answer tokens only.

    Validation and test decode greedily with the KV cache from ``<bos> prompt <sep>`` and score exact
    match of the answer (up to ``<eos>``), overall and per length bucket (the task's length measure).
    Per-length counts are summed across processes, so DDP runs report the same numbers.

    Args:
        vocab_size: vocabulary size (``len(TaskDataModule.vocab)``).
        dim, num_heads, num_layers, num_kv_heads, mlp, norm, dropout: model size (see ``TransformerConfig``).
        encoding, encoding_options: the positional encoding by registry name.
        lr, weight_decay, betas: AdamW.
        warmup_steps, max_steps: linear warmup then cosine decay to 10 % over ``max_steps``
            (``max_steps=0``: constant after warmup).
        eos_id: the ``<eos>`` id (answers are cut there when decoding).
        max_answer_tokens: decoding budget beyond the longest reference answer of a batch.

    After ``trainer.test``, :attr:`test_results` holds ``{length: (correct, total)}``.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int = 128,
        num_heads: int = 4,
        num_layers: int = 4,
        num_kv_heads: int | None = None,
        encoding: str = "nope",
        encoding_options: dict[str, Any] | None = None,
        mlp: str = "swiglu",
        norm: str = "rmsnorm",
        dropout: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        betas: Sequence[float] = (0.9, 0.98),
        warmup_steps: int = 100,
        max_steps: int = 0,
        eos_id: int = Vocabulary.eos_id,
        max_answer_tokens: int = 2,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = Transformer(
            TransformerConfig(
                vocab_size=vocab_size, dim=dim, num_heads=num_heads, num_layers=num_layers,
                num_kv_heads=num_kv_heads, causal=True, encoding=encoding,
                encoding_options=dict(encoding_options or {}), mlp=mlp, norm=norm, dropout=dropout,
            )
        )
        self._counts: dict[str, torch.Tensor] = {}
        self.test_results: dict[int, tuple[int, int]] = {}
        self.val_results: dict[int, tuple[int, int]] = {}

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    # -------------------------------------------------------------------------------- training
    def answer_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        """Mean cross-entropy of the answer tokens (and ``<eos>``), predicting token t from < t."""
        logits = self.model(batch["input_ids"])
        return F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
        )

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self.answer_loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def configure_optimizers(self):
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            if not p.requires_grad:
                continue
            (decay if p.dim() >= 2 and ".encodings." not in f".{name}" else no_decay).append(p)
        optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": self.hparams.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=self.hparams.lr, betas=tuple(self.hparams.betas),
        )
        warmup, total = self.hparams.warmup_steps, self.hparams.max_steps

        def schedule(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            if total <= warmup:
                return 1.0
            progress = min(1.0, (step - warmup) / (total - warmup))
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ------------------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def greedy_answers(self, prompt_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Greedy continuation ids ``(B, max_new_tokens)`` of equal-length prompts, with the KV cache."""
        return self.model.generate(prompt_ids, max_new_tokens)[:, prompt_ids.shape[1]:]

    def _exact_match(self, batch: dict[str, Any]) -> torch.Tensor:
        """1 where the greedy answer, cut at the first ``<eos>``, equals the reference answer."""
        eos = self.hparams.eos_id
        starts, ends = batch["answer_start"].tolist(), (batch["lengths"] - 1).tolist()  # answer = ids[start:end]
        budget = max(e - s for s, e in zip(starts, ends)) + self.hparams.max_answer_tokens
        generated = self.greedy_answers(batch["prompt_ids"], budget).tolist()
        correct = []
        for row, ids, s, e in zip(generated, batch["input_ids"].tolist(), starts, ends):
            correct.append(eos in row and row[: row.index(eos)] == ids[s:e])  # must also stop
        return torch.tensor(correct, dtype=torch.long, device=batch["input_ids"].device)

    def _accumulate(self, stage: str, batch: dict[str, Any]) -> None:
        correct = self._exact_match(batch)
        lengths = batch["length_measure"]
        size = int(lengths.max()) + 1
        counts = self._counts.setdefault(stage, torch.zeros(2, 0, dtype=torch.long, device=lengths.device))
        if counts.shape[1] < size:
            counts = torch.cat((counts, counts.new_zeros(2, size - counts.shape[1])), dim=1)
        counts[0].index_add_(0, lengths, correct)
        counts[1].index_add_(0, lengths, torch.ones_like(correct))
        self._counts[stage] = counts

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self.log("val/loss", self.answer_loss(batch), batch_size=batch["input_ids"].shape[0], sync_dist=True)
        self._accumulate("val", batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        self._accumulate("test", batch)

    def _finish(self, stage: str) -> dict[int, tuple[int, int]]:
        counts = self._counts.pop(stage, None)
        if counts is None:
            return {}
        # processes may have seen different maximum lengths: pad to a common width before summing
        width = int(self.all_gather(torch.tensor(counts.shape[1], device=counts.device)).max())
        counts = torch.cat((counts, counts.new_zeros(2, width - counts.shape[1])), dim=1)
        gathered = self.all_gather(counts)
        total_counts = gathered.sum(0) if gathered.dim() == 3 else gathered
        results = {
            length: (int(total_counts[0, length]), int(total_counts[1, length]))
            for length in range(width) if total_counts[1, length] > 0
        }
        correct = sum(c for c, _ in results.values())
        total = sum(t for _, t in results.values())
        # the counts are already summed over processes; sync_dist only averages identical values
        self.log(f"{stage}/exact_match", correct / max(total, 1), sync_dist=True)
        for length, (c, t) in results.items():
            self.log(f"{stage}/exact_match_len_{length}", c / t, sync_dist=True)
        return results

    def on_validation_epoch_end(self) -> None:
        self.val_results = self._finish("val")

    def on_test_epoch_end(self) -> None:
        self.test_results = self._finish("test")
