"""Passkey retrieval: exact prompt lengths, needle placement, grid, scorers, training windows."""

import doctest

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import pe_toolkit.data.passkey as passkey
from pe_toolkit.data.passkey import (
    COMPACT_TEMPLATE,
    PAPER_TEMPLATE,
    PasskeyTemplate,
    batched_digit_accuracies,
    make_passkey_example,
    passkey_accuracy,
    passkey_grid,
    passkey_training_windows,
    score_passkey,
    teacher_forced_digit_accuracy,
)

MIN = PAPER_TEMPLATE.min_length


def test_template_sizes():
    assert MIN == 149 + 60 + 38 == 247
    assert COMPACT_TEMPLATE.min_length == 98


def test_prompt_layout():
    ex = make_passkey_example(1000, 0.5, 12345)
    prompt = ex.prompt_bytes
    assert len(prompt) == 1000 and ex.length == 1000
    assert prompt.startswith(PAPER_TEMPLATE.prefix.encode())
    assert prompt.endswith(b"\nWhat is the pass key? The pass key is")
    needle = b"\nThe pass key is 12345. Remember it. 12345 is the pass key.\n"
    assert prompt[ex.needle_start : ex.needle_start + len(needle)] == needle
    assert prompt.count(b"12345") == 2
    assert ex.answer == b" 12345" and ex.digits == b"12345" and ex.key == 12345
    haystack = prompt[149 : ex.needle_start] + prompt[ex.needle_start + 60 : -38]
    filler = PAPER_TEMPLATE.filler.encode()
    assert haystack == (filler * 20)[: len(haystack)]  # one continuous haystack around the needle
    assert ex.prompt_ids().shape == (1, 1000) and ex.prompt_ids().dtype == torch.long


@pytest.mark.parametrize("length", [MIN, MIN + 1, 300, 511, 1024, 4097])
@pytest.mark.parametrize("depth", [0.0, 0.1, 1 / 3, 0.5, 0.9, 1.0])
def test_prompt_length_is_exact(length, depth):
    ex = make_passkey_example(length, depth, 54321)
    assert len(ex.prompt_bytes) == length
    assert ex.prompt_bytes[ex.needle_start :].startswith(b"\nThe pass key is 54321.")


def test_depth_extremes():
    start = make_passkey_example(2000, 0.0, 11111)
    end = make_passkey_example(2000, 1.0, 11111)
    assert start.needle_start == 149
    assert end.needle_start + 60 == 2000 - 38  # right before the question


def test_needle_position_is_monotone_in_depth():
    starts = [make_passkey_example(3000, d / 100, 22222).needle_start for d in range(101)]
    assert starts == sorted(starts) and starts[0] < starts[-1]


@settings(max_examples=60, deadline=None)
@given(length=st.integers(MIN, 20_000), depths=st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
       key=st.integers(10_000, 99_999), compact=st.booleans())
def test_length_and_needle_placement_property(length, depths, key, compact):
    template = COMPACT_TEMPLATE if compact else PAPER_TEMPLATE
    low, high = sorted(depths)
    ex = make_passkey_example(length, low, key, template=template)
    prefix = len(template.prefix.encode())
    haystack = length - template.min_length
    assert len(ex.prompt_bytes) == length
    assert abs(ex.needle_start - prefix - low * haystack) <= 0.5  # the needle sits at the requested depth
    assert ex.prompt_bytes[ex.needle_start : ex.needle_start + 60] == template.needle_bytes(key)
    assert int(ex.digits) == key and ex.prompt_bytes.count(str(key).encode()) >= 2
    assert make_passkey_example(length, high, key, template=template).needle_start >= ex.needle_start


def test_errors():
    with pytest.raises(ValueError, match="total_length must be >= 247.*got 246"):
        make_passkey_example(MIN - 1, 0.5, 12345)
    for depth in (-0.01, 1.01, float("nan")):
        with pytest.raises(ValueError, match="depth"):
            make_passkey_example(500, depth, 12345)
    for key in (9999, 100_000):
        with pytest.raises(ValueError, match="key"):
            make_passkey_example(500, 0.5, key)
    with pytest.raises(TypeError, match="key"):
        make_passkey_example(500, 0.5, "12345")
    with pytest.raises(TypeError, match="total_length"):
        make_passkey_example(500.0, 0.5, 12345)
    with pytest.raises(ValueError, match="key"):
        PasskeyTemplate("", "x", "no placeholder", "?")


