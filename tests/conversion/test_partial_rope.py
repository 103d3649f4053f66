"""Partial-RoPE dimension selection (MHA2MLA, Ji et al. 2025): pair layout, strategies, 2-norm scores."""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.conversion import pair_dims, pair_norms, select_rope_pairs, two_norm_scores
from pe_toolkit.encoders.rotary import apply_rope


@pytest.mark.parametrize("interleaved", [False, True])
def test_pair_dims_are_the_dims_rope_rotates_together(interleaved):
    first, second = pair_dims(4, interleaved)
    expected = ([0, 2, 4, 6], [1, 3, 5, 7]) if interleaved else ([0, 1, 2, 3], [4, 5, 6, 7])
    assert first.tolist() == expected[0] and second.tolist() == expected[1]
    # rotating pair k only moves dims first[k], second[k]
    x = torch.randn(8, dtype=torch.float64)
    angle = torch.zeros(1, 4, dtype=torch.float64)
    angle[0, 2] = 0.7
    rotated = apply_rope(x[None], angle.cos(), angle.sin(), interleaved=interleaved)[0]
    moved = torch.nonzero(rotated != x).flatten().tolist()
    assert moved == sorted([first[2].item(), second[2].item()])


def test_pair_norms_hand_values():
    x = torch.tensor([3.0, 0.0, 1.0, 4.0, 0.0, 2.0])  # half-split pairs (0,3) (1,4) (2,5)
    torch.testing.assert_close(pair_norms(x, 3, False), torch.tensor([5.0, 0.0, 5.0**0.5]))
    torch.testing.assert_close(pair_norms(x, 3, True), torch.tensor([3.0, 17.0**0.5, 2.0]))


def test_strategies_exact_indices():
    assert select_rope_pairs("high", 8, 2, 1).tolist() == [[0, 1]]
    assert select_rope_pairs("low", 8, 2, 1).tolist() == [[6, 7]]
    assert select_rope_pairs("uniform", 8, 2, 2).tolist() == [[0, 4], [0, 4]]
    assert select_rope_pairs("uniform", 8, 2, 1, start=3).tolist() == [[3, 7]]
    scores = torch.tensor([[0.1, 5.0, 0.3, 4.0], [9.0, 1.0, 1.0, 0.0]])
    # per key head: top-2, returned ascending; the tie (1.0, 1.0) goes to the higher frequency (pair 1)
    assert select_rope_pairs("2-norm", 4, 2, 2, scores=scores).tolist() == [[1, 3], [0, 1]]


def test_two_norm_scores_sum_query_heads_of_a_group():
    q = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])  # 4 query heads, 2 pairs
    k = torch.tensor([[10.0, 1.0], [0.5, 2.0]])  # 2 key heads: query heads (0,1) and (2,3)
    expected = torch.tensor([[(1 + 3) * 10.0, (2 + 4) * 1.0], [(5 + 7) * 0.5, (6 + 8) * 2.0]])
    torch.testing.assert_close(two_norm_scores(q, k), expected)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("mid", 8, 2, 1), {}, "strategy must be one of"),
        (("high", 8, 9, 1), {}, "keep must be <= num_pairs"),
        (("high", 8, 0, 1), {}, "keep must be >= 1"),
        (("uniform", 8, 3, 1), {}, "must divide num_pairs"),
        (("uniform", 8, 2, 1), {"start": 4}, r"start must be in \[0, 4\)"),
        (("2-norm", 8, 2, 1), {}, "needs scores"),
        (("2-norm", 8, 2, 1), {"scores": torch.ones(2, 8)}, r"scores must have shape \(1, 8\)"),
        (("2-norm", 2, 1, 1), {"scores": torch.tensor([[1.0, float("nan")]])}, "NaN"),
        (("high", 8, 2, 1), {"scores": torch.ones(1, 8)}, "scores apply to strategy '2-norm' only"),
    ],
)
def test_bad_selection_arguments(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        select_rope_pairs(*args, **kwargs)


def test_two_norm_scores_shape_mismatch():
    with pytest.raises(ValueError, match="H_kv dividing H"):
        two_norm_scores(torch.ones(4, 2), torch.ones(3, 2))
