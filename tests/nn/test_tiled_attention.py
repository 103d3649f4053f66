"""The tiled backend (pe_toolkit.nn.tiled_attention): equals dense SDPA in outputs and every gradient."""

from __future__ import annotations

import pytest
import torch
from tiled_equality import assert_same, compiled_equals_eager

import pe_toolkit as pet
from pe_toolkit.nn import backends, tiled_attention
from pe_toolkit.nn.backends import choose_backend
from pe_toolkit.nn.masks import AttentionMask
from pe_toolkit.nn.tiled_attention import bias_inputs

SEQUENCE = pet.list_encoders(domain="sequence")
# what the tiled backend runs: no bias (rotate / nothing) or a pointwise one; embed-only encoders never reach attention
IN_ATTENTION = [n for n in SEQUENCE if n == "nope" or pet.get_encoder(n, 8, 2, **pet.encoder_info(n).example_options)
                .acts_in_attention]
TILED = [n for n in IN_ATTENTION if n != "cope"]  # cope: tests/nn/test_tiled_cope.py
DOMAIN_POINTWISE = ["music_relative", "time_interval", "edge_aware_graph"]


@pytest.fixture(autouse=True)
def eager_tiles(monkeypatch):
    """The tile steps uncompiled: every encoder's bias function checked without a compile per encoder
    (the compiled steps run the same functions; ``test_compiled_tiles_equal_eager`` compiles them)."""
    monkeypatch.setattr(tiled_attention, "TILED_COMPILE", False)


def encoder(name: str, *, causal: bool = True, dtype=torch.float32):
    enc = pet.get_encoder(name, 32, 4, causal=causal, **pet.encoder_info(name).example_options).to(dtype)
    with torch.no_grad():  # off the initial values (zero-initialised tables would hide their gradients)
        for p in enc.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return enc


def pair(name: str, *, causal: bool = True, window: int | None = None, tile: int = 4, dtype=torch.float32):
    enc = encoder(name, causal=causal, dtype=dtype)
    options = dict(num_kv_heads=2, causal=causal, encoding=enc, window=window)
    reference = pet.MultiHeadAttention(32, 4, backend="sdpa", **options).to(dtype)
    tiled = pet.MultiHeadAttention(32, 4, backend="tiled", query_block_size=tile, **options).to(dtype)
    tiled.load_state_dict(reference.state_dict())
    return reference, tiled


MASKS = ["causal", "window", "packed", "padded", "bidirectional"]


@pytest.mark.parametrize("name", TILED)
@pytest.mark.parametrize("case", MASKS)
def test_tiled_outputs_and_gradients_equal_dense(name, case):
    """float32, 1e-5, GQA (4 query heads on 2 key heads), tiles of 4 over 13 tokens (a ragged last tile):
    causal, sliding window, packed documents, left padding, bidirectional with right padding."""
    causal = case != "bidirectional"
    enc_info = pet.encoder_info(name)
    if case == "bidirectional" and encoder(name, causal=False).causal_only:
        pytest.skip(f"{name} is causal only")
    if case == "window" and not encoder(name).supports_window:
        pytest.skip(f"{name} is not exact under a sliding window")
    reference, tiled = pair(name, causal=causal, window=5 if case == "window" else None)
    x = torch.randn(2, 13, 32)
    kwargs, rows = {}, slice(None)
    if case == "packed":
        kwargs["document_ids"] = torch.tensor([[0] * 4 + [1] * 6 + [2] * 3, [5] * 7 + [3] + [5] * 5])
    if case == "padded":  # left padding: row 1's first 3 queries see no key (dense and tiled differ there only)
        padding = torch.ones(2, 13, dtype=torch.bool)
        padding[1, :3] = False
        kwargs["key_padding_mask"], rows = padding, slice(3, None)
    if case == "bidirectional":
        padding = torch.ones(2, 13, dtype=torch.bool)
        padding[1, 9:] = False
        kwargs["key_padding_mask"] = padding
    grads = assert_same(reference, tiled, x, rows, **kwargs)
    acts = {"rotate", "bias"} & set(enc_info.hooks)
    for n, p in reference.encoding.named_parameters():  # learnable biases learn through the tiles
        if p.requires_grad and acts:
            assert grads[f"encoding.{n}"].abs().sum() > 0, n


