"""The benchmarks, each a pe_toolkit.bench.Benchmark (installed as pe_toolkit.benchmarks)."""
