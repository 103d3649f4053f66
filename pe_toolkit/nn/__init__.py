"""Attention, blocks and the Transformer that call the positional encodings' hooks."""

from pe_toolkit.nn.attention import MultiHeadAttention, positional_logits
from pe_toolkit.nn.block import MLP, TransformerBlock
from pe_toolkit.nn.diagnostics import attention_entropy, attention_probabilities
from pe_toolkit.nn.kv_cache import KVCache
from pe_toolkit.nn.latent_attention import LatentKVCache, MultiHeadLatentAttention
from pe_toolkit.nn.positions import randomized_positions
from pe_toolkit.nn.transformer import Transformer, TransformerConfig

__all__ = [
    "KVCache", "LatentKVCache", "MLP", "MultiHeadAttention", "MultiHeadLatentAttention", "Transformer",
    "TransformerBlock", "TransformerConfig",
    "attention_entropy", "attention_probabilities", "positional_logits", "randomized_positions",
]
