"""CoPE on the tiled backend (pe_toolkit.nn.tiled_cope): equals dense SDPA in outputs and every gradient."""

from __future__ import annotations

import pytest
import tiled_equality
import torch
from tiled_equality import compiled_equals_eager

import pe_toolkit as pet
from pe_toolkit.encoders.contextual import cope_positions, position_visibility
from pe_toolkit.nn import tiled_attention
from pe_toolkit.nn.masks import AttentionMask
from pe_toolkit.nn.tiled_cope import tiled_cope


@pytest.fixture(autouse=True)
def eager_tiles(monkeypatch):
    """The tile steps uncompiled (``test_compiled_tiles_equal_eager`` compiles them)."""
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)


def pair(*, npos_max: int, window: int | None = None, tile: int = 4, dtype=torch.float32):
    """The dense reference and the tiled layer: GQA (4 query heads on 2 key heads), a random (non-zero) ``E``."""
    enc = pet.get_encoder("cope", 32, 4, npos_max=npos_max).to(dtype)
    with torch.no_grad():  # E starts at zero: the bias would be 0 and its gradient untested
        enc.pos_emb.normal_()
    options = dict(num_kv_heads=2, causal=True, encoding=enc, window=window)
    reference = pet.MultiHeadAttention(32, 4, backend="sdpa", **options).to(dtype)
    tiled = pet.MultiHeadAttention(32, 4, backend="tiled", query_block_size=tile, **options).to(dtype)
    tiled.load_state_dict(reference.state_dict())
    return reference, tiled


def assert_same(reference, tiled, x, rows=slice(None), tol=1e-5, **kwargs):
    """:func:`tiled_equality.assert_same`, and the table ``E``'s gradient is not zero (so it was compared)."""
    grads = tiled_equality.assert_same(reference, tiled, x, rows, tol, **kwargs)
    assert grads["encoding.pos_emb"].abs().sum() > 0


