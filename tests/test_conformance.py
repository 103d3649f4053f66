"""Conformance suite: properties every registered sequence encoder must satisfy.

Parametrised over ``list_encoders(domain="sequence")``, so a newly registered encoder is checked
automatically. Exact values per encoder live in ``tests/encoders/``.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

import pe_toolkit as pet
from pe_toolkit.encoders.base import PositionBiasEncoding

SEQUENCE_ENCODERS = pet.list_encoders(domain="sequence")
RELATIVE = [n for n in SEQUENCE_ENCODERS if pet.encoder_info(n).relative]
LEARNABLE = [
    n for n in SEQUENCE_ENCODERS
    if any(True for _ in pet.get_encoder(n, 8, 2, **pet.encoder_info(n).example_options).parameters())
]
BIAS_ENCODERS = [n for n in SEQUENCE_ENCODERS if issubclass(pet.encoder_info(n).cls, PositionBiasEncoding)]
# encoders with only an embed hook act on the input once; an attention layer alone refuses them
EMBED_ONLY = [n for n in SEQUENCE_ENCODERS
              if not pet.get_encoder(n, 8, 2, **pet.encoder_info(n).example_options).acts_in_attention and n != "nope"]


def make_encoder(name: str, dim: int = 32, num_heads: int = 4, *, causal: bool = True, max_len: int | None = None):
    options = dict(pet.encoder_info(name).example_options)
    if max_len is not None and "max_len" in options:
        options["max_len"] = max_len
    return pet.get_encoder(name, dim, num_heads, causal=causal, **options)


def layer_for(enc, dim: int = 32, num_heads: int = 4, **options) -> pet.MultiHeadAttention:
    """One causal attention layer that uses ``enc`` as a Transformer would: its rotate / bias hooks in
    the layer, an embed-only encoder on the input (see :func:`run_layer`)."""
    return pet.MultiHeadAttention(dim, num_heads, causal=True, encoding=enc if enc.acts_in_attention else None,
                                  **options)


def run_layer(attn: pet.MultiHeadAttention, enc, x, q_pos=None):
    """``attn(enc.embed(x, positions), q_pos=positions)``: the embed hook counts as in a Transformer."""
    positions = torch.arange(x.shape[1]) if q_pos is None else q_pos
    return attn(enc.embed(x, positions), q_pos=positions)


class EmbedThenAttend(torch.nn.Module):
    """``attn(enc.embed(x, positions), q_pos=positions)`` as a module (for ``functional_call``)."""

    def __init__(self, enc, attn: pet.MultiHeadAttention) -> None:
        super().__init__()
        self.enc, self.attn = enc, attn

    def forward(self, x, positions):
        return self.attn(self.enc.embed(x, positions), q_pos=positions)


def perturb_parameters(module: torch.nn.Module, scale: float = 0.1) -> None:
    """Move every parameter off its initial value so tests do not pass by symmetry (e.g. zero init)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))


def make_model(name: str, *, causal: bool = True, layers: int = 2, **overrides) -> pet.Transformer:
    options = dict(pet.encoder_info(name).example_options)
    config = pet.TransformerConfig(
        vocab_size=40, dim=32, num_heads=4, num_layers=layers, causal=causal, encoding=name,
        encoding_options=options, **overrides,
    )
    model = pet.Transformer(config)
    for enc in model.encodings:
        perturb_parameters(enc)
    return model


