"""SASRec x positional encodings on MovieLens-100k and a synthetic contextual-count log: full-ranking HR/NDCG/MRR.

The claim: CAPE (Yuan et al. 2025) beats every other encoder (``nope``, ``learned``, ``rope``, ``cope``;
``time_interval``, TiSASRec, on request) as SASRec's positions. Datasets: ``ml-100k`` (from the recbole wheel,
chronological split) and ``synthetic`` (:func:`pe_toolkit.domains.recsys.contextual_count_log`, targets that repeat
the signal item ``lag`` signal items back). Protocols (the first one is the comparison's): ``recbole`` (every
training prefix an example, every item ranked; Zhao et al. 2021) and ``sasrec`` (one shifted window per user, the
history excluded on MovieLens; Kang & McAuley 2018); every run also reports the other ranking of the same model.
The learning rate is tuned per (dataset, protocol, encoder) on the first seed's validation NDCG@10; every run stops
early on it and is tested with its best checkpoint; verdicts by :func:`pe_toolkit.bench.verdict.decide_claim`.
Protocols, fairness and the measured full preset: ``docs/tutorials/recsys.md``.

    pe-toolkit bench recsys --quick                         # pipeline check (< 2 min here)
    pe-toolkit bench recsys                                 # full CPU preset (its run: section: --jobs 2)
    pe-toolkit bench recsys --preset gpu --accelerator cuda
    pe-toolkit bench recsys --set training.ml-100k.patience=10 --set seeds=[0,1,2,3]
    python benchmarks/recsys.py --quick                     # the same code
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from functools import lru_cache
from typing import Any, Literal

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning, quiet_trainer
from pe_toolkit.bench.checks import distinct
from pe_toolkit.bench.plots import finish, interval_errors, new_figure
from pe_toolkit.bench.summary import group_rows
from pe_toolkit.bench.verdict import claim_row, decide_claim

ENCODERS = ("learned", "nope", "rope", "cope", "cape", "time_interval")
DATASETS = ("ml-100k", "synthetic")
PROTOCOLS = ("recbole", "sasrec")
METRICS = ("hr@5", "ndcg@5", "hr@10", "ndcg@10", "hr@20", "ndcg@20", "mrr")
#: datasets whose targets repeat history items: the history is never excluded there
REPEAT_CONSUMPTION = ("synthetic",)
VERDICT_METRICS = ("ndcg@10", "hr@10")
SHOWN = ("hr@10", "ndcg@10", "mrr", "all/ndcg@10", "unseen/ndcg@10", "epochs", "seconds")


@dataclasses.dataclass
class Split:
    mode: Literal["leave_one_out", "ratio"]
    ratios: list[PositiveFloat]


@dataclasses.dataclass
class Kcore:
    user: PositiveInt
    item: PositiveInt


@dataclasses.dataclass
class Synthetic:
    length: list[PositiveInt]
    num_signal_items: PositiveInt
    num_filler_items: PositiveInt
    lag: PositiveInt
    filler_prob: float
    recall_prob: float
    seed: NonNegativeInt


@dataclasses.dataclass
class Training:
    users: PositiveInt | None
    max_len: PositiveInt
    dim: PositiveInt
    num_heads: PositiveInt
    num_layers: PositiveInt
    dropout: float
    batch_size: PositiveInt
    batches_per_epoch: PositiveInt | None
    max_epochs: PositiveInt
    patience: PositiveInt


@dataclasses.dataclass
class Config:
    encoders: list[Literal[ENCODERS]]
    datasets: list[Literal[DATASETS]]
    protocols: list[Literal[PROTOCOLS]]
    seeds: list[NonNegativeInt]
    lrs: list[PositiveFloat]  # the learning-rate grid, the same for every (dataset, protocol, encoder)
    split: Split
    kcore: Kcore
    synthetic: Synthetic
    training: dict[str, Training]  # per dataset
    max_extensions: NonNegativeInt = 0  # learning rates added past an edge choice (log scale), the same for every group


# ------------------------------------------------------------------------------------------ one run
@lru_cache(maxsize=4)
def _sequences(key: str):
    """The chronological sequences of a run's dataset (the synthetic log generated with ``users`` users), k-cored,
    users with fewer than 3 interactions dropped (a split needs one each for training, validation, test)."""
    from pe_toolkit.domains.recsys import build_sequences, contextual_count_log, filter_kcore, load_interactions

    o = json.loads(key)
    synthetic = {**o["synthetic"], "length": tuple(o["synthetic"]["length"])}
    log = load_interactions() if o["dataset"] == "ml-100k" else contextual_count_log(o["users"] or 800, **synthetic)
    if (o["kcore"]["user"], o["kcore"]["item"]) != (1, 1):
        log = filter_kcore(log, user_core=o["kcore"]["user"], item_core=o["kcore"]["item"])
    return build_sequences(log, min_length=3)


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
    sequences = _sequences(json.dumps({"dataset": spec["dataset"], "users": hp["users"], "synthetic": spec["synthetic"],
                                       "kcore": spec["kcore"]}, sort_keys=True))  # built once per process
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
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = ModelCheckpoint(dirpath=tmp, monitor="val/ndcg@10", mode="max", save_top_k=1)
        early = EarlyStopping(monitor="val/ndcg@10", mode="max", patience=hp["patience"])
        batches = hp["batches_per_epoch"]
        trainer = quiet_trainer(spec["device"], max_epochs=hp["max_epochs"], enable_checkpointing=True,
                                callbacks=[early, checkpoint], num_sanity_val_steps=0, default_root_dir=tmp,
                                limit_train_batches=1.0 if batches is None else int(batches))
        trainer.fit(module, data)
        # read now: test(ckpt_path=...) restores the callbacks' state from the best checkpoint, saved before the
        # stop, which resets stopped_epoch to 0
        stopped_by_patience = early.stopped_epoch > 0
        best_val = float(checkpoint.best_model_score) if checkpoint.best_model_score is not None else float("nan")
        result = trainer.test(module, data, ckpt_path=checkpoint.best_model_path, verbose=False)[0]
    return {
        "dataset": spec["dataset"], "protocol": spec["protocol"], "encoding": spec["encoding"], "seed": spec["seed"],
        "lr": spec["lr"], "ranking": "unseen" if module.hparams.exclude_history else "all",
        **{m: float(result[f"test/{m}"]) for m in METRICS},
        **{f"{r}/{m}": float(result[f"test/{r}/{m}"]) for r in ("all", "unseen") for m in METRICS},
        "val_ndcg@10": best_val, "epochs": int(trainer.current_epoch), "steps": int(trainer.global_step),
        "converged": stopped_by_patience,  # stopped by patience, not by the max_epochs cap
        "train_examples": len(data.examples["train"]), "test_queries": len(data.examples["test"]),
        "users": sequences.num_users if subset is None else subset, "items": sequences.num_items,
        "parameters": sum(p.numel() for p in module.parameters()),
        "positional_parameters": sum(p.numel() for p in module.model.trunk.encodings.parameters()),
        "seconds": time.perf_counter() - start,
    }


# ------------------------------------------------------------------------------------------ analysis
def claims(rows: list[dict[str, Any]], target: str = "cape") -> list[dict[str, Any]]:
    """``target`` beats every other encoder of the same dataset and protocol on each of :data:`VERDICT_METRICS`:
    Welch's t on the per-seed test metric (independent trainings), bounded to [0, 1]; < 2 seeds a side: untested."""
    out = []
    for dataset, protocol in dict.fromkeys((r["dataset"], r["protocol"]) for r in rows):
        here = sorted((r for r in rows if (r["dataset"], r["protocol"]) == (dataset, protocol)),
                      key=lambda r: r["seed"])
        mine = [r for r in here if r["encoding"] == target]
        for other in dict.fromkeys(r["encoding"] for r in here if r["encoding"] != target) if mine else ():
            theirs = [r for r in here if r["encoding"] == other]
            for metric in VERDICT_METRICS:
                claim = decide_claim([r[metric] for r in mine], [r[metric] for r in theirs], higher_is_better=True,
                                     bounds=(0.0, 1.0),
                                     name=f"{target} beats {other}: {dataset} ({protocol}), {metric.upper()}")
                out.append(claim_row(claim, dataset=dataset, protocol=protocol, metric=metric,
                                     comparison=f"{target} vs {other}"))
    return out


