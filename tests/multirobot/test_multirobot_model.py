"""NOPE: shapes for every object PE, degenerate observations, permutation equivariance, a Lightning step."""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch

from pe_toolkit.domains.multirobot.data import PairDataModule, collate_pairs
from pe_toolkit.domains.multirobot.evaluation import predict_nope
from pe_toolkit.domains.multirobot.lightning_module import NOPEModule
from pe_toolkit.domains.multirobot.model import NOPE, OBJECT_PES, NOPEConfig
from pe_toolkit.domains.multirobot.simulator import Observation, PairSample, SimConfig, simulate_pairs

SIM = SimConfig()
SMALL = {"dim": 16, "num_heads": 2, "graph_layers": 1, "cross_layers": 1, "sinkhorn_iterations": 10}


@pytest.fixture(scope="module")
def pairs():
    return simulate_pairs(6, seed=5, config=SIM)


def _obs(n: int, rng: np.random.Generator) -> Observation:
    return Observation(rng.normal(size=(n, 2)) * 5, rng.normal(size=(n, SIM.descriptor_dim)).astype(np.float32),
                       np.arange(n), np.zeros(3))


@pytest.mark.parametrize("object_pe", OBJECT_PES)
def test_forward_shapes(object_pe, pairs):
    model = NOPE(NOPEConfig(descriptor_dim=SIM.descriptor_dim, object_pe=object_pe, **SMALL))
    batch = collate_pairs(pairs, SIM.fov_range)
    out = model(batch)
    b, m, n = batch["desc_a"].shape[0], batch["desc_a"].shape[1], batch["desc_b"].shape[1]
    assert out["log_assignment"].shape == (b, m + 1, n + 1) and out["pose"].shape == (b, 4)
    assert out["match_a"].shape == (b, m) and out["overlap"].dtype == torch.bool
    assert torch.isfinite(out["pose"]).all()


@pytest.mark.parametrize("object_pe", OBJECT_PES)
def test_degenerate_observations_give_a_clear_no_overlap(object_pe):
    rng = np.random.default_rng(0)
    degenerate = [
        PairSample(_obs(0, rng), _obs(5, rng), np.zeros(3), False, np.zeros((0, 2), np.int64)),  # sees nothing
        PairSample(_obs(1, rng), _obs(4, rng), np.zeros(3), False, np.zeros((0, 2), np.int64)),  # one object
        PairSample(_obs(0, rng), _obs(0, rng), np.zeros(3), False, np.zeros((0, 2), np.int64)),  # both empty
    ]
    model = NOPE(NOPEConfig(descriptor_dim=SIM.descriptor_dim, object_pe=object_pe, **SMALL))
    out = model(collate_pairs(degenerate, SIM.fov_range))
    assert torch.isfinite(out["pose"]).all() and not out["overlap"].any()
    predictions = predict_nope(model, degenerate, SIM.fov_range)
    assert [p.overlap for p in predictions] == [False, False, False]
    assert all(np.isnan(p.pose).all() for p in predictions)
    assert [p.match_a.shape for p in predictions] == [(0,), (1,), (0,)]
    module = NOPEModule(NOPEConfig(descriptor_dim=SIM.descriptor_dim, object_pe=object_pe, **SMALL))
    loss = module.losses(collate_pairs(degenerate, SIM.fov_range), out)["loss"]
    assert torch.isfinite(loss)


@pytest.mark.parametrize("object_pe", OBJECT_PES)
def test_matching_is_equivariant_to_node_order(object_pe, pairs):
    model = NOPE(NOPEConfig(descriptor_dim=SIM.descriptor_dim, object_pe=object_pe, **SMALL)).eval()
    pair = next(p for p in pairs if p.overlap)
    perm = np.random.default_rng(1).permutation(len(pair.b))
    b2 = Observation(pair.b.positions[perm], pair.b.descriptors[perm], pair.b.object_ids[perm], pair.b.pose)
    out1 = model(collate_pairs([pair], SIM.fov_range))["log_assignment"][0]
    out2 = model(collate_pairs([PairSample(pair.a, b2, pair.pose, True, pair.matches)], SIM.fov_range))
    columns = torch.from_numpy(np.append(perm, len(perm)))
    torch.testing.assert_close(out2["log_assignment"][0], out1[:, columns], atol=1e-5, rtol=1e-5)


def test_lightning_training_steps_run_and_reduce_the_loss():
    L.seed_everything(0)
    data = PairDataModule(SIM, num_train=16, num_val=8, num_test=8, batch_size=8, seed=0)
    module = NOPEModule(NOPEConfig(descriptor_dim=SIM.descriptor_dim, **SMALL), lr=3e-3)
    data.setup()
    batch = next(iter(data.train_dataloader()))
    before = module.losses(batch, module(batch))["loss"].item()
    trainer = L.Trainer(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", limit_val_batches=1, num_sanity_val_steps=0)
    trainer.fit(module, data)
    after = module.losses(batch, module(batch))["loss"].item()
    assert np.isfinite(after) and after < before


def test_bad_config():
    with pytest.raises(ValueError, match="object_pe"):
        NOPEConfig(descriptor_dim=4, object_pe="sinusoidal")
    with pytest.raises(ValueError, match="dropout"):
        NOPEConfig(descriptor_dim=4, dropout=1.0)
    with pytest.raises(ValueError, match="divisible by 4"):
        NOPE(NOPEConfig(descriptor_dim=4, dim=24, num_heads=4, object_pe="rope2d"))
