"""``EncoderDecoderModule``: an encoder (causal or bidirectional) and a cross-attending decoder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from pe_toolkit.nn import Transformer, TransformerConfig
from pe_toolkit.tasks import Vocabulary
from pe_toolkit.training.exact_match import ExactMatchModule


class EncoderDecoderModule(ExactMatchModule):
    """Encoder-decoder ``Transformer`` for prompt/answer tasks (``TaskDataModule(layout="seq2seq")``).

    The encoder reads ``<bos> prompt <sep>`` with the chosen positional encoding, causally or
    bidirectionally (``encoder_causal``) — the comparison Golkar et al. 2024 make on contextual
    counting. The decoder generates ``answer <eos>`` from ``<bos>``, attending to the encoder's states;
    it uses the same encoding family, always causal. Token embeddings are shared.

    Args:
        vocab_size: vocabulary size.
        dim, num_heads, encoder_layers, decoder_layers, dropout: sizes.
        encoder_causal: causal (True) or bidirectional (False) encoder.
        encoding, encoding_options: positional encoding of both stacks by registry name.
        lr, weight_decay, betas, warmup_steps, max_steps: optimisation (see :class:`ExactMatchModule`).
        bos_id, eos_id: special ids of the target sequences.
        max_answer_tokens: decoding budget beyond the longest reference answer.
        scale_embeddings: Vaswani-style token embeddings (see :class:`~pe_toolkit.nn.TransformerConfig`).
        embedding_std, tie_embeddings: the token embeddings' init std (``None``: 0.02) and whether the output
            head reuses them (see :class:`~pe_toolkit.nn.TransformerConfig`).
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int = 128,
        num_heads: int = 4,
        encoder_layers: int = 2,
        decoder_layers: int = 1,
        encoder_causal: bool = True,
        encoding: str = "nope",
        encoding_options: dict[str, Any] | None = None,
        dropout: float = 0.0,
        lr: float = 1e-3,
        weight_decay: float = 0.05,
        betas: Sequence[float] = (0.9, 0.98),
        warmup_steps: int = 100,
        max_steps: int = 0,
        bos_id: int = Vocabulary.bos_id,
        eos_id: int = Vocabulary.eos_id,
        max_answer_tokens: int = 2,
        scale_embeddings: bool = False,
        embedding_std: float | None = None,
        tie_embeddings: bool = True,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        options = dict(encoding_options or {})
        self.encoder = Transformer(
            TransformerConfig(vocab_size=None, dim=dim, num_heads=num_heads, num_layers=encoder_layers,
                              causal=encoder_causal, encoding=encoding, encoding_options=options, dropout=dropout)
        )
        self.decoder = Transformer(
            TransformerConfig(vocab_size=vocab_size, dim=dim, num_heads=num_heads, num_layers=decoder_layers,
                              causal=True, encoding=encoding, encoding_options=options, dropout=dropout,
                              cross_attention=True, scale_embeddings=scale_embeddings,
                              embedding_std=embedding_std, tie_embeddings=tie_embeddings)
        )

    def encode(self, source_ids: torch.Tensor, source_mask: torch.Tensor) -> torch.Tensor:
        """Encoder states ``(B, S, dim)`` of padded source ids ``(B, S)``."""
        return self.encoder.forward_features(self.decoder.embed_tokens(source_ids), padding_mask=source_mask)

    def answer_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        memory = self.encode(batch["source_ids"], batch["source_mask"])
        target = batch["target_ids"]
        logits = self.decoder(target[:, :-1], context=memory, context_padding_mask=batch["source_mask"])
        labels = target[:, 1:].masked_fill(~batch["target_mask"][:, 1:], -100)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)

    @torch.no_grad()
    def decode_answers(self, batch: dict[str, Any]) -> tuple[list[list[int]], list[list[int]]]:
        memory = self.encode(batch["source_ids"], batch["source_mask"])
        target, mask = batch["target_ids"], batch["target_mask"]
        references = [row[1 : int(m.sum()) - 1] for row, m in zip(target.tolist(), mask)]
        start = torch.full((target.shape[0], 1), self.hparams.bos_id, dtype=torch.long, device=target.device)
        budget = max(len(r) for r in references) + self.hparams.max_answer_tokens
        generated = self.decoder.generate(
            start, budget, context=memory, context_padding_mask=batch["source_mask"]
        )[:, 1:].tolist()
        return generated, references
