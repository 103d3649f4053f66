"""SASRec with every benchmark encoder: shapes, causality, padding, losses, Lightning training with early stopping."""

from __future__ import annotations

import logging
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping

from pe_toolkit.domains.recsys import SASRec, build_sequences, contextual_count_log
from pe_toolkit.domains.recsys.lightning_module import SASRecModule, SequentialRecDataModule, sample_negatives

ENCODERS = ["learned", "nope", "rope", "cope", "cape", "time_interval"]


def perturb(model):
    with torch.no_grad():
        for enc in model.trunk.encodings:
            for p in enc.parameters():
                p.add_(0.3 * torch.randn_like(p))


def inputs(b=2, length=6, num_items=20):
    items = torch.randint(1, num_items + 1, (b, length))
    times = torch.cumsum(torch.randint(0, 5, (b, length)), dim=1).double()
    return items, times


@pytest.mark.parametrize("encoding", ENCODERS)
def test_shapes_and_causality(encoding):
    model = SASRec(20, max_len=8, dim=16, num_heads=2, num_layers=2, dropout=0.0, encoding=encoding).eval()
    perturb(model)
    items, times = inputs()
    hidden = model(items, times)
    assert hidden.shape == (2, 6, 16)
    scores = model.scores(hidden[:, -1])
    assert scores.shape == (2, 21) and torch.isinf(scores[:, 0]).all()
    changed = items.clone()
    changed[:, 4:] = (changed[:, 4:] % 20) + 1  # new future items (and keep the times)
    torch.testing.assert_close(model(changed, times)[:, :4], hidden[:, :4], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(model(changed, times)[:, 4:], hidden[:, 4:])


@pytest.mark.parametrize("encoding", ["nope", "rope", "cope", "cape"])
def test_left_padding_does_not_change_relative_encoders(encoding):
    model = SASRec(20, max_len=10, dim=16, num_heads=2, num_layers=2, dropout=0.0, encoding=encoding).eval()
    perturb(model)
    items, _ = inputs(1, 5)
    padded = torch.cat([torch.zeros(1, 4, dtype=torch.long), items], dim=1)
    torch.testing.assert_close(model(padded)[:, 4:], model(items), atol=1e-5, rtol=1e-5)
    assert torch.count_nonzero(model(padded)[:, :4]) == 0  # padding slots are zeroed


def test_per_layer_encoders_and_options():
    assert len(SASRec(20, encoding="cape", dim=16).trunk.encodings) == 2
    assert len(SASRec(20, encoding="learned", dim=16).trunk.encodings) == 1
    assert SASRec(20, max_len=7, encoding="learned", dim=16).trunk.encodings[0].max_len == 7
    assert SASRec(20, encoding="cape", dim=16, encoding_options={"max_len": 5}).trunk.encodings[0].max_len == 5


def test_sasrec_bad_input():
    model = SASRec(20, max_len=4, dim=16, encoding="time_interval")
    with pytest.raises(ValueError, match="reads timestamps: pass times="):
        model(torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"times must have shape \(1, 3\)"):
        model(torch.ones(1, 3, dtype=torch.long), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="exceed max_len=4"):
        model(torch.ones(1, 5, dtype=torch.long), torch.zeros(1, 5))
    with pytest.raises(ValueError, match=r"item indices must lie in \[0, 20\], got \[1, 21\]"):
        model(torch.tensor([[1, 21]]), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="unknown encoder 'capee'"):
        SASRec(20, encoding="capee")


def test_negatives_avoid_seen_items():
    seen = torch.zeros(2, 6, dtype=torch.bool)
    seen[0, 1:5] = True  # user 0 has seen items 1..4: only 5 remains
    negatives = sample_negatives(seen, torch.tensor([0, 1]), (2, 50))
    assert (negatives[0] == 5).all() and negatives.min() >= 1 and negatives.max() <= 5
    seen[1, 1:] = True
    with pytest.raises(ValueError, match=r"user\(s\) \[1\] have seen all 5 items"):
        sample_negatives(seen, torch.tensor([1]), (1, 3))


@pytest.fixture(scope="module")
def tiny_log():
    return build_sequences(contextual_count_log(40, length=(8, 12), num_signal_items=12, num_filler_items=6, seed=3))


@pytest.mark.parametrize("loss", ["bce", "ce"])
def test_losses_decrease_and_bce_needs_negatives(tiny_log, loss):
    data = SequentialRecDataModule(tiny_log, max_len=12, batch_size=40, negatives=loss == "bce")
    batch = next(iter(data.train_dataloader()))
    assert batch["items"].shape == batch["targets"].shape == (len(data.examples["train"]), 12)
    module = SASRecModule(tiny_log.num_items, max_len=12, dim=16, num_layers=1, dropout=0.0, loss=loss, lr=1e-2,
                          encoding="cape")
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
    first = float(module.loss(batch).detach())
    for _ in range(10):
        optimizer.zero_grad()
        module.loss(batch).backward()
        optimizer.step()
    assert float(module.loss(batch).detach()) < first
    if loss == "bce":
        batch.pop("negatives")
        with pytest.raises(ValueError, match="needs batches with 'negatives'"):
            module.loss(batch)


def test_lightning_fit_early_stopping_and_test(tiny_log, tmp_path):
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    L.seed_everything(0, verbose=False)
    data = SequentialRecDataModule(tiny_log, max_len=12, batch_size=16)
    module = SASRecModule(tiny_log.num_items, max_len=12, dim=16, num_layers=1, encoding="time_interval", lr=1e-2)
    early = EarlyStopping(monitor="val/ndcg@10", mode="max", patience=1)
    trainer = L.Trainer(max_epochs=4, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[early], default_root_dir=tmp_path)
    trainer.fit(module, data)
    assert "val/ndcg@10" in trainer.callback_metrics
    result = trainer.test(module, data, verbose=False)[0]
    assert set(result) >= {"test/hr@5", "test/ndcg@10", "test/hr@20", "test/mrr", "test/all/ndcg@10",
                           "test/unseen/ndcg@10"}
    # the primary metrics are the module's ranking (history excluded by default), the other beside them
    assert result["test/ndcg@10"] == result["test/unseen/ndcg@10"]
    # excluding candidates can only raise the target's rank: the unseen ranking scores at least as high
    assert result["test/unseen/mrr"] >= result["test/all/mrr"]
    assert 0.0 <= result["test/ndcg@10"] <= result["test/hr@10"] <= result["test/hr@20"] <= 1.0
    # 18 items, histories of <= 11: K = 20 exceeds the candidates, so every target is within the top 20
    assert result["test/hr@20"] == 1.0


def test_rank_scores_exclude_history_but_not_the_target(tiny_log):
    data = SequentialRecDataModule(tiny_log, max_len=12, batch_size=8)
    batch = next(iter(data.test_dataloader()))
    module = SASRecModule(tiny_log.num_items, max_len=12, dim=16, num_layers=1, encoding="nope")
    scores, exclude = module.rank_scores(batch)
    assert scores.shape == exclude.shape == (8, tiny_log.num_items + 1)
    for b in range(8):
        history = set(batch["history"][b].tolist()) - {0}
        assert set(exclude[b].nonzero().flatten().tolist()) == history | {0}
    # the synthetic targets are recalls: they are in the history and must still be ranked
    assert all(int(t) in set(h.tolist()) for t, h in zip(batch["targets"], batch["history"]))


def test_datamodule_bad_arguments(tiny_log):
    with pytest.raises(TypeError, match="sequences must be UserSequences"):
        SequentialRecDataModule([[1, 2, 3]])
    with pytest.raises(ValueError, match="train_users=99 exceeds the 40 users"):
        SequentialRecDataModule(tiny_log, train_users=99)
    with pytest.raises(ValueError, match="loss must be one of"):
        SASRecModule(10, loss="bpr")
    subset = SequentialRecDataModule(tiny_log, train_users=5)
    assert subset.examples["test"].users.tolist() == [0, 1, 2, 3, 4]


def test_input_dropout_is_applied_once():
    # SASRec's dropout acts once on item + position embedding: the first block's input has a fraction p
    # of zeros in training (two dropouts would zero 1 - (1 - p)^2 = 36 % at p = 0.2)
    torch.manual_seed(0)
    model = SASRec(50, max_len=64, dim=64, num_layers=1, dropout=0.2, encoding="nope").train()
    seen = {}
    model.trunk.blocks[0].register_forward_pre_hook(lambda mod, args, kwargs: seen.update(x=args[0]),
                                                    with_kwargs=True)
    items = torch.randint(1, 51, (16, 64))
    model(items)
    zero = float((seen["x"] == 0).double().mean())
    assert abs(zero - 0.2) < 0.01, zero
    # the kept entries are the embeddings scaled by 1 / (1 - p), once
    embedded = model.item_embedding(items)
    kept = seen["x"] != 0
    torch.testing.assert_close(seen["x"][kept], embedded[kept] / 0.8)


def test_prefix_protocol_trains_on_the_last_slot(tiny_log):
    data = SequentialRecDataModule(tiny_log, max_len=12, batch_size=8, train_targets="prefixes")
    shifted = SequentialRecDataModule(tiny_log, max_len=12, batch_size=8)
    train = data.examples["train"]
    # one example per training target: sum over users of (n - 2) - 1
    assert len(train) == int((tiny_log.lengths - 3).sum())
    assert bool((train.targets[:, :-1] == 0).all()) and bool((train.targets[:, -1] != 0).all())
    # every training target of the shifted windows is also a prefix target (and none is lost to the window)
    assert int((shifted.examples["train"].targets != 0).sum()) <= len(train)
    module = SASRecModule(tiny_log.num_items, max_len=12, dim=16, num_layers=1, encoding="learned", dropout=0.0)
    batch = data._collate_train(list(range(8)))
    loss = module.loss(batch)
    hidden = module.model(batch["items"], batch["times"])[:, -1]
    torch.testing.assert_close(loss, torch.nn.functional.cross_entropy(module.model.scores(hidden),
                                                                       batch["targets"][:, -1]))
