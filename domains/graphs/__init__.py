"""Graph domain: positional encodings for graphs (PyG transforms + learned encoders) and locally
generated benchmark datasets (CSL, PATTERN, CLUSTER).

``import domains.graphs`` registers the learned encoders under ``domain="graphs"``:

>>> import pe_toolkit as pet, domains.graphs
>>> pet.list_encoders(domain="graphs")
['lap_pe', 'rfp', 'rfp_learned', 'rwse']
"""

from domains.graphs.datasets import (
    CLUSTERDataset,
    CSLDataset,
    PATTERNDataset,
    csl_folds,
    load_edge_list,
    sbm_splits,
)
from domains.graphs.encoders import LapPEEncoder, LearnedRFPEncoder, RFPEncoder, RWSEEncoder
from domains.graphs.models import GINModel, GPSModel, GraphMambaModel, GraphPEInput
from domains.graphs.transforms import LaplacianEigenvectorPE, RandomFeaturePropagation, RandomWalkPE

__all__ = [
    "CLUSTERDataset", "CSLDataset", "PATTERNDataset", "csl_folds", "load_edge_list", "sbm_splits",
    "GINModel", "GPSModel", "GraphMambaModel", "GraphPEInput", "LapPEEncoder", "LaplacianEigenvectorPE",
    "LearnedRFPEncoder",
    "RFPEncoder", "RWSEEncoder",
    "RandomFeaturePropagation", "RandomWalkPE",
]
