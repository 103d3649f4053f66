"""Detection tests run single-threaded: the models are tiny, and on a busy machine two OpenMP threads
waiting on each other made a 5-proposal forward pass ~50x slower than one thread."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
