"""SASRec x positional encodings on MovieLens-100k and a synthetic contextual-count log: full-ranking HR/NDCG/MRR.

Encoders (by registry name): ``learned`` (SASRec's absolute table), ``rope``, ``cope`` (Golovneva et al.
2024) and ``cape`` (Yuan et al. 2025) in the presets; ``nope`` and ``time_interval`` (TiSASRec, Li et al.
2020) on request. Datasets:

* ``ml-100k``: MovieLens-100k from the recbole wheel, chronological split;
* ``synthetic``: :func:`pe_toolkit.domains.recsys.contextual_count_log`, whose validation and test targets repeat
  the signal item ``lag`` signal items back (fillers in between), the case contextual positions target.

Protocols (``protocols:`` in the preset; the first is the comparison's, the others are reported beside it):

* ``recbole`` (RecBole's sequential protocol, Zhao et al. 2021; the default): every training prefix is an
  example (``SequentialDataset.data_augmentation``: ``s_t`` is the target of the last ``max_len`` items before
  it), and the ranking covers every item, the user's history included (RecBole's full-sort evaluation of a
  sequential model masks nothing);
* ``sasrec`` (Kang & McAuley 2018): one window per user, the training part shifted by one, so a user with more
  than ``max_len + 1`` training items loses the earlier targets; on MovieLens the history is excluded from the
  ranking (the synthetic log re-consumes items, so there every item is ranked under both protocols).

Every run also reports the other ranking of the same model (``all`` = every item, ``unseen`` = history
excluded), so the two candidate sets are compared on one set of weights as well.

Fairness (``docs/benchmarks.md``): every encoder trains with the same hyperparameters of the preset (no
per-method tuning, so the tuning budget is equal: none), validates on the same validation targets every
``batches_per_epoch`` batches, stops early on validation NDCG@10 with the same patience, and is tested
with its best validation checkpoint; models see only items before the target (time positions are scaled
from the training part); seeds (>= 3 in the full and gpu presets) give the mean and Student-t 95 %
interval, and each verdict (CAPE against every other encoder) is ``interval_verdict`` of those intervals.

    python benchmarks/recsys.py --quick                     # pipeline check (< 2 min here)
    python benchmarks/recsys.py --jobs 2                    # full CPU preset (see the tutorial for its time)
    python benchmarks/recsys.py --preset gpu --accelerator cuda
    python benchmarks/recsys.py --set training.ml-100k.patience=10 --set seeds=[0,1,2,3]
    python benchmarks/recsys.py --resume                    # reuse finished runs with the same spec

Presets: ``benchmarks/presets/recsys/{quick,full,gpu}.yaml``. Every finished run is stored in
``<out>/recsys/runs/<preset>/`` (RunStore); ``--report-only`` trains nothing and reports the stored runs.
Outputs in ``<out>/recsys/``: ``results.json`` (one row per run), ``report.md`` and ``recsys_metrics.png``.
"""

from __future__ import annotations

import concurrent.futures
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
    RunStore,
    format_interval,
    interval_verdict,
    markdown_table,
    mean_interval,
    nan_if_missing,
    note_if_empty,
    quiet,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)
from presets import device_options, preset_from_args, trainer_options  # noqa: E402

NAME = "recsys"
ENCODERS = ("learned", "nope", "rope", "cope", "cape", "time_interval")
DATASETS = ("ml-100k", "synthetic")
PROTOCOLS = ("recbole", "sasrec")
METRICS = ("hr@5", "ndcg@5", "hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr")
#: datasets whose targets repeat history items: the history is never excluded there
REPEAT_CONSUMPTION = ("synthetic",)
VERDICT_METRICS = ("ndcg@10", "hr@10")


# ------------------------------------------------------------------------------------------ helpers
@lru_cache(maxsize=4)
def _load_sequences(dataset: str, users: int | None, synthetic: tuple, kcore: tuple[int, int]):
    from pe_toolkit.domains.recsys import build_sequences, contextual_count_log, filter_kcore, load_interactions

    if dataset == "ml-100k":
        log = load_interactions()
    elif dataset == "synthetic":
        options = dict(synthetic)
        options["length"] = tuple(options["length"])
        log = contextual_count_log(users or 800, **options)
    else:
        raise ValueError(f"unknown dataset {dataset!r}; allowed: {list(DATASETS)}")
    if kcore != (1, 1):
        log = filter_kcore(log, user_core=kcore[0], item_core=kcore[1])
    return build_sequences(log, min_length=3)


