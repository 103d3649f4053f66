"""Gradient x input and attention rollout against hand computations."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

import pe_toolkit as pet
from pe_toolkit.explain.baselines import attention_rollout, gradient_x_input, rollout


def small_model(encoding="rope", **options):
    return pet.Transformer(pet.TransformerConfig(vocab_size=9, dim=16, num_heads=2, num_layers=2,
                                                 encoding=encoding, encoding_options=options)).eval()


@pytest.mark.parametrize("scale_embeddings", [False, True])
def test_gradient_x_input_is_the_embedding_gradient_times_the_embedding(scale_embeddings):
    """The input is what the blocks receive: with scale_embeddings, the embedding times sqrt(dim)."""
    model = pet.Transformer(pet.TransformerConfig(vocab_size=9, dim=16, num_heads=2, num_layers=2, encoding="learned",
                                                  encoding_options={"max_len": 8},
                                                  scale_embeddings=scale_embeddings)).eval()
    tokens = torch.tensor([[1, 4, 5, 6], [2, 2, 7, 8]])
    scores = gradient_x_input(model, tokens, torch.tensor([3, 4]), index=torch.tensor([3, 1]))
    for b, (target, index) in enumerate(((3, 3), (4, 1))):
        embedded = model.token_embedding(tokens[b:b + 1]) * (16 ** 0.5 if scale_embeddings else 1.0)
        embedded = embedded.detach().requires_grad_(True)
        logit = model.lm_head(model.forward_features(embedded))[0, index, target]
        (grad,) = torch.autograd.grad(logit, embedded)
        assert_close(scores[b], (grad * embedded)[0].sum(-1))


def test_rollout_of_uniform_causal_attention_by_hand():
    # one layer, attention uniform over the visible keys: A = [[1, 0], [1/2, 1/2]]
    probs = torch.tensor([[1.0, 0.0], [0.5, 0.5]])[None, None]
    flow = rollout([probs], torch.tensor([1]))
    assert_close(flow, torch.tensor([[0.25, 0.75]]))  # 0.5 * A + 0.5 * I, row 1
    two = rollout([probs, probs], torch.tensor([1]))
    hat = 0.5 * probs[0, 0] + 0.5 * torch.eye(2)
    assert_close(two[0], (hat @ hat)[1])
    with pytest.raises(ValueError, match="at least one layer"):
        rollout([], torch.tensor([0]))


def test_attention_rollout_rows_are_distributions():
    model = small_model("alibi")
    scores = attention_rollout(model, torch.randint(0, 9, (3, 6)))
    assert scores.shape == (3, 6)
    assert_close(scores.sum(-1), torch.ones(3))
    assert (scores >= 0).all()


def test_baselines_reject_bad_input():
    model = small_model()
    with pytest.raises(ValueError, match="target out of range"):
        gradient_x_input(model, torch.randint(0, 9, (1, 4)), 9)
    with pytest.raises(ValueError, match="index out of range"):
        attention_rollout(model, torch.randint(0, 9, (1, 4)), index=4)
