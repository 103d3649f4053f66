"""Hugging Face rope configs to and from the options of the ``rope`` encoder (:class:`RotaryEncoding`).

HF describes a model's RoPE with a few config fields (transformers >= 5 spelling first)::

    config.rope_parameters = {"rope_type": "yarn", "rope_theta": 1e4, "partial_rotary_factor": 1.0,
                              "factor": 4.0, "original_max_position_embeddings": 4096, ...}
    # transformers 4.x spelling of the same thing (still accepted by LlamaConfig(...) in 5.x):
    config.rope_theta = 1e4; config.partial_rotary_factor = 1.0
    config.rope_scaling = {"rope_type": "yarn", "factor": 4.0, ...}   # None for plain RoPE

:func:`rope_options_from_hf` turns either spelling into ``get_encoder("rope", dim, num_heads, **options)``
keywords (:func:`rope_encoder_from_hf` builds the encoder with HF's head size);
:func:`rope_config_to_hf` is the inverse, for ``LlamaConfig(**fields)`` or ``config.update(fields)``.

Field by field (``L0`` = the pre-training length; the formulas are HF's ``modeling_rope_utils.py``,
``_compute_*_parameters``, which :class:`RotaryEncoding` reproduces in float64)::

    HF rope_type / field                     rope encoder option
    rope_theta                               base
    partial_rotary_factor                    rotary_fraction   (rotary dim int(head_dim * f), as HF)
    "default"                                scaling=None
    "linear"    factor                       scaling="linear", factor        (PI, arXiv:2306.15595)
    "dynamic"   factor                       scaling="dynamic", factor,
                config.max_position_embeddings   original_max_position   (HF's L0 for dynamic NTK)
    "yarn"      factor, beta_fast, beta_slow, truncate,
                attention_factor | mscale + mscale_all_dim
                original_max_position_embeddings original_max_position   (YaRN, arXiv:2309.00071)
    "llama3"    factor, low_freq_factor, high_freq_factor,
                original_max_position_embeddings original_max_position   (Llama 3.1, arXiv:2407.21783)
    "longrope"  short_factor, long_factor, attention_factor,
                factor | config.max_position_embeddings  factor | max_position
                original_max_position_embeddings original_max_position   (LongRoPE, arXiv:2402.13753)

Semantics follow the installed transformers 5.x (``standardize_rope_params`` and the init
functions); 4.x releases resolved some fields differently (e.g. early 4.x YaRN took ``L0`` from
``max_position_embeddings`` and had no ``original_max_position_embeddings``):

* ``original_max_position_embeddings`` (yarn, llama3, longrope): a config attribute of that name
  wins (Phi-3 style), then the rope dict's, then ``config.max_position_embeddings``.
* ``dynamic`` uses ``config.max_position_embeddings`` as ``L0``; a rope-dict
  ``original_max_position_embeddings`` is accepted only if equal to it (HF ignores the field).
* YaRN without ``factor``: ``max_position_embeddings / original_max_position_embeddings``;
  ``beta_fast`` / ``beta_slow`` that are 0 or None mean 32 / 1 (HF's ``or 32``); ``truncate``
  is read by truthiness. Attention factor (HF ``get_mscale``, YaRN Eq. 22): an explicit
  ``attention_factor`` wins and HF then ignores ``mscale`` / ``mscale_all_dim``; both mscales
  non-zero give ``get_mscale(s, mscale) / get_mscale(s, mscale_all_dim)`` (DeepSeek-V2/V3),
  passed as ``mscale`` / ``mscale_all_dim``; an mscale without its partner (or a zero one) is
  ignored by HF, so the option is the explicit ``attention_factor = 0.1 ln s + 1``.
* LongRoPE without ``factor``: HF's ``s = max_position_embeddings / L0``, passed as
  ``max_position`` (the encoder derives the same ``s``). Attention factor ``sqrt(1 + ln s / ln L0)``.

Anything the encoder cannot represent raises ``ValueError`` naming the field and its value: an
unknown ``rope_type`` (``"proportional"``, ...), a field HF does not define for the type
(``mrope_section``, ...), per-layer-type rope dicts, ``partial_rotary_factor`` on Llama / Qwen2 /
Mistral (their HF RoPE always rotates the whole head). Nothing is dropped silently: the only
fields left out are those HF itself ignores, listed above (mscales beside an explicit YaRN
``attention_factor``, zero ``beta_fast`` / ``beta_slow``, an unpaired mscale).

Shapes: the encoder's ``inv_freq`` is ``(rotary_dim/2,)``, as HF's; HF computes it in float32, the
encoder in float64 (relative difference ~1e-7, float32 rounding).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

import transformers  # noqa: E402

from pe_toolkit.encoders.rotary import (  # noqa: E402
    YARN_BETA_FAST,
    YARN_BETA_SLOW,
    RotaryEncoding,
    longrope_attention_factor,
    ntk_base,
    yarn_get_mscale,
)

HF_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
"""The HF ``rope_type`` values the ``rope`` encoder represents."""

SPELLINGS = ("rope_parameters", "rope_scaling")
"""``rope_config_to_hf`` layouts: transformers >= 5 ``rope_parameters``, 4.x ``rope_theta`` + ``rope_scaling``."""

COMMON_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
TYPE_KEYS: dict[str, tuple[str, ...]] = {
    # HF's required + optional keys per rope_type (RotaryEmbeddingConfigMixin._validate_*_rope_parameters)
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),  # the latter only if == max_position_embeddings
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "truncate"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings", "factor", "attention_factor"),
}
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": (),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor"),
    "longrope": ("short_factor", "long_factor"),
}
FULL_ROTARY_MODEL_TYPES = ("llama", "qwen2", "mistral")
"""HF models whose RoPE always rotates the whole head (``partial_rotary_factor`` is not honoured)."""

# The methods that make a RotaryEncoding's rotation; a subclass overriding one is not a plain HF RoPE.
_ROTATION_METHODS = ("compute_inverse_frequencies", "inverse_frequencies_for", "frequency_key",
                     "traced_inverse_frequencies", "angles", "cos_sin", "_cos_sin_of", "rotate_one", "rotate")


# ------------------------------------------------------------------------------------ HF -> ours
def _check_config(config: Any) -> None:
    if not isinstance(config, transformers.PretrainedConfig):
        raise TypeError(
            f"config must be a transformers PretrainedConfig (LlamaConfig, Qwen2Config, MistralConfig, ...), got "
            f"{type(config).__name__}; for a config.json dict use e.g. transformers.LlamaConfig.from_dict(d)"
        )


def _integral(name: str, value: Any) -> Any:
    """``4096.0`` -> ``4096`` (JSON may store lengths as floats); anything else unchanged for the encoder to check."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def hf_head_dim(config: Any) -> int:
    """HF's head size: ``config.head_dim``, else ``hidden_size // num_attention_heads``."""
    _check_config(config)
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def hf_rope_parameters(config: Any) -> dict[str, Any]:
    """The config's rope fields, resolved as transformers 5.x does, as one flat ``rope_parameters`` dict.

    Reads ``config.rope_parameters`` (transformers >= 5) or else ``config.rope_scaling`` plus the
    ``rope_theta`` / ``partial_rotary_factor`` attributes (4.x), without changing ``config``. The
    result always has ``rope_type`` and ``rope_theta``; ``original_max_position_embeddings`` is
    filled in for yarn / llama3 / longrope as HF's ``standardize_rope_params`` does.

    Raises:
        TypeError: ``config`` is not a ``PretrainedConfig``, or its rope dict is not a dict.
        ValueError: a config without RoPE fields, per-layer-type rope dicts, or ``type`` and
            ``rope_type`` that disagree.
    """
    _check_config(config)
    params = getattr(config, "rope_parameters", None)
    field = "rope_parameters"
    if not params:  # transformers 4.x: rope_scaling (None = plain RoPE) + rope_theta
        params, field = getattr(config, "rope_scaling", None), "rope_scaling"
    if params is None:
        if getattr(config, "rope_theta", None) is None:
            raise ValueError(
                f"{type(config).__name__} has no RoPE fields (rope_parameters, rope_scaling, rope_theta are unset): "
                "it describes no rotary encoding"
            )
        params = {}
    if not isinstance(params, Mapping):
        raise TypeError(f"config.{field} must be a dict or None, got {type(params).__name__} ({params!r})")
    nested = sorted(str(key) for key, value in params.items() if isinstance(value, Mapping))
    if nested:
        raise ValueError(
            f"config.{field} has per-layer-type rope dicts {nested}: one rope encoder has one rope config "
            "(map each layer type's dict separately)"
        )
    params = dict(params)
    rope_type, legacy_type = params.pop("rope_type", None), params.pop("type", None)
    if rope_type is None:
        rope_type = legacy_type if legacy_type is not None else "default"
    elif legacy_type is not None and legacy_type != rope_type:
        raise ValueError(f"config.{field} has type={legacy_type!r} and rope_type={rope_type!r}: give one rope type")
    theta = params.pop("rope_theta", None)
    if theta is None:
        theta = getattr(config, "rope_theta", None)
    if theta is None:
        theta = getattr(config, "default_theta", 10_000.0)
    partial = params.pop("partial_rotary_factor", None)
    if partial is None:
        partial = getattr(config, "partial_rotary_factor", None)
    resolved: dict[str, Any] = {"rope_type": rope_type, "rope_theta": theta}
    if partial is not None:
        resolved["partial_rotary_factor"] = partial
    resolved.update(params)
    if rope_type in ("llama3", "yarn", "longrope"):
        attribute = getattr(config, "original_max_position_embeddings", None)
        if attribute is not None:  # Phi-3: the config attribute wins over the rope dict
            resolved["original_max_position_embeddings"] = attribute
        elif resolved.get("original_max_position_embeddings") is None:
            resolved["original_max_position_embeddings"] = config.max_position_embeddings
    return resolved


