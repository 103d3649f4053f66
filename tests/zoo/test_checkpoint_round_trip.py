"""Bug classes of saving and loading: checkpoints that need unsafe unpickling, and corrupt files.

Public reports describe models whose saved state holds Python objects (a dataclass config, a
lambda, a custom class), so loading it needs ``torch.load(weights_only=False)``, which executes
code from the file; and loaders that answer a truncated or foreign file with ``EOFError()``,
``KeyError: 101`` or a zip-reader error that names nothing.

Checks: for every registered encoder, ``Transformer.save_pretrained`` -> ``from_pretrained`` (a
``weights_only=True`` load) gives the same logits exactly, encoder parameters included; a broken
variant that pickles its config object into the weights file is refused by the safe load. Every
kind of bad file (missing, empty, truncated, flipped bytes, text, a pickled object, a NaN weight,
weights of another model) is a ``ValueError`` or ``FileNotFoundError`` that names the file.
"""

from __future__ import annotations

import json

import pytest
import torch
from zoo_helpers import SEQUENCE_ENCODERS, VOCAB, make_model

import pe_toolkit as pet
from pe_toolkit.checkpoint import load_weights, weights_path

TOKENS = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(4))


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_save_and_weights_only_load_round_trip(name, tmp_path):
    model = make_model(name)
    loaded = pet.Transformer.from_pretrained(model.save_pretrained(tmp_path / name))
    with torch.no_grad():
        assert torch.equal(loaded(TOKENS), model(TOKENS))
    assert torch.equal(torch.nn.utils.parameters_to_vector(loaded.parameters()),
                       torch.nn.utils.parameters_to_vector(model.parameters()))


def test_broken_checkpoint_with_a_pickled_config_is_refused(tmp_path):
    model = make_model("rope")
    path = weights_path(model.save_pretrained(tmp_path / "m"))
    torch.save({**model.state_dict(), "config": model.config}, path)  # the bug: an object in the weights
    with pytest.raises(ValueError, match=r"model-\w+.pt' holds objects a weights-only load refuses"):
        load_weights(path)
    with pytest.raises(ValueError, match=r"model-\w+.pt' does not match the SHA-256"):
        pet.Transformer.from_pretrained(tmp_path / "m")


def _write(path, kind: str, good: bytes) -> None:
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif kind == "flipped":
        data = bytearray(good)
        for i in range(0, len(data), 97):
            data[i] ^= 0xFF
        path.write_bytes(bytes(data))
    elif kind == "text":
        path.write_text("this is not a checkpoint\n")
    elif kind == "nan":
        state = torch.load(path, weights_only=True)
        next(v for v in state.values() if v.is_floating_point()).view(-1)[0] = float("nan")
        torch.save(state, path)
    elif kind == "list":
        torch.save([1, 2, 3], path)


@pytest.mark.parametrize("kind, message", [
    ("empty", "is empty"),
    ("truncated", "truncated, corrupt or not a torch.save file"),
    ("flipped", "(truncated, corrupt|holds objects a weights-only load refuses)"),
    ("text", "(truncated, corrupt|holds objects a weights-only load refuses)"),
    ("nan", "holds NaN or inf values"),
    ("list", "must hold a state dict"),
])
def test_bad_weight_files_name_the_file(kind, message, tmp_path):
    directory = make_model("alibi").save_pretrained(tmp_path / "m")
    path = weights_path(directory)
    _write(path, kind, path.read_bytes())
    with pytest.raises(ValueError, match=message) as info:
        load_weights(path)
    # from_pretrained finds the file changed since the save before reading it
    with pytest.raises(ValueError, match="does not match the SHA-256") as info_pretrained:
        pet.Transformer.from_pretrained(directory)
    assert str(path) in str(info_pretrained.value)
    # no advice to load unsafely, in any wording (torch's own message says "with `weights_only` set to `False`")
    assert str(path) in str(info.value) and "weights_only" not in str(info.value)
    assert "False" not in str(info.value)


def test_missing_files_bad_config_and_mismatched_weights(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_weights(tmp_path / "nothing.pt")
    directory = make_model("alibi").save_pretrained(tmp_path / "m")
    (directory / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json is not valid JSON"):
        pet.Transformer.from_pretrained(directory)
    other = make_model("t5").save_pretrained(tmp_path / "t5")
    alibi = make_model("alibi").save_pretrained(tmp_path / "a")
    weights_path(other).replace(tmp_path / "t5" / "model.pt")  # a folder written before manifests
    (tmp_path / "t5" / "config.json").write_text(json.dumps(
        {k: v for k, v in json.loads((alibi / "config.json").read_text()).items() if k != "__weights__"}))
    with pytest.raises(ValueError, match=r"model.pt does not fit .*config.json"):
        pet.Transformer.from_pretrained(other)
