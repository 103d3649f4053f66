"""The rest of HF's surface on a swapped model: output_attentions, packed batches described by
cu_seq_lens, torch.compile(fullgraph=True), static caches, and the refusals of from_hf and
convert_to_mla that name the blocking field. Tiny random models; nothing downloads."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

from pe_toolkit.integrations.hf import check_families, swap_positional_encoding  # noqa: E402
from pe_toolkit.integrations.hf.weights import NOT_REPRESENTED, from_hf  # noqa: E402


def test_output_attentions_are_hfs_attention_probabilities():
    """Own RoPE swapped in: the returned probabilities equal HF eager's on the real tokens (padded batch)."""
    model = check_families.build("Gemma2ForCausalLM")  # soft-capped, scaled, sliding layers
    ids, mask = check_families.left_padded()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask, output_attentions=True).attentions
        swap_positional_encoding(model, "rope")
        got = model(ids, attention_mask=mask, output_attentions=True).attentions
        alibi = swap_positional_encoding(model, "alibi")(ids, attention_mask=mask, output_attentions=True).attentions
    assert len(got) == len(expected) == model.config.num_hidden_layers
    real = mask.bool()
    pairs = real[:, None, :, None] & real[:, None, None, :]
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a[pairs.expand_as(a)], b[pairs.expand_as(b)], rtol=1e-5, atol=1e-6)
    assert len(alibi) == model.config.num_hidden_layers
    torch.testing.assert_close(alibi[0].sum(-1), torch.ones_like(alibi[0].sum(-1)))


@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
def test_packed_documents_by_cu_seq_lens_attend_only_within(name):
    """A flattened row with ``cu_seq_lens_q`` / ``cu_seq_lens_k`` (HF's flattening collator for FlashAttention)
    gives each document's logits alone; positions restart per document when no ``position_ids`` come."""
    model = swap_positional_encoding(check_families.build("Qwen3ForCausalLM"), name, seed=0)
    docs = [torch.randint(3, 97, (n,), generator=torch.Generator().manual_seed(n)) for n in (5, 3, 6)]
    row = torch.cat(docs)[None]
    bounds = torch.tensor([0, 5, 8, 14], dtype=torch.int32)
    with torch.no_grad():
        packed = model(row, cu_seq_lens_q=bounds, cu_seq_lens_k=bounds, max_length_q=6, max_length_k=6,
                       use_cache=False).logits
        alone = torch.cat([model(doc[None], use_cache=False).logits for doc in docs], dim=1)
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"cu_seq_lens_q / cu_seq_lens_k must be the cumulative document lengths"):
        model(row, cu_seq_lens_q=torch.tensor([0, 5, 9]), cu_seq_lens_k=torch.tensor([0, 5, 9]), use_cache=False)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", ["t5", "learned"])
def test_torch_compile_fullgraph(name):
    """``torch.compile(model, fullgraph=True)`` traces the swapped model without a graph break (Dynamo with
    the eager backend: the tracing is what fails on a break; inductor's code generation adds minutes on CPU).
    A representative subset (a learned bias table shared by the layers, an embed hook: the two paths
    with state across layers); all 14 sequence encoders pass the same check (see the HF tutorial),
    at 4-11 s each, too slow for every run."""
    model = swap_positional_encoding(check_families.build("LlamaForCausalLM"), name, seed=0)
    x = torch.randint(3, 97, (2, 12), generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x, use_cache=False).logits
        compiled = torch.compile(model, fullgraph=True, backend="eager")
        torch.testing.assert_close(compiled(x, use_cache=False).logits, expected, rtol=1e-6, atol=1e-6)


def test_static_cache_is_refused_by_name():
    model = swap_positional_encoding(check_families.build("MistralForCausalLM"), "alibi")
    ids, mask = check_families.left_padded()
    with pytest.raises(ValueError, match=r"a pre-allocated cache .*cache_implementation='static'.*DynamicCache"):
        model.generate(ids, attention_mask=mask, max_new_tokens=2, cache_implementation="static", pad_token_id=0)


@pytest.mark.parametrize("family", sorted(NOT_REPRESENTED))
def test_from_hf_names_the_fields_it_cannot_represent(family):
    model = check_families.build(family)
    field = NOT_REPRESENTED[family].split()[0].strip(",")
    with pytest.raises(TypeError, match=f"cannot represent {family} as a pe_toolkit Transformer: {field}"):
        from_hf(model)


def test_convert_to_mla_names_the_blocking_field():
    from pe_toolkit.conversion import convert_to_mla

    with pytest.raises(ValueError, match="sliding-window model: attention_window=5"):
        convert_to_mla(check_families.build("MistralForCausalLM"), rope_dim=4, latent_dim=8, strategy="high")
    with pytest.raises(ValueError, match="head_dim=24 with num_attention_heads=4 does not give hidden_size=64"):
        convert_to_mla(check_families.build("Qwen3ForCausalLM"), rope_dim=4, latent_dim=8, strategy="high")
    qwen3 = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16))
    with pytest.raises(ValueError, match="MHA2MLA converts self-attention MHA/GQA without QK-norm; .*qk_norm=True"):
        convert_to_mla(qwen3, rope_dim=4, latent_dim=8, strategy="high")
    with pytest.raises(TypeError, match="cannot represent Gemma2ForCausalLM .*attn_logit_softcapping"):
        convert_to_mla(check_families.build("Gemma2ForCausalLM"), rope_dim=4, latent_dim=8, strategy="high")
