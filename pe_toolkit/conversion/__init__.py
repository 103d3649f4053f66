"""Model conversions: MHA -> MLA (Ji et al. 2025, arXiv:2502.14837) with partial-RoPE selection."""

from pe_toolkit.conversion.mha2mla import (
    SVD_METHODS,
    MLAConversion,
    calibration_pair_scores,
    convert_to_mla,
    svd_low_rank,
)
from pe_toolkit.conversion.partial_rope import (
    PARTIAL_ROPE_STRATEGIES,
    pair_dims,
    pair_norms,
    select_rope_pairs,
    two_norm_scores,
)

__all__ = [
    "PARTIAL_ROPE_STRATEGIES", "SVD_METHODS", "MLAConversion", "calibration_pair_scores", "convert_to_mla",
    "pair_dims", "pair_norms", "select_rope_pairs", "svd_low_rank", "two_norm_scores",
]
