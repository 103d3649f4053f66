"""The benchmark harness: a :class:`Benchmark` protocol, a registry, typed configs, one runner.

Every benchmark in ``benchmarks/`` (installed as ``pe_toolkit.benchmarks``) is a :class:`Benchmark`
subclass holding only its science (its runs, metrics and claims); :func:`pe_toolkit.bench.runner.run`
owns device and precision, seeds, equal-budget tuning, the run store, resume, executors (local
processes or Ray), progress and the output files. See ``docs/benchmarks.md`` and the tutorial
"Your own benchmark". Importing this package imports neither a domain nor Lightning.
"""

from pe_toolkit.bench.config import RunOptions, load_config, quiet_trainer, trainer_options
from pe_toolkit.bench.protocol import Benchmark, Result, Tuning
from pe_toolkit.bench.registry import get_benchmark, list_benchmarks, register

__all__ = ["Benchmark", "Result", "RunOptions", "Tuning", "get_benchmark", "list_benchmarks", "load_config",
           "main", "quiet_trainer", "register", "run", "trainer_options"]


def main(argv=None, **kwargs):
    """``pe-toolkit bench ...`` (see :mod:`pe_toolkit.bench.cli`)."""
    from pe_toolkit.bench.cli import main as cli_main

    return cli_main(argv, **kwargs)


def run(benchmark, config, options, **kwargs):
    """Run a benchmark (see :func:`pe_toolkit.bench.runner.run`)."""
    from pe_toolkit.bench.runner import run as run_benchmark

    return run_benchmark(benchmark, config, options, **kwargs)
