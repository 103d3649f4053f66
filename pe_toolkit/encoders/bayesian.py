"""Bayesian Attention Mechanism (BAM): the positional encoding as a log-prior over relative position.

Bianchessi et al. 2025, "Bayesian Attention Mechanism: A Probabilistic Framework for Positional
Encoding and Context Length Extrapolation", arXiv:2505.22842 (official code: ArthurSBianchessi/BAM).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionBiasEncoding, score_bias
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

    shift_invariant = True

    def log_prior(self, head: Tensor, delta: Tensor) -> Tensor:
        """The prior of head ``head`` at relative positions ``delta = j - i`` (float), elementwise."""
        dtype = delta.dtype
        mu, shape, scale = self.location().to(dtype)[head], self.shape.to(dtype)[head], self.scale.to(dtype)[head]
        return -scale.exp() * ((delta - mu).abs() + self.eps) ** shape

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """The log-prior at ``k_pos - q_pos``."""
        return self.log_prior(head, k_pos.to(dtype) - q_pos.to(dtype))


@register_encoder(
    "bam_ssmax",
    relative=False,  # the Scalable-Softmax factor log(n_i) depends on the query's absolute position
    reference="Bianchessi et al. 2025, Bayesian Attention Mechanism, arXiv:2505.22842; Scalable-Softmax: "
    "Nakanishi 2025, arXiv:2501.19399",
)
class BAMSSMax(BAM):
    """BAM with Scalable-Softmax: logits ``(q.k / sqrt(d) + b_BAM) * log(n_i) * s_h``.

    ``n_i`` is the number of keys query ``i`` sees: ``q_pos_i + 1`` for causal attention (positions
    counted from 0, so it also holds while decoding with a KV cache), the number of keys otherwise.
    ``s_h`` is a learned per-head scale initialised to 1 (``init_ssmax_scale``). The factor is applied
    through both hooks: queries are multiplied by it in ``rotate`` and the prior in ``bias``.

    As in the paper's code, one prior (and here one ``s_h``) is shared by all layers unless the
    Transformer uses one encoding per layer. Options: those of :class:`BAM` plus ``init_ssmax_scale``.
    """

    def __init__(self, dim: int, num_heads: int, *, init_ssmax_scale: float = 1.0, **options) -> None:
        super().__init__(dim, num_heads, **options)
        self.ssmax_scale = nn.Parameter(torch.full((num_heads,), float(init_ssmax_scale)))

    shift_invariant = False  # the factor log(n_i) depends on the query position

    @property
    def supports_documents(self) -> bool:
        """Causal only: bidirectional ``n_i`` is the number of keys of the call, not of the query's document."""
        return self.causal

    @property
    def supports_window(self) -> bool:
        """No: ``n_i = q_pos + 1`` counts every earlier key, also those outside a sliding window."""
        return False

    @property
    def causal_only(self) -> bool:
        """Built causal, ``n_i = q_pos + 1`` assumes the query sees only the keys before it."""
        return self.causal

    def log_keys(self, q_pos: Tensor, num_keys: int, dtype: torch.dtype) -> Tensor:
        """``log(n_i)`` elementwise: ``log(max(q_pos + 1, 1))`` when causal, ``log(num_keys)`` otherwise."""
        if self.causal:
            return (q_pos.to(dtype) + 1).clamp(min=1).log()
        return torch.full_like(q_pos, float(num_keys), dtype=dtype).log()

    def ssmax_factor(self, q_pos: Tensor, num_keys: int, dtype: torch.dtype) -> Tensor:
        """``log(n_i) * s_h`` shaped ``(B or 1, H, Lq, 1)``."""
        log_n = self.log_keys(q_pos, num_keys, dtype)
        log_n = log_n if log_n.dim() == 2 else log_n.unsqueeze(0)  # (B or 1, Lq)
        return log_n[:, None, :, None] * self.ssmax_scale.to(dtype)[None, :, None, None]

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        return (q.to(compute) * self.ssmax_factor(q_pos, k_pos.shape[-1], compute)).to(q.dtype), k

    def score(self, head: Tensor, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, num_keys: int) -> Tensor:
        """BAM's prior times ``log(n_i) s_head``."""
        factor = self.log_keys(q_pos, num_keys, dtype) * self.ssmax_scale.to(dtype)[head]
        return super().score(head, q_pos, k_pos, dtype, num_keys) * factor

    def position_bias(self, q_pos: Tensor, k_pos: Tensor, dtype: torch.dtype, *,
                      span: tuple[int, int] | None = None) -> Tensor:
        """BAM's tabulated prior times the per-query factor (equals :meth:`score`)."""
        prior = score_bias(lambda *args: BAM.score(self, *args), self.num_heads, q_pos, k_pos, dtype,
                           shift_invariant=True, span=span)
        return prior * self.ssmax_factor(q_pos, k_pos.shape[-1], dtype)
