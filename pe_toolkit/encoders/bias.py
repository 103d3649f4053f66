"""Additive relative-position biases, added to the scaled attention logits through ``bias``.

* ``t5`` — Raffel et al. 2020 (T5), arXiv:1910.10683: learned scalar per head and log-bucket of ``j - i``.
* ``alibi`` — Press et al. 2022, arXiv:2108.12409: ``-m_h |i - j|`` with geometric head slopes.
* ``kerple`` — Chi et al. 2022, arXiv:2205.09921: ``-r1 log(1 + r2 |i - j|)`` or ``-r1 |i - j| ** r2``.
* ``fire`` — Li et al. 2023, arXiv:2310.04418: MLP over ``psi(i - j) / psi(max(i, L))``.
* ``sandwich`` — Chi et al. 2023, arXiv:2212.10356: sinusoid dot products ``sum_k cos((i - j) w_k)``.

All are :class:`PositionBiasEncoding` subclasses, so a bias shared by all layers is built once per
forward. Biases are computed in float32 (float64 for float64 queries) and shaped ``(B or 1, H, Lq, Lk)``.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import (
    BiasFunction,
    PositionBiasEncoding,
    check_choice,
    check_float,
    check_int,
    heads_first,
    position_lookup,
    tracing,
)
from pe_toolkit.encoders.fire_tiles import FireTileBias, contiguous_start
from pe_toolkit.encoders.fire_tiles import extension as fire_tiles_extension
from pe_toolkit.registry import register_encoder


def _require_integer(name: str, *positions: Tensor) -> None:
    for p in positions:
        if p.is_floating_point():
            raise TypeError(f"{name}: positions must be integers, got dtype {p.dtype}")


# ------------------------------------------------------------------------------------------ T5
def t5_relative_position_bucket(
    relative_position: Tensor, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> Tensor:
    """T5's bucket of each relative position ``j - i`` (identical to Mesh TensorFlow / HF T5).

    Half the buckets (per direction when bidirectional) are exact small distances; the rest are
    logarithmically spaced up to ``max_distance``, beyond which everything shares the last bucket.
    Causal (``bidirectional=False``) maps all future keys (``j > i``) to bucket 0.
    """
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    is_small = distance < max_exact
    large = max_exact + (
        torch.log(distance.float().clamp(min=1) / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return buckets + torch.where(is_small, distance, large)


@register_encoder(
    "t5",
    relative=True,
    reference="Raffel et al. 2020, Exploring the Limits of Transfer Learning with a Unified "
    "Text-to-Text Transformer (T5), arXiv:1910.10683",
)
class T5RelativeBias(PositionBiasEncoding):
    """T5 bucketed relative position bias: ``b[h, i, j] = relative_attention_bias[bucket(j - i), h]``.

    Options:
        num_buckets: number of buckets (32).
        max_distance: distance from which all pairs share the last bucket (128).
        bidirectional: buckets for both directions; ``None`` (default) means ``not causal``.

    Positions must be integers. The table is ``nn.Embedding(num_buckets, num_heads)`` named
    ``relative_attention_bias``, initialised N(0, dim ** -0.5) as in T5.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool | None = None,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.num_buckets = check_int("num_buckets", num_buckets, minimum=2)
        self.max_distance = check_int("max_distance", max_distance, minimum=1)
        if bidirectional is not None and not isinstance(bidirectional, bool):
            raise TypeError(f"t5: bidirectional must be a bool or None, got {bidirectional!r}")
        self.bidirectional = (not causal) if bidirectional is None else bidirectional
        exact = num_buckets // (4 if self.bidirectional else 2)
        if exact < 1 or max_distance <= exact:
            raise ValueError(
                f"t5: max_distance ({max_distance}) must exceed the exact-bucket range ({exact}) "
                f"implied by num_buckets={num_buckets}"
            )
        self.relative_attention_bias = nn.Embedding(num_buckets, num_heads)
        nn.init.normal_(self.relative_attention_bias.weight, std=dim**-0.5)

    shift_invariant = True

    @property
    def causal_only(self) -> bool:
        """One-way buckets (``bidirectional=False``) map every future key to bucket 0."""
        return not self.bidirectional

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """``relative_attention_bias[bucket(k_pos - q_pos), head]``."""
        _require_integer("t5", q_pos, k_pos)
        buckets = t5_relative_position_bucket(
            k_pos - q_pos, bidirectional=self.bidirectional, num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        return self.relative_attention_bias.weight.to(dtype)[buckets, head]


# --------------------------------------------------------------------------------------- ALiBi
def alibi_slopes(num_heads: int) -> Tensor:
    """ALiBi head slopes exactly as Press et al. 2022 (float64, ``(num_heads,)``).

    For ``n`` a power of two: ``2 ** (-8 h / n)``, ``h = 1..n``. Otherwise the slopes of the closest
    lower power of two ``m``, followed by every other slope of ``2m`` heads, up to ``n``.
    """

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(num_heads).is_integer():
        slopes = power_of_two(num_heads)
    else:
        closest = 2 ** math.floor(math.log2(num_heads))
        slopes = power_of_two(closest) + alibi_slopes(2 * closest)[0::2][: num_heads - closest].tolist()
    return torch.tensor(slopes, dtype=torch.float64)


@register_encoder(
    "alibi",
    relative=True,
    reference="Press et al. 2022, Train Short, Test Long: Attention with Linear Biases Enables Input "
    "Length Extrapolation, arXiv:2108.12409",
)
class ALiBi(PositionBiasEncoding):
    """ALiBi: ``b[h, i, j] = -m_h |i - j|`` with the paper's geometric slopes ``m_h``.

    No parameters. Bidirectional use takes the symmetric ``|i - j|`` form. Float positions allowed.
    """

    def __init__(self, dim: int, num_heads: int, *, causal: bool = True) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.register_buffer("slopes", alibi_slopes(num_heads), persistent=False)

    shift_invariant = True

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """``-m_head |k_pos - q_pos|``."""
        return -self.slopes.to(dtype)[head] * (k_pos.to(dtype) - q_pos.to(dtype)).abs()


# -------------------------------------------------------------------------------------- KERPLE
@register_encoder(
    "kerple",
    relative=True,
    reference="Chi et al. 2022, KERPLE: Kernelized Relative Positional Embedding for Length "
    "Extrapolation, arXiv:2205.09921",
)
class KERPLE(PositionBiasEncoding):
    """KERPLE: conditionally positive definite kernels of ``|i - j|`` as a bias, two learned scalars per head.

    Variants:
        ``log``: ``-r1 log(1 + r2 |i - j|)`` (init r1 ~ U(0, 2), r2 ~ U(0, 1));
        ``power``: ``-r1 |i - j| ** r2`` with ``0 < r2 <= 2`` (init r2 ~ U(0, 2), r1 ~ U(0, 1)).

    As in the official code, ``r1, r2`` are kept ``>= eps = 1e-2`` (and ``r2 <= 2`` for power); here
    by clamping inside the formula rather than mutating the parameters.
    """

    eps = 1e-2

    def __init__(self, dim: int, num_heads: int, *, variant: str = "log", causal: bool = True) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.variant = check_choice("variant", variant, ("log", "power"))
        if variant == "log":
            self.r1 = nn.Parameter(torch.rand(num_heads) * 2)
            self.r2 = nn.Parameter(torch.rand(num_heads))
        else:
            self.r1 = nn.Parameter(torch.rand(num_heads))
            self.r2 = nn.Parameter(torch.rand(num_heads) * 2)

    shift_invariant = True

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """``-r1 log(1 + r2 |i - j|)`` (log) or ``-r1 |i - j| ** r2`` (power), with head ``head``'s ``r1, r2``."""
        distance = (k_pos.to(dtype) - q_pos.to(dtype)).abs()
        r1 = self.r1.to(dtype).clamp(min=self.eps)[head]
        if self.variant == "log":
            return -r1 * torch.log1p(self.r2.to(dtype).clamp(min=self.eps)[head] * distance)
        r2 = self.r2.to(dtype).clamp(min=self.eps, max=2.0)[head]
        # |d| ** r2 written as exp(r2 log|d|) with 0 at d = 0, so the gradient in r2 stays finite.
        tiny = torch.finfo(dtype).tiny
        return -r1 * torch.where(distance > 0, torch.exp(r2 * torch.log(distance.clamp(min=tiny))), 0.0)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", variant={self.variant!r}"


# ---------------------------------------------------------------------------------------- FIRE
@register_encoder(
    "fire",
    relative=False,  # the normaliser psi(max(i, L)) depends on the query position itself
    reference="Li et al. 2023, Functional Interpolation for Relative Positions Improves Long Context "
    "Transformers (FIRE), arXiv:2310.04418",
)
class FIRE(PositionBiasEncoding):
    """FIRE: ``b[h, i, j] = f_theta(psi(i - j) / psi(max(i, L)))`` with ``psi(x) = log(c |x| + 1)``.

    ``f_theta`` is an MLP ``1 -> mlp_width -> num_heads`` (ReLU); ``c`` (init 0.1) and the threshold
    ``L`` (init 512) are learned. The normaliser makes the input lie in [0, 1] for causal pairs, so
    the bias interpolates rather than extrapolates on longer inputs.

    Options: ``mlp_width`` (32), ``init_c`` (0.1), ``init_threshold`` (512.0), ``eps`` (1e-6).
    """

    _rows_per_chunk_elems = 1 << 22  # bound the (rows, Lk, mlp_width) hidden activations
    _unit_multiple = 4  # kinked units kept per bias function: padded to a multiple (one compiled kernel per count)

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        mlp_width: int = 32,
        init_c: float = 0.1,
        init_threshold: float = 512.0,
        eps: float = 1e-6,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        check_int("mlp_width", mlp_width)
        self.mlp = nn.Sequential(nn.Linear(1, mlp_width), nn.ReLU(), nn.Linear(mlp_width, num_heads))
        self.c = nn.Parameter(torch.tensor(check_float("init_c", init_c)))
        self.threshold = nn.Parameter(torch.tensor(check_float("init_threshold", init_threshold)))
        self.eps = check_float("eps", eps)

    def normalized_distance(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``psi(i - j) / psi(max(i, L))`` for every pair, shape ``(..., Lq, Lk)``."""
        return self.normalized(q_pos.unsqueeze(-1), k_pos.unsqueeze(-2), dtype)

    def normalized(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        """``psi(i - j) / psi(max(i, L))`` elementwise over broadcast ``q_pos``, ``k_pos``."""
        q_pos, k_pos = q_pos.to(dtype), k_pos.to(dtype)
        c = self.c.to(dtype)
        psi = torch.log1p((c * (q_pos - k_pos)).abs())
        normaliser = torch.maximum(q_pos, self.threshold.to(dtype).abs())
        return psi / (torch.log1p((c * normaliser).abs()) + self.eps)

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """``f_theta(x)[head]`` at ``x = psi(i - j) / psi(max(i, L))``; ``f_theta`` unrolled over its width.

        ``sum_w W2[head, w] relu(W1[w] x + b1[w]) + b2[head]``: a sum over the ``mlp_width`` hidden
        units of elementwise terms, so it stays pointwise (FlexAttention's ``score_mod``).
        """
        x = self.normalized(q_pos, k_pos, dtype)
        first, second = self.mlp[0], self.mlp[2]
        w1, b1 = first.weight.to(dtype)[:, 0], first.bias.to(dtype)
        w2, b2 = second.weight.to(dtype), second.bias.to(dtype)
        total = b2[head]
        for unit in range(w1.shape[0]):
            total = total + w2[head, unit] * torch.relu(w1[unit] * x + b1[unit])
        return total

    def bias_function(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> BiasFunction:
        """:meth:`score` pointwise, with the MLP reduced to the hidden units that have a kink inside this call's inputs.

        The input ``x`` of a query at ``i`` lies in ``[0, psi(D_i) / psi(max(i, |L|))]``, ``D_i`` its farthest key.
        Over that range a hidden unit whose pre-activation ``W1[w] x + b1[w]`` is positive at both ends is linear,
        and one that is non-positive at both ends is zero: both fold, exactly (values and gradients), into a line
        per head ``c0[h] + c1[h] x``, and only the units with a kink inside the range are evaluated pair by pair
        (at initialisation about a quarter of the 32 for causal pairs). Their count is rounded up to a multiple of
        :attr:`_unit_multiple` with zero units, so that one compiled kernel serves nearby counts. The cost of
        FIRE's bias grows with that count: with every unit kinked it is the full MLP's (see ``docs/concepts.md``).

        The function has ``tile_bias(q_size, k_size)`` (:meth:`tile_bias`): on the CPU with contiguous positions
        the tiled backend takes the bias and its gradients from FIRE's tile kernel instead (the MLP as lines
        between its kinks, a cost per pair independent of the units). Otherwise it evaluates this function on its
        tiles through ``within(blocks)``: the same bias, exact on the pairs of the given ``(query start, query stop,
        key start, key stop)`` index blocks only (the range, hence the units kept, is theirs); a causal layer never
        evaluates a key far after its query, whose inputs reach past 1 and would keep more units. While
        ``torch.compile`` traces (values unknown) or for empty positions, the full MLP (:meth:`score`).
        """
        if tracing() or q_pos.numel() == 0 or k_pos.numel() == 0:
            return super().bias_function(q, k, q_pos, k_pos)
        return self._folded_function(q, k, q_pos, k_pos, None)

    def _folded_function(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor,
                         blocks: list[tuple[int, int, int, int]] | None) -> BiasFunction:
        line, kept = self.kinked_units(q_pos, k_pos, blocks)
        if kept.numel() >= line.numel():  # nothing folds: the plain MLP, without the folding's own work
            function = super().bias_function(q, k, q_pos, k_pos)
            function.within = functools.partial(self._folded_function, q, k, q_pos, k_pos)
            function.tile_bias = functools.partial(self.tile_bias, q, q_pos, k_pos)
            return function
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        query, key = position_lookup(q_pos), position_lookup(k_pos)

        def function(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            # the folded MLP from the parameters at evaluation time (no tensor built outside: a kernel that
            # re-evaluates the bias per tile for its gradient reaches the parameters directly)
            c0, c1, w1, b1, w2 = self.reduced_mlp(line, kept, dtype)
            x = self.normalized(query(b, i), key(b, j), dtype)
            total = c0[h] + c1[h] * x
            for unit in range(kept.shape[0]):
                total = total + w2[h, unit] * torch.relu(w1[unit] * x + b1[unit])
            return total

        function.within = functools.partial(self._folded_function, q, k, q_pos, k_pos)
        function.tile_bias = functools.partial(self.tile_bias, q, q_pos, k_pos)
        return function

    def tile_bias(self, q: Tensor, q_pos: Tensor, k_pos: Tensor, q_size: int, k_size: int) -> FireTileBias | None:
        """The bias and its gradient on the tiles of the tiled backend from FIRE's own kernel (:mod:`.fire_tiles`:
        the MLP as lines between its kinks, a cost per pair independent of the units), for ``q_size`` x ``k_size``
        indices (tile padding included); ``None`` where it does not apply: positions not ``(L,)`` and contiguous,
        not on the CPU, or the kernel could not be built (a warning says so)."""
        if q.device.type != "cpu" or q_pos.device.type != "cpu":
            return None
        q_start, k_start = contiguous_start(q_pos), contiguous_start(k_pos)
        if q_start is None or k_start is None or (kernel := fire_tiles_extension()) is None:
            return None
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        return FireTileBias(self, q_start, k_start, q_size, k_size, dtype, kernel)

    @torch.no_grad()
    def input_bound(self, q_pos: Tensor, k_pos: Tensor, blocks: list[tuple[int, int, int, int]] | None = None
                    ) -> Tensor:
        """The largest input ``psi(|i - j|) / psi(max(i, |L|))`` over the pairs of ``q_pos`` x ``k_pos`` (0-d, float64),
        or over the pairs of ``blocks`` (``(query start, query stop, key start, key stop)`` index ranges) only.
        Exact per query row: the farthest key in its blocks, its own normaliser."""
        q = q_pos.to(torch.float64).reshape(-1, q_pos.shape[-1])  # (B or 1, Lq)
        k = k_pos.to(torch.float64).reshape(-1, k_pos.shape[-1])  # (B or 1, Lk)
        if blocks is None:
            blocks = [(0, q.shape[-1], 0, k.shape[-1])]
        rows = (max(q.shape[0], k.shape[0]), q.shape[-1])
        lo, hi = q.new_full(rows, math.inf), q.new_full(rows, -math.inf)  # per batch row and query: its keys' range
        for q_start, q_stop, k_start, k_stop in blocks:
            if q_stop > q_start and k_stop > k_start:
                keys = k[:, k_start:k_stop]
                lo[:, q_start:q_stop] = torch.minimum(lo[:, q_start:q_stop], keys.amin(-1, keepdim=True))
                hi[:, q_start:q_stop] = torch.maximum(hi[:, q_start:q_stop], keys.amax(-1, keepdim=True))
        farthest = torch.maximum(q - lo, hi - q).clamp_min(0)  # rows in no block: -inf -> 0
        c = self.c.double().abs()
        normaliser = torch.maximum(q, self.threshold.double().abs())
        return (torch.log1p(c * farthest) / (torch.log1p(c * normaliser) + self.eps)).max()

    @torch.no_grad()
    def kinked_units(self, q_pos: Tensor, k_pos: Tensor, blocks: list[tuple[int, int, int, int]] | None = None
                     ) -> tuple[Tensor, Tensor]:
        """Which hidden units are linear over the inputs of ``q_pos`` x ``k_pos`` (or of ``blocks``, see
        :meth:`input_bound`) and which have a kink there.

        Returns ``line`` ``(mlp_width,)`` bool (positive pre-activation over the whole range) and ``kept``
        ``(m,)`` long, the kinked units' indices padded with ``mlp_width`` (a zero unit, see :meth:`reduced_mlp`)
        to a multiple of :attr:`_unit_multiple`. One host read (the kept units).
        """
        w1, b1 = self.mlp[0].weight[:, 0].double(), self.mlp[0].bias.double()
        x_max = self.input_bound(q_pos, k_pos, blocks)
        x_max = x_max * (1 + 1e-3) + 1e-6  # rounding of x in the kernel; a unit kept needlessly costs nothing
        at_start, at_end = b1, w1 * x_max + b1
        line = (at_start > 0) & (at_end > 0)
        zero = (at_start <= 0) & (at_end <= 0)  # a NaN bound keeps every unit
        kept = torch.nonzero(~(line | zero)).flatten()
        pad = -kept.numel() % self._unit_multiple
        return line, torch.cat([kept, kept.new_full((pad,), w1.numel())])

    def active_lines(self, on: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``f_h(x) = c0[..., h] + c1[..., h] x`` where the hidden units ``on`` (``(..., mlp_width)`` bool) are active
        and the others zero: ``c0, c1`` ``(..., H)`` in ``dtype``. Differentiable."""
        first, second = self.mlp[0], self.mlp[2]
        w1, b1 = first.weight.to(dtype)[:, 0], first.bias.to(dtype)
        w2, b2 = second.weight.to(dtype), second.bias.to(dtype)
        on = on.to(dtype)
        return b2 + (on * b1) @ w2.T, (on * w1) @ w2.T

    def reduced_mlp(self, line: Tensor, kept: Tensor, dtype: torch.dtype
                    ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The MLP folded by :meth:`kinked_units`: ``c0, c1`` ``(H,)``, the line of the linear units plus ``b2``,
        and the kept units ``w1, b1`` ``(m,)``, ``w2`` ``(H, m)`` (zeros where ``kept`` pads). Differentiable."""
        c0, c1 = self.active_lines(line, dtype)
        first, second = self.mlp[0], self.mlp[2]
        w1, b1, w2 = first.weight.to(dtype)[:, 0], first.bias.to(dtype), second.weight.to(dtype)
        zero = w1.new_zeros(1)
        w1_kept, b1_kept = torch.cat([w1, zero])[kept], torch.cat([b1, zero])[kept]
        w2_kept = torch.cat([w2, w2.new_zeros(w2.shape[0], 1)], dim=1)[:, kept]
        return c0, c1, w1_kept, b1_kept, w2_kept

    def position_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, *,
                      span: tuple[int, int] | None = None) -> Tensor:
        """The dense bias with the MLP applied to all heads at once, in row chunks (equals :meth:`score`)."""
        x = self.normalized_distance(q_pos, k_pos, dtype).unsqueeze(-1)
        mlp = self.mlp if dtype == self.mlp[0].weight.dtype else _cast_module(self.mlp, dtype)
        rows = max(1, self._rows_per_chunk_elems // max(1, x.shape[-2] * self.mlp[0].out_features))
        out = torch.cat([mlp(chunk) for chunk in x.split(rows, dim=-3)], dim=-3)
        return heads_first(out)


def _cast_module(module: nn.Module, dtype: torch.dtype):
    """A function applying ``module`` with its parameters cast to ``dtype`` (autograd flows back)."""
    params = {name: p.to(dtype) for name, p in module.named_parameters()}
    return lambda x: torch.func.functional_call(module, params, (x,))


# ------------------------------------------------------------------------------------ Sandwich
@register_encoder(
    "sandwich",
    relative=True,
    reference="Chi et al. 2023, Dissecting Transformer Length Extrapolation via the Lens of Receptive "
    "Field Analysis (Sandwich), arXiv:2212.10356",
)
class Sandwich(PositionBiasEncoding):
    """Sandwich: the dot product of sinusoidal PEs as a parameter-free, log-decaying bias.

    ``b[h, i, j] = (sum_{k=1}^{d'/2} cos((i - j) / 10000 ** (2k / d')) - d'/2) / (8 h / H)``,
    ``h = 1..H``: zero at distance 0, negative elsewhere, compressed per head like ALiBi's slopes.

    Options: ``sandwich_dim`` (``d'``, default ``dim``, even), ``base`` (10,000).
    """

    def __init__(
        self, dim: int, num_heads: int, *, sandwich_dim: int | None = None, base: float = 10_000.0,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.sandwich_dim = check_int("sandwich_dim", dim if sandwich_dim is None else sandwich_dim, minimum=2)
        if self.sandwich_dim % 2:
            raise ValueError(f"sandwich: sandwich_dim must be even, got {self.sandwich_dim}")
        self.base = check_float("base", base)
        inv_freq, head_scale = self._tables()
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("head_scale", head_scale, persistent=False)

    def _tables(self) -> tuple[Tensor, Tensor]:
        """The frequencies ``w_k`` and per-head scales ``8 h / H``, in float64."""
        d = self.sandwich_dim
        inv_freq = self.base ** (-2 * torch.arange(1, d // 2 + 1, dtype=torch.float64) / d)
        head_scale = torch.arange(1, self.num_heads + 1, dtype=torch.float64) * 8 / self.num_heads
        return inv_freq, head_scale

    def _apply(self, fn, recurse: bool = True):
        # .bfloat16() / .half() must not round the frequencies: at distance 1e6 a bfloat16 w_k moves
        # cos(distance w_k) by O(1) (found by tests/zoo/test_bf16_far_positions.py)
        result = super()._apply(fn, recurse)
        device = self.inv_freq.device
        inv_freq, head_scale = self._tables()
        self.inv_freq, self.head_scale = inv_freq.to(device), head_scale.to(device)
        return result

    def kernel(self, distance: Tensor) -> Tensor:
        """``sum_k cos(distance w_k) - d'/2`` for a tensor of distances (same dtype as input)."""
        total = torch.zeros_like(distance)
        for w in self.inv_freq.to(distance.dtype):  # loop over d'/2 frequencies, not over tokens
            total += torch.cos(distance * w)
        return total - self.sandwich_dim / 2

    shift_invariant = True

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """``kernel(i - j) / (8 (head + 1) / H)``; the angles in float64 (float32 loses ~1e-3 at 16k)."""
        delta = k_pos.to(torch.float64) - q_pos.to(torch.float64)
        return self.kernel(delta).to(dtype) / self.head_scale.to(dtype)[head]
