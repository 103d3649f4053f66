"""Extreme inputs: every sequence encoder at long lengths and far positions, float32 and bfloat16.

For each registered sequence encoder, one causal attention layer with that encoder (query blocks of
1024, so memory stays linear in the length) is run in a forked child:

* at length ``L`` (32,768 in the full preset, 4,096 with ``--quick``), positions ``0 .. L-1``;
* at positions ``10**6 - 256 .. 10**6 - 1`` (256 tokens far from the origin).

in float32 and bfloat16. Reported per encoder and dtype: whether every output is finite, the largest
deviation of the far-position float32 output from a float64 evaluation of the same weights (a
silent precision loss would show here), wall time and peak resident memory of the child.

    pe-toolkit bench extreme_inputs [--quick] [--set encoders=[rope,alibi]]
    python benchmarks/extreme_inputs.py --quick            # the same code
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from pe_toolkit.bench import Benchmark, Result
from pe_toolkit.bench.memory import peak_memory_in_subprocess
from pe_toolkit.bench.plots import nan_if_missing, note_if_empty
from pe_toolkit.bench.report import markdown_table

DIM, HEADS, BLOCK = 64, 2, 1024
FAR_POSITION, FAR_TOKENS = 10**6, 256


@dataclasses.dataclass
class Config:
    length: int
    encoders: list[str] = dataclasses.field(default_factory=list)  # empty: every sequence encoder


def build_layer(name: str, max_position: int):
    import torch

    import pe_toolkit as pet
    from pe_toolkit.nn.attention import MultiHeadAttention

    torch.manual_seed(0)
    options = dict(pet.encoder_info(name).example_options)
    if "max_len" in options:  # a learned table must cover the positions it is asked for
        options["max_len"] = max_position
    encoding = pet.get_encoder(name, DIM, HEADS, causal=True, **options)
    return encoding, MultiHeadAttention(DIM, HEADS, encoding=encoding, causal=True, query_block_size=BLOCK)


def run_case(name: str, dtype_name: str, length: int, start: int) -> dict[str, Any]:
    """One forward pass at positions ``start .. start+length-1``; runs in the forked child."""
    import torch

    torch.set_num_threads(1)
    dtype = getattr(torch, dtype_name)
    encoding, layer = build_layer(name, start + length)
    positions = torch.arange(start, start + length)
    x = torch.randn(1, length, DIM, generator=torch.Generator().manual_seed(1))
    began = time.perf_counter()
    with torch.no_grad():
        layer.to(dtype)  # the encoding is a submodule of the layer: converted with it
        out = layer(encoding.embed(x.to(dtype), positions), q_pos=positions)
        seconds = time.perf_counter() - began
        finite = bool(torch.isfinite(out).all())
        deviation = None
        if dtype == torch.float32 and length <= FAR_TOKENS:
            reference = layer.double()(encoding.embed(x.double(), positions), q_pos=positions)
            deviation = float((out.double() - reference).abs().max())
    return {"finite": finite, "seconds": seconds, "max_abs_dev_vs_float64": deviation}


def plot_memory(rows: list[dict[str, Any]], length: int) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    long_rows = [r for r in rows if r["length"] == length and r["peak_mib"] is not None]
    names = sorted({r["encoder"] for r in long_rows})
    fig, ax = plt.subplots(figsize=(8, 3.5))
    for offset, dtype in enumerate(("float32", "bfloat16")):
        values = [nan_if_missing(next((r["peak_mib"] for r in long_rows if r["encoder"] == n and r["dtype"] == dtype),
                                      None)) for n in names]
        ax.bar([i + 0.4 * offset for i in range(len(names))], values, width=0.4, label=dtype)
    ax.set_xticks([i + 0.2 for i in range(len(names))], names, rotation=45, ha="right")
    ax.set_ylabel(f"peak MiB at L={length}")
    if not note_if_empty(ax, f"peak memory at L={length}"):
        ax.legend()
    fig.tight_layout()
    return fig


class ExtremeInputs(Benchmark):
    name = "extreme_inputs"
    title = "Extreme inputs: long sequences and far positions"
    description = ("every sequence encoder at long lengths and far positions, float32 and bfloat16: finite outputs, "
                   "precision loss, memory")
    Config = Config
    key_fields = ("encoder", "dtype", "length", "first_position")

    def check(self, config: Config) -> None:
        import pe_toolkit as pet

        available = pet.list_encoders(domain="sequence")
        unknown = sorted(set(config.encoders) - set(available))
        if unknown:
            raise ValueError(f"encoders: unknown sequence encoder(s) {unknown}; available: {available}")
        if config.length < 1:
            raise ValueError(f"length must be >= 1, got {config.length}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        import pe_toolkit as pet

        encoders = config.encoders or pet.list_encoders(domain="sequence")
        return [{"encoder": name, "dtype": dtype, "length": case_length, "first_position": start}
                for name in encoders for dtype in ("float32", "bfloat16")
                for case_length, start in ((config.length, 0), (FAR_TOKENS, FAR_POSITION - FAR_TOKENS))]

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Measure one case in a forked child (the runner's process stays free of torch compute)."""
        name, dtype, length, start = spec["encoder"], spec["dtype"], spec["length"], spec["first_position"]
        try:
            result, peak = peak_memory_in_subprocess(run_case, name, dtype, length, start, timeout=1800)
            row = {**result, "peak_mib": peak / 2**20, "error": ""}
        except RuntimeError as error:
            row = {"finite": False, "seconds": None, "max_abs_dev_vs_float64": None, "peak_mib": None,
                   "error": str(error).strip().splitlines()[-1][:120]}
        return {"encoder": name, "dtype": dtype, "length": length, "first_position": start, **row}

    def progress_label(self, row: dict[str, Any]) -> str:
        return (f"{row['encoder']} {row['dtype']} L={row['length']} from {row['first_position']}: "
                f"finite={row['finite']} {row['error']}")

    def plot(self, result: Result) -> dict[str, Any]:
        return {"peak_memory.png": plot_memory(result.rows, result.config.length)}

    def report(self, result: Result) -> str:
        rows = result.rows
        failures = [r for r in rows if not r["finite"]]
        return (
            f"One causal attention layer (dim {DIM}, {HEADS} heads, query blocks of {BLOCK}, batch 1) per encoder, "
            f"in a forked child; one thread.\n\n"
            + markdown_table(
                rows,
                ["encoder", "dtype", "length", "first_position", "finite",
                 ("max_abs_dev_vs_float64", "|f32 - f64|"), ("seconds", "s"), ("peak_mib", "peak MiB"), "error"],
                {"max_abs_dev_vs_float64": ".1e", "seconds": ".1f", "peak_mib": ".0f"},
            )
            + f"\n{len(failures)} of {len(rows)} cases non-finite or failed.\n\n![peak memory](peak_memory.png)\n"
        )


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="extreme_inputs", prog="python benchmarks/extreme_inputs.py"))
