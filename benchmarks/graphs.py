"""Graph positional encodings: CSL and SBM (PATTERN / CLUSTER) accuracy per PE x model, and a scale table.

Three sections (``sections`` in the preset):

* ``csl``: Circular Skip Links (Murphy et al. 2019), 10 classes that 1-WL cannot separate; 5-fold
  stratified cross-validation (:func:`pe_toolkit.domains.graphs.csl_folds`, Benchmarking GNNs protocol). Test
  accuracy, mean and 95 % interval over the folds, for every PE x model. Chance is 10 %.
* ``sbm``: PATTERN and CLUSTER (Dwivedi et al. 2023), CPU-sized (``sbm_num_graphs``), weighted accuracy (mean
  per-class recall) on the test split of :func:`pe_toolkit.domains.graphs.sbm_splits`, mean and 95 % interval
  over ``sbm_seeds``. PATTERN is drawn as the released generator (100 patterns of 5..34 nodes).
* ``precompute``: the scale table. The transforms against PyG's ``AddRandomWalkPE`` / ``AddLaplacianEigenvectorPE``
  with the same walk length / ``k`` (``precompute.walk_length``, ``precompute.k``: 8 and 8), on connected
  random sparse graphs (a ring plus ``2N`` random edges: mean degree ~6) of ``precompute.sizes`` nodes and on
  whole datasets (``precompute.datasets``: every CSL graph, ``precompute.pattern_graphs`` PATTERN graphs). One
  run per input; every measurement in its own forked child (time and peak memory growth, with a timeout and
  a memory cap); the repeats of the methods alternate (toolkit, PyG, toolkit, ...) so that both see the
  same machine load, and the speed-up is the ratio of the minima (the least disturbed repeat of each).
  LapPE rows also give the largest residual ``|L v - lambda v|`` of the returned pairs (float64; PyG's with
  the Rayleigh quotients of its vectors). PyG is skipped, with the memory it would need, where its estimated
  footprint exceeds 60 % of the available memory or ``precompute.memory_cap_gib``; that row says so.
  A scale-table run holds an exclusive lock on the data folder and training runs a shared one
  (:func:`_data_lock`), so that with ``--jobs N`` no training shares the cores with a timing.

Fairness (``docs/benchmarks.md``): every PE and model trains with the preset's hyperparameters except the
learning rate, which the runner tunes per (task, PE, model) from the same grid ``lrs`` by validation accuracy
(``max_extensions`` values past an edge choice, the same for every group); the papers' claims (:data:`CLAIMS`)
are decided by :func:`claims` (``decide_claim``; untested on a task a model does not learn, :data:`LEARNED`);
the report says how the rule is met and where the protocol departs from the papers'.

    pe-toolkit bench graphs --quick                                  # pipeline check, < 2 minutes
    pe-toolkit bench graphs --jobs 2                                 # full CPU preset
    pe-toolkit bench graphs --preset gpu --accelerator cuda
    pe-toolkit bench graphs --set sections=[precompute]              # the scale table alone (full: 1k-100k)
    python benchmarks/graphs.py --set sections=[csl] --set pes=[none,rwse,rfp] --set folds=2   # the same code

RFP (``pe: rfp``) is the paper's: a per-access transform of the data module, its random starts redrawn per
graph and per epoch (seeded by ``(seed, epoch, graph id)``), QR normalisation, ``num_inits`` initialisations
mapped by the DSS encoder (``pe="rfp"``).

Models come from :data:`MODELS`, a table of ``name -> (module, class, extra kwargs)``; a model whose class
does not exist (yet) is listed as unavailable and never gets a number. Datasets are cached under
``data_root`` (default: the toolkit's dataset cache, ``$PE_TOOLKIT_CACHE/graphs``).

Outputs in ``<out>/graphs/``: ``results.json`` (one row per training run and per scale-table input, the
latter with its ``measurements``), ``report.md``, ``csl_accuracy.png``, ``sbm_accuracy.png``,
``precompute_time.png``; each finished run in ``runs/<preset>/`` (``--resume`` reuses matching ones).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pe_toolkit.bench import Benchmark, Result, Tuning, trainer_options
from pe_toolkit.bench.memory import peak_memory_in_subprocess
from pe_toolkit.bench.plots import note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.stats import format_interval, mean_interval
from pe_toolkit.bench.verdict import claim_row, claims_table, decide_claim


# ------------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Training:
    hidden: int
    layers: int
    epochs: int
    batch_size: int


@dataclasses.dataclass
class SBMGraphs:
    pattern: int
    cluster: int


@dataclasses.dataclass
class Precompute:
    sizes: list[int]
    datasets: list[str]
    pattern_graphs: int
    walk_length: int
    k: int
    repeats: int
    timeout_s: float
    memory_cap_gib: float


@dataclasses.dataclass
class Config:
    sections: list[str]
    folds: int
    pes: list[str]
    models: list[str]
    csl: Training
    sbm: Training
    sbm_num_graphs: SBMGraphs
    sbm_seeds: list[int]
    sbm_fractions: list[float]
    precompute: Precompute
    lrs: list[float]  # the learning-rate grid, the same for every (task, pe, model), chosen by validation accuracy
    max_extensions: int = 0  # learning rates added past an edge choice (log scale), the same for every group
    data_root: str | None = None  # dataset cache; None: the toolkit's ($PE_TOOLKIT_CACHE/graphs)


SECTIONS = ("csl", "sbm", "precompute")

# name -> (module, class name, extra constructor kwargs); a model whose class is missing is reported as
# unavailable (no numbers). Graph Mamba: walk_length 2, 4 walks per token, 1 repetition, d_state 8 (defaults).
MODELS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "gin": ("pe_toolkit.domains.graphs.models", "GINModel", {}),
    "gps": ("pe_toolkit.domains.graphs.models", "GPSModel", {"heads": 2}),
    "graph_mamba": ("pe_toolkit.domains.graphs.models", "GraphMambaModel", {}),
}

# PE name -> transform options (None: no precomputed attribute). "random_features" is drawn in the model;
# "per_access": the transform runs on every access in the data module (RFP's starts are redrawn every epoch)
# instead of once as the dataset's pre_transform.
LAP_K = 8  # CSL's circulant graphs have repeated eigenvalues: LapPE is expected to be weak there
RW_STEPS = 16
RFP_FEATURES, RFP_STEPS, RFP_INITS = 8, 8, 4
PES: dict[str, dict[str, Any] | None] = {
    "none": None,
    "random_features": None,
    "lap_pe": {"transform": "LaplacianEigenvectorPE", "options": {"k": LAP_K}},
    "rwse": {"transform": "RandomWalkPE", "options": {"walk_length": RW_STEPS}},
    "rfp": {"transform": "RandomFeaturePropagation", "per_access": True,
            "options": {"num_features": RFP_FEATURES, "steps": RFP_STEPS, "num_inits": RFP_INITS,
                        "normalization": "qr"}},
}

SBM_TASKS = ("pattern", "cluster")
PRECOMPUTE_METHODS = ("rwse", "pyg_rwse", "lap_pe", "pyg_lap_pe", "rfp")
PAIRS = (("rwse", "pyg_rwse"), ("lap_pe", "pyg_lap_pe"))  # (toolkit, PyG) compared in the speed-up table
DATASETS = ("csl", "pattern")  # whole datasets in the scale table
MEMORY_FRACTION = 0.6  # PyG is skipped where its estimated footprint exceeds this share of available memory
PYG_SPARSE_BYTES_PER_ENTRY = 64  # PyG's sparse RWSE: bytes per filled N^2 entry (measured 6.1 GiB at 10k, T = 8)
RWSE_BAR = {"num_nodes": 100_000, "seconds": 60.0, "gib": 8.0}  # issue 28: exact RWSE at 100k nodes


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


def estimate_pyg_bytes(method: str, num_nodes: int, *, walk_length: int = 8, k: int = LAP_K,
                       avg_degree: float = 6.0) -> int:
    """Rough peak memory (bytes) of PyG's transform on a graph of ``num_nodes`` nodes.

    ``pyg_rwse`` (``AddRandomWalkPE``): up to 2,000 nodes three dense float32 ``N x N`` matrices (the
    adjacency, the power and the product; measured 46 MiB at 2,000 nodes); above, sparse CSR powers ``P^t``
    whose fill-in reaches ``N^2`` once ``avg_degree^t > N`` (a few steps on an expander), at
    :data:`PYG_SPARSE_BYTES_PER_ENTRY` bytes per ``N^2`` entry (values, indices and the COO copies made to
    read the diagonal; calibrated on a measurement here: 6.1 GiB of growth at 10,000 nodes, walk length 8).
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
                    cap_bytes: int | None = None, *, walk_length: int = 8, k: int = LAP_K) -> str | None:
    """``"skipped: would need X GiB"`` when the estimate exceeds 60 % of available memory (or ``cap_bytes``)."""
    memory_bytes = total_memory_bytes() if memory_bytes is None else memory_bytes
    need = estimate_pyg_bytes(method, num_nodes, walk_length=walk_length, k=k)
    if need > MEMORY_FRACTION * memory_bytes:
        gib = memory_bytes / 2**30
        return f"skipped: would need {need / 2**30:.1f} GiB (> {MEMORY_FRACTION:.0%} of {gib:.1f} GiB available)"
    if cap_bytes is not None and need > cap_bytes:
        return f"skipped: would need {need / 2**30:.1f} GiB (> the {cap_bytes / 2**30:.1f} GiB cap)"
    return None


