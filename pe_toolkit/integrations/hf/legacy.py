"""Swapped checkpoints saved before swapped models had their own model type: detect, warn, migrate.

Until swapped models became their own HF model type (:mod:`.checkpoint`), ``save_pretrained`` of a
swapped model wrote the family's ``model_type`` (``"llama"``, ``"qwen2"``, ``"mistral"``) and the swap's
description as a ``"pe_toolkit"`` entry of ``config.json`` (``encoding``, ``options``, ``backend``,
``query_block_size``, ``state_dict_prefix``; no ``seed`` / ``per_layer_type``), with the encoder's
parameters in the safetensors under ``model.pe_toolkit.encoding.``. Plain transformers loads such a
folder as the un-swapped model: it keeps the unknown config entry as an attribute nobody reads and
drops the encoder's weights as unexpected (ALiBi and RoPE have none, so not even that is logged).

What can make that loud, and what cannot:

* **Without pe-toolkit's HF integration imported, nothing can.** transformers picks the config class
  from ``model_type`` (the family's own, not ours), keeps unknown entries without validating them and
  runs no code named by the checkpoint unless ``config.json`` has an ``auto_map`` (the old format has
  none). The folder itself has to change: :func:`migrate_checkpoint` rewrites it into the current
  format once, after which plain ``from_pretrained`` asks for ``trust_remote_code=True`` (or, with the
  integration imported, builds the swapped model).
* **With** ``import pe_toolkit.integrations.hf`` (which anyone who swapped encoders has), every config
  construction that sets a ``pe_toolkit`` entry on a config class that is not a swapped model type
  warns (:class:`LegacySwappedCheckpointWarning`), naming the checkpoint, what it is and the two fixes.
  The hook is a property named ``pe_toolkit`` on ``transformers.PreTrainedConfig`` (our key; no
  transformers code uses it); it stores the value in the instance ``__dict__`` as before, so
  ``to_dict`` / ``save_pretrained`` are unchanged. It warns rather than raises because the same config
  is also read by tokenizers and ``AutoConfig`` users, for whom the folder is fine.
* :func:`~pe_toolkit.integrations.hf.swap.load_swapped` reads the old format (quietly about the hook,
  but with one warning that other loaders will not), and rebuilds exactly what the old code built: the
  old ``"rope"`` took its options as given (base 10,000 unless passed), while the current swap starts
  from the model's own rope settings, so :func:`current_spec` pins the old defaults.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import json
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

import transformers  # noqa: E402

from pe_toolkit.atomic import atomic_write_text  # noqa: E402

CONFIG_KEY = "pe_toolkit"
"""The ``config.json`` entry describing a swap (also :data:`.swap.CONFIG_KEY`)."""

CURRENT_KEYS = ("seed", "per_layer_type")
"""Entries of the swap's description that only the current format writes (their absence marks the old one)."""


class LegacySwappedCheckpointWarning(UserWarning):
    """A config of a swapped model saved in the old format is about to build the un-swapped model."""


