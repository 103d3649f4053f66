"""Saving and reading checkpoints safely: atomic, consistent saves; weights-only loads with errors that name the file.

:func:`save_checkpoint` writes a checkpoint folder so that an interrupted or failing save (a kill, a
full disk) leaves the previous checkpoint loadable and never one that loads as something else: the
weights go to a new uniquely named file (``model-<token>.pt``, written atomically), and only then
``config.json``, the manifest that names that file and its SHA-256, replaces the old one atomically.
Until that last rename the folder still describes the previous model and its weights; after it, the
new one. Superseded weight files are removed last. :func:`read_checkpoint` reads the pair back and
checks the checksum.

A truncated, empty, bit-flipped or foreign file makes ``torch.load`` fail deep inside its readers
with ``EOFError()``, ``KeyError: 101``, a zip-reader ``RuntimeError`` or an ``UnpicklingError``
that advises ``weights_only=False`` (which would execute arbitrary code from the file).
:func:`load_weights` turns every one of those into a ``ValueError`` that names the path and says
what is wrong, and never falls back to unsafe unpickling.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import uuid
import zipfile
from pathlib import Path
from typing import Any

import torch

from pe_toolkit.atomic import AtomicWriteError, atomic_torch_save, atomic_write_text

__all__ = ["CONFIG_FILE", "LEGACY_WEIGHTS_FILE", "load_weights", "read_checkpoint", "save_checkpoint",
           "weights_path"]

CONFIG_FILE = "config.json"
"""The manifest of a checkpoint folder: the model's config plus the ``"__weights__"`` entry."""

LEGACY_WEIGHTS_FILE = "model.pt"
"""The weights of a folder written before manifests (its ``config.json`` has no ``"__weights__"``)."""

WEIGHTS_ENTRY = "__weights__"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_checkpoint(directory: str | os.PathLike, config: dict[str, Any], state_dict: dict[str, Any]) -> Path:
    """Write ``config`` (JSON-able) and ``state_dict`` into ``directory`` atomically and consistently.

    Returns the folder. Raises ``ValueError`` (before writing anything) when ``config`` holds a value
    JSON cannot store or the reserved key ``"__weights__"``, and :class:`~pe_toolkit.atomic.AtomicWriteError`
    naming the file and the cause (disk full, permission) when a write fails; the folder then still
    holds the previous checkpoint.
    """
    directory = Path(directory)
    if WEIGHTS_ENTRY in config:
        raise ValueError(f"config must not hold the reserved key {WEIGHTS_ENTRY!r}")
    try:
        json.dumps(config)
    except (TypeError, ValueError) as error:
        raise ValueError(f"the config holds a value JSON cannot store ({error}); "
                         "save the state dict instead") from error
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise AtomicWriteError(error.errno, f"cannot create {str(directory)!r}: {error.strerror or error}") from error
    name = f"model-{uuid.uuid4().hex[:16]}.pt"
    weights = directory / name
    atomic_torch_save(state_dict, weights)
    try:
        manifest = {**config, WEIGHTS_ENTRY: {"file": name, "sha256": _sha256(weights)}}
        atomic_write_text(directory / CONFIG_FILE, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    except BaseException:
        with contextlib.suppress(OSError):
            weights.unlink()  # the previous manifest still names the previous weights
        raise
    for stale in [*directory.glob("model-*.pt"), directory / LEGACY_WEIGHTS_FILE]:
        if stale.name != name:
            with contextlib.suppress(OSError):
                stale.unlink()
    return directory


def weights_path(directory: str | os.PathLike) -> Path:
    """The weights file that ``directory/config.json`` names (``model.pt`` for a folder without a manifest)."""
    directory = Path(directory)
    config, _ = read_manifest(directory)
    return directory / config


def read_manifest(directory: Path) -> tuple[str, dict[str, Any]]:
    """``(weights file name, config fields)`` of ``directory/config.json`` (the ``"__weights__"`` entry stays
    in the fields when present)."""
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist (written by Transformer.save_pretrained)")
    try:
        fields = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error})") from None
    if not isinstance(fields, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(fields).__name__}")
    entry = fields.pop(WEIGHTS_ENTRY, None)
    if entry is None:
        return LEGACY_WEIGHTS_FILE, fields
    if (not isinstance(entry, dict) or not isinstance(entry.get("file"), str) or "/" in entry["file"]
            or not isinstance(entry.get("sha256"), str)):
        raise ValueError(f"{path}: {WEIGHTS_ENTRY!r} must be {{'file': name, 'sha256': hex}}, got {entry!r}")
    fields[WEIGHTS_ENTRY] = entry
    return entry["file"], fields


