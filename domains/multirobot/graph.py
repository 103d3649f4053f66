"""Per-robot observation graphs: objects as nodes, Delaunay edges weighted by distance.

Huang et al. 2025, "NOPE", arXiv:2506.14180 (graph per robot): nodes are the detected objects, edges
the Delaunay triangulation of their positions, with weights ``A_ij = ||v_i - v_j||_2``.

Degenerate inputs get a defined graph instead of a Qhull error: no node or one node -> no edges; two
nodes, or all nodes on one line (Delaunay is undefined) -> a path through the points in their order
along the line.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import Delaunay

__all__ = ["delaunay_edges", "edge_distance_matrix"]

NO_EDGE = -1.0
"""The entry of :func:`edge_distance_matrix` for a pair of nodes without an edge."""


def _check_points(points) -> np.ndarray:
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"points must have shape (N, 2), got {points.shape}")
    if not np.isfinite(points).all():
        raise ValueError("points contain NaN or inf")
    return points


def delaunay_edges(points) -> tuple[np.ndarray, np.ndarray]:
    """Undirected Delaunay edges of 2-D points and their lengths.

    Args:
        points: ``(N, 2)`` node positions.
    Returns:
        ``edge_index`` int64 ``(2, 2E)`` (each edge in both directions, PyG layout, sorted) and
        ``weights`` float64 ``(2E,)`` = the Euclidean length of each edge.
    """
    points = _check_points(points)
    n = len(points)
    if n < 2:
        pairs = np.zeros((0, 2), dtype=np.int64)
    else:
        centred = points - points.mean(axis=0)
        collinear = n == 2 or np.linalg.matrix_rank(centred, tol=1e-9 * max(1.0, np.abs(centred).max())) < 2
        if collinear:  # a path along the principal direction
            direction = np.linalg.svd(centred, full_matrices=False)[2][0]
            order = np.argsort(centred @ direction, kind="stable")
            pairs = np.stack([order[:-1], order[1:]], axis=1)
        else:
            simplices = Delaunay(points).simplices  # (T, 3)
            pairs = np.concatenate([simplices[:, [0, 1]], simplices[:, [1, 2]], simplices[:, [0, 2]]])
        pairs = np.unique(np.sort(pairs, axis=1), axis=0)
    both = np.concatenate([pairs, pairs[:, ::-1]]).astype(np.int64)
    both = both[np.lexsort((both[:, 1], both[:, 0]))]
    weights = np.linalg.norm(points[both[:, 0]] - points[both[:, 1]], axis=1) if len(both) else np.zeros(0)
    return both.T.copy(), weights


def edge_distance_matrix(points) -> np.ndarray:
    """Dense ``(N, N)`` float64 matrix: the edge length for Delaunay edges, 0 on the diagonal (self loops),
    :data:`NO_EDGE` (-1) elsewhere. This is the form the edge-aware attention reads."""
    points = _check_points(points)
    n = len(points)
    matrix = np.full((n, n), NO_EDGE)
    np.fill_diagonal(matrix, 0.0)
    edge_index, weights = delaunay_edges(points)
    matrix[edge_index[0], edge_index[1]] = weights
    return matrix