def make_transform(pe: str, *, per_access: bool | None = None):
    """The PE's transform from :mod:`pe_toolkit.domains.graphs.transforms` (None for "none" / "random_features").

    ``per_access=True`` / ``False``: only a transform that runs on every access / once as the pre_transform
    (None for the other kind); ``None``: either."""
    spec = PES[pe]
    if spec is None or (per_access is not None and bool(spec.get("per_access")) != per_access):
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
        return {"in_features": RFP_INITS * (RFP_STEPS + 1) * RFP_FEATURES, "num_inits": RFP_INITS}
    raise ValueError(f"unknown pe {pe!r}; allowed: {list(PES)}")


def load_dataset(task: str, pe: str, root: Path, num_graphs: int | None = None):
    """The task's dataset under ``root`` with the PE's transform as ``pre_transform`` (cached on disk), unless
    the PE's transform runs per access (RFP: see :func:`run_train`)."""
    from pe_toolkit.domains.graphs import CLUSTERDataset, CSLDataset, PATTERNDataset

    pre = make_transform(pe, per_access=False)
    if task == "csl":
        return CSLDataset(root=root / "CSL", seed=0, pre_transform=pre)
    if task == "pattern":
        return PATTERNDataset(root=root / "PATTERN", num_graphs=num_graphs, seed=0, pre_transform=pre)
    if task == "cluster":
        return CLUSTERDataset(root=root / "CLUSTER", num_graphs=num_graphs, seed=0, pre_transform=pre)
    raise ValueError(f"unknown task {task!r}")


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

    from pe_toolkit.domains.graphs import csl_folds, sbm_splits
    from pe_toolkit.domains.graphs.lightning_module import GraphClassificationModule, GraphDataModule

    start = time.perf_counter()
    task, pe, model_name = spec["task"], spec["pe"], spec["model"]
    root = data_root(spec)
    with _data_lock(root, "build", exclusive=True):
        dataset = load_dataset(task, pe, root, spec.get("num_graphs"))
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
    # RFP: a per-access transform, its starts redrawn per graph and per epoch (the data module sets both)
    data = GraphDataModule(dataset, splits, batch_size=hp["batch_size"], transform=make_transform(pe, per_access=True))
    steps = hp["epochs"] * math.ceil(len(splits[0]) / hp["batch_size"])
    module = GraphClassificationModule(model, num_classes=num_classes, lr=spec["lr"],
                                       warmup_steps=max(1, steps // 20), max_steps=steps)
    trainer = L.Trainer(max_epochs=hp["epochs"], **trainer_options(spec.get("device")), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0)
    trainer.fit(module, data)
    train_metric = float(trainer.callback_metrics.get(f"train/{metric}", float("nan")))
    # the validation split, for the learning-rate choice (logged under test/: a test pass on the val loader)
    val_metric = float(trainer.test(module, dataloaders=data.val_dataloader(), verbose=False)[0][f"test/{metric}"])
    result = trainer.test(module, data, verbose=False)[0]
    return {
        "section": "csl" if task == "csl" else "sbm",
        "task": task,
        "pe": pe,
        "model": model_name,
        "fold": spec.get("fold"),
        "seed": spec["seed"],
        "lr": spec["lr"],
        "metric": metric,
        "test_metric": float(result[f"test/{metric}"]),
        "test_acc": float(result["test/acc"]),
        "train_metric": train_metric,
        "val_metric": val_metric,
        "parameters": sum(p.numel() for p in model.parameters()),
        "train_graphs": len(splits[0]),
        "test_graphs": len(splits[2]),
        "threads": spec["threads"],
        "seconds": time.perf_counter() - start,
    }


def summarize_training(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and 95 % Student-t interval of the test metric per (task, pe, model), over its replicates: the CSL
    folds (each its own split and seed), the SBM seeds (the same split, seeded initialisation and batches)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["task"], row["pe"], row["model"]), []).append(row)
    out = []
    for (task, pe, model), members in groups.items():
        interval = mean_interval(m["test_metric"] for m in members)
        out.append({"task": task, "pe": pe, "model": model, "metric": members[0]["metric"], "runs": len(members),
                    **interval, "text": _pct_interval(interval),
                    "seconds": statistics.fmean(m["seconds"] for m in members)})
    order = {p: i for i, p in enumerate(PES)}
    out.sort(key=lambda r: (r["task"], r["model"], order.get(r["pe"], 99)))
    return out


# The papers' claims, each a comparison (a beats b) on every task and model where both were run:
# Dwivedi et al. 2023 (CSL: an MP-GNN is at chance without a PE, near 100 % with LapPE), the RWSE of GPS
# (Rampasek et al. 2022) likewise, and Eliasof et al. 2023 (RFP beats random features and spectral PEs).
CLAIMS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("LapPE beats no PE (Dwivedi et al.)", "lap_pe", "none", ("csl",)),
    ("RWSE beats no PE (Rampasek et al.)", "rwse", "none", ("csl",)),
    ("RFP beats random features (Eliasof et al.)", "rfp", "random_features", ("csl", "pattern", "cluster")),
    ("RFP beats LapPE (Eliasof et al.)", "rfp", "lap_pe", ("csl", "pattern", "cluster")),
)