@pytest.mark.parametrize("name", DOMAIN_POINTWISE)
def test_domain_biases_on_tiles(name):
    """Per-query tables built from q (music, recsys) and per-pair edge lookups (multirobot) on tiles."""
    reference, tiled = pair(name, tile=3)
    pos = reference.encoding.example_positions(9)
    pos = pos.float() if name == "edge_aware_graph" else pos
    assert_same(reference, tiled, torch.randn(2, 9, 32), q_pos=pos)


@pytest.mark.parametrize("case", ["causal", "window"])
def test_fire_on_tiles_folds_the_units_linear_over_the_visited_pairs(case, monkeypatch):
    """Without FIRE's own tile kernel (positions not contiguous, or no compiler; forced off here), its bias on
    the tiles is exact on the pairs of the tiles visited only (``within``): a unit whose kink lies past the causal
    inputs (x <= 1) but inside the full grid's (x up to psi(12) / psi(4) = 1.59) is folded into the line; outputs
    and every gradient still equal dense SDPA, which evaluates the full MLP."""
    reference, tiled = pair("fire", window=5 if case == "window" else None)
    fire = reference.encoding
    monkeypatch.setattr(type(fire), "tile_bias", lambda *args: None)
    fire.threshold.data.fill_(4.0)
    with torch.no_grad():  # kinks at 0.5 (kept) and 1.3, 1.45 (past every causal input, inside the grid's)
        fire.mlp[0].weight[:3, 0] = torch.tensor([2.0, -1.0, 1.0])
        fire.mlp[0].bias[:3] = torch.tensor([-1.0, 1.3, -1.45])
    tiled.load_state_dict(reference.state_dict())
    positions = torch.arange(13)
    grid_units = fire.kinked_units(positions, positions)[1]
    seen = []
    real_within = type(fire)._folded_function

    def spy(self, q, k, q_pos, k_pos, blocks):  # the units the tiled kernel's function keeps
        function = real_within(self, q, k, q_pos, k_pos, blocks)
        if blocks is not None:
            seen.append(self.kinked_units(q_pos, k_pos, blocks)[1])
        return function

    monkeypatch.setattr(type(fire), "_folded_function", spy)
    grads = assert_same(reference, tiled, torch.randn(2, 13, 32))
    assert {1, 2} <= set(grid_units.tolist()) and seen and all(
        1 not in kept.tolist() and 2 not in kept.tolist() and 0 in kept.tolist() for kept in seen)
    for n in ("mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "c", "threshold"):
        assert grads[f"encoding.{n}"].abs().sum() > 0, n


@pytest.mark.parametrize("name", ["alibi", "t5", "fire"])
def test_packed_row_equals_each_document_alone(name):
    _, tiled = pair(name)
    x = torch.randn(1, 13, 32)
    document_ids = torch.tensor([[0] * 4 + [1] * 6 + [2] * 3])
    with torch.no_grad():
        packed = tiled(x, document_ids=document_ids)
        for start, stop in ((0, 4), (4, 10), (10, 13)):
            torch.testing.assert_close(packed[:, start:stop], tiled(x[:, start:stop]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tile", [1, 2, 5, 8, 13, 64])
def test_every_tile_size_gives_the_same_result(tile):
    reference, tiled = pair("kerple", tile=tile, dtype=torch.float64)
    assert_same(reference, tiled, torch.randn(2, 13, 32, dtype=torch.float64), tol=1e-12)


def test_rows_without_a_visible_key_give_zero():
    """A padding query that sees no key: output 0 and no gradient (FlexAttention's convention)."""
    q = k = v = torch.randn(1, 2, 4, 8, requires_grad=True)
    padding = torch.tensor([[False, True, True, True]])
    mask = AttentionMask(4, 4, causal=True, key_padding_mask=padding)
    out = tiled_attention.tiled_attention(q, k, v, None, mask, tile=2)
    assert torch.equal(out[:, :, 0], torch.zeros(1, 2, 8)) and torch.isfinite(out).all()
    (grad,) = torch.autograd.grad(out[:, :, 0].sum(), [q])
    assert torch.equal(grad, torch.zeros_like(grad))


def test_only_the_ragged_key_tile_masks_its_tile_padding():
    """With nothing else to mask (bidirectional, no padding), a full key tile is not masked at all and the ragged
    last one masks exactly its tile padding: outputs and gradients equal SDPA's."""
    q, k, v = (torch.randn(1, 2, 13, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = AttentionMask(13, 13)
    plan = tiled_attention._plan(q, k, mask, None, 4, compiled=False)
    assert [plan.padding_of(kt) for kt in range(3)] == [None, None, None]
    assert plan.padding_of(3).tolist() == [True, False, False, False]
    out = tiled_attention.tiled_attention(q, k, v, None, mask, tile=4, compiled=False)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, reference)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    expected = torch.autograd.grad(reference.square().sum(), (q, k, v))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want)


def test_backward_saves_no_score_tile():
    """Saved for backward: q, k, v, the output and the log-sum-exp; nothing grows as L x L."""
    largest = 0

    def pack(t):
        nonlocal largest
        largest = max(largest, t.numel())
        return t

    layer = pet.MultiHeadAttention(32, 4, causal=True, encoding=pet.get_encoder("t5", 32, 4), backend="tiled",
                                   query_block_size=32)
    x = torch.randn(1, 512, 32, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x)
    out.sum().backward()
    assert largest <= 512 * 32 + 32 * 32  # the (B, L, dim) activations and the projection weights
    assert layer.encoding.relative_attention_bias.weight.grad.abs().sum() > 0


def test_hidden_tiles_are_skipped():
    """Causal: only tiles on or below the diagonal; a window: only the band; documents: only same-document tiles."""
    q = torch.zeros(1, 1, 16, 4)

    def pairs(mask):
        plan = tiled_attention._plan(q, q, mask, None, 4, compiled=False)
        return {(qt, kt) for qt, keys in plan.pairs for kt, _ in keys}

    assert pairs(AttentionMask(16, 16)) == {(a, b) for a in range(4) for b in range(4)}
    assert pairs(AttentionMask(16, 16, causal=True)) == {(a, b) for a in range(4) for b in range(a + 1)}
    assert pairs(AttentionMask(16, 16, causal=True, window=4)) == {(0, 0), (1, 0), (1, 1), (2, 1), (2, 2),
                                                                     (3, 2), (3, 3)}
    docs = torch.tensor([[0] * 8 + [1] * 8])
    assert pairs(AttentionMask(16, 16, causal=True, q_documents=docs, k_documents=docs)) == {
        (0, 0), (1, 0), (1, 1), (2, 2), (3, 2), (3, 3)}
    padding = torch.tensor([[False] * 4 + [True] * 12])
    assert (1, 0) not in pairs(AttentionMask(16, 16, causal=True, key_padding_mask=padding))
    # interior tiles of a causal mask skip the mask evaluation; diagonal ones do not
    plan = tiled_attention._plan(q, q, AttentionMask(16, 16, causal=True), None, 4, compiled=False)
    assert dict(plan.pairs[3][1]) == {0: False, 1: False, 2: False, 3: True}


def test_bias_inputs_are_the_tensors_the_bias_reads():
    q = torch.zeros(1, 4, 6, 8)
    pos = torch.arange(6)
    t5, fire, alibi = (pet.get_encoder(n, 32, 4) for n in ("t5", "fire", "alibi"))
    # t5 (integer positions): one tabulated (H, distances) tensor built from its embedding, not the embedding itself
    (table,) = bias_inputs(t5.bias_function(q, q, pos, pos))
    assert table.shape == (4, 11) and table.grad_fn is not None
    # fire evaluates its MLP per pair: its parameters
    assert {id(p) for p in bias_inputs(fire.bias_function(q, q, pos, pos))} == {id(p) for p in fire.parameters()}
    assert bias_inputs(alibi.bias_function(q, q, pos, pos)) == []
    assert bias_inputs(None) == []


@pytest.mark.parametrize("groups", [1, 2])
def test_diagonal_sums_are_the_sums_along_each_diagonal(groups):
    """Entry c of head h: the sum of ds[h, i, j] over the pairs with j - i = c - (T - 1); rows fold G query heads."""
    kv_heads, t, keys = 3, 5, 5
    ds = torch.randn(kv_heads, t * groups, keys, dtype=torch.float64)
    got = tiled_attention.diagonal_sums(ds, groups)
    want = torch.zeros(kv_heads * groups, t + keys - 1, dtype=torch.float64)
    for kv in range(kv_heads):
        for row in range(t * groups):
            i, g = divmod(row, groups)
            for j in range(keys):
                want[kv * groups + g, j - i + t - 1] += ds[kv, row, j]
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_flush_subnormal_zeroes_exactly_the_values_below_the_smallest_normal(dtype):
    tiny = torch.finfo(dtype).tiny
    x = torch.tensor([0.0, tiny, -tiny, tiny / 2, -tiny / 4, tiny * 1.5, 1.0, -3.0, float("inf"), float("-inf")],
                     dtype=dtype)
    want = torch.tensor([0.0, tiny, -tiny, 0.0, 0.0, tiny * 1.5, 1.0, -3.0, float("inf"), float("-inf")], dtype=dtype)
    assert torch.equal(tiled_attention.flush_subnormal(x), want)
    assert tiled_attention.flush_subnormal(torch.tensor([float("nan")], dtype=dtype)).isnan().all()


def test_a_steep_bias_leaves_no_subnormal_in_the_tile_steps():
    """A bias that decays fast (ALiBi's steepest slope at long distances) underflows most probabilities far from the
    query into subnormals, which x86 matmuls process many times slower: the steps flush them, and the tile's
    gradients differ from the unflushed computation only below float32's smallest normal."""
    torch.manual_seed(0)
    t, d, tiny = 64, 16, torch.finfo(torch.float32).tiny
    q, k, v, dout = (torch.randn(1, 1, t, d) for _ in range(4))
    i = j = torch.arange(t)
    bias = -2.0 * (i[:, None] - j[None, :]).abs().float().view(1, 1, t, t)  # exp(-2 |i - j|): subnormal past ~44
    s = q @ k.transpose(-1, -2) * d**-0.5 + bias
    lse = s.logsumexp(-1)
    delta = (dout * (torch.softmax(s, -1) @ v)).sum(-1)
    unflushed = torch.exp(s - lse.unsqueeze(-1))
    assert ((unflushed > 0) & (unflushed < tiny)).sum() > 100  # the case has subnormals to flush
    m, l, acc = tiled_attention.online_softmax_step(s, v, torch.full((1, 1, t), float("-inf")), torch.zeros(1, 1, t),
                                                    torch.zeros(1, 1, t, d))
    dq, dk, dv, ds = tiled_attention._backward_tile(q, k, v, dout, lse, delta, i, j, None, None, None, bias,
                                                    d**-0.5, 1)
    assert not ((ds != 0) & (ds.abs() < tiny)).any()
    dp_centred = (dout @ v.transpose(-1, -2)) - delta.unsqueeze(-1)
    ds_want = unflushed * dp_centred
    # a flushed p (< tiny) drops p * (dp - delta); a flushed ds drops less than tiny
    torch.testing.assert_close(ds, ds_want, rtol=0, atol=tiny * max(1.0, dp_centred.abs().max().item()))
    torch.testing.assert_close(dq, ds_want @ k * d**-0.5, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(dk, ds_want.transpose(-1, -2) @ q * d**-0.5, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(dv, unflushed.transpose(-1, -2) @ dout, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(acc / l.unsqueeze(-1), torch.softmax(s, -1) @ v, rtol=1e-6, atol=1e-7)


def test_relative_tables_are_read_by_diagonals_only_for_contiguous_positions():
    """A shift-invariant bias table with contiguous positions (the same in every row, also shifted as under a KV
    cache) is read by tile diagonals, and a learnable one (t5, kerple, bam) gets its gradient by diagonal sums;
    restarted (packed) or scattered positions and pairwise biases (fire) evaluate bias_fn per pair and push
    each tile through autograd. Both paths equal dense SDPA (the tests above)."""
    q = torch.zeros(2, 4, 6, 8)

    def offset(name, q_pos, k_pos):
        fn = encoder(name).bias_function(q, q, q_pos, k_pos)
        found = tiled_attention._relative(fn, bias_inputs(fn), 4)
        return None if found is None else found[1]

    pos = torch.arange(6)
    assert offset("t5", pos, pos) == 5  # table index j - i + 5 over distances -5..5
    assert offset("alibi", pos, pos) == 5  # a fixed table
    assert offset("kerple", pos + 7, pos + 3) == 5  # k - q - lo = (j + 3) - (i + 7) - (3 - 12)
    assert offset("kerple", torch.arange(2) + 4, pos) == 1  # the last 2 queries (a KV cache): (j - (i + 4)) - (0 - 5)
    assert offset("bam", pos.expand(2, 6), pos.expand(2, 6)) == 5
    assert offset("t5", torch.tensor([[0, 1, 2, 0, 1, 2], [0, 1, 2, 3, 4, 5]]), pos.expand(2, 6)) is None
    assert offset("t5", torch.tensor([0, 1, 2, 4, 5, 6]), torch.tensor([0, 1, 2, 4, 5, 6])) is None
    assert offset("fire", pos, pos) is None  # a pairwise MLP
    # a shifted query window (KV cache): contiguous, taken; the gradient through it equals the dense one
    reference, tiled = pair("t5")
    assert_same(reference, tiled, torch.randn(1, 13, 32), q_pos=torch.arange(13) + 4, k_pos=torch.arange(13) + 4)


@pytest.mark.parametrize("name", ["t5", "sandwich"])
def test_a_tile_read_by_diagonals_equals_the_bias_function(name):
    """Every tile pair's bias from the table's diagonals equals bias_fn on the tile's indices (GQA: 4 heads on 2)."""
    q, k, pos = torch.zeros(1, 4, 10, 8), torch.zeros(1, 2, 10, 8), torch.arange(10) + 3
    fn = encoder(name).bias_function(q, q, pos, pos)
    plan = tiled_attention._plan(q, k, AttentionMask(10, 10, causal=True), fn, 4, compiled=False)
    assert plan.relative_table is not None
    rows = tiled_attention.to_rows(q, len(plan.q_index), plan.groups)
    for qt in range(3):
        for kt in range(3):
            i, j = plan.q_index[qt * 4:(qt + 1) * 4], plan.k_index[kt * 4:(kt + 1) * 4]
            b, h, ii, jj = tiled_attention._indices(rows[:, :, qt * 8:(qt + 1) * 8], i, j, plan.groups)
            want = fn(b, h, ii, jj)[0]
            got = tiled_attention._toeplitz(plan.diagonals_of(qt, kt), 8, 4, plan.groups)
            real_q, real_k = torch.arange(qt * 4, qt * 4 + 4) < 10, torch.arange(kt * 4, kt * 4 + 4) < 10
            real = real_q.repeat_interleave(2)[:, None] & real_k[None, :]  # tile padding (clamped indices) aside
            torch.testing.assert_close(got[:, real], want[:, real], rtol=0, atol=0)


@pytest.mark.slow
def test_compiled_tiles_equal_eager(monkeypatch):
    """The tile steps through torch.compile (inductor) equal the eager ones: t5 (a learnable table, so the
    compiled summed backward step runs, 2 x 2 tiles) and t5 on packed documents (restarted positions: the
    compiled bias evaluation and its backward per tile), GQA, causal. One encoder and one tile shape (each
    graph is a C++ compile of 10-60 s on this CPU)."""
    reference, tiled = pair("t5", tile=16)
    x = torch.randn(1, 32, 32)
    grads = compiled_equals_eager(tiled, x, monkeypatch)
    assert grads["encoding.relative_attention_bias.weight"].abs().sum() > 0
    documents = torch.tensor([[0] * 12 + [1] * 20])
    grads = compiled_equals_eager(tiled, x, monkeypatch, document_ids=documents)
    assert grads["encoding.relative_attention_bias.weight"].abs().sum() > 0


@pytest.mark.parametrize("name", ["alibi", "t5"])
def test_layer_on_tiles_compiles_in_one_graph(name):
    """torch.compile(fullgraph=True) of a layer with backend='tiled' traces the tile loop (here 3 x 3 tiles, causal,
    GQA) with ordinary autograd and equals eager in outputs and gradients (float64, aot_eager). Every encoder on one
    tile: tests/test_conformance.py."""
    torch._dynamo.reset()
    _, tiled = pair(name, dtype=torch.float64)
    x = torch.randn(2, 9, 32, dtype=torch.float64, requires_grad=True)
    compiled = torch.compile(tiled, fullgraph=True, backend="aot_eager")
    params = [p for p in tiled.parameters() if p.requires_grad]
    out = compiled(x)
    grads = torch.autograd.grad(out.square().sum(), [x, *params])
    ref = tiled(x)
    ref_grads = torch.autograd.grad(ref.square().sum(), [x, *params])
    torch._dynamo.reset()
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------------ the auto rule and errors
def test_auto_picks_tiled_for_training_a_pointwise_bias_on_the_cpu():
    """From TILED_MIN_PAIRS_CPU (2,048^2 pairs per head), training on the CPU; dense below, blocked above the budget
    for what the tiles cannot run."""
    q = torch.zeros(1, 4, 8, 16)
    trainable = q.clone().requires_grad_(True)
    pos = torch.arange(8)
    alibi, cope, rope = (pet.get_encoder(n, 64, 4) for n in ("alibi", "cope", "rope"))
    big, at, below = (AttentionMask(n, n, causal=True) for n in (8192, 2048, 2047))
    assert backends.TILED_MIN_PAIRS_CPU == 2048**2 and 4 * 8192**2 > backends.DENSE_BUDGET
    assert choose_backend(alibi, trainable, q, pos, pos, at, tile=None, dropout=0.0) == "tiled"
    assert choose_backend(alibi, trainable, q, pos, pos, big, tile=None, dropout=0.0) == "tiled"
    assert choose_backend(alibi, trainable, q, pos, pos, below, tile=None, dropout=0.0) == "sdpa"  # compile not repaid
    assert choose_backend(alibi, trainable, q, pos, pos, AttentionMask(1024, 4096, causal=False), tile=None,
                          dropout=0.0) == "tiled"  # pairs, not the length
    assert choose_backend(cope, trainable, q, pos, pos, big, tile=None, dropout=0.0) == "tiled"  # its own tiles
    assert choose_backend(cope, trainable, q, pos, pos, at, tile=None, dropout=0.0) == "tiled"
    assert choose_backend(cope, trainable, q, pos, pos, below, tile=None, dropout=0.0) == "sdpa"
    with torch.no_grad():  # CoPE has no pointwise bias for flex
        assert choose_backend(cope, trainable, q, pos, pos, big, tile=None, dropout=0.0) == "blocked"
    assert choose_backend(rope, trainable, q, pos, pos, big, tile=None, dropout=0.0) == "sdpa"  # SDPA's kernel
    assert choose_backend(alibi, trainable, q, pos, pos, at, tile=None, dropout=0.1) == "sdpa"  # no dropout
    assert choose_backend(alibi, trainable, q, pos, pos, big, tile=None, dropout=0.1) == "blocked"
    assert choose_backend(alibi, trainable, q, pos, pos, big, tile=8, dropout=0.0) == "blocked"  # a tile size given
    with torch.no_grad():  # a forward alone never pays the tile steps' compile
        assert choose_backend(alibi, trainable, q, pos, pos, big, tile=None, dropout=0.0) == "flex"
        assert choose_backend(alibi, trainable, q, pos, pos, at, tile=None, dropout=0.0) == "sdpa"
    frozen = pet.get_encoder("alibi", 64, 4)
    assert choose_backend(frozen, q, q, pos, pos, at, tile=None, dropout=0.0) == "sdpa"  # nothing needs a gradient


def test_tiled_errors():
    x = torch.randn(1, 6, 32)
    # CoPE has its own tile loop (tests/nn/test_tiled_cope.py); CAPE's bias (recsys) is not pointwise either
    cape = pet.MultiHeadAttention(32, 4, causal=True, encoding=pet.get_encoder("cape", 32, 4, max_len=16),
                                  backend="tiled")
    with pytest.raises(ValueError, match="backend 'tiled' needs a pointwise bias; 'cape' has none"):
        cape(x)
    dropping = pet.MultiHeadAttention(32, 4, causal=True, dropout=0.1, backend="tiled")
    with pytest.raises(ValueError, match="backend 'tiled' has no attention dropout"):
        dropping(x)
