"""Shared pieces of the bug zoo (``tests/zoo/``): the registry's encoders, tiny models, and checks.

Each check returns a number (an error) or a boolean so that a test can run it twice: on the
toolkit's encoder, where it must pass, and on a deliberately broken variant written in the test,
where it must fail. The broken variants reproduce the bug class the test guards against.
"""

from __future__ import annotations

import torch

import pe_toolkit as pet

SEQUENCE_ENCODERS = pet.list_encoders(domain="sequence")
VOCAB = 40


def options(name: str) -> dict:
    return dict(pet.encoder_info(name).example_options)


def acts_in_attention(name: str) -> bool:
    return pet.get_encoder(name, 8, 2, **options(name)).acts_in_attention


IN_ATTENTION = [n for n in SEQUENCE_ENCODERS if acts_in_attention(n)]
RELATIVE = [n for n in SEQUENCE_ENCODERS if pet.encoder_info(n).relative]


def perturb(module: torch.nn.Module, scale: float = 0.1) -> torch.nn.Module:
    """Move every parameter off its initial value (a zero-initialised table would pass anything)."""
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn_like(p))
    return module


def make_encoder(name: str, dim: int = 32, num_heads: int = 4, **overrides):
    return perturb(pet.get_encoder(name, dim, num_heads, causal=True, **{**options(name), **overrides}))


def make_model(name: str, *, layers: int = 2, **overrides) -> pet.Transformer:
    config = pet.TransformerConfig(vocab_size=VOCAB, dim=32, num_heads=4, num_layers=layers, causal=True,
                                   encoding=name, encoding_options=options(name), **overrides)
    model = pet.Transformer(config)
    for enc in model.encodings:
        perturb(enc)
    return model.eval()


def decode_with_cache(model, tokens: torch.Tensor, *, prefill: int, positions: torch.Tensor | None = None,
                      step_positions=None) -> torch.Tensor:
    """Logits of ``tokens`` fed as a ``prefill`` chunk and then one token per step through a KV cache.

    ``positions`` (default ``arange``) are the tokens' positions; ``step_positions(t)`` (a broken
    variant's hook) replaces the positions passed at step ``t``.
    """
    length = tokens.shape[1]
    positions = torch.arange(length) if positions is None else positions
    cache = model.new_cache()
    with torch.no_grad():
        pieces = [model(tokens[:, :prefill], positions=positions[:prefill], cache=cache)]
        for t in range(prefill, length):
            pos = positions[t:t + 1] if step_positions is None else step_positions(t)
            pieces.append(model(tokens[:, t:t + 1], positions=pos, cache=cache))
    return torch.cat(pieces, dim=1)
