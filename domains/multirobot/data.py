"""Robot pairs as padded tensor batches, a Lightning data module, and an ``.npz`` file format for pairs.

:func:`collate_pairs` turns :class:`~pe_toolkit.domains.multirobot.simulator.PairSample` s into one dense batch
(``M``/``N`` = the largest node count on each side, at least 1; padded nodes are masked):

* ``desc_a`` ``(B, M, D)`` float32: node descriptors of robot a (``desc_b`` likewise, ``N`` nodes);
* ``xy_a`` ``(B, M, 2)`` float32: node coordinates in a's frame, divided by ``scale``;
* ``edges_a`` ``(B, M, M)`` float32: Delaunay edge lengths / ``scale``, -1 for no edge, 0 on the diagonal;
* ``mask_a`` ``(B, M)`` bool: True for real nodes;
* ``match_a`` ``(B, M)`` long: index in b of the same object, or -1 (``match_b`` ``(B, N)``: index in a);
* ``pose`` ``(B, 3)`` float32: ``T_ab`` with the translation divided by ``scale``;
* ``overlap`` ``(B,)`` bool: the pair shares at least one detection.

``scale`` (metres) is the sensor range, so coordinates are in ``[-1, 1]``.

File format (:func:`save_pairs` / :func:`load_pairs`): one ``.npz`` with, for ``P`` pairs,
``positions_a (sum n_a, 2)``, ``descriptors_a (sum n_a, D)``, ``counts_a (P,)`` (and the same for b),
``poses (P, 3)`` (``T_ab``: b's pose in a's frame), ``overlap (P,)`` and ``matches (sum m, 2)`` with
``match_counts (P,)``. Own data (e.g. detections from real robots) can be written in this format.
"""

from __future__ import annotations

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

import os
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from pe_toolkit.atomic import atomic_write
from pe_toolkit.domains.multirobot.simulator import Observation, PairSample, SimConfig, simulate_pairs
from pe_toolkit.encoders.base import check_float, check_int
from pe_toolkit.training.resumable import ResumableDataLoader, trainer_shard

__all__ = ["PairDataModule", "check_pairs", "collate_pairs", "load_pairs", "save_pairs"]

_KEYS = ("positions_a", "descriptors_a", "counts_a", "positions_b", "descriptors_b", "counts_b", "poses", "overlap",
         "matches", "match_counts")


def collate_pairs(pairs: Sequence[PairSample], scale: float) -> dict[str, torch.Tensor]:
    """A padded batch of pairs (see the module docstring for the keys)."""
    scale = check_float("scale", scale)
    if len(pairs) == 0:
        raise ValueError("collate_pairs: pairs must not be empty")
    dim = pairs[0].a.descriptors.shape[1]
    b = len(pairs)
    m = max(1, max(len(p.a) for p in pairs))
    n = max(1, max(len(p.b) for p in pairs))
    out: dict[str, torch.Tensor] = {}
    for side, size in (("a", m), ("b", n)):
        desc = np.zeros((b, size, dim), np.float32)
        xy = np.zeros((b, size, 2), np.float32)
        edges = np.full((b, size, size), -1.0, np.float32)
        edges[:, np.arange(size), np.arange(size)] = 0.0
        mask = np.zeros((b, size), bool)
        for s, pair in enumerate(pairs):
            obs: Observation = getattr(pair, side)
            k = len(obs)
            if obs.descriptors.shape[1] != dim:
                raise ValueError(f"collate_pairs: pair {s} has descriptor dim {obs.descriptors.shape[1]}, "
                                 f"expected {dim}")
            desc[s, :k] = obs.descriptors
            xy[s, :k] = obs.positions / scale
            matrix = obs.edge_matrix
            edges[s, :k, :k] = np.where(matrix >= 0, matrix / scale, -1.0)
            mask[s, :k] = True
        out[f"desc_{side}"], out[f"xy_{side}"] = torch.from_numpy(desc), torch.from_numpy(xy)
        out[f"edges_{side}"], out[f"mask_{side}"] = torch.from_numpy(edges), torch.from_numpy(mask)
    match_a = np.full((b, m), -1, np.int64)
    match_b = np.full((b, n), -1, np.int64)
    for s, pair in enumerate(pairs):
        if len(pair.matches):
            match_a[s, pair.matches[:, 0]] = pair.matches[:, 1]
            match_b[s, pair.matches[:, 1]] = pair.matches[:, 0]
    poses = np.stack([p.pose for p in pairs]).astype(np.float64)
    if not np.isfinite(poses).all():  # one NaN target turns every weight NaN after the first step
        bad = np.flatnonzero(~np.isfinite(poses).all(1))
        raise ValueError(f"collate_pairs: pairs {bad[:10].tolist()} have a non-finite pose {poses[bad[0]].tolist()}; "
                         "ground-truth poses must be finite")
    poses[:, :2] /= scale
    out["match_a"], out["match_b"] = torch.from_numpy(match_a), torch.from_numpy(match_b)
    out["pose"] = torch.from_numpy(poses.astype(np.float32))
    out["overlap"] = torch.tensor([p.overlap for p in pairs], dtype=torch.bool)
    return out


