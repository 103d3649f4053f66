"""Exact values of the additive relative biases: T5, ALiBi, KERPLE, FIRE, Sandwich."""

import math

import pytest
import torch

from pe_toolkit.encoders.bias import (
    FIRE,
    KERPLE,
    ALiBi,
    Sandwich,
    T5RelativeBias,
    alibi_slopes,
    t5_relative_position_bucket,
)


def bias_of(enc, q_pos, k_pos=None, dtype=torch.float64):
    """Call the ``bias`` hook with dummy q/k of ``dtype`` (the bias only reads their dtype)."""
    q_pos = torch.as_tensor(q_pos)
    k_pos = q_pos if k_pos is None else torch.as_tensor(k_pos)
    q = torch.zeros(1, enc.num_heads, q_pos.shape[-1], enc.head_dim, dtype=dtype)
    k = torch.zeros(1, enc.num_heads, k_pos.shape[-1], enc.head_dim, dtype=dtype)
    return enc.bias(q, k, q_pos, k_pos)


# -------------------------------------------------------------------------------------------- T5
# bucket(j - i), derived by hand from the T5 formula. Causal, 32 buckets, max_distance 128:
# distances n < 16 are exact; otherwise 16 + floor(log(n / 16) / log(128 / 16) * 16), capped at 31;
# future keys (j > i) all go to bucket 0.
T5_CAUSAL = {
    5: 0, 1: 0, 0: 0, -1: 1, -7: 7, -15: 15, -16: 16,
    -20: 17,  # 16 + floor(1.717)
    -32: 21,  # 16 + floor(5.333)
    -64: 26,  # 16 + floor(10.667)
    -100: 30,  # 16 + floor(14.10)
    -127: 31,  # 16 + floor(15.94)
    -128: 31, -129: 31, -1000: 31,  # beyond max_distance: the last bucket
}
# Bidirectional: 16 buckets per direction (keys after the query add 16), 8 exact, then
# 8 + floor(log(n / 8) / log(128 / 8) * 8), capped at 15.
T5_BIDIRECTIONAL = {
    0: 0, -3: 3, 3: 19, -7: 7, 7: 23, -8: 8, 8: 24,
    -12: 9, 12: 25,  # 8 + floor(1.170)
    -50: 13, 50: 29,  # 8 + floor(5.288)
    -100: 15, 100: 31,  # 8 + floor(7.288)
    -127: 15, -500: 15, 500: 31, 10_000: 31,
}


@pytest.mark.parametrize(("bidirectional", "table"), [(False, T5_CAUSAL), (True, T5_BIDIRECTIONAL)])
def test_t5_buckets_literal(bidirectional, table):
    rel = torch.tensor(list(table))
    buckets = t5_relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=32, max_distance=128)
    assert buckets.tolist() == list(table.values())


def test_t5_buckets_small_config_literal():
    # causal, 8 buckets, max_distance 20: exact 0..3, then 4 + floor(log(n / 4) / log(5) * 4), cap 7
    rel = torch.tensor([0, -3, -4, -5, -8, -10, -19, -20, -50, 3])
    buckets = t5_relative_position_bucket(rel, bidirectional=False, num_buckets=8, max_distance=20)
    assert buckets.tolist() == [0, 3, 4, 4, 5, 6, 7, 7, 7, 0]


def test_t5_buckets_match_huggingface():
    modeling_t5 = pytest.importorskip("transformers.models.t5.modeling_t5")
    rel = torch.arange(-400, 401)
    for bidirectional in (False, True):
        for num_buckets, max_distance in [(32, 128), (16, 64), (8, 20)]:
            ours = t5_relative_position_bucket(
                rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
            )
            theirs = modeling_t5.T5Attention._relative_position_bucket(
                rel, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance
            )
            assert torch.equal(ours, theirs), (bidirectional, num_buckets, max_distance)


