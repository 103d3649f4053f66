"""Bayesian Attention Mechanism (BAM): the positional encoding as a log-prior over relative position.

Bianchessi et al. 2025, "Bayesian Attention Mechanism: A Probabilistic Framework for Positional
Encoding and Context Length Extrapolation", arXiv:2505.22842 (official code: ArthurSBianchessi/BAM).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import BiasFunction, PositionBiasEncoding, diagonal_sums, score_bias, tracing
from pe_toolkit.encoders.bias import alibi_slopes
from pe_toolkit.encoders.fire_tiles import contiguous_start
from pe_toolkit.registry import register_encoder


@register_encoder(
    "bam",
    relative=True,
    reference="Bianchessi et al. 2025, Bayesian Attention Mechanism: A Probabilistic Framework for "
    "Positional Encoding and Context Length Extrapolation, arXiv:2505.22842",
)
class BAM(PositionBiasEncoding):
    """Generalized-Gaussian log-prior bias ``-exp(scale_h) * (|(j - i) - mu_h| + 1e-5) ** shape_h``.

    With ``mu_h = 2 sinh(loc_h)``. Initialisation (``shape = 1``, ``scale = log(alibi slope)``,
    ``loc = 0``) makes BAM equal ALiBi exactly (up to a per-head constant that softmax ignores).

    Options:
        train_shape, train_scale, train_loc: which of the three per-head parameters learn (all True,
            as the paper's training script).
    """

    eps = 1e-5

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        train_shape: bool = True,
        train_scale: bool = True,
        train_loc: bool = True,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        for name, flag in (("train_shape", train_shape), ("train_scale", train_scale), ("train_loc", train_loc)):
            if not isinstance(flag, bool):
                raise TypeError(f"bam: {name} must be a bool, got {flag!r}")
        self.shape = nn.Parameter(torch.ones(num_heads), requires_grad=train_shape)
        self.scale = nn.Parameter(alibi_slopes(num_heads).log().float(), requires_grad=train_scale)
        self.loc = nn.Parameter(torch.zeros(num_heads), requires_grad=train_loc)

    def location(self) -> Tensor:
        """``mu_h = exp(loc_h) - exp(-loc_h)``, ``(H,)``."""
        return 2 * torch.sinh(self.loc)

    shift_invariant = True

    def log_prior(self, head: Tensor, delta: Tensor) -> Tensor:
        """The prior of head ``head`` at relative positions ``delta = j - i`` (float), elementwise."""
        dtype = delta.dtype
        mu, shape, scale = self.location().to(dtype)[head], self.shape.to(dtype)[head], self.scale.to(dtype)[head]
        return -scale.exp() * ((delta - mu).abs() + self.eps) ** shape

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """The log-prior at ``k_pos - q_pos``."""
        return self.log_prior(head, k_pos.to(dtype) - q_pos.to(dtype))


@register_encoder(
    "bam_ssmax",
    relative=False,  # the Scalable-Softmax factor log(n_i) depends on the query's absolute position
    reference="Bianchessi et al. 2025, Bayesian Attention Mechanism, arXiv:2505.22842; Scalable-Softmax: "
    "Nakanishi 2025, arXiv:2501.19399",
)
class BAMSSMax(BAM):
    """BAM with Scalable-Softmax: logits ``(q.k / sqrt(d) + b_BAM) * log(n_i) * s_h``.

    ``n_i`` is the number of keys query ``i`` sees: ``q_pos_i + 1`` for causal attention (positions
    counted from 0, so it also holds while decoding with a KV cache), the number of keys otherwise.
    ``s_h`` is a learned per-head scale initialised to 1 (``init_ssmax_scale``). The factor is applied
    through both hooks: queries are multiplied by it in ``rotate`` and the prior in ``bias``.

    As in the paper's code, one prior (and here one ``s_h``) is shared by all layers unless the
    Transformer uses one encoding per layer. Options: those of :class:`BAM` plus ``init_ssmax_scale``.
    """

    def __init__(self, dim: int, num_heads: int, *, init_ssmax_scale: float = 1.0, **options) -> None:
        super().__init__(dim, num_heads, **options)
        self.ssmax_scale = nn.Parameter(torch.full((num_heads,), float(init_ssmax_scale)))

    shift_invariant = False  # the factor log(n_i) depends on the query position

    @property
    def supports_documents(self) -> bool:
        """Causal only: bidirectional ``n_i`` is the number of keys of the call, not of the query's document."""
        return self.causal

    @property
    def supports_window(self) -> bool:
        """No: ``n_i = q_pos + 1`` counts every earlier key, also those outside a sliding window."""
        return False

    @property
    def causal_only(self) -> bool:
        """Built causal, ``n_i = q_pos + 1`` assumes the query sees only the keys before it."""
        return self.causal

    def log_keys(self, q_pos: Tensor, num_keys: int, dtype: torch.dtype) -> Tensor:
        """``log(n_i)`` elementwise: ``log(max(q_pos + 1, 1))`` when causal, ``log(num_keys)`` otherwise."""
        if self.causal:
            return (q_pos.to(dtype) + 1).clamp(min=1).log()
        return torch.full_like(q_pos, float(num_keys), dtype=dtype).log()

    def ssmax_factor(self, q_pos: Tensor, num_keys: int, dtype: torch.dtype) -> Tensor:
        """``log(n_i) * s_h`` shaped ``(B or 1, H, Lq, 1)``."""
        log_n = self.log_keys(q_pos, num_keys, dtype)
        log_n = log_n if log_n.dim() == 2 else log_n.unsqueeze(0)  # (B or 1, Lq)
        return log_n[:, None, :, None] * self.ssmax_scale.to(dtype)[None, :, None, None]

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        return (q.to(compute) * self.ssmax_factor(q_pos, k_pos.shape[-1], compute)).to(q.dtype), k

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """BAM's prior times ``log(n_i) s_head``."""
        factor = self.log_keys(q_pos, num_keys, dtype) * self.ssmax_scale.to(dtype)[head]
        return super().score(head, q_pos, k_pos, dtype, num_keys) * factor

    def position_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, *,
                      span: tuple[int, int] | None = None) -> Tensor:
        """BAM's tabulated prior times the per-query factor (equals :meth:`score`)."""
        prior = score_bias(lambda *args: BAM.score(self, *args), self.num_heads, q_pos, k_pos, dtype,
                           shift_invariant=True, span=span)
        return prior * self.ssmax_factor(q_pos, k_pos.shape[-1], dtype)

    def bias_function(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> BiasFunction:
        """:meth:`score` pointwise, with ``tile_bias(q_size, k_size)`` (:meth:`tile_bias`): with contiguous positions
        the tiled backend reads the bias per tile as the prior's diagonals times the rows' factors instead of
        pair by pair (:class:`SSMaxTileBias`)."""
        function = super().bias_function(q, k, q_pos, k_pos)
        if not tracing():
            function.tile_bias = functools.partial(self.tile_bias, q, q_pos, k_pos)
        return function

    def tile_bias(self, q: Tensor, q_pos: Tensor, k_pos: Tensor, q_size: int, k_size: int) -> SSMaxTileBias | None:
        """The bias and its gradients on the tiles of one call of ``q_size`` x ``k_size`` indices (tile padding
        included); ``None`` unless the positions are ``(L,)`` and contiguous (a KV cache's shifted ones too)."""
        q_start, k_start = contiguous_start(q_pos), contiguous_start(k_pos)
        if q_start is None or k_start is None:
            return None
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        return SSMaxTileBias(self, q_start, k_start, q_size, k_size, k_pos.shape[-1], dtype)


class SSMaxTileBias:
    """BAM-SSMax's bias on the tiles of one call, ``prior[h, j - i] * factor[h, i]``: BAM's prior (a function of
    ``j - i`` with contiguous positions) times the Scalable-Softmax factor ``log(n_i) s_h`` of the query row.

    The tiled backend's ``tile_bias`` hook (:mod:`pe_toolkit.nn.tiled_attention`): :meth:`bias` per tile reads the
    prior's diagonals and scales the rows; :meth:`statistics` per tile sums the score gradient ``dS`` times the
    factor along each diagonal (the prior's gradient, :func:`~pe_toolkit.encoders.base.diagonal_sums`) and ``dS``
    times the prior along each row (the factor's); :meth:`gradients` turns the summed statistics into the
    parameters' gradients with one small autograd call. Read pair by pair instead, one causal layer took 3.3x
    NoPE's SDPA at 2,048 tokens (a 2-core AVX-512 Xeon, 2026-12-05; ``docs/concepts.md``).

    Indices ``i < q_size``, ``j < k_size`` (tile padding included) are at positions ``q_start + i``, ``k_start + j``.
    """

    def __init__(self, encoder: BAMSSMax, q_start: int, k_start: int, q_size: int, k_size: int, num_keys: int,
                 dtype: torch.dtype) -> None:
        self.encoder, self.q_size, self.num_keys = encoder, q_size, num_keys
        device = encoder.ssmax_scale.device
        # entry t of the prior: j - i = t - (q_size - 1), the distance k_start + j - q_start - i
        self.distances = torch.arange(q_size + k_size - 1, device=device) - (q_size - 1) + (k_start - q_start)
        self.q_pos = q_start + torch.arange(q_size, device=device)
        with torch.no_grad():
            self.prior, self.factor = (t.contiguous() for t in self.tables(dtype))
        # the last tile's prior: the backward pass asks for a tile's bias, then for its statistics
        self._last: tuple[tuple[int, int, int, int], Tensor] | None = None

    def tables(self, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``(prior (H, q_size + k_size - 1), factor (H, q_size))`` from the parameters (differentiable)."""
        heads = torch.arange(self.encoder.num_heads, device=self.distances.device)
        prior = self.encoder.log_prior(heads[:, None], self.distances.to(dtype)[None, :])
        factor = (self.encoder.log_keys(self.q_pos, self.num_keys, dtype)[None, :]
                  * self.encoder.ssmax_scale.to(dtype)[:, None])
        return prior, factor

    def _prior_tile(self, i0: int, j0: int, rows: int, cols: int) -> Tensor:
        """``prior[h, j - i]`` on the tile, ``(H, rows, cols)``: row ``r`` is the window of ``cols`` entries starting
        ``r`` before row 0's, so the tile is ``rows`` consecutive windows (a view) in reverse order (one copy;
        a gather through an index tensor took 1.25 ms a 256 x 256 tile, ten times longer)."""
        key = (i0, j0, rows, cols)
        if self._last is None or self._last[0] != key:
            first = j0 - i0 + self.q_size - 1  # row 0's first entry
            self._last = key, self.prior.unfold(-1, cols, 1)[:, first - rows + 1:first + 1].flip(1)
        return self._last[1]

    def bias(self, i0: int, j0: int, rows: int, cols: int) -> Tensor:
        """The bias ``(H, rows, cols)`` of the tile of query indices ``i0 + r``, key indices ``j0 + c``."""
        return self._prior_tile(i0, j0, rows, cols) * self.factor[:, i0:i0 + rows, None]

    def statistics(self, i0: int, j0: int, ds: Tensor) -> Tensor:
        """``(H, n + q_size)`` sums of the tile's score gradient ``ds`` ``(H, rows, cols)`` (summed over the batch):
        per prior entry ``t < n`` the sum of ``dS factor`` over its pairs, then per query row the sum of
        ``dS prior``. Additive over tiles."""
        heads, rows, cols = ds.shape
        n = self.prior.shape[1]
        ds = ds.to(self.prior.dtype)
        out = ds.new_zeros(heads, n + self.q_size)
        start = j0 - i0 - (rows - 1) + self.q_size - 1  # the prior entry of the tile's diagonal 0
        out[:, start:start + rows + cols - 1] = diagonal_sums(ds * self.factor[:, i0:i0 + rows, None], 1)
        out[:, n + i0:n + i0 + rows] = (ds * self._prior_tile(i0, j0, rows, cols)).sum(-1)
        return out

    def gradients(self, statistics: Tensor, leaves: list[Tensor]) -> tuple[Tensor | None, ...]:
        """The gradients of ``leaves`` (the encoder's parameters) from the summed :meth:`statistics`:
        ``sum dS bias = sum_t prior_t S_t + sum_i factor_i R_i``, linear in the prior and the factors."""
        n = self.prior.shape[1]
        with torch.enable_grad():
            prior, factor = self.tables(statistics.dtype)
            surrogate = (prior * statistics[:, :n]).sum() + (factor * statistics[:, n:]).sum()
            return torch.autograd.grad(surrogate, leaves, allow_unused=True)
