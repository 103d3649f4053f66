"""FIRE's tile kernel (pe_toolkit.encoders.fire_tiles): the MLP as lines between its kinks, on contiguous tiles."""

from __future__ import annotations

import pytest
import torch
from tile_kernels import count_calls, outputs_and_gradients_of

import pe_toolkit as pet
from pe_toolkit.encoders import bias as bias_module
from pe_toolkit.encoders import fire_tiles
from pe_toolkit.encoders.fire_tiles import FireTileBias, contiguous_start, segments
from pe_toolkit.nn import tiled_attention

pytestmark = pytest.mark.skipif(fire_tiles.extension() is None, reason="no C++ compiler / ninja here")


def fire(dtype=torch.float64, *, heads: int = 4, threshold: float = 40.0, seed: int = 0):
    torch.manual_seed(seed)
    enc = pet.get_encoder("fire", 64, heads).to(dtype)
    with torch.no_grad():
        enc.threshold.fill_(threshold)
        enc.c.fill_(0.3)
    return enc


def dense(enc, q_pos, k_pos, dtype):
    """``score`` on every (head, query, key): the pointwise definition the kernel must equal."""
    heads = enc.mlp[2].out_features
    return enc.score(torch.arange(heads).view(heads, 1, 1), q_pos.view(1, -1, 1), k_pos.view(1, 1, -1), dtype, 0)


def tile(enc, q_start, k_start, q_size, k_size, dtype=torch.float64):
    return FireTileBias(enc, q_start, k_start, q_size, k_size, dtype, fire_tiles.extension())


# (query index start, key index start, rows, columns): below the diagonal, across it, above it (keys after their
# queries: x rises again), a ragged tile
TILES = [(64, 0, 32, 32), (32, 32, 32, 32), (0, 48, 32, 32), (37, 11, 19, 27)]


@pytest.mark.parametrize("starts", [(0, 0), (40, 0), (7, 3)])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_tile_bias_equals_score(starts, dtype):
    """Every tile's bias equals ``score`` at the tile's positions (queries at ``q_start + i``, keys at
    ``k_start + j``; a shift as in decoding with a cache), float64 1e-12 and float32 1e-6; the threshold (40)
    inside the rows, so some rows use it as their normaliser and some their own position."""
    enc = fire(dtype)
    q_start, k_start = starts
    tiles = tile(enc, q_start, k_start, 96, 96, dtype)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    for i0, j0, rows, cols in TILES:
        got = tiles.bias(i0, j0, rows, cols)
        want = dense(enc, q_start + i0 + torch.arange(rows), k_start + j0 + torch.arange(cols), dtype)
        torch.testing.assert_close(got, want.detach(), rtol=tol, atol=tol)


@pytest.mark.parametrize("threshold", [40.0, 50.0, 500.0])
def test_statistics_give_the_gradient_of_every_parameter(threshold):
    """``gradients(sum of statistics)`` equals autograd through ``score`` of ``sum dS * bias`` over several tiles,
    for every parameter (float64, 1e-10). Threshold 50 equals a query position: ``torch.maximum`` then sends
    half of the gradient to the threshold, and so must the kernel; 500 lies past every row (every row's normaliser)."""
    enc = fire(torch.float64, threshold=threshold, seed=1)
    tiles = tile(enc, 0, 0, 96, 96)
    leaves = list(enc.parameters())
    loss, statistics = 0.0, 0.0
    for i0, j0, rows, cols in TILES:
        ds = torch.randn(4, rows, cols, dtype=torch.float64)
        loss = loss + (dense(enc, i0 + torch.arange(rows), j0 + torch.arange(cols), torch.float64) * ds).sum()
        statistics = statistics + tiles.statistics(i0, j0, ds)
    want = torch.autograd.grad(loss, leaves)
    got = tiles.gradients(statistics, leaves)
    names = [name for name, _ in enc.named_parameters()]
    for name, g, w in zip(names, got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=name)
    assert float(want[names.index("threshold")].abs()) > 0  # the threshold is some rows' normaliser (500: every row's)


def test_segments_hand_computed():
    """Kinks of ``relu(2x - 1)``, ``relu(-x + 1.3)`` and the constant ``relu(0x + 0.5)``: 0.5 and 1.3; on in each
    segment: x < 0.5 -> units 1, 2; 0.5 < x < 1.3 -> all three; x > 1.3 -> units 0, 2."""
    kinks, active = segments(torch.tensor([2.0, -1.0, 0.0]), torch.tensor([-1.0, 1.3, 0.5]))
    torch.testing.assert_close(kinks, torch.tensor([0.5, 1.3]))
    assert active.tolist() == [[False, True, True], [True, True, True], [True, False, True]]
    kinks, active = segments(torch.zeros(2), torch.tensor([1.0, -1.0]))  # no kink: one segment
    assert kinks.numel() == 0 and active.tolist() == [[True, False]]


