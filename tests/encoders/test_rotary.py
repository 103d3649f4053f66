"""RoPE and xPos against an explicit float64 reference built from 2x2 rotation matrices."""

import math

import pytest
import torch

from pe_toolkit.encoders.rotary import RotaryEncoding, apply_rope, rope_inverse_frequencies, xpos_decay


def pair_indices(rotary_dim: int, interleaved: bool) -> list[tuple[int, int]]:
    """Dimension pairs: half-split (k, k + d/2) or interleaved (2k, 2k + 1)."""
    half = rotary_dim // 2
    if interleaved:
        return [(2 * k, 2 * k + 1) for k in range(half)]
    return [(k, k + half) for k in range(half)]


def reference_rope(
    x: torch.Tensor,
    positions: list[float],
    *,
    rotary_dim: int | None = None,
    interleaved: bool = False,
    base: float = 10_000.0,
    scale: list[list[float]] | None = None,
) -> torch.Tensor:
    """Rotate ``x (..., L, hd)`` pair by pair with ``[[cos, -sin], [sin, cos]]`` in float64 loops.

    ``scale[t][k]`` (optional) multiplies pair ``k`` at sequence index ``t`` (xPos).
    """
    x = x.double()
    out = x.clone()
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    for t, pos in enumerate(positions):
        for k, (a, b) in enumerate(pair_indices(rd, interleaved)):
            angle = pos * base ** (-2 * k / rd)
            s = 1.0 if scale is None else scale[t][k]
            rot = s * torch.tensor(
                [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]], dtype=torch.float64
            )
            pair = torch.stack((x[..., t, a], x[..., t, b]), dim=-1)  # (..., 2)
            new = pair @ rot.T
            out[..., t, a], out[..., t, b] = new[..., 0], new[..., 1]
    return out


# ------------------------------------------------------------------------------ functional core
def test_inverse_frequencies_literal():
    theta = rope_inverse_frequencies(8, 10_000.0)
    expected = torch.tensor([1.0, 10_000 ** -0.25, 10_000 ** -0.5, 10_000 ** -0.75], dtype=torch.float64)
    torch.testing.assert_close(theta, expected, rtol=1e-15, atol=0)


def test_apply_rope_literal_90_degrees():
    # one pair rotated by pi/2: (1, 2) -> (-2, 1)
    x = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    cos = torch.tensor([[0.0]], dtype=torch.float64)
    sin = torch.tensor([[1.0]], dtype=torch.float64)
    for interleaved in (False, True):
        out = apply_rope(x, cos, sin, interleaved=interleaved)
        torch.testing.assert_close(out, torch.tensor([[-2.0, 1.0]], dtype=torch.float64), rtol=0, atol=0)


def test_apply_rope_layouts_pair_different_dims():
    # 4 dims, pair 0 rotated by pi/2, pair 1 not rotated
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=torch.float64)
    cos = torch.tensor([[0.0, 1.0]], dtype=torch.float64)
    sin = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    half = apply_rope(x, cos, sin, interleaved=False)  # pairs (0, 2), (1, 3)
    inter = apply_rope(x, cos, sin, interleaved=True)  # pairs (0, 1), (2, 3)
    torch.testing.assert_close(half, torch.tensor([[-3.0, 2.0, 1.0, 4.0]], dtype=torch.float64), rtol=0, atol=0)
    torch.testing.assert_close(inter, torch.tensor([[-2.0, 1.0, 3.0, 4.0]], dtype=torch.float64), rtol=0, atol=0)


def test_xpos_decay_literal():
    zeta = xpos_decay(8, gamma=0.4)
    expected = torch.tensor([0.4 / 1.4, 0.65 / 1.4, 0.9 / 1.4, 1.15 / 1.4], dtype=torch.float64)
    torch.testing.assert_close(zeta, expected, rtol=1e-15, atol=0)


# ---------------------------------------------------------------------------------- the module
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_rope_matches_rotation_matrix_reference(interleaved, dtype):
    enc = RotaryEncoding(16, 2, interleaved=interleaved)  # head_dim 8
    q = torch.randn(2, 2, 5, 8, dtype=dtype)
    k = torch.randn(2, 2, 5, 8, dtype=dtype)
    positions = [0, 1, 2, 17, 300]
    pos = torch.tensor(positions)
    q_rot, k_rot = enc.rotate(q, k, pos, pos)
    assert q_rot.dtype == dtype and k_rot.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(q_rot.double(), reference_rope(q, positions, interleaved=interleaved), **tol)
    torch.testing.assert_close(k_rot.double(), reference_rope(k, positions, interleaved=interleaved), **tol)


