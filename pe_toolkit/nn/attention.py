"""One multi-head attention for every positional encoding: SDPA, GQA, KV cache, masks, three hooks."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import (
    PositionalEncoding,
    causal_visibility,
    check_int,
    check_positions,
    default_positions,
    hook_takes_bounds,
    raise_failed,
    require,
    require_all,
    tracing,
)
from pe_toolkit.nn.backends import BACKENDS, attend
from pe_toolkit.nn.kv_cache import KVCache
from pe_toolkit.nn.masks import AttentionMask, document_positions, document_runs
from pe_toolkit.nn.position_state import Bounds, PositionState, read_facts, union


def positional_logits(
    encoding: PositionalEncoding, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor
) -> Tensor:
    """Scaled attention logits ``rotate(q).rotate(k) / sqrt(d) + bias`` before masking and softmax.

    A debugging and diagnostics helper (attention maps, entropy, invariance tests); the attention
    itself never materialises these when SDPA can avoid it.

    Shapes: q ``(B, H, Lq, d)``, k ``(B, H, Lk, d)`` -> ``(B, H, Lq, Lk)``.
    """
    position_checks = getattr(encoding, "position_checks", None)  # None: a duck-typed encoder (the bug zoo's)
    if position_checks is not None:
        require_all(position_checks(q_pos, "q_pos") + position_checks(k_pos, "k_pos"))
    q, k = encoding.rotate(q, k, q_pos, k_pos)
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    bias = encoding.bias(q, k, q_pos, k_pos)
    return logits if bias is None else logits + bias.to(logits.dtype)


class MultiHeadAttention(nn.Module):
    """Multi-head (grouped-query) attention that calls a positional encoding's hooks.

    The encoding's ``rotate`` acts on queries and keys, its ``bias`` is added to the scaled logits
    (merged with the causal and padding masks into one float mask), and attention runs through
    ``torch.nn.functional.scaled_dot_product_attention``. No code here is specific to an encoding.

    Args:
        dim: model width.
        num_heads: query heads.
        num_kv_heads: key/value heads (GQA; 1 = MQA); must divide ``num_heads``. Default ``num_heads``.
        encoding: the positional encoding; ``None`` means NoPE. A ``Transformer`` that shares one
            encoding across layers passes it to :meth:`forward` instead.
        causal: causal self-attention (ignored for cross-attention).
        kv_dim: feature size of the cross-attention context (default ``dim``).
        qkv_bias: biases in the q/k/v projections.
        dropout: attention dropout probability (training only).
        backend: how attention is evaluated (:mod:`pe_toolkit.nn.backends`): ``"sdpa"`` (dense bias
            and mask, the reference), ``"blocked"`` (query tiles whose bias and scores are rebuilt in
            the backward pass: memory linear in the length, for training too), ``"flex"``
            (FlexAttention with the encoder's pointwise bias; forward only on the CPU), ``"tiled"`` (a
            compiled flash-style tile loop with the pointwise bias: trains on the CPU in linear memory) or ``"auto"``
            (default: :func:`~pe_toolkit.nn.backends.choose_backend`). Every backend gives the same
            outputs and gradients.
        query_block_size: the tile size (queries per tile) of the ``"blocked"`` backend; with
            ``backend="auto"`` it selects ``"blocked"``. ``None``: chosen from the key length.
        window: sliding-window attention (causal only): each query sees its last ``window`` keys,
            itself included (Mistral-style). A :class:`KVCache` with the same ``window`` then keeps
            memory bounded while decoding.
        qk_norm: RMSNorm over ``head_dim`` on every query and key head after the projections and
            before the encoding's ``rotate`` (QK-norm: Dehghani et al. 2023, "Scaling Vision
            Transformers to 22 Billion Parameters", arXiv:2302.05442; Wortsman et al. 2023,
            arXiv:2309.14322; the per-head RMSNorm with a learned ``head_dim`` scale shared by the
            heads, as in OLMo 2 / Qwen3). Bounds every scaled logit by
            ``max|g_q| max|g_k| sqrt(head_dim)``. Default off.
        qk_norm_eps: the epsilon of those RMSNorms (``None``: PyTorch's default, ``finfo(dtype).eps``;
            Qwen3 checkpoints use their ``rms_norm_eps``). :class:`~pe_toolkit.nn.block.TransformerBlock`
            passes its ``norm_eps``.

    Shapes:
        x ``(B, Lq, dim)``; context ``(B, Lk, kv_dim)``; q_pos ``(Lq,)`` / ``(B, Lq)`` (plus trailing
        dims for vector positions); k_pos likewise for keys; key_padding_mask bool ``(B, Lk_total)``
        with True for real tokens; document_ids integer ``(B, L)`` (packed sequences, self-attention:
        a document is a run of equal ids; no attention across documents, and default positions
        restart at 0 in each). Output ``(B, Lq, dim)``.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        encoding: PositionalEncoding | None = None,
        causal: bool = False,
        kv_dim: int | None = None,
        qkv_bias: bool = False,
        dropout: float = 0.0,
        query_block_size: int | None = None,
        qk_norm: bool = False,
        backend: str = "auto",
        window: int | None = None,
        qk_norm_eps: float | None = None,
    ) -> None:
        super().__init__()
        check_int("dim", dim)
        if not isinstance(qk_norm, bool):
            raise TypeError(f"qk_norm must be a bool, got {type(qk_norm).__name__} ({qk_norm!r})")
        if qk_norm_eps is not None and (isinstance(qk_norm_eps, bool) or not isinstance(qk_norm_eps, (int, float))
                                        or not 0 < qk_norm_eps < 1):
            raise ValueError(f"qk_norm_eps must be a number in (0, 1) or None, got {qk_norm_eps!r}")
        check_int("num_heads", num_heads)
        if dim % num_heads:
            raise ValueError(f"num_heads ({num_heads}) must divide dim ({dim})")
        num_kv_heads = num_heads if num_kv_heads is None else check_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads ({num_kv_heads}) must divide num_heads ({num_heads})")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        kv_dim = dim if kv_dim is None else check_int("kv_dim", kv_dim)
        self.dim, self.num_heads, self.num_kv_heads = dim, num_heads, num_kv_heads
        self.head_dim = dim // num_heads
        self.causal = causal
        self.dropout = dropout
        self.query_block_size = None if query_block_size is None else check_int("query_block_size", query_block_size)
        self.backend = check_backend(backend, self.query_block_size)
        self.window = None if window is None else check_int("window", window)
        if self.window is not None and not causal:
            raise ValueError("window needs a causal layer (a sliding window over past keys)")
        self.q_proj = nn.Linear(dim, dim, bias=qkv_bias)
        self.k_proj = nn.Linear(kv_dim, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(kv_dim, num_kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        self.qk_norm = qk_norm
        self.q_norm = nn.RMSNorm(self.head_dim, eps=qk_norm_eps) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, eps=qk_norm_eps) if qk_norm else None
        if encoding is not None and not isinstance(encoding, PositionalEncoding):
            raise TypeError(f"encoding must be a PositionalEncoding, got {type(encoding).__name__}")
        if encoding is not None and type(encoding) is not PositionalEncoding and not encoding.acts_in_attention:
            name = getattr(encoding, "registry_name", type(encoding).__name__)
            raise ValueError(
                f"encoding {name!r} has only an embed hook, which an attention layer never calls: add it to the "
                f"input (x = encoding.embed(x, positions)) or build a Transformer with encoding={name!r}; "
                "encoding=None is NoPE")
        self.encoding = encoding

    def _split_heads(self, x: Tensor, heads: int) -> Tensor:
        b, length, _ = x.shape
        return x.view(b, length, heads, self.head_dim).transpose(1, 2)  # (B, heads, L, hd)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        q_pos: Tensor | None = None,
        k_pos: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        encoding: PositionalEncoding | None = None,
        document_ids: Tensor | None = None,
        state: PositionState | None = None,
    ) -> Tensor:
        """Attention of ``x`` over itself (or over ``context``); see the class for shapes.

        ``state``: the :class:`~pe_toolkit.nn.position_state.PositionState` of the ``Transformer``
        forward this layer is part of (positions and masks checked at its entry, the bias built once for
        all layers). Without it the layer checks its own inputs, with one host read for the value
        checks, and builds what it needs itself. Every check runs before ``cache`` is written, and a failure
        after the append (in the encoder's bias, the attention kernel or the output projection) restores
        ``cache`` to what it held before the call.
        """
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, L, {self.dim}), got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
        encoding = encoding if encoding is not None else self.encoding
        if encoding is None:
            encoding = _NOPE
        self.check_encoding(encoding)
        b, q_len, _ = x.shape
        is_self = context is None
        if not is_self:
            self.check_context(context, b)
        source = x if is_self else context
        vector_dims = getattr(encoding, "position_vector_dims", 0)
        past = cache.length if cache is not None else 0
        runs = None
        if document_ids is not None:
            runs = check_document_ids(document_ids, b, q_len, is_self=is_self, cached=cache is not None)
            if not encoding.supports_documents:
                name = getattr(encoding, "registry_name", type(encoding).__name__)
                raise ValueError(f"encoding {name!r} ({encoding.extra_repr()}) is not exact on packed sequences "
                                 "(document_ids); run the documents separately or use a causal layer")

        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
            cache.check_owner(self)
        if cache is not None and cache.window is not None and (self.window is None or cache.window < self.window):
            raise ValueError(f"the KVCache keeps only the last {cache.window} keys but this layer attends "
                             f"{'every key' if self.window is None else f'the last {self.window}'}: give the "
                             "cache the layer's window (Transformer.new_cache does)")
        if is_self and not self.causal and encoding.causal_only:
            name = getattr(encoding, "registry_name", type(encoding).__name__)
            raise ValueError(f"encoding {name!r} ({encoding.extra_repr()}) assumes causal attention, but this layer "
                             f"is bidirectional: build the encoder with causal=False (or the layer causal=True)")
        if self.window is not None and not encoding.supports_window:
            name = getattr(encoding, "registry_name", type(encoding).__name__)
            raise ValueError(f"encoding {name!r} is not exact under sliding-window attention (window={self.window})")
        validated = state is not None and state.validated
        facts: dict[str, Tensor] = {}
        q_bounds: Bounds | None = None
        if q_pos is None:
            if runs is None:
                q_pos = default_positions(q_len, past, x.device)
                q_bounds = (past, past + q_len - 1) if q_len else None
            else:
                q_pos = document_positions(document_ids)
        else:
            check_positions("q_pos", q_pos, q_len, b, vector_dims=vector_dims, values=False)
            if state is not None and q_pos is state.q_pos:
                q_bounds = state.q_bounds
            elif not validated:
                _position_facts(facts, "q_pos", q_pos, vector_dims)
        k_bounds: Bounds | None = q_bounds
        if k_pos is None:
            if not is_self:
                k_pos = default_positions(source.shape[1], 0, x.device)
                k_bounds = (0, source.shape[1] - 1) if source.shape[1] else None
            else:
                k_pos = q_pos
        else:
            check_positions("k_pos", k_pos, source.shape[1], b, vector_dims=vector_dims, values=False)
            k_bounds = None
            if not validated:
                _position_facts(facts, "k_pos", k_pos, vector_dims)
        held = cache.held if cache is not None else 0
        if key_padding_mask is not None:
            if not isinstance(key_padding_mask, Tensor) or key_padding_mask.dtype != torch.bool:
                got = (key_padding_mask.dtype if isinstance(key_padding_mask, Tensor)
                       else type(key_padding_mask).__name__)
                raise TypeError(f"key_padding_mask must be bool (True = real token), got {got}")
            expected = (b, held + source.shape[1])
            if tuple(key_padding_mask.shape) != expected:
                raise ValueError(f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, expected {expected} "
                                 f"({held} cached + {source.shape[1]} new keys)")
            if not validated:
                facts["key_padding_mask"] = key_padding_mask.any(-1).all()
        if cache is not None:
            cache.check_update((b, self.num_kv_heads, source.shape[1], self.head_dim), k_pos, vector_dims=vector_dims)
        checks = []
        if not validated:  # the encoder's own value checks (a table's range, a graph's self loops)
            checks = encoding.position_checks(q_pos, "q_pos")
            if k_pos is not q_pos:
                checks += encoding.position_checks(k_pos, "k_pos")
        if (facts or checks) and tracing():  # compiled: the value checks become assertions in the graph
            for name in ("q_pos", "k_pos"):
                if f"{name}.finite" in facts:
                    require(facts[f"{name}.finite"], f"{name} contains NaN or inf")
            if "key_padding_mask" in facts:
                require(facts["key_padding_mask"], "key_padding_mask: every row needs at least one real key (True)")
            require_all(checks)
        elif facts or checks:  # a bare call: its value checks in one host read
            facts.update({f"check.{i}": condition for i, (condition, _, _) in enumerate(checks)})
            values = read_facts(facts)
            check_facts(values, {"key_padding_mask": key_padding_mask})
            raise_failed(checks, [values[f"check.{i}"] for i in range(len(checks))])
            q_bounds = _bounds_of(values, "q_pos") if q_bounds is None and "q_pos.lo" in values else q_bounds
            if "k_pos.lo" in values:
                k_bounds = _bounds_of(values, "k_pos")
            elif is_self and k_pos is q_pos:
                k_bounds = q_bounds

        q, k = self._queries_keys(x, source)
        v = self._split_heads(self.v_proj(source), self.num_kv_heads)
        if hook_takes_bounds(encoding, "rotate"):
            q, k = encoding.rotate(q, k, q_pos, k_pos, q_bounds=q_bounds, k_bounds=k_bounds)
        else:
            q, k = encoding.rotate(q, k, q_pos, k_pos)
        all_k_bounds = k_bounds
        snapshot = None
        if cache is not None:
            snapshot = cache.snapshot()  # references only: restored if anything after the append raises
            cache.claim(self)
            all_k_bounds = union(cache.bounds, k_bounds) if cache.held else k_bounds
            k, v, k_pos = cache.update(k, v, k_pos, vector_dims=vector_dims, bounds=k_bounds)
        try:
            k_len = k.shape[-2]
            if state is None or not is_self:
                state = PositionState(q_pos, q_bounds, all_k_bounds, validated=True)
            mask = AttentionMask(q_len, k_len, causal=self.causal and is_self, key_padding_mask=key_padding_mask,
                                 q_documents=runs, k_documents=runs, window=self.window if is_self else None)
            out = attend(q, k, v, q_pos, k_pos, encoding, mask, backend=self.backend, tile=self.query_block_size,
                         dropout=self.dropout if self.training else 0.0, vector_dims=vector_dims, state=state)
            return self.o_proj(out.transpose(1, 2).reshape(b, q_len, self.dim))
        except BaseException:
            if snapshot is not None:
                cache.restore(snapshot)
            raise

    def check_encoding(self, encoding: PositionalEncoding) -> None:
        """ValueError when ``encoding`` was built for another number of heads or head size than this layer."""
        if encoding is _NOPE or not encoding.acts_in_attention:
            return
        if encoding.num_heads != self.num_heads or encoding.head_dim != self.head_dim:
            name = getattr(encoding, "registry_name", type(encoding).__name__)
            raise ValueError(
                f"encoding {name!r} was built for num_heads={encoding.num_heads}, head_dim={encoding.head_dim} "
                f"(dim={encoding.dim}), but this attention layer has num_heads={self.num_heads}, "
                f"head_dim={self.head_dim} (dim={self.dim}): build it with the layer's dim and num_heads")

    def check_context(self, context: Tensor, batch: int) -> None:
        """TypeError / ValueError unless ``context`` is a float ``(batch, Lc, kv_dim)`` tensor."""
        kv_dim = self.k_proj.in_features
        if not isinstance(context, Tensor):
            raise TypeError(f"context must be a torch.Tensor, got {type(context).__name__}")
        if context.dim() != 3 or context.shape[0] != batch or context.shape[-1] != kv_dim:
            raise ValueError(f"context must have shape ({batch}, Lc, kv_dim={kv_dim}), got {tuple(context.shape)}")
        if not context.is_floating_point():
            raise TypeError(f"context must be a floating-point tensor, got {context.dtype}")

    def _queries_keys(self, x: Tensor, source: Tensor) -> tuple[Tensor, Tensor]:
        """Projected (and, with ``qk_norm``, normalised) queries ``(B, H, Lq, hd)`` and keys ``(B, H_kv, Lk, hd)``."""
        q = self._split_heads(self.q_proj(x), self.num_heads)
        k = self._split_heads(self.k_proj(source), self.num_kv_heads)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return q, k

    def attention_logits(
        self, x: Tensor, *, q_pos: Tensor | None = None, encoding: PositionalEncoding | None = None,
    ) -> Tensor:
        """Scaled self-attention logits ``(B, H, L, L)`` with the hooks applied, causal entries ``-inf``.

        For monitoring (e.g. the largest logit per layer, :class:`pe_toolkit.training.callbacks.AttentionLogitMonitor`);
        computed explicitly, not through SDPA. ``x`` is ``(B, L, dim)``, the input of :meth:`forward`.
        """
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, L, {self.dim}), got {tuple(x.shape)}")
        encoding = encoding if encoding is not None else (self.encoding if self.encoding is not None else _NOPE)
        length = x.shape[1]
        q_pos = default_positions(length, 0, x.device) if q_pos is None else q_pos
        q, k = self._queries_keys(x, x)
        k = k.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        logits = positional_logits(encoding, q, k, q_pos, q_pos)
        if self.causal:
            logits = logits.masked_fill(~causal_visibility(length, length, x.device), float("-inf"))
        return logits

    def extra_repr(self) -> str:
        text = f"dim={self.dim}, num_heads={self.num_heads}, num_kv_heads={self.num_kv_heads}, causal={self.causal}"
        text += ", qk_norm=True" if self.qk_norm else ""
        return text + f", backend={self.backend!r}" + (f", window={self.window}" if self.window else "")


