"""Cross-lingual position representations (XL-PE; Ding et al. 2020, arXiv:2004.13310) on a toy SVO -> SOV pair.

The same encoder-decoder Transformer (:class:`pe_toolkit.domains.translation.TranslationModel`) trains with the
sinusoidal PE alone (``pe``), PE + XL-PE at the encoder input (``xl_input``) or XL-PE in half of the heads of every
encoder layer (``xl_head``). The cross-lingual positions come from a source-only BTG reorderer trained once on the
training alignments (``reorderer``: the methods) or from each pair's own alignment (``oracle``: it reads the
reference translation, an upper bound, never a claim). Every (variant, positions) cell gets the same lr grid on the
first seed, chosen by validation BLEU; the claims (XL-PE with reorderer positions beats PE alone in test BLEU) are
decided by :func:`pe_toolkit.bench.verdict.decide_claim`. Design and measurements: ``docs/tutorials/translation.md``.

    pe-toolkit bench translation --quick                   # pipeline check, < 2 minutes here
    pe-toolkit bench translation                           # full CPU preset (its run: section: --jobs 2)
    pe-toolkit bench translation --preset gpu --accelerator cuda
    pe-toolkit bench translation --set training.steps=400 --set seeds=[0,1,2,3]
    python benchmarks/translation.py --quick               # the same code
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from typing import Any, Literal

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning, quiet_trainer
from pe_toolkit.bench.checks import distinct
from pe_toolkit.bench.config import Dropout
from pe_toolkit.bench.plots import finish, interval_errors, new_figure
from pe_toolkit.bench.verdict import claim_row, claims_table, decide_claim

VARIANTS: dict[str, dict[str, Any]] = {
    "pe": {"encoding": "sinusoidal", "encoding_options": {}},
    "xl_input": {"encoding": "xl_pe", "encoding_options": {"strategy": "input"}},
    "xl_head": {"encoding": "xl_pe", "encoding_options": {"strategy": "head"}},
}
#: what a row is: the oracle reads the reference translation (an upper bound), the others are methods
ROLES = {"-": "method", "reorderer": "method", "oracle": "oracle upper bound (reads the reference)"}
BLEU_BOUNDS = (0.0, 100.0)
METRICS = {"bleu": ".2f", "exact_match": ".3f", "val_bleu": ".2f", "bleu_agree": ".2f", "bleu_differ": ".2f",
           "exact_match_differ": ".3f"}
# the same type as length_generalization's (jsonargparse refuses one restriction registered under two names)


@dataclasses.dataclass
class Data:
    train_pairs: PositiveInt
    val_pairs: PositiveInt
    test_pairs: PositiveInt
    max_depth: NonNegativeInt


@dataclasses.dataclass
class Reorderer:
    epochs: PositiveInt


@dataclasses.dataclass
class Model:
    dim: PositiveInt
    num_heads: PositiveInt
    encoder_layers: PositiveInt
    decoder_layers: PositiveInt
    dropout: Dropout


@dataclasses.dataclass
class Training:
    steps: PositiveInt
    batch_size: PositiveInt
    lrs: list[PositiveFloat]
    max_extensions: NonNegativeInt = 0  # lrs added past an edge choice (log scale), the same cap for every cell


@dataclasses.dataclass
class Config:
    seeds: list[NonNegativeInt]
    variants: list[Literal["pe", "xl_input", "xl_head"]]
    positions: list[Literal["reorderer", "oracle"]]
    data: Data
    reorderer: Reorderer
    model: Model
    training: Training


def cells(config: Config) -> list[tuple[str, str]]:
    """The (variant, positions) cells: ``("pe", "-")`` and each XL variant with each positions source."""
    return [c for v in config.variants for c in ([(v, "-")] if v == "pe" else [(v, p) for p in config.positions])]


def cell_name(variant: str, positions: str) -> str:
    return variant if positions == "-" else f"{variant} ({positions})"


# ------------------------------------------------------------------------------------------ data and one run
@functools.lru_cache(maxsize=4)
def shared_task(key: str) -> Any:
    """The :func:`~pe_toolkit.domains.translation.toy_reordering_task` of a run's JSON ``{"data", "reorderer"}``,
    built once per process (the reorderer trains once, on the training alignments, shared by every run)."""
    from pe_toolkit.domains.translation import toy_reordering_task

    options = json.loads(key)
    return toy_reordering_task(**options["data"], reorderer_epochs=options["reorderer"]["epochs"])


def train_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one (variant, positions, seed) cell at ``spec["lr"]``, validate, translate the test set once; a row."""
    import lightning as L

    from pe_toolkit.domains.translation import lightning_module as tm

    start = time.perf_counter()
    task = shared_task(json.dumps({"data": spec["data"], "reorderer": spec["reorderer"]}, sort_keys=True))
    sv, tv = task.source_vocab, task.target_vocab
    if spec["positions"] == "-":  # the baseline reads no cross-lingual position: the identity fills the field
        xl = {split: [list(range(len(p.source))) for p in pairs] for split, pairs in task.pairs.items()}
    else:
        xl = task.positions[spec["positions"]]
    splits = {split: tm.TranslationDataset(task.pairs[split], sv, tv, xl[split]) for split in ("train", "val", "test")}
    steps = spec["training"]["steps"]
    evaluator = quiet_trainer(spec.get("device"))
    L.seed_everything(spec["seed"], verbose=False)
    module = tm.TranslationModule(tv.itos, len(sv), {**spec["model"], **VARIANTS[spec["variant"]]}, lr=spec["lr"],
                               max_steps=steps, warmup_steps=max(1, steps // 20))
    loaders = tm.TranslationDataModule(splits["train"], splits["val"], splits["test"],
                                    batch_size=spec["training"]["batch_size"], seed=spec["seed"])
    trainer = quiet_trainer(spec.get("device"), max_steps=steps, limit_val_batches=0, num_sanity_val_steps=0)
    trainer.fit(module, loaders)
    train_loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
    val = evaluator.validate(module, loaders, verbose=False)[0]
    evaluator.test(module, loaders.test_dataloader(), verbose=False)
    return {
        "kind": "run", "variant": spec["variant"], "positions": spec["positions"], "cell": spec["cell"],
        "role": ROLES[spec["positions"]], "seed": spec["seed"], "bleu": module.results["bleu"],
        "exact_match": module.results["exact_match"], "val_bleu": float(val["val/bleu"]),
        "val_loss": float(val["val/loss"]), "train_loss": train_loss, "lr": spec["lr"],
        "parameters": sum(p.numel() for p in module.model.parameters()), "steps": steps,
        "seconds": time.perf_counter() - start, **agreement_subsets(module.hypotheses, task),
        "example": " ".join(module.hypotheses[0]) if module.hypotheses else None,
        "reorderer": {"train_accuracy_per_epoch": task.reorderer_history, "accuracy": task.reorderer_accuracy},
    }


def agreement_subsets(hypotheses: list[list[str]], task: Any) -> dict[str, Any]:
    """Test BLEU and exact match on the test sentences where the reorderer's positions equal the oracle's
    (``agree``) and where they do not (``differ``): the same split for every row, so the oracle and reorderer rows
    can be compared where their inputs differ at all."""
    from pe_toolkit.domains.translation.lightning_module import corpus_bleu

    pairs = task.pairs["test"]
    predicted, oracle = task.positions["reorderer"]["test"], task.positions["oracle"]["test"]
    out: dict[str, Any] = {}
    for name, keep in (("agree", True), ("differ", False)):
        index = [i for i, (a, b) in enumerate(zip(predicted, oracle)) if (a == b) == keep]
        out[f"test_{name}"] = len(index)
        out[f"bleu_{name}"] = out[f"exact_match_{name}"] = None
        if index and len(hypotheses) == len(pairs):
            hyps, refs = [hypotheses[i] for i in index], [list(pairs[i].target) for i in index]
            out[f"bleu_{name}"] = corpus_bleu(hyps, refs)
            out[f"exact_match_{name}"] = sum(h == r for h, r in zip(hyps, refs)) / len(index)
    return out


# ------------------------------------------------------------------------------------------ analysis
def claims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Test-BLEU comparisons (:func:`~pe_toolkit.bench.verdict.decide_claim`, Welch t): ``kind="claim"``, an XL-PE
    strategy with reorderer positions against ``pe`` (Ding et al. 2020); ``kind="upper bound"``, the oracle rows
    against the same strategy with reorderer positions and against ``pe`` (what a perfect reorderer could add)."""
    bleu = {}
    for r in rows:
        bleu.setdefault((r["variant"], r["positions"]), []).append(r["bleu"])
    out = []

    def compare(kind: str, a: tuple[str, str], b: tuple[str, str], text: str) -> None:
        if a in bleu and b in bleu:
            comparison = f"{cell_name(*a)} vs {cell_name(*b)}"
            decided = decide_claim(bleu[a], bleu[b], higher_is_better=True, bounds=BLEU_BOUNDS,
                                   name=f"{comparison}: {text}")
            out.append(claim_row(decided, kind=kind, comparison=comparison,
                                 paper="Ding et al. 2020" if kind == "claim" else None))

    xl = [v for v in VARIANTS if v != "pe"]
    for variant in xl:
        compare("claim", (variant, "reorderer"), ("pe", "-"),
                f"XL-PE ({VARIANTS[variant]['encoding_options']['strategy']} strategy, source-only reorderer "
                "positions) improves test BLEU over PE alone")
    for variant in xl:
        compare("upper bound", (variant, "oracle"), (variant, "reorderer"),
                "what a reorderer that always agreed with the reference alignment could add")
        compare("upper bound", (variant, "oracle"), ("pe", "-"), "XL-PE with the reference's reordering vs PE alone")
    return out


def plot(summary: list[dict[str, Any]]) -> Any:
    """Test BLEU per cell with its 95 % interval; oracle upper-bound bars grey and hatched."""
    fig, axes = new_figure(size=(1.6 * len(summary) + 2, 3.8))
    ax = axes[0][0]
    means, errors = interval_errors([r.get("bleu") for r in summary])
    for i, row in enumerate(summary):
        oracle = row["positions"] == "oracle"
        ax.bar(i, means[i], yerr=[[errors[0][i]], [errors[1][i]]], capsize=3, color="0.75" if oracle else "tab:blue",
               hatch="//" if oracle else None, edgecolor="0.3")
    ax.set_xticks(range(len(summary)))
    ax.set_xticklabels([r["variant"] if r["positions"] == "-" else f"{r['variant']}\n({r['positions']})"
                        + (",\nupper bound" if r["positions"] == "oracle" else "") for r in summary], fontsize=8)
    ax.set_ylabel("test BLEU (mean, 95 % interval)")
    ax.set_title("SVO -> SOV toy translation (hatched: oracle upper bound)")
    return finish(fig, "test BLEU", legend=False)


class Translation(Benchmark):
    name = "translation"
    title = "Translation: cross-lingual position representations (XL-PE)"
    Config = Config
    key_fields = ("variant", "positions", "seed")
    run_one = staticmethod(train_one)
    summary_by = ("variant", "positions")
    summary_metrics = {m: BLEU_BOUNDS if "bleu" in m else (0.0, 1.0) for m in METRICS}
    summary_keep = ("role", "parameters")
    run_columns = ("variant", "positions", "seed", "lr", "bleu", "exact_match", "val_bleu",
                   ("train_loss", "final train loss"), "parameters", "seconds")
    number_format = ".2f"
    held_out = ("the reorderer rows see the reorderer's positions of the test source; the `oracle` rows read the "
                "reference translation's alignment: an upper bound, not a method, and no claim is checked on them")
    same_budget = ("trains the same steps on the same training pairs; the BTG reorderer trains once, on the training "
                   "alignments only, shared by every XL-PE method")

    def check(self, config: Config) -> None:
        distinct("variants", config.variants)
        distinct("training.lrs", config.training.lrs)
        if config.positions or config.variants != ["pe"]:  # the XL-PE variants need cross-lingual positions
            distinct("positions", config.positions)
        if config.model.dim % (2 * config.model.num_heads):
            raise ValueError(f"model.dim ({config.model.dim}) must be a multiple of 2 * model.num_heads "
                             f"({config.model.num_heads})")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        # seeds outermost: an interrupted run still has every cell at the first seeds
        shared = {"data": dataclasses.asdict(config.data), "reorderer": dataclasses.asdict(config.reorderer),
                  "model": dataclasses.asdict(config.model),
                  "training": {"steps": config.training.steps, "batch_size": config.training.batch_size}}
        return [{"variant": v, "positions": p, "cell": cell_name(v, p), "seed": s, **shared}
                for s in config.seeds for v, p in cells(config)]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="lr", values=[float(v) for v in config.training.lrs], metric="val_bleu", maximize=True,
                      group="cell", max_extensions=config.training.max_extensions)

    def progress_label(self, row: dict[str, Any]) -> str:
        return f"{row['cell']} seed {row['seed']} lr {row['lr']:g}: BLEU {row['bleu']:.2f} ({row['seconds']:.0f}s)"

    def claims(self, result: Result) -> list[dict[str, Any]]:
        return claims(result.rows)

    def plot(self, result: Result) -> dict[str, Any]:
        return {"bleu.png": plot(result.derived_of("summary"))}

    def describe(self, result: Result) -> str:
        data, model, training, rows = result.config.data, result.config.model, result.config.training, result.rows
        reorderer = rows[0]["reorderer"]
        return (
            f"Toy SVO -> SOV translation with nested relative and complement clauses ({data.train_pairs} training, "
            f"{data.val_pairs} validation, {data.test_pairs} test pairs, clause depth <= {data.max_depth}); "
            f"encoder-decoder Transformer, dim {model.dim}, {model.encoder_layers}+{model.decoder_layers} layers, "
            f"{training.steps} steps of batch {training.batch_size}; greedy decoding, corpus BLEU (sacrebleu, "
            f"`tokenize='none'`). Device: {result.device}.\n\nThe source-only BTG reorderer (perceptron, training "
            "accuracy per epoch " + ", ".join(f"{a:.3f}" for a in reorderer["train_accuracy_per_epoch"])
            + ") agrees with the oracle on " + "; ".join(f"{split} {100 * a['sentence']:.1f} % of sentences, "
                                                      f"{100 * a['token']:.1f} % of tokens"
                                                      for split, a in reorderer["accuracy"].items())
            + f". `bleu_agree` / `bleu_differ`: test BLEU on the {rows[0]['test_agree']} test sentences where its "
            f"positions equal the oracle's and the {rows[0]['test_differ']} where they do not (the only ones where "
            "the oracle rows can differ from the reorderer rows).")

    def report(self, result: Result) -> str:
        bounds = result.derived_of("upper bound")
        return super().report(result) + ("\n## Oracle upper bounds (not claims)\n\n" + claims_table(bounds, ".2f")
                                         if bounds else "")


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="translation", prog="python benchmarks/translation.py"))
