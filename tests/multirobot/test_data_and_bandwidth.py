"""Batches, the pair file format, message and raw-observation sizes, and the evaluation metrics."""

from __future__ import annotations

import numpy as np
import pytest

from pe_toolkit.domains.multirobot.bandwidth import decode_message, encode_message, message_bytes, raw_observation_bytes
from pe_toolkit.domains.multirobot.data import collate_pairs, load_pairs, save_pairs
from pe_toolkit.domains.multirobot.evaluation import Prediction, evaluate_predictions
from pe_toolkit.domains.multirobot.simulator import SimConfig, make_world, simulate_pairs

SIM = SimConfig()


@pytest.fixture(scope="module")
def pairs():
    return simulate_pairs(10, seed=7, config=SIM)


def test_collate_pads_masks_and_scales(pairs):
    batch = collate_pairs(pairs, SIM.fov_range)
    m = max(len(p.a) for p in pairs)
    assert batch["desc_a"].shape == (10, m, SIM.descriptor_dim) and batch["edges_a"].shape == (10, m, m)
    for s, p in enumerate(pairs):
        k = len(p.a)
        assert batch["mask_a"][s].sum() == k
        np.testing.assert_allclose(batch["xy_a"][s, :k].numpy(), p.a.positions / SIM.fov_range, rtol=1e-6)
        assert (batch["edges_a"][s].diagonal() == 0).all()
        truth = batch["match_a"][s]
        for i, j in p.matches:
            assert truth[i] == j and batch["match_b"][s, j] == i
        assert (truth >= 0).sum() == len(p.matches)
    np.testing.assert_allclose(batch["pose"][:, :2].numpy(), np.stack([p.pose[:2] for p in pairs]) / SIM.fov_range,
                               rtol=1e-6)
    with pytest.raises(ValueError, match="must not be empty"):
        collate_pairs([], 1.0)


def test_save_and_load_round_trip(tmp_path, pairs):
    path = save_pairs(tmp_path / "pairs.npz", pairs)
    loaded = load_pairs(path)
    assert len(loaded) == len(pairs)
    for p, q in zip(pairs, loaded):
        np.testing.assert_array_equal(p.a.positions, q.a.positions)
        np.testing.assert_array_equal(p.b.descriptors, q.b.descriptors)
        np.testing.assert_array_equal(p.matches, q.matches)
        np.testing.assert_array_equal(p.pose, q.pose)
        assert p.overlap == q.overlap


def test_load_rejects_bad_files(tmp_path, pairs):
    with pytest.raises(FileNotFoundError):
        load_pairs(tmp_path / "missing.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable"):
        load_pairs(tmp_path / "junk.npz")
    np.savez(tmp_path / "partial.npz", poses=np.zeros((1, 3)))
    with pytest.raises(ValueError, match="lacks the key"):
        load_pairs(tmp_path / "partial.npz")
    path = save_pairs(tmp_path / "good.npz", pairs)
    arrays = dict(np.load(path))
    arrays["counts_a"] = arrays["counts_a"] + 1
    np.savez(tmp_path / "bad_counts.npz", **arrays)
    with pytest.raises(ValueError, match="do not match sum"):
        load_pairs(tmp_path / "bad_counts.npz")


def test_message_bytes_are_exact_and_decode(pairs):
    obs = pairs[0].a
    n, d = len(obs), SIM.descriptor_dim
    assert message_bytes(obs) == 4 + n * d * 4 + n * 2 * 4
    assert message_bytes(obs, descriptor_dtype="float16", coordinate_dtype="float16") == 4 + n * d * 2 + n * 2 * 2
    descriptors, coordinates = decode_message(encode_message(obs), d)
    np.testing.assert_array_equal(descriptors, obs.descriptors)
    np.testing.assert_array_equal(coordinates, obs.positions.astype(np.float32))
    with pytest.raises(ValueError, match="header"):
        decode_message(encode_message(obs)[:-1], d)
    with pytest.raises(ValueError, match="descriptor_dtype"):
        encode_message(obs, descriptor_dtype="int8")


def test_raw_observation_bytes():
    sizes = raw_observation_bytes(make_world(SIM, 0), [50.0, 50.0, 0.0], width=64, height=48)
    assert sizes["raw"] == 64 * 48 * (3 + 2) and 0 < sizes["zlib"] < sizes["raw"]


def test_metrics_hand_case(pairs):
    perfect = []
    for p in pairs:
        match = np.full(len(p.a), -1)
        match[p.matches[:, 0]] = p.matches[:, 1]
        perfect.append(Prediction(p.pose if p.overlap else np.full(3, np.nan), p.overlap, match))
    metrics = evaluate_predictions(pairs, perfect)
    assert metrics["f1"] == 1.0 and metrics["nda"] == 1.0 and metrics["te_mean"] == 0.0 and metrics["success"] == 1.0
    # declare everything "no overlap": NDA = fraction of non-overlapping pairs, nothing matched, no pose
    none = [Prediction(np.full(3, np.nan), False, np.full(len(p.a), -1)) for p in pairs]
    metrics = evaluate_predictions(pairs, none)
    assert metrics["nda"] == pytest.approx(sum(not p.overlap for p in pairs) / len(pairs))
    assert metrics["f1"] == 0.0 and metrics["coverage"] == 0.0 and np.isnan(metrics["te_mean"])
    # one wrong match out of the true ones: precision 1/2 with two predicted, one right
    p = next(q for q in pairs if q.overlap)
    match = np.full(len(p.a), -1)
    i, j = p.matches[0]
    match[i] = j
    k = p.matches[1, 0]
    match[k] = (p.matches[1, 1] + 1) % len(p.b)  # a wrong partner (len(p.b) >= 3)
    shifted = p.pose + np.array([3.0, 4.0, 0.0])
    metrics = evaluate_predictions([p], [Prediction(shifted, True, match)])
    assert metrics["precision"] == pytest.approx(0.5) and metrics["recall"] == pytest.approx(1 / len(p.matches))
    assert metrics["te_mean"] == pytest.approx(5.0) and metrics["success"] == 0.0
    with pytest.raises(ValueError, match="predictions"):
        evaluate_predictions(pairs, none[:-1])


