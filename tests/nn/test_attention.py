"""MultiHeadAttention against a hand-written reference, masks, GQA, cross-attention, KV cache, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import pe_toolkit as pet


def reference_attention(attn: pet.MultiHeadAttention, x, context=None, *, q_pos, k_pos, causal, padding=None):
    """softmax(rotate(q).rotate(k)^T / sqrt(d) + bias + mask) v, written out with explicit loops over heads."""
    enc = attn.encoding
    source = x if context is None else context
    b, lq, _ = x.shape
    lk = source.shape[1]
    h, hkv, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    q = attn.q_proj(x).view(b, lq, h, d).transpose(1, 2)
    k = attn.k_proj(source).view(b, lk, hkv, d).transpose(1, 2)
    v = attn.v_proj(source).view(b, lk, hkv, d).transpose(1, 2)
    q, k = enc.rotate(q, k, q_pos, k_pos)
    bias = enc.bias(q, k, q_pos, k_pos)
    out = torch.empty(b, h, lq, d, dtype=x.dtype)
    for head in range(h):
        kv = head // (h // hkv)
        logits = q[:, head] @ k[:, kv].transpose(-1, -2) / math.sqrt(d)
        if bias is not None:
            logits = logits + bias.expand(b, h, lq, lk)[:, head]
        if causal:
            logits = logits.masked_fill(torch.ones(lq, lk, dtype=torch.bool).triu(1 + lk - lq), float("-inf"))
        if padding is not None:
            logits = logits.masked_fill(~padding[:, None, :], float("-inf"))
        out[:, head] = logits.softmax(-1) @ v[:, kv]
    return attn.o_proj(out.transpose(1, 2).reshape(b, lq, h * d))


@pytest.mark.parametrize("name", ["nope", "rope", "alibi", "t5", "cope"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_matches_reference(name, causal, kv_heads):
    if name == "cope" and not causal:
        pytest.skip("cope is causal only")
    enc = pet.get_encoder(name, 32, 4, causal=causal).double()
    attn = pet.MultiHeadAttention(32, 4, num_kv_heads=kv_heads, causal=causal, encoding=enc).double()
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    pos = torch.arange(7)
    expected = reference_attention(attn, x, q_pos=pos, k_pos=pos, causal=causal)
    torch.testing.assert_close(attn(x), expected)


def test_padding_mask_matches_reference_and_hides_padded_keys():
    enc = pet.get_encoder("alibi", 32, 4, causal=False).double()
    attn = pet.MultiHeadAttention(32, 4, causal=False, encoding=enc).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    pos = torch.arange(6)
    out = attn(x, key_padding_mask=padding)
    torch.testing.assert_close(out, reference_attention(attn, x, q_pos=pos, k_pos=pos, causal=False, padding=padding))
    changed = x.clone()
    changed[1, 4:] = torch.randn(2, 32, dtype=torch.float64)  # new content in the padded slots
    torch.testing.assert_close(attn(changed, key_padding_mask=padding)[1, :4], out[1, :4])


def test_query_that_sees_no_key_stays_finite():
    attn = pet.MultiHeadAttention(16, 2, causal=True, encoding=pet.get_encoder("alibi", 16, 2))
    padding = torch.tensor([[False, False, True, True]])  # left padding: query 0 sees only padding
    out = attn(torch.randn(1, 4, 16), key_padding_mask=padding)
    assert torch.isfinite(out).all()


def test_cross_attention_with_own_positions():
    enc = pet.get_encoder("rope", 32, 4, causal=False).double()
    attn = pet.MultiHeadAttention(32, 4, encoding=enc, kv_dim=24).double()
    x, context = torch.randn(2, 5, 32, dtype=torch.float64), torch.randn(2, 9, 24, dtype=torch.float64)
    q_pos, k_pos = torch.arange(5) * 2, torch.arange(9)
    out = attn(x, context, q_pos=q_pos, k_pos=k_pos)
    expected = reference_attention(attn, x, context, q_pos=q_pos, k_pos=k_pos, causal=False)
    torch.testing.assert_close(out, expected)
    # the default key positions of a context are arange(Lk)
    torch.testing.assert_close(attn(x, context, q_pos=q_pos), out)


def test_gqa_equals_full_attention_with_repeated_kv_weights():
    gqa = pet.MultiHeadAttention(32, 4, num_kv_heads=2, causal=True, encoding=pet.get_encoder("rope", 32, 4)).double()
    full = pet.MultiHeadAttention(32, 4, causal=True, encoding=pet.get_encoder("rope", 32, 4)).double()
    with torch.no_grad():
        full.q_proj.weight.copy_(gqa.q_proj.weight)
        full.o_proj.weight.copy_(gqa.o_proj.weight)
        for name in ("k_proj", "v_proj"):
            w = getattr(gqa, name).weight.view(2, 8, 32)
            getattr(full, name).weight.copy_(w.repeat_interleave(2, dim=0).reshape(32, 32))
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    torch.testing.assert_close(gqa(x), full(x))


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "cope", "fire"])
def test_kv_cache_chunks_match_full(name):
    attn = pet.MultiHeadAttention(32, 4, num_kv_heads=2, causal=True, encoding=pet.get_encoder(name, 32, 4)).double()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    cache = pet.KVCache()
    chunks = [attn(x[:, :4], cache=cache), attn(x[:, 4:5], cache=cache), attn(x[:, 5:], cache=cache)]
    torch.testing.assert_close(torch.cat(chunks, 1), attn(x))
    assert cache.length == 9


def test_kv_cache_grows_past_its_initial_capacity():
    attn = pet.MultiHeadAttention(16, 2, causal=True, encoding=pet.get_encoder("rope", 16, 2)).double()
    x = torch.randn(1, 40, 16, dtype=torch.float64)
    cache = pet.KVCache()
    steps = torch.cat([attn(x[:, t:t + 1], cache=cache) for t in range(40)], 1)
    torch.testing.assert_close(steps, attn(x))


def test_kv_cache_rejects_mismatched_batch():
    cache = pet.KVCache()
    cache.update(torch.zeros(2, 1, 3, 4), torch.zeros(2, 1, 3, 4), torch.arange(3))
    with pytest.raises(ValueError, match="KVCache"):
        cache.update(torch.zeros(3, 1, 1, 4), torch.zeros(3, 1, 1, 4), torch.arange(1))


def test_input_errors():
    attn = pet.MultiHeadAttention(16, 2, causal=True)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, 16\)"):
        attn(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="q_pos has shape"):
        attn(x, q_pos=torch.arange(4))
    with pytest.raises(TypeError, match="q_pos must hold integer or float"):
        attn(x, q_pos=torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN"):
        attn(x, q_pos=torch.tensor([0.0, 1.0, float("nan"), 3.0, 4.0]))
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        attn(x, key_padding_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match="key_padding_mask has shape"):
        attn(x, key_padding_mask=torch.ones(2, 4, dtype=torch.bool))


def test_constructor_errors():
    with pytest.raises(ValueError, match="num_heads"):
        pet.MultiHeadAttention(30, 4)
    with pytest.raises(ValueError, match="num_kv_heads"):
        pet.MultiHeadAttention(32, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="dropout"):
        pet.MultiHeadAttention(32, 4, dropout=1.5)
    with pytest.raises(TypeError, match="encoding must be a PositionalEncoding"):
        pet.MultiHeadAttention(32, 4, encoding=torch.nn.Linear(2, 2))


ATTENTION_ENCODERS = [n for n in pet.list_encoders(domain="sequence")
                      if n == "nope" or "rotate" in pet.encoder_info(n).hooks or "bias" in pet.encoder_info(n).hooks]


@pytest.mark.parametrize("name", ATTENTION_ENCODERS)
@pytest.mark.parametrize("causal", [True, False])
def test_query_blocks_equal_unblocked(name, causal):
    if name == "cope" and not causal:
        pytest.skip("cope is causal only")
    options = dict(pet.encoder_info(name).example_options)
    enc = pet.get_encoder(name, 32, 4, causal=causal, **options).double()
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.1 * torch.randn_like(p))
    whole = pet.MultiHeadAttention(32, 4, num_kv_heads=2, causal=causal, encoding=enc).double()
    blocked = pet.MultiHeadAttention(32, 4, num_kv_heads=2, causal=causal, encoding=enc, query_block_size=3).double()
    blocked.load_state_dict(whole.state_dict())
    x = torch.randn(2, 11, 32, dtype=torch.float64)
    padding = torch.ones(2, 11, dtype=torch.bool)
    padding[1, 8:] = False
    torch.testing.assert_close(blocked(x), whole(x))
    torch.testing.assert_close(blocked(x, key_padding_mask=padding), whole(x, key_padding_mask=padding))
    batched = torch.stack([torch.arange(11), torch.arange(11) * 2 + 3])
    torch.testing.assert_close(blocked(x, q_pos=batched), whole(x, q_pos=batched))
    if causal:  # a blocked prefill followed by cached steps
        cache = pet.KVCache()
        steps = torch.cat([blocked(x[:, :7], cache=cache), blocked(x[:, 7:9], cache=cache),
                           blocked(x[:, 9:], cache=cache)], 1)
        torch.testing.assert_close(steps, whole(x))


class LargestTensor(TorchDispatchMode):
    """Records the largest number of elements of any tensor an operation produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("name", ["bam", "alibi", "cope", "t5"])
