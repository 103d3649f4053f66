"""BTG reordering from hand-built alignments: straight, inverted, nested, unaligned words, non-BTG patterns."""

from __future__ import annotations

import pytest

from pe_toolkit.domains.translation.btg import (
    alignment_permutation,
    btg_tree_from_alignment,
    btg_tree_from_permutation,
    cross_lingual_positions,
    parse_pharaoh,
    reorder,
)


def test_monotone_alignment_is_all_straight():
    tree = btg_tree_from_alignment([(0, 0), (1, 1), (2, 2)], 3)
    assert tree.describe() == "[[0 1] 2]"
    assert cross_lingual_positions(tree) == [0, 1, 2]


def test_single_inversion():
    # "he ate rice" -> "he rice ate" (SVO -> SOV)
    tree = btg_tree_from_alignment([(0, 0), (1, 2), (2, 1)], 3)
    assert tree.describe() == "[0 <1 2>]"
    assert cross_lingual_positions(tree) == [0, 2, 1]
    assert reorder(["he", "ate", "rice"], tree) == ["he", "rice", "ate"]


def test_full_reversal_is_nested_inversions():
    tree = btg_tree_from_permutation([3, 2, 1, 0])
    assert tree.describe() == "<<<0 1> 2> 3>"
    assert cross_lingual_positions(tree) == [3, 2, 1, 0]
    assert [n.kind for n in tree.internal_nodes()] == ["inverted"] * 3


def test_inversion_inside_straight_inside_inversion():
    # target order d c a b: the block [a b] stays straight, c and d each jump in front (greedy reduction)
    tree = btg_tree_from_permutation([2, 3, 1, 0])
    assert tree.describe() == "<<[0 1] 2> 3>"
    assert reorder(list("abcd"), tree) == list("dcab")
    assert cross_lingual_positions(tree) == [2, 3, 1, 0]


def test_unaligned_source_word_travels_with_its_right_neighbour():
    # "a cat sleeps" -> "NEKO GA NERU": "a" has no link, it follows "cat"; target word 1 has no source
    tree = btg_tree_from_alignment([(1, 0), (2, 2)], 3, target_length=3)
    assert cross_lingual_positions(tree) == [0, 1, 2]
    # verb-final with an unaligned article before the object: "ate a apple" -> "APPLE ATE"
    assert alignment_permutation([(0, 1), (2, 0)], 3) == [2, 0, 1]
    assert reorder(["ate", "a", "apple"], btg_tree_from_alignment([(0, 1), (2, 0)], 3)) == ["a", "apple", "ate"]


def test_trailing_unaligned_word_takes_its_left_neighbour():
    # anchors [1, 0, 0 (from token 1)]: token 2 follows token 1 to the front
    assert alignment_permutation([(0, 1), (1, 0)], 3) == [2, 0, 1]


def test_many_to_one_links_keep_source_order_and_anchor_on_the_mean():
    # tokens 0 and 1 both align to target 1; token 2 to target 0, token 3 to targets 0 and 4 (mean 2)
    assert alignment_permutation([(0, 1), (1, 1), (2, 0), (3, 0), (3, 4)], 4) == [1, 2, 0, 3]


def test_no_links_is_the_identity():
    assert alignment_permutation([], 4) == [0, 1, 2, 3]


def test_positions_equal_target_ranks_for_binarizable_permutations():
    import itertools

    for n in range(1, 6):
        for perm in itertools.permutations(range(n)):
            tree = btg_tree_from_permutation(list(perm))
            if all(not _has_2413(perm, pattern) for pattern in ((1, 3, 0, 2), (2, 0, 3, 1))):
                assert cross_lingual_positions(tree) == list(perm)
            assert sorted(cross_lingual_positions(tree)) == list(range(n))


def _has_2413(perm, pattern):
    import itertools

    for idx in itertools.combinations(range(len(perm)), 4):
        values = [perm[i] for i in idx]
        if sorted(range(4), key=lambda j: values[j]) == sorted(range(4), key=lambda j: pattern[j]):
            return True
    return False


def test_non_btg_permutation_strict_raises_and_lenient_joins_straight_with_a_warning():
    from pe_toolkit.domains.translation import NonBTGPermutationWarning

    with pytest.raises(ValueError, match="2413 or 3142"):
        btg_tree_from_permutation([1, 3, 0, 2], strict=True)
    # never silently: the identity it falls back to is named in the warning
    with pytest.warns(NonBTGPermutationWarning, match=r"\[1, 3, 0, 2\].*\[0, 1, 2, 3\] \(the identity: no reordering"
                      r".*4 of 4 tokens away"):
        tree = btg_tree_from_permutation([1, 3, 0, 2])
    assert tree.describe() == "[[[0 1] 2] 3]"
    assert cross_lingual_positions(tree) == [0, 1, 2, 3]
    # a non-binarizable core inside a longer sentence: the binarizable parts are still reordered
    with pytest.warns(NonBTGPermutationWarning, match=r"6 leftover blocks.*\[0, 1, 2, 3, 4, 6, 5\], 4 of 7"):
        tree = btg_tree_from_permutation([2, 4, 1, 3, 0, 6, 5])
    assert cross_lingual_positions(tree)[5:] == [6, 5]
    # through the alignment path too (SVO -> a 2413 target order)
    with pytest.warns(NonBTGPermutationWarning):
        btg_tree_from_alignment([(0, 1), (1, 3), (2, 0), (3, 2)], 4)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: btg_tree_from_alignment([], 0), ValueError, "source_length must be >= 1"),
        (lambda: btg_tree_from_permutation([]), ValueError, "must not be empty"),
        (lambda: btg_tree_from_permutation([0, 0]), ValueError, "permutation of 0..1"),
        (lambda: btg_tree_from_permutation([0, 1.0]), TypeError, "must hold ints"),
        (lambda: btg_tree_from_alignment([(3, 0)], 3), ValueError, "source index 3 is outside"),
        (lambda: btg_tree_from_alignment([(0, 5)], 3, target_length=2), ValueError, r"target index 5 must be \[0, 2\)"),
        (lambda: btg_tree_from_alignment([(0,)], 3), TypeError, "pair of ints"),
        (lambda: reorder(["a"], btg_tree_from_permutation([0, 1])), ValueError, "there are 1 tokens"),
        (lambda: parse_pharaoh("0-1 2_3"), ValueError, "'2_3'"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_parse_pharaoh():
    assert parse_pharaoh("0-0 1-2  2-1\n") == [(0, 0), (1, 2), (2, 1)]
    assert parse_pharaoh("") == []
