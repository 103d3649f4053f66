"""Reverse tasks of Kazemnejad et al. 2023 (arXiv:2305.19466), length = input tokens.

=================  ===========  ======================  ==============================
registry name      reference    prompt                  answer
=================  ===========  ======================  ==============================
``reverse``        ``mc``       ``Reverse : s7 s1 s9``  ``s9 s1 s7``
``reverse_x2``     ``mc2x``     ``Reverse : s7 s1 s9``  ``s9 s1 s7 [NEXT] s9 s1 s7``
``reverse_copy``   ``mcrv``     ``Reverse : s7 s1 s9``  ``s9 s1 s7 [NEXT] s7 s1 s9``
=================  ===========  ======================  ==============================
"""

from __future__ import annotations

import random
from typing import Any

from pe_toolkit.tasks.arithmetic import KAZEMNEJAD
from pe_toolkit.tasks.base import Example, Task, check_choice, check_int, symbols
from pe_toolkit.tasks.copy import NEXT

REVERSE_VARIANTS: tuple[str, ...] = ("plain", "x2", "copy")


class ReverseTask(Task):
    """Reverse an input sequence (Kazemnejad et al. 2023, ``make_reverse_dataset.py``).

    Example (``variant="copy"``, i.e. ``reverse_copy``, length 3)::

        prompt: Reverse : s7 s1 s9
        answer: s9 s1 s7 [NEXT] s7 s1 s9

    Args:
        variant: ``plain`` (``reverse``), ``x2`` (``reverse_x2``) or ``copy`` (``reverse_copy``).
        num_symbols: alphabet size (>= 2; default 100, as in the reference).
        train_lengths, test_lengths: inclusive ranges of the input length (default 4..20 / 21..40).
    """

    reference = KAZEMNEJAD
    default_train_lengths = (4, 20)
    default_test_lengths = (21, 40)

    def __init__(self, *, variant: str = "plain", num_symbols: int = 100, **kwargs: Any) -> None:
        self.variant = check_choice("reverse", "variant", variant, REVERSE_VARIANTS)
        self.name = "reverse" if variant == "plain" else f"reverse_{variant}"
        self.num_symbols = check_int(self.name, "num_symbols", num_symbols, minimum=2)
        self.alphabet = symbols(self.num_symbols, "s")
        super().__init__(**kwargs)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        return self.make([rng.choice(self.alphabet) for _ in range(length)])

    def make(self, seq: list[str]) -> Example:
        """The example for input ``seq``."""
        if not seq:
            raise ValueError(f"{self.name}: seq must not be empty")
        rev = list(reversed(seq))
        answer = {"plain": rev, "x2": [*rev, NEXT, *rev], "copy": [*rev, NEXT, *seq]}[self.variant]
        return Example(prompt=["Reverse", ":", *seq], answer=answer, length=len(seq))

    def _tokens(self) -> list[str]:
        return ["Reverse", ":"] + ([] if self.variant == "plain" else [NEXT]) + self.alphabet
