"""Transformer: shapes, generation with the KV cache, parameter counts, configuration errors."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet


def small(encoding="rope", **overrides):
    config = dict(vocab_size=30, dim=32, num_heads=4, num_layers=2, encoding=encoding)
    config.update(overrides)
    return pet.Transformer(pet.TransformerConfig(**config))


def greedy_without_cache(model, prompt, steps):
    out = prompt
    for _ in range(steps):
        out = torch.cat((out, model(out)[:, -1:].argmax(-1)), dim=1)
    return out


@pytest.mark.parametrize("encoding", ["rope", "alibi", "t5", "sinusoidal", "cope"])
def test_generate_greedy_equals_full_recomputation(encoding):
    model = small(encoding).eval()
    prompt = torch.randint(0, 30, (2, 4))
    with torch.no_grad():
        expected = greedy_without_cache(model, prompt, 6)
    torch.testing.assert_close(model.generate(prompt, 6), expected)


def test_sampling_is_reproducible_and_top_k_1_is_greedy():
    model = small().eval()
    prompt = torch.randint(0, 30, (1, 3))
    a = model.generate(prompt, 5, temperature=1.0, generator=torch.Generator().manual_seed(1))
    b = model.generate(prompt, 5, temperature=1.0, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(a, b)
    top1 = model.generate(prompt, 5, temperature=0.7, top_k=1, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(top1, model.generate(prompt, 5))


def test_generate_keeps_training_mode_and_zero_steps():
    model = small().train()
    prompt = torch.randint(0, 30, (1, 3))
    assert model.generate(prompt, 0).shape == (1, 3)
    assert model.training


def test_parameter_counts():
    shared = small("t5", num_layers=3)
    per_layer = small("t5", num_layers=3, share_encoding=False)
    table = 32 * 4  # num_buckets x num_heads
    assert shared.num_parameters() - shared.num_parameters(exclude_positional=True) == table
    assert per_layer.num_parameters() - per_layer.num_parameters(exclude_positional=True) == 3 * table
    assert shared.num_parameters(exclude_positional=True) == small("nope", num_layers=3).num_parameters()
    assert shared.num_parameters() == sum(p.numel() for p in shared.parameters())


def test_encoder_gets_causal_flag_from_config():
    assert small("t5", causal=False).encodings[0].bidirectional
    assert not small("t5", causal=True).encodings[0].bidirectional
    with pytest.raises(ValueError, match="cope: needs causal=True"):
        small("cope", causal=False)


def test_bidirectional_encoder_sees_the_future_and_uses_padding():
    model = small("alibi", causal=False)
    tokens = torch.randint(0, 30, (2, 8))
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 30
    assert not torch.allclose(model(tokens)[:, 0], model(changed)[:, 0])
    padding = torch.ones(2, 8, dtype=torch.bool)
    padding[:, -1] = False  # the changed token is padding now: the rest must not see it
    torch.testing.assert_close(
        model(tokens, padding_mask=padding)[:, :-1], model(changed, padding_mask=padding)[:, :-1]
    )


def test_feature_trunk_without_vocabulary():
    model = small(vocab_size=None)
    x = torch.randn(2, 5, 32)
    assert model.forward_features(x).shape == (2, 5, 32)
    with pytest.raises(ValueError, match="vocab_size=None"):
        model(torch.zeros(2, 5, dtype=torch.long))


def test_tied_embeddings():
    model = small()
    assert model.lm_head.weight is model.token_embedding.weight
    assert small(tie_embeddings=False).lm_head.weight is not small(tie_embeddings=False).token_embedding.weight


def test_encoder_parameters_keep_their_own_initialisation():
    model = small("cope")
    assert torch.count_nonzero(model.encodings[0].pos_emb) == 0  # CoPE starts at zero, not N(0, 0.02)


def test_errors():
    model = small()
    with pytest.raises(ValueError, match="tokens must be an integer tensor"):
        model(torch.randn(2, 5))
    with pytest.raises(ValueError, match="generate needs a causal model"):
        small(causal=False).generate(torch.zeros(1, 2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="temperature"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=-1.0)
    with pytest.raises(ValueError, match="cache must hold one KVCache per layer"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=[pet.KVCache()])
    with pytest.raises(ValueError, match="unknown encoder 'rotary'"):
        small("rotary")
    with pytest.raises(ValueError, match="norm must be one of"):
        small(norm="batchnorm")
    with pytest.raises(ValueError, match="mlp must be one of"):
        small(mlp="relu")
    with pytest.raises(ValueError, match="learned: positions must lie in"):
        small("learned", encoding_options={"max_len": 8}).generate(torch.zeros(1, 6, dtype=torch.long), 4)


def test_cross_attention_decoder_uses_the_context_and_generates_with_it():
    decoder = small("rope", cross_attention=True).eval()
    tokens = torch.randint(0, 30, (2, 5))
    context, other = torch.randn(2, 7, 32), torch.randn(2, 7, 32)
    assert not torch.allclose(decoder(tokens, context=context), decoder(tokens, context=other))
    mask = torch.ones(2, 7, dtype=torch.bool)
    mask[:, 5:] = False
    changed = context.clone()
    changed[:, 5:] = 0.0  # masked context entries must not matter
    torch.testing.assert_close(decoder(tokens, context=context, context_padding_mask=mask),
                               decoder(tokens, context=changed, context_padding_mask=mask))
    out = decoder.generate(tokens[:, :2], 4, context=context)
    with torch.no_grad():
        step = tokens[:, :2]
        for _ in range(4):
            step = torch.cat((step, decoder(step, context=context)[:, -1:].argmax(-1)), 1)
    torch.testing.assert_close(out, step)
    with pytest.raises(ValueError, match="context= is required exactly when"):
        decoder(tokens)
    with pytest.raises(ValueError, match="context= is required exactly when"):
        small("rope")(tokens, context=context)


def test_scaled_embeddings_follow_vaswani():
    """scale_embeddings: N(0, 1/dim) init, times sqrt(dim) at the input (unit-scale coordinates)."""
    torch.manual_seed(0)
    dim = 256
    plain = pet.Transformer(pet.TransformerConfig(vocab_size=500, dim=dim, num_heads=4, num_layers=1, encoding="nope"))
    scaled = pet.Transformer(pet.TransformerConfig(vocab_size=500, dim=dim, num_heads=4, num_layers=1, encoding="nope",
                                                   scale_embeddings=True))
    tokens = torch.arange(500).unsqueeze(0)
    assert plain.embed_tokens(tokens).std().item() == pytest.approx(0.02, rel=0.05)
    assert scaled.embed_tokens(tokens).std().item() == pytest.approx(1.0, rel=0.05)
    torch.testing.assert_close(scaled.embed_tokens(tokens), scaled.token_embedding(tokens) * dim**0.5)
    # the multiplier is part of forward: logits differ from feeding the unscaled embedding
    with torch.no_grad():
        expected = scaled.lm_head(scaled.forward_features(scaled.token_embedding(tokens[:, :8]) * dim**0.5))
        torch.testing.assert_close(scaled(tokens[:, :8]), expected)


def test_embedding_std_sets_the_token_init_without_a_multiplier():
    """embedding_std: N(0, std^2) token embeddings used as they are (T5: 1.0); the other weights keep 0.02."""
    torch.manual_seed(0)
    config = dict(vocab_size=500, dim=256, num_heads=4, num_layers=1, encoding="nope")
    untied = pet.Transformer(pet.TransformerConfig(**config, embedding_std=1.0, tie_embeddings=False))
    tokens = torch.arange(500).unsqueeze(0)
    assert untied.token_embedding.weight.std().item() == pytest.approx(1.0, rel=0.05)
    torch.testing.assert_close(untied.embed_tokens(tokens), untied.token_embedding(tokens))  # no multiplier
    assert untied.lm_head.weight.std().item() == pytest.approx(0.02, rel=0.05)
    tied = pet.Transformer(pet.TransformerConfig(**config, embedding_std=0.5))
    assert tied.lm_head.weight is tied.token_embedding.weight
    assert tied.token_embedding.weight.std().item() == pytest.approx(0.5, rel=0.05)
    for bad, error in ((0.0, ValueError), (-1.0, ValueError), (float("inf"), ValueError), (True, TypeError),
                       ("1", TypeError)):
        with pytest.raises(error, match="embedding_std"):
            pet.Transformer(pet.TransformerConfig(**config, embedding_std=bad))
    with pytest.raises(ValueError, match="embedding_std and scale_embeddings"):
        pet.Transformer(pet.TransformerConfig(**config, embedding_std=1.0, scale_embeddings=True))


def test_norm_eps_and_qkv_bias():
    Transformer, TransformerConfig = pet.Transformer, pet.TransformerConfig
    """norm_eps reaches every norm (the default stays PyTorch's); qkv_bias adds q/k/v (not output) biases."""
    default = Transformer(TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1))
    assert default.final_norm.eps is None and default.blocks[0].attn.q_proj.bias is None
    model = Transformer(TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=2, norm_eps=1e-3,
                                          qkv_bias=True))
    norms = [m for m in model.modules() if isinstance(m, torch.nn.RMSNorm)]
    assert len(norms) == 5 and all(n.eps == 1e-3 for n in norms)
    attn = model.blocks[1].attn
    assert attn.q_proj.bias.shape == (16,) and attn.k_proj.bias is not None and attn.v_proj.bias is not None
    assert attn.o_proj.bias is None
    x = torch.randn(1, 3, 16)
    expected = x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-3) * model.final_norm.weight
    torch.testing.assert_close(model.final_norm(x), expected)
    layer = Transformer(TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1, norm="layernorm",
                                          norm_eps=1e-2))
    assert layer.final_norm.eps == 1e-2
    for bad in (0.0, 1.5, "1e-5", True):
        with pytest.raises(ValueError, match="norm_eps must be a number in"):
            Transformer(TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1, norm_eps=bad))
    with pytest.raises(ValueError, match="qkv_bias"):
        Transformer(TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1, qkv_bias=True,
                                      attention="mla", latent_options={"latent_dim": 8}))


