"""Shared test fixtures: every test starts from the same seed, on one torch thread.

The models under test are tiny: on a busy 2-core machine two OpenMP threads per small op spent most
of their time waiting for each other (30-60x slower in the graph, recsys and detection tests).

Hypothesis runs derandomized by default, so ``make test`` (and CI) tries the same examples every
time; ``HYPOTHESIS_PROFILE=explore pytest tests/reliability`` searches fresh random examples, and
``pytest tests/reliability --hypothesis-profile=long`` also tries 20x as many (``fuzz_budget.py``).
"""

import os

import pytest
import torch
from hypothesis import settings

settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.register_profile("long", derandomize=False, max_examples=2000)  # --hypothesis-profile=long: 20x budgets
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(autouse=True)
def seed_everything():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def one_torch_thread():
    """One torch thread per test; the previous count is restored after it (benchmark code sets its own)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
