"""BAM-SSMax on tiles (pe_toolkit.encoders.bayesian.SSMaxTileBias): BAM's prior by diagonals times the rows' factor."""

from __future__ import annotations

import pytest
import torch
from tile_kernels import count_calls, outputs_and_gradients_of

import pe_toolkit as pet
from pe_toolkit.encoders.bayesian import BAMSSMax, SSMaxTileBias
from pe_toolkit.nn import tiled_attention


def bam_ssmax(*, causal: bool = True, dtype=torch.float64, seed: int = 0):
    torch.manual_seed(seed)
    enc = pet.get_encoder("bam_ssmax", 32, 4, causal=causal).to(dtype)
    with torch.no_grad():  # off the initial values: every parameter moves the bias
        for p in enc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return enc


def dense(enc, q_pos, k_pos, num_keys, dtype=torch.float64):
    """``score`` on every (head, query, key): the pointwise definition the tiles must equal."""
    heads = torch.arange(enc.num_heads).view(-1, 1, 1)
    return enc.score(heads, q_pos.view(1, -1, 1), k_pos.view(1, 1, -1), dtype, num_keys)


# (query index start, key index start, rows, columns): below, across and above the diagonal, a ragged tile
TILES = [(64, 0, 32, 32), (32, 32, 32, 32), (0, 48, 32, 32), (37, 11, 19, 27)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("starts", [(0, 0), (40, 0), (7, 3)])
def test_tile_bias_equals_score(causal, starts):
    """Every tile's bias equals ``score`` at the tile's positions (queries at ``q_start + i``, keys at ``k_start + j``,
    shifted as when decoding with a cache; float64 1e-12)."""
    enc = bam_ssmax(causal=causal)
    q_start, k_start = starts
    tiles = SSMaxTileBias(enc, q_start, k_start, 96, 96, 90, torch.float64)
    for i0, j0, rows, cols in TILES:
        want = dense(enc, q_start + i0 + torch.arange(rows), k_start + j0 + torch.arange(cols), 90)
        torch.testing.assert_close(tiles.bias(i0, j0, rows, cols), want.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False])
def test_statistics_give_the_gradient_of_every_parameter(causal):
    """``gradients(sum of statistics)`` equals autograd through ``score`` of ``sum dS * bias`` over several tiles, for
    every parameter (float64, 1e-10), and every parameter gets a non-zero gradient."""
    enc = bam_ssmax(causal=causal, seed=1)
    tiles = SSMaxTileBias(enc, 5, 2, 96, 96, 90, torch.float64)
    leaves = list(enc.parameters())
    loss, statistics = 0.0, 0.0
    for i0, j0, rows, cols in TILES:
        ds = torch.randn(4, rows, cols, dtype=torch.float64)
        loss = loss + (dense(enc, 5 + i0 + torch.arange(rows), 2 + j0 + torch.arange(cols), 90) * ds).sum()
        statistics = statistics + tiles.statistics(i0, j0, ds)
    want = torch.autograd.grad(loss, leaves)
    got = tiles.gradients(statistics, leaves)
    for (name, _), g, w in zip(enc.named_parameters(), got, want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10, msg=name)
        assert float(w.abs().sum()) > 0, name


@pytest.mark.parametrize(("causal", "kv_heads"), [(True, 4), (True, 2), (False, 4)])
def test_tiled_backend_reads_the_tiles_and_equals_dense(causal, kv_heads, monkeypatch):
    """The tiled backend takes the bias from the tiles (``score`` pair by pair is never evaluated on them) and its
    gradients from the statistics; outputs and every gradient equal dense SDPA (float64, 1e-10)."""
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)
    enc = bam_ssmax(causal=causal)
    options = dict(num_kv_heads=kv_heads, causal=causal, encoding=enc)
    reference = pet.MultiHeadAttention(32, 4, backend="sdpa", **options).double()
    tiled = pet.MultiHeadAttention(32, 4, backend="tiled", query_block_size=8, **options).double()
    tiled.load_state_dict(reference.state_dict())
    x = torch.randn(2, 29, 32, dtype=torch.float64)
    want = outputs_and_gradients_of(reference, x)
    calls = count_calls(monkeypatch, SSMaxTileBias)

    def refuse(*args):
        raise AssertionError("BAM-SSMax's score evaluated pair by pair on the tiles")

    monkeypatch.setattr(BAMSSMax, "score", refuse)
    got = outputs_and_gradients_of(tiled, x)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-10, atol=1e-10, msg=lambda m, name=name: f"{name}: {m}")
    assert calls["bias"] > 0 and calls["statistics"] > 0


def test_not_contiguous_positions_use_the_pairwise_bias(monkeypatch):
    """Positions with a stride are not what the tiles read: no tile bias, and the tiled backend still equals dense."""
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)
    enc = bam_ssmax()
    positions = torch.arange(0, 42, 2)
    assert enc.bias_function(torch.zeros(1, 4, 21, 8), None, positions, positions).tile_bias(24, 24) is None
    reference = pet.MultiHeadAttention(32, 4, causal=True, encoding=enc, backend="sdpa").double()
    tiled = pet.MultiHeadAttention(32, 4, causal=True, encoding=enc, backend="tiled", query_block_size=8).double()
    tiled.load_state_dict(reference.state_dict())
    x = torch.randn(2, 21, 32, dtype=torch.float64)
    want = outputs_and_gradients_of(reference, x, q_pos=positions)
    got = outputs_and_gradients_of(tiled, x, q_pos=positions)
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-10, atol=1e-10, msg=name)
