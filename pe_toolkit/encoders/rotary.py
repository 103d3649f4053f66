"""Rotary position embedding (RoPE), its length-extrapolation scalings and xPos, applied through ``rotate``.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", arXiv:2104.09864.
Sun et al. 2022, "A Length-Extrapolatable Transformer" (xPos), arXiv:2212.10554.

Two layouts pair the rotated dimensions differently::

    half-split (interleaved=False, HF Llama / GPT-NeoX):  pairs (i, i + d/2)
        x = [x0 x1 x2 x3 | x4 x5 x6 x7]   ->  (x0,x4) (x1,x5) (x2,x6) (x3,x7)
    interleaved (interleaved=True, GPT-J / Meta Llama / rotary-embedding-torch): pairs (2i, 2i+1)
        x = [x0 x1 | x2 x3 | x4 x5 | x6 x7] ->  (x0,x1) (x2,x3) (x4,x5) (x6,x7)

Pair ``k`` rotates by ``t * theta_k`` with ``theta_k = base ** (-2k / d_rot)``.

Length-extrapolation scalings (``scaling=``) change ``theta_k`` and may multiply cos and sin by an
attention factor ``m`` (so ``q . k`` scales by ``m ** 2``). The formulas follow HF transformers'
``modeling_rope_utils.py`` (``_compute_*_parameters``); ``d`` is the rotary dim, ``s`` the ``factor``,
``L0`` the ``original_max_position``:

* ``linear`` (position interpolation, Chen et al. 2023, arXiv:2306.15595): ``theta_k / s``.
* ``ntk`` (NTK-aware, bloc97 2023, Reddit r/LocalLLaMA): base ``b' = b * s ** (d / (d - 2))``.
* ``dynamic`` (dynamic NTK, emozilla 2023; HF ``"dynamic"``): at the current length ``l > L0``,
  ``b' = b * (s * l / L0 - (s - 1)) ** (d / (d - 2))``; the plain frequencies for ``l <= L0``.
* ``yarn`` (Peng et al. 2023, arXiv:2309.00071): NTK-by-parts, ``theta'_k = theta_k / s * r_k +
  theta_k * (1 - r_k)`` with a linear ramp ``r_k`` over pair index ``k`` between the correction dims
  of ``beta_fast`` and ``beta_slow`` rotations in ``L0``; ``m = 0.1 ln s + 1``.
* ``llama3`` (Meta, "The Llama 3 Herd of Models", 2024, arXiv:2407.21783, Llama 3.1): wavelengths
  below ``L0 / high_freq_factor`` kept, above ``L0 / low_freq_factor`` divided by ``s``, smooth in between.
* ``longrope`` (Ding et al. 2024, arXiv:2402.13753): per-pair rescale ``theta_k / lambda_k`` with
  ``lambda = short_factor`` for ``l <= L0`` and ``long_factor`` beyond; ``m = sqrt(1 + ln s / ln L0)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from pe_toolkit.encoders.base import PositionalEncoding, check_float, check_int, require, takes_bounds, tracing
from pe_toolkit.registry import register_encoder

XPOS_GAMMA = 0.4
# xPos multiplies keys by zeta ** (-t / scale_base); keep that factor below exp(85) ~ 8e36 so it and
# its inverse stay normal float32 / bfloat16 numbers.
XPOS_MAX_LOG_SCALE = 85.0

ROPE_SCALINGS = (None, "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
# The options each scaling accepts (all default to None in the constructor, so "given" means "not None").
SCALING_OPTIONS: dict[str | None, tuple[str, ...]] = {
    None: (),
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor", "original_max_position"),
    "yarn": (
        "factor", "original_max_position", "attention_factor", "beta_fast", "beta_slow", "mscale",
        "mscale_all_dim", "truncate",
    ),
    "llama3": ("factor", "original_max_position", "low_freq_factor", "high_freq_factor"),
    "longrope": ("original_max_position", "short_factor", "long_factor", "factor", "max_position", "attention_factor"),
}
REQUIRED_OPTIONS: dict[str | None, tuple[str, ...]] = {
    None: (),
    "linear": ("factor",),
    "ntk": ("factor",),
    "dynamic": ("factor", "original_max_position"),
    "yarn": ("factor", "original_max_position"),
    "llama3": (),
    "longrope": ("original_max_position", "short_factor", "long_factor"),
}
YARN_BETA_FAST = 32.0
YARN_BETA_SLOW = 1.0
LLAMA3_DEFAULTS = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position": 8192}


def rope_inverse_frequencies(rotary_dim: int, base: float = 10_000.0) -> Tensor:
    """``theta_k = base ** (-2k / rotary_dim)`` for ``k = 0 .. rotary_dim/2 - 1``, float64."""
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


# ------------------------------------------------------------------------------ scaling formulas
def ntk_base(base: float, factor: float, rotary_dim: int) -> float:
    """NTK-aware base (bloc97 2023): ``base * factor ** (d / (d - 2))``, ``d = rotary_dim >= 4``."""
    return base * factor ** (rotary_dim / (rotary_dim - 2))


def dynamic_ntk_base(base: float, factor: float, rotary_dim: int, length: float, original_max_position: int) -> float:
    """Dynamic-NTK base at the current ``length`` (HF ``_compute_dynamic_ntk_parameters``).

    ``base * (factor * l / L0 - (factor - 1)) ** (d / (d - 2))`` with ``l = max(length, L0)``, so the
    base is unchanged up to ``L0 = original_max_position``.
    """
    length = max(length, original_max_position)
    return base * (factor * length / original_max_position - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))


def yarn_correction_dim(num_rotations: float, rotary_dim: int, base: float, original_max_position: int) -> float:
    """Pair index whose wavelength fits ``num_rotations`` times into ``L0`` (HF ``find_correction_dim``).

    Solves ``L0 / (2 pi base ** (2k / d)) = num_rotations`` for ``k``:
    ``k = d ln(L0 / (2 pi num_rotations)) / (2 ln base)``.
    """
    return rotary_dim * math.log(original_max_position / (num_rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_correction_range(
    beta_fast: float, beta_slow: float, rotary_dim: int, base: float, original_max_position: int, truncate: bool = True
) -> tuple[float, float]:
    """``(low, high)`` pair indices of the YaRN ramp (HF ``find_correction_range``).

    ``low`` from ``beta_fast`` rotations, ``high`` from ``beta_slow``; ``truncate`` floors ``low`` and
    ceils ``high``; the result is clamped to ``[0, d - 1]`` (HF's bound; the ramp clamps anyway).
    """
    low = yarn_correction_dim(beta_fast, rotary_dim, base, original_max_position)
    high = yarn_correction_dim(beta_slow, rotary_dim, base, original_max_position)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


def yarn_ramp(low: float, high: float, num_pairs: int) -> Tensor:
    """``clamp((k - low) / (high - low), 0, 1)`` for ``k = 0 .. num_pairs - 1``, float64 (HF ``linear_ramp_factor``)."""
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    return ((torch.arange(num_pairs, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)


def yarn_inverse_frequencies(
    rotary_dim: int,
    base: float,
    factor: float,
    original_max_position: int,
    *,
    beta_fast: float = YARN_BETA_FAST,
    beta_slow: float = YARN_BETA_SLOW,
    truncate: bool = True,
) -> Tensor:
    """YaRN / NTK-by-parts frequencies (Peng et al. 2023, arXiv:2309.00071, Eq. 18-20), float64.

    ``theta'_k = (theta_k / factor) * r_k + theta_k * (1 - r_k)``, ``r_k = yarn_ramp(low, high)``: pairs
    below ``low`` (many rotations in ``L0``, high frequency) keep ``theta_k`` (extrapolation), pairs
    above ``high`` (few rotations) are divided by ``factor`` (interpolation).
    """
    theta = rope_inverse_frequencies(rotary_dim, base)
    low, high = yarn_correction_range(beta_fast, beta_slow, rotary_dim, base, original_max_position, truncate)
    ramp = yarn_ramp(low, high, rotary_dim // 2)
    return theta / factor * ramp + theta * (1 - ramp)


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """``0.1 * mscale * ln(scale) + 1`` for ``scale > 1``, else 1 (YaRN Eq. 22; HF ``get_mscale``)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention_factor(factor: float, mscale: float | None = None, mscale_all_dim: float | None = None) -> float:
    """YaRN's cos/sin multiplier: ``get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)`` when
    both are given (DeepSeek-V2/V3 configs), else ``0.1 ln(factor) + 1``."""
    if mscale and mscale_all_dim:
        return yarn_get_mscale(factor, mscale) / yarn_get_mscale(factor, mscale_all_dim)
    return yarn_get_mscale(factor)


def llama3_inverse_frequencies(
    rotary_dim: int,
    base: float,
    factor: float = 8.0,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
    original_max_position: int = 8192,
) -> Tensor:
    """Llama 3.1 frequencies (Meta 2024; HF ``_compute_llama3_parameters``), float64.

    With wavelength ``w_k = 2 pi / theta_k``: ``w_k < L0 / high_freq_factor`` keeps ``theta_k``;
    ``w_k > L0 / low_freq_factor`` gives ``theta_k / factor``; in between
    ``(1 - g) theta_k / factor + g theta_k`` with
    ``g = (L0 / w_k - low_freq_factor) / (high_freq_factor - low_freq_factor)``.
    """
    theta = rope_inverse_frequencies(rotary_dim, base)
    wavelen = 2 * math.pi / theta
    low_freq_wavelen = original_max_position / low_freq_factor
    high_freq_wavelen = original_max_position / high_freq_factor
    scaled = torch.where(wavelen > low_freq_wavelen, theta / factor, theta)
    smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def longrope_inverse_frequencies(rotary_dim: int, base: float, rescale: Sequence[float]) -> Tensor:
    """LongRoPE frequencies ``theta_k / lambda_k`` (Ding et al. 2024, arXiv:2402.13753), float64."""
    return rope_inverse_frequencies(rotary_dim, base) / torch.tensor(list(rescale), dtype=torch.float64)


def longrope_factors_from_yarn(rotary_dim: int, base: float, factor: float,
                               original_max_position: int) -> dict[str, list[float]]:
    """LongRoPE ``short_factor`` / ``long_factor`` without the paper's search: 1 below ``L0``, NTK-by-parts above.

    The long rescale factors are ``theta_k / theta'_k`` of YaRN's NTK-by-parts frequencies at ``factor``
    (:func:`yarn_inverse_frequencies`: 1 for the fast pairs, ``factor`` for the slow ones), one of the
    starting points of LongRoPE's evolutionary search (Ding et al. 2024, arXiv:2402.13753); the search
    itself is not run. The result is the ``short_factor`` / ``long_factor`` options of ``scaling="longrope"``.
    """
    plain = rope_inverse_frequencies(rotary_dim, base)
    scaled = yarn_inverse_frequencies(rotary_dim, base, factor, original_max_position)
    return {"short_factor": [1.0] * (rotary_dim // 2), "long_factor": [float(v) for v in plain / scaled]}


def longrope_attention_factor(factor: float, original_max_position: int) -> float:
    """``sqrt(1 + ln(factor) / ln(L0))`` for ``factor > 1``, else 1 (HF ``_compute_longrope_parameters``)."""
    if factor <= 1.0:
        return 1.0
    return math.sqrt(1 + math.log(factor) / math.log(original_max_position))

def xpos_decay(rotary_dim: int, gamma: float = XPOS_GAMMA) -> Tensor:
    """xPos per-pair decay ``zeta_k = (2k / d + gamma) / (1 + gamma)``, float64 ``(rotary_dim/2,)``."""
    return (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim + gamma) / (1 + gamma)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, *, interleaved: bool = False) -> Tensor:
    """Rotate the last dim of ``x`` by the angles whose cos / sin are given (one per pair).

    Args:
        x: ``(..., L, d_rot)``.
        cos: ``(L, d_rot/2)`` or broadcastable to ``(..., L, d_rot/2)``, same dtype as ``x``.
        sin: same shape and dtype as ``cos``.
        interleaved: pair layout, see the module docstring.
    Returns:
        ``(..., L, d_rot)``: ``(x1 cos - x2 sin, x2 cos + x1 sin)`` per pair ``(x1, x2)``.
    """
    if tracing() or (torch.is_grad_enabled() and (cos.requires_grad or sin.requires_grad)):
        # learned angles: plain autograd; torch.compile: out= writes into strided views do not trace
        # (and inductor fuses the plain form anyway)
        return _rotate_functional(x, cos, sin, interleaved)
    if torch.is_grad_enabled() and x.requires_grad:
        return _Rotation.apply(x, cos, sin, interleaved)
    return _rotate_into_new(x, cos, sin, interleaved)


def _rotate_functional(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else x.chunk(2, dim=-1)
    first, second = torch.addcmul(x1 * cos, x2, sin, value=-1), torch.addcmul(x2 * cos, x1, sin)
    if interleaved:
        return torch.stack((first, second), dim=-1).flatten(-2)
    return torch.cat((first, second), dim=-1)


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """``torch.broadcast_shapes(a, b)`` for two concrete shapes, in plain Python: torch's took ~0.7 ms per call
    in eager mode (torch 2.13, CPU), more than rotating a decoding step's query and key. ``ValueError`` if they
    do not broadcast."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b, strict=True)):
        raise ValueError(f"shapes {a} and {b} do not broadcast")
    return tuple(y if x == 1 else x for x, y in zip(a, b, strict=True))


def _rotate_into_new(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
    # Write both halves straight into the output: no temporaries, no concatenation.
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else x.chunk(2, dim=-1)
    out = torch.empty(_broadcast_shape(x.shape, (*cos.shape[:-1], x.shape[-1])), dtype=x.dtype, device=x.device)
    out1, out2 = (out[..., 0::2], out[..., 1::2]) if interleaved else out.chunk(2, dim=-1)
    torch.mul(x1, cos, out=out1).addcmul_(x2, sin, value=-1)
    torch.mul(x2, cos, out=out2).addcmul_(x1, sin)
    return out


class _Rotation(torch.autograd.Function):
    """RoPE with a hand-written backward: the gradient of a rotation is the inverse rotation.

    Saves only cos and sin (not the products autograd would keep) and reuses the fused kernel.
    """

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.interleaved = interleaved
        return _rotate_into_new(x, cos, sin, interleaved)

    @staticmethod
    def backward(ctx, grad: Tensor):
        cos, sin = ctx.saved_tensors
        grad_x = _rotate_into_new(grad, cos, -sin, ctx.interleaved)
        # angles broadcast over batch/heads: the gradient w.r.t. x keeps x's shape already
        return grad_x, None, None, None


def _check_rescale(name: str, value: Any, length: int) -> tuple[float, ...]:
    """LongRoPE's per-pair factors: a list/tuple of ``length`` finite numbers > 0."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"rope: {name} must be a list or tuple of numbers, got {type(value).__name__} ({value!r})")
    if len(value) != length:
        raise ValueError(f"rope: {name} must have rotary_dim/2 = {length} entries (one per pair), got {len(value)}")
    return tuple(check_float(f"{name}[{i}]", v) for i, v in enumerate(value))


@register_encoder(
    "rope",
    relative=True,
    reference="Su et al. 2021, RoFormer: Enhanced Transformer with Rotary Position Embedding, arXiv:2104.09864",
)
class RotaryEncoding(PositionalEncoding):
    """RoPE: rotate query/key dimension pairs by ``position * theta_k`` so ``q_i . k_j`` depends on ``i - j``.

    Options:
        base: frequency base (10,000).
        rotary_fraction: fraction of each head's dims that are rotated (partial RoPE; the first
            ``int(fraction * head_dim)`` dims, which must be even). Kazemnejad et al. 2023 rotate 25 %.
        interleaved: pair layout (False = half-split as in HF Llama; True = adjacent pairs).
        xpos: multiply queries by ``zeta ** (i / xpos_scale_base)`` and keys by its inverse
            (Sun et al. 2022); needs ``causal=True``. Positions are limited to
            ``xpos_max_position`` so the key factor stays finite in float32 / bfloat16.
        xpos_scale_base: the ``B`` of xPos (512).
        scaling: length-extrapolation scaling of the frequencies, one of ``ROPE_SCALINGS``:
            ``None`` (plain RoPE, the default), ``"linear"``, ``"ntk"``, ``"dynamic"``, ``"yarn"``,
            ``"llama3"``, ``"longrope"``. The formulas match HF transformers'
            ``modeling_rope_utils.py`` (computed here in float64). ``d`` is the rotary dim,
            ``s = factor``, ``L0 = original_max_position``, ``theta_k = base ** (-2k/d)``.

            * ``"linear"``: position interpolation, Chen et al. 2023, "Extending Context Window of
              Large Language Models via Positional Interpolation", arXiv:2306.15595:
              ``theta'_k = theta_k / s`` (position ``m`` acts as ``m / s``). Needs ``factor``.
            * ``"ntk"``: static NTK-aware scaling, bloc97 2023 (Reddit r/LocalLLaMA, "NTK-Aware Scaled
              RoPE"): ``base' = base * s ** (d / (d - 2))``. Needs ``factor``; ``d >= 4``.
            * ``"dynamic"``: dynamic NTK (emozilla 2023, Reddit; HF ``"dynamic"``): at the current
              length ``l``, ``base' = base * (s * l / L0 - (s - 1)) ** (d / (d - 2))`` for
              ``l > L0`` and the plain frequencies for ``l <= L0``. Needs ``factor`` and
              ``original_max_position``; ``d >= 4``. See "Length-dependent scalings" below.
            * ``"yarn"``: Peng et al. 2023, "YaRN: Efficient Context Window Extension of Large
              Language Models", arXiv:2309.00071 (NTK-by-parts, Eq. 18-20, plus attention temperature,
              Eq. 22): ``theta'_k = theta_k / s * r_k + theta_k * (1 - r_k)`` with the ramp
              ``r_k = clamp((k - low) / (high - low), 0, 1)``, ``low = floor(c(beta_fast))``,
              ``high = ceil(c(beta_slow))`` (no rounding with ``truncate=False``), clamped to
              ``[0, d - 1]``, ``c(n) = d ln(L0 / (2 pi n)) / (2 ln base)`` (the pair index whose
              wavelength fits ``n`` times into ``L0``). Pairs below ``low`` (high frequency) keep
              ``theta_k``; pairs above ``high`` are interpolated, ``theta_k / s``. Attention factor
              ``m = 0.1 ln s + 1``, or ``(0.1 mscale ln s + 1) / (0.1 mscale_all_dim ln s + 1)`` when
              both mscales are given (DeepSeek-V2/V3 configs), or ``attention_factor``. Needs ``factor``
              and ``original_max_position``; ``beta_fast=32``, ``beta_slow=1``, ``truncate=True``.
            * ``"llama3"``: Meta 2024, Llama 3.1 ("The Llama 3 Herd of Models", arXiv:2407.21783;
              HF ``_compute_llama3_parameters``): with wavelength ``w_k = 2 pi / theta_k``, pairs with
              ``w_k < L0 / high_freq_factor`` keep ``theta_k``, pairs with ``w_k > L0 / low_freq_factor``
              get ``theta_k / s``, and in between ``(1 - g) theta_k / s + g theta_k`` with
              ``g = (L0 / w_k - low_freq_factor) / (high_freq_factor - low_freq_factor)``. Defaults
              ``factor=8``, ``low_freq_factor=1``, ``high_freq_factor=4``, ``original_max_position=8192``.
            * ``"longrope"``: Ding et al. 2024, "LongRoPE: Extending LLM Context Window Beyond 2 Million
              Tokens", arXiv:2402.13753 (HF ``_compute_longrope_parameters``, Phi-3):
              ``theta'_k = theta_k / lambda_k`` with ``lambda = short_factor`` while ``l <= L0`` and
              ``lambda = long_factor`` once ``l > L0``. Attention factor
              ``m = sqrt(1 + ln s / ln L0)`` (1 for ``s = 1``), with ``s = factor`` or
              ``s = max_position / L0`` (as HF derives it from ``max_position_embeddings``), or
              ``attention_factor``. Needs ``short_factor``, ``long_factor`` (``d/2`` numbers each),
              ``original_max_position`` (>= 2) and one of ``factor`` / ``max_position`` unless
              ``attention_factor`` is given.
        factor: the scale ``s >= 1`` (linear, ntk, dynamic, yarn, llama3, longrope).
        original_max_position: ``L0``, the pre-training context length (dynamic, yarn, llama3, longrope).
        attention_factor: ``m > 0`` multiplying cos and sin, overriding the default (yarn, longrope).
        beta_fast, beta_slow: YaRN's rotation counts bounding the ramp (32, 1; ``beta_fast > beta_slow``).
        mscale, mscale_all_dim: YaRN's DeepSeek-style attention factor (give both or neither; not with
            ``attention_factor``).
        truncate: YaRN rounds the correction range outward to integers (True, as HF).
        low_freq_factor, high_freq_factor: Llama 3.1's wavelength thresholds (1, 4; ``high > low``).
        short_factor, long_factor: LongRoPE's per-pair rescale factors ``lambda_k > 0``.
        max_position: LongRoPE's extended context length, for the default attention factor.

    Every scaling option defaults to ``None`` (= unset); an option that the chosen ``scaling`` does
    not use is rejected, not ignored.

    Attention factor: as in HF, ``m`` multiplies cos and sin of the rotated dims of both q and k, so
    ``q . k`` over the rotated dims scales by ``m ** 2``; the pass-through dims of partial RoPE are not
    scaled (HF's partial-rotary models concatenate them unscaled).

    Length-dependent scalings (``dynamic``, ``longrope``): the frequencies are a function of the
    current length ``l = max(q_pos, k_pos) + 1`` over the positions of one ``rotate`` call (all
    batches, queries and keys together, so a query and the keys rotated with it share frequencies).
    They are not stateful: a shorter input after a longer one gets the frequencies of its own length
    (plain RoPE / short factors again once ``l <= L0``). HF's ``dynamic_rope_update`` instead keeps the
    largest length's frequencies until the length drops below ``L0``; for ``l <= L0`` and for
    growing lengths the two agree. During KV-cache decoding keys are rotated once, when they enter the
    cache, so a cached key keeps the frequencies of the step that produced it while the new query uses
    the current step's: past ``L0`` decoding does not equal a full forward over the same tokens. This
    is the known HF caveat (transformers issues #25104 and PR #27227) and is kept for the same reason:
    re-rotating the whole cache every step would cost ``O(L)`` per step.

    Precision: angles are computed in float64 and cached as float32 cos/sin (float64 for float64
    inputs); half-precision queries are rotated in float32 and cast back, so a bfloat16 query at
    position 10,000 matches a float64 reference to bfloat16 rounding. Scaled tables (``m cos``,
    ``m sin``) are cached the same way; ``dynamic`` and ``longrope`` keep a second table keyed by the
    effective base / factor set, rebuilt when the key changes, never truncated.

    Shapes: q ``(B, H, Lq, hd)``, k ``(B, Hkv, Lk, hd)``, positions ``(L,)`` or ``(B, L)``.

    Raises:
        ValueError: odd rotary dim, fraction outside (0, 1], xpos without causal, positions past
            ``xpos_max_position``; unknown ``scaling``, a missing or misplaced scaling option, or an
            option out of range (``factor < 1``, ``beta_fast <= beta_slow``, wrong ``short_factor``
            length, ...).
        TypeError: options of the wrong type.
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        base: float = 10_000.0,
        rotary_fraction: float = 1.0,
        interleaved: bool = False,
        xpos: bool = False,
        xpos_scale_base: float = 512.0,
        scaling: str | None = None,
        factor: float | None = None,
        original_max_position: int | None = None,
        attention_factor: float | None = None,
        beta_fast: float | None = None,
        beta_slow: float | None = None,
        mscale: float | None = None,
        mscale_all_dim: float | None = None,
        truncate: bool | None = None,
        low_freq_factor: float | None = None,
        high_freq_factor: float | None = None,
        short_factor: Sequence[float] | None = None,
        long_factor: Sequence[float] | None = None,
        max_position: int | None = None,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.base = check_float("base", base)
        fraction = check_float("rotary_fraction", rotary_fraction)
        if fraction > 1.0:
            raise ValueError(f"rope: rotary_fraction must be in (0, 1], got {fraction}")
        self.rotary_dim = int(fraction * self.head_dim)
        if self.rotary_dim < 2 or self.rotary_dim % 2:
            raise ValueError(
                f"rope: the rotated dims int(rotary_fraction * head_dim) = int({fraction} * {self.head_dim}) "
                f"= {self.rotary_dim} must be even and >= 2 (head_dim must be even for full RoPE)"
            )
        if not isinstance(interleaved, bool) or not isinstance(xpos, bool):
            raise TypeError("rope: interleaved and xpos must be bools")
        if xpos and not causal:
            raise ValueError("rope: xpos=True needs causal=True (its decay assumes keys precede queries)")
        self.interleaved = interleaved
        self.xpos = xpos
        self.xpos_scale_base = check_float("xpos_scale_base", xpos_scale_base)
        self._configure_scaling(
            scaling,
            {
                "factor": factor, "original_max_position": original_max_position,
                "attention_factor": attention_factor, "beta_fast": beta_fast, "beta_slow": beta_slow,
                "mscale": mscale, "mscale_all_dim": mscale_all_dim, "truncate": truncate,
                "low_freq_factor": low_freq_factor, "high_freq_factor": high_freq_factor,
                "short_factor": short_factor, "long_factor": long_factor, "max_position": max_position,
            },
        )
        zeta = xpos_decay(self.rotary_dim)
        self.xpos_max_position = int(XPOS_MAX_LOG_SCALE * self.xpos_scale_base / -math.log(zeta.min().item()))
        self.register_buffer("inv_freq", self.compute_inverse_frequencies(), persistent=False)
        self.register_buffer("xpos_zeta", zeta, persistent=False)
        self.register_buffer("cos_cached", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self.register_buffer("sin_cached", torch.empty(0, self.rotary_dim // 2), persistent=False)
        # dynamic / longrope: the table for lengths past L0, keyed by frequency_key(length)
        self.register_buffer("scaled_cos_cached", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self.register_buffer("scaled_sin_cached", torch.empty(0, self.rotary_dim // 2), persistent=False)
        self._scaled_key: float | str | None = None

    # ------------------------------------------------------------------------------ scaling options
    def _configure_scaling(self, scaling: Any, options: dict[str, Any]) -> None:
        """Validate ``scaling`` and its options; set the resolved options and ``attention_factor``."""
        if scaling is not None and not isinstance(scaling, str):
            raise TypeError(
                f"rope: scaling must be None or a str, one of {ROPE_SCALINGS}, "
                f"got {type(scaling).__name__} ({scaling!r})"
            )
        if scaling not in ROPE_SCALINGS:
            raise ValueError(f"rope: scaling must be one of {ROPE_SCALINGS}, got {scaling!r}")
        given = {name: value for name, value in options.items() if value is not None}
        allowed = SCALING_OPTIONS[scaling]
        wrong = sorted(set(given) - set(allowed))
        if wrong:
            accepts = f"it accepts {list(allowed)}" if allowed else "set scaling= to use them"
            raise ValueError(f"rope: option(s) {wrong} do not apply to scaling={scaling!r} ({accepts})")
        missing = [name for name in REQUIRED_OPTIONS[scaling] if name not in given]
        if missing:
            raise ValueError(f"rope: scaling={scaling!r} needs {missing}")
        if scaling == "llama3":
            given = {**LLAMA3_DEFAULTS, **given}
        d = self.rotary_dim
        if scaling in ("ntk", "dynamic") and d < 4:
            raise ValueError(f"rope: scaling={scaling!r} needs rotary_dim >= 4 (exponent d / (d - 2)), got {d}")

        self.scaling: str | None = scaling
        self.factor = None if "factor" not in given else check_float("factor", given["factor"], minimum=1.0)
        self.original_max_position: int | None = None
        if "original_max_position" in given:
            minimum = 2 if scaling == "longrope" else 1  # ln(L0) is a denominator of its attention factor
            self.original_max_position = check_int("original_max_position", given["original_max_position"],
                                                   minimum=minimum)
        self.attention_factor = 1.0
        if "attention_factor" in given:
            self.attention_factor = check_float("attention_factor", given["attention_factor"])
        self.beta_fast = self.beta_slow = self.mscale = self.mscale_all_dim = self.truncate = None
        self.low_freq_factor = self.high_freq_factor = self.max_position = None
        self.short_factor: tuple[float, ...] | None = None
        self.long_factor: tuple[float, ...] | None = None

        if scaling == "yarn":
            self.beta_fast = check_float("beta_fast", given.get("beta_fast", YARN_BETA_FAST))
            self.beta_slow = check_float("beta_slow", given.get("beta_slow", YARN_BETA_SLOW))
            if self.beta_fast <= self.beta_slow:
                raise ValueError(
                    f"rope: beta_fast must be > beta_slow, got beta_fast={self.beta_fast}, beta_slow={self.beta_slow}"
                )
            self.truncate = given.get("truncate", True)
            if not isinstance(self.truncate, bool):
                raise TypeError(f"rope: truncate must be a bool, got {type(self.truncate).__name__}")
            if ("mscale" in given) != ("mscale_all_dim" in given):
                raise ValueError("rope: mscale and mscale_all_dim must be given together (or neither)")
            if "mscale" in given:
                if "attention_factor" in given:
                    raise ValueError("rope: give either attention_factor or mscale/mscale_all_dim, not both")
                self.mscale = check_float("mscale", given["mscale"])
                self.mscale_all_dim = check_float("mscale_all_dim", given["mscale_all_dim"])
            if "attention_factor" not in given:
                self.attention_factor = yarn_attention_factor(self.factor, self.mscale, self.mscale_all_dim)
        elif scaling == "llama3":
            self.low_freq_factor = check_float("low_freq_factor", given["low_freq_factor"])
            self.high_freq_factor = check_float("high_freq_factor", given["high_freq_factor"])
            if self.high_freq_factor <= self.low_freq_factor:
                raise ValueError(
                    f"rope: high_freq_factor must be > low_freq_factor, got high_freq_factor={self.high_freq_factor}, "
                    f"low_freq_factor={self.low_freq_factor}"
                )
        elif scaling == "longrope":
            self.short_factor = _check_rescale("short_factor", given["short_factor"], d // 2)
            self.long_factor = _check_rescale("long_factor", given["long_factor"], d // 2)
            if "max_position" in given:
                if "factor" in given:
                    raise ValueError("rope: give either factor or max_position for longrope, not both")
                self.max_position = check_int("max_position", given["max_position"], minimum=1)
                if self.max_position < self.original_max_position:
                    raise ValueError(
                        f"rope: max_position must be >= original_max_position={self.original_max_position}, "
                        f"got {self.max_position}"
                    )
                self.factor = self.max_position / self.original_max_position
            if "attention_factor" not in given:
                if self.factor is None:
                    raise ValueError(
                        "rope: scaling='longrope' needs factor or max_position (for the default attention factor "
                        "sqrt(1 + ln(factor) / ln(original_max_position))), or an explicit attention_factor"
                    )
                self.attention_factor = longrope_attention_factor(self.factor, self.original_max_position)

    @property
    def length_dependent(self) -> bool:
        """Whether the frequencies depend on the current length (``dynamic``, ``longrope``)."""
        return self.scaling in ("dynamic", "longrope")

    # ---------------------------------------------------------------------- frequencies & cache
    def compute_inverse_frequencies(self) -> Tensor:
        """``(rotary_dim/2,)`` float64 inverse frequencies of the scaling, for lengths up to ``L0``.

        Static scalings return their only set; ``dynamic`` returns plain RoPE's and ``longrope`` the
        short-factor set (``inverse_frequencies_for`` gives the sets past ``L0``). Subclasses override this.
        """
        d, base = self.rotary_dim, self.base
        if self.scaling == "linear":
            return rope_inverse_frequencies(d, base) / self.factor
        if self.scaling == "ntk":
            return rope_inverse_frequencies(d, ntk_base(base, self.factor, d))
        if self.scaling == "yarn":
            return yarn_inverse_frequencies(
                d, base, self.factor, self.original_max_position,
                beta_fast=self.beta_fast, beta_slow=self.beta_slow, truncate=self.truncate,
            )
        if self.scaling == "llama3":
            return llama3_inverse_frequencies(
                d, base, self.factor, self.low_freq_factor, self.high_freq_factor, self.original_max_position
            )
        if self.scaling == "longrope":
            return longrope_inverse_frequencies(d, base, self.short_factor)
        return rope_inverse_frequencies(d, base)

    @staticmethod
    def current_length(*positions: Tensor) -> int | float | Tensor:
        """``max(position) + 1`` over all given position tensors (0 if all are empty).

        While ``torch.compile`` traces, a 0-dim tensor (its value is unknown until the graph runs).
        """
        if tracing():
            highest = [p.max().to(torch.float64) for p in positions if p.numel()]
            return torch.stack(highest).max() + 1 if highest else 0
        highest = [p.max().item() for p in positions if p.numel()]
        return max(highest) + 1 if highest else 0

    def traced_inverse_frequencies(self, length: int | float | Tensor) -> Tensor:
        """Float64 inverse frequencies at the current ``length`` without a Python branch on its value.

        What :meth:`frequency_key` and :meth:`inverse_frequencies_for` select, written as tensor
        operations (``torch.where`` on ``length > original_max_position``) so that
        ``torch.compile(fullgraph=True)`` can trace the length-dependent scalings.
        """
        plain = self.inv_freq.to(torch.float64)
        if not self.length_dependent or self.original_max_position is None:
            return plain
        length = torch.as_tensor(length, dtype=torch.float64, device=plain.device)
        original = self.original_max_position
        if self.scaling == "dynamic":
            d = self.rotary_dim
            longest = torch.clamp(length, min=original)
            base = self.base * (self.factor * longest / original - (self.factor - 1)) ** (d / (d - 2))
            scaled = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device=plain.device) / d)
        else:
            scaled = self.inverse_frequencies_for("long").to(torch.float64)
        return torch.where(length > original, scaled, plain)

    def frequency_key(self, length: int | float) -> float | str | None:
        """Which frequencies serve current length ``length``: None = ``inv_freq``; else the dynamic
        base ``base'`` (a float) or ``"long"`` (longrope's long factors)."""
        if self.original_max_position is None or length <= self.original_max_position:
            return None
        if self.scaling == "dynamic":
            return dynamic_ntk_base(self.base, self.factor, self.rotary_dim, length, self.original_max_position)
        if self.scaling == "longrope":
            return "long"
        return None

    def inverse_frequencies_for(self, key: float | str | None) -> Tensor:
        """Float64 inverse frequencies for a ``frequency_key``."""
        if key is None:
            return self.inv_freq
        if key == "long":
            inv_freq = longrope_inverse_frequencies(self.rotary_dim, self.base, self.long_factor)
        else:
            inv_freq = rope_inverse_frequencies(self.rotary_dim, key)
        return inv_freq.to(self.inv_freq.device)

    def angles(self, positions: Tensor, inv_freq: Tensor | None = None) -> Tensor:
        """``positions[..., None] * theta`` in float64: ``(..., rotary_dim/2)`` (``theta = inv_freq`` by default)."""
        inv_freq = self.inv_freq if inv_freq is None else inv_freq
        return positions.to(torch.float64).unsqueeze(-1) * inv_freq.to(torch.float64)

    def _cos_sin_of(self, angles: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``(m cos, m sin)`` of float64 angles, cast to ``dtype`` (m = attention factor, skipped when 1)."""
        cos, sin = angles.cos(), angles.sin()
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return cos.to(dtype), sin.to(dtype)

    MAX_CACHED_POSITIONS = 1 << 17
    """Positions at or beyond this are computed per call instead of growing the cos/sin tables."""

    @staticmethod
    def _cache_size(length: int) -> int:
        return max(1024, 1 << (length - 1).bit_length())

    def _grow_cache(self, length: int) -> None:
        positions = torch.arange(self._cache_size(length), device=self.inv_freq.device)
        self.cos_cached, self.sin_cached = self._cos_sin_of(self.angles(positions), torch.float32)

    def _build_scaled_cache(self, key: float | str, length: int) -> None:
        # A dynamic base belongs to one length, so its table needs exactly `length` rows; longrope's long
        # set is fixed, so it grows like the plain cache.
        size = length if self.scaling == "dynamic" else self._cache_size(length)
        positions = torch.arange(size, device=self.inv_freq.device)
        angles = self.angles(positions, self.inverse_frequencies_for(key))
        self.scaled_cos_cached, self.scaled_sin_cached = self._cos_sin_of(angles, torch.float32)
        self._scaled_key = key

    def cos_sin(
        self, positions: Tensor, dtype: torch.dtype, *, length: int | float | None = None,
        bounds: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """cos and sin of the rotation angles times the attention factor, ``(..., rotary_dim/2)`` in ``dtype``.

        Non-negative integer positions below ``MAX_CACHED_POSITIONS`` are read from the float32 cache
        (grown on demand, never truncated); float positions, negative or larger positions and float64
        requests are computed directly (float64 angles), so a few far positions (say near 10**6) cost
        memory for those positions only, not a table from 0.
        ``length`` is the current length for ``dynamic`` / ``longrope`` (default ``positions.max() + 1``).
        ``bounds``: the exact ``(min, max)`` of integer ``positions`` when the caller knows them on the host
        (then nothing is read from the device).
        """
        if tracing():  # no cache and no branch on position values inside a compiled graph
            length = self.current_length(positions) if length is None else length
            return self._cos_sin_of(self.angles(positions, self.traced_inverse_frequencies(length)), dtype)
        key = None
        if self.length_dependent:
            if length is None:
                length = bounds[1] + 1 if bounds is not None and positions.numel() else self.current_length(positions)
            key = self.frequency_key(length)
        if dtype == torch.float32 and not positions.is_floating_point() and positions.numel():
            lo, hi = bounds if bounds is not None else torch.stack((positions.min(), positions.max())).tolist()
            if lo >= 0 and hi < self.MAX_CACHED_POSITIONS:
                if key is None:
                    if hi >= self.cos_cached.shape[0]:
                        self._grow_cache(hi + 1)
                    return self.cos_cached[positions], self.sin_cached[positions]
                if key != self._scaled_key or hi >= self.scaled_cos_cached.shape[0]:
                    self._build_scaled_cache(key, hi + 1)
                return self.scaled_cos_cached[positions], self.scaled_sin_cached[positions]
        return self._cos_sin_of(self.angles(positions, self.inverse_frequencies_for(key)), dtype)

    def _apply(self, fn: Callable, recurse: bool = True):
        # .half() / .bfloat16() must not round the frequency tables (a classic RoPE bug).
        result = super()._apply(fn, recurse)
        device = self.inv_freq.device
        self.inv_freq = self.compute_inverse_frequencies().to(device)
        self.xpos_zeta = xpos_decay(self.rotary_dim).to(device)
        self.cos_cached = torch.empty(0, self.rotary_dim // 2, device=device)
        self.sin_cached = torch.empty(0, self.rotary_dim // 2, device=device)
        self.scaled_cos_cached = torch.empty(0, self.rotary_dim // 2, device=device)
        self.scaled_sin_cached = torch.empty(0, self.rotary_dim // 2, device=device)
        self._scaled_key = None
        return result

    # ---------------------------------------------------------------------------------- hook
    def _xpos_scale(self, positions: Tensor, dtype: torch.dtype, bounds: tuple[int, int] | None = None) -> Tensor:
        if bounds is not None and positions.numel():
            if max(abs(bounds[0]), abs(bounds[1])) > self.xpos_max_position:
                raise ValueError(f"rope: xpos supports |position| <= xpos_max_position={self.xpos_max_position} "
                                 f"(xpos_scale_base={self.xpos_scale_base}), got {max(abs(bounds[0]), abs(bounds[1]))}")
        elif positions.numel():
            require(positions.abs().max() <= self.xpos_max_position,
                    f"rope: xpos supports |position| <= xpos_max_position={self.xpos_max_position} "
                    f"(xpos_scale_base={self.xpos_scale_base})", lambda: f", got {positions.abs().max().item()}")
        power = positions.to(torch.float64).unsqueeze(-1) / self.xpos_scale_base
        return (self.xpos_zeta.to(torch.float64) ** power).to(dtype)

    def rotate_one(
        self, x: Tensor, positions: Tensor, *, inverse_xpos: bool = False, length: int | float | None = None,
        bounds: tuple[int, int] | None = None,
    ) -> Tensor:
        """Rotate one tensor ``(B, H, L, hd)`` at ``positions`` ``(L,)`` or ``(B, L)``.

        ``length``: the current length for ``dynamic`` / ``longrope`` (default ``positions.max() + 1``).
        ``bounds``: exact ``(min, max)`` of integer ``positions`` known on the host (see :meth:`cos_sin`).
        """
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        cos, sin = self.cos_sin(positions, compute, length=length, bounds=bounds)
        if self.xpos:
            scale = self._xpos_scale(positions, compute, bounds)
            scale = scale.reciprocal() if inverse_xpos else scale
            cos, sin = cos * scale, sin * scale
        if positions.dim() == 2:  # per-batch positions: (B, L, d/2) -> (B, 1, L, d/2)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        rd = self.rotary_dim
        x_rot = x[..., :rd] if rd < x.shape[-1] else x
        out = apply_rope(x_rot.to(compute), cos, sin, interleaved=self.interleaved).to(x.dtype)
        return out if rd == x.shape[-1] else torch.cat((out, x[..., rd:]), dim=-1)

    @property
    def causal_only(self) -> bool:
        """With xPos: its decay assumes keys precede queries."""
        return self.xpos

    @takes_bounds
    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor, *, q_bounds: tuple[int, int] | None = None,
               k_bounds: tuple[int, int] | None = None) -> tuple[Tensor, Tensor]:
        """Rotate queries and keys; ``q_bounds`` / ``k_bounds``: exact ``(min, max)`` of integer positions
        known on the host (the ``Transformer`` passes them), which spares the per-layer device reads."""
        if q_pos.numel() == 0 or q_pos.is_floating_point():
            q_bounds = None
        if k_pos.numel() == 0 or k_pos.is_floating_point():
            k_bounds = None
        if not self.length_dependent:
            return (self.rotate_one(q, q_pos, bounds=q_bounds),
                    self.rotate_one(k, k_pos, inverse_xpos=True, bounds=k_bounds))
        # one current length for the whole call, so q and the keys entering the cache share frequencies
        if q_bounds is not None and k_bounds is not None:
            length = max(q_bounds[1], k_bounds[1]) + 1
        else:
            length = self.current_length(q_pos, k_pos)
        return (self.rotate_one(q, q_pos, length=length, bounds=q_bounds),
                self.rotate_one(k, k_pos, inverse_xpos=True, length=length, bounds=k_bounds))

    def extra_repr(self) -> str:
        text = (
            super().extra_repr()
            + f", base={self.base}, rotary_dim={self.rotary_dim}, interleaved={self.interleaved}, xpos={self.xpos}"
        )
        if self.scaling is not None:
            text += f", scaling={self.scaling!r}, factor={self.factor}"
            if self.original_max_position is not None:
                text += f", original_max_position={self.original_max_position}"
            if self.attention_factor != 1.0:
                text += f", attention_factor={self.attention_factor:.6g}"
        return text
