"""Weights both ways between Hugging Face Llama-family models and :class:`pe_toolkit.Transformer`.

Covered layouts: ``LlamaForCausalLM``, ``Qwen2ForCausalLM`` (q/k/v biases), ``MistralForCausalLM``
(its sliding window becomes ``attention_window``) and ``Qwen3ForCausalLM`` (its per-head ``q_norm`` /
``k_norm`` become ``qk_norm=True``, with ``rms_norm_eps``). The two models compute the same function:

* token embedding -> per layer ``x + attn(RMSNorm(x))``, ``x + SwiGLU(RMSNorm(x))`` -> RMSNorm -> head,
* ``attn``: grouped-query attention with RoPE on queries and keys (after Qwen3's per-head RMSNorm of
  each), scale ``1 / sqrt(head_dim)``,
* RMSNorm with the checkpoint's ``rms_norm_eps`` (``TransformerConfig.norm_eps``),
* the checkpoint's RoPE, with its scaling, as the ``rope`` encoder
  (:func:`~pe_toolkit.integrations.hf.rope_config.rope_options_from_hf`).

HF computes RoPE angles in float32 (``inv_freq @ position_ids``), this toolkit in float64, so logits
differ by float32 rounding of the angles (measured: ~1e-6 at a few hundred positions, see
``tests/integrations/test_hf_weights.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

import transformers  # noqa: E402

from pe_toolkit.encoders.rotary import RotaryEncoding  # noqa: E402
from pe_toolkit.nn.transformer import Transformer, TransformerConfig  # noqa: E402

SUPPORTED = {
    "LlamaForCausalLM": ("LlamaConfig", "llama"),
    "Qwen2ForCausalLM": ("Qwen2Config", "qwen2"),
    "MistralForCausalLM": ("MistralConfig", "mistral"),
    "Qwen3ForCausalLM": ("Qwen3Config", "qwen3"),
}
"""HF causal-LM classes whose weights port exactly, with their config class and ``model_type``."""

MODEL_TYPES = {model_type: name for name, (_, model_type) in SUPPORTED.items()}


def _model_type(config: Any) -> str:
    """``config.model_type``, that of the family for a swapped model's config (``pe_toolkit_llama`` -> ``llama``)."""
    return str(config.model_type).removeprefix("pe_toolkit_")


NOT_REPRESENTED = {
    "Gemma2ForCausalLM": "attn_logit_softcapping / final_logit_softcapping, query_pre_attn_scalar, the GELU MLP and "
                         "the post-attention / feed-forward norms",
    "Gemma3ForCausalLM": "query_pre_attn_scalar, q_norm / k_norm, per-layer-type rope_parameters and layer_types "
                         "mixing sliding and full attention",
    "Phi3ForCausalLM": "the fused qkv_proj / gate_up_proj and partial_rotary_factor",
    "Olmo2ForCausalLM": "q_norm / k_norm over the whole query / key width and norms after (not before) each sublayer",
    "GPTNeoXForCausalLM": "use_parallel_residual, the fused query_key_value, LayerNorm and partial rotary "
                          "(partial_rotary_factor)",
    "GraniteForCausalLM": "embedding_multiplier, residual_multiplier, attention_multiplier and logits_scaling",
    "SmolLM3ForCausalLM": "no_rope_layers (layers without RoPE; the Transformer has one encoder for all layers)",
    "MinistralForCausalLM": "layer_types mixing sliding_window and full-attention layers (one window for all layers)",
}
"""Families :func:`swap_positional_encoding` serves but :func:`from_hf` does not port, with the fields why."""


def check_supported(model: Any) -> str:
    """The ``model_type`` of a supported HF causal LM; ``TypeError`` naming the class (and, for a family
    the swap serves, the fields the Transformer cannot represent) otherwise."""
    classes = [c.__name__ for c in type(model).__mro__ if c.__module__.startswith("transformers.")]
    name = next((c for c in classes if c in SUPPORTED), type(model).__name__)
    if not isinstance(model, transformers.PreTrainedModel) or name not in SUPPORTED:
        family = next((c for c in classes if c.endswith("ForCausalLM")), None)
        if family is not None:
            reason = NOT_REPRESENTED.get(family, "a layout other than Llama / Qwen2 / Mistral / Qwen3")
            raise TypeError(f"from_hf / to_hf cannot represent {family} as a pe_toolkit Transformer: {reason}. "
                            f"They port {', '.join(SUPPORTED)}; swap_positional_encoding(model, name) changes this "
                            "model's positional encoding in place")
        raise TypeError(f"model must be one of {', '.join(SUPPORTED)} (a Hugging Face causal LM), got {name}")
    return SUPPORTED[name][1]


