"""The generated sentiment task: labels follow the rule, evidence marks the polar words."""

from __future__ import annotations

import pytest

from pe_toolkit.explain.sentiment import NEGATIVE, NEGATOR, POSITIVE, SentimentTask
from pe_toolkit.tasks import get_task


def polarity(words):
    score, i = 0, 0
    while i < len(words):
        if words[i] == NEGATOR:
            score -= 1 if words[i + 1] in POSITIVE else -1
            i += 2
            continue
        score += 1 if words[i] in POSITIVE else -1 if words[i] in NEGATIVE else 0
        i += 1
    return score


def test_labels_lengths_and_evidence():
    task = get_task("explain_sentiment")
    for ex in task.generate(300, "train", seed=3) + task.generate(50, "test", seed=3):
        assert len(ex.prompt) == ex.length
        score = polarity(ex.prompt)
        assert score != 0 and abs(score) in (1, 3)
        assert ex.answer == ["positive" if score > 0 else "negative"]
        evidence_words = {ex.prompt[i] for i in ex.meta["evidence"]}
        assert evidence_words <= set(POSITIVE) | set(NEGATIVE) | {NEGATOR}
        others = [w for i, w in enumerate(ex.prompt) if i not in ex.meta["evidence"]]
        assert not set(others) & (set(POSITIVE) | set(NEGATIVE) | {NEGATOR})


def test_deterministic_and_balanced():
    task = SentimentTask()
    assert task.generate(20, "train", 1) == task.generate(20, "train", 1)
    labels = [ex.answer[0] for ex in task.generate(1000, "train", 2)]
    assert 400 < labels.count("positive") < 600
    with_not = sum(NEGATOR in ex.prompt for ex in task.generate(1000, "train", 2))
    assert with_not > 100


def test_bad_options():
    with pytest.raises(ValueError, match="negation_probability must be in"):
        SentimentTask(negation_probability=1.5)
    with pytest.raises(ValueError, match="train_lengths must have min >= 6"):
        SentimentTask(train_lengths=(2, 8))
