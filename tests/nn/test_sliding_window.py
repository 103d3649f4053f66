"""Sliding-window attention (MultiHeadAttention(window=...)) and the bounded KVCache that decodes it."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.nn import backends

SEQUENCE = pet.list_encoders(domain="sequence")


def model(name: str, window: int | None = 3) -> pet.Transformer:
    options = dict(pet.encoder_info(name).example_options)
    m = pet.Transformer(pet.TransformerConfig(vocab_size=30, dim=32, num_heads=4, num_layers=2, causal=True,
                                              encoding=name, encoding_options=options, attention_window=window))
    with torch.no_grad():
        for enc in m.encodings:
            for p in enc.parameters():
                p.add_(0.2 * torch.randn_like(p))
    return m.eval()


@pytest.mark.parametrize("name", SEQUENCE)
def test_windowed_decoding_equals_recomputing_with_the_window(name):
    """Cached decoding with a bounded cache gives the logits of a full windowed forward at every step."""
    m = model(name)
    if not m.encodings[0].supports_window:
        with pytest.raises(ValueError, match="not exact under sliding-window attention"):
            m(torch.randint(0, 30, (1, 4)))
        return
    tokens = torch.randint(0, 30, (2, 12))
    cache = m.new_cache()
    with torch.no_grad():
        steps = [m(tokens[:, :5], cache=cache)]
        for t in range(5, 12):
            steps.append(m(tokens[:, t:t + 1], cache=cache))
        full = m(tokens)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
    assert all(c.length == 12 and c.held <= 2 * 3 for c in cache)  # memory bounded by twice the window


def test_window_is_a_real_restriction():
    """Tokens older than the window cannot influence the output (and do without one)."""
    m = model("rope", window=3)
    a = torch.randint(0, 30, (1, 8))
    b = a.clone()
    b[0, 0] = (a[0, 0] + 1) % 30
    with torch.no_grad():
        # after two layers of window 3 a token reaches 2 * (3 - 1) = 4 positions ahead, not 7
        torch.testing.assert_close(m(a)[:, -1], m(b)[:, -1])
        unwindowed = model("rope", window=None)
        assert not torch.allclose(unwindowed(a)[:, -1], unwindowed(b)[:, -1])


@pytest.mark.parametrize("backend", ["blocked", "flex"])
def test_window_on_every_backend(backend, monkeypatch):
    monkeypatch.setattr(backends, "FLEX_COMPILE", False)
    enc = pet.get_encoder("alibi", 32, 4)
    reference = pet.MultiHeadAttention(32, 4, causal=True, encoding=enc, window=4, backend="sdpa")
    other = pet.MultiHeadAttention(32, 4, causal=True, encoding=enc, window=4, backend=backend,
                                   query_block_size=3 if backend == "blocked" else None)
    other.load_state_dict(reference.state_dict())
    x = torch.randn(2, 11, 32)
    import warnings

    with torch.no_grad(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        torch.testing.assert_close(other(x), reference(x), rtol=1e-5, atol=1e-5)


def test_window_errors():
    with pytest.raises(ValueError, match="window needs a causal layer"):
        pet.MultiHeadAttention(32, 4, causal=False, window=3)
    with pytest.raises(ValueError, match="window must be >= 1, got 0"):
        pet.MultiHeadAttention(32, 4, causal=True, window=0)
    layer = pet.MultiHeadAttention(32, 4, causal=True, window=4)
    with pytest.raises(ValueError, match="keeps only the last 2 keys but this layer attends the last 4"):
        layer(torch.randn(1, 3, 32), cache=pet.KVCache(window=2))
    plain = pet.MultiHeadAttention(32, 4, causal=True)
    with pytest.raises(ValueError, match="keeps only the last 2 keys but this layer attends every key"):
        plain(torch.randn(1, 3, 32), cache=pet.KVCache(window=2))
    assert "window=4" in repr(layer)


def test_cache_max_length_and_arguments():
    cache = pet.KVCache(max_length=5)
    layer = pet.MultiHeadAttention(32, 4, causal=True)
    layer(torch.randn(1, 4, 32), cache=cache)
    layer(torch.randn(1, 1, 32), cache=cache)
    with pytest.raises(ValueError, match="6 keys exceed max_length=5"):
        layer(torch.randn(1, 1, 32), cache=cache)
    with pytest.raises(ValueError, match="give max_length or window, not both"):
        pet.KVCache(max_length=4, window=2)
    with pytest.raises(TypeError, match="window must be an int"):
        pet.KVCache(window=2.5)
    cache.reset()
    assert cache.length == 0 and cache.max_length == 5
