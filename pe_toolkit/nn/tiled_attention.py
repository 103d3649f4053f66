"""A tiled (flash-style) attention for training with a pointwise bias on the CPU: memory linear in L.

``softmax(q k^T / sqrt(d) + bias, masked) v`` evaluated over ``tile x tile`` blocks of queries and
keys with an online softmax (Milakov & Gimelshein 2018, arXiv:1805.02867; the tile loop and the
recomputing backward of FlashAttention, Dao et al. 2022, arXiv:2205.14135, and FlashAttention-2,
Dao 2023, arXiv:2307.08691). The forward pass keeps only the output and the log-sum-exp of each
query row; the backward pass recomputes every tile's scores and probabilities from them. No
``(Lq, Lk)`` tensor exists at any time: peak memory is ``O(L d + tile^2)`` per layer.

The bias of every tile comes from the encoder's one pointwise definition,
:meth:`~pe_toolkit.encoders.base.PositionalEncoding.bias_function` (``f(b, h, i, j)``, FlexAttention's
``score_mod``), evaluated at the tile's global indices; the mask from
:meth:`~pe_toolkit.nn.masks.AttentionMask.mask_function`. Tiles that the mask hides entirely are
never computed: outside the causal / sliding-window key range (known from the shapes), and, for
packed documents and key padding, tiles whose query documents and key documents do not overlap or
whose keys are all padding (one small ``(B, tiles, tiles)`` test, read once per call).

Learnable biases: the tensors the bias function reads that require a gradient (a tabulated bias
over distances, an encoder's parameters, a per-query table built from ``q``) are found in its
closure (:func:`bias_inputs`) and passed to the autograd function as inputs; in the backward pass
each tile's bias is evaluated again with autograd on and its gradient ``dS`` (the score gradient of
the tile) is pushed through it with ``torch.autograd.grad``, accumulated over the tiles. Autograd
then carries those gradients on to the parameters (e.g. from a distance table to T5's embedding).
A relative table ``table[h, j - i + offset]`` with contiguous positions (ALiBi, T5, KERPLE, sandwich,
BAM with the default positions) takes a shorter way: each tile reads its bias from the table's
diagonals (:func:`_toeplitz`, contiguous vector loads instead of per-pair gathers), and a learnable
table gets its gradient from the tiles visited diagonal by diagonal, their ``dS`` added up and summed
along the diagonals once per tile diagonal (:func:`diagonal_sums`).

A bias function may offer ``tile_bias(q_size, k_size)``: an object with its own kernel for the call's tiles
(``bias(i0, j0, rows, cols)``, ``statistics(i0, j0, dS)`` per tile and ``gradients(sum, leaves)`` once), or
``None`` where it does not apply. FIRE's (:mod:`pe_toolkit.encoders.fire_tiles`) evaluates its MLP as lines between
its kinks: a cost per pair that does not grow with the hidden units kept.

A bias function may offer ``within(blocks)``: the same bias, exact on the pairs of the given ``(query start,
query stop, key start, key stop)`` index blocks only. The kernel passes the span of the key tiles each query
tile visits (:func:`_visited_blocks`); FIRE then folds the MLP units that are linear over those pairs' inputs
(:meth:`~pe_toolkit.encoders.bias.FIRE.bias_function`): a causal layer never evaluates a key far after its
query, whose input would keep more units.

Grouped-query attention: queries are viewed ``(B, H_kv, G, L, d)`` against keys ``(B, H_kv, 1, L, d)``;
keys and values are never repeated.

The per-tile steps run through ``torch.compile`` (:data:`TILED_COMPILE`; one compiled graph per
encoder's bias function code, mask kind and tile shape, shared by all calls and lengths). Inside a
graph that the user compiles (``torch.compile(model, fullgraph=True)``) the same tile loop is traced
with ordinary autograd instead of the custom function (its backward calls ``torch.autograd.grad``
and reads the tile plan on the host, which a graph cannot), so outputs and gradients are the same
and the whole model still compiles in one graph; the memory bound then depends on the compiler's
rematerialisation.

Rows that see no key at all (a padding query of a left-padded batch) get output 0 and no gradient
(FlexAttention's convention; the dense path gives them every key instead).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import BiasFunction, diagonal_sums, tracing
from pe_toolkit.nn.masks import AttentionMask, MaskFunction

TILE = 256
"""Queries and keys per tile (measured on 2 CPU cores, dim 256, 4 heads: 128 was slower, 512 no faster)."""

TILED_COMPILE = True
"""Run the tile steps compiled (fused); tests may set False to check them eagerly (no compile per encoder)."""

RECOMPILE_LIMIT = 256
"""Compiled graphs per tile step per process (one per bias function code, mask kind and tile shape)."""


# ------------------------------------------------------------------------------------ tile steps
# A query tile is ``(B, H_kv, T * G, d)``: the G query heads of one key head folded into the rows
# (row r is query r // G of head kv_head * G + r % G), so that every product is a plain batched matmul.
def _indices(q: Tensor, i: Tensor, j: Tensor, groups: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Broadcastable ``(b, h, i, j)`` index tensors for a ``(B, H_kv, T * G, Tk)`` tile."""
    batch, kv_heads, rows = q.shape[:3]
    b = torch.arange(batch, device=q.device).view(batch, 1, 1, 1)
    g = torch.arange(groups, device=q.device).repeat(rows // groups)
    h = (torch.arange(kv_heads, device=q.device).view(kv_heads, 1) * groups + g).view(1, kv_heads, rows, 1)
    return b, h, i.repeat_interleave(groups).view(1, 1, rows, 1), j.view(1, 1, 1, -1)


def _toeplitz(diagonals: Tensor, rows: int, keys: int, groups: int) -> Tensor:
    """The bias ``(H_kv, T * G, Tk)`` of a tile whose bias is ``diagonals[h, j - i + T - 1]`` (tile-local ``i, j``):
    ``diagonals`` ``(H, T + Tk - 1)``. Indexed by aranges, so the compiled step reads it with contiguous vector
    loads along the keys instead of gathering through the position and distance tables pair by pair."""
    t = rows // groups
    r = torch.arange(rows, device=diagonals.device)
    kv_heads = diagonals.shape[0] // groups
    h = torch.arange(kv_heads, device=diagonals.device).view(kv_heads, 1, 1) * groups + (r % groups).view(1, rows, 1)
    j = torch.arange(keys, device=diagonals.device).view(1, 1, keys)
    return diagonals[h, j - (r // groups).view(1, rows, 1) + (t - 1)]


def _scores(q: Tensor, k: Tensor, i: Tensor, j: Tensor, key_valid: Tensor | None, bias_fn: BiasFunction | None,
            mask_fn: MaskFunction | None, bias: Tensor | None, scale: float, groups: int,
            diagonals: Tensor | None = None) -> Tensor:
    """Masked scaled scores of one tile, ``(B, H_kv, T * G, Tk)``: q ``(B, H_kv, T * G, d)``, k ``(B, H_kv, Tk, d)``.
    The bias: ``bias`` (a tensor), else ``diagonals`` (a relative bias, :func:`_toeplitz`), else ``bias_fn``.
    ``key_valid`` ``None`` and no ``mask_fn``: every pair of the tile is visible, nothing is masked (skipping the
    fill: forward + backward of one causal layer at 2,048 tokens, ALiBi 1.29x -> 1.24x and T5 1.42x -> 1.33x
    NoPE's SDPA, the speed benchmark on idle cores, 2026-12-05; docs/concepts.md)."""
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    b, h, ii, jj = _indices(q, i, j, groups)
    if bias is not None:
        s = s + bias
    elif diagonals is not None:
        s = s + _toeplitz(diagonals, q.shape[2], k.shape[2], groups).to(s.dtype)
    elif bias_fn is not None:
        s = s + bias_fn(b, h, ii, jj).to(s.dtype)
    if key_valid is None and mask_fn is None:
        return s
    keep = None if key_valid is None else key_valid.view(1, 1, 1, -1)
    if mask_fn is not None:
        keep = mask_fn(b, h, ii, jj) if keep is None else keep & mask_fn(b, h, ii, jj)
    return s.masked_fill(~keep, float("-inf"))


def _forward_tile(q: Tensor, k: Tensor, v: Tensor, m: Tensor, l: Tensor, acc: Tensor, i: Tensor, j: Tensor,
                  key_valid: Tensor | None, bias_fn: BiasFunction | None, mask_fn: MaskFunction | None,
                  scale: float, groups: int, bias: Tensor | None = None,
                  diagonals: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """One online-softmax step: the running max ``m``, sum ``l`` and output ``acc`` after this key tile.
    ``bias`` / ``diagonals``: in place of ``bias_fn`` (see :func:`_scores`)."""
    s = _scores(q, k, i, j, key_valid, bias_fn, mask_fn, bias, scale, groups, diagonals)
    return online_softmax_step(s, v, m, l, acc)


def flush_subnormal(x: Tensor) -> Tensor:
    """``x`` with every value of magnitude below its dtype's smallest normal number (``finfo.tiny``: 1.2e-38 in
    float32) set to 0: flush-to-zero for this tensor only, not for the process.

    The tile steps flush their probabilities and score gradients: a bias that decays fast (ALiBi, BAM) makes
    most ``exp(s - lse)`` far from the query subnormal, and a matmul over subnormal operands runs several times
    slower on x86 CPUs (microcode assists): one causal ALiBi layer at 2,048 tokens took 2.9x NoPE's forward +
    backward time on an AVX-512 Xeon before, its backward 314 ms against 116 ms with the process flushing
    subnormals (2026-12-05). Every value changed lies below ``finfo.tiny``, against row sums of at least 1.
    """
    return torch.where(x.abs() < torch.finfo(x.dtype).tiny, 0.0, x)


def online_softmax_step(s: Tensor, v: Tensor, m: Tensor, l: Tensor, acc: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Fold one tile's masked scores ``s (..., rows, Tk)`` and values ``v (..., Tk, d)`` into the running max
    ``m``, sum ``l`` and output ``acc`` (Milakov & Gimelshein 2018)."""
    m_new = torch.maximum(m, s.amax(-1))
    m_safe = torch.where(m_new == float("-inf"), 0.0, m_new)  # rows without a visible key yet
    p = flush_subnormal(torch.exp(s - m_safe.unsqueeze(-1)))
    alpha = torch.exp(m - m_safe)
    return m_new, l * alpha + p.sum(-1), acc * alpha.unsqueeze(-1) + torch.matmul(p, v)


def _backward_tile(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, lse: Tensor, delta: Tensor, i: Tensor,
                   j: Tensor, key_valid: Tensor | None, bias_fn: BiasFunction | None, mask_fn: MaskFunction | None,
                   bias: Tensor | None, scale: float, groups: int,
                   diagonals: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients of one tile: ``dq (B, H_kv, T * G, d)``, ``dk, dv (B, H_kv, Tk, d)`` and the score gradient ``dS``."""
    s = _scores(q, k, i, j, key_valid, bias_fn, mask_fn, bias, scale, groups, diagonals)
    p = flush_subnormal(torch.exp(s - lse.unsqueeze(-1)))  # lse = +inf on rows without a visible key: p = 0
    dv = torch.matmul(p.transpose(-1, -2), dout)
    dp = torch.matmul(dout, v.transpose(-1, -2))
    ds = flush_subnormal(p * (dp - delta.unsqueeze(-1)))
    dq = torch.matmul(ds, k) * scale
    dk = torch.matmul(ds.transpose(-1, -2), q) * scale
    return dq, dk, dv, ds


def _backward_tile_summed(q: Tensor, k: Tensor, v: Tensor, dout: Tensor, lse: Tensor, delta: Tensor, i: Tensor,
                          j: Tensor, key_valid: Tensor | None, mask_fn: MaskFunction | None, scale: float,
                          groups: int, diagonals: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """:func:`_backward_tile` of a relative bias returning ``dS`` summed over the batch, ``(H_kv, T * G, Tk)``."""
    dq, dk, dv, ds = _backward_tile(q, k, v, dout, lse, delta, i, j, key_valid, None, mask_fn, None, scale, groups,
                                    diagonals)
    return dq, dk, dv, ds.sum(0)


def _bias_tile(q: Tensor, i: Tensor, j: Tensor, bias_fn: BiasFunction, groups: int) -> Tensor:
    """The bias of one tile (with autograd, for the gradients of the tensors it reads)."""
    b, h, ii, jj = _indices(q, i, j, groups)
    return bias_fn(b, h, ii, jj)


@functools.cache
def _compiled(step: Callable) -> Callable:
    return torch.compile(step, fullgraph=True)


def _step(step: Callable, compiled: bool) -> Callable:
    return _compiled(step) if compiled else step


# ------------------------------------------------------------------------------------ bias inputs
def bias_inputs(bias_fn: BiasFunction | None) -> list[Tensor]:
    """The tensors that require a gradient and that ``bias_fn`` reads: found in its closure (and in the
    closures of the functions and the parameters of the modules it holds), each once.

    Tensors built before the call (a distance table, a per-query table) are taken as they are; the
    parameters of a module the function holds (e.g. ``self`` of an encoder's ``score``) are read at
    evaluation time. When both occur, only parameters are taken (a table built from them would
    otherwise count their gradient twice), and the backward pass keeps the built tensors' graph
    across tiles (``retain_graph``).
    """
    if bias_fn is None:
        return []
    built, parameters, seen = [], [], set()

    def visit(fn: object) -> None:
        if id(fn) in seen:
            return
        seen.add(id(fn))
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(value, Tensor):
                if value.requires_grad and id(value) not in seen:
                    seen.add(id(value))
                    (parameters if isinstance(value, nn.Parameter) else built).append(value)
            elif isinstance(value, nn.Module):
                for p in value.parameters():
                    if p.requires_grad and id(p) not in seen:
                        seen.add(id(p))
                        parameters.append(p)
            elif callable(value):
                visit(value)

    visit(bias_fn)
    return parameters if parameters else built


def _closure_tensors(fn: object, seen: set | None = None) -> list[Tensor]:
    """Every tensor requiring a gradient in ``fn``'s closure and the closures of the functions it holds."""
    seen = set() if seen is None else seen
    found = []
    if id(fn) in seen:
        return found
    seen.add(id(fn))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, Tensor) and value.requires_grad:
            found.append(value)
        elif callable(value) and not isinstance(value, nn.Module):
            found += _closure_tensors(value, seen)
    return found


# ------------------------------------------------------------------------------------ the plan
@dataclass
class _Plan:
    """What one call computes: shapes, the visible tile pairs, the index tensors and the bias / mask."""

    tile: int
    q_len: int
    k_len: int
    scale: float
    bias_fn: BiasFunction | None
    mask_fn: MaskFunction | None
    compiled: bool
    groups: int
    q_index: Tensor  # (Lq padded,) query indices, clamped to the last query
    k_index: Tensor  # (Lk padded,) key indices, clamped to the last key
    key_valid: Tensor  # (Lk padded,) bool: a real key (not tile padding)
    # (query tile, [(key tile, whether the mask must be evaluated on it)]): the tiles any query sees
    pairs: list[tuple[int, list[tuple[int, bool]]]] = field(default_factory=list)
    leaves: list[Tensor] = field(default_factory=list)
    retain_graph: bool = False  # the bias reads built tensors whose graph every tile's gradient goes through
    # a relative bias table[h, j - i + offset] (contiguous positions): each tile reads its diagonals (the table
    # padded by a tile on both sides, detached); when the table is the one leaf, its gradient is summed along
    # each tile's diagonals (diagonal_sums), not pushed through the lookup per tile
    relative_offset: int | None = None
    relative_table: Tensor | None = None
    # an encoder's own kernel for its bias per tile and its gradient (``bias_fn.tile_bias``, FIRE's): see _plan
    tile_bias: object | None = None

    def bias_of(self, qt: int, kt: int) -> Tensor | None:
        """``(1, H_kv, tile * G, tile)``: the bias of tile pair ``(qt, kt)`` from :attr:`tile_bias`, or ``None``."""
        if self.tile_bias is None:
            return None
        return heads_to_rows(self.tile_bias.bias(qt * self.tile, kt * self.tile, self.tile, self.tile), self.groups)

    def diagonals_of(self, qt: int, kt: int) -> Tensor | None:
        """``(H, 2 tile - 1)``: the bias of tile pair ``(qt, kt)`` by local ``j - i + tile - 1``, or ``None``."""
        if self.relative_table is None:
            return None
        start = self.tile + (kt - qt) * self.tile - (self.tile - 1) + self.relative_offset
        return self.relative_table[:, start:start + 2 * self.tile - 1].contiguous()

    def padding_of(self, kt: int) -> Tensor | None:
        """Key tile ``kt``'s flags of real keys, or ``None`` when it holds no tile padding (nothing to mask)."""
        return None if (kt + 1) * self.tile <= self.k_len else self.key_valid[kt * self.tile:(kt + 1) * self.tile]


def _plan(q: Tensor, k: Tensor, mask: AttentionMask, bias_fn: BiasFunction | None, tile: int,
          compiled: bool) -> _Plan:
    q_len, k_len = mask.q_len, mask.k_len
    q_tiles, k_tiles = -(-q_len // tile), -(-k_len // tile)
    device = q.device
    plan = _Plan(
        tile=tile, q_len=q_len, k_len=k_len, scale=1.0 / math.sqrt(q.shape[-1]), bias_fn=bias_fn,
        mask_fn=None if mask.is_empty else mask.mask_function(), compiled=compiled,
        groups=q.shape[1] // k.shape[1],
        q_index=torch.arange(q_tiles * tile, device=device).clamp(max=q_len - 1),
        k_index=torch.arange(k_tiles * tile, device=device).clamp(max=k_len - 1),
        key_valid=torch.arange(k_tiles * tile, device=device) < k_len,
    )
    visible = None if tracing() else _visible_tiles(mask, tile, q_tiles, k_tiles)
    by_rows_only = mask.key_padding_mask is None and mask.q_documents is None  # causal / window / nothing
    for qt in range(q_tiles):
        start, stop = qt * tile, min((qt + 1) * tile, q_len)
        first, last = mask.key_range(start, stop)
        keys = []
        for kt in range(first // tile, -(-last // tile)):
            if visible is not None and not visible[qt][kt]:
                continue
            # a tile every query of which sees every key needs no mask: inside [key_range(stop - 1), key_range(start))
            lo, hi = kt * tile, (kt + 1) * tile
            whole = (by_rows_only and mask.key_range(stop - 1, stop)[0] <= lo
                     and hi <= mask.key_range(start, start + 1)[1])
            keys.append((kt, plan.mask_fn is not None and not whole))
        plan.pairs.append((qt, keys))
    if tracing():  # ordinary autograd reaches the bias's tensors
        return plan
    # the encoder's own kernel for its bias per tile and its gradient (FIRE's), or None where it does not apply
    make_tile_bias = getattr(bias_fn, "tile_bias", None)
    plan.tile_bias = None if make_tile_bias is None else make_tile_bias(q_tiles * tile, k_tiles * tile)
    within = getattr(bias_fn, "within", None)
    if within is not None and plan.tile_bias is None:  # exact on the visited tiles only, possibly cheaper (FIRE)
        plan.bias_fn = bias_fn = within(_visited_blocks(plan))
    plan.leaves = bias_inputs(bias_fn)
    plan.retain_graph = bool(plan.leaves) and any(isinstance(t, nn.Parameter) for t in plan.leaves) and any(
        not t.is_leaf for t in _closure_tensors(bias_fn))
    relative = _relative(bias_fn, plan.leaves, q.shape[1])
    if relative is not None:
        plan.relative_offset = relative[1]
        plan.relative_table = torch.nn.functional.pad(relative[0].detach(), (tile, tile))
    return plan


def _visited_blocks(plan: _Plan) -> list[tuple[int, int, int, int]]:
    """``(query start, query stop, key start, key stop)`` per query tile: its queries and the span of the key
    tiles it visits (every pair the kernel evaluates lies in one)."""
    t = plan.tile
    return [(qt * t, min((qt + 1) * t, plan.q_len), keys[0][0] * t, min((keys[-1][0] + 1) * t, plan.k_len))
            for qt, keys in plan.pairs if keys]


def _relative(bias_fn: BiasFunction | None, leaves: list[Tensor], heads: int) -> tuple[Tensor, int] | None:
    """``(table, offset)`` of a bias ``table[h, j - i + offset]``: a relative table ``(H, n)`` with contiguous
    positions (``bias_fn.relative_table``, see :func:`pe_toolkit.encoders.base.relative_table`) that is fixed
    or is the only tensor the bias learns through; ``None`` otherwise."""
    form = getattr(bias_fn, "relative_table", None)
    found = None if form is None else form()
    if found is None or found[0].dim() != 2 or found[0].shape[0] != heads:
        return None
    if leaves and (len(leaves) != 1 or found[0] is not leaves[0]):
        return None
    return found


def _visible_tiles(mask: AttentionMask, tile: int, q_tiles: int, k_tiles: int) -> list[list[bool]] | None:
    """``[query tile][key tile]``: whether any batch row may see a key of the tile pair (documents, padding).

    Documents overlap only if the id ranges of the two tiles do; padding hides a key tile whose keys
    are all padding. One ``(B, q_tiles, k_tiles)`` test, read on the host once per call.
    """
    if mask.q_documents is None and mask.key_padding_mask is None:
        return None

    def tiles(x: Tensor, count: int, fill: Tensor) -> Tensor:  # (B, L) -> (B, count, tile), padded with fill
        pad = count * tile - x.shape[-1]
        return torch.cat([x, fill.expand(x.shape[0], pad)], dim=-1).view(x.shape[0], count, tile)

    device = (mask.q_documents if mask.q_documents is not None else mask.key_padding_mask).device
    visible = torch.ones(1, q_tiles, k_tiles, dtype=torch.bool, device=device)
    if mask.q_documents is not None:
        qd = tiles(mask.q_documents, q_tiles, mask.q_documents[:, -1:])
        kd = tiles(mask.k_documents, k_tiles, mask.k_documents[:, -1:])
        q_lo, q_hi = qd.amin(-1), qd.amax(-1)  # (B, q_tiles)
        k_lo, k_hi = kd.amin(-1), kd.amax(-1)
        visible = visible & (q_lo[:, :, None] <= k_hi[:, None, :]) & (k_lo[:, None, :] <= q_hi[:, :, None])
    if mask.key_padding_mask is not None:
        kp = tiles(mask.key_padding_mask, k_tiles, mask.key_padding_mask.new_zeros(1, 1))
        visible = visible & kp.any(-1)[:, None, :]
    return visible.any(0).tolist()


# ------------------------------------------------------------------------------------ forward / backward
def _forward(plan: _Plan, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Output ``(B, H_kv, Lq_pad * G, d)`` and log-sum-exp ``(B, H_kv, Lq_pad * G)`` (+inf where no key is seen)."""
    t, r = plan.tile, plan.tile * plan.groups
    step = _step(_forward_tile, plan.compiled and not tracing())
    outputs, lses = [], []
    for qt, keys in plan.pairs:
        q_tile = q[:, :, qt * r:(qt + 1) * r]
        m = q_tile.new_full(q_tile.shape[:-1], float("-inf"))
        l = q_tile.new_zeros(q_tile.shape[:-1])
        acc = q_tile.new_zeros(q_tile.shape[:-1] + (v.shape[-1],))
        for kt, masked in keys:
            ks = slice(kt * t, (kt + 1) * t)
            diagonals, bias = plan.diagonals_of(qt, kt), plan.bias_of(qt, kt)
            m, l, acc = step(q_tile, k[:, :, ks], v[:, :, ks], m, l, acc, plan.q_index[qt * t:(qt + 1) * t],
                             plan.k_index[ks], plan.padding_of(kt),
                             None if diagonals is not None or bias is not None else plan.bias_fn,
                             plan.mask_fn if masked else None, plan.scale, plan.groups, bias, diagonals)
        seen = l > 0
        outputs.append(acc / torch.where(seen, l, 1.0).unsqueeze(-1))
        lses.append(torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)), float("inf")))
    return torch.cat(outputs, dim=2), torch.cat(lses, dim=2)


class _TiledAttention(torch.autograd.Function):
    """Forward: online softmax over the tiles, saving output and log-sum-exp. Backward: tiles recomputed."""

    @staticmethod
    def forward(ctx, plan: _Plan, q: Tensor, k: Tensor, v: Tensor, *leaves: Tensor) -> Tensor:
        out, lse = _forward(plan, q, k, v)
        ctx.plan = plan
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, dout: Tensor) -> tuple:
        plan: _Plan = ctx.plan
        q, k, v, out, lse = ctx.saved_tensors
        t, r = plan.tile, plan.tile * plan.groups
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)
        leaves = plan.leaves if any(ctx.needs_input_grad[4:]) else []
        if plan.relative_table is not None:
            dq, dk, dv, dtable = _backward_relative(plan, q, k, v, dout, lse, delta, leaves[0] if leaves else None)
            return (None, dq, dk, dv, *([dtable] if leaves else [None] * (len(ctx.needs_input_grad) - 4)))
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dleaves = [None] * len(leaves)
        statistics = None  # of the encoder's own tile kernel (plan.tile_bias)
        step = _step(_backward_tile, plan.compiled)
        bias_step = _step(_bias_tile, plan.compiled)
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            for qt, keys in plan.pairs:
                qs = slice(qt * r, (qt + 1) * r)
                q_tile, do_tile, i = q[:, :, qs], dout[:, :, qs], plan.q_index[qt * t:(qt + 1) * t]
                dq_tile = dq[:, :, qs]
                for kt, masked in keys:
                    ks = slice(kt * t, (kt + 1) * t)
                    bias = plan.bias_of(qt, kt)
                    if leaves and bias is None:
                        with torch.enable_grad():
                            bias = bias_step(q_tile, i, plan.k_index[ks], plan.bias_fn, plan.groups)
                    dq_t, dk_t, dv_t, ds = step(q_tile, k[:, :, ks], v[:, :, ks], do_tile, lse[:, :, qs],
                                                delta[:, :, qs], i, plan.k_index[ks], plan.padding_of(kt),
                                                plan.bias_fn, plan.mask_fn if masked else None,
                                                None if bias is None else bias.detach(), plan.scale, plan.groups)
                    dq_tile += dq_t
                    dk[:, :, ks] += dk_t
                    dv[:, :, ks] += dv_t
                    if leaves and plan.tile_bias is not None:
                        sums = plan.tile_bias.statistics(qt * t, kt * t, rows_to_heads(ds.sum(0), plan.groups))
                        statistics = sums if statistics is None else statistics + sums
                    elif leaves:
                        grads = torch.autograd.grad(bias, leaves, ds.sum_to_size(bias.shape), allow_unused=True,
                                                    retain_graph=plan.retain_graph)
                        dleaves = [g if d is None else (d if g is None else d + g) for d, g in zip(dleaves, grads)]
        grads = [None] * (len(ctx.needs_input_grad) - 4)
        if leaves and plan.tile_bias is not None:
            grads = [None] * len(leaves) if statistics is None else list(plan.tile_bias.gradients(statistics, leaves))
        elif leaves:
            grads = dleaves
        return (None, dq, dk, dv, *grads)


def _backward_relative(plan: _Plan, q: Tensor, k: Tensor, v: Tensor, dout: Tensor, lse: Tensor, delta: Tensor,
                       table: Tensor | None) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """The backward pass for a bias ``table[h, j - i + offset]`` (:attr:`_Plan.relative_table`): ``dq, dk, dv`` and
    the gradient of ``table`` (``None`` when it learns nothing).

    For a learnable table the tiles are visited diagonal by diagonal (``qt - kt`` fixed): every pair of those
    tiles with the same local ``j - i`` has the same global distance, so their score gradients are added into
    one tile buffer and summed along its diagonals (:func:`diagonal_sums`) once per tile diagonal. Pushing
    each tile's gradient through the lookup instead (autograd's scatter into the table) made T5 / KERPLE / BAM
    layers 1.64x NoPE's SDPA at 2,048 tokens on two threads (its atomic adds contend), against 1.32-1.38x
    this way (1.16-1.21x with the diagonal reads); a diagonal sum per tile cost 0.2 ms, 8x a plain pass over
    the tile (one thread, 2026-12-05).
    """
    t, r = plan.tile, plan.tile * plan.groups
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    pairs = sorted(((qt, kt, masked) for qt, keys in plan.pairs for kt, masked in keys),
                   key=lambda pair: (pair[0] - pair[1], pair[0]))
    # d table[h, m] for m in [-t, n + t): tile padding reaches up to a tile past the table's ends (dS = 0 there)
    grad = None if table is None else table.new_zeros(table.shape[0], table.shape[1] + 2 * t)
    step = _step(_backward_tile_summed, plan.compiled)
    summed, diagonal = None, None

    def flush() -> None:  # the buffer's diagonals into the table's gradient: local j - i = c - (t - 1)
        start = t - diagonal * t - (t - 1) + plan.relative_offset
        grad[:, start:start + 2 * t - 1] += diagonal_sums(summed, plan.groups).to(grad.dtype)

    with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
        for qt, kt, masked in pairs:
            if grad is not None and qt - kt != diagonal:
                if summed is not None:
                    flush()
                summed, diagonal = None, qt - kt
            qs, ks = slice(qt * r, (qt + 1) * r), slice(kt * t, (kt + 1) * t)
            dq_t, dk_t, dv_t, ds = step(q[:, :, qs], k[:, :, ks], v[:, :, ks], dout[:, :, qs], lse[:, :, qs],
                                        delta[:, :, qs], plan.q_index[qt * t:(qt + 1) * t], plan.k_index[ks],
                                        plan.padding_of(kt), plan.mask_fn if masked else None, plan.scale,
                                        plan.groups, plan.diagonals_of(qt, kt))
            dq[:, :, qs] += dq_t
            dk[:, :, ks] += dk_t
            dv[:, :, ks] += dv_t
            if grad is not None:
                summed = ds if summed is None else summed.add_(ds)
        if summed is not None:
            flush()
    return dq, dk, dv, None if grad is None else grad[:, t:t + table.shape[1]]


# ------------------------------------------------------------------------------------ entry point
def tiled_attention(q: Tensor, k: Tensor, v: Tensor, bias_fn: BiasFunction | None, mask: AttentionMask, *,
                    tile: int | None = None, compiled: bool | None = None) -> Tensor:
    """``softmax(q k^T / sqrt(d) + bias_fn, mask) v`` over tiles, ``(B, H, Lq, d)``.

    Args:
        q: ``(B, H, Lq, d)``; k, v: ``(B, H_kv, Lk, d)`` with ``H_kv`` dividing ``H`` (grouped-query heads
            are broadcast, never repeated).
        bias_fn: the encoder's pointwise bias ``f(b, h, i, j)`` over this call's indices, or ``None``.
        mask: which keys each query sees.
        tile: queries and keys per tile (default :data:`TILE`, or the length rounded up to 8 when shorter).
        compiled: run the tile steps through ``torch.compile`` (default :data:`TILED_COMPILE`).

    float16 / bfloat16 inputs are computed in float32 and the output cast back.
    """
    compiled = TILED_COMPILE if compiled is None else compiled
    plan = _plan(q, k, mask, bias_fn, tile_size(mask, tile), compiled)
    q_rows = to_rows(q, len(plan.q_index), plan.groups)
    k4, v4 = to_rows(k, len(plan.k_index), 1), to_rows(v, len(plan.k_index), 1)
    if tracing():
        out, _ = _forward(plan, q_rows, k4, v4)  # traced with ordinary autograd (see the module docstring)
    else:
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            out = _TiledAttention.apply(plan, q_rows, k4, v4, *plan.leaves)
    return from_rows(out, plan.groups, mask.q_len).to(q.dtype)


# ------------------------------------------------------------------------------------ shared with tiled_cope
def tile_size(mask: AttentionMask, tile: int | None, default: int = TILE) -> int:
    """``tile``, or ``default`` (the longer length rounded up to 8 when shorter)."""
    return min(default, -(-max(mask.q_len, mask.k_len) // 8) * 8) if tile is None else tile


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """float16 / bfloat16 inputs are computed in float32; float32 and float64 in themselves."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def to_rows(x: Tensor, length: int, groups: int) -> Tensor:
    """``(B, H, L, d)`` -> ``(B, H / groups, length * groups, d)`` in the compute dtype, zero-padded to
    ``length`` positions: row ``i * groups + g`` is position ``i`` of head ``h * groups + g`` (queries of
    grouped-query attention; keys and values take ``groups = 1``)."""
    batch, heads, size, head_dim = x.shape
    x = x.to(compute_dtype(x.dtype))
    if length > size:
        x = torch.nn.functional.pad(x, (0, 0, 0, length - size))
    if groups == 1:
        return x.contiguous()
    x = x.view(batch, heads // groups, groups, length, head_dim).transpose(2, 3)
    return x.reshape(batch, heads // groups, length * groups, head_dim)


def heads_to_rows(bias: Tensor, groups: int) -> Tensor:
    """A tile's bias ``(H, T, Tk)`` in the row layout of :func:`to_rows`: ``(1, H / groups, T * groups, Tk)``."""
    heads, rows, keys = bias.shape
    if groups == 1:
        return bias.unsqueeze(0)
    bias = bias.view(heads // groups, groups, rows, keys).transpose(1, 2)
    return bias.reshape(1, heads // groups, rows * groups, keys)


def rows_to_heads(ds: Tensor, groups: int) -> Tensor:
    """The inverse of :func:`heads_to_rows` for a tile's ``(H_kv, T * groups, Tk)``: ``(H, T, Tk)``."""
    kv_heads, rows, keys = ds.shape
    if groups == 1:
        return ds
    ds = ds.view(kv_heads, rows // groups, groups, keys).transpose(1, 2)
    return ds.reshape(kv_heads * groups, rows // groups, keys)


def from_rows(out: Tensor, groups: int, length: int) -> Tensor:
    """The inverse of :func:`to_rows` for an output ``(B, H_kv, L_pad * groups, d)``: ``(B, H, length, d)``."""
    batch, kv_heads, rows, head_dim = out.shape
    out = out.view(batch, kv_heads, rows // groups, groups, head_dim).transpose(2, 3)
    return out.reshape(batch, kv_heads * groups, rows // groups, head_dim)[:, :, :length]
