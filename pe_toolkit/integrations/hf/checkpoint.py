"""A swapped HF model is its own model type, so no loader opens its checkpoint as the plain model.

:func:`~pe_toolkit.integrations.hf.swap.swap_positional_encoding` turns a ``Qwen3ForCausalLM`` into a
``PeToolkitQwen3ForCausalLM`` (a subclass: ``isinstance(model, Qwen3ForCausalLM)`` still holds) whose
config is a ``PeToolkitQwen3Config`` with ``model_type = "pe_toolkit_qwen3"``. Why a model type of its
own and ``auto_map`` (HF's mechanism for custom code, ``trust_remote_code``):

* the saved ``config.json`` names ``pe_toolkit_qwen3``, which plain transformers does not know, and an
  ``auto_map`` to ``modeling_pe_toolkit.py``, a 20-line file written beside the weights (nothing is
  fetched: it only imports pe-toolkit, which must be installed). So
  ``AutoModelForCausalLM.from_pretrained(path)`` without pe-toolkit's HF integration imported stops with
  HF's own error asking for ``trust_remote_code=True``; with it, the swapped model loads; with
  ``import pe_toolkit.integrations.hf`` first (which registers the types with ``AutoConfig`` /
  ``AutoModelForCausalLM``) it loads without ``trust_remote_code``. Pipelines, evaluation harnesses
  and servers that take ``trust_remote_code`` get the swapped model, never the RoPE model with the
  swapped model's weights (whose logits differ by several units).
* The alternative, keeping the family's ``model_type`` and a ``pe_toolkit`` entry in the config, is
  what made plain ``from_pretrained`` load the un-swapped model silently: transformers ignores unknown
  config entries and drops unexpected weights with a log line.

``save_pretrained`` of a swapped model (and :func:`save_swapped`) writes the checkpoint into a
temporary folder beside the target and then exchanges the folders, so the folder holds the old
checkpoint or the new one, config and weights together, never a mix (files the save does not write,
such as a tokenizer saved there before, are kept). ``from_pretrained`` of the swapped class builds
the encoder afresh after loading (so buffers computed at construction are real, not HF's
meta-device placeholders) and loads its saved parameters into it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

import torch  # noqa: E402
import transformers  # noqa: E402

from pe_toolkit.atomic import AtomicWriteError, atomic_write  # noqa: E402
from pe_toolkit.integrations.hf.legacy import install_config_hook  # noqa: E402

install_config_hook()  # a config of the old checkpoint format warns that it builds the un-swapped model

PREFIX = "pe_toolkit_"
"""Prefix of a swapped model's ``model_type`` (``pe_toolkit_`` + the family's)."""

CODE_FILE = "modeling_pe_toolkit.py"
"""The file ``save_pretrained`` writes beside a swapped checkpoint; ``config.auto_map`` points to it."""

WRITTEN = ("config.json", "generation_config.json", CODE_FILE, "model.safetensors", "model.safetensors.index.json",
           "pytorch_model.bin", "pytorch_model.bin.index.json")
"""Files of a previous checkpoint in the target folder that a save replaces (with ``model-*`` shards)."""

_CLASSES: dict[str, tuple[type, type]] = {}

CODE = '''"""Written by pe-toolkit beside a Hugging Face checkpoint whose positional encoding was swapped
(pe_toolkit.integrations.hf.swap_positional_encoding; config.json's "pe_toolkit" entry names the encoder).

Load it with transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True), or without
trust_remote_code after `import pe_toolkit.integrations.hf`. It needs pe-toolkit:
pip install 'torch-pe-toolkit[hf]'. This file only imports pe-toolkit; it downloads nothing.
"""

try:
    from pe_toolkit.integrations.hf.checkpoint import swapped_classes
except ImportError as error:
    raise ImportError("this checkpoint's positional encoding was swapped with pe-toolkit, which is not installed: "
                      "pip install 'torch-pe-toolkit[hf]'") from error

{config}, {model} = swapped_classes("{family}")
'''


def family_class(model_or_class: Any) -> type:
    """The transformers class a (swapped) model is built on (``Qwen3ForCausalLM`` for ``PeToolkitQwen3ForCausalLM``)."""
    from pe_toolkit.integrations.hf.swap import family_of

    cls = model_or_class if isinstance(model_or_class, type) else type(model_or_class)
    name = family_of(cls)
    if name is None:
        raise TypeError(f"{cls.__name__} is not a supported Hugging Face causal LM")
    return getattr(transformers, name)


def swapped_classes(family: str | type) -> tuple[type, type]:
    """``(PeToolkit<F>Config, PeToolkit<F>ForCausalLM)`` for the family class ``family`` (or its name), created
    once and registered with ``AutoConfig`` / ``AutoModelForCausalLM``."""
    base = getattr(transformers, family) if isinstance(family, str) else family
    key = base.__name__
    if key in _CLASSES:
        return _CLASSES[key]
    stem = key.removesuffix("ForCausalLM")
    base_config = base.config_class
    model_type = PREFIX + base_config.model_type
    config_class = type(f"PeToolkit{stem}Config", (base_config,), {
        "model_type": model_type, "__module__": __name__,
        "__doc__": f"A {base_config.__name__} whose model's positional encoding was swapped (pe-toolkit)."})

    def __init__(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        from pe_toolkit.integrations.hf.swap import swap_positional_encoding

        base.__init__(self, config, *args, **kwargs)
        with torch.device("cpu"):  # from_pretrained builds on the meta device; encoders compute buffers at init
            swap_positional_encoding(self)  # from config.pe_toolkit

    def from_pretrained(cls: type, *args: Any, **kwargs: Any) -> Any:
        model = super(model_class, cls).from_pretrained(*args, **kwargs)
        _rebuild_encoder(model)
        return model

    def save_pretrained(self: Any, save_directory: Any, *args: Any, **kwargs: Any) -> None:
        save_swapped(self, save_directory, *args, **kwargs)

    model_class = type(f"PeToolkit{key}", (base,), {
        "config_class": config_class, "__module__": __name__, "__init__": __init__,
        "from_pretrained": classmethod(from_pretrained), "save_pretrained": save_pretrained,
        "__doc__": f"A {key} whose positional encoding was swapped (pe_toolkit.integrations.hf)."})
    globals()[config_class.__name__] = config_class  # picklable by name
    globals()[model_class.__name__] = model_class
    transformers.AutoConfig.register(model_type, config_class, exist_ok=True)
    transformers.AutoModelForCausalLM.register(config_class, model_class, exist_ok=True)
    _CLASSES[key] = (config_class, model_class)
    return _CLASSES[key]


def register_all() -> None:
    """Register the swapped model types of every supported family (so ``from_pretrained`` finds them)."""
    from pe_toolkit.integrations.hf.swap import FAMILIES

    for family in FAMILIES:
        if hasattr(transformers, family):
            swapped_classes(family)


def check_swappable(model: Any) -> None:
    """``TypeError`` unless ``model``'s class is a family's own class or its swapped class (not a user subclass,
    whose behaviour the saved checkpoint could not rebuild)."""
    _, model_class = swapped_classes(family_class(model))
    if type(model) not in (model_class, family_class(model)):
        raise TypeError(f"{type(model).__name__} subclasses {family_class(model).__name__}: only the family's own "
                        "class can become a swapped model type (its checkpoint must rebuild the same model)")


def make_swapped(model: Any) -> None:
    """Give ``model`` (just swapped) its swapped class and config class, and the config its ``auto_map``."""
    check_swappable(model)
    config_class, model_class = swapped_classes(family_class(model))
    if type(model) is not model_class:
        model.__class__ = model_class
    model.config.__class__ = config_class
    model.config.auto_map = auto_map(family_class(model))


def auto_map(family: str | type) -> dict[str, str]:
    """The ``config.auto_map`` of a swapped model of ``family`` (to the classes in :data:`CODE_FILE`)."""
    config_class, model_class = swapped_classes(family)
    return {"AutoConfig": f"{CODE_FILE[:-3]}.{config_class.__name__}",
            "AutoModelForCausalLM": f"{CODE_FILE[:-3]}.{model_class.__name__}"}


def _rebuild_encoder(model: Any) -> None:
    """After ``from_pretrained``: the encoder built anew on the model's device, with the loaded parameters."""
    from pe_toolkit.integrations.hf.swap import MODULE_NAME, _active, swap_positional_encoding

    base = getattr(model, model.base_model_prefix)
    swap = _active(getattr(base, MODULE_NAME))
    state = {key: value for key, value in swap.state_dict().items()}
    placeholders = sorted(key for key, value in state.items() if value.device.type == "meta")
    if placeholders:
        raise ValueError(f"the checkpoint lacks the encoder parameters {placeholders} (under "
                         f"{model.base_model_prefix}.{MODULE_NAME}.)")
    swap_positional_encoding(model, state_dict=state)


