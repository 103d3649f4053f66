"""MHA -> MLA conversion (Ji et al. 2025): exactness at full rank, pair mapping per layout, cache sizes, SVD."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.conversion import calibration_pair_scores, convert_to_mla, pair_dims, pair_norms, svd_low_rank
from pe_toolkit.encoders.rotary import RotaryEncoding
from pe_toolkit.nn.latent_attention import MultiHeadLatentAttention


def make_model(num_kv_heads=None, **rope_options) -> pet.Transformer:
    config = pet.TransformerConfig(vocab_size=40, dim=32, num_heads=4, num_layers=2, num_kv_heads=num_kv_heads,
                                   encoding="rope", encoding_options=rope_options)
    return pet.Transformer(config).double().eval()


class SelectedPairRotary(RotaryEncoding):
    """Reference partial RoPE: rotate only the selected pairs of each key head (and its query heads)."""

    def __init__(self, base: RotaryEncoding, rotated: torch.Tensor) -> None:  # rotated: (H_kv, head_dim) bool
        super().__init__(base.dim, base.num_heads, rotary_fraction=base.rotary_dim / base.head_dim,
                         interleaved=base.interleaved)
        self.rotated = rotated

    def rotate(self, q, k, q_pos, k_pos):
        q_rot, k_rot = super().rotate(q, k, q_pos, k_pos)
        group = q.shape[1] // k.shape[1]
        mask_q = self.rotated.repeat_interleave(group, dim=0)[None, :, None, :]
        mask_k = self.rotated[None, :, None, :]
        return torch.where(mask_q, q_rot, q), torch.where(mask_k, k_rot, k)


@pytest.mark.parametrize(
    ("num_kv_heads", "rope_options", "strategy"),
    [(None, {}, "high"), (2, {"interleaved": True}, "2-norm"), (None, {"rotary_fraction": 0.5}, "low"),
     (1, {"base": 500.0}, "uniform")],
)
def test_full_rank_all_pairs_reproduces_the_logits(num_kv_heads, rope_options, strategy):
    model = make_model(num_kv_heads, **rope_options)
    tokens = torch.randint(0, 40, (2, 11))
    rotary_dim = model.encodings[0].rotary_dim
    kv = num_kv_heads or 4
    full_rank = min(kv * (8 - rotary_dim + 8), 32)
    extra = {"calibration_tokens": tokens} if strategy == "2-norm" else {}
    mla, report = convert_to_mla(model, rope_dim=rotary_dim, latent_dim=full_rank, strategy=strategy, **extra)
    assert mla.config.attention == "mla" and isinstance(mla.blocks[0].attn, MultiHeadLatentAttention)
    torch.testing.assert_close(mla(tokens), model(tokens), rtol=1e-10, atol=1e-10)
    assert report.energy_kept == pytest.approx([1.0, 1.0])
    assert torch.equal(mla.generate(tokens[:, :3], 4), model.generate(tokens[:, :3], 4))


@pytest.mark.parametrize(
    ("rope_options", "strategy"),
    [({}, "low"), ({"interleaved": True}, "2-norm"), ({"rotary_fraction": 0.5}, "uniform")],
)
def test_partial_rope_at_full_rank_equals_mha_rotating_only_the_selected_pairs(rope_options, strategy):
    model = make_model(2, **rope_options)
    tokens = torch.randint(0, 40, (2, 9))
    extra = {"calibration_tokens": tokens} if strategy == "2-norm" else {}
    mla, report = convert_to_mla(model, rope_dim=2, latent_dim=2 * (6 + 8), strategy=strategy, **extra)  # full rank
    rope = model.encodings[0]
    first, second = pair_dims(rope.rotary_dim // 2, rope.interleaved)
    outputs = []
    for layer in range(2):  # the reference keeps each layer's own selection
        rotated = torch.zeros(2, 8, dtype=torch.bool)
        pairs = report.rope_pairs[layer]
        rotated.scatter_(1, first[pairs], True)
        rotated.scatter_(1, second[pairs], True)
        outputs.append(SelectedPairRotary(rope, rotated))
    reference = pet.Transformer(pet.TransformerConfig(**{**model.config.__dict__, "share_encoding": False})).double()
    reference.load_state_dict(model.state_dict())
    reference.encodings = torch.nn.ModuleList(outputs)
    torch.testing.assert_close(mla(tokens), reference.eval()(tokens), rtol=1e-10, atol=1e-10)
    assert not torch.allclose(mla(tokens), model(tokens))  # dropping rotations does change the function


def test_cache_sizes_and_reduction_hand_computed():
    model = make_model()  # 2 layers, 4 KV heads, head_dim 8: MHA caches 2 * 4 * 8 = 64 numbers per layer
    _, joint = convert_to_mla(model, rope_dim=2, latent_dim=4, strategy="high")
    assert joint.cache_elements_before == 2 * 64
    assert joint.cache_elements_after == 2 * (4 + 4 * 2)  # latent + one 2-dim rope key per KV head
    assert joint.cache_reduction == pytest.approx(1 - 12 / 64)
    assert joint.cache_bytes_before == 2 * 64 * 8  # float64
    _, split = convert_to_mla(model, rope_dim=2, latent_dim=4, strategy="high", svd="split")
    assert split.cache_elements_after == 2 * (4 + 4 + 4 * 2)  # two latents


def test_mla_cache_of_converted_model_holds_latent_and_rope_keys_only():
    model = make_model(2)
    mla, report = convert_to_mla(model, rope_dim=2, latent_dim=6, strategy="high")
    cache = mla.new_cache()
    mla(torch.randint(0, 40, (1, 5)), cache=cache)
    assert cache[0]._k.shape[:2] == (1, 1) and cache[0]._k.shape[-1] == 6  # latent (B, 1, L, d_kv)
    assert cache[0]._v.shape[1] == 2 and cache[0]._v.shape[-1] == 2  # rope keys (B, H_kv, L, r)
    per_layer = report.cache_elements_after // 2
    assert per_layer == 6 + 2 * 2


def test_svd_low_rank_is_the_eckart_young_optimum():
    w = torch.randn(12, 7, dtype=torch.float64)
    down, up = svd_low_rank(w, 3)
    s = torch.linalg.svdvals(w)
    assert torch.linalg.matrix_norm(w - up @ down).item() == pytest.approx(s[3:].pow(2).sum().sqrt().item())
    torch.testing.assert_close(down @ down.T, torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="rank must be <= min"):
        svd_low_rank(w, 8)


def test_joint_svd_shares_one_latent_and_split_two():
    model = make_model()
    mla, _ = convert_to_mla(model, rope_dim=2, latent_dim=8, strategy="high")
    attn = mla.blocks[0].attn
    assert attn.v_down is None and attn.kv_down.weight.shape == (8, 32)
    mla_split, _ = convert_to_mla(model, rope_dim=2, latent_dim=8, strategy="high", svd="split")
    attn = mla_split.blocks[0].attn
    assert attn.v_down.weight.shape == (8, 32) and attn.value_latent_dim == 8
    # split approximates each of W_k,nope and W_v by its own rank-8 SVD
    old = model.blocks[0].attn
    w_v = old.v_proj.weight
    down, up = svd_low_rank(w_v, 8)
    torch.testing.assert_close(attn.v_up.weight @ attn.v_down.weight, up @ down)


def test_calibration_scores_of_an_hf_model_are_those_of_its_port():
    transformers = pytest.importorskip("transformers")
    from pe_toolkit.integrations.hf import from_hf

    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64))
    tokens = torch.randint(0, 40, (3, 6))
    expected = calibration_pair_scores(from_hf(llama), tokens)
    assert expected.shape == (2, 2, 4)
    torch.testing.assert_close(calibration_pair_scores(llama, tokens), expected, rtol=0, atol=0)


def test_calibration_scores_match_a_direct_computation():
    model = make_model(2)
    tokens = torch.randint(0, 40, (3, 6))
    scores = calibration_pair_scores(model, tokens, batch_size=2)
    assert scores.shape == (2, 2, 4)
    captured = {}
    hook = model.blocks[1].attn.register_forward_pre_hook(lambda m, args: captured.setdefault("x", args[0]))
    model(tokens)
    hook.remove()
    attn = model.blocks[1].attn
    q = attn.q_proj(captured["x"]).view(3, 6, 4, 8)
    k = attn.k_proj(captured["x"]).view(3, 6, 2, 8)
    qn = pair_norms(q, 4, False).mean(dim=(0, 1))  # (4 heads, 4 pairs)
    kn = pair_norms(k, 4, False).mean(dim=(0, 1))
    expected = torch.stack([qn[0] * kn[0] + qn[1] * kn[0], qn[2] * kn[1] + qn[3] * kn[1]])
    torch.testing.assert_close(scores[1], expected)


def test_bad_conversions():
    model = make_model()
    with pytest.raises(ValueError, match="rope_dim must be even"):
        convert_to_mla(model, rope_dim=3, latent_dim=4, strategy="high")
    with pytest.raises(ValueError, match="rope_dim must be even and <= the rotary dim"):
        convert_to_mla(model, rope_dim=10, latent_dim=4, strategy="high")
    with pytest.raises(ValueError, match="latent_dim must be <= 32"):
        convert_to_mla(model, rope_dim=2, latent_dim=33, strategy="high")
    with pytest.raises(ValueError, match="exactly one of calibration_tokens"):
        convert_to_mla(model, rope_dim=2, latent_dim=4)
    with pytest.raises(ValueError, match="apply to strategy '2-norm' only"):
        convert_to_mla(model, rope_dim=2, latent_dim=4, strategy="high", calibration_tokens=torch.zeros(1, 3).long())
    with pytest.raises(ValueError, match="svd must be one of"):
        convert_to_mla(model, rope_dim=2, latent_dim=4, strategy="high", svd="qr")
    with pytest.raises(ValueError, match="svd='split' needs NoPE key dims"):
        convert_to_mla(model, rope_dim=8, latent_dim=4, strategy="high", svd="split")
    with pytest.raises(ValueError, match="encoding 'rope'"):
        alibi = pet.Transformer(pet.TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1,
                                                      encoding="alibi"))
        convert_to_mla(alibi, rope_dim=2, latent_dim=4, strategy="high")
    with pytest.raises(ValueError, match="static frequencies"):
        convert_to_mla(make_model(scaling="yarn", factor=2.0, original_max_position=16), rope_dim=2,
                       latent_dim=4, strategy="high")
    with pytest.raises(ValueError, match="without QK-norm"):
        qk = pet.Transformer(pet.TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1, qk_norm=True))
        convert_to_mla(qk, rope_dim=2, latent_dim=4, strategy="high")
    with pytest.raises(TypeError, match="pe_toolkit Transformer"):
        convert_to_mla(torch.nn.Linear(2, 2), rope_dim=2, latent_dim=4, strategy="high")
    with pytest.raises(ValueError, match="integer tensor"):
        calibration_pair_scores(model, torch.randn(2, 3))
