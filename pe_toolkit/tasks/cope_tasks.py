"""Tasks of the CoPE paper (Golovneva et al. 2024, arXiv:2405.18719): counting, selective copy, flip-flop.

Counting follows the official generator (``facebookresearch/RAM``, ``projects/cope/scripts/
count_data_gen.py``) exactly, with statements split into tokens (``x ++ ;`` rather than ``x ++;``).
The generators of the other two are not public; they follow the papers they come from: selective
copying (Gu & Dao 2023, Mamba) and flip-flop language modelling (Liu et al. 2023, "Exposing attention
glitches with flip-flop language modeling", arXiv:2306.00946).
"""

from __future__ import annotations

import random
import string
from typing import Any

from pe_toolkit.tasks.base import Example, Task, check_int, check_probability, symbols

GOLOVNEVA = "Golovneva et al. 2024, Contextual Position Encoding (CoPE), arXiv:2405.18719"

# count_data_gen.py: statement weights and the value cap.
OP_WEIGHTS: dict[str, int] = {"set": 1, "pass": 50, "increment": 7}
MAX_VALUE = 10


class _Retry(Exception):
    pass


class CopeCountingTask(Task):
    """Track variables through a program of ``x = 0 ;`` / ``x ++ ;`` / ``pass ;`` statements.

    A program of ``n_steps`` statements (the length) over ``num_vars`` variables ``a, b, ...`` is
    followed by ``print x`` for a variable that was set; the answer is its current value.
    Statements are drawn with weights SET 1, PASS 50, INCREMENT 7; SET picks any variable, INCREMENT
    and PRINT an already set one, and values are capped at 10 (a statement that cannot be generated is
    redrawn, a program without a set variable is regenerated, as in ``count_data_gen.py``). The
    original draws ``n_steps ~ U{3..512}`` for every split; here train and test ranges differ.

    Example (length 5)::

        prompt: a = 0 ; pass ; a ++ ; pass ; a ++ ; print a
        answer: 2

    Args:
        num_vars: number of variables, 1..26 (the paper uses 1, 3 and 5; default 3).
        train_lengths, test_lengths: inclusive ranges of ``n_steps`` (default (3, 64), (65, 128)).
    """

    name = "cope_counting"
    reference = GOLOVNEVA
    default_train_lengths = (3, 64)
    default_test_lengths = (65, 128)

    def __init__(self, *, num_vars: int = 3, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_vars = check_int(self.name, "num_vars", num_vars, minimum=1, maximum=26)
        self.variables = list(string.ascii_lowercase[: self.num_vars])

    def _statement(self, rng: random.Random, values: dict[str, int]) -> list[str]:
        for _ in range(100):
            op = rng.choices(list(OP_WEIGHTS), list(OP_WEIGHTS.values()))[0]
            if op == "set":
                var = rng.choice(self.variables)
                values[var] = 0
                return [var, "=", "0", ";"]
            if op == "pass":
                return ["pass", ";"]
            if values:
                var = rng.choice(list(values))
                if values[var] + 1 <= MAX_VALUE:
                    values[var] += 1
                    return [var, "++", ";"]
        raise _Retry

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        for _ in range(1000):
            values: dict[str, int] = {}
            try:
                program = [tok for _ in range(length) for tok in self._statement(rng, values)]
            except _Retry:
                continue
            if values:
                query = rng.choice(list(values))
                return Example(prompt=[*program, "print", query], answer=[str(values[query])], length=length,
                               meta={"query": query, "values": dict(values)})
        raise RuntimeError(f"{self.name}: could not generate a program of {length} steps in 1000 draws")

    def make(self, program: str | list[str], query: str) -> Example:
        """The example for a program (statements ending in ``;``) and a queried variable."""
        toks = program.split() if isinstance(program, str) else list(program)
        values: dict[str, int] = {}
        statements = " ".join(toks).split(";")
        if statements[-1].strip():
            raise ValueError(f"{self.name}: program must end with ';', got {' '.join(toks)!r}")
        for stmt in statements[:-1]:
            words = stmt.split()
            if words == ["pass"]:
                continue
            if len(words) == 3 and words[1:] == ["=", "0"] and words[0] in self.variables:
                values[words[0]] = 0
            elif len(words) == 2 and words[1] == "++" and words[0] in values:
                values[words[0]] += 1
            else:
                raise ValueError(f"{self.name}: bad statement {stmt.strip()!r} (variables {self.variables})")
        if query not in values:
            raise ValueError(f"{self.name}: query {query!r} was never set")
        return Example(prompt=[*toks, "print", query], answer=[str(values[query])],
                       length=len(statements) - 1, meta={"query": query, "values": values})

    def _tokens(self) -> list[str]:
        return [*self.variables, "=", "++", ";", "pass", "print", *(str(v) for v in range(MAX_VALUE + 1))]


class SelectiveCopyTask(Task):
    """Copy the non-blank tokens of a sequence, in order, ignoring the blanks (selective copying).

    Length = number of non-blank tokens; the sequence also holds ``round(blank_ratio * length)``
    blanks ``_`` at uniformly random positions. CoPE's splits are IID 128 blank / 128 non-blank
    (ratio 1), OOD-dense 64 / 128 (ratio 0.5) and OOD-sparse 256 / 128 (ratio 2); the defaults here are
    scaled down to 8..16 non-blank tokens with ratio 1 for train and 2 (sparse) for test.

    Example (length 3, ratio 1)::

        prompt: _ c4 _ c0 c4 _
        answer: c4 c0 c4

    Args:
        num_symbols: size of the non-blank alphabet ``c0, c1, ...`` (default 16).
        train_blank_ratio, test_blank_ratio: blanks per non-blank token (defaults 1.0 and 2.0; use
            0.5 for the dense OOD split).
        train_lengths, test_lengths: inclusive ranges of the non-blank count (default (8, 16) both).
    """

    name = "selective_copy"
    reference = GOLOVNEVA + "; Gu & Dao 2023, Mamba, arXiv:2312.00752"
    default_train_lengths = (8, 16)
    default_test_lengths = (8, 16)
    blank = "_"

    def __init__(
        self,
        *,
        num_symbols: int = 16,
        train_blank_ratio: float = 1.0,
        test_blank_ratio: float = 2.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.num_symbols = check_int(self.name, "num_symbols", num_symbols, minimum=1)
        self.alphabet = symbols(self.num_symbols, "c")
        for arg, value in (("train_blank_ratio", train_blank_ratio), ("test_blank_ratio", test_blank_ratio)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{self.name}: {arg} must be a number, got {type(value).__name__} "
                                f"({value!r})")
            if not 0.0 <= value < float("inf"):
                raise ValueError(f"{self.name}: {arg} must be a finite number >= 0, got {value}")
        self.train_blank_ratio = float(train_blank_ratio)
        self.test_blank_ratio = float(test_blank_ratio)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        ratio = self.train_blank_ratio if split == "train" else self.test_blank_ratio
        total = length + round(ratio * length)
        positions = set(rng.sample(range(total), length))
        seq = [rng.choice(self.alphabet) if i in positions else self.blank for i in range(total)]
        return self.make(seq)

    def make(self, seq: list[str]) -> Example:
        """The example for a sequence of symbols and blanks."""
        kept = [t for t in seq if t != self.blank]
        if not kept:
            raise ValueError(f"{self.name}: seq must hold at least one non-blank token")
        return Example(prompt=list(seq), answer=kept, length=len(kept), meta={"blanks": len(seq) - len(kept)})

    def _tokens(self) -> list[str]:
        return [self.blank, *self.alphabet]


class FlipFlopTask(Task):
    """Flip-flop language modelling (Liu et al. 2023), as evaluated by Golovneva et al. 2024.

    A sequence of ``length`` instructions, each an opcode and a bit: ``w b`` writes ``b``, ``i b`` is
    ignored, ``r b`` reads and ``b`` must equal the last written bit. The first instruction is a write
    and the last a read; the others are ``i`` with probability ``p_ignore`` and ``w`` / ``r`` with
    ``(1 - p_ignore) / 2`` each. Out-of-distribution tests change ``p_ignore`` (Liu et al.: train 0.8;
    sparse 0.98, dense 0.1).

    The prompt ends with the final ``r``; the answer is its bit. Earlier reads show their (correct)
    bits; ``meta["read_positions"]`` lists the prompt indices of those bits, so a language-modelling
    loss can also supervise every read.

    Example (length 4)::

        prompt: w 1 i 0 w 0 r
        answer: 0

    Args:
        train_p_ignore, test_p_ignore: ignore probabilities (defaults 0.8 and 0.98).
        train_lengths, test_lengths: inclusive ranges of the instruction count (default (32, 64) both).
    """

    name = "flip_flop"
    reference = (GOLOVNEVA + "; Liu et al. 2023, Exposing Attention Glitches with Flip-Flop Language "
                             "Modeling, arXiv:2306.00946")
    default_train_lengths = (32, 64)
    default_test_lengths = (32, 64)
    min_length = 2

    def __init__(self, *, train_p_ignore: float = 0.8, test_p_ignore: float = 0.98, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.train_p_ignore = check_probability(self.name, "train_p_ignore", train_p_ignore)
        self.test_p_ignore = check_probability(self.name, "test_p_ignore", test_p_ignore)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        p = self.train_p_ignore if split == "train" else self.test_p_ignore
        ops = ["w"]
        for _ in range(length - 2):
            u = rng.random()
            ops.append("i" if u < p else ("w" if u < p + (1 - p) / 2 else "r"))
        ops.append("r")
        tokens, last = [], None
        for op in ops[:-1]:
            bit = last if op == "r" else str(rng.randint(0, 1))
            if op == "w":
                last = bit
            tokens += [op, bit]
        return self.make([*tokens, "r"])

    def make(self, prompt: str | list[str]) -> Example:
        """The example for a prompt of ``op bit`` pairs ending in a bare ``r``."""
        toks = prompt.split() if isinstance(prompt, str) else list(prompt)
        if len(toks) % 2 != 1 or toks[-1] != "r":
            raise ValueError(f"{self.name}: prompt must be 'op bit' pairs followed by 'r', "
                             f"got {' '.join(toks)!r}")
        last, reads = None, []
        for k in range(0, len(toks) - 1, 2):
            op, bit = toks[k], toks[k + 1]
            if op not in ("w", "i", "r") or bit not in ("0", "1"):
                raise ValueError(f"{self.name}: bad instruction {op!r} {bit!r}; ops are w/i/r, bits 0/1")
            if op == "w":
                last = bit
            elif op == "r":
                if bit != last:
                    raise ValueError(f"{self.name}: read at token {k} shows {bit}, "
                                     f"last written bit is {last}")
                reads.append(k + 1)
        if last is None:
            raise ValueError(f"{self.name}: the final read has no preceding write")
        return Example(prompt=toks, answer=[last], length=(len(toks) + 1) // 2,
                       meta={"read_positions": reads})

    def _tokens(self) -> list[str]:
        return ["w", "i", "r", "0", "1"]
