"""MHA -> MLA conversion of a trained RoPE ``Transformer`` (Ji et al. 2025, MHA2MLA).

Ji et al. 2025, "Towards Economical Inference: Enabling DeepSeek's Multi-Head Latent Attention in
Any Transformer-based LLMs", arXiv:2502.14837. Per layer, with ``W_q (H d, D)``, ``W_k, W_v (H_kv d, D)``:

1. **Partial RoPE** (Section 3.1): per key head ``g``, ``keep`` rotary pairs ``S_g`` stay rotated
   (:mod:`pe_toolkit.conversion.partial_rope`). Their rows of ``W_k`` become the decoupled rope-key
   projection ``W_KR`` (one rope head per key head), the matching rows of ``W_q`` (for every query
   head of the group) become ``W_QR``, with the pairs' original frequencies ``theta_k``. All other
   dims (the unkept pairs and the pass-through dims of a partial-rotary model) are NoPE dims:
   ``W_q,nope`` and ``W_k,nope``.
2. **Low-rank KV** (Section 3.2), with ``SVD(W) = U S V^T`` truncated to rank ``r``,
   ``down = V^T[:r]``, ``up = U[:, :r] diag(S[:r])`` (the paper's ``svd_low_rank_approx``):

   * ``"joint"`` (``SVD_joint``): one SVD of the stacked ``[W_k,nope ; W_v]``: one shared latent
     ``c = down x`` of size ``latent_dim`` (the MLA form), ``W_UK`` / ``W_UV`` = the two row blocks of ``up``;
   * ``"split"`` (``SVD_split``): ``W_k,nope`` and ``W_v`` separately, two latents of ``latent_dim``
     each, both cached (twice the latent cache of ``"joint"`` at the same ``latent_dim``).

``W_o`` is kept. Every other parameter (embeddings, norms, MLPs) is copied. Logit scale
``1 / sqrt(d)`` is unchanged since ``d_nope + d_R = d``. With all pairs kept and the full rank, the
converted model computes the same function (tested); below that it is the initialisation of a
short fine-tune. KV cache per token and layer: ``2 H_kv d`` numbers before,
``latent (x2 for split) + H_kv * 2 keep`` after.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from pe_toolkit.conversion.partial_rope import (
    PARTIAL_ROPE_STRATEGIES,
    pair_dims,
    pair_norms,
    select_rope_pairs,
    two_norm_scores,
)
from pe_toolkit.encoders.base import check_int
from pe_toolkit.encoders.rotary import RotaryEncoding
from pe_toolkit.nn.attention import MultiHeadAttention
from pe_toolkit.nn.latent_attention import MultiHeadLatentAttention
from pe_toolkit.nn.transformer import Transformer

SVD_METHODS = ("joint", "split")


def svd_low_rank(weight: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """Best rank-``rank`` factorisation ``weight ~= up @ down`` (Eckart-Young), computed in float64.

    Args:
        weight: ``(out, in)``.
        rank: ``1 <= rank <= min(out, in)``.
    Returns:
        ``down (rank, in) = V^T[:rank]`` and ``up (out, rank) = U[:, :rank] diag(S[:rank])``, in ``weight``'s dtype.
    """
    check_int("rank", rank)
    if rank > min(weight.shape):
        raise ValueError(f"rank must be <= min{tuple(weight.shape)} = {min(weight.shape)}, got {rank}")
    u, s, vh = torch.linalg.svd(weight.to(torch.float64), full_matrices=False)
    return vh[:rank].to(weight.dtype), (u[:, :rank] * s[:rank]).to(weight.dtype)


def _rotary_of(model: Transformer, layer: int) -> RotaryEncoding:
    encoding = model.encoding_for_layer(layer)
    if type(encoding) is not RotaryEncoding:
        raise ValueError(f"MHA2MLA needs a model with encoding 'rope', got {type(encoding).__name__}")
    if encoding.xpos or encoding.length_dependent or encoding.attention_factor != 1.0:
        raise ValueError(
            "MHA2MLA supports RoPE with static frequencies only (no xpos, no dynamic/longrope, attention factor 1); "
            f"got {encoding.extra_repr()}"
        )
    return encoding


def _ported(model: Any) -> Any:
    """A Hugging Face causal LM through :func:`~pe_toolkit.integrations.hf.from_hf`; anything else as is."""
    if type(model).__module__.startswith("transformers."):
        from pe_toolkit.integrations.hf.weights import from_hf

        return from_hf(model)
    return model


def _check_model(model: Transformer) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a pe_toolkit Transformer, got {type(model).__name__}")
    config = model.config
    if config.attention != "mha" or config.cross_attention or config.qk_norm:
        raise ValueError(
            "MHA2MLA converts self-attention MHA/GQA without QK-norm; got "
            f"attention={config.attention!r}, cross_attention={config.cross_attention}, qk_norm={config.qk_norm}"
        )
    # MLA's blocks take none of these: name the one field that blocks the conversion
    if config.attention_window is not None:
        raise ValueError(f"MHA2MLA cannot convert a sliding-window model: attention_window={config.attention_window} "
                         "(HF's sliding_window); the MLA attention has no window. Convert a model without a window")
    if config.qkv_bias:
        raise ValueError("MHA2MLA cannot convert q/k/v biases: qkv_bias=True (Qwen2's q/k/v biases are not "
                         "converted; MLA's projections have none)")
    if config.attention_backend != "auto":
        raise ValueError(f"MHA2MLA builds MLA blocks with their own attention: attention_backend="
                         f"{config.attention_backend!r} must be 'auto'")
    if config.attention_block_size is not None:
        raise ValueError(f"MHA2MLA builds MLA blocks with their own attention: attention_block_size="
                         f"{config.attention_block_size} must be None")
    for i, block in enumerate(model.blocks):
        attn = block.attn
        if not isinstance(attn, MultiHeadAttention) or attn.q_proj.bias is not None or attn.k_proj.bias is not None:
            raise ValueError(f"layer {i}: expected a MultiHeadAttention without q/k/v biases (MLA's projections have "
                             "none; Qwen2's q/k/v biases are not converted)")
        _rotary_of(model, i)


@torch.no_grad()
def calibration_pair_scores(model: Transformer, tokens: Tensor, *, batch_size: int = 8) -> Tensor:
    """The 2-norm contribution scores of every layer, key head and rotary pair, ``(layers, H_kv, P)``.

    Runs ``tokens (N, L)`` through the model (in batches), takes each layer's queries and keys (before
    RoPE; pair norms are rotation-invariant), averages every pair's norm over tokens and sequences, and
    combines them with :func:`~pe_toolkit.conversion.partial_rope.two_norm_scores`. A Hugging Face causal LM is
    ported first (:func:`~pe_toolkit.integrations.hf.from_hf`), as :func:`convert_to_mla` does.
    """
    model = _ported(model)
    _check_model(model)
    if tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError(f"tokens must be an integer tensor (N, L), got {tuple(tokens.shape)} {tokens.dtype}")
    if tokens.numel() == 0:
        raise ValueError(f"tokens: the calibration set is empty (shape {tuple(tokens.shape)}); "
                         "the 2-norm strategy needs at least one sequence of at least one token")
    check_int("batch_size", batch_size)
    inputs: dict[int, Tensor] = {}
    hooks = [
        block.attn.register_forward_pre_hook(lambda _m, args, i=i: inputs.__setitem__(i, args[0]))
        for i, block in enumerate(model.blocks)
    ]
    sums_q = sums_k = None
    was_training = model.training
    model.eval()
    try:
        for start in range(0, tokens.shape[0], batch_size):
            model(tokens[start : start + batch_size])
            q_rows, k_rows = [], []
            for i, block in enumerate(model.blocks):
                rotary = _rotary_of(model, i)
                q, k = block.attn._queries_keys(inputs[i], inputs[i])  # (B, H, L, d), (B, H_kv, L, d)
                pairs = rotary.rotary_dim // 2
                q_rows.append(pair_norms(q[..., : rotary.rotary_dim], pairs, rotary.interleaved).sum(dim=(0, 2)))
                k_rows.append(pair_norms(k[..., : rotary.rotary_dim], pairs, rotary.interleaved).sum(dim=(0, 2)))
            q_sum, k_sum = torch.stack(q_rows).double(), torch.stack(k_rows).double()
            sums_q = q_sum if sums_q is None else sums_q + q_sum
            sums_k = k_sum if sums_k is None else sums_k + k_sum
    finally:
        for hook in hooks:
            hook.remove()
        model.train(was_training)
    count = tokens.numel()
    return torch.stack([two_norm_scores(q / count, k / count) for q, k in zip(sums_q, sums_k)])


@dataclass
class MLAConversion:
    """What :func:`convert_to_mla` did, and the KV-cache size before and after.

    Attributes:
        rope_pairs: kept rotary pairs per layer and key head, ``(layers, H_kv, keep)``.
        strategy, svd, latent_dim: the conversion's options.
        cache_elements_before / after: numbers cached per token over all layers.
        bytes_per_element: element size of the model's dtype.
        energy_kept: per layer, the fraction of ``||W||_F^2`` of the low-rank-approximated matrix
            (``[W_k,nope ; W_v]``, or both for split) kept by the truncated SVD.
    """

    rope_pairs: Tensor
    strategy: str
    svd: str
    latent_dim: int
    cache_elements_before: int
    cache_elements_after: int
    bytes_per_element: int
    energy_kept: list[float] = field(default_factory=list)

    @property
    def cache_bytes_before(self) -> int:
        return self.cache_elements_before * self.bytes_per_element

    @property
    def cache_bytes_after(self) -> int:
        return self.cache_elements_after * self.bytes_per_element

    @property
    def cache_reduction(self) -> float:
        """``1 - after / before``: 0.9219 is the paper's -92.19 %."""
        return 1.0 - self.cache_elements_after / self.cache_elements_before


