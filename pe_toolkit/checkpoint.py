"""Reading saved weights safely: ``torch.load(weights_only=True)`` with errors that name the file.

A truncated, empty, bit-flipped or foreign file makes ``torch.load`` fail deep inside its readers
with ``EOFError()``, ``KeyError: 101``, a zip-reader ``RuntimeError`` or an ``UnpicklingError``
that advises ``weights_only=False`` (which would execute arbitrary code from the file).
:func:`load_weights` turns every one of those into a ``ValueError`` that names the path and says
what is wrong, and never falls back to unsafe unpickling.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["load_weights"]


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
