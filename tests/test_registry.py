"""The encoder registry: lookup errors, registration rules, filters and per-encoder metadata."""

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit import registry
from pe_toolkit.encoders import (
    BAM,
    FIRE,
    KERPLE,
    ALiBi,
    CoPE,
    LearnedEncoding,
    PositionalEncoding,
    RotaryEncoding,
    Sandwich,
    ScaledSinusoidalEncoding,
    SinusoidalEncoding,
    T5RelativeBias,
)
from pe_toolkit.registry import encoder_info, get_encoder, list_encoders, register_encoder

# name: (class, hooks, relative, arXiv id of the reference)
SEQUENCE_ENCODERS = {
    "nope": (PositionalEncoding, (), True, "2305.19466"),
    "sinusoidal": (SinusoidalEncoding, ("embed",), False, "1706.03762"),
    "scaled_sinusoidal": (ScaledSinusoidalEncoding, ("embed",), False, "2202.10447"),
    "learned": (LearnedEncoding, ("embed",), False, "1705.03122"),
    "rope": (RotaryEncoding, ("rotate",), True, "2104.09864"),
    "t5": (T5RelativeBias, ("bias",), True, "1910.10683"),
    "alibi": (ALiBi, ("bias",), True, "2108.12409"),
    "kerple": (KERPLE, ("bias",), True, "2205.09921"),
    "fire": (FIRE, ("bias",), False, "2310.04418"),  # normalised by the query position itself
    "sandwich": (Sandwich, ("bias",), True, "2212.10356"),
    "cope": (CoPE, ("bias",), False, "2405.18719"),  # positions depend on content
    "bam": (BAM, ("bias",), True, "2505.22842"),
}


