"""The classical pipeline: descriptor matching, RANSAC, weighted 2-D Procrustes (Umeyama), overlap decision.

* Weighted Procrustes in 2-D (Umeyama 1991, "Least-squares estimation of transformation parameters
  between two point patterns", IEEE TPAMI 13(4), without scale): the rotation and translation minimising
  ``sum_i w_i ||R s_i + t - d_i||^2`` have the closed form
  ``theta = atan2(sum w (s'_x d'_y - s'_y d'_x), sum w (s'_x d'_x + s'_y d'_y))``, ``t = mu_d - R mu_s``
  on the weighted-centred points ``s'``, ``d'`` (the 2-D case of Umeyama's SVD solution).
* RANSAC (Fischler & Bolles 1981): minimal samples of 2 correspondences, all hypotheses scored at once
  by their inlier count (residual below ``inlier_threshold``), the best refit on its inliers.
* Putative correspondences: mutual nearest neighbours of the descriptors (Euclidean) that pass Lowe's
  ratio test, weighted ``1 / (1 + distance)``.
* Overlap: at least ``min_matches`` RANSAC inliers (:func:`pe_toolkit.domains.multirobot.matching.decide_overlap`, the
  rule NOPE uses too); otherwise "no overlap" and no pose.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pe_toolkit.domains.multirobot.matching import decide_overlap
from pe_toolkit.encoders.base import check_float, check_int

__all__ = ["BaselineResult", "ClassicalBaseline", "descriptor_matches", "ransac_pose", "weighted_procrustes_2d"]


def weighted_procrustes_2d(source, target, weights=None) -> np.ndarray:
    """Rigid 2-D transform ``(x, y, theta)`` that maps ``source`` onto ``target`` in weighted least squares.

    Args:
        source, target: ``(..., n, 2)`` corresponding points (leading dims are independent problems).
        weights: ``(..., n)`` non-negative weights (default 1).
    Returns:
        ``(..., 3)`` poses ``T`` with ``target ~ R(theta) source + (x, y)``.
    Raises:
        ValueError: fewer than 2 points, mismatched shapes, negative or all-zero weights.
    """
    source, target = np.asarray(source, dtype=np.float64), np.asarray(target, dtype=np.float64)
    if source.shape != target.shape or source.ndim < 2 or source.shape[-1] != 2:
        raise ValueError(f"source and target must have the same shape (..., n, 2), got {source.shape} and "
                         f"{target.shape}")
    if source.shape[-2] < 2:
        raise ValueError(f"weighted_procrustes_2d needs at least 2 correspondences, got {source.shape[-2]}")
    weights = np.ones(source.shape[:-1]) if weights is None else np.asarray(weights, dtype=np.float64)
    if weights.shape != source.shape[:-1]:
        raise ValueError(f"weights must have shape {source.shape[:-1]}, got {weights.shape}")
    if (weights < 0).any() or not (weights.sum(-1) > 0).all():
        raise ValueError("weights must be >= 0 with a positive sum per problem")
    w = weights / weights.sum(-1, keepdims=True)
    mu_s = (w[..., None] * source).sum(-2)
    mu_t = (w[..., None] * target).sum(-2)
    s, t = source - mu_s[..., None, :], target - mu_t[..., None, :]
    sin = (w * (s[..., 0] * t[..., 1] - s[..., 1] * t[..., 0])).sum(-1)
    cos = (w * (s[..., 0] * t[..., 0] + s[..., 1] * t[..., 1])).sum(-1)
    theta = np.arctan2(sin, cos)
    c, n = np.cos(theta), np.sin(theta)
    tx = mu_t[..., 0] - (c * mu_s[..., 0] - n * mu_s[..., 1])
    ty = mu_t[..., 1] - (n * mu_s[..., 0] + c * mu_s[..., 1])
    return np.stack([tx, ty, theta], axis=-1)


def _residuals(poses: np.ndarray, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``||R s + t - d||`` for poses ``(K, 3)`` and points ``(n, 2)`` -> ``(K, n)``."""
    c, s = np.cos(poses[:, 2:3]), np.sin(poses[:, 2:3])
    x = c * source[None, :, 0] - s * source[None, :, 1] + poses[:, 0:1]
    y = s * source[None, :, 0] + c * source[None, :, 1] + poses[:, 1:2]
    return np.hypot(x - target[None, :, 0], y - target[None, :, 1])


