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


# ----------------------------------------------------------------------------------- bias cache
def test_no_grad_builds_once_for_equal_positions():
    enc = T5RelativeBias(8, 2)
    q, k = qk(enc, 4)
    with torch.no_grad():
        first = enc.bias(q, k, torch.arange(4), torch.arange(4))
        again = enc.bias(q, k, torch.arange(4), torch.arange(4))  # new tensors, equal values
        pos = torch.arange(4)
        for _ in range(3):
            enc.bias(q, k, pos, pos)
    assert enc.bias_builds == 1
    assert again is first


def test_rebuilds_when_positions_change():
    enc = ALiBi(8, 2)
    q, k = qk(enc, 3)
    with torch.no_grad():
        a = enc.bias(q, k, torch.arange(3), torch.arange(3))
        b = enc.bias(q, k, torch.tensor([0, 1, 5]), torch.tensor([0, 1, 5]))
        assert enc.bias_builds == 2
        assert b[0, 0, 2, 0].item() == pytest.approx(-5 / 16)
        assert a[0, 0, 2, 0].item() == pytest.approx(-2 / 16)
        enc.bias(q, k, torch.arange(3), torch.arange(3))  # one entry only: rebuilt
        assert enc.bias_builds == 3
        q4, k4 = qk(enc, 4)
        enc.bias(q4, k4, torch.arange(4), torch.arange(4))  # new length
        assert enc.bias_builds == 4
        enc.bias(q4[..., :1, :], k4, torch.tensor([3]), torch.arange(4))  # new query positions
        assert enc.bias_builds == 5


def test_rebuilds_when_positions_are_edited_in_place():
    enc = ALiBi(8, 2)
    q, k = qk(enc, 3)
    pos = torch.arange(3)
    with torch.no_grad():
        enc.bias(q, k, pos, pos)
        pos[2] = 10  # same tensor object, new values
        bias = enc.bias(q, k, pos, pos)
    assert enc.bias_builds == 2
    assert bias[0, 0, 2, 0].item() == pytest.approx(-10 / 16)


def test_rebuilds_when_stored_positions_are_edited_then_passed_again_as_a_copy():
    enc = ALiBi(8, 2)
    q, k = qk(enc, 3)
    pos = torch.arange(3)
    with torch.no_grad():
        enc.bias(q, k, pos, pos)
        pos[2] = 10  # e.g. a KV-cache buffer reused for the next sequence
        bias = enc.bias(q, k, pos.clone(), pos.clone())
    assert bias[0, 0, 2, 0].item() == pytest.approx(-10 / 16)


def test_rebuilds_for_new_dtype_and_after_to():
    enc = ALiBi(8, 2)
    with torch.no_grad():
        enc.bias(*qk(enc, 3), torch.arange(3), torch.arange(3))
        b64 = enc.bias(*qk(enc, 3, torch.float64), torch.arange(3), torch.arange(3))
        assert b64.dtype == torch.float64 and enc.bias_builds == 2
        enc.bias(*qk(enc, 3, torch.bfloat16), torch.arange(3), torch.arange(3))  # bias in float32
        assert enc.bias_builds == 3
        enc.bias(*qk(enc, 3, torch.float16), torch.arange(3), torch.arange(3))  # float32 again: cached
        assert enc.bias_builds == 3
        enc.to(torch.float64)  # .to() drops the cache
        enc.bias(*qk(enc, 3, torch.float16), torch.arange(3), torch.arange(3))
        assert enc.bias_builds == 4


def test_rebuilds_after_optimizer_step():
    enc = KERPLE(8, 2, variant="log")
    optimizer = torch.optim.SGD(enc.parameters(), lr=0.1)
    q, k = qk(enc, 4)
    pos = torch.arange(4)
    with torch.no_grad():
        before = enc.bias(q, k, pos, pos).clone()
        enc.bias(q, k, pos, pos)
    assert enc.bias_builds == 1
    enc.bias(q, k, pos, pos).sum().backward()  # grad mode, no scope: built afresh
    assert enc.bias_builds == 2
    optimizer.step()
    with torch.no_grad():
        after = enc.bias(q, k, pos, pos)
        assert enc.bias_builds == 3
        expected = enc.position_bias(pos, pos, torch.float32)
    torch.testing.assert_close(after, expected, rtol=0, atol=0)
    assert not torch.allclose(after, before)