def code(family: str | type) -> str:
    """The text of :data:`CODE_FILE` for a swapped model of ``family`` (a family class or its name)."""
    base = getattr(transformers, family) if isinstance(family, str) else family_class(family)
    config_class, model_class = swapped_classes(base)
    return CODE.format(config=config_class.__name__, model=model_class.__name__, family=base.__name__)


def save_swapped(model: Any, save_directory: Any, *args: Any, **kwargs: Any) -> None:
    """``save_pretrained`` of a swapped model, atomically: the folder holds the old checkpoint or the new one.

    The family's ``save_pretrained`` writes into a temporary folder beside ``save_directory`` (with
    ``config.json`` naming the swapped model type and its ``auto_map``, and :data:`CODE_FILE`); files of
    the old folder the save does not write (a tokenizer, a README) are copied in; then the two folders are
    exchanged (``renameat2(RENAME_EXCHANGE)`` on Linux; elsewhere two renames, so a crash between them
    leaves the old checkpoint under a ``.<name>.*.old`` name) and the old one is removed.

    Raises:
        TypeError: ``model`` was not swapped.
        ValueError: ``push_to_hub=True`` (save, then upload the folder) or a target that is a file.
        AtomicWriteError: the folder could not be written or exchanged; the previous checkpoint is intact.
    """
    from pe_toolkit.integrations.hf.swap import swapped_encoding

    if swapped_encoding(model) is None:
        raise TypeError(f"save_swapped takes a model changed by swap_positional_encoding, got a plain "
                        f"{type(model).__name__}: use its save_pretrained")
    if kwargs.get("push_to_hub"):
        raise ValueError("push_to_hub=True: save a swapped model locally, then upload the folder "
                         "(huggingface_hub.upload_folder), so the uploaded files are the complete checkpoint")
    make_swapped(model)  # the config class and auto_map, also after a deepcopy or a dtype change
    target = Path(save_directory)
    if target.exists() and not target.is_dir():
        raise ValueError(f"save_directory {str(target)!r} is a file, not a folder")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    except OSError as error:
        raise AtomicWriteError(error.errno, f"cannot write {str(target)!r}: {error.strerror or error}") from error
    try:
        family_class(model).save_pretrained(model, staging, *args, **kwargs)
        with atomic_write(staging / CODE_FILE, "w") as handle:
            handle.write(code(model))
        if target.exists():
            for entry in target.iterdir():
                replaced = entry.name in WRITTEN or entry.name.startswith(("model-", "pytorch_model-"))
                if not replaced and not (staging / entry.name).exists():
                    copy = shutil.copytree if entry.is_dir() else shutil.copy2
                    copy(entry, staging / entry.name)
            _exchange(staging, target)
            shutil.rmtree(staging, ignore_errors=True)  # now the old checkpoint
        else:
            os.replace(staging, target)
    except OSError as error:
        shutil.rmtree(staging, ignore_errors=True)
        raise AtomicWriteError(error.errno, f"cannot write {str(target)!r}: {error.strerror or error}; the previous "
                               "checkpoint is unchanged") from error
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _exchange(staging: Path, target: Path) -> None:
    """Swap the folders ``staging`` and ``target`` (atomically where the OS can)."""
    with contextlib.suppress(AttributeError, OSError):
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
        at_fdcwd, rename_exchange = -100, 2
        if renameat2(at_fdcwd, os.fsencode(staging), at_fdcwd, os.fsencode(target), rename_exchange) == 0:
            return
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
    os.rmdir(old)
    os.replace(target, old)
    os.replace(staging, target)
    os.replace(old, staging)
