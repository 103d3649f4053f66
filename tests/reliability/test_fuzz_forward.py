"""Property-based (hypothesis) tests of the core's forward passes: attention layer and Transformer.

The contract (docs/reliability.md): for any input the outcome is a correct result (finite output
for finite input, the right shape) or a ``ValueError`` / ``TypeError`` whose message names the
argument that is wrong. Never an ``IndexError`` or a ``RuntimeError`` from deep inside torch, a NaN
output from finite input, or a hang. Each example injects at most one fault into one argument; an
error is accepted only when it names that argument.
"""

from __future__ import annotations

import pytest
import torch
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st

import pe_toolkit as pet

ENCODERS = pet.list_encoders(domain="sequence")
VOCAB = 13

# the argument a fault goes into -> the words an error about it may use
NAMES = {
    "x": ("x ", "x must", "x holds"),
    "positions": ("positions", "q_pos", "position"),
    "padding_mask": ("padding_mask", "key_padding_mask"),
    "document_ids": ("document_ids",),
    "tokens": ("tokens",),
}
FAULTS = {
    "x": ["nan", "inf", "wrong_dim", "int", "rank2"],
    "positions": ["negative", "huge", "float", "wrong_length", "rank3", "bool"],
    "padding_mask": ["int", "wrong_shape", "empty_row"],
    "document_ids": ["float", "wrong_shape", "decreasing", "negative"],
    "tokens": ["too_big", "negative", "float", "rank1"],
}


def _positions(fault: str | None, batch: int, length: int) -> torch.Tensor | None:
    base = torch.arange(length)
    return {
        None: None,
        "negative": base - 5,
        "huge": base + 10**7,
        "float": base.float() + 0.5,
        "wrong_length": torch.arange(length + 1),
        "rank3": base.expand(batch, 1, length),
        "bool": base > 0,
    }[fault]


def _mask(fault: str | None, batch: int, length: int) -> torch.Tensor | None:
    mask = torch.ones(batch, length, dtype=torch.bool)
    if length:
        mask[:, 0] = False if length > 1 else True
    return {None: mask, "int": mask.long(), "wrong_shape": mask[:, :-1] if length else mask[:, :0].T,
            "empty_row": torch.zeros(batch, length, dtype=torch.bool)}[fault]


def _documents(fault: str | None, batch: int, length: int) -> torch.Tensor:
    ids = (torch.arange(length) >= length // 2).long().expand(batch, length)
    return {None: ids, "float": ids.float(), "wrong_shape": ids[:, :-1] if length else ids.T,
            "decreasing": ids.flip(-1), "negative": ids - 3}[fault]


def _check(call, argument: str | None, *, finite_input: bool = True):
    try:
        out = call()
    except (ValueError, TypeError) as error:
        message = str(error)
        assert argument is not None, f"no fault injected, yet: {type(error).__name__}: {message}"
        assert any(word in message for word in NAMES[argument]), f"{argument}: {type(error).__name__}: {message}"
        return None
    if finite_input and out.numel():
        assert torch.isfinite(out).all(), f"non-finite output from finite input (fault in {argument})"
    return out


@fuzz(60)
@given(name=st.sampled_from(ENCODERS), batch=st.integers(1, 3), length=st.integers(1, 9),
       argument=st.sampled_from([None, "x", "positions", "padding_mask", "document_ids"]), data=st.data())
def test_transformer_forward_features_fuzz(name, batch, length, argument, data):
    fault = data.draw(st.sampled_from(FAULTS[argument])) if argument else None
    info = pet.encoder_info(name)
    model = pet.Transformer(pet.TransformerConfig(vocab_size=None, dim=16, num_heads=2, num_layers=1, causal=True,
                                                  encoding=name, encoding_options=dict(info.example_options)))
    x = torch.randn(batch, length, 16)
    if argument == "x":
        x = {"nan": x.index_fill(0, torch.tensor([0]), float("nan")),
             "inf": x.index_fill(0, torch.tensor([0]), float("inf")), "wrong_dim": x[..., :-1],
             "int": x.long(), "rank2": x[0]}[fault]
    options = {}
    if argument == "positions" or (argument is None and data.draw(st.booleans())):
        options["positions"] = _positions(fault if argument == "positions" else None, batch, length)
    if argument == "padding_mask":
        options["padding_mask"] = _mask(fault, batch, length)
    if argument == "document_ids":
        options["document_ids"] = _documents(fault, batch, length)
    finite = not (argument == "x" and fault in ("nan", "inf"))
    out = _check(lambda: model.forward_features(x, **options), argument, finite_input=finite)
    if out is not None:
        assert out.shape == (batch, length, 16)
        assert finite, f"{fault} features passed without an error"


@fuzz(60)
@given(name=st.sampled_from(ENCODERS), batch=st.integers(1, 3), length=st.integers(1, 9),
       argument=st.sampled_from([None, "tokens"]), data=st.data())
def test_transformer_tokens_fuzz(name, batch, length, argument, data):
    fault = data.draw(st.sampled_from(FAULTS["tokens"])) if argument else None
    options = dict(pet.encoder_info(name).example_options)
    model = pet.Transformer(pet.TransformerConfig(vocab_size=VOCAB, dim=16, num_heads=2, num_layers=1, causal=True,
                                                  encoding=name, encoding_options=options))
    tokens = torch.randint(0, VOCAB, (batch, length))
    if fault == "too_big":
        tokens[0, -1] = VOCAB + data.draw(st.integers(0, 10**6))
    elif fault == "negative":
        tokens[0, 0] = -data.draw(st.integers(1, 10**6))
    elif fault == "float":
        tokens = tokens.float()
    elif fault == "rank1":
        tokens = tokens[0]
    out = _check(lambda: model(tokens), argument)
    if out is not None:
        assert fault is None and out.shape == (batch, length, VOCAB)


@fuzz(60)
@given(name=st.sampled_from(ENCODERS), length=st.integers(1, 9), dtype=st.sampled_from(
    [torch.float32, torch.float64, torch.bfloat16]), backend=st.sampled_from(["sdpa", "blocked", "auto"]),
    argument=st.sampled_from([None, "positions", "padding_mask"]), data=st.data())
def test_attention_layer_fuzz(name, length, dtype, backend, argument, data):
    fault = data.draw(st.sampled_from(FAULTS[argument])) if argument else None
    enc = pet.get_encoder(name, 16, 2, causal=True, **pet.encoder_info(name).example_options)
    if not enc.acts_in_attention:
        enc = None
    layer = pet.MultiHeadAttention(16, 2, causal=True, encoding=enc, backend=backend).to(dtype)
    x = torch.randn(2, length, 16, dtype=dtype)
    options = {}
    if argument == "positions":
        options["q_pos"] = _positions(fault, 2, length)
    if argument == "padding_mask":
        options["key_padding_mask"] = _mask(fault, 2, length)
    out = _check(lambda: layer(x, **options), argument)
    if out is not None:
        assert out.shape == x.shape and out.dtype == dtype


def test_the_contract_rejects_an_unnamed_error():
    """The checker itself: an error that does not name the faulty argument fails the test."""
    with pytest.raises(AssertionError, match="positions"):
        _check(lambda: (_ for _ in ()).throw(ValueError("something went wrong")), "positions")
    with pytest.raises(AssertionError, match="non-finite output"):
        _check(lambda: torch.tensor([float("nan")]), None)
