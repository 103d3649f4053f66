"""Position samplers used in training: randomized positions (Ruoss et al. 2023)."""

from __future__ import annotations

import torch
from torch import Tensor

from pe_toolkit.encoders.base import check_int


def randomized_positions(
    batch: int, length: int, max_position: int, *, generator: torch.Generator | None = None,
    device: torch.device | None = None,
) -> Tensor:
    """Sorted random positions: for each row, ``length`` distinct integers from ``[0, max_position)``.

    Ruoss et al. 2023, "Randomized Positional Encodings Boost Length Generalization of Transformers",
    arXiv:2305.16843: training on such positions exposes a model to every position up to
    ``max_position`` (much larger than the training length), so longer test sequences with
    ordinary positions ``arange(L)``, ``L <= max_position``, fall inside the training distribution.
    Works with any encoder that takes positions.

    Returns:
        ``(batch, length)`` int64, strictly increasing along each row.
    Raises:
        ValueError: if ``length > max_position``.
    """
    check_int("batch", batch)
    check_int("length", length)
    check_int("max_position", max_position)
    if length > max_position:
        raise ValueError(f"randomized_positions: length ({length}) must be <= max_position ({max_position})")
    scores = torch.rand(batch, max_position, generator=generator, device=device)
    return scores.topk(length, dim=1).indices.sort(dim=1).values
