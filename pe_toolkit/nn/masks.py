"""Which keys each query may attend: causal, key padding, packed documents and a sliding window.

One description, :class:`AttentionMask`, serves every attention backend: the dense boolean mask of
a block of queries (SDPA and the memory-bounded tiles) and FlexAttention's ``mask_mod``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

MaskFunction = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""``m(batch, head, query index, key index) -> bool``, elementwise (FlexAttention's ``mask_mod``)."""


@dataclass(frozen=True)
class AttentionMask:
    """The visibility rules of one attention call over ``q_len`` queries and ``k_len`` keys.

    Query ``i`` (0-based among the queries, which are the *last* ``q_len`` of the keys when causal:
    ``offset = k_len - q_len``, so KV-cache decoding lines up) sees key ``j`` iff all hold:

    * ``causal``: ``j <= i + offset``;
    * ``key_padding_mask (B, k_len)`` bool: ``key_padding_mask[b, j]`` (True = real token);
    * documents ``q_documents (B, q_len)`` / ``k_documents (B, k_len)`` integer: equal ids (packed
      sequences; ids are compared, so give each document of a row its own id);
    * ``window`` (causal only): ``j > i + offset - window``, the last ``window`` keys.

    A query that sees no key at all (a padding query of a left-padded batch) is given every key in
    :meth:`dense`, so that its (ignored) output is finite.
    """

    q_len: int
    k_len: int
    causal: bool = False
    key_padding_mask: Tensor | None = None
    q_documents: Tensor | None = None
    k_documents: Tensor | None = None
    window: int | None = None

    def __post_init__(self) -> None:
        if self.window is not None and not self.causal:
            raise ValueError("window needs causal attention (a sliding window over past keys)")
        if (self.q_documents is None) != (self.k_documents is None):
            raise ValueError("give both q_documents and k_documents, or neither")

    @property
    def offset(self) -> int:
        return self.k_len - self.q_len

    @property
    def is_plain_causal(self) -> bool:
        """Causal over all queries and keys with nothing else: SDPA's ``is_causal`` fast path."""
        return (self.causal and self.q_len == self.k_len and self.key_padding_mask is None
                and self.q_documents is None and self.window is None)

    @property
    def is_empty(self) -> bool:
        """No rule at all: every query sees every key."""
        causal_matters = self.causal and self.offset < self.k_len - 1
        return (not causal_matters and self.key_padding_mask is None and self.q_documents is None
                and self.window is None)

    def key_range(self, start: int, stop: int) -> tuple[int, int]:
        """The keys ``[first, last)`` that any of the queries ``start .. stop - 1`` can see (causal, window)."""
        first, last = 0, self.k_len
        if self.causal:
            last = min(self.k_len, stop + self.offset)
            if self.window is not None:
                first = max(0, start + self.offset - self.window + 1)
        return first, last

    def dense(self, start: int = 0, stop: int | None = None, device: torch.device | None = None,
              keys: tuple[int, int] | None = None) -> Tensor | None:
        """Bool ``(B or 1, 1, stop - start, K)`` for queries ``start .. stop - 1`` and the keys ``keys =
        (first, last)`` (default all, ``K = k_len``), or ``None`` if every one of them is visible."""
        stop = self.q_len if stop is None else stop
        first, last = (0, self.k_len) if keys is None else keys
        if self.is_empty:
            return None
        rows = torch.arange(start, stop, device=device).unsqueeze(-1) + self.offset  # the query's own key index
        cols = torch.arange(first, last, device=device)
        visible = torch.ones(stop - start, last - first, dtype=torch.bool, device=device)
        if self.causal:
            visible = visible & (cols <= rows)
        if self.window is not None:
            visible = visible & (cols > rows - self.window)
        visible = visible[None, None]
        if self.key_padding_mask is not None:
            visible = visible & self.key_padding_mask[:, None, None, first:last]
        if self.q_documents is not None:
            same = self.q_documents[:, start:stop, None] == self.k_documents[:, None, first:last]
            visible = visible & same[:, None]
        return visible | ~visible.any(-1, keepdim=True)

    def mask_function(self) -> MaskFunction:
        """FlexAttention's ``mask_mod``: the same rules, elementwise over broadcast index tensors."""
        offset, window, causal = self.offset, self.window, self.causal
        padding, q_docs, k_docs = self.key_padding_mask, self.q_documents, self.k_documents

        def visible(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            keep = j >= 0  # all True, of the broadcast shape
            if causal:
                keep = keep & (j <= i + offset)
            if window is not None:
                keep = keep & (j > i + offset - window)
            if padding is not None:
                keep = keep & padding[b, j]
            if q_docs is not None:
                keep = keep & (q_docs[b, i] == k_docs[b, j])
            return keep

        return visible


def document_positions(document_ids: Tensor) -> Tensor:
    """Positions that restart at 0 in every document of a packed row: ``(B, L)`` long.

    A document is a maximal run of equal ids along the row, so ``[7, 7, 7, 2, 2, 7]`` holds three
    documents (positions ``[0, 1, 2, 0, 1, 0]``).
    """
    index = torch.arange(document_ids.shape[-1], device=document_ids.device).expand_as(document_ids)
    starts = torch.ones_like(document_ids, dtype=torch.bool)
    starts[:, 1:] = document_ids[:, 1:] != document_ids[:, :-1]
    start_index = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=-1).values
    return index - start_index


def document_runs(document_ids: Tensor) -> Tensor:
    """Ids of the maximal runs of equal ids along each row, ``(B, L)`` long: ``[7, 7, 2, 7] -> [0, 0, 1, 2]``."""
    changes = torch.zeros_like(document_ids, dtype=torch.long)
    changes[:, 1:] = (document_ids[:, 1:] != document_ids[:, :-1]).long()
    return changes.cumsum(-1)
