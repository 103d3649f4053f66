"""PA-LRP on the toolkit's Transformer: conservation per encoder kind, a hand-computed case, bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

import pe_toolkit as pet
from pe_toolkit.encoders.absolute import SinusoidalEncoding
from pe_toolkit.explain import Attribution, explain

D = torch.float64

# every way a position can enter the model: none, the embed hook, the rotate hook, the bias hook
KINDS = {
    "nope": ("nope", {}),
    "sinusoidal": ("sinusoidal", {}),
    "scaled_sinusoidal": ("scaled_sinusoidal", {}),
    "learned": ("learned", {"max_len": 16}),
    "rope": ("rope", {}),
    "rope_partial_interleaved": ("rope", {"rotary_fraction": 0.5, "interleaved": True}),
    "rope_xpos": ("rope", {"xpos": True}),
    "rope_yarn": ("rope", {"scaling": "yarn", "factor": 4.0, "original_max_position": 4}),
    "rope_dynamic": ("rope", {"scaling": "dynamic", "factor": 2.0, "original_max_position": 4}),
    "alibi": ("alibi", {}),
    "t5": ("t5", {}),
    "kerple": ("kerple", {}),
    "fire": ("fire", {}),
    "sandwich": ("sandwich", {}),
    "bam": ("bam", {}),
    "bam_ssmax": ("bam_ssmax", {}),
    "nope_temperature": ("nope_temperature", {"scale": 1.5}),
}
POSITIONAL = {"sinusoidal", "scaled_sinusoidal", "learned", "rope", "rope_partial_interleaved", "rope_xpos",
              "rope_yarn", "rope_dynamic", "alibi", "t5", "kerple", "fire", "sandwich", "bam", "bam_ssmax"}


def make_model(kind: str, **overrides) -> pet.Transformer:
    encoding, options = KINDS[kind]
    config = dict(vocab_size=11, dim=16, num_heads=4, num_layers=2, encoding=encoding, encoding_options=options)
    config.update(overrides)
    model = pet.Transformer(pet.TransformerConfig(**config)).eval()
    with torch.no_grad():
        for p in model.parameters():  # larger than the N(0, 0.02) init, so attention is far from uniform
            p.normal_(0.0, 0.3)
    return model


def reference_logits(model, tokens, index, target):
    with torch.no_grad():
        logits = model.double()(tokens)
    model.float()
    rows = torch.arange(tokens.shape[0])
    return logits[rows, index, target]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_conservation_for_every_encoder_kind(kind):
    model = make_model(kind)
    tokens = torch.randint(0, 11, (3, 7))
    target, index = torch.tensor([1, 5, 9]), torch.tensor([-1, 3, 6])
    attr = explain(model, tokens, target, index=index, dtype=D, epsilon=0.0)
    # the explained logit is the model's own
    assert_close(attr.logit, reference_logits(model, tokens, index % 7, target), rtol=0, atol=1e-8)
    # tokens + positions + what the rules absorb = logit, to rounding
    assert_close(attr.total() + attr.total_absorbed(), attr.logit, rtol=0, atol=1e-12)
    # RMSNorm and bias-free linears: with eps = 0 the only sink is the softmax rule's Taylor remainder
    assert attr.absorbed["stabiliser"].abs().max() < 1e-12
    assert attr.absorbed["ignored_position"].abs().max() == 0
    assert_close(attr.total() + attr.absorbed["softmax"], attr.logit, rtol=0, atol=1e-12)
    if kind in POSITIONAL:
        assert attr.position.abs().sum() > 1e-6, "positional inputs must receive relevance"
    else:
        assert attr.position_terms == {}


@pytest.mark.parametrize("kind", ["learned", "rope", "alibi"])
def test_conservation_with_layernorm_gelu_gqa_and_stabiliser(kind):
    model = make_model(kind, norm="layernorm", mlp="gelu", num_kv_heads=2)
    tokens = torch.randint(0, 11, (2, 6))
    exact = explain(model, tokens, 4, dtype=D, epsilon=0.0)
    assert_close(exact.total() + exact.total_absorbed(), exact.logit, rtol=0, atol=1e-12)
    assert exact.absorbed["stabiliser"].abs().max() > 1e-6  # LayerNorm's bias takes its share
    stabilised = explain(model, tokens, 4, dtype=D, epsilon=1e-3)
    assert_close(stabilised.total() + stabilised.total_absorbed(), stabilised.logit, rtol=0, atol=1e-12)
    # the epsilon rule tends to the z-rule as the stabiliser vanishes
    tiny = explain(model, tokens, 4, dtype=D, epsilon=1e-10)
    assert (tiny.token - exact.token).abs().max() < 1e-5 * exact.token.abs().max()


@pytest.mark.parametrize("kind", ["sinusoidal", "learned", "alibi", "t5"])
def test_plain_lrp_loses_exactly_the_positional_share(kind):
    """Lemma 3.1 of PA-LRP: without positional inputs the relevance that flows into them is lost."""
    model = make_model(kind)
    tokens = torch.randint(0, 11, (3, 7))
    aware = explain(model, tokens, 2, dtype=D, epsilon=0.0)
    plain = explain(model, tokens, 2, dtype=D, epsilon=0.0, position_aware=False)
    assert plain.position_terms == {}
    assert_close(plain.absorbed["ignored_position"], aware.position.sum(-1), rtol=0, atol=1e-12)
    assert_close(plain.token, aware.token, rtol=0, atol=1e-12)  # constants change nothing upstream
    gap = (plain.token.sum(-1) - plain.logit).abs()
    assert (gap > 0).all()


@pytest.mark.parametrize("kind", ["nope", "learned", "alibi"])
def test_conservation_as_identity_and_as_fractions_of_the_logit(kind):
    model = make_model(kind)
    tokens = torch.randint(0, 11, (3, 7))
    aware = explain(model, tokens, 2, dtype=D, epsilon=0.0).conservation()
    plain = explain(model, tokens, 2, dtype=D, epsilon=0.0, position_aware=False).conservation()
    for c in (aware, plain):
        assert c["identity_residual"].max() < 1e-12
        assert_close(c["input_fraction"] + c["absorbed_fraction"], torch.ones(3, dtype=D), rtol=0, atol=1e-12)
        assert torch.equal(c["input_fraction"], c["token_fraction"] + c["position_fraction"])  # their sum, as stated
    assert (plain["position_fraction"] == 0).all()
    # plain LRP loses exactly the positional fraction (Lemma 3.1); the token fraction is the same
    assert_close(plain["token_fraction"], aware["token_fraction"], rtol=0, atol=1e-12)
    assert_close(plain["absorbed_fraction"], aware["absorbed_fraction"] + aware["position_fraction"], rtol=0,
                 atol=1e-12)
    if kind == "nope":
        assert (aware["position_fraction"] == 0).all()
    else:
        assert aware["position_fraction"].abs().min() > 1e-6


def test_plain_lrp_on_rope_gives_the_tables_share_to_the_queries_and_keys():
    model = make_model("rope")
    tokens = torch.randint(0, 11, (2, 6))
    aware = explain(model, tokens, 2, dtype=D, epsilon=0.0)
    plain = explain(model, tokens, 2, dtype=D, epsilon=0.0, position_aware=False)
    assert plain.absorbed["ignored_position"].abs().max() == 0
    assert_close(plain.total() + plain.absorbed["softmax"], plain.logit, rtol=0, atol=1e-12)
    assert plain.position_terms == {}
    # the queries and keys now carry the tables' share, so token relevance differs from PA-LRP's
    assert (plain.token - aware.token).abs().max() > 1e-6
    assert set(aware.position_terms) == {"layer0.cos", "layer0.sin", "layer1.cos", "layer1.sin"}


def test_hand_built_two_token_linear_case():
    """Uniform attention (q = k = 0), identity values and output, no MLP: every rule by hand."""
    model = pet.Transformer(pet.TransformerConfig(
        vocab_size=3, dim=2, num_heads=1, num_layers=1, encoding="learned", encoding_options={"max_len": 2},
        tie_embeddings=False,
    )).double().eval()
    e = torch.tensor([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]], dtype=D)
    p = torch.tensor([[0.5, 0.0], [0.0, 0.5]], dtype=D)
    w = torch.tensor([1.0, -2.0], dtype=D)
    block = model.blocks[0]
    with torch.no_grad():
        model.token_embedding.weight.copy_(e)
        model.encodings[0].table.weight.copy_(p)
        model.lm_head.weight.zero_()
        model.lm_head.weight[2] = w
        block.attn.q_proj.weight.zero_()
        block.attn.k_proj.weight.zero_()
        block.attn.v_proj.weight.copy_(torch.eye(2))
        block.attn.o_proj.weight.copy_(torch.eye(2))
        block.mlp.down.weight.zero_()
    tokens = torch.tensor([[0, 1]])
    attr = explain(model, tokens, 2, index=1, epsilon=0.0)

    def rms(v):
        return v / math.sqrt((v**2).mean().item() + torch.finfo(D).eps)

    x0, x1 = e[0] + p[0], e[1] + p[1]
    n0, n1 = rms(x0), rms(x1)
    o = 0.5 * n0 + 0.5 * n1                       # uniform attention over both keys, v = o_proj = identity
    h = x1 + o
    y = rms(h)
    logit = (w * y).sum()
    r_y = w * y                                   # epsilon rule at the head, identity through the final norm
    r_x1_residual = x1 * r_y / h                  # epsilon rule at the residual sum
    r_o = o * r_y / h
    r_v0, r_v1 = 0.5 * n0 * r_o / (2 * o), 0.5 * n1 * r_o / (2 * o)   # uniform-epsilon rule on A @ V
    r_attention = r_o / 2                                             # the other half goes to A ...
    # ... and the softmax rule sends x * (...) = 0 to the all-zero logits: absorbed as its remainder
    r_x0, r_x1 = r_v0, r_x1_residual + r_v1
    expected_token = torch.stack(((e[0] * r_x0 / x0).sum(), (e[1] * r_x1 / x1).sum()))
    expected_position = torch.stack(((p[0] * r_x0 / x0).sum(), (p[1] * r_x1 / x1).sum()))
    assert_close(attr.logit[0], logit)
    assert_close(attr.token[0], expected_token)
    assert_close(attr.position_terms["embed"][0], expected_position)
    assert_close(attr.absorbed["softmax"][0], r_attention.sum())
    assert_close(expected_token.sum() + expected_position.sum() + r_attention.sum(), logit)


def test_batch_equals_single_examples_and_explicit_positions_equal_default():
    model = make_model("alibi")
    tokens = torch.randint(0, 11, (3, 6))
    batch = explain(model, tokens, torch.tensor([1, 2, 3]), dtype=D)
    for b in range(3):
        single = explain(model, tokens[b:b + 1], b + 1, dtype=D)
        assert_close(single.token[0], batch.token[b])
        assert_close(single.position[0], batch.position[b])
    explicit = explain(model, tokens, torch.tensor([1, 2, 3]), dtype=D, positions=torch.arange(6))
    assert_close(explicit.token, batch.token)


def test_scores_combine_terms_as_the_paper():
    model = make_model("rope")
    attr = explain(model, torch.randint(0, 11, (2, 5)), 3, dtype=D)
    assert isinstance(attr, Attribution)
    expected = attr.token + sum(t.abs() for t in attr.position_terms.values())
    assert_close(attr.scores("pa_lrp"), expected)
    assert_close(attr.scores("signed"), attr.token + attr.position)
    assert_close(attr.scores("token"), attr.token)
    with pytest.raises(ValueError, match="kind must be one of"):
        attr.scores("nope")


def test_bias_maps_hold_the_pair_relevance():
    model = make_model("alibi")
    attr = explain(model, torch.randint(0, 11, (2, 5)), 3, dtype=D)
    pair = attr.bias_maps["layer1.bias"]
    assert pair.shape == (2, 5, 5)
    assert (pair.triu(1) == 0).all()  # causal: future keys get nothing


# ------------------------------------------------------------------------------------ bad input
def test_bad_target_index_tokens_and_epsilon():
    model = make_model("rope")
    tokens = torch.randint(0, 11, (2, 5))
    with pytest.raises(ValueError, match=r"target out of range.*\[0, 10\].*11"):
        explain(model, tokens, 11)
    with pytest.raises(ValueError, match="target out of range"):
        explain(model, tokens, -1)
    with pytest.raises(ValueError, match="index out of range"):
        explain(model, tokens, 1, index=5)
    with pytest.raises(ValueError, match=r"target must be an int or have shape \(2,\)"):
        explain(model, tokens, torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="target must hold integers"):
        explain(model, tokens, torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match="target must be an int"):
        explain(model, tokens, 1.5)
    with pytest.raises(ValueError, match="tokens must lie in"):
        explain(model, tokens + 11, 1)
    with pytest.raises(TypeError, match="tokens must be an integer tensor"):
        explain(model, tokens.float(), 1)
    with pytest.raises(ValueError, match="epsilon must be a finite number >= 0"):
        explain(model, tokens, 1, epsilon=-1.0)
    with pytest.raises(ValueError, match="dtype must be"):
        explain(model, tokens, 1, dtype=torch.float16)
    with pytest.raises(ValueError, match="positions has shape"):
        explain(model, tokens, 1, positions=torch.arange(4))


def test_unsupported_layers_are_named():
    model = make_model("rope")
    model.blocks[1].mlp = nn.Identity()
    with pytest.raises(TypeError, match=r"unsupported layer blocks\.1\.mlp \(Identity\)"):
        explain(model, torch.randint(0, 11, (1, 4)), 1)
    model = make_model("rope")
    model.blocks[0].attn_norm = nn.BatchNorm1d(16)
    with pytest.raises(TypeError, match=r"blocks\.0\.attn_norm \(BatchNorm1d\)"):
        explain(model, torch.randint(0, 11, (1, 4)), 1)
    with pytest.raises(TypeError, match="must be a pe_toolkit.nn.Transformer"):
        explain(nn.Linear(2, 2), torch.zeros(1, 2, dtype=torch.long), 0)


def test_content_dependent_bias_and_cross_attention_are_rejected():
    cope = pet.Transformer(pet.TransformerConfig(vocab_size=11, dim=16, num_heads=2, num_layers=1, encoding="cope"))
    with pytest.raises(TypeError, match=r"encodings\.0\.bias \(CoPE\).*content-dependent"):
        explain(cope, torch.randint(0, 11, (1, 4)), 1)
    cross = pet.Transformer(pet.TransformerConfig(vocab_size=11, dim=16, num_heads=2, num_layers=1,
                                                  cross_attention=True))
    with pytest.raises(TypeError, match="cross-attention"):
        explain(cross, torch.randint(0, 11, (1, 4)), 1)
    features = pet.Transformer(pet.TransformerConfig(vocab_size=None, dim=16, num_heads=2, num_layers=1))
    with pytest.raises(TypeError, match="token embedding"):
        explain(features, torch.randint(0, 11, (1, 4)), 1)


class _ScaledEmbed(SinusoidalEncoding):
    """A multiplicative (non-additive) embed hook: PA-LRP cannot split it."""

    def embed(self, x, positions):
        return x * (1.0 + self.position_table(positions, x.dtype))


def test_non_additive_embed_hook_is_rejected():
    model = make_model("sinusoidal")
    model.encodings[0] = _ScaledEmbed(16, 4)
    with pytest.raises(TypeError, match="not additive"):
        explain(model, torch.randint(0, 11, (1, 4)), 1)


def test_unknown_rotate_hook_is_rejected():
    class Custom(pet.PositionalEncoding):
        def rotate(self, q, k, q_pos, k_pos):
            return q * 2, k

    model = make_model("nope")
    model.encodings[0] = Custom(16, 4)
    with pytest.raises(TypeError, match=r"encodings\.0\.rotate \(Custom\)"):
        explain(model, torch.randint(0, 11, (1, 4)), 1)


def test_hand_built_two_token_rope_case_places_table_relevance_at_the_right_positions():
    """One head of width 2 (one rotated pair, angle = position), q = k = v = normalised input."""
    model = pet.Transformer(pet.TransformerConfig(
        vocab_size=2, dim=2, num_heads=1, num_layers=1, encoding="rope", encoding_options={"base": 10_000.0},
        tie_embeddings=False,
    )).double().eval()
    e = torch.tensor([[1.0, 0.5], [-0.3, 2.0]], dtype=D)
    w = torch.tensor([0.7, 1.3], dtype=D)
    block = model.blocks[0]
    with torch.no_grad():
        model.token_embedding.weight.copy_(e)
        model.lm_head.weight.copy_(torch.stack((w, -w)))
        for proj in (block.attn.q_proj, block.attn.k_proj, block.attn.v_proj, block.attn.o_proj):
            proj.weight.copy_(torch.eye(2))
        block.mlp.down.weight.zero_()
    attr = explain(model, torch.tensor([[0, 1]]), 0, index=1, epsilon=0.0)

    def rms(v):
        return v / torch.sqrt((v**2).mean() + torch.finfo(D).eps)

    def rot(u):
        return torch.stack((-u[1], u[0]))

    x = e
    n = torch.stack((rms(x[0]), rms(x[1])))
    cos = torch.cos(torch.tensor([0.0, 1.0], dtype=D))                 # angle = position * theta_0, theta_0 = 1
    sin = torch.sin(torch.tensor([0.0, 1.0], dtype=D))
    q = n[1] * cos[1] + rot(n[1]) * sin[1]
    k = torch.stack([n[j] * cos[j] + rot(n[j]) * sin[j] for j in range(2)])
    c = 1 / math.sqrt(2)
    z = c * (k @ q)
    a = torch.softmax(z, 0)
    o = a @ n
    h = x[1] + o
    r_h = w * rms(h)
    r_o = o * r_h / h
    r_a = torch.stack([(a[j] * n[j] * r_o / (2 * o)).sum() for j in range(2)])
    r_z = z * (r_a - a * r_a.sum())
    share = r_z / (2 * z) * c
    r_q = q * (share[:, None] * k).sum(0)
    r_k = k * share[:, None] * q

    def table_relevance(u, t, r):  # rope of u at position t receiving relevance r: (R_cos, R_sin)
        rotated = u * cos[t] + rot(u) * sin[t]
        return (u * cos[t] * r / rotated).sum() / 2, (rot(u) * sin[t] * r / rotated).sum() / 2

    cos_q, sin_q = table_relevance(n[1], 1, r_q)
    cos_k0, sin_k0 = table_relevance(n[0], 0, r_k[0])
    cos_k1, sin_k1 = table_relevance(n[1], 1, r_k[1])
    assert_close(attr.position_terms["layer0.cos"][0], torch.stack((cos_k0, cos_q + cos_k1)))
    assert_close(attr.position_terms["layer0.sin"][0], torch.stack((sin_k0, sin_q + sin_k1)))
    assert attr.position_terms["layer0.sin"][0, 0] == 0  # sin(0) = 0: no share at position 0
    assert_close(attr.total() + attr.total_absorbed(), attr.logit)


def test_qk_norm_is_propagated_with_the_identity_rule():
    model = make_model("rope", qk_norm=True)
    tokens = torch.randint(0, 11, (2, 6))
    attr = explain(model, tokens, 3, dtype=D, epsilon=0.0)
    assert_close(attr.logit, reference_logits(model, tokens, torch.tensor([5, 5]), torch.tensor([3, 3])),
                 rtol=0, atol=1e-10)
    assert_close(attr.total() + attr.absorbed["softmax"], attr.logit, rtol=0, atol=1e-12)


def test_latent_attention_is_rejected_by_name():
    model = pet.Transformer(pet.TransformerConfig(vocab_size=11, dim=16, num_heads=4, num_layers=1, encoding="rope",
                                                  attention="mla", latent_options={"latent_dim": 8}))
    with pytest.raises(TypeError, match=r"blocks\.0\.attn \(MultiHeadLatentAttention\); supported: MultiHeadAttention"):
        explain(model, torch.randint(0, 11, (1, 4)), 3)


@pytest.mark.parametrize("kind", ["rope", "sinusoidal"])
def test_scaled_embeddings_are_explained_exactly(kind):
    """scale_embeddings=True multiplies token embeddings by sqrt(dim): the explained logit is the model's
    (it used to skip the factor and explain another function) and relevance is still conserved."""
    model = make_model(kind, scale_embeddings=True)
    tokens = torch.randint(0, 11, (2, 6))
    target, index = torch.tensor([2, 7]), torch.tensor([-1, 2])
    attr = explain(model, tokens, target, index=index, dtype=D, epsilon=0.0)
    assert_close(attr.logit, reference_logits(model, tokens, index % 6, target), rtol=0, atol=1e-8)
    assert_close(attr.total() + attr.total_absorbed(), attr.logit, rtol=0, atol=1e-12)
    assert model.token_embedding.weight.dtype == torch.float32  # the model is left as it was
