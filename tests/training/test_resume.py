"""Resume without loss: a fit stopped mid-epoch and resumed from its checkpoint ends where an
uninterrupted fit ends (same weights, same test accuracy), and the resumable loader's own contract."""

from __future__ import annotations

import logging
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from pe_toolkit.training import SequenceLMModule, TaskDataModule
from pe_toolkit.training.resumable import EpochSeededSampler, ResumableDataLoader

TOTAL_STEPS, STOP_AT = 12, 7  # 5 batches per epoch: the stop falls inside the second epoch


def fit(max_steps: int, *, checkpoint_dir=None, ckpt_path=None) -> SequenceLMModule:
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    L.seed_everything(0, verbose=False)
    data = TaskDataModule("copy_repeat", {"train_lengths": [1, 6], "test_lengths": [7, 8]}, num_train=40, num_val=0,
                          num_test=8, batch_size=8, seed=0)
    module = SequenceLMModule(data.vocab_size, dim=16, num_heads=2, num_layers=1, lr=1e-2, warmup_steps=2,
                              max_steps=TOTAL_STEPS, encoding="rope", randomized_max_position=32)
    callbacks = [ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=STOP_AT, save_top_k=-1)]
    trainer = L.Trainer(
        max_steps=max_steps, logger=False, enable_checkpointing=checkpoint_dir is not None,
        callbacks=callbacks if checkpoint_dir is not None else [], enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", devices=1,
    )
    trainer.fit(module, data, ckpt_path=ckpt_path)
    trainer.test(module, data, verbose=False)
    return module


def test_resumed_fit_equals_uninterrupted_fit(tmp_path):
    uninterrupted = fit(TOTAL_STEPS)
    fit(STOP_AT, checkpoint_dir=tmp_path)
    (checkpoint,) = tmp_path.glob("*.ckpt")
    resumed = fit(TOTAL_STEPS, ckpt_path=checkpoint)
    for (name, a), (_, b) in zip(uninterrupted.named_parameters(), resumed.named_parameters()):
        assert torch.equal(a, b), f"{name} differs after resuming"
    assert uninterrupted.test_results == resumed.test_results


def test_loader_state_round_trip_skips_served_batches():
    data = list(range(10))
    loader = ResumableDataLoader(data, batch_size=3, seed=5)
    loader.order_sampler.set_epoch(2)
    full = [b.tolist() for b in loader]
    interrupted = ResumableDataLoader(data, batch_size=3, seed=5)
    interrupted.order_sampler.set_epoch(2)
    iterator = iter(interrupted)
    first = [next(iterator).tolist(), next(iterator).tolist()]
    state = interrupted.state_dict()
    assert state == {"epoch": 2, "batches": 2, "seed": 5}
    fresh = ResumableDataLoader(data, batch_size=3, seed=5)
    fresh.load_state_dict(state)
    assert first + [b.tolist() for b in fresh] == full
    assert sorted(sum(full, [])) == data  # one epoch is a permutation
    # the next epoch starts from its own permutation, not from the skipped position
    fresh.order_sampler.set_epoch(3)
    assert sorted(sum((b.tolist() for b in fresh), [])) == data


def test_epochs_and_seeds_give_different_orders():
    sampler = EpochSeededSampler(50, seed=1)
    assert not torch.equal(sampler.order(0), sampler.order(1))
    assert not torch.equal(sampler.order(0), EpochSeededSampler(50, seed=2).order(0))
    assert torch.equal(sampler.order(4), EpochSeededSampler(50, seed=1).order(4))
    assert EpochSeededSampler(5, seed=0, shuffle=False).order(3).tolist() == [0, 1, 2, 3, 4]


def test_bad_states_and_arguments():
    loader = ResumableDataLoader(list(range(10)), batch_size=3, seed=5)
    with pytest.raises(ValueError, match="missing"):
        loader.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match="seeded with 4"):
        loader.load_state_dict({"epoch": 0, "batches": 1, "seed": 4})
    with pytest.raises(ValueError, match=r"batches must be in \[0, 4\]"):
        loader.load_state_dict({"epoch": 0, "batches": 9, "seed": 5})
    with pytest.raises(ValueError, match="batch_size"):
        ResumableDataLoader(list(range(10)), batch_size=0, seed=5)
    with pytest.raises(TypeError, match="map-style"):
        ResumableDataLoader(iter(range(10)), batch_size=2, seed=5)
    with pytest.raises(ValueError, match="size"):
        EpochSeededSampler(0, seed=1)
    with pytest.raises(TypeError, match="seed"):
        EpochSeededSampler(3, seed=1.5)


def test_ranks_get_disjoint_shards_that_cover_the_epoch():
    shards = [EpochSeededSampler(10, seed=3, rank=r, world_size=3) for r in range(3)]
    orders = [s.order(1).tolist() for s in shards]
    assert [len(o) for o in orders] == [4, 4, 4]  # padded by wrapping, as DistributedSampler
    assert set(sum(orders, [])) == set(range(10))
    with pytest.raises(ValueError, match="rank"):
        EpochSeededSampler(10, seed=3, rank=3, world_size=3)
