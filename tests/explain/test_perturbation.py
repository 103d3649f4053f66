"""Perturbation curves: removal order, counts, the curve itself and its area."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import pe_toolkit as pet
from pe_toolkit.explain.perturbation import area_under_curve, perturbation_curve, removal_masks


def test_removal_masks_most_and_least_relevant_first():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.7, 0.3]])
    removable = torch.tensor([[False, True, True, True, True]])  # position 0 never removed
    fractions = torch.tensor([0.0, 0.25, 0.5, 1.0])
    morf = removal_masks(scores, removable, fractions, "morf")
    assert morf[0].tolist() == [[False] * 5]
    assert morf[1].tolist() == [[False, True, False, False, False]]   # 0.9 first
    assert morf[2].tolist() == [[False, True, False, True, False]]    # then 0.7
    assert morf[3].tolist() == [[False, True, True, True, True]]
    lerf = removal_masks(scores, removable, fractions, "lerf")
    assert lerf[1].tolist() == [[False, False, False, False, True]]   # 0.3 first (0.1 is not removable)
    assert lerf[2].tolist() == [[False, False, True, False, True]]


def test_removal_counts_follow_each_examples_removable_size_and_ties_by_position():
    scores = torch.zeros(2, 4)
    removable = torch.tensor([[True, True, True, True], [True, True, False, False]])
    masks = removal_masks(scores, removable, torch.tensor([0.5]), "morf")
    assert masks[0].tolist() == [[True, True, False, False], [True, False, False, False]]


def test_removal_masks_bad_input():
    scores, removable = torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="order must be one of"):
        removal_masks(scores, removable, torch.tensor([0.0]), "random")
    with pytest.raises(ValueError, match="fractions must be"):
        removal_masks(scores, removable, torch.tensor([1.5]))
    with pytest.raises(ValueError, match="scores and removable"):
        removal_masks(scores, removable[:, :2], torch.tensor([0.0]))
    with pytest.raises(TypeError, match="removable must be a bool"):
        removal_masks(scores, removable.long(), torch.tensor([0.0]))


def test_curve_starts_at_the_models_probability_and_uses_the_replacement():
    model = pet.Transformer(pet.TransformerConfig(vocab_size=9, dim=16, num_heads=2, num_layers=1)).eval()
    tokens = torch.tensor([[1, 4, 5, 6, 3]])
    removable = torch.tensor([[False, True, True, True, False]])
    fractions = torch.tensor([0.0, 1.0])
    target, index = torch.tensor([2]), torch.tensor([4])
    curve = perturbation_curve(model, tokens, torch.rand(1, 5), target=target, index=index, removable=removable,
                               replacement=0, fractions=fractions)
    with torch.no_grad():
        clean = model(tokens)[0, 4].softmax(-1)[2]
        emptied = model(torch.tensor([[1, 0, 0, 0, 3]]))[0, 4].softmax(-1)[2]
    assert_close(curve[:, 0], torch.stack((clean, emptied)))


def test_area_is_the_trapezoid_rule():
    fractions = torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64)
    curve = torch.tensor([[1.0, 0.0], [0.5, 0.0], [0.0, 1.0]], dtype=torch.float64)
    assert area_under_curve(curve, fractions).tolist() == [0.5, 0.25]
