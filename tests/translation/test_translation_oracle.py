"""The oracle cross-lingual positions (issue 28 item 6): what they are, checked where a bug could hide.

An oracle XL-PE once scored below the learned reorderer. These tests pin the premises of the explanation in
docs/tutorials/translation.md: the oracle's positions are the reorderer's training target (the alignment's
BTG reordering), they survive a round trip through Pharaoh files, and in the toy language they (and the
translation) are a function of the source, so the oracle adds no information about the target.
"""

from __future__ import annotations

from collections import Counter

from pe_toolkit.domains.translation import (
    alignment_permutation,
    btg_tree_from_alignment,
    cross_lingual_positions,
    generate_corpus,
    load_parallel_corpus,
)
from pe_toolkit.domains.translation.lightning_module import oracle_positions


def test_oracle_positions_are_the_reorderers_training_target():
    pairs = generate_corpus(300, seed=11, max_depth=2)
    oracle = oracle_positions(pairs)
    assert oracle == [alignment_permutation(p.alignment, len(p.source)) for p in pairs]
    for pair, positions in zip(pairs, oracle):  # strict: every toy alignment is a BTG permutation, never approximated
        tree = btg_tree_from_alignment(pair.alignment, len(pair.source), strict=True)
        assert cross_lingual_positions(tree) == positions
        # position = target rank: the source words sorted by their positions, uppercased, are the target's words
        ordered = [w for _, w in sorted(zip(positions, pair.source)) if w != "a"]
        assert [w.upper() for w in ordered] == [w for w in pair.target if w not in ("GA", "O")]


def test_oracle_positions_survive_pharaoh_files(tmp_path):
    pairs = generate_corpus(50, seed=12, max_depth=2)
    (tmp_path / "src").write_text("".join(" ".join(p.source) + "\n" for p in pairs))
    (tmp_path / "tgt").write_text("".join(" ".join(p.target) + "\n" for p in pairs))
    (tmp_path / "align").write_text("".join(" ".join(f"{s}-{t}" for s, t in p.alignment) + "\n" for p in pairs))
    loaded = load_parallel_corpus(tmp_path / "src", tmp_path / "tgt", tmp_path / "align")
    assert loaded == pairs and oracle_positions(loaded) == oracle_positions(pairs)


def test_translation_and_oracle_positions_are_functions_of_the_source():
    pairs = generate_corpus(4000, seed=13, max_depth=3)
    targets, positions, seen = {}, {}, Counter(p.source for p in pairs)
    for pair, pos in zip(pairs, oracle_positions(pairs)):
        targets.setdefault(pair.source, set()).add(pair.target)
        positions.setdefault(pair.source, set()).add(tuple(pos))
    assert sum(n > 1 for n in seen.values()) >= 20  # sources that repeat, where a conflict could show
    assert all(len(v) == 1 for v in targets.values()) and all(len(v) == 1 for v in positions.values())
