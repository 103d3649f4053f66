"""MHA2MLA on Hugging Face models: convert_to_mla takes an HF Llama / Mistral causal LM (through from_hf)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import pe_toolkit as pet  # noqa: E402
from pe_toolkit.conversion import convert_to_mla  # noqa: E402


def tiny(config_class, kv_heads):
    config = config_class(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=kv_heads, vocab_size=97, max_position_embeddings=256,
                          **({"sliding_window": None} if config_class is transformers.MistralConfig else {}))
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize(("config_class", "kv_heads"), [(transformers.LlamaConfig, 2),
                                                          (transformers.LlamaConfig, 4),
                                                          (transformers.MistralConfig, 2)])
def test_full_rank_conversion_reproduces_the_hf_logits_and_reloads(config_class, kv_heads, tmp_path):
    """Every rotary pair kept and the latent at full rank: the MLA model equals the HF model (1e-4), saves
    and reloads (same logits), and reports its KV-cache saving."""
    hf = tiny(config_class, kv_heads)
    head_dim, dim = 16, 64
    full_rank = min(kv_heads * head_dim, dim)  # joint SVD of [W_k (no rope dims left); W_v]
    mla, report = convert_to_mla(hf, rope_dim=head_dim, latent_dim=full_rank, strategy="high")
    assert mla.config.attention == "mla"
    x = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        expected = hf(x).logits
        got = mla(x)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    back = pet.Transformer.from_pretrained(mla.save_pretrained(tmp_path / "mla"))
    with torch.no_grad():
        torch.testing.assert_close(back(x), got, rtol=0, atol=0)
    assert report.cache_elements_before == 2 * 2 * kv_heads * head_dim


def test_low_rank_conversion_saves_cache():
    hf = tiny(transformers.LlamaConfig, 4)
    mla, report = convert_to_mla(hf, rope_dim=4, latent_dim=16, strategy="uniform")
    assert report.cache_elements_after < report.cache_elements_before
    with torch.no_grad():
        assert torch.isfinite(mla(torch.randint(0, 97, (1, 8)))).all()


def test_qwen2_biases_are_refused_by_name():
    config = transformers.Qwen2Config(hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=97)
    with pytest.raises(ValueError, match="Qwen2's q/k/v biases are not converted"):
        convert_to_mla(transformers.Qwen2ForCausalLM(config), rope_dim=4, latent_dim=16, strategy="uniform")


def test_bf16_conversion_is_within_bf16_rounding():
    """A bfloat16 HF model converts to a bfloat16 MLA model as far from the float32 logits as HF's own bf16."""
    hf = tiny(transformers.LlamaConfig, 2)
    x = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        reference = hf(x).logits
        hf16 = hf.to(torch.bfloat16)
        mla, _ = convert_to_mla(hf16, rope_dim=16, latent_dim=32, strategy="high")
        assert next(mla.parameters()).dtype == torch.bfloat16
        ours = (mla(x).float() - reference).abs().max()
        theirs = (hf16(x).logits.float() - reference).abs().max()
    assert ours <= 2 * theirs + 1e-3, (ours, theirs)
