"""A seconds-long benchmark for the harness tests: least squares by gradient descent, lr tuned per method.

Importable by name (``tiny_benchmark``) from spawned workers and Ray tasks: the tests put this folder on
``PYTHONPATH``. Every executed run appends its store key to ``config.log`` (``O_APPEND``: one line per
write even from several processes), so a test counts how often each run really ran.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from pe_toolkit.bench import Benchmark, Result, Tuning


@dataclasses.dataclass
class Steps:
    count: int
    batch: int = 8


@dataclasses.dataclass
class Config:
    seeds: list[int]
    methods: list[str]
    lrs: list[float]
    steps: Steps
    log: str = ""
    pause: float = 0.0  # seconds each run sleeps, so that two processes' runs overlap in time


class Tiny(Benchmark):
    name = "tiny"
    title = "Tiny: least squares"
    description = "a seconds-long least-squares benchmark for the harness tests"
    Config = Config
    key_fields = ("method", "seed")
    presets_dir = Path(__file__).resolve().parent / "tiny_presets"

    def check(self, config: Config) -> None:
        if config.steps.count < 1:
            raise ValueError(f"steps.count must be >= 1, got {config.steps.count}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        return [{"method": m, "seed": s, "steps": config.steps.count, "batch": config.steps.batch, "log": config.log,
                 "pause": config.pause}
                for m in config.methods for s in config.seeds]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="lr", values=config.lrs, metric="val_loss", maximize=False, group="method")

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        import time

        import torch

        time.sleep(spec["pause"])
        if spec["log"]:
            fd = os.open(spec["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(fd, f"{spec['method']} {spec['seed']} {spec['lr']}\n".encode())
            os.close(fd)
        generator = torch.Generator().manual_seed(spec["seed"])
        scale = {"small": 0.1, "large": 3.0}[spec["method"]]  # "large" diverges at lr 0.3
        x = torch.randn(64, 4, generator=generator, dtype=torch.float64)
        w_true = torch.randn(4, 1, generator=generator, dtype=torch.float64)
        y = x @ w_true
        w = torch.zeros(4, 1, dtype=torch.float64)
        for step in range(spec["steps"]):
            batch = slice((step * spec["batch"]) % 48, (step * spec["batch"]) % 48 + spec["batch"])
            grad = 2 * x[batch].T @ (x[batch] @ w - y[batch]) / spec["batch"]
            w = w - spec["lr"] * scale * grad
        val_loss = float(((x[48:] @ w - y[48:]) ** 2).mean())
        return {"method": spec["method"], "seed": spec["seed"], "lr": spec["lr"], "val_loss": val_loss,
                "threads": torch.get_num_threads()}

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        return [{"kind": "summary", "method": m, "runs": sum(r["method"] == m for r in result.rows)}
                for m in result.config.methods]

    def report(self, result: Result) -> str:
        return "".join(f"- {r['method']} seed {r['seed']}: {r['val_loss']:.4f}\n" for r in result.rows)

    def plot(self, result: Result) -> dict[str, Any]:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, ax = plt.subplots()
        ax.bar(range(len(result.rows)), [r["val_loss"] for r in result.rows])
        ax.set_title("validation loss")
        return {"loss.png": figure}
