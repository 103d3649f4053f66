"""Attention backends: one bias and one mask definition, evaluated densely, in tiles or by FlexAttention.

Every backend computes ``softmax(q k^T / sqrt(d) + bias, masked) v`` for the same encoder and
:class:`~pe_toolkit.nn.masks.AttentionMask`; they differ only in what they materialise:

* ``"sdpa"``: the dense ``(B, H, Lq, Lk)`` bias and mask, then ``scaled_dot_product_attention``
  (the reference; fastest for short sequences). Without a bias and with a plain causal mask, SDPA's
  own causal kernel runs and nothing is materialised.
* ``"blocked"``: queries in tiles of ``tile`` rows; each tile builds its own bias and mask rows
  (``encoder.bias`` on the tile's queries, all keys) and runs SDPA on them. Under autograd every
  tile is wrapped in ``torch.utils.checkpoint`` so its bias and scores are rebuilt in the backward
  pass instead of stored: peak memory ``O(tile * Lk)`` per layer, for training too. Works for every
  encoder (CoPE's gate sums run per query row).
* ``"flex"``: ``torch.nn.attention.flex_attention`` with the encoder's pointwise
  :meth:`~pe_toolkit.encoders.base.PositionalEncoding.bias_function` as ``score_mod`` and the mask's
  :meth:`~pe_toolkit.nn.masks.AttentionMask.mask_function` as a block mask: nothing quadratic is
  materialised. Forward and backward on CUDA; forward only on CPU (PyTorch has no CPU backward).
  Encoders without a pointwise bias (CoPE) cannot use it.
* ``"tiled"``: :func:`pe_toolkit.nn.tiled_attention.tiled_attention`, a flash-style tile loop (online
  softmax, custom autograd function that saves only the output and the log-sum-exp and recomputes
  tiles in the backward pass) with the encoder's pointwise ``bias_function`` per tile, compiled per
  tile step; skips tiles the mask hides. Forward and backward on every device; memory linear in L.
  CoPE runs through its own tile loop (:func:`pe_toolkit.nn.tiled_cope.tiled_cope`: gate sums of
  later key tiles carried); other encoders without a pointwise bias and attention dropout cannot use it.
* ``"auto"``: :func:`choose_backend`.

Under bfloat16 / float16 a bias is added in float32: the dense and tiled paths run the attention of
a biased call in float32 and cast the output back; FlexAttention computes scores in float32.
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from pe_toolkit.encoders.base import BiasFunction, PositionalEncoding, PositionBiasEncoding, bias_on_grid, tracing
from pe_toolkit.nn.masks import AttentionMask
from pe_toolkit.nn.position_state import PositionState

BACKENDS = ("auto", "sdpa", "blocked", "flex", "tiled")
"""The values of ``MultiHeadAttention(backend=...)``."""

DENSE_BUDGET = 1 << 26
"""``"auto"`` leaves the dense path when a dense bias or mask would hold more elements (256 MiB in float32)."""

TILE_BUDGET = 1 << 22
"""Elements of one tile's ``(B, H, tile, Lk)`` scores when ``"blocked"`` chooses the tile size itself."""

FLEX_MIN_PAIRS_CPU = 4096 * 4096
"""``"auto"`` uses FlexAttention on the CPU (inference) from this many query-key pairs per head."""

