"""HF rope configs <-> ``rope`` encoder options, against transformers' own RoPE code (tiny configs, no downloads).

The reference is what HF models use: ``<Model>RotaryEmbedding(config)`` (``inv_freq``, ``attention_scaling``)
and, for the length-dependent types, ``modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config, device,
seq_len)``. HF computes the inverse frequencies in float32 (``base ** (arange / dim)`` with a float32
exponent, YaRN's ramp and blend in float32), the encoder in float64, so frequencies are compared at
``rtol=1e-6`` (float32 rounding, amplified by ``ln(rope_theta)`` through the exponent; measured at most
8.4e-8 over these cases); attention factors are Python floats on both sides and compared exactly.
"""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

import pe_toolkit as pet  # noqa: E402
from pe_toolkit.encoders.rotary import RotaryEncoding, ntk_base  # noqa: E402
from pe_toolkit.integrations.hf.rope_config import (  # noqa: E402
    hf_head_dim,
    hf_rope_parameters,
    rope_config_to_hf,
    rope_encoder_from_hf,
    rope_options_from_hf,
)

SIZES = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4, vocab_size=97,
             max_position_embeddings=256)
RTOL = 1e-6  # HF's float32 inverse frequencies against the encoder's float64 ones
SHORT = [1.0, 1.05, 1.1, 1.2, 1.4, 1.7, 2.0, 2.5]  # LongRoPE rescale factors, head_dim 16 -> 8 pairs
LONG = [1.0, 1.3, 1.9, 2.8, 4.0, 5.5, 7.0, 8.0]

# HF rope dicts (rope_parameters spelling); max_position_embeddings is 256 unless a case sets it
CASES: dict[str, dict] = {
    "default": dict(rope_type="default", rope_theta=10000.0),
    "default_theta": dict(rope_type="default", rope_theta=500000.0),
    "linear": dict(rope_type="linear", rope_theta=500000.0, factor=2.0),
    "dynamic": dict(rope_type="dynamic", rope_theta=10000.0, factor=3.0),
    "yarn": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64),
    "yarn_no_original": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0),
    "yarn_betas": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64,
                       beta_fast=16.0, beta_slow=2.0, truncate=False),
    "yarn_attention_factor": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                  original_max_position_embeddings=64, attention_factor=1.3),
    "yarn_mscale": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64,
                        mscale=0.707, mscale_all_dim=1.0),
    "yarn_mscale_alone": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=64,
                              mscale=0.707),
    "yarn_mscale_and_attention": dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                                      original_max_position_embeddings=64, mscale=0.707, mscale_all_dim=1.0,
                                      attention_factor=1.1),
    "llama3": dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=64),
    "longrope": dict(rope_type="longrope", rope_theta=10000.0, short_factor=SHORT, long_factor=LONG, factor=4.0,
                     original_max_position_embeddings=64),
    "longrope_no_factor": dict(rope_type="longrope", rope_theta=10000.0, short_factor=SHORT, long_factor=LONG,
                               original_max_position_embeddings=64),
    "longrope_attention_factor": dict(rope_type="longrope", rope_theta=10000.0, short_factor=SHORT,
                                      long_factor=LONG, original_max_position_embeddings=64, attention_factor=1.2),
}
EXPECTED_OPTIONS = {
    "default": dict(base=10000.0),
    "linear": dict(base=500000.0, scaling="linear", factor=2.0),
    "dynamic": dict(base=10000.0, scaling="dynamic", factor=3.0, original_max_position=256),
    "yarn_no_original": dict(base=10000.0, scaling="yarn", factor=4.0, original_max_position=256),
    "yarn_mscale": dict(base=10000.0, scaling="yarn", factor=4.0, original_max_position=64, mscale=0.707,
                        mscale_all_dim=1.0),
    "yarn_mscale_alone": dict(base=10000.0, scaling="yarn", factor=4.0, original_max_position=64,
                              attention_factor=0.1 * math.log(4.0) + 1.0),
    "yarn_mscale_and_attention": dict(base=10000.0, scaling="yarn", factor=4.0, original_max_position=64,
                                      attention_factor=1.1),
    "longrope_no_factor": dict(base=10000.0, scaling="longrope", short_factor=SHORT, long_factor=LONG,
                               original_max_position=64, max_position=256),
}


