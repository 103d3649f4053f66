"""Positional patterns (PositionalEncoding.positional_pattern) and their figures (pe_toolkit.plotting)."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.plotting import distance_profile, plot_positional_pattern

ALL_ENCODERS = pet.list_encoders()


# ------------------------------------------------------------------------------ exact values
def test_alibi_pattern_is_its_bias():
    pattern = pet.get_encoder("alibi", 32, 4).positional_pattern(6)
    i = torch.arange(6)
    distance = (i[:, None] - i[None, :]).abs().float()
    slopes = torch.tensor([2.0 ** (-8 * (h + 1) / 4) for h in range(4)])
    torch.testing.assert_close(pattern, -slopes[:, None, None] * distance, rtol=0, atol=1e-6)


def test_rope_pattern_is_the_roformer_decay_of_ones():
    """q = k = ones per head: each rotated pair contributes 2 cos((i - j) theta_k); minus the content d."""
    dim, heads, base = 32, 2, 10_000.0
    pattern = pet.get_encoder("rope", dim, heads, base=base).positional_pattern(9)
    d = dim // heads
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    i = torch.arange(9, dtype=torch.float64)
    delta = i[:, None] - i[None, :]
    want = ((2 * torch.cos(delta[..., None] * theta)).sum(-1) - d) / math.sqrt(d)
    torch.testing.assert_close(pattern, want.float().expand(heads, 9, 9), rtol=0, atol=1e-5)


def test_embed_only_pattern_is_the_position_position_term():
    enc = pet.get_encoder("sinusoidal", 32, 4)
    pattern = enc.positional_pattern(7)
    e = enc.embed(torch.zeros(1, 7, 32), torch.arange(7))[0].reshape(7, 4, 8).transpose(0, 1)
    torch.testing.assert_close(pattern, e @ e.transpose(-1, -2) / math.sqrt(8))
    full = e.transpose(0, 1).reshape(7, 32)
    gram = full @ full.T  # summed over heads, sinusoidal similarity depends on i - j only
    torch.testing.assert_close(gram.diagonal(1), gram.diagonal(1)[:1].expand(6), rtol=0, atol=1e-5)


def test_t5_pattern_is_its_learned_bias():
    enc = pet.get_encoder("t5", 32, 4)
    with torch.no_grad():
        enc.relative_attention_bias.weight.normal_()
    pos = torch.arange(10)
    bias = enc.bias(torch.zeros(1, 4, 10, 8), torch.zeros(1, 4, 10, 8), pos, pos)
    torch.testing.assert_close(enc.positional_pattern(10), bias[0])


def test_nope_and_an_unscaled_temperature_add_nothing():
    assert pet.get_encoder("nope", 32, 4).positional_pattern(5).abs().max() == 0
    assert pet.get_encoder("nope_temperature", 32, 4).positional_pattern(5).abs().max() == 0


def test_float64_encoder_gives_float64():
    assert pet.get_encoder("t5", 32, 4).double().positional_pattern(4).dtype == torch.float64
    assert pet.get_encoder("alibi", 32, 4).positional_pattern(4).dtype == torch.float32


def test_pattern_restores_training_modes():
    enc = pet.get_encoder("fire", 32, 4)
    enc.train()
    child = next(enc.children())
    child.eval()  # a mixed state must come back as it was
    enc.positional_pattern(4)
    assert enc.training and not child.training


@pytest.mark.parametrize(("length", "error"), [(0, ValueError), (-1, ValueError), (2.5, TypeError), (True, TypeError)])
def test_bad_length(length, error):
    with pytest.raises(error, match="length"):
        pet.get_encoder("alibi", 32, 4).positional_pattern(length)


def test_positions_must_be_a_tensor():
    with pytest.raises(TypeError, match="positions must be a torch.Tensor, got list"):
        pet.get_encoder("alibi", 32, 4).positional_pattern(3, positions=[0, 1, 2])


def test_given_positions_are_used():
    enc = pet.get_encoder("alibi", 32, 4)
    spread = enc.positional_pattern(3, positions=torch.tensor([0, 10, 20]))
    torch.testing.assert_close(spread[0, 0], torch.tensor([0.0, -2.5, -5.0]))


# ------------------------------------------------------------------------------ figures
def test_distance_profile_hand_case():
    pattern = torch.tensor([[[0.0, 1.0], [2.0, 3.0]]])
    distances, means = distance_profile(pattern)
    assert distances.tolist() == [-1, 0, 1]
    torch.testing.assert_close(means, torch.tensor([[1.0, 1.5, 2.0]]))
    nan = float("nan")
    distances, means = distance_profile(torch.tensor([[[0.0, nan], [2.0, 3.0]], [[nan, nan], [4.0, nan]]]))
    assert distances.tolist() == [0, 1]
    torch.testing.assert_close(means, torch.tensor([[1.5, 2.0], [nan, 4.0]]), equal_nan=True)


def test_masked_pairs_are_blank_and_noted():
    enc = pet.get_encoder("edge_aware_graph", 32, 4)
    pattern = enc.positional_pattern(10)
    assert pattern.isneginf().any()
    fig = plot_positional_pattern(enc, length=10)
    image = next(ax for ax in fig.axes if ax.images).images[0].get_array()
    assert (image.mask == pattern[0].isneginf().numpy()).all()  # not causal: exactly the masked pairs are blank
    assert fig.get_suptitle().endswith("\nblank: pairs the encoding masks (-inf)")


def test_nan_pattern_is_refused():
    class Broken(pet.PositionalEncoding):
        def bias(self, q, k, q_pos, k_pos):
            return torch.full((1, self.num_heads, q.shape[-2], k.shape[-2]), float("nan"))

    with pytest.raises(ValueError, match="Broken: the positional pattern has NaN or \\+inf entries"):
        plot_positional_pattern(Broken(32, 4), length=4)


def _texts(fig) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts) + " " + fig.get_suptitle()


def test_figure_has_one_map_per_head_and_a_profile():
    fig = plot_positional_pattern("alibi", length=12)
    maps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in maps] == ["head 0", "head 1", "head 2", "head 3"]
    image = maps[0].images[0].get_array()
    assert image.shape == (12, 12) and image.mask[0, 1] and not image.mask[1, 0]  # causal: future keys blank
    assert fig.get_suptitle().endswith("\nblank: keys after the query (causal)")
    profile = next(ax for ax in fig.axes if ax.lines and not ax.images)
    distances, values = profile.lines[0].get_data()
    assert list(distances) == list(range(12))
    assert values[5] == pytest.approx(-5 * 2.0 ** -2)  # head 0: slope 1/4
    assert "alibi (sequence)" in fig.get_suptitle()


def test_identical_heads_are_drawn_once():
    fig = plot_positional_pattern("rope", length=8)
    maps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in maps] == ["all heads equal"]
    one = plot_positional_pattern("rope", num_heads=1, length=8)
    assert [ax.get_title() for ax in one.axes if ax.images] == ["head 0"]


def test_zero_pattern_says_so():
    assert "no positional term: the pattern is 0 everywhere" in _texts(plot_positional_pattern("nope", length=6))
    cope = _texts(plot_positional_pattern("cope", length=6))
    assert "zero at initialisation" in cope  # its position embeddings start at 0, as in the paper's code


def test_more_heads_than_shown():
    fig = plot_positional_pattern("alibi", dim=64, num_heads=8, length=6, max_heads=3)
    assert len([ax for ax in fig.axes if ax.images]) == 3
    assert "first 3 of 8 heads shown" in fig.get_suptitle()


def test_instance_with_its_current_parameters_and_unregistered_subclass():
    class Shifted(pet.encoders.ALiBi):
        """Not registered."""

    fig = plot_positional_pattern(Shifted(32, 4), length=5)
    assert fig.get_suptitle().startswith("Shifted: ")
    trained = pet.get_encoder("t5", 32, 4)
    assert "current parameters" in plot_positional_pattern(trained, length=5).get_suptitle()


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"encoding": 3}, TypeError, "registered name or a PositionalEncoding, got int"),
    ({"encoding": "alibi", "length": 0}, ValueError, "length must be >= 1"),
    ({"encoding": "alibi", "max_heads": 0}, ValueError, "max_heads must be >= 1"),
    ({"encoding": "alibi", "options": "x"}, TypeError, "options must be a dict, got str"),
    ({"encoding": "nosuch"}, ValueError, "unknown encoder 'nosuch'"),
])
def test_plot_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        plot_positional_pattern(**kwargs)


def test_plot_instance_refuses_name_options():
    with pytest.raises(TypeError, match="dim, num_heads and options are for a registered name"):
        plot_positional_pattern(pet.get_encoder("alibi", 32, 4), dim=64)


@pytest.mark.parametrize("name", ALL_ENCODERS)
def test_every_registered_encoder_draws(name, tmp_path):
    fig = plot_positional_pattern(name, length=8)
    fig.savefig(tmp_path / f"{name}.png", dpi=40)
    assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert any(ax.images for ax in fig.axes)


def test_vector_positions_do_not_claim_a_function_of_i_minus_j():
    """object_rope2d is relative in its 2-D coordinates, not in the token index."""
    fig = plot_positional_pattern("object_rope2d", length=8)
    profile = next(ax for ax in fig.axes if ax.lines and not ax.images)
    assert profile.get_title() == "mean over pairs at each distance"
    assert "positions themselves are vectors" in profile.get_xlabel()
    rope = next(ax for ax in plot_positional_pattern("rope", length=8).axes if ax.lines and not ax.images)
    assert rope.get_title() == "depends only on i - j"