def test_t5_bias_reads_table_by_bucket():
    enc = T5RelativeBias(8, 2, num_buckets=8, max_distance=20)
    assert enc.bidirectional is False
    with torch.no_grad():
        enc.relative_attention_bias.weight.copy_(
            torch.tensor([[10.0 * b, -10.0 * b] for b in range(8)])
        )
    bias = bias_of(enc, [0, 1, 2, 30])
    assert bias.shape == (1, 2, 4, 4)
    # rows i, columns j; bucket(j - i) causal: future -> 0, distances 1, 2 exact, 28 / 29 / 30 -> 7
    buckets = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0], [2, 1, 0, 0], [7, 7, 7, 0]], dtype=torch.float64)
    torch.testing.assert_close(bias[0, 0], 10.0 * buckets, rtol=0, atol=0)
    torch.testing.assert_close(bias[0, 1], -10.0 * buckets, rtol=0, atol=0)


def test_t5_bidirectional_default_follows_causal():
    enc = T5RelativeBias(8, 1, causal=False)
    assert enc.bidirectional is True
    with torch.no_grad():
        enc.relative_attention_bias.weight.copy_(torch.arange(32.0)[:, None])
    bias = bias_of(enc, [0, 1, 2])[0, 0]
    # bucket(j - i): j - i > 0 adds 16
    torch.testing.assert_close(bias, torch.tensor([[0.0, 17, 18], [1, 0, 17], [2, 1, 0]], dtype=torch.float64))
    assert T5RelativeBias(8, 1, causal=True, bidirectional=True).bidirectional is True


def test_t5_init_std_and_name():
    enc = T5RelativeBias(256, 8)
    assert tuple(enc.relative_attention_bias.weight.shape) == (32, 8)
    assert enc.relative_attention_bias.weight.std().item() == pytest.approx(256**-0.5, rel=0.15)


def test_t5_float_positions_raise():
    enc = T5RelativeBias(8, 2)
    with pytest.raises(TypeError, match="integer"):
        bias_of(enc, [0.0, 1.0])


def test_t5_constructor_errors():
    with pytest.raises(ValueError, match="max_distance"):
        T5RelativeBias(8, 2, num_buckets=32, max_distance=16)  # causal: 16 exact buckets
    with pytest.raises(ValueError, match="max_distance"):
        T5RelativeBias(8, 2, num_buckets=32, max_distance=8, causal=False)  # bidirectional: 8 exact
    T5RelativeBias(8, 2, num_buckets=32, max_distance=9, causal=False)
    with pytest.raises(ValueError, match="num_buckets"):
        T5RelativeBias(8, 2, num_buckets=1)
    with pytest.raises(ValueError, match="num_buckets"):
        T5RelativeBias(8, 2, num_buckets=3, causal=False)  # 3 // 4 = 0 exact buckets
    with pytest.raises(TypeError, match="num_buckets"):
        T5RelativeBias(8, 2, num_buckets=32.0)
    with pytest.raises(ValueError, match="max_distance"):
        T5RelativeBias(8, 2, max_distance=0)
    with pytest.raises(TypeError, match="bidirectional"):
        T5RelativeBias(8, 2, bidirectional="yes")


# ----------------------------------------------------------------------------------------- ALiBi
ALIBI_SLOPES = {
    1: [2**-8],
    2: [2**-4, 2**-8],
    3: [2**-4, 2**-8, 2**-2],  # 2 heads' slopes + every other slope of 4 heads
    4: [1 / 4, 1 / 16, 1 / 64, 1 / 256],
    6: [1 / 4, 1 / 16, 1 / 64, 1 / 256, 1 / 2, 1 / 8],  # 4 heads' + 8 heads' slopes 0, 2
    8: [2**-1, 2**-2, 2**-3, 2**-4, 2**-5, 2**-6, 2**-7, 2**-8],
    12: [2**-1, 2**-2, 2**-3, 2**-4, 2**-5, 2**-6, 2**-7, 2**-8, 2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5],
    16: [2 ** (-h / 2) for h in range(1, 17)],
}


