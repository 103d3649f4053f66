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

Every factor of an MLA logit (``factors="all"``, the default; :func:`qk_logit_factors`). MLA's logit
has more than two weight factors: ``q_h . k_h = (W_UQ N_q(W_DQ x))^T (W_UK N_kv(W_DKV x'))`` for the
non-rotated part and ``(W_QR N_q(W_DQ x))^T (W_KR x')`` for the rotated one. The same first-order
argument, factor by factor: a step ``dW`` of a factor changes the logit by at most ``||dW||`` times the
norms of the term's other factors that carry scale. A factor followed by an RMSNorm (``q_down`` before
``q_latent_norm``, ``kv_down`` before ``kv_norm``) carries no scale (the norm resets it) and moves its
output by ``||dW|| / ||W||``. So a factor ``W`` gets ``eta_W = eta * c / G_W`` with

    G_W = sum over the logit terms W enters of prod(||F|| for the term's other scale-carrying factors F)
          / (||W|| if W feeds an RMSNorm, else 1),

which for a two-factor pair is the rule above (``G_{W_Q} = ||W_K||``). Hence: ``q_down`` (in both
terms) gets ``c ||W_DQ|| / (||W_UQ|| ||W_UK|| + ||W_QR|| ||W_KR||)``; ``kv_down`` gets
``c ||W_DKV|| / (||W_UQ|| ||W_UK||)``; without the latent norms (``latent_norm=False``) the down
projections carry scale, enter the pairs' products and get ``c / (prod of the others)``. The
down-projections are shared by all heads, so their norms are per matrix under either granularity.
Left outside (documented choices): the RMSNorm gains (vectors that start at 1, the elementwise
factors of the norms; the rule is stated for weight matrices), and ``kv_down``'s role in the values
(a joint latent also feeds ``v_up``: its learning rate follows the logit's factors, not the values').
``factors="pairs"`` applies the rule to the pairs only.
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
QK_FACTORS = ("all", "pairs")


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
    query_chain: tuple[nn.Parameter, ...] = ()
    """Scale-carrying factors upstream of ``query`` on the query side (shared by all heads; per matrix)."""
    key_chain: tuple[nn.Parameter, ...] = ()
    """Scale-carrying factors upstream of ``key`` on the key side."""

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


@dataclass
class QKFactor:
    """A shared (not head-split) factor of attention logits, e.g. MLA's ``q_down`` or ``kv_down``.

    ``terms``: for each logit term the factor enters, the term's *other* scale-carrying factors (a
    product of their norms bounds the term's change per unit step of ``param``). ``normed``: the
    factor feeds an RMSNorm, so its sensitivity is ``1 / ||param||`` times that product.
    """

    name: str
    param: nn.Parameter
    terms: tuple[tuple[nn.Parameter, ...], ...]
    normed: bool

    def __post_init__(self) -> None:
        if self.param.dim() != 2:
            raise ValueError(f"{self.name}: a logit factor must be a matrix, got shape {tuple(self.param.shape)}")
        if not self.terms:
            raise ValueError(f"{self.name}: terms must name at least one logit term")


def _mla_chains(module: MultiHeadLatentAttention) -> tuple[tuple[nn.Parameter, ...], tuple[nn.Parameter, ...]]:
    """The scale-carrying down-projections of an MLA layer's query side and key side (empty when normed)."""
    query_chain = () if module.q_down is None or module.q_latent_norm is not None else (module.q_down.weight,)
    key_chain = () if module.kv_norm is not None else (module.kv_down.weight,)
    return query_chain, key_chain


def qk_weight_pairs(model: nn.Module, *, chains: bool = False) -> list[QKPair]:
    """Every query/key weight pair of the self-attention layers in ``model`` (MHA and MLA)."""
    pairs = []
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            pairs.append(QKPair(name, module.q_proj.weight, module.k_proj.weight, module.num_heads,
                                module.num_kv_heads))
        elif isinstance(module, MultiHeadLatentAttention):
            query_chain, key_chain = _mla_chains(module) if chains else ((), ())
            if module.nope_head_dim > 0:
                pairs.append(QKPair(f"{name}.nope", module.q_nope_proj.weight, module.k_up.weight, module.num_heads,
                                    module.num_kv_heads, query_chain, key_chain))
            pairs.append(QKPair(f"{name}.rope", module.q_rope_proj.weight, module.k_rope_proj.weight,
                                module.num_heads, module.rope_heads, query_chain, ()))
    return pairs


def qk_logit_factors(model: nn.Module) -> list[QKFactor]:
    """The down-projections of every MLA layer in ``model`` as logit factors (``q_down``, ``kv_down``).

    ``q_down`` enters the non-rotated term (with ``q_nope_proj``, ``k_up``) and the rotated one (with
    ``q_rope_proj``, ``k_rope_proj``); ``kv_down`` enters the non-rotated term only (the rope key is
    projected from ``x``). A layer without ``q_down`` or without non-rotated dims has fewer factors.
    """
    factors = []
    for name, module in model.named_modules():
        if not isinstance(module, MultiHeadLatentAttention):
            continue
        query_chain, key_chain = _mla_chains(module)
        nope = module.nope_head_dim > 0
        if module.q_down is not None:
            terms = [(module.q_rope_proj.weight, module.k_rope_proj.weight)]
            if nope:
                terms.insert(0, (module.q_nope_proj.weight, module.k_up.weight, *key_chain))
            factors.append(QKFactor(f"{name}.q_down", module.q_down.weight, tuple(terms),
                                    normed=module.q_latent_norm is not None))
        if nope:
            terms = ((module.q_nope_proj.weight, module.k_up.weight, *query_chain),)
            factors.append(QKFactor(f"{name}.kv_down", module.kv_down.weight, terms, normed=module.kv_norm is not None))
    return factors


def matrix_norm(weight: Tensor, norm: str) -> Tensor:
    """Spectral or Frobenius norm of ``weight (..., rows, cols)`` (batched over leading dims), float64."""
    w = weight.detach().to(torch.float64)
    if not bool(torch.isfinite(w).all()):
        raise ValueError(f"the Q/K learning-rate rule needs finite weights: a {tuple(weight.shape)} Q/K weight "
                         "holds NaN or inf (the run diverged; see NonFiniteStop)")
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
        factors: ``"all"`` (default): every weight factor of the logit, MLA's down-projections
            included (module docstring); ``"pairs"``: the query/key pairs only. Only used when
            ``pairs`` is a model.

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
        factors: str = "all",
    ) -> None:
        if factors not in QK_FACTORS:
            raise ValueError(f"factors must be one of {QK_FACTORS}, got {factors!r}")
        self.factors: list[QKFactor] = []
        if isinstance(pairs, nn.Module):
            model = pairs
            pairs = qk_weight_pairs(model, chains=factors == "all")
            if factors == "all":
                self.factors = qk_logit_factors(model)
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
        # upstream scale-carrying factors (MLA's down-projections without their RMSNorm) multiply in
        query_chain = self._product(pair.query_chain, key_norms.device)
        key_chain = self._product(pair.key_chain, key_norms.device)
        if self.granularity == "matrix":
            return key_norms * key_chain * query_chain, query_norms * query_chain * key_chain
        group = pair.query_heads // pair.key_heads
        for_query = key_norms.repeat_interleave(group) * key_chain * query_chain
        for_key = query_norms.view(pair.key_heads, group).amax(dim=1) * query_chain * key_chain
        return for_query, for_key

    def _product(self, params: Sequence[Tensor], device: torch.device) -> Tensor:
        out = torch.ones(1, dtype=torch.float64, device=device)
        for p in params:
            out = out * matrix_norm(p, self.norm)
        return out

    def factor_sensitivity(self, factor: QKFactor) -> Tensor:
        """``G_W`` of a shared logit factor ``(1,)``: the sum over its terms of the other factors' norm products."""
        total = torch.zeros(1, dtype=torch.float64, device=factor.param.device)
        for others in factor.terms:
            total = total + self._product(others, factor.param.device)
        if factor.normed:
            total = total / matrix_norm(factor.param, self.norm)
        return total

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
                self._set_multiplier(name, param, reference / partner)
        for factor in self.factors:
            sensitivity = self.factor_sensitivity(factor)
            if not (sensitivity > 0).all() or not torch.isfinite(sensitivity).all():
                raise ValueError(f"QK learning rate: {factor.name} has sensitivity {float(sensitivity)} (a norm is 0); "
                                 "the rule is undefined")
            if self.reference is None:
                reference = self._references.setdefault(factor.name, sensitivity.clone())
            else:
                reference = torch.full_like(sensitivity, self.reference)
            self._set_multiplier(factor.name, factor.param, reference / sensitivity)

    def _set_multiplier(self, name: str, param: nn.Parameter, multiplier: Tensor) -> None:
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
        absent += [factor.name for factor in self.factors if id(factor.param) not in optimized]
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