_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar("pe_toolkit_legacy_quiet", default=False)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """No :class:`LegacySwappedCheckpointWarning` from the config hook inside (our own loaders)."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


def is_legacy_spec(spec: Any) -> bool:
    """Whether ``spec`` (a ``config.pe_toolkit`` value) is a swap description in the old format."""
    return isinstance(spec, dict) and isinstance(spec.get("encoding"), str) and not any(k in spec for k in CURRENT_KEYS)


def _swapped_type(config_class: type) -> bool:
    from pe_toolkit.integrations.hf.checkpoint import PREFIX

    return str(getattr(config_class, "model_type", "")).startswith(PREFIX)


def _checkpoint_name(config: Any) -> str:
    """The checkpoint ``config`` is being loaded from: its ``name_or_path`` (set by ``AutoConfig``), else the
    ``pretrained_model_name_or_path`` of the ``from_pretrained`` call on the stack (a family class's own)."""
    name = str(getattr(config, "_name_or_path", "") or "")
    frame = sys._getframe(2)
    while not name and frame is not None:
        name = str(frame.f_locals.get("pretrained_model_name_or_path") or "")
        frame = frame.f_back
    return name


def _message(config: Any, spec: dict[str, Any], name: str) -> str:
    where = f"the checkpoint {name!r}" if name else "a config"
    call = f"({name!r})" if name else "(path)"
    what = ("saved in the format before swapped models had their own model type (config.json has model_type "
            f"{config.model_type!r} and a 'pe_toolkit' entry)" if is_legacy_spec(spec) else
            f"here described by a plain {type(config).__name__}, not its swapped model type")
    return (f"{where} holds a model whose positional encoding was swapped to {spec['encoding']!r} by pe-toolkit, "
            f"{what}: {type(config).__name__} and the model built from it "
            f"are the plain, un-swapped model, whose logits differ. Load it with "
            f"pe_toolkit.integrations.hf.load_swapped{call}, or rewrite the folder once with "
            f"pe_toolkit.integrations.hf.migrate_checkpoint{call}, after which from_pretrained builds the swapped "
            "model")


def _get(config: Any) -> Any:
    try:
        return config.__dict__[CONFIG_KEY]
    except KeyError:
        raise AttributeError(f"{type(config).__name__} has no attribute {CONFIG_KEY!r}") from None


def _set(config: Any, value: Any) -> None:
    config.__dict__[CONFIG_KEY] = value
    if not _quiet.get() and isinstance(value, dict) and isinstance(value.get("encoding"), str) \
            and not _swapped_type(type(config)):
        warnings.warn(_message(config, value, _checkpoint_name(config)), LegacySwappedCheckpointWarning,
                      stacklevel=_caller_level())


_TRANSFORMERS_DIR = str(Path(transformers.__file__).parent)


def _caller_level() -> int:
    """``stacklevel`` of the first frame outside transformers / huggingface_hub / this file (the user's call)."""
    level, frame = 1, sys._getframe(1)  # level 1: _set
    while frame is not None and (frame.f_code.co_filename.startswith(_TRANSFORMERS_DIR)
                                 or "huggingface_hub" in frame.f_code.co_filename
                                 or frame.f_code.co_filename == __file__):
        level, frame = level + 1, frame.f_back
    return level


def _delete(config: Any) -> None:
    try:
        del config.__dict__[CONFIG_KEY]
    except KeyError:
        raise AttributeError(CONFIG_KEY) from None


def install_config_hook() -> None:
    """Make ``PreTrainedConfig.pe_toolkit`` the warning property (once; see the module docstring)."""
    base = transformers.PreTrainedConfig
    if not isinstance(base.__dict__.get(CONFIG_KEY), property):
        setattr(base, CONFIG_KEY, property(_get, _set, _delete, doc="pe-toolkit's swap description (see "
                                                                 "pe_toolkit.integrations.hf.legacy)"))


def _rope_defaults_pinned(config: Any, options: dict[str, Any], family: str | None) -> dict[str, Any]:
    """``rope`` options that, put on top of the model's own rope settings by the current swap, give exactly
    ``get_encoder("rope", ..., **options)`` (what the old format built)."""
    from pe_toolkit.encoders.rotary import RotaryEncoding
    from pe_toolkit.integrations.hf.swap import ROPE_SCALING_OPTIONS, _rope_defaults

    try:
        own = _rope_defaults(config, {}, family)[0]
    except ValueError:  # the model's rope is not representable: the current swap takes options as given
        return dict(options)
    defaults = {name: p.default for name, p in inspect.signature(RotaryEncoding.__init__).parameters.items()}
    pinned = dict(options)
    if "scaling" not in pinned and any(key in own for key in ROPE_SCALING_OPTIONS):
        pinned["scaling"] = defaults["scaling"]  # a given scaling drops all of the model's scaling options
    for key in own:
        if key not in pinned and key not in ROPE_SCALING_OPTIONS:
            pinned[key] = defaults[key]
    return pinned


def current_spec(config: Any, spec: dict[str, Any], family: str | None) -> dict[str, Any]:
    """The current-format swap description that rebuilds what the old-format ``spec`` built."""
    spec = {**spec, "seed": None, "per_layer_type": None}
    if spec["encoding"] == "rope":
        spec["options"] = _rope_defaults_pinned(config, dict(spec.get("options") or {}), family)
    return spec


def migrate_checkpoint(path: str | Path) -> bool:
    """Rewrite a local swapped checkpoint of the old format into the current one, in place.

    Writes ``modeling_pe_toolkit.py`` beside the weights, then replaces ``config.json`` (each file
    atomically; the code file alone changes nothing, so a crash between the two leaves a readable
    old-format folder, and running this again completes it). The new ``config.json`` names the swapped
    model type (``pe_toolkit_<family>``), its ``auto_map`` and the swap's description in the current
    format (:func:`current_spec`: the model computes what it computed before). Weights are not touched:
    their keys are the same in both formats.

    Returns:
        ``True`` if the folder was rewritten, ``False`` if it was already in the current format.

    Raises:
        ValueError: ``path`` is not a folder with a ``config.json``, its config has no ``pe_toolkit``
            entry (not a swapped model), or its architecture is not one of the supported families.
    """
    from pe_toolkit.integrations.hf import checkpoint
    from pe_toolkit.integrations.hf.swap import FAMILIES

    folder = Path(path)
    file = folder / "config.json"
    if not file.is_file():
        raise ValueError(f"path {str(folder)!r} is not a local checkpoint folder with a config.json "
                         "(migrate_checkpoint rewrites local folders; download a Hub checkpoint first)")
    data = json.loads(file.read_text())
    spec = data.get(CONFIG_KEY)
    if not isinstance(spec, dict) or not isinstance(spec.get("encoding"), str):
        raise ValueError(f"{str(file)!r} has no 'pe_toolkit' entry naming an encoding: not a checkpoint of a model "
                         "swapped by pe-toolkit, nothing to migrate")
    if str(data.get("model_type", "")).startswith(checkpoint.PREFIX):
        return False
    architectures = data.get("architectures") or []
    family = next((name for name in architectures if name in FAMILIES), None)
    if family is None or not hasattr(transformers, family):
        raise ValueError(f"{str(file)!r} has architectures {architectures}: migrate_checkpoint takes one of "
                         f"{', '.join(FAMILIES)}")
    config_class, model_class = checkpoint.swapped_classes(family)
    with quiet():
        config = getattr(transformers, family).config_class.from_dict(dict(data))
    data["model_type"] = config_class.model_type
    data["architectures"] = [model_class.__name__]
    data["auto_map"] = checkpoint.auto_map(family)
    data[CONFIG_KEY] = current_spec(config, spec, family)
    atomic_write_text(folder / checkpoint.CODE_FILE, checkpoint.code(family))
    atomic_write_text(file, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return True
