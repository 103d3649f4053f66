"""Any registered sequence encoder inside a Hugging Face Llama / Qwen2 / Mistral causal LM, in place.

:func:`swap_positional_encoding` replaces every layer's ``self_attn`` by a :class:`SwappedAttention`
that keeps the layer's ``q_proj`` / ``k_proj`` / ``v_proj`` / ``o_proj`` (the same modules, so the
state-dict keys of the checkpoint stay valid) and runs this toolkit's attention instead of HF's:
``encoding.rotate`` on queries and keys, :func:`~pe_toolkit.nn.backends.attend` (backend ``"auto"``
by default) with the encoding's bias. The model's own ``forward``, ``generate``, ``save_pretrained``
and training loop keep working; HF's rotary embedding is still evaluated by the base model but
never applied.

>>> model = swap_positional_encoding(model, "alibi")                      # doctest: +SKIP
>>> model.generate(ids, attention_mask=mask, max_new_tokens=20)             # doctest: +SKIP
>>> model.save_pretrained("alibi-llama"); model = load_swapped("alibi-llama")  # doctest: +SKIP

Design:

* **One encoder** for all layers (as :class:`pe_toolkit.Transformer` shares one), registered on the
  base model as ``model.model.pe_toolkit.encoding`` (a :class:`PositionalSwap`): its parameters are in
  ``model.parameters()`` (trainable) and in the state dict under ``model.pe_toolkit.encoding.``.
  The layers refer to it without registering it again (no duplicate state-dict entries). A bias
  encoder builds its bias once per forward for all layers (its ``forward_scope``), except under HF
  gradient checkpointing, where each recomputed layer builds its own.
* **Positions** are HF's ``position_ids``, which the decoder layers pass to ``self_attn``: ``arange``
  continued past the cache, or, in ``generate`` with an ``attention_mask``, ``cumsum(mask) - 1`` (0 on
  padding), so each left-padded prompt counts from 0 at its first real token.
* **Masks**: HF hands the attention a 4D mask (or ``None``) in a format that depends on
  ``attn_implementation``; it is ignored. A forward pre-hook on the base model reads the 2D
  ``attention_mask`` (``(B, past + L)``, 1 = real token) and passes it to every layer (as the keyword
  ``pe_toolkit_inputs``), which builds ``AttentionMask(L, keys, causal=True, key_padding_mask=...)``. A
  padding query sees no key; :class:`~pe_toolkit.nn.masks.AttentionMask` then gives it every key, so
  its (ignored) output is finite, never NaN. Packed sequences follow HF's rule: without a cache and
  without an ``attention_mask``, ``position_ids`` that restart mark documents, which do not attend to
  each other. A sliding window (Mistral ``sliding_window``, Qwen2 ``"sliding_attention"`` layers) is
  the mask's ``window`` (the same rule as HF: a query sees its last ``sliding_window`` keys).
* **KV cache**: keys enter HF's cache already rotated (``cache.update``, as HF does). HF's cache holds
  no positions, so each layer records the positions of its keys on its cache layer (attribute
  ``_pe_toolkit_key_positions``, which ``copy.deepcopy`` of a cache keeps); a bias encoder reads
  them. A cache cropped from the end (assisted decoding) is followed; a cache whose keys were not
  recorded (filled before the swap, or re-batched with ``batch_select_indices``) is refused.
* **Embed hooks** (``sinusoidal``, ``scaled_sinusoidal``, ``learned``): the same pre-hook replaces
  ``input_ids`` by ``inputs_embeds = encoding.embed(embed_tokens(input_ids), position_ids)`` (also
  for given ``inputs_embeds``), as :class:`pe_toolkit.Transformer` adds them once to the input.
* **Saving**: ``model.config.pe_toolkit = {"encoding", "options", "backend", "query_block_size",
  "state_dict_prefix"}`` goes into ``config.json``; ``save_pretrained`` writes the encoder's
  parameters with the model's. HF's ``from_pretrained`` builds the plain model (and drops the
  encoder keys as unexpected); :func:`load_swapped` loads, swaps from ``config.pe_toolkit`` and then
  loads the encoder's parameters from the checkpoint.

Not covered (refused where detectable): static and other pre-allocated caches
(``cache_implementation="static"``), 4D custom ``attention_mask``, ``output_attentions`` (the
swapped layers return no attention weights), 3D (multimodal) ``position_ids``, and the choice of
HF's ``attn_implementation`` (our ``backend=`` decides; HF still builds its mask, unused).
Length-dependent RoPE scalings (``dynamic``, ``longrope``) rotate cached keys once, as HF does, so
past ``original_max_position`` cached decoding differs from a full forward (see the ``rope`` encoder).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

import transformers  # noqa: E402

from pe_toolkit.encoders.base import PositionalEncoding, PositionBiasEncoding  # noqa: E402
from pe_toolkit.nn.attention import check_backend  # noqa: E402
from pe_toolkit.nn.backends import attend  # noqa: E402
from pe_toolkit.nn.masks import AttentionMask  # noqa: E402
from pe_toolkit.registry import encoder_info, get_encoder, list_encoders  # noqa: E402

SUPPORTED = ("LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM")
"""The HF causal-LM classes whose attention layers :func:`swap_positional_encoding` replaces."""

CONFIG_KEY = "pe_toolkit"
"""``model.config.pe_toolkit``: the swap's description, saved in ``config.json``."""