def read_checkpoint(directory: str | os.PathLike, *, map_location: Any = None) -> tuple[dict[str, Any], dict]:
    """``(config, state_dict)`` of a folder written by :func:`save_checkpoint` (or an older ``config.json`` +
    ``model.pt`` pair); the weights are loaded weights-only and checked against the manifest's SHA-256.

    Raises:
        FileNotFoundError: the manifest or the weights it names is missing.
        ValueError: the manifest is not a JSON object, or the weights are corrupt, modified or unreadable.
    """
    directory = Path(directory)
    name, fields = read_manifest(directory)
    entry = fields.pop(WEIGHTS_ENTRY, None)
    weights = directory / name
    if not weights.is_file():
        raise FileNotFoundError(f"{weights} does not exist (named by {directory / CONFIG_FILE})")
    if entry is not None and _sha256(weights) != entry["sha256"]:
        raise ValueError(f"checkpoint {str(weights)!r} does not match the SHA-256 recorded in "
                         f"{directory / CONFIG_FILE}: the file was modified or is corrupt")
    return fields, load_weights(weights, map_location=map_location)


def _unpickler_detail(error: Exception) -> str:
    """What torch's weights-only unpickler refused, without torch's advice to retry with ``weights_only=False``.

    torch >= 2.6 wraps the reason ("Unsupported operand 149", "Unsupported global: ...") in a paragraph
    that suggests re-running ``torch.load`` unsafely; only the reason is kept.
    """
    text = str(error).strip()
    match = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\n\s*\n|$)", text, flags=re.S)
    detail = match.group(1) if match else (text.splitlines()[0] if text else type(error).__name__)
    detail = " ".join(detail.split())
    if "weights_only" in detail:  # an unknown wording that still carries the advice: keep the type only
        detail = f"{type(error).__name__}"
    return detail[:200]


def load_weights(path: str | os.PathLike, *, map_location: Any = None, expect_tensors: bool = True) -> Any:
    """``torch.load(path, weights_only=True)``, or a ``ValueError`` naming ``path`` when it cannot be read.

    Args:
        path: a file written by ``torch.save`` (a state dict, or plain containers of tensors).
        map_location: as for ``torch.load``.
        expect_tensors: require a mapping whose values are all tensors (a state dict), and finite
            ones; a NaN or inf weight is an error naming the first such entry.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: the file is empty, truncated, corrupt, not a torch checkpoint, holds objects a
            weights-only load refuses, or (``expect_tensors``) is not a state dict of finite tensors.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    if path.stat().st_size == 0:
        raise ValueError(f"checkpoint {str(path)!r} is empty (0 bytes): an interrupted save, or not a checkpoint")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(
            f"checkpoint {str(path)!r} holds objects a weights-only load refuses, or is corrupt "
            f"({_unpickler_detail(error)}); only tensors and plain containers are read, never arbitrary pickled code"
        ) from None
    except (EOFError, KeyError, zipfile.BadZipFile, RuntimeError, UnicodeDecodeError, OSError, ValueError,
            AttributeError, IndexError, TypeError) as error:
        detail = f"{type(error).__name__}: {error}".strip().rstrip(":")
        raise ValueError(
            f"checkpoint {str(path)!r} is truncated, corrupt or not a torch.save file ({detail[:200]})"
        ) from None
    if expect_tensors:
        if not isinstance(state, dict):
            raise ValueError(f"checkpoint {str(path)!r} must hold a state dict (a mapping of tensors), "
                             f"got {type(state).__name__}")
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                raise ValueError(f"checkpoint {str(path)!r}: entry {key!r} is a {type(value).__name__}, not a tensor")
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise ValueError(f"checkpoint {str(path)!r}: weight {key!r} holds NaN or inf values")
    return state
