"""Multi-head latent attention (MLA): a low-rank joint key/value latent and a decoupled RoPE key.

DeepSeek-AI 2024, "DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language
Model", arXiv:2405.04434, Section 2.1. Per token ``t`` with input ``x_t``::

    c_t     = W_DKV x_t                       latent, (d_c,)         <- cached
    k_t^R   = RoPE(W_KR x_t)                  rope key, (H_r, d_R)   <- cached (H_r = 1 in DeepSeek-V2)
    k_h^C   = W_UK,h c_t,   v_h = W_UV,h c_t  per-head keys / values, never cached
    q_h^C   = W_UQ,h c_q,   q_h^R = RoPE(W_QR,h c_q),   c_q = W_DQ x_t (or x_t without query compression)
    logit   = (q_h^C . k_h^C + q_h^R . k^R) / sqrt(d_nope + d_R)

The KV cache holds only ``c_t`` and ``k_t^R``: ``d_c + H_r d_R`` numbers per token and layer instead
of ``2 H_kv d`` for multi-head attention.

Absorbed inference path (Section 2.1.2 of the paper): ``q_h^C . (W_UK,h c) = (W_UK,h^T q_h^C) . c``, so
the query is mapped into the latent space and attends to the cached latents directly; values are
read from the latents too and ``W_UV,h`` is folded into the output projection. No per-head key or
value is ever materialised. :meth:`MultiHeadLatentAttention.forward` with ``absorb=True`` takes this
path; it gives the same output as the plain path (tested).

Two generalisations serve the MHA -> MLA conversion of Ji et al. 2025 (arXiv:2502.14837; see
:mod:`pe_toolkit.conversion.mha2mla`):

* ``rope_heads``: the number of rope-key heads (1 = DeepSeek-V2's shared key; ``num_kv_heads`` = one
  per original key head, as MHA2MLA keeps each head's own rotated dims), and per-head rotary
  frequencies ``rope_inv_freq (H_r, d_R / 2)`` (a persistent buffer: a converted model keeps the
  frequencies of the pairs it selected).
* ``value_latent_dim``: split keys / values into two latents (``c^K = W_DK x``, ``c^V = W_DV x``,
  both cached), the SVD-split initialisation of MHA2MLA; ``None`` (default) is the joint latent.

Rotary layout inside the rope part: half-split (pairs ``(j, j + d_R / 2)``, as HF Llama), with
``apply_rope`` from :mod:`pe_toolkit.encoders.rotary`.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.encoders.base import (
    PositionalEncoding,
    PositionBiasEncoding,
    causal_visibility,
    check_float,
    check_int,
    check_positions,
    default_positions,
    raise_failed,
    require,
    require_all,
    require_finite,
    tracing,
)
from pe_toolkit.encoders.rotary import RotaryEncoding, apply_rope, rope_inverse_frequencies
from pe_toolkit.nn.attention import _bounds_of, _position_facts, check_facts
from pe_toolkit.nn.backends import dense_attention_mask
from pe_toolkit.nn.kv_cache import KVCache
from pe_toolkit.nn.masks import AttentionMask
from pe_toolkit.nn.position_state import Bounds, PositionState, read_facts, union


class LatentKVCache(KVCache):
    """The cache of one MLA layer: latents ``(B, L, d_c)``, rope keys ``(B, H_r, L, d_R)``, positions.

    Same doubling storage as :class:`KVCache` (the latent is stored as one "head"). A plain
    :class:`KVCache` (what ``Transformer.new_cache`` makes) is accepted by the MLA layer too and then
    holds exactly the same two tensors.
    """

    @property
    def latent(self) -> Tensor | None:
        """Cached latents ``(B, L, d_c)`` (``None`` while empty)."""
        return None if self._k is None else self._k[:, 0, : self.held]

    @property
    def rope_key(self) -> Tensor | None:
        """Cached rotated rope keys ``(B, H_r, L, d_R)`` (``None`` while empty)."""
        return None if self._v is None else self._v[..., : self.held, :]


def update_latent_cache(
    cache: KVCache, latent: Tensor, rope_key: Tensor, positions: Tensor, *, bounds: tuple[int, int] | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Append ``latent (B, L, d_c)``, ``rope_key (B, H_r, L, d_R)`` and positions; return all cached so far.

    ``bounds``: the positions' exact ``(min, max)`` when known on the host (see :meth:`KVCache.update`)."""
    latents, rope_keys, positions = cache.update(latent.unsqueeze(1), rope_key, positions, bounds=bounds)
    return latents[:, 0], rope_keys, positions


