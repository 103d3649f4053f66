"""The simulator: reproducibility, the non-overlap fraction, ground truth consistent with the geometry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pe_toolkit.domains.multirobot.geometry import from_frame, to_frame
from pe_toolkit.domains.multirobot.simulator import (
    SimConfig,
    cones_overlap,
    in_fov,
    make_world,
    observe,
    render_observation,
    simulate_pairs,
)

CONFIG = SimConfig()


@pytest.fixture(scope="module")
def pairs():
    return simulate_pairs(40, seed=3, config=CONFIG)


def test_same_seed_same_pairs(pairs):
    again = simulate_pairs(40, seed=3, config=CONFIG)
    for p, q in zip(pairs, again):
        np.testing.assert_array_equal(p.a.positions, q.a.positions)
        np.testing.assert_array_equal(p.matches, q.matches)
    other = simulate_pairs(40, seed=4, config=CONFIG)
    assert not np.array_equal(pairs[0].pose, other[0].pose)


def test_non_overlap_fraction_and_ground_truth(pairs):
    non_overlapping = [p for p in pairs if not p.overlap]
    assert len(non_overlapping) == round(0.3 * 40)
    for p in pairs:
        if p.overlap:
            assert len(p.matches) >= CONFIG.min_shared
            assert cones_overlap(p.a.pose, p.b.pose, CONFIG)  # overlapping views share their cones
        else:
            assert len(p.matches) == 0 and not cones_overlap(p.a.pose, p.b.pose, CONFIG)
        # the same object ids, and the true pose maps b's detections onto a's within the noise
        assert (p.a.object_ids[p.matches[:, 0]] == p.b.object_ids[p.matches[:, 1]]).all()
        if len(p.matches):
            mapped = from_frame(p.pose, p.b.positions[p.matches[:, 1]])
            residual = np.linalg.norm(mapped - p.a.positions[p.matches[:, 0]], axis=1)
            assert residual.max() < 8 * CONFIG.position_noise


def test_detections_lie_in_the_cone_up_to_noise():
    world = make_world(CONFIG, 0)
    pose = np.array([50.0, 50.0, 1.0])
    obs = observe(world, pose, 0)
    exact = to_frame(pose, world.positions[obs.object_ids])
    assert in_fov(exact, CONFIG.fov_range, CONFIG.fov_angle).all()
    assert np.abs(obs.positions - exact).max() < 6 * CONFIG.position_noise
    visible = in_fov(to_frame(pose, world.positions), CONFIG.fov_range, CONFIG.fov_angle).sum()
    assert 0.7 * visible <= len(obs) <= visible  # detection_prob = 0.9
    noiseless = SimConfig(position_noise=0.0, descriptor_noise=0.0, detection_prob=1.0)
    clean = observe(make_world(noiseless, 0), pose, 0)
    np.testing.assert_allclose(clean.positions, to_frame(pose, make_world(noiseless, 0).positions[clean.object_ids]))


def test_disjoint_cones_hand_case():
    back_to_back = cones_overlap([0.0, 0.0, 0.0], [0.0, 0.0, math.pi], CONFIG)
    facing = cones_overlap([0.0, 0.0, 0.0], [10.0, 0.0, math.pi], CONFIG)
    assert not back_to_back and facing


def test_render_observation_frame():
    world = make_world(CONFIG, 0)
    rgb, depth = render_observation(world, [50.0, 50.0, 0.0], width=64, height=48)
    assert rgb.shape == (48, 64, 3) and rgb.dtype == np.uint8
    assert depth.shape == (48, 64) and depth.dtype == np.uint16
    assert depth.max() <= CONFIG.fov_range * 1000 and (depth > 0).any()


@pytest.mark.parametrize("field, value, match", [
    ("fov_angle", 7.0, "fov_angle"), ("detection_prob", 0.0, "detection_prob"), ("num_objects", 0, "num_objects"),
    ("non_overlap_fraction", 1.5, "non_overlap_fraction"), ("fov_range", -1.0, "fov_range"),
])
def test_bad_config_raises(field, value, match):
    with pytest.raises(ValueError, match=match):
        SimConfig(**{field: value})


def test_impossible_overlap_raises_a_clear_error():
    sparse = SimConfig(num_objects=2, min_shared=3, max_tries=20)
    with pytest.raises(RuntimeError, match="min_shared"):
        simulate_pairs(1, seed=0, config=SimConfig(**{**sparse.to_dict(), "non_overlap_fraction": 0.0}))
    with pytest.raises(ValueError, match="num_pairs"):
        simulate_pairs(-1)