def largest_position(layer, x, **kwargs) -> float:
    """The largest unclamped contextual position of the layer's first head (``visible`` = the causal mask)."""
    with torch.no_grad():
        q = layer.q_proj(x).view(x.shape[0], x.shape[1], 4, 8).transpose(1, 2)
        k = layer.k_proj(x).view(x.shape[0], x.shape[1], 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
        pos = torch.arange(x.shape[1])
        return cope_positions(q, k, position_visibility(pos, pos)).max().item()


CASES = ["causal", "packed", "padded", "window", "batch_positions"]


@pytest.mark.parametrize("npos_max", [4, 64], ids=["clamped", "unclamped"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(("length", "tile"), [(13, 4), (37, 16)])
def test_tiled_cope_equals_dense(case, npos_max, length, tile):
    """float32, 1e-5: lengths not a multiple of the tile (several key tiles per query tile, so the carried gate
    sums are used), positions clamped (npos_max 4 < the largest position) and not (64 > the length)."""
    torch.manual_seed(0)
    reference, tiled = pair(npos_max=npos_max, window=5 if case == "window" else None, tile=tile)
    x = torch.randn(2, length, 32)
    top = largest_position(reference, x)
    assert (top > npos_max - 1) == (npos_max == 4), top  # the case is what its name says
    kwargs, rows = {}, slice(None)
    if case == "packed":
        cut = length // 3
        kwargs["document_ids"] = torch.tensor([[0] * cut + [1] * (length - 2 * cut) + [2] * cut,
                                               [5] * (length - cut - 1) + [3] + [5] * cut])
    if case == "padded":  # left padding: row 1's first 3 queries see no key (dense and tiled differ there only)
        padding = torch.ones(2, length, dtype=torch.bool)
        padding[1, :3] = False
        kwargs["key_padding_mask"], rows = padding, slice(3, None)
    if case == "batch_positions":  # (B, L) positions; row 1 repeats positions, so k_pos <= q_pos is not causal
        kwargs["q_pos"] = torch.stack([torch.arange(length), torch.arange(length) // 2 * 3])
    assert_same(reference, tiled, x, rows, **kwargs)


@pytest.mark.parametrize("npos_max", [4, 64], ids=["clamped", "unclamped"])
def test_clamped_tiles_skip_the_gates(npos_max, monkeypatch):
    """Key tiles before which every row's position already reached npos_max - 1 run as a plain biased tile
    (bias z[npos_max - 1]; forward and backward); with positions below the clamp none does."""
    calls = {"forward": 0, "backward": 0}

    def counted(name):
        original = getattr(tiled_attention, f"_{name}_tile")

        def step(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)
        monkeypatch.setattr(tiled_attention, f"_{name}_tile", step)

    counted("forward")
    counted("backward")
    torch.manual_seed(5)
    reference, tiled = pair(npos_max=npos_max, tile=8)
    assert_same(reference, tiled, torch.randn(2, 40, 32))
    if npos_max == 4:
        assert calls["forward"] == calls["backward"] > 0
    else:
        assert calls == {"forward": 0, "backward": 0}


def test_key_positions_are_read_per_tile():
    """Positions that are not the causal order (row 1 runs backwards): a key counts iff ``k_pos <= q_pos``,
    evaluated per tile, also in tiles the mask needs no evaluation on."""
    torch.manual_seed(1)
    reference, tiled = pair(npos_max=8, tile=4)
    x = torch.randn(2, 16, 32)
    q_pos = torch.stack([torch.arange(16), torch.arange(16).flip(0)])
    assert_same(reference, tiled, x, q_pos=q_pos)


def test_every_tile_size_gives_the_same_result():
    torch.manual_seed(2)
    reference, _ = pair(npos_max=6, dtype=torch.float64)
    x = torch.randn(2, 13, 32, dtype=torch.float64)
    for tile in (1, 3, 8, 13, 32):
        _, tiled = pair(npos_max=6, tile=tile, dtype=torch.float64)
        tiled.load_state_dict(reference.state_dict())
        assert_same(reference, tiled, x, tol=1e-12)


def test_kv_cache_steps_equal_the_full_sequence():
    """Queries after cached keys (``offset > 0``): the cached keys count by their positions."""
    torch.manual_seed(3)
    reference, tiled = pair(npos_max=5, tile=4)
    x = torch.randn(1, 11, 32)
    with torch.no_grad():
        cache = pet.KVCache()
        steps = torch.cat([tiled(x[:, :6], cache=cache), tiled(x[:, 6:9], cache=cache), tiled(x[:, 9:], cache=cache)],
                          dim=1)
        torch.testing.assert_close(steps, reference(x), rtol=1e-5, atol=1e-5)


def test_gradcheck_float64():
    """Every input (q, k, v, E) in float64, eager: GQA, 3 x 3 tiles over 7 tokens, clamped and interpolated
    positions."""
    torch.manual_seed(4)
    q = torch.randn(1, 4, 7, 4, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 7, 4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 7, 4, dtype=torch.float64, requires_grad=True)
    emb = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(7)
    mask = AttentionMask(7, 7, causal=True)
    assert torch.autograd.gradcheck(lambda *t: tiled_cope(*t[:3], pos, pos, t[3], mask, tile=3), (q, k, v, emb))


def test_half_precision_is_computed_in_float32():
    """bfloat16 inputs: the float32 computation of the same values, cast back (the dense path's convention)."""
    torch.manual_seed(7)
    q, k, v = (torch.randn(1, 4, 11, 8).bfloat16() for _ in range(3))
    emb = torch.randn(5, 8).bfloat16()
    pos, mask = torch.arange(11), AttentionMask(11, 11, causal=True)
    out = tiled_cope(q, k, v, pos, pos, emb, mask, tile=4)
    assert out.dtype == torch.bfloat16
    want = tiled_cope(q.float(), k.float(), v.float(), pos, pos, emb.float(), mask, tile=4).bfloat16()
    assert torch.equal(out, want)


def test_backward_saves_no_score_tile():
    """Saved: q, k, v, E, positions, output, log-sum-exp and one (B, H_kv, rows) carry per tile pair, L^2 / tile."""
    largest = 0

    def pack(t):
        nonlocal largest
        largest = max(largest, t.numel())
        return t

    _, tiled = pair(npos_max=8, tile=32)
    x = torch.randn(1, 512, 32, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = tiled(x)
    out.sum().backward()
    pairs = 16 * 17 // 2  # causal tile pairs of 16 query tiles
    assert largest <= max(512 * 32 + 32 * 32, pairs * 2 * 2 * 32)  # activations / weights, or the carries
    assert largest < 4 * 512 * 512 // 8  # far below one (B, H, L, L) score tensor
    assert tiled.encoding.pos_emb.grad.abs().sum() > 0


@pytest.mark.slow
def test_compiled_tiles_equal_eager(monkeypatch):
    """The tile steps through torch.compile (inductor) equal the eager ones: GQA, causal, clamped positions,
    3 x 3 tiles (CoPE's forward and backward steps, masked and unmasked, and the clamped tiles' plain steps)."""
    torch.manual_seed(6)
    _, tiled = pair(npos_max=4, tile=16)
    x = torch.randn(1, 48, 32)
    assert compiled_equals_eager(tiled, x, monkeypatch)["encoding.pos_emb"].abs().sum() > 0