def _position_facts(facts: dict[str, Tensor], name: str, positions: Tensor, vector_dims: int) -> None:
    """Add the value checks of user positions to ``facts``: finite (float), or their bounds (integer)."""
    if positions.numel() == 0:
        return
    if positions.is_floating_point():
        facts[f"{name}.finite"] = torch.isfinite(positions).all()
    elif vector_dims == 0:
        facts[f"{name}.lo"], facts[f"{name}.hi"] = positions.min(), positions.max()


def _bounds_of(values: dict[str, float], name: str) -> Bounds:
    return int(values[f"{name}.lo"]), int(values[f"{name}.hi"])


def check_facts(values: dict[str, float], masks: dict[str, Tensor] | None = None) -> None:
    """Raise the ValueError of the first failed value check read by :func:`read_facts`; ``masks`` (name ->
    the padding mask) lets the message name the rows without a real key (read only on that error path)."""
    for name, value in values.items():
        if name.endswith(".finite") and not value:
            raise ValueError(f"{name[:-len('.finite')]} contains NaN or inf")
        if name in ("key_padding_mask", "padding_mask") and not value:
            rows = ""
            if masks is not None and name in masks:
                rows = f", rows {(~masks[name].any(-1)).nonzero().flatten().tolist()} are all False"
            raise ValueError("key_padding_mask: every row needs at least one real key (True); attention over only "
                             f"padding has no distribution{rows}")