class _Collate:
    def __init__(self, scale: float) -> None:
        self.scale = scale

    def __call__(self, pairs: Sequence[PairSample]) -> dict[str, torch.Tensor]:
        return collate_pairs(pairs, self.scale)


class PairDataModule(L.LightningDataModule):
    """Simulated (or loaded) robot pairs for training and evaluation.

    Args:
        config: the simulator parameters (``fov_range`` is the coordinate scale).
        num_train, num_val, num_test: pairs per split; each split is its own seeded world.
        batch_size: pairs per batch.
        seed: base seed (splits use ``seed``, ``seed + 1``, ``seed + 2``).
        train_pairs, val_pairs, test_pairs: ready-made pairs (e.g. from :func:`load_pairs`) that replace
            the simulated split; validated by :func:`check_pairs` in :meth:`setup` (a ``ValueError`` names
            the split, the pair and the field).
    """

    def __init__(self, config: SimConfig | None = None, *, num_train: int = 512, num_val: int = 128,
                 num_test: int = 256, batch_size: int = 32, seed: int = 0,
                 train_pairs: Sequence[PairSample] | None = None, val_pairs: Sequence[PairSample] | None = None,
                 test_pairs: Sequence[PairSample] | None = None) -> None:
        super().__init__()
        self.config = config or SimConfig()
        self.sizes = {s: check_int(f"num_{s}", v, minimum=0) for s, v in
                      (("train", num_train), ("val", num_val), ("test", num_test))}
        self.batch_size = check_int("batch_size", batch_size)
        self.seed = seed
        self.given = {"train": train_pairs, "val": val_pairs, "test": test_pairs}
        self.pairs: dict[str, list[PairSample]] = {}

    def setup(self, stage: str | None = None) -> None:
        for offset, split in enumerate(("train", "val", "test")):
            if split not in self.pairs:
                given = self.given[split]
                if given is not None:
                    check_pairs(given, what=f"{split}_pairs")  # before any fit: a NaN pose poisons every weight
                self.pairs[split] = list(given) if given is not None else simulate_pairs(
                    self.sizes[split], self.seed + offset, self.config)

    def _loader(self, split: str) -> DataLoader:
        self.setup()
        return DataLoader(self.pairs[split], batch_size=self.batch_size, collate_fn=_Collate(self.config.fov_range))

    def train_dataloader(self) -> ResumableDataLoader:
        # epoch e's order is the permutation of (seed, e); the loader resumes mid-epoch from a checkpoint
        self.setup()
        rank, world = trainer_shard(self.trainer)
        return ResumableDataLoader(self.pairs["train"], batch_size=self.batch_size, seed=self.seed,
                                   collate_fn=_Collate(self.config.fov_range), rank=rank, world_size=world)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")


