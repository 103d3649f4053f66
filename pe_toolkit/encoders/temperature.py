"""NoPE with an attention temperature: uniform scale or HeadScale (one learned scale per head).

Wang et al. 2024, "Length Generalization of Causal Transformers without Position Encoding",
arXiv:2404.12224 (official code: AntNLP/nope_head_scale). Without positional encoding, attention
spreads out ("distraction") on inputs longer than those seen in training; sharpening the logits,
``lambda * q.k / sqrt(d)`` with ``lambda > 1``, restores it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionalEncoding, check_float
from pe_toolkit.registry import register_encoder


@register_encoder(
    "nope_temperature",
    relative=True,  # no positional information at all: trivially a function of i - j
    reference="Wang et al. 2024, Length Generalization of Causal Transformers without Position "
    "Encoding, arXiv:2404.12224",
)
class TemperatureNoPE(PositionalEncoding):
    """NoPE whose attention logits are multiplied by ``lambda`` (queries scaled, keys untouched).

    Options:
        scale: ``lambda`` (1.0 = plain NoPE; the paper tries 1.2-1.8 for UniformScale and
            initialises HeadScale at 1.6).
        learned: HeadScale — one learned ``lambda`` per head (per layer when the Transformer uses
            one encoding per layer, ``share_encoding=False``), initialised to ``scale``.
        min_scale: lower bound re-imposed by :meth:`constrain_` after each optimizer step
            (the paper's "focus" constraint, ``lambda >= 1``, so attention can only sharpen).

    The paper fine-tunes HeadScale alone with the rest of the model frozen
    (``Transformer.train_positional_only()``).
    """

    def __init__(
        self, dim: int, num_heads: int, *, scale: float = 1.0, learned: bool = False, min_scale: float = 1.0,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        scale = check_float("scale", scale)
        self.min_scale = check_float("min_scale", min_scale, positive=False)
        if scale < self.min_scale:
            raise ValueError(f"nope_temperature: scale ({scale}) must be >= min_scale ({self.min_scale})")
        if not isinstance(learned, bool):
            raise TypeError(f"nope_temperature: learned must be a bool, got {learned!r}")
        self.learned = learned
        values = torch.full((num_heads,), scale)
        if learned:
            self.head_scale = nn.Parameter(values)
        else:
            self.register_buffer("head_scale", values, persistent=False)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        return q * self.head_scale.to(q.dtype).view(-1, 1, 1), k

    @torch.no_grad()
    def constrain_(self) -> None:
        self.head_scale.clamp_(min=self.min_scale)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", learned={self.learned}, min_scale={self.min_scale}"
