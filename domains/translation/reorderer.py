"""A source-only BTG reorderer: predicts cross-lingual positions when no target (alignment) is available.

At test time a translation system sees only the source sentence, so the BTG tree must come from a parser
of the source. Ding et al. 2020 (arXiv:2004.13310) use a BTG reordering model trained on word-aligned data
in the style of Neubig, Watanabe, Mori 2012, "Inducing a Discriminative Parser to Optimize Machine
Translation Reordering" (EMNLP 2012): a discriminative BTG parser whose trees are latent and whose
training signal is the reordering derived from the alignments. This module is a small version of that:

* a linear model scores each merge of two adjacent spans ``[i, k) + [k, j)`` with orientation
  ``o in {straight, inverted}`` from the boundary words (first and last word of each child) and two
  word-pair features across the split:
  ``s(i, k, j, o) = W[o, 0, w_i] + W[o, 1, w_{k-1}] + W[o, 2, w_k] + W[o, 3, w_{j-1}]
  + P[o, 0, w_i, w_k] + P[o, 1, w_{k-1}, w_k]``;
* decoding is CKY over all binary BTG trees (vectorised over split points and spans of one width);
* training is the averaged *latent-variable* structured perceptron: when the predicted reordering
  differs from the alignment's, the weights move toward the best-scoring tree among those that yield the
  alignment's reordering (constrained CKY) and away from the predicted tree.

Differences from Neubig et al. 2012: no part-of-speech or span-class features, a perceptron instead of
their loss-augmented online learner, and the reference reordering is the (binarizable) alignment order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pe_toolkit.domains.translation.btg import (
    INVERTED,
    LEAF,
    STRAIGHT,
    BTGNode,
    _check_permutation,
    cross_lingual_positions,
)

__all__ = ["BTGReorderer", "position_accuracy"]

_NEG = -1e18
_KINDS = (STRAIGHT, INVERTED)


class BTGReorderer:
    """Discriminative BTG parser over source word ids (see the module docstring).

    Args:
        vocab_size: number of source word ids; ids must lie in ``[0, vocab_size)``.

    Example:
        >>> r = BTGReorderer(vocab_size=3)
        >>> accuracy = r.fit([[0, 1], [0, 2]], [[1, 0], [1, 0]], epochs=2)["train_accuracy"]
        >>> accuracy.pop()
        1.0
        >>> r.positions([0, 2])
        [1, 0]
    """

    def __init__(self, vocab_size: int) -> None:
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"BTGReorderer: vocab_size must be an int >= 1, got {vocab_size!r}")
        self.vocab_size = vocab_size
        # (orientation, template, word) for the four boundary words, then the two word-pair templates
        self.weights = np.zeros((2, 4 + 2 * vocab_size, vocab_size))
        self._sum = np.zeros_like(self.weights)  # for averaging: sum of c * update
        self._steps = 1

    # --------------------------------------------------------------------------------- decoding
    def _check_sentence(self, sentence: Sequence[int]) -> np.ndarray:
        ids = np.asarray(list(sentence), dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError("BTGReorderer: the sentence must be a non-empty sequence of word ids")
        if ids.min() < 0 or ids.max() >= self.vocab_size:
            raise ValueError(f"BTGReorderer: word ids must lie in [0, {self.vocab_size}), got range "
                             f"[{int(ids.min())}, {int(ids.max())}]")
        return ids

    def _cky(self, ids: np.ndarray, weights: np.ndarray, ranks: np.ndarray | None = None) -> BTGNode:
        """Best tree; with ``ranks``, only trees whose reordering is ``ranks`` (constrained decoding)."""
        n = ids.size
        best = np.full((n + 1, n + 1), _NEG)
        back_k = np.zeros((n + 1, n + 1), dtype=np.int64)
        back_o = np.zeros((n + 1, n + 1), dtype=np.int64)
        best[np.arange(n), np.arange(n) + 1] = 0.0
        # per-position feature scores, (2, n): first-of-left, last-of-left, first-of-right, last-of-right
        first_l, last_l, first_r, last_r = (weights[:, t, ids] for t in range(4))
        v = self.vocab_size
        pair_first = weights[:, 4:4 + v][:, ids][:, :, ids]   # (2, n, n): [o, i, k] -> P[o, 0, w_i, w_k]
        pair_split = weights[:, 4 + v:][:, ids][:, :, ids]    # (2, n, n): [o, k-1, k] -> P[o, 1, w_{k-1}, w_k]
        if ranks is not None:
            lo = np.full((n + 1, n + 1), n, dtype=np.int64)
            hi = np.full((n + 1, n + 1), -1, dtype=np.int64)
            for i in range(n):
                lo[i, i + 1:] = np.minimum.accumulate(ranks[i:])
                hi[i, i + 1:] = np.maximum.accumulate(ranks[i:])
        for width in range(2, n + 1):
            starts = np.arange(0, n - width + 1)                     # (S,)
            splits = starts[:, None] + np.arange(1, width)[None, :]  # (S, width-1): k
            ends = starts + width
            left = best[starts[:, None], splits]
            right = best[splits, ends[:, None]]
            scores = (first_l[:, starts][:, :, None] + last_l[:, splits - 1] + first_r[:, splits]
                      + last_r[:, ends - 1][:, :, None]
                      + pair_first[:, starts[:, None], splits] + pair_split[:, splits - 1, splits])  # (2, S, width-1)
            total = left[None] + right[None] + scores
            if ranks is not None:
                straight_ok = hi[starts[:, None], splits] + 1 == lo[splits, ends[:, None]]
                inverted_ok = hi[splits, ends[:, None]] + 1 == lo[starts[:, None], splits]
                total = np.where(np.stack((straight_ok, inverted_ok)), total, _NEG)
            flat = total.transpose(1, 0, 2).reshape(starts.size, -1)  # (S, 2 * (width-1))
            arg = flat.argmax(axis=1)
            best[starts, ends] = np.maximum(flat[np.arange(starts.size), arg], _NEG)
            back_o[starts, ends] = arg // (width - 1)
            back_k[starts, ends] = splits[np.arange(starts.size), arg % (width - 1)]
        if best[0, n] <= _NEG / 2:
            raise ValueError("BTGReorderer: the reference reordering is not binarizable (no BTG tree yields it)")
        return _build(0, n, back_k, back_o)

    def parse(self, sentence: Sequence[int]) -> BTGNode:
        """The highest-scoring BTG tree of a source sentence (word ids), with the averaged weights."""
        return self._cky(self._check_sentence(sentence), self.averaged_weights())

    def positions(self, sentence: Sequence[int]) -> list[int]:
        """Predicted cross-lingual position of each source token."""
        return cross_lingual_positions(self.parse(sentence))

    def averaged_weights(self) -> np.ndarray:
        return self.weights - self._sum / self._steps

    # --------------------------------------------------------------------------------- training
    def _features(self, ids: np.ndarray, tree: BTGNode) -> np.ndarray:
        counts = np.zeros_like(self.weights)
        for node in tree.internal_nodes():
            o = _KINDS.index(node.kind)
            k = node.left.end
            for t, pos in enumerate((node.start, k - 1, k, node.end - 1)):
                counts[o, t, ids[pos]] += 1
            counts[o, 4 + ids[node.start], ids[k]] += 1
            counts[o, 4 + self.vocab_size + ids[k - 1], ids[k]] += 1
        return counts

    def fit(self, sentences: Sequence[Sequence[int]], permutations: Sequence[Sequence[int]], *, epochs: int = 5,
            seed: int = 0) -> dict[str, list[float]]:
        """Train on source sentences and their reference target ranks (e.g. :func:`alignment_permutation`).

        Returns:
            ``{"train_accuracy": [...]}``: per epoch, the share of sentences whose predicted reordering
            (with the current weights, before the update) equalled the reference.
        Raises:
            ValueError: different numbers of sentences and permutations, a length mismatch, an empty
                sentence, or a non-binarizable reference.
        """
        if len(sentences) != len(permutations):
            raise ValueError(f"BTGReorderer.fit: {len(sentences)} sentences but {len(permutations)} permutations")
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
            raise ValueError(f"BTGReorderer.fit: epochs must be an int >= 1, got {epochs!r}")
        data = []
        for index, (sentence, perm) in enumerate(zip(sentences, permutations)):
            ids = self._check_sentence(sentence)
            ranks = np.asarray(_check_permutation(perm), dtype=np.int64)
            if ranks.size != ids.size:
                raise ValueError(f"BTGReorderer.fit: sentence {index} has {ids.size} tokens but its permutation "
                                 f"has {ranks.size}")
            data.append((ids, ranks))
        rng = np.random.default_rng(seed)
        history = []
        for _ in range(epochs):
            correct = 0
            for index in rng.permutation(len(data)):
                ids, ranks = data[index]
                predicted = self._cky(ids, self.weights)
                if cross_lingual_positions(predicted) == ranks.tolist():
                    correct += 1
                else:
                    oracle = self._cky(ids, self.weights, ranks)
                    update = self._features(ids, oracle) - self._features(ids, predicted)
                    self.weights += update
                    self._sum += self._steps * update
                self._steps += 1
            history.append(correct / max(len(data), 1))
        return {"train_accuracy": history}


def position_accuracy(predicted: Sequence[Sequence[int]], reference: Sequence[Sequence[int]]) -> dict[str, float]:
    """How well predicted cross-lingual positions match reference ones (e.g. :meth:`BTGReorderer.positions` against
    the alignment's, Neubig et al. 2012's reordering accuracy): ``{"sentence": share of sentences predicted exactly,
    "token": share of tokens at their reference position}``.

    Example:
        >>> position_accuracy([[0, 1], [1, 0, 2]], [[0, 1], [0, 1, 2]])
        {'sentence': 0.5, 'token': 0.6}

    Raises:
        ValueError: different numbers of sentences, a length mismatch, or no sentence at all.
    """
    if len(predicted) != len(reference) or not reference:
        raise ValueError(f"position_accuracy: {len(predicted)} predicted and {len(reference)} reference sentences; "
                         "need the same number, at least one")
    for index, (a, b) in enumerate(zip(predicted, reference)):
        if len(a) != len(b):
            raise ValueError(f"position_accuracy: sentence {index} has {len(a)} predicted and {len(b)} reference "
                             "positions")
    tokens = sum(sum(x == y for x, y in zip(a, b)) for a, b in zip(predicted, reference))
    return {"sentence": sum(list(a) == list(b) for a, b in zip(predicted, reference)) / len(reference),
            "token": tokens / sum(len(b) for b in reference)}


def _build(start: int, end: int, back_k: np.ndarray, back_o: np.ndarray) -> BTGNode:
    if end - start == 1:
        return BTGNode(LEAF, start, end)
    k = int(back_k[start, end])
    return BTGNode(_KINDS[int(back_o[start, end])], start, end, _build(start, k, back_k, back_o),
                   _build(k, end, back_k, back_o))
