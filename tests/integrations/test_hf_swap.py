"""swap_positional_encoding: registered sequence encoders inside HF Llama / Qwen2 / Mistral causal LMs.

Tiny random models, nothing downloaded. Tests that compare with the sibling modules skip until they
exist: ``rope_options_from_hf`` (``rope_config``) and ``from_hf`` (``weights``, which needs ``rope_config``).
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_helpers import random_causal_lm  # noqa: E402

import pe_toolkit as pet  # noqa: E402
from pe_toolkit import registry  # noqa: E402
from pe_toolkit.encoders.base import PositionalEncoding  # noqa: E402
from pe_toolkit.integrations.hf.swap import (  # noqa: E402
    POSITIONS_ATTR,
    load_swapped,
    swap_positional_encoding,
    swapped_encoding,
)

SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, vocab_size=97,
             max_position_embeddings=128, pad_token_id=0)
YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=2.0, original_max_position_embeddings=64)
CASES = {
    # case: (config class, options, attn_implementation, the rope options of the model's own RoPE)
    "llama_gqa_sdpa": (transformers.LlamaConfig, dict(num_key_value_heads=2), "sdpa", {}),
    "llama_mha_eager": (transformers.LlamaConfig, dict(num_key_value_heads=4), "eager", {}),
    "llama_yarn": (transformers.LlamaConfig, dict(num_key_value_heads=2, rope_parameters=YARN), "sdpa",
                   dict(scaling="yarn", factor=2.0, original_max_position=64)),
    "qwen2_gqa": (transformers.Qwen2Config, dict(num_key_value_heads=2), "sdpa", {}),
    "mistral_gqa": (transformers.MistralConfig, dict(num_key_value_heads=2, sliding_window=None), "sdpa", {}),
    "mistral_window": (transformers.MistralConfig, dict(num_key_value_heads=2, sliding_window=5), "eager", {}),
    "qwen2_window": (transformers.Qwen2Config, dict(num_key_value_heads=2, use_sliding_window=True, sliding_window=4,
                                                    max_window_layers=1), "sdpa", {}),  # layer 1 slides
}
SEQUENCE_ENCODERS = pet.list_encoders(domain="sequence")
LEARNABLE = [n for n in SEQUENCE_ENCODERS
             if any(True for _ in pet.get_encoder(n, 64, 4, **pet.encoder_info(n).example_options).parameters())]


def hf_model(case: str = "llama_gqa_sdpa", dtype=torch.float32):
    config_class, options, implementation, _ = CASES[case]
    return random_causal_lm(config_class(**SIZES, **options), implementation, dtype)


def swapped(case: str, name: str, **options):
    """``hf_model(case)`` with ``name`` swapped in and its parameters moved off their initial values."""
    model = swap_positional_encoding(hf_model(case), name, **options)
    with torch.no_grad():
        for p in swapped_encoding(model).parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def tokens(batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(1, SIZES["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(1))


def left_padded(lengths: tuple[int, ...] = (7, 4)) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of ``lengths`` real tokens, left-padded with token 0: ``(ids, attention_mask)``."""
    width = max(lengths)
    ids, mask = torch.zeros(len(lengths), width, dtype=torch.long), torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = tokens(1, n)[0].roll(row)
        mask[row, width - n:] = 1
    return ids, mask


def generate(model, ids, mask=None, new: int = 5):
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                             pad_token_id=0, return_dict_in_generate=True, output_scores=True)
    return out.sequences, torch.stack(out.scores, dim=1)


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """HF generate's ``position_ids`` for a left-padded ``attention_mask``."""
    return (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)


