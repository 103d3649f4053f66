"""LEGO (Zhang et al. 2022) as used by Kazemnejad et al. 2023 (arXiv:2305.19466).

A chain of ``n`` variables: the first is assigned ``+1`` or ``-1``, each next one is ``+`` or ``-`` the
previous one. The query is a variable from the second half of the chain (``make_lego_dataset.py``:
indices ``ceil(n/2) .. n-1``); length = ``n``. ``lego_permuted`` shuffles the clauses.

The scratchpad resolves the chain from its head up to the queried variable. The reference disables
the variable-update component for LEGO; here it is defined as the resolved binding ``b = -1`` so that
all 32 formats exist.
"""

from __future__ import annotations

import random
import string
from typing import Any

from pe_toolkit.tasks.arithmetic import KAZEMNEJAD
from pe_toolkit.tasks.base import Example
from pe_toolkit.tasks.scratchpad import ScratchpadMarkers, ScratchpadStep, ScratchpadTask

VARIABLES: tuple[str, ...] = tuple(string.ascii_lowercase)
_VALUE = {1: "+1", -1: "-1"}


class LegoTask(ScratchpadTask):
    """Resolve a chain of sign assignments (LEGO); length = number of variables (at most 26).

    Format (``lego``)::

        prompt: If a = -1 , b = - a , c = + b . Then , what is the value of c ?
        answer: The answer is +1 .

    With ``scratchpad="icovr"`` the answer starts with
    ``For variable a We have : == -1 . and currently , a = -1 . So , the rest is : b = - a , c = + b
    ; Next , For variable b We have : - a = - -1 == +1 ...`` (the head clause has an empty
    computation).

    Args:
        permuted: shuffle the clauses (``lego_permuted``, split ``len_tr8_ts16_perm``).
        scratchpad: a :class:`ScratchpadFormat`, a mask such as ``"icovr"`` / ``"10110"``, or None.
    """

    reference = KAZEMNEJAD + "; Zhang et al. 2022, Unveiling Transformers with LEGO, arXiv:2206.04301"
    default_train_lengths = (4, 8)
    default_test_lengths = (9, 16)
    min_length = 2
    max_length = len(VARIABLES)
    markers = ScratchpadMarkers(input="For variable")

    def __init__(self, *, permuted: bool = False, **kwargs: Any) -> None:
        if not isinstance(permuted, bool):
            raise TypeError(f"lego: permuted must be a bool, got {type(permuted).__name__} ({permuted!r})")
        self.permuted = permuted
        self.name = "lego_permuted" if permuted else "lego"
        super().__init__(**kwargs)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        chain = rng.sample(VARIABLES, length)
        values = [rng.choice((1, -1)) for _ in range(length)]
        query = rng.randint((length + 1) // 2, length - 1)
        order = list(range(length))
        if self.permuted:
            rng.shuffle(order)
        return self.make(chain, values, chain[query], order)

    def make(
        self, chain: list[str], values: list[int], query: str, order: list[int] | None = None
    ) -> Example:
        """The example for variables ``chain`` with values ``values`` (``+1``/``-1``), asking ``query``.

        ``order`` permutes the clauses in the prompt (default: chain order).
        """
        n = len(chain)
        if n < 2 or len(values) != n or len(set(chain)) != n or any(v not in (1, -1) for v in values):
            raise ValueError(f"{self.name}: chain must hold >= 2 distinct variables with one +1/-1 value "
                             f"each, got chain={chain!r}, values={values!r}")
        if query not in chain:
            raise ValueError(f"{self.name}: query must be one of {chain}, got {query!r}")
        order = list(range(n)) if order is None else list(order)
        if sorted(order) != list(range(n)):
            raise ValueError(f"{self.name}: order must be a permutation of range({n}), got {order!r}")
        value_of = dict(zip(chain, values))
        clauses = {chain[0]: f"{chain[0]} = {_VALUE[values[0]]}"}
        for i in range(1, n):
            sign = "+" if values[i] == values[i - 1] else "-"
            clauses[chain[i]] = f"{chain[i]} = {sign} {chain[i - 1]}"
        shown = [clauses[chain[k]] for k in order]
        steps, remaining = [], list(shown)
        for i in range(chain.index(query) + 1):
            var = chain[i]
            if i == 0:
                computation = ""
            else:
                sign, prev = clauses[var].split()[2:]
                computation = f"{sign} {prev} = {sign} {_VALUE[value_of[prev]]}"
            remaining = [c for c in remaining if c.split()[0] != var]
            steps.append(ScratchpadStep(
                input=var,
                computation=computation,
                output=_VALUE[value_of[var]],
                variables=f"{var} = {_VALUE[value_of[var]]}",
                remaining=" , ".join(remaining),
            ))
        return self._example(
            prompt=f"If {' , '.join(shown)} . Then , what is the value of {query} ?",
            steps=steps,
            final=f"The answer is {_VALUE[value_of[query]]} .",
            length=n,
            meta={"chain": list(chain), "values": list(values), "query": query, "clauses": shown,
                  "result": value_of[query]},
        )

    def _tokens(self) -> list[str]:
        return ["If", "=", "+", "-", "+1", "-1", ",", ".", "Then", "what", "is", "the", "value", "of", "?",
                "The", "answer", *VARIABLES, *self._scratchpad_tokens()]
