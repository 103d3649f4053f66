"""Weights both ways between HF Llama / Qwen2 / Mistral / Qwen3 causal LMs and our Transformer (tiny random
models)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_helpers import random_causal_lm  # noqa: E402

import pe_toolkit as pet  # noqa: E402
from pe_toolkit.integrations.hf import from_hf, to_hf  # noqa: E402

SIZES = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=97,
             max_position_embeddings=256)
CASES = {
    "llama_gqa": (transformers.LlamaConfig, dict(num_key_value_heads=2, rms_norm_eps=1e-5)),
    "llama_mha_tied": (transformers.LlamaConfig, dict(num_key_value_heads=4, tie_word_embeddings=True)),
    "llama_yarn": (transformers.LlamaConfig, dict(num_key_value_heads=2, rope_parameters=dict(
        rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64))),
    "qwen2_gqa": (transformers.Qwen2Config, dict(num_key_value_heads=2)),
    "mistral_gqa": (transformers.MistralConfig, dict(num_key_value_heads=2, sliding_window=None)),
    "mistral_window": (transformers.MistralConfig, dict(num_key_value_heads=2, sliding_window=5)),
    # Qwen3: per-head q/k RMSNorm; a large eps, so a QK-norm with another eps would be far off
    "qwen3_gqa": (transformers.Qwen3Config, dict(num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-2)),
    "qwen3_window": (transformers.Qwen3Config, dict(num_key_value_heads=2, head_dim=16, use_sliding_window=True,
                                                    sliding_window=5, max_window_layers=0)),
}


def hf_model(case: str, dtype=torch.float32):
    config_class, options = CASES[case]
    return random_causal_lm(config_class(**SIZES, **options), "sdpa", dtype)


def tokens(batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(0, SIZES["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_hf_reproduces_the_logits(case):
    """Same logits as HF in float32 (1e-5; the residual is HF's float32 RoPE angles against our float64)."""
    hf = hf_model(case)
    ours = from_hf(hf)
    assert not ours.training and ours.config.norm_eps == hf.config.rms_norm_eps
    x = tokens()
    with torch.no_grad():
        expected = hf(x).logits
        got = ours(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["llama_gqa", "qwen2_gqa", "mistral_window", "qwen3_gqa"])
def test_greedy_generate_gives_the_same_tokens(case):
    hf = hf_model(case)
    prompt = tokens(2, 6)
    with torch.no_grad():
        expected = hf.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0)
        got = from_hf(hf).generate(prompt, 10)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("case", sorted(CASES))
def test_to_hf_round_trip_is_exact(case):
    """to_hf(from_hf(m), like=m) holds exactly m's weights, config sizes and logits."""
    hf = hf_model(case)
    back = to_hf(from_hf(hf), like=hf)
    assert type(back) is type(hf)
    for key in ("hidden_size", "intermediate_size", "num_key_value_heads", "rms_norm_eps", "tie_word_embeddings"):
        assert getattr(back.config, key) == getattr(hf.config, key), key
    expected = hf.state_dict()
    got = back.state_dict()
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key
    x = tokens()
    with torch.no_grad():
        torch.testing.assert_close(back(x).logits, hf(x).logits, rtol=1e-6, atol=1e-6)


def test_to_hf_from_a_model_of_our_own():
    """A Transformer built here (q/k/v biases, llama3 RoPE) goes to HF: Qwen2 by default, Llama on request
    (with a zero output-projection bias), same logits."""
    config = pet.TransformerConfig(vocab_size=50, dim=32, num_heads=4, num_kv_heads=2, num_layers=2, qkv_bias=True,
                                   norm_eps=1e-6, encoding="rope", tie_embeddings=False, encoding_options=dict(
                                       scaling="llama3", factor=8.0, original_max_position=16))
    ours = pet.Transformer(config).eval()
    with torch.no_grad():
        for block in ours.blocks:
            block.attn.q_proj.bias.normal_()
    x = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        reference = ours(x)
        qwen = to_hf(ours)
        llama = to_hf(ours, like=transformers.LlamaConfig())
        assert type(qwen).__name__ == "Qwen2ForCausalLM" and type(llama).__name__ == "LlamaForCausalLM"
        for hf in (qwen, llama):
            torch.testing.assert_close(hf(x).logits, reference, rtol=1e-5, atol=1e-5)


def test_to_hf_of_a_qk_norm_model_is_qwen3():
    """QK-norm (with the model's norm_eps) goes to Qwen3's q_norm / k_norm: same logits; from_hf gives it back."""
    config = pet.TransformerConfig(vocab_size=50, dim=32, num_heads=4, num_kv_heads=2, num_layers=2, qk_norm=True,
                                   norm_eps=1e-2, tie_embeddings=False)
    ours = pet.Transformer(config).eval()
    with torch.no_grad():
        for block in ours.blocks:
            block.attn.q_norm.weight.normal_()
            block.attn.k_norm.weight.normal_()
    x = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        qwen3 = to_hf(ours)
        assert type(qwen3).__name__ == "Qwen3ForCausalLM" and qwen3.config.rms_norm_eps == 1e-2
        torch.testing.assert_close(qwen3(x).logits, ours(x), rtol=1e-5, atol=1e-5)
        assert ours.blocks[0].attn.q_norm.eps == 1e-2
        torch.testing.assert_close(from_hf(qwen3)(x), ours(x), rtol=0, atol=0)


