"""Log-space Sinkhorn with a dustbin, the assignment loss, match extraction and the overlap rule."""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.domains.multirobot.matching import (
    assignment_loss,
    decide_overlap,
    extract_matches,
    log_sinkhorn_dustbin,
)


def test_rows_and_columns_sum_correctly():
    m, n = 4, 6
    scores = torch.randn(2, m, n, dtype=torch.float64) * 3
    prob = log_sinkhorn_dustbin(scores, torch.tensor(0.5), iterations=200).exp()
    torch.testing.assert_close(prob[:, :m].sum(2), torch.ones(2, m, dtype=torch.float64))  # real rows: 1
    torch.testing.assert_close(prob[:, :, :n].sum(1), torch.ones(2, n, dtype=torch.float64))  # real columns: 1
    torch.testing.assert_close(prob[:, m].sum(1), torch.full((2,), float(n), dtype=torch.float64))  # dustbin row: N
    torch.testing.assert_close(prob[:, :, n].sum(1), torch.full((2,), float(m), dtype=torch.float64))  # dustbin col: M


def test_padding_gives_the_unpadded_solution():
    a = torch.randn(1, 3, 5, dtype=torch.float64)
    b = torch.randn(1, 4, 2, dtype=torch.float64)
    alpha = torch.tensor(0.3, dtype=torch.float64)
    padded = torch.zeros(2, 4, 5, dtype=torch.float64)
    padded[0, :3, :5], padded[1, :4, :2] = a[0], b[0]
    mask_a = torch.tensor([[True, True, True, False], [True, True, True, True]])
    mask_b = torch.tensor([[True] * 5, [True, True, False, False, False]])
    out = log_sinkhorn_dustbin(padded, alpha, iterations=100, mask_a=mask_a, mask_b=mask_b)
    ref_a = log_sinkhorn_dustbin(a, alpha, iterations=100)[0]
    ref_b = log_sinkhorn_dustbin(b, alpha, iterations=100)[0]
    torch.testing.assert_close(out[0, :3, :5], ref_a[:3, :5])
    torch.testing.assert_close(out[0, 4, :5], ref_a[3, :5])  # dustbin row
    torch.testing.assert_close(out[1, :4, :2], ref_b[:4, :2])
    torch.testing.assert_close(out[1, :4, 5], ref_b[:4, 2])  # dustbin column
    assert torch.isneginf(out[0, 3]).all() and torch.isneginf(out[1, :, 2:5]).all()  # padding gets no mass


def test_a_side_without_nodes_sends_everything_to_the_dustbin():
    scores = torch.randn(2, 3, 2, dtype=torch.float64)
    mask_a = torch.tensor([[False] * 3, [False] * 3])
    mask_b = torch.tensor([[True, True], [False, False]])
    prob = log_sinkhorn_dustbin(scores, torch.tensor(1.0), iterations=20, mask_a=mask_a, mask_b=mask_b).exp()
    assert torch.isfinite(prob).all()
    torch.testing.assert_close(prob[0, 3, :2], torch.ones(2, dtype=torch.float64))  # b's nodes all unmatched
    assert prob[0, :3].sum() == 0
    torch.testing.assert_close(prob[1].sum(), torch.tensor(1.0, dtype=torch.float64))  # both empty: one cell
    assert prob[1, 3, 2] == pytest.approx(1.0)


def test_assignment_loss_prefers_the_truth_and_has_finite_gradients_with_padding():
    scores = torch.zeros(1, 3, 3, dtype=torch.float64, requires_grad=True)
    match_a, match_b = torch.tensor([[1, -1, -1]]), torch.tensor([[-1, 0, -1]])
    mask = torch.tensor([[True, True, False]])
    loss = assignment_loss(log_sinkhorn_dustbin(scores, torch.tensor(0.0), mask_a=mask, mask_b=mask), match_a, mask,
                           match_b, mask)
    loss.backward()
    assert torch.isfinite(scores.grad).all()
    assert scores.grad[0, 0, 1] < 0  # raising the true pair's score lowers the loss
    good = torch.full((1, 3, 3), -5.0, dtype=torch.float64)
    good[0, 0, 1] = 5.0
    better = assignment_loss(log_sinkhorn_dustbin(good, torch.tensor(0.0), mask_a=mask, mask_b=mask), match_a, mask,
                             match_b, mask)
    assert better < loss
    with pytest.raises(ValueError, match="match_a / match_b must have shapes"):
        assignment_loss(torch.zeros(1, 4, 4), match_a[:, :2], mask, match_b, mask)


def test_sinkhorn_gradcheck():
    scores = torch.randn(1, 2, 3, dtype=torch.float64, requires_grad=True)
    alpha = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s, a: log_sinkhorn_dustbin(s, a, iterations=5), (scores, alpha))


def test_extract_matches_mutual_and_hungarian():
    prob = torch.tensor([[[0.70, 0.20, 0.00], [0.60, 0.30, 0.00], [0.00, 0.05, 0.10]]], dtype=torch.float64)
    log = torch.full((1, 4, 4), -30.0, dtype=torch.float64)
    log[:, :3, :3] = prob.clamp_min(1e-30).log()
    match, score = extract_matches(log, threshold=0.2)
    assert match.tolist() == [[0, -1, -1]]  # row 1 prefers column 0 too (not mutual); row 2 below threshold
    assert score[0, 0].item() == pytest.approx(0.7)
    match, _ = extract_matches(log, threshold=0.2, method="hungarian")
    assert match.tolist() == [[0, 1, -1]]  # one-to-one: row 1 takes column 1 (0.3 > 0.2)
    with pytest.raises(ValueError, match="method"):
        extract_matches(log, method="greedy")
    with pytest.raises(ValueError, match="threshold"):
        extract_matches(log, threshold=-1.0)


def test_decide_overlap_rule():
    assert decide_overlap(torch.tensor([0, 2, 3, 7])).tolist() == [False, False, True, True]
    assert decide_overlap(1, min_matches=1) and not decide_overlap(0, min_matches=1)
    with pytest.raises(ValueError, match="min_matches"):
        decide_overlap(3, min_matches=0)


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"scores must have shape \(B, M, N\)"):
        log_sinkhorn_dustbin(torch.zeros(3, 3), torch.tensor(1.0))
    with pytest.raises(ValueError, match="mask_a must be a bool tensor"):
        log_sinkhorn_dustbin(torch.zeros(1, 2, 2), torch.tensor(1.0), mask_a=torch.ones(1, 2))
    with pytest.raises(ValueError, match="alpha must be a scalar"):
        log_sinkhorn_dustbin(torch.zeros(1, 2, 2), torch.ones(2))
