"""Vision encoders: hand-computed values, per-axis shift invariance, M-RoPE on text, KV cache, gradients, errors."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.domains.vision import AxialRoPE, Learned2D, MixedRoPE, MRoPE, SinCos2D, mrope_positions
from pe_toolkit.encoders.multi_axis import axial_frequencies, default_sections
from pe_toolkit.nn.attention import positional_logits


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_registered_under_vision():
    assert pet.list_encoders(domain="vision") == ["learned_2d", "mrope", "rope_axial", "rope_mixed", "sincos_2d"]
    hooks = {name: pet.encoder_info(name).hooks for name in pet.list_encoders(domain="vision")}
    assert hooks == {"learned_2d": ("embed",), "mrope": ("rotate",), "rope_axial": ("rotate",),
                     "rope_mixed": ("rotate",), "sincos_2d": ("embed",)}
    assert [n for n in hooks if pet.encoder_info(n).relative] == ["mrope", "rope_axial", "rope_mixed"]


def test_axial_layouts_by_hand():
    # per_axis: each axis its own ladder base ** (-j / n); interleaved: one ladder base ** (-k / P) dealt in turn
    theta, axis = axial_frequencies((2, 2), 100.0, "per_axis")
    assert theta.tolist() == [1.0, 0.1, 1.0, 0.1] and axis.tolist() == [0, 0, 1, 1]
    theta, axis = axial_frequencies((2, 2), 10_000.0, "interleaved")
    torch.testing.assert_close(theta, torch.tensor([1.0, 0.01, 0.1, 0.001], dtype=torch.float64))
    assert axis.tolist() == [0, 0, 1, 1]
    theta, axis = axial_frequencies((1, 1, 2), 16.0, "sections")
    torch.testing.assert_close(theta, torch.tensor([1.0, 0.5, 0.25, 0.125], dtype=torch.float64))
    assert axis.tolist() == [0, 1, 2, 2]
    _, axis = axial_frequencies((2, 2, 2), 16.0, "sections_interleaved")
    assert axis.tolist() == [0, 1, 2, 0, 1, 2]
    assert default_sections(7, 3) == (3, 2, 2)


def test_axial_rotation_by_hand():
    enc = AxialRoPE(4, 1, base=100.0).double()  # head_dim 4: pair 0 turns with the row, pair 1 with the column
    q = torch.tensor([[[[1.0, 0.0, 0.0, 1.0]]]], dtype=torch.float64)  # half-split pairs (q0, q2), (q1, q3)
    rotated, _ = enc.rotate(q, q, torch.tensor([[0.3, -0.2]]), torch.tensor([[0.3, -0.2]]))
    a, b = 0.3, -0.2
    expected = torch.tensor([math.cos(a), -math.sin(b), math.sin(a), math.cos(b)], dtype=torch.float64)
    torch.testing.assert_close(rotated[0, 0, 0], expected)
    interleaved = AxialRoPE(4, 1, interleaved=True, scale=2.0).double()  # pairs (q0, q1), (q2, q3)
    rotated, _ = interleaved.rotate(q, q, torch.tensor([[0.3, -0.2]]), torch.tensor([[0.3, -0.2]]))
    expected = torch.tensor([math.cos(2 * a), math.sin(2 * a), -math.sin(2 * b), math.cos(2 * b)], dtype=torch.float64)
    torch.testing.assert_close(rotated[0, 0, 0], expected)


@pytest.mark.parametrize(("name", "options", "axes"), [
    ("rope_axial", {}, 2), ("rope_axial", {"axes": 3, "sections": (2, 3, 3)}, 3), ("rope_mixed", {}, 2),
    ("rope_mixed", {"axes": 3}, 3), ("mrope", {}, 3)])
def test_logits_shift_invariant_on_each_axis(name, options, axes):
    enc = pet.get_encoder(name, 64, 4, **options).double()
    q, k = torch.randn(2, 4, 5, 16, dtype=torch.float64), torch.randn(2, 4, 7, 16, dtype=torch.float64)
    q_pos, k_pos = torch.randn(2, 5, axes, dtype=torch.float64) * 4, torch.randn(2, 7, axes, dtype=torch.float64) * 4
    base = positional_logits(enc, q, k, q_pos, k_pos)
    for axis in range(axes):
        shift = torch.zeros(axes, dtype=torch.float64)
        shift[axis] = 3.7
        torch.testing.assert_close(positional_logits(enc, q, k, q_pos + shift, k_pos + shift), base)
        assert not torch.allclose(positional_logits(enc, q, k, q_pos, k_pos + shift), base)  # the axis is seen


def test_mixed_initialisation_is_the_papers():
    # init_random_2d_freqs (naver-ai/rope-vit): magnitudes theta ** (-4j / hd), j < hd / 4, at angle a_h then a_h + pi/2
    torch.manual_seed(3)
    enc = MixedRoPE(32, 2, base=10.0)
    torch.manual_seed(3)
    for head in range(2):
        a = float(torch.rand((), dtype=torch.float64)) * 2 * math.pi
        magnitude = 10.0 ** (-torch.arange(0, 16, 4, dtype=torch.float64) / 16)
        fx = torch.cat([magnitude * math.cos(a), magnitude * math.cos(math.pi / 2 + a)])
        fy = torch.cat([magnitude * math.sin(a), magnitude * math.sin(math.pi / 2 + a)])
        torch.testing.assert_close(enc.frequencies[head].double(), torch.stack([fx, fy], -1), atol=1e-6, rtol=1e-6)
    axial = MixedRoPE(32, 2, rotate=False)
    torch.testing.assert_close(axial.frequencies[0], AxialRoPE(32, 2, base=10.0).frequencies)


def test_mixed_frequencies_learn_and_diagonals_are_seen():
    enc = MixedRoPE(16, 2)
    q, pos = torch.randn(1, 2, 4, 8), torch.randn(4, 2)
    qr, kr = enc.rotate(q, q, pos, pos)
    (qr * kr.roll(1, dims=2)).sum().backward()
    assert enc.frequencies.grad is not None and enc.frequencies.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="grouped-query keys"):
        enc.rotate(q, torch.randn(1, 1, 4, 8), pos, pos)


def test_mrope_on_text_is_plain_rope():
    """t = h = w: every section turns by the same index, so M-RoPE equals 1-D RoPE on the same ladder."""
    ours, rope = MRoPE(64, 4, sections=(2, 3, 3)).double(), pet.get_encoder("rope", 64, 4).double()
    q, k = torch.randn(2, 4, 6, 16, dtype=torch.float64), torch.randn(2, 4, 6, 16, dtype=torch.float64)
    text = mrope_positions([("text", 6)])
    got = ours.rotate(q, k, text, text)
    want = rope.rotate(q, k, torch.arange(6), torch.arange(6))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_mrope_kv_cache_continues_text_after_an_image():
    model = pet.Transformer(pet.TransformerConfig(vocab_size=30, dim=32, num_heads=4, num_layers=2, causal=True,
                                                  encoding="mrope")).double().eval()
    positions = mrope_positions([("text", 2), ("image", (1, 2, 3)), ("text", 5)]).unsqueeze(0).expand(2, -1, -1)
    tokens = torch.randint(0, 30, (2, positions.shape[1]))
    with torch.no_grad():
        full = model(tokens, positions=positions)
        cache = model.new_cache()
        pieces = [model(tokens[:, :8], positions=positions[:, :8], cache=cache)]  # the prompt: text + image
        pieces += [model(tokens[:, t:t + 1], positions=positions[:, t:t + 1], cache=cache) for t in range(8, 11)]
        pieces.append(model(tokens[:, 11:], positions=positions[:, 11:], cache=cache))
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-10, rtol=1e-10)


def test_sincos_2d_by_hand():
    enc = SinCos2D(8, 2).double()  # n = 2 frequencies per axis: 1 and 10000 ** (-1/2)
    out = enc.embed(torch.zeros(1, 1, 8, dtype=torch.float64), torch.tensor([[2.0, 3.0]]))[0, 0]
    w = 10_000.0 ** -0.5
    expected = [math.sin(2), math.sin(2 * w), math.cos(2), math.cos(2 * w),
                math.sin(3), math.sin(3 * w), math.cos(3), math.cos(3 * w)]
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float64))


def test_learned_2d_is_the_table_at_integer_positions_and_learns():
    enc = Learned2D(6, 2, grid_size=(3, 4))
    positions = torch.tensor([[0, 0], [2, 3], [1, 2]])
    got = enc.embed(torch.zeros(1, 3, 6), positions)[0]
    torch.testing.assert_close(got, enc.table[:, positions[:, 0], positions[:, 1]].T, atol=1e-6, rtol=1e-6)
    enc.embed(torch.zeros(1, 3, 6), positions.float() + 0.25).square().sum().backward()
    assert enc.table.grad.abs().sum() > 0


@pytest.mark.parametrize(("build", "positions", "error", "match"), [
    (lambda: AxialRoPE(32, 4), torch.zeros(5, 3), ValueError, r"rope_axial: q_pos must have shape \(L, 2\)"),
    (lambda: MRoPE(32, 4), torch.zeros(5, 2), ValueError, r"mrope: q_pos must have shape \(L, 3\)"),
    (lambda: MixedRoPE(32, 4), torch.zeros(5, 2, dtype=torch.bool), TypeError, "integer or float"),
    (lambda: MixedRoPE(32, 4), [[0.0, 0.0]] * 5, TypeError, "must be a torch.Tensor"),
])
def test_rotary_positions_of_the_wrong_arity(build, positions, error, match):
    q = torch.randn(1, 4, 5, 8)
    with pytest.raises(error, match=match):
        build().rotate(q, q, positions, positions)


def test_bad_options_are_named():
    with pytest.raises(ValueError, match=r"mrope: sections must be >= 0 and add up to the rotary pairs head_dim / 2 = "
                                         r"4, got \(1, 1, 1\)"):
        MRoPE(32, 4, sections=(1, 1, 1))
    with pytest.raises(ValueError, match=r"mrope: sections must have one entry per axis \(3\)"):
        MRoPE(32, 4, sections=(2, 2))
    with pytest.raises(TypeError, match="sections must hold ints"):
        AxialRoPE(32, 4, sections=(2.0, 2.0))
    with pytest.raises(ValueError, match="rope_axial: sections must be >= 0 and add up"):
        AxialRoPE(32, 4, sections=(3, 3))
    with pytest.raises(ValueError, match="rope_axial: axes must be one of"):
        AxialRoPE(32, 4, axes=4)
    with pytest.raises(ValueError, match="head_dim = dim / num_heads = 3 must be even"):
        AxialRoPE(12, 4)
    with pytest.raises(ValueError, match="layout 'interleaved' deals the pairs to the axes in turn"):
        AxialRoPE(40, 4, axes=2, sections=(3, 2), layout="interleaved")
    with pytest.raises(ValueError, match="rope_axial: base must be > 1"):
        AxialRoPE(32, 4, base=1.0)
    with pytest.raises(ValueError, match="mrope: layout must be one of"):
        MRoPE(32, 4, layout="per_axis")
    with pytest.raises(ValueError, match=r"sincos_2d: dim must be divisible by 2 \* axes = 6"):
        SinCos2D(32, 4, axes=3)
    with pytest.raises(TypeError, match="learned_2d: grid_size"):
        Learned2D(32, 4, grid_size="8")


def test_learned_2d_refuses_positions_outside_its_table():
    enc = Learned2D(8, 2, grid_size=4)
    with pytest.raises(ValueError, match=r"learned_2d: positions must lie within the table.*got rows in \[0.0, 4.0\]"):
        enc.embed(torch.zeros(1, 2, 8), torch.tensor([[0.0, 0.0], [4.0, 1.0]]))
    with pytest.raises(ValueError, match=r"learned_2d: positions must have shape \(L, 2\)"):
        enc.embed(torch.zeros(1, 2, 8), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="do not match x"):
        enc.embed(torch.zeros(1, 3, 8), torch.zeros(2, 2))


def test_example_positions_are_patch_grids_and_a_multimodal_sequence():
    assert AxialRoPE(32, 4).example_positions(5).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1]]
    assert AxialRoPE(48, 4, axes=3).example_positions(3).tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0]]
    example = MRoPE(32, 4).example_positions(10)  # 2 text tokens, a 1 x 2 x 3 image, 2 text tokens
    expected = mrope_positions([("text", 2), ("image", (1, 2, 3)), ("text", 2)])
    assert torch.equal(example, expected) and example[-1].tolist() == [6, 6, 6]
    table = Learned2D(32, 4, grid_size=4).example_positions(30)  # 30 patches of a 6-wide grid, resampled onto 4 x 4
    assert table.min() >= -0.5 and table.max() <= 3.5 and len(torch.unique(table, dim=0)) == 30
