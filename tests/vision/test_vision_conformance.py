"""The conformance properties of ``tests/test_conformance.py`` for the vision encoders, with vector positions.

That suite runs over the sequence encoders with ``arange`` positions; here every encoder of
``domain="vision"`` runs through the core attention and Transformer with its own ``(B, L, 2 | 3)``
positions (:meth:`example_positions`, a patch grid or a text-image-text sequence).
"""

from __future__ import annotations

import pytest
import torch
from torch.func import functional_call

import pe_toolkit as pet
import pe_toolkit.domains.vision  # noqa: F401  (registers the encoders)

VISION = pet.list_encoders(domain="vision")
LEARNABLE = ["learned_2d", "rope_mixed"]


def make(name: str, dim: int = 32, heads: int = 4):
    enc = pet.get_encoder(name, dim, heads, causal=False, **pet.encoder_info(name).example_options)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return enc


class EmbedThenAttend(torch.nn.Module):
    def __init__(self, enc, dim: int = 32, heads: int = 4, **options) -> None:
        super().__init__()
        self.enc = enc
        self.attn = pet.MultiHeadAttention(dim, heads, causal=False, encoding=enc if enc.acts_in_attention else None,
                                           **options)

    def forward(self, x, positions):  # an embed-only encoding acts on the input; the layer is then NoPE
        return self.attn(self.enc.embed(x, positions), q_pos=positions if self.enc.acts_in_attention else None)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("name", VISION)
def test_metadata_and_vector_positions(name):
    info = pet.encoder_info(name)
    assert info.domain == "vision" and "20" in info.reference and info.cls.__doc__
    enc = make(name)
    assert enc.position_vector_dims == 1
    assert enc.example_positions(10).shape == (10, 3 if name == "mrope" else 2)


@pytest.mark.parametrize("name", VISION)
def test_shapes_and_batched_positions_equal_shared(name):
    enc = make(name)
    module = EmbedThenAttend(enc)
    x = torch.randn(2, 9, 32)
    shared = enc.example_positions(9)
    out = module(x, shared)
    assert out.shape == (2, 9, 32)
    torch.testing.assert_close(module(x, shared.expand(2, -1, -1)), out)
    q, k = torch.randn(2, 4, 9, 8), torch.randn(2, 4, 9, 8)
    q2, k2 = enc.rotate(q, k, shared, shared)
    assert q2.shape == q.shape and k2.shape == k.shape and enc.bias(q2, k2, shared, shared) is None


@pytest.mark.parametrize("name", VISION)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dtypes_match_float64(name, dtype):
    enc = make(name)
    module = EmbedThenAttend(enc)
    x = torch.randn(2, 12, 32, dtype=torch.float64)
    positions = enc.example_positions(12)
    reference = module.double()(x, positions)
    out = module.to(dtype)(x.to(dtype), positions)
    assert out.dtype == dtype
    tol = {torch.float32: 1e-5, torch.bfloat16: 3e-2}[dtype]
    torch.testing.assert_close(out.double(), reference, atol=tol, rtol=tol)


@pytest.mark.parametrize("name", LEARNABLE)
def test_gradcheck_float64(name):
    enc = make(name, 8, 2).double()
    model = EmbedThenAttend(enc, 8, 2).double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    positions = enc.example_positions(5).double() + 0.3  # off the integer grid: bicubic weights in play
    names = [f"enc.{n}" for n, _ in enc.named_parameters()]
    start = tuple(model.get_parameter(n).detach().clone().requires_grad_() for n in names)

    def output(*values):
        return functional_call(model, dict(zip(names, values)), (x, positions))

    assert torch.autograd.gradcheck(output, start, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", VISION)
def test_transformer_state_dict_round_trip(name):
    config = pet.TransformerConfig(vocab_size=20, dim=32, num_heads=4, num_layers=2, causal=False, encoding=name,
                                   encoding_options=pet.encoder_info(name).example_options)
    source = pet.Transformer(config)
    for enc in source.encodings:
        with torch.no_grad():
            for p in enc.parameters():
                p.add_(0.1 * torch.randn_like(p))
    state = source.state_dict()
    target = pet.Transformer(config)
    target.load_state_dict(state)
    tokens, positions = torch.randint(0, 20, (2, 7)), source.encodings[0].example_positions(7)
    torch.testing.assert_close(target(tokens, positions=positions), source(tokens, positions=positions),
                               rtol=0, atol=0)


@pytest.mark.parametrize("name", ["learned_2d", "mrope", "rope_mixed"])  # the code paths (rope_axial is mrope's)
def test_compiled_layer_equals_eager(name):
    """torch.compile(fullgraph=True) traces the layer with the encoder in one graph (aot_eager, float64)."""
    torch._dynamo.reset()
    enc = make(name)
    module = EmbedThenAttend(enc).double()
    x = torch.randn(2, 9, 32, dtype=torch.float64, requires_grad=True)
    positions = enc.example_positions(9)
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    out, ref = compiled(x, positions), module(x, positions)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    wrt = [x, *module.parameters()]
    for g, r in zip(torch.autograd.grad(out.square().sum(), wrt), torch.autograd.grad(ref.square().sum(), wrt)):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)
    torch._dynamo.reset()


@pytest.mark.parametrize("name", VISION)
def test_constructor_checks(name):
    options = pet.encoder_info(name).example_options
    with pytest.raises(ValueError, match="num_heads"):
        pet.get_encoder(name, 30, 4, **options)
    with pytest.raises(TypeError, match="no_such_option"):
        pet.get_encoder(name, 32, 4, no_such_option=1, **options)
