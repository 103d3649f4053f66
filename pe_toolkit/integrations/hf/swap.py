"""Any registered sequence encoder inside a Hugging Face decoder-only causal LM, in place.

:func:`swap_positional_encoding` keeps every HF module of the model (projections, fused ``qkv``,
q/k norms, the cache, the decoder layers) and changes only where the positions act:

* HF's rotary embedding module(s) return the identity rotation (``cos = 1``, ``sin = 0``), so the
  attention's own ``apply_rotary_pos_emb`` leaves queries and keys as they are (partial rotary too);
* the model's attention implementation becomes ``"pe_toolkit"`` (registered with HF's
  ``AttentionInterface``): the attention modules hand it their queries, keys (all of them, cached ones
  included, un-rotated), values, ``scaling``, ``sliding_window`` and ``softcap``, and it applies
  ``encoding.rotate`` to queries and keys at their positions and runs
  :func:`~pe_toolkit.nn.backends.attend` (backend ``"auto"`` by default) with the encoding's bias.

So whatever a family does around its positions is kept: q/k norms (Qwen3, OLMo 2, Gemma 3), the
attention scale (Gemma's ``query_pre_attn_scalar``, Granite's ``attention_multiplier``), logit
soft-capping (Gemma 2), per-layer sliding windows (Mistral, Qwen2, Gemma 2/3, Ministral), NoPE layers
(SmolLM3's ``no_rope_layers`` stay without positions), fused projections (Phi-3, GPT-NeoX).

>>> model = swap_positional_encoding(model, "alibi")                      # doctest: +SKIP
>>> model.generate(ids, attention_mask=mask, max_new_tokens=20)             # doctest: +SKIP
>>> model.save_pretrained("alibi-qwen3")                                    # doctest: +SKIP
>>> AutoModelForCausalLM.from_pretrained("alibi-qwen3", trust_remote_code=True)  # doctest: +SKIP

Design:

* **One encoder** for all layers (as :class:`pe_toolkit.Transformer` shares one), registered on the
  base model as ``model.model.pe_toolkit.encoding`` (a :class:`PositionalSwap`): its parameters are in
  ``model.parameters()`` (trainable) and in the state dict under ``model.pe_toolkit.encoding.``.
  Swapping in ``"rope"`` starts from the model's own rope settings (:func:`rope_options_from_hf`);
  options passed override them (a ``scaling`` replaces the model's scaling, keeping its base and
  rotary fraction). A model with per-layer-type rope settings (Gemma 3) gets one ``rope`` encoder
  per layer type (``encodings``) when ``"rope"`` is swapped in with the model's own settings.
  ``seed=`` makes the encoder's initialisation reproducible, ``state_dict=`` loads given parameters.
* **A swapped model is its own HF model type** (:mod:`.checkpoint`): ``PeToolkitQwen3ForCausalLM``
  (a subclass of ``Qwen3ForCausalLM``) with ``model_type = "pe_toolkit_qwen3"``, registered with the
  ``Auto`` classes, and an ``auto_map`` to a small ``modeling_pe_toolkit.py`` that ``save_pretrained``
  writes beside the checkpoint. ``save_pretrained`` replaces the checkpoint folder atomically.
* **Positions** are HF's ``position_ids`` (``arange`` continued past the cache when absent; in
  ``generate`` with an ``attention_mask``, ``cumsum(mask) - 1``), read by a forward pre-hook on the
  base model and handed to every attention call in the keyword ``pe_toolkit_inputs``, with the forward's
  :class:`~pe_toolkit.nn.position_state.PositionState`: a position-only bias (ALiBi, T5, FIRE, ...) is
  built by the first layer and reused by the others (each layer builds its own under HF gradient
  checkpointing, whose recomputed layers must not share one).
* **Masks**: HF builds no mask for the ``"pe_toolkit"`` implementation; the pre-hook reads the 2D
  ``attention_mask`` (``(B, past + L)``, 1 = real token), and the attention builds
  ``AttentionMask(L, keys, causal=True, key_padding_mask=..., window=sliding_window)``. Packed
  sequences: ``position_ids`` that restart (without an ``attention_mask``, on an empty cache) or
  ``cu_seq_lens_q`` / ``cu_seq_lens_k`` (HF's flattening collator) mark documents that do not attend to
  each other.
* **KV cache**: keys enter HF's cache as the attention module puts them in (HF's rotation is the
  identity); each layer records the positions of its keys on its cache layer (attribute
  ``_pe_toolkit_key_positions``, which ``copy.deepcopy`` keeps). An encoder that rotates each key by its
  own position alone (``rope`` without a length-dependent scaling) rotates each call's new keys once
  and writes them back into the cache tensor, so the cache holds rotated keys as HF's own RoPE models'
  does and a decoding step rotates one key, not all of them (see :func:`_rotate`); ``dynamic`` /
  ``longrope`` rotate every key on every call at the call's length. A cache cropped from the end is
  followed; a cache whose keys were not recorded is refused. Pre-allocated caches
  (``cache_implementation="static"``) are refused by name.
* **Embed hooks** (``sinusoidal``, ``learned``, ...): the pre-hook replaces ``input_ids`` by
  ``inputs_embeds = encoding.embed(embed_tokens(input_ids), positions)``.
* ``output_attentions=True`` returns the attention probabilities (written out, not through SDPA);
  a soft-capped model (Gemma 2) also runs written out.

Not covered (refused where detectable): pre-allocated caches, 4D custom ``attention_mask``, 3D
(multimodal M-RoPE) ``position_ids``, and HF's ``attn_implementation`` (our ``backend=`` decides;
changing it after the swap is refused at the next forward). Length-dependent RoPE scalings
(``dynamic``, ``longrope``) rotate each call's keys for the call's length.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

import transformers  # noqa: E402

from pe_toolkit.encoders.base import PositionalEncoding  # noqa: E402
from pe_toolkit.nn.attention import check_backend  # noqa: E402
from pe_toolkit.nn.backends import attend  # noqa: E402
from pe_toolkit.nn.masks import AttentionMask  # noqa: E402
from pe_toolkit.nn.position_state import PositionState  # noqa: E402
from pe_toolkit.registry import encoder_info, get_encoder, list_encoders  # noqa: E402

FAMILIES = (
    "LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM", "Gemma2ForCausalLM",
    "Gemma3ForCausalLM", "Phi3ForCausalLM", "Olmo2ForCausalLM", "GPTNeoXForCausalLM", "GraniteForCausalLM",
    "SmolLM3ForCausalLM", "MinistralForCausalLM",
    # further families of transformers 5 whose attention fits the same pattern
    "GemmaForCausalLM", "OlmoForCausalLM", "Olmo3ForCausalLM", "PhiForCausalLM", "CohereForCausalLM",
    "Cohere2ForCausalLM", "Starcoder2ForCausalLM", "HeliumForCausalLM", "GlmForCausalLM", "Glm4ForCausalLM",
    "Exaone4ForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM", "ArceeForCausalLM",
    "SeedOssForCausalLM", "ApertusForCausalLM", "PersimmonForCausalLM", "BitNetForCausalLM",
)
"""The HF causal-LM classes :func:`swap_positional_encoding` takes (each measured against HF's logits,
tokens and generation by :mod:`.check_families`)."""

SUPPORTED = FAMILIES  # the name before the families were added

CONFIG_KEY = "pe_toolkit"
"""``model.config.pe_toolkit``: the swap's description, saved in ``config.json``."""

