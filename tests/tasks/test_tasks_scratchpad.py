"""The unified scratchpad: 32 formats, render/parse round trips, format masks, errors."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pe_toolkit.tasks import (
    ScratchpadFormat,
    ScratchpadMarkers,
    ScratchpadParseError,
    ScratchpadStep,
    get_task,
    parse_scratchpad,
    render_scratchpad,
)

SCRATCHPAD_TASKS = ["addition", "polynomial", "sort_single", "sort_multi", "summation", "parity", "lego",
                    "lego_permuted"]
FORMATS = ScratchpadFormat.all()


def test_there_are_32_distinct_formats():
    assert len(FORMATS) == 32
    assert len({f.mask for f in FORMATS}) == 32
    assert FORMATS[0].mask == "_____" and FORMATS[-1].mask == "icovr"


@pytest.mark.parametrize("fmt", FORMATS, ids=[f.mask for f in FORMATS])
def test_format_masks_round_trip(fmt):
    assert ScratchpadFormat.parse(fmt.mask) == fmt
    assert ScratchpadFormat.parse(fmt.bits) == fmt
    assert ScratchpadFormat.parse(fmt.mask.replace("_", "")) == fmt
    assert ScratchpadFormat.parse(fmt) is fmt
    assert str(fmt) == fmt.mask


def test_format_mask_examples():
    assert ScratchpadFormat.parse("10110") == ScratchpadFormat(True, False, True, True, False)
    assert ScratchpadFormat.parse("ic_v_") == ScratchpadFormat(True, True, False, True, False)
    assert ScratchpadFormat.parse("RVI") == ScratchpadFormat(True, False, False, True, True)
    assert ScratchpadFormat.parse("i-o--").bits == "10100"


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        ("icoz", ValueError, r"unknown letters \['z'\]; allowed: i \(input\)"),
        ("1011", ValueError, "bit mask must have 5 bits"),
        ("iic", ValueError, "repeats a letter"),
        (5, TypeError, "scratchpad must be a ScratchpadFormat, a str mask"),
    ],
)
def test_bad_formats(value, error, message):
    with pytest.raises(error, match=message):
        ScratchpadFormat.parse(value)
    with pytest.raises(error, match="addition: .*" + message):
        get_task("addition", scratchpad=value)


@pytest.mark.parametrize("name", SCRATCHPAD_TASKS)
@pytest.mark.parametrize("fmt", FORMATS, ids=[f.mask for f in FORMATS])
def test_task_scratchpads_parse_back_for_all_formats(name, fmt):
    task = get_task(name, scratchpad=fmt)
    vocab = set(task.vocabulary())
    for split in ("train", "test"):
        for ex in task.generate(6, split=split, seed=11):
            steps = ex.meta["steps"]
            rendered = render_scratchpad(steps, fmt, task.markers)
            assert ex.answer == rendered + ex.meta["final_answer"]
            assert parse_scratchpad(rendered, fmt, task.markers) == [s.project(fmt) for s in steps]
            assert task.parse_scratchpad(ex.answer) == [s.project(fmt) for s in steps]
            assert task.final_answer(ex.answer) == ex.meta["final_answer"]
            assert set(ex.answer) <= vocab
            if fmt.mask == "icovr":
                assert parse_scratchpad(rendered, fmt, task.markers) == steps


# Contents drawn from tokens that never occur in markers (as the task contents guarantee).
_CONTENT = st.lists(st.sampled_from(["0", "7", "x", "+", "=", "[", "]", ",", "carry", "%", "A"]), max_size=6)
_STEP = st.builds(lambda *parts: ScratchpadStep(*(" ".join(p) for p in parts)), *[_CONTENT] * 5)


@settings(max_examples=200, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=5), bits=st.integers(0, 31))
def test_render_parse_round_trip_on_random_steps(steps, bits):
    fmt = FORMATS[bits]
    markers = ScratchpadMarkers(input="For digits")
    tokens = render_scratchpad(steps, fmt, markers)
    assert parse_scratchpad(tokens + ["The", "answer"], fmt, markers) == [s.project(fmt) for s in steps]


def test_addition_full_scratchpad_by_hand():
    """57 + 68 = 125: two column steps and a final carry step (reference strings, tokenised)."""
    ex = get_task("addition", scratchpad="icovr").make(57, 68)
    expected = (
        "Thinking step by step : "
        "For digits 7 , 8 We have : ( 7 + 8 + carry ) % 1 0 = ( 1 5 + 0 ) % 1 0 = 1 5 % 1 0 == 5 "
        ". and currently , carry : 1 5 // 1 0 = 1 . So , the rest is : 5 + 6 ; Next , "
        "For digits 5 , 6 We have : ( 5 + 6 + carry ) % 1 0 = ( 1 1 + 1 ) % 1 0 = 1 2 % 1 0 == 2 "
        ". and currently , carry : 1 2 // 1 0 = 1 . So , the rest is : + ; Next , "
        "For digits 0 , 0 We have : ( 0 + 0 + carry ) % 1 0 = ( 0 + 1 ) % 1 0 = 1 % 1 0 == 1 "
        ". and currently , carry : 1 // 1 0 = 0 . So , the rest is : + "
        ". Thus , The answer is 1 2 5 ."
    )
    assert " ".join(ex.answer) == expected


def test_addition_partial_formats_by_hand():
    ex = get_task("addition", scratchpad="__o__").make(57, 68)
    assert " ".join(ex.answer) == (
        "Thinking step by step : == 5 ; Next , == 2 ; Next , == 1 . Thus , The answer is 1 2 5 .")
    ex = get_task("addition", scratchpad="00000").make(57, 68)
    assert " ".join(ex.answer) == "Thinking step by step : ; Next , ; Next , . Thus , The answer is 1 2 5 ."
    task = get_task("addition", scratchpad="_____")
    assert task.parse_scratchpad(ex.answer) == [ScratchpadStep()] * 3
    ex = get_task("addition", scratchpad="i___r").make(5, 4)
    assert " ".join(ex.answer) == (
        "Thinking step by step : For digits 5 , 4 So , the rest is : + . Thus , The answer is 9 .")


def test_lego_full_scratchpad_by_hand():
    ex = get_task("lego", scratchpad="icovr").make(["a", "b", "c"], [-1, 1, 1], "c")
    assert " ".join(ex.prompt) == "If a = -1 , b = - a , c = + b . Then , what is the value of c ?"
    assert " ".join(ex.answer) == (
        "Thinking step by step : "
        "For variable a We have : == -1 . and currently , a = -1 . So , the rest is : b = - a , c = + b "
        "; Next , "
        "For variable b We have : - a = - -1 == +1 . and currently , b = +1 . So , the rest is : c = + b "
        "; Next , "
        "For variable c We have : + b = + +1 == +1 . and currently , c = +1 . So , the rest is : "
        ". Thus , The answer is +1 ."
    )


def test_sort_scratchpad_by_hand():
    """The reference's example: selection sort of M E F F O."""
    ex = get_task("sort_single", scratchpad="i_o_r").make(list("MEFFO"))
    steps = get_task("sort_single", scratchpad="i_o_r").parse_scratchpad(ex.answer)
    assert [(s.input, s.output, s.remaining) for s in steps] == [
        ("M", "E", "[ M , F , F , O ]"),
        ("M", "F", "[ M , F , O ]"),
        ("M", "F", "[ M , O ]"),
        ("M", "M", "[ O ]"),
        ("O", "O", "[ ]"),
    ]
    assert ex.meta["final_answer"] == "The sorted list is [ E , F , F , M , O ] .".split()
    assert ex.meta["steps"][0].variables == "sorted : [ E ]"


