"""Shared test fixtures: every test starts from the same seed.

Hypothesis runs derandomized by default, so ``make test`` (and CI) tries the same examples every
time; ``HYPOTHESIS_PROFILE=explore pytest tests/reliability`` searches fresh random examples.
"""

import os

import pytest
import torch
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(autouse=True)
def seed_everything():
    torch.manual_seed(0)
    yield


@pytest.fixture
def restore_threads():
    """Restore torch's thread count after a test whose code under test sets it (benchmarks pin one)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
