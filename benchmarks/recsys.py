"""SASRec x positional encodings on MovieLens-100k and a synthetic contextual-count log: full-ranking HR/NDCG/MRR.

Encoders (by registry name): ``learned`` (SASRec's absolute table), ``nope``, ``rope``, ``cope`` (Golovneva
et al. 2024), ``cape`` (Yuan et al. 2025) and ``time_interval`` (TiSASRec's interval term plus its absolute
table, Li et al. 2020). Datasets:

* ``ml-100k``: MovieLens-100k from the recbole wheel, chronological leave-one-out;
* ``synthetic``: :func:`pe_toolkit.domains.recsys.contextual_count_log`, whose validation and test targets repeat
  the signal item ``lag`` signal items back (fillers in between), the case contextual positions target.

Each (dataset, encoder, seed) trains with full softmax cross-entropy, validates every epoch, stops early
on validation NDCG@10 (Lightning ``EarlyStopping``) and is tested with the best validation checkpoint.
Metrics rank every item except, on MovieLens, the user's history (the target always a candidate); on the
synthetic log, whose targets re-consume history items, every item is ranked. Ties count pessimistically.

    python benchmarks/recsys.py --quick        # pipeline check: 1 seed, user subsets, a few epochs
    python benchmarks/recsys.py                # 3 seeds, every user (sized for ~40 min on a shared core)

Every finished run is stored in ``<out>/recsys/runs/``; ``--resume`` reuses runs with the same
configuration and ``--report-only`` trains nothing and reports the stored runs. Outputs in
``<out>/recsys/``: ``results.json`` (one row per run), ``report.md`` (mean +- sample std over seeds, the
CAPE - learned difference) and ``recsys_metrics.png``.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (  # noqa: E402
    Progress,
    markdown_table,
    nan_if_missing,
    note_if_empty,
    quiet,
    standard_argparser,
    write_report,
    write_results,
)

NAME = "recsys"
ENCODERS = ("learned", "nope", "rope", "cope", "cape", "time_interval")
DATASETS = ("ml-100k", "synthetic")
METRICS = ("hr@5", "ndcg@5", "hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr")
SYNTHETIC = {"length": [20, 40], "num_signal_items": 30, "num_filler_items": 30, "lag": 2, "filler_prob": 0.5,
             "recall_prob": 0.7, "seed": 0}

FULL = {
    "seeds": [0, 1, 2],
    "ml-100k": {"users": None, "max_len": 30, "dim": 64, "num_heads": 2, "num_layers": 2, "dropout": 0.2,
                "lr": 3e-3, "batch_size": 128, "max_epochs": 12, "patience": 3},
    "synthetic": {"users": 500, "max_len": 40, "dim": 32, "num_heads": 2, "num_layers": 2, "dropout": 0.1,
                  "lr": 3e-3, "batch_size": 64, "max_epochs": 15, "patience": 4},
}
QUICK = {
    "seeds": [0],
    "ml-100k": {"users": 300, "max_len": 20, "dim": 32, "num_heads": 2, "num_layers": 1, "dropout": 0.2,
                "lr": 3e-3, "batch_size": 64, "max_epochs": 4, "patience": 2},
    "synthetic": {"users": 200, "max_len": 30, "dim": 32, "num_heads": 2, "num_layers": 1, "dropout": 0.1,
                  "lr": 3e-3, "batch_size": 64, "max_epochs": 5, "patience": 2},
}


# ------------------------------------------------------------------------------------------ helpers
def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1); std 0.0 for one value, (None, None) for none."""
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)


@lru_cache(maxsize=4)
def load_sequences(dataset: str, users: int | None):
    """The dataset's chronological sequences (the synthetic log is generated with ``users`` users)."""
    from pe_toolkit.domains.recsys import build_sequences, contextual_count_log, load_interactions

    if dataset == "ml-100k":
        return build_sequences(load_interactions())
    if dataset == "synthetic":
        options = {**SYNTHETIC, "length": tuple(SYNTHETIC["length"])}
        return build_sequences(contextual_count_log(users or 800, **options))
    raise ValueError(f"unknown dataset {dataset!r}; allowed: {list(DATASETS)}")