def _options_from_parameters(params: Mapping[str, Any], max_position_embeddings: int | None) -> dict[str, Any]:
    """``rope`` encoder options for a flat, resolved HF rope dict (see :func:`hf_rope_parameters`)."""
    rope_type = params["rope_type"]
    if rope_type not in HF_ROPE_TYPES:
        raise ValueError(
            f"rope_type={rope_type!r} has no rope-encoder equivalent; supported rope types: {list(HF_ROPE_TYPES)}"
        )
    fields = {key: value for key, value in params.items() if key not in COMMON_KEYS}
    unknown = sorted(set(fields) - set(TYPE_KEYS[rope_type]))
    if unknown:
        shown = ", ".join(f"{key}={fields[key]!r}" for key in unknown)
        raise ValueError(
            f"rope field(s) {shown} cannot be represented for rope_type={rope_type!r} (its fields: "
            f"{list(TYPE_KEYS[rope_type])}, plus {list(COMMON_KEYS[2:])})"
        )
    missing = [key for key in REQUIRED_KEYS[rope_type] if fields.get(key) is None]
    if missing:
        raise ValueError(f"rope_type={rope_type!r} needs the field(s) {missing}, got {dict(fields)}")

    options: dict[str, Any] = {"base": params["rope_theta"]}
    partial = params.get("partial_rotary_factor")
    if partial is not None and partial != 1.0:
        options["rotary_fraction"] = partial
    if rope_type == "default":
        return options
    options["scaling"] = rope_type
    original = _integral("original_max_position_embeddings", fields.get("original_max_position_embeddings"))
    factor = fields.get("factor")

    if rope_type == "linear":
        options["factor"] = factor
    elif rope_type == "dynamic":
        # HF's dynamic NTK takes L0 = config.max_position_embeddings (its original_max_seq_len)
        if original is not None and original != max_position_embeddings:
            raise ValueError(
                f"original_max_position_embeddings={original} for rope_type='dynamic': HF's dynamic NTK uses "
                f"max_position_embeddings={max_position_embeddings} as the original length and ignores this field; "
                "remove it or make it equal"
            )
        options.update(factor=factor, original_max_position=_integral("max_position_embeddings",
                                                                      max_position_embeddings))
    elif rope_type == "yarn":
        if factor is None:  # HF 5.x: the ratio of the extended to the original length
            factor = max_position_embeddings / original
        options.update(factor=factor, original_max_position=original)
        for name in ("beta_fast", "beta_slow"):
            if fields.get(name):  # HF: `get(name) or 32` / `or 1`: 0 and None mean the default
                options[name] = fields[name]
        if "truncate" in fields:
            options["truncate"] = bool(fields["truncate"])  # HF: `if truncate:`
        attention, mscale, mscale_all_dim = (fields.get(k) for k in ("attention_factor", "mscale", "mscale_all_dim"))
        if attention is not None:
            options["attention_factor"] = attention  # HF ignores mscale / mscale_all_dim then
        elif mscale and mscale_all_dim:
            options.update(mscale=mscale, mscale_all_dim=mscale_all_dim)
        elif mscale is not None or mscale_all_dim is not None:
            # HF uses get_mscale(factor) = 0.1 ln s + 1 unless both mscales are non-zero: say so explicitly
            options["attention_factor"] = yarn_get_mscale(factor)
    elif rope_type == "llama3":
        options.update(factor=factor, original_max_position=original, low_freq_factor=fields["low_freq_factor"],
                       high_freq_factor=fields["high_freq_factor"])
    else:  # longrope
        options.update(short_factor=list(fields["short_factor"]), long_factor=list(fields["long_factor"]),
                       original_max_position=original)
        attention = fields.get("attention_factor")
        if factor is not None:
            options["factor"] = factor
        elif attention is None:  # HF: s = max_position_embeddings / L0 for the default attention factor
            options["max_position"] = _integral("max_position_embeddings", max_position_embeddings)
        if attention is not None:
            options["attention_factor"] = attention
    return options