def plot(summary: list[dict[str, Any]]) -> Any:
    """Test HR@10 and NDCG@10 per encoder with their 95 % intervals, one panel per (dataset, protocol)."""
    panels = list(dict.fromkeys((r["dataset"], r["protocol"]) for r in summary))
    fig, axes = new_figure(1, max(1, len(panels)), size=(5.5, 4))
    for ax, (dataset, protocol) in zip(axes[0], panels):
        rows = [r for r in summary if (r["dataset"], r["protocol"]) == (dataset, protocol)]
        for offset, metric in ((-0.2, "hr@10"), (0.2, "ndcg@10")):
            means, errors = interval_errors([r[metric] for r in rows])
            ax.bar([x + offset for x in range(len(rows))], means, 0.4, yerr=errors, capsize=3, label=metric.upper())
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r["encoding"] for r in rows], rotation=20)
        ax.set_title(f"{dataset}, {protocol} protocol (test, 95 % interval)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    return finish(fig, "HR@10 or NDCG@10")


class Recsys(Benchmark):
    name = "recsys"
    title = "SASRec positional encodings: MovieLens-100k and a contextual-count log"
    Config = Config
    key_fields = ("dataset", "protocol", "encoding", "seed")
    run_one = staticmethod(run_one)
    summary_by = ("dataset", "protocol", "encoding")
    summary_metrics = {m: (0.0, 1.0) if "@" in m or m == "mrr" else None for m in SHOWN}
    summary_keep = ("ranking", "positional_parameters")
    run_columns = ("dataset", "protocol", "encoding", "seed", "lr", "hr@10", "ndcg@10", "mrr", "epochs", "converged",
                   "seconds")
    number_format = ".4f"
    held_out = ("inputs hold only items before the target (time positions scaled from the training part); every run "
                "is tested once, with its best validation checkpoint")
    same_budget = ("gets the same hyperparameters, validation targets and early stopping on validation NDCG@10 with "
                   "the same patience")

    def check(self, config: Config) -> None:
        for key in ("datasets", "encoders", "protocols"):
            distinct(key, getattr(config, key))
        missing = [d for d in config.datasets if d not in config.training]
        if missing:
            raise ValueError(f"training has no entry for dataset(s) {missing}; it has {sorted(config.training)}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        shared = {"split": dataclasses.asdict(config.split), "kcore": dataclasses.asdict(config.kcore),
                  "synthetic": dataclasses.asdict(config.synthetic)}
        return [{"dataset": d, "protocol": p, "encoding": e, "seed": s, "group": f"{d}/{p}/{e}",
                 "training": dataclasses.asdict(config.training[d]), **shared}
                for d in sorted(config.datasets) for p in PROTOCOLS if p in config.protocols
                for e in ENCODERS if e in config.encoders for s in config.seeds]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="lr", values=[float(lr) for lr in config.lrs], metric="val_ndcg@10", maximize=True,
                      group="group", max_extensions=config.max_extensions)

    def progress_label(self, row: dict[str, Any]) -> str:
        return (f"{row['dataset']} {row['protocol']} {row['encoding']} seed {row['seed']}: test NDCG@10 "
                f"{row['ndcg@10']:.4f} ({row['epochs']} epochs, {row['seconds']:.0f}s)")

    def claims(self, result: Result) -> list[dict[str, Any]]:
        return claims(result.rows)

    def plot(self, result: Result) -> dict[str, Any]:
        summary = result.derived_of("summary")
        return {"recsys_metrics.png": plot(summary)} if summary else {}

    def describe(self, result: Result) -> str:
        split = result.config.split
        data = [f"* {dataset}, {protocol}: {runs[0]['users']} users, {runs[0]['items']} items, "
                f"{runs[0]['train_examples']} training examples, {runs[0]['test_queries']} test queries, ranking "
                f"`{runs[0]['ranking']}`; {sum(r['converged'] for r in runs)} of {len(runs)} runs stopped by patience."
                for (dataset, protocol), runs in group_rows(result.rows, ("dataset", "protocol")).items()]
        return ("SASRec (causal Transformer, item embeddings shared with the output layer) with the positional "
                "encoding swapped by name; softmax cross-entropy over all items; AdamW; ties count against the "
                f"target; split `{split.mode}`" + (f" {split.ratios}" if split.mode == "ratio" else "")
                + f". The claims (CAPE beats each encoder, Yuan et al. 2025) use the `{result.config.protocols[0]}` "
                "protocol; `all/` and `unseen/` are each run's rankings over every item and with the history "
                "excluded.\n\n" + "\n".join(data))


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="recsys", prog="python benchmarks/recsys.py"))
