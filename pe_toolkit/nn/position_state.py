"""What the positions of one forward imply, computed once at its start and passed to every layer.

ARCHITECTURE.md, "Position state is passed, not cached": the ``Transformer`` (or a bare
:class:`~pe_toolkit.nn.attention.MultiHeadAttention`) validates the positions at its entry, reads the
few host-side facts it needs about them in one synchronisation (:func:`read_facts`), and hands a
:class:`PositionState` to each layer. The state lives for that one forward: a bias that depends only on
positions and parameters (:class:`~pe_toolkit.encoders.base.PositionBiasEncoding`) is built by the first
layer that needs it from the *current* parameters and reused by the later layers of the same forward,
as timm and x-transformers pass their relative-position bias down; nothing outlives the call, so
replaced weights (``load_state_dict(assign=True)``, ``param.data = ...``) act on the next forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from pe_toolkit.encoders.base import PositionalEncoding, PositionBiasEncoding, position_bias_with_span, tracing

Bounds = tuple[int, int]
"""``(min, max)`` of integer positions, exact, known on the host."""


@dataclass
class PositionState:
    """Positions of one forward and what is built from them, shared by its layers.

    Attributes:
        q_pos: the queries' positions, ``(L,)`` or ``(B, L)`` (plus vector dims), validated.
        q_bounds: their exact ``(min, max)`` when integer and known on the host, else ``None``.
        k_bounds: the same for every key the self-attention sees (cached keys included).
        validated: the entry checked positions and masks, so the layers skip their own checks (which
            would each synchronise with the host).
    """

    q_pos: Tensor
    q_bounds: Bounds | None = None
    k_bounds: Bounds | None = None
    validated: bool = True
    _biases: dict = field(default_factory=dict, repr=False)

    @property
    def span(self) -> Bounds | None:
        """``(lo, hi)`` of ``k_pos - q_pos`` over every pair, when both bounds are known."""
        if self.q_bounds is None or self.k_bounds is None:
            return None
        return self.k_bounds[0] - self.q_bounds[1], self.k_bounds[1] - self.q_bounds[0]

    def bias(self, encoding: PositionalEncoding, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor | None:
        """The encoding's bias for this forward's self-attention: built once per encoding for a
        position-only bias (:class:`PositionBiasEncoding`), else evaluated at each call."""
        if getattr(encoding.bias, "__func__", None) is not PositionBiasEncoding.bias:  # overridden (class or instance)
            return encoding.bias(q, k, q_pos, k_pos)
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        if tracing():  # compiled: each layer's bias is part of the graph, which fuses it
            return encoding.position_bias(q_pos, k_pos, dtype)
        key = (id(encoding), dtype, q_pos.shape, k_pos.shape)
        if key not in self._biases:
            self._biases[key] = position_bias_with_span(encoding, q_pos, k_pos, dtype, self.span)
        return self._biases[key]


def union(a: Bounds | None, b: Bounds | None) -> Bounds | None:
    """The bounds of two sets of positions together (``None`` if either is unknown)."""
    if a is None or b is None:
        return None
    return min(a[0], b[0]), max(a[1], b[1])


def read_facts(named: dict[str, Tensor]) -> dict[str, float]:
    """Read several 0-d device values with one host synchronisation (``{}`` while compiling)."""
    if not named:
        return {}
    values = torch.stack([t.detach().to(torch.float64).reshape(()) for t in named.values()]).tolist()
    return dict(zip(named, values, strict=True))
