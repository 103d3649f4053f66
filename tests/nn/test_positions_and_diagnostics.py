"""Randomized positions, attention entropy, positional-only training."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.encoders.base import constrain_encodings
from pe_toolkit.nn import attention_entropy, attention_probabilities, randomized_positions


def test_randomized_positions_are_sorted_distinct_and_seeded():
    pos = randomized_positions(64, 10, 40, generator=torch.Generator().manual_seed(1))
    assert pos.shape == (64, 10) and pos.dtype == torch.long
    assert (pos.diff(dim=1) > 0).all() and pos.min() >= 0 and pos.max() < 40
    assert len(set(pos.flatten().tolist())) > 30  # the whole range gets used
    again = randomized_positions(64, 10, 40, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(pos, again)
    torch.testing.assert_close(randomized_positions(2, 5, 5), torch.arange(5).expand(2, 5))
    with pytest.raises(ValueError, match="length \\(6\\) must be <= max_position \\(5\\)"):
        randomized_positions(1, 6, 5)


def test_uniform_attention_has_log_n_entropy():
    model = pet.Transformer(pet.TransformerConfig(vocab_size=20, dim=16, num_heads=2, num_layers=2, encoding="nope"))
    for block in model.blocks:
        torch.nn.init.zeros_(block.attn.q_proj.weight)  # all logits 0: uniform over the visible keys
    length = 8
    entropy = attention_entropy(model, torch.randint(0, 20, (3, length)))
    expected = sum(math.log2(i + 1) for i in range(length)) / length
    torch.testing.assert_close(entropy, torch.full((2, 2), expected))


def test_attention_probabilities_match_the_layer_output():
    enc = pet.get_encoder("alibi", 16, 2)
    attn = pet.MultiHeadAttention(16, 2, causal=True, encoding=enc)
    x = torch.randn(2, 6, 16)
    probs = attention_probabilities(attn, x)
    v = attn.v_proj(x).view(2, 6, 2, 8).transpose(1, 2)
    manual = attn.o_proj((probs @ v).transpose(1, 2).reshape(2, 6, 16))
    torch.testing.assert_close(manual, attn(x), atol=1e-5, rtol=1e-5)


def test_train_positional_only_and_constraints():
    model = pet.Transformer(pet.TransformerConfig(
        vocab_size=20, dim=16, num_heads=2, num_layers=2, encoding="nope_temperature",
        encoding_options={"learned": True, "scale": 1.6}, share_encoding=False))
    model.train_positional_only()
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["encodings.0.head_scale", "encodings.1.head_scale"]
    with torch.no_grad():
        model.encodings[0].head_scale.copy_(torch.tensor([0.5, 2.0]))
    constrain_encodings(model)
    torch.testing.assert_close(model.encodings[0].head_scale, torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("attention", ["mha_qk_norm", "mla"])
def test_diagnostics_work_with_qk_norm_and_latent_attention(attention):
    """Diagnostics use the layer's own ``attention_logits``, so QK-norm and MLA layers are supported."""
    mla = {"attention": "mla", "latent_options": {"latent_dim": 16}}
    options = {"qk_norm": True} if attention == "mha_qk_norm" else mla
    model = pet.Transformer(pet.TransformerConfig(vocab_size=20, dim=32, num_heads=4, num_layers=2, encoding="rope",
                                                  **options))
    tokens = torch.randint(0, 20, (2, 12))
    entropy = attention_entropy(model, tokens)
    assert entropy.shape == (2, 4) and torch.isfinite(entropy).all()
    block = model.blocks[0]
    x = torch.randn(2, 12, 32)
    probs = attention_probabilities(block.attn, x, encoding=model.encoding_for_layer(0))
    torch.testing.assert_close(probs.sum(-1), torch.ones(2, 4, 12))
    assert torch.all(probs.triu(1) == 0)  # causal
    expected = block.attn.attention_logits(x, encoding=model.encoding_for_layer(0)).softmax(-1)
    torch.testing.assert_close(probs, expected)