# ------------------------------------------------------------------------- (a) RoPE reproduces HF
@pytest.mark.parametrize("case", sorted(CASES))
def test_rope_with_the_models_own_options_leaves_the_logits_unchanged(case):
    """Swapping in ``rope`` with the model's own RoPE (also YaRN; also a sliding window) reproduces HF's
    logits to 1e-5 in float32 (HF's float32 angles against our float64), on a left-padded batch too."""
    hf = hf_model(case)
    x = tokens(2, 12)
    ids, mask = left_padded((12, 9))
    with torch.no_grad():
        expected, expected_padded = hf(x).logits, hf(ids, attention_mask=mask).logits
        swap_positional_encoding(hf, "rope", base=10000.0, **CASES[case][3])
        assert hf.config._attn_implementation == "pe_toolkit" and type(hf).__name__.startswith("PeToolkit")
        got, got_padded = hf(x).logits, hf(ids, attention_mask=mask).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    real = mask.bool()
    torch.testing.assert_close(got_padded[real], expected_padded[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["llama_gqa_sdpa", "qwen2_gqa", "mistral_window", "qwen2_window"])
def test_rope_generate_gives_hfs_tokens(case):
    """Greedy decoding of a left-padded batch with the KV cache, past the sliding window: HF's tokens."""
    hf = hf_model(case)
    ids, mask = left_padded((7, 4))
    expected, expected_scores = generate(hf, ids, mask, new=6)
    swap_positional_encoding(hf, "rope", **CASES[case][3])
    got, scores = generate(hf, ids, mask, new=6)
    assert torch.equal(got, expected)
    torch.testing.assert_close(scores, expected_scores, rtol=1e-5, atol=1e-5)


def test_packed_sequences_follow_hfs_rule():
    """Without cache and mask, position_ids that restart are documents that do not see each other (as HF)."""
    hf = hf_model()
    x = tokens(2, 10)
    position_ids = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2], list(range(10))])
    with torch.no_grad():
        expected = hf(x, position_ids=position_ids, use_cache=False).logits
        swap_positional_encoding(hf, "rope")
        got = hf(x, position_ids=position_ids, use_cache=False).logits
        alone = hf(x[:1, 4:7], use_cache=False).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[:1, 4:7], alone, rtol=1e-5, atol=1e-5)


