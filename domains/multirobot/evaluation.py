"""Predictions of NOPE and the classical baseline on robot pairs, and the paper's metrics.

Metrics (Huang et al. 2025, arXiv:2506.14180, Sec. "Metrics"): precision, recall and F1 of the
correspondences; position error (Euclidean, metres) and rotation error (geodesic, degrees) of ``T_ab``;
non-overlap detection accuracy (NDA: the overlap decision is right). Pose errors are averaged over the
pairs that truly overlap *and* for which the method decided "overlap" (so it returned a pose);
``coverage`` is that fraction of the overlapping pairs, and ``success`` the fraction of overlapping pairs
with a pose within ``success_translation`` metres and ``success_rotation`` degrees (a declined pair
counts as a failure), which makes methods with different coverage comparable.

Both methods have decision thresholds (NOPE's match threshold; the baseline's Lowe ratio and RANSAC inlier
threshold). :func:`tune_match_threshold` and :func:`tune_baseline` pick them on validation pairs by the same
:func:`tuning_score`, ``(F1 + NDA) / 2``, so that a comparison gives both the same tuning budget.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pe_toolkit.domains.multirobot.baseline import ClassicalBaseline, weighted_procrustes_2d
from pe_toolkit.domains.multirobot.data import collate_pairs
from pe_toolkit.domains.multirobot.geometry import pose_errors
from pe_toolkit.domains.multirobot.model import NOPE
from pe_toolkit.domains.multirobot.simulator import PairSample
from pe_toolkit.encoders.base import check_choice, check_int

__all__ = ["Prediction", "evaluate_predictions", "predict_baseline", "predict_nope", "tune_baseline",
           "tune_match_threshold", "tuning_score"]


@dataclass
class Prediction:
    """One pair's estimate: ``pose (3,)`` in metres / radians (NaN when there is none), the overlap decision
    and ``match_a (n_a,)`` (index in b of each of a's nodes, -1 if unmatched)."""

    pose: np.ndarray
    overlap: bool
    match_a: np.ndarray


def predict_baseline(pairs: Sequence[PairSample], baseline: ClassicalBaseline | None = None) -> list[Prediction]:
    """Run the classical pipeline on every pair."""
    baseline = baseline or ClassicalBaseline()
    out = []
    for pair in pairs:
        result = baseline(pair.a.positions, pair.a.descriptors, pair.b.positions, pair.b.descriptors)
        out.append(Prediction(result.pose, result.overlap, result.match_a))
    return out


@torch.no_grad()
def predict_nope(model: NOPE, pairs: Sequence[PairSample], scale: float, *, batch_size: int = 64,
                 pose_source: str = "head") -> list[Prediction]:
    """Run NOPE on every pair (eval mode).

    Args:
        scale: the coordinate scale the model was trained with (``fov_range``).
        pose_source: ``"head"`` (the paper's pose regression) or ``"procrustes"`` (weighted Procrustes on
            NOPE's own matches, weights = assignment probabilities; no pose with fewer than 2 matches).
    """
    check_choice("pose_source", pose_source, ("head", "procrustes"))
    check_int("batch_size", batch_size)
    was_training = model.training
    model.eval()
    out: list[Prediction] = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        result = model(collate_pairs(chunk, scale))
        pose = result["pose"].double().numpy()
        for s, pair in enumerate(chunk):
            match_a = result["match_a"][s, :len(pair.a)].numpy().copy()
            overlap = bool(result["overlap"][s])
            estimate = np.full(3, np.nan)
            if overlap and pose_source == "head":
                estimate = np.array([pose[s, 0] * scale, pose[s, 1] * scale, math.atan2(pose[s, 3], pose[s, 2])])
            elif overlap:
                rows = np.flatnonzero(match_a >= 0)
                weights = result["match_score"][s, rows].double().numpy()
                if len(rows) >= 2 and weights.sum() > 0:
                    estimate = weighted_procrustes_2d(pair.b.positions[match_a[rows]], pair.a.positions[rows], weights)
            out.append(Prediction(estimate, overlap, match_a))
    model.train(was_training)
    return out


def evaluate_predictions(pairs: Sequence[PairSample], predictions: Sequence[Prediction], *,
                         success_translation: float = 1.0, success_rotation: float = 5.0) -> dict[str, float]:
    """The metrics of the module docstring over a set of pairs (micro-averaged correspondences)."""
    if len(pairs) != len(predictions):
        raise ValueError(f"got {len(pairs)} pairs but {len(predictions)} predictions")
    if not pairs:
        raise ValueError("evaluate_predictions: no pairs")
    true_positive = predicted = actual = 0
    correct_decisions = 0
    translation, rotation, successes, overlapping = [], [], 0, 0
    for pair, pred in zip(pairs, predictions):
        if pred.match_a.shape != (len(pair.a),):
            raise ValueError(f"match_a must have shape ({len(pair.a)},), got {pred.match_a.shape}")
        truth = np.full(len(pair.a), -1)
        if len(pair.matches):
            truth[pair.matches[:, 0]] = pair.matches[:, 1]
        predicted += int((pred.match_a >= 0).sum())
        actual += len(pair.matches)
        true_positive += int(((pred.match_a >= 0) & (pred.match_a == truth)).sum())
        correct_decisions += int(pred.overlap == pair.overlap)
        if pair.overlap:
            overlapping += 1
            if pred.overlap and np.isfinite(pred.pose).all():
                te, re = pose_errors(pred.pose, pair.pose)
                translation.append(float(te))
                rotation.append(math.degrees(float(re)))
                successes += int(te <= success_translation and math.degrees(float(re)) <= success_rotation)
    precision = true_positive / predicted if predicted else 0.0
    recall = true_positive / actual if actual else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    nan = float("nan")
    return {
        "precision": precision, "recall": recall, "f1": f1,
        "nda": correct_decisions / len(pairs),
        "te_mean": float(np.mean(translation)) if translation else nan,
        "te_median": float(np.median(translation)) if translation else nan,
        "re_mean_deg": float(np.mean(rotation)) if rotation else nan,
        "re_median_deg": float(np.median(rotation)) if rotation else nan,
        "coverage": len(translation) / overlapping if overlapping else nan,
        "success": successes / overlapping if overlapping else nan,
        "pairs": len(pairs), "overlapping": overlapping,
    }


def tuning_score(metrics: dict[str, float]) -> float:
    """The validation score both methods are tuned by: ``(F1 + NDA) / 2`` of :func:`evaluate_predictions`."""
    return (metrics["f1"] + metrics["nda"]) / 2


def _edge(value: float, grid: Sequence[float]) -> bool:
    """The chosen value lies on the border of a grid of >= 3 values (the optimum may lie outside)."""
    return len(grid) >= 3 and value in (min(grid), max(grid))


def _check_grid(name: str, grid: Sequence[float]) -> None:
    if not len(grid):
        raise ValueError(f"{name} must be a non-empty list of values to try, got {list(grid)!r}")


def tune_baseline(pairs: Sequence[PairSample], ratios: Sequence[float], inlier_thresholds: Sequence[float], *,
                  seed: int = 0) -> dict[str, object]:
    """The :class:`ClassicalBaseline` configuration (Lowe ratio x RANSAC inlier threshold) with the best
    :func:`tuning_score` on ``pairs`` (the first best on ties).

    Returns:
        ``{"ratio", "inlier_threshold", "score", "edge"}``; ``edge``: a chosen value lies on the border of a grid
        of >= 3 values (the optimum may lie outside the grid).
    """
    _check_grid("ratios", ratios)
    _check_grid("inlier_thresholds", inlier_thresholds)
    best: dict[str, object] = {"score": -math.inf}
    for ratio, inlier in itertools.product(ratios, inlier_thresholds):
        baseline = ClassicalBaseline(ratio=ratio, inlier_threshold=inlier, seed=seed)
        score = tuning_score(evaluate_predictions(pairs, predict_baseline(pairs, baseline)))
        if score > best["score"]:
            best = {"ratio": ratio, "inlier_threshold": inlier, "score": score}
    best["edge"] = _edge(best["ratio"], ratios) or _edge(best["inlier_threshold"], inlier_thresholds)
    return best


def tune_match_threshold(model: NOPE, pairs: Sequence[PairSample], scale: float,
                         thresholds: Sequence[float]) -> dict[str, object]:
    """Set ``model.config.match_threshold`` to the value of ``thresholds`` with the best :func:`tuning_score` on
    ``pairs`` (the first best on ties; ``scale`` as in :func:`predict_nope`).

    Returns:
        ``{"threshold", "score", "edge"}`` (``edge`` as in :func:`tune_baseline`).
    """
    _check_grid("thresholds", thresholds)
    best: dict[str, object] = {"score": -math.inf}
    for tau in thresholds:
        model.config.match_threshold = tau
        score = tuning_score(evaluate_predictions(pairs, predict_nope(model, pairs, scale)))
        if score > best["score"]:
            best = {"threshold": tau, "score": score}
    model.config.match_threshold = best["threshold"]
    best["edge"] = _edge(best["threshold"], thresholds)
    return best
