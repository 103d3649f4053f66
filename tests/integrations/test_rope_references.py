"""Other libraries' RoPE application (pe_toolkit.integrations.rope_references) against our apply_rope."""

from __future__ import annotations

import sys

import pytest
import torch

from pe_toolkit.encoders.rotary import RotaryEncoding, apply_rope
from pe_toolkit.integrations.rope_references import reference_ropes

LIBRARIES = {"transformers": "transformers.models.llama.modeling_llama",
             "rotary-embedding-torch": "rotary_embedding_torch", "x-transformers": "x_transformers.x_transformers"}


def _qk(length=16, head_dim=8):
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(2, 3, length, head_dim, generator=generator),
            torch.randn(2, 3, length, head_dim, generator=generator))


@pytest.mark.parametrize("base", [10_000.0, 500.0])
def test_every_installed_library_rotates_as_apply_rope_in_its_layout(base):
    q, k = _qk()
    cos, sin = RotaryEncoding(3 * 8, 3, base=base).cos_sin(torch.arange(16), torch.float32)
    impls, missing = reference_ropes(q, k, base=base)
    assert set(missing) | {impl.library for impl in impls.values()} == set(LIBRARIES)
    for name, impl in impls.items():
        ours = [apply_rope(t, cos, sin, interleaved=impl.layout == "interleaved") for t in (q, k)]
        for theirs, expected in zip(impl.fn(), ours):
            torch.testing.assert_close(theirs, expected, rtol=1e-5, atol=1e-5, msg=name)
        assert not torch.allclose(impl.fn()[0], q)  # it rotates


def test_a_library_that_is_not_installed_is_reported(monkeypatch):
    monkeypatch.setitem(sys.modules, LIBRARIES["x-transformers"], None)
    impls, missing = reference_ropes(*_qk())
    assert "import of x_transformers.x_transformers halted" in missing["x-transformers"]
    assert "x-transformers" not in impls


@pytest.mark.parametrize("shapes", [((2, 3, 16, 7), (2, 3, 16, 7)), ((3, 16, 8), (3, 16, 8)),
                                    ((2, 3, 16, 8), (2, 3, 15, 8))])
def test_bad_shapes_are_errors(shapes):
    with pytest.raises(ValueError, match="q and k must be tensors of one shape"):
        reference_ropes(*(torch.zeros(s) for s in shapes))
