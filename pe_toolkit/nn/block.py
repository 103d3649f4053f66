"""Pre-norm Transformer block: attention and MLP, each with a residual connection."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionalEncoding, check_choice
from pe_toolkit.nn.attention import MultiHeadAttention
from pe_toolkit.nn.kv_cache import KVCache
from pe_toolkit.nn.latent_attention import MultiHeadLatentAttention
from pe_toolkit.nn.position_state import PositionState

ATTENTION_KINDS = ("mha", "mla")


def make_norm(kind: str, dim: int, eps: float | None = None) -> nn.Module:
    """``"rmsnorm"`` (Zhang & Sennrich 2019) or ``"layernorm"`` (Ba et al. 2016).

    ``eps``: added to the mean square (variance) before the square root; ``None`` keeps PyTorch's
    defaults (RMSNorm: ``torch.finfo(dtype).eps``; LayerNorm: 1e-5). Llama-family checkpoints set
    their own (``rms_norm_eps``, e.g. 1e-5 or 1e-6).
    """
    check_choice("norm", kind, ("rmsnorm", "layernorm"))
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 1):
        raise ValueError(f"norm_eps must be a number in (0, 1) or None, got {eps!r}")
    if kind == "rmsnorm":
        return nn.RMSNorm(dim, eps=eps)
    return nn.LayerNorm(dim) if eps is None else nn.LayerNorm(dim, eps=eps)


class MLP(nn.Module):
    """Feed-forward layer: ``"swiglu"`` (Shazeer 2020, arXiv:2002.05202) or ``"gelu"``.

    ``hidden`` defaults to ``4 * dim`` for GELU and ``8/3 * dim`` (rounded up to a multiple of 8)
    for SwiGLU, so both have about ``8 dim^2`` parameters.
    """

    def __init__(self, dim: int, kind: str = "swiglu", hidden: int | None = None, dropout: float = 0.0) -> None:
        super().__init__()
        self.kind = check_choice("mlp", kind, ("swiglu", "gelu"))
        if hidden is None:
            hidden = 4 * dim if kind == "gelu" else 8 * ((8 * dim // 3 + 7) // 8)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.gate = nn.Linear(dim, hidden, bias=False) if kind == "swiglu" else None
        self.down = nn.Linear(hidden, dim, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = F.silu(self.gate(x)) * self.up(x) if self.gate is not None else F.gelu(self.up(x))
        return self.dropout(self.down(h))


class TransformerBlock(nn.Module):
    """``x + attn(norm(x))`` then ``x + mlp(norm(x))`` (pre-norm), optionally with cross-attention.

    Args:
        dim: model width.
        num_heads: query heads.
        num_kv_heads: key/value heads (GQA), default ``num_heads``.
        causal: causal self-attention.
        dropout: attention, residual and MLP dropout.
        norm: ``"rmsnorm"`` or ``"layernorm"``; norm_eps: its epsilon (``None``: PyTorch's default), also that
            of the QK-norm.
        qkv_bias: biases in the self-attention's query, key and value projections (Qwen2).
        mlp: ``"swiglu"`` or ``"gelu"``.
        mlp_hidden: MLP width (default: see :class:`MLP`).
        encoding: this block's own encoding, or ``None`` when the caller passes a shared one.
        cross_attention: add a cross-attention sub-layer (encoder-decoder models).
        query_block_size, backend, window: see :class:`MultiHeadAttention` (self-attention).
        qk_norm: QK-norm in the self-attention (see :class:`MultiHeadAttention`).
        attention: ``"mha"`` (:class:`MultiHeadAttention`, default) or ``"mla"``
            (:class:`~pe_toolkit.nn.latent_attention.MultiHeadLatentAttention`, self-attention only).
        latent_options: keyword options of the MLA layer (``latent_dim`` is required), for ``"mla"``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        causal: bool = True,
        norm: str = "rmsnorm",
        mlp: str = "swiglu",
        mlp_hidden: int | None = None,
        dropout: float = 0.0,
        encoding: PositionalEncoding | None = None,
        cross_attention: bool = False,
        query_block_size: int | None = None,
        qk_norm: bool = False,
        attention: str = "mha",
        latent_options: dict | None = None,
        backend: str = "auto",
        window: int | None = None,
        norm_eps: float | None = None,
        qkv_bias: bool = False,
    ) -> None:
        super().__init__()
        check_choice("attention", attention, ATTENTION_KINDS)
        self.attn_norm = make_norm(norm, dim, norm_eps)
        if attention == "mla":
            if qk_norm:
                raise ValueError("qk_norm=True is not available with attention='mla' (MLA never materialises keys)")
            if (encoding is not None or query_block_size is not None or backend != "auto" or window is not None
                    or qkv_bias):
                raise ValueError("attention='mla' takes no per-block encoding, query_block_size, backend, window "
                                 "or qkv_bias")
            options = dict(latent_options or {})
            if "latent_dim" not in options:
                raise ValueError(f"attention='mla' needs latent_options with 'latent_dim', got {options}")
            options.setdefault("num_kv_heads", num_kv_heads)
            self.attn = MultiHeadLatentAttention(dim, num_heads, causal=causal, dropout=dropout, **options)
        else:
            if latent_options:
                raise ValueError(f"latent_options apply to attention='mla' only, got {latent_options}")
            self.attn = MultiHeadAttention(
                dim, num_heads, num_kv_heads=num_kv_heads, encoding=encoding, causal=causal, dropout=dropout,
                query_block_size=query_block_size, qk_norm=qk_norm, backend=backend, window=window,
                qkv_bias=qkv_bias, qk_norm_eps=norm_eps if qk_norm else None,
            )
        self.cross_norm = make_norm(norm, dim, norm_eps) if cross_attention else None
        self.cross_attn = MultiHeadAttention(dim, num_heads, dropout=dropout) if cross_attention else None
        self.mlp_norm = make_norm(norm, dim, norm_eps)
        self.mlp = MLP(dim, mlp, mlp_hidden, dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        *,
        positions: Tensor | None = None,
        padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        encoding: PositionalEncoding | None = None,
        context: Tensor | None = None,
        context_padding_mask: Tensor | None = None,
        document_ids: Tensor | None = None,
        state: PositionState | None = None,
    ) -> Tensor:
        """``state``: the forward's :class:`~pe_toolkit.nn.position_state.PositionState` (see
        :meth:`MultiHeadAttention.forward`); passed to the self-attention (MHA or MLA)."""
        extra = {} if document_ids is None else {"document_ids": document_ids}  # MLA takes no documents
        if state is not None:
            extra["state"] = state
        h = self.attn(
            self.attn_norm(x), q_pos=positions, key_padding_mask=padding_mask, cache=cache, encoding=encoding,
            **extra,
        )
        x = x + self.resid_dropout(h)
        if self.cross_attn is not None:
            if context is None:
                raise ValueError("this block has cross-attention: pass context=")
            x = x + self.resid_dropout(
                self.cross_attn(self.cross_norm(x), context, key_padding_mask=context_padding_mask)
            )
        return x + self.mlp(self.mlp_norm(x))