def test_rope_options_from_hf_reproduce_the_logits():
    """With the sibling ``rope_options_from_hf`` (skips until ``rope_config`` exists): default and YaRN RoPE."""
    rope_config = pytest.importorskip("pe_toolkit.integrations.hf.rope_config")
    for case in ("llama_gqa_sdpa", "llama_yarn"):
        hf = hf_model(case)
        x = tokens(2, 100)
        with torch.no_grad():
            expected = hf(x).logits
            swap_positional_encoding(hf, "rope", **rope_config.rope_options_from_hf(hf.config))
            torch.testing.assert_close(hf(x).logits, expected, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------- (b) the same as from_hf
@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_swap_equals_from_hf_with_the_same_encoder(name):
    """The swapped HF model computes what ``from_hf(model, encoding=name)`` computes (skips until
    ``weights.from_hf`` and the ``rope_config`` it imports exist)."""
    pytest.importorskip("pe_toolkit.integrations.hf.rope_config")
    weights = pytest.importorskip("pe_toolkit.integrations.hf.weights")
    for case in ("llama_gqa_sdpa", "qwen2_gqa"):
        hf = swapped(case, name)
        ours = weights.from_hf(hf, encoding=name)
        ours.encodings[0].load_state_dict(swapped_encoding(hf).state_dict())
        ids, mask = left_padded((9, 5))
        with torch.no_grad():
            torch.testing.assert_close(hf(tokens()).logits, ours(tokens()), rtol=1e-5, atol=1e-5)
            expected = ours(ids, positions=positions_of(mask), padding_mask=mask.bool())
            real = mask.bool()
            torch.testing.assert_close(hf(ids, attention_mask=mask).logits[real], expected[real], rtol=1e-5,
                                       atol=1e-5)


# ------------------------------------------------ (c) every encoder: padded generate, cached decoding
def check_decoding(model, lengths=(7, 4), new=5) -> None:
    """A left-padded batch decodes each prompt's own tokens (greedy, with scores) and its cached steps
    equal a full forward over the same tokens."""
    ids, mask = left_padded(lengths)
    batch_tokens, batch_scores = generate(model, ids, mask, new)
    width = ids.shape[1]
    for row, n in enumerate(lengths):
        alone, alone_scores = generate(model, ids[row:row + 1, width - n:], None, new)
        assert torch.equal(batch_tokens[row, width - n:], alone[0]), row
        torch.testing.assert_close(batch_scores[row], alone_scores[0], rtol=1e-4, atol=1e-4)
    full_mask = torch.cat((mask, torch.ones(len(lengths), new, dtype=mask.dtype)), dim=1)
    sequence = batch_tokens
    positions = positions_of(full_mask)
    with torch.no_grad():
        full = model(sequence, attention_mask=full_mask, position_ids=positions).logits
        cache = transformers.DynamicCache(config=model.config)
        steps = [model(sequence[:, :width], attention_mask=full_mask[:, :width], position_ids=positions[:, :width],
                       cache=cache, use_cache=True).logits]
        for t in range(width, sequence.shape[1]):
            steps.append(model(sequence[:, t:t + 1], attention_mask=full_mask[:, :t + 1],
                               position_ids=positions[:, t:t + 1], cache=cache, use_cache=True).logits)
    cached = torch.cat(steps, dim=1)
    real = full_mask.bool()
    torch.testing.assert_close(cached[real], full[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_every_sequence_encoder_decodes_left_padded_batches(name):
    """Every registered sequence encoder serves the HF model: padded ``generate`` equals each prompt
    alone, cached decoding equals a full forward (Llama, GQA, SDPA)."""
    options = {} if name == "learned" else pet.encoder_info(name).example_options  # max_len: max_position_embeddings
    check_decoding(swapped("llama_gqa_sdpa", name, **options))


@pytest.mark.parametrize(("case", "name"), [("llama_mha_eager", "t5"), ("qwen2_gqa", "cope"),
                                            ("mistral_gqa", "fire"), ("mistral_window", "alibi"),
                                            ("mistral_window", "kerple")])
def test_other_architectures_decode_left_padded_batches(case, name):
    """MHA / eager Llama, Qwen2 (q/k/v biases), Mistral with and without a sliding window (a window of
    5 below the prompt lengths, so cached keys leave it)."""
    model = swapped(case, name)
    assert getattr(model.config, "sliding_window", None) == (5 if case == "mistral_window" else None)
    check_decoding(model, lengths=(8, 6), new=5)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("backend", ["sdpa", "blocked", "flex"])
def test_backends_give_the_same_logits(backend, monkeypatch):
    """``backend=`` picks our attention backend; all give the same logits (flex eagerly on the CPU)."""
    from pe_toolkit.nn import backends

    monkeypatch.setattr(backends, "FLEX_COMPILE", False)
    ids, mask = left_padded((9, 5))
    with torch.no_grad():
        reference = swapped("llama_gqa_sdpa", "alibi", backend="sdpa")(ids, attention_mask=mask).logits
        options = {"query_block_size": 4} if backend == "blocked" else {}
        model = swapped("llama_gqa_sdpa", "alibi", backend=backend, **options)
        assert model.config.pe_toolkit["backend"] == backend
        got = model(ids, attention_mask=mask).logits
    real = mask.bool()
    torch.testing.assert_close(got[real], reference[real], rtol=1e-5, atol=1e-5)


def test_beam_search_and_prompt_lookup_decoding(monkeypatch):
    """Beam search (the cache is reordered between beams of one prompt) gives HF's beams with ``rope`` and
    each prompt's own beams with ``fire``; prompt-lookup decoding (the cache is cropped after rejected
    draft tokens) gives the greedy tokens."""
    crops = []
    crop = transformers.cache_utils.DynamicLayer.crop
    monkeypatch.setattr(transformers.cache_utils.DynamicLayer, "crop",
                        lambda layer, n: (crops.append(n), crop(layer, n))[1])
    ids, mask = left_padded((9, 6))
    options = dict(max_new_tokens=6, min_new_tokens=6, num_beams=3, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        expected = hf_model().generate(ids, attention_mask=mask, **options)
        got = swap_positional_encoding(hf_model(), "rope").generate(ids, attention_mask=mask, **options)
        assert torch.equal(got, expected)
        model = swapped("llama_gqa_sdpa", "fire")
        batch = model.generate(ids, attention_mask=mask, **options)
        for row, n in enumerate((9, 6)):
            assert torch.equal(model.generate(ids[row:row + 1, 9 - n:], **options)[0], batch[row, 9 - n:]), row
        greedy = dict(max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
        prompt = torch.cat((ids[:1, :], ids[:1, :]), dim=1)  # repeated n-grams: drafts to accept and reject
        drafted = model.generate(prompt, prompt_lookup_num_tokens=3, **greedy)
        assert torch.equal(drafted, model.generate(prompt, **greedy))
    assert any(n < 0 for n in crops)  # some drafts were rejected


def test_cache_positions_follow_a_crop_and_a_deepcopy():
    """Assisted decoding crops the cache from the end: the recorded key positions follow; a deep copy of
    the cache (prefix reuse) keeps them."""
    import copy

    model = swapped("llama_gqa_sdpa", "fire")
    x = tokens(1, 10)
    with torch.no_grad():
        full = model(x).logits
        cache = transformers.DynamicCache(config=model.config)
        model(x[:, :8], cache=cache, use_cache=True)
        cache.crop(-2)  # drop tokens 6 and 7
        prefix = copy.deepcopy(cache)
        assert getattr(prefix.layers[0], POSITIONS_ATTR).tolist() == list(range(8))
        again = model(x[:, 6:], cache=cache, use_cache=True).logits
        copied = model(x[:, 6:], cache=prefix, use_cache=True).logits
    torch.testing.assert_close(again, full[:, 6:], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(copied, full[:, 6:], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ (d) trainable parameters
@pytest.mark.parametrize("name", LEARNABLE)
def test_encoder_parameters_are_trained(name):
    """A learnable encoder's parameters are in ``model.parameters()`` and the state dict (under
    ``model.pe_toolkit.encoding.``) and get gradients from the HF model's loss."""
    model = swapped("llama_gqa_sdpa", name).train()
    encoding = swapped_encoding(model)
    ids = set(map(id, model.parameters()))
    assert all(id(p) in ids for p in encoding.parameters())
    keys = {f"model.pe_toolkit.encoding.{key}" for key in encoding.state_dict()}
    assert keys and keys <= set(model.state_dict())
    assert not any(".self_attn.encoding" in key for key in model.state_dict())  # registered once
    ids, mask = left_padded((9, 5))
    model(ids, attention_mask=mask).logits.sum().backward()
    for key, p in encoding.named_parameters():
        assert p.grad is not None and bool(p.grad.abs().sum() > 0), key


def test_gradient_checkpointing_gives_the_same_gradients():
    """Under HF gradient checkpointing the recomputed layers still see the padding (it travels in the kwargs)."""
    ids, mask = left_padded((9, 5))
    grads = []
    for checkpointing in (False, True):
        model = swapped("llama_gqa_sdpa", "t5").train()
        if checkpointing:
            getattr(model, "activation_checkpointing_enable", model.gradient_checkpointing_enable)()
        model(ids, attention_mask=mask).logits[mask.bool()].sum().backward()  # HF drops the cache itself
        grads.append(torch.cat([p.grad.flatten() for p in swapped_encoding(model).parameters()]))
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------ (e) save, reload
@pytest.mark.parametrize("name", ["t5", "alibi", "learned"])
def test_save_pretrained_and_load_swapped_give_the_same_logits(name, tmp_path):
    """``save_pretrained`` stores the encoder in ``config.json`` (name, options) and its parameters in
    the safetensors state dict; ``load_swapped`` rebuilds the swap and loads them: equal logits."""
    model = swapped("qwen2_gqa", name)
    ids, mask = left_padded((9, 5))
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    model.save_pretrained(tmp_path / "swapped")
    stored = json.loads((tmp_path / "swapped" / "config.json").read_text())["pe_toolkit"]
    assert stored["encoding"] == name and stored["backend"] == "auto"
    assert stored["state_dict_prefix"] == "model.pe_toolkit.encoding."
    if name == "learned":
        assert stored["options"] == {"max_len": SIZES["max_position_embeddings"]}
    back = load_swapped(tmp_path / "swapped")
    assert type(back) is type(model) and swapped_encoding(back).registry_name == name
    with torch.no_grad():
        torch.testing.assert_close(back(ids, attention_mask=mask).logits, expected, rtol=0, atol=0)
    # swap_positional_encoding(model) after from_pretrained reads config.pe_toolkit: same encoder, fresh parameters
    plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "swapped")
    assert swapped_encoding(swap_positional_encoding(plain)).registry_name == name


# ------------------------------------------------------------------------------------- (f) bf16
@pytest.mark.parametrize("name", ["rope", "alibi", "t5"])
def test_bf16_is_within_bf16_rounding(name):
    """In bfloat16 the swapped model's logits are as far from its float32 logits as HF's own bfloat16
    logits are from HF's float32 ones; the encoder follows the model's dtype."""
    hf = hf_model()
    x = tokens()
    with torch.no_grad():
        hf_error = (hf_model(dtype=torch.bfloat16)(x).logits.float() - hf(x).logits).abs().max()
        model = swapped("llama_gqa_sdpa", name)
        reference = model(x).logits
        model = model.to(torch.bfloat16)
        assert all(p.dtype == torch.bfloat16 for p in swapped_encoding(model).parameters())
        error = (model(x).logits.float() - reference).abs().max()
    assert error <= 2 * hf_error + 1e-3, (error, hf_error)


# ---------------------------------------------------------------------------------- (g) errors
def test_unsupported_models_are_named():
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50))
    with pytest.raises(TypeError, match="LlamaForCausalLM, Qwen2ForCausalLM, .*got GPT2LMHeadModel"):
        swap_positional_encoding(gpt2, "alibi")
    with pytest.raises(TypeError, match="got Linear"):
        swap_positional_encoding(torch.nn.Linear(2, 2), "alibi")


def test_encoders_that_cannot_serve_a_causal_lm_say_why(monkeypatch):
    hf = hf_model()
    with pytest.raises(ValueError, match="unknown encoder 'alibbi'; did you mean 'alibi'"):
        swap_positional_encoding(hf, "alibbi")
    with pytest.raises(ValueError, match="'time_interval' is a 'recsys' encoder"):
        swap_positional_encoding(hf, "time_interval")
    with pytest.raises(ValueError, match="causal=False: a causal LM's attention is causal"):
        swap_positional_encoding(hf, "t5", causal=False)
    with pytest.raises(ValueError, match="max_len=64 is shorter than config.max_position_embeddings=128"):
        swap_positional_encoding(hf, "learned", max_len=64)
    with pytest.raises(TypeError, match="encoding 'alibi' with options .* cannot serve this causal LM"):
        swap_positional_encoding(hf, "alibi", slopes=2)
    with pytest.raises(ValueError, match="'bam_ssmax' is not exact under sliding-window attention"):
        swap_positional_encoding(hf_model("mistral_window"), "bam_ssmax")
    with pytest.raises(ValueError, match="backend must be one of"):
        swap_positional_encoding(hf, "alibi", backend="fast")
    with pytest.raises(ValueError, match="query_block_size is the tile size"):
        swap_positional_encoding(hf, "alibi", backend="sdpa", query_block_size=8)
    with pytest.raises(ValueError, match="query_block_size must be a positive int"):
        swap_positional_encoding(hf, "alibi", query_block_size=0)
    with pytest.raises(ValueError, match="name=None reads model.config.pe_toolkit"):
        swap_positional_encoding(hf, None)
    with pytest.raises(TypeError, match="name must be a str"):
        swap_positional_encoding(hf, 3)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @pet.register_encoder("zz_tensor_option", relative=True, reference="Someone 2030")
    class TensorOption(PositionalEncoding):
        def __init__(self, dim, num_heads, *, scale=None, causal=True):
            super().__init__(dim, num_heads, causal=causal)

    with pytest.raises(ValueError, match="options of encoding 'zz_tensor_option' must be JSON values"):
        swap_positional_encoding(hf, "zz_tensor_option", scale=torch.ones(2))
    assert swapped_encoding(hf) is None and type(hf) is transformers.LlamaForCausalLM  # nothing changed on errors


def test_forward_errors_name_the_input():
    model = swapped("llama_gqa_sdpa", "alibi")
    x = tokens(2, 6)
    with torch.no_grad():
        with pytest.raises(ValueError, match="attention_mask must be a 2D padding mask"):
            model(x, attention_mask=torch.ones(2, 1, 6, 6, dtype=torch.bool))
        with pytest.raises(ValueError, match=r"attention_mask has shape \(2, 5\), expected \(2, 6\)"):
            model(x, attention_mask=torch.tensor([[0, 1, 1, 1, 1]] * 2))
        with pytest.raises(ValueError, match="a pre-allocated cache .*cache_implementation='static'"):
            model.generate(x, max_new_tokens=2, do_sample=False, cache_implementation="static", pad_token_id=0)
        before = transformers.DynamicCache(config=model.config)
        hf_model()(x, cache=before, use_cache=True)  # keys of the model before the swap
        with pytest.raises(ValueError, match="positions the swapped attention did not record"):
            model(x[:, :1], cache=before, use_cache=True)
        with pytest.raises(ValueError, match="3D multimodal positions are not covered"):
            model(x, position_ids=torch.zeros(3, 2, 6, dtype=torch.long))
        with pytest.raises(ValueError, match="called outside its swapped model's forward"):
            model.model.layers[0].self_attn(torch.randn(2, 6, 64), (torch.ones(1, 6, 16), torch.zeros(1, 6, 16)), None)


def test_load_swapped_refuses_a_plain_checkpoint(tmp_path):
    hf_model().save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match="has no 'pe_toolkit' entry"):
        load_swapped(tmp_path / "plain")


def test_swapping_again_replaces_the_encoder():
    """A second swap replaces the shared encoder (one set of hooks, the same layer modules)."""
    hf = hf_model()
    x = tokens()
    with torch.no_grad():
        expected = hf(x).logits
        swap_positional_encoding(hf, "alibi")
        layer = hf.model.layers[0].self_attn
        swap_positional_encoding(hf, "rope")
        assert hf.model.layers[0].self_attn is layer and hf.config.pe_toolkit["encoding"] == "rope"
        assert len(hf.model._forward_pre_hooks) == 1
        torch.testing.assert_close(hf(x).logits, expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------- rotated keys kept in the cache
@pytest.mark.parametrize("case", ["llama_gqa_sdpa", "mistral_window", "llama_yarn"])
def test_rope_rotates_each_key_once_with_the_logits_of_rotating_all(case, monkeypatch):
    """With "rope", HF's cache ends up holding rotated keys (as HF's own model's cache does, within float32
    rounding) and each step rotates only its new keys; left-padded generate gives the same tokens and scores
    as rotating every cached key again on every step (the earlier path). A length-dependent scaling keeps
    rotating all keys (its frequencies change with the length)."""
    from pe_toolkit.integrations.hf import swap as swap_module

    ids, mask = left_padded((9, 5))
    model = swap_positional_encoding(hf_model(case), "rope")
    monkeypatch.setattr(swap_module, "_CACHE_ROTATED_KEYS", False)
    before = generate(model, ids, mask, new=6)
    monkeypatch.setattr(swap_module, "_CACHE_ROTATED_KEYS", True)
    after = generate(model, ids, mask, new=6)
    assert torch.equal(after[0], before[0])
    torch.testing.assert_close(after[1], before[1], rtol=0, atol=0)
    with torch.no_grad():
        ours, theirs = (transformers.DynamicCache(config=model.config) for _ in range(2))
        model(tokens(), cache=ours, use_cache=True)
        hf_model(case)(tokens(), cache=theirs, use_cache=True)
    assert all(getattr(layer, swap_module.ROTATED_ATTR, False) for layer in ours.layers)
    for mine, hfs in zip(ours.layers, theirs.layers, strict=True):
        torch.testing.assert_close(mine.keys, hfs.keys, rtol=1e-5, atol=2e-6)
    dynamic = swap_positional_encoding(hf_model(case), "rope", scaling="dynamic", factor=2.0, original_max_position=8)
    with torch.no_grad():
        cache = transformers.DynamicCache(config=dynamic.config)
        dynamic(tokens(), cache=cache, use_cache=True)
    assert not any(getattr(layer, swap_module.ROTATED_ATTR, False) for layer in cache.layers)


def test_a_position_only_bias_is_built_once_per_forward_for_all_layers(monkeypatch):
    """ALiBi's bias is built by the first layer of a forward and reused by the others (one call, not one per
    layer), with the same logits and cached steps as building it in every layer."""
    from pe_toolkit.integrations.hf import swap as swap_module

    model = swapped("llama_gqa_sdpa", "alibi")
    encoding = swapped_encoding(model)
    calls = []
    build = type(encoding).position_bias

    def counted(self, *args, **kwargs):
        calls.append(1)
        return build(self, *args, **kwargs)

    monkeypatch.setattr(type(encoding), "position_bias", counted)
    ids, mask = left_padded((9, 5))
    with torch.no_grad():
        shared = model(ids, attention_mask=mask).logits
    assert len(calls) == 1 and model.config.num_hidden_layers == 2
    monkeypatch.setattr(swap_module, "_SHARE_POSITION_BIAS", False)
    with torch.no_grad():
        torch.testing.assert_close(model(ids, attention_mask=mask).logits, shared, rtol=0, atol=0)
    assert len(calls) == 3
    monkeypatch.setattr(swap_module, "_SHARE_POSITION_BIAS", True)
    check_decoding(model)