CHANCE = {"csl": 0.1, "pattern": 0.5, "cluster": 1 / 6}  # 10 classes; weighted accuracy of 2 and 6 classes
LEARNED = {task: (chance + 1.0) / 2 for task, chance in CHANCE.items()}
"""A (task, model) counts as learned when its best PE's mean test accuracy reaches halfway from chance to
100 % (CSL 55 %, PATTERN 75 %, CLUSTER 58.3 %); below it, the claims on that cell are untested (a model
that learns the task with no PE cannot say which PE helps it)."""


def claims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One :func:`~pe_toolkit.bench.verdict.decide_claim` row per (claim, task, model) with both PEs measured.

    Welch's t on the per-replicate test accuracies (CSL folds, SBM seeds; independent trainings), per-side
    intervals within [0, 1]; untested when the cell is not learned (:data:`LEARNED`, computed from every PE
    of the cell), a replicate is not finite, or a side has fewer than 2 replicates.
    """
    out = []
    for claim, a, b, tasks in CLAIMS:
        for task in tasks:
            for model in MODELS:
                cell = [r for r in rows if r["task"] == task and r["model"] == model]
                first = sorted((r for r in cell if r["pe"] == a), key=lambda r: (r.get("fold") or 0, r["seed"]))
                second = sorted((r for r in cell if r["pe"] == b), key=lambda r: (r.get("fold") or 0, r["seed"]))
                if not first or not second:
                    continue
                means = {pe: statistics.fmean(finite) for pe in dict.fromkeys(r["pe"] for r in cell)
                         if (finite := [r["test_metric"] for r in cell if r["pe"] == pe
                                        and r["test_metric"] is not None and math.isfinite(r["test_metric"])])}
                best_pe = max(means, key=means.get) if means else None
                best = means.get(best_pe, math.nan)
                learned = (best >= LEARNED[task],
                           f"{task.upper()} not learned by {model}: best mean test accuracy {100 * best:.1f} % "
                           f"({best_pe}) < {100 * LEARNED[task]:.1f} % (halfway from chance "
                           f"{100 * CHANCE[task]:.1f} % to 100 %)")
                result = decide_claim([r["test_metric"] for r in first], [r["test_metric"] for r in second],
                                      higher_is_better=True, bounds=(0.0, 1.0), name=f"{claim}: {task}, {model}",
                                      preconditions=[learned])
                out.append(claim_row(result, claim=claim, task=task, model=model, first_pe=a, second_pe=b))
    return out


def _pct_interval(interval: dict[str, Any]) -> str:
    """``mean [low, high] (n=N)`` in percent (``n/a`` without a finite mean)."""
    if not math.isfinite(interval["mean"]):
        return "n/a"
    scaled = {**interval, **{k: 100 * interval[k] for k in ("mean", "low", "high")}}
    return format_interval(scaled, ".1f")


def plot_accuracy(summary: list[dict[str, Any]], tasks: list[str], ylabel: str) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        rows = [r for r in summary if r["task"] == task and r["mean"] is not None and math.isfinite(r["mean"])]
        pes = [p for p in PES if any(r["pe"] == p for r in rows)]
        models = [m for m in MODELS if any(r["model"] == m for r in rows)]
        width = 0.8 / max(1, len(models))
        for j, model in enumerate(models):
            xs, ys, below, above = [], [], [], []
            for i, pe in enumerate(pes):
                hit = [r for r in rows if r["pe"] == pe and r["model"] == model]
                if hit:
                    xs.append(i + (j - (len(models) - 1) / 2) * width)
                    ys.append(100 * hit[0]["mean"])
                    # the 95 % interval as the error bar; none drawn for a single replicate
                    has_interval = hit[0].get("low") is not None and math.isfinite(hit[0]["low"])
                    below.append(100 * (hit[0]["mean"] - hit[0]["low"]) if has_interval else 0.0)
                    above.append(100 * (hit[0]["high"] - hit[0]["mean"]) if has_interval else 0.0)
            ax.bar(xs, ys, width, yerr=[below, above], capsize=3, label=model)
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
    return fig


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


def precompute_transform(method: str, *, walk_length: int = 8, k: int = LAP_K):
    """The transform measured for ``method``, and a short description of it."""
    from torch_geometric.transforms import AddLaplacianEigenvectorPE, AddRandomWalkPE

    from pe_toolkit.domains.graphs.transforms import LaplacianEigenvectorPE, RandomFeaturePropagation, RandomWalkPE

    if method == "rwse":
        return RandomWalkPE(walk_length), f"RandomWalkPE({walk_length}, exact)"
    if method == "pyg_rwse":
        return AddRandomWalkPE(walk_length), f"PyG AddRandomWalkPE({walk_length})"
    if method == "lap_pe":
        return LaplacianEigenvectorPE(k), f"LaplacianEigenvectorPE(k={k})"
    if method == "pyg_lap_pe":
        return AddLaplacianEigenvectorPE(k, is_undirected=True), f"PyG AddLaplacianEigenvectorPE(k={k})"
    if method == "rfp":
        transform = RandomFeaturePropagation(RFP_FEATURES, RFP_STEPS, num_inits=RFP_INITS)
        return transform, f"RandomFeaturePropagation({RFP_FEATURES} features, {RFP_STEPS} steps, {RFP_INITS} inits)"
    raise ValueError(f"unknown precompute method {method!r}; allowed: {list(PRECOMPUTE_METHODS)}")


_GRAPHS: dict[tuple, list] = {}  # filled in a forked child only (its warm-up loads, the measurement reuses)


def precompute_graphs(graph: str | int, data_root: str | None = None, pattern_graphs: int = 200) -> list:
    """The graphs of one scale-table input: ``[random_sparse_graph(n)]`` for a size ``n``, or every graph of
    ``"csl"`` (150) / the first ``pattern_graphs`` of ``"pattern"`` (generated, cached under ``data_root``)."""
    key = (graph, data_root, pattern_graphs)
    if key not in _GRAPHS:
        _GRAPHS[key] = _load_graphs(graph, data_root, pattern_graphs)
    return _GRAPHS[key]


def _load_graphs(graph: str | int, data_root: str | None, pattern_graphs: int) -> list:
    if isinstance(graph, int):
        return [random_sparse_graph(graph)]
    from pe_toolkit.domains.graphs import CSLDataset, PATTERNDataset

    root = Path(data_root) if data_root else None  # None: the datasets' default cache directory
    if graph == "csl":
        dataset = CSLDataset(root=None if root is None else root / "CSL", seed=0)
    elif graph == "pattern":
        dataset = PATTERNDataset(root=None if root is None else root / "PATTERN", num_graphs=pattern_graphs, seed=0)
    else:
        raise ValueError(f"unknown scale-table dataset {graph!r}; allowed: {list(DATASETS)} or a number of nodes")
    return [dataset[i] for i in range(len(dataset))]


def lap_residual(data, pe, eigenvalues=None) -> float:
    """``max_j |L v_j - lambda_j v_j|`` (float64) of unit-normalised columns ``v_j`` of ``pe`` ``(N, k)``, with
    ``L = I - D^-1/2 A D^-1/2``; ``lambda_j`` = ``eigenvalues`` or, if None, the Rayleigh quotients."""
    import numpy as np
    import scipy.sparse as sp

    from pe_toolkit.domains.graphs.transforms import graph_adjacency

    adj = graph_adjacency(data, self_loops=False)
    deg = np.asarray(adj.sum(axis=1)).ravel()
    d_is = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    lap = sp.identity(adj.shape[0]) - sp.diags(d_is) @ adj @ sp.diags(d_is)
    v = pe.detach().cpu().double().numpy()
    v = v[:, np.linalg.norm(v, axis=0) > 0]
    v = v / np.linalg.norm(v, axis=0)
    lv = lap @ v
    lam = (v * lv).sum(0) if eigenvalues is None else np.asarray(eigenvalues, dtype=np.float64)[: v.shape[1]]
    return float(np.linalg.norm(lv - v * lam, axis=0).max(initial=0.0))


def _measure_precompute(method: str, graph: str | int, threads: int, options: dict[str, Any]) -> dict[str, Any]:
    """Runs in the forked child: build the input, time one pass of the transform over its graphs."""
    import torch

    torch.set_num_threads(threads)
    graphs = precompute_graphs(graph, options.get("data_root"), options.get("pattern_graphs", 200))
    transform, description = precompute_transform(method, walk_length=options["walk_length"], k=options["k"])
    start, cpu_start = time.perf_counter(), time.process_time()
    outputs = [transform(g) for g in graphs]  # transforms return copies; the inputs stay untouched
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    row = {"seconds": seconds, "cpu": cpu, "description": description, "graphs": len(graphs),
           "num_nodes_total": sum(int(g.num_nodes) for g in graphs), "num_edges": sum(int(g.num_edges) for g in graphs)}
    if method in ("lap_pe", "pyg_lap_pe"):  # accuracy: the largest residual over the graphs (not timed)
        key = "lap_pe" if method == "lap_pe" else "laplacian_eigenvector_pe"
        row["max_residual"] = max(lap_residual(g, out[key], out.lap_eigval[0] if method == "lap_pe" else None)
                                  for g, out in zip(graphs, outputs))
    return row


def _warmup_precompute(method: str, graph: str | int, threads: int, options: dict[str, Any]):
    """Before the child's baseline: run the code paths once (a first call pays for lazy imports and caches: on a
    60- and a 600-node graph, below and above every dense/sparse threshold), and load the input graphs."""
    def warm() -> None:
        import torch

        torch.set_num_threads(threads)
        transform, _ = precompute_transform(method, walk_length=options["walk_length"], k=options["k"])
        for size in (60, 600):  # both code paths of every method (dense: small graphs; sparse: large ones)
            transform(random_sparse_graph(size, seed=1))
        precompute_graphs(graph, options.get("data_root"), options.get("pattern_graphs", 200))

    return warm


def measure_input(spec: dict[str, Any]) -> dict[str, Any]:
    """One scale-table input: a row whose ``measurements`` hold, per method, min / median seconds over the
    repeats and peak memory growth, or a skip / error note. The methods' repeats alternate, one forked child
    each; the run holds the data folder's timing lock exclusively (no training runs meanwhile)."""
    settings, threads, graph = spec["precompute"], spec["threads"], spec["input"]
    repeats, timeout = int(settings["repeats"]), float(settings["timeout_s"])
    cap_bytes = int(float(settings["memory_cap_gib"]) * 2**30)
    root = data_root(spec)
    options = {"walk_length": int(settings["walk_length"]), "k": int(settings["k"]), "data_root": str(root),
               "pattern_graphs": int(settings["pattern_graphs"])}
    memory = total_memory_bytes()
    limit = min(int(MEMORY_FRACTION * memory), 2 * cap_bytes)
    # import (no compute) once here, so that every forked child has the modules instead of importing them
    import scipy.sparse.linalg  # noqa: F401
    import torch_geometric.transforms  # noqa: F401

    import pe_toolkit.domains.graphs  # noqa: F401

    cells: dict[str, dict[str, Any]] = {}
    for method in PRECOMPUTE_METHODS:
        cell: dict[str, Any] = {"section": "precompute", "method": method, "input": str(graph),
                                "num_nodes": graph if isinstance(graph, int) else None,
                                "library": "pyg" if method.startswith("pyg_") else "pe_toolkit",
                                "walk_length": options["walk_length"], "k": options["k"], "times_s": [],
                                "cpu_times_s": []}
        if method.startswith("pyg_") and isinstance(graph, int):
            reason = pyg_skip_reason(method, graph, memory, cap_bytes, walk_length=options["walk_length"],
                                     k=options["k"])
            if reason:
                cell["status"] = reason
        cells[method] = cell
    with _data_lock(root, "timing", exclusive=True):
        # dense PyG RWSE above 2k nodes is minutes per call: once; everything else alternates `repeats` times
        for rep in range(repeats):
            for method, cell in cells.items():
                if cell.get("status", "ok") != "ok":
                    continue
                if rep and method == "pyg_rwse" and isinstance(graph, int) and graph > 2_000:
                    continue
                try:
                    result, peak = peak_memory_in_subprocess(
                        _measure_precompute, method, graph, threads, options,
                        warmup=_warmup_precompute(method, graph, threads, options), timeout=timeout,
                        memory_limit_bytes=limit)
                except RuntimeError as error:
                    text = str(error)
                    cell["status"] = (f"timeout after {timeout:.0f} s" if "timed out" in text
                                      else "failed: " + text.strip().splitlines()[-1][:200])
                    continue  # a failed method is not retried at this input
                cell["times_s"].append(result.pop("seconds"))
                cell["cpu_times_s"].append(result.pop("cpu"))
                cell["peak_mib"] = max(cell.get("peak_mib", 0.0), peak / 2**20)
                cell.update(result)
    for cell in cells.values():
        times = cell["times_s"]
        if times:  # measured (a later repeat may have failed: its note stays)
            if cell.get("status", "ok") != "ok":
                cell["note"] = cell["status"]
            cell.update(status="ok", min_s=min(times), median_s=statistics.median(times), repeats=len(times),
                        cpu_min_s=min(cell["cpu_times_s"]))
        else:
            cell.setdefault("status", "not run")
    return {"section": "precompute", "input": str(graph), "threads": threads, "measurements": list(cells.values())}