MODULE_NAME = "pe_toolkit"
"""Attribute of the base model (``model.model``) holding the :class:`PositionalSwap`."""

INPUTS_KWARG = "pe_toolkit_inputs"
"""Keyword the base-model pre-hook adds; HF passes it through every decoder layer to ``self_attn``."""

POSITIONS_ATTR = "_pe_toolkit_key_positions"
"""Attribute of an HF cache layer holding the positions of its keys (``(K,)`` or ``(B, K)``)."""


def _supported_classes() -> tuple[type, ...]:
    return tuple(getattr(transformers, name) for name in SUPPORTED)


def check_model(model: Any) -> None:
    """``TypeError`` naming ``model``'s class unless it is one of :data:`SUPPORTED` (or a subclass)."""
    if not isinstance(model, _supported_classes()):
        raise TypeError(f"model must be one of {', '.join(SUPPORTED)} (a Hugging Face causal LM), "
                        f"got {type(model).__name__}")


@dataclass
class _Inputs:
    """What the base-model pre-hook hands every layer for one forward."""

    padding: Tensor | None      # bool (B, past + L), True = real token; None when every token is real
    documents: Tensor | None    # (B, L) run ids of packed sequences (position_ids without a mask), or None


class PositionalSwap(nn.Module):
    """The swapped-in encoder and how the attention runs it; ``model.model.pe_toolkit``.

    Holds the encoder as the submodule ``encoding`` (its parameters train and are saved with the
    model) and installs the base model's forward hooks: the pre-hook reads the 2D
    ``attention_mask`` and ``position_ids`` (see the module docstring), adds an ``embed`` hook's
    output to the input embeddings, and opens the bias encoder's
    :meth:`~pe_toolkit.encoders.base.PositionBiasEncoding.forward_scope` (one bias per forward, shared
    by the layers); the post-hook closes it (also when the forward raises).
    """

    def __init__(self, encoding: PositionalEncoding, name: str, options: dict[str, Any], *, backend: str,
                 query_block_size: int | None) -> None:
        super().__init__()
        self.encoding = encoding
        self.name = name
        self.options = options
        self.backend = backend
        self.query_block_size = query_block_size
        self._scopes: list[Any] = []
        self._handles: list[Any] = []
        self._parameter_names: list[str] | None = None

    @property
    def embeds(self) -> bool:
        """Whether the encoder has an ``embed`` hook (added to the input embeddings)."""
        return type(self.encoding).embed is not PositionalEncoding.embed

    def spec(self, prefix: str) -> dict[str, Any]:
        """The ``config.pe_toolkit`` entry: JSON only."""
        return {"encoding": self.name, "options": dict(self.options), "backend": self.backend,
                "query_block_size": self.query_block_size, "state_dict_prefix": prefix}

    def attach(self, base: nn.Module) -> None:
        """Install the forward hooks on ``base`` (the ``LlamaModel`` / ``Qwen2Model`` / ``MistralModel``)."""
        signature = inspect.signature(base.forward)
        self._parameter_names = [p.name for p in signature.parameters.values()
                                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._handles = [base.register_forward_pre_hook(self._before, with_kwargs=True),
                         base.register_forward_hook(self._after, with_kwargs=True, always_call=True)]

    def _before(self, base: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        names = self._parameter_names or []
        if args and len(args) <= len(names):
            kwargs = {**dict(zip(names, args, strict=False)), **kwargs}
            args = ()
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        mask = kwargs.get("attention_mask")
        position_ids = kwargs.get("position_ids")
        padding = None
        if mask is not None:
            if not isinstance(mask, Tensor) or mask.dim() != 2:
                shape = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
                raise ValueError(f"attention_mask must be a 2D padding mask (batch, keys) with 1 for real tokens, got "
                                 f"{shape}: a model swapped to {self.name!r} builds its own causal mask (4D custom "
                                 "masks are not covered)")
            padding = mask if mask.dtype == torch.bool else mask != 0
            if bool(padding.all()):
                padding = None
        documents = None
        if mask is None and isinstance(position_ids, Tensor) and position_ids.dim() == 2 and position_ids.shape[-1] > 1:
            # HF's find_packed_sequence_indices: a new document wherever the position does not grow by 1
            diff = torch.diff(position_ids, prepend=position_ids[:, :1] - 1, dim=-1)
            runs = (diff != 1).long().cumsum(-1)
            documents = runs if bool((runs[:, -1] != 0).any()) else None
        kwargs[INPUTS_KWARG] = _Inputs(padding=padding, documents=documents)
        if self.embeds:
            embeds = kwargs.get("inputs_embeds")
            if embeds is None and kwargs.get("input_ids") is not None:
                embeds = base.embed_tokens(kwargs["input_ids"])
            if embeds is not None:
                length = embeds.shape[1]
                if position_ids is None:
                    past = int(cache.get_seq_length()) if cache is not None else 0
                    positions = torch.arange(past, past + length, device=embeds.device)
                else:
                    positions = _query_positions(position_ids, embeds.shape[0], length, 0, embeds.device)
                kwargs["inputs_embeds"] = self.encoding.embed(embeds, positions)
                kwargs["input_ids"] = None
        # HF gradient checkpointing recomputes each layer in the backward pass, where a bias shared by the
        # layers would be rebuilt per layer (a different recomputed graph): then every layer builds its own
        checkpointed = torch.is_grad_enabled() and any(
            getattr(layer, "gradient_checkpointing", False) and layer.training for layer in base.layers)
        if isinstance(self.encoding, PositionBiasEncoding) and not checkpointed:
            scope = self.encoding.forward_scope()
            scope.__enter__()
            self._scopes.append(scope)
        return args, kwargs

    def _after(self, base: nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        if self._scopes:
            self._scopes.pop().__exit__(None, None, None)

    def extra_repr(self) -> str:
        text = f"name={self.name!r}, backend={self.backend!r}"
        return text + (f", query_block_size={self.query_block_size}" if self.query_block_size else "")


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


class SwappedAttention(nn.Module):
    """An HF decoder layer's ``self_attn`` with a pe_toolkit encoder: the same projections, our attention.

    ``forward(hidden_states, position_embeddings, attention_mask, cache, **kwargs) -> (output, None)``
    has HF's signature; ``position_embeddings`` (HF's cos / sin) and the 4D ``attention_mask`` are
    ignored, the positions come from ``kwargs["position_ids"]`` and the padding from the base model's
    pre-hook (see :mod:`pe_toolkit.integrations.hf.swap`).

    Attributes:
        q_proj, k_proj, v_proj, o_proj: the original layer's modules (same parameters, same keys).
        layer_idx: the layer's index into HF's cache.
        window: the layer's sliding window (``None``: full causal attention).
    """

    def __init__(self, original: nn.Module, swap: PositionalSwap, window: int | None) -> None:
        super().__init__()
        self.config = original.config
        self.layer_idx = original.layer_idx
        self.head_dim = original.head_dim
        self.num_key_value_groups = original.num_key_value_groups
        self.scaling = original.scaling
        self.attention_dropout = original.attention_dropout
        self.is_causal = True
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (original.q_proj, original.k_proj, original.v_proj,
                                                              original.o_proj)
        self.window = window
        self.replaced = type(original).__name__
        object.__setattr__(self, "swap", swap)  # shared, registered once on the base model

    @property
    def encoding(self) -> PositionalEncoding:
        return self.swap.encoding

    def forward(self, hidden_states: Tensor, position_embeddings: Any = None, attention_mask: Any = None,
                cache: Any = None, **kwargs: Any) -> tuple[Tensor, None]:
        if cache is None:  # the name before transformers 5
            cache = kwargs.pop("past_key_values", None)
        inputs: _Inputs | None = kwargs.get(INPUTS_KWARG)
        if inputs is None:
            if attention_mask is not None:
                raise ValueError(f"{type(self).__name__} (layer {self.layer_idx}) was called outside its base "
                                 "model's forward, so the 2D attention_mask is unknown: call the model itself")
            inputs = _Inputs(padding=None, documents=None)
        encoding = self.swap.encoding
        batch, length, _ = hidden_states.shape
        shape = (batch, length, -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        past = int(cache.get_seq_length(self.layer_idx)) if cache is not None else 0
        q_pos = _query_positions(kwargs.get("position_ids"), batch, length, past, hidden_states.device)
        q, k = encoding.rotate(q, k, q_pos, q_pos)
        if cache is not None:
            earlier = self._recorded_positions(cache, past, batch)
            k, v = cache.update(k, v, self.layer_idx, kwargs=kwargs)
            seen = _join(earlier, q_pos, batch)
            keys = k.shape[-2]
            if keys > seen.shape[-1]:
                kind = f"{type(cache).__name__}, layer {type(cache.layers[self.layer_idx]).__name__}"
                raise ValueError(f"the cache ({kind}) returned {keys} keys for {seen.shape[-1]} tokens seen: only "
                                 "caches that return the keys seen so far (DynamicCache, with or without a sliding "
                                 "window) are covered, not pre-allocated ones (cache_implementation='static')")
            setattr(cache.layers[self.layer_idx], POSITIONS_ATTR, seen)
            k_pos = seen[..., seen.shape[-1] - keys:]
        else:
            keys, k_pos = length, q_pos
        padding = inputs.padding
        if padding is not None:
            if tuple(padding.shape) != (batch, past + length):
                raise ValueError(f"attention_mask has shape {tuple(padding.shape)}, expected ({batch}, "
                                 f"{past + length}): one entry per cached ({past}) and new ({length}) token")
            padding = padding[:, padding.shape[1] - keys:]
        documents = inputs.documents if cache is None else None
        if documents is not None and not encoding.supports_documents:
            raise ValueError(f"encoding {self.swap.name!r} is not exact on packed sequences (position_ids that "
                             "restart); run the documents separately or pass an attention_mask")
        mask = AttentionMask(length, keys, causal=True, key_padding_mask=padding, q_documents=documents,
                             k_documents=documents, window=self.window)
        out = attend(q, k, v, q_pos, k_pos, encoding, mask, backend=self.swap.backend,
                     tile=self.swap.query_block_size, dropout=self.attention_dropout if self.training else 0.0)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1)), None

    def _recorded_positions(self, cache: Any, past: int, batch: int) -> Tensor | None:
        """Positions of the ``past`` tokens this layer's cache has seen (recorded by earlier calls)."""
        if past == 0:
            return None
        layer = cache.layers[self.layer_idx] if self.layer_idx < len(cache.layers) else None
        recorded = getattr(layer, POSITIONS_ATTR, None)
        if recorded is not None and recorded.dim() == 2 and recorded.shape[0] != batch:
            if recorded.shape[0] and batch % recorded.shape[0] == 0:  # batch_repeat_interleave
                recorded = recorded.repeat_interleave(batch // recorded.shape[0], dim=0)
            else:
                recorded = None
        if recorded is None or recorded.shape[-1] < past:
            raise ValueError(f"the cache holds {past} tokens for layer {self.layer_idx} whose positions the swapped "
                             f"attention did not record (a cache filled before swap_positional_encoding, or "
                             "re-batched with batch_select_indices): start from an empty cache")
        return recorded[..., :past]  # a cache cropped from the end keeps the first `past`

    def extra_repr(self) -> str:
        text = f"layer_idx={self.layer_idx}, replaces={self.replaced}"
        return text + (f", window={self.window}" if self.window is not None else "")


def _layer_windows(config: Any) -> list[int | None]:
    """The sliding window of each layer (``None``: full attention), as HF's attention reads it."""
    count = config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    if config.model_type == "llama" or window is None:
        return [None] * count
    types = getattr(config, "layer_types", None)
    if types is None:  # Mistral: every layer
        return [window] * count
    unknown = sorted(set(types) - {"full_attention", "sliding_attention"})
    if unknown:
        raise ValueError(f"config.layer_types holds {unknown}: only 'full_attention' and 'sliding_attention' "
                         "layers are covered")
    return [window if kind == "sliding_attention" else None for kind in types]


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


def swap_positional_encoding(model: Any, name: str | None = None, *, backend: str = "auto",
                             query_block_size: int | None = None, **options: Any) -> Any:
    """Make an HF Llama / Qwen2 / Mistral causal LM use the registered encoder ``name``, in place.

    Every decoder layer's ``self_attn`` becomes a :class:`SwappedAttention` (same projection
    modules, so ``state_dict`` keys and weights are unchanged) and one encoder, built as
    ``get_encoder(name, num_attention_heads * head_dim, num_attention_heads, causal=True, **options)``,
    serves all layers. ``model.forward`` and ``model.generate`` (KV cache, left-padded batches through
    ``attention_mask``) then use it; its parameters are trainable and saved. Swapping a swapped model
    again replaces the encoder. See the module docstring for masks, positions and the cache.

    Args:
        model: ``LlamaForCausalLM``, ``Qwen2ForCausalLM`` or ``MistralForCausalLM`` (or subclasses).
        name: a registered sequence encoder (``"rope"``, ``"alibi"``, ``"t5"``, ``"fire"``, ...);
            ``None`` reads ``model.config.pe_toolkit`` (a reloaded swapped checkpoint; the encoder's
            parameters are then freshly initialised, :func:`load_swapped` also loads them).
        backend: ``"auto"`` (default), ``"sdpa"``, ``"blocked"`` or ``"flex"``
            (:mod:`pe_toolkit.nn.backends`).
        query_block_size: tile size of the ``"blocked"`` backend (selects it under ``"auto"``).
        **options: the encoder's options (JSON values; saved in ``config.pe_toolkit``). ``learned``'s
            ``max_len`` defaults to ``config.max_position_embeddings``.

    Returns:
        ``model`` itself, with ``model.config.pe_toolkit`` set and the encoder, in the model's dtype
        and on its device, at ``model.model.pe_toolkit.encoding``.

    Raises:
        TypeError: ``model`` is not a supported HF causal LM (the message names its class), or the
            encoder rejects an option.
        ValueError: an unknown or non-sequence encoder; ``causal=False``; a ``learned`` ``max_len``
            below ``config.max_position_embeddings``; an encoder that is not exact under the model's
            sliding window; options that are not JSON; a bad ``backend`` / ``query_block_size``;
            ``name=None`` without ``config.pe_toolkit``.
    """
    check_model(model)
    config = model.config
    if name is None:
        spec = getattr(config, CONFIG_KEY, None)
        if not isinstance(spec, dict) or not isinstance(spec.get("encoding"), str):
            raise ValueError(f"name=None reads model.config.{CONFIG_KEY} (written by swap_positional_encoding), but "
                             f"this {type(model).__name__}'s config has {spec!r}: pass the encoder's name")
        name = spec["encoding"]
        options = {**dict(spec.get("options") or {}), **options}
        backend = spec.get("backend", backend)
        query_block_size = spec.get("query_block_size", query_block_size)
    if not isinstance(name, str):
        raise TypeError(f"name must be a str (a registered encoder), got {type(name).__name__} ({name!r})")
    if query_block_size is not None and (isinstance(query_block_size, bool) or not isinstance(query_block_size, int)
                                         or query_block_size < 1):
        raise ValueError(f"query_block_size must be a positive int or None, got {query_block_size!r}")
    backend = check_backend(backend, query_block_size)
    base = getattr(model, model.base_model_prefix)  # LlamaModel / Qwen2Model / MistralModel
    layers = list(base.layers)
    first = layers[0].self_attn
    heads, head_dim = config.num_attention_heads, first.head_dim
    windows = _layer_windows(config)
    encoding, options = _build_encoding(config, name, dict(options), heads, head_dim)
    if any(w is not None for w in windows) and not encoding.supports_window:
        raise ValueError(f"encoding {name!r} is not exact under sliding-window attention (config.sliding_window="
                         f"{config.sliding_window}): choose another encoder or a model without a window")
    reference = next(model.parameters())
    dtype = reference.dtype if reference.is_floating_point() else None
    encoding = encoding.to(device=reference.device, dtype=dtype)
    swap = getattr(base, MODULE_NAME, None)
    if isinstance(swap, PositionalSwap):  # swapped before: replace the encoder, keep the layers and hooks
        swap.encoding, swap.name, swap.options = encoding, name, options
        swap.backend, swap.query_block_size = backend, query_block_size
    else:
        swap = PositionalSwap(encoding, name, options, backend=backend, query_block_size=query_block_size)
        setattr(base, MODULE_NAME, swap)
        swap.attach(base)
    for layer, window in zip(layers, windows, strict=True):
        if not isinstance(layer.self_attn, SwappedAttention):
            layer.self_attn = SwappedAttention(layer.self_attn, swap, window)
    swap.train(model.training)
    prefix = f"{model.base_model_prefix}.{MODULE_NAME}.encoding."
    setattr(config, CONFIG_KEY, swap.spec(prefix))
    return model


def swapped_encoding(model: Any) -> PositionalEncoding | None:
    """The encoder :func:`swap_positional_encoding` put into ``model`` (``None`` if it was not swapped)."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    swap = getattr(base, MODULE_NAME, None)
    return swap.encoding if isinstance(swap, PositionalSwap) else None


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
    ``transformers.AutoModelForCausalLM``) builds the HF model, which drops the encoder's keys;
    then the swap of ``config.pe_toolkit`` is applied again and the encoder's parameters (state-dict
    keys under ``config.pe_toolkit["state_dict_prefix"]``) are loaded from the checkpoint's
    safetensors files, local or on the Hub. Logits equal those of the saved model.

    Raises:
        ValueError: the checkpoint's config has no ``pe_toolkit`` entry (not a swapped model), or the
            checkpoint lacks some of the encoder's parameters (named).
    """
    model_class = transformers.AutoModelForCausalLM if model_class is None else model_class
    model = model_class.from_pretrained(path, **from_pretrained_kwargs)
    spec = getattr(model.config, CONFIG_KEY, None)
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: config.json has no {CONFIG_KEY!r} entry, so it was not saved from a model that "
                         "swap_positional_encoding changed; load it with from_pretrained")
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
