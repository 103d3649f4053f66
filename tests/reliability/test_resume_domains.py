"""Resume without loss for two domains (graphs, recsys): a fit stopped mid-epoch and resumed from its
checkpoint with ``ckpt_path=`` ends with bit-identical parameters to an uninterrupted fit (CPU, seeded).

Both runs keep their training randomness on (dropout and a random per-access transform for graphs,
sampled BCE negatives and dropout for recsys), so the test covers the data order and every random draw."""

from __future__ import annotations

import logging
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from domains.graphs import CSLDataset
from domains.graphs.lightning_module import GraphClassificationModule, GraphDataModule
from domains.graphs.models import GINModel
from domains.graphs.transforms import RandomWalkPE
from domains.recsys.data import build_sequences
from domains.recsys.lightning_module import SASRecModule, SequentialRecDataModule
from domains.recsys.synthetic import contextual_count_log

TOTAL_STEPS, STOP_AT = 11, 6  # 4 batches per epoch: the stop falls inside the second epoch


def _trainer(max_steps: int, checkpoint_dir) -> L.Trainer:
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    callbacks = [ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=STOP_AT, save_top_k=-1)]
    return L.Trainer(
        max_steps=max_steps, logger=False, enable_checkpointing=checkpoint_dir is not None,
        callbacks=callbacks if checkpoint_dir is not None else [], enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", devices=1,
    )


def _assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(x, y), f"{name} differs after resuming (max |diff| {float((x - y).abs().max()):.3g})"


def _resume_check(fit, tmp_path) -> None:
    uninterrupted = fit(TOTAL_STEPS)
    fit(STOP_AT, checkpoint_dir=tmp_path / "ckpt")
    (checkpoint,) = (tmp_path / "ckpt").glob("*.ckpt")
    resumed = fit(TOTAL_STEPS, ckpt_path=checkpoint)
    # sanity: training moved the weights, so equality is not trivially true
    assert any(not torch.equal(p, q) for p, q in zip(fit(0).parameters(), uninterrupted.parameters()))
    _assert_same_parameters(uninterrupted, resumed)


def _noisy_features(data):
    """A per-access transform with randomness (global RNG), as a user's augmentation would have."""
    data = data.clone()
    data.x = data.x + 0.1 * torch.randn_like(data.x)
    return data


def test_graph_classification_resumes_without_loss(tmp_path):
    dataset = CSLDataset(root=tmp_path / "csl", graphs_per_class=2, pre_transform=RandomWalkPE(4))

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        data = GraphDataModule(dataset, (list(range(16)), [16, 17], [18, 19]), transform=_noisy_features,
                               batch_size=4, seed=3)
        model = GINModel(num_classes=10, hidden=8, layers=1, in_features=1, pe="rwse", pe_options={"in_features": 4},
                         dropout=0.3)
        module = GraphClassificationModule(model, num_classes=10, lr=1e-2, warmup_steps=2, max_steps=TOTAL_STEPS)
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_sasrec_bce_resumes_without_loss(tmp_path):
    sequences = build_sequences(contextual_count_log(32, length=(8, 12), num_signal_items=12, num_filler_items=6,
                                                     seed=3))

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        data = SequentialRecDataModule(sequences, max_len=12, batch_size=8, negatives=True, seed=3)
        module = SASRecModule(sequences.num_items, max_len=12, dim=8, num_heads=2, num_layers=1, dropout=0.2,
                              loss="bce", lr=1e-2, warmup_steps=2, max_steps=TOTAL_STEPS, encoding="learned")
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_data_seed_defaults_to_the_run_seed_and_rejects_non_ints(tmp_path):

    dataset = CSLDataset(root=tmp_path / "csl", graphs_per_class=1)
    sequences = build_sequences(contextual_count_log(8, length=(8, 10), num_signal_items=6, num_filler_items=4, seed=1))
    for make in (lambda seed: GraphDataModule(dataset, ([0, 1], [2], [3]), seed=seed),
                 lambda seed: SequentialRecDataModule(sequences, max_len=8, seed=seed)):
        L.seed_everything(17, verbose=False)
        assert make(None).seed == 17 and make(5).seed == 5
        with pytest.raises(TypeError, match="seed must be an int or None, got float"):
            make(1.5)