def test_polynomial_summation_parity_scratchpads_by_hand():
    steps = get_task("polynomial", scratchpad="icovr").make([3, -1], [2, 0], 2).meta["steps"]
    assert steps == [
        ScratchpadStep("3 * x ** 2", "3 * 2 ** 2 = 3 * 4", "1 2", "sum : ( 0 + 1 2 ) % 1 0 = 2",
                       "- 1 * x ** 0"),
        ScratchpadStep("- 1 * x ** 0", "- 1 * 2 ** 0 = - 1 * 1", "- 1", "sum : ( 2 + - 1 ) % 1 0 = 1", ""),
    ]
    steps = get_task("summation", scratchpad="icovr").make([3, 9]).meta["steps"]
    assert steps == [
        ScratchpadStep("3", "3 + sum = 3 + 0 =", "3", "sum : 3 % 1 0 = 3", "9"),
        ScratchpadStep("9", "9 + sum = 9 + 3 =", "1 2", "sum : 1 2 % 1 0 = 2", ""),
    ]
    steps = get_task("parity", scratchpad="icovr").make([1, 1, 0]).meta["steps"]
    assert [(s.computation, s.output, s.variables, s.remaining) for s in steps] == [
        ("1 ** par = 1 ** 0", "1", "par : 1", "[ 1 , 0 ]"),
        ("1 ** par = 1 ** 1", "0", "par : 0", "[ 0 ]"),
        ("0 ** par = 0 ** 0", "0", "par : 0", "[ ]"),
    ]


def test_check_scores_the_final_answer_only():
    task = get_task("addition", scratchpad="icovr")
    ex = task.make(57, 68)
    garbled = list(ex.answer)
    garbled[10] = "9"                       # a scratchpad token
    assert task.check(ex, garbled)
    assert not task.check(ex, ex.meta["final_answer"])        # no scratchpad end marker
    assert not task.check(ex, ex.answer[:-2] + ["4", "."])
    assert get_task("addition").check(task.make(57, 68), ex.meta["final_answer"])


def test_parse_errors():
    task = get_task("addition", scratchpad="icovr")
    ex = task.make(57, 68)
    with pytest.raises(ScratchpadParseError, match="must start with 'Thinking step by step :'"):
        task.parse_scratchpad(ex.answer[1:])
    end = ex.answer.index("Thus")
    with pytest.raises(ScratchpadParseError, match="no end marker"):
        task.parse_scratchpad(ex.answer[:end])
    broken = [t for t in ex.answer if t != "=="]
    with pytest.raises(ScratchpadParseError, match="missing marker '=='"):
        task.parse_scratchpad(broken)
    with pytest.raises(ValueError, match="addition: this task instance has no scratchpad"):
        get_task("addition").parse_scratchpad(ex.answer)
    with pytest.raises(ScratchpadParseError, match="renders nothing"):
        parse_scratchpad("Thinking step by step : 5 . Thus ,".split(), FORMATS[0], task.markers)


def test_render_errors():
    markers = ScratchpadMarkers(input="For")
    with pytest.raises(ValueError, match="steps must not be empty"):
        render_scratchpad([], FORMATS[-1], markers)
    with pytest.raises(ValueError, match="step 0 has no 'computation' but format 'icovr' renders it"):
        render_scratchpad([ScratchpadStep("1", None, "2", "3", "4")], FORMATS[-1], markers)
    with pytest.raises(TypeError, match="ScratchpadStep.input must be a str or None"):
        ScratchpadStep(input=3)
