"""Measure :func:`swap_positional_encoding` on every supported HF family.

Run: ``python -m pe_toolkit.integrations.hf.check_families [FAMILY ...]``.

For each family, a tiny random-weight float32 model built from a config (nothing downloads) that
switches on what the family does around its positions (q/k norms, soft-capping, attention scalars,
alternating sliding windows with per-layer rope settings, NoPE layers, partial rotary, fused
projections). Measured, as the HF tutorial's table reports:

* ``rope logits``: the largest difference between HF's logits and those after swapping in ``"rope"``
  with the model's own settings, on a left-padded batch (real tokens only);
* ``rope tokens``: whether greedy ``generate`` of the left-padded batch gives HF's tokens;
* ``alibi`` / ``t5 loss``: the language-model loss on one batch before and after 20 AdamW steps;
* ``alibi`` / ``t5 padded``: whether greedy ``generate`` of a left-padded batch gives each prompt's
  tokens generated alone;
* ``reload``: a saved swapped model opened with ``AutoModelForCausalLM.from_pretrained`` gives the same
  logits (largest difference).

The tests (``tests/integrations/test_hf_families.py``) run the same functions.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from typing import Any

import torch

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

import transformers  # noqa: E402

from pe_toolkit.integrations.hf.swap import swap_positional_encoding  # noqa: E402

VOCAB = 97
SIZES = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
FURTHER = {
    # further families: the config class and what the family's tiny model needs
    "GemmaForCausalLM": ("GemmaConfig", dict(head_dim=16)),
    "OlmoForCausalLM": ("OlmoConfig", {}),
    "Olmo3ForCausalLM": ("Olmo3Config", dict(sliding_window=4)),
    "PhiForCausalLM": ("PhiConfig", {}),
    "CohereForCausalLM": ("CohereConfig", {}),
    "Cohere2ForCausalLM": ("Cohere2Config", dict(head_dim=16, sliding_window=4)),
    "Starcoder2ForCausalLM": ("Starcoder2Config", dict(sliding_window=5)),
    "HeliumForCausalLM": ("HeliumConfig", dict(head_dim=16)),
    "GlmForCausalLM": ("GlmConfig", dict(head_dim=16)),
    "Glm4ForCausalLM": ("Glm4Config", dict(head_dim=16)),
    "Exaone4ForCausalLM": ("Exaone4Config", dict(sliding_window=4)),
    "MixtralForCausalLM": ("MixtralConfig", dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2)),
    "Qwen2MoeForCausalLM": ("Qwen2MoeConfig", dict(MOE, shared_expert_intermediate_size=32)),
    "Qwen3MoeForCausalLM": ("Qwen3MoeConfig", dict(MOE, head_dim=16)),
    "ArceeForCausalLM": ("ArceeConfig", dict(head_dim=16)),
    "SeedOssForCausalLM": ("SeedOssConfig", dict(head_dim=16)),
    "ApertusForCausalLM": ("ApertusConfig", dict(head_dim=16)),
    "PersimmonForCausalLM": ("PersimmonConfig", {}),
    "BitNetForCausalLM": ("BitNetConfig", dict(head_dim=16)),
}
"""Tiny configs of the families beyond the twelve of :func:`family_configs`' first entries."""
WINDOWED = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]


