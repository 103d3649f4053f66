"""Choosing decision thresholds on validation pairs (the same score for NOPE and the baseline), the bandwidth
table, and the alignment plot of :mod:`pe_toolkit.domains.multirobot.plotting`."""

from __future__ import annotations

import itertools

import pytest
import torch

from pe_toolkit.domains.multirobot.bandwidth import bandwidth_table, mean_message_bytes, message_bytes
from pe_toolkit.domains.multirobot.baseline import ClassicalBaseline
from pe_toolkit.domains.multirobot.evaluation import (
    evaluate_predictions,
    predict_baseline,
    predict_nope,
    tune_baseline,
    tune_match_threshold,
    tuning_score,
)
from pe_toolkit.domains.multirobot.model import NOPE, NOPEConfig
from pe_toolkit.domains.multirobot.simulator import SimConfig, make_world, simulate_pairs


def test_tuning_score_is_the_mean_of_f1_and_nda():
    assert tuning_score({"f1": 0.5, "nda": 0.75, "success": 0.0}) == 0.625


def test_tune_baseline_takes_the_best_validation_configuration():
    pairs = simulate_pairs(12, 3, SimConfig())
    ratios, inliers = [0.7, 1.0], [0.2, 1.0]
    chosen = tune_baseline(pairs, ratios, inliers, seed=0)
    scores = {(r, t): tuning_score(evaluate_predictions(pairs, predict_baseline(
        pairs, ClassicalBaseline(ratio=r, inlier_threshold=t, seed=0)))) for r, t in itertools.product(ratios, inliers)}
    assert chosen["score"] == max(scores.values()) == scores[(chosen["ratio"], chosen["inlier_threshold"])]
    assert chosen["edge"] is False  # a grid of two values has no interior
    with pytest.raises(ValueError, match=r"ratios must be a non-empty list of values to try, got \[\]"):
        tune_baseline(pairs, [], inliers)


def test_tune_match_threshold_sets_the_best_threshold_and_flags_an_edge():
    torch.manual_seed(0)
    pairs = simulate_pairs(8, 4, SimConfig())
    model = NOPE(NOPEConfig(descriptor_dim=SimConfig().descriptor_dim, dim=16, num_heads=4, graph_layers=1,
                            cross_layers=1))
    scale, grid = SimConfig().fov_range, [0.05, 0.2, 0.5]
    scores = {}
    for tau in grid:
        model.config.match_threshold = tau
        scores[tau] = tuning_score(evaluate_predictions(pairs, predict_nope(model, pairs, scale)))
    chosen = tune_match_threshold(model, pairs, scale, grid)
    best = next(t for t in grid if scores[t] == max(scores.values()))  # the first best on ties
    assert chosen["threshold"] == best == model.config.match_threshold and chosen["score"] == scores[best]
    assert chosen["edge"] == (best != 0.2)  # three values: the middle one is interior
    with pytest.raises(ValueError, match="thresholds must be a non-empty list"):
        tune_match_threshold(model, pairs, scale, [])


def test_bandwidth_table_against_the_raw_frame():
    pairs = simulate_pairs(4, 7, SimConfig())
    table = bandwidth_table(make_world(SimConfig(), 7), pairs, raw_frames=2)
    observations = [o for p in pairs for o in (p.a, p.b)]
    assert table[0]["bytes"] == mean_message_bytes(observations) == pytest.approx(
        sum(message_bytes(o) for o in observations) / 8)
    assert table[1]["bytes"] < table[0]["bytes"]  # float16 halves the payload but not the 4-byte count
    assert table[2]["bytes"] == 640 * 480 * 5 and table[2]["ratio_to_raw"] == 1.0
    assert table[3]["bytes"] < table[2]["bytes"] and table[0]["ratio_to_raw"] == table[0]["bytes"] / (640 * 480 * 5)
    with pytest.raises(ValueError, match="raw_frames must be an int >= 1, got 0"):
        bandwidth_table(make_world(SimConfig(), 7), pairs, raw_frames=0)
    with pytest.raises(ValueError, match="no observations"):
        mean_message_bytes([])


def test_plot_alignment_refuses_bad_poses_and_too_many_methods():
    pytest.importorskip("matplotlib")
    from pe_toolkit.domains.multirobot.plotting import STYLES, plot_alignment

    pair = next(p for p in simulate_pairs(6, 2, SimConfig()) if p.overlap)
    figure = plot_alignment(pair, {"truth": list(pair.pose)}, title="t")
    ax = figure.axes[0]
    assert ax.get_title() == "t"
    truth_points, drawn = ax.collections[1].get_offsets(), ax.collections[2].get_offsets()
    assert torch.allclose(torch.as_tensor(drawn), torch.as_tensor(truth_points))  # the true pose maps onto itself
    with pytest.raises(ValueError, match=r"the pose of 'a' must be \(x, y, theta\)"):
        plot_alignment(pair, {"a": [0.0, 1.0]})
    with pytest.raises(ValueError, match=f"at most {len(STYLES)} methods"):
        plot_alignment(pair, {str(i): None for i in range(len(STYLES) + 1)})
