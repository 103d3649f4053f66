"""Arithmetic tasks of Kazemnejad et al. 2023 (arXiv:2305.19466): addition, polynomial, summation, parity.

All four support the unified scratchpad (:mod:`pe_toolkit.tasks.scratchpad`). Numbers are spelled one
digit per token, as in the reference implementation (``number_to_string``). Default splits are the
paper's scratchpad setting: train on lengths 4..8 (3..8 for parity), test on 9..16.
"""

from __future__ import annotations

import random
from typing import Any

from pe_toolkit.tasks.base import DIGITS, Example, check_int, spell
from pe_toolkit.tasks.scratchpad import ScratchpadMarkers, ScratchpadStep, ScratchpadTask

KAZEMNEJAD = ("Kazemnejad et al. 2023, The Impact of Positional Encoding on Length Generalization in "
              "Transformers, arXiv:2305.19466")
_ANSWER_WORDS = ["The", "answer", "is", "."]


class AdditionTask(ScratchpadTask):
    """Multi-digit addition; length = digits of the longer operand (Kazemnejad et al. 2023, App. D.1).

    Given a length ``m``, one operand (chosen at random) has exactly ``m`` digits and the other between
    ``min_digits`` and ``m`` digits (uniformly). With the defaults, train has both operands in 4..8
    digits and test has at least one operand in 9..16 digits, as in the reference ``len_tr8_ts16``.

    Format (``scratchpad=None``)::

        prompt: Compute 5 7 + 6 8 ?
        answer: The answer is 1 2 5 .

    With ``scratchpad="icovr"`` the answer starts with one step per column, right to left, plus a step
    for a final carry; the first step of ``57 + 68`` is
    ``For digits 7 , 8 We have : ( 7 + 8 + carry ) % 1 0 = ( 1 5 + 0 ) % 1 0 = 1 5 % 1 0 == 5
    . and currently , carry : 1 5 // 1 0 = 1 . So , the rest is : 5 + 6``.

    Args:
        train_lengths, test_lengths: inclusive ranges of the longer operand's digit count.
        min_digits: fewest digits of the shorter operand (default: ``train_lengths[0]``).
        scratchpad: a :class:`ScratchpadFormat`, a mask such as ``"icovr"`` / ``"10110"``, or None.
    """

    name = "addition"
    reference = KAZEMNEJAD
    default_train_lengths = (4, 8)
    default_test_lengths = (9, 16)
    markers = ScratchpadMarkers(input="For digits")

    def __init__(self, *, min_digits: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_digits = self.train_lengths[0] if min_digits is None else check_int(
            self.name, "min_digits", min_digits, minimum=1
        )

    @staticmethod
    def _number(rng: random.Random, digits: int) -> int:
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return rng.randint(low, 10**digits - 1)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        other = rng.randint(min(self.min_digits, length), length)
        a, b = self._number(rng, length), self._number(rng, other)
        if rng.random() < 0.5:
            a, b = b, a
        return self.make(a, b)

    def make(self, a: int, b: int) -> Example:
        """The example for ``a + b`` (non-negative ints)."""
        check_int(self.name, "a", a, minimum=0)
        check_int(self.name, "b", b, minimum=0)
        width = max(len(str(a)), len(str(b)))
        da, db = [int(d) for d in str(a).zfill(width)], [int(d) for d in str(b).zfill(width)]
        steps, carry = [], 0
        for i in range(width - 1, -1, -1):
            x, y = da[i], db[i]
            total = x + y + carry
            # int(...) drops the zero padding of the shorter operand, as the reference does.
            rest_a = spell(int("".join(map(str, da[:i])))) if i else ""
            rest_b = spell(int("".join(map(str, db[:i])))) if i else ""
            steps.append(ScratchpadStep(
                input=f"{x} , {y}",
                computation=f"( {x} + {y} + carry ) % 1 0 = ( {spell(x + y)} + {carry} ) % 1 0 "
                            f"= {spell(total)} % 1 0",
                output=str(total % 10),
                variables=f"carry : {spell(total)} // 1 0 = {total // 10}",
                remaining=f"{rest_a} + {rest_b}",
            ))
            carry = total // 10
        if carry:
            steps.append(ScratchpadStep(
                input="0 , 0",
                computation=f"( 0 + 0 + carry ) % 1 0 = ( 0 + {carry} ) % 1 0 = {carry} % 1 0",
                output=str(carry),
                variables=f"carry : {carry} // 1 0 = 0",
                remaining="+",
            ))
        return self._example(
            prompt=f"Compute {spell(a)} + {spell(b)} ?",
            steps=steps,
            final=f"The answer is {spell(a + b)} .",
            length=width,
            meta={"a": a, "b": b, "result": a + b},
        )

    def _tokens(self) -> list[str]:
        return ["Compute", "+", "?", *_ANSWER_WORDS, *DIGITS, *self._scratchpad_tokens(),
                ",", "(", ")", "%", "=", "//", "carry"]


class PolynomialTask(ScratchpadTask):
    """Polynomial evaluation modulo 10; length = number of terms (Kazemnejad et al. 2023).

    Each term is ``c * x ** d`` with ``c ~ U{-3..3}``, ``d ~ U{0..3}``, and ``x ~ U{-2..2}`` per
    instance (``make_poly_dataset.py``); the answer is the value modulo ``modulus`` (Python's ``%``,
    so it is in ``0..modulus-1``).

    Format::

        prompt: Evaluate at x = 2 in 3 * x ** 2 + - 1 * x ** 0 ?
        answer: The answer is 1 .                     (3*4 - 1 = 11 -> 1)

    Scratchpad steps go left to right; for the first term above:
    ``For term 3 * x ** 2 We have : 3 * 2 ** 2 = 3 * 4 == 1 2 . and currently ,
    sum : ( 0 + 1 2 ) % 1 0 = 2 . So , the rest is : - 1 * x ** 0``.
    """

    name = "polynomial"
    reference = KAZEMNEJAD
    default_train_lengths = (4, 8)
    default_test_lengths = (9, 16)
    markers = ScratchpadMarkers(input="For term")

    def __init__(self, *, modulus: int = 10, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.modulus = check_int(self.name, "modulus", modulus, minimum=2)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        coeffs = [rng.randint(-3, 3) for _ in range(length)]
        degrees = [rng.randint(0, 3) for _ in range(length)]
        return self.make(coeffs, degrees, rng.randint(-2, 2))

    def make(self, coeffs: list[int], degrees: list[int], x: int) -> Example:
        """The example for ``sum(c * x ** d)``."""
        if len(coeffs) != len(degrees) or not coeffs:
            raise ValueError(f"{self.name}: coeffs and degrees must be non-empty and of equal length, "
                             f"got {len(coeffs)} and {len(degrees)}")
        terms = [f"{spell(c)} * x ** {spell(d)}" for c, d in zip(coeffs, degrees)]
        m, steps, acc = spell(self.modulus), [], 0
        for i, (c, d) in enumerate(zip(coeffs, degrees)):
            value = c * x**d
            new = (acc + value) % self.modulus
            steps.append(ScratchpadStep(
                input=terms[i],
                computation=f"{spell(c)} * {spell(x)} ** {spell(d)} = {spell(c)} * {spell(x ** d)}",
                output=spell(value),
                variables=f"sum : ( {spell(acc)} + {spell(value)} ) % {m} = {spell(new)}",
                remaining=" + ".join(terms[i + 1 :]),
            ))
            acc = new
        return self._example(
            prompt=f"Evaluate at x = {spell(x)} in {' + '.join(terms)} ?",
            steps=steps,
            final=f"The answer is {spell(acc)} .",
            length=len(coeffs),
            meta={"coeffs": list(coeffs), "degrees": list(degrees), "x": x, "result": acc},
        )

    def _tokens(self) -> list[str]:
        return ["Evaluate", "at", "x", "=", "in", "+", "-", "*", "**", "?", *_ANSWER_WORDS, *DIGITS,
                *self._scratchpad_tokens(), "(", ")", "%", "sum", ":"]


class SummationTask(ScratchpadTask):
    """Sum of digits modulo 10; length = number of summands (Kazemnejad et al. 2023).

    Summands are ``U{1..9}`` (``make_sum_dataset.py``).

    Format::

        prompt: Compute : 3 + 3 + 1 + 8 .
        answer: The answer is 5 .                     (15 mod 10)

    First scratchpad step: ``For number 3 We have : 3 + sum = 3 + 0 = == 3 . and currently ,
    sum : 3 % 1 0 = 3 . So , the rest is : 3 + 1 + 8``.
    """

    name = "summation"
    reference = KAZEMNEJAD
    default_train_lengths = (4, 8)
    default_test_lengths = (9, 16)
    markers = ScratchpadMarkers(input="For number")

    def __init__(self, *, modulus: int = 10, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.modulus = check_int(self.name, "modulus", modulus, minimum=2)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        return self.make([rng.randint(1, 9) for _ in range(length)])

    def make(self, values: list[int]) -> Example:
        """The example for ``sum(values) % modulus``."""
        if not values:
            raise ValueError(f"{self.name}: values must not be empty")
        m, steps, acc = spell(self.modulus), [], 0
        for i, v in enumerate(values):
            new = (acc + v) % self.modulus
            steps.append(ScratchpadStep(
                input=spell(v),
                computation=f"{spell(v)} + sum = {spell(v)} + {spell(acc)} =",
                output=spell(v + acc),
                variables=f"sum : {spell(v + acc)} % {m} = {spell(new)}",
                remaining=" + ".join(spell(w) for w in values[i + 1 :]),
            ))
            acc = new
        return self._example(
            prompt=f"Compute : {' + '.join(spell(v) for v in values)} .",
            steps=steps,
            final=f"The answer is {spell(acc)} .",
            length=len(values),
            meta={"values": list(values), "result": acc},
        )

    def _tokens(self) -> list[str]:
        return ["Compute", ":", "+", *_ANSWER_WORDS, *DIGITS, *self._scratchpad_tokens(), "=", "%", "sum"]


class ParityTask(ScratchpadTask):
    """Is the number of 1s even? Length = number of bits (Kazemnejad et al. 2023).

    Format::

        prompt: Is the number of 1 's even in the sequence [ 0 , 1 , 1 ] ?
        answer: The answer is Yes .

    Scratchpad steps keep the running parity (``**`` stands for XOR, as in the reference);
    first step above: ``For bit 0 We have : 0 ** par = 0 ** 0 == 0 . and currently , par : 0 .
    So , the rest is : [ 1 , 1 ]``.
    """

    name = "parity"
    reference = KAZEMNEJAD
    default_train_lengths = (3, 8)
    default_test_lengths = (9, 16)
    markers = ScratchpadMarkers(input="For bit")

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        return self.make([rng.randint(0, 1) for _ in range(length)])

    def make(self, bits: list[int]) -> Example:
        """The example for the bit list ``bits``."""
        if not bits or any(b not in (0, 1) for b in bits):
            raise ValueError(f"{self.name}: bits must be a non-empty list of 0/1, got {bits!r}")
        steps, par = [], 0
        for i, b in enumerate(bits):
            new = b ^ par
            steps.append(ScratchpadStep(
                input=str(b),
                computation=f"{b} ** par = {b} ** {par}",
                output=str(new),
                variables=f"par : {new}",
                remaining="[ " + " , ".join(str(v) for v in bits[i + 1 :]) + " ]",
            ))
            par = new
        return self._example(
            prompt="Is the number of 1 's even in the sequence [ " + " , ".join(map(str, bits)) + " ] ?",
            steps=steps,
            final=f"The answer is {'Yes' if par == 0 else 'No'} .",
            length=len(bits),
            meta={"bits": list(bits), "result": par == 0},
        )

    def _tokens(self) -> list[str]:
        return ["Is", "the", "number", "of", "'s", "even", "in", "sequence", "[", ",", "]", "?",
                *_ANSWER_WORDS,
                "Yes", "No", "0", "1", *self._scratchpad_tokens(), "**", "par", "=", ":"]
