"""``LanguageModelModule``: next-token language modelling (e.g. bytes) with any positional encoding."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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


def train_language_model(
    model: torch.nn.Module, data: Any, *, lr: float, steps: int, callbacks: Sequence[Any] | None = None,
    warmup_fraction: float = 0.1, weight_decay: float = 0.1, seed: int = 0, device: Mapping[str, Any] | None = None,
) -> tuple[LanguageModelModule, list[float]]:
    """Train a given next-token model (e.g. a byte-level ``Transformer`` or a converted one) in place.

    The :class:`LanguageModelModule` recipe around a model built elsewhere: AdamW (betas 0.9 / 0.95,
    ``weight_decay``), linear warm-up over ``warmup_fraction`` of ``steps`` then cosine decay to 10 %,
    gradient clipping at norm 1, no validation, no logger or checkpoints. The fit runs under
    ``torch.random.fork_rng``: what it draws does not move the global random state.

    Args:
        model: maps ``(B, T)`` token ids to logits ``(B, T, V)``.
        data: a Lightning data module of ``{"input_ids", "targets"}`` batches (``ByteLMDataModule``).
        callbacks: Lightning callbacks (e.g. ``AttentionLogitMonitor``).
        seed: ``lightning.seed_everything`` before the module is built.
        device: ``lightning.Trainer``'s ``accelerator`` / ``devices`` / ``precision`` (default: the CPU, float32).

    Returns:
        ``(module, losses)``: the module whose ``model`` is ``model``, and the training loss of every step.
    """
    import lightning as L

    from pe_toolkit.training.callbacks import LossHistory

    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    L.seed_everything(seed, verbose=False)
    # a minimal module whose Transformer is replaced by ``model``: the optimiser and schedule are the module's
    module = LanguageModelModule(vocab_size=256, dim=8, num_heads=1, num_layers=1, lr=lr,
                                 warmup_steps=max(1, int(warmup_fraction * steps)), max_steps=steps,
                                 weight_decay=weight_decay, betas=(0.9, 0.95))
    module.model = model
    losses = LossHistory(every_n_steps=1)
    trainer = L.Trainer(
        max_steps=steps, **{"accelerator": "cpu", "devices": 1, "precision": "32-true", **(device or {})},
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        limit_val_batches=0, gradient_clip_val=1.0, callbacks=[losses, *(callbacks or [])], num_sanity_val_steps=0,
    )
    with torch.random.fork_rng():
        trainer.fit(module, datamodule=data)
    return module, [loss for _, loss in losses.history]


def validation_loss(module: LanguageModelModule, windows: torch.Tensor, batch_size: int = 16) -> float:
    """Mean next-token cross-entropy (nats) of ``module`` over ``windows (W, T + 1)``; ``inf`` when not finite
    (a diverged model), so that it still compares and sorts."""
    value = math.log(module.perplexity(windows, batch_size=batch_size))
    return value if math.isfinite(value) else float("inf")
