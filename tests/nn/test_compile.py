"""torch.compile: the attention layer and the Transformer trace in one graph and equal eager.

The per-encoder compiled-vs-eager sweep (layer and Transformer, float64, ``aot_eager``) lives in
``tests/test_conformance.py``. This file holds what needs inductor (the GQA + RoPE regression, a
bias and CoPE through the real compiler), the paths the sweep does not reach (RoPE scalings on both
sides of their original length, the blocked and flex backends, packed documents) and the value checks
that become in-graph assertions while compiled.
"""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.nn import backends


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def perturbed(module: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return module


def outputs_and_gradients(module, x, **kwargs):
    out = module(x, **kwargs)
    params = [p for p in module.parameters() if p.requires_grad]
    grads = torch.autograd.grad(out.square().sum(), [x, *params])
    return out, grads


def assert_compiled_equals_eager(module, x, *, compiler: str, tol: float, **kwargs):
    compiled = torch.compile(module, fullgraph=True, backend=compiler)
    out, grads = outputs_and_gradients(compiled, x, **kwargs)
    ref, ref_grads = outputs_and_gradients(module, x, **kwargs)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=tol, atol=tol)


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
def test_gqa_rope_regression(compiler):
    """GQA + RoPE used to crash in inductor ("mul expected 2 arguments, got 3": RoPE's ``out=`` writes into
    strided views) and to be silently wrong under aot_eager (0.057 off); now both equal eager."""
    enc = pet.get_encoder("rope", 64, 8)
    layer = perturbed(pet.MultiHeadAttention(64, 8, num_kv_heads=2, causal=True, encoding=enc))
    x = torch.randn(2, 16, 64, requires_grad=True)
    assert_compiled_equals_eager(layer, x, compiler=compiler, tol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "cope"])
def test_inductor_bias_and_cope(name):
    """A table bias and CoPE's data-dependent gate sums through inductor, forward and backward (float32)."""
    enc = perturbed(pet.get_encoder(name, 32, 4, **pet.encoder_info(name).example_options))
    layer = perturbed(pet.MultiHeadAttention(32, 4, num_kv_heads=2, causal=True, encoding=enc))
    x = torch.randn(2, 12, 32, requires_grad=True)
    assert_compiled_equals_eager(layer, x, compiler="inductor", tol=1e-5)


ROPE_SCALINGS = {
    "dynamic": dict(scaling="dynamic", factor=2.0, original_max_position=8),
    "longrope": dict(scaling="longrope", factor=2.0, original_max_position=8, short_factor=[1.0] * 8,
                     long_factor=[1.0 + i for i in range(8)]),
    "yarn": dict(scaling="yarn", factor=4.0, original_max_position=8),
    "llama3": dict(scaling="llama3", factor=4.0, original_max_position=8),
    "xpos": dict(xpos=True),
    "partial_interleaved": dict(rotary_fraction=0.5, interleaved=True),
}


@pytest.mark.parametrize(("case", "length"), [(c, n) for c in sorted(ROPE_SCALINGS) for n in (6, 12)
                                               if n == 12 or c in ("dynamic", "longrope")])
def test_rope_scalings_compile(case, length):
    """Length-dependent scalings select their frequencies in the graph (torch.where on the current
    length), so one compiled layer is right below and above ``original_max_position`` (8)."""
    enc = pet.get_encoder("rope", 64, 4, **ROPE_SCALINGS[case])
    layer = perturbed(pet.MultiHeadAttention(64, 4, num_kv_heads=2, causal=True, encoding=enc)).double()
    x = torch.randn(2, length, 64, dtype=torch.float64, requires_grad=True)
    assert_compiled_equals_eager(layer, x, compiler="aot_eager", tol=1e-10)


def test_dynamic_rope_frequencies_change_with_length_in_one_graph():
    """The traced frequencies are those eager selects: plain up to the original length, scaled beyond."""
    enc = pet.get_encoder("rope", 16, 1, **ROPE_SCALINGS["dynamic"])
    short, long = torch.tensor(8.0, dtype=torch.float64), torch.tensor(12.0, dtype=torch.float64)
    torch.testing.assert_close(enc.traced_inverse_frequencies(short), enc.inverse_frequencies_for(None))
    torch.testing.assert_close(enc.traced_inverse_frequencies(long),
                               enc.inverse_frequencies_for(enc.frequency_key(12)), rtol=1e-14, atol=0)
    assert not torch.equal(enc.traced_inverse_frequencies(long), enc.inverse_frequencies_for(None))


