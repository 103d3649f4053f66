"""Pictures of positional encodings (matplotlib, the ``plot`` extra).

:func:`plot_positional_pattern` draws what an encoding adds to the attention logits
(:meth:`~pe_toolkit.encoders.base.PositionalEncoding.positional_pattern`): one heatmap per head over
(query position, key position), and a profile against the distance ``query - key``. The same figure
comes from the command line (``pe-toolkit plot alibi -o alibi.png``) and fills the docs gallery.

>>> from pe_toolkit.plotting import plot_positional_pattern
>>> fig = plot_positional_pattern("alibi", length=16)
>>> fig.savefig("alibi.png")  # doctest: +SKIP

The figure is a plain :class:`matplotlib.figure.Figure` (no pyplot state, any backend).
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("plot", __name__)

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from matplotlib.figure import Figure

from pe_toolkit.encoders.base import PositionalEncoding, check_int
from pe_toolkit.registry import encoder_info, get_encoder

DEFAULT_DIM = 64
DEFAULT_HEADS = 4


def build_example_encoder(name: str, *, dim: int = DEFAULT_DIM, num_heads: int = DEFAULT_HEADS,
                          options: dict[str, Any] | None = None) -> PositionalEncoding:
    """``get_encoder(name, dim, num_heads, **example_options, **options)``: a drawable instance of ``name``."""
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    return get_encoder(name, dim, num_heads, **{**encoder_info(name).example_options, **(options or {})})


def distance_profile(pattern: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of a square ``(H, L, L)`` pattern at each distance ``i - j``, over its non-NaN entries.

    NaN marks pairs that are not drawn (masked). Returns ``(distances (D,), means (H, D))`` for the
    distances that have at least one non-NaN pair; a head without one at some distance gets NaN there.
    """
    length = pattern.shape[-1]
    i = torch.arange(length)
    distance = i[:, None] - i[None, :]
    present = ~pattern.isnan()
    distances = torch.unique(distance[present.any(0)])
    means = torch.stack([pattern[:, distance == d].nanmean(-1) for d in distances.tolist()], dim=-1)
    return distances, means