TILED_MIN_PAIRS_CPU = 2048 * 2048
"""``"auto"`` trains a pointwise bias on the CPU with ``"tiled"`` from this many query-key pairs per head.

Measured on 2 idle CPU cores (one causal layer, dim 256, 4 heads, B = 1, fp32, forward + backward over NoPE's
SDPA, one thread, 7 interleaved rounds in one process, the speed benchmark's backend overheads, 2026-12-05
11:00 UTC): at 2,048 tokens tiled / dense ALiBi 1.10 / 2.01x, T5 1.15 / 2.53x, KERPLE 1.15 / 2.54x, sandwich
1.10 / 2.04x, BAM 1.13 / 2.50x, FIRE 1.25 / 6.43x; at 8,192 ALiBi 1.14 / 3.51x, T5 1.14 / 7.36x, FIRE 1.22x /
out of memory (docs/concepts.md). Shorter (9 interleaved rounds, earlier the same day, same conditions):
at 1,024 ALiBi 1.05 / 1.63x, T5 1.09 / 2.04x; at 512 ALiBi 1.04 / 1.27x, T5 1.08 / 1.81x. The first tiled call
compiles its tile steps (15-16 s with an empty inductor cache, a few seconds with a warm one; FIRE's first use on
a machine also builds its C++ tile kernel, about 24 s more, then cached), which a step
saving 31-50 ms at 1,024 tokens repays after 300-500 steps (7-16 ms at 512: 1,000-2,200 steps), at 2,048 (a
step saving 150-650 ms) after about 25-100: the threshold stays where any training run repays it.
"""

FLEX_CPU_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""Input dtypes of PyTorch's CPU FlexAttention kernel (no float64)."""

FLEX_CPU_MIN_LENGTH = 128
"""The compiled CPU FlexAttention kernel needs at least one full block (128) of queries and of keys.

Measured (torch 2.13, AMD EPYC, ALiBi, one causal layer): at 40 tokens the compiled kernel's output
differed from the dense path by nan / 0.13-0.63 in 5 of 7 runs, the same cache giving different values;
at 128, 256 and 300 tokens every run matched to 1e-7. ``"flex"`` refuses shorter calls on the CPU and
``"auto"`` never picks it there (it needs :data:`FLEX_MIN_PAIRS_CPU` pairs).
"""