def ransac_pose(source, target, weights=None, *, inlier_threshold: float = 0.75, iterations: int = 200,
                seed: int | np.random.Generator = 0) -> tuple[np.ndarray | None, np.ndarray]:
    """RANSAC over 2-point minimal samples, then a weighted Procrustes refit on the inliers.

    Args:
        source, target: ``(n, 2)`` putative correspondences (``target ~ R source + t``).
        weights: ``(n,)`` weights of the refit (default 1).
    Returns:
        ``(pose, inliers)``: the pose ``(3,)`` (``None`` when fewer than 2 correspondences are given) and a
        bool ``(n,)`` inlier mask.
    """
    source, target = np.asarray(source, dtype=np.float64), np.asarray(target, dtype=np.float64)
    n = len(source)
    weights = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if n < 2:
        return None, np.zeros(n, dtype=bool)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if n * (n - 1) // 2 <= iterations:  # few correspondences: try every pair
        first, second = np.triu_indices(n, k=1)
    else:
        first = rng.integers(0, n, size=iterations)
        second = (first + rng.integers(1, n, size=iterations)) % n  # distinct from first
    samples = np.stack([first, second], axis=1)  # (K, 2)
    hypotheses = weighted_procrustes_2d(source[samples], target[samples])  # (K, 3)
    inliers = _residuals(hypotheses, source, target) < inlier_threshold  # (K, n)
    best = inliers[np.argmax(inliers.sum(1))]
    pose = hypotheses[np.argmax(inliers.sum(1))]
    for _ in range(2):  # refit on the inliers, re-score
        if best.sum() < 2 or weights[best].sum() <= 0:
            break
        pose = weighted_procrustes_2d(source[best], target[best], weights[best])
        best = _residuals(pose[None], source, target)[0] < inlier_threshold
    return pose, best


def descriptor_matches(desc_a, desc_b, *, ratio: float = 0.9) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mutual nearest neighbours of two descriptor sets that pass Lowe's ratio test.

    Returns:
        ``(index_a, index_b, distance)`` of the putative correspondences (1-D arrays of equal length).
    """
    desc_a, desc_b = np.asarray(desc_a, dtype=np.float64), np.asarray(desc_b, dtype=np.float64)
    if desc_a.ndim != 2 or desc_b.ndim != 2 or desc_a.shape[1] != desc_b.shape[1]:
        raise ValueError(f"descriptors must have shapes (n, D) and (m, D) with equal D, got {desc_a.shape} "
                         f"and {desc_b.shape}")
    if len(desc_a) == 0 or len(desc_b) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, np.zeros(0)
    distance = np.linalg.norm(desc_a[:, None, :] - desc_b[None, :, :], axis=-1)  # (n, m)
    nearest_b = distance.argmin(1)
    nearest_a = distance.argmin(0)
    index_a = np.flatnonzero(nearest_a[nearest_b] == np.arange(len(desc_a)))
    index_b = nearest_b[index_a]
    best = distance[index_a, index_b]
    if desc_b.shape[0] > 1:
        second = np.partition(distance[index_a], 1, axis=1)[:, 1]
        keep = best <= ratio * second
        index_a, index_b, best = index_a[keep], index_b[keep], best[keep]
    return index_a.astype(np.int64), index_b.astype(np.int64), best


@dataclass
class BaselineResult:
    """One pair's estimate: ``pose (3,)`` (NaN when no overlap is decided), ``overlap``, ``match_a (n_a,)``
    (index in b of each of a's nodes, -1 if none) and the number of inliers."""

    pose: np.ndarray
    overlap: bool
    match_a: np.ndarray
    num_inliers: int


class ClassicalBaseline:
    """Descriptor matching + RANSAC + weighted Procrustes, with the shared overlap rule.

    Args:
        ratio: Lowe's ratio-test threshold (0.9).
        inlier_threshold: RANSAC residual threshold in metres (0.75).
        iterations: RANSAC hypotheses (200).
        min_matches: inliers needed to decide "overlap" (3).
        seed: RANSAC sampling seed.
    """

    def __init__(self, *, ratio: float = 0.9, inlier_threshold: float = 0.75, iterations: int = 200,
                 min_matches: int = 3, seed: int = 0) -> None:
        self.ratio = check_float("ratio", ratio)
        self.inlier_threshold = check_float("inlier_threshold", inlier_threshold)
        self.iterations = check_int("iterations", iterations)
        self.min_matches = check_int("min_matches", min_matches)
        self.rng = np.random.default_rng(seed)

    def __call__(self, positions_a, descriptors_a, positions_b, descriptors_b) -> BaselineResult:
        """Estimate ``T_ab`` (b's pose in a's frame) from the two observations (positions ``(n, 2)``)."""
        positions_a, positions_b = np.asarray(positions_a, np.float64), np.asarray(positions_b, np.float64)
        index_a, index_b, distance = descriptor_matches(descriptors_a, descriptors_b, ratio=self.ratio)
        match_a = np.full(len(positions_a), -1, dtype=np.int64)
        pose, inliers = ransac_pose(positions_b[index_b], positions_a[index_a], 1.0 / (1.0 + distance),
                                    inlier_threshold=self.inlier_threshold, iterations=self.iterations,
                                    seed=self.rng)
        num_inliers = int(inliers.sum())
        overlap = pose is not None and bool(decide_overlap(num_inliers, self.min_matches))
        if not overlap:
            return BaselineResult(np.full(3, np.nan), False, match_a, num_inliers)
        match_a[index_a[inliers]] = index_b[inliers]
        return BaselineResult(pose, True, match_a, num_inliers)
