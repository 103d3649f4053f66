"""Recsys tests run torch on one thread: on a machine shared by many processes, two OpenMP threads per
tiny operation spend most of their time waiting for each other (measured 30x slower here)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# the benchmark scripts import as ``benchmarks.recsys`` with the repository root on sys.path
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
