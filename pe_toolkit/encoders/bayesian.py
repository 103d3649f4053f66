"""Bayesian Attention Mechanism (BAM): the positional encoding as a log-prior over relative position.

Bianchessi et al. 2025, "Bayesian Attention Mechanism: A Probabilistic Framework for Positional
Encoding and Context Length Extrapolation", arXiv:2505.22842 (official code: ArthurSBianchessi/BAM).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionBiasEncoding, heads_first, relative_distance
from pe_toolkit.encoders.bias import alibi_slopes
from pe_toolkit.registry import register_encoder


@register_encoder(
    "bam",
    relative=True,
    reference="Bianchessi et al. 2025, Bayesian Attention Mechanism: A Probabilistic Framework for "
    "Positional Encoding and Context Length Extrapolation, arXiv:2505.22842",
)
class BAM(PositionBiasEncoding):
    """Generalized-Gaussian log-prior bias ``-exp(scale_h) * (|(j - i) - mu_h| + 1e-5) ** shape_h``.

    With ``mu_h = 2 sinh(loc_h)``. Initialisation (``shape = 1``, ``scale = log(alibi slope)``,
    ``loc = 0``) makes BAM equal ALiBi exactly (up to a per-head constant that softmax ignores).

    Options:
        train_shape, train_scale, train_loc: which of the three per-head parameters learn (all True,
            as the paper's training script).
    """

    eps = 1e-5

    def __init__(
        self,
        dim: int,
        num_heads: int,
        *,
        train_shape: bool = True,
        train_scale: bool = True,
        train_loc: bool = True,
        causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        for name, flag in (("train_shape", train_shape), ("train_scale", train_scale), ("train_loc", train_loc)):
            if not isinstance(flag, bool):
                raise TypeError(f"bam: {name} must be a bool, got {flag!r}")
        self.shape = nn.Parameter(torch.ones(num_heads), requires_grad=train_shape)
        self.scale = nn.Parameter(alibi_slopes(num_heads).log().float(), requires_grad=train_scale)
        self.loc = nn.Parameter(torch.zeros(num_heads), requires_grad=train_loc)

    def location(self) -> Tensor:
        """``mu_h = exp(loc_h) - exp(-loc_h)``, ``(H,)``."""
        return 2 * torch.sinh(self.loc)

    def position_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype) -> Tensor:
        delta = relative_distance(q_pos.to(dtype), k_pos.to(dtype)).unsqueeze(-1)  # j - i
        mu, shape, scale = self.location().to(dtype), self.shape.to(dtype), self.scale.to(dtype)
        return heads_first(-scale.exp() * ((delta - mu).abs() + self.eps) ** shape)
