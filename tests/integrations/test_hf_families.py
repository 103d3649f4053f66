"""Every supported HF family, swapped: own RoPE reproduces HF, ALiBi and T5 train and decode left-padded
batches, and a saved swapped model reloads with plain ``from_pretrained``.

The functions are those of ``python -m pe_toolkit.integrations.hf.check_families`` (the tutorial's
table); the tiny configs switch on what each family does around positions (q/k norms, soft-capping,
attention scalars, alternating sliding windows, per-layer rope settings, NoPE layers, partial rotary,
fused projections). Nothing downloads.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from pe_toolkit.integrations.hf import check_families  # noqa: E402
from pe_toolkit.integrations.hf.swap import FAMILIES  # noqa: E402

ASKED = FAMILIES[:12]  # the families issue 41 names (with Llama, Qwen2, Mistral): every check
FURTHER = FAMILIES[12:]  # the other families that fit: the own-RoPE check


def test_every_family_has_a_tiny_config():
    assert set(check_families.family_configs()) == set(FAMILIES)


@pytest.mark.parametrize("family", FAMILIES)
def test_own_rope_swap_reproduces_hf(family):
    """Float32 logits of a left-padded batch within 1e-4 of HF's and HF's greedy tokens."""
    difference, same_tokens = check_families.own_rope(family)
    assert difference <= 1e-4 and same_tokens, (difference, same_tokens)


# T5 (a learned bias) on every asked family; ALiBi on those with their own attention rules (soft-capping and
# scalar, per-layer rope and windows, NoPE layers, partial rotary); the table measures both on every family
CASES = [(family, "t5") for family in ASKED] + [
    (family, "alibi") for family in ("Gemma2ForCausalLM", "Gemma3ForCausalLM", "SmolLM3ForCausalLM",
                                     "GPTNeoXForCausalLM")]


@pytest.mark.parametrize(("family", "name"), CASES)
def test_alibi_and_t5_train_and_decode_left_padded_batches(family, name):
    before, after, padded_equals_alone = check_families.train_and_generate(family, name)
    assert after < 0.5 * before, (before, after)
    assert padded_equals_alone


@pytest.mark.parametrize("family", ASKED)
def test_plain_from_pretrained_reloads_the_swapped_model(family):
    assert check_families.reload(family) == 0.0