def test_blocked_attention_never_materialises_a_full_score_matrix(name):
    """With query blocks, no intermediate holds more than (heads x block x L) elements: linear in L."""
    heads, block = 4, 32
    attn = pet.MultiHeadAttention(64, heads, causal=True, encoding=pet.get_encoder(name, 64, heads),
                                  query_block_size=block)
    largest = {}
    for length in (512, 1024):
        x = torch.randn(1, length, 64)
        with torch.no_grad(), LargestTensor() as mode:
            attn(x)
        largest[length] = mode.largest
        assert mode.largest <= heads * block * length < length * length
    assert largest[1024] <= 2 * largest[512]


class DistanceBias(pet.PositionBiasEncoding):
    """Test encoder with 2-D coordinate positions: bias = -|p_query - p_key| (Euclidean)."""

    position_vector_dims = 1

    def position_bias(self, q_pos, k_pos, dtype):
        distance = torch.cdist(q_pos.to(dtype), k_pos.to(dtype))  # (.., Lq, Lk)
        distance = distance if distance.dim() == 3 else distance.unsqueeze(0)
        return -distance.unsqueeze(1).expand(-1, self.num_heads, -1, -1)


def test_cross_attention_with_vector_positions():
    enc = DistanceBias(16, 2, causal=False).double()
    attn = pet.MultiHeadAttention(16, 2, encoding=enc).double()
    x, context = torch.randn(2, 3, 16, dtype=torch.float64), torch.randn(2, 5, 16, dtype=torch.float64)
    q_xy, k_xy = torch.randn(2, 3, 2, dtype=torch.float64), torch.randn(2, 5, 2, dtype=torch.float64)
    out = attn(x, context, q_pos=q_xy, k_pos=k_xy)
    torch.testing.assert_close(out, reference_attention(attn, x, context, q_pos=q_xy, k_pos=k_xy, causal=False))
    # the bias depends on the coordinates: moving the keys changes the output
    assert not torch.allclose(attn(x, context, q_pos=q_xy, k_pos=k_xy + 3.0), out)
    with pytest.raises(ValueError, match="k_pos has shape"):
        attn(x, context, q_pos=q_xy, k_pos=torch.randn(2, 4, 2, dtype=torch.float64))
