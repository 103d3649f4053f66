"""PCFG SET productivity (Hupkes et al. 2020), as used by Kazemnejad et al. 2023 (``md_productivity``).

An input is a prefix expression of string-edit functions applied to strings of symbols ``A1 .. Z20``
(26 letters x 20 numbers = 520 symbols); binary functions separate their two arguments by ``,``::

    unary   copy x -> x              reverse x -> x reversed      shift x -> x[1:] + x[:1]
            echo x -> x + x[-1:]     swap_first_last x            repeat x -> x x
    binary  append x , y -> x y      prepend x , y -> y x
            remove_first x , y -> y  remove_second x , y -> x

Length = number of functions in the expression. Productivity: train on 1..8 functions, test on longer
expressions (here 9..16). The original data set is sampled from a PCFG; here an expression with
exactly ``n`` functions is drawn by choosing each function uniformly and splitting the remaining
functions uniformly between the two arguments of a binary function. Since ``repeat`` doubles its
argument, outputs of long expressions can be huge: expressions whose output exceeds
``max_output_length`` symbols are redrawn.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Sequence
from typing import Any

from pe_toolkit.tasks.arithmetic import KAZEMNEJAD
from pe_toolkit.tasks.base import Example, Task, check_int, check_range

UNARY: dict[str, Callable[[list[str]], list[str]]] = {
    "copy": lambda x: list(x),
    "reverse": lambda x: x[::-1],
    "shift": lambda x: x[1:] + x[:1],
    "echo": lambda x: x + x[-1:],
    "swap_first_last": lambda x: x[-1:] + x[1:-1] + x[:1] if len(x) > 1 else list(x),
    "repeat": lambda x: x + x,
}
BINARY: dict[str, Callable[[list[str], list[str]], list[str]]] = {
    "append": lambda x, y: x + y,
    "prepend": lambda x, y: y + x,
    "remove_first": lambda x, y: list(y),
    "remove_second": lambda x, y: list(x),
}
FUNCTIONS: tuple[str, ...] = (*UNARY, *BINARY)
SEPARATOR = ","


def pcfg_symbols(letters: int = 26, numbers: int = 20) -> list[str]:
    """The PCFG SET alphabet ``A1 .. A<numbers>, B1, ...`` (520 symbols by default)."""
    return [f"{c}{k}" for c in string.ascii_uppercase[:letters] for k in range(1, numbers + 1)]


def interpret_pcfg(tokens: str | Sequence[str]) -> list[str]:
    """Evaluate a PCFG SET expression.

    Example:
        >>> interpret_pcfg("append swap_first_last A1 B2 C3 , repeat D4")
        ['C3', 'B2', 'A1', 'D4', 'D4']

    Raises:
        ValueError: if ``tokens`` is not a well-formed expression.
    """
    toks = tokens.split() if isinstance(tokens, str) else list(tokens)

    def parse(pos: int) -> tuple[list[str], int]:
        if pos >= len(toks):
            raise ValueError(f"PCFG expression ends early: {' '.join(toks)!r}")
        head = toks[pos]
        if head in UNARY:
            arg, pos = parse(pos + 1)
            return UNARY[head](arg), pos
        if head in BINARY:
            left, pos = parse(pos + 1)
            if pos >= len(toks) or toks[pos] != SEPARATOR:
                raise ValueError(f"PCFG expression: {head} needs ', ' between its arguments: "
                                 f"{' '.join(toks)!r}")
            right, pos = parse(pos + 1)
            return BINARY[head](left, right), pos
        start = pos
        while pos < len(toks) and toks[pos] != SEPARATOR and toks[pos] not in FUNCTIONS:
            pos += 1
        if pos == start:
            raise ValueError(f"PCFG expression: expected a string at token {start}: {' '.join(toks)!r}")
        return toks[start:pos], pos

    value, end = parse(0)
    if end != len(toks):
        raise ValueError(f"PCFG expression has trailing tokens {toks[end:]!r}: {' '.join(toks)!r}")
    return value


class PcfgProductivityTask(Task):
    """PCFG SET, productivity split; length = number of functions (Hupkes et al. 2020).

    Format (the prompt is the expression itself, as in the reference)::

        prompt: append swap_first_last A1 B2 C3 , repeat D4
        answer: C3 B2 A1 D4 D4                                  (length 3)

    Args:
        train_lengths, test_lengths: inclusive ranges of the function count (default (1, 8), (9, 16)).
        string_lengths: inclusive range of the length of each argument string (default (2, 5)).
        max_output_length: expressions whose output is longer are redrawn (default 64).
        num_letters, num_numbers: alphabet ``A..`` x ``1..`` (default 26 x 20 = 520 symbols).
    """

    name = "pcfg_productivity"
    reference = "Hupkes et al. 2020, Compositionality Decomposed (PCFG SET), arXiv:1908.08351; " + KAZEMNEJAD
    default_train_lengths = (1, 8)
    default_test_lengths = (9, 16)

    def __init__(
        self,
        *,
        string_lengths: tuple[int, int] = (2, 5),
        max_output_length: int = 64,
        num_letters: int = 26,
        num_numbers: int = 20,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.string_lengths = check_range(self.name, "string_lengths", string_lengths, minimum=1)
        self.max_output_length = check_int(self.name, "max_output_length", max_output_length,
                                           minimum=self.string_lengths[1])
        self.num_letters = check_int(self.name, "num_letters", num_letters, minimum=1, maximum=26)
        self.num_numbers = check_int(self.name, "num_numbers", num_numbers, minimum=1)
        self.alphabet = pcfg_symbols(self.num_letters, self.num_numbers)

    def _expression(self, rng: random.Random, n: int) -> list[str]:
        if n == 0:
            return [rng.choice(self.alphabet) for _ in range(rng.randint(*self.string_lengths))]
        f = rng.choice(FUNCTIONS)
        if f in UNARY:
            return [f, *self._expression(rng, n - 1)]
        k = rng.randint(0, n - 1)
        return [f, *self._expression(rng, k), SEPARATOR, *self._expression(rng, n - 1 - k)]

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        for _ in range(1000):
            expr = self._expression(rng, length)
            out = interpret_pcfg(expr)
            if len(out) <= self.max_output_length:
                return self.make(expr)
        raise RuntimeError(f"{self.name}: no expression with {length} functions and an output of at most "
                           f"{self.max_output_length} symbols in 1000 draws; raise max_output_length")

    def make(self, expression: str | Sequence[str]) -> Example:
        """The example for a PCFG SET ``expression``."""
        toks = expression.split() if isinstance(expression, str) else list(expression)
        out = interpret_pcfg(toks)
        return Example(prompt=toks, answer=out, length=sum(t in FUNCTIONS for t in toks))

    def _tokens(self) -> list[str]:
        return [*FUNCTIONS, SEPARATOR, *self.alphabet]
