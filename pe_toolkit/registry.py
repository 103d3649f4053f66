"""Registry of positional encodings: ``register_encoder`` / ``get_encoder`` / ``list_encoders``.

Every encoder, in every domain, is registered under a unique name together with metadata that
benchmarks, configs and the conformance suite rely on: its domain, which of the three hooks it
implements, whether it is *relative* (attention logits depend on positions only through ``i - j``)
and the paper it follows.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

HOOKS = ("embed", "rotate", "bias")


@dataclass(frozen=True)
class EncoderInfo:
    """Metadata of one registered encoder.

    Attributes:
        name: registry name, e.g. ``"rope"``.
        domain: ``"sequence"`` for the core encoders, or a domain such as ``"graphs"``.
        cls: the encoder class; constructed as ``cls(dim, num_heads, **options)``.
        hooks: the hooks the class overrides, a subset of ``("embed", "rotate", "bias")``.
        relative: True if attention logits depend on positions only through ``i - j``.
        reference: the paper, e.g. ``"Su et al. 2021, RoFormer, arXiv:2104.09864"``.
        example_options: options that make a small valid instance (used by tests and docs).
    """

    name: str
    domain: str
    cls: type
    hooks: tuple[str, ...]
    relative: bool
    reference: str
    example_options: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, EncoderInfo] = {}


def _overridden_hooks(cls: type) -> tuple[str, ...]:
    from pe_toolkit.encoders.base import PositionalEncoding

    return tuple(h for h in HOOKS if getattr(cls, h) is not getattr(PositionalEncoding, h))


def register_encoder(
    name: str,
    *,
    relative: bool,
    reference: str,
    domain: str = "sequence",
    example_options: dict[str, Any] | None = None,
) -> Callable[[type], type]:
    """Class decorator that registers a :class:`PositionalEncoding` subclass under ``name``.

    Raises:
        ValueError: if ``name`` is already registered to a different class.
        TypeError: if the decorated object is not a ``PositionalEncoding`` subclass.
    """

    def decorator(cls: type) -> type:
        from pe_toolkit.encoders.base import PositionalEncoding

        if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
            raise TypeError(f"register_encoder: {cls!r} is not a PositionalEncoding subclass")
        existing = _REGISTRY.get(name)
        if existing is not None and existing.cls is not cls:
            raise ValueError(
                f"register_encoder: name {name!r} is already registered to {existing.cls.__qualname__}"
            )
        _REGISTRY[name] = EncoderInfo(
            name=name,
            domain=domain,
            cls=cls,
            hooks=_overridden_hooks(cls),
            relative=relative,
            reference=reference,
            example_options=dict(example_options or {}),
        )
        cls.registry_name = name
        return cls

    return decorator


def _lookup(name: str) -> EncoderInfo:
    if not isinstance(name, str):
        raise TypeError(f"encoder name must be a str, got {type(name).__name__}")
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ";"
        raise ValueError(f"unknown encoder {name!r}{hint} registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def encoder_info(name: str) -> EncoderInfo:
    """Metadata of the encoder registered as ``name`` (ValueError with suggestions if unknown)."""
    return _lookup(name)


def get_encoder(name: str, dim: int, num_heads: int, **options: Any) -> nn.Module:
    """Build the encoder registered as ``name``: ``cls(dim, num_heads, **options)``.

    Example:
        >>> enc = get_encoder("rope", dim=64, num_heads=4, base=10_000.0)
    """
    return _lookup(name).cls(dim, num_heads, **options)


def list_encoders(domain: str | None = None, pattern: str | None = None) -> list[str]:
    """Sorted names of the registered encoders.

    Args:
        domain: only this domain (``"sequence"``, ``"graphs"``, ...); ``None`` lists all loaded.
        pattern: optional fnmatch filter on the name, e.g. ``"rope*"``.
    """
    names = [n for n, info in _REGISTRY.items() if domain is None or info.domain == domain]
    if pattern is not None:
        names = fnmatch.filter(names, pattern)
    return sorted(names)
