"""Attention diagnostics: attention probabilities and their entropy per layer and head."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def attention_probabilities(
    attn, x: Tensor, *, q_pos: Tensor | None = None, encoding=None, key_padding_mask: Tensor | None = None,
) -> Tensor:
    """The softmax attention matrix of a self-attention layer, ``(B, H, L, L)``, for inspection.

    ``attn`` is a :class:`~pe_toolkit.nn.MultiHeadAttention` or
    :class:`~pe_toolkit.nn.MultiHeadLatentAttention`; its ``attention_logits`` gives the logits of
    the layer's own forward (projections, QK-norm, hooks, causal mask), computed explicitly rather
    than through SDPA. ``key_padding_mask (B, L)`` is True for real keys.
    """
    logits = attn.attention_logits(x, q_pos=q_pos, encoding=encoding)
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