def _window(config: Any) -> int | None:
    """The one sliding window of every layer, or ``None``; mixed full / sliding layers are refused."""
    model_type = _model_type(config)
    if model_type == "mistral":
        return config.sliding_window
    if model_type in ("qwen2", "qwen3"):
        kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
        if kinds == {"full_attention"}:
            return None
        if kinds == {"sliding_attention"}:
            return config.sliding_window
        raise ValueError(f"{type(config).__name__} layer_types mixes full and sliding-window layers ({sorted(kinds)}): "
                         "a pe_toolkit Transformer has one window for every layer")
    return None


def transformer_config_from_hf(config: Any, *, encoding: str | None = None,
                               encoding_options: dict[str, Any] | None = None, **overrides: Any) -> TransformerConfig:
    """Our :class:`TransformerConfig` for an HF Llama / Qwen2 / Mistral / Qwen3 config.

    ``encoding`` (default: the checkpoint's RoPE as ``"rope"`` with
    :func:`~pe_toolkit.integrations.hf.rope_config.rope_options_from_hf`) and ``encoding_options``
    swap the positional encoding; ``overrides`` set other fields (``attention_backend``, ...).

    Raises:
        TypeError: an unsupported config class.
        ValueError: a feature the Transformer cannot represent (``hidden_act`` other than SiLU,
            ``head_dim`` other than ``hidden_size / num_attention_heads``, an MLP or output-projection
            bias, mixed sliding-window layers), named with its value.
    """
    from pe_toolkit.integrations.hf.rope_config import rope_options_from_hf

    if not isinstance(config, transformers.PretrainedConfig) or _model_type(config) not in MODEL_TYPES:
        allowed = ", ".join(cls for cls, _ in SUPPORTED.values())
        raise TypeError(f"config must be one of {allowed}, got {type(config).__name__}")
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    if head_dim * heads != config.hidden_size:
        raise ValueError(f"head_dim={head_dim} with num_attention_heads={heads} does not give hidden_size="
                         f"{config.hidden_size}: a pe_toolkit Transformer uses head_dim = dim / num_heads")
    if config.hidden_act != "silu":
        raise ValueError(f"hidden_act={config.hidden_act!r}: a pe_toolkit Transformer's SwiGLU uses 'silu'")
    if getattr(config, "mlp_bias", False):
        raise ValueError("mlp_bias=True: a pe_toolkit Transformer's MLP has no biases")
    qkv_bias = _model_type(config) == "qwen2" or bool(getattr(config, "attention_bias", False))
    if _model_type(config) in ("llama", "qwen3") and getattr(config, "attention_bias", False):
        raise ValueError(f"attention_bias=True ({type(config).__name__}: q, k, v and output projections): a "
                         "pe_toolkit Transformer has q/k/v biases only (Qwen2's layout)")
    if encoding is None:
        encoding, options = "rope", rope_options_from_hf(config)
        options.update(encoding_options or {})
    else:
        options = dict(encoding_options or {})
    fields = dict(
        vocab_size=config.vocab_size, dim=config.hidden_size, num_heads=heads,
        num_layers=config.num_hidden_layers, num_kv_heads=config.num_key_value_heads, causal=True,
        encoding=encoding, encoding_options=options, norm="rmsnorm", norm_eps=config.rms_norm_eps,
        qkv_bias=qkv_bias, mlp="swiglu", mlp_hidden=config.intermediate_size,
        tie_embeddings=bool(config.tie_word_embeddings), attention_window=_window(config),
        qk_norm=_model_type(config) == "qwen3",
    )
    fields.update(overrides)
    return TransformerConfig(**fields)


def _pairs(hf_model: Any, ours: Transformer) -> list[tuple[nn.Parameter, nn.Parameter]]:
    """``(hf_parameter, our_parameter)`` for every weight of the layout."""
    base = hf_model.model
    pairs = [(base.embed_tokens.weight, ours.token_embedding.weight), (base.norm.weight, ours.final_norm.weight)]
    for hf_layer, block in zip(base.layers, ours.blocks, strict=True):
        attn, mlp = hf_layer.self_attn, hf_layer.mlp
        pairs += [
            (hf_layer.input_layernorm.weight, block.attn_norm.weight),
            (hf_layer.post_attention_layernorm.weight, block.mlp_norm.weight),
            (attn.q_proj.weight, block.attn.q_proj.weight), (attn.k_proj.weight, block.attn.k_proj.weight),
            (attn.v_proj.weight, block.attn.v_proj.weight), (attn.o_proj.weight, block.attn.o_proj.weight),
            (mlp.gate_proj.weight, block.mlp.gate.weight), (mlp.up_proj.weight, block.mlp.up.weight),
            (mlp.down_proj.weight, block.mlp.down.weight),
        ]
        if block.attn.q_norm is not None:
            pairs += [(attn.q_norm.weight, block.attn.q_norm.weight), (attn.k_norm.weight, block.attn.k_norm.weight)]
        if block.attn.q_proj.bias is not None:
            pairs += [(attn.q_proj.bias, block.attn.q_proj.bias), (attn.k_proj.bias, block.attn.k_proj.bias),
                      (attn.v_proj.bias, block.attn.v_proj.bias)]
    if not ours.config.tie_embeddings:
        pairs.append((hf_model.lm_head.weight, ours.lm_head.weight))
    return pairs


