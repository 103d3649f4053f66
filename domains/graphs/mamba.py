"""Selective state-space (Mamba) blocks in plain PyTorch, and the bidirectional block of Graph Mamba.

Gu & Dao 2023, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces", arXiv:2312.00752
(the selective SSM "S6" and the Mamba block); Behrouz & Hashemi 2024, "Graph Mamba: Towards Learning on
Graphs with State Space Models", KDD 2024, arXiv:2402.08678 (the bidirectional block).

Selective scan, per channel ``e`` and state ``n`` (Mamba's ``selective_scan_ref`` discretisation: zero-order
hold for ``A``, Euler for ``B``)::

    h_t = exp(delta_t * A) * h_{t-1} + delta_t * B_t * u_t          h_0 = 0
    y_t = <C_t, h_t> + D * u_t

``delta``, ``B`` and ``C`` depend on the input (the "selection"). The recurrence ``h_t = a_t h_{t-1} + b_t`` is
linear, and its steps compose associatively: ``(a1, b1)`` followed by ``(a2, b2)`` is ``(a1 a2, a2 b1 + b2)``.
:func:`selective_scan` evaluates all prefixes with the Hillis-Steele doubling scan: ``ceil(log2 L)``
vectorised steps over the whole ``(B, L, E, N)`` tensor, no Python loop over sequence positions. Every factor
``a = exp(delta A)`` lies in ``(0, 1]`` (``A < 0``, ``delta > 0``), so no step exponentiates a positive number:
it is stable at any length, unlike the cumulative-sum form ``exp(S_t) cumsum(exp(-S_t) b_t)`` with
``S_t = sum delta A``, which overflows in float32 once ``|S_t| > 88``. Cost ``O(L log L * E * N)`` work and
``O(L * E * N)`` memory; the backward pass is the adjoint recurrence, itself a reverse scan
(:func:`linear_scan`), so no intermediate step is kept for autograd. :func:`selective_scan_reference` is
the step-by-step recurrence, for tests.

Shapes: ``B`` batch, ``L`` sequence length, ``E`` channels (``expand * dim``), ``N`` state size.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.encoders.base import check_float, check_int

__all__ = [
    "BidirectionalMamba", "MambaBlock", "linear_scan", "reverse_padded", "selective_scan", "selective_scan_reference",
]


def _check_scan_inputs(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None) -> None:
    owner = "selective_scan"
    named = {"u": u, "delta": delta, "A": A, "B": B, "C": C} | ({} if D is None else {"D": D})
    for name, t in named.items():
        if not isinstance(t, Tensor):
            raise TypeError(f"{owner}: {name} must be a tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"{owner}: {name} must be a floating tensor, got {t.dtype}")
    if u.dim() != 3:
        raise ValueError(f"{owner}: u must have shape (B, L, E), got {tuple(u.shape)}")
    b, length, e = u.shape
    if tuple(delta.shape) != (b, length, e):
        raise ValueError(f"{owner}: delta must have the shape of u {(b, length, e)}, got {tuple(delta.shape)}")
    if A.dim() != 2 or A.size(0) != e:
        raise ValueError(f"{owner}: A must have shape (E, N) = ({e}, N), got {tuple(A.shape)}")
    n = A.size(1)
    for name, t in (("B", B), ("C", C)):
        if tuple(t.shape) != (b, length, n):
            raise ValueError(f"{owner}: {name} must have shape (B, L, N) = {(b, length, n)}, got {tuple(t.shape)}")
    if D is not None and tuple(D.shape) != (e,):
        raise ValueError(f"{owner}: D must have shape (E,) = ({e},), got {tuple(D.shape)}")


def _doubling_scan(a: Tensor, b: Tensor, *, reverse: bool = False) -> Tensor:
    """All prefixes of ``h_t = a_t h_{t-1} + b_t`` along dim 1 (``h_{-1} = 0``), Hillis-Steele, no autograd.

    ``reverse=True``: all suffixes of ``h_t = a_t h_{t+1} + b_t`` (``h_L = 0``), without flipping the tensors.
    """
    length = a.size(1)
    h, a = b.clone(), a.clone()
    d = 1
    while d < length:  # after this step, (a_t, h_t) composes 2d positions ending (or starting) at t
        if reverse:
            h[:, :-d] += a[:, :-d] * h[:, d:]  # the product is a new tensor: reads the old h before writing
            if 2 * d < length:  # the last step needs no products of a
                a[:, :-d] = a[:, :-d] * a[:, d:]
        else:
            h[:, d:] += a[:, d:] * h[:, :-d]
            if 2 * d < length:
                a[:, d:] = a[:, d:] * a[:, :-d]
        d *= 2
    return h


class _LinearScan(torch.autograd.Function):
    """``h = linear_scan(a, b)`` with the adjoint recurrence as backward (what Mamba's fused kernel does).

    Backward: ``lambda_t = g_t + a_{t+1} lambda_{t+1}`` (a scan in reverse), ``db_t = lambda_t``,
    ``da_t = lambda_t h_{t-1}``. Only ``a`` and ``h`` are saved, not the ``log2 L`` intermediate steps.
    """

    @staticmethod
    def forward(ctx, a: Tensor, b: Tensor) -> Tensor:
        h = _doubling_scan(a, b)
        ctx.save_for_backward(a, h)
        return h

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor]:
        a, h = ctx.saved_tensors
        a_next = torch.cat([a[:, 1:], torch.zeros_like(a[:, :1])], dim=1)  # a_{t+1}, 0 past the end
        lam = _doubling_scan(a_next, grad, reverse=True)
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
        return lam * h_prev, lam


def linear_scan(a: Tensor, b: Tensor) -> Tensor:
    """``h_t = a_t * h_{t-1} + b_t`` along dim 1 for all ``t`` (``h_{-1} = 0``), as a parallel log-depth scan.

    Args:
        a, b: ``(B, L, ...)`` tensors of the same shape and floating dtype.

    Returns:
        ``(B, L, ...)`` all states ``h``. Differentiable in ``a`` and ``b`` (custom backward: a reverse scan).

    Raises:
        TypeError / ValueError: non-floating tensors, fewer than 2 dims, or different shapes.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise TypeError(f"linear_scan: {name} must be a floating tensor, got {getattr(t, 'dtype', type(t))}")
    if a.shape != b.shape or a.dim() < 2:
        raise ValueError(f"linear_scan: a and b must have the same shape (B, L, ...), got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if a.size(1) == 0:
        return b.clone()
    return _LinearScan.apply(a, b)


def selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None) -> Tensor:
    """Selective SSM scan (Gu & Dao 2023, arXiv:2312.00752) as a parallel (log-depth) associative scan.

    Args:
        u: ``(B, L, E)`` input.
        delta: ``(B, L, E)`` step sizes (> 0, e.g. ``softplus`` of a projection).
        A: ``(E, N)`` state matrix (diagonal per channel; negative for a stable, decaying state).
        B: ``(B, L, N)`` input matrix per position; C: ``(B, L, N)`` output matrix per position.
        D: ``(E,)`` skip connection, or None.

    Returns:
        ``(B, L, E)``: ``y_t = <C_t, h_t> + D u_t`` with ``h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t``.

    Raises:
        TypeError / ValueError: non-tensor or non-floating inputs, mismatched shapes (naming the argument).
    """
    _check_scan_inputs(u, delta, A, B, C, D)
    a = torch.exp(delta.unsqueeze(-1) * A)  # (B, L, E, N), in (0, 1] for A <= 0
    b = (delta * u).unsqueeze(-1) * B.unsqueeze(2)  # (B, L, E, N): delta_t B_t u_t
    h = linear_scan(a, b)
    y = (h * C.unsqueeze(2)).sum(-1)  # <C_t, h_t>: (B, L, E); faster on CPU than a batched matmul of 1-wide
    if D is not None:
        y = y + u * D
    return y


def selective_scan_reference(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor,
                             D: Tensor | None = None) -> Tensor:
    """The same scan as :func:`selective_scan`, one position at a time (a Python loop over ``L``; for tests)."""
    _check_scan_inputs(u, delta, A, B, C, D)
    b, length, e = u.shape
    state = u.new_zeros(b, e, A.size(1))
    out = []
    for t in range(length):
        state = torch.exp(delta[:, t, :, None] * A) * state + (delta[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        out.append(torch.einsum("ben,bn->be", state, C[:, t]))
    y = torch.stack(out, dim=1)
    return y if D is None else y + u * D


class MambaBlock(nn.Module):
    """One Mamba block (Gu & Dao 2023, arXiv:2312.00752, Fig. 3), causal over the sequence.

    ``x, z = W_in x``; ``x = SiLU(causal depthwise Conv1d(x))``; ``delta = softplus(W_dt W_r x)``,
    ``B = W_B x``, ``C = W_C x`` (the selection); ``y = selective_scan(x, delta, A, B, C, D)``;
    ``out = W_out(y * SiLU(z))``. In Graph Mamba's notation (Behrouz & Hashemi 2024):
    ``W_f1(SSM(SiLU(Conv(W_in x))) * SiLU(W_f2 x))``. Initialisation as in Mamba: ``A = -[1..N]`` per
    channel (``S4D-real``), ``D = 1``, ``delta`` bias such that ``softplus(bias)`` is log-uniform in
    ``[dt_min, dt_max]``.

    Args:
        dim: model width. d_state: ``N``. expand: ``E = expand * dim``. d_conv: convolution width.
        dt_rank: rank of the ``delta`` projection (default ``ceil(dim / 16)``).
        dt_min, dt_max: range of the initial step sizes.

    Shapes: ``forward(x)``: ``(B, L, dim)`` -> ``(B, L, dim)``. Causal: output ``t`` depends on inputs ``<= t``
    only, so padding placed after the real positions never changes them.
    """

    def __init__(self, dim: int, *, d_state: int = 16, expand: int = 2, d_conv: int = 4, dt_rank: int | None = None,
                 dt_min: float = 1e-3, dt_max: float = 0.1) -> None:
        super().__init__()
        owner = "MambaBlock"
        self.dim = check_int(f"{owner}: dim", dim)
        self.d_state = check_int(f"{owner}: d_state", d_state)
        self.expand = check_int(f"{owner}: expand", expand)
        self.d_conv = check_int(f"{owner}: d_conv", d_conv)
        self.dt_rank = check_int(f"{owner}: dt_rank", math.ceil(dim / 16) if dt_rank is None else dt_rank)
        dt_min = check_float(f"{owner}: dt_min", dt_min)
        dt_max = check_float(f"{owner}: dt_max", dt_max)
        if dt_min > dt_max:
            raise ValueError(f"{owner}: dt_min must be <= dt_max, got dt_min={dt_min}, dt_max={dt_max}")
        inner = self.expand * dim
        self.inner = inner
        self.in_proj = nn.Linear(dim, 2 * inner)
        self.conv = nn.Conv1d(inner, inner, d_conv, groups=inner, padding=d_conv - 1)
        self.x_proj = nn.Linear(inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, inner)
        with torch.no_grad():
            dt = torch.exp(torch.rand(inner) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus
        self.A_log = nn.Parameter(torch.log(torch.arange(1, d_state + 1, dtype=torch.float32)).repeat(inner, 1))
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, dim)

    def causal_conv(self, u: Tensor) -> Tensor:
        """Depthwise causal convolution of ``u`` ``(B, L, E)`` with ``self.conv``'s weights: ``sum_j w_j u_{t-j}``.

        Computed as ``d_conv`` shifted multiply-adds rather than ``nn.Conv1d``, whose depthwise backward is
        an order of magnitude slower on CPU for these short sequences. Equals ``conv(u)[..., :L]``.
        """
        length, k = u.size(1), self.d_conv
        padded = F.pad(u, (0, 0, k - 1, 0))  # (B, L + k - 1, E): zeros before the first position
        weight = self.conv.weight[:, 0]  # (E, k); tap k-1 multiplies u_t, tap 0 multiplies u_{t-k+1}
        out = self.conv.bias + padded[:, k - 1:k - 1 + length] * weight[:, k - 1]
        for j in range(k - 1):
            out = out + padded[:, j:j + length] * weight[:, j]
        return out

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() != 3 or x.size(-1) != self.dim:
            raise ValueError(f"MambaBlock: x must have shape (B, L, {self.dim}), got {tuple(x.shape)}")
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (B, L, E) each
        u = self.causal_conv(u)
        u = F.silu(u)
        dt, b, c = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt))  # (B, L, E)
        y = selective_scan(u, delta, -torch.exp(self.A_log), b, c, self.D)
        return self.out_proj(y * F.silu(z))


def reverse_padded(x: Tensor, lengths: Tensor | None = None) -> Tensor:
    """Reverse each sequence of ``x`` ``(B, L, ...)`` within its first ``lengths[b]`` positions (padding stays last).

    ``lengths=None`` reverses all ``L`` positions. Applying it twice gives ``x`` back.
    """
    if lengths is None:
        return x.flip(1)
    b, length = x.shape[:2]
    if lengths.shape != (b,):
        raise ValueError(f"reverse_padded: lengths must have shape ({b},), got {tuple(lengths.shape)}")
    if lengths.numel() and (int(lengths.min()) < 0 or int(lengths.max()) > length):
        raise ValueError(f"reverse_padded: lengths must lie in [0, {length}], got [{int(lengths.min())}, "
                         f"{int(lengths.max())}]")
    j = torch.arange(length, device=x.device)
    index = torch.where(j < lengths[:, None], lengths[:, None] - 1 - j, j)  # (B, L)
    index = index.view(b, length, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)


class BidirectionalMamba(nn.Module):
    """Graph Mamba's bidirectional selective SSM (Behrouz & Hashemi 2024, arXiv:2402.08678, Sec. 4).

    ``y = W_out(Mamba_f(LN x) + reverse(Mamba_b(reverse(LN x))))``: two :class:`MambaBlock` with separate
    weights, the second reading each sequence backwards, so every output position sees the whole sequence.
    With ``lengths`` (dense batches of sequences of different lengths, padding last), each sequence is
    reversed within its own length (:func:`reverse_padded`), so padding never reaches a real position in
    either direction, and outputs at padding positions are set to 0.

    Args:
        dim: width; the other keyword options go to both :class:`MambaBlock` s.

    Shapes: ``forward(x, lengths=None)``: ``x (B, L, dim)``, ``lengths (B,)`` long; returns ``(B, L, dim)``.
    """

    def __init__(self, dim: int, **block_options) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.forward_block = MambaBlock(dim, **block_options)
        self.backward_block = MambaBlock(dim, **block_options)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor, lengths: Tensor | None = None) -> Tensor:
        if x.dim() != 3 or x.size(-1) != self.forward_block.dim:
            raise ValueError(f"BidirectionalMamba: x must have shape (B, L, {self.forward_block.dim}), "
                             f"got {tuple(x.shape)}")
        xn = self.norm(x)
        y = self.forward_block(xn) + reverse_padded(self.backward_block(reverse_padded(xn, lengths)), lengths)
        y = self.out_proj(y)
        if lengths is not None:
            real = torch.arange(x.size(1), device=x.device) < lengths[:, None]  # (B, L)
            y = y * real.unsqueeze(-1).to(y.dtype)
        return y
