"""The toy XL-PE task: corpora, vocabularies and both sources of cross-lingual positions for every split.

Ding et al. 2020 (arXiv:2004.13310) feed the encoder cross-lingual positions from a BTG reordering of the source.
At training time the reordering can come from the alignment (:func:`oracle_positions`); at test time a real system
has only the source, so a source-only :class:`~pe_toolkit.domains.translation.reorderer.BTGReorderer`, trained on
the training alignments, predicts them. :func:`toy_reordering_task` builds both for the seeded SVO -> SOV pair
(:func:`~pe_toolkit.domains.translation.data.generate_corpus`) and says how often the reorderer agrees with the
oracle (:func:`~pe_toolkit.domains.translation.reorderer.position_accuracy`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pe_toolkit.domains.translation.btg import alignment_permutation, btg_tree_from_alignment, cross_lingual_positions
from pe_toolkit.domains.translation.data import SentencePair, Vocabulary, generate_corpus
from pe_toolkit.domains.translation.reorderer import BTGReorderer, position_accuracy

__all__ = ["ReorderingTask", "oracle_positions", "toy_reordering_task"]

SPLITS = ("train", "val", "test")


def oracle_positions(pairs: Sequence[SentencePair]) -> list[list[int]]:
    """Cross-lingual positions from each pair's own alignment (BTG tree: :mod:`pe_toolkit.domains.translation.btg`)."""
    return [cross_lingual_positions(btg_tree_from_alignment(p.alignment, len(p.source))) for p in pairs]


@dataclass(frozen=True)
class ReorderingTask:
    """What :func:`toy_reordering_task` builds.

    Attributes:
        pairs: ``{split: sentence pairs}`` for ``"train"``, ``"val"``, ``"test"``.
        source_vocab, target_vocab: vocabularies of the training pairs.
        positions: ``{"oracle" | "reorderer": {split: one position list per sentence}}``.
        reorderer_history: the reorderer's training-sentence accuracy per perceptron epoch.
        reorderer_accuracy: ``{split: {"sentence", "token"}}``, the reorderer's agreement with the oracle.
    """

    pairs: dict[str, list[SentencePair]]
    source_vocab: Vocabulary
    target_vocab: Vocabulary
    positions: dict[str, dict[str, list[list[int]]]]
    reorderer_history: list[float]
    reorderer_accuracy: dict[str, dict[str, float]]


def toy_reordering_task(train_pairs: int, val_pairs: int, test_pairs: int, *, max_depth: int, reorderer_epochs: int,
                        corpus_seeds: tuple[int, int, int] = (1000, 1500, 2000), reorderer_seed: int = 0
                        ) -> ReorderingTask:
    """The toy pair's train / validation / test corpora (from ``corpus_seeds``), with oracle and reorderer positions.

    The reorderer trains ``reorderer_epochs`` perceptron epochs on the training pairs' alignments only and predicts
    the positions of every split from the source alone.

    Example:
        >>> task = toy_reordering_task(40, 5, 5, max_depth=0, reorderer_epochs=1)
        >>> [len(task.pairs[s]) for s in ("train", "val", "test")], sorted(task.positions)
        ([40, 5, 5], ['oracle', 'reorderer'])
    """
    pairs = {split: generate_corpus(n, seed=seed, max_depth=max_depth)
             for split, n, seed in zip(SPLITS, (train_pairs, val_pairs, test_pairs), corpus_seeds, strict=True)}
    source_vocab = Vocabulary(w for p in pairs["train"] for w in p.source)
    target_vocab = Vocabulary(w for p in pairs["train"] for w in p.target)
    reorderer = BTGReorderer(len(source_vocab))
    history = reorderer.fit([source_vocab.encode(p.source) for p in pairs["train"]],
                            [alignment_permutation(p.alignment, len(p.source)) for p in pairs["train"]],
                            epochs=reorderer_epochs, seed=reorderer_seed)["train_accuracy"]
    positions = {"oracle": {split: oracle_positions(split_pairs) for split, split_pairs in pairs.items()},
                 "reorderer": {split: [reorderer.positions(source_vocab.encode(p.source)) for p in split_pairs]
                               for split, split_pairs in pairs.items()}}
    accuracy = {split: position_accuracy(positions["reorderer"][split], positions["oracle"][split]) for split in pairs}
    return ReorderingTask(pairs, source_vocab, target_vocab, positions, history, accuracy)
