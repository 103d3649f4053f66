"""A training ``DataLoader`` that resumes mid-epoch exactly where an interrupted run stopped.

Lightning saves the ``state_dict()`` of a train dataloader that has one in every checkpoint (the fit
loop's ``combined_loader`` entry) and calls ``load_state_dict`` on ``fit(ckpt_path=...)`` before the
first batch. A plain shuffled ``DataLoader`` has no state: on resume it restarts the epoch with the
epoch-0 permutation, so the resumed run sees different batches than an uninterrupted one.

Here the order of epoch ``e`` is a fixed function of ``(seed, e)`` (Lightning tells the sampler the
epoch through ``set_epoch``), and the state is ``(epoch, batches served in it)``; a resumed run skips
the served batches of the interrupted epoch and continues with the same batches, so on CPU with a
seed it ends with the same weights as a run that never stopped.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sized
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def step_seed(step: int, rank: int = 0) -> int:
    """Seed of training step ``step`` on process ``rank``: a function of the run seed (``torch.initial_seed()``,
    set by ``seed_everything``), the step and the rank, in ``[0, 2**63)``."""
    return (torch.initial_seed() * 1_000_003 + step * 1_009 + rank) % 2**63


@contextlib.contextmanager
def seeded_step(module: Any) -> Iterator[None]:
    """Run a training step's random draws (dropout, noise, sampled negatives) from the global RNG seeded
    by ``step_seed(module.global_step, module.global_rank)``, and restore the RNG afterwards.

    Without it the draws depend on wherever the global RNG happens to be, which a checkpoint does not
    record, so a resumed run would draw different masks than an uninterrupted one.

    Args:
        module: a ``LightningModule`` (anything with ``device``, ``global_step`` and ``global_rank``).
    """
    devices = [module.device.index or 0] if module.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(step_seed(module.global_step, module.global_rank))
        yield


def batch_seed(seed: int, epoch: int, position: int) -> int:
    """Seed of the ``position``-th training batch of ``epoch`` under data seed ``seed``, in ``[0, 2**63)``
    (for random transforms applied while collating a batch)."""
    return ((seed * 1_000_003 + epoch) * 1_000_033 + position) % 2**63


def data_seed(owner: str, seed: int | None) -> int:
    """A data module's shuffling seed: ``seed``, or ``torch.initial_seed() % 2**31`` (the seed given to
    ``seed_everything``) when ``None``, so runs with different seeds see different orders.

    Raises:
        TypeError: ``seed`` is neither an int nor ``None`` (the message names ``owner``).
    """
    if seed is None:
        seed = torch.initial_seed() % 2**31
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"{owner}: seed must be an int or None, got {type(seed).__name__}")
    return seed


def trainer_shard(trainer: Any) -> tuple[int, int]:
    """``(rank, world_size)`` of this process under ``trainer`` (``(0, 1)`` without a trainer)."""
    return (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)


class EpochSeededSampler(DistributedSampler):
    """Indices of ``0 .. size-1``, shuffled by a generator seeded with ``(seed, epoch)``, one shard per rank.

    ``set_epoch(e)`` (called by Lightning before each epoch) selects the permutation; rank ``r`` of
    ``world_size`` takes every ``world_size``-th index from ``r`` (the order is padded by wrapping
    around so that every rank gets ``ceil(size / world_size)``, as ``DistributedSampler`` does);
    ``start`` drops that many leading indices of the shard once (for resuming inside an epoch).
    Being a ``DistributedSampler``, Lightning keeps it under DDP instead of substituting its own.
    """

    def __init__(self, size: int, seed: int, *, shuffle: bool = True, rank: int = 0, world_size: int = 1) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive int (the dataset length), got {size!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        super().__init__(range(size), num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed)
        self.size = size
        self.start = 0

    def order(self, epoch: int) -> torch.Tensor:
        """This rank's index order for ``epoch``, shape ``(ceil(size / world_size),)``."""
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            order = torch.randperm(self.size, generator=generator)
        else:
            order = torch.arange(self.size)
        padded = order.repeat(-(-self.total_size // self.size))[: self.total_size]
        return padded[self.rank :: self.num_replicas]

    def __iter__(self) -> Iterator[int]:
        start, self.start = self.start, 0
        return iter(self.order(self.epoch)[start:].tolist())

    def __len__(self) -> int:
        return self.num_samples


class ResumableDataLoader(DataLoader):
    """A shuffled, batched ``DataLoader`` whose position is saved in (and restored from) checkpoints.

    Args:
        dataset: a map-style dataset (``len`` and ``__getitem__``).
        batch_size: examples per batch.
        seed: the shuffling seed; epoch ``e`` uses the permutation of ``(seed, e)``.
        shuffle: ``False`` keeps the dataset order (still resumable).
        collate_fn, drop_last, num_workers: as in ``torch.utils.data.DataLoader``.
        rank, world_size: this process's shard under data parallelism (``trainer.global_rank``,
            ``trainer.world_size``).

    ``state_dict() -> {"epoch": e, "batches": n, "seed": seed}``: ``n`` batches of epoch ``e`` were
    served. Lightning's fetcher does not prefetch from a loader with a length, so "served" equals
    "trained on" when a checkpoint is written after a training step.
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        batch_size: int,
        seed: int,
        shuffle: bool = True,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        drop_last: bool = False,
        num_workers: int = 0,
        rank: int = 0,
        world_size: int = 1,
    ) -> None:
        if not isinstance(dataset, Sized):
            raise TypeError(f"dataset must be a map-style dataset with a length, got {type(dataset).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.order_sampler = EpochSeededSampler(len(dataset), seed, shuffle=shuffle, rank=rank, world_size=world_size)
        super().__init__(
            dataset, batch_size=batch_size, sampler=self.order_sampler, collate_fn=collate_fn, drop_last=drop_last,
            num_workers=num_workers,
        )
        self._served = 0

    def __iter__(self) -> Iterator[Any]:
        skip = self._served if self._served < len(self) else 0
        self.order_sampler.start = skip * self.batch_size
        self._served = skip
        for batch in super().__iter__():
            self._served += 1
            yield batch

    def position(self) -> tuple[int, int]:
        """``(epoch, batches served in it)``: while a batch is collated in the main process, its own index."""
        return self.order_sampler.epoch, self._served

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.order_sampler.epoch, "batches": self._served, "seed": self.order_sampler.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        missing = {"epoch", "batches", "seed"} - set(state)
        if missing:
            raise ValueError(f"ResumableDataLoader state is missing {sorted(missing)}; got keys {sorted(state)}")
        if state["seed"] != self.order_sampler.seed:
            raise ValueError(
                f"the checkpoint's loader was seeded with {state['seed']}, this one with {self.order_sampler.seed}; "
                "resume with the same data seed"
            )
        if not 0 <= state["batches"] <= len(self):
            raise ValueError(f"batches must be in [0, {len(self)}] for this loader, got {state['batches']}")
        self.order_sampler.set_epoch(state["epoch"])
        self._served = state["batches"]
