"""RoPE length-extrapolation scalings (linear, ntk, dynamic, yarn, llama3, longrope) against hand-computed values.

Expected frequencies and attention factors are written from the published formulas in plain Python
``math`` loops (HF transformers' ``modeling_rope_utils.py`` is the reference for the exact variants;
it is not imported here).
"""

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.encoders.rotary import (
    ROPE_SCALINGS,
    RotaryEncoding,
    longrope_factors_from_yarn,
    rope_inverse_frequencies,
    yarn_correction_range,
)


# ------------------------------------------------------------------ reference formulas, plain Python
def ref_theta(d: int, base: float) -> list[float]:
    return [base ** (-2 * k / d) for k in range(d // 2)]


def ref_linear(d, base, factor):
    return [t / factor for t in ref_theta(d, base)]


def ref_ntk(d, base, factor):
    return ref_theta(d, base * factor ** (d / (d - 2)))


def ref_dynamic(d, base, factor, length, original):
    if length <= original:
        return ref_theta(d, base)
    return ref_theta(d, base * (factor * length / original - (factor - 1)) ** (d / (d - 2)))


def ref_yarn_range(d, base, original, beta_fast=32.0, beta_slow=1.0, truncate=True):
    def dim_of(rotations):  # pair index whose wavelength fits `rotations` times into `original`
        return d * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(beta_fast), dim_of(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, d - 1)


def ref_yarn(d, base, factor, original, beta_fast=32.0, beta_slow=1.0, truncate=True):
    low, high = ref_yarn_range(d, base, original, beta_fast, beta_slow, truncate)
    if low == high:
        high += 0.001
    out = []
    for k, t in enumerate(ref_theta(d, base)):
        ramp = min(max((k - low) / (high - low), 0.0), 1.0)  # 0: keep theta (extrapolate), 1: theta / factor
        out.append(t / factor * ramp + t * (1 - ramp))
    return out


def ref_llama3(d, base, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original=8192):
    out = []
    for t in ref_theta(d, base):
        wavelen = 2 * math.pi / t
        if wavelen < original / high_freq_factor:
            out.append(t)
        elif wavelen > original / low_freq_factor:
            out.append(t / factor)
        else:
            g = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append((1 - g) * t / factor + g * t)
    return out


def ref_longrope(d, base, rescale):
    return [t / lam for t, lam in zip(ref_theta(d, base), rescale)]


def as_tensor(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def reference_rotation(x: torch.Tensor, positions, theta, *, scale=1.0, interleaved=False) -> torch.Tensor:
    """Rotate ``x (..., L, hd)`` pair k at position p by ``p * theta[k]`` and multiply by ``scale`` (float64 loops)."""
    x = x.double()
    out = x.clone()
    half = len(theta)
    pairs = [(2 * k, 2 * k + 1) for k in range(half)] if interleaved else [(k, k + half) for k in range(half)]
    for i, p in enumerate(positions):
        for k, (a, b) in enumerate(pairs):
            c, s = math.cos(p * theta[k]), math.sin(p * theta[k])
            xa, xb = x[..., i, a], x[..., i, b]
            out[..., i, a] = scale * (xa * c - xb * s)
            out[..., i, b] = scale * (xb * c + xa * s)
    return out


# Small case: rotary_dim 8, base 10,000, factor 4, original_max_position 16 -> theta = [1, 0.1, 0.01, 0.001].
SMALL = dict(dim=8, num_heads=1)  # head_dim 8
SHORT = [1.0, 1.5, 2.0, 3.0]
LONG = [1.0, 2.0, 4.0, 8.0]
SMALL_OPTIONS = {
    "linear": dict(scaling="linear", factor=4.0),
    "ntk": dict(scaling="ntk", factor=4.0),
    "dynamic": dict(scaling="dynamic", factor=4.0, original_max_position=16),
    "yarn": dict(scaling="yarn", factor=4.0, original_max_position=16),
    "llama3": dict(scaling="llama3", factor=4.0, original_max_position=16),
    "longrope": dict(scaling="longrope", short_factor=SHORT, long_factor=LONG, original_max_position=16, factor=4.0),
}
# Hand-checked literals for lengths <= 16 (and the attention factor m):
#   linear:  theta / 4.
#   ntk:     base' = 1e4 * 4 ** (8/6), so theta'_k = theta_k * 4 ** (-k/3); the last pair is exactly theta / 4.
#   dynamic: plain theta (l <= 16).
#   yarn:    low = max(floor(8 ln(16 / 64 pi) / (2 ln 1e4)), 0) = max(floor(-1.10), 0) = 0,
#            high = ceil(8 ln(16 / 2 pi) / (2 ln 1e4)) = ceil(0.41) = 1 -> ramp [0, 1, 1, 1]; m = 1 + 0.1 ln 4.
#   llama3:  wavelengths 2 pi / theta = [6.28, 62.8, 628, 6283] vs thresholds 16 / 4 = 4 and 16 / 1 = 16:
#            pair 0 is smoothed, g = (16 / 2 pi - 1) / 3, theta' = 0.25 + 0.75 g = 4 / (2 pi) = 2 / pi;
#            the others are divided by 4.
#   longrope: theta / short_factor; m = sqrt(1 + ln 4 / ln 16) = sqrt(1.5).
SMALL_EXPECTED = {
    "linear": ([0.25, 0.025, 0.0025, 0.00025], 1.0),
    "ntk": ([1.0, 0.1 / 4 ** (1 / 3), 0.01 / 4 ** (2 / 3), 0.00025], 1.0),
    "dynamic": ([1.0, 0.1, 0.01, 0.001], 1.0),
    "yarn": ([1.0, 0.025, 0.0025, 0.00025], 1.1386294361119891),
    "llama3": ([2 / math.pi, 0.025, 0.0025, 0.00025], 1.0),
    "longrope": ([1.0, 0.1 / 1.5, 0.005, 0.001 / 3], 1.224744871391589),
}


# -------------------------------------------------------------------------------- small hand case
@pytest.mark.parametrize("scaling", list(SMALL_OPTIONS))
def test_small_case_frequencies_and_attention_factor(scaling):
    enc = RotaryEncoding(**SMALL, **SMALL_OPTIONS[scaling])
    theta, m = SMALL_EXPECTED[scaling]
    assert enc.scaling == scaling and enc.rotary_dim == 8
    assert enc.inv_freq.dtype == torch.float64
    torch.testing.assert_close(enc.inv_freq, as_tensor(theta), rtol=1e-13, atol=0)
    assert enc.attention_factor == pytest.approx(m, rel=1e-14)


def test_small_case_numbers_spelled_out():
    assert 0.1 / 4 ** (1 / 3) == pytest.approx(0.0629960524947437, rel=1e-13)
    assert 0.01 / 4 ** (2 / 3) == pytest.approx(0.003968502629920499, rel=1e-13)
    assert 2 / math.pi == pytest.approx(0.6366197723675814, rel=1e-15)
    assert 1 + 0.1 * math.log(4) == pytest.approx(1.1386294361119891, rel=1e-15)
    assert math.sqrt(1 + math.log(4) / math.log(16)) == pytest.approx(math.sqrt(1.5), rel=1e-15)


def test_small_case_length_dependent_sets():
    dyn = RotaryEncoding(**SMALL, **SMALL_OPTIONS["dynamic"])
    # l = 32: base' = 1e4 * (4 * 32 / 16 - 3) ** (4/3) = 1e4 * 5 ** (4/3), so theta'_k = theta_k * 5 ** (-k/3)
    expected = [1.0, 0.1 / 5 ** (1 / 3), 0.01 / 5 ** (2 / 3), 0.0002]
    assert dyn.frequency_key(32) == pytest.approx(1e4 * 5 ** (4 / 3), rel=1e-14)
    torch.testing.assert_close(dyn.inverse_frequencies_for(dyn.frequency_key(32)), as_tensor(expected), rtol=1e-13,
                               atol=0)
    assert dyn.frequency_key(16) is None and dyn.frequency_key(1) is None
    lr = RotaryEncoding(**SMALL, **SMALL_OPTIONS["longrope"])
    assert lr.frequency_key(16) is None and lr.frequency_key(17) == "long"
    torch.testing.assert_close(lr.inverse_frequencies_for("long"), as_tensor([1.0, 0.05, 0.0025, 0.000125]),
                               rtol=1e-13, atol=0)


# ------------------------------------------------------------------------- formulas, larger cases
FORMULA_CASES = [
    ("linear", dict(factor=2.0), lambda d, b: ref_linear(d, b, 2.0)),
    ("linear", dict(factor=8.5), lambda d, b: ref_linear(d, b, 8.5)),
    ("ntk", dict(factor=4.0), lambda d, b: ref_ntk(d, b, 4.0)),
    ("ntk", dict(factor=1.0), lambda d, b: ref_theta(d, b)),
    ("yarn", dict(factor=4.0, original_max_position=2048), lambda d, b: ref_yarn(d, b, 4.0, 2048)),
    ("yarn", dict(factor=16.0, original_max_position=4096, truncate=False),
     lambda d, b: ref_yarn(d, b, 16.0, 4096, truncate=False)),
    ("yarn", dict(factor=8.0, original_max_position=1024, beta_fast=16.0, beta_slow=2.0),
     lambda d, b: ref_yarn(d, b, 8.0, 1024, 16.0, 2.0)),
    ("llama3", dict(), lambda d, b: ref_llama3(d, b)),
    ("llama3", dict(factor=32.0, low_freq_factor=2.0, high_freq_factor=8.0, original_max_position=512),
     lambda d, b: ref_llama3(d, b, 32.0, 2.0, 8.0, 512)),
    ("dynamic", dict(factor=4.0, original_max_position=256), lambda d, b: ref_theta(d, b)),
]


@pytest.mark.parametrize(("scaling", "options", "reference"), FORMULA_CASES,
                         ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(FORMULA_CASES)])
@pytest.mark.parametrize(("head_dim", "base"), [(32, 10_000.0), (128, 500_000.0)])
def test_inverse_frequencies_match_formula(scaling, options, reference, head_dim, base):
    enc = RotaryEncoding(2 * head_dim, 2, base=base, scaling=scaling, **options)
    torch.testing.assert_close(enc.inv_freq, as_tensor(reference(head_dim, base)), rtol=1e-12, atol=0)


@pytest.mark.parametrize("length", [1, 255, 256, 257, 1000, 4096])
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_dynamic_frequencies_match_formula(length, factor):
    enc = RotaryEncoding(64, 2, scaling="dynamic", factor=factor, original_max_position=256)
    inv_freq = enc.inverse_frequencies_for(enc.frequency_key(length))
    torch.testing.assert_close(inv_freq, as_tensor(ref_dynamic(32, 10_000.0, factor, length, 256)), rtol=1e-12, atol=0)


def test_longrope_frequencies_match_formula():
    short = [1.0 + 0.05 * k for k in range(16)]
    long = [1.0 + 0.75 * k for k in range(16)]
    enc = RotaryEncoding(64, 2, scaling="longrope", short_factor=short, long_factor=long, original_max_position=512,
                         max_position=8192)
    torch.testing.assert_close(enc.inv_freq, as_tensor(ref_longrope(32, 10_000.0, short)), rtol=1e-13, atol=0)
    torch.testing.assert_close(enc.inverse_frequencies_for("long"), as_tensor(ref_longrope(32, 10_000.0, long)),
                               rtol=1e-13, atol=0)
    # factor = max_position / original = 16
    assert enc.factor == 16.0
    assert enc.attention_factor == pytest.approx(math.sqrt(1 + math.log(16) / math.log(512)), rel=1e-14)


def test_longrope_factors_from_yarn_are_ntk_by_parts_ratios():
    """Long factors theta_k / theta'_k of YaRN at the factor (1 for fast pairs, the factor for slow ones)."""
    factors = longrope_factors_from_yarn(16, 10_000.0, 4.0, 128)
    assert factors["short_factor"] == [1.0] * 8
    expected = [t / y for t, y in zip(ref_theta(16, 10_000.0), ref_yarn(16, 10_000.0, 4.0, 128))]
    assert factors["long_factor"] == pytest.approx(expected, rel=1e-12)
    assert factors["long_factor"][0] == pytest.approx(1.0) and factors["long_factor"][-1] == pytest.approx(4.0)
    # as LongRoPE options: plain RoPE frequencies up to L0, YaRN's above it (times LongRoPE's attention factor)
    enc = RotaryEncoding(32, 2, scaling="longrope", original_max_position=128, factor=4.0, **factors)  # head_dim 16
    torch.testing.assert_close(enc.inv_freq, as_tensor(ref_theta(16, 10_000.0)), rtol=1e-13, atol=0)
    torch.testing.assert_close(enc.inverse_frequencies_for("long"), as_tensor(ref_yarn(16, 10_000.0, 4.0, 128)),
                               rtol=1e-12, atol=0)

@pytest.mark.parametrize(
    ("factor", "mscale", "mscale_all_dim"), [(40.0, 1.0, 1.0), (40.0, 0.707, 1.0), (4.0, 1.0, 0.5)]
)
def test_yarn_mscale_attention_factor(factor, mscale, mscale_all_dim):
    enc = RotaryEncoding(32, 2, scaling="yarn", factor=factor, original_max_position=4096, mscale=mscale,
                         mscale_all_dim=mscale_all_dim)
    expected = (0.1 * mscale * math.log(factor) + 1) / (0.1 * mscale_all_dim * math.log(factor) + 1)
    assert enc.attention_factor == pytest.approx(expected, rel=1e-14)


def test_explicit_attention_factor_overrides_default():
    yarn = RotaryEncoding(32, 2, scaling="yarn", factor=4.0, original_max_position=64, attention_factor=0.8)
    assert yarn.attention_factor == 0.8
    lr = RotaryEncoding(**SMALL, scaling="longrope", short_factor=SHORT, long_factor=LONG, original_max_position=16,
                        attention_factor=1.5)
    assert lr.attention_factor == 1.5 and lr.factor is None


def test_attention_factor_is_one_at_factor_one():
    assert RotaryEncoding(32, 2, scaling="yarn", factor=1.0, original_max_position=64).attention_factor == 1.0
    lr = RotaryEncoding(**SMALL, scaling="longrope", short_factor=SHORT, long_factor=LONG, original_max_position=16,
                        max_position=16)
    assert lr.attention_factor == 1.0


# --------------------------------------------------------------------------- rotating q and k
@pytest.mark.parametrize("scaling", list(SMALL_OPTIONS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rotation_matches_reference(scaling, dtype, interleaved):
    enc = RotaryEncoding(**SMALL, interleaved=interleaved, **SMALL_OPTIONS[scaling])
    theta, m = SMALL_EXPECTED[scaling]  # the call's length is 16: the l <= L0 sets
    positions = [0, 1, 5, 15]
    q = torch.randn(2, 1, 4, 8, dtype=dtype)
    k = torch.randn(2, 1, 4, 8, dtype=dtype)
    pos = torch.tensor(positions)
    q_rot, k_rot = enc.rotate(q, k, pos, pos)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for x, out in ((q, q_rot), (k, k_rot)):  # the attention factor applies to both
        torch.testing.assert_close(out.double(), reference_rotation(x, positions, theta, scale=m,
                                                                    interleaved=interleaved), **tol)


def test_attention_factor_scales_scores_by_its_square_on_rotated_dims_only():
    # head_dim 16, rotate 8 (partial RoPE): the pass-through dims keep their scale, as in HF
    enc = RotaryEncoding(32, 2, rotary_fraction=0.5, scaling="yarn", factor=4.0, original_max_position=16)
    plain = RotaryEncoding(32, 2, rotary_fraction=0.5, scaling="yarn", factor=4.0, original_max_position=16,
                           attention_factor=1.0)  # same theta, m = 1
    torch.testing.assert_close(enc.inv_freq, plain.inv_freq, rtol=0, atol=0)
    m = enc.attention_factor
    q = torch.randn(1, 2, 3, 16, dtype=torch.float64)
    k = torch.randn(1, 2, 3, 16, dtype=torch.float64)
    pos = torch.tensor([0, 4, 9])
    q_s, k_s = enc.rotate(q, k, pos, pos)
    q_p, k_p = plain.rotate(q, k, pos, pos)
    torch.testing.assert_close(q_s[..., 8:], q[..., 8:], rtol=0, atol=0)
    rotated = q_s[..., :8] @ k_s[..., :8].transpose(-1, -2)
    torch.testing.assert_close(rotated, m**2 * (q_p[..., :8] @ k_p[..., :8].transpose(-1, -2)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn", "llama3"])
def test_static_scalings_stay_shift_invariant(scaling):
    enc = RotaryEncoding(**SMALL, **SMALL_OPTIONS[scaling])
    q = torch.randn(1, 1, 1, 8, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 8, dtype=torch.float64)

    def score(i, j):
        q_rot, k_rot = enc.rotate(q, k, torch.tensor([i]), torch.tensor([j]))
        return (q_rot * k_rot).sum().item()

    for i, j in [(0, 0), (5, 2), (2, 5), (15, 0)]:
        for shift in (1, 16, 1000, 12_345):
            assert score(i + shift, j + shift) == pytest.approx(score(i, j), rel=1e-9, abs=1e-9)
    assert score(5, 2) != pytest.approx(score(5, 3), rel=1e-6)


@pytest.mark.parametrize("scaling", ["linear", "ntk", "yarn", "llama3"])
def test_static_scalings_are_relative_in_the_conformance_sense(scaling):
    enc = RotaryEncoding(32, 4, scaling=scaling, **{k: v for k, v in SMALL_OPTIONS[scaling].items() if k != "scaling"})
    q = torch.randn(2, 4, 6, 8, dtype=torch.float64)
    k = torch.randn(2, 4, 6, 8, dtype=torch.float64)
    positions = torch.arange(6)
    base = pet.positional_logits(enc, q, k, positions, positions)
    for offset in (1, 17, 300):
        shifted = pet.positional_logits(enc, q, k, positions + offset, positions + offset)
        torch.testing.assert_close(shifted, base, atol=1e-9, rtol=1e-9)


# ----------------------------------------------------------------------------------- dynamic
def dynamic_small():
    return RotaryEncoding(**SMALL, **SMALL_OPTIONS["dynamic"])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dynamic_equals_plain_rope_up_to_original_length(dtype):
    enc, plain = dynamic_small(), RotaryEncoding(**SMALL)
    q = torch.randn(1, 1, 16, 8, dtype=dtype)
    for length in (1, 7, 16):
        pos = torch.arange(length)
        a, b = enc.rotate(q[..., :length, :], q[..., :length, :], pos, pos)
        c, d = plain.rotate(q[..., :length, :], q[..., :length, :], pos, pos)
        torch.testing.assert_close(a, c, rtol=0, atol=0)
        torch.testing.assert_close(b, d, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dynamic_differs_beyond_original_length_and_matches_formula(dtype):
    enc, plain = dynamic_small(), RotaryEncoding(**SMALL)
    q = torch.randn(1, 1, 32, 8, dtype=dtype)
    pos = torch.arange(32)
    out, _ = enc.rotate(q, q, pos, pos)
    ref, _ = plain.rotate(q, q, pos, pos)
    assert not torch.allclose(out[..., 1:, :], ref[..., 1:, :], rtol=1e-3, atol=1e-3)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    expected = reference_rotation(q, range(32), ref_dynamic(8, 10_000.0, 4.0, 32, 16))
    torch.testing.assert_close(out.double(), expected, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dynamic_scales_back_when_a_shorter_input_follows(dtype):
    enc = dynamic_small()
    q = torch.randn(1, 1, 40, 8, dtype=dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for length in (40, 24, 10, 33, 16, 40):  # longer, shorter but > L0, <= L0, ...: never stale
        pos = torch.arange(length)
        out, _ = enc.rotate(q[..., :length, :], q[..., :length, :], pos, pos)
        expected = reference_rotation(q[..., :length, :], range(length), ref_dynamic(8, 10_000.0, 4.0, length, 16))
        torch.testing.assert_close(out.double(), expected, **tol)


def test_dynamic_cache_is_keyed_by_effective_base_and_never_truncated():
    enc = dynamic_small()
    q = torch.randn(1, 1, 1, 8)
    enc.rotate(q, q, torch.tensor([39]), torch.tensor([39]))  # length 40
    assert enc._scaled_key == pytest.approx(10_000.0 * (4 * 40 / 16 - 3) ** (4 / 3), rel=1e-14)
    assert enc.scaled_cos_cached.shape[0] >= 40
    first = enc.scaled_cos_cached
    enc.rotate(q, q, torch.tensor([20, 39]), torch.tensor([20, 39]))  # same length: the table is reused
    assert enc.scaled_cos_cached is first
    out, _ = enc.rotate(q, q, torch.tensor([99]), torch.tensor([99]))  # length 100: new key, grown table
    assert enc._scaled_key == pytest.approx(10_000.0 * (4 * 100 / 16 - 3) ** (4 / 3), rel=1e-14)
    assert enc.scaled_cos_cached.shape[0] >= 100
    torch.testing.assert_close(out.double(), reference_rotation(q, [99], ref_dynamic(8, 10_000.0, 4.0, 100, 16)),
                               rtol=1e-5, atol=1e-5)
    # lengths <= L0 read the plain table, which is not touched by the scaled ones
    enc.rotate(q, q, torch.tensor([3]), torch.tensor([3]))
    torch.testing.assert_close(enc.cos_cached[:16].double(),
                               (torch.arange(16, dtype=torch.float64)[:, None] * rope_inverse_frequencies(8)).cos(),
                               rtol=0, atol=1e-7)


def test_dynamic_current_length_is_max_over_queries_and_keys():
    enc = dynamic_small()
    q = torch.randn(1, 1, 1, 8, dtype=torch.float64)
    k = torch.randn(1, 1, 30, 8, dtype=torch.float64)
    q_rot, k_rot = enc.rotate(q, k, torch.tensor([3]), torch.arange(30))  # e.g. cross-attention: l = 30
    theta = ref_dynamic(8, 10_000.0, 4.0, 30, 16)
    torch.testing.assert_close(q_rot, reference_rotation(q, [3], theta), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(k_rot, reference_rotation(k, range(30), theta), rtol=1e-12, atol=1e-12)
    # and the other way round: a query at 29 sets l = 30 for keys at 0..9 too
    q_rot, k_rot = enc.rotate(q, k[..., :10, :], torch.tensor([29]), torch.arange(10))
    torch.testing.assert_close(q_rot, reference_rotation(q, [29], theta), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(k_rot, reference_rotation(k[..., :10, :], range(10), theta), rtol=1e-12, atol=1e-12)


def test_dynamic_per_batch_positions_use_the_global_max():
    enc = dynamic_small()
    q = torch.randn(2, 1, 3, 8, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2], [20, 21, 24]])  # l = 25 for both rows
    q_rot, _ = enc.rotate(q, q, pos, pos)
    theta = ref_dynamic(8, 10_000.0, 4.0, 25, 16)
    torch.testing.assert_close(q_rot[0], reference_rotation(q[0], [0, 1, 2], theta), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(q_rot[1], reference_rotation(q[1], [20, 21, 24], theta), rtol=1e-12, atol=1e-12)


def test_dynamic_kv_cache_decode_rotates_each_step_with_its_own_length():
    # Keys are rotated when they enter the cache: prompt keys with l = 12, the step at position t with
    # l = t + 1 (q and its key together). Past L0 = 16 a decode therefore differs from a full forward.
    enc = dynamic_small()
    x = torch.randn(1, 1, 24, 8, dtype=torch.float64)
    prompt = torch.arange(12)
    _, cached = enc.rotate(x[..., :12, :], x[..., :12, :], prompt, prompt)
    torch.testing.assert_close(cached, reference_rotation(x[..., :12, :], range(12), ref_theta(8, 10_000.0)),
                               rtol=1e-12, atol=1e-12)
    for t in range(12, 24):
        step = torch.tensor([t])
        q_t, k_t = enc.rotate(x[..., t:t + 1, :], x[..., t:t + 1, :], step, step)
        theta = ref_dynamic(8, 10_000.0, 4.0, t + 1, 16)
        torch.testing.assert_close(q_t, reference_rotation(x[..., t:t + 1, :], [t], theta), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(k_t, q_t, rtol=0, atol=0)
        cached = torch.cat((cached, k_t), dim=-2)
    _, full = enc.rotate(x, x, torch.arange(24), torch.arange(24))  # l = 24 for every key
    torch.testing.assert_close(cached[..., :16, :], reference_rotation(x[..., :16, :], range(16), ref_theta(8, 1e4)),
                               rtol=1e-12, atol=1e-12)
    assert not torch.allclose(cached[..., 17:, :], full[..., 17:, :])  # the documented HF caveat


def test_dynamic_kv_cache_matches_full_forward_within_original_length():
    torch.manual_seed(1)
    attn = pet.MultiHeadAttention(16, 2, causal=True, encoding=pet.get_encoder(
        "rope", 16, 2, scaling="dynamic", factor=4.0, original_max_position=16)).double().eval()
    x = torch.randn(1, 16, 16, dtype=torch.float64)
    with torch.no_grad():
        full = attn(x)
        cache = pet.KVCache()
        steps = [attn(x[:, :10], cache=cache)] + [attn(x[:, t:t + 1], cache=cache) for t in range(10, 16)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)


def test_dynamic_float_positions_match_integer_positions():
    enc = dynamic_small()
    q = torch.randn(1, 1, 4, 8)
    ints = torch.tensor([0, 5, 20, 39])
    a, _ = enc.rotate(q, q, ints, ints)  # cached float32 path
    b, _ = enc.rotate(q, q, ints.float(), ints.float())  # direct path, same length 40
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------- yarn ramp
def test_yarn_ramp_endpoints():
    # d = 32, base 1e4, L0 = 2048: c(32) = 4.03 -> low 4, c(1) = 10.05 -> high 11
    d, factor = 32, 4.0
    low, high = yarn_correction_range(32.0, 1.0, d, 10_000.0, 2048, truncate=True)
    assert (low, high) == (4, 11) == ref_yarn_range(d, 10_000.0, 2048)
    enc = RotaryEncoding(2 * d, 2, scaling="yarn", factor=factor, original_max_position=2048)
    theta = rope_inverse_frequencies(d)
    ratio = enc.inv_freq / theta  # 1: extrapolation (kept), 1/factor: interpolation
    torch.testing.assert_close(ratio[: low + 1], torch.ones(low + 1, dtype=torch.float64), rtol=1e-14, atol=0)
    torch.testing.assert_close(ratio[high:], torch.full((d // 2 - high,), 1 / factor, dtype=torch.float64),
                               rtol=1e-14, atol=0)
    inside = ratio[low + 1: high]
    assert ((inside < 1) & (inside > 1 / factor)).all()
    assert (inside[1:] < inside[:-1]).all()  # the ramp moves monotonically from keep to interpolate
    for k in range(low + 1, high):  # linear ramp r = (k - low) / (high - low)
        r = (k - low) / (high - low)
        assert ratio[k].item() == pytest.approx(r / factor + (1 - r), rel=1e-13)


def test_yarn_truncate_false_uses_exact_correction_dims():
    low, high = yarn_correction_range(32.0, 1.0, 32, 10_000.0, 2048, truncate=False)
    assert low == pytest.approx(32 * math.log(2048 / (64 * math.pi)) / (2 * math.log(10_000.0)), rel=1e-14)
    assert high == pytest.approx(32 * math.log(2048 / (2 * math.pi)) / (2 * math.log(10_000.0)), rel=1e-14)
    assert 4 < low < 4.1 and 10 < high < 10.1
    a = RotaryEncoding(64, 2, scaling="yarn", factor=4.0, original_max_position=2048, truncate=False)
    b = RotaryEncoding(64, 2, scaling="yarn", factor=4.0, original_max_position=2048)
    assert not torch.allclose(a.inv_freq, b.inv_freq)
    torch.testing.assert_close(a.inv_freq, as_tensor(ref_yarn(32, 10_000.0, 4.0, 2048, truncate=False)), rtol=1e-13,
                               atol=0)


def test_yarn_correction_range_is_clamped():
    # tiny L0: both correction dims are negative -> (0, 0); huge L0: high is clamped to d - 1
    assert yarn_correction_range(32.0, 1.0, 8, 10_000.0, 2) == (0, 0)
    assert yarn_correction_range(32.0, 1.0, 8, 10.0, 10**9)[1] == 7


# ----------------------------------------------------------------------------------- llama3
def test_llama3_keeps_high_frequencies_and_divides_low_ones():
    # d = 8, base 1e4, L0 = 64: wavelengths [6.3, 62.8, 628, 6283] vs 64 / 4 = 16 and 64 / 1 = 64
    enc = RotaryEncoding(**SMALL, scaling="llama3", factor=8.0, original_max_position=64)
    theta = [1.0, 0.1, 0.01, 0.001]
    g = (64 / (2 * math.pi / 0.1) - 1) / 3
    expected = [1.0, (1 - g) * 0.1 / 8 + g * 0.1, 0.01 / 8, 0.001 / 8]
    torch.testing.assert_close(enc.inv_freq, as_tensor(expected), rtol=1e-13, atol=0)
    assert enc.inv_freq[0].item() == theta[0]  # high frequency: unchanged
    assert theta[1] / 8 < enc.inv_freq[1].item() < theta[1]  # medium: smoothed


def test_llama3_31_defaults():
    enc = RotaryEncoding(256, 2, base=500_000.0, scaling="llama3")  # head_dim 128, as Llama 3.1 8B
    assert (enc.factor, enc.low_freq_factor, enc.high_freq_factor, enc.original_max_position) == (8.0, 1.0, 4.0, 8192)
    theta = rope_inverse_frequencies(128, 500_000.0)
    wavelen = 2 * math.pi / theta
    high, low = wavelen < 8192 / 4, wavelen > 8192
    assert high.any() and low.any() and (~high & ~low).any()
    torch.testing.assert_close(enc.inv_freq[high], theta[high], rtol=0, atol=0)
    torch.testing.assert_close(enc.inv_freq[low], theta[low] / 8, rtol=1e-15, atol=0)
    torch.testing.assert_close(enc.inv_freq, as_tensor(ref_llama3(128, 500_000.0)), rtol=1e-13, atol=0)


# ---------------------------------------------------------------------------------- longrope
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_longrope_switches_factor_sets_at_the_threshold(dtype):
    enc = RotaryEncoding(**SMALL, **SMALL_OPTIONS["longrope"])
    m = math.sqrt(1.5)
    q = torch.randn(1, 1, 20, 8, dtype=dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for length, rescale in ((16, SHORT), (17, LONG), (20, LONG), (5, SHORT), (17, LONG)):
        pos = torch.arange(length)
        out, _ = enc.rotate(q[..., :length, :], q[..., :length, :], pos, pos)
        expected = reference_rotation(q[..., :length, :], range(length), ref_longrope(8, 1e4, rescale), scale=m)
        torch.testing.assert_close(out.double(), expected, **tol)


def test_longrope_decode_step_past_threshold_uses_long_factors():
    enc = RotaryEncoding(**SMALL, **SMALL_OPTIONS["longrope"])
    x = torch.randn(1, 1, 1, 8, dtype=torch.float64)
    q16, _ = enc.rotate(x, x, torch.tensor([15]), torch.tensor([15]))  # l = 16
    q17, _ = enc.rotate(x, x, torch.tensor([16]), torch.tensor([16]))  # l = 17
    m = math.sqrt(1.5)
    torch.testing.assert_close(q16, reference_rotation(x, [15], ref_longrope(8, 1e4, SHORT), scale=m), rtol=1e-12,
                               atol=1e-12)
    torch.testing.assert_close(q17, reference_rotation(x, [16], ref_longrope(8, 1e4, LONG), scale=m), rtol=1e-12,
                               atol=1e-12)


# ------------------------------------------------------------------------- module plumbing
def test_get_encoder_with_scaling():
    enc = pet.get_encoder("rope", 64, 4, scaling="yarn", factor=4.0, original_max_position=256)
    assert isinstance(enc, RotaryEncoding) and enc.scaling == "yarn"
    assert "scaling='yarn'" in repr(enc) and "original_max_position=256" in repr(enc)
    assert pet.get_encoder("rope", 64, 4).scaling is None


def test_plain_rope_is_unchanged_by_default():
    enc = RotaryEncoding(16, 2)
    assert enc.scaling is None and enc.attention_factor == 1.0 and not enc.length_dependent
    torch.testing.assert_close(enc.inv_freq, rope_inverse_frequencies(8), rtol=0, atol=0)
    q = torch.randn(1, 2, 3, 8)
    enc.rotate(q, q, torch.arange(3), torch.arange(3))
    assert enc.cos_cached.shape[0] > 0 and enc.scaled_cos_cached.shape[0] == 0


@pytest.mark.parametrize("scaling", list(SMALL_OPTIONS))
def test_dtype_conversion_keeps_float64_scaled_frequencies(scaling):
    enc = RotaryEncoding(**SMALL, **SMALL_OPTIONS[scaling])
    q = torch.randn(1, 1, 20, 8)
    enc.rotate(q, q, torch.arange(20), torch.arange(20))  # fills both tables for dynamic / longrope
    enc = enc.bfloat16()
    assert enc.inv_freq.dtype == torch.float64
    torch.testing.assert_close(enc.inv_freq, as_tensor(SMALL_EXPECTED[scaling][0]), rtol=1e-13, atol=0)
    assert enc.scaled_cos_cached.shape[0] == 0 and enc._scaled_key is None
    out, _ = enc.rotate(q.bfloat16(), q.bfloat16(), torch.arange(20), torch.arange(20))
    assert out.dtype == torch.bfloat16 and enc.cos_cached.dtype == torch.float32


@pytest.mark.parametrize("scaling", list(SMALL_OPTIONS))
def test_no_scaling_tables_in_state_dict(scaling):
    enc = RotaryEncoding(**SMALL, **SMALL_OPTIONS[scaling])
    q = torch.randn(1, 1, 20, 8)
    enc.rotate(q, q, torch.arange(20), torch.arange(20))
    assert enc.state_dict() == {}


@pytest.mark.parametrize("scaling", list(SMALL_OPTIONS))
def test_xpos_composes_with_scaling(scaling):
    enc = RotaryEncoding(**SMALL, xpos=True, xpos_scale_base=64.0, **SMALL_OPTIONS[scaling])
    plain = RotaryEncoding(**SMALL, **SMALL_OPTIONS[scaling])
    q = torch.randn(1, 1, 3, 8, dtype=torch.float64)
    pos = torch.tensor([1, 4, 9])
    out, _ = enc.rotate(q, q, pos, pos)
    ref, _ = plain.rotate(q, q, pos, pos)
    scale = enc._xpos_scale(pos, torch.float64)  # (L, d/2), the same factor for both dims of a pair
    torch.testing.assert_close(out, ref * torch.cat((scale, scale), dim=-1), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------ errors
def options_without(scaling: str, name: str) -> dict:
    return {k: v for k, v in SMALL_OPTIONS[scaling].items() if k != name}


ERRORS = [
    # scaling itself
    (dict(scaling="rope2"), ValueError, r"scaling must be one of \(None, 'linear', 'ntk', 'dynamic', 'yarn'"),
    (dict(scaling="YaRN"), ValueError, "scaling must be one of"),
    (dict(scaling=3), TypeError, "scaling must be None or a str"),
    # options for the wrong scaling
    (dict(factor=4.0), ValueError, r"\['factor'\] do not apply to scaling=None"),
    (dict(scaling="linear", factor=4.0, original_max_position=16), ValueError,
     r"\['original_max_position'\] do not apply to scaling='linear'"),
    (dict(scaling="ntk", factor=4.0, beta_fast=32.0), ValueError, r"\['beta_fast'\] do not apply to scaling='ntk'"),
    (dict(scaling="dynamic", factor=4.0, original_max_position=16, attention_factor=1.2), ValueError,
     r"\['attention_factor'\] do not apply"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, short_factor=SHORT), ValueError,
     r"\['short_factor'\] do not apply to scaling='yarn'"),
    (dict(scaling="llama3", truncate=False), ValueError, r"\['truncate'\] do not apply to scaling='llama3'"),
    (dict(scaling="longrope", **options_without("longrope", "scaling"), low_freq_factor=1.0), ValueError,
     r"\['low_freq_factor'\] do not apply to scaling='longrope'"),
    # missing required options
    (dict(scaling="linear"), ValueError, r"scaling='linear' needs \['factor'\]"),
    (dict(scaling="ntk"), ValueError, r"scaling='ntk' needs \['factor'\]"),
    (dict(scaling="dynamic", factor=4.0), ValueError, r"needs \['original_max_position'\]"),
    (dict(scaling="yarn", original_max_position=16), ValueError, r"scaling='yarn' needs \['factor'\]"),
    (options_without("longrope", "short_factor"), ValueError, r"needs \['short_factor'\]"),
    (options_without("longrope", "long_factor"), ValueError, r"needs \['long_factor'\]"),
    (options_without("longrope", "original_max_position"), ValueError, r"needs \['original_max_position'\]"),
    (options_without("longrope", "factor"), ValueError, "needs factor or max_position"),
    # factor
    (dict(scaling="linear", factor=0.5), ValueError, "factor must be >= 1.0, got 0.5"),
    (dict(scaling="ntk", factor=-2.0), ValueError, "factor must be > 0"),
    (dict(scaling="yarn", factor=float("nan"), original_max_position=16), ValueError, "factor must be finite"),
    (dict(scaling="dynamic", factor="4", original_max_position=16), TypeError, "factor must be a number"),
    (dict(scaling="llama3", factor=0.9), ValueError, "factor must be >= 1.0"),
    (dict(options_without("longrope", "factor"), factor=0.5), ValueError, "factor must be >= 1.0"),
    # original_max_position
    (dict(scaling="dynamic", factor=4.0, original_max_position=0), ValueError, "original_max_position must be >= 1"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16.0), TypeError, "original_max_position must be an int"),
    (dict(scaling="llama3", original_max_position=True), TypeError, "original_max_position must be an int"),
    (dict(options_without("longrope", "original_max_position"), original_max_position=1), ValueError,
     "original_max_position must be >= 2"),
    # yarn
    (dict(scaling="yarn", factor=4.0, original_max_position=16, attention_factor=0.0), ValueError,
     "attention_factor must be > 0"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, beta_fast=1.0, beta_slow=1.0), ValueError,
     "beta_fast must be > beta_slow"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, beta_fast=0.5), ValueError,
     "beta_fast must be > beta_slow"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, beta_slow=-1.0), ValueError, "beta_slow must be > 0"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, beta_fast="32"), TypeError, "beta_fast must be a num"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, truncate=1), TypeError, "truncate must be a bool"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, mscale=1.0), ValueError,
     "mscale and mscale_all_dim must be given together"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, mscale_all_dim=1.0), ValueError,
     "mscale and mscale_all_dim must be given together"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, mscale=1.0, mscale_all_dim=0.0), ValueError,
     "mscale_all_dim must be > 0"),
    (dict(scaling="yarn", factor=4.0, original_max_position=16, mscale=1.0, mscale_all_dim=1.0, attention_factor=1.1),
     ValueError, "either attention_factor or mscale"),
    # llama3
    (dict(scaling="llama3", low_freq_factor=4.0, high_freq_factor=4.0), ValueError,
     "high_freq_factor must be > low_freq_factor"),
    (dict(scaling="llama3", low_freq_factor=0.0), ValueError, "low_freq_factor must be > 0"),
    (dict(scaling="llama3", high_freq_factor=float("inf")), ValueError, "high_freq_factor must be finite"),
    # longrope
    (dict(options_without("longrope", "short_factor"), short_factor=[1.0, 1.0, 1.0]), ValueError,
     r"short_factor must have rotary_dim/2 = 4 entries \(one per pair\), got 3"),
    (dict(options_without("longrope", "long_factor"), long_factor=[1.0] * 5), ValueError,
     "long_factor must have rotary_dim/2 = 4 entries"),
    (dict(options_without("longrope", "short_factor"), short_factor=torch.ones(4)), TypeError,
     "short_factor must be a list or tuple"),
    (dict(options_without("longrope", "long_factor"), long_factor=[1.0, 2.0, 0.0, 1.0]), ValueError,
     r"long_factor\[2\] must be > 0"),
    (dict(options_without("longrope", "short_factor"), short_factor=[1.0, "2", 1.0, 1.0]), TypeError,
     r"short_factor\[1\] must be a number"),
    (dict(SMALL_OPTIONS["longrope"], max_position=64), ValueError, "either factor or max_position"),
    (dict(options_without("longrope", "factor"), max_position=8), ValueError,
     "max_position must be >= original_max_position=16, got 8"),
    (dict(options_without("longrope", "factor"), max_position=64.0), TypeError, "max_position must be an int"),
    (dict(options_without("longrope", "factor"), attention_factor=-1.0), ValueError, "attention_factor must be > 0"),
]


@pytest.mark.parametrize(("options", "error", "match"), ERRORS, ids=[f"{i}-{m[:30]}" for i, (_, _, m) in
                                                                      enumerate(ERRORS)])
def test_option_errors(options, error, match):
    with pytest.raises(error, match=match):
        RotaryEncoding(**SMALL, **options)


@pytest.mark.parametrize("scaling", ["ntk", "dynamic"])
def test_ntk_needs_rotary_dim_of_at_least_four(scaling):
    options = dict(factor=4.0) if scaling == "ntk" else dict(factor=4.0, original_max_position=16)
    with pytest.raises(ValueError, match=r"needs rotary_dim >= 4 \(exponent d / \(d - 2\)\), got 2"):
        RotaryEncoding(16, 2, rotary_fraction=0.25, scaling=scaling, **options)  # head_dim 8, rotate 2
    RotaryEncoding(16, 2, rotary_fraction=0.5, scaling=scaling, **options)  # rotate 4: fine


def test_every_scaling_is_listed():
    assert ROPE_SCALINGS == (None, "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
    assert set(SMALL_OPTIONS) == set(ROPE_SCALINGS) - {None}