MODULE_NAME = "pe_toolkit"
"""Attribute of the base model (``model.model``) holding the :class:`PositionalSwap`."""

INPUTS_KWARG = "pe_toolkit_inputs"
"""Keyword the base-model pre-hook adds; HF passes it through every decoder layer to the attention."""

POSITIONS_ATTR = "_pe_toolkit_key_positions"
"""Attribute of an HF cache layer holding the positions of its keys (``(K,)`` or ``(B, K)``)."""

ROTATED_ATTR = "_pe_toolkit_keys_rotated"
"""Attribute of an HF cache layer set when its keys are stored rotated (see :func:`_rotate`)."""

_CACHE_ROTATED_KEYS = True
"""Keep rotated keys in the cache (:func:`_rotate`); ``False`` re-rotates every cached key on every call (the
earlier behaviour, kept for :mod:`.decode_speed` to measure against)."""

_SHARE_POSITION_BIAS = True
"""Build a position-only bias once per forward for all layers; ``False`` builds it in every layer (the earlier
behaviour, kept for :mod:`.decode_speed` to measure against)."""

ATTN_IMPLEMENTATION = "pe_toolkit"
"""The ``config._attn_implementation`` of a swapped model (registered with HF's ``AttentionInterface``)."""


def family_of(model_or_class: Any) -> str | None:
    """The :data:`FAMILIES` class name ``model_or_class`` is (or derives from), else ``None``."""
    cls = model_or_class if isinstance(model_or_class, type) else type(model_or_class)
    return next((c.__name__ for c in cls.__mro__
                 if c.__name__ in FAMILIES and c.__module__.startswith("transformers.")), None)


def check_model(model: Any) -> None:
    """``TypeError`` naming ``model``'s class unless it is (or derives from) one of :data:`FAMILIES`."""
    if not isinstance(model, transformers.PreTrainedModel) or family_of(model) is None:
        raise TypeError(f"model must be one of {', '.join(FAMILIES)} (a Hugging Face causal LM), "
                        f"got {type(model).__name__}")


def _active(module: Any) -> Any:
    """``module``, or the module PEFT's ``ModulesToSaveWrapper`` around it currently runs (the adapter's copy)."""
    if isinstance(module, nn.Module) and hasattr(module, "original_module") and hasattr(module, "modules_to_save"):
        adapters = getattr(module, "active_adapters", None) or []
        if getattr(module, "disable_adapters", False) or not adapters or adapters[0] not in module.modules_to_save:
            return module.original_module
        return module.modules_to_save[adapters[0]]
    return module


@dataclass
class _Inputs:
    """What the base-model pre-hook hands every attention call for one forward."""

    swap: PositionalSwap        # the active swap (PEFT's copy under modules_to_save)
    positions: Tensor           # (L,) or (B, L): positions of the new tokens
    padding: Tensor | None      # bool (B, past + L), True = real token; None when every token is real
    documents: Tensor | None    # (B, L) document ids of packed sequences, or None
    cache: Any                  # the HF cache of this forward, or None
    weights: bool               # output_attentions: return the attention probabilities
    state: PositionState | None = None  # a position-only bias built once for the layers (not under checkpointing)


def _identity_rotation(module: nn.Module, args: tuple, output: Any) -> Any:
    """Forward hook on HF's rotary embedding: ``(cos, sin) -> (1, 0)``, so HF's rotation is the identity."""
    config = getattr(module, "config", None)
    implementation = getattr(config, "_attn_implementation", ATTN_IMPLEMENTATION) if config is not None else None
    if implementation not in (ATTN_IMPLEMENTATION, None):
        raise ValueError(f"this model's positional encoding was swapped (swap_positional_encoding), which needs "
                         f"attn_implementation={ATTN_IMPLEMENTATION!r}, but it is now {implementation!r}: choose the "
                         "attention kernel with swap_positional_encoding(..., backend=...) instead")
    if not (isinstance(output, tuple) and len(output) == 2 and all(isinstance(t, Tensor) for t in output)):
        raise TypeError(f"{type(module).__name__} returned {type(output).__name__}, not HF's (cos, sin): this rotary "
                        "embedding is not covered")
    cos, sin = output
    return torch.ones_like(cos), torch.zeros_like(sin)