def test_contiguous_start():
    assert contiguous_start(torch.arange(5, 12)) == 5
    assert contiguous_start(torch.arange(5.0, 12.0)) == 5
    assert contiguous_start(torch.arange(0, 14, 2)) is None  # a stride
    assert contiguous_start(torch.arange(6).view(2, 3)) is None  # per-batch positions
    assert contiguous_start(torch.arange(7) + 0.5) is None  # not integers
    assert contiguous_start(torch.arange(0)) is None


def layers(num_kv_heads: int = 2, causal: bool = True, dtype=torch.float32, tile_size: int = 8):
    enc = fire(dtype)
    options = dict(num_kv_heads=num_kv_heads, causal=causal, encoding=enc)
    reference = pet.MultiHeadAttention(64, 4, backend="sdpa", **options).to(dtype)
    tiled = pet.MultiHeadAttention(64, 4, backend="tiled", query_block_size=tile_size, **options).to(dtype)
    tiled.load_state_dict(reference.state_dict())
    return reference, tiled


@pytest.mark.parametrize("causal", [True, False])
def test_tiled_backend_uses_the_kernel_and_equals_dense(causal, monkeypatch):
    """The tiled backend reads FIRE's bias from the kernel (the pair-by-pair function is never evaluated) and its
    gradients from the statistics; outputs and every gradient equal dense SDPA (float64, 1e-10; GQA 4 on 2)."""
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)
    reference, tiled = layers(causal=causal, dtype=torch.float64)
    calls = count_calls(monkeypatch, FireTileBias)
    real_folded = type(reference.encoding)._folded_function

    def no_pairwise(*args):
        function = real_folded(*args)

        def refuse(*index):  # holds the real function: the tiled backend finds FIRE's parameters through it
            raise AssertionError(f"FIRE's pair-by-pair bias ({function.__qualname__}) evaluated on the tiles")
        refuse.tile_bias = function.tile_bias
        return refuse

    monkeypatch.setattr(type(tiled.encoding), "_folded_function", no_pairwise)
    x = torch.randn(2, 29, 64, dtype=torch.float64)
    tiled_grads = outputs_and_gradients_of(tiled, x)
    monkeypatch.undo()
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)
    reference_grads = outputs_and_gradients_of(reference, x)
    for name, want in reference_grads.items():
        torch.testing.assert_close(tiled_grads[name], want, rtol=1e-10, atol=1e-10,
                                   msg=lambda m, name=name: f"{name}: {m}")
    assert calls["bias"] > 0 and calls["statistics"] > 0


def assert_same(reference, tiled, x, tol=1e-5, **kwargs):
    want, got = outputs_and_gradients_of(reference, x, **kwargs), outputs_and_gradients_of(tiled, x, **kwargs)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=tol, atol=tol, msg=name)


def test_without_the_kernel_the_pairwise_bias_still_equals_dense(monkeypatch):
    """Where the kernel cannot be built (the extension is ``None``), FIRE's tiles fall back to its pair-by-pair
    bias, equal to dense SDPA (float32, 1e-5)."""
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)
    monkeypatch.setattr(bias_module, "fire_tiles_extension", lambda: None)
    reference, tiled = layers()
    assert tiled.encoding.bias_function(torch.zeros(1, 4, 5, 16), None, torch.arange(5), torch.arange(5)).tile_bias(
        8, 8) is None
    assert_same(reference, tiled, torch.randn(2, 21, 64))


def test_not_contiguous_positions_use_the_pairwise_bias(monkeypatch):
    """Positions with a stride (or per batch row) are not what the kernel reads: no tile kernel, and the tiled
    backend still equals dense SDPA."""
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)
    reference, tiled = layers()
    positions = torch.arange(0, 42, 2)
    function = tiled.encoding.bias_function(torch.zeros(1, 4, 21, 16), None, positions, positions)
    assert function.tile_bias(24, 24) is None
    assert_same(reference, tiled, torch.randn(2, 21, 64), q_pos=positions)


def test_no_kernel_off_the_cpu():
    """The kernel is CPU code: tensors on another device (here ``meta``) get ``None``, the pair-by-pair bias."""
    enc = fire(torch.float32)
    positions = torch.arange(8, device="meta")
    assert enc.tile_bias(torch.zeros(1, 4, 8, 16, device="meta"), positions, positions, 8, 8) is None


def test_the_extension_failing_to_build_warns(monkeypatch):
    """A build failure is a warning naming the fallback, and ``None``."""
    from torch.utils import cpp_extension

    def fail(**kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp_extension, "load", fail)
    fire_tiles.extension.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="pair by pair"):
            assert fire_tiles.extension() is None
    finally:
        fire_tiles.extension.cache_clear()
