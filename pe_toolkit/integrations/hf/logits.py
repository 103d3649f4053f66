"""An HF causal LM seen as a pe_toolkit language model: ``model(input_ids) -> logits``."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.extras import require_extra

require_extra("hf", __name__)


class CausalLMLogits(nn.Module):
    """Wraps an HF causal LM so that ``forward(input_ids (B, L)) -> logits (B, L, vocab)``, as a
    :class:`pe_toolkit.Transformer`; the training modules (``pe_toolkit.training.LanguageModelModule``)
    and benchmarks can then train and evaluate it unchanged. ``hf_model`` is the wrapped model (its
    parameters are this module's, under the ``hf_model.`` prefix).
    """

    def __init__(self, hf_model: Any) -> None:
        super().__init__()
        self.hf_model = hf_model

    def forward(self, input_ids: Tensor, positions: Tensor | None = None) -> Tensor:
        if positions is not None:
            positions = positions if positions.dim() == 2 else positions.expand(input_ids.shape[0], -1)
        return self.hf_model(input_ids=input_ids, position_ids=positions, use_cache=False).logits

    @torch.no_grad()
    def generate(self, prompt: Tensor, max_new_tokens: int) -> Tensor:
        """Greedy continuation ``(B, L + max_new_tokens)`` with HF's ``generate`` and KV cache."""
        return self.hf_model.generate(prompt, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens,
                                      do_sample=False, pad_token_id=0)