def _rewrite(tmp_path, path, name, **changes):
    arrays = dict(np.load(path))
    arrays.update(changes)
    np.savez(tmp_path / name, **arrays)
    return tmp_path / name


def test_load_validates_every_array(tmp_path, pairs):
    path = save_pairs(tmp_path / "good.npz", pairs)
    arrays = dict(np.load(path))
    poses = arrays["poses"].copy()
    poses[2, 0] = np.nan
    with pytest.raises(ValueError, match=r"nan_pose\.npz.*poses of pair\(s\) \[2\] contain NaN"):
        load_pairs(_rewrite(tmp_path, path, "nan_pose.npz", poses=poses))
    poses = arrays["poses"].copy()
    poses[0, 2] = np.inf
    with pytest.raises(ValueError, match="poses of pair"):
        load_pairs(_rewrite(tmp_path, path, "inf_theta.npz", poses=poses))
    with pytest.raises(ValueError, match=r"poses must have shape \(P, 3\).*got \(10, 4\)"):
        load_pairs(_rewrite(tmp_path, path, "wide.npz", poses=np.zeros((10, 4))))
    positions = arrays["positions_b"].copy()
    positions[1, 1] = np.nan
    with pytest.raises(ValueError, match=r"positions_b contains NaN or inf \(rows \[1\]\)"):
        load_pairs(_rewrite(tmp_path, path, "nan_xy.npz", positions_b=positions))
    with pytest.raises(ValueError, match="descriptors_a has dim"):
        load_pairs(_rewrite(tmp_path, path, "dims.npz", descriptors_a=arrays["descriptors_a"][:, :-1]))
    with pytest.raises(ValueError, match="overlap must be bool"):
        load_pairs(_rewrite(tmp_path, path, "overlap.npz", overlap=arrays["overlap"].astype(np.float64) * 0.5))
    # index ranges: a match past b's detections, the same detection matched twice, overlap against matches
    first = next(s for s, p in enumerate(pairs) if p.overlap)
    offset = int(arrays["match_counts"][:first].sum())
    matches = arrays["matches"].copy()
    matches[offset, 1] = len(pairs[first].b)
    with pytest.raises(ValueError, match=rf"range\.npz.*pairs\[{first}\]\.matches has an index outside"):
        load_pairs(_rewrite(tmp_path, path, "range.npz", matches=matches))
    matches = arrays["matches"].copy()
    matches[offset + 1, 0] = matches[offset, 0]
    with pytest.raises(ValueError, match="uses a detection of a twice"):
        load_pairs(_rewrite(tmp_path, path, "twice.npz", matches=matches))
    overlap = arrays["overlap"].copy()
    overlap[first] = False
    with pytest.raises(ValueError, match=rf"pairs\[{first}\]: overlap is False but the pair has"):
        load_pairs(_rewrite(tmp_path, path, "flag.npz", overlap=overlap))


def test_load_reads_se2_matrices_and_rejects_invalid_rotations(tmp_path, pairs):
    path = save_pairs(tmp_path / "good.npz", pairs)
    poses = dict(np.load(path))["poses"]
    c, s = np.cos(poses[:, 2]), np.sin(poses[:, 2])
    matrices = np.zeros((len(poses), 3, 3))
    matrices[:, 0, 0], matrices[:, 0, 1], matrices[:, 1, 0], matrices[:, 1, 1] = c, -s, s, c
    matrices[:, :2, 2], matrices[:, 2, 2] = poses[:, :2], 1.0
    loaded = load_pairs(_rewrite(tmp_path, path, "matrices.npz", poses=matrices))
    np.testing.assert_allclose(np.stack([p.pose for p in loaded]), poses, atol=1e-12)
    scaled = matrices.copy()
    scaled[3, :2, :2] *= 1.01  # not orthonormal
    with pytest.raises(ValueError, match=r"poses\[3\] has a rotation block that is not orthonormal"):
        load_pairs(_rewrite(tmp_path, path, "scaled.npz", poses=scaled))
    reflected = matrices.copy()
    reflected[4, :2, 1] *= -1  # orthonormal, det -1
    with pytest.raises(ValueError, match=r"poses\[4\] has a rotation block with det != \+1"):
        load_pairs(_rewrite(tmp_path, path, "reflected.npz", poses=reflected))
    projective = matrices.copy()
    projective[0, 2, 0] = 0.5
    with pytest.raises(ValueError, match=r"poses\[0\] has a last row other than \[0, 0, 1\]"):
        load_pairs(_rewrite(tmp_path, path, "projective.npz", poses=projective))


def test_a_nan_pose_is_rejected_before_any_fit(pairs):
    from dataclasses import replace

    from pe_toolkit.domains.multirobot.data import PairDataModule

    bad = list(pairs)
    bad[1] = replace(bad[1], pose=np.array([np.nan, 0.0, 0.0]))
    data = PairDataModule(SIM, train_pairs=bad, val_pairs=pairs, test_pairs=pairs)
    with pytest.raises(ValueError, match=r"train_pairs\[1\]\.pose must be 3 finite numbers"):
        data.setup()
    with pytest.raises(ValueError, match=r"collate_pairs: pairs \[1\] have a non-finite pose"):
        collate_pairs(bad, SIM.fov_range)
