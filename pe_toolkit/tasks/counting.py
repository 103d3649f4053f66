"""Contextual counting (Golkar et al. 2024, arXiv:2406.02585).

A sequence over ``{0, 1, [, ]}`` holds several disjoint regions delimited by ``[`` ... ``]``; the target
is the number of 1s inside each region, in order. The paper trains with 4 regions and length 512 and
probes other region counts and lengths out of distribution. Its exact sampling process is not public
(region placement, p(1)); here bracket positions are a uniformly random set of ``2 * regions``
distinct positions (so regions may be empty) and the other tokens are 1 with probability ``p_one``.

The answer is one count token per region (``"0" .. "<max length>"``); a causal LM reads the whole
sequence first, which is the decoder-query setting of the paper collapsed into one stream.
"""

from __future__ import annotations

import random
from typing import Any

from pe_toolkit.tasks.base import Example, Task, check_probability, check_range

GOLKAR = "Golkar et al. 2024, Contextual Counting: A Mechanistic Study of Transformers, arXiv:2406.02585"


class ContextualCountingTask(Task):
    """Count the 1s in each bracketed region; length = sequence length (brackets included).

    Example (length 12, 2 regions)::

        prompt: 1 [ 1 0 1 ] 0 1 [ 1 1 ]
        answer: 2 2

    Args:
        train_lengths, test_lengths: inclusive ranges of the sequence length (default (32, 64), (65, 128)).
        train_regions, test_regions: inclusive ranges of the number of regions (default (1, 4), (5, 8)).
            Every length of a split must have room for its largest region count (2 tokens per region).
        p_one: probability that a non-bracket token is ``1`` (default 0.5).
    """

    name = "contextual_counting"
    reference = GOLKAR
    default_train_lengths = (32, 64)
    default_test_lengths = (65, 128)
    min_length = 2

    def __init__(
        self,
        *,
        train_regions: tuple[int, int] = (1, 4),
        test_regions: tuple[int, int] = (5, 8),
        p_one: float = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.train_regions = check_range(self.name, "train_regions", train_regions, minimum=1)
        self.test_regions = check_range(self.name, "test_regions", test_regions, minimum=1)
        self.p_one = check_probability(self.name, "p_one", p_one)
        for split, regions in (("train", self.train_regions), ("test", self.test_regions)):
            low = self.split_lengths(split)[0]
            if 2 * regions[1] > low:
                raise ValueError(f"{self.name}: {split}_regions {regions} needs sequences of at least "
                                 f"{2 * regions[1]} tokens, but {split}_lengths starts at {low}")

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        low, high = self.train_regions if split == "train" else self.test_regions
        high = min(high, length // 2)
        if high < low:
            raise ValueError(f"{self.name}: length {length} has no room for {low} regions ({split} split)")
        regions = rng.randint(low, high)
        brackets = sorted(rng.sample(range(length), 2 * regions))
        seq = ["1" if rng.random() < self.p_one else "0" for _ in range(length)]
        for k, pos in enumerate(brackets):
            seq[pos] = "[" if k % 2 == 0 else "]"
        return self.make(seq)

    def make(self, seq: list[str]) -> Example:
        """The example for a sequence over ``0 1 [ ]`` with balanced, non-nested brackets."""
        counts, inside = [], False
        for tok in seq:
            if tok == "[":
                if inside:
                    raise ValueError(f"{self.name}: nested '[' in {' '.join(seq)!r}")
                inside = True
                counts.append(0)
            elif tok == "]":
                if not inside:
                    raise ValueError(f"{self.name}: unmatched ']' in {' '.join(seq)!r}")
                inside = False
            elif tok in ("0", "1"):
                if inside:
                    counts[-1] += tok == "1"
            else:
                raise ValueError(f"{self.name}: tokens must be 0, 1, [ or ], got {tok!r}")
        if inside:
            raise ValueError(f"{self.name}: unclosed '[' in {' '.join(seq)!r}")
        return Example(prompt=list(seq), answer=[str(c) for c in counts], length=len(seq),
                       meta={"regions": len(counts), "counts": counts})

    def _tokens(self) -> list[str]:
        most = max(self.train_lengths[1], self.test_lengths[1]) - 2
        return ["0", "1", "[", "]", *(str(c) for c in range(2, most + 1))]
