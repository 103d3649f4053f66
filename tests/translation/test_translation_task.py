"""The toy XL-PE task: seeded splits, oracle positions from the alignments, a reorderer trained on the training
split only, and its agreement with the oracle."""

from __future__ import annotations

import pytest

from pe_toolkit.domains.translation import (
    alignment_permutation,
    generate_corpus,
    oracle_positions,
    position_accuracy,
    toy_reordering_task,
)


@pytest.fixture(scope="module")
def task():
    return toy_reordering_task(60, 8, 10, max_depth=1, reorderer_epochs=2)


def test_splits_are_the_seeded_corpora(task):
    assert task.pairs["train"] == generate_corpus(60, seed=1000, max_depth=1)
    assert task.pairs["val"] == generate_corpus(8, seed=1500, max_depth=1)
    assert task.pairs["test"] == generate_corpus(10, seed=2000, max_depth=1)
    assert task.source_vocab.itos[4:] == sorted({w for p in task.pairs["train"] for w in p.source})


def test_oracle_positions_are_the_alignment_order_and_the_reorderer_reads_the_source_only(task):
    for split, pairs in task.pairs.items():
        assert task.positions["oracle"][split] == oracle_positions(pairs)
        assert task.positions["oracle"][split] == [alignment_permutation(p.alignment, len(p.source)) for p in pairs]
        for pair, predicted in zip(pairs, task.positions["reorderer"][split]):
            assert sorted(predicted) == list(range(len(pair.source)))  # a permutation of the source positions
        assert task.reorderer_accuracy[split] == position_accuracy(task.positions["reorderer"][split],
                                                                   task.positions["oracle"][split])
    assert len(task.reorderer_history) == 2 and all(0.0 <= a <= 1.0 for a in task.reorderer_history)
    # the same settings give the same task (the reorderer's perceptron is seeded)
    again = toy_reordering_task(60, 8, 10, max_depth=1, reorderer_epochs=2)
    assert again.positions == task.positions and again.reorderer_history == task.reorderer_history


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_pairs must be >= 1"):
        toy_reordering_task(0, 8, 10, max_depth=1, reorderer_epochs=1)
    with pytest.raises(ValueError, match="epochs must be an int >= 1"):
        toy_reordering_task(10, 2, 2, max_depth=0, reorderer_epochs=0)