def rope_options_from_hf(config: Any) -> dict[str, Any]:
    """Keyword options of ``get_encoder("rope", dim, num_heads, **options)`` reproducing ``config``'s RoPE.

    ``config``: an HF ``PretrainedConfig`` (``LlamaConfig``, ``Qwen2Config``, ``MistralConfig``, or any
    config whose RoPE is one of :data:`HF_ROPE_TYPES`), in the ``rope_parameters`` or the
    ``rope_scaling`` + ``rope_theta`` spelling. The encoder's head size must be HF's
    (:func:`hf_head_dim`); :func:`rope_encoder_from_hf` builds it so. Options equal to the encoder's
    defaults are left out (``scaling`` for plain RoPE, ``rotary_fraction`` 1, ...). The mapping and
    HF's resolution rules are in the module docstring; the resulting ``inv_freq`` (and, for dynamic /
    longrope, ``inverse_frequencies_for(frequency_key(length))``) and ``attention_factor`` equal HF's
    ``ROPE_INIT_FUNCTIONS[rope_type](config, device, seq_len=length)`` up to HF's float32 rounding.

    Example:
        >>> import transformers, pe_toolkit as pet
        >>> config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
        ...     rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})
        >>> rope_options_from_hf(config)
        {'base': 10000.0, 'scaling': 'linear', 'factor': 2.0}

    Raises:
        TypeError: ``config`` is not a ``PretrainedConfig``.
        ValueError: a rope type or field the encoder cannot represent, named with its value (see the
            module docstring); the encoder's own checks (``factor < 1``, wrong ``short_factor`` length,
            ...) raise when the options are used.
    """
    params = hf_rope_parameters(config)
    partial = params.get("partial_rotary_factor")
    model_type = str(getattr(config, "model_type", None)).removeprefix("pe_toolkit_")  # a swapped model's config
    if model_type in FULL_ROTARY_MODEL_TYPES and partial is not None and partial != 1.0:
        raise ValueError(
            f"partial_rotary_factor={partial} on a {model_type!r} config: HF's {model_type} models rotate the whole "
            "head (their default RoPE ignores the field, their scaled RoPE types do not fit the head), so no "
            "rope encoder matches; use partial_rotary_factor=1.0 or a model that honours it (phi, gpt_neox, ...)"
        )
    return _options_from_parameters(params, getattr(config, "max_position_embeddings", None))