@pytest.mark.parametrize("name", ["t5", "cope"])
def test_blocked_backend_compiles(name):
    """Checkpointed query tiles (torch.utils.checkpoint inside the graph) equal eager, gradients too."""
    enc = perturbed(pet.get_encoder(name, 32, 4, **pet.encoder_info(name).example_options))
    layer = perturbed(pet.MultiHeadAttention(32, 4, causal=True, encoding=enc, backend="blocked",
                                             query_block_size=4)).double()
    x = torch.randn(2, 11, 32, dtype=torch.float64, requires_grad=True)
    assert_compiled_equals_eager(layer, x, compiler="aot_eager", tol=1e-10)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_backend_inside_a_compiled_layer(monkeypatch):
    """backend='flex' in a compiled layer calls FlexAttention inside the caller's graph (CPU: inference)."""
    enc = pet.get_encoder("alibi", 32, 4)
    layer = pet.MultiHeadAttention(32, 4, causal=True, encoding=enc, backend="flex")
    x = torch.randn(2, 24, 32)
    with torch.no_grad():
        out = torch.compile(layer, fullgraph=True, backend="aot_eager")(x)
        monkeypatch.setattr(backends, "FLEX_COMPILE", False)
        ref = layer(x)  # eager FlexAttention
        layer.backend = "sdpa"
        sdpa = layer(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out, sdpa, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["rope", "t5", "cope"])
def test_packed_documents_compile(name):
    """document_ids: the run ids, restarted positions and document mask are built in the graph."""
    enc = perturbed(pet.get_encoder(name, 32, 4, **pet.encoder_info(name).example_options))
    layer = perturbed(pet.MultiHeadAttention(32, 4, causal=True, encoding=enc)).double()
    x = torch.randn(2, 10, 32, dtype=torch.float64, requires_grad=True)
    docs = torch.tensor([[0] * 4 + [1] * 6, [3] * 7 + [5] * 3])
    assert_compiled_equals_eager(layer, x, compiler="aot_eager", tol=1e-10, document_ids=docs)


def test_value_checks_become_assertions_in_the_graph():
    """A check on tensor values cannot be a Python branch in a full graph; compiled, it is an in-graph
    assertion (RuntimeError with the eager message) instead of eager's ValueError."""
    enc = pet.get_encoder("learned", 16, 2, max_len=8)

    def embed(x, positions):
        return enc.embed(x, positions)

    compiled = torch.compile(embed, fullgraph=True, backend="aot_eager")
    x = torch.randn(1, 4, 16)
    torch.testing.assert_close(compiled(x, torch.arange(4)), embed(x, torch.arange(4)))
    with pytest.raises(ValueError, match=r"learned: positions must lie in \[0, max_len=8\), got range \[6, 9\]"):
        embed(x, torch.arange(6, 10))
    with pytest.raises(RuntimeError, match=r"learned: positions must lie in \[0, max_len=8\)"):
        compiled(x, torch.arange(6, 10))

    rope = pet.get_encoder("rope", 16, 2, xpos=True)
    layer = pet.MultiHeadAttention(16, 2, causal=True, encoding=rope)
    far = torch.tensor([0.0, 1.0, float(rope.xpos_max_position) + 1])
    with pytest.raises(RuntimeError, match="xpos supports"):
        torch.compile(layer, fullgraph=True, backend="aot_eager")(torch.randn(1, 3, 16), q_pos=far)
    nan = torch.tensor([0.0, float("nan"), 2.0])
    with pytest.raises(RuntimeError, match="q_pos contains NaN or inf"):
        torch.compile(layer, fullgraph=True, backend="aot_eager")(torch.randn(1, 3, 16), q_pos=nan)


def test_flex_refuses_float64_on_cpu():
    layer = pet.MultiHeadAttention(16, 2, causal=True, encoding=pet.get_encoder("alibi", 16, 2), backend="flex")
    with torch.no_grad(), pytest.raises(ValueError, match="backend 'flex' on the CPU takes .* got torch.float64"):
        layer.double()(torch.randn(1, 4, 16, dtype=torch.float64))