@pytest.fixture
def scratch_registry(monkeypatch):
    """Registrations made by a test are dropped afterwards."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    return registry._REGISTRY


# -------------------------------------------------------------------------------------- lookup
def test_unknown_name_suggests_close_match():
    with pytest.raises(ValueError, match=r"unknown encoder 'rop'; did you mean 'rope'") as info:
        get_encoder("rop", 64, 4)
    assert "registered:" in str(info.value) and "alibi" in str(info.value)
    with pytest.raises(ValueError, match="did you mean 'alibi'"):
        encoder_info("alibl")


def test_unknown_name_without_close_match_lists_registered():
    with pytest.raises(ValueError, match="unknown encoder 'qqqqqqqq'; registered: .*rope") as info:
        get_encoder("qqqqqqqq", 64, 4)
    assert "did you mean" not in str(info.value)


def test_name_must_be_a_string():
    with pytest.raises(TypeError, match="str"):
        get_encoder(None, 64, 4)


def test_get_encoder_passes_dim_heads_and_options():
    enc = get_encoder("rope", dim=64, num_heads=4, base=500.0, rotary_fraction=0.5)
    assert isinstance(enc, RotaryEncoding)
    assert (enc.dim, enc.num_heads, enc.base, enc.rotary_dim) == (64, 4, 500.0, 8)
    with pytest.raises(TypeError):
        get_encoder("alibi", 64, 4, not_an_option=1)


# -------------------------------------------------------------------------------- registration
def test_duplicate_registration_raises(scratch_registry):
    class Impostor(PositionalEncoding):
        pass

    with pytest.raises(ValueError, match="'rope' is already registered to RotaryEncoding"):
        register_encoder("rope", relative=True, reference="x")(Impostor)
    assert encoder_info("rope").cls is RotaryEncoding
    assert Impostor.registry_name == "nope"  # inherited, untouched


def test_re_registering_the_same_class_is_idempotent(scratch_registry):
    register_encoder("alibi", relative=True, reference=encoder_info("alibi").reference)(ALiBi)
    assert encoder_info("alibi").cls is ALiBi


def test_only_positional_encodings_can_register(scratch_registry):
    with pytest.raises(TypeError, match="not a PositionalEncoding subclass"):
        register_encoder("mlp", relative=False, reference="x")(torch.nn.Linear)
    with pytest.raises(TypeError, match="not a PositionalEncoding subclass"):
        register_encoder("fn", relative=False, reference="x")(lambda: None)
    assert "mlp" not in list_encoders() and "fn" not in list_encoders()


def test_registration_records_metadata_and_hooks(scratch_registry):
    @register_encoder("zz_bias_only", relative=False, reference="Someone 2030", domain="testing",
                      example_options={"width": 3})
    class BiasOnly(PositionalEncoding):
        def bias(self, q, k, q_pos, k_pos):
            return None

    @register_encoder("zz_rotary_child", relative=True, reference="Someone 2031", domain="testing")
    class RotaryChild(RotaryEncoding):
        pass

    info = encoder_info("zz_bias_only")
    assert (info.name, info.domain, info.cls, info.hooks, info.relative, info.reference) == (
        "zz_bias_only", "testing", BiasOnly, ("bias",), False, "Someone 2030"
    )
    assert info.example_options == {"width": 3}
    assert BiasOnly.registry_name == "zz_bias_only"
    assert encoder_info("zz_rotary_child").hooks == ("rotate",)  # inherited overrides count
    assert isinstance(get_encoder("zz_rotary_child", 16, 2), RotaryChild)


# ------------------------------------------------------------------------------------- filters
def test_list_encoders_filters_by_domain_and_pattern(scratch_registry):
    for name, domain in [("zz_a1", "dom_a"), ("zz_a2", "dom_a"), ("zz_b1", "dom_b"), ("yy_a3", "dom_a")]:
        register_encoder(name, relative=True, reference="x", domain=domain)(type(name, (PositionalEncoding,), {}))
    assert list_encoders(domain="dom_a") == ["yy_a3", "zz_a1", "zz_a2"]
    assert list_encoders(domain="dom_b") == ["zz_b1"]
    assert list_encoders(domain="dom_a", pattern="zz_*") == ["zz_a1", "zz_a2"]
    assert list_encoders(pattern="zz_*") == ["zz_a1", "zz_a2", "zz_b1"]
    assert list_encoders(pattern="*_a?") == ["yy_a3", "zz_a1", "zz_a2"]
    unknown = r"unknown domain 'dom_d'; did you mean 'dom_[ab]' or 'dom_[ab]'\? known: .*dom_a, dom_b"
    with pytest.raises(ValueError, match=unknown):
        list_encoders(domain="dom_d")
    sequence = list_encoders(domain="sequence")
    assert not any(n.startswith(("zz_", "yy_")) for n in sequence)
    everything = list_encoders()
    assert everything == sorted(everything)
    assert set(sequence) | {"zz_a1", "zz_a2", "zz_b1", "yy_a3"} <= set(everything)


def test_list_encoders_default_and_top_level_api():
    names = pet.list_encoders()
    assert names == sorted(names)
    assert set(SEQUENCE_ENCODERS) <= set(pet.list_encoders(domain="sequence"))
    assert pet.list_encoders(pattern="rope*")[0] == "rope"
    assert pet.list_encoders(pattern="*sinusoidal") == ["scaled_sinusoidal", "sinusoidal"]
    assert pet.encoder_info is encoder_info and pet.get_encoder is get_encoder


# ------------------------------------------------------------------------------------ metadata
@pytest.mark.parametrize("name", sorted(SEQUENCE_ENCODERS))
def test_sequence_encoder_metadata(name):
    cls, hooks, relative, arxiv = SEQUENCE_ENCODERS[name]
    info = encoder_info(name)
    assert info.name == name and info.domain == "sequence"
    assert info.cls is cls and cls.registry_name == name
    assert info.hooks == hooks
    assert info.relative is relative
    assert f"arXiv:{arxiv}" in info.reference
    enc = get_encoder(name, 16, 2, **info.example_options)
    assert type(enc) is cls and (enc.dim, enc.num_heads, enc.head_dim) == (16, 2, 8)


def test_learned_example_options_are_required():
    assert encoder_info("learned").example_options == {"max_len": 64}
    with pytest.raises(TypeError, match="max_len"):
        get_encoder("learned", 16, 2)
