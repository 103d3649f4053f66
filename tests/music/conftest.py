"""Music test fixtures: a hand-checked chorale, small synthetic scores."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def bwv66():
    """BWV 66.6 (``Christ unser Herr zum Jordan kam``, F# minor), parsed once per session."""
    from music21 import corpus

    from pe_toolkit.domains.music.scores import score_to_piece

    return score_to_piece(corpus.parse("bach/bwv66.6"), name="bwv66.6")
