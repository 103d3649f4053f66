"""Sequential recommendation: SASRec with pluggable positional encodings, MovieLens-100k and a synthetic log.

``import domains.recsys`` registers the domain's encoders under ``domain="recsys"``:

>>> import pe_toolkit as pet, domains.recsys
>>> pet.list_encoders(domain="recsys")
['cape', 'time_interval']

The Lightning parts (``SASRecModule``, ``SequentialRecDataModule``) live in
``domains.recsys.lightning_module`` so that this import does not load Lightning.
"""

from domains.recsys.cape import CAPE, cape_positions
from domains.recsys.data import (
    Interactions,
    UserSequences,
    build_sequences,
    load_interactions,
    movielens_100k_path,
)
from domains.recsys.metrics import TIE_POLICIES, ranking_metrics, target_rank_counts
from domains.recsys.model import SASRec, default_encoding_options
from domains.recsys.split import EvalExamples, TrainExamples, leave_one_out, left_pad, time_positions
from domains.recsys.synthetic import contextual_count_log
from domains.recsys.time_interval import TimeIntervalBias, clipped_intervals

__all__ = [
    "CAPE", "EvalExamples", "Interactions", "SASRec", "TIE_POLICIES", "TimeIntervalBias",
    "TrainExamples", "UserSequences", "build_sequences", "cape_positions", "clipped_intervals",
    "contextual_count_log", "default_encoding_options", "leave_one_out", "left_pad", "load_interactions",
    "movielens_100k_path", "ranking_metrics", "target_rank_counts", "time_positions",
]
