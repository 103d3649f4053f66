"""Sorting of Kazemnejad et al. 2023 (arXiv:2305.19466): single-token and multi-digit lists.

Length = number of list items. The scratchpad is the reference's selection sort: at step ``i`` the
input is the item at the front of the unsorted portion, the output is the minimum of the unsorted
portion (which is swapped to the front), and the remaining input is the new unsorted portion.

The reference disables the variable-update component for sorting; so that all 32 formats exist for
every scratchpad task, here it is defined as the sorted prefix, ``sorted : [ ... ]``.
"""

from __future__ import annotations

import random
import string
from typing import Any

from pe_toolkit.tasks.arithmetic import KAZEMNEJAD
from pe_toolkit.tasks.base import DIGITS, Example, check_int, check_range, spell
from pe_toolkit.tasks.scratchpad import ScratchpadMarkers, ScratchpadStep, ScratchpadTask

# 50 single-character tokens whose ASCII order is the sort order (A < ... < Z < a < ... < x).
SINGLE_TOKEN_ALPHABET: tuple[str, ...] = tuple(string.ascii_uppercase + string.ascii_lowercase[:24])


class _SortTask(ScratchpadTask):
    default_train_lengths = (4, 8)
    default_test_lengths = (9, 16)
    reference = KAZEMNEJAD
    markers = ScratchpadMarkers(input="For", output="is :", remaining="So , the unsorted portion is :")

    def _render(self, item: Any) -> str:
        raise NotImplementedError

    def _key(self, item: Any) -> Any:
        raise NotImplementedError

    def _list(self, items: list[Any]) -> str:
        return "[ " + " , ".join(self._render(x) for x in items) + " ]"

    def make(self, items: list[Any]) -> Example:
        """The example for the list ``items``."""
        if not items:
            raise ValueError(f"{self.name}: items must not be empty")
        work, steps = list(items), []
        for i in range(len(work)):
            front = work[i]
            j = min(range(i, len(work)), key=lambda k: self._key(work[k]))
            work[i], work[j] = work[j], work[i]
            steps.append(ScratchpadStep(
                input=self._render(front),
                computation="The minimum of the unsorted portion",
                output=self._render(work[i]),
                variables="sorted : " + self._list(work[: i + 1]),
                remaining=self._list(work[i + 1 :]),
            ))
        result = sorted(items, key=self._key)
        return self._example(
            prompt=f"Sort the following list {self._list(items)} .",
            steps=steps,
            final=f"The sorted list is {self._list(result)} .",
            length=len(items),
            meta={"items": list(items), "result": result},
        )

    def _tokens(self) -> list[str]:
        return ["Sort", "the", "following", "list", "[", ",", "]", ".", "The", "sorted", "is",
                *self._scratchpad_tokens(), "minimum", "of", "unsorted", "portion", ":"]


class SortSingleTokenTask(_SortTask):
    """Sort a list of single tokens from a 50-token alphabet (``len_sngd_tr8_ts16``).

    The alphabet is ``A..Z a..x``, ordered as listed (ASCII order). Items are drawn with replacement.

    Format::

        prompt: Sort the following list [ M , E , F , F , O ] .
        answer: The sorted list is [ E , F , F , M , O ] .

    First scratchpad step (``icovr``): ``For M We have : The minimum of the unsorted portion is : E
    . and currently , sorted : [ E ] . So , the unsorted portion is : [ M , F , F , O ]``.

    Args:
        alphabet_size: how many tokens of the alphabet to use (2..50, default 50).
    """

    name = "sort_single"

    def __init__(self, *, alphabet_size: int = 50, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alphabet_size = check_int(self.name, "alphabet_size", alphabet_size, minimum=2,
                                       maximum=len(SINGLE_TOKEN_ALPHABET))
        self.alphabet = SINGLE_TOKEN_ALPHABET[: self.alphabet_size]

    def _render(self, item: str) -> str:
        return item

    def _key(self, item: str) -> int:
        return SINGLE_TOKEN_ALPHABET.index(item)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        return self.make([rng.choice(self.alphabet) for _ in range(length)])

    def _tokens(self) -> list[str]:
        return super()._tokens() + list(self.alphabet)


class SortMultiDigitTask(_SortTask):
    """Sort a list of multi-digit numbers, spelled digit by digit (``len_mltd_tr8_ts16``).

    Numbers are ``U{low..high}``, by default ``[10, 10000)`` as in the reference builder.

    Format::

        prompt: Sort the following list [ 2 4 6 8 , 8 8 1 , 4 1 2 5 ] .
        answer: The sorted list is [ 8 8 1 , 2 4 6 8 , 4 1 2 5 ] .

    Args:
        value_range: inclusive ``(low, high)`` of the numbers (default ``(10, 9999)``).
    """

    name = "sort_multi"

    def __init__(self, *, value_range: tuple[int, int] = (10, 9999), **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value_range = check_range(self.name, "value_range", value_range, minimum=0)

    def _render(self, item: int) -> str:
        return spell(item)

    def _key(self, item: int) -> int:
        return item

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        return self.make([rng.randint(*self.value_range) for _ in range(length)])

    def _tokens(self) -> list[str]:
        return super()._tokens() + list(DIGITS)