def test_save_pretrained_round_trip(tmp_path):
    """config.json + model.pt: the reloaded model (learnable encoder and MLA included) gives the same logits."""
    for options in (dict(encoding="t5"), dict(encoding="rope", attention="mla", latent_options={"latent_dim": 8})):
        model = pet.Transformer(pet.TransformerConfig(vocab_size=20, dim=16, num_heads=2, num_layers=2, norm_eps=1e-5,
                                                      **options)).eval()
        with torch.no_grad():
            for p in model.encodings.parameters():
                p.add_(torch.randn_like(p))
        directory = model.save_pretrained(tmp_path / options["encoding"])
        back = pet.Transformer.from_pretrained(directory)
        assert back.config == model.config and not back.training
        x = torch.randint(0, 20, (2, 7))
        torch.testing.assert_close(back(x), model(x), rtol=0, atol=0)
    with pytest.raises(FileNotFoundError, match="config.json does not exist"):
        pet.Transformer.from_pretrained(tmp_path / "nothing")
    (tmp_path / "t5" / "config.json").write_text('{"vocab_size": 20, "colour": "red"}')
    with pytest.raises(ValueError, match=r"fields TransformerConfig does not know: \['colour'\]"):
        pet.Transformer.from_pretrained(tmp_path / "t5")