@torch.no_grad()
def convert_to_mla(
    model: Transformer,
    *,
    rope_dim: int,
    latent_dim: int,
    strategy: str = "2-norm",
    svd: str = "joint",
    calibration_tokens: Tensor | None = None,
    scores: Tensor | None = None,
    uniform_start: int = 0,
) -> tuple[Transformer, MLAConversion]:
    """Convert a trained RoPE ``Transformer`` (MHA or GQA) into an MLA ``Transformer`` (a new model).

    Args:
        model: the trained model (``attention="mha"``, encoding ``"rope"`` with static frequencies,
            no QK-norm, no cross-attention); it is not modified. A Hugging Face Llama or Mistral causal
            LM is accepted too: it is ported first (:func:`pe_toolkit.integrations.hf.from_hf`, the ``hf``
            extra), and the result is a pe_toolkit MLA ``Transformer`` (``save_pretrained`` /
            ``Transformer.from_pretrained``).
        rope_dim: rotated dims kept per head (the paper's ``r``, even, ``2 <= rope_dim <= rotary_dim``).
        latent_dim: the latent size ``d_kv`` (per latent for ``"split"``).
        strategy: partial-RoPE selection, one of :data:`PARTIAL_ROPE_STRATEGIES`.
        svd: ``"joint"`` or ``"split"`` (see the module docstring).
        calibration_tokens: ``(N, L)`` tokens for ``"2-norm"`` (or give ``scores``).
        scores: precomputed ``(layers, H_kv, P)`` scores for ``"2-norm"`` (:func:`calibration_pair_scores`).
        uniform_start: first pair of the ``"uniform"`` strategy.
    Returns:
        ``(mla_model, MLAConversion)``; the new model has ``config.attention == "mla"``, the same dtype
        and device, and the original's encoding object settings (its RoPE is replaced inside the MLA layers).
    Raises:
        ValueError / TypeError: for an unsupported model or out-of-range options.
    """
    model = _ported(model)
    _check_model(model)
    if strategy not in PARTIAL_ROPE_STRATEGIES:
        raise ValueError(f"strategy must be one of {PARTIAL_ROPE_STRATEGIES}, got {strategy!r}")
    if svd not in SVD_METHODS:
        raise ValueError(f"svd must be one of {SVD_METHODS}, got {svd!r}")
    check_int("rope_dim", rope_dim, minimum=2)
    check_int("latent_dim", latent_dim)
    config = model.config
    layers = len(model.blocks)
    attn0: MultiHeadAttention = model.blocks[0].attn
    heads, kv_heads, head_dim, dim = attn0.num_heads, attn0.num_kv_heads, attn0.head_dim, attn0.dim
    rotary_dim = _rotary_of(model, 0).rotary_dim
    if rope_dim % 2 or rope_dim > rotary_dim:
        raise ValueError(f"rope_dim must be even and <= the rotary dim ({rotary_dim}), got {rope_dim}")
    keep, num_pairs = rope_dim // 2, rotary_dim // 2
    nope_dim = head_dim - rope_dim
    if strategy == "2-norm":
        if (scores is None) == (calibration_tokens is None):
            raise ValueError("strategy '2-norm' needs exactly one of calibration_tokens= or scores=")
        if scores is None:
            scores = calibration_pair_scores(model, calibration_tokens)
        if tuple(scores.shape) != (layers, kv_heads, num_pairs):
            raise ValueError(f"scores must have shape ({layers}, {kv_heads}, {num_pairs}), got {tuple(scores.shape)}")
    elif scores is not None or calibration_tokens is not None:
        raise ValueError(f"calibration_tokens / scores apply to strategy '2-norm' only, got strategy {strategy!r}")
    if svd == "split" and nope_dim == 0:
        raise ValueError("svd='split' needs NoPE key dims: rope_dim must be < head_dim")
    rank_limit = min(kv_heads * (nope_dim + head_dim), dim) if svd == "joint" else min(kv_heads * nope_dim, dim)
    if latent_dim > rank_limit:
        raise ValueError(f"latent_dim must be <= {rank_limit} (the rank of the matrix to factorise), got {latent_dim}")

    latent_options = {
        "latent_dim": latent_dim, "rope_head_dim": rope_dim, "nope_head_dim": nope_dim, "value_head_dim": head_dim,
        "num_kv_heads": kv_heads, "rope_heads": kv_heads, "latent_norm": False,
        "value_latent_dim": latent_dim if svd == "split" else None,
    }
    new_config = dataclasses.replace(config, attention="mla", latent_options=latent_options,
                                     encoding_options=copy.deepcopy(config.encoding_options))
    weight = attn0.q_proj.weight
    new_model = Transformer(new_config).to(device=weight.device, dtype=weight.dtype)
    state = {k: v for k, v in model.state_dict().items() if ".attn." not in k}
    missing, unexpected = new_model.load_state_dict(state, strict=False)
    if unexpected or any(".attn." not in k for k in missing):
        raise RuntimeError(f"MHA2MLA: state dict mismatch (missing {missing}, unexpected {unexpected})")

    selected, energies = [], []
    group = heads // kv_heads
    for i, (old_block, new_block) in enumerate(zip(model.blocks, new_model.blocks)):
        rotary = _rotary_of(model, i)
        pairs = select_rope_pairs(
            strategy, num_pairs, keep, kv_heads, scores=None if scores is None else scores[i], start=uniform_start
        )
        selected.append(pairs)
        first, second = pair_dims(num_pairs, rotary.interleaved)
        rope_dims = torch.cat((first[pairs], second[pairs]), dim=-1)  # (H_kv, r): MLA's half-split order
        is_rope = torch.zeros(kv_heads, head_dim, dtype=torch.bool)
        is_rope.scatter_(1, rope_dims, True)
        nope_dims = torch.stack([torch.nonzero(~row).flatten() for row in is_rope])  # (H_kv, d - r), ascending
        old: MultiHeadAttention = old_block.attn
        new: MultiHeadLatentAttention = new_block.attn
        w_q = old.q_proj.weight.view(heads, head_dim, dim)
        w_k = old.k_proj.weight.view(kv_heads, head_dim, dim)
        w_v = old.v_proj.weight
        q_rope_dims = rope_dims.repeat_interleave(group, dim=0)  # query head h uses its key head's dims
        q_nope_dims = nope_dims.repeat_interleave(group, dim=0)
        gather = lambda w, idx: torch.gather(w, 1, idx.to(w.device)[..., None].expand(-1, -1, dim))  # noqa: E731
        new.q_rope_proj.weight.copy_(gather(w_q, q_rope_dims).reshape(-1, dim))
        new.q_nope_proj.weight.copy_(gather(w_q, q_nope_dims).reshape(-1, dim))
        new.k_rope_proj.weight.copy_(gather(w_k, rope_dims).reshape(-1, dim))
        k_nope = gather(w_k, nope_dims).reshape(-1, dim)
        if svd == "joint":
            stacked = torch.cat((k_nope, w_v), dim=0)
            down, up = svd_low_rank(stacked, latent_dim)
            new.kv_down.weight.copy_(down)
            new.k_up.weight.copy_(up[: k_nope.shape[0]])
            new.v_up.weight.copy_(up[k_nope.shape[0]:])
            energies.append(_energy(up, stacked))
        else:
            down_k, up_k = svd_low_rank(k_nope, latent_dim)
            down_v, up_v = svd_low_rank(w_v, latent_dim)
            new.kv_down.weight.copy_(down_k)
            new.k_up.weight.copy_(up_k)
            new.v_down.weight.copy_(down_v)
            new.v_up.weight.copy_(up_v)
            energies.append(_energy(torch.cat((up_k, up_v)), torch.cat((k_nope, w_v))))
        new.o_proj.weight.copy_(old.o_proj.weight)
        new.rope_inv_freq.copy_(rotary.inv_freq.to(new.rope_inv_freq)[pairs.to(rotary.inv_freq.device)])
    before = layers * 2 * kv_heads * head_dim
    after = layers * new_model.blocks[0].attn.cache_elements_per_token
    report = MLAConversion(
        rope_pairs=torch.stack(selected), strategy=strategy, svd=svd, latent_dim=latent_dim,
        cache_elements_before=before, cache_elements_after=after, bytes_per_element=weight.element_size(),
        energy_kept=energies,
    )
    new_model.train(model.training)
    return new_model, report


def _energy(up: Tensor, weight: Tensor) -> float:
    """``||up||_F^2 / ||W||_F^2``: with orthonormal ``down`` rows, the kept share of ``W``'s squared norm."""
    return float(up.double().pow(2).sum() / weight.double().pow(2).sum())
