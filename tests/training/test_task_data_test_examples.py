"""TaskDataModule.test_examples: a fixed test set (e.g. Task.evaluation_set) decoded by trainer.test, per length."""

from __future__ import annotations

import lightning as L

from pe_toolkit.training import SequenceLMModule, TaskDataModule


def test_a_fixed_test_set_replaces_the_random_one_and_can_be_swapped_between_tests():
    data = TaskDataModule("copy_repeat", {"train_lengths": [1, 4], "test_lengths": [5, 7]}, num_train=32,
                          num_val=0, num_test=16, batch_size=4, seed=0)
    random_test = data.examples("test")
    assert len(random_test) == 32  # num_test of each split
    iid, ood = data.task.evaluation_set("train", 3, seed=1), data.task.evaluation_set("test", 2, seed=1, stride=2)
    data.test_examples = iid
    assert data.examples("test") == iid and data.examples("train") == data.examples("train")
    L.seed_everything(0, verbose=False)
    module = SequenceLMModule(data.vocab_size, dim=16, num_heads=2, num_layers=1, warmup_steps=1, max_steps=1)
    trainer = L.Trainer(max_steps=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0)
    trainer.fit(module, data)
    trainer.test(module, data, verbose=False)
    assert {n: t for n, (_, t) in module.test_results.items()} == {1: 3, 2: 3, 3: 3, 4: 3}
    data.test_examples = ood
    trainer.test(module, data, verbose=False)
    assert {n: t for n, (_, t) in module.test_results.items()} == {5: 2, 7: 2}
    data.test_examples = None
    assert data.examples("test") == random_test
