"""Exact values of the absolute encoders (``embed`` hook): sinusoidal, scaled_sinusoidal, learned."""

import math

import pytest
import torch

from pe_toolkit.encoders.absolute import (
    LearnedEncoding,
    ScaledSinusoidalEncoding,
    SinusoidalEncoding,
    sinusoidal_table,
)


def reference_sinusoid(t: float, dim: int, base: float = 10_000.0) -> list[float]:
    """Vaswani et al. 2017, Sec. 3.5: PE(t, 2k) = sin(t / base^(2k/d)), PE(t, 2k+1) = cos(same)."""
    row = []
    for k in range(dim // 2):
        angle = t / base ** (2 * k / dim)
        row += [math.sin(angle), math.cos(angle)]
    return row


# ------------------------------------------------------------------------------------ sinusoidal
def test_sinusoidal_table_literal_values():
    table = sinusoidal_table(torch.tensor([0, 1, 2]), 4, dtype=torch.float64)
    # dim 4: w_0 = 1, w_1 = 10000 ** (-2/4) = 0.01; layout sin, cos, sin, cos (interleaved, not halves)
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [math.sin(1.0), math.cos(1.0), math.sin(0.01), math.cos(0.01)],
            [math.sin(2.0), math.cos(2.0), math.sin(0.02), math.cos(0.02)],
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(table, expected, rtol=0, atol=1e-15)


@pytest.mark.parametrize("position", [0, 1, 7, 100, 4097, 123_456])
def test_sinusoidal_table_matches_reference_at_positions(position):
    dim, base = 16, 10_000.0
    table = sinusoidal_table(torch.tensor([position]), dim, base, dtype=torch.float64)[0]
    expected = torch.tensor(reference_sinusoid(position, dim, base), dtype=torch.float64)
    torch.testing.assert_close(table, expected, rtol=0, atol=1e-9)


def test_sinusoidal_float32_at_large_position_is_rounded_not_degraded():
    # angles are formed in float64, so float32 output equals the float64 value rounded once
    table = sinusoidal_table(torch.tensor([50_000]), 8, dtype=torch.float32)[0]
    expected = torch.tensor(reference_sinusoid(50_000, 8), dtype=torch.float64)
    torch.testing.assert_close(table.double(), expected, rtol=0, atol=1e-7)


def test_sinusoidal_custom_base():
    table = sinusoidal_table(torch.tensor([3]), 4, base=100.0, dtype=torch.float64)[0]
    expected = torch.tensor([math.sin(3.0), math.cos(3.0), math.sin(0.3), math.cos(0.3)], dtype=torch.float64)
    torch.testing.assert_close(table, expected, rtol=0, atol=1e-15)


def test_sinusoidal_embed_adds_table_to_x():
    enc = SinusoidalEncoding(8, 2)
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    positions = torch.tensor([0, 3, 4, 9, 20])
    out = enc.embed(x, positions)
    expected = x + torch.tensor([reference_sinusoid(int(t), 8) for t in positions], dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_sinusoidal_embed_per_batch_positions():
    enc = SinusoidalEncoding(4, 1)
    x = torch.zeros(2, 2, 4, dtype=torch.float64)
    positions = torch.tensor([[0, 1], [5, 6]])
    out = enc.embed(x, positions)
    expected = torch.tensor([[reference_sinusoid(t, 4) for t in row] for row in [[0, 1], [5, 6]]], dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)


def test_sinusoidal_embed_keeps_dtype_and_float_positions_interpolate():
    enc = SinusoidalEncoding(4, 1)
    x = torch.zeros(1, 2, 4, dtype=torch.bfloat16)
    assert enc.embed(x, torch.arange(2)).dtype == torch.bfloat16
    half = enc.embed(torch.zeros(1, 1, 4, dtype=torch.float64), torch.tensor([0.5]))[0, 0]
    expected = torch.tensor(reference_sinusoid(0.5, 4), dtype=torch.float64)
    torch.testing.assert_close(half, expected, rtol=0, atol=1e-15)


def test_sinusoidal_odd_dim_raises():
    with pytest.raises(ValueError, match="dim must be even"):
        SinusoidalEncoding(5, 1)


def test_sinusoidal_bad_base_raises():
    with pytest.raises(ValueError, match="base"):
        SinusoidalEncoding(8, 2, base=-10.0)
    with pytest.raises(ValueError, match="base"):
        SinusoidalEncoding(8, 2, base=0)
    with pytest.raises(TypeError, match="base"):
        SinusoidalEncoding(8, 2, base="10000")


# ----------------------------------------------------------------------------- scaled sinusoidal
@pytest.mark.parametrize("dim", [4, 16, 64])
def test_scaled_sinusoidal_gain_init(dim):
    enc = ScaledSinusoidalEncoding(dim, 2)
    assert isinstance(enc.gain, torch.nn.Parameter) and enc.gain.requires_grad
    assert enc.gain.shape == ()
    assert enc.gain.item() == pytest.approx(dim**-0.5, rel=1e-7)


def test_scaled_sinusoidal_embed_value_and_custom_gain():
    enc = ScaledSinusoidalEncoding(4, 1, init_gain=2.0)
    assert enc.gain.item() == 2.0
    x = torch.ones(1, 2, 4, dtype=torch.float64)
    out = enc.embed(x, torch.tensor([0, 1]))
    expected = 1.0 + 2.0 * torch.tensor([reference_sinusoid(0, 4), reference_sinusoid(1, 4)], dtype=torch.float64)
    torch.testing.assert_close(out[0], expected, rtol=0, atol=1e-12)
    out.sum().backward()
    # d/dg sum(x + g pe) = sum(pe)
    torch.testing.assert_close(enc.gain.grad.double(), expected.sub(1.0).div(2.0).sum(), rtol=1e-6, atol=1e-6)


def test_scaled_sinusoidal_default_embed_uses_inverse_sqrt_dim():
    enc = ScaledSinusoidalEncoding(16, 4)
    x = torch.zeros(1, 1, 16, dtype=torch.float64)
    out = enc.embed(x, torch.tensor([3]))[0, 0]
    expected = 16**-0.5 * torch.tensor(reference_sinusoid(3, 16), dtype=torch.float64)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-8)


def test_scaled_sinusoidal_bad_gain_raises():
    with pytest.raises(TypeError, match="init_gain"):
        ScaledSinusoidalEncoding(8, 2, init_gain="big")
    with pytest.raises(ValueError, match="init_gain"):
        ScaledSinusoidalEncoding(8, 2, init_gain=float("nan"))


# --------------------------------------------------------------------------------------- learned
def test_learned_lookup_values():
    enc = LearnedEncoding(4, 2, max_len=5)
    with torch.no_grad():
        enc.table.weight.copy_(torch.arange(20, dtype=torch.float32).view(5, 4))
    x = torch.full((1, 3, 4), 0.5)
    out = enc.embed(x, torch.tensor([4, 0, 2]))
    expected = torch.tensor([[16.5, 17.5, 18.5, 19.5], [0.5, 1.5, 2.5, 3.5], [8.5, 9.5, 10.5, 11.5]])
    torch.testing.assert_close(out[0], expected, rtol=0, atol=0)


def test_learned_per_batch_positions():
    enc = LearnedEncoding(2, 1, max_len=3)
    with torch.no_grad():
        enc.table.weight.copy_(torch.tensor([[0.0, 0.0], [1.0, 10.0], [2.0, 20.0]]))
    out = enc.embed(torch.zeros(2, 2, 2), torch.tensor([[0, 1], [2, 2]]))
    torch.testing.assert_close(
        out, torch.tensor([[[0.0, 0.0], [1.0, 10.0]], [[2.0, 20.0], [2.0, 20.0]]]), rtol=0, atol=0
    )


def test_learned_init_std():
    enc = LearnedEncoding(64, 4, max_len=256, init_std=0.02)
    assert enc.table.weight.std().item() == pytest.approx(0.02, rel=0.05)


def test_learned_float_positions_raise_type_error():
    enc = LearnedEncoding(4, 1, max_len=8)
    with pytest.raises(TypeError, match="integer"):
        enc.embed(torch.zeros(1, 2, 4), torch.tensor([0.0, 1.0]))


@pytest.mark.parametrize("positions", [[0, 8], [-1, 0], [3, 100]])
def test_learned_out_of_range_raises_naming_max_len(positions):
    enc = LearnedEncoding(4, 1, max_len=8)
    with pytest.raises(ValueError, match=r"max_len=8"):
        enc.embed(torch.zeros(1, 2, 4), torch.tensor(positions))


def test_learned_last_position_is_valid():
    enc = LearnedEncoding(4, 1, max_len=8)
    out = enc.embed(torch.zeros(1, 1, 4), torch.tensor([7]))
    torch.testing.assert_close(out[0, 0], enc.table.weight[7], rtol=0, atol=0)


def test_learned_constructor_errors():
    with pytest.raises(TypeError, match="max_len"):
        LearnedEncoding(4, 1)  # max_len is required
    with pytest.raises(ValueError, match="max_len"):
        LearnedEncoding(4, 1, max_len=0)
    with pytest.raises(TypeError, match="max_len"):
        LearnedEncoding(4, 1, max_len=8.0)
    with pytest.raises(ValueError, match="init_std"):
        LearnedEncoding(4, 1, max_len=8, init_std=-0.1)


# ------------------------------------------------------------------------ base constructor checks
@pytest.mark.parametrize("cls", [SinusoidalEncoding, ScaledSinusoidalEncoding])
def test_base_constructor_errors(cls):
    with pytest.raises(TypeError, match="dim"):
        cls(8.0, 2)
    with pytest.raises(TypeError, match="dim"):
        cls(True, 1)
    with pytest.raises(ValueError, match="dim"):
        cls(0, 1)
    with pytest.raises(TypeError, match="num_heads"):
        cls(8, "2")
    with pytest.raises(ValueError, match="num_heads"):
        cls(8, 0)
    with pytest.raises(ValueError, match=r"num_heads \(3\) must divide dim \(8\)"):
        cls(8, 3)
    with pytest.raises(TypeError, match="causal"):
        cls(8, 2, causal=1)
    with pytest.raises(TypeError):
        cls(8, 2, 10_000.0)  # options are keyword-only
