"""The base class (NoPE), the validation helpers and the bias cache of ``PositionBiasEncoding``."""

import pytest
import torch

from pe_toolkit.encoders import (
    BAM,
    FIRE,
    KERPLE,
    ALiBi,
    CoPE,
    LearnedEncoding,
    RotaryEncoding,
    Sandwich,
    ScaledSinusoidalEncoding,
    SinusoidalEncoding,
    T5RelativeBias,
)
from pe_toolkit.encoders.base import (
    PositionalEncoding,
    causal_visibility,
    check_choice,
    check_float,
    check_int,
    default_positions,
    heads_first,
    relative_distance,
)


def qk(enc, length, dtype=torch.float32, k_length=None):
    q = torch.zeros(1, enc.num_heads, length, enc.head_dim, dtype=dtype)
    k = torch.zeros(1, enc.num_heads, length if k_length is None else k_length, enc.head_dim, dtype=dtype)
    return q, k


# ----------------------------------------------------------------------------------------- NoPE
def test_nope_hooks_are_identity():
    enc = PositionalEncoding(8, 2)
    x = torch.randn(2, 3, 8)
    q, k = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
    pos = torch.arange(3)
    assert enc.embed(x, pos) is x
    q2, k2 = enc.rotate(q, k, pos, pos)
    assert q2 is q and k2 is k
    assert enc.bias(q, k, pos, pos) is None
    assert enc.head_dim == 4 and enc.causal is True


# -------------------------------------------------------------------------------------- helpers
def test_check_helpers():
    assert check_int("n", 3) == 3
    with pytest.raises(TypeError, match="n must be an int"):
        check_int("n", True)
    with pytest.raises(ValueError, match="n must be >= 2, got 1"):
        check_int("n", 1, minimum=2)
    assert check_float("x", 2) == 2.0 and isinstance(check_float("x", 2), float)
    with pytest.raises(ValueError, match="x must be > 0"):
        check_float("x", 0.0)
    assert check_float("x", 0.0, positive=False) == 0.0
    with pytest.raises(ValueError, match="x must be >= 1"):
        check_float("x", 0.5, minimum=1.0)
    with pytest.raises(ValueError, match="finite"):
        check_float("x", float("nan"), positive=False)
    with pytest.raises(ValueError, match=r"v must be one of \('a', 'b'\), got 'c'"):
        check_choice("v", "c", ("a", "b"))


def test_position_helpers_literal():
    assert default_positions(3, offset=5).tolist() == [5, 6, 7]
    rel = relative_distance(torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2]))
    assert rel.tolist() == [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]  # j - i
    assert relative_distance(torch.tensor([[0, 1], [5, 6]]), torch.tensor([[0, 1], [5, 6]])).shape == (2, 2, 2)
    # 2 queries at the end of 4 keys (KV-cache decoding): bottom-right aligned
    assert causal_visibility(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal_visibility(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    per_pair = torch.arange(2 * 3 * 4).view(2, 3, 4).float()  # (Lq, Lk, H)
    out = heads_first(per_pair)
    assert out.shape == (1, 4, 2, 3)
    assert out[0, 1, 1, 2].item() == per_pair[1, 2, 1].item()
    assert heads_first(per_pair.unsqueeze(0).expand(5, -1, -1, -1)).shape == (5, 4, 2, 3)


# ------------------------------------------------------------------------------ no bias cache
def test_bias_keeps_no_state_between_calls():
    """The bias is a function of positions and current parameters: an edit made any way shows at once
    (the old per-encoder cache keyed on parameter versions missed ``.data =`` and ``assign=True``)."""
    enc = T5RelativeBias(8, 2)
    q, k = qk(enc, 4)
    pos = torch.arange(4)
    with torch.no_grad():
        first = enc.bias(q, k, pos, pos)
        enc.relative_attention_bias.weight.data = enc.relative_attention_bias.weight.data + 1.0
        second = enc.bias(q, k, pos, pos)
    torch.testing.assert_close(second, first + 1.0, rtol=0, atol=0)
    assert not hasattr(enc, "_cache_entry") and not hasattr(enc, "bias_builds")
    assert not hasattr(enc, "forward_scope")  # no scope to open: nothing outlives a call


def test_span_known_on_the_host_gives_the_same_bias():
    enc = T5RelativeBias(8, 2)
    q_pos, k_pos = torch.arange(3, 7), torch.arange(0, 7)
    q, k = qk(enc, 4, k_length=7)
    read = enc.bias(q, k, q_pos, k_pos)
    told = enc.bias(q, k, q_pos, k_pos, span=(0 - 6, 6 - 3))
    assert torch.equal(read, told)


# ------------------------------------------------------------------- constructor checks, every class
EVERY_CLASS = [
    (PositionalEncoding, {}),
    (SinusoidalEncoding, {}),
    (ScaledSinusoidalEncoding, {}),
    (LearnedEncoding, {"max_len": 8}),
    (RotaryEncoding, {}),
    (T5RelativeBias, {}),
    (ALiBi, {}),
    (KERPLE, {}),
    (FIRE, {}),
    (Sandwich, {}),
    (CoPE, {}),
    (BAM, {}),
]


@pytest.mark.parametrize(("cls", "options"), EVERY_CLASS, ids=[c.__name__ for c, _ in EVERY_CLASS])
def test_constructor_validates_dim_and_num_heads(cls, options):
    enc = cls(16, 2, **options)
    assert (enc.dim, enc.num_heads, enc.head_dim) == (16, 2, 8)
    with pytest.raises(TypeError, match="dim must be an int, got float"):
        cls(16.0, 2, **options)
    with pytest.raises(TypeError, match="dim must be an int, got bool"):
        cls(True, 1, **options)
    with pytest.raises(ValueError, match="dim must be >= 1, got -16"):
        cls(-16, 2, **options)
    with pytest.raises(TypeError, match="num_heads must be an int"):
        cls(16, 2.0, **options)
    with pytest.raises(ValueError, match="num_heads must be >= 1, got 0"):
        cls(16, 0, **options)
    with pytest.raises(ValueError, match=r"num_heads \(3\) must divide dim \(16\)"):
        cls(16, 3, **options)
    with pytest.raises(TypeError, match="causal must be a bool"):
        cls(16, 2, causal="yes", **options)
    with pytest.raises(TypeError):
        cls(16, 2, True, **options)  # options are keyword-only