def family_configs() -> dict[str, Any]:
    """``{family class name: tiny config}``, each with what the family does around its positions switched on."""
    t = transformers
    return {
        "LlamaForCausalLM": t.LlamaConfig(**SIZES, num_hidden_layers=2),
        "Qwen2ForCausalLM": t.Qwen2Config(**SIZES, num_hidden_layers=4, use_sliding_window=True, sliding_window=4,
                                          max_window_layers=2),
        "MistralForCausalLM": t.MistralConfig(**SIZES, num_hidden_layers=2, sliding_window=5),
        "Qwen3ForCausalLM": t.Qwen3Config(**SIZES, num_hidden_layers=2, head_dim=24,
                                          rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
        "Gemma2ForCausalLM": t.Gemma2Config(**SIZES, num_hidden_layers=4, head_dim=16, query_pre_attn_scalar=24,
                                            attn_logit_softcapping=5.0, final_logit_softcapping=3.0, sliding_window=4,
                                            layer_types=WINDOWED),
        "Gemma3ForCausalLM": t.Gemma3TextConfig(**SIZES, num_hidden_layers=4, head_dim=16, query_pre_attn_scalar=24,
                                                sliding_window=4, layer_types=WINDOWED, rope_parameters={
                                                    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                                    "full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": 1e6}}),
        "Phi3ForCausalLM": t.Phi3Config(**SIZES, num_hidden_layers=2, rope_parameters={
            "rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}),
        "Olmo2ForCausalLM": t.Olmo2Config(**SIZES, num_hidden_layers=2),
        "GPTNeoXForCausalLM": t.GPTNeoXConfig(**SIZES, num_hidden_layers=2, use_parallel_residual=True,
                                              rope_parameters={"rope_type": "default", "rope_theta": 1e4,
                                                               "partial_rotary_factor": 0.25}),
        "GraniteForCausalLM": t.GraniteConfig(**SIZES, num_hidden_layers=2, attention_multiplier=0.09,
                                              embedding_multiplier=2.0, residual_multiplier=0.5, logits_scaling=2.0),
        "SmolLM3ForCausalLM": t.SmolLM3Config(**SIZES, num_hidden_layers=4, no_rope_layer_interval=2),
        "MinistralForCausalLM": t.MinistralConfig(**SIZES, num_hidden_layers=4, sliding_window=4, head_dim=16,
                                                  layer_types=WINDOWED),
    } | {family: getattr(t, name)(**{**SIZES, "num_hidden_layers": 2, **extra})
         for family, (name, extra) in FURTHER.items()}


def build(family: str, config: Any = None) -> Any:
    """The tiny model of ``family`` in eval mode, seeded, norms and biases moved off their initial values."""
    config = copy.deepcopy(config if config is not None else family_configs()[family])
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, family)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
            else:
                p.mul_(3.0)  # larger weights: clear greedy choices
    return model


def left_padded(lengths: tuple[int, ...] = (9, 5)) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts of ``lengths`` real tokens (3 .. VOCAB-1), left-padded with token 0: ``(ids, attention_mask)``."""
    generator = torch.Generator().manual_seed(1)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, width - n:] = torch.randint(3, VOCAB, (n,), generator=generator)
        mask[row, width - n:] = 1
    return ids, mask


def greedy(model: Any, ids: torch.Tensor, mask: torch.Tensor | None, new: int = 6) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                              pad_token_id=0)


def own_rope(family: str) -> tuple[float, bool]:
    """(largest logit difference on the real tokens of a left-padded batch, same greedy tokens) after
    swapping in ``"rope"`` with the model's own settings."""
    model = build(family)
    ids, mask = left_padded()
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    expected_tokens = greedy(model, ids, mask)
    swap_positional_encoding(model, "rope")
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits
    real = mask.bool()
    return float((got[real] - expected[real]).abs().max()), bool(torch.equal(greedy(model, ids, mask),
                                                                             expected_tokens))


def train_and_generate(family: str, name: str, steps: int = 20) -> tuple[float, float, bool]:
    """(loss before, loss after ``steps`` AdamW steps on one batch, left-padded generate == each prompt alone)
    with ``name`` swapped in."""
    model = swap_positional_encoding(build(family), name, seed=0)
    generator = torch.Generator().manual_seed(2)
    batch = torch.randint(3, VOCAB, (4, 16), generator=generator)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    losses = []
    for _ in range(steps):
        loss = model(batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        final = float(model(batch, labels=batch).loss)
    lengths = (9, 5)
    ids, mask = left_padded(lengths)
    together = greedy(model, ids, mask)
    width = ids.shape[1]
    alone = all(torch.equal(together[row, width - n:], greedy(model, ids[row:row + 1, width - n:], None)[0])
                for row, n in enumerate(lengths))
    return losses[0], final, alone


def reload(family: str, name: str = "t5") -> float:
    """Largest logit difference after ``save_pretrained`` and plain ``AutoModelForCausalLM.from_pretrained``."""
    model = swap_positional_encoding(build(family), name, seed=0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    ids, mask = left_padded()
    with tempfile.TemporaryDirectory() as directory:
        model.save_pretrained(directory)
        back = transformers.AutoModelForCausalLM.from_pretrained(directory).eval()
    if type(back) is not type(model):
        raise AssertionError(f"{family}: reloaded as {type(back).__name__}, not {type(model).__name__}")
    with torch.no_grad():
        return float((back(ids, attention_mask=mask).logits - model(ids, attention_mask=mask).logits).abs().max())


def measure(family: str) -> dict[str, Any]:
    logits, tokens = own_rope(family)
    row: dict[str, Any] = {"family": family, "rope logits": logits, "rope tokens": tokens}
    for name in ("alibi", "t5"):
        before, after, padded = train_and_generate(family, name)
        row[f"{name} loss"] = (before, after)
        row[f"{name} padded"] = padded
    row["reload"] = reload(family)
    return row


def markdown(rows: list[dict[str, Any]]) -> str:
    """The tutorial's table."""
    lines = ["| family | own RoPE: max logit diff | own RoPE: greedy tokens | ALiBi: loss, 20 steps "
             "| ALiBi: padded = alone | T5: loss, 20 steps | T5: padded = alone | reload: max logit diff |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    yes = {True: "same", False: "DIFFERENT"}
    for r in rows:
        lines.append(f"| {r['family'].removesuffix('ForCausalLM')} | {r['rope logits']:.1e} | {yes[r['rope tokens']]} "
                     f"| {r['alibi loss'][0]:.2f} -> {r['alibi loss'][1]:.2f} | {yes[r['alibi padded']]} "
                     f"| {r['t5 loss'][0]:.2f} -> {r['t5 loss'][1]:.2f} | {yes[r['t5 padded']]} | {r['reload']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", help="family class names (default: all)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    families = args.families or list(family_configs())
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, float32, CPU")
    rows = []
    for family in families:
        rows.append(measure(family))
        print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    print(markdown(rows))


if __name__ == "__main__":
    main()
