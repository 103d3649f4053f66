"""Graph positional encodings: CSL and PATTERN / CLUSTER accuracy per PE x model, and a scale table against PyG.

Claims: LapPE (Dwivedi et al. 2023) and RWSE (Rampasek et al. 2022) lift a message-passing GNN above chance on
CSL (5-fold CV); RFP (Eliasof et al. 2023) beats random features and LapPE (CSL, CPU-sized PATTERN / CLUSTER).
The learning rate is tuned per (task, PE, model); a claim on a (task, model) not learned is untested
(:data:`LEARNED`). The ``precompute`` section times RWSE / LapPE / RFP against PyG's transforms, each measurement
in a forked child that holds the data folder's timing lock exclusively (:func:`_data_lock`). Protocol and
measured numbers: ``docs/tutorials/graphs.md``.

    pe-toolkit bench graphs --quick                                  # pipeline check, < 2 minutes
    pe-toolkit bench graphs --jobs 2                                 # full CPU preset
    pe-toolkit bench graphs --preset gpu --accelerator cuda
    pe-toolkit bench graphs --set sections=[precompute]              # the scale table alone (full: 1k-100k)
    python benchmarks/graphs.py --set sections=[csl] --set pes=[none,rwse,rfp] --set folds=2   # the same code
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from jsonargparse.typing import NonNegativeInt, OpenUnitInterval, PositiveFloat, PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning
from pe_toolkit.bench.checks import distinct
from pe_toolkit.bench.config import quiet_trainer
from pe_toolkit.bench.memory import peak_memory_in_subprocess
from pe_toolkit.bench.plots import finish, new_figure, plot_intervals
from pe_toolkit.bench.report import fairness_section, markdown_table
from pe_toolkit.bench.summary import summarize_groups
from pe_toolkit.bench.verdict import claim_row, decide_claim


# ------------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Training:
    hidden: PositiveInt
    layers: PositiveInt
    epochs: PositiveInt
    batch_size: PositiveInt


@dataclasses.dataclass
class SBMGraphs:
    pattern: PositiveInt
    cluster: PositiveInt


@dataclasses.dataclass
class Precompute:
    sizes: list[PositiveInt]
    datasets: list[Literal["csl", "pattern"]]
    pattern_graphs: PositiveInt
    walk_length: PositiveInt
    k: PositiveInt
    repeats: PositiveInt
    timeout_s: PositiveFloat
    memory_cap_gib: PositiveFloat


@dataclasses.dataclass
class RFP:  # Eliasof et al. 2023: random channels per start, propagation steps, independent starts
    features: PositiveInt
    steps: PositiveInt
    inits: PositiveInt


@dataclasses.dataclass
class Config:
    sections: list[Literal["csl", "sbm", "precompute"]]
    folds: Literal[1, 2, 3, 4, 5]
    pes: list[Literal["none", "random_features", "lap_pe", "rwse", "rfp"]]
    models: list[Literal["gin", "gps", "graph_mamba"]]
    csl: Training
    sbm: Training
    sbm_num_graphs: SBMGraphs
    sbm_seeds: list[NonNegativeInt]
    sbm_fractions: list[OpenUnitInterval]
    precompute: Precompute
    rfp: RFP
    lrs: list[PositiveFloat]  # the learning-rate grid, the same for every (task, pe, model)
    max_extensions: NonNegativeInt = 0  # learning rates added past an edge choice (log scale)
    data_root: str | None = None  # dataset cache; None: the toolkit's ($PE_TOOLKIT_CACHE/graphs)


# name -> (class in pe_toolkit.domains.graphs, extra kwargs). Graph Mamba: its defaults (walk length 2, 4 walks).
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "gin": ("GINModel", {}), "gps": ("GPSModel", {"heads": 2}), "graph_mamba": ("GraphMambaModel", {})}

LAP_K = 8  # CSL's circulant graphs have repeated eigenvalues: LapPE is expected to be weak there
RW_STEPS = 16
RFP_REFERENCE = {"features": 64, "steps": 16}  # Eliasof et al.'s sizes (the reference implementation's defaults)
PE_NAMES = ("none", "random_features", "lap_pe", "rwse", "rfp")


def pe_settings(pe: str, rfp: dict[str, int]) -> dict[str, Any]:
    """How a run computes PE ``pe`` (part of its spec): the transform in :mod:`pe_toolkit.domains.graphs.transforms`
    and its options (none: nothing precomputed; random features are drawn in the model), ``per_access`` (run on
    every access: RFP's starts are redrawn every epoch; else once, as the dataset's pre_transform), and the model's
    ``pe_options``. ``rfp``: the config's ``{features, steps, inits}``."""
    features, steps, inits = rfp["features"], rfp["steps"], rfp["inits"]
    return {"none": {"model": None}, "random_features": {"model": {"num_features": 16}},
            "lap_pe": {"transform": "LaplacianEigenvectorPE", "options": {"k": LAP_K}, "model": {"in_features": LAP_K}},
            "rwse": {"transform": "RandomWalkPE", "options": {"walk_length": RW_STEPS},
                     "model": {"in_features": RW_STEPS}},
            "rfp": {"transform": "RandomFeaturePropagation", "per_access": True,
                    "options": {"num_features": features, "steps": steps, "num_inits": inits, "normalization": "qr"},
                    "model": {"in_features": inits * (steps + 1) * features, "num_inits": inits}}}[pe]


