"""Example positions of CMC-PE: the soundtrack of a bouncing-ball clip, and the pattern it gives the frames."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.domains.crossmodal.conditioning import CMCPositionalEncoding
from pe_toolkit.domains.crossmodal.data import generate_clips

LENGTHS = (4, 8, 16, 32)


def build(dim: int = 32, **options) -> CMCPositionalEncoding:
    return pet.get_encoder("cmc_pe", dim, 4, **{**pet.encoder_info("cmc_pe").example_options, **options})


@pytest.mark.parametrize(("length", "in_features"), [(1, 8), (6, 1), (16, 8), (32, 16)])
def test_example_is_the_soundtrack_of_a_generated_clip(length, in_features):
    features = build(in_features=in_features).example_positions(length)
    assert features.shape == (1, 2 * length, in_features) and features.dtype == torch.float32
    clip = generate_clips(1, seed=0, video_frames=length, audio_frames=2 * length, freq_bins=in_features)
    assert torch.equal(features, clip.audio)
    assert (features >= -1).all() and (features <= 1).all()


def test_example_soundtrack_has_clicks_at_the_bounces():
    features = build().example_positions(32)[0]  # (64, 8)
    clip = generate_clips(1, seed=0, video_frames=32, audio_frames=64, freq_bins=8)
    assert clip.bounces[0]  # the ball hits a wall in 32 frames
    energy = features.mean(-1)
    loud = [int(2 * b) for b in clip.bounces[0]]  # two audio frames per video frame
    quiet = energy.median()
    assert all(energy[max(t - 1, 0): t + 2].max() > quiet + 0.1 for t in loud)


@pytest.mark.parametrize("dim", [32, 64])
def test_pattern_shape_determinism_and_hand_recipe(dim):
    encoder = build(dim)
    for length in LENGTHS:
        pattern = encoder.positional_pattern(length)
        assert pattern.shape == (4, length, length) and torch.isfinite(pattern).all()
        assert torch.equal(pattern, encoder.positional_pattern(length))
        assert torch.equal(encoder.example_positions(length), encoder.example_positions(length))
    length, hd = 10, dim // 4
    with torch.no_grad():
        c = encoder.signal(encoder.example_positions(length), length)[0]  # (L, dim): interpolated onto the frames
    e = c.view(length, 4, hd).transpose(0, 1)
    torch.testing.assert_close(encoder.positional_pattern(length), e @ e.transpose(-1, -2) / hd**0.5)