def _shown(cell: dict[str, Any]) -> str:
    if cell.get("status") != "ok":
        return f"{cell['method']} {cell.get('status')}"
    return (f"{cell['method']} {cell['min_s']:.3f} s wall, {cell['cpu_min_s']:.3f} s CPU (min of {cell['repeats']}), "
            f"{cell['peak_mib']:.0f} MiB")


def speedups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (encoding, input): toolkit and PyG seconds (min over repeats) and peak memory, the
    speed-up PyG / toolkit where both were measured in this run, or PyG's skip / failure note."""
    out = []
    inputs = list(dict.fromkeys(r.get("input", str(r.get("num_nodes"))) for r in rows))
    for ours, theirs in PAIRS:
        for graph in inputs:
            a = [r for r in rows if r["method"] == ours and r.get("input", str(r.get("num_nodes"))) == graph]
            b = [r for r in rows if r["method"] == theirs and r.get("input", str(r.get("num_nodes"))) == graph]
            if not a or not b:
                continue
            a, b = a[0], b[0]
            row: dict[str, Any] = {"encoding": ours, "input": graph}
            a_ok, b_ok = a.get("status") == "ok", b.get("status") == "ok"
            for prefix, r, ok in (("toolkit", a, a_ok), ("pyg", b, b_ok)):
                if not ok:
                    continue
                for key, source in (("s", "min_s"), ("cpu_s", "cpu_min_s"), ("mib", "peak_mib"),
                                    ("residual", "max_residual")):
                    if r.get(source) is not None:
                        row[f"{prefix}_{key}"] = r[source]
            if a_ok and b_ok:
                row["speedup"] = row["pyg_s"] / row["toolkit_s"]
                if row.get("toolkit_cpu_s") and row.get("pyg_cpu_s"):
                    row["cpu_speedup"] = row["pyg_cpu_s"] / row["toolkit_cpu_s"]
            else:
                row["note"] = "; ".join(f"{name}: {r.get('status')}" for name, r, ok in
                                        (("toolkit", a, a_ok), ("PyG", b, b_ok)) if not ok)
            out.append(row)
    return out