def check_backend(backend: str, query_block_size: int | None) -> str:
    """Validate ``backend`` (one of :data:`~pe_toolkit.nn.backends.BACKENDS`) against ``query_block_size``."""
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if query_block_size is not None and backend in ("sdpa", "flex"):
        raise ValueError(f"query_block_size is the tile size of backend 'blocked' (or 'auto'); got backend {backend!r}")
    return backend


def check_document_ids(document_ids: Tensor, batch: int, length: int, *, is_self: bool, cached: bool) -> Tensor:
    """Validate packed-sequence ids ``(B, L)`` and return the ids of their runs (one per document)."""
    if not isinstance(document_ids, Tensor):
        raise TypeError(f"document_ids must be a torch.Tensor, got {type(document_ids).__name__}")
    if document_ids.dtype == torch.bool or document_ids.is_floating_point() or document_ids.is_complex():
        raise TypeError(f"document_ids must be an integer tensor, got dtype {document_ids.dtype}")
    if tuple(document_ids.shape) != (batch, length):
        raise ValueError(f"document_ids has shape {tuple(document_ids.shape)}, expected ({batch}, {length})")
    if not is_self:
        raise ValueError("document_ids is for self-attention (packed sequences); cross-attention got a context")
    if cached:
        raise ValueError("document_ids cannot be combined with a KV cache (decode each document on its own)")
    return document_runs(document_ids)


_NOPE = PositionalEncoding(1, 1)
