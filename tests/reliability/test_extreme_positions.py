"""Every sequence encoder at positions near 10**6: finite in float32 and bfloat16, and float32
agrees with a float64 evaluation of the same weights (no silent precision loss at far positions).

Long sequences (L = 32,768) are measured by ``benchmarks/extreme_inputs.py``; too slow for here.
"""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.nn.attention import MultiHeadAttention

FAR = 10**6
TOKENS = 32


@pytest.mark.parametrize("name", pet.list_encoders(domain="sequence"))
def test_far_positions_are_finite_and_precise(name):
    options = dict(pet.encoder_info(name).example_options)
    if "max_len" in options:
        options["max_len"] = FAR + 1
    encoding = pet.get_encoder(name, 16, 2, causal=True, **options)
    # an embed-only encoding acts on the input below; the layer is then NoPE
    layer = MultiHeadAttention(16, 2, encoding=encoding if encoding.acts_in_attention else None, causal=True)
    with torch.no_grad():
        for p in layer.parameters():  # off the initial values, so zero-initialised parts take part
            p.add_(0.1 * torch.randn_like(p))
    positions = torch.arange(FAR - TOKENS + 1, FAR + 1)
    x = torch.randn(1, TOKENS, 16)
    with torch.no_grad():
        out32 = layer(encoding.embed(x, positions), q_pos=positions)
        out64 = layer.double()(encoding.embed(x.double(), positions), q_pos=positions)
        out16 = layer.bfloat16()(encoding.embed(x.bfloat16(), positions), q_pos=positions)
    assert torch.isfinite(out32).all() and torch.isfinite(out16).all()
    torch.testing.assert_close(out32.double(), out64, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["learned", "sinusoidal", "rope"])
def test_the_benchmark_case_runs_every_kind_of_encoder(name):
    """``benchmarks/extreme_inputs.py``'s far-position case: an embed-only encoder acts on the input (the layer
    refuses it), and float32 stays close to float64."""
    from pe_toolkit.benchmarks.extreme_inputs import FAR_POSITION, run_case

    threads = torch.get_num_threads()  # the case sets one thread (it runs in a child of its own there)
    try:
        result = run_case(name, "float32", 16, FAR_POSITION - 16)
    finally:
        torch.set_num_threads(threads)
    assert result["finite"] and result["max_abs_dev_vs_float64"] < 1e-5 and result["seconds"] > 0