def llama(spelling: str, case: dict, **extra) -> transformers.LlamaConfig:
    """A tiny LlamaConfig with the rope dict ``case`` in the new or the old spelling."""
    sizes = {**SIZES, **extra}
    if spelling == "rope_parameters":
        return transformers.LlamaConfig(**sizes, rope_parameters=dict(case))
    scaling = {k: v for k, v in case.items() if k != "rope_theta"}
    return transformers.LlamaConfig(**sizes, rope_theta=case["rope_theta"],
                                    rope_scaling=None if scaling["rope_type"] == "default" else scaling)


class LegacyLlamaConfig(transformers.PretrainedConfig):
    """A transformers-4.x-style config: ``rope_theta`` / ``rope_scaling`` / ``partial_rotary_factor`` attributes
    and no ``rope_parameters`` (``rope_scaling`` shadows transformers 5's alias property)."""

    model_type = "legacy_llama_for_tests"
    rope_scaling = None


def legacy(case: dict, **attributes) -> LegacyLlamaConfig:
    config = LegacyLlamaConfig(**SIZES)
    config.rope_theta = case["rope_theta"]
    scaling = {k: v for k, v in case.items() if k != "rope_theta"}
    scaling["type"] = scaling.pop("rope_type")  # the oldest spelling of the key
    config.rope_scaling = None if scaling["type"] == "default" else scaling
    for name, value in attributes.items():
        setattr(config, name, value)
    return config


def hf_init(config, seq_len=None) -> tuple[torch.Tensor, float]:
    """HF's (inv_freq, attention factor): the init function of the config's rope type."""
    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        return LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    return ROPE_INIT_FUNCTIONS[rope_type](config, torch.device("cpu"), seq_len=seq_len)


def assert_frequencies(ours: torch.Tensor, hf: torch.Tensor) -> None:
    assert ours.dtype == torch.float64 and hf.dtype == torch.float32
    torch.testing.assert_close(ours, hf.double(), rtol=RTOL, atol=0)


