"""Graph domain: positional encodings for graphs (PyG transforms + learned encoders) and locally
generated benchmark datasets (CSL, PATTERN, CLUSTER).

``import pe_toolkit.domains.graphs`` registers the learned encoders under ``domain="graphs"``:

>>> import pe_toolkit as pet, pe_toolkit.domains.graphs
>>> pet.list_encoders(domain="graphs")
['lap_pe', 'rfp', 'rfp_learned', 'rwse']
"""

from pe_toolkit.extras import require_extra

require_extra("graphs", __name__)

from pe_toolkit.domains.graphs.datasets import (
    CLUSTERDataset,
    CSLDataset,
    PATTERNDataset,
    csl_folds,
    load_edge_list,
    random_sparse_graph,
    sbm_splits,
)
from pe_toolkit.domains.graphs.encoders import LapPEEncoder, LearnedRFPEncoder, RFPEncoder, RWSEEncoder
from pe_toolkit.domains.graphs.models import GINModel, GPSModel, GraphMambaModel, GraphPEInput
from pe_toolkit.domains.graphs.transforms import (
    LaplacianEigenvectorPE,
    RandomFeaturePropagation,
    RandomWalkPE,
    laplacian_residual,
)

__all__ = [
    "CLUSTERDataset", "CSLDataset", "PATTERNDataset", "csl_folds", "load_edge_list", "random_sparse_graph",
    "sbm_splits",
    "GINModel", "GPSModel", "GraphMambaModel", "GraphPEInput", "LapPEEncoder", "LaplacianEigenvectorPE",
    "LearnedRFPEncoder",
    "RFPEncoder", "RWSEEncoder",
    "RandomFeaturePropagation", "RandomWalkPE", "laplacian_residual",
]
