"""Parameter-dependent learning rates for query and key weights (Anson & Aitchison 2025, "QuacK").

Anson & Aitchison 2025, "Controlling changes to attention logits", arXiv:2511.21377. A step changes
the logit ``q . k = x^T W_Q^T W_K x'`` by about ``x^T dW_Q^T W_K x' + x^T W_Q^T dW_K x'``; with Adam's
bounded updates ``||dW_Q|| ~ eta_Q``, so the change grows with ``||W_K||`` (and vice versa) as the
weights grow. Setting::

    eta_{W_Q} = eta * c / ||W_K||,        eta_{W_K} = eta * c / ||W_Q||

bounds the worst-case logit change independently of the weights' size. The norms are recomputed
as training goes (every ``every`` steps). Choices this implementation makes, since the paper's
text available here does not fix them (documented, all options):

* ``norm``: ``"spectral"`` (largest singular value, the operator norm that bounds ``|x^T W v|``;
  default) or ``"frobenius"``.
* ``granularity``: ``"matrix"`` (one norm per weight matrix; default) or ``"head"`` (per head:
  query head ``h`` uses the norm of its key head's block; a key head shared by several query heads
  (GQA, MLA's shared rope key) uses the largest of their query-block norms, so each of their
  logits stays bounded).
* ``reference`` ``c``: ``None`` (default) takes ``c`` = the partner's norm at the first step, so the
  rule starts at the base learning rate and departs from it only as the weights' norms change;
  a number fixes ``c``.

The multiplier acts on each step's *update*: the rule snapshots the query/key weights before
``optimizer.step()`` and rescales ``p <- p_before + s (p_after - p_before)`` afterwards (hooks on the
optimizer). For SGD, Adam and AdamW (decoupled weight decay included) the update is linear in the
learning rate, so this equals running them with ``lr * s`` (tested) — and it works per row, which
param groups cannot do, and beside any scheduler, which keeps setting the groups' base ``lr``.

Which weights pair up (:func:`qk_weight_pairs`): in :class:`MultiHeadAttention`, ``q_proj`` with
``k_proj``; in :class:`MultiHeadLatentAttention`, ``q_nope_proj`` with ``k_up`` (the key up-projection
acting on the latent) and ``q_rope_proj`` with ``k_rope_proj``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import check_int
from pe_toolkit.nn.attention import MultiHeadAttention
from pe_toolkit.nn.latent_attention import MultiHeadLatentAttention

QK_NORMS = ("spectral", "frobenius")
QK_GRANULARITIES = ("matrix", "head")


@dataclass
class QKPair:
    """A query weight and the key weight its logits multiply: ``query (H_q * d_q, in)``, ``key (H_k * d_k, in')``.

    ``query_heads`` must be a multiple of ``key_heads``; query head ``h`` meets key head
    ``h // (query_heads // key_heads)``.
    """

    name: str
    query: nn.Parameter
    key: nn.Parameter
    query_heads: int
    key_heads: int

    def __post_init__(self) -> None:
        check_int("query_heads", self.query_heads)
        check_int("key_heads", self.key_heads)
        if self.query_heads % self.key_heads:
            raise ValueError(f"{self.name}: key_heads ({self.key_heads}) must divide query_heads ({self.query_heads})")
        if self.query.dim() != 2 or self.key.dim() != 2:
            raise ValueError(f"{self.name}: query and key weights must be matrices")
        if self.query.shape[0] % self.query_heads or self.key.shape[0] % self.key_heads:
            raise ValueError(
                f"{self.name}: weight rows {self.query.shape[0]} / {self.key.shape[0]} are not divisible by the heads "
                f"{self.query_heads} / {self.key_heads}"
            )


def qk_weight_pairs(model: nn.Module) -> list[QKPair]:
    """Every query/key weight pair of the self-attention layers in ``model`` (MHA and MLA)."""
    pairs = []
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            pairs.append(QKPair(name, module.q_proj.weight, module.k_proj.weight, module.num_heads,
                                module.num_kv_heads))
        elif isinstance(module, MultiHeadLatentAttention):
            if module.nope_head_dim > 0:
                pairs.append(QKPair(f"{name}.nope", module.q_nope_proj.weight, module.k_up.weight, module.num_heads,
                                    module.num_kv_heads))
            pairs.append(QKPair(f"{name}.rope", module.q_rope_proj.weight, module.k_rope_proj.weight,
                                module.num_heads, module.rope_heads))
    return pairs


def matrix_norm(weight: Tensor, norm: str) -> Tensor:
    """Spectral or Frobenius norm of ``weight (..., rows, cols)`` (batched over leading dims), float64."""
    w = weight.detach().to(torch.float64)
    if norm == "spectral":
        return torch.linalg.matrix_norm(w, ord=2)
    return torch.linalg.matrix_norm(w, ord="fro")


def _block_norms(weight: Tensor, heads: int, norm: str, granularity: str) -> Tensor:
    """``(1,)`` for ``"matrix"`` or ``(heads,)`` for ``"head"``: the norm of each head's row block."""
    if granularity == "matrix":
        return matrix_norm(weight, norm).reshape(1)
    return matrix_norm(weight.view(heads, weight.shape[0] // heads, weight.shape[1]), norm)


class QKLearningRateRule:
    """Scale the learning rate of query weights by ``c / ||W_K||`` and of key weights by ``c / ||W_Q||``.

    Anson & Aitchison 2025 (arXiv:2511.21377); see the module docstring for the exact rule and options.

    Args:
        pairs: the query/key pairs (:func:`qk_weight_pairs`), or a model to take them from.
        norm: ``"spectral"`` or ``"frobenius"``.
        granularity: ``"matrix"`` or ``"head"``.
        reference: ``c``; ``None`` = each partner norm at the first step (multipliers start at 1).
        every: recompute the norms every this many optimizer steps (1 = every step).

    Use :meth:`attach` on a ``torch.optim.Optimizer`` (any optimizer whose update is linear in its
    learning rate), or :class:`QKLearningRateCallback` with Lightning. :attr:`multipliers` holds the
    current multipliers per pair (``{"name.query": Tensor, "name.key": Tensor}``).
    """

    def __init__(
        self,
        pairs: Sequence[QKPair] | nn.Module,
        *,
        norm: str = "spectral",
        granularity: str = "matrix",
        reference: float | None = None,
        every: int = 1,
    ) -> None:
        if isinstance(pairs, nn.Module):
            pairs = qk_weight_pairs(pairs)
        self.pairs = list(pairs)
        if not self.pairs:
            raise ValueError("QKLearningRateRule: no query/key weight pairs (no MultiHeadAttention / MLA found)")
        if norm not in QK_NORMS:
            raise ValueError(f"norm must be one of {QK_NORMS}, got {norm!r}")
        if granularity not in QK_GRANULARITIES:
            raise ValueError(f"granularity must be one of {QK_GRANULARITIES}, got {granularity!r}")
        if reference is not None:
            if isinstance(reference, bool) or not isinstance(reference, (int, float)) or not reference > 0:
                raise ValueError(f"reference must be None or a number > 0, got {reference!r}")
            reference = float(reference)
        self.norm, self.granularity, self.reference = norm, granularity, reference
        self.every = check_int("every", every)
        self.steps = 0
        self.multipliers: dict[str, Tensor] = {}
        self._references: dict[str, Tensor] = {}
        self._row_scales: list[tuple[nn.Parameter, Tensor]] = []
        self._before: list[tuple[nn.Parameter, Tensor, Tensor]] = []
        self._handles: list[Any] = []

    # ------------------------------------------------------------------------------------ the rule
    def partner_norms(self, pair: QKPair) -> tuple[Tensor, Tensor]:
        """``(norms for the query rows, norms for the key rows)``: ``(1,)`` each, or per head ``(H_q,)``, ``(H_k,)``.

        Query head ``h`` gets its key head's norm; key head ``g`` the largest norm of its query heads.
        """
        key_norms = _block_norms(pair.key, pair.key_heads, self.norm, self.granularity)
        query_norms = _block_norms(pair.query, pair.query_heads, self.norm, self.granularity)
        if self.granularity == "matrix":
            return key_norms, query_norms
        group = pair.query_heads // pair.key_heads
        for_query = key_norms.repeat_interleave(group)
        for_key = query_norms.view(pair.key_heads, group).amax(dim=1)
        return for_query, for_key

    @torch.no_grad()
    def update_multipliers(self) -> None:
        """Recompute every multiplier ``c / ||partner||`` from the current weights."""
        self._row_scales = []
        for pair in self.pairs:
            for_query, for_key = self.partner_norms(pair)
            for side, param, partner in (("query", pair.query, for_query), ("key", pair.key, for_key)):
                name = f"{pair.name}.{side}"
                if (partner <= 0).any():
                    raise ValueError(f"QK learning rate: the partner of {name} has norm 0; the rule is undefined")
                if self.reference is None:
                    reference = self._references.setdefault(name, partner.clone())
                else:
                    reference = torch.full_like(partner, self.reference)
                multiplier = reference / partner
                self.multipliers[name] = multiplier
                rows = multiplier.repeat_interleave(param.shape[0] // multiplier.numel())
                self._row_scales.append((param, rows.to(device=param.device, dtype=param.dtype)[:, None]))

    # ------------------------------------------------------------------------------- optimizer hooks
    def attach(self, optimizer: torch.optim.Optimizer) -> QKLearningRateRule:
        """Register the pre-/post-step hooks on ``optimizer``; returns ``self``. :meth:`detach` removes them."""
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        optimized = {id(p) for group in optimizer.param_groups for p in group["params"]}
        absent = [pair.name for pair in self.pairs if id(pair.query) not in optimized or id(pair.key) not in optimized]
        if absent:
            raise ValueError(f"QK learning rate: the optimizer does not hold the query/key weights of {absent}")
        self._handles.append(optimizer.register_step_pre_hook(self._pre_step))
        self._handles.append(optimizer.register_step_post_hook(self._post_step))
        return self

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.steps % self.every == 0 or not self._row_scales:
            self.update_multipliers()
        self._before = [(p, p.detach().clone(), scale) for p, scale in self._row_scales]

    @torch.no_grad()
    def _post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for param, before, scale in self._before:
            # p <- before + s * (p - before): the step taken with lr * s
            param.sub_(before).mul_(scale).add_(before)
        self._before = []
        self.steps += 1


def attach_qk_learning_rates(
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer], model: nn.Module, **options: Any
) -> QKLearningRateRule:
    """Build a :class:`QKLearningRateRule` for ``model`` and attach it to ``optimizers`` (one or several)."""
    rule = QKLearningRateRule(model, **options)
    for optimizer in [optimizers] if isinstance(optimizers, torch.optim.Optimizer) else optimizers:
        rule.attach(optimizer)
    return rule
