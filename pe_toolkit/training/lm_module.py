"""``SequenceLMModule``: a causal ``Transformer`` on prompt/answer tasks, evaluated by greedy decoding."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from pe_toolkit.nn import Transformer, TransformerConfig, randomized_positions
from pe_toolkit.tasks import Vocabulary
from pe_toolkit.training.exact_match import ExactMatchModule
from pe_toolkit.training.resumable import step_seed

IGNORE_INDEX = -100


class SequenceLMModule(ExactMatchModule):
    """A decoder-only ``Transformer`` trained with cross-entropy on answer tokens only.

    Sequences are ``<bos> prompt <sep> answer <eos>`` (``TaskDataModule(layout="causal")``).
    Validation and test decode greedily with the KV cache from ``<bos> prompt <sep>`` and score exact
    match of the answer, overall and per length bucket (see :class:`ExactMatchModule`).

    Args:
        vocab_size: vocabulary size (``TaskDataModule.vocab_size``).
        dim, num_heads, num_layers, num_kv_heads, mlp, norm, dropout: model size (``TransformerConfig``).
        encoding, encoding_options: the positional encoding by registry name.
        lr, weight_decay, betas: AdamW.
        warmup_steps, max_steps: linear warmup, then cosine decay to 10 % at ``max_steps``
            (``max_steps=0``: constant after warmup).
        eos_id: the ``<eos>`` id; answers are cut there when decoding.
        max_answer_tokens: decoding budget beyond the longest reference answer of a batch.
        randomized_max_position: train on sorted random positions from ``[0, randomized_max_position)``
            (Ruoss et al. 2023, :func:`pe_toolkit.nn.randomized_positions`); evaluation uses
            ``arange(L)``, positions the model has seen in training. ``None``: ``arange(L)`` throughout.
        scale_embeddings: Vaswani-style token embeddings (N(0, 1/dim) init, times ``sqrt(dim)``), see
            :class:`~pe_toolkit.nn.TransformerConfig`.
        embedding_std, tie_embeddings: the token embeddings' init std (``None``: 0.02) and whether the output
            head reuses them (see :class:`~pe_toolkit.nn.TransformerConfig`).
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
        randomized_max_position: int | None = None,
        scale_embeddings: bool = False,
        embedding_std: float | None = None,
        tie_embeddings: bool = True,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model = Transformer(
            TransformerConfig(
                vocab_size=vocab_size, dim=dim, num_heads=num_heads, num_layers=num_layers,
                num_kv_heads=num_kv_heads, causal=True, encoding=encoding,
                encoding_options=dict(encoding_options or {}), mlp=mlp, norm=norm, dropout=dropout,
                scale_embeddings=scale_embeddings, embedding_std=embedding_std, tie_embeddings=tie_embeddings,
            )
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)

    def answer_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        """Mean cross-entropy of the answer tokens (and ``<eos>``), predicting token t from < t."""
        positions = None
        if self.training and self.hparams.randomized_max_position is not None:
            b, length = batch["input_ids"].shape
            # seeded by (run seed, step), not the global RNG, so a resumed run draws the same positions
            generator = torch.Generator().manual_seed(step_seed(self.global_step, self.global_rank))
            positions = randomized_positions(
                b, length, self.hparams.randomized_max_position, generator=generator
            ).to(self.device)
        logits = self.model(batch["input_ids"], positions=positions)
        return F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), batch["labels"][:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
        )

    @torch.no_grad()
    def greedy_answers(self, prompt_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """Greedy continuation ids ``(B, max_new_tokens)`` of equal-length prompts, with the KV cache."""
        return self.model.generate(prompt_ids, max_new_tokens)[:, prompt_ids.shape[1]:]

    def decode_answers(self, batch: dict[str, Any]) -> tuple[list[list[int]], list[list[int]]]:
        starts, ends = batch["answer_start"].tolist(), (batch["lengths"] - 1).tolist()  # answer = ids[start:end]
        references = [ids[s:e] for ids, s, e in zip(batch["input_ids"].tolist(), starts, ends)]
        budget = max(len(r) for r in references) + self.hparams.max_answer_tokens
        return self.greedy_answers(batch["prompt_ids"], budget).tolist(), references
