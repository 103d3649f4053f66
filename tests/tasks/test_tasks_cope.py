"""Hand-checked instances and option errors: contextual counting, CoPE counting, selective copy, flip-flop."""

import random
from collections import Counter

import pytest

from pe_toolkit.tasks import get_task


def words(text):
    return text.split()


# -- contextual counting (Golkar et al. 2024) ----------------------------------------------------


def test_contextual_counting_by_hand():
    task = get_task("contextual_counting")
    ex = task.make(words("1 [ 1 0 1 ] 0 1 [ 1 1 ]"))
    assert ex.answer == ["2", "2"] and ex.length == 12 and ex.meta["regions"] == 2
    assert task.make(words("[ ] 1 1 [ 0 ] [ 1 ]")).answer == ["0", "0", "1"]
    assert task.make(words("0 1 [ 1 1 1 1 ] 1")).answer == ["4"]


def test_contextual_counting_regions_follow_the_split():
    task = get_task("contextual_counting")
    for split, (low, high) in (("train", (1, 4)), ("test", (5, 8))):
        examples = task.generate(60, split=split, seed=0)
        regions = Counter(ex.meta["regions"] for ex in examples)
        assert set(regions) <= set(range(low, high + 1)) and len(regions) > 1
        for ex in examples:
            assert set(ex.prompt) <= {"0", "1", "[", "]"}
            assert ex.prompt.count("[") == ex.prompt.count("]") == ex.meta["regions"]
            assert task.make(ex.prompt).answer == ex.answer


def test_contextual_counting_p_one():
    ones = sum(ex.prompt.count("1") for ex in get_task("contextual_counting", p_one=0.0).generate(20, seed=0))
    assert ones == 0
    all_ones = get_task("contextual_counting", p_one=1.0)
    zeros = sum(ex.prompt.count("0") for ex in all_ones.generate(20, seed=0))
    assert zeros == 0


def test_contextual_counting_errors():
    with pytest.raises(ValueError, match=r"contextual_counting: test_regions \(5, 40\) needs sequences of"):
        get_task("contextual_counting", test_regions=(5, 40))
    with pytest.raises(ValueError, match=r"contextual_counting: p_one must be in \[0, 1\], got 1.5"):
        get_task("contextual_counting", p_one=1.5)
    with pytest.raises(ValueError, match="contextual_counting: train_regions must have min >= 1"):
        get_task("contextual_counting", train_regions=(0, 2))
    with pytest.raises(ValueError, match="nested"):
        get_task("contextual_counting").make(words("[ [ ] ]"))
    with pytest.raises(ValueError, match="unclosed"):
        get_task("contextual_counting").make(words("[ 1 1"))
    with pytest.raises(ValueError, match="no room for 5 regions"):
        get_task("contextual_counting").sample(random.Random(0), 8, split="test")


# -- CoPE counting (Golovneva et al. 2024, count_data_gen.py) --------------------------------------


def test_cope_counting_by_hand():
    task = get_task("cope_counting", num_vars=3)
    ex = task.make("a = 0 ; pass ; a ++ ; pass ; a ++ ;", "a")
    assert ex.prompt == words("a = 0 ; pass ; a ++ ; pass ; a ++ ; print a")
    assert ex.answer == ["2"] and ex.length == 5
    ex = task.make("b = 0 ; a = 0 ; b ++ ; a ++ ; b ++ ; b = 0 ; b ++ ;", "b")
    assert ex.answer == ["1"]
    assert task.make("b = 0 ; a = 0 ; b ++ ; a ++ ; b ++ ; b = 0 ; b ++ ;", "a").answer == ["1"]


def test_cope_counting_generated_programs_are_consistent():
    task = get_task("cope_counting", num_vars=5)
    ops = Counter()
    for ex in task.generate(60, split="train", seed=0) + task.generate(20, split="test", seed=0):
        assert ex.prompt[-2] == "print"
        program = ex.prompt[:-2]
        again = task.make(program, ex.prompt[-1])
        assert again.answer == ex.answer and again.length == ex.length
        assert 0 <= int(ex.answer[0]) <= 10
        ops.update(t for t in program if t in ("=", "++", "pass"))
    # Statement weights SET 1 : PASS 50 : INCREMENT 7 (increments are redrawn when impossible).
    assert ops["pass"] > 5 * ops["++"] > 0 and ops["++"] > ops["="] > 0