def rope_encoder_from_hf(config: Any, **overrides: Any) -> RotaryEncoding:
    """The ``rope`` encoder of ``config``: ``RotaryEncoding(head_dim * H, H, **rope_options_from_hf(config))``.

    ``H = config.num_attention_heads`` and ``head_dim`` = :func:`hf_head_dim`, so the encoder's head
    size is HF's even where ``head_dim != hidden_size / H``; ``overrides`` replace options (``causal``, ...).
    """
    options = rope_options_from_hf(config)
    options.update(overrides)
    heads = config.num_attention_heads
    return RotaryEncoding(hf_head_dim(config) * heads, heads, **options)


# ------------------------------------------------------------------------------------ ours -> HF
def _default_spelling() -> str:
    """``rope_parameters`` where the installed transformers has it (>= 5), else ``rope_scaling``."""
    return "rope_parameters" if hasattr(transformers.PretrainedConfig, "standardize_rope_params") else "rope_scaling"


def _partial_rotary_factor(rotary_dim: int, head_dim: int) -> float:
    """A fraction ``f`` with ``int(head_dim * f) == rotary_dim`` (HF's and the encoder's rounding).

    ``rotary_dim / head_dim`` itself can land one float step low (``int(44 * (30 / 44)) == 29``), so
    it is nudged up by ulps until the product rounds back.
    """
    fraction = rotary_dim / head_dim
    while int(head_dim * fraction) < rotary_dim:
        fraction = math.nextafter(fraction, math.inf)
    return fraction