def save_pairs(path: str | os.PathLike, pairs: Sequence[PairSample]) -> Path:
    """Write pairs to an ``.npz`` file in the format of the module docstring (ground-truth ids are dropped)."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    for side in ("a", "b"):
        obs = [getattr(p, side) for p in pairs]
        arrays[f"positions_{side}"] = np.concatenate([o.positions for o in obs] + [np.zeros((0, 2))])
        dims = {o.descriptors.shape[1] for o in obs}
        if len(dims) > 1:
            raise ValueError(f"save_pairs: every pair must have the same descriptor dim, got {sorted(dims)}")
        arrays[f"descriptors_{side}"] = np.concatenate([o.descriptors for o in obs] + [np.zeros((0, dims.pop() if dims
                                                                                              else 0), np.float32)])
        arrays[f"counts_{side}"] = np.array([len(o) for o in obs], np.int64)
    arrays["poses"] = np.stack([p.pose for p in pairs]) if pairs else np.zeros((0, 3))
    arrays["overlap"] = np.array([p.overlap for p in pairs], bool)
    arrays["matches"] = np.concatenate([p.matches for p in pairs] + [np.zeros((0, 2), np.int64)]).astype(np.int64)
    arrays["match_counts"] = np.array([len(p.matches) for p in pairs], np.int64)
    target = path if path.suffix == ".npz" else path.with_name(path.name + ".npz")
    with atomic_write(target, "wb") as handle:  # a kill or full disk leaves the previous file, never a torn one
        np.savez(handle, **arrays)
    return target


def check_pairs(pairs: Sequence[PairSample], *, what: str = "pairs") -> None:
    """Validate ready-made pairs before anything trains on them or scores them.

    Every pose ``T_ab`` must be three finite numbers, positions and descriptors finite with matching
    shapes, correspondences one-to-one index pairs inside both observations, and ``overlap`` consistent
    with them (a pair that overlaps shares at least one detection; one that does not shares none).

    Raises:
        ValueError: naming ``what``, the pair index and the field that is wrong.
    """
    dims = set()
    for s, pair in enumerate(pairs):
        where = f"{what}[{s}]"
        pose = np.asarray(pair.pose)
        if pose.shape != (3,) or pose.dtype.kind not in "iuf" or not np.isfinite(pose).all():
            raise ValueError(f"{where}.pose must be 3 finite numbers (x, y, theta), got {pose.tolist()}")
        for side in ("a", "b"):
            obs = getattr(pair, side)
            positions, descriptors = np.asarray(obs.positions), np.asarray(obs.descriptors)
            if positions.ndim != 2 or positions.shape[1] != 2 or not np.isfinite(positions).all():
                raise ValueError(f"{where}.{side}.positions must be finite with shape (n, 2), got shape "
                                 f"{positions.shape}" + ("" if np.isfinite(positions).all() else " with NaN or inf"))
            if descriptors.ndim != 2 or len(descriptors) != len(positions) or not np.isfinite(descriptors).all():
                raise ValueError(f"{where}.{side}.descriptors must be finite with shape ({len(positions)}, D), got "
                                 f"shape {descriptors.shape}"
                                 + ("" if np.isfinite(descriptors).all() else " with NaN or inf"))
            dims.add(descriptors.shape[1])
        if len(dims) > 1:
            raise ValueError(f"{where}: every observation must have the same descriptor dim, got {sorted(dims)}")
        matches = np.asarray(pair.matches)
        if matches.size and (matches.ndim != 2 or matches.shape[1] != 2 or matches.dtype.kind not in "iu"):
            raise ValueError(f"{where}.matches must be integer index pairs (m, 2), got {matches.dtype} "
                             f"{matches.shape}")
        if matches.size:
            if matches.min() < 0 or matches[:, 0].max() >= len(pair.a) or matches[:, 1].max() >= len(pair.b):
                raise ValueError(f"{where}.matches has an index outside its observations (a has {len(pair.a)}, "
                                 f"b has {len(pair.b)} detections): {matches.tolist()}")
            for column, side in ((0, "a"), (1, "b")):
                if len(np.unique(matches[:, column])) != len(matches):
                    raise ValueError(f"{where}.matches uses a detection of {side} twice (correspondences are "
                                     f"one-to-one): {matches.tolist()}")
        if bool(pair.overlap) != bool(matches.size):
            raise ValueError(f"{where}: overlap is {bool(pair.overlap)} but the pair has {len(matches)} "
                             "correspondences (overlap means at least one shared detection)")


def _pose_array(poses: np.ndarray, path: Path) -> np.ndarray:
    """``poses`` as ``(P, 3)`` ``(x, y, theta)``: given so, or as ``(P, 3, 3)`` homogeneous SE(2) matrices."""
    if poses.dtype.kind not in "iuf":
        raise ValueError(f"load_pairs: {path}: poses must be numeric, got dtype {poses.dtype}")
    poses = poses.astype(np.float64)
    bad = ~np.isfinite(poses.reshape(len(poses), -1)).all(1) if poses.ndim >= 2 and len(poses) else np.zeros(0, bool)
    if bad.any():
        raise ValueError(f"load_pairs: {path}: poses of pair(s) {np.flatnonzero(bad)[:10].tolist()} contain NaN or "
                         f"inf (a ground-truth pose must be finite)")
    if poses.ndim == 2 and poses.shape[1] == 3:
        return poses
    if poses.ndim != 3 or poses.shape[1:] != (3, 3):
        raise ValueError(f"load_pairs: {path}: poses must have shape (P, 3) (x, y, theta) or (P, 3, 3) "
                         f"(homogeneous SE(2) matrices), got {poses.shape}")
    rotation = poses[:, :2, :2]
    error = np.abs(rotation @ rotation.transpose(0, 2, 1) - np.eye(2)).max(axis=(1, 2))
    det = np.linalg.det(rotation)
    last = np.abs(poses[:, 2] - np.array([0.0, 0.0, 1.0])).max(axis=1)
    for name, wrong in (("has a rotation block that is not orthonormal (R R^T != I)", error > _ROTATION_TOLERANCE),
                        ("has a rotation block with det != +1 (a reflection)", np.abs(det - 1) > _ROTATION_TOLERANCE),
                        ("has a last row other than [0, 0, 1]", last > _ROTATION_TOLERANCE)):
        if wrong.any():
            s = int(np.flatnonzero(wrong)[0])
            raise ValueError(f"load_pairs: {path}: poses[{s}] {name} within {_ROTATION_TOLERANCE}: "
                             f"{poses[s].round(6).tolist()}")
    return np.stack([poses[:, 0, 2], poses[:, 1, 2], np.arctan2(poses[:, 1, 0], poses[:, 0, 0])], axis=1)


_ROTATION_TOLERANCE = 1e-5


def load_pairs(path: str | os.PathLike) -> list[PairSample]:
    """Read pairs written by :func:`save_pairs` (or by your own tools in that format).

    ``poses`` may be ``(P, 3)`` ``(x, y, theta)`` or ``(P, 3, 3)`` homogeneous SE(2) matrices (rotation
    block orthonormal with determinant +1 and last row ``[0, 0, 1]``, within 1e-5). Every array is
    checked before a pair is built: shapes, dtypes, finite values, index ranges, one-to-one matches and
    ``overlap`` against the matches (see :func:`check_pairs`).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a missing key, inconsistent counts or shapes, non-finite values, an invalid rotation or an
            index out of range, naming the file and the array.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_pairs: no file at {path}")
    # a truncated or corrupted file fails in numpy, zipfile or zlib with many exception types
    unreadable = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error)
    try:
        data = np.load(path, allow_pickle=False)
    except unreadable as error:
        raise ValueError(f"load_pairs: {path} is not a readable .npz file ({type(error).__name__}: {error})") from error
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"load_pairs: {path} is a single .npy array, not an .npz archive with keys {list(_KEYS)}")
    with data:
        missing = [k for k in _KEYS if k not in data.files]
        if missing:
            raise ValueError(f"load_pairs: {path} lacks the key(s) {missing}; expected {list(_KEYS)}")
        try:
            arrays = {k: data[k] for k in _KEYS}
        except unreadable as error:
            raise ValueError(f"load_pairs: {path} has a corrupted array ({type(error).__name__}: {error})") from error
    num = len(arrays["poses"]) if arrays["poses"].ndim else -1
    if num < 0:
        raise ValueError(f"load_pairs: {path}: poses must have shape (P, 3) or (P, 3, 3), got a scalar")
    poses = _pose_array(arrays["poses"], path)
    for key in ("counts_a", "counts_b", "overlap", "match_counts"):
        if arrays[key].shape != (num,):
            raise ValueError(f"load_pairs: {path}: {key} must have shape ({num},) (one entry per pose), got "
                             f"{arrays[key].shape}")
    for key in ("counts_a", "counts_b", "match_counts", "matches"):
        if arrays[key].dtype.kind not in "iu" or (arrays[key].size and arrays[key].min() < 0):
            raise ValueError(f"load_pairs: {path}: {key} must hold non-negative integers, got dtype "
                             f"{arrays[key].dtype} with values {arrays[key].ravel()[:6].tolist()}")
    overlap = arrays["overlap"]
    if overlap.dtype.kind != "b" and not (overlap.dtype.kind in "iu" and np.isin(overlap, (0, 1)).all()):
        raise ValueError(f"load_pairs: {path}: overlap must be bool (or 0/1), got dtype {overlap.dtype} with values "
                         f"{overlap.ravel()[:6].tolist()}")
    for key in ("positions_a", "positions_b", "descriptors_a", "descriptors_b"):
        if arrays[key].dtype.kind not in "iuf":
            raise ValueError(f"load_pairs: {path}: {key} must be numeric, got dtype {arrays[key].dtype}")
        if not np.isfinite(arrays[key]).all():
            rows = np.flatnonzero(~np.isfinite(arrays[key].reshape(len(arrays[key]), -1)).all(1))
            raise ValueError(f"load_pairs: {path}: {key} contains NaN or inf (rows {rows[:10].tolist()})")
    if arrays["descriptors_a"].ndim == 2 and arrays["descriptors_b"].ndim == 2 and \
            arrays["descriptors_a"].shape[1] != arrays["descriptors_b"].shape[1]:
        raise ValueError(f"load_pairs: {path}: descriptors_a has dim {arrays['descriptors_a'].shape[1]} but "
                         f"descriptors_b has dim {arrays['descriptors_b'].shape[1]}")
    split: dict[str, list[np.ndarray]] = {}
    for side in ("a", "b"):
        counts = arrays[f"counts_{side}"].astype(np.int64)
        total = int(counts.sum()) if num else 0
        positions, descriptors = arrays[f"positions_{side}"], arrays[f"descriptors_{side}"]
        if positions.shape != (total, 2):
            raise ValueError(f"load_pairs: {path}: positions_{side} must have shape (sum(counts_{side}), 2) = "
                             f"({total}, 2), got {positions.shape}; its rows do not match sum(counts_{side})")
        if descriptors.ndim != 2 or len(descriptors) != total:
            raise ValueError(f"load_pairs: {path}: descriptors_{side} must have shape (sum(counts_{side}), D) with "
                             f"sum = {total}, got {descriptors.shape}; its rows do not match sum(counts_{side})")
        cuts = np.cumsum(counts)[:-1]
        split[f"positions_{side}"] = np.split(positions.astype(np.float64), cuts)
        split[f"descriptors_{side}"] = np.split(descriptors.astype(np.float32), cuts)
    match_cuts = np.cumsum(arrays["match_counts"])[:-1]
    if arrays["matches"].shape != (int(arrays["match_counts"].sum()), 2):
        raise ValueError(f"load_pairs: {path}: matches must have shape (sum(match_counts), 2) = "
                         f"({int(arrays['match_counts'].sum())}, 2), got {arrays['matches'].shape}")
    matches = np.split(arrays["matches"].astype(np.int64), match_cuts)
    pairs = []
    for s in range(num):
        a = Observation(split["positions_a"][s], split["descriptors_a"][s], np.full(len(split["positions_a"][s]), -1),
                        np.full(3, np.nan))
        b = Observation(split["positions_b"][s], split["descriptors_b"][s], np.full(len(split["positions_b"][s]), -1),
                        np.full(3, np.nan))
        pairs.append(PairSample(a, b, poses[s], bool(overlap[s]), matches[s]))
    try:
        check_pairs(pairs, what="pairs")
    except ValueError as error:  # the pair checks, named after this file and its arrays
        raise ValueError(f"load_pairs: {path}: {error} (arrays poses / matches / match_counts / overlap)") from None
    return pairs
