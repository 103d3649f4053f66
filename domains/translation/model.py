"""Encoder-decoder translation model whose source encoder can use cross-lingual positions.

The encoder is a bidirectional :class:`pe_toolkit.Transformer` with the chosen encoding (``"sinusoidal"``
for the baseline, ``"xl_pe"`` for Ding et al. 2020, arXiv:2004.13310); the decoder is a causal
:class:`pe_toolkit.Transformer` with sinusoidal PE and cross-attention to the encoder states (Vaswani et al.
2017). Source and target have separate vocabularies and embeddings.

Token embeddings are scaled as in Vaswani et al. 2017 (section 3.4), the core's ``scale_embeddings``:
initialised N(0, 1/dim) and multiplied by sqrt(dim), so each coordinate has unit scale like the sinusoids.
Without it (GPT-2's N(0, 0.02), no multiplier) a token embedding has RMS 0.02 while a sinusoidal PE has RMS
sqrt(1/2) per coordinate, and PE + XL-PE (the input strategy) sqrt(2) times that: the positions drown the
tokens by a factor of ~35-70.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import check_int
from pe_toolkit.nn import Transformer, TransformerConfig

__all__ = ["TranslationModel", "check_cross_lingual_positions"]


def check_cross_lingual_positions(xl_positions: Tensor, source_mask: Tensor | None = None) -> None:
    """Raise unless each row of ``xl_positions (B, S)`` is a permutation of ``0 .. n - 1`` over its ``n`` real
    tokens (``source_mask (B, S)`` bool, True = real; ``None``: every token is real).

    A cross-lingual position is a token's index in the BTG-reordered sentence (Ding et al. 2020), so it is
    an integer in ``[0, n)`` and no two tokens share one.

    Raises:
        ValueError: a floating-point or bool tensor, an entry outside ``[0, n)`` (e.g. -1 or 999), or a
            repeated position; the message names ``xl_positions``, the row and the offending value.
    """
    if xl_positions.is_floating_point() or xl_positions.is_complex() or xl_positions.dtype == torch.bool:
        raise ValueError(f"xl_positions must be an integer tensor (indices in the reordered sentence), got dtype "
                         f"{xl_positions.dtype}")
    b, s = xl_positions.shape
    real = torch.ones(b, s, dtype=torch.bool, device=xl_positions.device) if source_mask is None else source_mask
    n = real.sum(1, keepdim=True)
    outside = real & ((xl_positions < 0) | (xl_positions >= n))
    if bool(outside.any()):
        row, col = (int(v) for v in outside.nonzero()[0])
        raise ValueError(f"xl_positions[{row}, {col}] = {int(xl_positions[row, col])} is outside [0, {int(n[row])}) "
                         f"(row {row} has {int(n[row])} real tokens; cross-lingual positions are a permutation of "
                         "their indices)")
    counts = torch.zeros(b, s + 1, dtype=torch.long, device=xl_positions.device)
    counts.scatter_add_(1, torch.where(real, xl_positions, s).long(), real.long())
    repeated = counts[:, :s] > 1
    if bool(repeated.any()):
        row, value = (int(v) for v in repeated.nonzero()[0])
        raise ValueError(f"xl_positions row {row} gives position {value} to {int(counts[row, value])} tokens; "
                         "cross-lingual positions must be a permutation of the real tokens' indices")


def _check_ids(name: str, ids, vocab_size: int) -> None:
    """``ids`` must be an integer tensor ``(B, L)`` of token ids in ``[0, vocab_size)`` (errors name ``name``)."""
    if not isinstance(ids, Tensor) or ids.is_floating_point() or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"TranslationModel: {name} must be an integer tensor (B, L) of token ids, got "
                        f"{getattr(ids, 'dtype', type(ids).__name__)}")
    if ids.dim() != 2:
        raise ValueError(f"TranslationModel: {name} must have shape (B, L), got {tuple(ids.shape)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"TranslationModel: {name} must be ids in [0, vocab_size={vocab_size}), got values from "
                         f"{int(ids.min())} to {int(ids.max())}")


class TranslationModel(nn.Module):
    """Seq2seq Transformer: ``encode(source, mask, xl_positions) -> memory``; ``forward -> logits``.

    Args:
        source_vocab, target_vocab: vocabulary sizes.
        dim, num_heads, encoder_layers, decoder_layers, dropout: sizes.
        encoding, encoding_options: the encoder's positional encoding by registry name. An encoding with
            pair positions (``position_vector_dims == 1``, e.g. ``"xl_pe"``) receives
            ``(t, t_xl)`` per source token; any other receives ``t``.
        pad_id, bos_id, eos_id: special target ids.
        scale_embeddings: Vaswani et al.'s sqrt(dim) scaling of source and target token embeddings (see
            the module docstring); ``False`` is the unscaled N(0, 0.02) embedding.

    Shapes: source ``(B, S)`` long; source_mask ``(B, S)`` bool (True = real token); xl_positions
    ``(B, S)`` long; target_in ``(B, T)`` long; logits ``(B, T, target_vocab)``.
    """

    def __init__(self, source_vocab: int, target_vocab: int, *, dim: int = 64, num_heads: int = 4,
                 encoder_layers: int = 2, decoder_layers: int = 2, dropout: float = 0.0,
                 encoding: str = "sinusoidal", encoding_options: dict[str, Any] | None = None,
                 pad_id: int = 0, bos_id: int = 1, eos_id: int = 2, scale_embeddings: bool = True) -> None:
        super().__init__()
        check_int("source_vocab", source_vocab)
        check_int("target_vocab", target_vocab)
        if not isinstance(scale_embeddings, bool):
            raise TypeError(f"TranslationModel: scale_embeddings must be a bool, got {type(scale_embeddings).__name__}")
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        # the encoder owns the source embedding so that the core's embed_tokens applies scale_embeddings (its
        # tied output head is never called)
        self.encoder = Transformer(TransformerConfig(
            vocab_size=source_vocab, dim=dim, num_heads=num_heads, num_layers=encoder_layers, causal=False,
            encoding=encoding, encoding_options=dict(encoding_options or {}), dropout=dropout,
            scale_embeddings=scale_embeddings))
        self.decoder = Transformer(TransformerConfig(
            vocab_size=target_vocab, dim=dim, num_heads=num_heads, num_layers=decoder_layers, causal=True,
            encoding="sinusoidal", dropout=dropout, cross_attention=True, scale_embeddings=scale_embeddings))
        self.uses_xl = getattr(self.encoder.encodings[0], "position_vector_dims", 0) == 1

    @property
    def source_embedding(self) -> nn.Embedding:
        """The source token embedding (unscaled weights; :meth:`encode` applies ``scale_embeddings``)."""
        return self.encoder.token_embedding

    def encoder_positions(self, source: Tensor, xl_positions: Tensor | None,
                          source_mask: Tensor | None = None) -> Tensor:
        """``(S,)`` positions, or ``(B, S, 2)`` pairs ``(t, t_xl)`` for an encoder with cross-lingual positions.

        Raises:
            ValueError: ``xl_positions`` missing, of the wrong shape, not integers, or not a permutation of
                ``0 .. n - 1`` over each row's ``n`` real tokens (``source_mask``; padding entries are ignored).
        """
        b, s = source.shape
        plain = torch.arange(s, device=source.device)
        if not self.uses_xl:
            return plain
        if xl_positions is None:
            raise ValueError("TranslationModel: this encoder uses cross-lingual positions: pass xl_positions")
        if not isinstance(xl_positions, Tensor):
            raise TypeError(f"TranslationModel: xl_positions must be a tensor, got {type(xl_positions).__name__}")
        if tuple(xl_positions.shape) != (b, s):
            raise ValueError(f"TranslationModel: xl_positions has shape {tuple(xl_positions.shape)}, expected "
                             f"({b}, {s}) like source")
        check_cross_lingual_positions(xl_positions, source_mask)
        return torch.stack((plain.expand(b, s), xl_positions.to(plain.dtype)), dim=-1)

    def encode(self, source: Tensor, source_mask: Tensor, xl_positions: Tensor | None = None) -> Tensor:
        """Encoder states ``(B, S, dim)``."""
        _check_ids("source", source, self.encoder.config.vocab_size)
        if not isinstance(source_mask, Tensor):
            raise TypeError(f"TranslationModel: source_mask must be a bool tensor, got {type(source_mask).__name__}")
        if tuple(source_mask.shape) != tuple(source.shape) or source_mask.dtype != torch.bool:
            raise ValueError(f"TranslationModel: source_mask must be a bool tensor of shape {tuple(source.shape)}, "
                             f"got {tuple(source_mask.shape)} {source_mask.dtype}")
        positions = self.encoder_positions(source, xl_positions, source_mask)
        return self.encoder.forward_features(self.encoder.embed_tokens(source), positions=positions,
                                             padding_mask=source_mask)

    def forward(self, source: Tensor, source_mask: Tensor, target_in: Tensor,
                xl_positions: Tensor | None = None) -> Tensor:
        """Teacher-forced logits ``(B, T, target_vocab)`` for decoder inputs ``target_in``."""
        _check_ids("target_in", target_in, self.decoder.config.vocab_size)
        if not isinstance(source, Tensor):
            raise TypeError(f"TranslationModel: source must be an integer tensor (B, S), got {type(source).__name__}")
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