# ------------------------------------------------------------------------------------ HF -> ours
@pytest.mark.parametrize("spelling", ["rope_parameters", "rope_scaling"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_frequencies_and_attention_factor_match_hf(case, spelling):
    config = llama(spelling, CASES[case])
    options = rope_options_from_hf(config)
    encoder = pet.get_encoder("rope", 64, 4, **options)
    module = LlamaRotaryEmbedding(config)  # what LlamaModel builds
    assert_frequencies(encoder.inv_freq, module.inv_freq)
    assert encoder.attention_factor == module.attention_scaling
    inv_freq, attention = hf_init(config)
    assert_frequencies(encoder.inv_freq, inv_freq)
    assert encoder.attention_factor == attention
    if case in EXPECTED_OPTIONS:
        assert options == EXPECTED_OPTIONS[case]


@pytest.mark.parametrize("spelling", ["rope_parameters", "rope_scaling"])
@pytest.mark.parametrize("length", [100, 256, 257, 1000, 5000])
def test_dynamic_at_a_length_matches_hf(spelling, length):
    config = llama(spelling, CASES["dynamic"])
    encoder = rope_encoder_from_hf(config)
    # HF: base' = base * (s * l / L0 - (s - 1)) ** (d / (d - 2)) with l = max(seq_len, max_position_embeddings)
    hf_inv_freq, hf_attention = ROPE_INIT_FUNCTIONS["dynamic"](config, torch.device("cpu"), seq_len=length)
    key = encoder.frequency_key(length)
    assert (key is None) == (length <= config.max_position_embeddings)
    assert_frequencies(encoder.inverse_frequencies_for(key), hf_inv_freq)
    assert encoder.attention_factor == hf_attention == 1.0


@pytest.mark.parametrize("spelling", ["rope_parameters", "rope_scaling"])
@pytest.mark.parametrize("case", ["longrope", "longrope_no_factor", "longrope_attention_factor"])
def test_longrope_short_and_long_factors_match_hf(case, spelling):
    config = llama(spelling, CASES[case])
    encoder = rope_encoder_from_hf(config)
    original = 64
    for length in (1, original, original + 1, 4 * original):
        hf_inv_freq, hf_attention = ROPE_INIT_FUNCTIONS["longrope"](config, torch.device("cpu"), seq_len=length)
        key = encoder.frequency_key(length)
        assert key == (None if length <= original else "long")
        assert_frequencies(encoder.inverse_frequencies_for(key), hf_inv_freq)
        assert encoder.attention_factor == hf_attention


@pytest.mark.parametrize("case, length", [("dynamic", 600), ("longrope", 100), ("longrope", 40)])
def test_cos_sin_match_hf_forward(case, length):
    """End to end through HF's ``dynamic_rope_update``: cos / sin of a whole sequence of ``length``."""
    config = llama("rope_parameters", CASES[case])
    encoder = rope_encoder_from_hf(config)
    module = LlamaRotaryEmbedding(config)
    positions = torch.arange(length)
    hf_cos, hf_sin = module(torch.zeros(1, length, 64), positions[None])
    cos, sin = encoder.cos_sin(positions, torch.float32, length=length)
    # HF's angles are float32 products position * inv_freq: ~length * 1e-7 rad of rounding
    torch.testing.assert_close(cos, hf_cos[0, :, :8], rtol=0, atol=length * 2e-7)
    torch.testing.assert_close(sin, hf_sin[0, :, :8], rtol=0, atol=length * 2e-7)


@pytest.mark.parametrize("case", sorted(CASES))
def test_legacy_attribute_spelling_gives_the_same_options(case):
    """A transformers-4.x config object (rope_theta / rope_scaling attributes, "type" key) maps like 5.x's."""
    assert rope_options_from_hf(legacy(CASES[case])) == rope_options_from_hf(llama("rope_parameters", CASES[case]))


def test_hf_rope_parameters_resolves_like_standardize():
    config = legacy(CASES["yarn_no_original"])
    assert hf_rope_parameters(config) == {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                          "original_max_position_embeddings": 256}
    assert config.rope_scaling == {"type": "yarn", "factor": 4.0}  # the config is left as it was


def test_original_max_position_attribute_wins_as_in_hf():
    """Phi-3 style: a config attribute original_max_position_embeddings overrides the rope dict's."""
    config = llama("rope_parameters", CASES["longrope"], original_max_position_embeddings=32)
    encoder = rope_encoder_from_hf(config)
    assert encoder.original_max_position == 32
    for length in (32, 33):
        hf_inv_freq, hf_attention = ROPE_INIT_FUNCTIONS["longrope"](config, torch.device("cpu"), seq_len=length)
        assert_frequencies(encoder.inverse_frequencies_for(encoder.frequency_key(length)), hf_inv_freq)
        assert encoder.attention_factor == hf_attention


@pytest.mark.parametrize("name, theta", [("Qwen2", 1_000_000.0), ("Mistral", 10000.0)])
def test_qwen2_and_mistral_default_rope(name, theta):
    config_class = getattr(transformers, f"{name}Config")
    config = config_class(**SIZES, rope_parameters=dict(rope_type="default", rope_theta=theta))
    assert rope_options_from_hf(config) == {"base": theta}
    modeling = getattr(transformers.models, name.lower())
    module = getattr(getattr(modeling, f"modeling_{name.lower()}"), f"{name}RotaryEmbedding")(config)
    encoder = rope_encoder_from_hf(config)
    assert_frequencies(encoder.inv_freq, module.inv_freq)
    assert encoder.attention_factor == module.attention_scaling
    back = config_class(**SIZES, **rope_config_to_hf(encoder))
    assert rope_options_from_hf(back) == {"base": theta}


def test_head_dim_from_the_config():
    config = transformers.MistralConfig(**SIZES, head_dim=32)  # head_dim != hidden_size / heads
    assert hf_head_dim(config) == 32
    encoder = rope_encoder_from_hf(config)
    assert (encoder.head_dim, encoder.rotary_dim, encoder.num_heads) == (32, 32, 4)
    module = transformers.models.mistral.modeling_mistral.MistralRotaryEmbedding(config)
    assert_frequencies(encoder.inv_freq, module.inv_freq)


@pytest.mark.parametrize("rope_type", ["default", "linear", "yarn"])
def test_partial_rotary_factor_on_a_model_that_honours_it(rope_type):
    """Phi rotates int(head_dim * partial_rotary_factor) dims (its default factor is 0.5)."""
    extra = {"default": {}, "linear": dict(factor=2.0), "yarn": dict(factor=4.0, original_max_position_embeddings=64)}
    config = transformers.PhiConfig(**SIZES, rope_parameters=dict(rope_type=rope_type, rope_theta=10000.0,
                                                                   partial_rotary_factor=0.5, **extra[rope_type]))
    options = rope_options_from_hf(config)
    assert options["rotary_fraction"] == 0.5
    encoder = rope_encoder_from_hf(config)
    assert encoder.rotary_dim == 8
    module = transformers.models.phi.modeling_phi.PhiRotaryEmbedding(config)
    assert_frequencies(encoder.inv_freq, module.inv_freq)
    assert encoder.attention_factor == module.attention_scaling
    fields = rope_config_to_hf(encoder)
    assert fields["rope_parameters"]["partial_rotary_factor"] == 0.5
    assert rope_options_from_hf(transformers.PhiConfig(**SIZES, **fields)) == options


def test_partial_rotary_factor_rounds_back_to_the_rotary_dim():
    encoder = RotaryEncoding(44, 1, rotary_fraction=0.682)  # 30 of 44 dims; int(44 * (30 / 44)) == 29
    assert encoder.rotary_dim == 30
    fraction = rope_config_to_hf(encoder)["rope_parameters"]["partial_rotary_factor"]
    assert int(44 * fraction) == 30
    assert RotaryEncoding(44, 1, rotary_fraction=fraction).rotary_dim == 30


# ------------------------------------------------------------------------------------ ours -> HF
ROUND_TRIPS: dict[str, dict] = {
    "default": dict(base=10000.0),
    "theta": dict(base=1_000_000.0),
    "linear": dict(base=500000.0, scaling="linear", factor=2.0),
    "dynamic": dict(base=10000.0, scaling="dynamic", factor=2.0, original_max_position=128),
    "yarn": dict(base=10000.0, scaling="yarn", factor=4.0, original_max_position=64),
    "yarn_betas": dict(base=10000.0, scaling="yarn", factor=4.0, original_max_position=64, beta_fast=16.0,
                       beta_slow=2.0, truncate=False),
    "yarn_mscale": dict(base=10000.0, scaling="yarn", factor=40.0, original_max_position=64, mscale=0.707,
                        mscale_all_dim=1.0),
    "yarn_attention_factor": dict(base=10000.0, scaling="yarn", factor=4.0, original_max_position=64,
                                  attention_factor=1.25),
    "llama3": dict(base=500000.0, scaling="llama3", factor=8.0, original_max_position=64, low_freq_factor=1.0,
                   high_freq_factor=4.0),
    "longrope": dict(base=10000.0, scaling="longrope", short_factor=SHORT, long_factor=LONG,
                     original_max_position=64, factor=4.0),
    "longrope_max_position": dict(base=10000.0, scaling="longrope", short_factor=SHORT, long_factor=LONG,
                                  original_max_position=64, max_position=512),
    "longrope_attention_factor": dict(base=10000.0, scaling="longrope", short_factor=SHORT, long_factor=LONG,
                                      original_max_position=64, factor=4.0, attention_factor=1.2),
}


@pytest.mark.parametrize("spelling", ["rope_parameters", "rope_scaling"])
@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_round_trip_through_llama_config(case, spelling):
    options = ROUND_TRIPS[case]
    encoder = RotaryEncoding(64, 4, **options)
    fields = rope_config_to_hf(encoder, spelling=spelling)
    if spelling == "rope_scaling":
        assert set(fields) - {"max_position_embeddings"} == {"rope_theta", "partial_rotary_factor", "rope_scaling"}
        assert (fields["rope_scaling"] is None) == (options.get("scaling") is None)
    else:
        assert set(fields) - {"max_position_embeddings"} == {"rope_parameters"}
    config = transformers.LlamaConfig(**{**SIZES, **fields})
    assert rope_options_from_hf(config) == options
    back = rope_encoder_from_hf(config)
    assert torch.equal(back.inv_freq, encoder.inv_freq)
    assert back.attention_factor == encoder.attention_factor
    # and HF itself computes this encoder's RoPE from the config
    module = LlamaRotaryEmbedding(config)
    assert_frequencies(encoder.inv_freq, module.inv_freq)
    assert encoder.attention_factor == module.attention_scaling
    if encoder.length_dependent:
        length = 4 * encoder.original_max_position
        hf_inv_freq, _ = ROPE_INIT_FUNCTIONS[options["scaling"]](config, torch.device("cpu"), seq_len=length)
        assert_frequencies(encoder.inverse_frequencies_for(encoder.frequency_key(length)), hf_inv_freq)


@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_round_trip_through_config_update(case):
    options = ROUND_TRIPS[case]
    config = transformers.LlamaConfig(**SIZES)
    config.update(rope_config_to_hf(RotaryEncoding(64, 4, **options), spelling="rope_parameters"))
    assert rope_options_from_hf(config) == options


def test_default_spelling_is_the_installed_transformers_one():
    fields = rope_config_to_hf(RotaryEncoding(64, 4, scaling="linear", factor=2.0))
    assert fields == {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0,
                                          "partial_rotary_factor": 1.0, "factor": 2.0}}
    assert rope_config_to_hf(RotaryEncoding(64, 4), spelling="rope_scaling") == {
        "rope_theta": 10000.0, "partial_rotary_factor": 1.0, "rope_scaling": None}


def test_dynamic_and_longrope_lengths_go_to_max_position_embeddings():
    dynamic = rope_config_to_hf(RotaryEncoding(64, 4, scaling="dynamic", factor=2.0, original_max_position=128))
    assert dynamic["max_position_embeddings"] == 128  # HF's dynamic NTK reads L0 there
    longrope = rope_config_to_hf(RotaryEncoding(64, 4, **ROUND_TRIPS["longrope_max_position"]))
    assert longrope["max_position_embeddings"] == 512 and "factor" not in longrope["rope_parameters"]
    assert "max_position_embeddings" not in rope_config_to_hf(RotaryEncoding(64, 4, **ROUND_TRIPS["yarn"]))


def test_static_ntk_becomes_plain_rope_with_the_ntk_base():
    encoder = RotaryEncoding(64, 4, scaling="ntk", factor=4.0)
    fields = rope_config_to_hf(encoder)
    assert fields["rope_parameters"] == {"rope_type": "default", "rope_theta": ntk_base(10000.0, 4.0, 16),
                                         "partial_rotary_factor": 1.0}
    config = transformers.LlamaConfig(**SIZES, **fields)
    assert_frequencies(encoder.inv_freq, LlamaRotaryEmbedding(config).inv_freq)
    assert torch.equal(rope_encoder_from_hf(config).inv_freq, encoder.inv_freq)


# ------------------------------------------------------------------------------------ errors
def test_unknown_rope_type_is_named():
    config = transformers.LlamaConfig(**SIZES, rope_parameters=dict(rope_type="proportional", rope_theta=10000.0))
    with pytest.raises(ValueError, match=r"rope_type='proportional'.*supported rope types"):
        rope_options_from_hf(config)


@pytest.mark.parametrize("case, field", [
    (dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3]), "mrope_section"),
    (dict(rope_type="linear", rope_theta=10000.0, factor=2.0, beta_fast=32.0), "beta_fast"),
    (dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, low_freq_factor=1.0), "low_freq_factor"),
])
def test_unrepresentable_field_is_named(case, field):
    with pytest.raises(ValueError, match=rf"{field}=.*cannot be represented"):
        rope_options_from_hf(llama("rope_parameters", case))


