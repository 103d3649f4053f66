"""Registry of positional encodings: ``register_encoder`` / ``get_encoder`` / ``list_encoders``.

Every encoder, in every domain, is registered under a unique name together with metadata that
benchmarks, configs and the conformance suite rely on: its domain, which of the three hooks it
implements, whether it is *relative* (attention logits depend on positions only through ``i - j``)
and the paper it follows.

The sequence encoders register when ``pe_toolkit`` is imported. Domain encoders, and those of
third-party packages, are found through two entry-point groups and imported the first time they
are asked for:

* ``pe_toolkit.encoders``: ``name = "module:Class"``, one per encoder. ``get_encoder(name)`` and
  ``encoder_info(name)`` import ``module`` (which registers the class) on first use, and
  ``list_encoders()`` lists the names without importing anything.
* ``pe_toolkit.domains``: ``domain = "module"``. ``list_encoders(domain=...)`` imports the module.

A domain whose optional dependencies are missing raises an ``ImportError`` naming the extra to
install (:mod:`pe_toolkit.extras`). ``docs/plugins.md`` shows a third-party package doing the same.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from torch import nn

ENCODER_GROUP = "pe_toolkit.encoders"
"""Entry-point group of lazily imported encoders: ``name = "module:Class"``."""

DOMAIN_GROUP = "pe_toolkit.domains"
"""Entry-point group of domains: ``domain = "module"`` (importing it registers the domain's encoders)."""

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


@functools.cache
def _entry_points(group: str) -> dict[str, EntryPoint]:
    """``{name: entry point}`` of ``group`` over the installed distributions (read once; see :func:`refresh`)."""
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=group):
        seen = found.get(ep.name)
        if seen is not None and seen.value != ep.value:
            raise RuntimeError(
                f"entry point {ep.name!r} of group {group!r} is declared twice: {seen.value!r} (by "
                f"{_distribution(seen)}) and {ep.value!r} (by {_distribution(ep)}); uninstall one of them"
            )
        found[ep.name] = ep
    return found


def _distribution(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"distribution {dist.name!r}" if dist is not None else "an unknown distribution"


def refresh() -> None:
    """Read the entry points again (after installing a plugin into the running interpreter)."""
    _entry_points.cache_clear()


def _entry_point_domain(ep: EntryPoint) -> str | None:
    """The domain whose module holds ``ep``'s module, from the domain entry points (nothing imported)."""
    for domain, domain_ep in _entry_points(DOMAIN_GROUP).items():
        if ep.module == domain_ep.value or ep.module.startswith(domain_ep.value + "."):
            return domain
    return None


def _load_encoder_entry_point(name: str, ep: EntryPoint) -> EncoderInfo:
    try:
        loaded = ep.load()
    except ImportError as error:
        raise ImportError(f"encoder {name!r} ({ep.value}): {error}", name=error.name) from error
    info = _REGISTRY.get(name)
    if info is None or info.cls is not loaded:
        raise RuntimeError(
            f"entry point {name!r} = {ep.value!r} ({_distribution(ep)}) loaded {loaded!r}, but that module did "
            f"not register it as {name!r} with @register_encoder({name!r}, ...)"
        )
    return info


def load_domain(domain: str) -> None:
    """Import the module of ``domain``'s entry point (once), so that its encoders are registered.

    Raises:
        ValueError: ``domain`` is neither registered nor declared by an entry point (close matches named).
        ImportError: the domain's optional dependencies are missing (the message names the extra).
    """
    if not isinstance(domain, str):
        raise TypeError(f"domain must be a str, got {type(domain).__name__}")
    ep = _entry_points(DOMAIN_GROUP).get(domain)
    if ep is not None:
        try:
            importlib.import_module(ep.value)
        except ImportError as error:
            raise ImportError(f"domain {domain!r} ({ep.value}): {error}", name=error.name) from error
    elif domain not in {info.domain for info in _REGISTRY.values()}:
        raise _unknown("domain", domain, list_domains(), "known")


def list_domains() -> list[str]:
    """Sorted names of every domain: registered ones and those declared by entry points (none imported)."""
    return sorted({info.domain for info in _REGISTRY.values()} | set(_entry_points(DOMAIN_GROUP)))


def available_names() -> dict[str, str | None]:
    """``{name: domain}`` of every encoder, registered or declared by an entry point, without importing.

    The domain of a name not imported yet comes from the domain entry points (``None`` if no domain
    entry point holds its module).
    """
    names: dict[str, str | None] = {name: _entry_point_domain(ep) for name, ep in _entry_points(ENCODER_GROUP).items()}
    names.update({name: info.domain for name, info in _REGISTRY.items()})
    return dict(sorted(names.items()))


def _lookup(name: str) -> EncoderInfo:
    if not isinstance(name, str):
        raise TypeError(f"encoder name must be a str, got {type(name).__name__}")
    if name in _REGISTRY:
        return _REGISTRY[name]
    ep = _entry_points(ENCODER_GROUP).get(name)
    if ep is not None:
        return _load_encoder_entry_point(name, ep)
    raise _unknown("encoder", name, list(available_names()), "registered")


def _unknown(kind: str, value: str, known: list[str], listed_as: str) -> ValueError:
    close = difflib.get_close_matches(value, known, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ";"
    return ValueError(f"unknown {kind} {value!r}{hint} {listed_as}: {', '.join(known)}")


def encoder_info(name: str) -> EncoderInfo:
    """Metadata of the encoder registered as ``name``, importing its domain on first use.

    Raises:
        ValueError: unknown name (close matches across every domain are suggested).
        ImportError: the name's domain needs an extra that is not installed (the message names it).
    """
    return _lookup(name)


def get_encoder(name: str, dim: int, num_heads: int, **options: Any) -> nn.Module:
    """Build the encoder registered as ``name``: ``cls(dim, num_heads, **options)``.

    Domain encoders need no import first: ``get_encoder("rwse", 32, 4, in_features=4)`` imports
    ``pe_toolkit.domains.graphs`` through its entry point.

    Example:
        >>> enc = get_encoder("rope", dim=64, num_heads=4, base=10_000.0)
    """
    return _lookup(name).cls(dim, num_heads, **options)


def list_encoders(domain: str | None = None, pattern: str | None = None) -> list[str]:
    """Sorted names of the encoders.

    Args:
        domain: only this domain (``"sequence"``, ``"graphs"``, ...), imported on first use;
            ``None`` lists every name, registered or declared by an entry point, importing nothing.
        pattern: optional fnmatch filter on the name, e.g. ``"rope*"``.

    Raises:
        ValueError: unknown ``domain``.
        ImportError: ``domain`` needs an extra that is not installed.
    """
    if domain is None:
        names = list(available_names())
    else:
        load_domain(domain)
        names = [n for n, info in _REGISTRY.items() if info.domain == domain]
    if pattern is not None:
        names = fnmatch.filter(names, pattern)
    return sorted(names)
