"""LRP rules as autograd functions whose backward maps output relevance to input relevance.

Achtibat et al. 2024, "AttnLRP: Attention-Aware Layer-Wise Relevance Propagation for Transformers",
arXiv:2402.05602, and Bakish et al. 2025, "Revisiting LRP: Positional Attribution as the Missing
Ingredient for Transformer Explainability" (PA-LRP), arXiv:2506.02138.

Every function here is a ``torch.autograd.Function`` whose ``backward`` receives the *relevance* of
its output and returns the relevance of its inputs (not a gradient). A forward pass written with
these functions plus relevance-preserving tensor plumbing (views, slicing, ``cat``, ``expand``,
``repeat_interleave``, whose autograd backward only moves or sums values) therefore propagates
relevance when ``torch.autograd.grad(output, leaves, grad_outputs=R_out)`` is called: the "gradient"
of each leaf is its relevance. Where a branch fans out, autograd sums the relevance of its consumers,
which is what LRP prescribes.

Rules (``eps`` is the stabiliser, ``stab(z) = z + eps * sign(z)`` with ``sign(0) = 1``):

* :func:`linear` — epsilon rule for ``z = x W^T + b``: ``R_x = x * ((R_z / stab(z)) W)``.
* :func:`add` — epsilon rule for ``z = a + b``: ``R_a = a R / stab(z)``, ``R_b = b R / stab(z)``.
* :func:`affine` — epsilon rule for the elementwise affine part ``z = n * w + b`` of a norm.
* :func:`multiply` — uniform rule for ``z = a * b`` (AttnLRP Prop. 3.2): ``R_a = R_b = R / 2``; a
  constant factor passes all relevance to the other operand.
* :func:`matmul` — uniform-epsilon rule for ``z = c (a @ b)`` (AttnLRP Prop. 3.3):
  ``R_a[i,k] = sum_j a[i,k] b[k,j] c R[i,j] / (2 stab(z[i,j]))`` and likewise for ``b``.
* :func:`softmax` — AttnLRP's softmax rule (Prop. 3.1, a Taylor decomposition at the input):
  ``R_x = x * (R - s * sum_j R_j)``.
* :func:`passthrough` — identity rule ``R_x = R_y`` for elementwise activations (SiLU, GELU), for
  normalisers treated as constant scalings, and for multiplications by a constant.
* :func:`rotate_half` — the signed pair permutation of RoPE; relevance moves back with the pair,
  without the sign (the epsilon rule of ``y = -x`` is ``R_x = R_y``).

Relevance that a rule does not pass on (the bias share and stabiliser of the epsilon rule, the
Taylor remainder of the softmax rule, the share of a positional input that plain LRP treats as a
constant) is recorded per example in a :class:`RelevanceLedger`, so that conservation can be checked
exactly: ``sum(input relevance) + sum(ledger) == explained logit``.

Shapes: every tensor that carries relevance has the batch as its first dimension, ``(B, ...)``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd import Function

LEDGER_TAGS = ("softmax", "stabiliser", "ignored_position")
"""Where non-conserved relevance goes: the softmax rule's Taylor remainder, the epsilon rule's
stabiliser and parameter biases, and positional inputs that plain LRP holds constant."""


class RelevanceLedger:
    """Per-example totals of the relevance that rules absorb, by tag (see :data:`LEDGER_TAGS`).

    Args:
        batch: number of examples ``B``.
        dtype, device: of the totals.
    """

    def __init__(self, batch: int, dtype: torch.dtype, device: torch.device | None = None) -> None:
        self.totals = {tag: torch.zeros(batch, dtype=dtype, device=device) for tag in LEDGER_TAGS}

    def add(self, tag: str, amount: Tensor) -> None:
        """Add ``amount (B,)`` to ``tag``."""
        if tag not in self.totals:
            raise ValueError(f"ledger tag must be one of {LEDGER_TAGS}, got {tag!r}")
        self.totals[tag] = self.totals[tag] + amount.detach().to(self.totals[tag].dtype)


def stabilise(z: Tensor, eps: float) -> Tensor:
    """``z + eps * sign(z)`` with ``sign(0) = +1`` (the epsilon rule's denominator)."""
    if eps == 0.0:
        return z
    return z + eps * torch.where(z >= 0, 1.0, -1.0).to(z.dtype)


def divide(relevance: Tensor, z: Tensor, eps: float) -> Tensor:
    """``relevance / stab(z)``, and 0 where ``stab(z) == 0`` (only possible with ``eps = 0``): an exactly
    zero output has no input share to give back, so its relevance is absorbed (ledger: stabiliser)."""
    denominator = stabilise(z, eps)
    if eps > 0.0:
        return relevance / denominator
    zero = denominator == 0
    quotient = relevance / denominator.masked_fill(zero, 1.0)
    return torch.where(zero, torch.zeros((), dtype=z.dtype, device=z.device), quotient)


def per_example(t: Tensor) -> Tensor:
    """Sum over every dimension but the first: ``(B, ...) -> (B,)``."""
    return t.reshape(t.shape[0], -1).sum(1)


def _record(ledger: RelevanceLedger | None, tag: str, before: Tensor, *after: Tensor | None) -> None:
    if ledger is None:
        return
    remaining = per_example(before)
    for r in after:
        if r is not None:
            remaining = remaining - per_example(r)
    ledger.add(tag, remaining)


class _Linear(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, ledger):
        z = F.linear(x, weight, bias)
        ctx.save_for_backward(x, weight, z)
        ctx.eps, ctx.ledger = eps, ledger
        return z

    @staticmethod
    def backward(ctx, relevance):
        x, weight, z = ctx.saved_tensors
        r_x = x * (divide(relevance, z, ctx.eps) @ weight)
        _record(ctx.ledger, "stabiliser", relevance, r_x)
        return r_x, None, None, None, None


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, eps: float = 0.0,
           ledger: RelevanceLedger | None = None) -> Tensor:
    """Epsilon-LRP linear layer ``x (B, ..., in) -> (B, ..., out)``; ``weight (out, in)`` is constant."""
    return _Linear.apply(x, weight.detach(), None if bias is None else bias.detach(), eps, ledger)