def test_cope_counting_errors():
    with pytest.raises(ValueError, match="cope_counting: num_vars must be <= 26, got 27"):
        get_task("cope_counting", num_vars=27)
    with pytest.raises(ValueError, match="cope_counting: num_vars must be >= 1, got 0"):
        get_task("cope_counting", num_vars=0)
    with pytest.raises(ValueError, match="cope_counting: query 'b' was never set"):
        get_task("cope_counting").make("a = 0 ;", "b")
    with pytest.raises(ValueError, match="cope_counting: bad statement 'z = 0'"):
        get_task("cope_counting", num_vars=2).make("z = 0 ;", "z")
    with pytest.raises(ValueError, match="program must end with ';'"):
        get_task("cope_counting").make("a = 0 ; a ++", "a")


# -- selective copy ------------------------------------------------------------------------------


def test_selective_copy_by_hand():
    ex = get_task("selective_copy").make(words("_ c4 _ c0 c4 _"))
    assert ex.answer == words("c4 c0 c4") and ex.length == 3 and ex.meta["blanks"] == 3


def test_selective_copy_density_follows_the_split():
    task = get_task("selective_copy", train_blank_ratio=1.0, test_blank_ratio=0.5)
    for ex in task.generate(20, split="train", seed=0):
        assert ex.meta["blanks"] == ex.length and len(ex.prompt) == 2 * ex.length
    for ex in task.generate(20, split="test", seed=0):
        assert ex.meta["blanks"] == round(0.5 * ex.length)
    sparse = get_task("selective_copy")              # default test ratio 2.0
    assert all(ex.meta["blanks"] == 2 * ex.length for ex in sparse.generate(20, split="test", seed=0))


def test_selective_copy_errors():
    with pytest.raises(ValueError, match="selective_copy: test_blank_ratio must be a finite number >= 0"):
        get_task("selective_copy", test_blank_ratio=-1)
    with pytest.raises(TypeError, match="selective_copy: train_blank_ratio must be a number"):
        get_task("selective_copy", train_blank_ratio="1")
    with pytest.raises(ValueError, match="selective_copy: num_symbols must be >= 1, got 0"):
        get_task("selective_copy", num_symbols=0)
    with pytest.raises(ValueError, match="at least one non-blank token"):
        get_task("selective_copy").make(["_", "_"])


# -- flip-flop -----------------------------------------------------------------------------------


def test_flip_flop_by_hand():
    task = get_task("flip_flop")
    ex = task.make("w 1 i 0 w 0 r")
    assert ex.answer == ["0"] and ex.length == 4
    ex = task.make("w 1 i 0 r 1 i 1 i 0 r")
    assert ex.answer == ["1"] and ex.meta["read_positions"] == [5]
    assert task.make("w 0 w 1 w 1 i 0 r 1 w 0 i 1 r").answer == ["0"]


def test_flip_flop_generated_sequences_are_valid():
    task = get_task("flip_flop")
    for split in ("train", "test"):
        for ex in task.generate(30, split=split, seed=1):
            assert ex.prompt[0] == "w" and ex.prompt[-1] == "r"
            assert len(ex.prompt) == 2 * ex.length - 1
            assert task.make(ex.prompt).answer == ex.answer       # make() re-checks every read


def test_flip_flop_ignore_probability_changes_with_the_split():
    task = get_task("flip_flop", train_p_ignore=0.5, test_p_ignore=0.98, train_lengths=(64, 64),
                    test_lengths=(64, 64))

    def ignore_rate(split):
        ops = [t for ex in task.generate(30, split=split, seed=0) for t in ex.prompt[2:-1:2]]
        return ops.count("i") / len(ops)

    assert 0.4 < ignore_rate("train") < 0.6
    assert ignore_rate("test") > 0.9


def test_flip_flop_errors():
    with pytest.raises(ValueError, match=r"flip_flop: test_p_ignore must be in \[0, 1\], got 1.2"):
        get_task("flip_flop", test_p_ignore=1.2)
    with pytest.raises(TypeError, match="flip_flop: train_p_ignore must be a number"):
        get_task("flip_flop", train_p_ignore=None)
    with pytest.raises(ValueError, match=r"flip_flop: train_lengths must have min >= 2, got \(1, 4\)"):
        get_task("flip_flop", train_lengths=(1, 4))
    with pytest.raises(ValueError, match="read at token 4 shows 0, last written bit is 1"):
        get_task("flip_flop").make("w 1 i 0 r 0 r")
    with pytest.raises(ValueError, match="prompt must be 'op bit' pairs followed by 'r'"):
        get_task("flip_flop").make("w 1 i 0")
    with pytest.raises(ValueError, match="bad instruction 'x' '1'"):
        get_task("flip_flop").make("x 1 r")
