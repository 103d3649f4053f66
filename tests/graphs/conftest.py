"""Graph tests run with one torch thread: on a loaded shared machine, intra-op parallelism over two threads
made the many small ops of the graph models up to 60x slower (threads waiting for each other)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