@pytest.mark.parametrize("per_layer", [False, True])
def test_replace_encoding_changes_only_the_encoding(per_layer):
    model = small("nope", vocab_size=64, dim=16, num_heads=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert model.replace_encoding("nope_temperature", {"scale": 1.6, "learned": True}, per_layer=per_layer) is model
    assert len(model.encodings) == (2 if per_layer else 1)
    layers = [model.encoding_for_layer(i) for i in range(2)]
    assert all(type(e).__name__ == "TemperatureNoPE" and e.learned for e in layers)
    assert (layers[0] is layers[1]) != per_layer
    assert model.config.encoding == "nope_temperature" and model.config.share_encoding != per_layer
    assert model.config.encoding_options == {"scale": 1.6, "learned": True}
    after = model.state_dict()
    for key, value in before.items():
        torch.testing.assert_close(after[key], value)
    assert all(k.startswith("encodings.") for k in set(after) - set(before))
    assert model(torch.randint(0, 64, (1, 12))).shape == (1, 12, 64)
    rebuilt = pet.Transformer(model.config)  # the config describes the new model
    assert rebuilt.load_state_dict(model.state_dict()) is not None


def test_replace_encoding_with_a_rope_scaling_keeps_outputs_within_the_original_context():
    model = small("rope", vocab_size=64, dim=16, num_heads=2).eval()
    tokens = torch.randint(0, 64, (1, 16))
    with torch.no_grad():
        plain = model(tokens)
        model.replace_encoding("rope", {"scaling": "dynamic", "factor": 4.0, "original_max_position": 32})
        dynamic = model(tokens)  # dynamic NTK is plain RoPE up to original_max_position
        model.replace_encoding("rope", {"scaling": "linear", "factor": 4.0})
        linear = model(tokens)
    torch.testing.assert_close(dynamic, plain)
    assert not torch.allclose(linear, plain)
    with pytest.raises(ValueError):
        model.replace_encoding("rope", {"scaling": "yran", "factor": 2.0})
