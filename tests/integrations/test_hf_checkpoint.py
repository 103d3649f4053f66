"""Swapped HF checkpoints: plain from_pretrained never loads them as the un-swapped model; atomic saving;
the model's own rope settings as the default; reproducible swaps; PEFT LoRA with the encoder trained.

Tiny random models built from configs; nothing downloads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")

from hf_helpers import random_causal_lm  # noqa: E402

from pe_toolkit.atomic import AtomicWriteError  # noqa: E402
from pe_toolkit.integrations.hf import checkpoint, save_swapped, swap_positional_encoding, swapped_encoding  # noqa: E402

SIZES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=97, max_position_embeddings=128, pad_token_id=0)


def qwen2(theta: float = 1e6):
    return random_causal_lm(transformers.Qwen2Config(**SIZES, rope_parameters={"rope_type": "default",
                                                                                "rope_theta": theta}))


def tokens(batch: int = 2, length: int = 12) -> torch.Tensor:
    return torch.randint(1, SIZES["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(1))


def trained(model):
    """``model`` with its encoder's parameters moved off their initial values."""
    with torch.no_grad():
        for p in swapped_encoding(model).parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


# ------------------------------------------------------------------- plain from_pretrained is safe
def test_plain_from_pretrained_is_the_swapped_model_or_says_how(tmp_path):
    """In a fresh interpreter with only transformers imported (pe_toolkit installed but not imported),
    ``AutoModelForCausalLM.from_pretrained`` of a swapped checkpoint refuses with HF's message asking for
    ``trust_remote_code=True``; with it, the code saved beside the weights builds the swapped model (same
    logits); after ``import pe_toolkit`` alone the same; after ``import pe_toolkit.integrations.hf`` it
    loads without ``trust_remote_code``."""
    model = trained(swap_positional_encoding(qwen2(), "t5"))
    x = tokens()
    with torch.no_grad():
        expected = model(x).logits
    model.save_pretrained(tmp_path / "t5")
    config = json.loads((tmp_path / "t5" / "config.json").read_text())
    assert config["model_type"] == "pe_toolkit_qwen2" and config["architectures"] == ["PeToolkitQwen2ForCausalLM"]
    assert config["auto_map"]["AutoModelForCausalLM"] == "modeling_pe_toolkit.PeToolkitQwen2ForCausalLM"
    assert (tmp_path / "t5" / checkpoint.CODE_FILE).is_file()
    torch.save((x, expected), tmp_path / "expected.pt")
    script = f"""
import torch, transformers
path = {str(tmp_path / 't5')!r}
x, expected = torch.load({str(tmp_path / 'expected.pt')!r})
for first in ("transformers", "pe_toolkit"):
    __import__(first)
    try:
        transformers.AutoModelForCausalLM.from_pretrained(path)
        print("loaded without trust_remote_code")
    except ValueError as error:
        assert "trust_remote_code=True" in str(error), error
        print("refused")
model = transformers.AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)
with torch.no_grad():
    print(type(model).__name__, float((model(x).logits - expected).abs().max()))
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert [line.endswith("refused") for line in lines].count(True) == 2, out.stdout  # HF's prompt text precedes it
    assert "loaded without trust_remote_code" not in out.stdout
    name, error = lines[-1].split()
    assert name == "PeToolkitQwen2ForCausalLM" and float(error) <= 1e-5
    # here pe_toolkit.integrations.hf is imported: the registered type loads without trust_remote_code
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "t5")
    assert isinstance(back, transformers.Qwen2ForCausalLM) and swapped_encoding(back).registry_name == "t5"
    with torch.no_grad():
        torch.testing.assert_close(back(x).logits, expected, rtol=0, atol=0)


def test_save_is_atomic_and_keeps_other_files(tmp_path, monkeypatch):
    """A save that fails midway leaves the previous checkpoint (config and weights) as it was, and no
    temporary folder; a save that succeeds replaces both and keeps files it does not write."""
    target = tmp_path / "model"
    first = trained(swap_positional_encoding(qwen2(), "alibi"))
    first.save_pretrained(target)
    (target / "tokenizer.json").write_text("{}")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    second = trained(swap_positional_encoding(qwen2(theta=1e4), "t5"))
    save = transformers.Qwen2ForCausalLM.save_pretrained

    def fail_after_writing(model, directory, *args, **kwargs):
        save(model, directory, *args, **kwargs)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(transformers.Qwen2ForCausalLM, "save_pretrained", fail_after_writing)
    with pytest.raises(AtomicWriteError, match="cannot write .*model.*No space left on device.*previous checkpoint"):
        save_swapped(second, target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    monkeypatch.setattr(transformers.Qwen2ForCausalLM, "save_pretrained", save)
    second.save_pretrained(target)
    assert (target / "tokenizer.json").read_text() == "{}"
    assert json.loads((target / "config.json").read_text())["pe_toolkit"]["encoding"] == "t5"
    back = transformers.AutoModelForCausalLM.from_pretrained(target)
    with torch.no_grad():
        torch.testing.assert_close(back(tokens()).logits, second(tokens()).logits, rtol=0, atol=0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    with pytest.raises(ValueError, match="push_to_hub=True"):
        second.save_pretrained(target, push_to_hub=True)
    with pytest.raises(TypeError, match="save_swapped takes a model changed by swap_positional_encoding"):
        save_swapped(qwen2(), target)


# ------------------------------------------------------------------------------ defaults, seeds
def test_rope_starts_from_the_models_own_settings():
    """Qwen2 with theta 1e6: swapping in "rope" reproduces it; a scaling keeps the model's base."""
    model = qwen2()
    x = tokens(2, 40)
    with torch.no_grad():
        expected = model(x).logits
        swap_positional_encoding(model, "rope")
        torch.testing.assert_close(model(x).logits, expected, rtol=1e-5, atol=1e-5)
    assert model.config.pe_toolkit["options"] == {"base": 1e6}
    swap_positional_encoding(model, "rope", scaling="yarn", factor=2.0, original_max_position=64)
    assert model.config.pe_toolkit["options"] == {"base": 1e6, "scaling": "yarn", "factor": 2.0,
                                                  "original_max_position": 64}
    swap_positional_encoding(model, "rope", base=1e4)  # an override wins
    assert model.config.pe_toolkit["options"] == {"base": 1e4}
    with torch.no_grad():
        assert (model(x).logits - expected).abs().max() > 1e-3