@pytest.mark.parametrize("num_heads", sorted(ALIBI_SLOPES))
def test_alibi_slopes_literal(num_heads):
    slopes = alibi_slopes(num_heads)
    assert slopes.dtype == torch.float64
    expected = torch.tensor(ALIBI_SLOPES[num_heads], dtype=torch.float64)
    torch.testing.assert_close(slopes, expected, rtol=1e-14, atol=0)


def test_alibi_bias_3x3_four_heads_literal():
    enc = ALiBi(16, 4)
    bias = bias_of(enc, [0, 1, 2])
    assert bias.shape == (1, 4, 3, 3)
    distance = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]], dtype=torch.float64)
    for h, m in enumerate([1 / 4, 1 / 16, 1 / 64, 1 / 256]):
        torch.testing.assert_close(bias[0, h], -m * distance, rtol=0, atol=0)
    # written out for head 0
    torch.testing.assert_close(
        bias[0, 0],
        torch.tensor([[0.0, -0.25, -0.5], [-0.25, 0.0, -0.25], [-0.5, -0.25, 0.0]], dtype=torch.float64),
        rtol=0, atol=0,
    )


def test_alibi_float32_rectangular_and_float_positions():
    enc = ALiBi(8, 2)  # slopes 1/16, 1/256
    bias = bias_of(enc, [3], [0, 1, 2, 3], dtype=torch.float32)
    assert bias.dtype == torch.float32 and bias.shape == (1, 2, 1, 4)
    torch.testing.assert_close(bias[0, 0, 0], torch.tensor([-3 / 16, -2 / 16, -1 / 16, 0.0]), rtol=0, atol=0)
    half = bias_of(enc, [1.5], [0.0, 1.0])
    torch.testing.assert_close(half[0, 1, 0], torch.tensor([-1.5 / 256, -0.5 / 256], dtype=torch.float64))


def test_alibi_per_batch_positions():
    enc = ALiBi(4, 1)  # slope 1/256
    bias = bias_of(enc, torch.tensor([[0, 1], [0, 10]]))
    assert bias.shape == (2, 1, 2, 2)
    torch.testing.assert_close(bias[1, 0], torch.tensor([[0.0, -10 / 256], [-10 / 256, 0.0]], dtype=torch.float64))


def test_alibi_has_no_parameters():
    assert list(ALiBi(16, 4).parameters()) == []


# ---------------------------------------------------------------------------------------- KERPLE
def set_params(enc, **values):
    with torch.no_grad():
        for name, value in values.items():
            getattr(enc, name).copy_(torch.tensor(value))


def test_kerple_log_literal():
    enc = KERPLE(8, 2, variant="log")
    set_params(enc, r1=[1.0, 0.5], r2=[0.5, 2.0])
    bias = bias_of(enc, [0, 1, 3])
    distance = [[0, 1, 3], [1, 0, 2], [3, 2, 0]]
    for h, (r1, r2) in enumerate([(1.0, 0.5), (0.5, 2.0)]):
        expected = torch.tensor([[-r1 * math.log(1 + r2 * d) for d in row] for row in distance], dtype=torch.float64)
        torch.testing.assert_close(bias[0, h], expected, rtol=1e-7, atol=1e-7)


def test_kerple_power_literal():
    enc = KERPLE(8, 2, variant="power")
    set_params(enc, r1=[1.0, 0.3], r2=[0.5, 1.5])
    bias = bias_of(enc, [0, 1, 4])
    distance = [[0, 1, 4], [1, 0, 3], [4, 3, 0]]
    for h, (r1, r2) in enumerate([(1.0, 0.5), (0.3, 1.5)]):
        expected = torch.tensor([[-r1 * d**r2 for d in row] for row in distance], dtype=torch.float64)
        torch.testing.assert_close(bias[0, h], expected, rtol=1e-7, atol=1e-7)
    # e.g. head 0 at distance 4: -1 * 4 ** 0.5 = -2
    assert bias[0, 0, 0, 2].item() == pytest.approx(-2.0, rel=1e-7)


