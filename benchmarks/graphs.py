"""Graph positional encodings: CSL and SBM (PATTERN / CLUSTER) accuracy per PE x model, and precompute speed.

Three sections (``--sections``, default all):

* ``csl``: Circular Skip Links (Murphy et al. 2019), 10 classes that 1-WL cannot separate; 5-fold
  stratified cross-validation (:func:`pe_toolkit.domains.graphs.csl_folds`, Benchmarking GNNs protocol). Test
  accuracy, mean and (population) standard deviation over the folds, for every PE x model. Chance is 10 %.
* ``sbm``: PATTERN and CLUSTER (Dwivedi et al. 2023), CPU-sized (``num_graphs`` in the presets), weighted
  accuracy (mean per-class recall) on the test split of :func:`pe_toolkit.domains.graphs.sbm_splits`.
* ``precompute``: the transforms of :mod:`pe_toolkit.domains.graphs.transforms` on connected random sparse graphs
  (a ring plus ``2N`` random edges: mean degree ~6) of growing size, timed against PyG's
  ``AddRandomWalkPE`` / ``AddLaplacianEigenvectorPE`` in the same run. Each measurement runs in a forked
  child (time and peak memory, with a timeout and a memory cap); PyG is skipped, with the memory it would
  need, where its estimated footprint exceeds 60 % of the available memory.

    python benchmarks/graphs.py --quick                      # pipeline check, < 2 minutes
    python benchmarks/graphs.py                              # full run (about an hour on a shared CPU core)
    python benchmarks/graphs.py --sections csl --pes none rwse rfp --models gin gps --folds 2

Models come from :data:`MODELS`, a table of ``name -> (module, class, extra kwargs)``; a model whose class
does not exist (yet) is listed as unavailable and never gets a number. Every finished training run is
stored in ``<out>/graphs/runs/``; ``--resume`` reuses those whose configuration matches, ``--report-only``
trains nothing and reports what is stored.

Outputs in ``<out>/graphs/``: ``results.json`` (one row per training run and per precompute
measurement), ``report.md`` (tables), ``csl_accuracy.png``, ``sbm_accuracy.png``, ``precompute_time.png``.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (  # noqa: E402
    Progress,
    markdown_table,
    note_if_empty,
    peak_memory_in_subprocess,
    quiet,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)
from presets import device_options, trainer_options  # noqa: E402

NAME = "graphs"
SECTIONS = ("csl", "sbm", "precompute")

# name -> (module, class name, extra constructor kwargs); a model whose class is missing is reported as
# unavailable (no numbers). Graph Mamba: walk_length 2, 4 walks per token, 1 repetition, d_state 8 (defaults).
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gin": ("pe_toolkit.domains.graphs.models", "GINModel", {}),
    "gps": ("pe_toolkit.domains.graphs.models", "GPSModel", {"heads": 2}),
    "graph_mamba": ("pe_toolkit.domains.graphs.models", "GraphMambaModel", {}),
}

# PE name -> transform options (None: no precomputed attribute). "random_features" is drawn in the model.
LAP_K = 8  # CSL's circulant graphs have repeated eigenvalues: LapPE is expected to be weak there
RW_STEPS = 16
RFP_FEATURES, RFP_STEPS = 8, 8
PES: dict[str, dict[str, Any] | None] = {
    "none": None,
    "random_features": None,
    "lap_pe": {"transform": "LaplacianEigenvectorPE", "options": {"k": LAP_K}},
    "rwse": {"transform": "RandomWalkPE", "options": {"walk_length": RW_STEPS}},
    "rfp": {"transform": "RandomFeaturePropagation", "options": {"num_features": RFP_FEATURES, "steps": RFP_STEPS}},
}

FULL = {
    "folds": 5,
    "csl": {"hidden": 32, "layers": 3, "epochs": 40, "batch_size": 16, "lr": 2e-3},
    "sbm": {"hidden": 32, "layers": 3, "epochs": 10, "batch_size": 16, "lr": 2e-3},
    "sbm_num_graphs": {"pattern": 160, "cluster": 160},
    "sbm_fractions": [0.7, 0.15, 0.15],
    "pes": list(PES),
    "sizes": [1_000, 2_000, 5_000, 10_000, 100_000],
    "repeats": 3,
    "timeout_s": 300.0,
}
QUICK = {
    "folds": 1,
    "csl": {"hidden": 16, "layers": 2, "epochs": 15, "batch_size": 16, "lr": 3e-3},
    "sbm": {"hidden": 16, "layers": 2, "epochs": 3, "batch_size": 16, "lr": 3e-3},
    "sbm_num_graphs": {"pattern": 40, "cluster": 40},
    "sbm_fractions": [0.6, 0.2, 0.2],
    "pes": ["none", "rwse"],
    "models": ["gin", "gps", "graph_mamba"],
    "sizes": [1_000, 2_000],
    "repeats": 2,
    "timeout_s": 90.0,
}
SBM_TASKS = ("pattern", "cluster")
PRECOMPUTE_METHODS = ("rwse", "pyg_rwse", "lap_pe", "pyg_lap_pe", "rfp")
MONTE_CARLO_ABOVE = 20_000  # RandomWalkPE switches from "exact" (O(T nnz N)) to "monte_carlo" above this size
MONTE_CARLO_WALKS = 256  # walks per node: standard error <= 0.5 / sqrt(256) = 0.031 per entry
MEMORY_FRACTION = 0.6  # PyG is skipped where its estimated footprint exceeds this share of available memory
MEMORY_CAP_GIB = 3.5  # ... or this cap (--memory-cap-gib); this project's machines are shared
PYG_SPARSE_BYTES_PER_ENTRY = 128


# ------------------------------------------------------------------------------------------ helpers
def available_models(names: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Split model names (default: all of :data:`MODELS`) into (importable, missing)."""
    found, missing = [], []
    for name in names or list(MODELS):
        module, cls, _ = MODELS[name]
        try:
            ok = hasattr(importlib.import_module(module), cls)
        except ImportError:
            ok = False
        (found if ok else missing).append(name)
    return found, missing


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and population standard deviation (``np.std``, as Benchmarking GNNs reports over folds)."""
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.pstdev(values) if len(values) > 1 else 0.0)


def total_memory_bytes() -> int:
    """Memory available to new work (``MemAvailable`` of ``/proc/meminfo``; physical memory if unreadable)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def estimate_pyg_bytes(method: str, num_nodes: int, *, walk_length: int = RW_STEPS, k: int = LAP_K,
                       avg_degree: float = 6.0) -> int:
    """Rough peak memory (bytes) of PyG's transform on a graph of ``num_nodes`` nodes.

    ``pyg_rwse`` (``AddRandomWalkPE``): up to 2,000 nodes three dense float32 ``N x N`` matrices (the
    adjacency, the power and the product; measured 46 MiB at 2,000 nodes); above, sparse CSR powers ``P^t``
    whose fill-in reaches ``N^2`` once ``avg_degree^t > N`` (a few steps on an expander), at
    :data:`PYG_SPARSE_BYTES_PER_ENTRY` bytes per ``N^2`` entry (values, indices and the COO copies made to
    read the diagonal; calibrated on this benchmark's measurement of 3.1 GiB at 5,000 nodes).
    ``pyg_lap_pe`` (``AddLaplacianEigenvectorPE``): dense float64 ``N x N`` (x3, numpy ``eigh``) below
    100 nodes, otherwise ARPACK's Lanczos basis (``N x max(2k+3, 20)`` float64) plus the sparse Laplacian.
    """
    n = int(num_nodes)
    if method == "pyg_rwse":
        if n <= 2_000:
            return 3 * 4 * n * n
        nnz = min(float(n) * n, n * avg_degree ** min(walk_length, 60))
        return int(PYG_SPARSE_BYTES_PER_ENTRY * nnz)
    if method == "pyg_lap_pe":
        if n < 100:
            return 3 * 8 * n * n
        return int(8 * n * max(2 * (k + 1) + 1, 20) + 3 * 16 * n * (avg_degree + 1))
    raise ValueError(f"estimate_pyg_bytes: method must be 'pyg_rwse' or 'pyg_lap_pe', got {method!r}")


