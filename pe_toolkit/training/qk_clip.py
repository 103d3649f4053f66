"""QK-clip: rescale query and key weights per head so that the largest attention logit stays <= tau.

Kimi Team 2025, "Kimi K2: Open Agentic Intelligence", arXiv:2507.20534 (MuonClip = Muon + QK-clip).
After an optimizer step, for each head ``h`` with largest pre-softmax logit ``S_max^h`` over the
batch, if ``S_max^h > tau`` then with ``gamma_h = tau / S_max^h``:

* multi-head attention: ``W_q^h <- sqrt(gamma_h) W_q^h`` and ``W_k^h <- sqrt(gamma_h) W_k^h`` (so
  the bilinear logit ``q . k`` is multiplied by ``gamma_h``);
* MLA (K2's form): the head-specific non-rotated parts ``W_qc^h`` (``q_nope_proj``) and ``W_kc^h``
  (``k_up``) by ``sqrt(gamma_h)``, the head-specific rotated query ``W_qr^h`` (``q_rope_proj``) by
  ``gamma_h``, and the rope key shared by the heads (``k_rope_proj``) is left alone.

Heads with ``S_max^h <= tau`` are not touched. Where one key head serves several query heads (GQA
``num_kv_heads < num_heads``), the shared key block is scaled by ``sqrt(min gamma)`` over its query
heads and each query head by ``gamma_h / sqrt(min gamma)``, so every head's logit is still scaled by
exactly its own ``gamma_h`` (K2 has no GQA; this is the choice made here). A q/k projection bias is
scaled with its weight. The optimizer is not part of the rule: here it runs after AdamW's step.

``measure``: ``"forward"`` (K2) takes ``S_max^h`` from the training forward of the step (the weights
before the update); ``"after_step"`` recomputes it on the same layer inputs with the updated
weights, so the batch's largest logit after clipping is exactly <= tau.

Exact for RoPE and NoPE (logits bilinear in ``W_q``, ``W_k``); an additive positional bias is not
scaled, so with one the clipped logit can stay above tau. Layers with QK-norm are refused: the
norm undoes any rescaling of ``W_q``, ``W_k``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pe_toolkit.nn.attention import MultiHeadAttention
from pe_toolkit.nn.latent_attention import MultiHeadLatentAttention

QK_CLIP_MEASURES = ("forward", "after_step")


def check_tau(tau: float) -> float:
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"tau must be a finite number > 0, got {tau!r}")
    return float(tau)


def check_clippable(layer: nn.Module, name: str = "layer") -> None:
    """``TypeError`` for a layer that is neither MHA nor MLA; ``ValueError`` for one with QK-norm."""
    if not isinstance(layer, (MultiHeadAttention, MultiHeadLatentAttention)):
        raise TypeError(f"QK-clip: {name} must be a MultiHeadAttention or MultiHeadLatentAttention, "
                        f"got {type(layer).__name__}")
    if getattr(layer, "q_norm", None) is not None:
        raise ValueError(f"QK-clip: {name} has QK-norm, which undoes any rescaling of W_q and W_k; "
                         "use one or the other")


@torch.no_grad()
def head_max_logits(layer: nn.Module, x: Tensor, *, q_pos: Tensor | None = None, encoding=None) -> Tensor:
    """``S_max^h``: the largest visible scaled logit of each head over the batch, ``(H,)`` float64."""
    logits = layer.attention_logits(x, q_pos=q_pos, encoding=encoding)  # (B, H, L, L), masked = -inf
    return logits.detach().to(torch.float64).amax(dim=(0, 2, 3))


def clip_factors(max_logits: Tensor, tau: float) -> Tensor:
    """``gamma_h = min(1, tau / S_max^h)`` per head (1 where the head is below tau)."""
    tau = check_tau(tau)
    max_logits = max_logits.to(torch.float64)
    gamma = torch.ones_like(max_logits)
    over = max_logits > tau
    gamma[over] = tau / max_logits[over]
    return gamma


def _scale_rows_(weight: Tensor, per_head: Tensor, bias: Tensor | None = None) -> None:
    """Multiply each head's block of rows of ``weight (heads * d, in)`` (and ``bias``) by ``per_head (heads,)``."""
    rows = per_head.repeat_interleave(weight.shape[0] // per_head.numel()).to(weight.device, weight.dtype)
    weight.mul_(rows[:, None])
    if bias is not None:
        bias.mul_(rows)


def _split_shared(gamma: Tensor, key_heads: int) -> tuple[Tensor, Tensor]:
    """Per query head and per (possibly shared) key head scales whose product is ``gamma_h`` for every head."""
    group = gamma.numel() // key_heads
    key_scale = gamma.view(key_heads, group).amin(dim=1).sqrt()  # (H_k,)
    query_scale = gamma / key_scale.repeat_interleave(group)    # (H,)
    return query_scale, key_scale


@torch.no_grad()
def qk_clip_(layer: nn.Module, max_logits: Tensor, tau: float) -> Tensor:
    """Apply QK-clip to ``layer`` in place from its per-head ``max_logits (H,)``; return ``gamma (H,)``."""
    check_clippable(layer)
    heads = layer.num_heads
    if tuple(max_logits.shape) != (heads,):
        raise ValueError(f"max_logits must have shape ({heads},), got {tuple(max_logits.shape)}")
    gamma = clip_factors(max_logits, tau)
    if bool((gamma == 1).all()):
        return gamma
    if isinstance(layer, MultiHeadAttention):
        query_scale, key_scale = _split_shared(gamma, layer.num_kv_heads)
        _scale_rows_(layer.q_proj.weight, query_scale, layer.q_proj.bias)
        _scale_rows_(layer.k_proj.weight, key_scale, layer.k_proj.bias)
        return gamma
    # MLA (Kimi K2): non-rotated q/k parts by sqrt(gamma) (shared key heads split as above), rotated
    # query by gamma, the shared rope key untouched
    if layer.nope_head_dim > 0:
        query_scale, key_scale = _split_shared(gamma, layer.num_kv_heads)
        _scale_rows_(layer.q_nope_proj.weight, query_scale)
        _scale_rows_(layer.k_up.weight, key_scale)
    _scale_rows_(layer.q_rope_proj.weight, gamma)
    return gamma


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """The self-attention layers (MHA and MLA) of ``model``, in module order."""
    return [m for m in model.modules() if isinstance(m, (MultiHeadAttention, MultiHeadLatentAttention))]
