"""The optimiser recipe shared by the training modules: AdamW, linear warmup, cosine decay."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torch import nn


def adamw_with_warmup_cosine(
    named_parameters: Iterable[tuple[str, nn.Parameter]],
    *,
    lr: float,
    weight_decay: float,
    betas: Sequence[float],
    warmup_steps: int,
    max_steps: int | None,
) -> dict:
    """AdamW with weight decay on matrices only, and a per-step schedule for Lightning.

    Parameters of dimension < 2 (norms, biases, scalars) and those of positional encodings (names
    containing ``encodings.``) are not decayed. The learning rate rises linearly over
    ``warmup_steps``, then follows a cosine from ``lr`` to ``0.1 * lr`` at ``max_steps``
    (constant after warmup when ``max_steps`` is ``None`` or 0).

    Returns:
        ``{"optimizer", "lr_scheduler": {"scheduler", "interval": "step"}}`` for ``configure_optimizers``.
    """
    decay, no_decay = [], []
    for name, p in named_parameters:
        if p.requires_grad:
            (decay if p.dim() >= 2 and ".encodings." not in f".{name}" else no_decay).append(p)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr, betas=tuple(betas),
    )

    def schedule(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if not max_steps or max_steps <= warmup_steps:
            return 1.0
        progress = min(1.0, (step - warmup_steps) / (max_steps - warmup_steps))
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
