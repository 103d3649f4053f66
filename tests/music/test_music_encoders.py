"""S-APE, S-RPE, NS-RPE and Music Transformer relative attention: hand-computed values, equivalences, errors."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import functional_call

import pe_toolkit as pet
import pe_toolkit.domains.music  # noqa: F401  (registers the music encoders)
from pe_toolkit.domains.music.encoders import (
    DEFAULT_BASES,
    relative_logits_gather,
    relative_logits_skew,
    structure_rpe_logits,
    structure_rpe_naive,
)
from pe_toolkit.domains.music.structure import FIELDS, LABEL_FIELDS, add_segment_fields, field_index

MUSIC_ENCODERS = ["music_relative", "ns_rpe", "s_ape", "s_rpe"]


def structure(length: int, batch: int | None = None, seed: int = 0) -> torch.Tensor:
    """Random but well-formed structure positions ``(L, F)`` / ``(B, L, F)``."""
    g = torch.Generator().manual_seed(seed)
    shape = (length,) if batch is None else (batch, length)
    labels = torch.zeros(*shape, len(LABEL_FIELDS), dtype=torch.long)
    labels[..., LABEL_FIELDS.index("bar")] = torch.arange(length) // 16
    labels[..., LABEL_FIELDS.index("beat")] = torch.arange(length) % 16
    labels[..., LABEL_FIELDS.index("phrase")] = torch.arange(length) // 7
    labels[..., LABEL_FIELDS.index("chord")] = torch.randint(0, 4, shape, generator=g).repeat_interleave(2, -1)[
        ..., :length] * 5 + 1
    labels[..., LABEL_FIELDS.index("melody")] = torch.randint(60, 72, shape, generator=g)
    return add_segment_fields(labels)


def test_registered_under_music_with_metadata():
    assert pet.list_encoders(domain="music") == MUSIC_ENCODERS
    for name in MUSIC_ENCODERS:
        info = pet.encoder_info(name)
        assert info.domain == "music" and "20" in info.reference and info.cls.__doc__
    assert pet.encoder_info("s_ape").hooks == ("embed",)
    assert pet.encoder_info("s_rpe").hooks == pet.encoder_info("ns_rpe").hooks == ("bias",)
    assert pet.encoder_info("music_relative").relative and not pet.encoder_info("s_rpe").relative


def test_s_ape_hand_computed():
    enc = pet.get_encoder("s_ape", 4, 1, structures=("melody", "phrase"))
    positions = torch.zeros(1, len(FIELDS), dtype=torch.long)
    positions[0, field_index("melody")] = 60
    positions[0, field_index("phrase")] = 2
    x = torch.zeros(1, 1, 4, dtype=torch.float64)
    out = enc.embed(x, positions)[0, 0]
    expected = []
    for k in range(2):  # pairs (sin, cos) with frequency base^(-2k/4)
        w_mel, w_phr = DEFAULT_BASES["melody"] ** (-2 * k / 4), DEFAULT_BASES["phrase"] ** (-2 * k / 4)
        expected += [math.sin(60 * w_mel) + math.sin(2 * w_phr), math.cos(60 * w_mel) + math.cos(2 * w_phr)]
    torch.testing.assert_close(out, torch.tensor(expected, dtype=torch.float64))


def test_s_ape_same_base_and_batched_positions():
    enc = pet.get_encoder("s_ape", 8, 2, structures=("melody", "chord"), same_base=10001.0)
    assert enc.bases == {"melody": 10001.0, "chord": 10001.0}
    pos = structure(6)
    x = torch.randn(2, 6, 8)
    torch.testing.assert_close(enc.embed(x, pos), enc.embed(x, pos.expand(2, -1, -1)))


def test_s_rpe_hand_computed_two_dims():
    # d = 2, one head: PE(delta) = (sin delta, cos delta) (frequency base^0 = 1); W = I, b = 0; the official
    # attention dots r with q / sqrt(head_dim) = q / sqrt(2)
    enc = pet.get_encoder("s_rpe", 2, 1, structures=("melody",)).double()
    with torch.no_grad():
        enc.weights["melody"].weight.copy_(torch.eye(2))
        enc.weights["melody"].bias.zero_()
    pos = torch.zeros(3, len(FIELDS), dtype=torch.long)
    pos[:, field_index("melody")] = torch.tensor([60, 64, 67])
    q = torch.tensor([0.5, -2.0], dtype=torch.float64).expand(1, 1, 3, 2)
    bias = enc.bias(q, q, pos, pos)[0, 0]
    delta = torch.tensor([60.0, 64, 67]).double()
    delta = delta[:, None] - delta[None, :]
    torch.testing.assert_close(bias, (0.5 * delta.sin() - 2.0 * delta.cos()) / math.sqrt(2))


def test_s_rpe_factorised_equals_naive():
    q = torch.randn(2, 4, 5, 8, dtype=torch.float64)
    lq, lk = torch.randint(0, 80, (2, 5)), torch.randint(0, 80, (2, 7))
    weight, bias = torch.randn(32, 32, dtype=torch.float64), torch.randn(32, dtype=torch.float64)
    for labels in ((lq, lk), (lq[0], lk[0])):
        torch.testing.assert_close(structure_rpe_logits(q, *labels, weight, bias, 7920.0),
                                   structure_rpe_naive(q, *labels, weight, bias, 7920.0), atol=1e-10, rtol=1e-10)


def test_s_rpe_depends_on_label_differences_only():
    enc = pet.get_encoder("s_rpe", 16, 2).double()
    q = torch.randn(1, 2, 6, 8, dtype=torch.float64)
    pos = structure(6)
    shifted = pos.clone()
    for name in ("melody", "chord", "phrase"):
        shifted[:, field_index(name)] += 11
    torch.testing.assert_close(enc.bias(q, q, pos, pos), enc.bias(q, q, shifted, shifted), atol=1e-9, rtol=1e-9)


def test_ns_rpe_hand_computed_two_dims():
    # one stationary structure (phrase) and one segment structure (chord), d = 2, W = V = I, biases 0; every
    # term is dotted with q / sqrt(head_dim) (the official scaled query)
    enc = pet.get_encoder("ns_rpe", 2, 1, structures=("phrase",), segments=("chord",)).double()
    with torch.no_grad():
        for lin in (enc.weights["phrase"], enc.lag_weights["chord"]):
            lin.weight.copy_(torch.eye(2))
            lin.bias.zero_()
    labels = torch.zeros(4, len(LABEL_FIELDS), dtype=torch.long)
    labels[:, LABEL_FIELDS.index("chord")] = torch.tensor([6, 6, 6, 11])
    labels[:, LABEL_FIELDS.index("phrase")] = torch.tensor([0, 0, 1, 1])
    pos = add_segment_fields(labels)  # chord runs 0 0 0 1, tau 0 1 2 0
    q = torch.tensor([1.5, 0.25], dtype=torch.float64).expand(1, 1, 4, 2)
    got = enc.bias(q, q, pos, pos)[0, 0]

    def u(delta):
        delta = torch.as_tensor(delta, dtype=torch.float64)
        return 1.5 * delta.sin() + 0.25 * delta.cos()

    phrase = torch.tensor([0.0, 0, 1, 1]).double()
    tau = torch.tensor([0.0, 1, 2, 0]).double()
    same = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 1]]).double()
    expected = u(phrase[:, None] - phrase[None, :]) + same * (u(tau[:, None] - tau[None, :]) + u(tau)[:, None])
    torch.testing.assert_close(got, expected / math.sqrt(2))


def test_ns_rpe_mask_by_label_joins_runs_of_equal_labels():
    labels = torch.zeros(3, len(LABEL_FIELDS), dtype=torch.long)
    labels[:, LABEL_FIELDS.index("chord")] = torch.tensor([6, 11, 6])
    pos = add_segment_fields(labels)
    by_run = pet.get_encoder("ns_rpe", 4, 1, mask_by="run").segment_mask(pos, pos, "chord")[0, 0]
    by_label = pet.get_encoder("ns_rpe", 4, 1, mask_by="label").segment_mask(pos, pos, "chord")[0, 0]
    assert by_run.tolist() == [[True, False, False], [False, True, False], [False, False, True]]
    assert by_label.tolist() == [[True, False, True], [False, True, False], [True, False, True]]


def shaw_reference(q, table, q_pos, k_pos, d):
    """Direct Shaw/Huang formulation: materialise E[clip(j - i)] as (Lq, Lk, hd), then dot with q."""
    rel = (k_pos[None, :] - q_pos[:, None]).clamp(-d, d) + d
    emb = table[:, rel]  # (H, Lq, Lk, hd)
    return torch.einsum("bhid,hijd->bhij", q, emb.to(q.dtype))


@pytest.mark.parametrize(("q_start", "k_start", "lq", "lk"), [(0, 0, 6, 6), (5, 0, 1, 6), (4, 0, 2, 6),
                                                               (10, 3, 5, 9), (0, 0, 3, 8)])
def test_music_relative_skew_equals_gather_and_shaw(q_start, k_start, lq, lk):
    d = 4  # smaller than the lengths: clipping is exercised
    table = torch.randn(2, 2 * d + 1, 8, dtype=torch.float64)
    q = torch.randn(3, 2, lq, 8, dtype=torch.float64)
    q_pos, k_pos = torch.arange(q_start, q_start + lq), torch.arange(k_start, k_start + lk)
    skew = relative_logits_skew(q, table, q_start, k_start, lk, d)
    torch.testing.assert_close(skew, relative_logits_gather(q, table, q_pos, k_pos, d), atol=1e-12, rtol=0)
    torch.testing.assert_close(skew, shaw_reference(q, table, q_pos, k_pos, d), atol=1e-12, rtol=0)


def test_music_relative_hand_computed_and_scaled():
    enc = pet.get_encoder("music_relative", 2, 1, max_distance=1).double()
    with torch.no_grad():  # rows for distances -1, 0, +1
        enc.table.copy_(torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]))
    q = torch.tensor([[[[2.0, 3.0], [5.0, 7.0], [11.0, 13.0]]]], dtype=torch.float64)
    bias = enc.bias(q, q, torch.arange(3), torch.arange(3))[0, 0] * math.sqrt(2)
    # entry (i, j) = q_i . E[clip(j - i, -1, 1)]
    expected = torch.tensor([[3.0, 5, 5], [5, 7, 12], [11, 11, 13]], dtype=torch.float64)
    torch.testing.assert_close(bias, expected)


def test_music_relative_non_contiguous_positions_use_the_gather_path():
    enc = pet.get_encoder("music_relative", 8, 2, max_distance=8).double()
    q = torch.randn(1, 2, 4, 4, dtype=torch.float64)
    pos = torch.tensor([0, 2, 3, 7])
    expected = shaw_reference(q, enc.table.detach(), pos, pos, 8) / 2.0
    torch.testing.assert_close(enc.bias(q, q, pos, pos), expected)
    with pytest.raises(TypeError, match="integer positions"):
        enc.bias(q, q, pos.double(), pos.double())


def test_music_relative_is_shift_invariant():
    enc = pet.get_encoder("music_relative", 8, 2, max_distance=16).double()
    q, k = torch.randn(2, 2, 6, 4, dtype=torch.float64), torch.randn(2, 2, 6, 4, dtype=torch.float64)
    base = pet.positional_logits(enc, q, k, torch.arange(6), torch.arange(6))
    torch.testing.assert_close(pet.positional_logits(enc, q, k, torch.arange(6) + 40, torch.arange(6) + 40), base)


@pytest.mark.parametrize("name", ["s_rpe", "ns_rpe", "music_relative"])
def test_gradcheck_float64(name):
    options = {"max_distance": 4} if name == "music_relative" else pet.encoder_info(name).example_options
    enc = pet.get_encoder(name, 4, 2, **options).double()
    attn = pet.MultiHeadAttention(4, 2, causal=True, encoding=enc).double()
    x = torch.randn(1, 5, 4, dtype=torch.float64)
    pos = structure(5) if name != "music_relative" else None
    names = [f"encoding.{n}" for n, _ in enc.named_parameters()]
    start = tuple(attn.get_parameter(n).detach().clone().requires_grad_() for n in names)

    def output(*values):
        return functional_call(attn, dict(zip(names, values)), (x,), {"q_pos": pos})

    assert torch.autograd.gradcheck(output, start, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", [n for n in MUSIC_ENCODERS if n != "s_ape"])  # s_ape: embed only
def test_kv_cache_decoding_in_attention_matches_full(name):
    enc = pet.get_encoder(name, 16, 2, **pet.encoder_info(name).example_options).double()
    attn = pet.MultiHeadAttention(16, 2, causal=True, encoding=enc).double()
    x = torch.randn(2, 9, 16, dtype=torch.float64)
    pos = structure(9, batch=2) if name != "music_relative" else torch.arange(9)
    full = attn(x, q_pos=pos)
    cache = pet.KVCache()
    pieces = [attn(x[:, :4], q_pos=pos[..., :4, :] if pos.dim() == 3 else pos[:4], cache=cache)]
    for t in range(4, 9):
        pieces.append(attn(x[:, t:t + 1], q_pos=pos[:, t:t + 1] if pos.dim() == 3 else pos[t:t + 1], cache=cache))
    torch.testing.assert_close(torch.cat(pieces, 1), full, atol=1e-12, rtol=1e-12)


def test_bad_options_and_positions():
    with pytest.raises(ValueError, match="unknown structure 'tempo'"):
        pet.get_encoder("s_ape", 8, 2, structures=("tempo",))
    with pytest.raises(ValueError, match="at least one"):
        pet.get_encoder("s_rpe", 8, 2, structures=())
    with pytest.raises(TypeError, match="sequence of field names"):
        pet.get_encoder("s_rpe", 8, 2, structures="melody")
    with pytest.raises(ValueError, match="repeat"):
        pet.get_encoder("s_ape", 8, 2, structures=("melody", "melody"))
    with pytest.raises(ValueError, match="not used"):
        pet.get_encoder("s_ape", 8, 2, structures=("melody",), bases={"chord": 3.0})
    with pytest.raises(ValueError, match=r"bases\['melody'\] must be > 0"):
        pet.get_encoder("s_rpe", 8, 2, structures=("melody",), bases={"melody": -1.0})
    with pytest.raises(ValueError, match="dim must be even"):
        pet.get_encoder("s_ape", 9, 3)
    with pytest.raises(ValueError, match="unknown structure 'melody'"):
        pet.get_encoder("ns_rpe", 8, 2, segments=("melody",))
    with pytest.raises(ValueError, match="mask_by"):
        pet.get_encoder("ns_rpe", 8, 2, mask_by="bar")
    with pytest.raises(ValueError, match="max_distance"):
        pet.get_encoder("music_relative", 8, 2, max_distance=0)
    with pytest.raises(TypeError, match="no_such_option"):
        pet.get_encoder("s_rpe", 8, 2, no_such_option=1)
    enc = pet.get_encoder("s_ape", 8, 2)
    with pytest.raises(ValueError, match=r"positions must have shape \(L, 14\)"):
        enc.embed(torch.zeros(1, 4, 8), torch.zeros(4, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="integer structure labels"):
        enc.embed(torch.zeros(1, 4, 8), torch.zeros(4, len(FIELDS)))