def test_dynamic_original_length_other_than_max_position_embeddings_is_refused():
    case = dict(CASES["dynamic"], original_max_position_embeddings=64)
    with pytest.raises(ValueError, match=r"original_max_position_embeddings=64.*max_position_embeddings=256"):
        rope_options_from_hf(llama("rope_parameters", case))
    same = dict(CASES["dynamic"], original_max_position_embeddings=256)
    assert rope_options_from_hf(llama("rope_parameters", same))["original_max_position"] == 256


def test_missing_required_field_is_named():
    case = {k: v for k, v in CASES["llama3"].items() if k != "low_freq_factor"}
    with pytest.raises(ValueError, match=r"needs the field\(s\) \['low_freq_factor'\]"):
        rope_options_from_hf(legacy(case))


def test_partial_rotary_factor_on_llama_family_is_refused():
    config = transformers.LlamaConfig(**SIZES, rope_parameters=dict(rope_type="default", rope_theta=10000.0,
                                                                     partial_rotary_factor=0.5))
    with pytest.raises(ValueError, match=r"partial_rotary_factor=0.5 on a 'llama' config"):
        rope_options_from_hf(config)


def test_per_layer_rope_dicts_are_refused():
    config = transformers.LlamaConfig(**SIZES, rope_parameters={
        "full_attention": dict(rope_type="default", rope_theta=10000.0),
        "sliding_attention": dict(rope_type="linear", rope_theta=10000.0, factor=2.0)})
    with pytest.raises(ValueError, match=r"per-layer-type rope dicts \['full_attention', 'sliding_attention'\]"):
        rope_options_from_hf(config)


