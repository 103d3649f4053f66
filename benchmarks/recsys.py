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

Fairness (``docs/benchmarks.md``): every encoder trains with the same hyperparameters of the preset except
the learning rate, which the runner tunes per (dataset, protocol, encoder) on the first seed by validation
NDCG@10 from the same grid ``lrs``, extended past an edge choice by up to ``max_extensions`` values (the same
budget for every encoder); every run validates on the same validation targets every ``batches_per_epoch``
batches, stops early on validation NDCG@10 with the same patience, and is tested with its best validation
checkpoint; models see only items before the target (time positions are scaled from the training part);
seeds (>= 3 in the full and gpu presets) give the mean and Student-t 95 % interval. Each claim (CAPE, Yuan
et al. 2025, beats every other encoder, ``nope`` included: the paper's first baseline) is decided by
:func:`pe_toolkit.bench.verdict.decide_claim` (Welch's t on the difference, metrics bounded to [0, 1]).

    pe-toolkit bench recsys --quick                         # pipeline check (< 2 min here)
    pe-toolkit bench recsys                                 # full CPU preset (its run: section: --jobs 2)
    pe-toolkit bench recsys --preset gpu --accelerator cuda
    pe-toolkit bench recsys --set training.ml-100k.patience=10 --set seeds=[0,1,2,3]
    pe-toolkit bench recsys --resume                        # reuse finished runs with the same spec
    python benchmarks/recsys.py --quick                     # the same code

Presets: ``benchmarks/presets/recsys/{quick,full,gpu}.yaml``. Every finished run is stored in
``<out>/recsys/runs/<preset>/`` (the harness's run store).
Outputs in ``<out>/recsys/``: ``results.json`` (one row per run), ``report.md`` and ``recsys_metrics.png``.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from functools import lru_cache
from typing import Any

from pe_toolkit.bench import Benchmark, Result, Tuning, trainer_options
from pe_toolkit.bench.plots import nan_if_missing, note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.stats import format_interval, mean_interval
from pe_toolkit.bench.verdict import VERDICTS, claim_row, claims_table, decide_claim


# ------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Split:
    mode: str
    ratios: list[float]


@dataclasses.dataclass
class Kcore:
    user: int
    item: int


@dataclasses.dataclass
class Synthetic:
    length: list[int]
    num_signal_items: int
    num_filler_items: int
    lag: int
    filler_prob: float
    recall_prob: float
    seed: int


@dataclasses.dataclass
class Training:
    users: int | None
    max_len: int
    dim: int
    num_heads: int
    num_layers: int
    dropout: float
    batch_size: int
    batches_per_epoch: int | None
    max_epochs: int
    patience: int


@dataclasses.dataclass
class Config:
    encoders: list[str]
    datasets: list[str]
    protocols: list[str]
    seeds: list[int]
    lrs: list[float]  # the learning-rate grid, the same for every (dataset, protocol, encoder)
    split: Split
    kcore: Kcore
    synthetic: Synthetic
    training: dict[str, Training]  # per dataset
    max_extensions: int = 0  # learning rates added past an edge choice (log scale), the same for every group


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


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train, early-stop and test one (dataset, protocol, encoder, seed); returns the result row."""
    import lightning as L
    from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

    from pe_toolkit.domains.recsys.lightning_module import SASRecModule, SequentialRecDataModule

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
                          lr=spec["lr"], exclude_history=excludes_history(spec["dataset"], spec["protocol"]))
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
        "lr": spec["lr"],
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


def claims(rows: list[dict[str, Any]], target: str = "cape") -> list[dict[str, Any]]:
    """``target`` beats every other encoder of the same dataset and protocol on each of :data:`VERDICT_METRICS`.

    Each a :func:`~pe_toolkit.bench.verdict.decide_claim` row: Welch's t on the per-seed test metric (independent
    trainings), per-side intervals within [0, 1]; fewer than 2 seeds a side: untested.
    """
    out = []
    cells = list(dict.fromkeys((r["dataset"], r["protocol"]) for r in rows))
    for dataset, protocol in cells:
        here = [r for r in rows if r["dataset"] == dataset and r["protocol"] == protocol]
        mine = sorted((r for r in here if r["encoding"] == target), key=lambda r: r["seed"])
        if not mine:
            continue
        for other in dict.fromkeys(r["encoding"] for r in here if r["encoding"] != target):
            theirs = sorted((r for r in here if r["encoding"] == other), key=lambda r: r["seed"])
            for metric in VERDICT_METRICS:
                claim = decide_claim([r[metric] for r in mine], [r[metric] for r in theirs], higher_is_better=True,
                                     bounds=(0.0, 1.0),
                                     name=f"{target} beats {other}: {dataset} ({protocol}), {metric.upper()}")
                out.append(claim_row(claim, dataset=dataset, protocol=protocol, metric=metric,
                                     comparison=f"{target} vs {other}"))
    return out


def claim_counts(found: list[dict[str, Any]]) -> str:
    counts = {v: sum(c["verdict"] == v for c in found) for v in VERDICTS}
    return ", ".join(f"{n} {v}" for v, n in counts.items() if n) + f" (of {len(found)} claims)"


def _bar(value: Any) -> tuple[float, float, float]:
    """``(mean, lower error, upper error)`` of a summary cell: an interval dict, or a bare number (no error)."""
    if isinstance(value, dict):
        mean = nan_if_missing(value["mean"])
        if value["n"] > 1:
            return mean, mean - value["low"], value["high"] - mean
        return mean, 0.0, 0.0
    return nan_if_missing(value), 0.0, 0.0


def plot(summary: list[dict[str, Any]]) -> Any:
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
    return fig


def _cells(summary: list[dict[str, Any]], names: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for r in summary:
        shown = dict(r)
        for m in names:
            shown[m] = format_interval(r[m], ".4f") if r[m]["n"] > 1 else f"{r[m]['mean']:.4f}"
        out.append(shown)
    return out


def report_body(rows: list[dict[str, Any]], preset: dict[str, Any], seconds: float) -> str:
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
        "**Fairness.** Every encoder gets the same hyperparameters except the learning rate, chosen per "
        f"(dataset, protocol, encoder) on the first seed by validation NDCG@10 from the same grid {preset['lrs']} "
        f"(extended past an edge choice by up to {preset['max_extensions']} value(s); see the Tuning section), the "
        "same validation targets, validation every `batches_per_epoch` training batches, "
        "early stopping on validation NDCG@10 with the same patience, and is tested once with its best "
        "validation checkpoint. Inputs hold only items before the target (time positions are scaled from "
        "the training part). Verdicts are computed by `pe_toolkit.bench.verdict.decide_claim` (Welch's t interval "
        "of the difference, reproduced / contradicted only when it excludes 0; fewer than 2 seeds: untested).\n",
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
    found = claims(rows)
    if found:
        body.append("\n## Claims: CAPE beats each encoder (Yuan et al. 2025)\n\n"
                    + claims_table(found, ".4f") + f"\nMeasured: {claim_counts(found)}.\n")
    if summary:
        body.append("\n![HR@10 and NDCG@10 per encoder](recsys_metrics.png)\n")
    body.append(f"\nTotal wall time {seconds:.0f} s; the runs reported took {sum(r['seconds'] for r in rows):.0f} s "
                "of training and evaluation in all.\n")
    return "".join(body)


# ---------------------------------------------------------------------------------------------- benchmark
class Recsys(Benchmark):
    name = "recsys"
    title = "SASRec positional encodings: MovieLens-100k and a contextual-count log"
    description = "SASRec with each positional encoding on MovieLens-100k and a contextual-count log: HR/NDCG/MRR"
    Config = Config
    key_fields = ("dataset", "protocol", "encoding", "seed")

    def check(self, config: Config) -> None:
        for key, allowed in (("datasets", DATASETS), ("encoders", ENCODERS), ("protocols", PROTOCOLS)):
            values = getattr(config, key)
            bad = [v for v in values if v not in allowed]
            if bad or not values:
                raise ValueError(f"{key} must be a non-empty list from {list(allowed)}, got {values!r}")
        missing = [d for d in config.datasets if d not in config.training]
        if missing:
            raise ValueError(f"training has no entry for dataset(s) {missing}; it has {sorted(config.training)}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        # every encoder gets the same hyperparameters; the learning rate is tuned per group (tuning())
        shared = {"split": dataclasses.asdict(config.split), "kcore": dataclasses.asdict(config.kcore),
                  "synthetic": dataclasses.asdict(config.synthetic)}
        return [{"dataset": d, "protocol": p, "encoding": e, "seed": s, "group": f"{d}/{p}/{e}",
                 "training": dataclasses.asdict(config.training[d]), **shared}
                for d in sorted(config.datasets) for p in PROTOCOLS if p in config.protocols
                for e in ENCODERS if e in config.encoders for s in config.seeds]

    def tuning(self, config: Config) -> Tuning:
        # the same grid and cap for every (dataset, protocol, encoder), chosen on the first seed's validation
        return Tuning(param="lr", values=[float(lr) for lr in config.lrs], metric="val_ndcg@10", maximize=True,
                      group="group", max_extensions=config.max_extensions)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return run_one(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        return (f"{row['dataset']} {row['protocol']} {row['encoding']} seed {row['seed']}: test NDCG@10 "
                f"{row['ndcg@10']:.4f} HR@10 {row['hr@10']:.4f} ({row['epochs']} epochs, {row['seconds']:.0f}s)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        return claims(result.rows)

    def plot(self, result: Result) -> dict[str, Any]:
        summary = summarize(result.rows, result.config.encoders)
        return {"recsys_metrics.png": plot(summary)} if summary else {}

    def report(self, result: Result) -> str:
        return report_body(result.rows, dataclasses.asdict(result.config), result.seconds)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="recsys", prog="python benchmarks/recsys.py"))
