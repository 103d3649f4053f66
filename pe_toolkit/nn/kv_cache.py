"""Key/value cache for incremental decoding."""

from __future__ import annotations

from torch import Tensor

from pe_toolkit.encoders.base import check_int


class KVCache:
    """Keys, values and key positions of one attention layer, grown by doubling (no per-step copy).

    Keys are stored *after* the encoder's ``rotate`` hook, so a cached key keeps the rotation of its
    own position. Positions are stored so that bias encoders see every key's true position.

    Shapes: keys/values ``(B, H_kv, L, head_dim)``; positions ``(L,)`` or ``(B, L)``, plus
    ``vector_dims`` trailing feature dims for vector positions (e.g. ``(B, L, F)`` structure labels).

    Args:
        max_length: the most keys it may hold; a longer sequence is a ValueError (instead of growing).
        window: keep only the last ``window`` keys (sliding-window attention, Mistral-style): memory
            stays bounded however long decoding runs. The layer must attend within the same window
            (``MultiHeadAttention(window=...)``; ``Transformer.new_cache`` passes it). ``length``
            still counts every key seen, so default positions keep growing.
    """

    def __init__(self, *, max_length: int | None = None, window: int | None = None) -> None:
        self.max_length = None if max_length is None else check_int("max_length", max_length)
        self.window = None if window is None else check_int("window", window)
        if max_length is not None and window is not None:
            raise ValueError("KVCache: give max_length or window, not both (a window bounds the cache itself)")
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._pos: Tensor | None = None
        self.length = 0  # keys seen so far (positions continue from here)
        self._held = 0  # keys stored (the last `window` of them with a window)

    def update(
        self, k: Tensor, v: Tensor, positions: Tensor, *, vector_dims: int = 0
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Append new keys/values/positions; return views of everything cached so far.

        ``vector_dims`` trailing dims of ``positions`` are features of one position (the length dim
        is the one before them).
        """
        new = k.shape[-2]
        pos_dim = positions.dim() - 1 - vector_dims  # the length dim of the positions
        if self.max_length is not None and self.window is None and self.length + new > self.max_length:
            raise ValueError(f"KVCache: {self.length + new} keys exceed max_length={self.max_length}")
        if self._k is None:
            capacity = max(16, new) if self.max_length is None else self.max_length  # preallocated
            self._k = k.new_empty(*k.shape[:-2], capacity, k.shape[-1])
            self._v = v.new_empty(*v.shape[:-2], capacity, v.shape[-1])
            self._pos = positions.new_empty(*positions.shape[:pos_dim], capacity, *positions.shape[pos_dim + 1:])
        elif (k.shape[:-2] != self._k.shape[:-2] or positions.dim() != self._pos.dim()
              or positions.shape[pos_dim + 1:] != self._pos.shape[pos_dim + 1:]):
            raise ValueError(
                f"KVCache: new keys {tuple(k.shape)} / positions {tuple(positions.shape)} do not match the "
                f"cached {tuple(self._k.shape)} / {tuple(self._pos.shape)}"
            )
        held = self._held
        if held + new > self._k.shape[-2]:
            capacity = max(2 * self._k.shape[-2], held + new)
            self._k = _grow(self._k, capacity, held)
            self._v = _grow(self._v, capacity, held)
            self._pos = _grow(self._pos, capacity, held, pos_dim)
        end = held + new
        self._k[..., held:end, :] = k
        self._v[..., held:end, :] = v
        self._pos.narrow(pos_dim, held, new).copy_(positions)
        self.length += new
        out = self._k[..., :end, :], self._v[..., :end, :], self._pos.narrow(pos_dim, 0, end)
        if self.window is not None and end > 2 * self.window:
            # drop all but the last `window` keys once twice that many are held: memory stays below
            # 2 x window and the copy is amortised; the layer's window mask hides the older ones
            keep = self.window
            self._k = self._k[..., end - keep:end, :].clone()
            self._v = self._v[..., end - keep:end, :].clone()
            self._pos = self._pos.narrow(pos_dim, end - keep, keep).clone()
            end = keep
        self._held = end
        return out

    @property
    def allocated(self) -> int:
        """Keys the buffers have room for (grown by doubling without ``max_length``: up to twice ``held``)."""
        return 0 if self._k is None else self._k.shape[-2]

    @property
    def nbytes(self) -> int:
        """Bytes allocated by the key, value and position buffers (what the cache really occupies)."""
        return sum(t.numel() * t.element_size() for t in (self._k, self._v, self._pos) if t is not None)

    @property
    def held(self) -> int:
        """Keys stored now (``length`` without a window, at most ``2 * window`` with one)."""
        return self._held

    def reset(self) -> None:
        self.__init__(max_length=self.max_length, window=self.window)


def _grow(t: Tensor, capacity: int, used: int, dim: int | None = None) -> Tensor:
    dim = (-2 if t.dim() > 2 else -1) if dim is None else dim
    dim = dim % t.dim()
    out = t.new_empty(*t.shape[:dim], capacity, *t.shape[dim + 1:])
    out.narrow(dim, 0, used).copy_(t.narrow(dim, 0, used))
    return out