def test_kerple_float32():
    enc = KERPLE(8, 1, variant="log")
    set_params(enc, r1=[2.0], r2=[1.0])
    bias = bias_of(enc, [0, 1], dtype=torch.float32)
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias[0, 0], torch.tensor([[0.0, -2 * math.log(2)], [-2 * math.log(2), 0.0]]))


def test_kerple_parameters_are_clamped_in_formula():
    log = KERPLE(8, 1, variant="log")
    set_params(log, r1=[-1.0], r2=[0.0])  # both below eps = 1e-2
    torch.testing.assert_close(
        bias_of(log, [0, 2])[0, 0, 1, 0], torch.tensor(-0.01 * math.log(1 + 0.01 * 2), dtype=torch.float64)
    )
    assert log.r1.item() == -1.0  # the parameter itself is not mutated
    power = KERPLE(8, 1, variant="power")
    set_params(power, r1=[0.5], r2=[3.0])  # r2 capped at 2
    torch.testing.assert_close(bias_of(power, [0, 3])[0, 0, 1, 0], torch.tensor(-0.5 * 9.0, dtype=torch.float64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kerple_power_gradients_finite_at_distance_zero(dtype):
    enc = KERPLE(8, 2, variant="power")
    set_params(enc, r1=[0.7, 0.2], r2=[0.5, 1.3])
    bias = bias_of(enc, [0, 1, 2], dtype=dtype)  # the diagonal has distance 0
    bias.sum().backward()
    assert torch.isfinite(enc.r1.grad).all() and torch.isfinite(enc.r2.grad).all()
    # analytic: d/dr1 = -sum d^r2, d/dr2 = -r1 sum d^r2 log d over pairs with d > 0 (d = 1 four times,
    # d = 2 twice)
    for h, (r1, r2) in enumerate([(0.7, 0.5), (0.2, 1.3)]):
        assert enc.r1.grad[h].item() == pytest.approx(-(4 * 1 + 2 * 2**r2), rel=1e-5)
        assert enc.r2.grad[h].item() == pytest.approx(-r1 * 2 * 2**r2 * math.log(2), rel=1e-5)


def test_kerple_log_gradients():
    enc = KERPLE(8, 1, variant="log")
    set_params(enc, r1=[1.5], r2=[0.5])
    bias_of(enc, [0, 1]).sum().backward()
    # two pairs at distance 1: d/dr1 = -2 log(1.5), d/dr2 = -2 r1 / (1 + r2)
    assert enc.r1.grad.item() == pytest.approx(-2 * math.log(1.5), rel=1e-6)
    assert enc.r2.grad.item() == pytest.approx(-2 * 1.5 / 1.5, rel=1e-6)


def test_kerple_init_ranges():
    log = KERPLE(64, 64, variant="log")
    assert 0 <= log.r1.min() and log.r1.max() <= 2 and 0 <= log.r2.min() and log.r2.max() <= 1
    power = KERPLE(64, 64, variant="power")
    assert 0 <= power.r1.min() and power.r1.max() <= 1 and 0 <= power.r2.min() and power.r2.max() <= 2


def test_kerple_bad_variant():
    with pytest.raises(ValueError, match="variant"):
        KERPLE(8, 2, variant="gaussian")


# ------------------------------------------------------------------------------------------ FIRE
def fire_reference(enc: FIRE, q_pos: list[float], k_pos: list[float]) -> torch.Tensor:
    """b[h, i, j] = f(psi(i - j) / psi(max(i, L))) with psi(x) = log(|c x| + 1), f = the module's MLP."""
    w1 = enc.mlp[0].weight.detach().double()[:, 0]
    b1 = enc.mlp[0].bias.detach().double()
    w2 = enc.mlp[2].weight.detach().double()
    b2 = enc.mlp[2].bias.detach().double()
    c, threshold = enc.c.item(), abs(enc.threshold.item())
    out = torch.zeros(enc.num_heads, len(q_pos), len(k_pos), dtype=torch.float64)
    for a, i in enumerate(q_pos):
        for b, j in enumerate(k_pos):
            x = math.log(abs(c * (i - j)) + 1) / (math.log(abs(c * max(i, threshold)) + 1) + enc.eps)
            hidden = torch.relu(w1 * x + b1)
            out[:, a, b] = w2 @ hidden + b2
    return out


def test_fire_matches_reference_below_and_above_threshold():
    enc = FIRE(8, 2, init_c=0.1, init_threshold=4.0, mlp_width=8)
    positions = [0, 1, 2, 5, 9, 20]  # i < L and i > L
    bias = bias_of(enc, positions)
    assert bias.shape == (1, 2, 6, 6)
    torch.testing.assert_close(bias[0], fire_reference(enc, positions, positions), rtol=1e-6, atol=1e-6)


def test_fire_normalized_distance_literal():
    enc = FIRE(8, 1, init_c=1.0, init_threshold=3.0, eps=1e-300)
    x = enc.normalized_distance(torch.tensor([1, 7]), torch.tensor([0, 1]), torch.float64)
    # rows i = 1 (normaliser max(1, 3) = 3) and i = 7 (normaliser 7)
    expected = torch.tensor(
        [[math.log(2) / math.log(4), 0.0], [math.log(8) / math.log(8), math.log(7) / math.log(8)]],
        dtype=torch.float64,
    )
    torch.testing.assert_close(x, expected, rtol=1e-12, atol=1e-12)


def test_fire_float32_and_learned_c_threshold():
    enc = FIRE(8, 2, init_c=0.3, init_threshold=2.0)
    with torch.no_grad():
        enc.c.fill_(0.7)
        enc.threshold.fill_(-6.0)  # |L| is used
    positions = [0, 3, 8, 11]
    bias = bias_of(enc, positions, dtype=torch.float32)
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias[0].double(), fire_reference(enc, positions, positions), rtol=1e-5, atol=1e-5)


def test_fire_rectangular_decoding_positions():
    enc = FIRE(8, 2, init_threshold=2.0)
    bias = bias_of(enc, [7], list(range(8)))
    torch.testing.assert_close(bias[0], fire_reference(enc, [7], list(range(8))), rtol=1e-6, atol=1e-6)


def test_fire_chunking_over_rows_does_not_change_values():
    enc = FIRE(8, 2, mlp_width=4, init_threshold=3.0)
    positions = torch.arange(7)
    whole = bias_of(enc, positions)
    enc._rows_per_chunk_elems = 7 * 4 * 2  # 2 rows per chunk (7 keys x 4 hidden units)
    chunked = bias_of(enc, positions)
    enc._rows_per_chunk_elems = 1  # one row per chunk
    single = bias_of(enc, positions)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=0)
    torch.testing.assert_close(single, whole, rtol=0, atol=0)
    torch.testing.assert_close(single[0], fire_reference(enc, list(range(7)), list(range(7))), rtol=1e-6, atol=1e-6)
    batched = bias_of(enc, torch.stack((positions, positions + 4)))  # per-batch positions, chunked too
    assert batched.shape == (2, 2, 7, 7)
    torch.testing.assert_close(batched[1], fire_reference(enc, list(range(4, 11)), list(range(4, 11))),
                               rtol=1e-6, atol=1e-6)


