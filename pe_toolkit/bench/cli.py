"""The command line of every benchmark: ``pe-toolkit bench NAME``, ``python benchmarks/NAME.py``, ``python -m``.

All three call :func:`main`, so they run the same code::

    pe-toolkit bench --list
    pe-toolkit bench vision --quick                         # = --preset quick: a pipeline check
    pe-toolkit bench vision --preset full --jobs 2 --resume
    pe-toolkit bench vision --preset gpu --accelerator cuda --executor ray --ray-address HEAD:6379
    pe-toolkit bench vision --config mine.yaml --set training.steps=300 --set seeds=[0,1,2]
    pe-toolkit bench my_package.my_module:MyBenchmark --config my_preset.yaml
    pe-toolkit bench all --preset quick [--only speed]       # every registered one; results/summary.md
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from pe_toolkit.bench.config import ACCELERATORS, EXECUTORS, PRECISIONS, RunOptions, load_config
from pe_toolkit.bench.registry import BENCHMARKS, get_benchmark, list_benchmarks

__all__ = ["build_parser", "main"]

DEFAULT_OUT = Path("results")


def listing() -> str:
    names = list_benchmarks()
    width = max(map(len, names), default=0)
    return "\n".join(f"  {name:{width}s}  {text}" for name, text in names.items())


def build_parser(prog: str = "pe-toolkit bench", name: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a benchmark on the pe_toolkit.bench harness.",
        epilog=f"benchmarks:\n{listing()}\n\nor MODULE:CLASS for a Benchmark subclass of your own.")
    if name is None:
        parser.add_argument("name", nargs="?", help="a benchmark (see --list), MODULE:CLASS, or all")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and what each measures")
    parser.add_argument("--quick", action="store_true", help="= --preset quick (a pipeline check, not evidence)")
    parser.add_argument("--preset", help="a YAML preset of the benchmark: quick, full (default) or gpu")
    parser.add_argument("--config", type=Path, help="a YAML file merged over the preset (only what it changes)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="replace one config entry (VALUE is YAML), e.g. --set training.steps=400; repeatable")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="results root; writes OUT/<name>/ (default results/)")
    parser.add_argument("--resume", action="store_true", default=None,
                        help="reuse finished runs whose full spec matches (settings, seed, device, threads)")
    parser.add_argument("--executor", choices=EXECUTORS, help="local processes (default) or Ray")
    parser.add_argument("--ray-address", dest="ray_address", help="a Ray cluster's address (default: a local instance)")
    parser.add_argument("--jobs", type=int, help="parallel runs: local processes or Ray CPUs (default 1)")
    parser.add_argument("--threads", type=int, help="torch threads per run (default 1)")
    parser.add_argument("--accelerator", choices=ACCELERATORS, help="Lightning accelerator of the runs (default auto)")
    parser.add_argument("--devices", type=int, help="devices per run (default 1)")
    parser.add_argument("--precision", choices=PRECISIONS, help="Lightning precision (default 32-true)")
    if name is None:
        group = parser.add_argument_group("all: every registered benchmark in turn, then OUT/summary.md")
        group.add_argument("--only", action="append", default=[], metavar="NAME",
                           help="with all: run only this one (a name or MODULE:CLASS; repeatable); the others "
                                "keep their summary line")
        group.add_argument("--timeout", type=float, help="with all: seconds after which a benchmark is stopped")
    return parser


def run_all(args: argparse.Namespace, parser: argparse.ArgumentParser, argv: Sequence[str], prog: str) -> int:
    """``NAME = all``: every registered benchmark (or ``--only``) as its own process; ``OUT/summary.md``."""
    from pe_toolkit.bench.suite import run_suite

    if args.config is not None or args.overrides:
        parser.error("all takes no --config / --set (they are one benchmark's keys); run that benchmark alone")
    unknown = [n for n in args.only if n not in BENCHMARKS and ":" not in n]
    if unknown:
        parser.error(f"--only: unknown benchmark(s) {unknown}; registered: {', '.join(sorted(BENCHMARKS))}")
    arguments = ["--preset", "quick" if args.quick else (args.preset or "full")]
    for flag in ("executor", "ray_address", "jobs", "threads", "accelerator", "devices", "precision"):
        if getattr(args, flag) is not None:
            arguments += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    if args.resume:
        arguments.append("--resume")
    try:
        return run_suite(args.only or sorted(BENCHMARKS), arguments, args.out, available=sorted(BENCHMARKS),
                         command=shlex.join([*prog.split(), *argv]), timeout=args.timeout)
    except ValueError as error:  # the timeout or the results folder
        parser.error(f"--{error}")


def main(argv: Sequence[str] | None = None, *, name: str | None = None, benchmark: type | None = None,
         prog: str = "pe-toolkit bench") -> int:
    """Parse ``argv`` and run the benchmark; the exit status.

    ``name`` fixes a registered benchmark (a script of one benchmark); ``benchmark`` runs a
    :class:`~pe_toolkit.bench.Benchmark` subclass of your own (``main(benchmark=MyBenchmark)`` at the end
    of your file makes it ``python my_file.py --preset quick``).
    """
    if benchmark is not None:
        name = benchmark.name
    from pe_toolkit.quiet import quiet_third_party

    quiet_third_party()
    argv = list(sys.argv[1:] if argv is None else argv)
    if benchmark is not None and prog == "pe-toolkit bench":
        prog = f"python {Path(sys.argv[0]).name}"
    parser = build_parser(prog, name)
    args = parser.parse_args(argv)
    if args.list:
        print(listing())
        return 0
    name = name or args.name
    if not name:
        parser.error("give a benchmark NAME (see --list)")
    if args.quick and args.preset not in (None, "quick"):
        parser.error(f"--quick and --preset {args.preset} contradict each other; give one")
    if name == "all":
        return run_all(args, parser, argv, prog)
    if getattr(args, "only", None) or getattr(args, "timeout", None) is not None:
        parser.error("--only and --timeout go with all")
    preset = "quick" if args.quick else (args.preset or "full")
    try:
        benchmark = benchmark() if benchmark is not None else get_benchmark(name)
        config, run_section = load_config(benchmark, preset, config_file=args.config, overrides=args.overrides)
        flags = {k: getattr(args, k) for k in ("executor", "ray_address", "jobs", "threads", "accelerator",
                                                "devices", "precision", "resume") if getattr(args, k) is not None}
        options = RunOptions(**{**run_section, **flags})
    except (ValueError, TypeError, ImportError) as error:
        parser.error(str(error))
    from pe_toolkit.bench.runner import run
    from pe_toolkit.bench.store import results_folder

    try:
        results_folder(args.out, "--out")
    except ValueError as error:
        parser.error(str(error))

    run(benchmark, config, options, preset=preset, out=args.out, command=shlex.join([*prog.split(), *argv]))
    print(f"wrote {args.out / benchmark.name}/report.md", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