def rwse_bar(rows: list[dict[str, Any]]) -> str | None:
    """The issue's bar for exact RWSE at 100k nodes, checked against this run's measurement (None if absent)."""
    hit = [r for r in rows if r["method"] == "rwse" and r.get("num_nodes") == RWSE_BAR["num_nodes"]]
    if not hit:
        return None
    row = hit[0]
    if row.get("status") != "ok":
        return f"Exact RWSE at {RWSE_BAR['num_nodes']:,} nodes: {row.get('status')} (bar: < 60 s and < 8 GiB): not met."
    met = row["min_s"] < RWSE_BAR["seconds"] and row["peak_mib"] < RWSE_BAR["gib"] * 1024
    cpu = f" ({row['cpu_min_s']:.1f} s CPU)" if row.get("cpu_min_s") is not None else ""
    return (f"Exact RWSE (walk length {row['walk_length']}) at {RWSE_BAR['num_nodes']:,} nodes: {row['min_s']:.1f} s "
            f"wall{cpu}, {row['peak_mib']:.0f} MiB peak growth (bar: < {RWSE_BAR['seconds']:.0f} s and "
            f"< {RWSE_BAR['gib']:.0f} GiB): {'met' if met else 'not met'}.")


def plot_precompute(rows: list[dict[str, Any]]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method in PRECOMPUTE_METHODS:
        points = sorted((r["num_nodes"], r.get("min_s", r.get("median_s"))) for r in rows
                        if r["method"] == method and r.get("status") == "ok" and r.get("num_nodes"))
        if points:
            style = "--" if method.startswith("pyg_") else "-"
            ax.plot(*zip(*points), style, marker="o", label=method)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes (random sparse graph, mean degree ~6)")
    ax.set_ylabel("seconds per graph (min over repeats)")
    if not note_if_empty(ax, "precompute time", reason="no precompute method finished in this run"):
        ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ benchmark
def _measurements(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [cell for r in rows if r["section"] == "precompute" for cell in r["measurements"]]


class Graphs(Benchmark):
    name = "graphs"
    title = "Graph positional encodings: accuracy and scale"
    description = ("CSL and PATTERN / CLUSTER accuracy per graph PE x model, and RWSE / LapPE precompute time "
                   "against PyG")
    Config = Config
    key_fields = ("run",)

    def check(self, config: Config) -> None:
        for key, allowed in (("sections", SECTIONS), ("pes", tuple(PES)), ("models", tuple(MODELS)),
                             ("precompute.datasets", DATASETS)):
            values = config.precompute.datasets if key == "precompute.datasets" else getattr(config, key)
            bad = [v for v in values if v not in allowed]
            if bad:
                raise ValueError(f"{key} must be a list from {list(allowed)}, got {values!r}")
        if not 1 <= config.folds <= 5:
            raise ValueError(f"folds must be in [1, 5], got {config.folds}")
        seeds = config.sbm_seeds
        if not seeds or any(s < 0 for s in seeds):
            raise ValueError(f"sbm_seeds must be a non-empty list of non-negative ints, got {seeds!r}")
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"sbm_seeds must be distinct, got {seeds}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        # The scale table first: its children are forked, so a process must not have run torch compute before
        # (and with --jobs N every worker takes its scale-table runs before any training run). Then CSL fold 0
        # and the SBM runs for every (PE, model), then the other CSL folds, so that a run stopped early has every
        # cell with as many folds as possible.
        sections, models = config.sections, available_models(config.models)[0]
        base = {"data_root": config.data_root}
        specs = []
        if "precompute" in sections:
            settings = dataclasses.asdict(config.precompute)
            specs += [{**base, "run": f"precompute__{graph}", "section": "precompute", "input": graph,
                       "precompute": settings} for graph in [*config.precompute.sizes, *config.precompute.datasets]]
        csl = [{**base, "run": f"csl__{pe}__{m}__fold{f}", "group": f"csl/{pe}/{m}", "section": "csl", "task": "csl",
                "pe": pe, "model": m,
                "fold": f, "seed": 0, "training": dataclasses.asdict(config.csl), "pe_settings": PES[pe]}
               for f in range(config.folds) for pe in config.pes for m in models] if "csl" in sections else []
        per_fold = len(config.pes) * len(models)
        specs += csl[:per_fold]
        if "sbm" in sections:
            # every seed trains on the same split (seeded initialisation and batches): the replicates of the interval
            graphs = dataclasses.asdict(config.sbm_num_graphs)
            specs += [{**base, "run": f"{t}__{pe}__{m}__seed{seed}", "group": f"{t}/{pe}/{m}", "section": "sbm",
                       "task": t, "pe": pe,
                       "model": m, "fold": 0, "seed": seed, "training": dataclasses.asdict(config.sbm),
                       "pe_settings": PES[pe], "num_graphs": graphs[t], "fractions": config.sbm_fractions}
                      for seed in config.sbm_seeds for t in SBM_TASKS for pe in config.pes for m in models]
        return specs + csl[per_fold:]

    def tuning(self, config: Config) -> Tuning:
        # the same grid and cap for every (task, pe, model), chosen by validation accuracy on the first seed (CSL:
        # every fold has seed 0, so the choice is the mean over the folds' validation splits); the scale table's
        # runs have no group and are not tuned
        return Tuning(param="lr", values=[float(lr) for lr in config.lrs], metric="val_metric", maximize=True,
                      group="group", max_extensions=config.max_extensions)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        if spec["section"] == "precompute":
            return measure_input(spec)
        root = data_root(spec)
        with _data_lock(root, "timing", exclusive=False):
            return run_train(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        if row["section"] == "precompute":
            return f"precompute {row['input']}: " + "; ".join(map(_shown, row["measurements"]))
        return (f"{row['task']} {row['pe']} {row['model']} fold {row['fold']} seed {row['seed']}: "
                f"{row['metric']} {row['test_metric']:.3f} ({row['seconds']:.0f}s)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        train = [r for r in result.rows if r["section"] in ("csl", "sbm")]
        summary = summarize_training(train)
        return ([{**s, "kind": "summary"} for s in summary]
                + claims(train)
                + [{**s, "kind": "speedup"} for s in speedups(_measurements(result.rows))])

    def plot(self, result: Result) -> dict[str, Any]:
        summary = [r for r in result.derived if r["kind"] == "summary"]
        figures = {}
        if any(r["task"] == "csl" for r in summary):
            figures["csl_accuracy.png"] = plot_accuracy([r for r in summary if r["task"] == "csl"], ["csl"],
                                                        "test accuracy (%)")
        tasks = [t for t in SBM_TASKS if any(r["task"] == t for r in summary)]
        if tasks:
            figures["sbm_accuracy.png"] = plot_accuracy([r for r in summary if r["task"] in SBM_TASKS], tasks,
                                                        "weighted test accuracy (%)")
        if _measurements(result.rows):
            figures["precompute_time.png"] = plot_precompute(_measurements(result.rows))
        return figures

    def report(self, result: Result) -> str:
        config = result.config
        summary = [r for r in result.derived if r["kind"] == "summary"]
        claims = [r for r in result.derived if r["kind"] == "claim"]
        table = [r for r in result.derived if r["kind"] == "speedup"]
        pre_rows = _measurements(result.rows)
        models, unavailable = available_models(config.models)[0], available_models()[1]
        csl_hp, sbm_hp = dataclasses.asdict(config.csl), dataclasses.asdict(config.sbm)
        sbm_graphs, scale = dataclasses.asdict(config.sbm_num_graphs), dataclasses.asdict(config.precompute)
        threads = result.rows[0]["threads"]
        body = [f"Preset: {result.preset}. Sections: {', '.join(config.sections)}. "
                f"Models: {', '.join(models) or 'none'}"
                + (f" (not implemented yet, so not reported: {', '.join(unavailable)})" if unavailable else "")
                + f". PEs: {', '.join(config.pes)}. Torch threads per process: {threads}; device {result.device}.\n"]
        csl_summary = [r for r in summary if r["task"] == "csl"]
        if csl_summary:
            body.append(
                f"\n## CSL test accuracy (%), {config.folds} of 5 folds\n\n"
                f"Training: {csl_hp}; LapPE k={LAP_K}, RWSE {RW_STEPS} steps, RFP {RFP_INITS} inits x {RFP_FEATURES} "
                f"features x {RFP_STEPS} steps (QR, starts redrawn per graph and epoch, DSS encoder), random features "
                "16 (fresh each forward in training, fixed table in eval). "
                "Test accuracy after the last epoch; mean [95 % Student-t interval] over the folds (each fold its own "
                "split and seed: the replicates); chance is 10 %.\n\n"
                + markdown_table(csl_summary, ["model", "pe", ("text", "accuracy % [95 % interval]"),
                                               ("seconds", "s / run")], {"seconds": ".0f"})
                + "\n![CSL accuracy](csl_accuracy.png)\n")
        sbm_summary = [r for r in summary if r["task"] in SBM_TASKS]
        if sbm_summary:
            body.append(
                "\n## PATTERN / CLUSTER weighted test accuracy (%)\n\n"
                f"Graphs per dataset: {sbm_graphs}, split {config.sbm_fractions}; training: {sbm_hp}. Weighted "
                f"accuracy = mean per-class recall (Benchmarking GNNs); seeds {config.sbm_seeds} on the same split, "
                "mean [95 % Student-t interval] over the seeds.\n\n"
                + markdown_table(sbm_summary, ["task", "model", "pe", ("text", "weighted acc % [95 % interval]"),
                                               ("seconds", "s / run")], {"seconds": ".0f"})
                + "\n![SBM accuracy](sbm_accuracy.png)\n")
        if summary:
            body.append(
                "\n## How the fairness rule is met\n\n"
                "Every PE and model is trained with the same hyperparameters of the preset except the learning rate, "
                f"chosen per (task, PE, model) from the same grid {config.lrs} (extended past an edge choice by up to "
                f"{config.max_extensions} value(s); the Tuning section) by accuracy on the validation split of the "
                "first seed (CSL: the mean over the folds' validation splits), on the same splits, for the same "
                "epochs; test accuracy is "
                "read once, after the last epoch (no checkpoint is picked on the test split). Nothing from the test "
                "labels reaches a model: the PEs are functions of the graph alone (RFP's starts are seeded random "
                "draws). Replicates: the CSL folds, the SBM seeds; tables show the mean and the 95 % Student-t "
                "interval. Verdicts are computed by `pe_toolkit.bench.verdict.decide_claim` (Welch's t interval of "
                "the difference, per-side intervals within [0, 1]): *reproduced* / *contradicted* only when it "
                "excludes 0, else *inconclusive*; *untested* with fewer than 2 replicates, a non-finite run, or a "
                "(task, model) whose best PE stays below halfway from chance to 100 % ("
                + ", ".join(f"{t.upper()} {100 * v:.1f} %" for t, v in LEARNED.items())
                + ": the task is not learned, so no PE comparison on it counts). Departures from the papers' "
                "protocol: CPU-sized models and datasets ("
                + ", ".join(f"{task.upper()} {count} graphs" for task, count in sbm_graphs.items())
                + f" instead of 14,000 and 12,000; {sbm_hp['epochs']} epochs; hidden {sbm_hp['hidden']}), and LapPE "
                "k = 8 on CSL (Benchmarking GNNs uses 20).\n\n"
                "## The papers' claims, as measured\n\n"
                + (claims_table(claims) if claims
                   else "No claim has both of its PEs in this run.\n"))
        if pre_rows:
            bar = rwse_bar(pre_rows)
            body.append(
                "\n## Scale: RWSE and LapPE against PyG\n\n"
                f"RWSE walk length {scale['walk_length']}, LapPE k = {scale['k']} (the toolkit's float32 default: "
                "float32 Lanczos + float64 Rayleigh-Ritz; PyG's AddLaplacianEigenvectorPE runs float32 Lanczos), RFP "
                f"{RFP_INITS} inits x {RFP_FEATURES} features x {RFP_STEPS} steps. Inputs: connected random sparse "
                "graphs (ring + 2N random edges, mean degree ~6) of the given size, and whole datasets (seconds for "
                f"all their graphs: CSL's 150, PATTERN's first {scale['pattern_graphs']}). One forked child per "
                f"measurement, {threads} torch thread(s), timeout {float(scale['timeout_s']):.0f} s, no training run "
                f"meanwhile; the methods' repeats alternate (up to {scale['repeats']}; PyG's RWSE above 2,000 nodes "
                "once). Seconds = the minimum over the repeats of the wall time (the least disturbed by other load on "
                "the machine) and of the child's CPU time (``time.process_time``: what the transform itself costs, "
                "whatever else runs; the CPU ratio is the comparison on a shared machine, the wall ratio on an idle "
                "one); peak = the child's resident-memory growth (max). "
                "PyG is skipped where its estimated footprint exceeds "
                f"{MEMORY_FRACTION:.0%} of the available memory or {float(scale['memory_cap_gib']):.1f} GiB. "
                "Residual: the largest ``|L v - lambda v|`` of the returned eigenpairs (PyG: its vectors' Rayleigh "
                "quotients), float64.\n\n"
                + (markdown_table(table, ["encoding", "input", ("toolkit_cpu_s", "toolkit CPU s"),
                                          ("pyg_cpu_s", "PyG CPU s"), ("cpu_speedup", "PyG / toolkit (CPU)"),
                                          ("toolkit_s", "toolkit wall s"), ("pyg_s", "PyG wall s"),
                                          ("speedup", "PyG / toolkit (wall)"), ("toolkit_mib", "toolkit MiB"),
                                          ("pyg_mib", "PyG MiB"), ("toolkit_residual", "toolkit residual"),
                                          ("pyg_residual", "PyG residual"), "note"],
                                  {"toolkit_s": ".4f", "pyg_s": ".4f", "speedup": ".2f", "toolkit_cpu_s": ".4f",
                                   "pyg_cpu_s": ".4f", "cpu_speedup": ".2f", "toolkit_mib": ".0f", "pyg_mib": ".0f",
                                   "toolkit_residual": ".1e", "pyg_residual": ".1e"})
                   if table else "No input with both measured.\n")
                + (f"\n{bar}\n" if bar else "")
                + "\n### Every measurement\n\n"
                + markdown_table(pre_rows, ["method", "input", ("min_s", "min s"), ("median_s", "median s"),
                                            ("cpu_min_s", "min CPU s"), "repeats",
                                            ("peak_mib", "peak MiB"), "status", "note"],
                                 {"min_s": ".4f", "median_s": ".4f", "cpu_min_s": ".4f", "peak_mib": ".0f"})
                + "\n![precompute time](precompute_time.png)\n")
        body.append(f"\nTotal wall time {result.seconds:.0f} s.\n")
        return "".join(body)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="pe_toolkit.benchmarks.graphs:Graphs", prog="python benchmarks/graphs.py"))