def flex_supported(encoding: PositionalEncoding, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> bool:
    """Whether FlexAttention can run this encoder: no bias, or a pointwise one."""
    return type(encoding).bias is PositionalEncoding.bias or encoding.bias_function(q, k, q_pos, k_pos) is not None


def tiled_supported(encoding: PositionalEncoding, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> bool:
    """Whether ``"tiled"`` can run this encoder: no bias, a pointwise one, or CoPE (its own tile loop)."""
    from pe_toolkit.encoders.contextual import CoPE

    return isinstance(encoding, CoPE) or flex_supported(encoding, q, k, q_pos, k_pos)


def choose_backend(encoding: PositionalEncoding, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor,
                   mask: AttentionMask, *, tile: int | None, dropout: float) -> str:
    """The rule of ``backend="auto"``.

    1. ``"blocked"`` when a tile size was given (``query_block_size``).
    2. ``"flex"`` when FlexAttention can run the encoder (:func:`flex_supported`), there is no
       dropout, and either the tensors are on CUDA or no gradient is needed and the call has at least
       :data:`FLEX_MIN_PAIRS_CPU` query-key pairs per head (its compile time pays off from there) in
       one of :data:`FLEX_CPU_DTYPES`.
    3. ``"tiled"`` on the CPU when a gradient is needed, the encoder has a tiled path
       (:func:`tiled_supported`), there is no dropout, the call is not being traced by ``torch.compile``
       and it has at least :data:`TILED_MIN_PAIRS_CPU` query-key pairs per head: faster than the dense
       bias there (1.8-3.2x per step at 2,048 and 8,192 tokens, see that constant; CoPE 2.1x at 2,048) and
       linear in memory. Its first call compiles the tile steps (15-30 s with an empty inductor cache),
       which a training run repays; a forward alone or inference never picks it.
    4. ``"blocked"`` when the dense bias or mask would exceed :data:`DENSE_BUDGET` elements.
    5. ``"sdpa"`` otherwise.
    """
    if tile is not None:
        return "blocked"
    has_bias = type(encoding).bias is not PositionalEncoding.bias
    pairs = mask.q_len * mask.k_len
    cpu_ok = (q.dtype in FLEX_CPU_DTYPES and not _needs_grad(q, k, encoding) and pairs >= FLEX_MIN_PAIRS_CPU
              and min(mask.q_len, mask.k_len) >= FLEX_CPU_MIN_LENGTH)
    if dropout == 0.0 and (q.is_cuda or cpu_ok):
        if flex_supported(encoding, q, k, q_pos, k_pos):
            return "flex"
    if (has_bias and not q.is_cuda and dropout == 0.0 and not tracing() and pairs >= TILED_MIN_PAIRS_CPU
            and _needs_grad(q, k, encoding) and tiled_supported(encoding, q, k, q_pos, k_pos)):
        return "tiled"
    if has_bias:
        materialised = q.shape[0] * q.shape[1] * pairs  # the float (B, H, Lq, Lk) bias and mask
    elif mask.is_empty or mask.is_plain_causal:
        materialised = 0  # SDPA's own kernels
    else:
        materialised = q.shape[0] * pairs  # a bool (B, 1, Lq, Lk) mask
    return "sdpa" if materialised <= DENSE_BUDGET else "blocked"


def _needs_grad(q: Tensor, k: Tensor, encoding: PositionalEncoding, v: Tensor | None = None) -> bool:
    tensors = (q, k) if v is None else (q, k, v)
    return torch.is_grad_enabled() and (any(t.requires_grad for t in tensors)
                                        or any(p.requires_grad for p in encoding.parameters()))


def attend(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, encoding: PositionalEncoding,
           mask: AttentionMask, *, backend: str, tile: int | None = None, dropout: float = 0.0,
           vector_dims: int = 0, state: PositionState | None = None) -> Tensor:
    """``softmax(q k^T / sqrt(d) + bias) v`` under ``mask``, ``(B, H, Lq, hd)``.

    Args:
        q: ``(B, H, Lq, hd)``, already rotated; k, v: ``(B, H_kv, Lk, hd)`` (grouped-query heads repeat).
        q_pos, k_pos: the positions the encoder's bias reads.
        encoding: the layer's encoder.
        mask: which keys each query sees.
        backend: one of :data:`BACKENDS`.
        tile: query rows per tile for ``"blocked"`` (default from :data:`TILE_BUDGET`); queries and keys per
            tile for ``"tiled"`` (default :data:`~pe_toolkit.nn.tiled_attention.TILE`).
        dropout: attention dropout probability (``"sdpa"`` and ``"blocked"`` only).
        vector_dims: trailing feature dims of the positions (the length dim is the one before them).
        state: the forward's :class:`~pe_toolkit.nn.position_state.PositionState`: the dense path takes a
            position-only bias from it (built once per forward for all layers).
    """
    if backend == "auto":
        backend = choose_backend(encoding, q, k, q_pos, k_pos, mask, tile=tile, dropout=dropout)
    if backend == "sdpa":
        return _dense(q, k, v, q_pos, k_pos, encoding, mask, 0, mask.q_len, dropout, cache=True, state=state)
    if backend == "blocked":
        return _blocked(q, k, v, q_pos, k_pos, encoding, mask, tile, dropout, vector_dims)
    if backend == "flex":
        return _flex(q, k, v, q_pos, k_pos, encoding, mask, dropout)
    if backend == "tiled":
        return _tiled(q, k, v, q_pos, k_pos, encoding, mask, tile, dropout)
    raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")


# ------------------------------------------------------------------------------------ dense, tiles
def _bias(encoding: PositionalEncoding, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor,
          visible: Tensor | None, cache: bool, state: PositionState | None = None) -> Tensor | None:
    if encoding.bias_uses_visibility:
        return encoding.bias(q, k, q_pos, k_pos, visible=visible)
    if cache and state is not None:
        return state.bias(encoding, q, k, q_pos, k_pos)
    if not cache and isinstance(encoding, PositionBiasEncoding):
        # a tile's bias is rebuilt under checkpointing: never hand back a tensor from another graph
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        return encoding.position_bias(q_pos, k_pos, dtype)
    return encoding.bias(q, k, q_pos, k_pos)


def dense_attention_mask(bias: Tensor | None, mask: AttentionMask, start: int, stop: int,
                         dtype: torch.dtype, device: torch.device,
                         keys: tuple[int, int] | None = None) -> tuple[Tensor | None, bool]:
    """SDPA's ``(attn_mask, is_causal)`` for the queries ``start .. stop - 1`` and ``keys`` (default all):
    a float mask (bias with ``-inf`` where not visible) when there is a bias, a bool mask or SDPA's own
    causal path otherwise."""
    whole = start == 0 and stop == mask.q_len and keys in (None, (0, mask.k_len))
    if bias is None and mask.is_plain_causal and whole:
        return None, True
    visible = mask.dense(start, stop, device, keys)
    if bias is None:
        return visible, False
    scores_mask = bias.to(dtype)
    if visible is not None:
        scores_mask = scores_mask.masked_fill(~visible, float("-inf"))
    return scores_mask, False


def _dense(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, encoding: PositionalEncoding,
           mask: AttentionMask, start: int, stop: int, dropout: float, cache: bool,
           keys: tuple[int, int] | None = None, explicit: bool = False,
           index_bias: BiasFunction | None = None, state: PositionState | None = None) -> Tensor:
    """Attention of the queries ``start .. stop - 1`` of ``mask`` over its keys ``keys`` (default all):
    ``q``, ``q_pos`` hold only those queries and ``k``, ``v``, ``k_pos`` only those keys.

    ``cache=True`` (the ``"sdpa"`` backend) may reuse a bias built for another layer of the same forward
    (``state``); a tile
    (``cache=False``) rebuilds it. ``explicit`` writes the softmax out (:func:`_explicit_attention`)
    instead of calling ``scaled_dot_product_attention``: the blocked backend does so under
    autograd, where the tile runs inside ``torch.utils.checkpoint`` (with SDPA's CPU kernels there,
    the peak RSS grew by about one float ``(B, H, tile, Lk)`` buffer per tile: +26 MiB per
    128 x 8192 tile, against +0 written out). ``index_bias``: the encoder's ``bias_function`` on the
    whole call, evaluated at this tile's global indices (encoders with ``bias_reads_key_indices``).
    """
    gqa = q.shape[1] != k.shape[1]
    has_bias = type(encoding).bias is not PositionalEncoding.bias
    visible = mask.dense(start, stop, q.device, keys) if encoding.bias_uses_visibility else None
    if index_bias is not None:
        key_range = keys if keys is not None else (0, mask.k_len)
        bias = bias_on_grid(index_bias, q.shape[0], q.shape[1], (start, stop), key_range, q.device)
    else:
        bias = _bias(encoding, q, k, q_pos, k_pos, visible, cache, state) if has_bias else None
    # a bias under bfloat16 / float16 is added, and the softmax taken, in float32
    compute = torch.float32 if bias is not None and q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    attn_mask, is_causal = dense_attention_mask(bias, mask, start, stop, compute, q.device, keys)
    dtype = q.dtype
    q, k, v = q.to(compute), k.to(compute), v.to(compute)
    if not explicit:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=dropout,
                                             enable_gqa=gqa)
    else:
        if is_causal:  # a whole-sequence tile without bias: the explicit path needs the mask itself
            attn_mask = mask.dense(start, stop, q.device, keys)
        out = _explicit_attention(q, k, v, attn_mask, dropout)
    return out.to(dtype)


def _explicit_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None, dropout: float) -> Tensor:
    """``softmax(q k^T / sqrt(d) + mask) v`` written out; grouped-query heads broadcast, not repeated.

    ``attn_mask``: float (added) or bool (True = keep), broadcastable to ``(B, H, Lq, Lk)``.
    """
    b, h, lq, d = q.shape
    groups = h // k.shape[1]
    qg = q.view(b, k.shape[1], groups, lq, d)                      # (B, H_kv, G, Lq, d)
    scores = (qg @ k.unsqueeze(2).transpose(-1, -2)) / math.sqrt(d)  # (B, H_kv, G, Lq, Lk)
    if attn_mask is not None:
        m = attn_mask
        m = m.view(m.shape[0], k.shape[1], groups, *m.shape[-2:]) if m.shape[1] == h else m.unsqueeze(2)
        scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m
    weights = scores.softmax(-1)
    if dropout > 0:
        weights = F.dropout(weights, dropout)
    return (weights @ v.unsqueeze(2)).view(b, h, lq, v.shape[-1])


