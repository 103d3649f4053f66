"""Cross-lingual position representations (XL-PE) for the source encoder of a translation model.

Ding, Wang, Tao 2020, "Self-Attention with Cross-Lingual Position Representation", ACL 2020,
arXiv:2004.13310. Each source token has two positions: its index ``t`` in the sentence and its
*cross-lingual position* ``t_xl``, its index in the sentence reordered by a BTG tree toward target order
(:mod:`pe_toolkit.domains.translation.btg`). XL-PE encodes ``t_xl`` with the same sinusoid as the standard PE
(Vaswani et al. 2017) and combines the two with one of the paper's two strategies:

* ``strategy="input"`` (Inputs XL SANs): ``x + PE(t) + PE(t_xl)`` at the encoder input.
* ``strategy="head"`` (Head XL SANs): ``x + PE(t)`` at the input, and in every self-attention layer the
  cross-lingual position is given to a subset of the heads: for the ``xl_heads`` last heads,
  ``q_h += PE(t_xl) U^Q_h`` and ``k_h += PE(t_xl) U^K_h`` (learned ``U``, ``dim -> head_dim``), i.e. those
  heads see the input as if its position embedding were the cross-lingual one, the others see it with
  the standard one only. (The paper's details of the head strategy could not be checked; this is the
  reading "some heads use the cross-lingual position, the others the standard one", applied through
  the ``rotate`` hook so that the toolkit's one attention implementation serves it unchanged.)

Positions are a pair per token: ``positions[..., 0] = t`` and ``positions[..., 1] = t_xl``, shape
``(L, 2)`` or ``(B, L, 2)`` (``position_vector_dims = 1``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.domains.translation.btg import btg_tree_from_alignment, cross_lingual_positions
from pe_toolkit.encoders.absolute import sinusoidal_table
from pe_toolkit.encoders.base import (
    PositionalEncoding,
    PositionCheck,
    check_choice,
    check_float,
    check_int,
    require_all,
    takes_checked,
)
from pe_toolkit.registry import register_encoder

__all__ = ["CrossLingualPositionEncoding", "EXAMPLE_CLAUSE", "STRATEGIES", "example_alignment"]

STRATEGIES = ("input", "head")

#: Target index of each source word of the example clause "the dog chases the cat" in its head-final
#: translation "THE DOG GA THE CAT O CHASES" (GA and O have no source word), as in the toy language pair.
EXAMPLE_CLAUSE: tuple[int, ...] = (0, 1, 6, 3, 4)


def example_alignment(length: int) -> list[tuple[int, int]]:
    """Word alignment of ``length`` source tokens: clauses of :data:`EXAMPLE_CLAUSE` one after the other.

    Source token ``i`` is word ``i % 5`` of clause ``i // 5`` (subject-verb-object) and links to its word of
    the clause's subject-object-verb translation (7 target words per clause); a last, partial clause keeps the
    links of the words it has.
    """
    check_int("length", length)
    return [(i, 7 * (i // 5) + EXAMPLE_CLAUSE[i % 5]) for i in range(length)]


def _check_pair_shape(positions: Tensor, name: str = "positions") -> None:
    """Shape ``(L, 2)`` / ``(B, L, 2)`` of numbers (no value is read)."""
    if not isinstance(positions, Tensor):
        raise TypeError(f"xl_pe: {name} must be a tensor, got {type(positions).__name__}")
    if positions.dim() not in (2, 3) or positions.shape[-1] != 2:
        raise ValueError(
            f"xl_pe: {name} must have shape (L, 2) or (B, L, 2) holding (position, cross-lingual position), "
            f"got {tuple(positions.shape)}"
        )
    if positions.dtype == torch.bool:
        raise ValueError(f"xl_pe: {name} must be numbers, got dtype {positions.dtype}")


def pair_position_checks(positions: Tensor, name: str = "positions") -> list[PositionCheck]:
    """The cross-lingual column holds integers in ``[0, L)`` (a reordered index), as unread checks."""
    if positions.dim() not in (2, 3) or positions.shape[-1] != 2 or positions.dtype == torch.bool:
        return []  # the hooks raise the shape error
    xl = positions[..., 1]
    length = positions.shape[-2]
    checks = []
    if xl.is_floating_point():
        whole = torch.isfinite(xl) & (xl == xl.round())
        checks.append((whole.all(), f"xl_pe: {name}[..., 1] (cross-lingual positions) must be integers",
                       lambda: f", got {float(xl[~whole][0])!r}"))
    outside = (xl < 0) | (xl >= length)
    checks.append(((~outside).all(), f"xl_pe: {name}[..., 1] (cross-lingual positions) must lie in [0, {length}) "
                   f"for {length} tokens", lambda: f", got {xl[outside][0].item()!r}"))
    return checks


@register_encoder(
    "xl_pe",
    domain="translation",
    relative=False,
    reference="Ding, Wang, Tao 2020, Self-Attention with Cross-Lingual Position Representation, ACL 2020, "
    "arXiv:2004.13310",
    example_options={"strategy": "input"},
)
class CrossLingualPositionEncoding(PositionalEncoding):
    """Standard sinusoidal PE plus the sinusoid of the BTG-reordered index (Ding et al. 2020).

    Options:
        strategy: ``"input"`` (add both sinusoids to the input) or ``"head"`` (standard PE at the input,
            cross-lingual PE projected into the queries and keys of ``xl_heads`` heads in every layer).
        xl_heads: number of heads that receive the cross-lingual position (``"head"`` only; default
            half of the heads, at least 1).
        base: sinusoid wavelength base (10,000).

    Shapes: ``embed(x (B, L, dim), positions (L, 2) | (B, L, 2)) -> (B, L, dim)``;
    ``rotate(q (B, H, L, hd), k (B, H, L, hd), q_pos, k_pos)`` with pair positions.
    """

    position_vector_dims = 1

    def __init__(self, dim: int, num_heads: int, *, strategy: str = "input", xl_heads: int | None = None,
                 base: float = 10_000.0, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        if dim % 2:
            raise ValueError(f"xl_pe: dim must be even, got {dim}")
        self.strategy = check_choice("xl_pe: strategy", strategy, STRATEGIES)
        self.base = check_float("xl_pe: base", base)
        if xl_heads is None:
            xl_heads = max(1, num_heads // 2)
        self.xl_heads = check_int("xl_pe: xl_heads", xl_heads)
        if self.xl_heads > num_heads:
            raise ValueError(f"xl_pe: xl_heads must be <= num_heads ({num_heads}), got {xl_heads}")
        if self.strategy == "head":
            self.q_proj = nn.Linear(dim, self.xl_heads * self.head_dim, bias=False)
            self.k_proj = nn.Linear(dim, self.xl_heads * self.head_dim, bias=False)
            for proj in (self.q_proj, self.k_proj):
                nn.init.normal_(proj.weight, std=0.02)

    def _table(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        pe = sinusoidal_table(positions, self.dim, self.base, dtype)
        return pe if pe.dim() == 3 else pe.unsqueeze(0)

    def position_checks(self, positions: Tensor, name: str = "positions") -> list[PositionCheck]:
        """The cross-lingual positions are integers in ``[0, L)`` (:func:`pair_position_checks`)."""
        return pair_position_checks(positions, name)

    @takes_checked
    def embed(self, x: Tensor, positions: Tensor, *, checked: bool = False) -> Tensor:
        _check_pair_shape(positions)
        if not checked:
            require_all(self.position_checks(positions))
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        pe = self._table(positions[..., 0], dtype)
        if self.strategy == "input":
            pe = pe + self._table(positions[..., 1], dtype)
        return (x.to(dtype) + pe).to(x.dtype)

    def _per_head(self, proj: nn.Linear, positions: Tensor, like: Tensor) -> Tensor:
        table = self._table(positions[..., 1], like.dtype)              # (B or 1, L, dim)
        b, length = table.shape[:2]
        out = F.linear(table, proj.weight.to(like.dtype))
        return out.view(b, length, self.xl_heads, self.head_dim).transpose(1, 2)  # (B or 1, xl_heads, L, hd)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        if self.strategy != "head":
            return q, k
        _check_pair_shape(q_pos, "q_pos")  # values: checked once by the entry (position_checks), not per layer
        _check_pair_shape(k_pos, "k_pos")
        if q.shape[1] != self.num_heads or k.shape[1] != self.num_heads:
            raise ValueError(f"xl_pe: strategy='head' needs {self.num_heads} query and key heads, got "
                             f"{q.shape[1]} and {k.shape[1]}")
        first = self.num_heads - self.xl_heads
        q_xl = q[:, first:] + self._per_head(self.q_proj, q_pos, q)
        k_xl = k[:, first:] + self._per_head(self.k_proj, k_pos, k)
        return torch.cat((q[:, :first], q_xl), dim=1), torch.cat((k[:, :first], k_xl), dim=1)

    def example_positions(self, length: int) -> Tensor:
        """``(position, cross-lingual position)`` of ``length`` source tokens, ``(length, 2)`` int64.

        The source is a run of subject-verb-object clauses ("the dog chases the cat", :func:`example_alignment`)
        translated into a head-final language; the cross-lingual positions are the BTG reordering of that
        alignment (:func:`~pe_toolkit.domains.translation.btg.btg_tree_from_alignment`,
        :func:`~pe_toolkit.domains.translation.btg.cross_lingual_positions`), which moves each verb behind its
        object: per clause ``0 1 4 2 3``, a permutation of ``0 .. length - 1``.
        """
        tree = btg_tree_from_alignment(example_alignment(length), length)
        return torch.stack([torch.arange(length), torch.tensor(cross_lingual_positions(tree))], dim=-1)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", strategy={self.strategy!r}, xl_heads={self.xl_heads}"
