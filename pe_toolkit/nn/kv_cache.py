"""Key/value cache for incremental decoding."""

from __future__ import annotations

import weakref

import torch
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

    A cache belongs to the first attention layer that writes to it (:meth:`check_owner`): handing it
    to another layer (one cache shared by two layers, or a cache reused with another model) is a
    ValueError until :meth:`reset`. Positions keep their dtype: float positions appended to a cache
    of integer ones promote the stored positions to float (nothing is truncated).
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
        self.bounds: tuple[int, int] | None = None  # (min, max) of the integer positions held, on the host
        self._owner: weakref.ref | None = None

    def check_owner(self, layer: object, name: str = "cache") -> None:
        """ValueError naming ``name`` when another layer has written to this cache (see the class)."""
        owner = self._owner() if self._owner is not None else None
        if owner is not None and owner is not layer:
            raise ValueError(
                f"{name} already holds the keys of another attention layer ({type(owner).__name__} at "
                f"{id(owner):#x}): a KVCache serves one layer of one model; make one per layer with "
                "Transformer.new_cache() (or call reset() before reusing it)")

    def claim(self, layer: object) -> None:
        """Record ``layer`` as the owner (done by the layer when it first writes)."""
        if self._owner is None or self._owner() is None:
            self._owner = weakref.ref(layer)

    def snapshot(self) -> tuple:
        """The cache's state, for :meth:`restore` after a failed step (its buffers are only appended to
        past what it holds, or replaced, so keeping the references keeps the state)."""
        return self._k, self._v, self._pos, self.length, self._held, self.bounds, self._owner

    def restore(self, state: tuple) -> None:
        """Return to a :meth:`snapshot`: the keys appended since are forgotten."""
        self._k, self._v, self._pos, self.length, self._held, self.bounds, self._owner = state

    def check_update(self, key_shape: tuple[int, ...], positions: Tensor, *, vector_dims: int = 0) -> None:
        """Every check of :meth:`update` without changing anything (run before any layer appends):
        ``key_shape`` is the new keys' ``(B, H_kv, L, head_dim)``."""
        new = key_shape[-2]
        pos_dim = positions.dim() - 1 - vector_dims
        if self.max_length is not None and self.window is None and self.length + new > self.max_length:
            raise ValueError(f"KVCache: {self.length + new} keys exceed max_length={self.max_length}")
        if self._k is not None and (tuple(key_shape[:-2]) != tuple(self._k.shape[:-2])
                                    or key_shape[-1] != self._k.shape[-1] or positions.dim() != self._pos.dim()
                                    or positions.shape[pos_dim + 1:] != self._pos.shape[pos_dim + 1:]):
            raise ValueError(
                f"KVCache: new keys {tuple(key_shape)} / positions {tuple(positions.shape)} do not match the "
                f"cached {tuple(self._k.shape)} / {tuple(self._pos.shape)}"
            )

    def update(
        self, k: Tensor, v: Tensor, positions: Tensor, *, vector_dims: int = 0,
        bounds: tuple[int, int] | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Append new keys/values/positions; return views of everything cached so far.

        ``vector_dims`` trailing dims of ``positions`` are features of one position (the length dim
        is the one before them). ``bounds``: exact ``(min, max)`` of integer ``positions`` known on the
        host; the cache then knows the bounds of all it holds (:attr:`bounds`, a superset once a window
        has dropped keys).
        """
        new = k.shape[-2]
        pos_dim = positions.dim() - 1 - vector_dims  # the length dim of the positions
        self.check_update(tuple(k.shape), positions, vector_dims=vector_dims)
        if self._k is None:
            capacity = max(16, new) if self.max_length is None else self.max_length  # preallocated
            self._k = k.new_empty(*k.shape[:-2], capacity, k.shape[-1])
            self._v = v.new_empty(*v.shape[:-2], capacity, v.shape[-1])
            self._pos = positions.new_empty(*positions.shape[:pos_dim], capacity, *positions.shape[pos_dim + 1:])
            self.bounds = bounds
        else:
            self.bounds = None if bounds is None or self.bounds is None else (
                min(self.bounds[0], bounds[0]), max(self.bounds[1], bounds[1]))
        if positions.dtype != self._pos.dtype:  # float positions after integer ones: keep them exact
            self._pos = self._pos.to(torch.promote_types(self._pos.dtype, positions.dtype))
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
        """Forget every key and the owning layer."""
        self.__init__(max_length=self.max_length, window=self.window)


def _grow(t: Tensor, capacity: int, used: int, dim: int | None = None) -> Tensor:
    dim = (-2 if t.dim() > 2 else -1) if dim is None else dim
    dim = dim % t.dim()
    out = t.new_empty(*t.shape[:dim], capacity, *t.shape[dim + 1:])
    out.narrow(dim, 0, used).copy_(t.narrow(dim, 0, used))
    return out