def _check_expressible(encoder: RotaryEncoding) -> None:
    if encoder.xpos:
        raise ValueError("xpos=True: HF's RoPE has no xPos decay (xpos must be False)")
    if encoder.interleaved:
        raise ValueError(
            "interleaved=True: HF's Llama-family RoPE pairs dims (i, i + d/2) (interleaved=False); an interleaved "
            "model needs its q/k projection rows permuted, not a rope config"
        )
    overridden = [name for name in _ROTATION_METHODS
                  if getattr(type(encoder), name) is not getattr(RotaryEncoding, name)]
    if overridden:
        raise ValueError(
            f"{type(encoder).__name__} overrides RotaryEncoding.{', '.join(overridden)}: HF rope configs describe "
            "RotaryEncoding's own rotations only"
        )


def _hf_parameters(encoder: RotaryEncoding) -> tuple[dict[str, Any], int | None]:
    """``(flat rope_parameters dict, max_position_embeddings or None)`` of a RotaryEncoding."""
    scaling, factor, original = encoder.scaling, encoder.factor, encoder.original_max_position
    params: dict[str, Any] = {
        "rope_type": "default" if scaling in (None, "ntk") else scaling,
        "rope_theta": encoder.base,
        "partial_rotary_factor": _partial_rotary_factor(encoder.rotary_dim, encoder.head_dim),
    }
    max_position_embeddings = None
    if scaling == "ntk":  # static NTK = plain RoPE with base' = base * s ** (d / (d - 2)); HF has no own type
        params["rope_theta"] = ntk_base(encoder.base, factor, encoder.rotary_dim)
    elif scaling == "linear":
        params["factor"] = factor
    elif scaling == "dynamic":
        params["factor"] = factor
        max_position_embeddings = original  # HF's dynamic NTK reads L0 from max_position_embeddings
    elif scaling == "yarn":
        params.update(factor=factor, original_max_position_embeddings=original)
        if encoder.beta_fast != YARN_BETA_FAST:
            params["beta_fast"] = encoder.beta_fast
        if encoder.beta_slow != YARN_BETA_SLOW:
            params["beta_slow"] = encoder.beta_slow
        if not encoder.truncate:
            params["truncate"] = False
        if encoder.mscale is not None:
            params.update(mscale=encoder.mscale, mscale_all_dim=encoder.mscale_all_dim)
        elif encoder.attention_factor != yarn_get_mscale(factor):
            params["attention_factor"] = encoder.attention_factor
    elif scaling == "llama3":
        params.update(factor=factor, original_max_position_embeddings=original,
                      low_freq_factor=encoder.low_freq_factor, high_freq_factor=encoder.high_freq_factor)
    elif scaling == "longrope":
        params.update(short_factor=list(encoder.short_factor), long_factor=list(encoder.long_factor),
                      original_max_position_embeddings=original)
        if encoder.max_position is not None:  # Phi-3 style: HF derives s = max_position_embeddings / L0
            max_position_embeddings = encoder.max_position
        elif factor is not None:
            params["factor"] = factor
        if factor is None or encoder.attention_factor != longrope_attention_factor(factor, original):
            params["attention_factor"] = encoder.attention_factor
    elif scaling is not None:
        raise ValueError(f"scaling={scaling!r} has no HF rope_type")
    return params, max_position_embeddings


