"""What a robot sends: its observation graph as a byte message, next to the bytes of its raw sensor frame.

Huang et al. 2025, arXiv:2506.14180: only the graphs are shared (about 27 KB per packet in the paper),
instead of images. The message here holds a 4-byte node count, the node descriptors and the node
coordinates at the chosen dtypes; the Delaunay edges are not sent because the receiver recomputes them
from the coordinates (:func:`pe_toolkit.domains.multirobot.graph.delaunay_edges` is deterministic). The raw
observation is the RGB-D frame of :func:`pe_toolkit.domains.multirobot.simulator.render_observation` (uint8 RGB +
uint16 depth), measured uncompressed and zlib-compressed.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

from pe_toolkit.domains.multirobot.simulator import Observation, PairSample, World, render_observation

__all__ = ["bandwidth_table", "decode_message", "encode_message", "mean_message_bytes", "message_bytes",
           "raw_observation_bytes"]

_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def _dtype(name: str, value: str) -> np.dtype:
    if value not in _DTYPES:
        raise ValueError(f"{name} must be one of {sorted(_DTYPES)}, got {value!r}")
    return np.dtype(_DTYPES[value])


def encode_message(observation: Observation, *, descriptor_dtype: str = "float32",
                   coordinate_dtype: str = "float32") -> bytes:
    """``uint32 n | descriptors (n, D) | coordinates (n, 2)``, little-endian, at the given dtypes."""
    d, c = _dtype("descriptor_dtype", descriptor_dtype), _dtype("coordinate_dtype", coordinate_dtype)
    n = len(observation)
    header = np.array([n], dtype="<u4").tobytes()
    return (header + observation.descriptors.astype(d.newbyteorder("<")).tobytes()
            + observation.positions.astype(c.newbyteorder("<")).tobytes())


def decode_message(message: bytes, descriptor_dim: int, *, descriptor_dtype: str = "float32",
                   coordinate_dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode_message`: ``(descriptors (n, D), coordinates (n, 2))``.

    Raises:
        ValueError: if the message length does not match its header.
    """
    d, c = _dtype("descriptor_dtype", descriptor_dtype), _dtype("coordinate_dtype", coordinate_dtype)
    if len(message) < 4:
        raise ValueError(f"message too short for its 4-byte header: {len(message)} bytes")
    n = int(np.frombuffer(message[:4], dtype="<u4")[0])
    expected = 4 + n * descriptor_dim * d.itemsize + n * 2 * c.itemsize
    if len(message) != expected:
        raise ValueError(f"message has {len(message)} bytes, its header (n={n}, D={descriptor_dim}) says {expected}")
    split = 4 + n * descriptor_dim * d.itemsize
    descriptors = np.frombuffer(message[4:split], dtype=d.newbyteorder("<")).reshape(n, descriptor_dim)
    return descriptors, np.frombuffer(message[split:], dtype=c.newbyteorder("<")).reshape(n, 2)


def message_bytes(observation: Observation, **dtypes: str) -> int:
    """Length in bytes of :func:`encode_message`."""
    return len(encode_message(observation, **dtypes))


def raw_observation_bytes(world: World, pose, *, width: int = 640, height: int = 480) -> dict[str, int]:
    """Bytes of the rendered RGB-D frame: ``{"raw": uncompressed, "zlib": zlib level 6}``."""
    rgb, depth = render_observation(world, pose, width=width, height=height)
    payload = rgb.tobytes() + depth.tobytes()
    return {"raw": len(payload), "zlib": len(zlib.compress(payload, 6))}


def mean_message_bytes(observations: Sequence[Observation], **dtypes: str) -> float:
    """The mean :func:`message_bytes` of ``observations`` (``dtypes`` as in :func:`encode_message`)."""
    if not len(observations):
        raise ValueError("mean_message_bytes: no observations")
    return float(np.mean([message_bytes(o, **dtypes) for o in observations]))


def bandwidth_table(world: World, pairs: Sequence[PairSample], *, raw_frames: int) -> list[dict[str, object]]:
    """Bytes per message, mean over both robots' observations of ``pairs``, against the raw RGB-D frame of ``world``
    rendered at robot a's pose in the first ``raw_frames`` pairs (uncompressed and zlib): one dict per payload,
    ``{"payload", "bytes", "ratio_to_raw"}`` (``ratio_to_raw``: bytes / the uncompressed frame's)."""
    if isinstance(raw_frames, bool) or not isinstance(raw_frames, int) or not 1 <= raw_frames:
        raise ValueError(f"bandwidth_table: raw_frames must be an int >= 1, got {raw_frames!r}")
    if not len(pairs):
        raise ValueError("bandwidth_table: no pairs")
    frames = [raw_observation_bytes(world, p.a.pose) for p in pairs[:raw_frames]]
    observations = [o for p in pairs for o in (p.a, p.b)]
    rows = [
        {"payload": "graph message, float32 descriptors + float32 coordinates",
         "bytes": mean_message_bytes(observations)},
        {"payload": "graph message, float16 descriptors + float16 coordinates",
         "bytes": mean_message_bytes(observations, descriptor_dtype="float16", coordinate_dtype="float16")},
        {"payload": "raw RGB-D frame 640x480 (uint8 RGB + uint16 depth), uncompressed",
         "bytes": float(np.mean([f["raw"] for f in frames]))},
        {"payload": "raw RGB-D frame 640x480, zlib level 6", "bytes": float(np.mean([f["zlib"] for f in frames]))},
    ]
    return [{**row, "ratio_to_raw": row["bytes"] / rows[2]["bytes"]} for row in rows]