def pyg_skip_reason(method: str, num_nodes: int, memory_bytes: int | None = None,
                    cap_bytes: int | None = None) -> str | None:
    """``"skipped: would need X GiB"`` when the estimate exceeds 60 % of available memory (or ``cap_bytes``)."""
    memory_bytes = total_memory_bytes() if memory_bytes is None else memory_bytes
    need = estimate_pyg_bytes(method, num_nodes)
    if need > MEMORY_FRACTION * memory_bytes:
        gib = memory_bytes / 2**30
        return f"skipped: would need {need / 2**30:.1f} GiB (> {MEMORY_FRACTION:.0%} of {gib:.1f} GiB available)"
    if cap_bytes is not None and need > cap_bytes:
        return f"skipped: would need {need / 2**30:.1f} GiB (> the {cap_bytes / 2**30:.1f} GiB cap)"
    return None


def make_transform(pe: str):
    """The PE's transform from :mod:`pe_toolkit.domains.graphs.transforms` (None for "none" / "random_features")."""
    spec = PES[pe]
    if spec is None:
        return None
    from pe_toolkit.domains.graphs import transforms

    return getattr(transforms, spec["transform"])(**spec["options"])


def pe_options(pe: str) -> dict[str, Any] | None:
    """``pe_options`` for the model: the width of the precomputed attribute."""
    if pe == "none":
        return None
    if pe == "random_features":
        return {"num_features": 16}
    if pe == "lap_pe":
        return {"in_features": LAP_K}
    if pe == "rwse":
        return {"in_features": RW_STEPS}
    if pe == "rfp":
        return {"in_features": (RFP_STEPS + 1) * RFP_FEATURES}
    raise ValueError(f"unknown pe {pe!r}; allowed: {list(PES)}")


