"""``TaskDataModule``: a synthetic task (``pe_toolkit.tasks``) as train / validation / test loaders."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, IterableDataset

from pe_toolkit.tasks import Example, Vocabulary, get_task
from pe_toolkit.tasks.base import check_choice
from pe_toolkit.training.resumable import ResumableDataLoader, trainer_shard

SPLITS = ("train", "val", "test")


class _ListDataset(torch.utils.data.Dataset):
    def __init__(self, examples: Sequence[Example]) -> None:
        self.examples = list(examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, index: int) -> Example:
        return self.examples[index]


def same_prompt_length_batches(prompt_lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches whose encoded prompts have the same length.

    Greedy decoding of such a batch needs no padding inside the prompt, so every example is decoded
    exactly as it would be alone.
    """
    groups: dict[int, list[int]] = defaultdict(list)
    for index, length in enumerate(prompt_lengths):
        groups[length].append(index)
    return [
        members[i : i + batch_size] for _, members in sorted(groups.items()) for i in range(0, len(members), batch_size)
    ]


class _ShardedBatches(IterableDataset):
    """Pre-built batches, every ``world_size``-th one from ``rank``: each example is evaluated once.

    An iterable dataset, so Lightning does not inject a ``DistributedSampler`` (which would pad the
    last shard with repeated examples and count them twice).
    """

    def __init__(self, batches: list[dict[str, Any]], rank: int, world_size: int) -> None:
        self.batches, self.rank, self.world_size = batches, rank, world_size

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.batches[self.rank :: self.world_size])


class TaskDataModule(L.LightningDataModule):
    """Train / validation / test data of one task, generated with seeds (nothing is downloaded).

    * train: ``num_train`` examples of the task's train split (seed ``seed``);
    * val: ``num_val`` examples of the train split with another seed (in-distribution);
    * test: ``num_test`` examples of each split (in- and out-of-distribution lengths), in batches of
      equal prompt length for greedy decoding; or, when :attr:`test_examples` is set, exactly those
      (a fixed test set such as :meth:`~pe_toolkit.tasks.Task.evaluation_set`; reset it between
      ``trainer.test`` calls to test several sets with one model).

    Args:
        task: a task name from ``pe_toolkit.tasks.list_tasks()``.
        task_options: keyword options of the task (e.g. ``{"train_lengths": [1, 20]}``).
        num_train, num_val, num_test: example counts.
        batch_size: batch size of every loader.
        seed: base seed of the generators.
        layout: ``"causal"`` — one sequence ``<bos> prompt <sep> answer <eos>`` for a decoder-only LM
            (:class:`SequenceLMModule`); ``"seq2seq"`` — ``source_ids = <bos> prompt <sep>`` for an
            encoder and ``target_ids = <bos> answer <eos>`` for a decoder (:class:`EncoderDecoderModule`).
    """

    def __init__(
        self,
        task: str = "copy_repeat",
        task_options: dict[str, Any] | None = None,
        num_train: int = 10_000,
        num_val: int = 500,
        num_test: int = 500,
        batch_size: int = 64,
        seed: int = 0,
        layout: str = "causal",
    ) -> None:
        super().__init__()
        if layout not in ("causal", "seq2seq"):
            raise ValueError(f"layout must be 'causal' or 'seq2seq', got {layout!r}")
        self.save_hyperparameters()
        options = {k: tuple(v) if isinstance(v, list) else v for k, v in (task_options or {}).items()}
        self.task = get_task(task, **options)
        self.vocab = Vocabulary(self.task.vocabulary())
        self.batch_size = batch_size
        self._splits: dict[str, list[Example]] = {}
        self.test_examples: list[Example] | None = None

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def setup(self, stage: str | None = None) -> None:
        if self._splits:
            return
        seed = self.hparams.seed
        self._splits = {
            "train": self.task.generate(self.hparams.num_train, "train", seed),
            "val": self.task.generate(self.hparams.num_val, "train", seed + 1),
            "test": self.task.generate(self.hparams.num_test, "train", seed + 2)
            + self.task.generate(self.hparams.num_test, "test", seed + 2),
        }

    def examples(self, split: str) -> list[Example]:
        self.setup()
        if split == "test" and self.test_examples is not None:
            return list(self.test_examples)
        return self._splits[split]

    def max_sequence_length(self, splits: Sequence[str] = SPLITS) -> int:
        """Longest ``<bos> prompt <sep> answer <eos>`` over the given splits (all by default, for ``learned`` PEs)."""
        if isinstance(splits, str):
            raise TypeError(f"{type(self).__name__}: splits must be a sequence of split names, got the string "
                            f"{splits!r} (write [{splits!r}])")
        for split in splits:
            check_choice(type(self).__name__, "splits", split, SPLITS)
        lengths = [len(self.vocab.encode(ex)[0]) for split in splits for ex in self.examples(split)]
        if not lengths:
            raise ValueError(f"{type(self).__name__}: no examples in splits {list(splits)!r}")
        return max(lengths)

    def _collate_train(self, examples: list[Example]) -> dict[str, Any]:
        if self.hparams.layout == "seq2seq":
            return self._collate_seq2seq(examples)
        batch = self.vocab.collate(examples)
        batch["length_measure"] = torch.tensor([ex.length for ex in examples], dtype=torch.long)
        return batch

    def _collate_eval(self, examples: list[Example]) -> dict[str, Any]:
        batch = self._collate_train(examples)
        if self.hparams.layout == "causal":
            batch["prompt_ids"] = torch.tensor([self.vocab.encode_prompt(ex) for ex in examples], dtype=torch.long)
        return batch

    def _collate_seq2seq(self, examples: list[Example]) -> dict[str, Any]:
        vocab = self.vocab
        sources = [vocab.encode_prompt(ex) for ex in examples]
        targets = [[vocab.bos_id, *vocab.encode_tokens(ex.answer), vocab.eos_id] for ex in examples]

        def pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
            width = max(len(r) for r in rows)
            ids = torch.full((len(rows), width), vocab.pad_id, dtype=torch.long)
            for i, r in enumerate(rows):
                ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            lengths = torch.tensor([len(r) for r in rows])
            return ids, torch.arange(width)[None, :] < lengths[:, None]

        source_ids, source_mask = pad(sources)
        target_ids, target_mask = pad(targets)
        return {
            "source_ids": source_ids, "source_mask": source_mask, "target_ids": target_ids,
            "target_mask": target_mask,
            "length_measure": torch.tensor([ex.length for ex in examples], dtype=torch.long),
        }

    def train_dataloader(self) -> DataLoader:
        # Resumable: an interrupted fit continues with the batches it would have seen (see resumable.py).
        rank, world = trainer_shard(self.trainer)
        return ResumableDataLoader(
            _ListDataset(self.examples("train")), batch_size=self.batch_size, seed=self.hparams.seed,
            collate_fn=self._collate_train, rank=rank, world_size=world,
        )

    def _eval_loader(self, split: str) -> DataLoader:
        examples = self.examples(split)
        groups = same_prompt_length_batches([len(self.vocab.encode_prompt(ex)) for ex in examples], self.batch_size)
        batches = [self._collate_eval([examples[i] for i in group]) for group in groups]
        rank, world = trainer_shard(self.trainer)
        return DataLoader(_ShardedBatches(batches, rank, world), batch_size=None)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader("test")
