"""Bracketing transduction grammar (BTG) reordering of a source sentence toward target word order.

Ding, Wang, Tao 2020, "Self-Attention with Cross-Lingual Position Representation", ACL 2020,
arXiv:2004.13310: the source sentence is reordered by a latent BTG tree (Wu 1997, "Stochastic Inversion
Transduction Grammars and Bilingual Parsing of Parallel Corpora", Computational Linguistics 23(3)) whose
internal nodes are *straight* (children kept in order) or *inverted* (children swapped); the index of each
source token in the reordered sentence is its **cross-lingual position**.

Here the tree is derived from a word alignment:

1. every source token gets an anchor, the mean target index of its links; an unaligned source token takes
   the anchor of the nearest aligned token to its right (else to its left), so it travels with its head;
2. a stable sort of the anchors (ties keep source order) gives the target rank ``pi[i]`` of each token;
3. the classic shift-reduce algorithm for binarizable permutations (Zhang, Huang, Gildea, Knight 2006,
   "Synchronous Binarization for Machine Translation") merges two adjacent blocks whenever their rank
   ranges are contiguous: *straight* if the left block's ranks come first, *inverted* otherwise.

A permutation that no BTG tree can produce (it contains the patterns 2413 or 3142, e.g. ``[1, 3, 0, 2]``)
leaves several blocks on the stack. ``strict=True`` raises; otherwise the remaining blocks are joined
*straight*, i.e. the reordering is the BTG approximation that keeps those blocks in source order, and a
:class:`NonBTGPermutationWarning` says so (for ``[1, 3, 0, 2]`` every block is one token, so the result is
the identity: no reordering at all).

Everything here is plain Python on one sentence at a time (preprocessing, not a model hot path).

Example:
    >>> tree = btg_tree_from_alignment([(0, 0), (1, 2), (2, 1)], source_length=3)
    >>> tree.describe()
    '[0 <1 2>]'
    >>> cross_lingual_positions(tree)
    [0, 2, 1]
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "BTGNode",
    "NonBTGPermutationWarning",
    "alignment_permutation",
    "btg_tree_from_alignment",
    "btg_tree_from_permutation",
    "check_alignment",
    "cross_lingual_positions",
    "parse_pharaoh",
    "reorder",
]

STRAIGHT, INVERTED, LEAF = "straight", "inverted", "leaf"


class NonBTGPermutationWarning(UserWarning):
    """A permutation that no BTG tree produces was approximated (leftover blocks joined straight)."""


@dataclass(frozen=True)
class BTGNode:
    """A node of a BTG tree over the source span ``[start, end)``.

    Attributes:
        kind: ``"leaf"`` (one source token, ``end == start + 1``), ``"straight"`` or ``"inverted"``.
        start, end: the source span covered.
        left, right: the children of an internal node (``None`` for a leaf); ``left`` covers the
            earlier part of the *source* span in both orientations.
    """

    kind: str
    start: int
    end: int
    left: BTGNode | None = None
    right: BTGNode | None = None

    def order(self) -> list[int]:
        """Source indices in reordered (target-side) order: straight = left then right, inverted = right then left."""
        out: list[int] = []
        stack: list[BTGNode] = [self]
        while stack:  # iterative pre-order, so deep trees do not hit the recursion limit
            node = stack.pop()
            if node.kind == LEAF:
                out.append(node.start)
                continue
            first, second = (node.left, node.right) if node.kind == STRAIGHT else (node.right, node.left)
            stack.append(second)
            stack.append(first)
        return out

    def internal_nodes(self) -> list[BTGNode]:
        """Every non-leaf node (pre-order)."""
        out, stack = [], [self]
        while stack:
            node = stack.pop()
            if node.kind != LEAF:
                out.append(node)
                stack.extend((node.right, node.left))
        return out

    def describe(self) -> str:
        """Bracket notation: ``[a b]`` straight, ``<a b>`` inverted, leaves as source indices."""
        if self.kind == LEAF:
            return str(self.start)
        inner = f"{self.left.describe()} {self.right.describe()}"
        return f"[{inner}]" if self.kind == STRAIGHT else f"<{inner}>"


def _leaf(i: int) -> BTGNode:
    return BTGNode(LEAF, i, i + 1)


def _merge(kind: str, left: BTGNode, right: BTGNode) -> BTGNode:
    return BTGNode(kind, left.start, right.end, left, right)


def check_alignment(alignment: Iterable[Sequence[int]], source_length: int, target_length: int | None = None) -> list[
        tuple[int, int]]:
    """Validate alignment links ``(source_index, target_index)``; returns them as a sorted list of int pairs.

    Raises:
        TypeError: a link is not a pair of ints.
        ValueError: ``source_length < 1`` (an empty sentence), or an index out of range.
    """
    if isinstance(source_length, bool) or not isinstance(source_length, int):
        raise TypeError(f"btg: source_length must be an int, got {type(source_length).__name__}")
    if source_length < 1:
        raise ValueError(f"btg: source_length must be >= 1 (an empty sentence has no reordering), got {source_length}")
    if target_length is not None and (isinstance(target_length, bool) or not isinstance(target_length, int)
                                      or target_length < 1):
        raise ValueError(f"btg: target_length must be an int >= 1, got {target_length!r}")
    links = []
    for link in alignment:
        if len(link) != 2 or any(isinstance(v, bool) or not isinstance(v, int) for v in link):
            raise TypeError(f"btg: each alignment link must be a (source, target) pair of ints, got {link!r}")
        s, t = link
        if not 0 <= s < source_length:
            raise ValueError(f"btg: alignment source index {s} is outside [0, {source_length})")
        if t < 0 or (target_length is not None and t >= target_length):
            bound = f"[0, {target_length})" if target_length is not None else ">= 0"
            raise ValueError(f"btg: alignment target index {t} must be {bound}")
        links.append((s, t))
    return sorted(set(links))


def alignment_permutation(alignment: Iterable[Sequence[int]], source_length: int,
                          target_length: int | None = None) -> list[int]:
    """Target rank ``pi[i]`` of every source token (a permutation of ``range(source_length)``).

    Anchor of a token = mean target index of its links; unaligned tokens take the anchor of the nearest
    aligned token to the right (else left); ties keep source order. With no link at all: the identity.
    """
    links = check_alignment(alignment, source_length, target_length)
    sums = [0.0] * source_length
    counts = [0] * source_length
    for s, t in links:
        sums[s] += t
        counts[s] += 1
    anchors: list[float | None] = [sums[i] / counts[i] if counts[i] else None for i in range(source_length)]
    if all(a is None for a in anchors):
        return list(range(source_length))
    following: float | None = None
    for i in range(source_length - 1, -1, -1):  # unaligned -> nearest aligned to the right
        if anchors[i] is None:
            anchors[i] = following
        else:
            following = anchors[i]
    preceding: float | None = None
    for i in range(source_length):  # trailing unaligned tokens -> nearest aligned to the left
        if anchors[i] is None:
            anchors[i] = preceding
        preceding = anchors[i]
    order = sorted(range(source_length), key=lambda i: (anchors[i], i))
    ranks = [0] * source_length
    for rank, i in enumerate(order):
        ranks[i] = rank
    return ranks


def _check_permutation(permutation: Sequence[int]) -> list[int]:
    values = list(permutation)
    if not values:
        raise ValueError("btg: permutation must not be empty (an empty sentence has no reordering)")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise TypeError(f"btg: permutation must hold ints, got {values!r}")
    if sorted(values) != list(range(len(values))):
        raise ValueError(f"btg: permutation must be a permutation of 0..{len(values) - 1}, got {values!r}")
    return values


def btg_tree_from_permutation(permutation: Sequence[int], *, strict: bool = False) -> BTGNode:
    """A BTG tree whose reordering puts source token ``i`` at target rank ``permutation[i]``.

    Shift-reduce: each token is pushed as a block ``(tree, min rank, max rank)``; while the two top blocks
    have contiguous rank ranges they are merged, straight if the lower block's ranks come first, inverted
    otherwise. Greedy reduction is complete for binarizable permutations (Zhang et al. 2006).

    Args:
        permutation: target rank of each source token, a permutation of ``0..n-1``.
        strict: raise if no BTG tree yields the permutation (instead of joining the leftover blocks straight
            with a :class:`NonBTGPermutationWarning`).
    Raises:
        ValueError: empty or invalid permutation; a non-binarizable one with ``strict=True``.
    Warns:
        NonBTGPermutationWarning: a non-binarizable permutation with ``strict=False``; it names the
            permutation, the reordering actually produced and how many source positions differ.
    """
    ranks = _check_permutation(permutation)
    stack: list[tuple[BTGNode, int, int]] = []
    for i, r in enumerate(ranks):
        stack.append((_leaf(i), r, r))
        while len(stack) >= 2:
            (a, alo, ahi), (b, blo, bhi) = stack[-2], stack[-1]
            if ahi + 1 == blo:
                kind = STRAIGHT
            elif bhi + 1 == alo:
                kind = INVERTED
            else:
                break
            stack[-2:] = [(_merge(kind, a, b), min(alo, blo), max(ahi, bhi))]
    if len(stack) > 1 and strict:
        raise ValueError(f"btg: permutation {ranks!r} cannot be produced by a BTG tree "
                         "(it contains a 2413 or 3142 pattern); pass strict=False to join the blocks straight")
    tree = stack[0][0]
    for node, _, _ in stack[1:]:
        tree = _merge(STRAIGHT, tree, node)
    if len(stack) > 1:
        got = cross_lingual_positions(tree)
        wrong = sum(a != b for a, b in zip(got, ranks))
        identity = " (the identity: no reordering at all)" if got == list(range(len(ranks))) else ""
        warnings.warn(
            f"btg: permutation {ranks!r} cannot be produced by a BTG tree (it contains a 2413 or 3142 pattern); "
            f"its {len(stack)} leftover blocks are kept in source order, giving the cross-lingual positions "
            f"{got!r}{identity}, {wrong} of {len(ranks)} tokens away from their target rank; pass strict=True to "
            "raise instead", NonBTGPermutationWarning, stacklevel=2)
    return tree


def btg_tree_from_alignment(alignment: Iterable[Sequence[int]], source_length: int, *,
                            target_length: int | None = None, strict: bool = False) -> BTGNode:
    """The BTG tree of :func:`btg_tree_from_permutation` for the ranks of :func:`alignment_permutation`."""
    return btg_tree_from_permutation(alignment_permutation(alignment, source_length, target_length), strict=strict)


def cross_lingual_positions(tree: BTGNode) -> list[int]:
    """Position of each source token ``i`` (index ``i`` of the result) in the reordered sentence."""
    positions = [0] * (tree.end - tree.start)
    for new_index, i in enumerate(tree.order()):
        positions[i - tree.start] = new_index
    return positions


def reorder(tokens: Sequence, tree: BTGNode) -> list:
    """``tokens`` rearranged into the tree's target-side order.

    Raises:
        ValueError: if the tree does not span exactly ``len(tokens)`` tokens.
    """
    if tree.start != 0 or tree.end != len(tokens):
        raise ValueError(f"btg: the tree spans [{tree.start}, {tree.end}) but there are {len(tokens)} tokens")
    return [tokens[i] for i in tree.order()]


def parse_pharaoh(line: str) -> list[tuple[int, int]]:
    """Parse one line of a Pharaoh / fast_align alignment file, ``"0-0 1-2 2-1"`` -> ``[(0, 0), (1, 2), (2, 1)]``.

    Raises:
        ValueError: a field that is not ``i-j`` with non-negative integers.
    """
    links = []
    for field in line.split():
        parts = field.split("-")
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
            raise ValueError(f"btg: alignment field {field!r} is not 'i-j' with non-negative integers (line {line!r})")
        links.append((int(parts[0]), int(parts[1])))
    return links
