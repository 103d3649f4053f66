"""Delaunay observation graphs, including degenerate inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pe_toolkit.domains.multirobot.graph import NO_EDGE, delaunay_edges, edge_distance_matrix


def test_unit_square_has_four_sides_and_one_diagonal():
    points = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    edge_index, weights = delaunay_edges(points)
    pairs = {tuple(sorted(e)) for e in edge_index.T.tolist()}
    assert len(pairs) == 5 and edge_index.shape == (2, 10)
    assert {(0, 1), (1, 2), (2, 3), (0, 3)} < pairs
    assert sorted(weights.round(12).tolist()) == [1.0] * 8 + [round(math.sqrt(2), 12)] * 2


def test_edge_distance_matrix_is_symmetric_with_no_edge_marks():
    points = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 3.0], [9.0, 9.0]])
    matrix = edge_distance_matrix(points)
    np.testing.assert_array_equal(matrix, matrix.T)
    np.testing.assert_array_equal(np.diag(matrix), np.zeros(4))
    assert matrix[1, 2] == pytest.approx(5.0) and matrix[0, 1] == pytest.approx(4.0)
    num_edges = len({tuple(sorted(e)) for e in delaunay_edges(points)[0].T.tolist()})
    assert (matrix == NO_EDGE).sum() == 16 - 4 - 2 * num_edges


@pytest.mark.parametrize("n", [0, 1])
def test_no_edges_for_zero_or_one_node(n):
    edge_index, weights = delaunay_edges(np.zeros((n, 2)) + 1.0)
    assert edge_index.shape == (2, 0) and weights.shape == (0,)
    assert edge_distance_matrix(np.ones((n, 2))).shape == (n, n)


def test_two_nodes_and_collinear_nodes_give_a_path():
    edge_index, weights = delaunay_edges(np.array([[0.0, 0.0], [3.0, 4.0]]))
    assert edge_index.T.tolist() == [[0, 1], [1, 0]] and weights.tolist() == [5.0, 5.0]
    points = np.array([[2.0, 2.0], [0.0, 0.0], [3.0, 3.0], [1.0, 1.0]])  # on y = x, shuffled
    pairs = {tuple(sorted(e)) for e in delaunay_edges(points)[0].T.tolist()}
    assert pairs == {(1, 3), (0, 3), (0, 2)}


def test_bad_points_raise():
    with pytest.raises(ValueError, match="shape"):
        delaunay_edges(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="NaN or inf"):
        delaunay_edges(np.array([[0.0, np.nan], [1.0, 1.0]]))