def test_fire_gradients_reach_all_parameters():
    enc = FIRE(8, 2, init_threshold=2.0)
    bias_of(enc, torch.arange(5), dtype=torch.float32).sum().backward()
    for name, p in enc.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert enc.c.grad.item() != 0.0 and enc.threshold.grad.item() != 0.0


def fire_with_units(units: list[tuple[float, float]], heads: int = 2) -> FIRE:
    """A FIRE whose hidden units have the given ``(W1, b1)``.

    c = 1 and L = 4: ``x = log(1 + |i - j|) / log(1 + max(i, 4))``."""
    enc = FIRE(8, heads, mlp_width=len(units), init_c=1.0, init_threshold=4.0)
    with torch.no_grad():
        enc.mlp[0].weight.copy_(torch.tensor([[w] for w, _ in units]))
        enc.mlp[0].bias.copy_(torch.tensor([b for _, b in units]))
        enc.mlp[2].weight.copy_(torch.linspace(-1.0, 1.5, heads * len(units)).view(heads, len(units)))
        enc.mlp[2].bias.copy_(torch.linspace(0.3, -0.2, heads))
    return enc


def test_fire_input_bound_is_the_largest_input_over_the_pairs():
    enc = FIRE(8, 2, init_c=0.3, init_threshold=3.0)
    q_pos, k_pos = torch.tensor([0, 2, 5, 9]), torch.tensor([0, 1, 4, 6, 9, 12])
    x = enc.normalized_distance(q_pos, k_pos, torch.float64)
    assert enc.input_bound(q_pos, k_pos).item() == pytest.approx(x.max().item(), rel=1e-12)
    blocks = [(0, 2, 0, 2), (2, 4, 1, 5)]  # queries 0-1 see keys 0-1; queries 2-3 see keys 1-4
    assert enc.input_bound(q_pos, k_pos, blocks).item() == pytest.approx(
        max(x[:2, :2].max().item(), x[2:, 1:5].max().item()), rel=1e-12)
    batched = torch.stack((q_pos, q_pos + 3))
    assert enc.input_bound(batched, batched).item() == pytest.approx(
        max(enc.normalized_distance(p, p, torch.float64).max().item() for p in batched), rel=1e-12)