def plot_positional_pattern(
    encoding: str | PositionalEncoding,
    *,
    length: int = 32,
    positions: torch.Tensor | None = None,
    dim: int | None = None,
    num_heads: int | None = None,
    options: dict[str, Any] | None = None,
    max_heads: int = 8,
    title: str | None = None,
) -> Figure:
    """Heatmaps per head and a distance profile of an encoding's contribution to the attention logits.

    Args:
        encoding: a registered name (built with its ``example_options`` and ``options``, parameters
            at initialisation) or an encoder instance (drawn with its current parameters).
        length: sequence length ``L``.
        positions: positions of those ``L`` tokens in the encoding's format (e.g. a real piece's
            structure labels); default ``encoding.example_positions(length)``.
        dim, num_heads: model width and heads for a name (default 64 and 4); not allowed with an instance.
        options: extra constructor options for a name; not allowed with an instance.
        max_heads: draw at most this many heads (the first ones).
        title: figure title; default names the encoder, its domain and the content convention.

    Keys after the query are blanked for a causal encoder, and so are pairs the encoding masks itself
    (``-inf``, e.g. non-edges of a graph attention); a note on the figure says so. A pattern that is
    zero everywhere (NoPE, or a learnable encoding initialised to zero) says so on its axes instead of
    showing a flat map.

    Raises:
        TypeError / ValueError: bad arguments (named in the message).
    """
    check_int("length", length)
    check_int("max_heads", max_heads)
    if isinstance(encoding, str):
        info = encoder_info(encoding)
        encoder = build_example_encoder(encoding, dim=DEFAULT_DIM if dim is None else dim,
                                        num_heads=DEFAULT_HEADS if num_heads is None else num_heads, options=options)
        state = "parameters at initialisation" if any(True for _ in encoder.parameters()) else "no parameters"
    elif isinstance(encoding, PositionalEncoding):
        if dim is not None or num_heads is not None or options is not None:
            raise TypeError("dim, num_heads and options are for a registered name; got them with an encoder instance")
        encoder = encoding
        registered = "registry_name" in type(encoder).__dict__  # set by @register_encoder on the class itself
        info = encoder_info(type(encoder).registry_name) if registered else None
        state = "current parameters" if any(True for _ in encoder.parameters()) else "no parameters"
    else:
        raise TypeError(f"encoding must be a registered name or a PositionalEncoding, got {type(encoding).__name__}")

    if positions is None:
        positions = encoder.example_positions(length)
    pattern = encoder.positional_pattern(length, positions=positions).detach().float().cpu()
    scalar_positions = isinstance(positions, torch.Tensor) and positions.dim() == 1
    heads, rows, cols = pattern.shape
    identical = bool((pattern == pattern[:1]).all())  # e.g. RoPE: every head rotates alike
    identical = identical and heads > 1
    shown = 1 if identical else min(heads, max_heads)
    square = rows == cols
    label = info.name if info is not None else type(encoder).__name__
    if pattern.isnan().any() or (pattern == float("inf")).any():
        raise ValueError(f"{label}: the positional pattern has NaN or +inf entries")
    causal = encoder.causal and square
    visible = torch.ones(rows, cols, dtype=torch.bool).tril() if causal else torch.ones(rows, cols, dtype=torch.bool)
    blocked = bool(pattern[:, visible].isneginf().any())  # pairs the encoding itself masks (-inf)
    masked = pattern.masked_fill(~visible | pattern.isneginf(), float("nan"))
    finite = masked[~masked.isnan()]
    scale = float(finite.abs().max()) if finite.numel() else 0.0

    fig = Figure(figsize=(max(2.4 * shown, 6.0) + 1.2, 5.6), layout="constrained")
    columns = shown if shown > 1 else 3  # one map sits in the middle of three columns
    grid = fig.add_gridspec(2, columns, height_ratios=(1.15, 1.0))
    image, maps = None, []
    for h in range(shown):
        ax = fig.add_subplot(grid[0, h if shown > 1 else 1])
        maps.append(ax)
        image = ax.imshow(masked[h].numpy(), cmap="RdBu_r", vmin=-scale or -1.0, vmax=scale or 1.0,
                          interpolation="nearest", aspect="equal" if square else "auto")
        ax.set_title("all heads equal" if identical else f"head {h}", fontsize=9)
        ax.set_xlabel("key position j" if square else "key index", fontsize=8)
        if h == 0:
            ax.set_ylabel("query position i" if square else "query index", fontsize=8)
        ax.tick_params(labelsize=7)
    if image is not None:
        fig.colorbar(image, ax=maps, location="right", shrink=0.8, label="logit change")

    profile = fig.add_subplot(grid[1, :])
    if scale == 0.0:
        profile.text(0.5, 0.5, "no positional term: the pattern is 0 everywhere"
                     + (" (learnable, zero at initialisation)" if state == "parameters at initialisation" else ""),
                     ha="center", va="center", transform=profile.transAxes)
        profile.set_axis_off()
    elif not square:
        profile.text(0.5, 0.5, f"keys are not positions of the query sequence ({rows} queries x {cols} keys): "
                     "no distance profile", ha="center", va="center", transform=profile.transAxes)
        profile.set_axis_off()
    else:
        distances, means = distance_profile(masked)
        for h in range(shown):
            profile.plot(distances.numpy(), means[h].numpy(), marker=".", linewidth=1,
                         label="every head" if identical else f"head {h}")
        # "relative" means: a function of the position difference; only for index positions is that i - j
        exact = info is not None and info.relative and scalar_positions
        profile.set_xlabel("distance i - j (query minus key)" if scalar_positions else
                           "index distance i - j (query minus key; the positions themselves are vectors)")
        profile.set_ylabel("logit change" if exact else "mean logit change")
        profile.set_title("depends only on i - j" if exact else "mean over pairs at each distance", fontsize=9)
        profile.axhline(0.0, color="0.6", linewidth=0.6)
        profile.legend(fontsize=7, ncol=min(shown, 4))
    domain = f" ({info.domain})" if info is not None else ""
    embed_only = type(encoder).rotate is PositionalEncoding.rotate and type(encoder).bias is PositionalEncoding.bias
    content = "position-position term e_i . e_j" if embed_only else "content = ones"
    details = f"{content}; dim {encoder.dim}, {heads} heads, {state}"
    notes = ["blank: keys after the query (causal)"] if causal else []
    if blocked:
        notes.append("blank: pairs the encoding masks (-inf)")
    if not identical and heads > shown:
        notes.append(f"first {shown} of {heads} heads shown")
    heading = title if title is not None else f"{label}{domain}: attention-logit change\n{details}"
    fig.suptitle(heading + ("\n" + "; ".join(notes) if notes else ""), fontsize=10)
    return fig


def plot_relevance(words: Sequence[str], relevance: Mapping[str, Sequence[float]], *, title: str = "") -> Figure:
    """A heatmap of relevance over one example's tokens: one row per kind (e.g. token and position relevance
    under PA-LRP, :mod:`pe_toolkit.explain`), each row scaled by its largest ``|relevance|`` (red +, blue -).

    Args:
        words: the example's tokens, ``L`` of them (the x axis).
        relevance: ``{row label: L values}``, drawn top to bottom.
        title: the figure's title (the scaling note is appended).

    Raises:
        ValueError: no rows, a row whose length is not ``len(words)``, or a non-finite value.
    """
    if not relevance:
        raise ValueError("relevance must have at least one row")
    lengths = {label: len(values) for label, values in relevance.items()}
    if set(lengths.values()) != {len(words)}:
        raise ValueError(f"every relevance row must have len(words) = {len(words)} values, got {lengths}")
    matrix = torch.tensor([list(map(float, values)) for values in relevance.values()], dtype=torch.float64)
    if not bool(matrix.isfinite().all()):
        raise ValueError("relevance holds NaN or inf")
    scale = matrix.abs().amax(dim=1, keepdim=True)
    matrix = matrix / torch.where(scale > 0, scale, torch.ones_like(scale))
    fig = Figure(figsize=(max(6.0, 0.55 * len(words)), 0.6 * len(relevance) + 1.6))
    ax = fig.subplots()
    image = ax.imshow(matrix.numpy(), cmap="bwr", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(words)), list(words), rotation=60, fontsize=8)
    ax.set_yticks(range(len(relevance)), list(relevance), fontsize=8)
    ax.set_title(f"{title} (each row scaled by its max |relevance|)".lstrip(), fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    return fig
