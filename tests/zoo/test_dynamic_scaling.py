"""Bug classes of length-dependent RoPE scalings (dynamic NTK, LongRoPE) under a KV cache.

Public reports describe two failures: the frequencies of a long input are kept (cached on the
module) and applied to every later, shorter input, which then never runs at the base frequencies
again; and cached keys re-rotated (or rotated on read) with the current step's frequencies, so a
key's rotation changes after it was written. The toolkit's rule is stateless and documented in
:class:`pe_toolkit.encoders.rotary.RotaryEncoding`: the frequencies are a function of the current
call's length, and a key is rotated once, when it enters the cache.

Checks, for ``scaling="dynamic"`` and ``"longrope"``:

* a short input after a long one equals the short input on a fresh encoder (frequencies back to
  base); a "sticky" variant that keeps the largest length seen fails it;
* during cached decoding past ``L0``, each cached key is bitwise what it was when written, and it
  equals the key rotated with the frequencies of its own step's length; a cache that re-rotates
  every key with the current step's frequencies fails it.
"""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet

L0 = 8
SCALINGS = {
    "dynamic": {"scaling": "dynamic", "factor": 4.0, "original_max_position": L0},
    "longrope": {"scaling": "longrope", "factor": 4.0, "original_max_position": L0,
                 "short_factor": [1.0, 1.1, 1.2, 1.3], "long_factor": [1.5, 2.0, 3.0, 4.0]},
}


def rope(name: str) -> pet.PositionalEncoding:
    return pet.get_encoder("rope", 32, 4, causal=True, **SCALINGS[name]).double()


def rotate_short_after(enc, long_length: int) -> torch.Tensor:
    x = torch.randn(1, 4, 4, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    enc.rotate_one(torch.randn(1, 4, long_length, 8, dtype=torch.float64), torch.arange(long_length))
    return enc.rotate_one(x, torch.arange(4))


class StickyLength(torch.nn.Module):
    """The bug: the encoder remembers the largest length seen and serves it to every later call."""

    def __init__(self, enc):
        super().__init__()
        self.enc, self.longest = enc, 0

    def rotate_one(self, x, positions):
        self.longest = max(self.longest, int(positions.max()) + 1)
        return self.enc.rotate_one(x, positions, length=self.longest)


@pytest.mark.parametrize("name", SCALINGS)
def test_frequencies_return_to_base_after_a_long_input(name):
    fresh = rotate_short_after(rope(name), long_length=1)
    assert torch.equal(rotate_short_after(rope(name), long_length=64), fresh)
    assert not torch.allclose(rotate_short_after(StickyLength(rope(name)), long_length=64), fresh)


def decode_keys(layer, steps: int, *, rerotate: bool = False) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Decode ``steps`` single tokens through a cache: the cached (rotated) keys after each step, and the input.

    ``rerotate=True`` is the broken variant: after each step every cached key is rotated again from
    its raw projection with the current step's length.
    """
    x = torch.randn(1, steps, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    cache, snapshots = pet.KVCache(), []
    with torch.no_grad():
        for t in range(steps):
            layer(x[:, t:t + 1], q_pos=torch.tensor([t]), cache=cache)
            keys = cache._k[..., :cache.held, :]
            if rerotate:
                raw = layer.k_proj(x[:, :t + 1]).view(1, t + 1, 4, 8).transpose(1, 2)
                keys.copy_(layer.encoding.rotate_one(raw, torch.arange(t + 1), length=t + 1))
            snapshots.append(keys.clone())
    return snapshots, x


@pytest.mark.parametrize("name", SCALINGS)
@pytest.mark.parametrize("rerotate", [False, True])
def test_cached_keys_keep_the_rotation_of_their_own_step(name, rerotate):
    layer = pet.MultiHeadAttention(32, 4, causal=True, encoding=rope(name)).double()
    steps = 3 * L0
    snapshots, x = decode_keys(layer, steps, rerotate=rerotate)
    kept = all(torch.equal(snapshots[t][..., :t + 1, :], snapshots[-1][..., :t + 1, :]) for t in range(steps))
    raw = layer.k_proj(x).view(1, steps, 4, 8).transpose(1, 2).detach()
    own_step = torch.cat([layer.encoding.rotate_one(raw[..., j:j + 1, :], torch.tensor([j]), length=j + 1)
                          for j in range(steps)], dim=-2)
    matches = torch.allclose(snapshots[-1], own_step, atol=1e-12, rtol=0)
    assert (kept and matches) is (not rerotate), (name, rerotate, kept, matches)
