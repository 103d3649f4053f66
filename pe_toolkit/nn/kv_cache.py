"""Key/value cache for incremental decoding."""

from __future__ import annotations

from torch import Tensor


class KVCache:
    """Keys, values and key positions of one attention layer, grown by doubling (no per-step copy).

    Keys are stored *after* the encoder's ``rotate`` hook, so a cached key keeps the rotation of its
    own position. Positions are stored so that bias encoders see every key's true position.

    Shapes: keys/values ``(B, H_kv, L, head_dim)``; positions ``(L,)`` or ``(B, L)``.
    """

    def __init__(self) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._pos: Tensor | None = None
        self.length = 0

    def update(self, k: Tensor, v: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Append new keys/values/positions; return views of everything cached so far."""
        new = k.shape[-2]
        if self._k is None:
            capacity = max(16, new)
            self._k = k.new_empty(*k.shape[:-2], capacity, k.shape[-1])
            self._v = v.new_empty(*v.shape[:-2], capacity, v.shape[-1])
            self._pos = positions.new_empty(*positions.shape[:-1], capacity)
        elif k.shape[:-2] != self._k.shape[:-2] or positions.dim() != self._pos.dim():
            raise ValueError(
                f"KVCache: new keys {tuple(k.shape)} / positions {tuple(positions.shape)} do not match the "
                f"cached {tuple(self._k.shape)} / {tuple(self._pos.shape)}"
            )
        if self.length + new > self._k.shape[-2]:
            capacity = max(2 * self._k.shape[-2], self.length + new)
            self._k = _grow(self._k, capacity, self.length)
            self._v = _grow(self._v, capacity, self.length)
            self._pos = _grow(self._pos, capacity, self.length)
        end = self.length + new
        self._k[..., self.length:end, :] = k
        self._v[..., self.length:end, :] = v
        self._pos[..., self.length:end] = positions
        self.length = end
        return self._k[..., :end, :], self._v[..., :end, :], self._pos[..., :end]

    def reset(self) -> None:
        self.__init__()


def _grow(t: Tensor, capacity: int, used: int) -> Tensor:
    dim = -2 if t.dim() > 2 else -1
    out = t.new_empty(*t.shape[:dim], capacity, *t.shape[dim + 1:] if dim == -2 else ())
    out.narrow(dim, 0, used).copy_(t.narrow(dim, 0, used))
    return out
