"""Attribution baselines that PA-LRP is compared with: gradient x input and attention rollout.

* Gradient x input (Shrikumar et al. 2016, "Not Just a Black Box", arXiv:1605.01713; Simonyan et al.
  2014 for saliency): ``sum_d E[t, d] * d f / d E[t, d]`` over the token embeddings, through the
  model's own forward pass (positions enter as usual and get no score).
* Attention rollout (Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers",
  arXiv:2005.00928): per layer the head-averaged attention plus the residual identity,
  ``A^ = 0.5 mean_h(A) + 0.5 I``, multiplied through the layers; the score of input ``t`` for output
  position ``i`` is ``(A^_L ... A^_1)[i, t]``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pe_toolkit.explain.lrp import _check_index, check_finite_parameters, check_model, explain
from pe_toolkit.nn.transformer import Transformer


def gradient_x_input(
    model: Transformer, tokens: Tensor, target: int | Tensor, *, index: int | Tensor = -1,
    positions: Tensor | None = None,
) -> Tensor:
    """Gradient x input on the token embeddings, ``(B, L)``, of the logit ``model(tokens)[b, index_b, target_b]``.

    Raises:
        TypeError / ValueError: as :func:`pe_toolkit.explain.explain` for the model, tokens, target, index.
    """
    check_model(model)
    check_finite_parameters(model)
    if not isinstance(tokens, Tensor) or tokens.dim() != 2 or tokens.is_floating_point():
        raise TypeError(f"tokens must be an integer tensor of shape (B, L), got {getattr(tokens, 'shape', tokens)}")
    b, seq = tokens.shape
    target_t = _check_index("target", target, model.config.vocab_size, b, tokens.device, negative=False)
    index_t = _check_index("index", index, seq, b, tokens.device, negative=True)
    with torch.enable_grad():
        embedded = model.embed_tokens(tokens).detach().requires_grad_(True)  # with the model's input transform
        hidden = model.forward_features(embedded, positions=positions)
        rows = torch.arange(b, device=tokens.device)
        logit = model.lm_head(hidden[rows, index_t])[rows, target_t]
        (grad,) = torch.autograd.grad(logit.sum(), embedded)
    return (grad * embedded).sum(-1).detach()


def rollout(attention: list[Tensor], index: Tensor) -> Tensor:
    """Attention rollout from per-layer probabilities ``(B, H, L, L)`` for output rows ``index (B,)`` -> ``(B, L)``."""
    if not attention:
        raise ValueError("rollout: attention must hold at least one layer")
    first = attention[0]
    for layer, probs in enumerate(attention):
        if not isinstance(probs, Tensor) or not probs.is_floating_point():
            raise TypeError(f"rollout: attention[{layer}] must be a float tensor (B, H, L, L), got "
                            f"{getattr(probs, 'dtype', type(probs).__name__)}")
        if probs.dim() != 4 or probs.shape[-1] != probs.shape[-2] or probs.shape != first.shape:
            raise ValueError(f"rollout: attention[{layer}] must have shape (B, H, L, L) like attention[0] "
                             f"{tuple(first.shape)}, got {tuple(probs.shape)}")
        if not bool(torch.isfinite(probs).all()):
            raise ValueError(f"rollout: attention[{layer}] holds NaN or inf "
                             f"({int((~torch.isfinite(probs)).sum())} of {probs.numel()} entries)")
    b, _, seq, _ = first.shape
    eye = torch.eye(seq, dtype=attention[0].dtype, device=attention[0].device)
    flow = eye.expand(b, seq, seq)
    for probs in attention:
        flow = (0.5 * probs.mean(1) + 0.5 * eye) @ flow
    return flow[torch.arange(b, device=flow.device), index]


def attention_rollout(
    model: Transformer, tokens: Tensor, *, index: int | Tensor = -1, positions: Tensor | None = None,
) -> Tensor:
    """Attention rollout scores ``(B, L)`` of output position ``index`` over the inputs (Abnar & Zuidema 2020)."""
    attr = explain(model, tokens, 0, index=index, positions=positions, position_aware=False)
    index_t = _check_index("index", index, tokens.shape[1], tokens.shape[0], tokens.device, negative=True)
    return rollout(attr.attention, index_t)