def from_hf(model: Any, *, encoding: str | None = None, encoding_options: dict[str, Any] | None = None,
            **overrides: Any) -> Transformer:
    """A :class:`pe_toolkit.Transformer` with the weights of an HF Llama / Qwen2 / Mistral / Qwen3 causal LM.

    With the default ``encoding`` the result computes the same logits (float32: 1e-5) and greedy
    tokens; another registered ``encoding`` (``"alibi"``, ``"rope"`` with other ``encoding_options``,
    ...) keeps every weight and changes only the positions. The result has ``model``'s dtype and
    device and is in eval mode if ``model`` is.

    Raises:
        TypeError: ``model`` is not a supported HF causal LM (the message names its class).
        ValueError: see :func:`transformer_config_from_hf`.
    """
    check_supported(model)
    config = transformer_config_from_hf(model.config, encoding=encoding, encoding_options=encoding_options,
                                        **overrides)
    reference = next(model.parameters())
    ours = Transformer(config).to(device=reference.device)
    with torch.no_grad():
        for hf_param, our_param in _pairs(model, ours):
            if hf_param.shape != our_param.shape:
                raise ValueError(f"weight of shape {tuple(hf_param.shape)} does not fit {tuple(our_param.shape)}")
            our_param.copy_(hf_param.float())
    ours = ours.to(reference.dtype)
    return ours.train(model.training)


