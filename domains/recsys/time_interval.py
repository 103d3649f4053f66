"""Time-interval-aware attention bias (TiSASRec): positions are timestamps, the bias reads their gaps.

Li, Wang, McAuley 2020, "Time Interval Aware Self-Attention for Sequential Recommendation", WSDM 2020
(official code: JiachengLi1995/TiSASRec).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import (
    BiasFunction,
    PositionalEncoding,
    PositionCheck,
    check_int,
    position_lookup,
    require_all,
    takes_checked,
)
from pe_toolkit.registry import register_encoder

__all__ = ["EXAMPLE_GAPS", "TimeIntervalBias", "clipped_intervals"]

#: Seconds between consecutive interactions of the example user of :meth:`TimeIntervalBias.example_positions`
#: (repeated): bursts a minute or two apart inside a session, then a 30-minute break.
EXAMPLE_GAPS: tuple[int, ...] = (60, 120, 60, 240, 60, 180, 1800, 120)


def clipped_intervals(q_time: Tensor, k_time: Tensor, max_interval: int) -> Tensor:
    """TiSASRec's relation matrix ``r_ij = min(floor(|t_i - t_j|), max_interval)`` as long.

    Args:
        q_time: ``(Lq,)`` or ``(B, Lq)`` query times, already in the user's time unit (see
            :func:`pe_toolkit.domains.recsys.split.time_positions`).
        k_time: ``(Lk,)`` or ``(B, Lk)`` key times.
    Returns:
        ``(Lq, Lk)`` or ``(B, Lq, Lk)`` long.
    """
    return interval(q_time.unsqueeze(-1), k_time.unsqueeze(-2), max_interval)


def interval(q_time: Tensor, k_time: Tensor, max_interval: int) -> Tensor:
    """``min(floor(|t_q - t_k|), max_interval)`` elementwise over broadcast times, long (float64 arithmetic)."""
    return (k_time.to(torch.float64) - q_time.to(torch.float64)).abs().floor().clamp(max=max_interval).long()


@register_encoder(
    "time_interval",
    relative=False,  # relative in time, not in the index i - j (and the optional table is absolute)
    reference="Li, Wang, McAuley 2020, Time Interval Aware Self-Attention for Sequential Recommendation (TiSASRec), "
    "WSDM 2020",
    domain="recsys",
    example_options={"max_interval": 16, "max_len": 16},
)
class TimeIntervalBias(PositionalEncoding):
    """TiSASRec's time-interval term as an attention bias: ``b_ij = q_i . R[r_ij] / sqrt(d)``.

    Positions are vectors: ``positions[..., 0]`` is the index in the window and ``positions[..., 1]`` the
    time in the user's unit (``position_vector_dims = 1``; shape ``(L, 2)`` or ``(B, L, 2)``). The
    interval ``r_ij = min(floor(|t_i - t_j|), max_interval)`` picks a row of a learned table
    ``R (max_interval + 1, head_dim)`` shared by the heads; TiSASRec clips intervals at ``k`` the same way.
    With ``max_len``, the ``embed`` hook also adds TiSASRec's absolute position embedding, a learned table
    ``P (max_len, dim)`` indexed by ``positions[..., 0]``.

    Deviation: TiSASRec adds ``R^K_ij`` and ``P^K_j`` to the keys and ``R^V_ij``, ``P^V_j`` to the values.
    The toolkit's hooks act on queries, keys and logits only, so this keeps the key-side interval term
    (``q_i . R^K_ij``, the part that changes where attention goes) and moves the absolute term to the
    input, as SASRec does; the value-side terms are omitted.

    Options:
        max_interval: the clip ``k`` (TiSASRec's ``time_span``, 256 by default there and here).
        max_len: size of the absolute table; ``None`` (default) adds none.
        init_std: standard deviation of the normal initialisation of both tables (0.02).
    """

    position_vector_dims = 1

    def __init__(
        self, dim: int, num_heads: int, *, max_interval: int = 256, max_len: int | None = None,
        init_std: float = 0.02, causal: bool = True,
    ) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.max_interval = check_int("time_interval: max_interval", max_interval, minimum=1)
        self.max_len = None if max_len is None else check_int("time_interval: max_len", max_len)
        self.interval_emb = nn.Parameter(torch.randn(self.max_interval + 1, self.head_dim) * init_std)
        self.table = None
        if self.max_len is not None:
            self.table = nn.Embedding(self.max_len, dim)
            nn.init.normal_(self.table.weight, std=init_std)

    @staticmethod
    def _split(name: str, positions: Tensor) -> tuple[Tensor, Tensor]:
        if positions.dim() not in (2, 3) or positions.shape[-1] != 2:
            raise ValueError(
                f"time_interval: {name} must have shape (L, 2) or (B, L, 2) = (index, time), "
                f"got {tuple(positions.shape)}"
            )
        return positions[..., 0], positions[..., 1]

    def position_checks(self, positions: Tensor, name: str = "positions") -> list[PositionCheck]:
        """With an absolute table: the index column holds whole numbers in ``[0, max_len)``."""
        if self.table is None or positions.dim() not in (2, 3) or positions.shape[-1] != 2 or not positions.numel():
            return []
        index = positions[..., 0]
        checks = []
        if index.is_floating_point():
            checks.append(((index == index.round()).all(),
                           f"time_interval: index positions ({name}[..., 0]) must be whole numbers", None))
        checks.append((((index >= 0) & (index < self.max_len)).all(),
                       f"time_interval: index positions must lie in [0, max_len={self.max_len})",
                       lambda: f", got [{int(index.min())}, {int(index.max())}]"))
        return checks

    @takes_checked
    def embed(self, x: Tensor, positions: Tensor, *, checked: bool = False) -> Tensor:
        index, _ = self._split("positions", positions)
        if self.table is None:
            return x
        if not checked:
            require_all(self.position_checks(positions))
        return x + self.table(index.long()).to(x.dtype)

    def example_positions(self, length: int) -> Tensor:
        """``(index, time)`` of one user's window of ``length`` interactions, ``(length, 2)`` float64 as SASRec passes.

        The timestamps (seconds) advance by :data:`EXAMPLE_GAPS` in turn, irregular bursts and session breaks,
        and become TiSASRec's personal time positions with
        :func:`~pe_toolkit.domains.recsys.split.time_positions` (here: minutes, the smallest gap). The index
        column is ``0 .. length - 1``, clamped to ``max_len - 1`` when a window is longer than the table.
        """
        from pe_toolkit.domains.recsys.split import time_positions

        check_int("length", length)
        gaps = torch.tensor(EXAMPLE_GAPS, dtype=torch.float64)[torch.arange(length - 1) % len(EXAMPLE_GAPS)]
        timestamps = torch.cat([torch.zeros(1, dtype=torch.float64), gaps.cumsum(0)]) + 1_700_000_000
        times = torch.from_numpy(time_positions(timestamps.numpy(), scale_from=length))
        index = torch.arange(length, dtype=torch.float64)
        if self.max_len is not None:
            index = index.clamp(max=self.max_len - 1)
        return torch.stack([index, times], dim=-1)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        _, q_time = self._split("q_pos", q_pos)
        _, k_time = self._split("k_pos", k_pos)
        relation = clipped_intervals(q_time, k_time, self.max_interval)  # (Lq, Lk) or (B, Lq, Lk)
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        logits = q.to(compute) @ self.interval_emb.to(compute).transpose(0, 1) / math.sqrt(q.shape[-1])
        b, h, lq, _ = logits.shape
        relation = relation.unsqueeze(-3) if relation.dim() == 3 else relation[None, None]
        relation = relation.expand(b, h, lq, relation.shape[-1])
        return logits.gather(-1, relation)  # (B, H, Lq, Lk)

    def bias_function(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> BiasFunction:
        """Pointwise: ``x[b, h, i, r(t_i, t_j)]`` with the per-query table ``x = q R^T / sqrt(d)``
        ``(B, H, Lq, max_interval + 1)`` (FlexAttention's ``score_mod``)."""
        self._split("q_pos", q_pos)
        self._split("k_pos", k_pos)
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        per_query = q.to(compute) @ self.interval_emb.to(compute).transpose(0, 1) / math.sqrt(q.shape[-1])
        query, key = position_lookup(q_pos, vector_dims=1), position_lookup(k_pos, vector_dims=1)
        clip = self.max_interval

        def function(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            return per_query[b, h, i, interval(query(b, i)[..., 1], key(b, j)[..., 1], clip)]

        return function

    def extra_repr(self) -> str:
        return super().extra_repr() + f", max_interval={self.max_interval}, max_len={self.max_len}"