def test_grid_is_seeded_and_ordered():
    grid = passkey_grid([300, 600], [0.0, 0.5, 1.0], samples=4, seed=1)
    assert len(grid) == 2 * 3 * 4
    assert [ex.length for ex in grid] == [300] * 12 + [600] * 12
    assert [ex.depth for ex in grid[:12]] == [0.0] * 4 + [0.5] * 4 + [1.0] * 4
    assert grid == passkey_grid([300, 600], [0.0, 0.5, 1.0], samples=4, seed=1)
    assert [ex.key for ex in grid] != [ex.key for ex in passkey_grid([300, 600], [0.0, 0.5, 1.0], 4, seed=2)]
    assert all(10_000 <= ex.key <= 99_999 for ex in grid)
    with pytest.raises(ValueError, match="samples"):
        passkey_grid([300], [0.5], samples=0)
    with pytest.raises(ValueError, match="non-empty"):
        passkey_grid([], [0.5], samples=1)


# --- scorers ---------------------------------------------------------------------------------------


def oracle_generate(ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """Reads the key from the needle, like a perfect model; returns only the new ids."""
    text = bytes(ids[0].tolist())
    key = text.split(b"The pass key is ")[1][:5]
    given = text.rsplit(b"The pass key is", 1)[1]  # b" " plus the given digits
    return torch.tensor(list(key[len(given) - 1 :]))[None, :max_new_tokens]


def test_scorer_perfect_and_wrong():
    grid = passkey_grid([300, 700], [0.0, 0.5, 1.0], samples=3, seed=0)
    assert passkey_accuracy(oracle_generate, grid) == 1.0
    assert passkey_accuracy(oracle_generate, grid, prefix_digits=2) == 1.0
    assert passkey_accuracy(lambda ids, n: [ord("0")] * n, grid) == 0.0  # keys never start with 0

    def full_sequence(ids, n):  # what Transformer.generate returns: prompt then the new ids
        return torch.cat([ids, oracle_generate(ids, n)], 1)

    assert passkey_accuracy(full_sequence, grid) == 1.0


def test_scorer_requests_the_right_number_of_digits():
    ex = make_passkey_example(400, 0.3, 12345)
    seen = []

    def spy(ids, n):
        seen.append((bytes(ids[0].tolist()), n))
        return [ord(c) for c in "12345"[5 - n :]]

    assert score_passkey(spy, ex, prefix_digits=1)
    assert seen[-1] == (ex.prompt_bytes + b" 1", 4)
    assert not score_passkey(lambda ids, n: [ord(c) for c in "12346"], ex)
    with pytest.raises(ValueError, match="returned 3 ids"):
        score_passkey(lambda ids, n: [49, 50, 51], ex)
    with pytest.raises(ValueError, match="prefix_digits"):
        score_passkey(spy, ex, prefix_digits=5)
    with pytest.raises(ValueError, match="empty"):
        passkey_accuracy(spy, [])


def one_hot_logits(ids: torch.Tensor, truth: bytes, wrong_positions=()) -> torch.Tensor:
    """Logits whose argmax at position t is truth[t + 1] (a perfect teacher-forced model)."""
    length = ids.shape[1]
    nxt = torch.tensor(list(truth[1 : length + 1]))
    for p in wrong_positions:
        nxt[p] = (nxt[p] + 1) % 256
    return torch.nn.functional.one_hot(nxt, 256).float()[None]  # (1, T, 256)


def test_teacher_forced_digit_accuracy():
    ex = make_passkey_example(350, 0.7, 24680)
    truth = ex.prompt_bytes + ex.answer
    assert teacher_forced_digit_accuracy(lambda ids: one_hot_logits(ids, truth), ex) == 1.0
    last_digit = len(truth) - 2  # logits position that predicts the last digit
    assert teacher_forced_digit_accuracy(lambda ids: one_hot_logits(ids, truth, [last_digit]), ex) == 0.8
    assert teacher_forced_digit_accuracy(lambda ids: one_hot_logits(ids, truth, [last_digit]), ex, 1) == 0.75
    first_digit = len(ex.prompt_bytes)
    assert teacher_forced_digit_accuracy(lambda ids: one_hot_logits(ids, truth, [first_digit]), ex, 1) == 1.0
    assert teacher_forced_digit_accuracy(lambda ids: one_hot_logits(ids, truth)[0], ex) == 1.0  # (T, V) accepted
    with pytest.raises(ValueError, match="logits"):
        teacher_forced_digit_accuracy(lambda ids: torch.zeros(1, 3, 256), ex)


def test_scorers_accept_a_transformer():
    import pe_toolkit as pet

    model = pet.Transformer(pet.TransformerConfig(vocab_size=256, dim=16, num_heads=2, num_layers=1, causal=True,
                                                  encoding="nope"))
    grid = passkey_grid([260], [0.5], samples=2, seed=0)
    assert 0.0 <= passkey_accuracy(model.generate, grid, prefix_digits=1) <= 1.0
    assert 0.0 <= teacher_forced_digit_accuracy(model, grid[0]) <= 1.0


# --- training windows ------------------------------------------------------------------------------


def test_training_windows():
    windows, mask = passkey_training_windows(300, 8, torch.Generator().manual_seed(0))
    assert windows.shape == mask.shape == (8, 301) and windows.dtype == torch.long and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == [6] * 8 and mask[:, -6:].all()
    for row in windows:
        text = bytes(row.tolist())
        prompt, answer = text[:-6], text[-6:]
        assert prompt.endswith(b"The pass key is") and answer[:1] == b" "
        assert b"The pass key is " + answer[1:] + b"." in prompt  # the answer is the needle's key
    again, _ = passkey_training_windows(300, 8, torch.Generator().manual_seed(0))
    assert torch.equal(windows, again)
    compact, _ = passkey_training_windows(256, 2, torch.Generator().manual_seed(0), template=COMPACT_TEMPLATE)
    assert compact.shape == (2, 257)
    assert passkey_training_windows(252, 1)[0].shape == (1, 253)
    with pytest.raises(ValueError, match="length must be >= 252.*got 251"):
        passkey_training_windows(251, 1)


def test_module_docstring_example_runs():
    result = doctest.testmod(passkey)
    assert result.attempted > 0 and result.failed == 0


def test_batched_digit_accuracies_equal_the_one_prompt_scorer():
    import pe_toolkit as pet

    torch.manual_seed(0)
    model = pet.Transformer(pet.TransformerConfig(vocab_size=256, dim=16, num_heads=2, num_layers=2,
                                                  encoding="rope")).eval()
    examples = passkey_grid([123], [0.0, 1.0], 3, seed=0, template=COMPACT_TEMPLATE)
    with torch.no_grad():
        one = [teacher_forced_digit_accuracy(model, ex) for ex in examples]
    assert len(set(one)) > 1  # the untrained model gets some digits right: the scores are not all equal
    for batch_tokens in (1, 2 * 128, 10_000):  # one prompt per pass, two, all at once
        assert batched_digit_accuracies(model, examples, batch_tokens=batch_tokens) == one
    assert batched_digit_accuracies(model, [], batch_tokens=512) == []
    with pytest.raises(ValueError, match=r"examples must have one length, got \[129, 156\]"):
        batched_digit_accuracies(model, examples + passkey_grid([150], [0.0], 1, template=COMPACT_TEMPLATE),
                                 batch_tokens=512)
    with pytest.raises(ValueError, match="batch_tokens must be >= 1"):
        batched_digit_accuracies(model, examples, batch_tokens=0)


def test_passkey_depth_scores_score_each_depth_of_one_length():
    import pe_toolkit as pet
    from pe_toolkit.data.passkey import passkey_depth_scores

    torch.manual_seed(0)
    model = pet.Transformer(pet.TransformerConfig(vocab_size=256, dim=16, num_heads=2, num_layers=2,
                                                  encoding="alibi")).eval()
    cells = passkey_depth_scores(model, 128, [0.0, 1.0], 3, seed=7, template=COMPACT_TEMPLATE, batch_tokens=300)
    examples = passkey_grid([123], [0.0, 1.0], 3, seed=7, template=COMPACT_TEMPLATE)
    assert all(len(ex.prompt_bytes) + 5 == 128 for ex in examples)  # `length` input bytes per prompt
    with torch.no_grad():
        scores = [teacher_forced_digit_accuracy(model, ex) for ex in examples]
    assert [(c["length"], c["depth"], c["samples"]) for c in cells] == [(128, 0.0, 3), (128, 1.0, 3)]
    for cell, chunk in zip(cells, (scores[:3], scores[3:])):
        assert cell["digit_accuracy"] == pytest.approx(sum(chunk) / 3)
        assert cell["exact_match"] == sum(s == 1.0 for s in chunk) / 3
    with pytest.raises(ValueError, match="length must be >= 6"):
        passkey_depth_scores(model, 5, [0.0], 1, seed=0, batch_tokens=64)
