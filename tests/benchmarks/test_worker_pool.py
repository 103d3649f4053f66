"""``common.worker_pool``: its workers exit when the benchmark process is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from benchmarks import common

REPO_ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie has exited


def test_pool_runs_tasks():
    with common.worker_pool(2) as pool:
        assert sorted(pool.map(abs, [-2, 1, -3])) == [1, 2, 3]
        assert pool.submit(os.getpid).result() != os.getpid()


def test_workers_exit_when_the_parent_is_killed():
    script = textwrap.dedent(
        """
        import os, sys, time
        sys.path.insert(0, "benchmarks")
        from common import worker_pool

        if __name__ == "__main__":
            pool = worker_pool(1)
            print(pool.submit(os.getpid).result(), flush=True)
            pool.submit(time.sleep, 120)  # the worker is busy when its parent dies
            time.sleep(120)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        worker = int(parent.stdout.readline())
        time.sleep(0.5)
        assert _alive(worker)
        parent.send_signal(signal.SIGKILL)  # no cleanup at all in the parent
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), "the worker outlived its killed parent"
    finally:
        parent.kill()