@pytest.mark.parametrize("case", ["llama_gqa", "llama_mha_tied", "qwen2_gqa", "mistral_window"])
def test_bf16_is_within_bf16_rounding(case):
    """In bfloat16 our logits are as far from the float32 ones as HF's own bfloat16 logits are."""
    hf = hf_model(case)
    x = tokens()
    with torch.no_grad():
        reference = hf(x).logits
        hf16 = hf.to(torch.bfloat16)
        hf_error = (hf16(x).logits.float() - reference).abs().max()
        ours_error = (from_hf(hf16)(x).float() - reference).abs().max()
    assert next(from_hf(hf16).parameters()).dtype == torch.bfloat16
    assert ours_error <= 2 * hf_error + 1e-3, (ours_error, hf_error)


def test_from_hf_with_another_encoder_keeps_every_weight():
    hf = hf_model("llama_gqa")
    alibi = from_hf(hf, encoding="alibi")
    assert alibi.config.encoding == "alibi"
    rope = from_hf(hf)
    assert torch.equal(alibi.blocks[1].mlp.down.weight, rope.blocks[1].mlp.down.weight)
    with torch.no_grad():
        assert not torch.allclose(alibi(tokens()), rope(tokens()))


def test_unsupported_models_and_features_are_named():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with pytest.raises(TypeError, match="got GPT2LMHeadModel"):
        from_hf(gpt2)
    with pytest.raises(TypeError, match="LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM"):
        from_hf(torch.nn.Linear(2, 2))
    bad = {
        "hidden_act='gelu'": dict(hidden_act="gelu"),
        "mlp_bias=True": dict(mlp_bias=True),
        "attention_bias=True": dict(attention_bias=True),
        "head_dim=8": dict(head_dim=8),
    }
    for message, options in bad.items():
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SIZES, **options))
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            from_hf(model)
    qwen3 = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**SIZES, head_dim=16, attention_bias=True))
    with pytest.raises(ValueError, match=r"attention_bias=True \(Qwen3Config: q, k, v and output projections\)"):
        from_hf(qwen3)
    mixed = transformers.Qwen2Config(**SIZES, use_sliding_window=True, sliding_window=8, max_window_layers=1,
                                     layer_types=["full_attention", "sliding_attention"])
    with pytest.raises(ValueError, match="mixes full and sliding-window layers"):
        from_hf(transformers.Qwen2ForCausalLM(mixed))


def test_to_hf_refuses_what_hf_cannot_hold():
    def model(**options):
        base = dict(vocab_size=50, dim=32, num_heads=4, num_layers=1)
        return pet.Transformer(pet.TransformerConfig(**{**base, **options}))

    with pytest.raises(TypeError, match="model must be a pe_toolkit Transformer"):
        to_hf(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="encoding='alibi': HF Llama-family models have RoPE only"):
        to_hf(model(encoding="alibi"))
    with pytest.raises(ValueError, match="norm='layernorm'"):
        to_hf(model(norm="layernorm"))
    with pytest.raises(ValueError, match="causal=False"):
        to_hf(model(causal=False))
    with pytest.raises(ValueError, match="qkv_bias=True: MistralConfig has no q/k/v biases"):
        to_hf(model(qkv_bias=True), like=transformers.MistralConfig())
    with pytest.raises(ValueError, match=r"qk_norm=True: .*only Qwen3 .*LlamaConfig has no QK-norm \(use like=Qwen3"):
        to_hf(model(qk_norm=True), like=transformers.LlamaConfig())
    with pytest.raises(ValueError, match="qk_norm=False: .*Qwen3Config needs qk_norm=True"):
        to_hf(model(), like=transformers.Qwen3Config())
    with pytest.raises(ValueError, match="attention_window=4: LlamaConfig has no sliding window"):
        to_hf(model(attention_window=4))
    with pytest.raises(TypeError, match="like must be an HF config or model"):
        to_hf(model(), like=transformers.GPT2Config())


def test_to_hf_refuses_partial_rope_and_per_layer_encodings():
    def model(**options):
        return pet.Transformer(pet.TransformerConfig(vocab_size=50, dim=32, num_heads=4, num_layers=2, **options))

    with pytest.raises(ValueError, match="rotary_fraction=0.5: HF Llama, Qwen2 and Mistral rotate every head dim"):
        to_hf(model(encoding_options={"rotary_fraction": 0.5}))
    with pytest.raises(ValueError, match="share_encoding=False"):
        to_hf(model(share_encoding=False))