def default_tile(batch: int, heads: int, k_len: int) -> int:
    """Query rows per tile so that one tile's scores hold about :data:`TILE_BUDGET` elements (at least 16)."""
    return max(16, TILE_BUDGET // max(1, batch * heads * k_len))


def _blocked(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, encoding: PositionalEncoding,
             mask: AttentionMask, tile: int | None, dropout: float, vector_dims: int) -> Tensor:
    """Query tiles; each sees only the keys it can (causal: up to its last query; window: from its
    first query's window start), so a causal layer does about half the work of the dense one."""
    tile = default_tile(q.shape[0], q.shape[1], k.shape[-2]) if tile is None else tile
    q_dim, k_dim = q_pos.dim() - vector_dims - 1, k_pos.dim() - vector_dims - 1
    track = torch.is_grad_enabled()
    index_bias = encoding.bias_function(q, k, q_pos, k_pos) if encoding.bias_reads_key_indices else None
    outputs = []
    for start in range(0, mask.q_len, tile):
        stop = min(start + tile, mask.q_len)
        first, last = mask.key_range(start, stop)
        pos_tile = q_pos.narrow(q_dim, start, stop - start)
        keys_pos = k_pos.narrow(k_dim, first, last - first)

        checkpointed = track and stop - start < mask.q_len

        def run(q_tile: Tensor, k_tile: Tensor, v_tile: Tensor, start: int = start, stop: int = stop,
                pos_tile: Tensor = pos_tile, keys_pos: Tensor = keys_pos, keys: tuple = (first, last),
                explicit: bool = checkpointed) -> Tensor:
            return _dense(q_tile, k_tile, v_tile, pos_tile, keys_pos, encoding, mask, start, stop, dropout,
                          cache=False, keys=keys, explicit=explicit, index_bias=index_bias)

        inputs = (q[:, :, start:stop], k[:, :, first:last], v[:, :, first:last])
        if checkpointed:
            # recompute the tile's bias and scores in the backward pass; dropout replays its RNG state
            outputs.append(checkpoint(run, *inputs, use_reentrant=False, preserve_rng_state=dropout > 0))
        else:
            outputs.append(run(*inputs))
    return outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)


