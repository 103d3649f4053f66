"""Multi-robot domain: non-overlap-aware egocentric pose estimation (NOPE) with position-aware attention.

Huang et al. 2025, "NOPE: Non-Overlap-Aware Egocentric Pose Estimation for Collaborative Perception in
Connected Autonomy", arXiv:2506.14180. A seeded 2-D simulator of robots with field-of-view cones, Delaunay
observation graphs, object positional encodings, the NOPE model (Sinkhorn matching with a dustbin and a
cross-attention pose head), the classical RANSAC + Procrustes baseline, metrics and message sizes.

``import pe_toolkit.domains.multirobot`` registers the object encoders under ``domain="multirobot"``:

>>> import pe_toolkit as pet, pe_toolkit.domains.multirobot
>>> pet.list_encoders(domain="multirobot")
['edge_aware_graph', 'object_fourier', 'object_rope2d']
"""

from pe_toolkit.extras import require_extra

require_extra("multirobot", __name__)

from pe_toolkit.domains.multirobot.bandwidth import encode_message, message_bytes, raw_observation_bytes
from pe_toolkit.domains.multirobot.baseline import ClassicalBaseline, ransac_pose, weighted_procrustes_2d
from pe_toolkit.domains.multirobot.encoders import EdgeAwareGraphEncoding, FourierFeatureEncoding, Rotary2DEncoding
from pe_toolkit.domains.multirobot.geometry import chordal_pose_loss, pose_errors, relative_pose
from pe_toolkit.domains.multirobot.graph import delaunay_edges, edge_distance_matrix
from pe_toolkit.domains.multirobot.matching import (
    assignment_loss,
    decide_overlap,
    extract_matches,
    log_sinkhorn_dustbin,
)
from pe_toolkit.domains.multirobot.model import NOPE, NOPEConfig
from pe_toolkit.domains.multirobot.simulator import PairSample, SimConfig, make_world, simulate_pairs

__all__ = [
    "NOPE", "ClassicalBaseline", "EdgeAwareGraphEncoding", "FourierFeatureEncoding", "NOPEConfig", "PairSample",
    "Rotary2DEncoding", "SimConfig", "assignment_loss", "chordal_pose_loss", "decide_overlap", "delaunay_edges",
    "edge_distance_matrix", "encode_message", "extract_matches", "log_sinkhorn_dustbin", "make_world",
    "message_bytes", "pose_errors", "ransac_pose", "raw_observation_bytes", "relative_pose", "simulate_pairs",
    "weighted_procrustes_2d",
]
