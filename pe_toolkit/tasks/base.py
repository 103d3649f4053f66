"""The task contract: :class:`Example`, :class:`Task` and :class:`Vocabulary`.

A task is a seeded generator of ``(prompt, answer)`` token sequences together with a *length measure*
(the number of digits, list items, program statements, ... that the task's paper buckets accuracy by),
and two inclusive ranges of that measure: ``train_lengths`` and ``test_lengths``. Length
generalization is measured by training on the first and testing on the second.

Everything here is plain Python (``random.Random``, lists of strings); only
:meth:`Vocabulary.collate` touches ``torch``, and imports it when called.

Example:
    >>> from pe_toolkit.tasks import get_task, Vocabulary
    >>> task = get_task("copy_random", train_lengths=(4, 8))
    >>> examples = task.generate(3, split="train", seed=0)
    >>> vocab = Vocabulary(task.vocabulary())
    >>> ids, answer_start = vocab.encode(examples[0])
    >>> ids[0] == vocab.bos_id and ids[answer_start - 1] == vocab.sep_id and ids[-1] == vocab.eos_id
    True
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

PAD, BOS, EOS, SEP = "<pad>", "<bos>", "<eos>", "<sep>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, SEP)
SPLITS: tuple[str, ...] = ("train", "test")


# ---------------------------------------------------------------------------------------------------
# Validation helpers (errors name the task, the argument, the value and what is allowed)
# ---------------------------------------------------------------------------------------------------


def check_int(
    owner: str, name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return ``value`` if it is an int in ``[minimum, maximum]``, else raise TypeError / ValueError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int, got {type(value).__name__} ({value!r})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{owner}: {name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{owner}: {name} must be <= {maximum}, got {value}")
    return value


def check_probability(
    owner: str, name: str, value: Any, *, open_low: bool = False, open_high: bool = False
) -> float:
    """Return ``value`` as a float in [0, 1] (ends excluded when ``open_low`` / ``open_high``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{owner}: {name} must be a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    low_ok = value > 0.0 if open_low else value >= 0.0
    high_ok = value < 1.0 if open_high else value <= 1.0
    if not (low_ok and high_ok):
        interval = ("(" if open_low else "[") + "0, 1" + (")" if open_high else "]")
        raise ValueError(f"{owner}: {name} must be in {interval}, got {value}")
    return value


def check_range(
    owner: str, name: str, value: Any, *, minimum: int = 1, maximum: int | None = None
) -> tuple[int, int]:
    """Validate an inclusive ``(low, high)`` range of ints with ``minimum <= low <= high <= maximum``."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{owner}: {name} must be a (min, max) pair of ints, got {value!r}")
    low, high = value
    for v in (low, high):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{owner}: {name} must be a (min, max) pair of ints, got {value!r}")
    if low > high:
        raise ValueError(f"{owner}: {name} must have min <= max, got {tuple(value)}")
    if low < minimum:
        raise ValueError(f"{owner}: {name} must have min >= {minimum}, got {tuple(value)}")
    if maximum is not None and high > maximum:
        raise ValueError(f"{owner}: {name} must have max <= {maximum}, got {tuple(value)}")
    return (low, high)


def check_choice(owner: str, name: str, value: Any, choices: Sequence[Any]) -> Any:
    """Return ``value`` if it is one of ``choices``, else raise ValueError listing them."""
    if value not in choices:
        raise ValueError(f"{owner}: {name} must be one of {tuple(choices)}, got {value!r}")
    return value


# ---------------------------------------------------------------------------------------------------
# Small formatting helpers shared by the task families
# ---------------------------------------------------------------------------------------------------


def spell(number: int) -> str:
    """Digits of ``number`` separated by spaces, a leading ``-`` as its own token: ``-12 -> '- 1 2'``.

    This is ``number_to_string`` of Kazemnejad et al. 2023 (one token per digit), which keeps the
    vocabulary finite for numbers of any size.
    """
    if number < 0:
        return "- " + spell(-number)
    return " ".join(str(number))


def symbols(count: int, prefix: str) -> list[str]:
    """``count`` opaque symbol tokens ``[prefix0, prefix1, ...]`` (the alphabet of copy-like tasks)."""
    return [f"{prefix}{i}" for i in range(count)]


DIGITS: tuple[str, ...] = tuple(str(d) for d in range(10))


# ---------------------------------------------------------------------------------------------------
# Example and Task
# ---------------------------------------------------------------------------------------------------


@dataclass
class Example:
    """One generated instance of a task.

    Attributes:
        prompt: input tokens (what the model is conditioned on).
        answer: target tokens (what the model must emit after the separator; scratchpad included).
        length: the task's length measure (e.g. number of digits), used for bucketing accuracy.
        meta: task-specific ground truth (operands, the query, the scratchpad steps, ...).
    """

    prompt: list[str]
    answer: list[str]
    length: int
    meta: dict[str, Any] = field(default_factory=dict)


class Task:
    """Base class of the synthetic tasks: a seeded generator plus an exact-match checker.

    Subclasses set the class attributes below and implement :meth:`_sample` and :meth:`_tokens`.
    Options are keyword-only and validated in ``__init__``; ``train_lengths`` / ``test_lengths`` are
    inclusive ``(min, max)`` ranges of :attr:`Example.length`.

    Class attributes:
        name: registry name, e.g. ``"copy_random"`` (variant classes set it per instance).
        reference: the paper the task follows.
        default_train_lengths / default_test_lengths: the paper's split.
        min_length / max_length: the smallest / largest length measure the generator supports.
    """

    name: str = "task"
    reference: str = ""
    default_train_lengths: tuple[int, int] = (1, 1)
    default_test_lengths: tuple[int, int] = (1, 1)
    min_length: int = 1
    max_length: int | None = None

    def __init__(
        self,
        *,
        train_lengths: tuple[int, int] | None = None,
        test_lengths: tuple[int, int] | None = None,
    ) -> None:
        self.train_lengths = self._check_lengths(
            "train_lengths", self.default_train_lengths if train_lengths is None else train_lengths
        )
        self.test_lengths = self._check_lengths(
            "test_lengths", self.default_test_lengths if test_lengths is None else test_lengths
        )

    # -- to implement --------------------------------------------------------------------------------

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        raise NotImplementedError

    def _tokens(self) -> list[str]:
        """Every token the task can put in a prompt or an answer (specials excluded)."""
        raise NotImplementedError

    # -- public API ---------------------------------------------------------------------------------

    def vocabulary(self) -> list[str]:
        """All tokens, deterministic order: ``<pad> <bos> <eos> <sep>`` first, then the task's tokens.

        ``Vocabulary(task.vocabulary())`` therefore gives every token the id of its list index.
        """
        seen = set(SPECIAL_TOKENS)
        tokens = list(SPECIAL_TOKENS)
        for tok in self._tokens():
            if tok not in seen:
                seen.add(tok)
                tokens.append(tok)
        return tokens

    def lengths(self, split: str) -> list[int]:
        """The length measures ``generate`` draws from (uniformly) for ``split``."""
        low, high = self.split_lengths(split)
        return list(range(low, high + 1))

    def split_lengths(self, split: str) -> tuple[int, int]:
        """``train_lengths`` or ``test_lengths``."""
        check_choice(self.name, "split", split, SPLITS)
        return self.train_lengths if split == "train" else self.test_lengths

    def sample(self, rng: random.Random, length: int, *, split: str = "train") -> Example:
        """One example whose length measure is ``length``.

        Args:
            rng: the only source of randomness (the global RNG is never touched).
            length: the length measure; any supported value, not only those of the splits.
            split: ``"train"`` or ``"test"``; matters only for tasks whose out-of-distribution shift is
                not (only) the length (flip-flop ignore probability, selective-copy density, region
                counts of contextual counting).

        Raises:
            TypeError / ValueError: on a bad ``rng``, ``length`` or ``split``.
        """
        if not isinstance(rng, random.Random):
            raise TypeError(f"{self.name}: rng must be a random.Random, got {type(rng).__name__}")
        check_int(self.name, "length", length, minimum=self.min_length, maximum=self.max_length)
        check_choice(self.name, "split", split, SPLITS)
        return self._sample(rng, length, split)

    def generate(self, n: int, split: str = "train", seed: int = 0) -> list[Example]:
        """``n`` examples of ``split`` with lengths drawn uniformly from :meth:`lengths`.

        Deterministic given ``(split, seed)``; the stream of ``n`` examples is a prefix of the stream
        of ``n + 1``. Train and test streams of the same seed are independent.
        """
        check_int(self.name, "n", n, minimum=0)
        check_choice(self.name, "split", split, SPLITS)
        check_int(self.name, "seed", seed)
        # A str seed is hashed with SHA-512 by `random`, so this is stable across processes and runs.
        rng = random.Random(f"{self.name}/{split}/{seed}")
        support = self.lengths(split)
        weights = self._length_weights(support)
        out = []
        for _ in range(n):
            length = rng.choice(support) if weights is None else rng.choices(support, weights)[0]
            out.append(self._sample(rng, length, split))
        return out

    def evaluation_lengths(self, split: str, stride: int = 1) -> list[int]:
        """Every ``stride``-th length of :meth:`lengths` of ``split``, always with the longest one.

        Example:
            >>> from pe_toolkit.tasks import get_task
            >>> get_task("copy_repeat", train_lengths=(1, 8)).evaluation_lengths("train", stride=3)
            [1, 4, 7, 8]
        """
        check_int(self.name, "stride", stride, minimum=1)
        support = self.lengths(split)
        return sorted({*support[::stride], support[-1]})

    def evaluation_set(self, split: str, per_length: int, seed: int = 0, *, stride: int = 1) -> list[Example]:
        """A fixed test set: ``per_length`` examples of ``split`` at each of :meth:`evaluation_lengths`.

        Unlike :meth:`generate` (lengths drawn at random), every evaluated length gets the same number of
        examples, so accuracy per length has a fixed denominator (Kazemnejad et al. 2023 test 100 per length).
        Each length has its own stream, seeded by ``(split, seed, length)`` and independent of the training
        data of any seed; the list is ordered by length.
        """
        check_int(self.name, "per_length", per_length, minimum=1)
        check_int(self.name, "seed", seed)
        examples = []
        for length in self.evaluation_lengths(split, stride):
            rng = random.Random(f"{self.name}/{split}/evaluation/{seed}/{length}")
            examples += [self._sample(rng, length, split) for _ in range(per_length)]
        return examples

    def check(self, example: Example, predicted: Sequence[str]) -> bool:
        """Exact match of ``predicted`` against ``example.answer``."""
        return list(predicted) == list(example.answer)

    # -- helpers for subclasses ---------------------------------------------------------------------

    def _length_weights(self, support: list[int]) -> list[float] | None:
        """Relative weights of the lengths in ``support``; ``None`` means uniform."""
        return None

    def _check_lengths(self, name: str, value: Any) -> tuple[int, int]:
        return check_range(self.name, name, value, minimum=self.min_length, maximum=self.max_length)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, train_lengths={self.train_lengths}, " \
               f"test_lengths={self.test_lengths})"


# ---------------------------------------------------------------------------------------------------
# Vocabulary
# ---------------------------------------------------------------------------------------------------


class Vocabulary:
    """Token <-> id mapping with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<sep>`` = 3.

    The special tokens come first whatever ``tokens`` holds; the remaining tokens keep their order
    (duplicates are dropped), so ``Vocabulary(task.vocabulary()).tokens == task.vocabulary()``.

    The sequence layout for a causal LM whose loss is on the answer only is::

        <bos> prompt... <sep> answer... <eos>
                              ^ answer_start

    Raises:
        TypeError: if a token is not a str.
        ValueError: if a token is empty or contains whitespace.
    """

    def __init__(self, tokens: Iterable[str]) -> None:
        self._tokens: list[str] = list(SPECIAL_TOKENS)
        self._ids: dict[str, int] = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
        for tok in tokens:
            if not isinstance(tok, str):
                raise TypeError(f"Vocabulary: tokens must be str, got {type(tok).__name__} ({tok!r})")
            if not tok or tok != "".join(tok.split()):
                raise ValueError(f"Vocabulary: tokens must be non-empty and free of whitespace, got {tok!r}")
            if tok not in self._ids:
                self._ids[tok] = len(self._tokens)
                self._tokens.append(tok)

    pad_id, bos_id, eos_id, sep_id = 0, 1, 2, 3

    @property
    def tokens(self) -> list[str]:
        """All tokens in id order."""
        return list(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, token: object) -> bool:
        return token in self._ids

    def token_to_id(self, token: str) -> int:
        """The id of ``token`` (ValueError if unknown)."""
        try:
            return self._ids[token]
        except KeyError:
            raise ValueError(f"Vocabulary: unknown token {token!r} (vocabulary size {len(self)})") from None

    def id_to_token(self, index: int) -> str:
        """The token of ``index`` (ValueError if out of range)."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"Vocabulary: ids must be ints, got {type(index).__name__} ({index!r})")
        if not 0 <= index < len(self._tokens):
            raise ValueError(f"Vocabulary: id must be in [0, {len(self._tokens) - 1}], got {index}")
        return self._tokens[index]

    def encode_tokens(self, tokens: Iterable[str]) -> list[int]:
        """Ids of ``tokens``."""
        return [self.token_to_id(t) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of ``ids`` (specials included)."""
        return [self.id_to_token(int(i)) for i in ids]

    def encode(self, example: Example) -> tuple[list[int], int]:
        """``<bos> prompt <sep> answer <eos>`` as ids, and the index of the first answer token.

        The training loss covers positions ``answer_start ..`` (the answer and ``<eos>``): the model
        predicts token ``t`` from positions ``< t``.
        """
        prompt = self.encode_prompt(example)
        ids = prompt + self.encode_tokens(example.answer) + [self.eos_id]
        return ids, len(prompt)

    def encode_prompt(self, example: Example) -> list[int]:
        """``<bos> prompt <sep>``: what a generator is primed with at test time."""
        return [self.bos_id, *self.encode_tokens(example.prompt), self.sep_id]

    def decode_answer(self, ids: Iterable[int]) -> list[str]:
        """Tokens of generated answer ids, stopped at the first ``<eos>`` (``<pad>`` dropped)."""
        out = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i != self.pad_id:
                out.append(self.id_to_token(i))
        return out

    def collate(self, examples: Sequence[Example], *, ignore_index: int = -100) -> dict[str, Any]:
        """Pad a batch for a causal LM (right padding with ``<pad>``).

        The returned dict holds ``torch.long`` tensors:

        * ``input_ids`` ``(B, L)``: ``<bos> prompt <sep> answer <eos> <pad>...``
        * ``labels`` ``(B, L)``: ``input_ids`` at answer positions (answer and ``<eos>``), else
          ``ignore_index``. Unshifted: the loss compares ``logits[:, :-1]`` with ``labels[:, 1:]``.
        * ``attention_mask`` ``(B, L)`` (bool): True on real tokens.
        * ``answer_start`` ``(B,)`` and ``lengths`` ``(B,)`` (sequence length without padding).
        """
        import torch

        if len(examples) == 0:
            raise ValueError("Vocabulary.collate: examples must not be empty")
        encoded = [self.encode(ex) for ex in examples]
        width = max(len(ids) for ids, _ in encoded)
        input_ids = torch.full((len(encoded), width), self.pad_id, dtype=torch.long)
        labels = torch.full((len(encoded), width), ignore_index, dtype=torch.long)
        for row, (ids, start) in enumerate(encoded):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            labels[row, start : len(ids)] = input_ids[row, start : len(ids)]
        lengths = torch.tensor([len(ids) for ids, _ in encoded], dtype=torch.long)
        return {
            "input_ids": input_ids,
            "labels": labels,
            "attention_mask": torch.arange(width)[None, :] < lengths[:, None],
            "answer_start": torch.tensor([start for _, start in encoded], dtype=torch.long),
            "lengths": lengths,
        }

    def __repr__(self) -> str:
        return f"Vocabulary(size={len(self)})"
