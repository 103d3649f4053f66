"""Extreme inputs: every sequence encoder at long lengths and far positions, float32 and bfloat16.

Per registered sequence encoder, one causal attention layer (query blocks of 1024, so memory stays linear in the
length; an encoder with only an embed hook acts on the input) runs in a forked child at positions ``0 .. L-1``
(L = 32,768 in the full preset, 4,096 with ``--quick``) and at the 256 positions below ``10**6``, in float32 and
bfloat16. Reported: whether every output is finite, the largest deviation of the far-position float32 output
from a float64 evaluation of the same weights (a silent precision loss), wall time and the child's peak memory.

    pe-toolkit bench extreme_inputs [--quick] [--set encoders=[rope,alibi]]
    python benchmarks/extreme_inputs.py --quick            # the same code
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch
from jsonargparse.typing import PositiveInt

import pe_toolkit as pet
from pe_toolkit.bench import Benchmark, Result
from pe_toolkit.bench.memory import run_in_child
from pe_toolkit.bench.plots import finish, nan_if_missing, new_figure
from pe_toolkit.benchmarks.speed import Encoder, attention

DIM, HEADS, BLOCK = 64, 2, 1024
FAR_POSITION, FAR_TOKENS = 10**6, 256


@dataclasses.dataclass
class Config:
    length: PositiveInt
    encoders: list[Encoder] = dataclasses.field(default_factory=list)  # empty: every sequence encoder


def run_case(name: str, dtype_name: str, length: int, start: int) -> dict[str, Any]:
    """Child: one forward pass at positions ``start .. start+length-1``."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dtype = getattr(torch, dtype_name)
    encoding, layer = attention(name, start + length, DIM, HEADS, {"causal": True}, query_block_size=BLOCK)
    positions = torch.arange(start, start + length)
    x = torch.randn(1, length, DIM, generator=torch.Generator().manual_seed(1))
    began = time.perf_counter()
    with torch.no_grad():
        encoding.to(dtype)
        layer.to(dtype)
        out = layer(encoding.embed(x.to(dtype), positions), q_pos=positions)
        seconds = time.perf_counter() - began
        deviation = None
        if dtype == torch.float32 and length <= FAR_TOKENS:
            reference = layer.double()(encoding.double().embed(x.double(), positions), q_pos=positions)
            deviation = float((out.double() - reference).abs().max())
    return {"finite": bool(torch.isfinite(out).all()), "seconds": seconds, "max_abs_dev_vs_float64": deviation}


def plot_memory(rows: list[dict[str, Any]], length: int) -> Any:
    long_rows = [r for r in rows if r["length"] == length and r["peak_mib"] is not None]
    names = sorted({r["encoder"] for r in long_rows})
    fig, ((ax,),) = new_figure(size=(8, 3.5))
    for offset, dtype in enumerate(("float32", "bfloat16")):
        peaks = {r["encoder"]: r["peak_mib"] for r in long_rows if r["dtype"] == dtype}
        ax.bar([i + 0.4 * offset for i in range(len(names))], [nan_if_missing(peaks.get(n)) for n in names],
               width=0.4, label=dtype)
    ax.set_xticks([i + 0.2 for i in range(len(names))], names, rotation=45, ha="right")
    ax.set_ylabel(f"peak MiB at L={length}")
    return finish(fig, f"peak memory at L={length}")


class ExtremeInputs(Benchmark):
    name = "extreme_inputs"
    title = "Extreme inputs: long sequences and far positions"
    Config = Config
    key_fields = ("encoder", "dtype", "length", "first_position")
    run_columns = ("encoder", "dtype", "length", "first_position", "finite", ("max_abs_dev_vs_float64", "|f32 - f64|"),
                   ("seconds", "s"), ("peak_mib", "peak MiB"), "error")
    summary_metrics = {"max_abs_dev_vs_float64": None, "peak_mib": None}  # no summary_by: only their format
    number_format = ".3g"

    def runs(self, config: Config) -> list[dict[str, Any]]:
        return [{"encoder": name, "dtype": dtype, "length": case_length, "first_position": start}
                for name in config.encoders or pet.list_encoders(domain="sequence")
                for dtype in ("float32", "bfloat16")
                for case_length, start in ((config.length, 0), (FAR_TOKENS, FAR_POSITION - FAR_TOKENS))]

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Measure one case in a forked child (the runner's process stays free of torch compute)."""
        case = [spec[k] for k in self.key_fields]
        result, peak, error = run_in_child(run_case, *case, timeout=1800)
        row = ({**result, "peak_mib": peak / 2**20, "error": ""} if error is None else
               {"finite": False, "seconds": None, "max_abs_dev_vs_float64": None, "peak_mib": None,
                "error": error[:120]})
        return dict(zip(self.key_fields, case)) | row

    def progress_label(self, row: dict[str, Any]) -> str:
        return (f"{row['encoder']} {row['dtype']} L={row['length']} from {row['first_position']}: "
                f"finite={row['finite']} {row['error']}")

    def plot(self, result: Result) -> dict[str, Any]:
        return {"peak_memory.png": plot_memory(result.rows, result.config.length)}

    def describe(self, result: Result) -> str:
        failures = sum(not r["finite"] for r in result.rows)
        return (f"One causal attention layer (dim {DIM}, {HEADS} heads, query blocks of {BLOCK}, batch 1) per encoder, "
                f"in a forked child; one thread. {failures} of {len(result.rows)} cases non-finite or failed.")


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="extreme_inputs", prog="python benchmarks/extreme_inputs.py"))