def _check_round_trip(encoder: RotaryEncoding, params: dict[str, Any], max_position_embeddings: int | None) -> None:
    """Rebuild the encoder from ``params`` and require its frequencies and attention factor back."""
    rebuilt = RotaryEncoding(encoder.dim, encoder.num_heads, causal=encoder.causal,
                             **_options_from_parameters(params, max_position_embeddings))
    keys = [None]
    if encoder.scaling == "longrope":
        keys.append("long")
    for key in keys:
        ours, back = encoder.inverse_frequencies_for(key).cpu().double(), rebuilt.inverse_frequencies_for(key).double()
        if ours.shape != back.shape or not bool(((ours - back).abs() <= 1e-12 * back.abs()).all()):
            raise ValueError(f"the encoder's inverse frequencies ({key or 'inv_freq'}) differ from those of the HF "
                             f"rope config {params}; HF cannot express this encoder")
    if not math.isclose(encoder.attention_factor, rebuilt.attention_factor, rel_tol=1e-12):
        raise ValueError(f"attention_factor={encoder.attention_factor} differs from the HF rope config's "
                         f"{rebuilt.attention_factor}; HF cannot express this encoder")


def rope_config_to_hf(encoder: RotaryEncoding, spelling: str | None = None) -> dict[str, Any]:
    """HF config fields describing ``encoder``'s RoPE, for ``LlamaConfig(**fields)`` or ``config.update(fields)``.

    Args:
        encoder: a :class:`RotaryEncoding` (``get_encoder("rope", ...)``).
        spelling: the layout of the fields:

            * ``"rope_parameters"`` (transformers >= 5)::

                {"rope_parameters": {"rope_type": ..., "rope_theta": ..., "partial_rotary_factor": ..., <fields>}}

            * ``"rope_scaling"`` (transformers 4.x, and old ``config.json`` files)::

                {"rope_theta": ..., "partial_rotary_factor": ..., "rope_scaling": {"rope_type": ..., <fields>} | None}

              With transformers >= 5 pass these to the config's constructor, not to ``config.update``
              (setting ``rope_scaling=None`` there clears ``rope_parameters``).
            * ``None`` (default): ``"rope_parameters"`` if the installed transformers has it, else
              ``"rope_scaling"``.

            Either may add ``"max_position_embeddings"``: for ``dynamic`` it is the original length
            ``L0`` (HF's dynamic NTK reads it there) and for ``longrope`` built with ``max_position`` it
            is that extended length (HF derives ``factor`` from it, as for Phi-3).

    Fields equal to HF's defaults are left out (YaRN's ``beta_fast=32``, ``beta_slow=1``,
    ``truncate=True``, an attention factor equal to the type's default). ``scaling="ntk"`` (static
    NTK-aware, which HF has no rope type for) becomes plain RoPE with the NTK base
    ``rope_theta = base * factor ** (d / (d - 2))``: the same frequencies. ``partial_rotary_factor``
    is the rotated fraction of the head; HF's Llama / Qwen2 / Mistral rotate the whole head, so for
    them only 1.0 is faithful.

    Returns:
        A new dict; the HF rope config it spells gives this encoder's frequencies and attention factor
        (checked: rebuilding the encoder from it must reproduce them).

    Raises:
        TypeError: ``encoder`` is not a RotaryEncoding.
        ValueError: ``spelling`` not in :data:`SPELLINGS`; a feature HF cannot express, named:
            ``xpos=True``, ``interleaved=True``, a subclass overriding the rotation.
    """
    if not isinstance(encoder, RotaryEncoding):
        raise TypeError(f"encoder must be a RotaryEncoding (get_encoder('rope', ...)), got {type(encoder).__name__}")
    if spelling is None:
        spelling = _default_spelling()
    if spelling not in SPELLINGS:
        raise ValueError(f"spelling must be one of {SPELLINGS} or None, got {spelling!r}")
    _check_expressible(encoder)
    params, max_position_embeddings = _hf_parameters(encoder)
    _check_round_trip(encoder, params, max_position_embeddings)
    if spelling == "rope_parameters":
        fields: dict[str, Any] = {"rope_parameters": params}
    else:
        scaling = {key: value for key, value in params.items() if key not in ("rope_theta", "partial_rotary_factor")}
        # rope_theta and partial_rotary_factor first: a transformers-5 config.update() copies them into the
        # rope dict when it sets rope_scaling
        fields = {"rope_theta": params["rope_theta"], "partial_rotary_factor": params["partial_rotary_factor"],
                  "rope_scaling": None if scaling["rope_type"] == "default" else scaling}
    if max_position_embeddings is not None:
        fields["max_position_embeddings"] = max_position_embeddings
    return fields
