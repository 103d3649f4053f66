"""Attention diagnostics: attention probabilities and their entropy per layer and head."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pe_toolkit.encoders.base import causal_visibility
from pe_toolkit.nn.attention import MultiHeadAttention, positional_logits


def attention_probabilities(
    attn: MultiHeadAttention, x: Tensor, *, q_pos: Tensor | None = None, encoding=None,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    """The softmax attention matrix of a self-attention layer, ``(B, H, L, L)``, for inspection.

    Computed explicitly (not through SDPA) from the same projections and hooks as the layer's forward.
    """
    encoding = encoding if encoding is not None else attn.encoding
    b, length, _ = x.shape
    q_pos = torch.arange(length, device=x.device) if q_pos is None else q_pos
    q = attn.q_proj(x).view(b, length, attn.num_heads, attn.head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(b, length, attn.num_kv_heads, attn.head_dim).transpose(1, 2)
    k = k.repeat_interleave(attn.num_heads // attn.num_kv_heads, dim=1)
    if encoding is None:
        logits = q @ k.transpose(-1, -2) / math.sqrt(attn.head_dim)
    else:
        logits = positional_logits(encoding, q, k, q_pos, q_pos)
    if attn.causal:
        logits = logits.masked_fill(~causal_visibility(length, length, x.device), float("-inf"))
    if key_padding_mask is not None:
        logits = logits.masked_fill(~key_padding_mask[:, None, None, :], float("-inf"))
    return logits.float().softmax(-1)


@torch.no_grad()
def attention_entropy(model, tokens: Tensor, *, positions: Tensor | None = None, base: float = 2.0) -> Tensor:
    """Mean entropy of each layer's and head's attention distribution, ``(num_layers, num_heads)``.

    ``H_i = -sum_j a_ij log a_ij`` (in bits by default, as Wang et al. 2024 report), averaged over
    queries and the batch. Rising entropy beyond the training length signals "distraction".

    Args:
        model: a ``pe_toolkit.Transformer``.
        tokens: ``(B, L)`` token ids.
    """
    captured: list[Tensor] = []
    hooks = [
        block.attn_norm.register_forward_hook(lambda _m, _i, out: captured.append(out)) for block in model.blocks
    ]
    try:
        model(tokens, positions=positions)
    finally:
        for hook in hooks:
            hook.remove()
    positions = torch.arange(tokens.shape[1], device=tokens.device) if positions is None else positions
    rows = []
    for index, (block, x) in enumerate(zip(model.blocks, captured)):
        probs = attention_probabilities(block.attn, x, q_pos=positions, encoding=model.encoding_for_layer(index))
        entropy = -(probs * probs.clamp(min=1e-30).log()).sum(-1) / math.log(base)
        rows.append(entropy.mean(dim=(0, 2)))
    return torch.stack(rows)
