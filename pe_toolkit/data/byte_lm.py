"""``ByteLMDataModule``: next-byte prediction windows of a text corpus as Lightning loaders.

Importing this module imports Lightning (seconds); :mod:`pe_toolkit.data.text_corpus` and
:mod:`pe_toolkit.data.passkey` do not.
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

import hashlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from pe_toolkit.data.passkey import COMPACT_TEMPLATE, PAPER_TEMPLATE, passkey_training_windows
from pe_toolkit.data.text_corpus import (
    BYTE_VOCAB_SIZE,
    TextCorpus,
    _check_fraction,
    _check_int,
    build_stdlib_corpus,
    load_text_files,
    random_windows,
    sequential_windows,
)

IGNORE_INDEX = -100
_TEMPLATES = {"paper": PAPER_TEMPLATE, "compact": COMPACT_TEMPLATE}


def windows_to_batch(windows: Tensor, mask: Tensor | None = None) -> dict[str, Tensor]:
    """``{"input_ids", "targets"}`` from ``(B, T + 1)`` windows: inputs ``w[:, :-1]``, targets ``w[:, 1:]``.

    ``targets`` is ``IGNORE_INDEX`` (-100) where ``mask[:, 1:]`` is False, ready for
    ``F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)``.
    """
    targets = windows[:, 1:].clone()
    if mask is not None:
        targets[~mask[:, 1:]] = IGNORE_INDEX
    return {"input_ids": windows[:, :-1], "targets": targets}


def _seed_of(*parts: int) -> int:
    digest = hashlib.sha256("-".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class _RandomWindowBatches(IterableDataset):
    """``steps`` batches of random windows per epoch; seeded by (seed, rank, epoch), so ranks differ."""

    def __init__(
        self, data: Tensor, context: int, batch_size: int, steps: int, seed: int, passkey_rows: int, template: Any
    ) -> None:
        self.data, self.context, self.batch_size, self.steps = data, context, batch_size, steps
        self.seed, self.passkey_rows, self.template = seed, passkey_rows, template
        self.rank, self.epoch = 0, 0

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        generator = torch.Generator().manual_seed(_seed_of(self.seed, self.rank, self.epoch))
        self.epoch += 1
        text_rows = self.batch_size - self.passkey_rows
        for _ in range(self.steps):
            parts, masks = [], []
            if text_rows:
                parts.append(random_windows(self.data, self.context, text_rows, generator))
                masks.append(torch.ones_like(parts[-1], dtype=torch.bool))
            if self.passkey_rows:
                windows, mask = passkey_training_windows(
                    self.context, self.passkey_rows, generator, template=self.template
                )
                parts.append(windows)
                masks.append(mask)
            yield windows_to_batch(torch.cat(parts), torch.cat(masks))


class ByteLMDataModule(L.LightningDataModule):
    """Byte-level language modelling on the standard-library corpus (or a user's text files).

    * train: ``steps_per_epoch`` batches of :func:`random_windows` at ``context`` from the train
      split; optionally ``round(passkey_fraction * batch_size)`` rows of each batch are
      :func:`passkey_training_windows` (loss on their answer bytes only);
    * val: up to ``val_windows`` :func:`sequential_windows` at ``val_context`` (default ``context``)
      from the validation split, in batches of ``batch_size``.

    Every batch is ``{"input_ids": (B, T) long, "targets": (B, T) long}`` with ``targets[:, t]`` the
    byte after ``input_ids[:, t]`` and ``-100`` where no loss is taken (see :func:`windows_to_batch`).

    Args:
        context: training context length in bytes.
        batch_size: rows per batch.
        steps_per_epoch: training batches per epoch.
        val_context: validation context length (default ``context``).
        val_windows: most validation windows.
        val_fraction: fraction of the corpus bytes held out, by whole documents.
        max_bytes: corpus size cap (:func:`build_stdlib_corpus`); ``None`` for all of it.
        paths: text files / directories to use instead of the standard library
            (:func:`load_text_files` with ``recursive=True``).
        passkey_fraction: fraction of each training batch made of passkey sequences, in ``[0, 1]``.
        passkey_template: ``"paper"`` (shortest prompt 247 bytes) or ``"compact"`` (98 bytes).
        seed: seeds the document split, the corpus subset and the training windows.
    """

    def __init__(
        self,
        context: int = 256,
        batch_size: int = 32,
        steps_per_epoch: int = 1000,
        val_context: int | None = None,
        val_windows: int = 64,
        val_fraction: float = 0.1,
        max_bytes: int | None = None,
        paths: Sequence[str] | None = None,
        passkey_fraction: float = 0.0,
        passkey_template: str = "paper",
        seed: int = 0,
    ) -> None:
        super().__init__()
        _check_int("context", context, minimum=1)
        _check_int("batch_size", batch_size, minimum=1)
        _check_int("steps_per_epoch", steps_per_epoch, minimum=1)
        if val_context is not None:
            _check_int("val_context", val_context, minimum=1)
        _check_int("val_windows", val_windows, minimum=1)
        _check_fraction("val_fraction", val_fraction, open_low=True, open_high=True)
        _check_fraction("passkey_fraction", passkey_fraction)
        if passkey_template not in _TEMPLATES:
            raise ValueError(f"passkey_template must be one of {sorted(_TEMPLATES)}, got {passkey_template!r}")
        self.save_hyperparameters()
        self.passkey_rows = round(passkey_fraction * batch_size)
        if self.passkey_rows:  # fail now, not at the first batch, if the context cannot hold a prompt
            passkey_training_windows(context, 1, torch.Generator(), template=_TEMPLATES[passkey_template])
        self.corpus: TextCorpus | None = None
        self.train_bytes: Tensor | None = None
        self.val_bytes: Tensor | None = None

    @property
    def vocab_size(self) -> int:
        return BYTE_VOCAB_SIZE

    def setup(self, stage: str | None = None) -> None:
        if self.corpus is not None:
            return
        hp = self.hparams
        if hp.paths is not None:
            corpus = load_text_files([Path(p) for p in hp.paths], recursive=True)
            self.corpus = corpus if hp.max_bytes is None else corpus.subset(hp.max_bytes, hp.seed)
        else:
            self.corpus = build_stdlib_corpus(hp.max_bytes, hp.seed)
        self.train_bytes, self.val_bytes = self.corpus.split(hp.val_fraction, hp.seed)

    def train_dataloader(self) -> DataLoader:
        self.setup()
        hp = self.hparams
        dataset = _RandomWindowBatches(
            self.train_bytes, hp.context, hp.batch_size, hp.steps_per_epoch, hp.seed, self.passkey_rows,
            _TEMPLATES[hp.passkey_template],
        )
        dataset.rank = self.trainer.global_rank if self.trainer is not None else 0
        return DataLoader(dataset, batch_size=None)

    def val_dataloader(self) -> DataLoader:
        self.setup()
        hp = self.hparams
        windows = sequential_windows(self.val_bytes, hp.val_context or hp.context, hp.val_windows)
        batches = [windows_to_batch(windows[i : i + hp.batch_size]) for i in range(0, len(windows), hp.batch_size)]
        return DataLoader(batches, batch_size=None)