# ------------------------------------------------------------------------------------------ tiled
def _tiled(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, encoding: PositionalEncoding,
           mask: AttentionMask, tile: int | None, dropout: float) -> Tensor:
    from pe_toolkit.encoders.contextual import CoPE
    from pe_toolkit.nn.tiled_attention import tiled_attention
    from pe_toolkit.nn.tiled_cope import tiled_cope

    if dropout > 0:
        raise ValueError("backend 'tiled' has no attention dropout; use 'sdpa' or 'blocked' (or dropout=0)")
    if isinstance(encoding, CoPE):  # gate sums over keys: its own tile loop with carried positions
        return tiled_cope(q, k, v, q_pos, k_pos, encoding.pos_emb, mask, tile=tile)
    bias_fn = None
    if type(encoding).bias is not PositionalEncoding.bias:
        bias_fn = encoding.bias_function(q, k, q_pos, k_pos)
        if bias_fn is None:
            name = getattr(encoding, "registry_name", type(encoding).__name__)
            raise ValueError(f"backend 'tiled' needs a pointwise bias; {name!r} has none (its bias is not "
                             "elementwise in (batch, head, query, key)): use 'sdpa' or 'blocked'")
    return tiled_attention(q, k, v, bias_fn, mask, tile=tile)


# ------------------------------------------------------------------------------------------ flex
@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