def load_sequences(dataset: str, users: int | None, synthetic: dict[str, Any], kcore: dict[str, int]):
    """The dataset's chronological sequences (the synthetic log is generated with ``users`` users), k-cored,
    users with fewer than 3 interactions dropped (a split needs one each for training, validation, test)."""
    frozen = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(synthetic.items()))
    return _load_sequences(dataset, users, frozen, (int(kcore["user"]), int(kcore["item"])))


def excludes_history(dataset: str, protocol: str) -> bool:
    """Whether the primary ranking of ``protocol`` excludes the history on ``dataset``."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    return protocol == "sasrec" and dataset not in REPEAT_CONSUMPTION


def run_key(spec: dict[str, Any]) -> str:
    return f"{spec['dataset']}__{spec['protocol']}__{spec['encoding']}__seed{spec['seed']}"


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train, early-stop and test one (dataset, protocol, encoder, seed); returns the result row."""
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    from pe_toolkit.domains.recsys.lightning_module import SASRecModule, SequentialRecDataModule

    quiet()  # also when called directly, not through main() or worker_pool
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    hp = spec["training"]
    sequences = load_sequences(spec["dataset"], hp["users"], spec["synthetic"], spec["kcore"])
    # ml-100k with ``users``: a quick subset of the first users; the synthetic log is generated at that size
    subset = hp["users"] if spec["dataset"] == "ml-100k" else None
    L.seed_everything(spec["seed"], verbose=False)
    data = SequentialRecDataModule(
        sequences, max_len=hp["max_len"], batch_size=hp["batch_size"], eval_batch_size=512, train_users=subset,
        split=spec["split"]["mode"], ratios=tuple(spec["split"]["ratios"]),
        train_targets="prefixes" if spec["protocol"] == "recbole" else "shifted", seed=spec["seed"])
    module = SASRecModule(sequences.num_items, max_len=hp["max_len"], dim=hp["dim"], num_heads=hp["num_heads"],
                          num_layers=hp["num_layers"], dropout=hp["dropout"], encoding=spec["encoding"], loss="ce",
                          lr=hp["lr"], exclude_history=excludes_history(spec["dataset"], spec["protocol"]))
    positional = sum(p.numel() for p in module.model.trunk.encodings.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = ModelCheckpoint(dirpath=tmp, monitor="val/ndcg@10", mode="max", save_top_k=1)
        early = EarlyStopping(monitor="val/ndcg@10", mode="max", patience=hp["patience"])
        batches = hp["batches_per_epoch"]
        trainer = L.Trainer(max_epochs=hp["max_epochs"], **trainer_options(spec["device"]), logger=False,
                            callbacks=[early, checkpoint], enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, default_root_dir=tmp,
                            limit_train_batches=1.0 if batches is None else int(batches))
        trainer.fit(module, data)
        # read now: test(ckpt_path=...) restores the callbacks' state from the best checkpoint, saved before the
        # stop, which resets stopped_epoch to 0
        stopped_by_patience = early.stopped_epoch > 0
        best_val = float(checkpoint.best_model_score) if checkpoint.best_model_score is not None else float("nan")
        result = trainer.test(module, data, ckpt_path=checkpoint.best_model_path, verbose=False)[0]
    epochs = int(trainer.current_epoch)
    return {
        "dataset": spec["dataset"],
        "protocol": spec["protocol"],
        "encoding": spec["encoding"],
        "seed": spec["seed"],
        "ranking": "unseen" if module.hparams.exclude_history else "all",
        **{m: float(result[f"test/{m}"]) for m in METRICS},
        **{f"{r}/{m}": float(result[f"test/{r}/{m}"]) for r in ("all", "unseen") for m in METRICS},
        "val_ndcg@10": best_val,
        "epochs": epochs,
        "steps": int(trainer.global_step),
        "converged": stopped_by_patience,  # stopped by patience, not by the max_epochs cap
        "train_examples": len(data.examples["train"]),
        "test_queries": len(data.examples["test"]),
        "users": sequences.num_users if subset is None else subset,
        "items": sequences.num_items,
        "parameters": sum(p.numel() for p in module.parameters()),
        "positional_parameters": positional,
        "seconds": time.perf_counter() - start,
    }


def summarize(rows: list[dict[str, Any]], encoders: list[str] | tuple[str, ...] = ENCODERS) -> list[dict[str, Any]]:
    """Mean and 95 % interval over seeds per (dataset, protocol, encoding), in ``encoders`` order."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["protocol"], row["encoding"]), []).append(row)
    out = []
    for (dataset, protocol, encoding), members in groups.items():
        entry: dict[str, Any] = {"dataset": dataset, "protocol": protocol, "encoding": encoding,
                                 "seeds": len(members), "ranking": members[0]["ranking"]}
        for m in [*METRICS, *(f"{r}/{m}" for r in ("all", "unseen") for m in METRICS)]:
            entry[m] = mean_interval([r[m] for r in members])
        entry["epochs"] = mean_interval([r["epochs"] for r in members])["mean"]
        entry["converged"] = sum(bool(r["converged"]) for r in members)
        entry["seconds"] = mean_interval([r["seconds"] for r in members])["mean"]
        entry["positional_parameters"] = members[0]["positional_parameters"]
        out.append(entry)
    order = {e: i for i, e in enumerate(encoders)}
    out.sort(key=lambda r: (DATASETS.index(r["dataset"]) if r["dataset"] in DATASETS else 9,
                            PROTOCOLS.index(r["protocol"]), order.get(r["encoding"], 99)))
    return out


def verdicts(summary: list[dict[str, Any]], target: str = "cape") -> list[dict[str, Any]]:
    """``target`` against every other encoder of the same dataset and protocol, from the intervals."""
    out = []
    for entry in summary:
        if entry["encoding"] == target:
            continue
        mine = next((e for e in summary if e["encoding"] == target and e["dataset"] == entry["dataset"]
                     and e["protocol"] == entry["protocol"]), None)
        if mine is None:
            continue
        for metric in VERDICT_METRICS:
            out.append({"dataset": entry["dataset"], "protocol": entry["protocol"], "metric": metric,
                        "comparison": f"{target} vs {entry['encoding']}",
                        "a": format_interval(mine[metric], ".4f"), "b": format_interval(entry[metric], ".4f"),
                        "verdict": interval_verdict(mine[metric], entry[metric], higher_is_better=True)})
    return out


def verdict_sentence(v: dict[str, Any]) -> str:
    a, b = v["comparison"].split(" vs ")
    if "(n=1)" in v["a"] or "(n=1)" in v["b"] or v["a"] == "-" or v["b"] == "-":
        return (f"{v['dataset']} ({v['protocol']}), {v['metric'].upper()}: {a} against {b} is untested (fewer than "
                f"2 seeds, no interval: {a} {v['a']}, {b} {v['b']}).")
    if v["verdict"] == "tie":
        return (f"{v['dataset']} ({v['protocol']}), {v['metric'].upper()}: {a} and {b} are not separated "
                f"({a} {v['a']}, {b} {v['b']}).")
    return (f"{v['dataset']} ({v['protocol']}), {v['metric'].upper()}: {a} is {v['verdict']} than {b} "
            f"({a} {v['a']}, {b} {v['b']}; the intervals do not overlap).")


def _bar(value: Any) -> tuple[float, float, float]:
    """``(mean, lower error, upper error)`` of a summary cell: an interval dict, or a bare number (no error)."""
    if isinstance(value, dict):
        mean = nan_if_missing(value["mean"])
        if value["n"] > 1:
            return mean, mean - value["low"], value["high"] - mean
        return mean, 0.0, 0.0
    return nan_if_missing(value), 0.0, 0.0


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["dataset"], r.get("protocol", "recbole")) for r in summary},
                    key=lambda p: (DATASETS.index(p[0]) if p[0] in DATASETS else 9, PROTOCOLS.index(p[1])))
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(5.5 * max(1, len(panels)), 4), squeeze=False)
    for ax, (dataset, protocol) in zip(axes[0], panels):
        rows = [r for r in summary if r["dataset"] == dataset and r.get("protocol", "recbole") == protocol]
        xs = range(len(rows))
        for offset, metric in ((-0.2, "hr@10"), (0.2, "ndcg@10")):
            bars = [_bar(r[metric]) for r in rows]
            ax.bar([x + offset for x in xs], [b[0] for b in bars], 0.4,
                   yerr=[[b[1] for b in bars], [b[2] for b in bars]], capsize=3, label=metric.upper())
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["encoding"] for r in rows], rotation=20)
        ax.set_title(f"{dataset}, {protocol} protocol (test, 95 % interval)", fontsize=9)
        if not note_if_empty(ax, "HR@10 or NDCG@10"):
            ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cells(summary: list[dict[str, Any]], names: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for r in summary:
        shown = dict(r)
        for m in names:
            shown[m] = format_interval(r[m], ".4f") if r[m]["n"] > 1 else f"{r[m]['mean']:.4f}"
        out.append(shown)
    return out


def report_body(rows: list[dict[str, Any]], preset: dict[str, Any], seconds: float, trained: int) -> str:
    summary = summarize(rows, preset["encoders"])
    protocols = preset["protocols"]
    body = [
        "SASRec (causal Transformer, layer norm, GELU MLP, item embeddings shared with the output layer) with the "
        "positional encoding swapped by name; softmax cross-entropy over all items; AdamW; dropout once on the "
        "input and inside the blocks. Ties count against the target (pessimistic). Mean and Student-t 95 % "
        "interval over seeds " + ", ".join(map(str, preset["seeds"])) + f"; split `{preset['split']['mode']}`"
        + (f" {preset['split']['ratios']}" if preset["split"]["mode"] == "ratio" else "") + ".\n\n"
        f"**Protocols.** The comparison uses `{protocols[0]}`"
        + (f"; {', '.join(f'`{p}`' for p in protocols[1:])} beside it" if len(protocols) > 1 else "") + ". "
        "`recbole`: every training prefix is an example (RecBole's sequential data augmentation), ranking over "
        "every item with nothing excluded (RecBole's full-sort evaluation of sequential models). `sasrec`: one "
        "shifted window per user (targets beyond the window are lost), the user's history excluded on MovieLens. "
        "Each run's other ranking (`all` = every item, `unseen` = history excluded) is in its own columns.\n\n"
        "**Fairness.** Every encoder gets the same hyperparameters (no per-method tuning: an equal, zero "
        "tuning budget), the same validation targets, validation every `batches_per_epoch` training batches, "
        "early stopping on validation NDCG@10 with the same patience, and is tested once with its best "
        "validation checkpoint. Inputs hold only items before the target (time positions are scaled from "
        "the training part). Verdicts come from `interval_verdict`: better or worse only when the 95 % "
        "intervals do not overlap; with fewer than 2 seeds every verdict is a tie.\n",
    ]
    for dataset in preset["datasets"]:
        for protocol in protocols:
            part = [r for r in summary if r["dataset"] == dataset and r["protocol"] == protocol]
            if not part:
                continue
            hp = preset["training"][dataset]
            first = next(r for r in rows if r["dataset"] == dataset and r["protocol"] == protocol)
            note = (f"MovieLens-100k from the recbole wheel ({first['users']} users, {first['items']} items)"
                    if dataset == "ml-100k" else
                    f"synthetic contextual-count log, {first['users']} users, {preset['synthetic']}")
            converged = sum(r["converged"] for r in part)
            body.append(
                f"\n## {dataset}, {protocol} protocol: test metrics\n\n{note}; {first['train_examples']} training "
                f"examples, {first['test_queries']} test queries; primary ranking `{part[0]['ranking']}`. "
                f"Training: {hp}. Runs stopped by patience (converged): {converged} of "
                f"{sum(r['seeds'] for r in part)}.\n\n"
                + markdown_table(
                    _cells(part, ("hr@10", "ndcg@10", "mrr", "all/ndcg@10", "unseen/ndcg@10")),
                    ["encoding", "seeds", ("hr@10", "HR@10"), ("ndcg@10", "NDCG@10"), ("mrr", "MRR"),
                     ("all/ndcg@10", "NDCG@10 all items"), ("unseen/ndcg@10", "NDCG@10 history excluded"),
                     ("epochs", "epochs"), ("converged", "converged"), ("positional_parameters", "PE params"),
                     ("seconds", "s / run")],
                    {"epochs": ".1f", "seconds": ".0f"}))
    found = verdicts(summary)
    if found:
        body.append("\n## Verdicts (CAPE against each encoder, from the 95 % intervals)\n\n"
                    + markdown_table(found, ["dataset", "protocol", "metric", "comparison", ("a", "CAPE"),
                                             ("b", "other"), "verdict"])
                    + "\n" + "\n".join(f"- {verdict_sentence(v)}" for v in found) + "\n")
    if summary:
        body.append("\n![HR@10 and NDCG@10 per encoder](recsys_metrics.png)\n")
    body.append(f"\nTotal wall time {seconds:.0f} s ({trained} runs trained in this invocation); the runs reported "
                f"took {sum(r['seconds'] for r in rows):.0f} s of training and evaluation in all.\n")
    return "".join(body)


# ---------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, help="shortcut for --set datasets=[...]")
    parser.add_argument("--encoders", nargs="+", choices=ENCODERS, help="shortcut for --set encoders=[...]")
    parser.add_argument("--protocols", nargs="+", choices=PROTOCOLS, help="the first is the comparison's")
    parser.add_argument("--seeds", nargs="+", type=int, help="shortcut for --set seeds=[...]")
    parser.add_argument("--jobs", type=int, help="runs in parallel, one thread each (0: in this process)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same spec")
    parser.add_argument("--report-only", action="store_true", help="train nothing; report stored runs")
    args = parser.parse_args(argv)
    preset = preset_from_args(args, NAME)
    for key in ("datasets", "encoders", "protocols", "seeds", "jobs"):
        if getattr(args, key) is not None:
            preset[key] = getattr(args, key)
    if preset["jobs"] < 0:
        parser.error(f"--jobs must be >= 0, got {preset['jobs']}")
    for key, allowed in (("datasets", DATASETS), ("encoders", ENCODERS), ("protocols", PROTOCOLS)):
        bad = [v for v in preset[key] if v not in allowed]
        if bad or not preset[key]:
            parser.error(f"preset {key} must be a non-empty list from {list(allowed)}, got {preset[key]!r}")
    args.resume = args.resume or args.report_only
    device = device_options(args)
    threads = 1 if preset["jobs"] >= 1 else preset["threads"]
    store = RunStore(Path(args.out) / NAME / "runs" / preset["preset"], resume=args.resume)
    start = time.perf_counter()

    # seeds outermost: an interrupted run still has every encoder at the first seeds
    specs = [{"dataset": d, "protocol": p, "encoding": e, "seed": s, "training": preset["training"][d],
              "split": preset["split"], "kcore": preset["kcore"], "synthetic": preset["synthetic"],
              "device": device, "threads": threads}
             for s in preset["seeds"] for p in preset["protocols"] for d in preset["datasets"]
             for e in preset["encoders"]]
    rows: dict[str, dict[str, Any]] = {}
    todo = []
    for spec in specs:
        stored = store.load(run_key(spec), spec)
        if stored is not None:
            rows[run_key(spec)] = {k: v for k, v in stored.items() if k != "spec"}
        else:
            todo.append(spec)
    if args.report_only:
        print(f"{NAME}: --report-only: not run: {[run_key(s) for s in todo]}", flush=True)
        todo = []
    print(f"{NAME}: {len(specs)} runs ({len(specs) - len(todo)} reused), jobs={preset['jobs']}", flush=True)
    progress = Progress(len(todo), NAME)

    def record(spec: dict[str, Any], row: dict[str, Any]) -> None:
        store.save(run_key(spec), spec, row)
        rows[run_key(spec)] = row
        progress(f"{row['dataset']} {row['protocol']} {row['encoding']} seed {row['seed']}: test NDCG@10 "
                 f"{row['ndcg@10']:.4f} HR@10 {row['hr@10']:.4f} ({row['epochs']} epochs, {row['seconds']:.0f}s)")

    if preset["jobs"] == 0 or len(todo) <= 1:
        for spec in todo:
            record(spec, run_one(spec))
    else:
        with worker_pool(preset["jobs"]) as pool:
            futures = {pool.submit(run_one, spec): spec for spec in todo}
            for future in concurrent.futures.as_completed(futures):
                record(futures[future], future.result())
    seconds = time.perf_counter() - start

    ordered = [rows[run_key(s)] for s in specs if run_key(s) in rows]
    ordered.sort(key=lambda r: (r["dataset"], PROTOCOLS.index(r["protocol"]), ENCODERS.index(r["encoding"]),
                                r["seed"]))
    summary = summarize(ordered, preset["encoders"])
    config = {**preset, "device": device, "loss": "ce", "ties": "pessimistic",
              "early_stopping": "val/ndcg@10 (max) with the preset's patience; test with the best validation "
                                "checkpoint",
              "verdicts": verdicts(summary)}
    write_results(NAME, config, ordered, seconds, root=args.out)
    out_dir = Path(args.out) / NAME
    if summary:
        plot(summary, out_dir / "recsys_metrics.png")
    write_report(NAME, "SASRec positional encodings: MovieLens-100k and a contextual-count log",
                 report_body(ordered, preset, seconds, len(todo)), root=args.out)
    print(f"{NAME}: wrote {out_dir} in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