def test_rope_position_zero_is_identity():
    enc = RotaryEncoding(16, 2)
    q = torch.randn(1, 2, 1, 8)
    q_rot, _ = enc.rotate(q, q, torch.tensor([0]), torch.tensor([0]))
    torch.testing.assert_close(q_rot, q, rtol=0, atol=0)


def test_rope_layouts_differ():
    q = torch.randn(1, 1, 3, 8)
    pos = torch.arange(3)
    a, _ = RotaryEncoding(8, 1, interleaved=False).rotate(q, q, pos, pos)
    b, _ = RotaryEncoding(8, 1, interleaved=True).rotate(q, q, pos, pos)
    assert not torch.allclose(a[..., 1:, :], b[..., 1:, :])


def test_rope_custom_base():
    enc = RotaryEncoding(8, 1, base=500.0)
    q = torch.randn(1, 1, 3, 8, dtype=torch.float64)
    q_rot, _ = enc.rotate(q, q, torch.tensor([2, 5, 9]), torch.tensor([2, 5, 9]))
    torch.testing.assert_close(q_rot, reference_rope(q, [2, 5, 9], base=500.0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("interleaved", [False, True])
def test_partial_rotary_leaves_other_dims_untouched(interleaved):
    enc = RotaryEncoding(32, 2, rotary_fraction=0.25, interleaved=interleaved)  # head_dim 16, rotate 4
    assert enc.rotary_dim == 4
    q = torch.randn(1, 2, 6, 16, dtype=torch.float64)
    positions = [0, 3, 4, 10, 11, 1000]
    q_rot, _ = enc.rotate(q, q, torch.tensor(positions), torch.tensor(positions))
    torch.testing.assert_close(q_rot[..., 4:], q[..., 4:], rtol=0, atol=0)
    expected = reference_rope(q[..., :4], positions, interleaved=interleaved)  # theta_k = base^(-2k/4)
    torch.testing.assert_close(q_rot[..., :4], expected, rtol=1e-12, atol=1e-12)


def test_partial_rotary_dim_rounds_down():
    assert RotaryEncoding(48, 2, rotary_fraction=0.5).rotary_dim == 12  # head_dim 24
    assert RotaryEncoding(64, 2, rotary_fraction=0.25).rotary_dim == 8


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary_fraction", [1.0, 0.5])
def test_rope_scores_depend_only_on_relative_position(interleaved, rotary_fraction):
    enc = RotaryEncoding(16, 1, interleaved=interleaved, rotary_fraction=rotary_fraction)
    q = torch.randn(1, 1, 1, 16, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 16, dtype=torch.float64)

    def score(i, j):
        q_rot, k_rot = enc.rotate(q, k, torch.tensor([i]), torch.tensor([j]))
        return (q_rot * k_rot).sum().item()

    for i, j in [(0, 0), (5, 2), (2, 5), (10, 0)]:
        for shift in (1, 7, 1000, 12_345):
            assert score(i + shift, j + shift) == pytest.approx(score(i, j), rel=1e-9, abs=1e-9)
    assert score(5, 2) != pytest.approx(score(5, 3), rel=1e-6)


def test_rope_per_batch_positions():
    enc = RotaryEncoding(8, 1)
    q = torch.randn(2, 1, 3, 8, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2], [7, 9, 40]])
    q_rot, _ = enc.rotate(q, q, pos, pos)
    torch.testing.assert_close(q_rot[0], reference_rope(q[0], [0, 1, 2]), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(q_rot[1], reference_rope(q[1], [7, 9, 40]), rtol=1e-12, atol=1e-12)
    q32 = q.float()
    q_rot32, _ = enc.rotate(q32, q32, pos, pos)  # cached path
    torch.testing.assert_close(q_rot32[1].double(), reference_rope(q[1], [7, 9, 40]), rtol=1e-5, atol=1e-5)


def test_rope_gqa_keys_with_fewer_heads():
    enc = RotaryEncoding(16, 4)  # head_dim 4
    q = torch.randn(1, 4, 3, 4, dtype=torch.float64)
    k = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    pos = torch.arange(3)
    q_rot, k_rot = enc.rotate(q, k, pos, pos)
    assert k_rot.shape == k.shape
    torch.testing.assert_close(k_rot, reference_rope(k, [0, 1, 2]), rtol=1e-12, atol=1e-12)


def test_rope_negative_positions():
    enc = RotaryEncoding(8, 1)
    q = torch.randn(1, 1, 2, 8)
    q_rot, _ = enc.rotate(q, q, torch.tensor([-3, -1]), torch.tensor([-3, -1]))
    torch.testing.assert_close(q_rot.double(), reference_rope(q, [-3, -1]), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------ precision
def naive_bf16_rope(x: torch.Tensor, position: int) -> torch.Tensor:
    """RoPE computed entirely in bfloat16 (the classic bug), half-split layout."""
    d = x.shape[-1]
    inv_freq = (10_000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)).bfloat16()
    angles = torch.tensor([float(position)], dtype=torch.bfloat16)[:, None] * inv_freq
    return apply_rope(x, angles.cos(), angles.sin(), interleaved=False)


@pytest.mark.parametrize("interleaved", [False, True])
def test_bf16_at_position_10000_matches_float64_reference(interleaved):
    enc = RotaryEncoding(128, 2, interleaved=interleaved)  # head_dim 64
    q = torch.randn(1, 2, 1, 64).bfloat16()
    position = 10_000
    q_rot, _ = enc.rotate(q, q, torch.tensor([position]), torch.tensor([position]))
    assert q_rot.dtype == torch.bfloat16
    expected = reference_rope(q, [position], interleaved=interleaved)  # float64 from the bf16 input values
    # bf16 keeps 8 significant bits: rounding a result costs at most 2**-8 relative
    torch.testing.assert_close(q_rot.double(), expected, rtol=2**-8, atol=1e-5)
    # the tolerance is tight enough to reject a RoPE computed in bf16 throughout
    if not interleaved:
        naive = naive_bf16_rope(q, position)
        assert not torch.allclose(naive.double(), expected, rtol=2**-8, atol=1e-5)


def test_module_bfloat16_keeps_float32_cache_and_float64_frequencies():
    enc = RotaryEncoding(128, 2)
    enc.rotate(torch.randn(1, 2, 4, 64), torch.randn(1, 2, 4, 64), torch.arange(4), torch.arange(4))
    assert enc.cos_cached.shape[0] > 0
    enc = enc.bfloat16()
    assert enc.inv_freq.dtype == torch.float64
    torch.testing.assert_close(enc.inv_freq, rope_inverse_frequencies(64), rtol=0, atol=0)
    q = torch.randn(1, 2, 1, 64).bfloat16()
    q_rot, _ = enc.rotate(q, q, torch.tensor([10_000]), torch.tensor([10_000]))
    assert enc.cos_cached.dtype == torch.float32 and enc.sin_cached.dtype == torch.float32
    angles = 10_000 * rope_inverse_frequencies(64)
    torch.testing.assert_close(enc.cos_cached[10_000].double(), angles.cos(), rtol=0, atol=1e-7)
    torch.testing.assert_close(enc.sin_cached[10_000].double(), angles.sin(), rtol=0, atol=1e-7)
    torch.testing.assert_close(q_rot.double(), reference_rope(q, [10_000]), rtol=2**-8, atol=1e-5)


def test_module_half_and_double_keep_frequencies():
    enc = RotaryEncoding(16, 2).half()
    assert enc.inv_freq.dtype == torch.float64
    enc = enc.double()
    q = torch.randn(1, 2, 2, 8, dtype=torch.float64)
    q_rot, _ = enc.rotate(q, q, torch.tensor([3, 70_000]), torch.tensor([3, 70_000]))
    torch.testing.assert_close(q_rot, reference_rope(q, [3, 70_000]), rtol=1e-10, atol=1e-10)


def test_cache_grows_on_demand_and_is_never_truncated():
    enc = RotaryEncoding(8, 1)
    assert enc.cos_cached.shape[0] == 0
    q = torch.randn(1, 1, 2, 8)
    enc.rotate(q, q, torch.tensor([0, 1]), torch.tensor([0, 1]))
    first_size = enc.cos_cached.shape[0]
    assert first_size >= 2
    first_rows = enc.cos_cached[:2].clone()
    far = [first_size + 5, 3 * first_size]  # beyond the cache
    q_rot, _ = enc.rotate(q, q, torch.tensor(far), torch.tensor(far))
    assert enc.cos_cached.shape[0] > 3 * first_size
    torch.testing.assert_close(q_rot.double(), reference_rope(q, far), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(enc.cos_cached[:2], first_rows, rtol=0, atol=0)
    grown = enc.cos_cached.shape[0]
    enc.rotate(q, q, torch.tensor([0, 1]), torch.tensor([0, 1]))  # shorter input: cache stays large
    assert enc.cos_cached.shape[0] == grown


def test_far_positions_are_computed_directly_without_growing_the_cache():
    enc = RotaryEncoding(8, 1)
    q = torch.randn(1, 1, 2, 8)
    far = [10**6, 10**6 + 7]
    q_rot, _ = enc.rotate(q, q, torch.tensor(far), torch.tensor(far))
    assert enc.cos_cached.shape[0] == 0  # no table from 0 to 10**6
    torch.testing.assert_close(q_rot.double(), reference_rope(q, far), rtol=1e-5, atol=1e-5)
    cos, _ = enc.cos_sin(torch.tensor([RotaryEncoding.MAX_CACHED_POSITIONS - 1]), torch.float32)
    assert enc.cos_cached.shape[0] == RotaryEncoding.MAX_CACHED_POSITIONS  # below the limit: cached


def test_cached_cos_sin_equal_direct_float64_rounded():
    enc = RotaryEncoding(8, 1)
    pos = torch.tensor([0, 1, 999, 5000])
    cos, sin = enc.cos_sin(pos, torch.float32)
    angles = pos.double()[:, None] * rope_inverse_frequencies(8)
    torch.testing.assert_close(cos, angles.cos().float(), rtol=0, atol=0)
    torch.testing.assert_close(sin, angles.sin().float(), rtol=0, atol=0)


@pytest.mark.parametrize("interleaved", [False, True])
def test_float_positions_equal_integer_positions_at_integer_values(interleaved):
    enc = RotaryEncoding(16, 2, interleaved=interleaved)
    q = torch.randn(1, 2, 4, 8)
    ints = torch.tensor([0, 5, 2047, 9000])
    a, _ = enc.rotate(q, q, ints, ints)
    b, _ = enc.rotate(q, q, ints.float(), ints.float())
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_float_positions_interpolate():
    enc = RotaryEncoding(8, 1)
    q = torch.randn(1, 1, 2, 8, dtype=torch.float64)
    q_rot, _ = enc.rotate(q, q, torch.tensor([0.5, 2.25]), torch.tensor([0.5, 2.25]))
    torch.testing.assert_close(q_rot, reference_rope(q, [0.5, 2.25]), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------------------------------ xPos
def xpos_reference_scale(positions, rotary_dim, scale_base=512.0, inverse=False):
    zeta = [(2 * k / rotary_dim + 0.4) / 1.4 for k in range(rotary_dim // 2)]
    sign = -1.0 if inverse else 1.0
    return [[z ** (sign * p / scale_base) for z in zeta] for p in positions]


@pytest.mark.parametrize("interleaved", [False, True])
def test_xpos_matches_reference(interleaved):
    enc = RotaryEncoding(16, 2, xpos=True, interleaved=interleaved)
    q = torch.randn(1, 2, 3, 8, dtype=torch.float64)
    k = torch.randn(1, 2, 3, 8, dtype=torch.float64)
    positions = [0, 100, 2000]
    q_rot, k_rot = enc.rotate(q, k, torch.tensor(positions), torch.tensor(positions))
    q_ref = reference_rope(q, positions, interleaved=interleaved, scale=xpos_reference_scale(positions, 8))
    k_ref = reference_rope(
        k, positions, interleaved=interleaved, scale=xpos_reference_scale(positions, 8, inverse=True)
    )
    torch.testing.assert_close(q_rot, q_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(k_rot, k_ref, rtol=1e-10, atol=1e-12)


def test_xpos_scores_depend_only_on_relative_position():
    enc = RotaryEncoding(16, 1, xpos=True, xpos_scale_base=64.0)
    q = torch.randn(1, 1, 1, 16, dtype=torch.float64)
    k = torch.randn(1, 1, 1, 16, dtype=torch.float64)

    def score(i, j):
        q_rot, k_rot = enc.rotate(q, k, torch.tensor([i]), torch.tensor([j]))
        return (q_rot * k_rot).sum().item()

    for i, j in [(0, 0), (3, 1), (40, 0)]:
        for shift in (1, 50, 1000):
            assert score(i + shift, j + shift) == pytest.approx(score(i, j), rel=1e-9, abs=1e-12)


def test_xpos_query_times_key_scale_is_zeta_power_of_distance():
    enc = RotaryEncoding(8, 1, xpos=True, xpos_scale_base=16.0)
    zeta = xpos_decay(8)
    for i, j in [(5, 2), (105, 102), (40, 0)]:
        q_scale = enc._xpos_scale(torch.tensor([i]), torch.float64)[0]
        k_scale = enc._xpos_scale(torch.tensor([j]), torch.float64)[0].reciprocal()
        torch.testing.assert_close(q_scale * k_scale, zeta ** ((i - j) / 16.0), rtol=1e-12, atol=0)


def test_xpos_requires_causal():
    with pytest.raises(ValueError, match="causal"):
        RotaryEncoding(16, 2, xpos=True, causal=False)
    RotaryEncoding(16, 2, xpos=False, causal=False)  # plain RoPE is fine bidirectionally


def test_xpos_positions_past_max_raise():
    enc = RotaryEncoding(16, 2, xpos=True)
    # zeta_min = 0.4 / 1.4; factor zeta_min ** (-t / 512) must stay below exp(85)
    assert enc.xpos_max_position == int(85.0 * 512.0 / -math.log(0.4 / 1.4))
    q = torch.randn(1, 2, 1, 8)
    ok = torch.tensor([enc.xpos_max_position])
    q_rot, k_rot = enc.rotate(q, q, ok, ok)
    assert torch.isfinite(q_rot).all() and torch.isfinite(k_rot).all()
    bad = torch.tensor([enc.xpos_max_position + 1])
    with pytest.raises(ValueError, match="xpos_max_position"):
        enc.rotate(q, q, bad, bad)


# ------------------------------------------------------------------------------- constructor
def test_rope_constructor_errors():
    with pytest.raises(ValueError, match="head_dim"):
        RotaryEncoding(12, 4)  # head_dim 3 is odd
    with pytest.raises(ValueError, match="rotary_fraction"):
        RotaryEncoding(16, 2, rotary_fraction=0)
    with pytest.raises(ValueError, match="rotary_fraction"):
        RotaryEncoding(16, 2, rotary_fraction=1.5)
    with pytest.raises(ValueError, match="rotary_fraction"):
        RotaryEncoding(16, 2, rotary_fraction=-0.5)
    with pytest.raises(ValueError, match="rotary_fraction"):
        RotaryEncoding(16, 2, rotary_fraction=0.1)  # int(0.1 * 8) = 0 rotated dims
    with pytest.raises(ValueError, match="rotary_fraction"):
        RotaryEncoding(48, 2, rotary_fraction=0.125)  # int(0.125 * 24) = 3, odd
    with pytest.raises(TypeError, match="rotary_fraction"):
        RotaryEncoding(16, 2, rotary_fraction="0.5")
    with pytest.raises(ValueError, match="base"):
        RotaryEncoding(16, 2, base=-10_000.0)
    with pytest.raises(ValueError, match="base"):
        RotaryEncoding(16, 2, base=float("inf"))
    with pytest.raises(TypeError, match="interleaved"):
        RotaryEncoding(16, 2, interleaved=1)
    with pytest.raises(TypeError, match="xpos"):
        RotaryEncoding(16, 2, xpos="yes")
    with pytest.raises(ValueError, match="xpos_scale_base"):
        RotaryEncoding(16, 2, xpos=True, xpos_scale_base=0.0)
    with pytest.raises(TypeError, match="dim"):
        RotaryEncoding(16.0, 2)
    with pytest.raises(ValueError, match="num_heads"):
        RotaryEncoding(16, 3)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("batched_angles", [False, True])
def test_inference_fast_path_equals_autograd_path(interleaved, batched_angles):
    from pe_toolkit.encoders.rotary import apply_rope

    x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
    shape = (2, 1, 5, 4) if batched_angles else (5, 4)
    angles = torch.randn(shape, dtype=torch.float64)
    cos, sin = angles.cos(), angles.sin()
    with torch.no_grad():
        fast = apply_rope(x, cos, sin, interleaved=interleaved)
    slow = apply_rope(x.clone().requires_grad_(), cos, sin, interleaved=interleaved)
    assert slow.requires_grad and not fast.requires_grad
    torch.testing.assert_close(fast, slow.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotation_gradient_is_the_inverse_rotation(interleaved):
    from pe_toolkit.encoders.rotary import apply_rope

    angles = torch.randn(5, 3, dtype=torch.float64)
    x = torch.randn(2, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: apply_rope(t, angles.cos(), angles.sin(), interleaved=interleaved), (x,))
    # learned angles take the plain autograd path and get gradients too
    theta = angles.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a: apply_rope(x.detach(), a.cos(), a.sin(), interleaved=interleaved), (theta,)
    )
