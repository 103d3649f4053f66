"""Fixtures for the sequence-encoder tests."""

import pytest
import torch


@pytest.fixture(autouse=True)
def seeded():
    """Every encoder test starts from the same seed (random init of parameters and inputs)."""
    torch.manual_seed(0)
    yield
