"""CoPE on tiles: contextual positions and attention with memory linear in L (the ``"tiled"`` backend).

CoPE (Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count What's Important",
arXiv:2405.18719; :class:`~pe_toolkit.encoders.contextual.CoPE`) is not pointwise: with the scaled
scores ``s_it = q_i . k_t / sqrt(d)`` and ``counted_it = (k_pos[t] <= q_pos[i]) & visible_it``,

* gates ``g_it = sigmoid(s_it) * counted_it``;
* positions ``p_ij = min(sum_{t >= j} g_it, npos_max - 1)``: a suffix sum over the keys;
* bias ``z_i[p_ij]`` interpolated between ``floor`` and ``floor + 1``, ``z_i = q_i E^T / sqrt(d)``
  (``(npos_max,)`` per query row, :func:`~pe_toolkit.encoders.contextual.interpolate_position_logits`).

Forward, per query tile: ``z`` once; the visible key tiles in *descending* order with a carry
``(B, H_kv, rows)``, the gate sum of the later key tiles of each row. In a tile ``p = reverse
cumsum(g) + carry`` and ``carry += sum(g)``; then the online softmax of
:mod:`~pe_toolkit.nn.tiled_attention` (order-independent). Saved: output, log-sum-exp, and the carry
each tile pair used (``(B, H_kv, rows)`` per pair: ``O(L^2 / tile)`` elements, 4 MiB at L = 16,384, 4
heads, fp32, tiles of 512), so that the backward pass recomputes exactly the forward's positions.

Backward, per query tile, key tiles in *ascending* order with a carry of the prefix sums of ``dp``:
the tile's gates, positions, bias and probabilities are recomputed; ``dS`` as in FlashAttention;
``dz`` by two ``scatter_add`` (weights ``1 - frac`` at ``floor``, ``frac`` at ``floor + 1``), accumulated
over the key tiles; ``dp = dS * (z[floor + 1] - z[floor])`` (0 where ``p`` was clamped: the clamped
position is ``npos_max - 1``, whose step is 0, as in the dense path); ``dg_it = sum_{j <= t} dp_ij =
carry + in-tile cumsum``; then through the sigmoid into the same score gradient as ``dS``:
``dq = (dS + dg g (1 - g) counted) k / sqrt(d)`` (and ``dk``), one matmul each. After the key tiles,
``dq += dz E / sqrt(d)`` and ``dE += dz^T q / sqrt(d)``.

Clamped tiles: positions only grow towards earlier keys, so once the carry of every row of a query tile
has reached ``npos_max - 1``, every position of the remaining (earlier) key tiles is clamped: their bias
is ``z[npos_max - 1]`` per row and no position gradient flows (the dense path's clamp and the zero step
at the last position). Those tiles run as plain biased tiles (:mod:`~pe_toolkit.nn.tiled_attention`'s
steps with that bias, ``dz[npos_max - 1] += sum(dS)``): no gates, sums or gathers. With the default 64
positions and gates near 1/2 this is every key tile but the last one or two of each query tile at long L.
(One host read per computed tile decides it; inside a traced graph every tile takes the full step.)

Why the saved carries rather than one saved row total (``carry = total - prefix``, recomputed): gate sums
reach the length L (positions are clamped only after the sum), so a difference of two float32 sums is off by
up to ``L * 6e-8`` (``1e-3`` at 16k) from the forward's carry, and the recomputed probabilities
``exp(s - lse)`` would no longer be the forward's; the carries cost 4 MiB at 16k tokens.

The gates reuse the attention's own ``q k^T`` product of the tile (one matmul for both); the key
position check is evaluated per tile from the given positions (``(L,)`` or ``(B, L)``), not assumed
to be the causal mask. Tiles the mask hides entirely hold no counted key, so skipping them (the
plan of :mod:`~pe_toolkit.nn.tiled_attention`) is exact. Grouped-query heads are folded into rows
as there. Half-precision inputs are computed in float32, float64 in float64 (the dense
convention). Inside a graph the user compiles, the tile loop is traced with ordinary autograd.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pe_toolkit.encoders.base import tracing
from pe_toolkit.nn import tiled_attention
from pe_toolkit.nn.masks import AttentionMask, MaskFunction
from pe_toolkit.nn.tiled_attention import (
    RECOMPILE_LIMIT,
    _indices,
    _Plan,
    _plan,
    _step,
    compute_dtype,
    from_rows,
    tile_size,
    to_rows,
)

TILE = 512
"""CoPE's default queries and keys per tile (one causal layer, dim 256, 4 heads, L = 2,048, forward + backward).

