"""Attention backends (pe_toolkit.nn.backends): every backend equals the dense reference, for every encoder."""

from __future__ import annotations

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.encoders.base import PositionBiasEncoding, score_bias
from pe_toolkit.nn import backends
from pe_toolkit.nn.backends import choose_backend, default_tile
from pe_toolkit.nn.masks import AttentionMask

SEQUENCE = pet.list_encoders(domain="sequence")
# what an attention layer runs: encoders with a rotate or bias hook (an embed-only one is refused)
IN_ATTENTION = [n for n in SEQUENCE if n == "nope" or pet.get_encoder(n, 8, 2, **pet.encoder_info(n).example_options)
                .acts_in_attention]
POINTWISE = [n for n in SEQUENCE if issubclass(pet.encoder_info(n).cls, PositionBiasEncoding)]


@pytest.fixture
def eager_flex(monkeypatch):
    """FlexAttention's reference (uncompiled) path: checks every score_mod without a compile per encoder."""
    monkeypatch.setattr(backends, "FLEX_COMPILE", False)
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        yield


def encoder(name: str, *, causal: bool = True, dim: int = 32, heads: int = 4, dtype=torch.float64):
    options = dict(pet.encoder_info(name).example_options)
    enc = pet.get_encoder(name, dim, heads, causal=causal, **options).to(dtype)
    with torch.no_grad():  # off the initial values (CoPE's table starts at zero)
        for p in enc.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return enc


def pair(name: str, backend: str, *, causal: bool = True, tile: int | None = None, dtype=torch.float64):
    """The same layer twice: the dense reference and ``backend``."""
    enc = encoder(name, causal=causal, dtype=dtype)
    reference = pet.MultiHeadAttention(32, 4, num_kv_heads=2, causal=causal, encoding=enc, backend="sdpa").to(dtype)
    other = pet.MultiHeadAttention(32, 4, num_kv_heads=2, causal=causal, encoding=enc, backend=backend,
                                   query_block_size=tile).to(dtype)
    other.load_state_dict(reference.state_dict())
    return reference, other


def cases(names):
    return [(n, c) for n in names for c in (True, False) if not (n == "cope" and not c)]