def test_a_seed_or_a_state_dict_makes_the_swap_reproducible():
    x = tokens()
    models = [swap_positional_encoding(qwen2(), "t5", seed=seed) for seed in (3, 3, 4)]
    with torch.no_grad():
        a, b, c = (m(x).logits for m in models)
    assert torch.equal(a, b) and not torch.allclose(a, c)
    assert models[0].config.pe_toolkit["seed"] == 3
    copied = swap_positional_encoding(qwen2(), "t5", state_dict=swapped_encoding(models[2]).state_dict())
    with torch.no_grad():
        assert torch.equal(copied(x).logits, c)
    with pytest.raises(ValueError, match=r"state_dict does not fit encoding 't5': missing \['relative_attention"):
        swap_positional_encoding(qwen2(), "t5", state_dict={})
    with pytest.raises(ValueError, match="seed must be an int or None, got 1.5"):
        swap_positional_encoding(qwen2(), "t5", seed=1.5)


# --------------------------------------------------------------------------------------- PEFT
@pytest.mark.parametrize("target", ["pe_toolkit", "encoding"])
def test_peft_lora_trains_the_encoder_and_the_adapter_carries_it(target, tmp_path):
    """``modules_to_save=["pe_toolkit"]`` (or ``["encoding"]``): the layers use the adapter's copy, whose
    parameters move in training, are saved in the adapter and, loaded onto a freshly swapped base (other
    initial encoder), give the trained model's logits."""
    peft = pytest.importorskip("peft")
    config = transformers.LlamaConfig(**SIZES)
    base = swap_positional_encoding(random_causal_lm(config), "t5", seed=0)
    initial = swapped_encoding(base).relative_attention_bias.weight.detach().clone()
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                      modules_to_save=[target]))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    x = tokens(4, 16)
    model.train()
    losses = []
    for _ in range(5):
        loss = model(x, labels=x).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    moved = swapped_encoding(model).relative_attention_bias.weight
    assert (moved - initial).abs().max() > 1e-3
    model.eval()
    with torch.no_grad():
        expected = model(x).logits
        with model.disable_adapter():  # the frozen original encoder and no LoRA: a different model
            assert (model(x).logits - expected).abs().max() > 1e-3
    model.save_pretrained(tmp_path / "adapter")
    fresh = swap_positional_encoding(random_causal_lm(config), "t5", seed=7)
    back = peft.PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(back(x).logits, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("family", "name", "options"), [
    ("LlamaForCausalLM", "rope", dict(scaling="yarn", factor=2.0, original_max_position=64)),
    ("Gemma3ForCausalLM", "rope", {}),  # one rope encoder per layer type
    ("Qwen3ForCausalLM", "cope", {}),
    ("Phi3ForCausalLM", "learned", {}),
])
def test_encoders_with_computed_buffers_reload_exactly(family, name, options, tmp_path):
    """from_pretrained builds the model on the meta device; the encoders (whose buffers are computed at
    construction) are built on the CPU and rebuilt after loading: the same logits, buffers off meta."""
    from pe_toolkit.integrations.hf import check_families

    model = swap_positional_encoding(check_families.build(family), name, **options)
    ids, mask = check_families.left_padded()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    model.save_pretrained(tmp_path / "m")
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "m")
    assert all(b.device.type == "cpu" for b in back.buffers())
    with torch.no_grad():
        torch.testing.assert_close(back(ids, attention_mask=mask).logits, expected, rtol=0, atol=0)


def test_changing_the_attention_implementation_after_the_swap_is_refused():
    model = swap_positional_encoding(qwen2(), "alibi")
    model.set_attn_implementation("sdpa")
    with pytest.raises(ValueError, match="needs attn_implementation='pe_toolkit', but it is now 'sdpa'"):
        model(tokens())


def test_a_subclass_of_a_family_is_refused_before_anything_changes():
    class Mine(transformers.Qwen2ForCausalLM):
        pass

    model = Mine(transformers.Qwen2Config(**SIZES))
    with pytest.raises(TypeError, match="Mine subclasses Qwen2ForCausalLM: only the family's own class"):
        swap_positional_encoding(model, "alibi")
    assert swapped_encoding(model) is None and model.config._attn_implementation != "pe_toolkit"
