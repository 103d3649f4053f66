"""Task.evaluation_lengths / evaluation_set: fixed test sets with the same number of examples per length."""

import random

import pytest

from pe_toolkit.tasks import get_task, list_tasks


def test_every_registered_task_generates_its_evaluation_sets():
    for name in list_tasks():
        task = get_task(name)
        for split in ("train", "test"):
            lengths = task.evaluation_lengths(split, 4)
            assert lengths[-1] == task.lengths(split)[-1] and set(lengths) <= set(task.lengths(split))
            assert lengths == sorted(set(task.lengths(split)[::4]) | {task.lengths(split)[-1]})
            examples = task.evaluation_set(split, 2, seed=0, stride=4)
            assert [ex.length for ex in examples] == [n for n in lengths for _ in range(2)], name


def test_the_stream_per_length_is_seeded_by_split_seed_and_length():
    task = get_task("copy_random", train_lengths=(1, 6), test_lengths=(7, 9))
    examples = task.evaluation_set("test", 3, seed=5)
    assert examples == task.evaluation_set("test", 3, seed=5)  # deterministic, no hidden state
    assert examples != task.evaluation_set("test", 3, seed=6)
    rng = random.Random("copy_random/test/evaluation/5/8")  # the stated stream of length 8, by hand
    assert examples[3:6] == [task.sample(rng, 8, split="test") for _ in range(3)]
    # a stride keeps each length's examples: the stream of a length does not depend on the others
    strided = task.evaluation_set("test", 3, seed=5, stride=2)
    assert [ex.length for ex in strided] == [7, 7, 7, 9, 9, 9] and strided[3:] == examples[6:]
    assert not set(map(repr, examples)) & set(map(repr, task.generate(200, "test", seed=5)))


def test_density_shift_tasks_keep_their_split():
    task = get_task("flip_flop", train_lengths=(4, 5), test_lengths=(4, 5), test_p_ignore=0.98)
    assert task.evaluation_lengths("train") == task.evaluation_lengths("test") == [4, 5]
    assert task.evaluation_set("train", 20, seed=0) != task.evaluation_set("test", 20, seed=0)


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"split": "val", "per_length": 1}, ValueError, "split"),
    ({"split": "test", "per_length": 0}, ValueError, "per_length must be >= 1, got 0"),
    ({"split": "test", "per_length": 1.5}, TypeError, "per_length must be an int"),
    ({"split": "test", "per_length": 1, "seed": "0"}, TypeError, "seed must be an int"),
    ({"split": "test", "per_length": 1, "stride": 0}, ValueError, "stride must be >= 1, got 0"),
])
def test_bad_arguments_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        get_task("copy_repeat").evaluation_set(**kwargs)
