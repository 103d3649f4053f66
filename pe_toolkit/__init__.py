"""pe-toolkit: positional encodings for Transformers, in any domain.

>>> import pe_toolkit as pet
>>> "rope" in pet.list_encoders()
True
"""

from pe_toolkit import encoders  # noqa: F401  (registers the sequence encoders)
from pe_toolkit.encoders.base import PositionalEncoding, PositionBiasEncoding
from pe_toolkit.nn import (
    KVCache,
    MultiHeadAttention,
    Transformer,
    TransformerBlock,
    TransformerConfig,
    positional_logits,
)
from pe_toolkit.registry import EncoderInfo, encoder_info, get_encoder, list_encoders, register_encoder

__version__ = "0.1.0"

__all__ = [
    "EncoderInfo", "KVCache", "MultiHeadAttention", "PositionBiasEncoding", "PositionalEncoding", "Transformer",
    "TransformerBlock", "TransformerConfig", "encoder_info", "get_encoder", "list_encoders", "positional_logits",
    "register_encoder",
]