def test_conflicting_type_and_rope_type_are_refused():
    config = legacy(CASES["linear"])
    config.rope_scaling = dict(config.rope_scaling, rope_type="dynamic")
    with pytest.raises(ValueError, match=r"type='linear' and rope_type='dynamic'"):
        rope_options_from_hf(config)


def test_config_without_rope_is_refused():
    with pytest.raises(ValueError, match="BertConfig has no RoPE fields"):
        rope_options_from_hf(transformers.BertConfig())


@pytest.mark.parametrize("config", [dict(SIZES), None, "meta-llama/Llama-2-7b-hf"])
def test_non_config_input_is_a_type_error(config):
    with pytest.raises(TypeError, match="config must be a transformers PretrainedConfig"):
        rope_options_from_hf(config)


@pytest.mark.parametrize("options, field", [
    (dict(xpos=True), "xpos=True"),
    (dict(interleaved=True), "interleaved=True"),
    (dict(xpos=True, scaling="linear", factor=2.0), "xpos=True"),
])
def test_features_hf_cannot_express_are_named(options, field):
    with pytest.raises(ValueError, match=field):
        rope_config_to_hf(RotaryEncoding(64, 4, **options))


def test_subclass_with_its_own_frequencies_is_refused():
    class Doubled(RotaryEncoding):
        def compute_inverse_frequencies(self):
            return 2 * super().compute_inverse_frequencies()

    with pytest.raises(ValueError, match=r"Doubled overrides RotaryEncoding.compute_inverse_frequencies"):
        rope_config_to_hf(Doubled(64, 4))


def test_bad_encoder_and_spelling():
    with pytest.raises(TypeError, match=r"encoder must be a RotaryEncoding .*, got"):
        rope_config_to_hf(pet.get_encoder("alibi", 64, 4))
    with pytest.raises(ValueError, match=r"spelling must be one of \('rope_parameters', 'rope_scaling'\)"):
        rope_config_to_hf(RotaryEncoding(64, 4), spelling="rope_params")
