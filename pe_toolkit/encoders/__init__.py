"""Sequence positional encodings; importing this package registers them all."""

from pe_toolkit.encoders.absolute import LearnedEncoding, ScaledSinusoidalEncoding, SinusoidalEncoding
from pe_toolkit.encoders.base import PositionalEncoding, PositionBiasEncoding
from pe_toolkit.encoders.bayesian import BAM, BAMSSMax
from pe_toolkit.encoders.bias import FIRE, KERPLE, ALiBi, Sandwich, T5RelativeBias
from pe_toolkit.encoders.contextual import CoPE
from pe_toolkit.encoders.rotary import RotaryEncoding
from pe_toolkit.encoders.temperature import TemperatureNoPE

NoPE = PositionalEncoding

__all__ = [
    "ALiBi", "BAM", "BAMSSMax", "CoPE", "FIRE", "KERPLE", "LearnedEncoding", "NoPE", "PositionBiasEncoding",
    "PositionalEncoding", "RotaryEncoding", "Sandwich", "ScaledSinusoidalEncoding", "SinusoidalEncoding",
    "T5RelativeBias", "TemperatureNoPE",
]
