"""Executors: where runs execute. Local processes (the default) or Ray (one machine or a cluster).

Both take ``(benchmark, spec)`` items and yield ``(index, row)`` as runs finish; a run's row depends
only on its spec (seeds, device, thread count are in it), so the executor never changes the rows.

* :class:`LocalExecutor` (``--executor local --jobs N``): in this process for ``jobs=1``, else a pool of
  ``N`` spawned processes (spawned, not forked: a child forked after torch used OpenMP can hang) that
  exit when this process dies.
* :class:`RayExecutor` (``--executor ray [--ray-address ADDR]``, the ``ray`` extra): a local Ray instance
  with ``jobs`` CPUs, or ``ray.init(address=ADDR)`` for a running cluster (``ray start --head`` on one
  machine, ``ray start --address=HEAD:6379`` on the others; every node needs this package, the
  benchmark's extra and the same torch). Each run is a Ray task asking for ``threads`` CPUs (and one
  GPU when the run's accelerator is a GPU), so Ray's scheduler spreads them over the nodes.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["LocalExecutor", "RayExecutor", "execute", "make_executor"]


def execute(benchmark: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Run one spec where it lands: quiet third-party noise, set torch's thread count, ``run_one``.

    ``run_one`` gets the spec as plain JSON types (the form the store keeps): typed config values (jsonargparse's
    ``PositiveInt`` and friends are ``int`` subclasses) would otherwise reach hyperparameters and checkpoints,
    which ``torch.load(weights_only=True)`` then refuses. A run that fails is named on stderr (its key fields)
    and its exception goes on unchanged, traceback included; a row that is not a dict is a ``TypeError``.
    """
    import torch

    from pe_toolkit.bench.store import jsonable
    from pe_toolkit.quiet import quiet_third_party

    quiet_third_party()
    torch.set_num_threads(int(spec.get("threads", 1)))
    run = " ".join(f"{field}={spec.get(field)!r}" for field in benchmark.key_fields)
    try:
        row = benchmark.run_one(jsonable(spec))
    except BaseException as error:
        print(f"{benchmark.name}: the run {run} failed ({type(error).__name__}: {error}); the runs finished before "
              "it are stored (rerun with --resume)", file=sys.stderr, flush=True)
        raise
    if not isinstance(row, dict):
        raise TypeError(f"{benchmark.name}: run_one must return one row, a dict; the run {run} returned "
                        f"{type(row).__name__} {row!r:.200}")
    return row


def _exit_with_parent(parent_pid: int) -> None:  # runs in each local worker
    from pe_toolkit.quiet import quiet_third_party

    quiet_third_party()

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class LocalExecutor:
    """``jobs`` local processes (``jobs=1``: this process)."""

    def __init__(self, jobs: int = 1) -> None:
        self.jobs = int(jobs)
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None

    def map(self, items: Sequence[tuple[Any, dict[str, Any]]]) -> Iterator[tuple[int, dict[str, Any]]]:
        if self.jobs <= 1:
            for index, (benchmark, spec) in enumerate(items):
                yield index, execute(benchmark, spec)
            return
        if self._pool is None:
            self._pool = concurrent.futures.ProcessPoolExecutor(
                max_workers=self.jobs, mp_context=multiprocessing.get_context("spawn"),
                initializer=_exit_with_parent, initargs=(os.getpid(),))
        futures = {self._pool.submit(execute, b, s): i for i, (b, s) in enumerate(items)}
        try:
            for future in concurrent.futures.as_completed(futures):
                yield futures[future], future.result()
        finally:
            for future in futures:
                future.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


class RayExecutor:
    """Runs as Ray tasks: a local instance with ``jobs`` CPUs, or the cluster at ``address``."""

    def __init__(self, jobs: int = 1, address: str | None = None) -> None:
        from pe_toolkit.extras import require_extra

        require_extra("ray", __name__)
        import ray

        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            if address is None:
                ray.init(num_cpus=int(jobs), include_dashboard=False, log_to_driver=True,
                         runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
            else:
                ray.init(address=address, log_to_driver=True)
            self.started = True
        self._task = ray.remote(execute)

    def map(self, items: Sequence[tuple[Any, dict[str, Any]]]) -> Iterator[tuple[int, dict[str, Any]]]:
        refs = {}
        for index, (benchmark, spec) in enumerate(items):
            gpu = 1 if spec.get("device", {}).get("accelerator") in ("gpu", "cuda") else 0
            task = self._task.options(num_cpus=int(spec.get("threads", 1)), num_gpus=gpu)
            refs[task.remote(benchmark, spec)] = index
        pending = list(refs)
        try:
            while pending:
                done, pending = self.ray.wait(pending, num_returns=1)
                for ref in done:
                    yield refs[ref], self.ray.get(ref)
        finally:
            for ref in pending:
                self.ray.cancel(ref)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            self.started = False


def make_executor(kind: str, *, jobs: int, address: str | None = None) -> LocalExecutor | RayExecutor:
    if kind == "local":
        return LocalExecutor(jobs)
    if kind == "ray":
        return RayExecutor(jobs, address)
    raise ValueError(f"executor must be 'local' or 'ray', got {kind!r}")
