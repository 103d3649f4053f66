"""Sequential recommendation: SASRec with pluggable positional encodings, MovieLens-100k and a synthetic log.

``import pe_toolkit.domains.recsys`` registers the domain's encoders under ``domain="recsys"``:

>>> import pe_toolkit as pet, pe_toolkit.domains.recsys
>>> pet.list_encoders(domain="recsys")
['cape', 'time_interval']

The Lightning parts (``SASRecModule``, ``SequentialRecDataModule``) live in
``pe_toolkit.domains.recsys.lightning_module`` so that this import does not load Lightning.
"""

from pe_toolkit.domains.recsys.cape import CAPE, cape_positions
from pe_toolkit.domains.recsys.data import (
    Interactions,
    UserSequences,
    build_sequences,
    filter_kcore,
    load_interactions,
    movielens_100k_path,
)
from pe_toolkit.domains.recsys.metrics import TIE_POLICIES, ranking_metrics, target_rank_counts
from pe_toolkit.domains.recsys.model import SASRec, default_encoding_options
from pe_toolkit.domains.recsys.split import (
    EvalExamples,
    TrainExamples,
    leave_one_out,
    left_pad,
    sequential_split,
    split_points,
    time_positions,
)
from pe_toolkit.domains.recsys.synthetic import contextual_count_log
from pe_toolkit.domains.recsys.time_interval import TimeIntervalBias, clipped_intervals

__all__ = [
    "CAPE", "EvalExamples", "Interactions", "SASRec", "TIE_POLICIES", "TimeIntervalBias",
    "TrainExamples", "UserSequences", "build_sequences", "cape_positions", "clipped_intervals",
    "contextual_count_log", "default_encoding_options", "filter_kcore", "leave_one_out", "left_pad",
    "load_interactions", "movielens_100k_path", "ranking_metrics", "sequential_split", "split_points",
    "target_rank_counts", "time_positions",
]