class _Add(Function):
    @staticmethod
    def forward(ctx, a, b, eps, ledger, constant_tag):
        z = a + b
        ctx.save_for_backward(a, b, z)
        ctx.eps, ctx.ledger, ctx.constant_tag = eps, ledger, constant_tag
        return z

    @staticmethod
    def backward(ctx, relevance):
        a, b, z = ctx.saved_tensors
        share = divide(relevance, z, ctx.eps)
        r_a, r_b = a * share, b * share
        _record(ctx.ledger, "stabiliser", relevance, r_a, r_b)
        if not ctx.needs_input_grad[1]:  # a constant second operand keeps its share: record it
            if ctx.ledger is not None:
                ctx.ledger.add(ctx.constant_tag, per_example(r_b))
            r_b = None
        return r_a, r_b, None, None, None


def add(a: Tensor, b: Tensor, *, eps: float = 0.0, ledger: RelevanceLedger | None = None,
        constant_tag: str = "stabiliser") -> Tensor:
    """Epsilon-LRP sum of two same-shape tensors ``(B, ...)``.

    If ``b`` does not require grad it is a constant input: its share is recorded under
    ``constant_tag`` (``"ignored_position"`` for plain LRP's positional inputs).
    """
    if a.shape != b.shape:
        raise ValueError(f"add: operands must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    return _Add.apply(a, b, eps, ledger, constant_tag)


class _Affine(Function):
    @staticmethod
    def forward(ctx, n, weight, bias, eps, ledger):
        z = n * weight if bias is None else n * weight + bias
        ctx.save_for_backward(n, weight, z)
        ctx.eps, ctx.ledger = eps, ledger
        return z

    @staticmethod
    def backward(ctx, relevance):
        n, weight, z = ctx.saved_tensors
        r_n = n * weight * divide(relevance, z, ctx.eps)
        _record(ctx.ledger, "stabiliser", relevance, r_n)
        return r_n, None, None, None, None


def affine(n: Tensor, weight: Tensor | None, bias: Tensor | None = None, *, eps: float = 0.0,
           ledger: RelevanceLedger | None = None) -> Tensor:
    """Epsilon-LRP for the elementwise affine ``n * weight + bias`` of a norm (``weight (D,)``)."""
    if weight is None:
        weight = torch.ones(n.shape[-1], dtype=n.dtype, device=n.device)
    return _Affine.apply(n, weight.detach(), None if bias is None else bias.detach(), eps, ledger)


class _Multiply(Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.a_shape, ctx.b_shape = a.shape, b.shape
        return a * b

    @staticmethod
    def backward(ctx, relevance):
        need_a, need_b = ctx.needs_input_grad[:2]
        share = relevance / 2 if need_a and need_b else relevance
        r_a = share.sum_to_size(ctx.a_shape) if need_a else None
        r_b = share.sum_to_size(ctx.b_shape) if need_b else None
        return r_a, r_b


def multiply(a: Tensor, b: Tensor) -> Tensor:
    """Uniform rule for an elementwise product ``a * b`` (broadcasting allowed; batch first).

    Both operands variable: half the relevance each, summed over broadcast dims. One constant: all
    of it to the other (as LXT's ``mul2``).
    """
    return _Multiply.apply(a, b)


class _MatMul(Function):
    @staticmethod
    def forward(ctx, a, b, scale, eps, ledger):
        z = (a @ b) * scale
        ctx.save_for_backward(a, b, z)
        ctx.scale, ctx.eps, ctx.ledger = scale, eps, ledger
        return z

    @staticmethod
    def backward(ctx, relevance):
        a, b, z = ctx.saved_tensors
        need_a, need_b = ctx.needs_input_grad[:2]
        share = divide(relevance, z, ctx.eps) * ctx.scale
        if need_a and need_b:
            share = share / 2
        r_a = a * (share @ b.transpose(-1, -2)) if need_a else None
        r_b = b * (a.transpose(-1, -2) @ share) if need_b else None
        _record(ctx.ledger, "stabiliser", relevance, r_a, r_b)
        return r_a, r_b, None, None, None


def matmul(a: Tensor, b: Tensor, *, scale: float = 1.0, eps: float = 0.0,
           ledger: RelevanceLedger | None = None) -> Tensor:
    """Uniform-epsilon rule for ``scale * (a @ b)``, ``a (B, ..., n, k)``, ``b (B, ..., k, m)``."""
    return _MatMul.apply(a, b, float(scale), eps, ledger)


class _Softmax(Function):
    @staticmethod
    def forward(ctx, x, visible, ledger):
        s = torch.softmax(x.masked_fill(~visible, float("-inf")), dim=-1)
        ctx.save_for_backward(x, s, visible)
        ctx.ledger = ledger
        return s

    @staticmethod
    def backward(ctx, relevance):
        x, s, visible = ctx.saved_tensors
        r_x = x * (relevance - s * relevance.sum(-1, keepdim=True))
        r_x = torch.where(visible, r_x, torch.zeros((), dtype=r_x.dtype, device=r_x.device))
        _record(ctx.ledger, "softmax", relevance, r_x)
        return r_x, None, None


def softmax(x: Tensor, visible: Tensor, *, ledger: RelevanceLedger | None = None) -> Tensor:
    """Softmax over the last dim with AttnLRP's rule ``R_x = x (R - s sum R)``.

    Args:
        x: logits ``(B, H, Lq, Lk)``, finite everywhere (masked entries included).
        visible: bool, broadcastable to ``x``; False entries get probability 0 and relevance 0.
    """
    return _Softmax.apply(x, visible.expand_as(x), ledger)


class _Passthrough(Function):
    @staticmethod
    def forward(ctx, x, fn):
        return fn(x)

    @staticmethod
    def backward(ctx, relevance):
        return relevance, None


def passthrough(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    """``fn(x)`` with the identity rule ``R_x = R_y``; ``fn`` must keep the shape of ``x``."""
    return _Passthrough.apply(x, fn)


class _RotateHalf(Function):
    @staticmethod
    def forward(ctx, x, interleaved):
        ctx.interleaved = interleaved
        if interleaved:
            return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    @staticmethod
    def backward(ctx, relevance):
        if ctx.interleaved:  # y[2i] = -x[2i+1], y[2i+1] = x[2i]
            return torch.stack((relevance[..., 1::2], relevance[..., 0::2]), dim=-1).flatten(-2), None
        r1, r2 = relevance.chunk(2, dim=-1)  # y = (-x2, x1)
        return torch.cat((r2, r1), dim=-1), None


def rotate_half(x: Tensor, *, interleaved: bool = False) -> Tensor:
    """RoPE's pair rotation by 90 degrees: ``(x1, x2) -> (-x2, x1)`` per pair (layouts as in rotary.py)."""
    return _RotateHalf.apply(x, interleaved)