# ------------------------------------------------------------------------------ pointwise definition
@pytest.mark.parametrize("name", POINTWISE)
def test_dense_bias_is_the_score_on_every_pair(name):
    """``position_bias`` (tabulated or vectorised) equals ``score`` evaluated pair by pair."""
    enc = encoder(name)
    for q_pos, k_pos in ((torch.arange(3, 9), torch.arange(12)), (torch.tensor([[0, 4, 9], [2, 3, 5]]),
                                                                  torch.tensor([[1, 2, 3, 8], [0, 5, 6, 7]]))):
        pairwise = score_bias(enc.score, 4, q_pos, k_pos, torch.float64, shift_invariant=False)
        torch.testing.assert_close(enc.position_bias(q_pos, k_pos, torch.float64), pairwise, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", POINTWISE)
def test_bias_function_on_the_index_grid_is_the_dense_bias(name):
    enc = encoder(name)
    q_pos, k_pos = torch.tensor([[0, 4, 9], [2, 3, 5]]), torch.tensor([[1, 2, 3, 8], [0, 5, 6, 7]])
    q = torch.zeros(2, 4, 3, 8, dtype=torch.float64)
    fn = enc.bias_function(q, q, q_pos, k_pos)
    b, h = torch.arange(2).view(2, 1, 1, 1), torch.arange(4).view(1, 4, 1, 1)
    i, j = torch.arange(3).view(1, 1, 3, 1), torch.arange(4).view(1, 1, 1, 4)
    torch.testing.assert_close(fn(b, h, i, j), enc.position_bias(q_pos, k_pos, torch.float64), rtol=1e-12, atol=1e-12)


def test_cope_has_no_pointwise_bias():
    enc = encoder("cope")
    q = torch.randn(1, 4, 3, 8, dtype=torch.float64)
    assert enc.bias_function(q, q, torch.arange(3), torch.arange(3)) is None


# ------------------------------------------------------------------------------ outputs and gradients
@pytest.mark.parametrize(("name", "causal"), cases(IN_ATTENTION))
def test_blocked_outputs_and_gradients_equal_dense(name, causal):
    reference, blocked = pair(name, "blocked", causal=causal, tile=3)
    x = torch.randn(2, 10, 32, dtype=torch.float64)
    padding = torch.ones(2, 10, dtype=torch.bool)
    padding[1, 7:] = False
    weight = torch.randn(2, 10, 32, dtype=torch.float64)
    grads = []
    for layer in (reference, blocked):
        layer.zero_grad()
        xi = x.clone().requires_grad_(True)
        out = layer(xi, key_padding_mask=None if causal else padding)
        (out * weight).sum().backward()
        grads.append((out.detach(), xi.grad, {n: p.grad for n, p in layer.named_parameters()}))
    (out_a, dx_a, pa), (out_b, dx_b, pb) = grads
    torch.testing.assert_close(out_b, out_a, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(dx_b, dx_a, rtol=1e-10, atol=1e-10)
    assert pa.keys() == pb.keys()
    for n in pa:
        torch.testing.assert_close(pb[n], pa[n], rtol=1e-9, atol=1e-10, msg=n)
    acts_in_attention = {"rotate", "bias"} & set(pet.encoder_info(name).hooks)
    learnable = [n for n, p in reference.encoding.named_parameters() if p.requires_grad and acts_in_attention]
    for n in learnable:  # the encoder's parameters learn on the blocked backend too
        assert pb[f"encoding.{n}"] is not None and pb[f"encoding.{n}"].abs().sum() > 0, n


@pytest.mark.parametrize(("name", "causal"), cases(IN_ATTENTION))
def test_flex_outputs_equal_dense(name, causal, eager_flex):
    if name == "cope":
        pytest.skip("cope has no pointwise bias (tested below)")
    reference, flex = pair(name, "flex", causal=causal, dtype=torch.float32)
    x = torch.randn(2, 10, 32)
    padding = torch.ones(2, 10, dtype=torch.bool)
    padding[1, 7:] = False
    batched = torch.stack([torch.arange(10), torch.arange(10) * 2 + 3])
    with torch.no_grad():
        for kwargs in ({}, {"key_padding_mask": padding}, {"q_pos": batched}):
            torch.testing.assert_close(flex(x, **kwargs), reference(x, **kwargs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_compiled_flex_equals_dense(name):
    """The fused kernel (torch.compile), causal; t5 also with a KV-cache continuation.

    Two encoders only: a cold compile (kernel and block mask, per shape) costs 10-30 s on this CPU; the
    eager test above checks every encoder's ``score_mod``, and the compiled kernel runs the same function.
    """
    reference, flex = pair(name, "flex", dtype=torch.float32)
    x = torch.randn(1, 300, 32)  # two full 128-blocks and a partial one (shorter calls are refused on the CPU)
    with torch.no_grad():
        torch.testing.assert_close(flex(x), reference(x), rtol=1e-5, atol=1e-5)
        if name != "t5":  # every new shape compiles the kernel and its block mask again: one encoder decodes
            return
        cache = pet.KVCache()
        steps = torch.cat([flex(x[:, :150], cache=cache), flex(x[:, 150:], cache=cache)], dim=1)
        torch.testing.assert_close(steps, reference(x), rtol=1e-5, atol=1e-5)


def test_compiled_flex_refuses_calls_below_one_block_on_the_cpu():
    """Compiled CPU FlexAttention gave nan or 0.1-0.6 errors, varying run to run, at 40 tokens (torch 2.13):
    explicit ``"flex"`` refuses such a call by its sizes; ``"auto"`` never picks flex for it."""
    _, flex = pair("alibi", "flex", dtype=torch.float32)
    with torch.no_grad(), pytest.raises(ValueError, match="at least 128 queries and keys, got 40 queries"):
        flex(torch.randn(1, 40, 32))


def test_blocked_backward_keeps_no_full_score_matrix():
    """The backward pass rebuilds each tile: nothing saved for it grows as L x L (saved tensors counted)."""
    saved = {}
    for backend in ("sdpa", "blocked"):
        layer = pet.MultiHeadAttention(32, 4, causal=True, encoding=pet.get_encoder("t5", 32, 4), backend=backend,
                                       query_block_size=32 if backend == "blocked" else None)
        largest = 0

        def pack(t):
            nonlocal largest
            largest = max(largest, t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = layer(torch.randn(1, 512, 32, requires_grad=True))
        out.sum().backward()
        saved[backend] = largest
    assert saved["sdpa"] >= 4 * 512 * 512  # the dense bias / scores
    assert saved["blocked"] < 4 * 32 * 512 + 1 and saved["blocked"] * 16 <= saved["sdpa"]


# ------------------------------------------------------------------------------ precision
def test_bias_is_added_in_float32_under_bfloat16():
    """ALiBi's slowest head (slope 1/256) at 4k-16k distance: bf16 would round the bias to steps of 0.25-1."""
    heads, dim = 8, 64
    enc = pet.get_encoder("alibi", dim, heads)
    layer = pet.MultiHeadAttention(dim, heads, causal=True, encoding=enc, backend="sdpa")
    x = torch.randn(1, 16, dim)
    q_pos = torch.arange(16) * 1000 + 4000
    with torch.no_grad():
        exact = layer.double()(x.double(), q_pos=q_pos)
        low = layer.bfloat16()(x.bfloat16(), q_pos=q_pos).double()
    # bf16 rounding of the inputs and weights alone: about 1e-2 of the output scale
    scale = exact.abs().max()
    assert (low - exact).abs().max() < 0.03 * scale


# ------------------------------------------------------------------------------ the auto rule
def _mask(length, **kw):
    return AttentionMask(length, length, causal=True, **kw)


def test_auto_rule():
    q = torch.zeros(1, 4, 8, 16)
    pos = torch.arange(8)
    alibi, cope, rope = (pet.get_encoder(n, 64, 4) for n in ("alibi", "cope", "rope"))
    small = _mask(8)
    assert choose_backend(alibi, q, q, pos, pos, small, tile=None, dropout=0.0) == "sdpa"
    assert choose_backend(alibi, q, q, pos, pos, small, tile=4, dropout=0.0) == "blocked"
    big = _mask(8192)  # 4 heads x 8192^2 = 2^28 > DENSE_BUDGET
    with torch.no_grad():
        assert choose_backend(alibi, q, q, pos, pos, big, tile=None, dropout=0.0) == "flex"
        assert choose_backend(cope, q, q, pos, pos, big, tile=None, dropout=0.0) == "blocked"  # not pointwise
        assert choose_backend(alibi, q, q, pos, pos, big, tile=None, dropout=0.1) == "blocked"  # flex: no dropout
        assert choose_backend(rope, q, q, pos, pos, big, tile=None, dropout=0.1) == "sdpa"  # SDPA's causal kernel
    trainable = q.clone().requires_grad_(True)
    assert choose_backend(alibi, trainable, q, pos, pos, big, tile=None, dropout=0.0) == "tiled"  # CPU: no flex grad
    assert choose_backend(cope, trainable, q, pos, pos, big, tile=None, dropout=0.0) == "tiled"  # its own tiles
    padded = _mask(8192, key_padding_mask=torch.ones(1, 8192, dtype=torch.bool))
    # a bool (1, 1, L, L) mask of 2^26 elements is at the budget, not over it
    assert choose_backend(rope, trainable, q, pos, pos, padded, tile=None, dropout=0.0) == "sdpa"
    two = torch.zeros(2, 4, 8, 16, requires_grad=True)
    assert choose_backend(rope, two, two, pos, pos, _mask(8192, key_padding_mask=torch.ones(2, 8192, dtype=torch.bool)),
                          tile=None, dropout=0.0) == "blocked"


def test_default_tile():
    assert default_tile(1, 4, 32768) == 32
    assert default_tile(1, 4, 64) == 16384
    assert default_tile(8, 16, 1 << 20) == 16  # never below 16 rows


# ------------------------------------------------------------------------------ errors
def test_flex_errors():
    x = torch.randn(1, 6, 32)
    cope = pet.MultiHeadAttention(32, 4, causal=True, encoding=pet.get_encoder("cope", 32, 4), backend="flex")
    with torch.no_grad(), pytest.raises(ValueError, match="backend 'flex' needs a pointwise bias; 'cope' has none"):
        cope(x)
    alibi = pet.MultiHeadAttention(32, 4, causal=True, encoding=pet.get_encoder("alibi", 32, 4), backend="flex")
    with pytest.raises(ValueError, match="no backward pass on the CPU"):
        alibi(x)
    dropping = pet.MultiHeadAttention(32, 4, causal=True, dropout=0.1, backend="flex")
    with torch.no_grad(), pytest.raises(ValueError, match="backend 'flex' has no attention dropout"):
        dropping(x)


def test_backend_argument_errors():
    with pytest.raises(ValueError, match=r"one of \('auto', 'sdpa', 'blocked', 'flex', 'tiled'\), got 'fast'"):
        pet.MultiHeadAttention(32, 4, backend="fast")
    with pytest.raises(ValueError, match="query_block_size is the tile size of backend 'blocked'"):
        pet.MultiHeadAttention(32, 4, backend="sdpa", query_block_size=8)
    assert pet.MultiHeadAttention(32, 4, backend="blocked").backend == "blocked"
    assert "backend='auto'" in repr(pet.MultiHeadAttention(32, 4))


def test_tiles_agree_for_every_tile_size():
    reference, blocked = pair("kerple", "blocked", tile=1)
    x = torch.randn(1, 7, 32, dtype=torch.float64)
    expected = reference(x)
    for tile in (1, 2, 3, 6, 7, 50):
        blocked.query_block_size = tile
        torch.testing.assert_close(blocked(x), expected, rtol=1e-12, atol=1e-12)


def test_score_mod_scale_matches_head_dim():
    """FlexAttention's default scale is 1/sqrt(head_dim), as SDPA's."""
    q = k = v = torch.randn(1, 2, 128, 16)  # one full block: the compiled CPU kernel refuses less
    mask = AttentionMask(128, 128)
    nope = pet.get_encoder("nope", 32, 2)
    with torch.no_grad():
        out = backends.attend(q, k, v, torch.arange(128), torch.arange(128), nope, mask, backend="flex")
    weights = (q @ k.transpose(-1, -2) / math.sqrt(16)).softmax(-1)
    torch.testing.assert_close(out, weights @ v, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------ domain biases
DOMAIN_POINTWISE = ["music_relative", "time_interval", "edge_aware_graph"]


@pytest.mark.parametrize("name", DOMAIN_POINTWISE)
def test_domain_bias_function_is_the_dense_bias(name):
    """Per-query tables looked up pointwise equal the encoder's own dense bias, at its example positions."""
    enc = encoder(name)
    pos = enc.example_positions(7)
    q, k = torch.randn(2, 4, 7, 8, dtype=torch.float64), torch.randn(2, 4, 7, 8, dtype=torch.float64)
    fn = enc.bias_function(q, k, pos, pos)
    b, h = torch.arange(2).view(2, 1, 1, 1), torch.arange(4).view(1, 4, 1, 1)
    i, j = torch.arange(7).view(1, 1, 7, 1), torch.arange(7).view(1, 1, 1, 7)
    torch.testing.assert_close(fn(b, h, i, j), enc.bias(q, k, pos, pos).expand(2, 4, 7, 7), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", DOMAIN_POINTWISE)
@pytest.mark.parametrize("backend", ["blocked", "flex"])
def test_domain_bias_on_every_backend(name, backend, eager_flex):
    dtype = torch.float32 if backend == "flex" else torch.float64
    reference, other = pair(name, backend, tile=3 if backend == "blocked" else None, dtype=dtype)
    pos = reference.encoding.example_positions(9)
    x = torch.randn(2, 9, 32, dtype=dtype)
    with torch.no_grad():
        torch.testing.assert_close(other(x, q_pos=pos), reference(x, q_pos=pos), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_edge_aware_graph_tiles_train_like_dense(causal):
    """The edge bias reads key j's column of each query's edge row: tiles evaluate its pointwise function
    at their global indices, so the blocked backend equals the dense one in outputs and in the gradients of
    the input and of the learned edge weights (bidirectional, as NOPE uses it, and causal)."""
    reference, blocked = pair("edge_aware_graph", "blocked", causal=causal, tile=3)
    pos = reference.encoding.example_positions(10).double()
    x = torch.randn(2, 10, 32, dtype=torch.float64, requires_grad=True)
    grads = []
    for layer in (reference, blocked):
        out = layer(x, q_pos=pos)
        grads.append((out, *torch.autograd.grad(out.square().sum(), [x, layer.encoding.edge_weight])))
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    assert grads[1][2].abs().sum() > 0
