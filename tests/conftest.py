"""Shared test fixtures: every test starts from the same seed."""

import pytest
import torch


@pytest.fixture(autouse=True)
def seed_everything():
    torch.manual_seed(0)
    yield
