"""Passkey retrieval at byte level: prompts, a seeded grid, scorers and training windows.

The task of Mohtashami & Jaggi 2023 ("Landmark Attention", arXiv 2305.16300) in the template of
LongLoRA (Chen et al. 2023, arXiv 2309.12307), as used by Wang et al. 2024 (NoPE length
generalization, arXiv 2404.12224, ``run_pass.py``) and BAM (Bianchessi et al. 2025, arXiv
2505.22842). A prompt is::

    prefix + haystack[:cut] + needle(key) + haystack[cut:] + question

* prefix: ``"There is an important info hidden inside a lot of irrelevant text. Find it and memorize
  them. I will quiz you about the important information there.\\n"`` (149 bytes);
* haystack: the filler ``" The grass is green. The sky is blue. The sun is yellow. Here we go.
  There and back again."`` repeated and cut to the exact number of bytes that makes the prompt
  ``total_length`` bytes long (it may end mid-sentence);
* needle: ``"\\nThe pass key is {key}. Remember it. {key} is the pass key.\\n"`` (60 bytes), inserted
  at ``cut = round(depth * len(haystack))``, so ``depth`` 0 is right after the prefix and 1 right
  before the question;
* question: ``"\\nWhat is the pass key? The pass key is"`` (38 bytes);
* key: a 5-digit integer in ``[10000, 99999]``.

**Answer convention.** The prompt ends with ``"The pass key is"`` exactly as in the template, and the
answer is ``" " + digits`` (6 bytes, e.g. ``b" 12345"``): the natural next bytes. Scoring counts only
the 5 digits: both scorers give the model the space (a format byte that carries no information,
like a tokenizer's word boundary) and then the first ``prefix_digits`` digits, and score the rest.

**Sizes.** The shortest prompt is 247 bytes (no haystack). At a training context of 256 bytes that
leaves almost no haystack, so :data:`COMPACT_TEMPLATE` (the same needle and question, no prefix:
98 bytes at least) is offered for short-context training and evaluation.

Example:
    >>> ex = make_passkey_example(total_length=400, depth=0.5, key=12345)
    >>> len(ex.prompt_bytes), ex.answer, ex.prompt_bytes[ex.needle_start:ex.needle_start + 22]
    (400, b' 12345', b'\\nThe pass key is 12345')
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pe_toolkit.data.text_corpus import _check_fraction, _check_int

KEY_MIN, KEY_MAX = 10_000, 99_999
"""Inclusive range of the 5-digit pass key."""

NUM_DIGITS = 5


@dataclass(frozen=True)
class PasskeyTemplate:
    """The four texts of a passkey prompt; ``needle`` holds ``{key}`` placeholders.

    Lengths are in UTF-8 bytes.
    """

    prefix: str
    filler: str
    needle: str
    question: str

    def __post_init__(self) -> None:
        if "{key}" not in self.needle:
            raise ValueError(f"PasskeyTemplate: needle must contain '{{key}}', got {self.needle!r}")
        if not self.filler:
            raise ValueError("PasskeyTemplate: filler must not be empty")

    def needle_bytes(self, key: int) -> bytes:
        return self.needle.format(key=key).encode("utf-8")

    @property
    def min_length(self) -> int:
        """The shortest prompt: prefix + needle + question, no haystack."""
        return len(self.prefix.encode()) + len(self.needle_bytes(KEY_MIN)) + len(self.question.encode())


PAPER_TEMPLATE = PasskeyTemplate(
    prefix=(
        "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
        "I will quiz you about the important information there.\n"
    ),
    filler=" The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.",
    needle="\nThe pass key is {key}. Remember it. {key} is the pass key.\n",
    question="\nWhat is the pass key? The pass key is",
)
"""The LongLoRA / landmark template of Wang et al. 2024 and BAM (shortest prompt 247 bytes)."""

COMPACT_TEMPLATE = PasskeyTemplate(
    prefix="", filler=PAPER_TEMPLATE.filler, needle=PAPER_TEMPLATE.needle, question=PAPER_TEMPLATE.question
)
"""The paper template without its instruction prefix (shortest prompt 98 bytes), for short contexts."""


@dataclass(frozen=True)
class PasskeyExample:
    """One passkey prompt and its answer.

    Attributes:
        prompt_bytes: the prompt, exactly ``total_length`` bytes, ending with ``"The pass key is"``.
        answer: ``b" " + digits`` (6 bytes), the continuation of the prompt.
        needle_start: byte offset of the needle (its leading ``"\\n"``) in ``prompt_bytes``.
        key: the pass key.
        depth: the requested relative depth in ``[0, 1]``.
    """

    prompt_bytes: bytes
    answer: bytes
    needle_start: int
    key: int
    depth: float

    @property
    def length(self) -> int:
        return len(self.prompt_bytes)

    @property
    def digits(self) -> bytes:
        return self.answer[1:]

    def prompt_ids(self, device: torch.device | str | None = None) -> Tensor:
        """The prompt as ``(1, L)`` ``torch.long`` byte ids."""
        return _ids(self.prompt_bytes, device)[None]


def _ids(data: bytes, device: torch.device | str | None = None) -> Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device=device, dtype=torch.long)


def _check_key(key: Any) -> int:
    return _check_int("key", key, minimum=KEY_MIN, maximum=KEY_MAX)


def make_passkey_example(
    total_length: int, depth: float, key: int, *, template: PasskeyTemplate = PAPER_TEMPLATE
) -> PasskeyExample:
    """A passkey prompt of exactly ``total_length`` bytes with the needle at relative ``depth``.

    Args:
        total_length: prompt length in bytes, at least ``template.min_length`` (247 for the paper
            template).
        depth: relative position of the needle in the haystack, in ``[0, 1]``; ``needle_start`` is
            ``len(prefix) + round(depth * haystack_bytes)`` and so non-decreasing in ``depth``.
        key: the pass key, an int in ``[10000, 99999]``.
        template: :data:`PAPER_TEMPLATE` (default) or :data:`COMPACT_TEMPLATE` or your own.

    Raises:
        ValueError: ``total_length`` below the minimum (named in the message), ``depth`` outside
            ``[0, 1]``, ``key`` outside ``[10000, 99999]``.
        TypeError: a non-int length or key, a non-number depth.
    """
    _check_int("total_length", total_length)
    depth = _check_fraction("depth", depth)
    key = _check_key(key)
    prefix, needle, question = template.prefix.encode(), template.needle_bytes(key), template.question.encode()
    haystack_bytes = total_length - template.min_length
    if haystack_bytes < 0:
        raise ValueError(
            f"make_passkey_example: total_length must be >= {template.min_length} (prefix {len(prefix)} + needle "
            f"{len(needle)} + question {len(question)} bytes), got {total_length}"
        )
    filler = template.filler.encode()
    haystack = (filler * (haystack_bytes // len(filler) + 1))[:haystack_bytes]
    cut = math.floor(depth * haystack_bytes + 0.5)  # round half up: monotone in depth
    prompt = prefix + haystack[:cut] + needle + haystack[cut:] + question
    return PasskeyExample(prompt, b" " + str(key).encode(), len(prefix) + cut, key, depth)


def passkey_grid(
    lengths: Sequence[int],
    depths: Sequence[float],
    samples: int,
    seed: int = 0,
    *,
    template: PasskeyTemplate = PAPER_TEMPLATE,
) -> list[PasskeyExample]:
    """``samples`` examples for every (length, depth), with keys drawn by ``random.Random(seed)``.

    Ordered by length, then depth (both as given), then sample.

    Raises:
        ValueError: empty ``lengths`` / ``depths``, ``samples < 1``, or a bad length / depth
            (see :func:`make_passkey_example`).
    """
    lengths, depths = list(lengths), list(depths)
    if not lengths or not depths:
        raise ValueError(f"passkey_grid: lengths and depths must be non-empty, got {lengths!r} and {depths!r}")
    _check_int("samples", samples, minimum=1)
    _check_int("seed", seed)
    rng = random.Random(seed)
    return [
        make_passkey_example(length, depth, rng.randint(KEY_MIN, KEY_MAX), template=template)
        for length in lengths
        for depth in depths
        for _ in range(samples)
    ]


def _check_prefix_digits(prefix_digits: Any) -> int:
    return _check_int("prefix_digits", prefix_digits, minimum=0, maximum=NUM_DIGITS - 1)


def score_passkey(
    generate_fn: Callable[[Tensor, int], Any],
    example: PasskeyExample,
    prefix_digits: int = 0,
    *,
    device: torch.device | str | None = None,
) -> bool:
    """Whether greedy generation reproduces the key's digits (exact match).

    The model is given ``prompt + " " + digits[:prefix_digits]`` and must generate the remaining
    ``5 - prefix_digits`` digits.

    Args:
        generate_fn: ``generate_fn(ids, max_new_tokens)`` with ``ids`` a ``(1, L)`` ``torch.long``
            tensor of byte ids; returns the new ids, ``(max_new_tokens,)`` or ``(1, max_new_tokens)``
            (a tensor or a sequence of ints), or ``(1, L + max_new_tokens)`` starting with ``ids``
            (what ``Transformer.generate`` returns: pass ``model.generate`` directly).
        example: the passkey example.
        prefix_digits: how many leading digits are given (BAM gives 1); 0 to 4.
        device: where the prompt tensor is put.

    Raises:
        ValueError: ``generate_fn`` returned another number of ids.
    """
    prefix_digits = _check_prefix_digits(prefix_digits)
    given = example.prompt_bytes + example.answer[: 1 + prefix_digits]
    expected = list(example.answer[1 + prefix_digits :])
    ids = _ids(given, device)[None]  # (1, L)
    out = generate_fn(ids, len(expected))
    out = out.detach().cpu().reshape(-1).tolist() if isinstance(out, Tensor) else [int(i) for i in out]
    if len(out) == len(given) + len(expected) and out[: len(given)] == list(given):
        out = out[len(given) :]
    if len(out) != len(expected):
        raise ValueError(
            f"score_passkey: generate_fn returned {len(out)} ids for max_new_tokens={len(expected)} and a prompt of "
            f"{len(given)}; return the {len(expected)} new ids, or the prompt followed by them"
        )
    return out == expected


def passkey_accuracy(
    generate_fn: Callable[[Tensor, int], Any],
    examples: Sequence[PasskeyExample],
    prefix_digits: int = 0,
    *,
    device: torch.device | str | None = None,
) -> float:
    """Fraction of ``examples`` whose digits ``generate_fn`` reproduces exactly (see :func:`score_passkey`).

    This is the metric of the papers: greedy decoding, exact match of the (non-given) digits. It
    costs one prompt forward plus ``5 - prefix_digits`` decoding steps per example.

    Raises:
        ValueError: ``examples`` is empty.
    """
    if len(examples) == 0:
        raise ValueError("passkey_accuracy: examples is empty")
    return sum(score_passkey(generate_fn, ex, prefix_digits, device=device) for ex in examples) / len(examples)


def teacher_forced_digit_accuracy(
    model_logits_fn: Callable[[Tensor], Tensor],
    example: PasskeyExample,
    prefix_digits: int = 0,
    *,
    device: torch.device | str | None = None,
) -> float:
    """Fraction of the scored digits that are the argmax given the true preceding bytes.

    One forward pass over ``prompt + answer[:-1]`` (``L + 5`` bytes): digit ``j`` is predicted from
    the logits at the position of the byte before it. Digits ``prefix_digits..4`` are scored. A
    per-digit score, cheaper than :func:`passkey_accuracy` (no decoding loop) and finer-grained;
    it equals 1.0 exactly when greedy decoding would reproduce the scored digits too.

    Args:
        model_logits_fn: ``model_logits_fn(ids)`` with ``ids`` ``(1, T)`` ``torch.long``, returning
            logits ``(1, T, V)`` or ``(T, V)`` (a ``Transformer`` itself works).
        example: the passkey example.
        prefix_digits: leading digits left out of the score; 0 to 4.
        device: where the input tensor is put.

    Returns:
        A float in ``[0, 1]`` in steps of ``1 / (5 - prefix_digits)``.
    """
    prefix_digits = _check_prefix_digits(prefix_digits)
    sequence = example.prompt_bytes + example.answer
    ids = _ids(sequence[:-1], device)[None]  # (1, T), T = L + 5
    logits = model_logits_fn(ids)
    if logits.dim() == 3:
        logits = logits[0]
    if logits.dim() != 2 or logits.shape[0] != ids.shape[1]:
        raise ValueError(
            f"teacher_forced_digit_accuracy: model_logits_fn must return (1, {ids.shape[1]}, V) or "
            f"({ids.shape[1]}, V) logits, got {tuple(logits.shape)}"
        )
    first = len(example.prompt_bytes) + 1 + prefix_digits  # position of the first scored digit
    predicted = logits[first - 1 : len(sequence) - 1].argmax(-1).cpu()  # (5 - prefix_digits,)
    expected = _ids(sequence[first:])
    return int((predicted == expected).sum()) / len(expected)


def batched_digit_accuracies(
    model_logits_fn: Callable[[Tensor], Tensor],
    examples: Sequence[PasskeyExample],
    *,
    batch_tokens: int,
    device: torch.device | str | None = None,
) -> list[float]:
    """:func:`teacher_forced_digit_accuracy` of each example, ``batch_tokens // (L + 5)`` prompts per forward.

    The prompts (all of one length ``L``) are stacked into one batch; a causal model's rows do not
    see each other, so each score equals the one-prompt scorer's (``prefix_digits`` 0). Use it to
    score a length x depth grid in a few forward passes instead of one per prompt.

    Args:
        model_logits_fn: ``model_logits_fn(ids (b, L + 5))`` -> logits ``(b, L + 5, V)`` (a causal ``Transformer``).
        examples: passkey examples of one prompt length.
        batch_tokens: input bytes per forward pass (at least one prompt per pass).
        device: where the inputs are put.

    Returns:
        one digit accuracy in ``[0, 1]`` per example, in order (``[]`` for no examples).

    Raises:
        ValueError: examples of different lengths; ``batch_tokens`` < 1.
    """
    _check_int("batch_tokens", batch_tokens, minimum=1)
    if not examples:
        return []
    sequences = [ex.prompt_bytes + ex.answer for ex in examples]
    lengths = {len(s) for s in sequences}
    if len(lengths) != 1:
        raise ValueError(f"batched_digit_accuracies: examples must have one length, got {sorted(lengths)}")
    total = lengths.pop()
    per_batch = max(1, batch_tokens // total)
    ids = torch.tensor([list(s) for s in sequences], dtype=torch.long)  # (N, L + 6)
    first = total - NUM_DIGITS  # index of the first digit in each sequence
    scores: list[float] = []
    with torch.no_grad():
        for start in range(0, len(examples), per_batch):
            chunk = ids[start : start + per_batch].to(device)
            predicted = model_logits_fn(chunk[:, :-1])[:, first - 1 : total - 1].argmax(-1)  # (b, 5)
            correct = (predicted == chunk[:, first:]).sum(-1)  # digits right, per prompt
            scores.extend(int(v) / NUM_DIGITS for v in correct.cpu())
    return scores


def passkey_depth_scores(
    model_logits_fn: Callable[[Tensor], Tensor],
    length: int,
    depths: Sequence[float],
    samples: int,
    *,
    seed: int,
    template: PasskeyTemplate = PAPER_TEMPLATE,
    batch_tokens: int,
    device: torch.device | str | None = None,
) -> list[dict[str, Any]]:
    """Passkey retrieval at input length ``length``: ``samples`` prompts per needle depth, scored teacher-forced.

    The prompts are :func:`passkey_grid` ``([length - 5], depths, samples, seed=seed)``: a prompt of
    ``length - 5`` bytes and its 6-byte answer but the last byte make ``length`` input bytes. Scored by
    :func:`batched_digit_accuracies`, ``batch_tokens`` input bytes per forward pass.

    Returns:
        one dict per depth: ``length``, ``depth``, ``samples``, ``digit_accuracy`` (mean fraction of digits
        right) and ``exact_match`` (fraction of prompts with all 5 digits right, what greedy decoding gives).
    """
    _check_int("length", length, minimum=6)
    examples = passkey_grid([length - NUM_DIGITS], depths, samples, seed=seed, template=template)
    scores = batched_digit_accuracies(model_logits_fn, examples, batch_tokens=batch_tokens, device=device)
    cells = []
    for depth in depths:
        cell = [s for ex, s in zip(examples, scores) if ex.depth == depth]
        cells.append({"length": length, "depth": depth, "samples": len(cell), "digit_accuracy": sum(cell) / len(cell),
                      "exact_match": sum(s == 1.0 for s in cell) / len(cell)})
    return cells


def passkey_training_windows(
    length: int,
    batch: int,
    generator: torch.Generator | None = None,
    *,
    template: PasskeyTemplate = PAPER_TEMPLATE,
) -> tuple[Tensor, Tensor]:
    """Full passkey sequences (prompt + answer) shaped like :func:`random_windows` output.

    Each row is a prompt of ``length + 1 - 6`` bytes followed by its 6-byte answer, with a key
    uniform in ``[10000, 99999]`` and a depth uniform in ``[0, 1]`` drawn from ``generator``.
    Mix such rows into batches of text windows so a small byte LM learns the retrieval format:
    inputs ``windows[:, :-1]``, targets ``windows[:, 1:]``, loss on ``mask[:, 1:]``.

    Args:
        length: the training context (as for :func:`random_windows`); at least
            ``template.min_length + 5`` (252 for the paper template, 103 for the compact one).
        batch: number of rows.
        generator: the ``torch.Generator`` drawing keys and depths.
        template: the prompt template.

    Returns:
        ``windows`` ``(batch, length + 1)`` ``torch.long`` byte ids and ``mask`` ``(batch, length + 1)``
        ``torch.bool``, True on the 6 answer bytes (the last 6 positions).
    """
    _check_int("length", length, minimum=1)
    _check_int("batch", batch, minimum=1)
    answer_bytes = 1 + NUM_DIGITS
    prompt_length = length + 1 - answer_bytes
    if prompt_length < template.min_length:
        raise ValueError(
            f"passkey_training_windows: length must be >= {template.min_length + answer_bytes - 1} for this template "
            f"(prompt >= {template.min_length} bytes + {answer_bytes} answer bytes = length + 1), got {length}"
        )
    keys = torch.randint(KEY_MIN, KEY_MAX + 1, (batch,), generator=generator).tolist()
    depths = torch.rand(batch, generator=generator, dtype=torch.float64).tolist()
    rows = []
    for key, depth in zip(keys, depths):
        ex = make_passkey_example(prompt_length, depth, key, template=template)
        rows.append(_ids(ex.prompt_bytes + ex.answer))
    windows = torch.stack(rows)  # (batch, length + 1)
    mask = torch.zeros_like(windows, dtype=torch.bool)
    mask[:, -answer_bytes:] = True
    return windows, mask