def load_dataset(task: str, pe: str, root: Path, num_graphs: int | None = None):
    """The task's dataset under ``root`` with the PE's transform as ``pre_transform`` (cached on disk)."""
    from pe_toolkit.domains.graphs import CLUSTERDataset, CSLDataset, PATTERNDataset

    pre = make_transform(pe)
    if task == "csl":
        return CSLDataset(root=root / "CSL", seed=0, pre_transform=pre)
    if task == "pattern":
        return PATTERNDataset(root=root / "PATTERN", num_graphs=num_graphs, seed=0, pre_transform=pre)
    if task == "cluster":
        return CLUSTERDataset(root=root / "CLUSTER", num_graphs=num_graphs, seed=0, pre_transform=pre)
    raise ValueError(f"unknown task {task!r}")


# ------------------------------------------------------------------------------------------ training
def run_train(spec: dict[str, Any]) -> dict[str, Any]:
    """Train and test one (task, pe, model, fold); runs in a worker process (or in-process with --jobs 0)."""
    import lightning as L
    import torch

    from pe_toolkit.domains.graphs import csl_folds, sbm_splits
    from pe_toolkit.domains.graphs.lightning_module import GraphClassificationModule, GraphDataModule

    quiet()  # in-process runs (--jobs 0, tests) too, not only worker_pool's workers
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    task, pe, model_name = spec["task"], spec["pe"], spec["model"]
    dataset = load_dataset(task, pe, Path(spec["data_root"]), spec.get("num_graphs"))
    if task == "csl":
        splits = csl_folds(dataset, 5, seed=0)[spec["fold"]]
        input_kwargs = {"in_features": 1}
        num_classes, model_task, metric = 10, "graph", "acc"
    else:
        splits = sbm_splits(dataset, spec["fractions"], seed=0)
        input_kwargs = {"num_node_types": dataset.num_node_types}
        num_classes = 2 if task == "pattern" else dataset.num_clusters
        model_task, metric = "node", "weighted_acc"
    hp = spec["training"]
    L.seed_everything(spec["seed"] + spec.get("fold", 0), verbose=False)
    module_name, cls_name, extra = MODELS[model_name]
    model_cls = getattr(importlib.import_module(module_name), cls_name)
    model = model_cls(num_classes=num_classes, hidden=hp["hidden"], layers=hp["layers"], task=model_task,
                      pe=None if pe == "none" else pe, pe_options=pe_options(pe), **input_kwargs, **extra)
    data = GraphDataModule(dataset, splits, batch_size=hp["batch_size"])
    steps = hp["epochs"] * math.ceil(len(splits[0]) / hp["batch_size"])
    module = GraphClassificationModule(model, num_classes=num_classes, lr=hp["lr"], warmup_steps=max(1, steps // 20),
                                       max_steps=steps)
    trainer = L.Trainer(max_epochs=hp["epochs"], **trainer_options(spec.get("device")), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0)
    trainer.fit(module, data)
    train_metric = float(trainer.callback_metrics.get(f"train/{metric}", float("nan")))
    result = trainer.test(module, data, verbose=False)[0]
    return {
        "section": "csl" if task == "csl" else "sbm",
        "task": task,
        "pe": pe,
        "model": model_name,
        "fold": spec.get("fold"),
        "metric": metric,
        "test_metric": float(result[f"test/{metric}"]),
        "test_acc": float(result["test/acc"]),
        "train_metric": train_metric,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_graphs": len(splits[0]),
        "test_graphs": len(splits[2]),
        "seconds": time.perf_counter() - start,
        "spec": {k: v for k, v in spec.items() if k not in ("threads", "data_root")},
    }


def summarize_training(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean / std of the test metric over folds per (task, pe, model)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["task"], row["pe"], row["model"]), []).append(row)
    out = []
    for (task, pe, model), members in groups.items():
        mean, std = mean_std([m["test_metric"] for m in members])
        out.append({"task": task, "pe": pe, "model": model, "metric": members[0]["metric"], "runs": len(members),
                    "mean": mean, "std": std, "seconds": statistics.fmean(m["seconds"] for m in members)})
    order = {p: i for i, p in enumerate(PES)}
    out.sort(key=lambda r: (r["task"], r["model"], order.get(r["pe"], 99)))
    return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def plot_accuracy(summary: list[dict[str, Any]], tasks: list[str], path: Path, ylabel: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = [r for r in summary if r["task"] == task and r["mean"] is not None]
        pes = [p for p in PES if any(r["pe"] == p for r in rows)]
        models = [m for m in MODELS if any(r["model"] == m for r in rows)]
        width = 0.8 / max(1, len(models))
        for j, model in enumerate(models):
            xs, ys, es = [], [], []
            for i, pe in enumerate(pes):
                hit = [r for r in rows if r["pe"] == pe and r["model"] == model]
                if hit:
                    xs.append(i + (j - (len(models) - 1) / 2) * width)
                    ys.append(100 * hit[0]["mean"])
                    es.append(100 * (hit[0]["std"] or 0.0))
            ax.bar(xs, ys, width, yerr=es, capsize=3, label=model)
        ax.set_xticks(range(len(pes)))
        ax.set_xticklabels(pes)
        ax.set_title(task)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 105)
        if task == "csl":
            ax.axhline(10, color="grey", linestyle="--", linewidth=1)
        if not note_if_empty(ax, f"{task} accuracy"):
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------- precompute
def random_sparse_graph(num_nodes: int, seed: int = 0):
    """A connected graph: the ring ``i -- i+1`` plus ``2 num_nodes`` uniform random edges (mean degree ~6)."""
    import numpy as np
    import torch
    from torch_geometric.data import Data
    from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

    rng = np.random.default_rng(seed)
    ring = np.arange(num_nodes)
    u = np.concatenate([ring, rng.integers(0, num_nodes, 2 * num_nodes)])
    v = np.concatenate([(ring + 1) % num_nodes, rng.integers(0, num_nodes, 2 * num_nodes)])
    edge_index = torch.from_numpy(np.stack([u, v])).long()
    edge_index, _ = remove_self_loops(edge_index)
    edge_index = coalesce(to_undirected(edge_index, num_nodes=num_nodes), num_nodes=num_nodes)
    return Data(edge_index=edge_index, num_nodes=num_nodes)