def test_fire_kinked_units_fold_the_linear_and_the_zero_ones():
    # causal pairs of positions 0-7: x in [0, log 8 / log 8 = 1]; all pairs (j > i too): up to log 8 / log 5
    units = [(1.0, 0.5),    # positive on [0, x_max]: linear
             (-1.0, -0.1),  # non-positive: zero
             (2.0, -1.0),   # kink at x = 0.5: kept
             (0.0, 0.7),    # constant: linear
             (-1.0, 1.2),   # kink at 1.2: kept over all pairs (x_max 1.29), linear over causal pairs
             (0.0, 0.0)]    # relu(0) = 0: zero
    enc = fire_with_units(units)
    positions = torch.arange(8)
    line, kept = enc.kinked_units(positions, positions)
    assert line.tolist() == [True, False, False, True, False, False]
    assert kept.tolist() == [2, 4, 6, 6]  # padded with mlp_width (a zero unit) to a multiple of 4
    causal = [(i, i + 1, 0, i + 1) for i in range(8)]
    line, kept = enc.kinked_units(positions, positions, causal)
    assert line.tolist() == [True, False, False, True, True, False]
    assert kept.tolist() == [2, 6, 6, 6]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fire_bias_function_folded_equals_the_mlp_with_gradients(dtype):
    enc = fire_with_units([(1.0, 0.5), (-1.0, -0.1), (2.0, -1.0), (0.0, 0.7), (-1.0, 1.2), (0.5, -0.3)]).to(dtype)
    positions = torch.arange(8)
    q = torch.zeros(1, 2, 8, 4, dtype=dtype)
    b, h = torch.zeros(1, 1, 1, 1, dtype=torch.long), torch.arange(2).view(1, 2, 1, 1)
    i, j = positions.view(1, 1, 8, 1), positions.view(1, 1, 1, 8)
    folded = enc.bias_function(q, q, positions, positions)(b, h, i, j)
    full = enc.score(h, positions.view(1, 1, 8, 1), positions.view(1, 1, 1, 8), dtype, 8)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(folded, full, **tol)
    grad_out = torch.randn_like(full)
    params = list(enc.parameters())
    for got, want in zip(torch.autograd.grad(folded, params, grad_out), torch.autograd.grad(full, params, grad_out)):
        torch.testing.assert_close(got, want, **tol)
    # within causal blocks: equal on the causal pairs only (unit 4 folded as linear there)
    causal = enc.bias_function(q, q, positions, positions).within([(r, r + 1, 0, r + 1) for r in range(8)])
    below = torch.ones(8, 8, dtype=torch.bool).tril()
    torch.testing.assert_close(causal(b, h, i, j)[..., below], full[..., below], **tol)
    assert not torch.allclose(causal(b, h, i, j)[..., ~below], full[..., ~below])


