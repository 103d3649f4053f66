"""Example positions of XL-PE: a run of SVO clauses BTG-reordered toward a head-final target."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.domains.translation.btg import btg_tree_from_alignment, cross_lingual_positions, reorder
from pe_toolkit.domains.translation.encoders import CrossLingualPositionEncoding, example_alignment
from pe_toolkit.encoders.absolute import sinusoidal_table

LENGTHS = (4, 8, 16, 32)


def build(dim: int = 32, **options) -> CrossLingualPositionEncoding:
    return pet.get_encoder("xl_pe", dim, 4, **{**pet.encoder_info("xl_pe").example_options, **options})


def test_example_reorders_each_clause_verb_last():
    positions = build().example_positions(10)
    assert positions.dtype == torch.int64 and positions.shape == (10, 2)
    assert positions[:, 0].tolist() == list(range(10))
    assert positions[:, 1].tolist() == [0, 1, 4, 2, 3, 5, 6, 9, 7, 8]
    tree = btg_tree_from_alignment(example_alignment(5), 5)
    assert reorder("the dog chases the cat".split(), tree) == "the dog the cat chases".split()


@pytest.mark.parametrize("length", [1, 2, 3, 7, 8, 16, 33])
def test_cross_lingual_column_is_the_btg_permutation(length):
    positions = build().example_positions(length)
    assert positions[:, 0].tolist() == list(range(length))
    xl = positions[:, 1].tolist()
    assert sorted(xl) == list(range(length))  # a permutation of 0 .. L-1
    assert xl == cross_lingual_positions(btg_tree_from_alignment(example_alignment(length), length))
    links = example_alignment(length)
    assert [s for s, _ in links] == list(range(length))
    by_target = sorted(range(length), key=lambda i: links[i][1])
    assert [xl[i] for i in by_target] == list(range(length))  # the reordering follows the target order
    assert torch.equal(positions, build().example_positions(length))


@pytest.mark.parametrize("dim", [32, 64])
@pytest.mark.parametrize("strategy", ["input", "head"])
def test_pattern_shapes_and_determinism(dim, strategy):
    encoder = build(dim, strategy=strategy)
    for length in LENGTHS:
        pattern = encoder.positional_pattern(length)
        assert pattern.shape == (4, length, length) and torch.isfinite(pattern).all()
        assert torch.equal(pattern, encoder.positional_pattern(length))


def test_input_strategy_pattern_by_hand():
    encoder = build()
    length, hd = 12, 8
    positions = encoder.example_positions(length)
    e = sinusoidal_table(positions[:, 0], 32, 10_000.0, torch.float32) + sinusoidal_table(
        positions[:, 1], 32, 10_000.0, torch.float32)
    q = 1 + e.view(length, 4, hd).transpose(0, 1)  # content ones (the class has a rotate hook) + the input PE
    expected = q @ q.transpose(-1, -2) / math.sqrt(hd) - math.sqrt(hd)
    torch.testing.assert_close(encoder.positional_pattern(length), expected, atol=1e-5, rtol=1e-5)
    # the reordering matters: without it (t_xl = t) the pattern is a different one
    identity = torch.stack([torch.arange(length)] * 2, dim=-1)
    unordered = encoder.positional_pattern(length, positions=identity)
    assert not torch.allclose(unordered, encoder.positional_pattern(length))
