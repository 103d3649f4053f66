"""A generated sentiment-style classification task for explainability experiments.

A stand-in, generated with a seed, for the IMDB classifier of the PA-LRP paper (Bakish et al. 2025,
arXiv:2506.02138, Sec. 5): sentences of filler words with one or three polar adjectives, each
possibly negated by an immediately preceding ``not`` (which flips it). The label is the majority
polarity after negation, answered as one token after ``<sep>``::

    prompt: the plot was not good and the acting was awful
    answer: negative

Word order matters (``not`` acts only on the next word), so a model must use positions; the
polar words and their negators are the ground-truth evidence (``Example.meta["evidence"]``).
Registered as task ``"explain_sentiment"`` (import :mod:`pe_toolkit.explain.sentiment` first).
"""

from __future__ import annotations

import random
from typing import Any

from pe_toolkit.tasks import list_tasks, register_task
from pe_toolkit.tasks.base import Example, Task, check_probability

POSITIVE = ("good", "great", "superb", "lovely", "brilliant", "fine")
NEGATIVE = ("bad", "awful", "poor", "dull", "boring", "terrible")
FILLER = ("the", "movie", "was", "plot", "acting", "very", "really", "film", "story", "and", "a", "cast")
NEGATOR = "not"
LABELS = ("positive", "negative")


class SentimentTask(Task):
    """Majority polarity of 1 or 3 (possibly negated) adjectives among filler words.

    Args:
        negation_probability: chance that a polar word is preceded by ``not`` (0.2; with 0.35 the small
            models of the benchmark stayed at chance for 1,000 steps, the bag-of-words signal being too weak).
        train_lengths, test_lengths: inclusive ranges of the number of words (default 6..16, 17..24).
    """

    name = "explain_sentiment"
    reference = "generated stand-in for IMDB in Bakish et al. 2025, arXiv:2506.02138"
    default_train_lengths = (6, 16)
    default_test_lengths = (17, 24)
    min_length = 6

    def __init__(self, *, negation_probability: float = 0.2, **kwargs: Any) -> None:
        self.negation_probability = check_probability(self.name, "negation_probability", negation_probability)
        super().__init__(**kwargs)

    def _sample(self, rng: random.Random, length: int, split: str) -> Example:
        count = 1 if length < 8 else rng.choice((1, 3))
        units = []  # (tokens, polarity)
        for _ in range(count):
            positive = rng.random() < 0.5
            word = rng.choice(POSITIVE if positive else NEGATIVE)
            if rng.random() < self.negation_probability:
                units.append(([NEGATOR, word], -1 if positive else 1))
            else:
                units.append(([word], 1 if positive else -1))
        fillers = length - sum(len(t) for t, _ in units)
        # place the units between fillers: choose gap sizes that sum to the number of fillers
        cuts = sorted(rng.randint(0, fillers) for _ in range(count))
        gaps = [b - a for a, b in zip([0, *cuts], [*cuts, fillers])]
        words, evidence, score = [], [], 0
        for gap, (unit, polarity) in zip(gaps, [*units, ([], 0)]):
            words.extend(rng.choice(FILLER) for _ in range(gap))
            evidence.extend(range(len(words), len(words) + len(unit)))
            words.extend(unit)
            score += polarity
        label = LABELS[0] if score > 0 else LABELS[1]
        return Example(prompt=words, answer=[label], length=length, meta={"label": label, "evidence": evidence})

    def _tokens(self) -> list[str]:
        return [*FILLER, NEGATOR, *POSITIVE, *NEGATIVE, *LABELS]


if "explain_sentiment" not in list_tasks():
    register_task("explain_sentiment", SentimentTask)
