"""Properties every registered task must have: determinism, length ranges, vocabulary, check, errors."""

import random

import pytest

from pe_toolkit.tasks import SPECIAL_TOKENS, Example, Task, Vocabulary, get_task, list_tasks, task_options

EXPECTED = [
    "copy_repeat", "copy_replace", "copy_random", "copy_repeat_x2", "copy_random_x2", "reverse", "reverse_x2",
    "reverse_copy", "addition", "polynomial", "sort_single", "sort_multi", "summation", "parity", "lego",
    "lego_permuted", "scan_length", "pcfg_productivity", "contextual_counting", "cope_counting",
    "selective_copy", "flip_flop",
]
SCRATCHPAD_TASKS = ["addition", "polynomial", "sort_single", "sort_multi", "summation", "parity", "lego",
                    "lego_permuted"]
N = 40

# Every task once plainly, the scratchpad tasks once more with the full scratchpad.
CONFIGS = [(name, {}) for name in EXPECTED] + [(name, {"scratchpad": "icovr"}) for name in SCRATCHPAD_TASKS]
IDS = [name + ("+scratchpad" if opts else "") for name, opts in CONFIGS]


def test_registry_names_are_stable():
    # other packages may register tasks of their own (pe_toolkit.explain's sentiment task, when imported)
    core = [name for name in list_tasks() if type(get_task(name)).__module__.startswith("pe_toolkit.tasks")]
    assert core == sorted(EXPECTED)
    assert list_tasks("copy_*") == [
        "copy_random", "copy_random_x2", "copy_repeat", "copy_repeat_x2", "copy_replace"]


@pytest.mark.parametrize("name", EXPECTED)
def test_task_name_matches_registry(name):
    task = get_task(name)
    assert isinstance(task, Task)
    assert task.name == name
    assert task.reference
    assert "train_lengths" in task_options(name) and "test_lengths" in task_options(name)
    assert ("scratchpad" in task_options(name)) == (name in SCRATCHPAD_TASKS)


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_generate_is_deterministic(name, options):
    task = get_task(name, **options)
    for split in ("train", "test"):
        a = task.generate(N, split=split, seed=0)
        assert a == task.generate(N, split=split, seed=0)
        assert a == get_task(name, **options).generate(N, split=split, seed=0)   # no hidden state
        assert a != task.generate(N, split=split, seed=1)
        assert a[:10] == task.generate(10, split=split, seed=0)                   # a prefix stream


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_generate_does_not_touch_the_global_rng(name, options):
    random.seed(123)
    expected = random.random()
    random.seed(123)
    get_task(name, **options).generate(5, split="train", seed=0)
    assert random.random() == expected


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_lengths_within_split_ranges(name, options):
    task = get_task(name, **options)
    for split, (low, high) in (("train", task.train_lengths), ("test", task.test_lengths)):
        examples = task.generate(N, split=split, seed=3)
        assert all(isinstance(ex, Example) for ex in examples)
        assert all(low <= ex.length <= high for ex in examples), (split, [ex.length for ex in examples])
        assert all(ex.length in task.lengths(split) for ex in examples)
        if len(task.lengths(split)) > 1:
            assert len({ex.length for ex in examples}) > 1


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_every_token_is_in_the_vocabulary(name, options):
    task = get_task(name, **options)
    vocab = task.vocabulary()
    assert vocab[: len(SPECIAL_TOKENS)] == list(SPECIAL_TOKENS)
    assert len(vocab) == len(set(vocab))
    assert vocab == get_task(name, **options).vocabulary()          # deterministic order
    known = set(vocab)
    for split in ("train", "test"):
        for ex in task.generate(N, split=split, seed=5):
            assert ex.prompt and ex.answer
            missing = {t for t in ex.prompt + ex.answer if t not in known}
            assert not missing, missing
            assert not set(SPECIAL_TOKENS) & set(ex.prompt + ex.answer)


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_check_accepts_the_answer_and_rejects_wrong_ones(name, options):
    task = get_task(name, **options)
    vocab = task.vocabulary()
    for ex in task.generate(10, split="test", seed=7):
        assert task.check(ex, ex.answer)
        assert task.check(ex, tuple(ex.answer))
        assert not task.check(ex, ex.answer[:-1])
        assert not task.check(ex, [])
        # Replace the last answer token (before a closing ".") by another vocabulary token.
        wrong = list(ex.answer)
        k = len(wrong) - 2 if len(wrong) > 1 and wrong[-1] == "." else len(wrong) - 1
        wrong[k] = next(t for t in vocab[len(SPECIAL_TOKENS):] if t != wrong[k])
        assert not task.check(ex, wrong), (ex.answer, wrong)