def test_fire_with_every_unit_kinked_uses_the_plain_mlp():
    enc = fire_with_units([(2.0, -1.0), (-1.0, 0.5), (1.0, -0.2), (-3.0, 1.0)])  # kinks at 0.5, 0.5, 0.2, 0.33
    positions = torch.arange(8)
    assert enc.kinked_units(positions, positions)[1].tolist() == [0, 1, 2, 3]
    q = torch.zeros(1, 2, 8, 4)
    fn = enc.bias_function(q, q, positions, positions)
    assert fn.__qualname__.startswith("PositionBiasEncoding.bias_function")  # no folding work per evaluation
    b, h = torch.zeros(1, 1, 1, 1, dtype=torch.long), torch.arange(2).view(1, 2, 1, 1)
    i, j = positions.view(1, 1, 8, 1), positions.view(1, 1, 1, 8)
    torch.testing.assert_close(fn(b, h, i, j), enc.score(h, i, j, torch.float32, 8), rtol=0, atol=0)
    assert callable(fn.within)


def test_fire_folded_bias_gradcheck():
    """float64 gradcheck of the folded function in every parameter (gradcheck perturbs the parameters in place,
    which the function reads at evaluation time); one unit of each kind."""
    enc = fire_with_units([(1.0, 0.5), (2.0, -1.0), (-1.5, 0.8), (0.3, -0.9)]).double()
    positions = torch.tensor([0, 1, 3, 6, 10])
    q = torch.zeros(1, 2, 5, 4, dtype=torch.float64)
    fn = enc.bias_function(q, q, positions, positions)
    assert enc.kinked_units(positions, positions)[1].tolist() == [1, 2, 4, 4]
    b, h = torch.zeros(1, 1, 1, 1, dtype=torch.long), torch.arange(2).view(1, 2, 1, 1)
    i, j = torch.arange(5).view(1, 1, 5, 1), torch.arange(5).view(1, 1, 1, 5)
    assert torch.autograd.gradcheck(lambda *params: fn(b, h, i, j), tuple(enc.parameters()))


def test_fire_constructor_errors():
    with pytest.raises(ValueError, match="mlp_width"):
        FIRE(8, 2, mlp_width=0)
    with pytest.raises(TypeError, match="mlp_width"):
        FIRE(8, 2, mlp_width=3.5)
    with pytest.raises(ValueError, match="init_c"):
        FIRE(8, 2, init_c=-0.1)
    with pytest.raises(ValueError, match="init_threshold"):
        FIRE(8, 2, init_threshold=0.0)
    with pytest.raises(ValueError, match="eps"):
        FIRE(8, 2, eps=-1e-6)


# -------------------------------------------------------------------------------------- Sandwich
def test_sandwich_literal_formula():
    enc = Sandwich(8, 2, sandwich_dim=4)
    # d' = 4: w_k = 10000 ** (-2k / 4) for k = 1, 2 -> 0.01, 0.0001; head h divides by 8h / H = 4h
    bias = bias_of(enc, [0, 1, 5])
    for h, compress in enumerate([4.0, 8.0]):
        for a, i in enumerate([0, 1, 5]):
            for b, j in enumerate([0, 1, 5]):
                d = i - j
                expected = (math.cos(d * 0.01) + math.cos(d * 0.0001) - 2.0) / compress
                assert bias[0, h, a, b].item() == pytest.approx(expected, rel=1e-12, abs=1e-15)
    # distance 0 gives 0; others are negative
    assert bias[0, :, 0, 0].eq(0).all() and (bias[0, :, 0, 2] < 0).all()