def precompute_transform(method: str, num_nodes: int):
    """The transform measured for ``method`` at this size, and a short description of it."""
    from torch_geometric.transforms import AddLaplacianEigenvectorPE, AddRandomWalkPE

    from pe_toolkit.domains.graphs.transforms import LaplacianEigenvectorPE, RandomFeaturePropagation, RandomWalkPE

    if method == "rwse":
        if num_nodes > MONTE_CARLO_ABOVE:
            transform = RandomWalkPE(RW_STEPS, method="monte_carlo", num_walks=MONTE_CARLO_WALKS)
            return transform, f"RandomWalkPE(16, monte_carlo, {MONTE_CARLO_WALKS} walks)"
        return RandomWalkPE(RW_STEPS), "RandomWalkPE(16, exact)"
    if method == "pyg_rwse":
        return AddRandomWalkPE(RW_STEPS), "PyG AddRandomWalkPE(16)"
    if method == "lap_pe":
        return LaplacianEigenvectorPE(LAP_K), "LaplacianEigenvectorPE(k=8)"
    if method == "pyg_lap_pe":
        return AddLaplacianEigenvectorPE(LAP_K, is_undirected=True), "PyG AddLaplacianEigenvectorPE(k=8)"
    if method == "rfp":
        return RandomFeaturePropagation(RFP_FEATURES, RFP_STEPS), "RandomFeaturePropagation(8 features, 8 steps)"
    raise ValueError(f"unknown precompute method {method!r}; allowed: {list(PRECOMPUTE_METHODS)}")