def run_key(spec: dict[str, Any]) -> str:
    return f"{spec['dataset']}__{spec['encoding']}__seed{spec['seed']}"


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train, early-stop and test one (dataset, encoder, seed); returns the result row."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    from pe_toolkit.domains.recsys.lightning_module import SASRecModule, SequentialRecDataModule

    quiet()  # also when called directly, not through main()
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    hp = spec["training"]
    sequences = load_sequences(spec["dataset"], hp["users"])
    # ml-100k with ``users``: a quick subset of the first users; the synthetic log is generated at that size
    subset = hp["users"] if spec["dataset"] == "ml-100k" else None
    L.seed_everything(spec["seed"], verbose=False)
    data = SequentialRecDataModule(sequences, max_len=hp["max_len"], batch_size=hp["batch_size"], eval_batch_size=256,
                                   train_users=subset)
    module = SASRecModule(sequences.num_items, max_len=hp["max_len"], dim=hp["dim"], num_heads=hp["num_heads"],
                          num_layers=hp["num_layers"], dropout=hp["dropout"], encoding=spec["encoding"], loss="ce",
                          lr=hp["lr"], exclude_history=spec["dataset"] == "ml-100k")
    positional = sum(p.numel() for p in module.model.trunk.encodings.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = ModelCheckpoint(dirpath=tmp, monitor="val/ndcg@10", mode="max", save_top_k=1)
        early = EarlyStopping(monitor="val/ndcg@10", mode="max", patience=hp["patience"])
        trainer = L.Trainer(max_epochs=hp["max_epochs"], accelerator="cpu", devices=1, logger=False,
                            callbacks=[early, checkpoint], enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, default_root_dir=tmp)
        trainer.fit(module, data)
        best_val = float(checkpoint.best_model_score) if checkpoint.best_model_score is not None else float("nan")
        result = trainer.test(module, data, ckpt_path=checkpoint.best_model_path, verbose=False)[0]
    return {
        "dataset": spec["dataset"],
        "encoding": spec["encoding"],
        "seed": spec["seed"],
        **{m: float(result[f"test/{m}"]) for m in METRICS},
        "val_ndcg@10": best_val,
        "epochs": int(trainer.current_epoch),
        "stopped_early": bool(early.stopped_epoch),
        "users": len(data.examples["test"]),
        "items": sequences.num_items,
        "parameters": sum(p.numel() for p in module.parameters()),
        "positional_parameters": positional,
        "seconds": time.perf_counter() - start,
        "spec": {k: v for k, v in spec.items() if k != "threads"},
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and sample std over seeds per (dataset, encoding), in :data:`ENCODERS` order."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["encoding"]), []).append(row)
    out = []
    for (dataset, encoding), members in groups.items():
        entry: dict[str, Any] = {"dataset": dataset, "encoding": encoding, "seeds": len(members)}
        for m in METRICS:
            entry[m], entry[f"{m}_std"] = mean_std([r[m] for r in members])
        entry["epochs"] = statistics.fmean(r["epochs"] for r in members)
        entry["seconds"] = statistics.fmean(r["seconds"] for r in members)
        entry["positional_parameters"] = members[0]["positional_parameters"]
        out.append(entry)
    order = {e: i for i, e in enumerate(ENCODERS)}
    out.sort(key=lambda r: (DATASETS.index(r["dataset"]) if r["dataset"] in DATASETS else 9,
                            order.get(r["encoding"], 99)))
    return out


def paired_gain(rows: list[dict[str, Any]], dataset: str, encoding: str, baseline: str, metric: str) -> dict | None:
    """Per-seed difference ``encoding - baseline`` of ``metric`` on ``dataset`` (seeds run for both)."""
    by_seed = {(r["encoding"], r["seed"]): r[metric] for r in rows if r["dataset"] == dataset}
    seeds = sorted(s for (e, s) in by_seed if e == encoding and (baseline, s) in by_seed)
    if not seeds:
        return None
    diffs = [by_seed[(encoding, s)] - by_seed[(baseline, s)] for s in seeds]
    mean, std = mean_std(diffs)
    return {"dataset": dataset, "metric": metric, "comparison": f"{encoding} - {baseline}", "seeds": len(seeds),
            "mean": mean, "std": std, "wins": sum(d > 0 for d in diffs)}


def with_std(rows: list[dict[str, Any]], metrics: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows with ``"<metric> (+- std)"`` text cells."""
    out = []
    for r in rows:
        shown = dict(r)
        for m in metrics:
            mean, std = r.get(m), r.get(f"{m}_std")
            shown[m] = "n/a" if mean is None else f"{mean:.4f} ± {std:.4f}"
        out.append(shown)
    return out


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in summary)]
    fig, axes = plt.subplots(1, len(datasets), figsize=(6.5 * len(datasets), 4), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        rows = [r for r in summary if r["dataset"] == dataset]
        xs = range(len(rows))
        for offset, metric in ((-0.2, "hr@10"), (0.2, "ndcg@10")):
            ax.bar([x + offset for x in xs], [nan_if_missing(r[metric]) for r in rows], 0.4,
                   yerr=[r[f"{metric}_std"] or 0 for r in rows], capsize=3, label=metric.upper())
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["encoding"] for r in rows], rotation=20)
        ax.set_title(f"SASRec on {dataset} (test, full ranking)")
        if not note_if_empty(ax, "HR@10 or NDCG@10"):
            ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--encoders", nargs="+", choices=ENCODERS, default=list(ENCODERS))
    parser.add_argument("--seeds", nargs="+", type=int, help="default: 0 1 2 (full), 0 (quick)")
    parser.add_argument("--max-epochs", type=int, help="override the preset's epoch cap (both datasets)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    parser.add_argument("--report-only", action="store_true", help="train nothing; report stored runs")
    args = parser.parse_args(argv)
    args.resume = args.resume or args.report_only
    preset = QUICK if args.quick else FULL
    seeds = args.seeds if args.seeds is not None else preset["seeds"]
    training = {d: dict(preset[d]) for d in DATASETS}
    if args.max_epochs is not None:
        for d in DATASETS:
            training[d]["max_epochs"] = args.max_epochs
    out_dir = Path(args.out) / NAME
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    # seeds outermost: an interrupted run still has every encoder at the first seeds
    specs = [{"dataset": d, "encoding": e, "seed": s, "training": training[d], "threads": args.threads,
              "synthetic": SYNTHETIC if d == "synthetic" else None}
             for s in seeds for d in args.datasets for e in args.encoders]
    rows, todo = [], []
    for spec in specs:
        path = runs_dir / f"{run_key(spec)}.json"
        if args.resume and path.exists():
            stored = json.loads(path.read_text())
            if stored.get("spec") == {k: v for k, v in spec.items() if k != "threads"}:
                rows.append(stored)
                continue
        todo.append((spec, path))
    if args.report_only:
        print(f"{NAME}: --report-only: not run: {[p.stem for _, p in todo]}", flush=True)
        todo = []
    print(f"{NAME}: {len(specs)} runs ({len(specs) - len(todo)} reused)", flush=True)
    progress = Progress(len(todo), NAME)
    for spec, path in todo:
        row = run_one(spec)
        path.write_text(json.dumps(row, indent=1) + "\n")
        rows.append(row)
        progress(f"{row['dataset']} {row['encoding']} seed {row['seed']}: test NDCG@10 {row['ndcg@10']:.4f} "
                 f"HR@10 {row['hr@10']:.4f} ({row['epochs']} epochs, {row['seconds']:.0f}s)")
    seconds = time.perf_counter() - start

    rows.sort(key=lambda r: (r["dataset"], ENCODERS.index(r["encoding"]), r["seed"]))
    summary = summarize(rows)
    config = {"quick": args.quick, "datasets": args.datasets, "encoders": args.encoders, "seeds": seeds,
              "training": {d: training[d] for d in args.datasets}, "synthetic": SYNTHETIC, "loss": "ce",
              "early_stopping": "val/ndcg@10 (max), test with the best validation checkpoint",
              "ties": "pessimistic", "threads": args.threads}
    write_results(NAME, config, rows, seconds, root=args.out)

    body = [
        "SASRec (causal Transformer, layer norm, GELU MLP, shared item embeddings as the output layer) with the "
        "positional encoding swapped by name; softmax cross-entropy over all items; AdamW; validation every epoch; "
        "early stopping on validation NDCG@10; test metrics from the best validation checkpoint. Full ranking over "
        "every item; on ml-100k the user's history is excluded (SASRec's protocol; the target always stays a "
        "candidate), on the synthetic log it is not (its targets are re-consumed history items). Ties count "
        "against the target (pessimistic). Mean ± sample std over seeds " + ", ".join(map(str, seeds)) + ".\n\n"
        "Encoders: `learned` = SASRec's learned absolute table; `nope` = no positional encoding (causal mask only); "
        "`rope`; `cope` (per-layer, npos = max_len + 1); `cape` (per-layer, dissimilarity gates, max_len + 1 "
        "positions); `time_interval` = TiSASRec's key-side interval bias (user-scaled intervals clipped at 256) "
        "plus its absolute table.\n"
    ]
    for dataset in args.datasets:
        part = [r for r in summary if r["dataset"] == dataset]
        if not part:
            continue
        hp = training[dataset]
        note = ("MovieLens-100k from the recbole wheel (943 users, 1682 items"
                + (f"; first {hp['users']} users only" if hp["users"] else "") + ")"
                if dataset == "ml-100k" else
                f"synthetic contextual-count log, {hp['users']} users, {SYNTHETIC}")
        body.append(f"\n## {dataset}: test metrics\n\n{note}. Training: {hp}.\n\n"
                    + markdown_table(with_std(part, ("hr@10", "ndcg@10", "mrr")),
                                     ["encoding", "seeds", ("hr@10", "HR@10"), ("ndcg@10", "NDCG@10"), ("mrr", "MRR"),
                                      ("hr@5", "HR@5"), ("ndcg@5", "NDCG@5"), ("hr@20", "HR@20"),
                                      ("ndcg@20", "NDCG@20"), ("epochs", "epochs"),
                                      ("positional_parameters", "PE params"), ("seconds", "s / run")],
                                     {"hr@5": ".4f", "ndcg@5": ".4f", "hr@20": ".4f", "ndcg@20": ".4f",
                                      "epochs": ".1f", "seconds": ".0f"}))
    gains = [g for d in args.datasets for base in ("learned", "nope", "rope", "cope") for m in ("ndcg@10", "hr@10")
             if (g := paired_gain(rows, d, "cape", base, m)) is not None]
    gains += [g for d in args.datasets for m in ("ndcg@10", "hr@10")
              if (g := paired_gain(rows, d, "cope", "learned", m)) is not None]
    if gains:
        body.append("\n## Paired differences (same seed)\n\nMean ± sample std of the per-seed difference; "
                    "`wins` = seeds where the first encoder is better.\n\n"
                    + markdown_table(gains, ["dataset", "comparison", "metric", "seeds", "mean", "std", "wins"],
                                     {"mean": "+.4f", "std": ".4f"}))
    if summary:
        plot(summary, out_dir / "recsys_metrics.png")
        body.append("\n![HR@10 and NDCG@10 per encoder](recsys_metrics.png)\n")
    trained = sum(r["seconds"] for r in rows)
    body.append(f"\nTotal wall time {seconds:.0f} s ({len(todo)} runs trained in this invocation); the runs reported "
                f"took {trained:.0f} s of training and evaluation in all.\n")
    write_report(NAME, "SASRec positional encodings: MovieLens-100k and a contextual-count log", "".join(body),
                 root=args.out)
    print(f"{NAME}: wrote {out_dir} in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
