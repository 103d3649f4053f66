"""Hugging Face transformers integration (the ``hf`` extra: ``pip install 'torch-pe-toolkit[hf]'``).

* :mod:`.weights`: :func:`from_hf` / :func:`to_hf`, weights both ways between HF Llama, Qwen2,
  Mistral and Qwen3 causal LMs and :class:`pe_toolkit.Transformer`.
* :mod:`.rope_config`: :func:`rope_options_from_hf` / :func:`rope_config_to_hf`, HF rope configs
  (``rope_scaling`` and ``rope_parameters``) to and from the ``rope`` encoder's options.
* :mod:`.swap`: :func:`swap_positional_encoding`, any registered sequence encoder inside an HF
  model, in place.
* :mod:`.checkpoint`: a swapped model as its own HF model type (``pe_toolkit_<family>``), registered
  here with ``AutoConfig`` / ``AutoModelForCausalLM`` so ``from_pretrained`` opens swapped checkpoints;
  atomic saving (:func:`save_swapped`).
* :mod:`.legacy`: checkpoints saved before that (the family's ``model_type`` and a ``pe_toolkit``
  config entry): a warning when a config of one is built, :func:`migrate_checkpoint` to rewrite them.
* :mod:`.logits`: :class:`CausalLMLogits`, an HF causal LM as ``model(input_ids) -> logits`` for the
  training modules and benchmarks.
"""

from __future__ import annotations

import importlib
from typing import Any

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

_EXPORTS = {
    "from_hf": "weights", "to_hf": "weights", "transformer_config_from_hf": "weights",
    "hf_config_from_transformer": "weights",
    "rope_options_from_hf": "rope_config", "rope_config_to_hf": "rope_config",
    "swap_positional_encoding": "swap", "load_swapped": "swap", "swapped_encoding": "swap", "save_swapped": "swap",
    "CausalLMLogits": "logits",
    "migrate_checkpoint": "legacy", "LegacySwappedCheckpointWarning": "legacy",
}
__all__ = sorted(_EXPORTS)

# a swapped checkpoint names its own model type: register them, so from_pretrained builds the swapped model
importlib.import_module(f"{__name__}.checkpoint").register_all()


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