def test_sandwich_default_dim_and_base():
    enc = Sandwich(6, 3, base=100.0)  # d' = dim = 6
    assert enc.sandwich_dim == 6
    bias = bias_of(enc, [0, 3])
    d = 3
    kernel = sum(math.cos(d / 100.0 ** (2 * k / 6)) for k in (1, 2, 3)) - 3.0
    for h in range(3):
        assert bias[0, h, 1, 0].item() == pytest.approx(kernel / (8 * (h + 1) / 3), rel=1e-12)
        assert bias[0, h, 0, 1].item() == pytest.approx(kernel / (8 * (h + 1) / 3), rel=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sandwich_tabulated_and_direct_paths_agree(dtype):
    enc = Sandwich(16, 2, sandwich_dim=8)
    sparse = torch.tensor([0, 1000, 5000, 20_000])  # spread out: computed directly
    dense = torch.arange(6)  # contiguous: tabulated
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    for positions in (sparse, dense):
        bias = bias_of(enc, positions, dtype=dtype)
        assert bias.dtype == dtype
        p = positions.tolist()
        expected = torch.tensor(
            [
                [[(sum(math.cos((i - j) / 10_000 ** (2 * k / 8)) for k in range(1, 5)) - 4) / (4.0 * h)
                  for j in p] for i in p]
                for h in (1, 2)
            ],
            dtype=torch.float64,
        )
        torch.testing.assert_close(bias[0].double(), expected, **tol)


def test_sandwich_float_positions():
    enc = Sandwich(4, 1, sandwich_dim=2)  # one frequency 10000 ** -1; head scale 8
    bias = bias_of(enc, [0.5], [0.0])
    assert bias[0, 0, 0, 0].item() == pytest.approx((math.cos(0.5e-4) - 1) / 8, rel=1e-9)


def test_sandwich_constructor_errors():
    with pytest.raises(ValueError, match="sandwich_dim"):
        Sandwich(8, 2, sandwich_dim=5)
    with pytest.raises(ValueError, match="sandwich_dim"):
        Sandwich(8, 2, sandwich_dim=0)
    with pytest.raises(TypeError, match="sandwich_dim"):
        Sandwich(8, 2, sandwich_dim=4.0)
    with pytest.raises(ValueError, match="base"):
        Sandwich(8, 2, base=-1.0)


# ------------------------------------------------------------------------------ shared behaviour
@pytest.mark.parametrize(
    "make",
    [
        lambda: T5RelativeBias(8, 2),
        lambda: ALiBi(8, 2),
        lambda: KERPLE(8, 2),
        lambda: KERPLE(8, 2, variant="power"),
        lambda: FIRE(8, 2),
        lambda: Sandwich(8, 2),
    ],
)
def test_explicit_default_positions_and_shift(make):
    enc = make()
    with torch.no_grad():
        a = bias_of(enc, torch.arange(5))
        assert a.shape == (1, 2, 5, 5)
        b = bias_of(enc, torch.arange(5).unsqueeze(0).expand(3, 5))
        assert b.shape == (3, 2, 5, 5)
        torch.testing.assert_close(b, a.expand(3, -1, -1, -1), rtol=0, atol=0)
        if not isinstance(enc, FIRE):  # FIRE normalises by the query's own position
            torch.testing.assert_close(bias_of(enc, torch.arange(5) + 13), a, rtol=1e-12, atol=1e-12)


def test_sandwich_float32_matches_float64_at_long_range():
    enc = Sandwich(512, 8)
    pos = torch.arange(0, 16_384, 64)
    b32 = enc.position_bias(pos, pos, torch.float32)
    b64 = enc.position_bias(pos, pos, torch.float64)
    torch.testing.assert_close(b32.double(), b64, atol=1e-4, rtol=1e-6)
