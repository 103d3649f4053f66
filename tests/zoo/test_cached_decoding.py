"""Bug classes of KV-cache decoding: positions not advanced, relative biases dropped, shift invariance lost.

Public reports describe decoders whose cached steps differ from a full forward: the new token's
position restarts at 0 (``position_ids`` not advanced past the cache), a relative bias (ALiBi, T5)
is applied on the prompt but skipped for single-token steps, or a relative encoding becomes
absolute once keys come from a cache. For every registered encoder:

* decoding a prompt at positions ``offset + arange`` through the cache, one token per step, equals
  the full forward at the same positions (float64, 1e-10);
* for every relative encoder the cached logits do not change when all positions shift by 1,000.

The broken variants (positions restarting at 0 each step; a bias hook that returns nothing for
one-token queries; an absolute encoding under the shift check) fail these checks.
"""

from __future__ import annotations

import pytest
import torch
from zoo_helpers import RELATIVE, SEQUENCE_ENCODERS, VOCAB, decode_with_cache, make_model

TOKENS = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
OFFSET = 37


def cached_vs_full(model, *, offset: int = OFFSET, step_positions=None) -> float:
    positions = offset + torch.arange(TOKENS.shape[1])
    with torch.no_grad():
        full = model(TOKENS, positions=positions)
    cached = decode_with_cache(model, TOKENS, prefill=4, positions=positions, step_positions=step_positions)
    return float((cached - full).abs().max())


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_cached_decoding_equals_the_full_forward(name):
    model = make_model(name).double()
    assert cached_vs_full(model) <= 1e-10


@pytest.mark.parametrize("name", RELATIVE)
def test_relative_encoders_stay_shift_invariant_under_the_cache(name):
    model = make_model(name).double()
    shifted = decode_with_cache(model, TOKENS, prefill=4, positions=1000 + torch.arange(TOKENS.shape[1]))
    base = decode_with_cache(model, TOKENS, prefill=4)
    assert float((shifted - base).abs().max()) <= 1e-9


@pytest.mark.parametrize("name", ["rope", "alibi", "t5", "learned"])
def test_broken_positions_restarting_at_zero_are_caught(name):
    model = make_model(name).double()
    assert cached_vs_full(model, step_positions=lambda t: torch.zeros(1, dtype=torch.long)) > 1e-3


@pytest.mark.parametrize("name", ["alibi", "t5", "kerple", "fire"])
def test_broken_bias_dropped_for_one_token_steps_is_caught(name, monkeypatch):
    model = make_model(name).double()
    for enc in model.encodings:
        def bias_skipped_when_decoding(q, k, q_pos, k_pos, _bias=enc.bias):
            return None if q.shape[-2] == 1 else _bias(q, k, q_pos, k_pos)

        monkeypatch.setattr(enc, "bias", bias_skipped_when_decoding)
    assert cached_vs_full(model) > 1e-3


def test_broken_absolute_encoding_fails_the_shift_check():
    model = make_model("sinusoidal").double()
    shifted = decode_with_cache(model, TOKENS, prefill=4, positions=1000 + torch.arange(TOKENS.shape[1]))
    assert float((shifted - decode_with_cache(model, TOKENS, prefill=4)).abs().max()) > 1e-3
