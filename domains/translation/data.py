"""Parallel data for the translation domain: a seeded SVO -> SOV toy language pair, user files, a vocabulary.

The toy pair has a known reordering (testbed 10 of the domain-paper notes; Ding et al. 2020,
arXiv:2004.13310 evaluate on WMT/WAT data that cannot be downloaded here). The source is English-like
(subject-verb-object, relative clauses after the noun, complement clauses after the verb); the target is
Japanese-like and head-final, written in capitals:

* ``S -> NP VP``                 ->  ``NP' GA VP'``            (straight; ``GA`` marks the subject)
* ``VP -> Vt NP``                ->  ``NP' O Vt'``             (inverted; ``O`` marks the object)
* ``VP -> Vc that S``            ->  ``S' THAT Vc'``           (inverted twice)
* ``VP -> Vi``                   ->  ``Vi'``
* ``NP -> Det (Adj) N (RC)``     ->  ``RC' Det' (Adj') N'``    (the relative clause moves in front)
* ``RC -> that VP``              ->  ``VP' THAT``              (inverted)

The article ``a`` has no translation (an unaligned source word) and ``GA`` / ``O`` have no source (unaligned
target words). Each pair carries its word alignment, so the BTG reordering of every sentence is known.

Example:
    >>> pairs = generate_corpus(2, seed=0, max_depth=1)
    >>> len(pairs), all(p.source and p.target for p in pairs)
    (2, True)
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pe_toolkit.domains.translation.btg import check_alignment, parse_pharaoh

__all__ = ["SentencePair", "Vocabulary", "generate_corpus", "load_parallel_corpus", "LEXICON"]

NOUNS = ("dog", "cat", "bird", "fox", "horse", "child", "teacher", "farmer", "king", "queen", "doctor", "pilot",
         "baker", "singer", "student", "robot", "wolf", "mouse", "lion", "girl", "boy", "poet", "judge", "sailor")
TRANSITIVE = ("chases", "sees", "likes", "helps", "finds", "follows", "calls", "pushes", "meets", "feeds",
              "watches", "paints")
INTRANSITIVE = ("sleeps", "runs", "laughs", "sings", "waits", "falls")
COMPLEMENT = ("says", "thinks", "knows", "hopes")
ADJECTIVES = ("big", "small", "old", "young", "red", "happy", "quiet", "brave", "tired", "clever")
DETERMINERS = ("the", "a", "every")
LEXICON: dict[str, str | None] = {w: w.upper() for w in NOUNS + TRANSITIVE + INTRANSITIVE + COMPLEMENT + ADJECTIVES}
LEXICON.update({"the": "THE", "every": "EVERY", "a": None, "that": "THAT"})


@dataclass(frozen=True)
class SentencePair:
    """One sentence pair: whitespace tokens and alignment links ``(source_index, target_index)``."""

    source: tuple[str, ...]
    target: tuple[str, ...]
    alignment: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        if not self.source:
            raise ValueError("SentencePair: source must not be empty")
        if not self.target:
            raise ValueError("SentencePair: target must not be empty")
        check_alignment(self.alignment, len(self.source), len(self.target))


class _Builder:
    """Recursive generator: every phrase returns (source tokens, target tokens, links in local indices)."""

    def __init__(self, rng: random.Random, relative_prob: float, complement_prob: float, adjective_prob: float):
        self.rng = rng
        self.relative_prob, self.complement_prob, self.adjective_prob = relative_prob, complement_prob, adjective_prob

    @staticmethod
    def word(w: str) -> tuple[list[str], list[str], list[tuple[int, int]]]:
        t = LEXICON[w]
        return ([w], [], []) if t is None else ([w], [t], [(0, 0)])

    @staticmethod
    def join(*parts_and_order) -> tuple[list[str], list[str], list[tuple[int, int]]]:
        """Concatenate source parts in the given order and target parts in ``target_order`` (indices)."""
        *parts, target_order = parts_and_order
        src, src_offsets = [], []
        for p in parts:
            src_offsets.append(len(src))
            src.extend(p[0])
        tgt, links = [], []
        for item in target_order:
            if isinstance(item, str):  # a target-only word
                tgt.append(item)
                continue
            p = parts[item]
            links.extend((s + src_offsets[item], t + len(tgt)) for s, t in p[2])
            tgt.extend(p[1])
        return src, tgt, links

    def sentence(self, depth: int):
        return self.join(self.noun_phrase(depth), self.verb_phrase(depth), [0, "GA", 1])

    def noun_phrase(self, depth: int):
        rng = self.rng
        parts = [self.word(rng.choice(DETERMINERS))]
        if rng.random() < self.adjective_prob:
            parts.append(self.word(rng.choice(ADJECTIVES)))
        parts.append(self.word(rng.choice(NOUNS)))
        np_ = self.join(*parts, list(range(len(parts))))
        if depth > 0 and rng.random() < self.relative_prob:
            rc = self.join(self.word("that"), self.verb_phrase(depth - 1), [1, 0])
            return self.join(np_, rc, [1, 0])
        return np_

    def verb_phrase(self, depth: int):
        rng = self.rng
        if depth > 0 and rng.random() < self.complement_prob:
            comp = self.join(self.word("that"), self.sentence(depth - 1), [1, 0])
            return self.join(self.word(rng.choice(COMPLEMENT)), comp, [1, 0])
        if rng.random() < 0.2:
            return self.word(rng.choice(INTRANSITIVE))
        return self.join(self.word(rng.choice(TRANSITIVE)), self.noun_phrase(depth), [1, "O", 0])


def generate_corpus(
    num_pairs: int, *, seed: int, max_depth: int = 2, relative_prob: float = 0.35, complement_prob: float = 0.3,
    adjective_prob: float = 0.4,
) -> list[SentencePair]:
    """``num_pairs`` seeded sentence pairs of the SVO -> SOV toy language (see the module docstring).

    Args:
        num_pairs: how many pairs (>= 1).
        seed: RNG seed; the same seed gives the same corpus.
        max_depth: maximum clause nesting (relative and complement clauses), >= 0.
        relative_prob, complement_prob, adjective_prob: rule probabilities in [0, 1].
    """
    for name, value in (("num_pairs", num_pairs), ("max_depth", max_depth), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"generate_corpus: {name} must be an int, got {value!r}")
    if num_pairs < 1:
        raise ValueError(f"generate_corpus: num_pairs must be >= 1, got {num_pairs}")
    if max_depth < 0:
        raise ValueError(f"generate_corpus: max_depth must be >= 0, got {max_depth}")
    for name, value in (("relative_prob", relative_prob), ("complement_prob", complement_prob),
                        ("adjective_prob", adjective_prob)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"generate_corpus: {name} must be in [0, 1], got {value}")
    builder = _Builder(random.Random(seed), relative_prob, complement_prob, adjective_prob)
    pairs = []
    for _ in range(num_pairs):
        src, tgt, links = builder.sentence(builder.rng.randint(0, max_depth))
        pairs.append(SentencePair(tuple(src), tuple(tgt), tuple(sorted(links))))
    return pairs


def load_parallel_corpus(source_path: str | Path, target_path: str | Path,
                         alignment_path: str | Path | None = None) -> list[SentencePair]:
    """Read a parallel corpus in the usual MT format: one tokenized sentence per line in each file, and
    optionally a Pharaoh / fast_align alignment file (``"0-0 1-2 2-1"`` per line, source-target).

    Without an alignment file every pair gets no links (its BTG reordering is then the identity).

    Raises:
        FileNotFoundError: a missing file.
        ValueError: different line counts, an empty sentence, or a bad / out-of-range alignment link
            (the message names the file and line).
    """
    paths = [Path(source_path), Path(target_path)] + ([Path(alignment_path)] if alignment_path is not None else [])
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"load_parallel_corpus: no such file {str(path)!r}")
    lines = [path.read_text(encoding="utf-8").splitlines() for path in paths]
    counts = [len(x) for x in lines]
    if len(set(counts)) != 1:
        described = ", ".join(f"{p.name}: {c}" for p, c in zip(paths, counts))
        raise ValueError(f"load_parallel_corpus: the files have different numbers of lines ({described})")
    pairs = []
    for number in range(counts[0]):
        source, target = lines[0][number].split(), lines[1][number].split()
        for side, tokens in (("source", source), ("target", target)):
            if not tokens:
                raise ValueError(f"load_parallel_corpus: empty {side} sentence at line {number + 1} of "
                                 f"{paths[0 if side == 'source' else 1]}")
        links: list[tuple[int, int]] = []
        if alignment_path is not None:
            try:
                links = parse_pharaoh(lines[2][number])
                check_alignment(links, len(source), len(target))
            except ValueError as error:
                raise ValueError(f"load_parallel_corpus: {paths[2]} line {number + 1}: {error}") from None
        pairs.append(SentencePair(tuple(source), tuple(target), tuple(sorted(set(links)))))
    return pairs


class Vocabulary:
    """Token <-> id map with ``<pad>=0, <bos>=1, <eos>=2, <unk>=3`` first."""

    PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
    pad_id, bos_id, eos_id, unk_id = 0, 1, 2, 3

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos = [self.PAD, self.BOS, self.EOS, self.UNK]
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        for token in sorted(set(tokens)):
            if token not in self.stoi:
                self.stoi[token] = len(self.itos)
                self.itos.append(token)

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.stoi.get(t, self.unk_id) for t in tokens]

    def decode(self, ids: Sequence[int]) -> list[str]:
        """Tokens of ``ids`` up to (not including) the first ``<eos>``; ``<pad>`` / ``<bos>`` are skipped."""
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if i in (self.pad_id, self.bos_id):
                continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else self.UNK)
        return out
