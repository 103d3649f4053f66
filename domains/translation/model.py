"""Encoder-decoder translation model whose source encoder can use cross-lingual positions.

The encoder is a bidirectional :class:`pe_toolkit.Transformer` with the chosen encoding (``"sinusoidal"``
for the baseline, ``"xl_pe"`` for Ding et al. 2020, arXiv:2004.13310); the decoder is a causal
:class:`pe_toolkit.Transformer` with sinusoidal PE and cross-attention to the encoder states (Vaswani et al.
2017). Source and target have separate vocabularies and embeddings.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import check_int
from pe_toolkit.nn import Transformer, TransformerConfig

__all__ = ["TranslationModel"]


class TranslationModel(nn.Module):
    """Seq2seq Transformer: ``encode(source, mask, xl_positions) -> memory``; ``forward -> logits``.

    Args:
        source_vocab, target_vocab: vocabulary sizes.
        dim, num_heads, encoder_layers, decoder_layers, dropout: sizes.
        encoding, encoding_options: the encoder's positional encoding by registry name. An encoding with
            pair positions (``position_vector_dims == 1``, e.g. ``"xl_pe"``) receives
            ``(t, t_xl)`` per source token; any other receives ``t``.
        pad_id, bos_id, eos_id: special target ids.

    Shapes: source ``(B, S)`` long; source_mask ``(B, S)`` bool (True = real token); xl_positions
    ``(B, S)`` long; target_in ``(B, T)`` long; logits ``(B, T, target_vocab)``.
    """

    def __init__(self, source_vocab: int, target_vocab: int, *, dim: int = 64, num_heads: int = 4,
                 encoder_layers: int = 2, decoder_layers: int = 2, dropout: float = 0.0,
                 encoding: str = "sinusoidal", encoding_options: dict[str, Any] | None = None,
                 pad_id: int = 0, bos_id: int = 1, eos_id: int = 2) -> None:
        super().__init__()
        check_int("source_vocab", source_vocab)
        check_int("target_vocab", target_vocab)
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.source_embedding = nn.Embedding(source_vocab, dim)
        nn.init.normal_(self.source_embedding.weight, std=0.02)
        self.encoder = Transformer(TransformerConfig(
            vocab_size=None, dim=dim, num_heads=num_heads, num_layers=encoder_layers, causal=False,
            encoding=encoding, encoding_options=dict(encoding_options or {}), dropout=dropout))
        self.decoder = Transformer(TransformerConfig(
            vocab_size=target_vocab, dim=dim, num_heads=num_heads, num_layers=decoder_layers, causal=True,
            encoding="sinusoidal", dropout=dropout, cross_attention=True))
        self.uses_xl = getattr(self.encoder.encodings[0], "position_vector_dims", 0) == 1

    def encoder_positions(self, source: Tensor, xl_positions: Tensor | None) -> Tensor:
        """``(S,)`` positions, or ``(B, S, 2)`` pairs ``(t, t_xl)`` for an encoder with cross-lingual positions."""
        b, s = source.shape
        plain = torch.arange(s, device=source.device)
        if not self.uses_xl:
            return plain
        if xl_positions is None:
            raise ValueError("TranslationModel: this encoder uses cross-lingual positions: pass xl_positions")
        if tuple(xl_positions.shape) != (b, s):
            raise ValueError(f"TranslationModel: xl_positions has shape {tuple(xl_positions.shape)}, expected "
                             f"({b}, {s}) like source")
        return torch.stack((plain.expand(b, s), xl_positions.to(plain.dtype)), dim=-1)

    def encode(self, source: Tensor, source_mask: Tensor, xl_positions: Tensor | None = None) -> Tensor:
        """Encoder states ``(B, S, dim)``."""
        if source.dim() != 2 or source.is_floating_point():
            raise ValueError(f"TranslationModel: source must be a (B, S) integer tensor, got {tuple(source.shape)} "
                             f"{source.dtype}")
        if tuple(source_mask.shape) != tuple(source.shape) or source_mask.dtype != torch.bool:
            raise ValueError(f"TranslationModel: source_mask must be a bool tensor of shape {tuple(source.shape)}, "
                             f"got {tuple(source_mask.shape)} {source_mask.dtype}")
        positions = self.encoder_positions(source, xl_positions)
        return self.encoder.forward_features(self.source_embedding(source), positions=positions,
                                             padding_mask=source_mask)

    def forward(self, source: Tensor, source_mask: Tensor, target_in: Tensor,
                xl_positions: Tensor | None = None) -> Tensor:
        """Teacher-forced logits ``(B, T, target_vocab)`` for decoder inputs ``target_in``."""
        if target_in.shape[0] != source.shape[0]:
            raise ValueError(f"TranslationModel: target_in has batch size {target_in.shape[0]} but source has "
                             f"{source.shape[0]}")
        memory = self.encode(source, source_mask, xl_positions)
        return self.decoder(target_in, context=memory, context_padding_mask=source_mask)

    @torch.no_grad()
    def translate(self, source: Tensor, source_mask: Tensor, xl_positions: Tensor | None = None, *,
                  max_length: int = 64) -> list[list[int]]:
        """Greedy decoding (KV cache); each row's ids up to, not including, ``<eos>``."""
        check_int("max_length", max_length)
        memory = self.encode(source, source_mask, xl_positions)
        start = torch.full((source.shape[0], 1), self.bos_id, dtype=torch.long, device=source.device)
        out = self.decoder.generate(start, max_length, context=memory, context_padding_mask=source_mask)
        rows = []
        for row in out[:, 1:].tolist():
            rows.append(row[: row.index(self.eos_id)] if self.eos_id in row else row)
        return rows
