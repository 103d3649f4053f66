"""Swapped checkpoints in the format before swapped models had their own model type (the family's
``model_type`` and a ``pe_toolkit`` entry in config.json): plain from_pretrained warns, load_swapped and
migrate_checkpoint rebuild what the old code built.

Each checkpoint is written here as the old code wrote it: the plain family's save_pretrained, the swap's
description (``encoding``, ``options``, ``backend``, ``query_block_size``, ``state_dict_prefix``) added
to config.json, and the encoder's parameters under ``model.pe_toolkit.encoding.`` in the safetensors.
Tiny random models built from configs; nothing downloads.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_helpers import random_causal_lm  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from pe_toolkit.integrations.hf import (  # noqa: E402
    LegacySwappedCheckpointWarning,
    checkpoint,
    legacy,
    load_swapped,
    migrate_checkpoint,
    swap_positional_encoding,
    swapped_encoding,
)
from pe_toolkit.registry import get_encoder  # noqa: E402

SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=97, max_position_embeddings=128, pad_token_id=0)
# theta 1e6 and a yarn scaling: the old "rope" ignored both (base 10,000, no scaling unless passed)
ROPE = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 2.0, "original_max_position_embeddings": 64}


def qwen2():
    return random_causal_lm(transformers.Qwen2Config(**SIZES, rope_parameters=dict(ROPE)))


def tokens() -> torch.Tensor:
    return torch.randint(1, SIZES["vocab_size"], (2, 12), generator=torch.Generator().manual_seed(1))


def write_old_checkpoint(path, model, name: str, options: dict, encoder_state: dict) -> None:
    """``model`` (plain) saved as the old code saved it after swapping in ``name`` with ``options``."""
    model.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())
    config["pe_toolkit"] = {"encoding": name, "options": options, "backend": "auto", "query_block_size": None,
                            "state_dict_prefix": "model.pe_toolkit.encoding."}
    (path / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True))
    state = load_file(path / "model.safetensors")
    state.update({f"model.pe_toolkit.encoding.{key}": value for key, value in encoder_state.items()})
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})


def test_plain_from_pretrained_of_an_old_checkpoint_warns_naming_it_and_the_fixes(tmp_path):
    """ALiBi has no parameters, so transformers itself logs nothing: the config hook warns, through the Auto
    class and the family's own class alike, naming the folder, load_swapped and migrate_checkpoint."""
    path = tmp_path / "old-alibi"
    write_old_checkpoint(path, qwen2(), "alibi", {}, {})
    expected = (r"the checkpoint '.*old-alibi' holds a model whose positional encoding was swapped to 'alibi'.*"
                r"model_type 'qwen2'.*un-swapped.*load_swapped\('.*old-alibi'\).*migrate_checkpoint\('.*old-alibi'\)")
    for loader in (transformers.AutoModelForCausalLM, transformers.Qwen2ForCausalLM):
        with pytest.warns(LegacySwappedCheckpointWarning, match=expected) as caught:
            plain = loader.from_pretrained(path)
        assert swapped_encoding(plain) is None  # what the warning says: the un-swapped model
        assert all(record.filename == __file__ for record in caught)  # points at the caller, not transformers
    with warnings.catch_warnings():
        warnings.simplefilter("error", LegacySwappedCheckpointWarning)
        swap_positional_encoding(qwen2(), "alibi")  # a swap sets the entry on its own model type: quiet


@pytest.mark.parametrize("name", ["rope", "t5"])
def test_load_swapped_and_migrate_checkpoint_rebuild_what_the_old_code_built(name, tmp_path):
    """The old "rope" took its options as given (base 10,000, no scaling), the current swap starts from the
    model's own (theta 1e6, yarn): both loaders pin the old defaults. After migrate_checkpoint (weights and
    other files untouched), plain from_pretrained builds the swapped model, quietly, with the same logits."""
    path = tmp_path / "old"
    base = qwen2()
    encoder = get_encoder(name, 64, 4, causal=True)
    with torch.no_grad():
        for p in encoder.parameters():
            p.add_(0.1 * torch.randn_like(p))
    write_old_checkpoint(path, base, name, {}, encoder.state_dict())
    (path / "tokenizer.json").write_text("{}")
    weights = (path / "model.safetensors").read_bytes()
    old_options = {"base": 10000.0, "scaling": None} if name == "rope" else {}  # what get_encoder(name) meant then
    reference = swap_positional_encoding(qwen2(), name, state_dict=encoder.state_dict(), **old_options)
    if name == "rope":
        assert swapped_encoding(reference).base == 1e4 and swapped_encoding(reference).scaling is None
    x = tokens()
    with torch.no_grad():
        expected = reference(x).logits
    with pytest.warns(LegacySwappedCheckpointWarning, match=r"load_swapped rebuilds it.*migrate_checkpoint"):
        loaded = load_swapped(path)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).logits, expected, rtol=0, atol=0)

    assert migrate_checkpoint(path) is True
    assert migrate_checkpoint(path) is False  # already current
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "pe_toolkit_qwen2" and config["architectures"] == ["PeToolkitQwen2ForCausalLM"]
    assert config["auto_map"] == checkpoint.auto_map("Qwen2ForCausalLM")
    assert not legacy.is_legacy_spec(config["pe_toolkit"])
    assert (path / checkpoint.CODE_FILE).read_text() == checkpoint.code("Qwen2ForCausalLM")
    assert (path / "model.safetensors").read_bytes() == weights and (path / "tokenizer.json").read_text() == "{}"
    with warnings.catch_warnings():
        warnings.simplefilter("error", LegacySwappedCheckpointWarning)
        migrated = transformers.AutoModelForCausalLM.from_pretrained(path)
    assert type(migrated).__name__ == "PeToolkitQwen2ForCausalLM" and swapped_encoding(migrated).registry_name == name
    with torch.no_grad():
        torch.testing.assert_close(migrated(x).logits, expected, rtol=0, atol=0)


def test_migrate_checkpoint_refuses_what_it_cannot_rewrite_and_survives_a_crash(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="is not a local checkpoint folder with a config.json"):
        migrate_checkpoint(tmp_path / "missing")
    qwen2().save_pretrained(tmp_path / "plain")
    with pytest.raises(ValueError, match="has no 'pe_toolkit' entry naming an encoding"):
        migrate_checkpoint(tmp_path / "plain")
    path = tmp_path / "old"
    write_old_checkpoint(path, qwen2(), "alibi", {}, {})
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"has architectures \['GPT2LMHeadModel'\]: migrate_checkpoint takes one of"):
        migrate_checkpoint(path)
    config["architectures"] = ["Qwen2ForCausalLM"]
    (path / "config.json").write_text(json.dumps(config))
    before = (path / "config.json").read_text()
    write = legacy.atomic_write_text

    def fail_on_config(file, text):
        if file.name == "config.json":
            raise OSError(28, "No space left on device")
        write(file, text)

    monkeypatch.setattr(legacy, "atomic_write_text", fail_on_config)
    with pytest.raises(OSError, match="No space left"):
        migrate_checkpoint(path)
    assert (path / "config.json").read_text() == before  # still the old, readable checkpoint
    monkeypatch.setattr(legacy, "atomic_write_text", write)
    assert migrate_checkpoint(path) is True
