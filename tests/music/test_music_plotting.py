"""plot_piano_rolls: one panel per roll, voice colours at the sounding cells, the pitch range cropped, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pe_toolkit.domains.music.plotting import VOICE_COLOURS, plot_piano_rolls


def test_panels_colours_and_pitch_range():
    reference = torch.zeros(32, 4, 128, dtype=torch.bool)
    reference[:16, 0, 72] = True  # soprano C5, then bass C3
    reference[16:, 3, 48] = True
    fig = plot_piano_rolls({"reference": reference, "empty": torch.zeros(32, 4, 128)}, title="two rolls")
    top, bottom = fig.axes
    assert [ax.get_ylabel() for ax in fig.axes] == ["reference", "empty"] and fig._suptitle.get_text() == "two rolls"
    image = top.images[0]
    assert image.get_extent() == [0, 32, 46, 75]  # pitches 48..72, 2 semitones of margin
    pixels = image.get_array()  # (pitch - 46, step, rgb)
    np.testing.assert_allclose(pixels[72 - 46, 3], VOICE_COLOURS[0])
    np.testing.assert_allclose(pixels[48 - 46, 20], VOICE_COLOURS[3])
    np.testing.assert_allclose(pixels[72 - 46, 20], (1.0, 1.0, 1.0))  # the soprano stopped: white
    assert bottom.images[0].get_extent() == [0, 32, 36, 85] and (bottom.images[0].get_array() == 1).all()
    assert len(top.lines) == 2  # bar lines at steps 0 and 16


def test_bad_rolls_are_refused():
    with pytest.raises(ValueError, match="at least one roll"):
        plot_piano_rolls({})
    with pytest.raises(ValueError, match=r"roll 'a' must have shape \(T, V, 128\), got \(4, 128\)"):
        plot_piano_rolls({"a": torch.zeros(4, 128)})
    with pytest.raises(ValueError, match="roll 'a' must be binary"):
        plot_piano_rolls({"a": torch.full((4, 1, 128), 0.5)})
    with pytest.raises(ValueError, match="steps_per_bar must be a positive int, got 0"):
        plot_piano_rolls({"a": torch.zeros(4, 1, 128)}, steps_per_bar=0)
