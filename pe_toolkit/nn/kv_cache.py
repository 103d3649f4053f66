"""Key/value cache for incremental decoding."""

from __future__ import annotations

from torch import Tensor


class KVCache:
    """Keys, values and key positions of one attention layer, grown by doubling (no per-step copy).

    Keys are stored *after* the encoder's ``rotate`` hook, so a cached key keeps the rotation of its
    own position. Positions are stored so that bias encoders see every key's true position.

    Shapes: keys/values ``(B, H_kv, L, head_dim)``; positions ``(L,)`` or ``(B, L)``, plus
    ``vector_dims`` trailing feature dims for vector positions (e.g. ``(B, L, F)`` structure labels).
    """

    def __init__(self) -> None:
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._pos: Tensor | None = None
        self.length = 0

    def update(
        self, k: Tensor, v: Tensor, positions: Tensor, *, vector_dims: int = 0
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Append new keys/values/positions; return views of everything cached so far.

        ``vector_dims`` trailing dims of ``positions`` are features of one position (the length dim
        is the one before them).
        """
        new = k.shape[-2]
        pos_dim = positions.dim() - 1 - vector_dims  # the length dim of the positions
        if self._k is None:
            capacity = max(16, new)
            self._k = k.new_empty(*k.shape[:-2], capacity, k.shape[-1])
            self._v = v.new_empty(*v.shape[:-2], capacity, v.shape[-1])
            self._pos = positions.new_empty(*positions.shape[:pos_dim], capacity, *positions.shape[pos_dim + 1:])
        elif (k.shape[:-2] != self._k.shape[:-2] or positions.dim() != self._pos.dim()
              or positions.shape[pos_dim + 1:] != self._pos.shape[pos_dim + 1:]):
            raise ValueError(
                f"KVCache: new keys {tuple(k.shape)} / positions {tuple(positions.shape)} do not match the "
                f"cached {tuple(self._k.shape)} / {tuple(self._pos.shape)}"
            )
        if self.length + new > self._k.shape[-2]:
            capacity = max(2 * self._k.shape[-2], self.length + new)
            self._k = _grow(self._k, capacity, self.length)
            self._v = _grow(self._v, capacity, self.length)
            self._pos = _grow(self._pos, capacity, self.length, pos_dim)
        end = self.length + new
        self._k[..., self.length:end, :] = k
        self._v[..., self.length:end, :] = v
        self._pos.narrow(pos_dim, self.length, new).copy_(positions)
        self.length = end
        return self._k[..., :end, :], self._v[..., :end, :], self._pos.narrow(pos_dim, 0, end)

    def reset(self) -> None:
        self.__init__()


def _grow(t: Tensor, capacity: int, used: int, dim: int | None = None) -> Tensor:
    dim = (-2 if t.dim() > 2 else -1) if dim is None else dim
    dim = dim % t.dim()
    out = t.new_empty(*t.shape[:dim], capacity, *t.shape[dim + 1:])
    out.narrow(dim, 0, used).copy_(t.narrow(dim, 0, used))
    return out