One thread: 0.70 / 0.68 / 0.67 s for tiles of 256 / 512 / 1,024 (NoPE's SDPA 0.19 s). Two threads on the 2
shared cores (load 5): 10.7 / 3.7 / 1.3-2.0 s: CoPE's tile steps run more kernels than a pointwise bias's
(its cumulative sums are separate kernels), and each kernel of two threads waits for a descheduled one, so
fewer, larger tiles pay less. 512 rather than 1,024 keeps each ``(rows, keys)`` temporary of a tile at 1 MiB
per batch row and query head (4 MiB at 1,024).
"""


# ------------------------------------------------------------------------------------ tile steps
def _tile_gates(q: Tensor, k: Tensor, z: Tensor, carry: Tensor, i: Tensor, j: Tensor, key_valid: Tensor,
                q_pos: Tensor, k_pos: Tensor, mask_fn: MaskFunction | None, scale: float, groups: int
                ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Scores, visibility, sigmoids, counted keys, positions and the interpolation of one tile.

    q ``(B, H_kv, rows, d)``, k ``(B, H_kv, Tk, d)``, z ``(B, H_kv, rows, npos)``, carry ``(B, H_kv, rows)``;
    q_pos ``(B or 1, 1, rows, 1)``, k_pos ``(B or 1, 1, 1, Tk)``. Returns ``s (B, H_kv, rows, Tk)`` (unmasked,
    unbiased), ``keep``, ``sig = sigmoid(s)``, ``counted``, ``index = floor(p)``, ``frac = p - floor(p)`` and
    ``step = z[index + 1] - z[index]`` (0 at the last position).
    """
    s = torch.matmul(q, k.transpose(-1, -2)) * scale
    keep = key_valid.view(1, 1, 1, -1)
    if mask_fn is not None:
        keep = keep & mask_fn(*_indices(q, i, j, groups))
    counted = keep & (k_pos <= q_pos)
    sig = torch.sigmoid(s)
    gates = sig * counted
    positions = gates.flip(-1).cumsum(-1).flip(-1) + carry.unsqueeze(-1)
    positions = positions.clamp(max=z.shape[-1] - 1)
    floor = positions.floor()
    index = floor.long()
    step = torch.nn.functional.pad(z.diff(dim=-1), (0, 1)).gather(-1, index)
    return s, keep, sig, counted, index, positions - floor, step


def _forward_tile(q: Tensor, k: Tensor, v: Tensor, z: Tensor, m: Tensor, l: Tensor, acc: Tensor, carry: Tensor,
                  i: Tensor, j: Tensor, key_valid: Tensor, q_pos: Tensor, k_pos: Tensor,
                  mask_fn: MaskFunction | None, scale: float, groups: int
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One online-softmax step with CoPE's bias: ``m``, ``l``, ``acc`` and the carry after this (earlier) key tile."""
    s, keep, sig, counted, index, frac, step = _tile_gates(q, k, z, carry, i, j, key_valid, q_pos, k_pos, mask_fn,
                                                           scale, groups)
    carry = carry + (sig * counted).sum(-1)
    s = (s + z.gather(-1, index) + frac * step).masked_fill(~keep, float("-inf"))
    return (*tiled_attention.online_softmax_step(s, v, m, l, acc), carry)


def _backward_tile(q: Tensor, k: Tensor, v: Tensor, z: Tensor, dout: Tensor, lse: Tensor, delta: Tensor,
                   carry: Tensor, dcarry: Tensor, i: Tensor, j: Tensor, key_valid: Tensor, q_pos: Tensor,
                   k_pos: Tensor, mask_fn: MaskFunction | None, scale: float, groups: int
                   ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Gradients of one tile: ``dq (B, H_kv, rows, d)``, ``dk, dv (B, H_kv, Tk, d)``, ``dz (B, H_kv, rows, npos)``
    and the prefix carry of ``dp`` after this key tile. ``carry``: the gate carry the forward pass used here."""
    s, keep, sig, counted, index, frac, step = _tile_gates(q, k, z, carry, i, j, key_valid, q_pos, k_pos, mask_fn,
                                                           scale, groups)
    s = (s + z.gather(-1, index) + frac * step).masked_fill(~keep, float("-inf"))
    p = tiled_attention.flush_subnormal(torch.exp(s - lse.unsqueeze(-1)))  # lse = +inf on rows without a visible key
    dv = torch.matmul(p.transpose(-1, -2), dout)
    dp = torch.matmul(dout, v.transpose(-1, -2))
    ds = tiled_attention.flush_subnormal(p * (dp - delta.unsqueeze(-1)))
    # bias = z[index] (1 - frac) + z[index + 1] frac (index + 1 capped: there frac is 0)
    dz = torch.zeros_like(z).scatter_add(-1, index, ds - ds * frac)
    dz = dz.scatter_add(-1, (index + 1).clamp(max=z.shape[-1] - 1), ds * frac)
    dpos = ds * step
    dgate = dpos.cumsum(-1) + dcarry.unsqueeze(-1)
    dcarry = dcarry + dpos.sum(-1)
    dscore = tiled_attention.flush_subnormal(ds + dgate * (sig * (1.0 - sig)) * counted)
    dq = torch.matmul(dscore, k) * scale
    dk = torch.matmul(dscore.transpose(-1, -2), q) * scale
    return dq, dk, dv, dz, dcarry


# ------------------------------------------------------------------------------------ forward / backward
def _forward(plan: _Plan, q: Tensor, k: Tensor, v: Tensor, pos_emb: Tensor, q_pos: Tensor, k_pos: Tensor
             ) -> tuple[Tensor, Tensor, list[Tensor | None]]:
    """Output ``(B, H_kv, rows, d)``, log-sum-exp ``(B, H_kv, rows)`` and the carry of every tile pair (plan
    order; ``None`` where every position of the tile was clamped)."""
    t, r = plan.tile, plan.tile * plan.groups
    step = _step(_forward_tile, plan.compiled and not tracing())
    clamped_step = _step(tiled_attention._forward_tile, plan.compiled and not tracing())
    emb_t = pos_emb.transpose(0, 1) * plan.scale
    last = pos_emb.shape[0] - 1
    outputs, lses, carries = [], [], []
    for qt, keys in plan.pairs:
        q_tile, qs, i = q[:, :, qt * r:(qt + 1) * r], slice(qt * r, (qt + 1) * r), plan.q_index[qt * t:(qt + 1) * t]
        z = torch.matmul(q_tile, emb_t)
        m = q_tile.new_full(q_tile.shape[:-1], float("-inf"))
        l = q_tile.new_zeros(q_tile.shape[:-1])
        acc = q_tile.new_zeros(q_tile.shape[:-1] + (v.shape[-1],))
        carry = q_tile.new_zeros(q_tile.shape[:-1])
        tile_carries, clamped = [], False
        for kt, masked in reversed(keys):  # later keys first: the carry holds their gate sums
            ks = slice(kt * t, (kt + 1) * t)
            mask_fn = plan.mask_fn if masked else None
            if clamped:  # every position here is npos_max - 1: the bias is z[npos_max - 1], no gate is needed
                tile_carries.append(None)
                m, l, acc = clamped_step(q_tile, k[:, :, ks], v[:, :, ks], m, l, acc, i, plan.k_index[ks],
                                         plan.key_valid[ks], None, mask_fn, plan.scale, plan.groups, z[..., last:])
                continue
            tile_carries.append(carry)
            m, l, acc, carry = step(q_tile, k[:, :, ks], v[:, :, ks], z, m, l, acc, carry, i, plan.k_index[ks],
                                    plan.key_valid[ks], q_pos[:, :, qs], k_pos[..., ks], mask_fn, plan.scale,
                                    plan.groups)
            clamped = not tracing() and bool((carry >= last).all())  # positions only grow towards earlier keys
        carries += reversed(tile_carries)
        seen = l > 0
        outputs.append(acc / torch.where(seen, l, 1.0).unsqueeze(-1))
        lses.append(torch.where(seen, m + torch.log(torch.where(seen, l, 1.0)), float("inf")))
    return torch.cat(outputs, dim=2), torch.cat(lses, dim=2), carries


class _TiledCoPE(torch.autograd.Function):
    """Forward: online softmax over the tiles with CoPE's carried positions. Backward: tiles recomputed."""

    @staticmethod
    def forward(ctx, plan: _Plan, q: Tensor, k: Tensor, v: Tensor, pos_emb: Tensor, q_pos: Tensor,
                k_pos: Tensor) -> Tensor:
        out, lse, carries = _forward(plan, q, k, v, pos_emb, q_pos, k_pos)
        ctx.plan = plan
        ctx.clamped = [c is None for c in carries]
        kept = [c for c in carries if c is not None]
        stacked = torch.stack(kept) if kept else lse.new_zeros(0)
        ctx.save_for_backward(q, k, v, pos_emb, q_pos, k_pos, out, lse, stacked)
        return out

    @staticmethod
    def backward(ctx, dout: Tensor) -> tuple:
        plan: _Plan = ctx.plan
        q, k, v, pos_emb, q_pos, k_pos, out, lse, carries = ctx.saved_tensors
        t, r = plan.tile, plan.tile * plan.groups
        dout = dout.contiguous()
        delta = (dout * out).sum(-1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        demb = torch.zeros_like(pos_emb)
        emb_t = pos_emb.transpose(0, 1) * plan.scale
        last = pos_emb.shape[0] - 1
        step = _step(_backward_tile, plan.compiled)
        clamped_step = _step(tiled_attention._backward_tile, plan.compiled)
        pair, kept = 0, 0
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            for qt, keys in plan.pairs:
                qs = slice(qt * r, (qt + 1) * r)
                q_tile, i = q[:, :, qs], plan.q_index[qt * t:(qt + 1) * t]
                z = torch.matmul(q_tile, emb_t)
                dz = torch.zeros_like(z)
                dcarry = torch.zeros_like(lse[:, :, qs])
                dq_tile = dq[:, :, qs]
                for kt, masked in keys:  # earlier keys first: dcarry holds their prefix sums of dp
                    ks = slice(kt * t, (kt + 1) * t)
                    mask_fn = plan.mask_fn if masked else None
                    if ctx.clamped[pair]:  # bias z[npos_max - 1]; dp = 0 (clamped), so dcarry stays as it is
                        dq_t, dk_t, dv_t, ds = clamped_step(
                            q_tile, k[:, :, ks], v[:, :, ks], dout[:, :, qs], lse[:, :, qs], delta[:, :, qs], i,
                            plan.k_index[ks], plan.key_valid[ks], None, mask_fn, z[..., last:], plan.scale,
                            plan.groups)
                        dz[..., last] += ds.sum(-1)
                    else:
                        dq_t, dk_t, dv_t, dz_t, dcarry = step(
                            q_tile, k[:, :, ks], v[:, :, ks], z, dout[:, :, qs], lse[:, :, qs], delta[:, :, qs],
                            carries[kept], dcarry, i, plan.k_index[ks], plan.key_valid[ks], q_pos[:, :, qs],
                            k_pos[..., ks], mask_fn, plan.scale, plan.groups)
                        dz += dz_t
                        kept += 1
                    pair += 1
                    dq_tile += dq_t
                    dk[:, :, ks] += dk_t
                    dv[:, :, ks] += dv_t
                dq_tile += torch.matmul(dz, pos_emb) * plan.scale
                demb += torch.einsum("bhrn,bhrd->nd", dz, q_tile) * plan.scale
        return None, dq, dk, dv, demb, None, None


# ------------------------------------------------------------------------------------ entry point
def _row_positions(positions: Tensor, index: Tensor, groups: int) -> Tensor:
    """``(L,)`` or ``(B, L)`` positions at ``index`` (the tile-padded indices), each repeated ``groups`` times:
    ``(B or 1, 1, len(index) * groups)``."""
    rows = positions[..., index].repeat_interleave(groups, dim=-1)
    return rows.view(-1, 1, rows.shape[-1])


def tiled_cope(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, pos_emb: Tensor,
               mask: AttentionMask, *, tile: int | None = None, compiled: bool | None = None) -> Tensor:
    """``softmax(q k^T / sqrt(d) + CoPE bias, mask) v`` over tiles, ``(B, H, Lq, d)``.

    Args:
        q: ``(B, H, Lq, d)``; k, v: ``(B, H_kv, Lk, d)`` with ``H_kv`` dividing ``H``.
        q_pos: ``(Lq,)`` or ``(B, Lq)``; k_pos: ``(Lk,)`` or ``(B, Lk)``: key ``j`` counts for query ``i`` iff
            ``k_pos[j] <= q_pos[i]`` and the mask lets ``i`` see ``j``.
        pos_emb: ``(npos_max, d)``, CoPE's position embeddings ``E``.
        mask: which keys each query sees.
        tile: queries and keys per tile (default :data:`TILE`, or the length rounded up to 8 when shorter).
        compiled: run the tile steps through ``torch.compile`` (default
            :data:`~pe_toolkit.nn.tiled_attention.TILED_COMPILE`).
    """
    compiled = tiled_attention.TILED_COMPILE if compiled is None else compiled
    plan = _plan(q, k, mask, None, tile_size(mask, tile, TILE), compiled)
    q_rows = to_rows(q, len(plan.q_index), plan.groups)
    k4, v4 = to_rows(k, len(plan.k_index), 1), to_rows(v, len(plan.k_index), 1)
    emb = pos_emb.to(compute_dtype(q.dtype))
    qp = _row_positions(q_pos, plan.q_index, plan.groups).unsqueeze(-1)  # (B or 1, 1, rows, 1)
    kp = _row_positions(k_pos, plan.k_index, 1).unsqueeze(-2)  # (B or 1, 1, 1, Lk_pad)
    if tracing():
        out, _, _ = _forward(plan, q_rows, k4, v4, emb, qp, kp)  # ordinary autograd, as tiled_attention
    else:
        with torch._dynamo.config.patch(recompile_limit=RECOMPILE_LIMIT):
            out = _TiledCoPE.apply(plan, q_rows, k4, v4, emb, qp, kp)
    return from_rows(out, plan.groups, mask.q_len).to(q.dtype)