def test_rebuilds_after_in_place_parameter_edit():
    enc = T5RelativeBias(8, 2)
    q, k = qk(enc, 3)
    pos = torch.arange(3)
    with torch.no_grad():
        enc.bias(q, k, pos, pos)
        enc.relative_attention_bias.weight.fill_(2.5)
        bias = enc.bias(q, k, pos, pos)
    assert enc.bias_builds == 2
    torch.testing.assert_close(bias, torch.full((1, 2, 3, 3), 2.5), rtol=0, atol=0)


def test_autograd_outside_scope_rebuilds_every_call():
    enc = T5RelativeBias(8, 2)
    q, k = qk(enc, 3)
    pos = torch.arange(3)
    for step in range(3):
        bias = enc.bias(q, k, pos, pos)
        assert bias.requires_grad
        bias.sum().backward()  # would fail on a reused graph
        assert enc.bias_builds == step + 1


def test_autograd_inside_one_scope_reuses_and_next_scope_rebuilds():
    enc = T5RelativeBias(8, 2)
    q, k = qk(enc, 3)
    pos = torch.arange(3)
    for _ in range(2):
        enc.bias_builds = 0
        with enc.forward_scope():
            layers = [enc.bias(q, k, pos, pos) for _ in range(4)]  # four layers share one bias
            assert all(b is layers[0] for b in layers)
            assert enc.bias_builds == 1
            with enc.forward_scope():  # a nested scope (e.g. an inner model) builds its own
                enc.bias(q, k, pos, pos)
            assert enc.bias_builds == 2
        assert enc._cache_entry is None  # the graph is released when the outer scope closes
        sum(b.sum() for b in layers).backward()
    grad = enc.relative_attention_bias.weight.grad
    assert grad is not None and torch.isfinite(grad).all()


def test_autograd_scope_then_backward_then_new_scope():
    enc = KERPLE(8, 2, variant="power")
    q, k = qk(enc, 3)
    pos = torch.arange(3)
    with enc.forward_scope():
        enc.bias(q, k, pos, pos).sum().backward()
    with enc.forward_scope():
        enc.bias(q, k, pos, pos).sum().backward()  # no "backward through the graph a second time"
    assert enc.bias_builds == 2


def test_parameter_free_bias_is_cached_in_grad_mode():
    enc = ALiBi(8, 2)
    q, k = qk(enc, 3)
    a = enc.bias(q, k, torch.arange(3), torch.arange(3))
    b = enc.bias(q, k, torch.arange(3), torch.arange(3))
    assert a is b and enc.bias_builds == 1


def test_frozen_parameters_are_cached_in_grad_mode():
    enc = T5RelativeBias(8, 2).requires_grad_(False)
    q, k = qk(enc, 3)
    enc.bias(q, k, torch.arange(3), torch.arange(3))
    enc.bias(q, k, torch.arange(3), torch.arange(3))
    assert enc.bias_builds == 1


def test_no_grad_entry_is_not_reused_in_grad_mode():
    enc = T5RelativeBias(8, 2)
    q, k = qk(enc, 3)
    pos = torch.arange(3)
    with torch.no_grad():
        enc.bias(q, k, pos, pos)
    with enc.forward_scope():
        bias = enc.bias(q, k, pos, pos)
    assert bias.requires_grad and enc.bias_builds == 2


def test_inference_mode_caches():
    enc = T5RelativeBias(8, 2)
    with torch.inference_mode():
        q, k = qk(enc, 3)
        pos = torch.arange(3)  # an inference tensor
        a = enc.bias(q, k, pos, pos)
        b = enc.bias(q, k, torch.arange(3), torch.arange(3))
        assert a is b and enc.bias_builds == 1
        pos[1] = 7
        c = enc.bias(q, k, pos, pos)
        assert enc.bias_builds == 2
        torch.testing.assert_close(c, enc.position_bias(pos, pos, torch.float32), rtol=0, atol=0)


def test_clear_cache():
    enc = ALiBi(8, 2)
    with torch.no_grad():
        enc.bias(*qk(enc, 3), torch.arange(3), torch.arange(3))
        enc.clear_cache()
        enc.bias(*qk(enc, 3), torch.arange(3), torch.arange(3))
    assert enc.bias_builds == 2


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