def test_the_registry_has_the_issue_encoders():
    expected = {"nope", "sinusoidal", "scaled_sinusoidal", "learned", "rope", "t5", "alibi", "kerple",
                "fire", "sandwich", "cope", "bam"}
    assert expected <= set(SEQUENCE_ENCODERS)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_metadata(name):
    info = pet.encoder_info(name)
    assert info.name == name and info.domain == "sequence"
    assert info.reference and "20" in info.reference  # names the paper and year
    assert set(info.hooks) <= {"embed", "rotate", "bias"}
    assert info.cls.__doc__, "every encoder documents its paper, options and shapes"


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_hook_output_shapes(name):
    enc = make_encoder(name)
    b, lq, lk = 2, 5, 7
    x = torch.randn(b, lq, 32)
    assert enc.embed(x, torch.arange(lq)).shape == (b, lq, 32)
    q, k = torch.randn(b, 4, lq, 8), torch.randn(b, 4, lk, 8)
    q2, k2 = enc.rotate(q, k, torch.arange(lk - lq, lk), torch.arange(lk))
    assert q2.shape == q.shape and k2.shape == k.shape
    bias = enc.bias(q2, k2, torch.arange(lk - lq, lk), torch.arange(lk))
    if "bias" in pet.encoder_info(name).hooks:
        assert torch.broadcast_shapes(bias.shape, (b, 4, lq, lk)) == (b, 4, lq, lk)
    else:
        assert bias is None
    if name in EMBED_ONLY:
        with pytest.raises(ValueError, match=f"encoding '{name}' has only an embed hook"):
            pet.MultiHeadAttention(32, 4, causal=True, encoding=enc)
    out = run_layer(layer_for(enc), enc, x)
    assert out.shape == (b, lq, 32)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_batched_positions_equal_shared_positions(name):
    enc = make_encoder(name)
    perturb_parameters(enc)
    attn = layer_for(enc)
    x = torch.randn(2, 6, 32)
    shared = run_layer(attn, enc, x, q_pos=torch.arange(3, 9))
    batched = run_layer(attn, enc, x, q_pos=torch.arange(3, 9).expand(2, 6))
    torch.testing.assert_close(shared, batched)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dtypes_match_float64(name, dtype):
    enc = make_encoder(name)
    perturb_parameters(enc)
    attn = layer_for(enc)
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    reference = run_layer(attn.double(), enc.double(), x)
    out = run_layer(attn.to(dtype), enc.to(dtype), x.to(dtype))
    assert out.dtype == dtype and torch.isfinite(out).all()
    tol = {torch.float32: 1e-5, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(out.double(), reference, atol=tol, rtol=tol)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_finite_at_length_8192(name):
    length = 8192
    enc = make_encoder(name, dim=16, num_heads=2, max_len=length)
    perturb_parameters(enc)
    # the memory-bounded backend ("auto" would compile a FlexAttention kernel per encoder: minutes in CI)
    attn = layer_for(enc, 16, 2, backend="blocked")
    with torch.no_grad():
        out = run_layer(attn, enc, torch.randn(1, length, 16))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
@pytest.mark.parametrize("causal", [True, False])
def test_explicit_arange_positions_equal_default(name, causal):
    if name == "cope" and not causal:
        pytest.skip("cope is causal only")
    model = make_model(name, causal=causal)
    tokens = torch.randint(0, 40, (2, 9))
    torch.testing.assert_close(model(tokens), model(tokens, positions=torch.arange(9)), rtol=0, atol=0)


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_logits_are_shift_invariant(name):
    enc = make_encoder(name, causal=True).double()
    perturb_parameters(enc)
    q, k = torch.randn(2, 4, 6, 8, dtype=torch.float64), torch.randn(2, 4, 6, 8, dtype=torch.float64)
    positions = torch.arange(6)
    base = pet.positional_logits(enc, q, k, positions, positions)
    for offset in (1, 17, 300):
        shifted = pet.positional_logits(enc, q, k, positions + offset, positions + offset)
        torch.testing.assert_close(shifted, base, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_causal_model_ignores_the_future(name):
    model = make_model(name, causal=True)
    tokens = torch.randint(0, 40, (2, 10))
    changed = tokens.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % 40
    torch.testing.assert_close(model(tokens)[:, :6], model(changed)[:, :6])


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_kv_cache_decoding_matches_full_forward(name):
    model = make_model(name, causal=True).double().eval()
    tokens = torch.randint(0, 40, (2, 11))
    with torch.no_grad():
        full = model(tokens)
        cache = model.new_cache()
        pieces = [model(tokens[:, :5], cache=cache)]
        pieces += [model(tokens[:, t:t + 1], cache=cache) for t in range(5, 9)]
        pieces.append(model(tokens[:, 9:], cache=cache))  # a 2-token chunk after single steps
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("name", LEARNABLE)
def test_gradcheck_float64(name):
    enc = make_encoder(name, dim=8, num_heads=2).double()
    perturb_parameters(enc, scale=0.3)
    model = EmbedThenAttend(enc, layer_for(enc, 8, 2)).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    names = [f"enc.{n}" for n, p in enc.named_parameters() if p.requires_grad]
    start = tuple(model.get_parameter(n).detach().clone().requires_grad_() for n in names)

    def output(*values):  # through embed for an absolute encoding, through rotate / bias otherwise
        return functional_call(model, dict(zip(names, values)), (x, torch.arange(5)))

    assert torch.autograd.gradcheck(output, start, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_state_dict_round_trip(name):
    source = make_model(name)
    state = source.state_dict()
    assert not any(key.endswith(("cos_cached", "sin_cached", "inv_freq")) for key in state)
    torch.manual_seed(123)
    target = pet.Transformer(source.config)
    target.load_state_dict(state)
    tokens = torch.randint(0, 40, (2, 7))
    torch.testing.assert_close(target(tokens), source(tokens), rtol=0, atol=0)


def count_bias_builds(monkeypatch, enc) -> list[int]:
    """Count the calls of ``enc.position_bias`` (the dense bias build) from now on."""
    calls = [0]
    original = enc.position_bias

    def counting(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(enc, "position_bias", counting)
    return calls


@pytest.mark.parametrize("name", BIAS_ENCODERS)
def test_shared_bias_is_built_once_per_forward(name, monkeypatch):
    """One build per forward for all layers (the forward's PositionState), and a new one in the next forward:
    nothing is kept between forwards."""
    model = make_model(name, layers=3).train()
    calls = count_bias_builds(monkeypatch, model.encodings[0])
    tokens = torch.randint(0, 40, (2, 8))
    model(tokens).sum().backward()
    assert calls[0] == 1
    model(tokens).sum().backward()
    assert calls[0] == 2
    with torch.no_grad():
        model(tokens)
    assert calls[0] == 3


@pytest.mark.parametrize("name", BIAS_ENCODERS)
def test_per_layer_biases_are_built_per_layer(name, monkeypatch):
    model = make_model(name, layers=3, share_encoding=False)
    assert len(model.encodings) == 3
    calls = [count_bias_builds(monkeypatch, enc) for enc in model.encodings]
    model(torch.randint(0, 40, (1, 6)))
    assert [c[0] for c in calls] == [1, 1, 1]


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_num_heads_must_divide_dim(name):
    options = pet.encoder_info(name).example_options
    with pytest.raises(ValueError, match="num_heads"):
        pet.get_encoder(name, 30, 4, **options)
    with pytest.raises(TypeError, match="dim"):
        pet.get_encoder(name, 32.0, 4, **options)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_unknown_option_is_rejected(name):
    with pytest.raises(TypeError, match="no_such_option"):
        pet.get_encoder(name, 32, 4, no_such_option=1, **pet.encoder_info(name).example_options)


def test_unknown_encoder_suggests_a_close_match():
    with pytest.raises(ValueError, match="did you mean 'rope'"):
        pet.get_encoder("rop", 32, 4)


# ------------------------------------------------------------------------------ packed sequences
PACKINGS = [[4, 6, 3], [7, 1, 5], [13]]  # three rows of one packed batch: document lengths


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
@pytest.mark.parametrize("causal", [True, False])
def test_packed_documents_equal_each_document_alone(name, causal):
    """No attention across documents and positions restart at 0: a packed row equals its documents run alone."""
    if name == "cope" and not causal:
        pytest.skip("cope is causal only")
    model = make_model(name, causal=causal)
    if not model.encodings[0].supports_documents:  # bidirectional bam_ssmax: n_i counts every key of the call
        with pytest.raises(ValueError, match="is not exact on packed sequences"):
            model(torch.zeros(1, 4, dtype=torch.long), document_ids=torch.tensor([[0, 0, 1, 1]]))
        return
    rows, ids = [], []
    for lengths in PACKINGS:
        rows.append(torch.randint(0, 40, (sum(lengths),)))
        ids.append(torch.cat([torch.full((n,), d) for d, n in enumerate(lengths)]))
    tokens, document_ids = torch.stack(rows), torch.stack(ids)
    packed = model(tokens, document_ids=document_ids)
    for row, lengths in enumerate(PACKINGS):
        start = 0
        for n in lengths:
            alone = model(tokens[row:row + 1, start:start + n])
            torch.testing.assert_close(packed[row:row + 1, start:start + n], alone, rtol=1e-5, atol=1e-5)
            start += n


@pytest.mark.parametrize("name", [n for n in SEQUENCE_ENCODERS if n not in EMBED_ONLY])
@pytest.mark.parametrize("backend", ["blocked", "flex", "tiled"])
def test_packed_documents_on_every_backend(name, backend, monkeypatch):
    """The document mask and restarted positions on the memory-bounded, FlexAttention and tiled paths."""
    from pe_toolkit.nn import backends, tiled_attention

    if backend == "flex" and name == "cope":
        pytest.skip("cope has no pointwise bias")
    monkeypatch.setattr(backends, "FLEX_COMPILE", False)
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)  # compiled tiles: tests/nn/test_tiled_attention.py
    enc = make_encoder(name)
    perturb_parameters(enc)
    reference = layer_for(enc, num_kv_heads=2, backend="sdpa")
    other = layer_for(enc, num_kv_heads=2, backend=backend, query_block_size=4 if backend != "flex" else None)
    other.load_state_dict(reference.state_dict())
    x = torch.randn(2, 13, 32)
    document_ids = torch.tensor([[0] * 4 + [1] * 6 + [2] * 3, [5] * 7 + [3] + [5] * 5])
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        got, want = other(x, document_ids=document_ids), reference(x, document_ids=document_ids)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    alone = reference(x[1:, 8:], q_pos=None)  # the last document of row 1 (ids 5 again, a new run)
    torch.testing.assert_close(want[1:, 8:], alone, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ left-padded decoding
@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_left_padded_generate_equals_each_prompt_alone(name):
    """``generate(..., attention_mask=)``: positions start at each prompt's first real token, padding unseen."""
    model = make_model(name, causal=True)
    prompts = [torch.randint(1, 40, (n,)) for n in (3, 6, 4)]
    width = max(len(p) for p in prompts)
    batch = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, p in enumerate(prompts):
        batch[row, width - len(p):] = p
        mask[row, width - len(p):] = 1
    out = model.generate(batch, 5, attention_mask=mask)
    for row, p in enumerate(prompts):
        alone = model.generate(p[None], 5)
        assert torch.equal(out[row, width:], alone[0, len(p):]), (row, out[row], alone[0])
    # the first step's logits, not only the argmax
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(batch, positions=positions, padding_mask=mask.bool())[:, -1]
    for row, p in enumerate(prompts):
        torch.testing.assert_close(logits[row], model(p[None])[0, -1], rtol=1e-5, atol=1e-5)


def test_generate_attention_mask_errors():
    model = make_model("rope", causal=True)
    prompt = torch.randint(1, 40, (2, 4))
    cases = [
        (torch.ones(2, 4), TypeError, "bool or integer"),
        (torch.ones(2, 3, dtype=torch.long), ValueError, r"shape \(2, 3\), expected the prompt's \(2, 4\)"),
        (torch.full((2, 4), 2), ValueError, "only 0 \\(padding\\) and 1"),
        (torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]), ValueError, "padding after a real token"),
        (torch.tensor([[0, 0, 0, 0], [1, 1, 1, 1]]), ValueError, "at least one real token"),
        ([[1, 1, 1, 1]] * 2, TypeError, "must be a torch.Tensor, got list"),
    ]
    for mask, error, match in cases:
        with pytest.raises(error, match=match):
            model.generate(prompt, 2, attention_mask=mask)
    assert torch.equal(model.generate(prompt, 2, attention_mask=torch.ones(2, 4, dtype=torch.bool)),
                       model.generate(prompt, 2))


@pytest.fixture
def fresh_dynamo():
    """Compiled tests start without earlier graphs (dynamo's per-function recompile limit is shared)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _outputs_and_gradients(module, inputs, wrt):
    out = module(*inputs)
    grads = torch.autograd.grad(out.square().sum(), wrt, allow_unused=True)
    return out, grads


def _assert_same_outputs_and_gradients(compiled, eager, inputs, wrt):
    out, grads = _outputs_and_gradients(compiled, inputs, wrt)
    ref, ref_grads = _outputs_and_gradients(eager, inputs, wrt)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    for g, r in zip(grads, ref_grads, strict=True):
        assert (g is None) == (r is None)
        if g is not None:
            torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_compiled_layer_equals_eager(name, fresh_dynamo):
    """torch.compile(fullgraph=True) traces the layer (GQA: 4 query heads on 2 key heads) in one graph,
    and equals eager in outputs and in the gradients of the input and every parameter (float64, aot_eager:
    the traced graph itself, without inductor's float reassociation)."""
    enc = make_encoder(name)
    module = EmbedThenAttend(enc, layer_for(enc, num_kv_heads=2)).double()
    perturb_parameters(module)
    x = torch.randn(2, 9, 32, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    _assert_same_outputs_and_gradients(compiled, module, (x, torch.arange(9)), [x, *module.parameters()])


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_compiled_tiled_layer_equals_eager(name, fresh_dynamo, monkeypatch):
    """The same with ``backend="tiled"``: the tile loop traces into one graph (with ordinary autograd, see
    pe_toolkit.nn.tiled_attention and pe_toolkit.nn.tiled_cope) and equals the eager custom autograd function. One
    tile (tracing many costs a minute per encoder; tests/nn/test_tiled_attention.py traces 3 x 3 tiles for two
    encoders)."""
    from pe_toolkit.nn import tiled_attention

    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)  # eager side: the tile steps uncompiled
    enc = make_encoder(name)
    module = EmbedThenAttend(enc, layer_for(enc, num_kv_heads=2, backend="tiled")).double()
    perturb_parameters(module)
    x = torch.randn(2, 9, 32, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    _assert_same_outputs_and_gradients(compiled, module, (x, torch.arange(9)), [x, *module.parameters()])


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_compiled_transformer_equals_eager(name, fresh_dynamo):
    """A whole two-layer GQA Transformer compiles in one graph and equals eager (logits and gradients)."""
    model = make_model(name, num_kv_heads=2).double()
    perturb_parameters(model)
    tokens = torch.randint(0, 40, (2, 9))
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    _assert_same_outputs_and_gradients(compiled, model, (tokens,), list(model.parameters()))