@pytest.mark.parametrize(("name", "options"), CONFIGS, ids=IDS)
def test_vocabulary_encodes_every_example(name, options):
    task = get_task(name, **options)
    vocab = Vocabulary(task.vocabulary())
    assert vocab.tokens == task.vocabulary()
    for ex in task.generate(5, split="train", seed=0):
        ids, start = vocab.encode(ex)
        bos, eos, sep = SPECIAL_TOKENS[1:]
        assert vocab.decode(ids) == [bos, *ex.prompt, sep, *ex.answer, eos]
        assert start == len(ex.prompt) + 2
        assert vocab.decode_answer(ids[start:]) == ex.answer


@pytest.mark.parametrize("name", EXPECTED)
def test_custom_length_ranges(name):
    task = get_task(name)
    low, high = task.train_lengths
    mid = (low + high) // 2
    custom = get_task(name, train_lengths=(low, mid), test_lengths=task.test_lengths)
    assert custom.train_lengths == (low, mid)
    assert all(low <= ex.length <= mid for ex in custom.generate(20, split="train", seed=0))


@pytest.mark.parametrize("name", EXPECTED)
def test_sample_gives_the_requested_length(name):
    task = get_task(name)
    rng = random.Random(0)
    for length in task.lengths("train")[:3] + task.lengths("test")[-2:]:
        split = "train" if length in task.lengths("train") else "test"
        assert task.sample(rng, length, split=split).length == length


# -- errors --------------------------------------------------------------------------------------


def test_unknown_task_suggests_close_names():
    with pytest.raises(ValueError, match="did you mean 'addition'"):
        get_task("additon")
    with pytest.raises(TypeError, match="task name must be a str"):
        get_task(3)


def test_unknown_option_lists_allowed():
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['foo'\]; allowed: .*'num_symbols'"):
        get_task("copy_random", foo=1)


def test_fixed_variant_cannot_be_overridden():
    with pytest.raises(ValueError, match="fixes variant='repeat'"):
        get_task("copy_repeat", variant="random")
    with pytest.raises(ValueError, match="fixes permuted=False"):
        get_task("lego", permuted=True)


@pytest.mark.parametrize("name", EXPECTED)
@pytest.mark.parametrize(
    ("lengths", "error", "message"),
    [
        ((5, 3), ValueError, r"train_lengths must have min <= max, got \(5, 3\)"),
        ((0, 3), ValueError, r"train_lengths must have min >= \d+, got \(0, 3\)"),
        ((1.0, 3), TypeError, r"train_lengths must be a \(min, max\) pair of ints"),
        (7, TypeError, r"train_lengths must be a \(min, max\) pair of ints, got 7"),
        ((1, 2, 3), TypeError, r"train_lengths must be a \(min, max\) pair of ints"),
    ],
)
def test_bad_length_ranges(name, lengths, error, message):
    with pytest.raises(error, match=f"{name}: {message}"):
        get_task(name, train_lengths=lengths)


@pytest.mark.parametrize("name", EXPECTED)
def test_generate_and_sample_argument_errors(name):
    task = get_task(name)
    with pytest.raises(ValueError, match=r"split must be one of \('train', 'test'\), got 'valid'"):
        task.generate(3, split="valid")
    with pytest.raises(ValueError, match="n must be >= 0, got -1"):
        task.generate(-1)
    with pytest.raises(TypeError, match="seed must be an int"):
        task.generate(3, seed="0")
    with pytest.raises(TypeError, match="rng must be a random.Random"):
        task.sample(0, task.train_lengths[0])
    with pytest.raises(ValueError, match=f"length must be >= {task.min_length}"):
        task.sample(random.Random(0), task.min_length - 1)
    with pytest.raises(TypeError, match="length must be an int"):
        task.sample(random.Random(0), 4.0)
    assert task.generate(0) == []