def _measure_precompute(method: str, num_nodes: int, repeats: int, threads: int) -> dict[str, Any]:
    """Runs in the forked child: build the graph, time the transform ``repeats`` times."""
    import torch

    torch.set_num_threads(threads)
    data = random_sparse_graph(num_nodes)
    transform, description = precompute_transform(method, num_nodes)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        transform(data.clone())
        times.append(time.perf_counter() - start)
    return {"times_s": times, "description": description, "num_edges": int(data.num_edges)}


def _warmup_precompute(method: str, threads: int):
    def warm() -> None:
        import torch

        torch.set_num_threads(threads)
        transform, _ = precompute_transform(method, 300)
        transform(random_sparse_graph(300, seed=1))

    return warm


def run_precompute(sizes: list[int], repeats: int, timeout: float, threads: int, progress: Progress,
                   cap_bytes: int | None = None) -> list[dict]:
    """One row per (method, size): median time and peak memory growth, or an error / skip note."""
    rows = []
    memory = total_memory_bytes()
    limit = int(MEMORY_FRACTION * memory) if cap_bytes is None else min(int(MEMORY_FRACTION * memory), 2 * cap_bytes)
    for n in sizes:
        for method in PRECOMPUTE_METHODS:
            row: dict[str, Any] = {"section": "precompute", "method": method, "num_nodes": n,
                                   "library": "pyg" if method.startswith("pyg_") else "pe_toolkit"}
            reason = pyg_skip_reason(method, n, memory, cap_bytes) if method.startswith("pyg_") else None
            if reason:
                row["status"] = reason
            else:
                reps = repeats if n <= 10_000 else 1
                try:
                    result, peak = peak_memory_in_subprocess(
                        _measure_precompute, method, n, reps, threads, warmup=_warmup_precompute(method, threads),
                        timeout=timeout, memory_limit_bytes=limit)
                    row.update(status="ok", median_s=statistics.median(result["times_s"]), min_s=min(result["times_s"]),
                               repeats=reps, peak_mib=peak / 2**20, description=result["description"],
                               num_edges=result["num_edges"])
                except RuntimeError as error:
                    text = str(error)
                    row["status"] = (f"timeout after {timeout:.0f} s" if "timed out" in text
                                     else "failed: " + text.strip().splitlines()[-1][:200])
            rows.append(row)
            shown = f"{row['median_s']:.3f} s, {row['peak_mib']:.0f} MiB" if row["status"] == "ok" else row["status"]
            progress(f"precompute {method} N={n}: {shown}")
    return rows


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PyG time / toolkit time at each size where both were measured in this run."""
    out = []
    for ours, theirs in (("rwse", "pyg_rwse"), ("lap_pe", "pyg_lap_pe")):
        for n in sorted({r["num_nodes"] for r in rows}):
            a = [r for r in rows if r["method"] == ours and r["num_nodes"] == n and r["status"] == "ok"]
            b = [r for r in rows if r["method"] == theirs and r["num_nodes"] == n and r["status"] == "ok"]
            if a and b:
                out.append({"encoding": ours, "num_nodes": n, "toolkit_s": a[0]["median_s"], "pyg_s": b[0]["median_s"],
                            "speedup": b[0]["median_s"] / a[0]["median_s"]})
    return out


def plot_precompute(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method in PRECOMPUTE_METHODS:
        points = sorted((r["num_nodes"], r["median_s"]) for r in rows if r["method"] == method and r["status"] == "ok")
        if points:
            style = "--" if method.startswith("pyg_") else "-"
            ax.plot(*zip(*points), style, marker="o", label=method)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes (random sparse graph, mean degree ~6)")
    ax.set_ylabel("seconds per graph (median)")
    if not note_if_empty(ax, "precompute time", reason="no precompute method finished in this run"):
        ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--pes", nargs="+", choices=list(PES), help="default: all (full), none rwse (quick)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), help="default: every available model")
    parser.add_argument("--folds", type=int, help="CSL folds to run, out of 5 (default 5 full, 1 quick)")
    parser.add_argument("--epochs", type=int, help="training epochs (overrides the preset, CSL and SBM)")
    parser.add_argument("--sbm-epochs", type=int, help="SBM training epochs (overrides --epochs and the preset)")
    parser.add_argument("--sbm-graphs", type=int, help="graphs per SBM dataset (overrides the preset)")
    parser.add_argument("--sizes", nargs="+", type=int, help="precompute graph sizes (nodes)")
    parser.add_argument("--repeats", type=int, help="precompute repeats per size (<= 10k nodes)")
    parser.add_argument("--timeout", type=float, help="seconds per precompute measurement")
    parser.add_argument("--memory-cap-gib", type=float, default=MEMORY_CAP_GIB,
                        help=f"skip PyG transforms estimated above this (default {MEMORY_CAP_GIB})")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per worker / child (default 1)")
    parser.add_argument("--jobs", type=int, default=2, help="training runs in parallel (0: in this process)")
    parser.add_argument("--data-root", type=Path, help="dataset cache (default OUT/graphs/data)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    parser.add_argument("--report-only", action="store_true", help="train nothing; report stored runs")
    args = parser.parse_args(argv)
    args.resume = args.resume or args.report_only
    preset = QUICK if args.quick else FULL
    folds = args.folds if args.folds is not None else preset["folds"]
    if not 1 <= folds <= 5:
        parser.error(f"--folds must be in [1, 5], got {folds}")
    pes = args.pes or preset["pes"]
    found, missing = available_models(args.models or preset.get("models"))
    if args.models and missing:
        parser.error(f"model(s) {missing} are not implemented yet (no {[MODELS[m][1] for m in missing]})")
    _, unavailable = available_models()
    models = found
    csl_hp, sbm_hp = dict(preset["csl"]), dict(preset["sbm"])
    if args.epochs is not None:
        csl_hp["epochs"] = sbm_hp["epochs"] = args.epochs
    if args.sbm_epochs is not None:
        sbm_hp["epochs"] = args.sbm_epochs
    sbm_graphs = dict(preset["sbm_num_graphs"])
    if args.sbm_graphs is not None:
        sbm_graphs = {t: args.sbm_graphs for t in sbm_graphs}
    sizes = args.sizes or preset["sizes"]
    repeats = args.repeats or preset["repeats"]
    timeout = args.timeout or preset["timeout_s"]
    out_dir = Path(args.out) / NAME
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    data_root = (args.data_root or out_dir / "data").resolve()
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []

    # Precompute first: its children are forked, so this process must not have run torch compute yet.
    if "precompute" in args.sections:
        progress = Progress(len(sizes) * len(PRECOMPUTE_METHODS), f"{NAME} precompute")
        rows += run_precompute(sizes, repeats, timeout, args.threads, progress,
                               cap_bytes=int(args.memory_cap_gib * 2**30))

    # Order: CSL fold 0 and the SBM runs for every (PE, model) first, then the other CSL folds, so that a run
    # stopped early (and reported with --report-only) has every cell with as many folds as possible.
    specs = []
    base = {"seed": 0, "threads": args.threads, "data_root": str(data_root),
            "device": device_options(args)}  # part of a run's identity: --resume never mixes devices
    csl_specs = [{**base, "task": "csl", "pe": pe, "model": m, "fold": f, "training": csl_hp}
                 for f in range(folds) for pe in pes for m in models] if "csl" in args.sections else []
    per_fold = len(pes) * len(models)
    specs += csl_specs[:per_fold]
    if "sbm" in args.sections:
        specs += [{**base, "task": t, "pe": pe, "model": m, "fold": 0, "training": sbm_hp,
                   "num_graphs": sbm_graphs[t], "fractions": preset["sbm_fractions"]}
                  for t in SBM_TASKS for pe in pes for m in models]
    specs += csl_specs[per_fold:]
    todo = []
    for spec in specs:
        path = runs_dir / f"{spec['task']}__{spec['pe']}__{spec['model']}__fold{spec['fold']}.json"
        if args.resume and path.exists():
            stored = json.loads(path.read_text())
            if stored.get("spec") == {k: v for k, v in spec.items() if k not in ("threads", "data_root")}:
                rows.append(stored)
                continue
        todo.append((spec, path))
    if args.report_only:
        print(f"{NAME}: --report-only: not run: {[p.name for _, p in todo]}", flush=True)
        todo = []
    if todo:
        # build every (dataset, PE) once here, so parallel workers never race to write the same cache file
        for key in sorted({(s["task"], s["pe"], s.get("num_graphs")) for s, _ in todo}):
            load_dataset(key[0], key[1], data_root, key[2])
        print(f"{NAME}: {len(specs)} training runs ({len(specs) - len(todo)} reused), jobs={args.jobs}", flush=True)
        progress = Progress(len(todo), f"{NAME} train")

        def record(row: dict[str, Any], path: Path) -> None:
            path.write_text(json.dumps(row, indent=1) + "\n")
            rows.append(row)
            progress(f"{row['task']} {row['pe']} {row['model']} fold {row['fold']}: "
                     f"{row['metric']} {row['test_metric']:.3f} ({row['seconds']:.0f}s)")

        if args.jobs <= 0:
            for spec, path in todo:
                record(run_train(spec), path)
        else:
            with worker_pool(args.jobs) as pool:
                futures = {pool.submit(run_train, spec): path for spec, path in todo}
                for future in concurrent.futures.as_completed(futures):
                    record(future.result(), futures[future])
    seconds = time.perf_counter() - start

    train_rows = [r for r in rows if r["section"] in ("csl", "sbm")]
    pre_rows = [r for r in rows if r["section"] == "precompute"]
    train_rows.sort(key=lambda r: (r["task"], r["model"], r["pe"], r["fold"]))
    summary = summarize_training(train_rows)
    config = {"quick": args.quick, "sections": args.sections, "pes": pes, "models": models,
              "unavailable_models": unavailable, "csl_folds": folds, "csl_training": csl_hp, "sbm_training": sbm_hp,
              "sbm_num_graphs": sbm_graphs, "sbm_fractions": preset["sbm_fractions"],
              "pe_settings": {k: v for k, v in PES.items() if v}, "precompute_sizes": sizes,
              "precompute_repeats": repeats, "precompute_timeout_s": timeout, "threads": args.threads}
    write_results(NAME, config, train_rows + pre_rows, seconds, root=args.out)

    body = [f"Sections: {', '.join(args.sections)}. Models: {', '.join(models) or 'none'}"
            + (f" (not implemented yet, so not reported: {', '.join(unavailable)})" if unavailable else "")
            + f". PEs: {', '.join(pes)}. Torch threads per process: {args.threads}.\n"]
    csl_summary = [r for r in summary if r["task"] == "csl"]
    if csl_summary:
        body.append(
            f"\n## CSL test accuracy (%), {folds} of 5 folds\n\n"
            f"Training: {csl_hp}; LapPE k={LAP_K}, RWSE {RW_STEPS} steps, RFP {RFP_FEATURES} features x "
            f"{RFP_STEPS} steps, random features 16 (fresh each forward in training, fixed table in eval). "
            "Test accuracy after the last epoch; mean +- population std over folds; chance is 10 %.\n\n"
            + markdown_table(csl_summary, ["model", "pe", ("runs", "folds"), ("mean", "accuracy %"), ("std", "std"),
                                           ("seconds", "s / run")],
                             {"mean": _pct, "std": _pct, "seconds": ".0f"})
            + "\n![CSL accuracy](csl_accuracy.png)\n")
        plot_accuracy(csl_summary, ["csl"], out_dir / "csl_accuracy.png", "test accuracy (%)")
    sbm_summary = [r for r in summary if r["task"] in SBM_TASKS]
    if sbm_summary:
        body.append(
            "\n## PATTERN / CLUSTER weighted test accuracy (%)\n\n"
            f"Graphs per dataset: {sbm_graphs}, split {preset['sbm_fractions']}; training: {sbm_hp}. Weighted "
            "accuracy = mean per-class recall (Benchmarking GNNs); one run each.\n\n"
            + markdown_table(sbm_summary, ["task", "model", "pe", ("mean", "weighted acc %"), ("seconds", "s / run")],
                             {"mean": _pct, "seconds": ".0f"})
            + "\n![SBM accuracy](sbm_accuracy.png)\n")
        plot_accuracy(sbm_summary, [t for t in SBM_TASKS if any(r["task"] == t for r in sbm_summary)],
                      out_dir / "sbm_accuracy.png", "weighted test accuracy (%)")
    if pre_rows:
        body.append(
            "\n## Precompute time per graph\n\n"
            f"Connected random sparse graphs (ring + 2N random edges, mean degree ~6), one forked child per cell, "
            f"median of up to {repeats} calls (1 above 10k nodes), {args.threads} torch thread(s), timeout "
            f"{timeout:.0f} s. Peak = the child's resident-memory growth. PyG is skipped where its estimated "
            f"footprint exceeds {MEMORY_FRACTION:.0%} of the available memory or {args.memory_cap_gib:.1f} GiB. "
            "RandomWalkPE uses Monte-Carlo "
            f"({MONTE_CARLO_WALKS} walks) above {MONTE_CARLO_ABOVE:,} nodes.\n\n"
            + markdown_table(pre_rows, ["method", ("num_nodes", "nodes"), ("median_s", "median s"), "repeats",
                                        ("peak_mib", "peak MiB"), "status"],
                             {"median_s": ".4f", "peak_mib": ".0f"})
            + "\n### Speed-up over PyG (PyG time / toolkit time, same run)\n\n"
            + (markdown_table(speedups(pre_rows), ["encoding", ("num_nodes", "nodes"), ("toolkit_s", "toolkit s"),
                                                   ("pyg_s", "PyG s"), ("speedup", "speed-up")],
                              {"toolkit_s": ".4f", "pyg_s": ".4f", "speedup": ".2f"})
               if speedups(pre_rows) else "No size with both measured.\n")
            + "\n![precompute time](precompute_time.png)\n")
        plot_precompute(pre_rows, out_dir / "precompute_time.png")
    body.append(f"\nTotal wall time {seconds:.0f} s.\n")
    write_report(NAME, "Graph positional encodings: accuracy and precompute speed", "".join(body), root=args.out)
    print(f"{NAME}: wrote {out_dir} in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
