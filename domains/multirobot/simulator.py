"""A seeded 2-D world of objects seen by robots with field-of-view cones; robot pairs with ground truth.

The synthetic stand-in for NOPE's CARLA/SUMO data (Huang et al. 2025, "NOPE: Non-Overlap-Aware
Egocentric Pose Estimation for Collaborative Perception in Connected Autonomy", arXiv:2506.14180):

* **World**: ``num_objects`` objects uniformly in a square of side ``world_size``; each has a class and an
  appearance vector. Its true descriptor is ``[class_scale * one_hot(class), appearance]``
  (``num_classes + appearance_dim`` numbers), so objects of one class differ only by appearance.
* **Robots**: SE(2) poses with a field-of-view cone (``fov_range`` metres, ``fov_angle`` radians, centred
  on the heading). A robot detects each object inside its cone with probability ``detection_prob``, in
  its own frame, with Gaussian position noise (``position_noise``) and descriptor noise
  (``descriptor_noise``); detections come in a random order.
* **Pairs**: a fraction ``non_overlap_fraction`` of the pairs do not overlap at all (the two cones are
  disjoint, checked on a dense polar grid of each cone, so no object can be seen by both); the others
  share at least ``min_shared`` detected objects. Each pair carries the relative pose ``T_ab`` (robot
  b's pose in a's frame, :func:`pe_toolkit.domains.multirobot.geometry.relative_pose`) and the ground-truth
  correspondences (index pairs of detections of the same object).

Every function takes a ``numpy.random.Generator`` or a seed, so datasets are reproducible.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cached_property

import numpy as np

from pe_toolkit.domains.multirobot.geometry import from_frame, relative_pose, to_frame
from pe_toolkit.domains.multirobot.graph import edge_distance_matrix

__all__ = [
    "Observation",
    "PairSample",
    "SimConfig",
    "World",
    "cones_overlap",
    "in_fov",
    "make_world",
    "observe",
    "render_observation",
    "sample_pair",
    "simulate_pairs",
]

_GRID = 48  # polar grid resolution of the cone-disjointness test (per axis)


def _positive(name: str, value, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"SimConfig.{name} must be a number, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        allowed = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"SimConfig.{name} must be finite and {allowed}, got {value}")
    return float(value)


@dataclass(frozen=True)
class SimConfig:
    """Parameters of the world, the sensors and the pair sampler (lengths in metres, angles in radians).

    Attributes:
        world_size: side of the square world.
        num_objects: objects in the world.
        num_classes: object classes (one-hot part of the descriptor).
        appearance_dim: per-object appearance dims of the descriptor.
        class_scale: scale of the one-hot part.
        appearance_scale: standard deviation of the appearance vectors.
        descriptor_noise: standard deviation of the noise added to each observed descriptor entry.
        fov_range: sensing range.
        fov_angle: full opening angle of the cone, in ``(0, 2 pi]``.
        position_noise: standard deviation of the observed object positions (per axis).
        detection_prob: probability of detecting an object inside the cone.
        non_overlap_fraction: fraction of pairs whose cones are disjoint.
        min_shared: detected objects an overlapping pair must share (>= 1).
        max_tries: sampling attempts per pair before giving up with an error.
    """

    world_size: float = 100.0
    num_objects: int = 400
    num_classes: int = 8
    appearance_dim: int = 8
    class_scale: float = 1.0
    appearance_scale: float = 0.5
    descriptor_noise: float = 0.35
    fov_range: float = 20.0
    fov_angle: float = math.radians(100.0)
    position_noise: float = 0.15
    detection_prob: float = 0.9
    non_overlap_fraction: float = 0.3
    min_shared: int = 3
    max_tries: int = 2000

    def __post_init__(self) -> None:
        for name in ("world_size", "class_scale", "fov_range"):
            _positive(name, getattr(self, name))
        for name in ("appearance_scale", "descriptor_noise", "position_noise"):
            _positive(name, getattr(self, name), allow_zero=True)
        for name in ("num_objects", "num_classes", "min_shared", "max_tries"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SimConfig.{name} must be an int >= 1, got {value!r}")
        if isinstance(self.appearance_dim, bool) or not isinstance(self.appearance_dim, int) or self.appearance_dim < 0:
            raise ValueError(f"SimConfig.appearance_dim must be an int >= 0, got {self.appearance_dim!r}")
        if not 0 < _positive("fov_angle", self.fov_angle) <= 2 * math.pi:
            raise ValueError(f"SimConfig.fov_angle must be in (0, 2 pi], got {self.fov_angle}")
        if not 0 < _positive("detection_prob", self.detection_prob) <= 1:
            raise ValueError(f"SimConfig.detection_prob must be in (0, 1], got {self.detection_prob}")
        if not 0 <= _positive("non_overlap_fraction", self.non_overlap_fraction, allow_zero=True) <= 1:
            raise ValueError(f"SimConfig.non_overlap_fraction must be in [0, 1], got {self.non_overlap_fraction}")

    @property
    def descriptor_dim(self) -> int:
        """``num_classes + appearance_dim``."""
        return self.num_classes + self.appearance_dim

    def to_dict(self) -> dict:
        """The parameters as a plain dict (for results files)."""
        return asdict(self)


@dataclass
class World:
    """Objects of the world: ``positions (K, 2)``, ``classes (K,)``, ``descriptors (K, D)`` (noise-free)."""

    positions: np.ndarray
    classes: np.ndarray
    descriptors: np.ndarray
    config: SimConfig


@dataclass
class Observation:
    """What one robot detects, in its own frame.

    Attributes:
        positions: ``(n, 2)`` float64 object positions in the robot's frame (noisy).
        descriptors: ``(n, D)`` float32 appearance descriptors (noisy).
        object_ids: ``(n,)`` int64 world indices of the detected objects (ground truth; never sent).
        pose: ``(3,)`` the robot's world pose (ground truth; never sent).
    """

    positions: np.ndarray
    descriptors: np.ndarray
    object_ids: np.ndarray
    pose: np.ndarray

    def __len__(self) -> int:
        return len(self.object_ids)

    @cached_property
    def edge_matrix(self) -> np.ndarray:
        """``(n, n)`` Delaunay edge lengths (:func:`~pe_toolkit.domains.multirobot.graph.edge_distance_matrix`)."""
        return edge_distance_matrix(self.positions)


@dataclass
class PairSample:
    """Two robots' observations with their ground truth.

    Attributes:
        a, b: the observations.
        pose: ``(3,)`` ``T_ab``, robot b's pose in robot a's frame.
        overlap: whether the two robots share at least one detected object.
        matches: ``(m, 2)`` int64 index pairs ``(i in a, j in b)`` of detections of the same object.
    """

    a: Observation
    b: Observation
    pose: np.ndarray
    overlap: bool
    matches: np.ndarray


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int or a numpy Generator, got {type(seed).__name__}")
    return np.random.default_rng(int(seed))


def make_world(config: SimConfig | None = None, seed: int | np.random.Generator = 0) -> World:
    """A world of ``config.num_objects`` objects with uniform positions, classes and Gaussian appearances."""
    config = config or SimConfig()
    rng = _rng(seed)
    positions = rng.uniform(0.0, config.world_size, size=(config.num_objects, 2))
    classes = rng.integers(0, config.num_classes, size=config.num_objects)
    one_hot = np.eye(config.num_classes)[classes] * config.class_scale
    appearance = rng.normal(0.0, config.appearance_scale, size=(config.num_objects, config.appearance_dim))
    return World(positions, classes, np.concatenate([one_hot, appearance], axis=1), config)


def in_fov(points_local, fov_range: float, fov_angle: float) -> np.ndarray:
    """Bool ``(N,)``: which points (in the robot's frame, ``(N, 2)``) lie inside the cone.

    Inside means ``0 < |p| <= fov_range`` and ``|atan2(y, x)| <= fov_angle / 2`` (the boundary counts as
    inside; the robot's own position does not).
    """
    points = np.asarray(points_local, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2:
        raise ValueError(f"in_fov: points_local must have shape (N, 2), got {points.shape}")
    distance = np.hypot(points[:, 0], points[:, 1])
    bearing = np.abs(np.arctan2(points[:, 1], points[:, 0]))
    return (distance > 0) & (distance <= fov_range) & (bearing <= fov_angle / 2 + 1e-12)


def _cone_grid(config: SimConfig) -> np.ndarray:
    """A polar grid ``(G*G, 2)`` covering the cone in the robot's frame (boundary included)."""
    radii = np.linspace(config.fov_range / _GRID, config.fov_range, _GRID)
    angles = np.linspace(-config.fov_angle / 2, config.fov_angle / 2, _GRID)
    r, a = np.meshgrid(radii, angles, indexing="ij")
    return np.stack([r * np.cos(a), r * np.sin(a)], axis=-1).reshape(-1, 2)


def cones_overlap(pose_a, pose_b, config: SimConfig) -> bool:
    """Whether the two field-of-view cones intersect (tested on a dense polar grid of each cone)."""
    grid = _cone_grid(config)
    a_in_b = in_fov(to_frame(pose_b, from_frame(pose_a, grid)), config.fov_range, config.fov_angle)
    b_in_a = in_fov(to_frame(pose_a, from_frame(pose_b, grid)), config.fov_range, config.fov_angle)
    return bool(a_in_b.any() or b_in_a.any())


def observe(world: World, pose, seed: int | np.random.Generator) -> Observation:
    """The noisy detections of a robot at world ``pose`` (see the module docstring)."""
    config, rng = world.config, _rng(seed)
    pose = np.asarray(pose, dtype=np.float64)
    local = to_frame(pose, world.positions)
    visible = np.flatnonzero(in_fov(local, config.fov_range, config.fov_angle))
    detected = visible[rng.random(len(visible)) < config.detection_prob]
    detected = detected[rng.permutation(len(detected))]
    positions = local[detected] + rng.normal(0.0, config.position_noise, size=(len(detected), 2))
    descriptors = world.descriptors[detected] + rng.normal(0.0, config.descriptor_noise,
                                                           size=(len(detected), config.descriptor_dim))
    return Observation(positions, descriptors.astype(np.float32), detected.astype(np.int64), pose)


def ground_truth_matches(a: Observation, b: Observation) -> np.ndarray:
    """``(m, 2)`` index pairs ``(i, j)`` with ``a.object_ids[i] == b.object_ids[j]``, sorted by ``i``."""
    _, ia, ib = np.intersect1d(a.object_ids, b.object_ids, assume_unique=True, return_indices=True)
    order = np.argsort(ia)
    return np.stack([ia[order], ib[order]], axis=1).astype(np.int64).reshape(-1, 2)


def _random_pose(rng: np.random.Generator, config: SimConfig) -> np.ndarray:
    margin = 0.1 * config.world_size
    x, y = rng.uniform(margin, config.world_size - margin, size=2)
    return np.array([x, y, rng.uniform(-math.pi, math.pi)])


def _overlapping_pose(pose_a: np.ndarray, rng: np.random.Generator, config: SimConfig) -> np.ndarray:
    """Robot b looking at a point inside a's cone from a random side."""
    r = config.fov_range * math.sqrt(rng.uniform(0.05, 0.8))
    phi = rng.uniform(-config.fov_angle / 2, config.fov_angle / 2)
    target = from_frame(pose_a, np.array([[r * math.cos(phi), r * math.sin(phi)]]))[0]
    distance = rng.uniform(0.2, 0.7) * config.fov_range
    side = rng.uniform(-math.pi, math.pi)
    position = target + distance * np.array([math.cos(side), math.sin(side)])
    heading = side + math.pi + rng.uniform(-config.fov_angle / 3, config.fov_angle / 3)
    return np.array([position[0], position[1], math.atan2(math.sin(heading), math.cos(heading))])


def _nearby_pose(pose_a: np.ndarray, rng: np.random.Generator, config: SimConfig) -> np.ndarray:
    """A pose near robot a (within 1.5 ranges), any heading: hard negatives for the overlap decision."""
    distance = rng.uniform(0.0, 1.5) * config.fov_range
    direction = rng.uniform(-math.pi, math.pi)
    return np.array([pose_a[0] + distance * math.cos(direction), pose_a[1] + distance * math.sin(direction),
                     rng.uniform(-math.pi, math.pi)])


def sample_pair(world: World, overlap: bool, seed: int | np.random.Generator) -> PairSample:
    """One pair of robots: overlapping (sharing ``>= min_shared`` detections) or with disjoint cones.

    Raises:
        RuntimeError: if no valid pair was found in ``config.max_tries`` attempts (e.g. a world too sparse
            for ``min_shared``).
    """
    config, rng = world.config, _rng(seed)
    for _ in range(config.max_tries):
        pose_a = _random_pose(rng, config)
        pose_b = _overlapping_pose(pose_a, rng, config) if overlap else _nearby_pose(pose_a, rng, config)
        if not overlap and cones_overlap(pose_a, pose_b, config):
            continue
        a, b = observe(world, pose_a, rng), observe(world, pose_b, rng)
        matches = ground_truth_matches(a, b)
        if overlap and len(matches) < config.min_shared:
            continue
        return PairSample(a, b, relative_pose(pose_a, pose_b), bool(len(matches) > 0), matches)
    kind = "overlapping" if overlap else "non-overlapping"
    raise RuntimeError(f"sample_pair: no {kind} pair found in max_tries={config.max_tries} attempts; "
                       f"make the world denser or lower min_shared={config.min_shared}")


def simulate_pairs(num_pairs: int, seed: int = 0, config: SimConfig | None = None) -> list[PairSample]:
    """``num_pairs`` pairs in one seeded world, ``round(non_overlap_fraction * num_pairs)`` of them disjoint.

    The overlapping and non-overlapping pairs are interleaved in a random (seeded) order.
    """
    if isinstance(num_pairs, bool) or not isinstance(num_pairs, int) or num_pairs < 0:
        raise ValueError(f"simulate_pairs: num_pairs must be an int >= 0, got {num_pairs!r}")
    config = config or SimConfig()
    rng = np.random.default_rng(seed)
    world = make_world(config, rng)
    negatives = round(config.non_overlap_fraction * num_pairs)
    kinds = np.array([False] * negatives + [True] * (num_pairs - negatives))[rng.permutation(num_pairs)]
    return [sample_pair(world, bool(k), rng) for k in kinds]


def render_observation(world: World, pose, *, width: int = 640, height: int = 480, object_radius: float = 0.5,
                       object_height: float = 1.5, camera_height: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """The raw sensor frame a robot would otherwise send: an RGB-D image of the objects in its cone.

    A pinhole camera (horizontal opening ``fov_angle``) at ``camera_height`` renders every object inside
    the cone as an upright box of width ``2 object_radius`` and height ``object_height``, coloured by
    class, painter's order (far first). Used to measure raw-observation bytes next to the graph message.

    Returns:
        ``rgb`` uint8 ``(height, width, 3)`` and ``depth`` uint16 ``(height, width)`` in millimetres
        (0 = no return).
    """
    config = world.config
    if config.fov_angle >= math.pi:
        raise ValueError(f"render_observation: a pinhole camera needs fov_angle < pi, got {config.fov_angle}")
    local = to_frame(pose, world.positions)
    inside = np.flatnonzero(in_fov(local, config.fov_range, config.fov_angle))
    rgb = np.zeros((height, width, 3), dtype=np.uint8)
    depth = np.zeros((height, width), dtype=np.uint16)
    focal = (width / 2) / math.tan(config.fov_angle / 2)
    palette = (np.random.default_rng(12345).uniform(40, 255, size=(config.num_classes, 3))).astype(np.uint8)
    distance = local[inside, 0]  # depth along the optical axis
    for index in inside[np.argsort(-distance)]:
        x, y = local[index]
        u = width / 2 - focal * y / x
        half = focal * object_radius / x
        left, right = max(0, int(u - half)), min(width, int(u + half) + 1)
        top = max(0, int(height / 2 - focal * (object_height - camera_height) / x))
        bottom = min(height, int(height / 2 + focal * camera_height / x) + 1)
        if left < right and top < bottom:
            rgb[top:bottom, left:right] = palette[world.classes[index]]
            depth[top:bottom, left:right] = min(int(x * 1000), np.iinfo(np.uint16).max)
    return rgb, depth