class PositionalSwap(nn.Module):
    """The swapped-in encoder and how the attention runs it; ``model.model.pe_toolkit``.

    Holds the encoder as the submodule ``encoding`` (its parameters train and are saved with the
    model; PEFT's ``modules_to_save=["pe_toolkit"]`` trains and saves a copy that the layers then use)
    and, for a model whose layer types carry their own rope settings, ``by_layer_type`` (one encoder per
    ``config.layer_types`` entry). Installs the base model's forward hooks: the pre-hook reads
    positions, the 2D ``attention_mask`` and packed-document markers (see the module docstring), adds
    an ``embed`` hook's output to the input embeddings, and gives the forward a
    :class:`~pe_toolkit.nn.position_state.PositionState`, in which the first layer builds a position-only
    bias (ALiBi, T5, ...) that the later layers of the same forward reuse.
    """

    def __init__(self, encoding: PositionalEncoding, name: str, options: dict[str, Any], *, backend: str,
                 query_block_size: int | None, seed: int | None = None,
                 by_layer_type: dict[str, PositionalEncoding] | None = None) -> None:
        super().__init__()
        self.encoding = encoding
        self.by_layer_type = nn.ModuleDict(by_layer_type) if by_layer_type else None
        self.name = name
        self.options = options
        self.backend = backend
        self.query_block_size = query_block_size
        self.seed = seed
        self._parameter_names: list[str] | None = None

    @property
    def embeds(self) -> bool:
        """Whether the encoder has an ``embed`` hook (added to the input embeddings)."""
        return type(_active(self.encoding)).embed is not PositionalEncoding.embed

    def spec(self, prefix: str) -> dict[str, Any]:
        """The ``config.pe_toolkit`` entry: JSON only."""
        return {"encoding": self.name, "options": dict(self.options), "backend": self.backend,
                "query_block_size": self.query_block_size, "seed": self.seed,
                "per_layer_type": sorted(self.by_layer_type) if self.by_layer_type else None,
                "state_dict_prefix": prefix}

    def encoding_for(self, layer_type: str | None) -> PositionalEncoding:
        """The encoder of a layer of ``layer_type`` (the shared one unless the layer types have their own)."""
        if self.by_layer_type is not None and layer_type is not None:
            return _active(self.by_layer_type[layer_type])
        return _active(self.encoding)

    def attach(self, base: nn.Module) -> None:
        """Install the forward hooks on ``base`` and make its rotary embedding(s) the identity."""
        signature = inspect.signature(base.forward)
        self._parameter_names = [p.name for p in signature.parameters.values()
                                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        base.register_forward_pre_hook(self._before, with_kwargs=True)
        rotaries = [m for m in base.modules() if type(m).__name__.endswith("RotaryEmbedding")]
        for module in rotaries:
            module.register_forward_hook(_identity_rotation)

    def _before(self, base: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        swap = _active(getattr(base, MODULE_NAME))
        names = self._parameter_names or []
        if args and len(args) <= len(names):
            kwargs = {**dict(zip(names, args, strict=False)), **kwargs}
            args = ()
        cache_name = "cache" if "cache" in names else "past_key_values"
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        ids, embeds = kwargs.get("input_ids"), kwargs.get("inputs_embeds")
        reference = embeds if embeds is not None else ids
        if reference is None:
            return args, kwargs  # HF raises its own error
        batch, length, device = reference.shape[0], reference.shape[1], reference.device
        use_cache = kwargs.get("use_cache")
        use_cache = getattr(base.config, "use_cache", False) if use_cache is None else use_cache
        # HF gradient checkpointing recomputes each layer in the backward pass and runs without a cache.
        checkpointed = torch.is_grad_enabled() and any(
            getattr(module, "gradient_checkpointing", False) and module.training for module in base.modules())
        if cache is None and use_cache and not checkpointed:
            # HF would create this cache inside the forward; created here, the layers can record key positions
            cache = transformers.DynamicCache(config=base.config)
            kwargs.pop("past_key_values", None)
            kwargs[cache_name] = cache
        past = int(cache.get_seq_length()) if cache is not None else 0
        mask = kwargs.get("attention_mask")
        position_ids = kwargs.get("position_ids")
        padding = None
        if mask is not None:
            if not isinstance(mask, Tensor) or mask.dim() != 2:
                shape = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
                raise ValueError(f"attention_mask must be a 2D padding mask (batch, keys) with 1 for real tokens, got "
                                 f"{shape}: a model swapped to {swap.name!r} builds its own causal mask (4D custom "
                                 "masks are not covered)")
            padding = mask if mask.dtype == torch.bool else mask != 0
            if tuple(padding.shape) != (batch, past + length):
                raise ValueError(f"attention_mask has shape {tuple(padding.shape)}, expected ({batch}, "
                                 f"{past + length}): one entry per cached ({past}) and new ({length}) token")
            if bool(padding.all()):
                padding = None
        documents = None
        boundaries = kwargs.get("cu_seq_lens_q", kwargs.get("cu_seq_lens_k"))
        if boundaries is not None:
            documents, starts = _documents_from_boundaries(boundaries, batch, length)
            if position_ids is None:
                position_ids = (torch.arange(length, device=device) - starts)[None]
        elif mask is None and past == 0 and isinstance(position_ids, Tensor) and position_ids.dim() == 2 and length > 1:
            # HF's find_packed_sequence_indices: a new document wherever the position does not grow by 1
            diff = torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1)
            runs = (diff != 1).long().cumsum(-1)
            documents = runs if bool((runs[:, -1] != 0).any()) else None
        positions = _query_positions(position_ids, batch, length, past, device)
        weights = bool(kwargs.get("output_attentions") or getattr(base.config, "output_attentions", False))
        encoding = swap.encoding_for(None)
        # one position-only bias per forward for every layer (what the Transformer does), except under HF
        # gradient checkpointing, whose recomputed layers must each build their own
        state = PositionState(positions, validated=False) if _SHARE_POSITION_BIAS and not checkpointed else None
        kwargs[INPUTS_KWARG] = _Inputs(swap=swap, positions=positions, padding=padding, documents=documents,
                                       cache=cache, weights=weights, state=state)
        if type(encoding).embed is not PositionalEncoding.embed:
            if embeds is None:
                embeds = base.get_input_embeddings()(ids)
            kwargs["inputs_embeds"] = encoding.embed(embeds, positions)
            kwargs["input_ids"] = None
        return args, kwargs

    def extra_repr(self) -> str:
        text = f"name={self.name!r}, backend={self.backend!r}"
        return text + (f", query_block_size={self.query_block_size}" if self.query_block_size else "")


def _documents_from_boundaries(boundaries: Tensor, batch: int, length: int) -> tuple[Tensor, Tensor]:
    """``cu_seq_lens`` ``(D + 1,)`` (0, end of document 1, ..., L) as document ids ``(1, L)`` and each token's
    document start ``(L,)``."""
    if batch != 1 or boundaries.dim() != 1 or int(boundaries[0]) != 0 or int(boundaries[-1]) != length:
        raise ValueError(f"cu_seq_lens_q / cu_seq_lens_k must be the cumulative document lengths (0, ..., {length}) "
                         f"of one flattened row, got {boundaries.tolist()} for input of shape ({batch}, {length})")
    index = torch.arange(length, device=boundaries.device)
    documents = torch.bucketize(index, boundaries[1:].to(index.dtype), right=True)
    return documents[None], boundaries.to(index.dtype)[documents]


def _query_positions(position_ids: Tensor | None, batch: int, length: int, past: int,
                     device: torch.device) -> Tensor:
    """HF ``position_ids`` ``(1 or B, L)`` as our positions: ``(L,)`` when shared, ``(B, L)`` per row."""
    if position_ids is None:
        return torch.arange(past, past + length, device=device)
    if position_ids.dim() == 1:
        positions = position_ids
    elif position_ids.dim() == 2 and position_ids.shape[0] in (1, batch):
        positions = position_ids[0] if position_ids.shape[0] == 1 else position_ids
    else:
        raise ValueError(f"position_ids must have shape (1, {length}) or ({batch}, {length}), got "
                         f"{tuple(position_ids.shape)} (3D multimodal positions are not covered)")
    if positions.shape[-1] != length:
        raise ValueError(f"position_ids has {positions.shape[-1]} positions for {length} tokens")
    return positions


def _join(earlier: Tensor | None, new: Tensor, batch: int) -> Tensor:
    """Positions of the cached keys followed by the new ones; batched if either is."""
    if earlier is None:
        return new
    if earlier.dim() != new.dim():
        earlier, new = (earlier.expand(batch, -1) if earlier.dim() == 1 else earlier,
                        new.expand(batch, -1) if new.dim() == 1 else new)
    return torch.cat((earlier, new.to(earlier.dtype)), dim=-1)


def _recorded_positions(cache: Any, layer: int, past: int, batch: int) -> Tensor | None:
    """Positions of the ``past`` tokens layer ``layer``'s cache has seen (recorded by earlier calls)."""
    if past == 0:
        return None
    entry = cache.layers[layer] if layer < len(cache.layers) else None
    recorded = getattr(entry, POSITIONS_ATTR, None)
    if recorded is not None and recorded.dim() == 2 and recorded.shape[0] != batch:
        if recorded.shape[0] and batch % recorded.shape[0] == 0:  # batch_repeat_interleave
            recorded = recorded.repeat_interleave(batch // recorded.shape[0], dim=0)
        else:
            recorded = None
    if recorded is None or recorded.shape[-1] < past:
        raise ValueError(f"the cache holds {past} tokens for layer {layer} whose positions the swapped attention did "
                         "not record (a cache filled before swap_positional_encoding, or re-batched with "
                         "batch_select_indices): start from an empty cache")
    return recorded[..., :past]  # a cache cropped from the end keeps the first `past`


def _key_positions(module: nn.Module, inputs: _Inputs, keys: int, length: int, batch: int) -> tuple[Tensor, Any]:
    """Positions of the ``keys`` keys HF's cache handed this attention call (recording the new ones), and the
    cache layer that holds them (``None`` without one, or when HF kept this call's keys out of the cache)."""
    cache, layer = inputs.cache, getattr(module, "layer_idx", None)
    if cache is None or layer is None:
        if keys != length:
            raise ValueError(f"the attention got {keys} keys for {length} queries without a cache it can read")
        return inputs.positions, None
    entry = cache.layers[layer]
    if type(entry).__name__.startswith("Static") or "Quantized" in type(entry).__name__:
        raise ValueError(f"a pre-allocated cache ({type(cache).__name__}, layer {type(entry).__name__}; "
                         "cache_implementation='static' / 'offloaded_static' / 'quantized') is not covered by a "
                         "swapped positional encoding: use the default DynamicCache")
    total = int(entry.get_seq_length()) if hasattr(entry, "get_seq_length") else keys
    if total < length:  # HF kept this call's keys out of the cache (gradient checkpointing sets cache=None)
        if keys != length:
            raise ValueError(f"the attention got {keys} keys for {length} queries without a cache it can read")
        return inputs.positions, None
    past = total - length
    seen = _join(_recorded_positions(cache, layer, past, batch), inputs.positions, batch)
    if keys > seen.shape[-1]:
        raise ValueError(f"the cache ({type(cache).__name__}, layer {type(entry).__name__}) returned {keys} keys for "
                         f"{seen.shape[-1]} tokens seen: only caches that return the keys seen so far (DynamicCache, "
                         "with or without a sliding window) are covered, not pre-allocated ones "
                         "(cache_implementation='static')")
    setattr(entry, POSITIONS_ATTR, seen)
    return seen[..., seen.shape[-1] - keys:], entry


def _rotates_each_key_alone(encoding: PositionalEncoding) -> bool:
    """Whether ``encoding.rotate`` moves each key by its own position only, the same in every call (RoPE without
    a length-dependent scaling): then a key can be rotated once and kept rotated in the cache."""
    from pe_toolkit.encoders.rotary import RotaryEncoding

    return isinstance(encoding, RotaryEncoding) and not encoding.length_dependent


def _shares_storage(key: Tensor, entry: Any) -> bool:
    """Whether ``key`` is (or holds) the cache layer's own key tensor, so writing into ``key`` updates the cache."""
    stored = getattr(entry, "keys", None)
    return isinstance(stored, Tensor) and stored.numel() > 0 and \
        stored.untyped_storage().data_ptr() == key.untyped_storage().data_ptr()


def _rotate(encoding: PositionalEncoding, query: Tensor, key: Tensor, q_pos: Tensor, k_pos: Tensor, length: int,
            entry: Any) -> tuple[Tensor, Tensor]:
    """``encoding.rotate`` of the queries and of the keys, each key rotated once where that is exact.

    HF's cache holds the keys as the attention module put them in: un-rotated, since HF's own rotation
    is the identity after the swap. For an encoder that rotates each key by its own position alone
    (:func:`_rotates_each_key_alone`), the keys of this call are rotated and written back into the cache
    layer's tensor, which the layer marks (:data:`ROTATED_ATTR`); later calls rotate only their new keys,
    as HF's own RoPE models do (their cache holds rotated keys too). Other encoders (length-dependent
    RoPE scalings, whose frequencies change with the length) rotate every key on every call.

    With gradients, a call on a cache without rotated keys (a training forward) rotates all keys and
    writes nothing, so gradients flow through every key as before; once a layer holds rotated keys
    (written without gradient history), later calls treat them as constants.
    """
    rotated_before = getattr(entry, ROTATED_ATTR, False) if entry is not None else False
    grad = torch.is_grad_enabled() and key.requires_grad
    if not (_CACHE_ROTATED_KEYS and entry is not None and _rotates_each_key_alone(encoding)
            and _shares_storage(key, entry)) or (grad and not rotated_before):
        if rotated_before:
            raise ValueError(f"the cache layer {type(entry).__name__} holds rotated keys but returned keys it does not "
                             "store: only caches that return their own key tensor (DynamicCache) are covered")
        return encoding.rotate(query, key, q_pos, k_pos)
    start = key.shape[-2] - length if rotated_before else 0  # cached keys are rotated already
    fresh = key[..., start:, :]
    q, rotated = encoding.rotate(query, fresh.clone() if grad else fresh, q_pos, k_pos[..., start:])
    with torch.no_grad():
        key[..., start:, :] = rotated  # into HF's cache tensor
    setattr(entry, ROTATED_ATTR, True)
    if not grad:
        return q, key
    return q, torch.cat((key[..., :start, :].detach(), rotated), dim=-2) if start else rotated


def pe_toolkit_attention(module: nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask: Any,
                         dropout: float = 0.0, scaling: float | None = None, sliding_window: int | None = None,
                         softcap: float | None = None, **kwargs: Any) -> tuple[Tensor, Tensor | None]:
    """HF's attention-function signature (``ALL_ATTENTION_FUNCTIONS["pe_toolkit"]``) with the swapped encoder.

    ``query`` ``(B, H, L, hd)``; ``key``, ``value`` ``(B, H_kv, K, hd)`` (cached keys included, not
    rotated). Returns ``(B, L, H, hd)`` and the attention probabilities ``(B, H, L, K)`` when the forward
    asked for ``output_attentions`` (else ``None``). HF's 4D ``attention_mask`` is not used (HF builds
    none for this implementation): the mask comes from the pre-hook's inputs.
    """
    inputs = kwargs.get(INPUTS_KWARG)
    if not isinstance(inputs, _Inputs):
        layer = getattr(module, "layer_idx", "?")
        raise ValueError(f"attention implementation {ATTN_IMPLEMENTATION!r} (layer {layer}) was called"
                         " outside its swapped model's forward, so the positions are unknown: call the model")
    swap = inputs.swap
    batch, heads, length, head_dim = query.shape
    keys = key.shape[-2]
    if not getattr(module, "use_rope", True):
        encoding = None  # a NoPE layer (SmolLM3's no_rope_layers) stays without positions
    else:
        layer_types = getattr(module.config, "layer_types", None) if hasattr(module, "config") else None
        layer = getattr(module, "layer_idx", None)
        encoding = swap.encoding_for(layer_types[layer] if layer_types and layer is not None else None)
    q_pos = inputs.positions
    k_pos, entry = _key_positions(module, inputs, keys, length, batch)
    if encoding is None:
        encoding = _NO_POSITION
    window = sliding_window if sliding_window is not None else getattr(module, "sliding_window", None)
    if window is not None and not encoding.supports_window:
        raise ValueError(f"encoding {swap.name!r} is not exact under sliding-window attention (window {window})")
    q, k = _rotate(encoding, query, key, q_pos, k_pos, length, entry)
    if scaling is not None and not math.isclose(scaling, head_dim ** -0.5, rel_tol=1e-12):
        q = q * (scaling * math.sqrt(head_dim))  # attend divides by sqrt(head_dim)
    padding = inputs.padding
    if padding is not None:
        if padding.shape[1] < keys:
            raise ValueError(f"attention_mask has {padding.shape[1]} entries per row for {keys} keys")
        padding = padding[:, padding.shape[1] - keys:]
    documents = inputs.documents if keys == length else None
    if documents is not None and not encoding.supports_documents:
        raise ValueError(f"encoding {swap.name!r} is not exact on packed sequences (position_ids that restart, or "
                         "cu_seq_lens): run the documents separately or pass an attention_mask")
    mask = AttentionMask(length, keys, causal=True, key_padding_mask=padding, q_documents=documents,
                         k_documents=documents, window=window)
    if softcap is not None or inputs.weights:
        out, weights = _written_out(q, k, value, q_pos, k_pos, encoding, mask, softcap, dropout)
    else:
        out = attend(q, k, value, q_pos, k_pos, encoding, mask, backend=swap.backend, tile=swap.query_block_size,
                     dropout=dropout, state=inputs.state)
        weights = None
    return out.transpose(1, 2).contiguous(), weights


_NO_POSITION = PositionalEncoding(2, 1)
"""The encoder of a NoPE layer: no rotation, no bias."""


def _written_out(q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, encoding: PositionalEncoding,
                 mask: AttentionMask, softcap: float | None, dropout: float) -> tuple[Tensor, Tensor]:
    """``softmax(cap(q k^T / sqrt(d) + bias), masked) v`` written out, with the probabilities.

    ``cap(s) = softcap * tanh(s / softcap)`` (Gemma 2; the identity without ``softcap``), applied, as HF
    does, to the whole logit before the mask; the encoder's bias is part of the logit.
    """
    groups = q.shape[1] // k.shape[1]
    visible = mask.dense(0, mask.q_len, q.device)
    bias = (encoding.bias(q, k, q_pos, k_pos, visible=visible) if encoding.bias_uses_visibility
            else encoding.bias(q, k, q_pos, k_pos))
    compute = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    kk, vv = k.repeat_interleave(groups, dim=1).to(compute), v.repeat_interleave(groups, dim=1).to(compute)
    scores = q.to(compute) @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.to(compute)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    weights = scores.softmax(-1)
    if dropout > 0:
        weights = nn.functional.dropout(weights, dropout)
    return (weights @ vv).to(q.dtype), weights.to(q.dtype)


transformers.AttentionInterface.register(ATTN_IMPLEMENTATION, pe_toolkit_attention)


def _has_sliding_layers(config: Any) -> bool:
    """Whether some layer attends through a sliding window (as HF's attention reads the config)."""
    window = getattr(config, "sliding_window", None)
    if window is None or getattr(config, "use_sliding_window", True) is False:
        return False
    types = getattr(config, "layer_types", None)
    return types is None or "sliding_attention" in types


def _build_encoding(config: Any, name: str, options: dict[str, Any], heads: int,
                    head_dim: int) -> tuple[PositionalEncoding, dict[str, Any]]:
    """The registered sequence encoder ``name`` for ``heads`` heads of ``head_dim``, and its options as saved."""
    info = encoder_info(name)  # ValueError for an unknown name, with close matches
    if info.domain != "sequence":
        raise ValueError(f"encoding {name!r} is a {info.domain!r} encoder, whose positions are not token indices: a "
                         f"causal LM takes a sequence encoder, one of {', '.join(list_encoders(domain='sequence'))}")
    if options.get("causal", True) is not True:
        raise ValueError(f"causal={options['causal']!r}: a causal LM's attention is causal (the encoder is built "
                         "with causal=True)")
    options = {key: value for key, value in options.items() if key != "causal"}
    parameters = inspect.signature(info.cls.__init__).parameters
    max_positions = getattr(config, "max_position_embeddings", None)
    if "max_len" in parameters and max_positions is not None:
        if "max_len" not in options:
            options["max_len"] = int(max_positions)
        elif isinstance(options["max_len"], int) and options["max_len"] < max_positions:
            raise ValueError(f"max_len={options['max_len']} is shorter than config.max_position_embeddings="
                             f"{max_positions}: encoding {name!r} has no vector for the positions {options['max_len']}"
                             f"..{max_positions - 1} the model accepts; pass max_len >= {max_positions} (or omit it)")
    try:
        json.dumps(options)
    except TypeError as error:
        raise ValueError(f"options of encoding {name!r} must be JSON values (they are saved in config.json): "
                         f"{error}") from error
    try:
        encoding = get_encoder(name, heads * head_dim, heads, causal=True, **options)
    except (TypeError, ValueError) as error:
        raise type(error)(f"encoding {name!r} with options {options} cannot serve this causal LM: {error}") from error
    if type(encoding).embed is not PositionalEncoding.embed and heads * head_dim != config.hidden_size:
        raise ValueError(f"encoding {name!r} adds {heads * head_dim} = num_attention_heads * head_dim features in its "
                         f"embed hook, but hidden_size is {config.hidden_size}")
    return encoding, options


INTERLEAVED_ROPE = ("CohereForCausalLM", "Cohere2ForCausalLM", "HeliumForCausalLM", "GlmForCausalLM", "Glm4ForCausalLM")
"""Families whose RoPE rotates adjacent pairs ``(2i, 2i + 1)`` (GPT-J style): ``rope`` gets ``interleaved=True``."""

ROPE_SCALING_OPTIONS = ("scaling", "factor", "original_max_position", "beta_fast", "beta_slow", "mscale",
                        "mscale_all_dim", "attention_factor", "low_freq_factor", "high_freq_factor", "short_factor",
                        "long_factor", "truncate")
"""``rope`` options that belong to a scaling: a ``scaling=`` passed to the swap replaces all of the model's."""


def _per_layer_rope(config: Any) -> dict[str, dict[str, Any]] | None:
    """``{layer_type: rope options}`` for a config whose ``rope_parameters`` differ per layer type (Gemma 3)."""
    from pe_toolkit.integrations.hf.rope_config import rope_options_from_hf

    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or not any(isinstance(v, dict) for v in params.values()):
        return None
    result = {}
    for layer_type, own in params.items():
        view = copy.copy(config)
        view.rope_parameters = dict(own)
        result[layer_type] = rope_options_from_hf(view)
    return result


def _rope_defaults(config: Any, options: dict[str, Any],
                  family: str | None = None) -> tuple[dict[str, Any], dict[str, dict[str, Any]] | None]:
    """The ``rope`` options of a swap: the model's own, with ``options`` on top (see the module docstring),
    and the per-layer-type options when the model has them and nothing was overridden."""
    from pe_toolkit.integrations.hf.rope_config import rope_options_from_hf

    per_type = _per_layer_rope(config)
    if family in INTERLEAVED_ROPE and per_type is not None:
        per_type = {kind: {**own, "interleaved": True} for kind, own in per_type.items()}
    if per_type is not None:
        if not options:
            return per_type[sorted(per_type)[0]], per_type
        own = per_type.get("full_attention", per_type[sorted(per_type)[0]])
    else:
        try:
            own = rope_options_from_hf(config)
            if family in INTERLEAVED_ROPE:
                own["interleaved"] = True
        except ValueError:
            if options:
                return dict(options), None
            raise
    if "scaling" in options:
        own = {key: value for key, value in own.items() if key not in ROPE_SCALING_OPTIONS}
    return {**own, **options}, None


def swap_positional_encoding(model: Any, name: str | None = None, *, backend: str = "auto",
                             query_block_size: int | None = None, seed: int | None = None,
                             state_dict: dict[str, Tensor] | None = None, **options: Any) -> Any:
    """Make an HF causal LM of one of :data:`FAMILIES` use the registered encoder ``name``, in place.

    Every attention call then runs through :func:`pe_toolkit_attention` with one encoder, built as
    ``get_encoder(name, num_attention_heads * head_dim, num_attention_heads, causal=True, **options)``,
    for all layers; the model's modules, state-dict keys and weights are unchanged and the encoder's
    parameters are added (trainable, saved). ``model.forward`` and ``model.generate`` (KV cache,
    left-padded batches through ``attention_mask``) use it. The model becomes an instance of its
    swapped class (``PeToolkit<Family>``, see :mod:`.checkpoint`), which ``save_pretrained`` saves as
    its own model type. Swapping a swapped model again replaces the encoder.

    Args:
        model: one of :data:`FAMILIES` (the family's own class, or its swapped class).
        name: a registered sequence encoder (``"rope"``, ``"alibi"``, ``"t5"``, ``"fire"``, ...);
            ``None`` reads ``model.config.pe_toolkit`` (a reloaded swapped checkpoint).
        backend: ``"auto"`` (default), ``"sdpa"``, ``"blocked"`` or ``"flex"``
            (:mod:`pe_toolkit.nn.backends`).
        query_block_size: tile size of the ``"blocked"`` backend (selects it under ``"auto"``).
        seed: seeds the encoder's initialisation (two swaps with one seed are equal; saved in the config).
        state_dict: the encoder's parameters to load (e.g. ``swapped_encoding(other).state_dict()``).
        **options: the encoder's options (JSON values; saved in ``config.pe_toolkit``). For ``"rope"``
            they go on top of the model's own rope settings (``rope_options_from_hf(model.config)``); a
            ``scaling`` replaces the model's scaling options. ``learned``'s ``max_len`` defaults to
            ``config.max_position_embeddings``.

    Returns:
        ``model`` itself, with ``model.config.pe_toolkit`` set and the encoder, in the model's dtype
        and on its device, at ``model.<base>.pe_toolkit.encoding``.

    Raises:
        TypeError: ``model`` is not a supported HF causal LM (the message names its class), or the
            encoder rejects an option.
        ValueError: an unknown or non-sequence encoder; ``causal=False``; a ``learned`` ``max_len``
            below ``config.max_position_embeddings``; an encoder that is not exact under the model's
            sliding window; options that are not JSON; a bad ``backend`` / ``query_block_size`` /
            ``seed``; a ``state_dict`` that does not fit (its keys named); ``name=None`` without
            ``config.pe_toolkit``.
    """
    from pe_toolkit.integrations.hf import checkpoint, legacy

    check_model(model)
    checkpoint.check_swappable(model)
    config = model.config
    if name is None:
        spec = getattr(config, CONFIG_KEY, None)
        if not isinstance(spec, dict) or not isinstance(spec.get("encoding"), str):
            raise ValueError(f"name=None reads model.config.{CONFIG_KEY} (written by swap_positional_encoding), but "
                             f"this {type(model).__name__}'s config has {spec!r}: pass the encoder's name")
        if legacy.is_legacy_spec(spec):  # saved before swapped models had their own type: build what it built
            spec = legacy.current_spec(config, spec, family_of(model))
        name = spec["encoding"]
        options = {**dict(spec.get("options") or {}), **options}
        backend = spec.get("backend", backend)
        query_block_size = spec.get("query_block_size", query_block_size)
        seed = spec.get("seed", seed) if seed is None else seed
        per_layer_type = spec.get("per_layer_type")
    else:
        per_layer_type = None
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (a registered encoder), got {type(name).__name__} ({name!r})")
    if query_block_size is not None and (isinstance(query_block_size, bool) or not isinstance(query_block_size, int)
                                         or query_block_size < 1):
        raise ValueError(f"query_block_size must be a positive int or None, got {query_block_size!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"seed must be an int or None, got {seed!r}")
    backend = check_backend(backend, query_block_size)
    base = getattr(model, model.base_model_prefix)
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    by_type_options = None
    if name == "rope":
        if per_layer_type is not None:  # reloading: the saved options are the first layer type's
            by_type_options = _rope_defaults(config, {}, family_of(model))[1]
        else:
            options, by_type_options = _rope_defaults(config, dict(options), family_of(model))
    with torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext():
        if seed is not None:
            torch.manual_seed(seed)
        encoding, options = _build_encoding(config, name, dict(options), heads, head_dim)
        by_layer_type = None
        if by_type_options is not None:
            by_layer_type = {kind: _build_encoding(config, name, dict(kind_options), heads, head_dim)[0]
                             for kind, kind_options in by_type_options.items()}
    if _has_sliding_layers(config) and not encoding.supports_window:
        raise ValueError(f"encoding {name!r} is not exact under sliding-window attention (config.sliding_window="
                         f"{config.sliding_window}): choose another encoder or a model without a window")
    reference = next(model.parameters())
    dtype = reference.dtype if reference.is_floating_point() else None
    device = reference.device if reference.device.type != "meta" else None
    encoding = encoding.to(device=device, dtype=dtype)
    if by_layer_type is not None:
        by_layer_type = {kind: enc.to(device=device, dtype=dtype) for kind, enc in by_layer_type.items()}
    if state_dict is not None:
        _load_encoder_state(encoding, by_layer_type, state_dict, name)
    swap = getattr(base, MODULE_NAME, None)
    new = PositionalSwap(encoding, name, options, backend=backend, query_block_size=query_block_size, seed=seed,
                         by_layer_type=by_layer_type)
    new.train(model.training)
    if isinstance(_active(swap), PositionalSwap):  # swapped before: keep the hooks, replace the module
        base._modules[MODULE_NAME] = new  # the hooks find the module by name
    else:
        setattr(base, MODULE_NAME, new)
        new.attach(base)
    config._attn_implementation = ATTN_IMPLEMENTATION
    checkpoint.make_swapped(model)  # first: the config class is then the swapped type, which may hold the spec
    prefix = f"{model.base_model_prefix}.{MODULE_NAME}.encoding."
    setattr(config, CONFIG_KEY, new.spec(prefix))
    return model


def _load_encoder_state(encoding: PositionalEncoding, by_layer_type: dict[str, PositionalEncoding] | None,
                        state_dict: dict[str, Tensor], name: str) -> None:
    """Load ``state_dict`` (the encoder's keys, or ``by_layer_type.<type>.`` keys too) into the new encoder(s)."""
    holder = nn.Module()
    holder.encoding = encoding
    if by_layer_type is not None:
        holder.by_layer_type = nn.ModuleDict(by_layer_type)
    if by_layer_type is None and not any(key.startswith("encoding.") for key in state_dict):
        target, state = encoding, state_dict
    else:
        target, state = holder, state_dict
    result = target.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(f"state_dict does not fit encoding {name!r}: missing {sorted(result.missing_keys)}, "
                         f"unexpected {sorted(result.unexpected_keys)}")


def swapped_encoding(model: Any) -> PositionalEncoding | None:
    """The encoder :func:`swap_positional_encoding` put into ``model`` (``None`` if it was not swapped);
    under PEFT's ``modules_to_save``, the adapter's copy that the layers use."""
    if hasattr(model, "get_base_model"):  # a PeftModel
        model = model.get_base_model()
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    swap = _active(getattr(base, MODULE_NAME, None))
    return _active(swap.encoding) if isinstance(swap, PositionalSwap) else None


def save_swapped(model: Any, directory: Any, **save_pretrained_kwargs: Any) -> None:
    """``model.save_pretrained(directory, **kwargs)`` for a swapped model, atomically (see :mod:`.checkpoint`)."""
    from pe_toolkit.integrations.hf import checkpoint

    checkpoint.save_swapped(model, directory, **save_pretrained_kwargs)


HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "token", "revision", "subfolder")
"""``from_pretrained`` keywords that :func:`load_swapped` also uses to find the checkpoint's files."""


def _checkpoint_tensors(path: Any, prefix: str, hub: dict[str, Any]) -> dict[str, Tensor]:
    """Every tensor whose key starts with ``prefix`` in the safetensors checkpoint at ``path`` (dir or hub id)."""
    from safetensors import safe_open
    from transformers.utils import cached_file

    index = cached_file(path, "model.safetensors.index.json", _raise_exceptions_for_missing_entries=False, **hub)
    if index is not None:
        with open(index) as handle:
            weight_map = json.load(handle)["weight_map"]
        files = sorted({file for key, file in weight_map.items() if key.startswith(prefix)})
        files = [cached_file(path, file, **hub) for file in files]
    else:
        single = cached_file(path, "model.safetensors", _raise_exceptions_for_missing_entries=False, **hub)
        if single is None:
            raise FileNotFoundError(f"{path}: no model.safetensors (or index) holding the encoder's parameters "
                                    "(save with save_pretrained, which writes safetensors)")
        files = [single]
    found: dict[str, Tensor] = {}
    for file in files:
        with safe_open(file, framework="pt") as handle:
            for key in handle.keys():
                if key.startswith(prefix):
                    found[key[len(prefix):]] = handle.get_tensor(key)
    return found


def load_swapped(path: Any, *, model_class: Any = None, **from_pretrained_kwargs: Any) -> Any:
    """Reload a model saved (``save_pretrained``) after :func:`swap_positional_encoding`.

    ``model_class.from_pretrained(path, **from_pretrained_kwargs)`` (default
    ``transformers.AutoModelForCausalLM``), which, with this module imported, builds the registered
    swapped class (:mod:`.checkpoint`) and loads the encoder's parameters with the model's. A checkpoint
    written before swapped models had their own model type (``model_type`` of the plain family) is
    rebuilt from ``config.pe_toolkit`` (as the old code built it, see :mod:`.legacy`) and its encoder's
    parameters read from the safetensors files, with a :class:`~.legacy.LegacySwappedCheckpointWarning`
    that plain ``from_pretrained`` does not (:func:`~.legacy.migrate_checkpoint` rewrites the folder).
    Logits equal those of the saved model.

    Raises:
        ValueError: the checkpoint's config has no ``pe_toolkit`` entry (not a swapped model), or the
            checkpoint lacks some of the encoder's parameters (named).
    """
    from pe_toolkit.integrations.hf import checkpoint, legacy  # noqa: F401 (registers the swapped model types)

    model_class = transformers.AutoModelForCausalLM if model_class is None else model_class
    with legacy.quiet():
        model = model_class.from_pretrained(path, **from_pretrained_kwargs)
    spec = getattr(model.config, CONFIG_KEY, None)
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: config.json has no {CONFIG_KEY!r} entry, so it was not saved from a model that "
                         "swap_positional_encoding changed; load it with from_pretrained")
    if swapped_encoding(model) is not None:
        return model
    if legacy.is_legacy_spec(spec):
        warnings.warn(f"{str(path)!r} is a swapped checkpoint in the format before swapped models had their own model "
                      "type: load_swapped rebuilds it, but plain from_pretrained (pipelines, evaluation harnesses, "
                      "servers) builds the un-swapped model from it; rewrite the folder once with "
                      f"pe_toolkit.integrations.hf.migrate_checkpoint({str(path)!r})",
                      legacy.LegacySwappedCheckpointWarning, stacklevel=2)
    swap_positional_encoding(model)
    encoding = swapped_encoding(model)
    expected = encoding.state_dict()
    if expected:
        hub = {key: from_pretrained_kwargs[key] for key in HUB_KWARGS if key in from_pretrained_kwargs}
        prefix = spec.get("state_dict_prefix") or f"{model.base_model_prefix}.{MODULE_NAME}.encoding."
        found = _checkpoint_tensors(path, prefix, hub)
        missing = sorted(set(expected) - set(found))
        if missing:
            raise ValueError(f"{path}: the checkpoint lacks the parameters {[prefix + key for key in missing]} of "
                             f"encoding {spec['encoding']!r}")
        encoding.load_state_dict({key: found[key] for key in expected})
    return model
