"""MultiHeadLatentAttention (DeepSeek-V2) against the paper's formulas; absorbed path; latent cache; QK-norm."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.encoders.rotary import RotaryEncoding
from pe_toolkit.nn.latent_attention import LatentKVCache, MultiHeadLatentAttention

CONFIGS = [
    {},
    {"query_latent_dim": 12},
    {"num_kv_heads": 2, "rope_heads": 2},
    {"rope_heads": 4, "value_head_dim": 6},
    {"value_latent_dim": 6},
    {"nope_head_dim": 0, "value_head_dim": 8},
    {"latent_norm": False, "nope_head_dim": 5},
]


def make_mla(**options) -> MultiHeadLatentAttention:
    options = {"latent_dim": 10, "rope_head_dim": 4, **options}
    return MultiHeadLatentAttention(32, 4, **options).double()


def reference_mla(m: MultiHeadLatentAttention, x: torch.Tensor, positions: torch.Tensor, bias=None) -> torch.Tensor:
    """DeepSeek-V2 Eq. 9-19 written out head by head, RoPE from the core RotaryEncoding (rope_heads = 1)."""
    b, length, _ = x.shape
    h, dn, dr, dv = m.num_heads, m.nope_head_dim, m.rope_head_dim, m.value_head_dim
    rope = RotaryEncoding(dr * h, h).double()
    c_q = x if m.q_down is None else m.q_latent_norm(m.q_down(x))
    c_kv = m.kv_down(x)
    if m.kv_norm is not None:
        c_kv = m.kv_norm(c_kv)
    c_v = c_kv
    if m.v_down is not None:
        c_v = m.v_down(x) if m.v_norm is None else m.v_norm(m.v_down(x))
    group = h // m.num_kv_heads
    out = []
    for head in range(h):
        g = head // group
        q_c = c_q @ m.q_nope_proj.weight[head * dn:(head + 1) * dn].T
        q_r = c_q @ m.q_rope_proj.weight[head * dr:(head + 1) * dr].T
        k_c = c_kv @ m.k_up.weight[g * dn:(g + 1) * dn].T
        r = head // (h // m.rope_heads)
        k_r = x @ m.k_rope_proj.weight[r * dr:(r + 1) * dr].T
        v = c_v @ m.v_up.weight[g * dv:(g + 1) * dv].T
        q_r = rope.rotate_one(q_r[:, None], positions)[:, 0]
        k_r = rope.rotate_one(k_r[:, None], positions)[:, 0]
        logits = (q_c @ k_c.transpose(-1, -2) + q_r @ k_r.transpose(-1, -2)) / math.sqrt(dn + dr)
        if bias is not None:
            logits = logits + bias[:, head]
        logits = logits.masked_fill(torch.ones(length, length, dtype=torch.bool).triu(1), float("-inf"))
        out.append(logits.softmax(-1) @ v)
    return m.o_proj(torch.cat(out, dim=-1))


@pytest.mark.parametrize("options", CONFIGS)
def test_plain_path_matches_the_papers_formulas(options):
    m = make_mla(**options)
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    positions = torch.arange(7)
    torch.testing.assert_close(m(x), reference_mla(m, x, positions))


@pytest.mark.parametrize("options", CONFIGS)
def test_absorbed_path_equals_plain_path(options):
    m = make_mla(**options)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    torch.testing.assert_close(m(x, absorb=True), m(x), rtol=1e-12, atol=1e-12)
    positions = torch.tensor([[3, 4, 5, 9, 10, 11, 12, 20, 21], [0, 1, 2, 3, 4, 5, 6, 7, 8]])
    torch.testing.assert_close(m(x, q_pos=positions, absorb=True), m(x, q_pos=positions), rtol=1e-12, atol=1e-12)


def test_absorbed_path_gets_gradients_and_matches_them():
    m = make_mla(query_latent_dim=12)
    x = torch.randn(2, 5, 32, dtype=torch.float64)
    grads = []
    for absorb in (False, True):
        m.zero_grad()
        m(x, absorb=absorb).pow(2).sum().backward()
        grads.append([p.grad.clone() for p in m.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("options", [{}, {"rope_heads": 2, "num_kv_heads": 2}, {"value_latent_dim": 6}])
@pytest.mark.parametrize("absorb", [False, True])
def test_cache_holds_only_latent_and_rope_key_and_decoding_matches(options, absorb):
    m = make_mla(**options)
    x = torch.randn(2, 8, 32, dtype=torch.float64)
    full = m(x)
    cache = m.new_cache()
    assert isinstance(cache, LatentKVCache)
    steps = [m(x[:, :5], cache=cache, absorb=absorb)]
    steps += [m(x[:, i:i + 1], cache=cache, absorb=absorb) for i in (5, 6, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    latent = m.latent_dim + (m.value_latent_dim or 0)
    assert cache.latent.shape == (2, 8, latent)
    assert cache.rope_key.shape == (2, m.rope_heads, 8, m.rope_head_dim)
    assert m.cache_elements_per_token == latent + m.rope_heads * m.rope_head_dim
    # the cached tensors are exactly the latents and the rotated rope keys, nothing else
    c_k, c_v = m._latents(x)
    expected = c_k if m.v_down is None else torch.cat((c_k, c_v), -1)
    torch.testing.assert_close(cache.latent, expected)
    torch.testing.assert_close(cache.rope_key, m._rope_keys(x, torch.arange(8)))
    stored = {t.data_ptr() for t in (cache._k, cache._v)}
    assert len(stored) == 2 and cache._k.shape[1] == 1  # one latent "head" and the rope keys


def test_cache_elements_per_token_deepseek_v2_sizes():
    # DeepSeek-V2: d_c = 4 d_h = 512, d_R = d_h / 2 = 64, one shared rope key -> 576 per token and layer
    with torch.device("meta"):  # sizes only: no memory, no initialisation cost
        m = MultiHeadLatentAttention(5120, 128, latent_dim=512, rope_head_dim=64, nope_head_dim=128,
                                     query_latent_dim=1536)
    assert m.cache_elements_per_token == 576


def test_rope_part_is_relative_shifting_positions_changes_nothing():
    m = make_mla(rope_heads=2, num_kv_heads=2)
    x = torch.randn(1, 6, 32, dtype=torch.float64)
    torch.testing.assert_close(m(x, q_pos=torch.arange(6) + 37), m(x))


def test_bias_encoding_is_added():
    m = make_mla()
    alibi = pet.get_encoder("alibi", 32, 4).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    positions = torch.arange(6)
    dummy = torch.zeros(1, dtype=torch.float64)  # a position-only bias reads only the dtype of q
    bias = alibi.bias(dummy, dummy, positions, positions).expand(2, 4, 6, 6)
    torch.testing.assert_close(m(x, encoding=alibi), reference_mla(m, x, positions, bias))
    torch.testing.assert_close(m(x, encoding=alibi, absorb=True), m(x, encoding=alibi))
    logits = m.attention_logits(x, encoding=alibi)
    assert logits.shape == (2, 4, 6, 6) and torch.isinf(logits[..., 0, 1:]).all()


def test_attention_logits_matches_forward():
    m = make_mla(num_kv_heads=2)
    x = torch.randn(1, 5, 32, dtype=torch.float64)
    probs = m.attention_logits(x).softmax(-1)
    c_k, c_v = m._latents(x)
    v = m.v_up(c_v).view(1, 5, 2, m.value_head_dim).transpose(1, 2).repeat_interleave(2, dim=1)
    out = m.o_proj((probs @ v).transpose(1, 2).reshape(1, 5, -1))
    torch.testing.assert_close(out, m(x))


def test_transformer_with_mla_generates_with_cache_like_without():
    config = pet.TransformerConfig(vocab_size=50, dim=32, num_heads=4, num_layers=2, attention="mla",
                                   latent_options={"latent_dim": 8, "rope_head_dim": 4})
    model = pet.Transformer(config).eval()
    assert all(isinstance(b.attn, MultiHeadLatentAttention) for b in model.blocks)
    prompt = torch.randint(0, 50, (2, 5))
    out = model.generate(prompt, 4)
    tokens = prompt
    for _ in range(4):  # greedy decoding without a cache
        tokens = torch.cat((tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(out, tokens)
    state = model.state_dict()
    assert "blocks.0.attn.rope_inv_freq" in state  # converted frequencies survive a save / load


def test_qk_norm_matches_manual_normalisation_and_bounds_logits():
    attn = pet.MultiHeadAttention(16, 2, qk_norm=True, causal=True).double()
    with torch.no_grad():
        attn.q_norm.weight.fill_(1.5)
        attn.k_norm.weight.fill_(-2.0)
        attn.q_proj.weight.mul_(50)  # large weights: without QK-norm the logits would be huge
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    logits = attn.attention_logits(x)
    q = attn.q_proj(x).view(2, 6, 2, 8).transpose(1, 2)
    k = attn.k_proj(x).view(2, 6, 2, 8).transpose(1, 2)
    q = 1.5 * q / q.pow(2).mean(-1, keepdim=True).add(torch.finfo(q.dtype).eps).sqrt()
    k = -2.0 * k / k.pow(2).mean(-1, keepdim=True).add(torch.finfo(k.dtype).eps).sqrt()
    expected = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1),
                                                                     float("-inf"))
    torch.testing.assert_close(logits, expected)
    assert logits[torch.isfinite(logits)].abs().max() <= 1.5 * 2.0 * math.sqrt(8) + 1e-9
    probs = logits.softmax(-1)
    v = attn.v_proj(x).view(2, 6, 2, 8).transpose(1, 2)
    torch.testing.assert_close(attn(x), attn.o_proj((probs @ v).transpose(1, 2).reshape(2, 6, 16)))


def test_qk_norm_default_off_and_transformer_option():
    assert pet.MultiHeadAttention(16, 2).q_norm is None
    config = pet.TransformerConfig(vocab_size=30, dim=16, num_heads=2, num_layers=1, qk_norm=True)
    model = pet.Transformer(config).eval()
    assert model.blocks[0].attn.qk_norm
    prompt = torch.randint(0, 30, (1, 4))
    tokens = prompt
    for _ in range(3):
        tokens = torch.cat((tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)), dim=1)
    assert torch.equal(model.generate(prompt, 3), tokens)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"rope_head_dim": 3}, ValueError, "rope_head_dim must be even"),
        ({"rope_heads": 3}, ValueError, "rope_heads"),
        ({"num_kv_heads": 3}, ValueError, "num_kv_heads"),
        ({"latent_dim": 0}, ValueError, "latent_dim"),
        ({"latent_dim": 4.0}, TypeError, "latent_dim"),
        ({"latent_norm": 1}, TypeError, "latent_norm"),
        ({"dropout": 1.0}, ValueError, "dropout"),
        ({"rope_base": -1.0}, ValueError, "rope_base"),
    ],
)
def test_bad_options(options, error, match):
    with pytest.raises(error, match=match):
        MultiHeadLatentAttention(32, 4, **{"latent_dim": 8, **options})


def test_bad_inputs():
    m = make_mla()
    x = torch.randn(1, 4, 32, dtype=torch.float64)
    with pytest.raises(ValueError, match="self-attention only"):
        m(x, x)
    with pytest.raises(ValueError, match=r"x must have shape"):
        m(x[..., :16])
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        m(x, key_padding_mask=torch.ones(1, 4))
    with pytest.raises(ValueError, match="key_padding_mask has shape"):
        m(x, key_padding_mask=torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="CoPE|rotate/bias"):
        m(x, encoding=pet.get_encoder("cope", 32, 4))
    with pytest.raises(TypeError, match="qk_norm must be a bool"):
        pet.MultiHeadAttention(16, 2, qk_norm="yes")
    base = {"vocab_size": 10, "dim": 16, "num_heads": 2, "num_layers": 1}
    with pytest.raises(ValueError, match="qk_norm=True is not available"):
        pet.Transformer(pet.TransformerConfig(**base, attention="mla", qk_norm=True, latent_options={"latent_dim": 4}))
    with pytest.raises(ValueError, match="latent_dim"):
        pet.Transformer(pet.TransformerConfig(**base, attention="mla"))
    with pytest.raises(ValueError, match="latent_options apply"):
        pet.Transformer(pet.TransformerConfig(**base, latent_options={"latent_dim": 4}))
    with pytest.raises(ValueError, match="attention must be one of"):
        pet.Transformer(pet.TransformerConfig(**base, attention="linear"))


def test_generate_decodes_mla_on_the_absorbed_path(monkeypatch):
    """Transformer.generate with MLA layers: the prompt (prefill) takes the plain path, every decoding step
    the absorbed one (absorb=None), and the tokens equal a plain-path decode."""
    from pe_toolkit.nn import latent_attention

    model = pet.Transformer(pet.TransformerConfig(vocab_size=30, dim=32, num_heads=4, num_layers=2, attention="mla",
                                                  latent_options={"latent_dim": 8})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    calls = {"plain": 0, "absorbed": 0}
    plain, absorbed = (latent_attention.MultiHeadLatentAttention._attend_plain,
                       latent_attention.MultiHeadLatentAttention._attend_absorbed)

    def counting(kind, function):
        def wrapper(self, *args):
            calls[kind] += 1
            return function(self, *args)
        return wrapper

    monkeypatch.setattr(latent_attention.MultiHeadLatentAttention, "_attend_plain", counting("plain", plain))
    monkeypatch.setattr(latent_attention.MultiHeadLatentAttention, "_attend_absorbed", counting("absorbed", absorbed))
    prompt = torch.randint(0, 30, (2, 12))  # longer than ABSORB_MAX_QUERIES: a plain prefill
    out = model.generate(prompt, 5)
    assert calls == {"plain": 2, "absorbed": 2 * 4}  # 2 layers: one prefill each, then 4 fed-back tokens
    monkeypatch.setattr(latent_attention, "ABSORB_MAX_QUERIES", 0)  # everything plain
    assert torch.equal(model.generate(prompt, 5), out)


def test_generate_preallocates_its_caches_exactly(monkeypatch):
    """generate knows its final length: each layer's cache holds exactly prompt + new tokens (not up to 2x)."""
    model = pet.Transformer(pet.TransformerConfig(vocab_size=30, dim=32, num_heads=4, num_layers=2, attention="mla",
                                                  latent_options={"latent_dim": 8})).eval()
    made = []
    original = model.new_cache

    def recording(max_length=None):
        made.append(original(max_length=max_length))
        return made[-1]

    monkeypatch.setattr(model, "new_cache", recording)
    model.generate(torch.randint(0, 30, (2, 20)), 13)
    (caches,) = made
    for cache in caches:
        assert cache.allocated == 33 and cache.held == 32  # the last sampled token is never fed back
        # latents (8) + rope key (1 head x rope_head_dim) + positions, 33 slots, batch 2
        latent = model.blocks[0].attn
        per_slot = 2 * (latent.latent_dim + latent.rope_heads * latent.rope_head_dim) * 4 + 8
        assert cache.nbytes == 33 * per_slot
    grown = pet.KVCache()
    grown.update(torch.zeros(1, 1, 17, 4), torch.zeros(1, 1, 17, 4), torch.arange(17))
    grown.update(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4), torch.arange(17, 18))
    assert grown.held == 18 and grown.allocated == 34 and grown.nbytes == 34 * (4 * 4 * 2 + 8)
