"""``unigram_entropy``: the byte distribution's entropy, the loss of a model that ignores context."""

import math

import pytest
import torch

from pe_toolkit.data import unigram_entropy


def test_entropy_of_known_distributions():
    assert unigram_entropy(torch.tensor([7, 7, 7], dtype=torch.uint8)) == 0.0
    assert unigram_entropy(torch.tensor([0, 0, 1, 1], dtype=torch.uint8)) == pytest.approx(math.log(2))
    assert unigram_entropy(torch.arange(256, dtype=torch.uint8)) == pytest.approx(math.log(256))
    # p = (1/2, 1/4, 1/4): H = 1.5 ln 2, whatever the order
    data = torch.tensor([3, 9, 3, 200], dtype=torch.long)
    assert unigram_entropy(data) == pytest.approx(1.5 * math.log(2))
    assert unigram_entropy(data.flip(0)) == unigram_entropy(data)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="at least one byte id"):
        unigram_entropy(torch.tensor([], dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"in \[0, 256\), got 2 value\(s\) in \[0, 300\]"):
        unigram_entropy(torch.tensor([0, 300]))
    with pytest.raises(ValueError, match="1-D integer tensor"):
        unigram_entropy(torch.tensor([0.5, 1.0]))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        unigram_entropy([0, 1])
