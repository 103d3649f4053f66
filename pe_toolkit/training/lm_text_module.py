"""``LanguageModelModule``: next-token language modelling (e.g. bytes) with any positional encoding."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from pe_toolkit.nn import Transformer, TransformerConfig
from pe_toolkit.training.exact_match import ExactMatchModule

LOSS_AVERAGES = ("tokens", "rows")


class LanguageModelModule(ExactMatchModule):
    """A decoder-only ``Transformer`` trained on ``{"input_ids", "targets"}`` batches
    (``targets = -100`` where no loss is taken), as produced by ``ByteLMDataModule``.

    Validation logs ``val/loss`` and ``val/perplexity``. :meth:`perplexity` evaluates a tensor of
    windows at any length (set ``attention_block_size`` to bound memory at long lengths).

    Args:
        vocab_size: 256 for bytes.
        dim, num_heads, num_layers, mlp, norm, dropout: model size (``TransformerConfig``).
        encoding, encoding_options: the positional encoding by registry name.
        attention_block_size: queries per attention block (``TransformerConfig``).
        lr, weight_decay, betas, warmup_steps, max_steps: optimisation (see :class:`ExactMatchModule`).
        loss_average: how the training and validation loss averages the next-token losses:
            ``"tokens"`` (default, the usual LM loss: every scored token weighs the same) or
            ``"rows"`` (each row's mean over its scored tokens, then the mean over the rows that
            have any). Use ``"rows"`` when rows carry very different numbers of scored tokens,
            e.g. text windows mixed with passkey prompts scored on their 6 answer bytes only:
            averaged over tokens, a quarter of the rows being passkey prompts gives their answers
            under 1 % of the loss at context 256; averaged over rows, a quarter.
    """

    def __init__(
        self,
        vocab_size: int = 256,
        dim: int = 128,
        num_heads: int = 4,
        num_layers: int = 4,
        encoding: str = "rope",
        encoding_options: dict[str, Any] | None = None,
        mlp: str = "swiglu",
        norm: str = "rmsnorm",
        dropout: float = 0.0,
        attention_block_size: int | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.1,
        betas: Sequence[float] = (0.9, 0.95),
        warmup_steps: int = 100,
        max_steps: int = 0,
        loss_average: str = "tokens",
    ) -> None:
        super().__init__()
        if loss_average not in LOSS_AVERAGES:
            raise ValueError(f"loss_average must be one of {LOSS_AVERAGES}, got {loss_average!r}")
        self.save_hyperparameters()
        self.model = Transformer(
            TransformerConfig(
                vocab_size=vocab_size, dim=dim, num_heads=num_heads, num_layers=num_layers, causal=True,
                encoding=encoding, encoding_options=dict(encoding_options or {}), mlp=mlp, norm=norm,
                dropout=dropout, attention_block_size=attention_block_size,
            )
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def answer_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        logits = self.model(batch["input_ids"])  # (B, T, V)
        targets = batch["targets"]  # (B, T), -100 where no loss is taken
        if self.hparams.get("loss_average", "tokens") == "tokens":
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)
        nll = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=-100, reduction="none")  # (B, T)
        scored = (targets != -100).sum(dim=1)  # (B,)
        rows = scored > 0
        if not bool(rows.any()):
            raise ValueError("answer_loss: the batch has no scored token (every target is -100)")
        return (nll.sum(dim=1)[rows] / scored[rows]).mean()

    @staticmethod
    def batch_size_of(batch: dict[str, Any]) -> int:
        return int(batch["input_ids"].shape[0])

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss = self.answer_loss(batch)
        self.log("val/loss", loss, batch_size=self.batch_size_of(batch), sync_dist=True)
        self.log("val/perplexity", loss.exp(), batch_size=self.batch_size_of(batch), sync_dist=True)

    def on_validation_epoch_end(self) -> None:  # no exact-match decoding for plain text
        pass

    @torch.no_grad()
    def perplexity(self, windows: torch.Tensor, batch_size: int = 1) -> float:
        """exp(mean next-token NLL) over ``windows (W, T + 1)``: every window predicts its last T tokens."""
        was_training = self.training
        self.eval()
        total, count = 0.0, 0
        for start in range(0, windows.shape[0], batch_size):
            chunk = windows[start : start + batch_size].to(self.device)
            logits = self.model(chunk[:, :-1])
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), chunk[:, 1:].reshape(-1),
                                  reduction="sum")
            total += float(nll)
            count += chunk[:, 1:].numel()
        self.train(was_training)
        return math.exp(total / count)