SBM_TASKS = ("pattern", "cluster")
PRECOMPUTE_METHODS = ("rwse", "pyg_rwse", "lap_pe", "pyg_lap_pe", "rfp")
PAIRS = (("rwse", "pyg_rwse"), ("lap_pe", "pyg_lap_pe"))  # (toolkit, PyG) compared in the speed-up table
# speed-up table: its field -> (the measurement's field, header, format), for the toolkit and for PyG
SPEED_FIELDS = {"cpu_s": ("cpu_min_s", "CPU s", ".4f"), "s": ("min_s", "wall s", ".4f"),
                "mib": ("peak_mib", "MiB", ".0f"), "residual": ("max_residual", "residual", ".1e")}
MEMORY_FRACTION = 0.6  # PyG is skipped where its estimated footprint exceeds this share of available memory
PYG_SPARSE_BYTES_PER_ENTRY = 64  # PyG's sparse RWSE: bytes per filled N^2 entry (measured 6.1 GiB at 10k, T = 8)
RWSE_BAR = {"num_nodes": 100_000, "seconds": 60.0, "gib": 8.0}  # issue 28: exact RWSE at 100k nodes

# The papers' claims (a beats b) on every task and model where both PEs ran: Dwivedi et al. 2023 and the RWSE of
# GPS (Rampasek et al. 2022) on CSL, Eliasof et al. 2023 (RFP).
CLAIMS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("LapPE beats no PE (Dwivedi et al.)", "lap_pe", "none", ("csl",)),
    ("RWSE beats no PE (Rampasek et al.)", "rwse", "none", ("csl",)),
    ("RFP beats random features (Eliasof et al.)", "rfp", "random_features", ("csl", "pattern", "cluster")),
    ("RFP beats LapPE (Eliasof et al.)", "rfp", "lap_pe", ("csl", "pattern", "cluster")),
)
CHANCE = {"csl": 0.1, "pattern": 0.5, "cluster": 1 / 6}  # 10 classes; weighted accuracy of 2 and 6 classes
LEARNED = {task: (chance + 1.0) / 2 for task, chance in CHANCE.items()}
"""A (task, model) is learned when its best PE's mean test accuracy reaches halfway from chance to 100 %; below
it, its claims are untested (a model that learns the task with no PE cannot say which PE helps it)."""


# ------------------------------------------------------------------------------------------ data
def make_transform(settings: dict[str, Any], *, per_access: bool):
    """The transform of :func:`pe_settings` ``settings`` if it runs per access / once, else None."""
    if "transform" not in settings or bool(settings.get("per_access")) != per_access:
        return None
    from pe_toolkit.domains.graphs import transforms

    return getattr(transforms, settings["transform"])(**settings["options"])


def load_dataset(task: str, root: Path, num_graphs: int | None = None, pre_transform: Any = None):
    """The task's generated dataset, cached under ``root/<TASK>`` (CSL: all 150 graphs; ``num_graphs`` for SBM)."""
    from pe_toolkit.domains import graphs

    cls = {"csl": graphs.CSLDataset, "pattern": graphs.PATTERNDataset, "cluster": graphs.CLUSTERDataset}[task]
    sizes = {} if task == "csl" else {"num_graphs": num_graphs}
    return cls(root=root / task.upper(), seed=0, pre_transform=pre_transform, **sizes)


def data_root(spec: dict[str, Any]) -> Path:
    """The dataset cache of a run: ``spec["data_root"]`` or the toolkit's (``$PE_TOOLKIT_CACHE/graphs``)."""
    from pe_toolkit.domains.graphs.datasets import default_root

    return Path(spec["data_root"] or Path(default_root("CSL")).parent)