def hf_config_from_transformer(model: Transformer, like: Any = None) -> Any:
    """The HF config for our ``model``: ``like``'s class and non-architectural fields (token ids, ...),
    our sizes, norm epsilon, biases, window and RoPE
    (:func:`~pe_toolkit.integrations.hf.rope_config.rope_config_to_hf`).

    ``like``: an HF config or model of a supported class; ``None``: ``LlamaConfig`` (``Qwen2Config``
    when the model has q/k/v biases, ``Qwen3Config`` when it has QK-norm).

    Raises:
        TypeError: ``model`` is not a Transformer, or ``like`` is not a supported config / model.
        ValueError: what an HF Llama-family model cannot represent (an encoding other than ``rope``, a
            LayerNorm or GELU model, MLA, QK-norm other than into Qwen3 (or Qwen3 without it), untied
            encodings per layer, a bidirectional model, q/k/v biases into Mistral), named.
    """
    from pe_toolkit.integrations.hf.rope_config import rope_config_to_hf

    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a pe_toolkit Transformer, got {type(model).__name__}")
    cfg = model.config
    problems = {
        "encoding": (cfg.encoding != "rope", f"{cfg.encoding!r}: HF Llama-family models have RoPE only "
                     "(keep the HF model and use swap_positional_encoding for other encoders)"),
        "norm": (cfg.norm != "rmsnorm", f"{cfg.norm!r}: HF Llama-family models use RMSNorm"),
        "mlp": (cfg.mlp != "swiglu", f"{cfg.mlp!r}: HF Llama-family models use SwiGLU"),
        "attention": (cfg.attention != "mha", f"{cfg.attention!r}: HF Llama-family models have no MLA"),
        "causal": (not cfg.causal, "False: HF causal LMs are causal"),
        "cross_attention": (cfg.cross_attention, "True: HF causal LMs have no cross-attention"),
        "vocab_size": (cfg.vocab_size is None, "None: an HF causal LM needs a token vocabulary"),
        "scale_embeddings": (cfg.scale_embeddings, "True: HF Llama-family models do not scale embeddings"),
    }
    for field_name, (bad, why) in problems.items():
        if bad:
            raise ValueError(f"{field_name}={why}")
    if like is None:
        config_class = (transformers.Qwen3Config if cfg.qk_norm else
                        transformers.Qwen2Config if cfg.qkv_bias else transformers.LlamaConfig)
        base: dict[str, Any] = {}
    else:
        like_config = like.config if isinstance(like, transformers.PreTrainedModel) else like
        if not isinstance(like_config, transformers.PretrainedConfig) or _model_type(like_config) not in MODEL_TYPES:
            allowed = ", ".join(cls for cls, _ in SUPPORTED.values())
            raise TypeError(f"like must be an HF config or model of {allowed}, got {type(like).__name__}")
        config_class = type(like_config)
        base = {k: v for k, v in like_config.to_dict().items()
                if k in ("bos_token_id", "eos_token_id", "pad_token_id", "initializer_range",
                         "max_position_embeddings")}
    model_type = config_class.model_type
    if cfg.qk_norm != (model_type == "qwen3"):
        raise ValueError(f"qk_norm={cfg.qk_norm}: of the HF Llama-family models only Qwen3 normalises each query and "
                         f"key head (q_norm / k_norm), and always; {config_class.__name__} "
                         f"{'has no QK-norm (use like=Qwen3Config)' if cfg.qk_norm else 'needs qk_norm=True'}")
    if cfg.qkv_bias and model_type == "mistral":
        raise ValueError("qkv_bias=True: MistralConfig has no q/k/v biases (use like=Qwen2Config)")
    encoder = model.encodings[0]
    if not isinstance(encoder, RotaryEncoding):
        raise ValueError(f"encoding={cfg.encoding!r} is not a RotaryEncoding")
    if encoder.rotary_dim != encoder.head_dim:
        raise ValueError(f"rotary_fraction={encoder.rotary_dim / encoder.head_dim:g}: HF Llama, Qwen2 and Mistral "
                         "rotate every head dim (they ignore partial_rotary_factor)")
    if not cfg.share_encoding:
        raise ValueError("share_encoding=False: an HF model has one RoPE for every layer")
    fields = dict(
        base, vocab_size=cfg.vocab_size, hidden_size=cfg.dim, intermediate_size=model.blocks[0].mlp.up.out_features,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads or cfg.num_heads, hidden_act="silu",
        rms_norm_eps=cfg.norm_eps if cfg.norm_eps is not None else torch.finfo(torch.float32).eps,
        tie_word_embeddings=cfg.tie_embeddings, **rope_config_to_hf(encoder),
    )
    if model_type in ("llama", "qwen3"):
        fields["attention_bias"] = cfg.qkv_bias  # with a zero output-projection bias (see to_hf)
        fields["head_dim"] = cfg.dim // cfg.num_heads
    if model_type == "mistral":
        fields["sliding_window"] = cfg.attention_window
        fields["head_dim"] = cfg.dim // cfg.num_heads
    elif model_type != "llama" and cfg.attention_window is not None:  # Qwen2 / Qwen3: every layer slides
        fields.update(use_sliding_window=True, sliding_window=cfg.attention_window, max_window_layers=0,
                      layer_types=["sliding_attention"] * cfg.num_layers)
    elif model_type == "qwen2" and not cfg.qkv_bias:
        raise ValueError("qkv_bias=False: Qwen2 always has q/k/v biases (use like=LlamaConfig or MistralConfig)")
    if model_type == "llama" and cfg.attention_window is not None:
        raise ValueError(f"attention_window={cfg.attention_window}: LlamaConfig has no sliding window "
                         "(use like=MistralConfig)")
    return config_class(**fields)


def to_hf(model: Transformer, like: Any = None) -> Any:
    """An HF causal LM (``LlamaForCausalLM``, ``Qwen2ForCausalLM``, ``MistralForCausalLM`` or ``Qwen3ForCausalLM``, by
    ``like``'s class; see :func:`hf_config_from_transformer`) holding ``model``'s weights, in its
    dtype and on its device; ``from_hf(to_hf(model))`` gives ``model`` back.

    A Llama or Qwen3 target of a model with q/k/v biases gets ``attention_bias=True`` and a zero output
    projection bias (their bias option covers all four projections).
    """
    config = hf_config_from_transformer(model, like)
    name = MODEL_TYPES[_model_type(config)]
    hf_model = getattr(transformers, name)(config)
    reference = next(model.parameters())
    hf_model = hf_model.to(device=reference.device, dtype=torch.float32)
    with torch.no_grad():
        for hf_param, our_param in _pairs(hf_model, model):
            hf_param.copy_(our_param.float())
        if _model_type(config) in ("llama", "qwen3") and model.config.qkv_bias:
            for layer in hf_model.model.layers:
                layer.self_attn.o_proj.bias.zero_()
    hf_model = hf_model.to(reference.dtype)
    return hf_model.train(model.training)