def latent_cache_elements_per_token(latent_dim: int, rope_heads: int, rope_head_dim: int) -> int:
    """Numbers cached per token and layer by MLA: ``d_c + H_r d_R`` (multiply by the element size for bytes)."""
    return latent_dim + rope_heads * rope_head_dim


ABSORB_MAX_QUERIES = 8
"""``absorb=None`` takes the absorbed path on cached calls with at most this many queries (decoding)."""


class MultiHeadLatentAttention(nn.Module):
    """Multi-head latent attention (DeepSeek-V2, arXiv:2405.04434) with a decoupled RoPE key.

    Args:
        dim: model width.
        num_heads: query heads ``H``.
        latent_dim: ``d_c``, the key (joint key/value) latent size.
        rope_head_dim: ``d_R``, rotated dims per query head and per rope key (even, >= 2).
        nope_head_dim: ``d_nope``, the non-rotated query/key dims per head, may be 0 (default ``dim / H``).
        value_head_dim: value dims per head (default ``nope_head_dim``, or ``dim / H`` if that is 0).
        query_latent_dim: ``d_c'``, query compression (``W_DQ``, RMSNorm, then up-projections);
            ``None`` projects queries from ``x`` directly.
        num_kv_heads: key/value heads of the up-projections (``H`` default; fewer = GQA, each
            serving ``H / num_kv_heads`` query heads).
        rope_heads: rope-key heads ``H_r`` (1 default, shared by all heads as in DeepSeek-V2); must
            divide ``H``.
        value_latent_dim: ``None`` (joint latent, default) or the size of a separate value latent
            (split keys/values; both latents are cached).
        latent_norm: RMSNorm on the latent(s) (DeepSeek-V2's ``kv_a_layernorm``; off in conversions
            so that the converted layer reproduces the original one).
        rope_base: RoPE base for the default frequencies ``base ** (-2k / d_R)``, the same for every
            rope head; a conversion overwrites ``rope_inv_freq``.
        causal: causal self-attention.
        dropout: attention dropout (training only).

    Shapes:
        x ``(B, L, dim)``; q_pos ``(L,)`` or ``(B, L)``; key_padding_mask bool ``(B, Lk_total)``.
        Output ``(B, L, dim)``.

    Positional encodings: the rotation is this layer's own decoupled RoPE (``rope_inv_freq``). An
    ``encoding`` passed to :meth:`forward` (a ``Transformer`` passes its shared one) may be NoPE, a
    :class:`RotaryEncoding` (its rotation is the one the decoupled RoPE replaces) or a position-only
    bias encoding (:class:`PositionBiasEncoding`, e.g. ALiBi), whose bias is added to the logits.
    Other encodings raise: their ``rotate`` / ``bias`` would need the full per-head keys, which MLA
    never materialises.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        latent_dim: int,
        rope_head_dim: int = 16,
        nope_head_dim: int | None = None,
        value_head_dim: int | None = None,
        query_latent_dim: int | None = None,
        num_kv_heads: int | None = None,
        rope_heads: int = 1,
        value_latent_dim: int | None = None,
        latent_norm: bool = True,
        rope_base: float = 10_000.0,
        causal: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_int("dim", dim)
        check_int("num_heads", num_heads)
        check_int("latent_dim", latent_dim)
        check_int("rope_head_dim", rope_head_dim, minimum=2)
        if rope_head_dim % 2:
            raise ValueError(f"rope_head_dim must be even (RoPE rotates pairs), got {rope_head_dim}")
        default_head = dim // num_heads
        nope_head_dim = default_head if nope_head_dim is None else check_int("nope_head_dim", nope_head_dim, minimum=0)
        if value_head_dim is None:
            value_head_dim = nope_head_dim if nope_head_dim > 0 else default_head
        check_int("value_head_dim", value_head_dim)
        if nope_head_dim + rope_head_dim < 1:
            raise ValueError("nope_head_dim + rope_head_dim must be >= 1")
        num_kv_heads = num_heads if num_kv_heads is None else check_int("num_kv_heads", num_kv_heads)
        if num_heads % num_kv_heads:
            raise ValueError(f"num_kv_heads ({num_kv_heads}) must divide num_heads ({num_heads})")
        check_int("rope_heads", rope_heads)
        if num_heads % rope_heads:
            raise ValueError(f"rope_heads ({rope_heads}) must divide num_heads ({num_heads})")
        if value_latent_dim is not None:
            check_int("value_latent_dim", value_latent_dim)
        if query_latent_dim is not None:
            check_int("query_latent_dim", query_latent_dim)
        for name, flag in (("latent_norm", latent_norm), ("causal", causal)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__} ({flag!r})")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dim, self.num_heads, self.num_kv_heads, self.rope_heads = dim, num_heads, num_kv_heads, rope_heads
        self.latent_dim, self.value_latent_dim, self.query_latent_dim = latent_dim, value_latent_dim, query_latent_dim
        self.nope_head_dim, self.rope_head_dim, self.value_head_dim = nope_head_dim, rope_head_dim, value_head_dim
        self.causal, self.dropout = causal, dropout
        self.scale = 1.0 / math.sqrt(nope_head_dim + rope_head_dim)

        q_in = dim
        if query_latent_dim is not None:
            self.q_down = nn.Linear(dim, query_latent_dim, bias=False)
            self.q_latent_norm = nn.RMSNorm(query_latent_dim)
            q_in = query_latent_dim
        else:
            self.q_down, self.q_latent_norm = None, None
        with warnings.catch_warnings():  # nope_head_dim = 0: zero-element weights (nothing to initialise)
            warnings.filterwarnings("ignore", "Initializing zero-element tensors")
            self.q_nope_proj = nn.Linear(q_in, num_heads * nope_head_dim, bias=False)
            self.k_up = nn.Linear(latent_dim, num_kv_heads * nope_head_dim, bias=False)
        self.q_rope_proj = nn.Linear(q_in, num_heads * rope_head_dim, bias=False)
        self.kv_down = nn.Linear(dim, latent_dim, bias=False)
        self.v_down = nn.Linear(dim, value_latent_dim, bias=False) if value_latent_dim is not None else None
        self.kv_norm = nn.RMSNorm(latent_dim) if latent_norm else None
        self.v_norm = nn.RMSNorm(value_latent_dim) if latent_norm and value_latent_dim is not None else None
        self.v_up = nn.Linear(
            latent_dim if value_latent_dim is None else value_latent_dim, num_kv_heads * value_head_dim, bias=False
        )
        self.k_rope_proj = nn.Linear(dim, rope_heads * rope_head_dim, bias=False)
        self.o_proj = nn.Linear(num_heads * value_head_dim, dim, bias=False)
        # float64 like RotaryEncoding.inv_freq (a later .float() / .half() on the module casts it too)
        inv_freq = rope_inverse_frequencies(rope_head_dim, check_float("rope_base", rope_base))
        self.register_buffer("rope_inv_freq", inv_freq.expand(rope_heads, -1).clone(), persistent=True)

    # ------------------------------------------------------------------------------------ helpers
    @property
    def cache_elements_per_token(self) -> int:
        """Numbers this layer caches per token: ``d_c (+ d_cV) + H_r d_R``."""
        latent = self.latent_dim + (self.value_latent_dim or 0)
        return latent_cache_elements_per_token(latent, self.rope_heads, self.rope_head_dim)

    def new_cache(self) -> LatentKVCache:
        return LatentKVCache()

    def _rotate(self, x: Tensor, positions: Tensor) -> Tensor:
        """Rotate ``x (B, H_x, L, d_R)`` (``H_x`` a multiple of ``H_r``) at ``positions`` ``(L,)`` / ``(B, L)``."""
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        # angles in float64 (as RotaryEncoding), so long positions keep their precision
        inv_freq = self.rope_inv_freq.to(torch.float64)  # (H_r, d_R/2)
        reps = x.shape[1] // self.rope_heads
        inv_freq = inv_freq.repeat_interleave(reps, dim=0)  # (H_x, d_R/2): head h uses rope head h // reps
        pos = positions.to(torch.float64)
        if pos.dim() == 1:
            angles = pos[None, :, None] * inv_freq[:, None, :]  # (H_x, L, d_R/2)
        else:
            angles = pos[:, None, :, None] * inv_freq[None, :, None, :]  # (B, H_x, L, d_R/2)
        cos, sin = angles.cos().to(compute), angles.sin().to(compute)
        return apply_rope(x.to(compute), cos, sin, interleaved=False).to(x.dtype)

    def _latents(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Key latent ``(B, L, d_c)`` and value latent (the same tensor when joint)."""
        c_k = self.kv_down(x)
        if self.kv_norm is not None:
            c_k = self.kv_norm(c_k)
        if self.v_down is None:
            return c_k, c_k
        c_v = self.v_down(x)
        if self.v_norm is not None:
            c_v = self.v_norm(c_v)
        return c_k, c_v

    def _queries(self, x: Tensor, q_pos: Tensor) -> tuple[Tensor, Tensor]:
        """``q_nope (B, H, L, d_nope)`` and rotated ``q_rope (B, H, L, d_R)``."""
        b, length, _ = x.shape
        source = x if self.q_down is None else self.q_latent_norm(self.q_down(x))
        q_nope = self.q_nope_proj(source).view(b, length, self.num_heads, self.nope_head_dim).transpose(1, 2)
        q_rope = self.q_rope_proj(source).view(b, length, self.num_heads, self.rope_head_dim).transpose(1, 2)
        return q_nope, self._rotate(q_rope, q_pos)

    def _rope_keys(self, x: Tensor, k_pos: Tensor) -> Tensor:
        b, length, _ = x.shape
        k_rope = self.k_rope_proj(x).view(b, length, self.rope_heads, self.rope_head_dim).transpose(1, 2)
        return self._rotate(k_rope, k_pos)

    def _split_latent(self, latent: Tensor) -> tuple[Tensor, Tensor]:
        if self.value_latent_dim is None:
            return latent, latent
        return latent[..., : self.latent_dim], latent[..., self.latent_dim:]

    @staticmethod
    def _check_encoding(encoding: PositionalEncoding | None) -> PositionalEncoding | None:
        """The encoding whose bias is added (``None`` if none); raise for hooks MLA cannot apply."""
        if encoding is None or isinstance(encoding, RotaryEncoding):
            return None
        if not isinstance(encoding, PositionalEncoding):
            raise TypeError(f"encoding must be a PositionalEncoding, got {type(encoding).__name__}")
        if isinstance(encoding, PositionBiasEncoding):
            return encoding
        cls = type(encoding)
        if cls.rotate is PositionalEncoding.rotate and cls.bias is PositionalEncoding.bias:
            return None  # NoPE (its embed hook, if any, ran before the blocks)
        raise ValueError(
            f"MultiHeadLatentAttention supports NoPE, 'rope' (replaced by its decoupled RoPE) and position-only "
            f"bias encodings; got {cls.__name__}, whose rotate/bias hooks need the full per-head keys"
        )

    # ------------------------------------------------------------------------------------ forward
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
        absorb: bool | None = None,
        state: PositionState | None = None,
    ) -> Tensor:
        """Self-attention output ``(B, L, dim)``.

        ``absorb``: ``True`` takes the absorbed (latent-space) path, ``False`` the plain one (per-head keys
        and values rebuilt from the latents); ``None`` (default) absorbs on cached calls of at most
        :data:`ABSORB_MAX_QUERIES` queries (decoding steps, where rebuilding every cached key per step
        dominates) and takes the plain path otherwise (training, prefill). Both give the same output.
        ``cache`` (a :class:`LatentKVCache` or :class:`KVCache`) receives only the latents and rope keys.

        ``state``: the :class:`~pe_toolkit.nn.position_state.PositionState` of the ``Transformer`` forward this
        layer is part of (inputs checked at its entry, a position-only bias built once for all layers). Without
        it the layer checks its own inputs with one host read. As :class:`MultiHeadAttention`: every check runs
        before ``cache`` is written, and a failure after the append restores it; a cache serves one layer.
        """
        if context is not None:
            raise ValueError("MultiHeadLatentAttention is self-attention only: context must be None")
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, L, {self.dim}), got {tuple(x.shape)}")
        if not x.is_floating_point():
            raise TypeError(f"x must be a floating-point tensor, got {x.dtype}")
        bias_encoding = self._check_encoding(encoding)
        b, q_len, _ = x.shape
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a KVCache, got {type(cache).__name__}")
            if cache.window is not None:
                raise ValueError("MultiHeadLatentAttention has no sliding window: use a KVCache without window")
            cache.check_owner(self)
        past = cache.length if cache is not None else 0
        validated = state is not None and state.validated
        facts: dict[str, Tensor] = {}
        if not validated and not tracing():
            facts["x.finite"] = torch.isfinite(x).all()
        q_bounds: Bounds | None = None
        if q_pos is None:
            q_pos = default_positions(q_len, past, x.device)
            q_bounds = (past, past + q_len - 1) if q_len else None
        else:
            check_positions("q_pos", q_pos, q_len, b, values=False)
            if state is not None and q_pos is state.q_pos:
                q_bounds = state.q_bounds
            elif not validated:
                _position_facts(facts, "q_pos", q_pos, 0)
        k_bounds = q_bounds
        if k_pos is None:
            k_pos = q_pos
        else:
            check_positions("k_pos", k_pos, q_len, b, values=False)
            k_bounds = None
            if not validated:
                _position_facts(facts, "k_pos", k_pos, 0)
        held = cache.held if cache is not None else 0
        if key_padding_mask is not None:
            if not isinstance(key_padding_mask, Tensor) or key_padding_mask.dtype != torch.bool:
                got = (key_padding_mask.dtype if isinstance(key_padding_mask, Tensor)
                       else type(key_padding_mask).__name__)
                raise TypeError(f"key_padding_mask must be bool (True = real token), got {got}")
            if tuple(key_padding_mask.shape) != (b, held + q_len):
                raise ValueError(f"key_padding_mask has shape {tuple(key_padding_mask.shape)}, expected "
                                 f"({b}, {held + q_len}) ({held} cached + {q_len} new keys)")
            if not validated:
                facts["key_padding_mask"] = key_padding_mask.any(-1).all()
        checks = []
        if bias_encoding is not None and not validated:
            checks = bias_encoding.position_checks(q_pos, "q_pos")
            if k_pos is not q_pos:
                checks += bias_encoding.position_checks(k_pos, "k_pos")
        if cache is not None:
            latent_width = self.latent_dim + (self.value_latent_dim or 0)
            cache.check_update((b, 1, q_len, latent_width), k_pos)
        if tracing():  # compiled: the value checks become assertions in the graph
            require_finite("MultiHeadLatentAttention: x", x)
            for name in ("q_pos", "k_pos"):
                if f"{name}.finite" in facts:
                    require(facts[f"{name}.finite"], f"{name} contains NaN or inf")
            if "key_padding_mask" in facts:
                require(facts["key_padding_mask"], "key_padding_mask: every row needs at least one real key (True)")
            require_all(checks)
        elif facts or checks:  # the value checks of a bare call in one host read (none inside a Transformer)
            facts.update({f"check.{i}": condition for i, (condition, _, _) in enumerate(checks)})
            values = read_facts(facts)
            if values.get("x.finite", 1.0) == 0.0:
                raise ValueError(f"MultiHeadLatentAttention: x holds NaN or inf values "
                                 f"({int((~torch.isfinite(x)).sum())} of {x.numel()} entries)")
            check_facts(values, {"key_padding_mask": key_padding_mask})
            raise_failed(checks, [values[f"check.{i}"] for i in range(len(checks))])
            if "q_pos.lo" in values:
                q_bounds = _bounds_of(values, "q_pos")
                k_bounds = q_bounds if k_pos is q_pos else k_bounds
            if "k_pos.lo" in values:
                k_bounds = _bounds_of(values, "k_pos")

        q_nope, q_rope = self._queries(x, q_pos)
        c_k, c_v = self._latents(x)
        latent = c_k if self.v_down is None else torch.cat((c_k, c_v), dim=-1)
        k_rope = self._rope_keys(x, k_pos)
        all_k_bounds = k_bounds
        snapshot = None
        if cache is not None:  # every check ran above; a failure from here on restores the cache
            snapshot = cache.snapshot()
            cache.claim(self)
            all_k_bounds = union(cache.bounds, k_bounds) if cache.held else k_bounds
            latent, k_rope, k_pos = update_latent_cache(cache, latent, k_rope, k_pos, bounds=k_bounds)
        try:
            k_len = latent.shape[1]
            bias = None
            if bias_encoding is not None:
                if state is None:
                    state = PositionState(q_pos, q_bounds, all_k_bounds)
                bias = state.bias(bias_encoding, q_rope, k_rope, q_pos, k_pos)
            visibility = AttentionMask(q_len, k_len, causal=self.causal, key_padding_mask=key_padding_mask)
            mask, is_causal = dense_attention_mask(bias, visibility, 0, q_len, q_rope.dtype, x.device)
            c_k, c_v = self._split_latent(latent)
            if absorb is None:
                absorb = cache is not None and q_len <= ABSORB_MAX_QUERIES
            if absorb:
                out = self._attend_absorbed(q_nope, q_rope, c_k, c_v, k_rope, mask, is_causal)
            else:
                out = self._attend_plain(q_nope, q_rope, c_k, c_v, k_rope, mask, is_causal)
            return self.o_proj(out.transpose(1, 2).reshape(b, q_len, self.num_heads * self.value_head_dim))
        except BaseException:
            if snapshot is not None:
                cache.restore(snapshot)
            raise

    def _attend_plain(
        self, q_nope: Tensor, q_rope: Tensor, c_k: Tensor, c_v: Tensor, k_rope: Tensor, mask: Tensor | None,
        is_causal: bool,
    ) -> Tensor:
        """Materialise per-head keys/values from the latents: ``(B, H, Lq, d_v)``."""
        b, k_len, _ = c_k.shape
        h = self.num_heads
        k_nope = self.k_up(c_k).view(b, k_len, self.num_kv_heads, self.nope_head_dim).transpose(1, 2)
        v = self.v_up(c_v).view(b, k_len, self.num_kv_heads, self.value_head_dim).transpose(1, 2)
        k_nope = k_nope.repeat_interleave(h // self.num_kv_heads, dim=1)
        v = v.repeat_interleave(h // self.num_kv_heads, dim=1)
        k_rope = k_rope.repeat_interleave(h // self.rope_heads, dim=1)
        q = torch.cat((q_nope, q_rope), dim=-1)
        k = torch.cat((k_nope, k_rope), dim=-1)
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=self.scale,
            dropout_p=self.dropout if self.training else 0.0,
        )

    def _attend_absorbed(
        self, q_nope: Tensor, q_rope: Tensor, c_k: Tensor, c_v: Tensor, k_rope: Tensor, mask: Tensor | None,
        is_causal: bool,
    ) -> Tensor:
        """Attend in latent space: ``q_lat_h = W_UK,h^T q_h``, keys ``[c ; k^R]``, values ``c``; ``(B, H, Lq, d_v)``."""
        h, hkv = self.num_heads, self.num_kv_heads
        dcv = self.latent_dim if self.value_latent_dim is None else self.value_latent_dim
        w_uk = self.k_up.weight.view(hkv, self.nope_head_dim, self.latent_dim).repeat_interleave(h // hkv, dim=0)
        w_uv = self.v_up.weight.view(hkv, self.value_head_dim, dcv).repeat_interleave(h // hkv, dim=0)
        q_latent = torch.einsum("bhld,hdc->bhlc", q_nope, w_uk)  # (B, H, Lq, d_c)
        query = torch.cat((q_latent, q_rope), dim=-1)
        b, k_len, _ = c_k.shape
        # one key "head" per rope head: [c ; k^R_r], shared by the H / H_r query heads of that rope head
        key = torch.cat((c_k.unsqueeze(1).expand(b, self.rope_heads, k_len, c_k.shape[-1]), k_rope), dim=-1)
        value = c_v.unsqueeze(1).expand(b, self.rope_heads, k_len, c_v.shape[-1])
        out_latent = F.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, is_causal=is_causal, scale=self.scale,
            dropout_p=self.dropout if self.training else 0.0, enable_gqa=self.rope_heads != h,
        )  # (B, H, Lq, d_cv)
        return torch.einsum("bhlc,hvc->bhlv", out_latent, w_uv)  # W_UV folded after attention

    def attention_logits(
        self, x: Tensor, *, q_pos: Tensor | None = None, encoding: PositionalEncoding | None = None,
    ) -> Tensor:
        """Scaled self-attention logits ``(B, H, L, L)`` (bias added, causal entries ``-inf``), for monitoring."""
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, L, {self.dim}), got {tuple(x.shape)}")
        bias_encoding = self._check_encoding(encoding)
        b, length, _ = x.shape
        q_pos = default_positions(length, 0, x.device) if q_pos is None else q_pos
        q_nope, q_rope = self._queries(x, q_pos)
        c_k, _ = self._latents(x)
        k_rope = self._rope_keys(x, q_pos).repeat_interleave(self.num_heads // self.rope_heads, dim=1)
        k_nope = self.k_up(c_k).view(b, length, self.num_kv_heads, self.nope_head_dim).transpose(1, 2)
        k_nope = k_nope.repeat_interleave(self.num_heads // self.num_kv_heads, dim=1)
        logits = (q_nope @ k_nope.transpose(-1, -2) + q_rope @ k_rope.transpose(-1, -2)) * self.scale
        if bias_encoding is not None:
            logits = logits + bias_encoding.bias(q_rope, k_rope, q_pos, q_pos).to(logits.dtype)
        if self.causal:
            logits = logits.masked_fill(~causal_visibility(length, length, x.device), float("-inf"))
        return logits

    def extra_repr(self) -> str:
        text = (
            f"dim={self.dim}, num_heads={self.num_heads}, latent_dim={self.latent_dim}, "
            f"nope_head_dim={self.nope_head_dim}, rope_head_dim={self.rope_head_dim}, rope_heads={self.rope_heads}, "
            f"num_kv_heads={self.num_kv_heads}, causal={self.causal}"
        )
        if self.value_latent_dim is not None:
            text += f", value_latent_dim={self.value_latent_dim}"
        if self.query_latent_dim is not None:
            text += f", query_latent_dim={self.query_latent_dim}"
        return text
