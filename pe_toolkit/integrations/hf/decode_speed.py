"""Measure cached decoding of a swapped HF model: milliseconds per generated token.

Run: ``python -m pe_toolkit.integrations.hf.decode_speed [--cache 1024 4096] [--rounds 5] [--steps 32]``.

A tiny random-weight Llama (hidden 256, 4 layers, 4 heads of 64, float32, nothing downloads) on one
CPU thread. For each cache length, a prompt of that length is prefilled once per variant; then each
round times ``--steps`` single-token steps (``model(token, past_key_values=cache)``) of every variant
in turn, from a copy of its prefilled cache, so the variants share the machine's state round by
round. Variants: HF's own model (its RoPE), the swap to ``"rope"`` (the model's own settings) and to
``"alibi"``, each as it runs now (rotated keys kept in the cache, one ALiBi bias per forward for all
layers) and as it ran before (every cached key rotated again on every step, the bias built in every
layer: :data:`~pe_toolkit.integrations.hf.swap._CACHE_ROTATED_KEYS` and
:data:`~pe_toolkit.integrations.hf.swap._SHARE_POSITION_BIAS` off). Reported: the median over rounds of
ms/token, and each variant's ratio to HF's model measured in the same run.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any

import torch

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)

import transformers  # noqa: E402

from pe_toolkit.integrations.hf import swap as swap_module  # noqa: E402
from pe_toolkit.integrations.hf.swap import swap_positional_encoding  # noqa: E402

CONFIG = dict(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=4, max_position_embeddings=8192)


def build(name: str | None) -> Any:
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).eval()
    return model if name is None else swap_positional_encoding(model, name)


def use(now: bool) -> None:
    """Run the swap as it runs now, or as it ran before (see the module docstring)."""
    swap_module._CACHE_ROTATED_KEYS = swap_module._SHARE_POSITION_BIAS = now


def steps_ms(model: Any, cache: Any, token: torch.Tensor, steps: int, now: bool) -> float:
    """ms per token of ``steps`` single-token steps from a copy of ``cache``."""
    use(now)
    cache = copy.deepcopy(cache)
    with torch.no_grad():
        start = time.perf_counter()
        for _ in range(steps):
            out = model(token, cache=cache, use_cache=True)
            token = out.logits[:, -1:].argmax(-1)
        return (time.perf_counter() - start) * 1000 / steps


def measure(cache_lengths: list[int], rounds: int, steps: int) -> list[dict[str, Any]]:
    torch.set_num_threads(1)
    variants = {"hf": (None, True), "rope": ("rope", True), "rope (before)": ("rope", False),
                "alibi": ("alibi", True), "alibi (before)": ("alibi", False)}
    models = {name: build(enc) for name, enc in {"hf": None, "rope": "rope", "alibi": "alibi"}.items()}
    rows = []
    for length in cache_lengths:
        prompt = torch.randint(0, CONFIG["vocab_size"], (1, length), generator=torch.Generator().manual_seed(1))
        prefilled = {}
        for label, (encoder, cached) in variants.items():
            use(cached)
            cache = transformers.DynamicCache(config=models[encoder or "hf"].config)
            with torch.no_grad():
                logits = models[encoder or "hf"](prompt, cache=cache, use_cache=True).logits
            prefilled[label] = (cache, logits[:, -1:].argmax(-1))
        times: dict[str, list[float]] = {label: [] for label in variants}
        for _ in range(rounds):
            for label, (encoder, cached) in variants.items():
                cache, token = prefilled[label]
                times[label].append(steps_ms(models[encoder or "hf"], cache, token, steps, cached))
        use(True)
        hf = statistics.median(times["hf"])
        for label in variants:
            ms = statistics.median(times[label])
            rows.append({"cache": length, "variant": label, "ms/token": ms, "vs hf": ms / hf})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=int, nargs="+", default=[1024, 4096])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args(argv)
    print(f"{'cache':>6} | {'variant':<18} | {'ms/token':>8} | vs HF")
    for row in measure(args.cache, args.rounds, args.steps):
        print(f"{row['cache']:>6} | {row['variant']:<18} | {row['ms/token']:8.3f} | {row['vs hf']:.2f}x")


if __name__ == "__main__":
    main()