FLEX_RECOMPILE_LIMIT = 128
"""Compiled FlexAttention graphs per process (one per encoder, mask kind and shape) before eager fallback."""

FLEX_COMPILE = True
"""Run FlexAttention compiled (fused kernel); tests may set False to check ``score_mod``s eagerly."""


def _flex(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, encoding: PositionalEncoding,
          mask: AttentionMask, dropout: float) -> Tensor:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    name = getattr(encoding, "registry_name", type(encoding).__name__)
    if dropout > 0:
        raise ValueError("backend 'flex' has no attention dropout; use 'sdpa' or 'blocked' (or dropout=0)")
    if not q.is_cuda and q.dtype not in FLEX_CPU_DTYPES:
        raise ValueError(f"backend 'flex' on the CPU takes {', '.join(str(d) for d in FLEX_CPU_DTYPES)} inputs "
                         f"(PyTorch's CPU kernel), got {q.dtype}: use 'sdpa' or 'blocked'")
    if not q.is_cuda and _needs_grad(q, k, encoding, v):
        raise ValueError("backend 'flex' has no backward pass on the CPU (PyTorch's FlexAttention): use "
                         "'blocked' to train on the CPU, or run under torch.no_grad()")
    score_mod = None
    if type(encoding).bias is not PositionalEncoding.bias:
        bias_fn = encoding.bias_function(q, k, q_pos, k_pos)
        if bias_fn is None:
            raise ValueError(f"backend 'flex' needs a pointwise bias; {name!r} has none (its bias is not "
                             "elementwise in (batch, head, query, key)): use 'sdpa' or 'blocked'")

        def score_mod(score: Tensor, b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            return score + bias_fn(b, h, i, j).to(score.dtype)

    gqa = q.shape[1] != k.shape[1]
    compiled = FLEX_COMPILE and not tracing()  # traced: FlexAttention is part of the caller's graph
    if compiled and not q.is_cuda and min(mask.q_len, mask.k_len) < FLEX_CPU_MIN_LENGTH:
        raise ValueError(
            f"backend 'flex' on the CPU needs at least {FLEX_CPU_MIN_LENGTH} queries and keys, got "
            f"{mask.q_len} queries and {mask.k_len} keys: PyTorch's compiled CPU kernel returned wrong values "
            "(nan, or 0.1-0.6 off, varying between runs) below one block in torch 2.13; use 'sdpa' or 'auto'")
    run = _compiled_flex() if compiled else flex_attention
    inputs = (q, k, v)
    if q.dtype in (torch.float16, torch.bfloat16) and not q.is_cuda:  # CPU flex computes in the input dtype
        inputs = (q.float(), k.float(), v.float())
    # every encoder, mask kind and shape is its own compiled graph: allow more of them than dynamo's default 8
    with contextlib.nullcontext() if tracing() else torch._dynamo.config.patch(recompile_limit=FLEX_RECOMPILE_LIMIT):
        block_mask = None
        if not mask.is_empty:
            rule = mask.mask_function()
            batch = q.shape[0] if (mask.key_padding_mask is not None or mask.q_documents is not None) else None
            # compiled, the block mask is built block by block; eagerly, create_block_mask evaluates the rule on
            # the full (Lq, Lk) grid with int64 index tensors (measured: 681 MiB against 57 MiB at L = 8,192)
            block_mask = create_block_mask(lambda b, h, i, j: rule(b, h, i, j), batch, None, mask.q_len, mask.k_len,
                                           device=q.device, _compile=compiled)
        out = run(*inputs, score_mod=score_mod, block_mask=block_mask, enable_gqa=gqa)
    return out.to(q.dtype)
