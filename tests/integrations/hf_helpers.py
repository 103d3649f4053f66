"""Shared by the HF integration tests: tiny random HF causal LMs built from configs (nothing downloads)."""

from __future__ import annotations

import torch


def random_causal_lm(config, implementation: str = "sdpa", dtype=torch.float32):
    """``AutoModelForCausalLM.from_config(config)`` in eval mode, seeded, with its biases and norm weights
    moved off their initial zeros / ones (so a port that drops them cannot pass)."""
    import transformers

    config._attn_implementation = implementation
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.to(dtype)
