"""Copy tasks of Kazemnejad et al. 2023 (arXiv:2305.19466): five variants, length = input tokens.

Tokens come from an alphabet of ``num_symbols`` opaque symbols ``s0 s1 ...`` (the reference draws
them from the t5 vocabulary items that tokenize to exactly one token; 100 of them for the random
variants). Default split: train 4..20, test 21..40 (``*_tr20_ts40``).

=================  ===========  =======================================  ==========================
registry name      reference    prompt                                   answer
=================  ===========  =======================================  ==========================
``copy_repeat``    ``rsc``      ``Copy : s7 s7 s7``                      ``s7 s7 s7``
``copy_replace``   ``rdc``      ``Replace s7 with s2 in s7 s7 s7``       ``s2 s2 s2``
``copy_random``    ``cmc``      ``Copy : s7 s1 s9``                      ``s7 s1 s9``
``copy_repeat_x2`` ``rsc2x``    ``Copy : s7 s7 s7``                      ``s7 s7 s7 s7 s7 s7``
``copy_random_x2`` ``cmc2x``    ``Copy : s7 s1 s9``                      ``s7 s1 s9 [NEXT] s7 s1 s9``
=================  ===========  =======================================  ==========================
"""

from __future__ import annotations

import random
from typing import Any

from pe_toolkit.tasks.arithmetic import KAZEMNEJAD
from pe_toolkit.tasks.base import Example, Task, check_choice, check_int, symbols

NEXT = "[NEXT]"
COPY_VARIANTS: tuple[str, ...] = ("repeat", "replace", "random", "repeat_x2", "random_x2")


class CopyTask(Task):
    """Copy an input sequence (Kazemnejad et al. 2023, Table 1, ``make_copy_dataset.py``).

    Example (``variant="random_x2"``, length 3)::

        prompt: Copy : s7 s1 s9
        answer: s7 s1 s9 [NEXT] s7 s1 s9

    Args:
        variant: one of ``repeat``, ``replace``, ``random``, ``repeat_x2``, ``random_x2``.
        num_symbols: alphabet size (>= 2; default 100).
        train_lengths, test_lengths: inclusive ranges of the input length.
    """

    reference = KAZEMNEJAD
    default_train_lengths = (4, 20)
    default_test_lengths = (21, 40)

    def __init__(self, *, variant: str = "random", num_symbols: int = 100, **kwargs: Any) -> None:
        self.variant = check_choice("copy", "variant", variant, COPY_VARIANTS)
        self.name = f"copy_{variant}"
        self.num_symbols = check_int(self.name, "num_symbols", num_symbols, minimum=2)
        self.alphabet = symbols(self.num_symbols, "s")
        super().__init__(**kwargs)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        if self.variant in ("repeat", "repeat_x2"):
            seq = [rng.choice(self.alphabet)] * length
        elif self.variant == "replace":
            source, target = rng.sample(self.alphabet, 2)
            return self.make([source] * length, target=target)
        else:
            seq = [rng.choice(self.alphabet) for _ in range(length)]
        return self.make(seq)

    def make(self, seq: list[str], *, target: str | None = None) -> Example:
        """The example for input ``seq`` (``target`` = the replacement token of ``copy_replace``)."""
        if not seq:
            raise ValueError(f"{self.name}: seq must not be empty")
        if target is not None and self.variant != "replace":
            raise ValueError(f"{self.name}: target is only for copy_replace, got target={target!r}")
        if self.variant == "replace":
            if target is None or len(set(seq)) != 1:
                raise ValueError(f"{self.name}: needs a constant seq and a target token, "
                                 f"got {seq!r}, {target!r}")
            return Example(prompt=["Replace", seq[0], "with", target, "in", *seq], answer=[target] * len(seq),
                           length=len(seq), meta={"source": seq[0], "target": target})
        answer = {"repeat": seq, "random": seq, "repeat_x2": seq + seq, "random_x2": [*seq, NEXT, *seq]}
        return Example(prompt=["Copy", ":", *seq], answer=list(answer[self.variant]), length=len(seq))

    def _tokens(self) -> list[str]:
        extra = {"replace": ["Replace", "with", "in"], "random_x2": ["Copy", ":", NEXT]}
        return extra.get(self.variant, ["Copy", ":"]) + self.alphabet
