"""The unified scratchpad of Kazemnejad et al. 2023 (arXiv:2305.19466, Section 6): 32 formats.

Every scratchpad-capable task (addition, summation, parity, sort, polynomial evaluation, LEGO) solves
its instance in *steps*; each step has five components, any subset of which is rendered:

=====  ===================  ==========================================================
 key    component            addition, step for the digits 7 and 8 with no carry in
=====  ===================  ==========================================================
 i      Input                ``For digits 7 , 8``
 c      Computation          ``We have : ( 7 + 8 + carry ) % 1 0 = ( 1 5 + 0 ) % 1 0 = 1 5 % 1 0``
 o      Output               ``== 5``
 v      Variable update      ``. and currently , carry : 1 5 // 1 0 = 1 .``
 r      Remaining input      ``So , the rest is : 5 + 6``
=====  ===================  ==========================================================

A scratchpad is ``Thinking step by step : <step> ; Next , <step> ... . Thus ,`` followed by the
task's final answer (``The answer is 1 2 5 .``). The marker strings are those of the reference
implementation (``McGill-NLP/length-generalization``, ``*_instance_processor.py``), written with
every token separated by a space, and numbers spelled digit by digit, so that
``text.split()`` is the token sequence and :func:`parse_scratchpad` inverts :func:`render_scratchpad`
exactly for all 32 formats.

A format is written as a 5-character mask over ``icovr`` (``"icovr"`` = all, ``"ic_v_"``,
``"i"`` = input only, ``""`` = no component) or as 5 bits (``"11010"``); ``scratchpad=None`` means no
scratchpad at all (the answer is the final answer only).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from pe_toolkit.tasks.base import Example, Task

COMPONENTS: tuple[str, ...] = ("input", "computation", "output", "variables", "remaining")
COMPONENT_KEYS: str = "icovr"


class ScratchpadParseError(ValueError):
    """A token sequence is not a scratchpad of the expected format."""


@dataclass(frozen=True)
class ScratchpadFormat:
    """Which of the five step components are rendered (Kazemnejad et al. 2023, ``ufs__i_c_o_v_r``)."""

    input: bool = True
    computation: bool = True
    output: bool = True
    variables: bool = True
    remaining: bool = True

    @classmethod
    def parse(cls, value: ScratchpadFormat | str) -> ScratchpadFormat:
        """A format from an instance, a mask over ``icovr`` (``"ic_v_"``, ``"icv"``) or bits (``"11010"``).

        Raises:
            TypeError: if ``value`` is neither a ScratchpadFormat nor a str.
            ValueError: on an unknown letter, a repeated letter or a bit string of the wrong length.
        """
        if isinstance(value, ScratchpadFormat):
            return value
        if not isinstance(value, str):
            raise TypeError(
                f"scratchpad must be a ScratchpadFormat, a str mask like 'icovr' or '10110', or None; "
                f"got {type(value).__name__} ({value!r})"
            )
        text = value.strip().lower()
        if text and set(text) <= {"0", "1"}:
            if len(text) != 5:
                raise ValueError(f"scratchpad bit mask must have 5 bits (i c o v r), got {value!r}")
            return cls(*(bit == "1" for bit in text))
        letters = [ch for ch in text if ch not in "_-."]
        unknown = sorted(set(letters) - set(COMPONENT_KEYS))
        if unknown:
            raise ValueError(
                f"scratchpad mask {value!r} has unknown letters {unknown}; allowed: i (input), "
                f"c (computation), o (output), v (variable update), r (remaining input), '_' / '-' for off, "
                f"or 5 bits such as '10110'"
            )
        if len(letters) != len(set(letters)):
            raise ValueError(f"scratchpad mask {value!r} repeats a letter")
        return cls(*(key in letters for key in COMPONENT_KEYS))

    @classmethod
    def all(cls) -> list[ScratchpadFormat]:
        """The 32 formats, from ``"_____"`` to ``"icovr"`` (bit order i c o v r)."""
        return [cls(*bits) for bits in itertools.product((False, True), repeat=5)]

    @property
    def flags(self) -> tuple[bool, ...]:
        return tuple(getattr(self, name) for name in COMPONENTS)

    @property
    def mask(self) -> str:
        """``"ic_v_"``-style mask."""
        return "".join(key if on else "_" for key, on in zip(COMPONENT_KEYS, self.flags))

    @property
    def bits(self) -> str:
        """``"11010"``-style bit string."""
        return "".join("1" if on else "0" for on in self.flags)

    def __str__(self) -> str:
        return self.mask


@dataclass(frozen=True)
class ScratchpadStep:
    """One step: five components, each a space-separated token string (``None`` = not rendered).

    Whitespace is normalised on construction, so equal token sequences give equal steps.
    """

    input: str | None = None
    computation: str | None = None
    output: str | None = None
    variables: str | None = None
    remaining: str | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                if not isinstance(value, str):
                    raise TypeError(f"ScratchpadStep.{f.name} must be a str or None, "
                                    f"got {type(value).__name__}")
                object.__setattr__(self, f.name, " ".join(value.split()))

    def project(self, fmt: ScratchpadFormat) -> ScratchpadStep:
        """The step as it reads back from a scratchpad of format ``fmt`` (off components -> None)."""
        return ScratchpadStep(*(getattr(self, n) if on else None for n, on in zip(COMPONENTS, fmt.flags)))


@dataclass(frozen=True)
class ScratchpadMarkers:
    """The marker strings of one task (space-separated tokens)."""

    input: str
    bos: str = "Thinking step by step :"
    eos: str = ". Thus ,"
    separator: str = "; Next ,"
    computation: str = "We have :"
    output: str = "=="
    variables_begin: str = ". and currently ,"
    variables_end: str = "."
    remaining: str = "So , the rest is :"

    def tokens(self) -> list[str]:
        """Every token of every marker."""
        return [tok for f in fields(self) for tok in getattr(self, f.name).split()]

    def component_markers(self) -> list[tuple[list[str], list[str]]]:
        """``(begin, end)`` token lists for the five components, in ``icovr`` order."""
        return [
            (self.input.split(), []),
            (self.computation.split(), []),
            (self.output.split(), []),
            (self.variables_begin.split(), self.variables_end.split()),
            (self.remaining.split(), []),
        ]


def _find(tokens: Sequence[str], pattern: Sequence[str], start: int = 0) -> int:
    """Index of the first occurrence of ``pattern`` in ``tokens[start:]``, or -1."""
    n = len(pattern)
    for i in range(start, len(tokens) - n + 1):
        if list(tokens[i : i + n]) == list(pattern):
            return i
    return -1


def _split(tokens: Sequence[str], separator: Sequence[str]) -> list[list[str]]:
    parts, start = [], 0
    while True:
        i = _find(tokens, separator, start)
        if i < 0:
            parts.append(list(tokens[start:]))
            return parts
        parts.append(list(tokens[start:i]))
        start = i + len(separator)


def render_scratchpad(
    steps: Sequence[ScratchpadStep], fmt: ScratchpadFormat, markers: ScratchpadMarkers
) -> list[str]:
    """Tokens of the scratchpad ``bos step (separator step)* eos`` with the components of ``fmt``.

    Raises:
        ValueError: if there is no step, or a component that ``fmt`` renders is ``None``.
    """
    if len(steps) == 0:
        raise ValueError("render_scratchpad: steps must not be empty")
    out = markers.bos.split()
    for k, step in enumerate(steps):
        if k:
            out += markers.separator.split()
        for name, on, (begin, end) in zip(COMPONENTS, fmt.flags, markers.component_markers()):
            if on:
                content = getattr(step, name)
                if content is None:
                    raise ValueError(f"render_scratchpad: step {k} has no {name!r} but format "
                                     f"{fmt.mask!r} renders it")
                out += begin + content.split() + end
    return out + markers.eos.split()


def parse_scratchpad(
    tokens: Sequence[str], fmt: ScratchpadFormat, markers: ScratchpadMarkers
) -> list[ScratchpadStep]:
    """Inverse of :func:`render_scratchpad`: the steps of ``tokens`` (which may continue past ``eos``).

    Components that ``fmt`` does not render come back as ``None``, so
    ``parse_scratchpad(render_scratchpad(s, fmt, m), fmt, m) == [x.project(fmt) for x in s]``.

    Raises:
        ScratchpadParseError: if ``tokens`` does not start with ``bos``, has no ``eos``, or a step lacks
            a component marker of ``fmt``.
    """
    bos, eos = markers.bos.split(), markers.eos.split()
    if list(tokens[: len(bos)]) != bos:
        raise ScratchpadParseError(f"scratchpad must start with {markers.bos!r}, "
                                   f"got {' '.join(tokens[:len(bos)])!r}")
    end = _find(tokens, eos, len(bos))
    if end < 0:
        raise ScratchpadParseError(f"scratchpad has no end marker {markers.eos!r}")
    active = [(name, begin, close) for name, on, (begin, close) in
              zip(COMPONENTS, fmt.flags, markers.component_markers()) if on]
    steps = []
    for k, body in enumerate(_split(tokens[len(bos) : end], markers.separator.split())):
        values: dict[str, Any] = {}
        pos = 0
        for j, (name, begin, close) in enumerate(active):
            if body[pos : pos + len(begin)] != begin:
                raise ScratchpadParseError(f"step {k}: expected {' '.join(begin)!r} at token {pos}, got "
                                           f"{' '.join(body[pos:pos + len(begin)])!r}")
            pos += len(begin)
            if j + 1 < len(active):
                stop = _find(body, active[j + 1][1], pos)
                if stop < 0:
                    raise ScratchpadParseError(f"step {k}: missing marker {' '.join(active[j + 1][1])!r}")
            else:
                stop = len(body)
            content = body[pos:stop]
            if close:
                if content[len(content) - len(close) :] != close:
                    raise ScratchpadParseError(f"step {k}: {name} does not end with {' '.join(close)!r}")
                content = content[: len(content) - len(close)]
            values[name] = " ".join(content)
            pos = stop
        if not active and body:
            raise ScratchpadParseError(f"step {k}: format {fmt.mask!r} renders nothing, "
                                       f"got {' '.join(body)!r}")
        steps.append(ScratchpadStep(**values))
    return steps


def split_answer(tokens: Sequence[str], markers: ScratchpadMarkers) -> tuple[list[str], list[str]] | None:
    """``(scratchpad tokens up to and including eos, final answer tokens)``, or None if no ``eos``."""
    eos = markers.eos.split()
    end = _find(tokens, eos, len(markers.bos.split()))
    if end < 0:
        return None
    return list(tokens[: end + len(eos)]), list(tokens[end + len(eos) :])


class ScratchpadTask(Task):
    """A task whose answer may be preceded by a scratchpad (option ``scratchpad``).

    Subclasses set :attr:`markers` and build examples with :meth:`_example`. ``check`` compares the
    final answer only (the paper's metric extracts the answer after the scratchpad); use
    :meth:`parse_scratchpad` to score the steps themselves.
    """

    markers: ScratchpadMarkers = ScratchpadMarkers(input="For")

    def __init__(self, *, scratchpad: ScratchpadFormat | str | None = None, **kwargs: Any) -> None:
        try:
            self.scratchpad: ScratchpadFormat | None = (
                None if scratchpad is None else ScratchpadFormat.parse(scratchpad)
            )
        except (TypeError, ValueError) as err:
            raise type(err)(f"{self.name}: {err}") from None
        super().__init__(**kwargs)

    def _example(
        self, prompt: str, steps: list[ScratchpadStep], final: str, length: int, meta: dict[str, Any]
    ) -> Example:
        final_tokens = final.split()
        answer = final_tokens
        meta = dict(meta, final_answer=final_tokens)
        if self.scratchpad is not None:
            answer = render_scratchpad(steps, self.scratchpad, self.markers) + final_tokens
            meta["steps"] = steps
        return Example(prompt=prompt.split(), answer=answer, length=length, meta=meta)

    def _scratchpad_tokens(self) -> list[str]:
        return self.markers.tokens() if self.scratchpad is not None else []

    def final_answer(self, tokens: Sequence[str]) -> list[str] | None:
        """The final answer part of ``tokens`` (after the scratchpad), or None if it has no ``eos``."""
        if self.scratchpad is None:
            return list(tokens)
        parts = split_answer(tokens, self.markers)
        return None if parts is None else parts[1]

    def parse_scratchpad(self, tokens: Sequence[str]) -> list[ScratchpadStep]:
        """The steps of a (predicted or gold) answer in this task's scratchpad format."""
        if self.scratchpad is None:
            raise ValueError(f"{self.name}: this task instance has no scratchpad (scratchpad=None)")
        return parse_scratchpad(tokens, self.scratchpad, self.markers)

    def check(self, example: Example, predicted: Sequence[str]) -> bool:
        """True iff the final answer of ``predicted`` equals the gold final answer."""
        return self.final_answer(predicted) == example.meta["final_answer"]

    def __repr__(self) -> str:
        mask = None if self.scratchpad is None else self.scratchpad.mask
        return super().__repr__()[:-1] + f", scratchpad={mask!r})"