@contextlib.contextmanager
def _data_lock(root: Path, name: str, *, exclusive: bool) -> Iterator[None]:
    """``flock`` on ``root/.<name>.lock``: ``timing`` (scale-table runs exclusive, training shared: no training
    shares the cores with a timing) and ``build`` (one process writes a dataset cache file at a time)."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------ training
def run_train(spec: dict[str, Any]) -> dict[str, Any]:
    """Train and test one (task, pe, model, fold or seed); a result row."""
    import lightning as L

    from pe_toolkit.domains import graphs
    from pe_toolkit.domains.graphs.lightning_module import GraphClassificationModule, GraphDataModule

    start = time.perf_counter()
    task, pe, model_name, hp, settings = spec["task"], spec["pe"], spec["model"], spec["training"], spec["pe_settings"]
    root = data_root(spec)
    with _data_lock(root, "build", exclusive=True):
        dataset = load_dataset(task, root, spec.get("num_graphs"), make_transform(settings, per_access=False))
    if task == "csl":
        splits, inputs, num_classes, model_task, metric = (graphs.csl_folds(dataset, 5, seed=0)[spec["fold"]],
                                                           {"in_features": 1}, 10, "graph", "acc")
    else:
        splits, inputs, model_task, metric = (graphs.sbm_splits(dataset, spec["fractions"], seed=0),
                                              {"num_node_types": dataset.num_node_types}, "node", "weighted_acc")
        num_classes = 2 if task == "pattern" else dataset.num_clusters
    L.seed_everything(spec["seed"] + spec.get("fold", 0), verbose=False)
    cls, extra = MODELS[model_name]
    model = getattr(graphs, cls)(num_classes=num_classes, hidden=hp["hidden"], layers=hp["layers"], task=model_task,
                                 pe=None if pe == "none" else pe, pe_options=settings["model"], **inputs, **extra)
    # RFP: a per-access transform, its starts redrawn per graph and per epoch (the data module sets both)
    transform = make_transform(settings, per_access=True)
    data = GraphDataModule(dataset, splits, batch_size=hp["batch_size"], transform=transform)
    steps = hp["epochs"] * math.ceil(len(splits[0]) / hp["batch_size"])
    module = GraphClassificationModule(model, num_classes=num_classes, lr=spec["lr"],
                                       warmup_steps=max(1, steps // 20), max_steps=steps)
    trainer = quiet_trainer(spec.get("device"), max_epochs=hp["epochs"], limit_val_batches=0)
    trainer.fit(module, data)
    train_metric = float(trainer.callback_metrics.get(f"train/{metric}", float("nan")))
    # the validation split, for the learning-rate choice (logged under test/: a test pass on the val loader)
    val_metric = float(trainer.test(module, dataloaders=data.val_dataloader(), verbose=False)[0][f"test/{metric}"])
    result = trainer.test(module, data, verbose=False)[0]
    return {"section": "csl" if task == "csl" else "sbm", "task": task, "pe": pe, "model": model_name,
            "fold": spec.get("fold"), "seed": spec["seed"], "lr": spec["lr"], "metric": metric,
            "test_metric": float(result[f"test/{metric}"]), "test_acc": float(result["test/acc"]),
            "train_metric": train_metric, "val_metric": val_metric,
            "parameters": sum(p.numel() for p in model.parameters()), "train_graphs": len(splits[0]),
            "test_graphs": len(splits[2]), "threads": spec["threads"], "seconds": time.perf_counter() - start}


def plot_accuracy(summary: list[dict[str, Any]], tasks: list[str], ylabel: str) -> Any:
    """One panel per task: mean test accuracy and its 95 % interval per PE, one series per model."""
    from matplotlib.ticker import PercentFormatter

    fig, axes = new_figure(1, len(tasks), size=(6, 4))
    for ax, task in zip(axes[0], tasks):
        rows = [r for r in summary if r["task"] == task]
        pes = [p for p in PE_NAMES if any(r["pe"] == p for r in rows)]
        models = [m for m in MODELS if any(r["model"] == m for r in rows)]
        for j, model in enumerate(models):
            hits = {r["pe"]: r["test_metric"] for r in rows if r["model"] == model}
            xs = [i + (j - (len(models) - 1) / 2) * 0.8 / len(models) for i, pe in enumerate(pes) if pe in hits]
            plot_intervals(ax, xs, [hits[pe] for pe in pes if pe in hits], label=model, linestyle="none")
        ax.set(xticks=range(len(pes)), xticklabels=pes, title=task, ylabel=ylabel, ylim=(0, 1.05))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.axhline(CHANCE.get(task, 0.0), color="grey", linestyle="--", linewidth=1)  # chance
    return finish(fig, f"{'/'.join(tasks)} accuracy")


# ---------------------------------------------------------------------------------------- precompute
def estimate_pyg_bytes(method: str, num_nodes: int, *, walk_length: int = 8, k: int = LAP_K,
                       avg_degree: float = 6.0) -> int:
    """Rough peak memory (bytes) of PyG's transform on a graph of ``num_nodes`` nodes.

    ``pyg_rwse`` (``AddRandomWalkPE``): up to 2,000 nodes three dense float32 ``N x N`` matrices (measured 46 MiB
    at 2,000); above, sparse CSR powers ``P^t`` filling in to ``N^2`` entries once ``avg_degree^t > N``, at
    :data:`PYG_SPARSE_BYTES_PER_ENTRY` bytes each (calibrated: 6.1 GiB at 10,000 nodes, walk length 8).
    ``pyg_lap_pe`` (``AddLaplacianEigenvectorPE``): dense float64 ``N x N`` (x3, numpy ``eigh``) below 100 nodes,
    otherwise ARPACK's Lanczos basis (``N x max(2k+3, 20)`` float64) plus the sparse Laplacian.
    """
    n = int(num_nodes)
    if method == "pyg_rwse":
        if n <= 2_000:
            return 3 * 4 * n * n
        return int(PYG_SPARSE_BYTES_PER_ENTRY * min(float(n) * n, n * avg_degree ** min(walk_length, 60)))
    if method == "pyg_lap_pe":
        return 3 * 8 * n * n if n < 100 else int(8 * n * max(2 * (k + 1) + 1, 20) + 3 * 16 * n * (avg_degree + 1))
    raise ValueError(f"estimate_pyg_bytes: method must be 'pyg_rwse' or 'pyg_lap_pe', got {method!r}")


def pyg_skip_reason(method: str, num_nodes: int, memory_bytes: int | None = None,
                    cap_bytes: int | None = None, *, walk_length: int = 8, k: int = LAP_K) -> str | None:
    """``"skipped: would need X GiB"`` when the estimate exceeds 60 % of available memory (or ``cap_bytes``)."""
    import psutil  # a dependency of torch_geometric

    memory_bytes = psutil.virtual_memory().available if memory_bytes is None else memory_bytes
    need = estimate_pyg_bytes(method, num_nodes, walk_length=walk_length, k=k)
    if need > MEMORY_FRACTION * memory_bytes:
        gib = memory_bytes / 2**30
        return f"skipped: would need {need / 2**30:.1f} GiB (> {MEMORY_FRACTION:.0%} of {gib:.1f} GiB available)"
    if cap_bytes is not None and need > cap_bytes:
        return f"skipped: would need {need / 2**30:.1f} GiB (> the {cap_bytes / 2**30:.1f} GiB cap)"
    return None


def precompute_transform(method: str, *, walk_length: int, k: int, rfp: dict[str, int]) -> tuple[Any, str]:
    """The transform measured for ``method`` (one of :data:`PRECOMPUTE_METHODS`), and a short description."""
    from torch_geometric import transforms as pyg

    from pe_toolkit.domains import graphs

    return {"rwse": lambda: (graphs.RandomWalkPE(walk_length), f"RandomWalkPE({walk_length}, exact)"),
            "pyg_rwse": lambda: (pyg.AddRandomWalkPE(walk_length), f"PyG AddRandomWalkPE({walk_length})"),
            "lap_pe": lambda: (graphs.LaplacianEigenvectorPE(k), f"LaplacianEigenvectorPE(k={k})"),
            "pyg_lap_pe": lambda: (pyg.AddLaplacianEigenvectorPE(k, is_undirected=True),
                                   f"PyG AddLaplacianEigenvectorPE(k={k})"),
            "rfp": lambda: (graphs.RandomFeaturePropagation(rfp["features"], rfp["steps"], num_inits=rfp["inits"]),
                            f"RandomFeaturePropagation({rfp['features']} features, {rfp['steps']} steps, "
                            f"{rfp['inits']} inits)"),
            }[method]()


@functools.cache  # in a forked child: its warm-up loads, the measurement reuses
def precompute_graphs(graph: str | int, root: str, pattern_graphs: int) -> list:
    """One scale-table input: ``[random_sparse_graph(n)]`` for a size ``n``, or every graph of ``"csl"`` (150) /
    the first ``pattern_graphs`` of ``"pattern"`` (generated, cached under ``root``)."""
    from pe_toolkit.domains.graphs import random_sparse_graph

    if isinstance(graph, int):
        return [random_sparse_graph(graph)]
    dataset = load_dataset(graph, Path(root), pattern_graphs)
    return [dataset[i] for i in range(len(dataset))]


def _measure(method: str, graph: str | int, threads: int, options: dict[str, Any], warmup: bool = False):
    """In a forked child: time one pass of the transform over the input's graphs (or, ``warmup``, run the code
    paths once on a 60- and a 600-node graph, below and above every dense/sparse threshold, and load the input)."""
    import torch

    from pe_toolkit.domains.graphs import laplacian_residual, random_sparse_graph

    torch.set_num_threads(threads)
    transform, description = precompute_transform(method, walk_length=options["walk_length"], k=options["k"],
                                                  rfp=options["rfp"])
    if warmup:
        for size in (60, 600):
            transform(random_sparse_graph(size, seed=1))
    graphs = precompute_graphs(graph, options["data_root"], options["pattern_graphs"])
    if warmup:
        return None
    start, cpu_start = time.perf_counter(), time.process_time()
    outputs = [transform(g) for g in graphs]  # transforms return copies; the inputs stay untouched
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    row = {"seconds": seconds, "cpu": cpu, "description": description, "graphs": len(graphs),
           "num_nodes_total": sum(int(g.num_nodes) for g in graphs), "num_edges": sum(int(g.num_edges) for g in graphs)}
    if method == "lap_pe":  # accuracy: the largest residual over the graphs (not timed)
        row["max_residual"] = max(laplacian_residual(g, o.lap_pe, o.lap_eigval[0]) for g, o in zip(graphs, outputs))
    elif method == "pyg_lap_pe":  # PyG returns no eigenvalues: its vectors' Rayleigh quotients
        row["max_residual"] = max(laplacian_residual(g, o.laplacian_eigenvector_pe) for g, o in zip(graphs, outputs))
    return row


def measure_input(spec: dict[str, Any]) -> dict[str, Any]:
    """One scale-table input: a row whose ``measurements`` hold, per method, min / median seconds over the repeats
    and peak memory growth, or a skip / error note; the methods' repeats alternate, one forked child each."""
    import psutil  # a dependency of torch_geometric

    settings, threads, graph = spec["precompute"], spec["threads"], spec["input"]
    repeats, timeout = int(settings["repeats"]), float(settings["timeout_s"])
    cap_bytes = int(float(settings["memory_cap_gib"]) * 2**30)
    root = data_root(spec)
    options = {"walk_length": int(settings["walk_length"]), "k": int(settings["k"]), "data_root": str(root),
               "pattern_graphs": int(settings["pattern_graphs"]), "rfp": spec["rfp"]}
    memory = psutil.virtual_memory().available
    limit = min(int(MEMORY_FRACTION * memory), 2 * cap_bytes)
    # import (no compute) once here, so that every forked child has the modules instead of importing them
    import scipy.sparse.linalg  # noqa: F401
    import torch_geometric.transforms  # noqa: F401

    import pe_toolkit.domains.graphs  # noqa: F401

    sized = isinstance(graph, int)
    cells = {m: {"section": "precompute", "method": m, "input": str(graph), "num_nodes": graph if sized else None,
                 "library": "pyg" if m.startswith("pyg_") else "pe_toolkit", "walk_length": options["walk_length"],
                 "k": options["k"], "times_s": [], "cpu_times_s": []} for m in PRECOMPUTE_METHODS}
    for _, method in PAIRS:  # the PyG methods
        if sized and (reason := pyg_skip_reason(method, graph, memory, cap_bytes, walk_length=options["walk_length"],
                                                k=options["k"])):
            cells[method]["status"] = reason
    with _data_lock(root, "timing", exclusive=True):
        for rep in range(repeats):  # PyG's dense-path RWSE above 2k nodes takes minutes per call: once
            for method, cell in cells.items():
                if cell.get("status", "ok") != "ok" or (rep and method == "pyg_rwse" and sized and graph > 2_000):
                    continue
                args = (method, graph, threads, options)
                try:
                    result, peak = peak_memory_in_subprocess(_measure, *args, warmup=functools.partial(
                        _measure, *args, warmup=True), timeout=timeout, memory_limit_bytes=limit)
                except RuntimeError as error:  # a failed method is not retried at this input
                    text = str(error)
                    cell["status"] = (f"timeout after {timeout:.0f} s" if "timed out" in text
                                      else "failed: " + text.strip().splitlines()[-1][:200])
                    continue
                cell["times_s"].append(result.pop("seconds"))
                cell["cpu_times_s"].append(result.pop("cpu"))
                cell["peak_mib"] = max(cell.get("peak_mib", 0.0), peak / 2**20)
                cell.update(result)
    for cell in cells.values():
        if cell["times_s"]:  # measured (a later repeat may have failed: its note stays)
            if cell.get("status", "ok") != "ok":
                cell["note"] = cell["status"]
            cell.update(status="ok", min_s=min(cell["times_s"]), median_s=statistics.median(cell["times_s"]),
                        repeats=len(cell["times_s"]), cpu_min_s=min(cell["cpu_times_s"]))
        else:
            cell.setdefault("status", "not run")
    return {"section": "precompute", "input": str(graph), "threads": threads, "measurements": list(cells.values())}


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (encoding, input) with both methods present: toolkit and PyG seconds (min over repeats), CPU
    seconds, peak memory and residual, the speed-ups PyG / toolkit where both were measured, else the notes."""
    out = []
    for ours, theirs in PAIRS:
        for graph in dict.fromkeys(r["input"] for r in rows):
            a, b = (next((r for r in rows if r["method"] == m and r["input"] == graph), None) for m in (ours, theirs))
            if a is None or b is None:
                continue
            row: dict[str, Any] = {"encoding": ours, "input": graph}
            for prefix, r in (("toolkit", a), ("pyg", b)):
                if r.get("status") == "ok":
                    row.update({f"{prefix}_{key}": r[source] for key, (source, _, _) in SPEED_FIELDS.items()
                                if r.get(source) is not None})
            if "toolkit_s" in row and "pyg_s" in row:
                row["speedup"] = row["pyg_s"] / row["toolkit_s"]
                if row.get("toolkit_cpu_s") and row.get("pyg_cpu_s"):
                    row["cpu_speedup"] = row["pyg_cpu_s"] / row["toolkit_cpu_s"]
            else:
                row["note"] = "; ".join(f"{name}: {r.get('status')}" for name, r in (("toolkit", a), ("PyG", b))
                                        if r.get("status") != "ok")
            out.append(row)
    return out


def rwse_bar(rows: list[dict[str, Any]]) -> str | None:
    """The issue's bar for exact RWSE at 100k nodes, checked against this run's measurement (None if absent)."""
    row = next((r for r in rows if r["method"] == "rwse" and r.get("num_nodes") == RWSE_BAR["num_nodes"]), None)
    if row is None:
        return None
    bar = f"bar: < {RWSE_BAR['seconds']:.0f} s and < {RWSE_BAR['gib']:.0f} GiB"
    if row.get("status") != "ok":
        return f"Exact RWSE at {RWSE_BAR['num_nodes']:,} nodes: {row.get('status')} ({bar}): not met."
    met = row["min_s"] < RWSE_BAR["seconds"] and row["peak_mib"] < RWSE_BAR["gib"] * 1024
    cpu = f" ({row['cpu_min_s']:.1f} s CPU)" if row.get("cpu_min_s") is not None else ""
    return (f"Exact RWSE (walk length {row['walk_length']}) at {RWSE_BAR['num_nodes']:,} nodes: {row['min_s']:.1f} s "
            f"wall{cpu}, {row['peak_mib']:.0f} MiB peak growth ({bar}): {'met' if met else 'not met'}.")


def plot_precompute(rows: list[dict[str, Any]]) -> Any:
    """Seconds per random graph (min over repeats) against its size, per method (PyG dashed)."""
    fig, axes = new_figure(size=(6, 4))
    ax = axes[0][0]
    for method in PRECOMPUTE_METHODS:
        points = sorted((r["num_nodes"], r.get("min_s", r.get("median_s"))) for r in rows
                        if r["method"] == method and r.get("status") == "ok" and r.get("num_nodes"))
        if points:
            ax.plot(*zip(*points), "--" if method.startswith("pyg_") else "-", marker="o", label=method)
    ax.set(xscale="log", yscale="log", xlabel="nodes (random sparse graph, mean degree ~6)",
           ylabel="seconds per graph (min over repeats)")
    ax.grid(True, which="both", alpha=0.3)
    return finish(fig, "precompute time", reason="no precompute method finished in this run")


# ------------------------------------------------------------------------------------------------ benchmark
def _training(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["section"] != "precompute"]


def _measurements(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [cell for r in rows if r["section"] == "precompute" for cell in r["measurements"]]


def _shown(cell: dict[str, Any]) -> str:
    ok, method = cell.get("status") == "ok", cell["method"]
    return f"{method} " + (f"{cell['cpu_min_s']:.3f} s CPU, {cell['peak_mib']:.0f} MiB" if ok else cell["status"])


class Graphs(Benchmark):
    name = "graphs"
    title = "Graph positional encodings: accuracy and scale"
    Config = Config
    key_fields = ("run",)
    summary_by = ("task", "model", "pe")
    summary_metrics = {"test_metric": (0.0, 1.0), "seconds": None}
    summary_keep = ("metric",)
    run_columns = ("task", "model", "pe", "fold", "seed", "lr", ("test_metric", "test accuracy"), "seconds")

    def check(self, config: Config) -> None:
        distinct("sbm_seeds", config.sbm_seeds)

    def runs(self, config: Config) -> list[dict[str, Any]]:
        # The scale table first (its children are forked: no torch compute may run in a process before; with
        # --jobs N every worker takes its scale-table runs first), then CSL fold 0 and the SBM runs, then the
        # other CSL folds, so that a run stopped early has every cell with as many folds as possible.
        base, sections, rfp = {"data_root": config.data_root}, config.sections, dataclasses.asdict(config.rfp)
        specs = [{**base, "run": f"precompute__{graph}", "section": "precompute", "input": graph,
                  "precompute": dataclasses.asdict(config.precompute), "rfp": rfp}
                 for graph in [*config.precompute.sizes, *config.precompute.datasets] if "precompute" in sections]
        train = [{**base, "section": "csl", "task": "csl", "pe": pe, "model": m, "fold": f, "seed": 0,
                  "training": dataclasses.asdict(config.csl), "pe_settings": pe_settings(pe, rfp)}
                 for f in range(config.folds) for pe in config.pes for m in config.models if "csl" in sections]
        # every SBM seed trains on the same split (seeded initialisation and batches): the interval's replicates
        train[len(config.pes) * len(config.models):len(config.pes) * len(config.models)] = [
            {**base, "section": "sbm", "task": t, "pe": pe, "model": m, "fold": 0, "seed": seed,
             "training": dataclasses.asdict(config.sbm), "pe_settings": pe_settings(pe, rfp),
             "num_graphs": getattr(config.sbm_num_graphs, t), "fractions": config.sbm_fractions}
            for seed in config.sbm_seeds for t in SBM_TASKS for pe in config.pes for m in config.models
            if "sbm" in sections]
        for s in train:
            tag = f"fold{s['fold']}" if s["task"] == "csl" else f"seed{s['seed']}"
            s.update(run=f"{s['task']}__{s['pe']}__{s['model']}__{tag}", group=f"{s['task']}/{s['pe']}/{s['model']}")
        return specs + train

    def tuning(self, config: Config) -> Tuning:
        # chosen on the first seed (CSL: every fold has seed 0, so the mean over the folds' validation splits);
        # the scale table's runs have no group and are not tuned
        return Tuning(param="lr", values=[float(lr) for lr in config.lrs], metric="val_metric", maximize=True,
                      group="group", max_extensions=config.max_extensions)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        if spec["section"] == "precompute":
            return measure_input(spec)
        with _data_lock(data_root(spec), "timing", exclusive=False):
            return run_train(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        if row["section"] == "precompute":
            return f"precompute {row['input']}: " + "; ".join(map(_shown, row["measurements"]))
        return (f"{row['task']} {row['pe']} {row['model']} fold {row['fold']} seed {row['seed']}: "
                f"{row['metric']} {row['test_metric']:.3f} ({row['seconds']:.0f}s)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        order = {key: i for i, key in enumerate([*PE_NAMES, *MODELS])}
        train = sorted(_training(result.rows), key=lambda r: (r["task"], order[r["model"]], order[r["pe"]]))
        return (super().analyze(dataclasses.replace(result, rows=train))
                + [{"kind": "speedup", **s} for s in speedups(_measurements(result.rows))])

    def claims(self, result: Result) -> list[dict[str, Any]]:
        """One ``decide_claim`` row per (claim, task, model) with both PEs measured: Welch's t on the per-replicate test
        accuracies (CSL folds, SBM seeds) within [0, 1]; untested when the cell is not learned (:data:`LEARNED`, from
        every PE of the cell), a replicate is not finite, or a side has < 2 replicates."""
        rfp = dataclasses.asdict(result.config.rfp) if result.config else RFP_REFERENCE
        smaller = any(rfp[k] != v for k, v in RFP_REFERENCE.items())
        out = []
        for claim, a, b, tasks in CLAIMS:
            departure = (f" (RFP {rfp['features']} x {rfp['steps']}, not the reference's 64 x 16)"
                         if smaller and "rfp" in (a, b) else "")
            for task, model in itertools.product(tasks, MODELS):
                cell = sorted((r for r in result.rows if r["task"] == task and r["model"] == model),
                              key=lambda r: (r.get("fold") or 0, r["seed"]))
                first, second = ([r["test_metric"] for r in cell if r["pe"] == pe] for pe in (a, b))
                if not first or not second:
                    continue
                means = {e["pe"]: e["test_metric"]["mean"] for e in summarize_groups(cell, ("pe",), ("test_metric",))
                         if e["test_metric"]["n"]}  # the finite replicates' mean
                best_pe = max(means, key=means.get) if means else None
                best = means.get(best_pe, math.nan)
                learned = (best >= LEARNED[task], f"{task.upper()} not learned by {model}: best mean test accuracy "
                           f"{100 * best:.1f} % ({best_pe}) < {100 * LEARNED[task]:.1f} % (halfway from chance "
                           f"{100 * CHANCE[task]:.1f} % to 100 %)")
                decided = decide_claim(first, second, higher_is_better=True, bounds=(0.0, 1.0),
                                       name=f"{claim}: {task}, {model}{departure}", preconditions=[learned])
                out.append(claim_row(decided, claim=claim, task=task, model=model, first_pe=a, second_pe=b))
        return out

    def describe(self, result: Result) -> str:
        # the fairness section is written here: the replicates are the SBM seeds and CSL's folds, not `seeds`
        config, rfp = result.config, result.config.rfp
        learned = ", ".join(f"{t.upper()} {v:.1%}" for t, v in LEARNED.items())
        return (f"Models {', '.join(config.models)}; PEs {', '.join(config.pes)} (LapPE k = {LAP_K}, RWSE {RW_STEPS} "
                f"steps, RFP {rfp.inits} inits x {rfp.features} features x {rfp.steps} steps, random features 16). "
                f"CSL: test accuracy over {config.folds} of 5 folds (chance 10 %); PATTERN / CLUSTER: weighted "
                f"accuracy (mean per-class recall) over the SBM seeds, on one split. Device {result.device}.\n\n"
                + fairness_section(
                    self.tuning(config), config.sbm_seeds if "sbm" in config.sections else [0],
                    held_out="the PEs are functions of the graph alone (RFP's starts are seeded random draws); test "
                    "accuracy is read once, after the last epoch", same_budget="the same hyperparameters, splits and "
                    "epochs", notes=[
                        f"Replicates: the SBM seeds and CSL's {config.folds} fold(s) (every fold runs seed 0, so CSL's "
                        "learning rate is chosen on the mean over the folds).",
                        f"A (task, model) whose best PE stays below halfway from chance to 100 % ({learned}) is not "
                        "learned: its claims are *untested*.",
                        "Departures from the papers: CPU-sized models and datasets (not 14,000 / 12,000 SBM graphs), "
                        "LapPE k = 8 on CSL (Benchmarking GNNs uses 20)"
                        + ("" if "rfp" not in config.pes or dataclasses.asdict(rfp).items() >= RFP_REFERENCE.items()
                           else f", RFP {rfp.features} channels x {rfp.steps} steps (the reference: 64 x 16)") + "."]))

    def plot(self, result: Result) -> dict[str, Any]:
        summary, figures = result.derived_of("summary"), {}
        if any(r["task"] == "csl" for r in summary):
            figures["csl_accuracy.png"] = plot_accuracy(summary, ["csl"], "test accuracy")
        if tasks := [t for t in SBM_TASKS if any(r["task"] == t for r in summary)]:
            figures["sbm_accuracy.png"] = plot_accuracy(summary, tasks, "weighted test accuracy")
        if _measurements(result.rows):
            figures["precompute_time.png"] = plot_precompute(_measurements(result.rows))
        return figures

    def report(self, result: Result) -> str:
        train, cells = _training(result.rows), _measurements(result.rows)
        body = super().report(dataclasses.replace(result, rows=train)) if train else ""
        if not cells:
            return body
        scale, speed, bar = result.config.precompute, result.derived_of("speedup"), rwse_bar(cells)
        sides = [(f"{side}_{key}", f"{name} {header}") for key, (_, header, _) in SPEED_FIELDS.items()
                 for side, name in (("toolkit", "toolkit"), ("pyg", "PyG"))]
        formats = {f"{side}_{key}": fmt for key, (_, _, fmt) in SPEED_FIELDS.items() for side in ("toolkit", "pyg")}
        return body + (
            f"\n## Scale: RWSE and LapPE against PyG\n\nRWSE walk length {scale.walk_length}, LapPE k = {scale.k}; one "
            f"forked child per measurement ({result.rows[0]['threads']} thread(s)); seconds = the minimum over up to "
            f"{scale.repeats} alternating repeats; peak = resident-memory growth; residual = largest "
            "`|L v - lambda v|` (float64); PyG skipped where its estimated need exceeds the memory cap.\n\n"
            + (markdown_table(speed, ["encoding", "input", ("cpu_speedup", "PyG / toolkit (CPU)"),
                                      ("speedup", "PyG / toolkit (wall)"), *sides, "note"],
                              {"speedup": ".2f", "cpu_speedup": ".2f", **formats}) if speed
               else "No input with both measured.\n")
            + (f"\n{bar}\n" if bar else "")
            + "\n### Every measurement\n\n"
            + markdown_table(cells, ["method", "input", ("min_s", "min s"), ("median_s", "median s"),
                                     ("cpu_min_s", "min CPU s"), "repeats", ("peak_mib", "peak MiB"), "status", "note"],
                             {"min_s": ".4f", "median_s": ".4f", "cpu_min_s": ".4f", "peak_mib": ".0f"}))


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="pe_toolkit.benchmarks.graphs:Graphs", prog="python benchmarks/graphs.py"))
