"""Faithfulness of PE-aware LRP (PA-LRP) against plain LRP, gradient x input and attention rollout.

Bakish et al. 2025, "Revisiting LRP: Positional Attribution as the Missing Ingredient for Transformer
Explainability", arXiv:2506.02138. Small decoder-only Transformers, one per (task, encoding, seed), trained on the
generated ``sentiment`` and ``copy_random`` tasks, whose evidence is known; their own predictions are explained and
tested by perturbation and conservation (:mod:`pe_toolkit.explain.faithfulness`). Claims per (task, encoding), on
paired per-seed differences (both methods explain the same model): PA-LRP is more faithful than plain LRP, and plain
LRP loses the positional share (Lemma 3.1). The lr is tuned per (task, encoding) on the first seed's final training
loss. Details: ``docs/tutorials/explain.md``.

    python benchmarks/explain.py --quick          # pipeline check (< 5 minutes here); 1 seed: claims untested
    python benchmarks/explain.py --jobs 2         # full preset (3 seeds)
    python benchmarks/explain.py --preset gpu --accelerator cuda --threads 8
    python benchmarks/explain.py --set seeds=[0,1,2,3] --set lrs=[0.002] --set encodings=[rope,alibi]
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Literal

from jsonargparse.typing import NonNegativeInt, PositiveInt

import pe_toolkit.explain.sentiment  # noqa: F401  (registers the task explain_sentiment)
from pe_toolkit.bench import Benchmark, Result, Tuning, quiet_trainer
from pe_toolkit.bench.checks import distinct, positives
from pe_toolkit.bench.config import ModelSize
from pe_toolkit.bench.plots import finish, nan_if_missing, new_figure
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.summary import group_rows, summarize_groups, summary_table
from pe_toolkit.bench.verdict import claim_row, decide_claim, summarize, untested_claim
from pe_toolkit.explain.faithfulness import METHODS, evidence_examples, faithfulness

TASKS = ("sentiment", "copy")
ENCODINGS = ("nope", "rope", "learned", "alibi", "sinusoidal")
TASK_NAMES = {"sentiment": "explain_sentiment", "copy": "copy_random"}
MIN_SEEDS = 3
IDENTITY_TOLERANCE = 1e-4  # float32 round-off of the ledger tokens + positions + absorbed = logit
AUCS = ("auc_morf", "auc_lerf", "top1_hit")
CLAIMS = (("PA-LRP more faithful than plain LRP (MoRF AUC)", "auc_morf", False),
          ("PA-LRP more faithful than plain LRP (LeRF AUC)", "auc_lerf", True),
          ("plain LRP loses the positional share (Lemma 3.1): PA-LRP's input fraction is higher", "input_fraction",
           True))


@dataclasses.dataclass
class Config:
    """``steps``, ``decay`` (steps of the cosine decay, 0: constant) and ``task_options`` are per task."""

    encodings: list[Literal[ENCODINGS]]
    tasks: list[Literal[TASKS]]
    seeds: list[NonNegativeInt]
    model: ModelSize
    steps: dict[str, PositiveInt]
    decay: dict[str, NonNegativeInt]
    task_options: dict[str, dict[str, Any]]
    num_train: PositiveInt
    num_val: PositiveInt
    batch_size: PositiveInt
    lrs: list[float]
    num_explain: PositiveInt
    max_extensions: NonNegativeInt = 0


def train(spec: dict[str, Any]):
    """Train a decoder-only Transformer on the spec's task and encoding: ``(model on the CPU, data, validation loss)``.

    The validation loss is the answer loss on ``num_val`` held-out in-distribution examples (the task's train
    split drawn with another seed), read once after training: the learning rate is chosen by it.
    """
    import lightning as L

    from pe_toolkit.training import SequenceLMModule, TaskDataModule

    L.seed_everything(spec["seed"], verbose=False)
    data = TaskDataModule(TASK_NAMES[spec["task"]], spec["task_options"], num_train=spec["num_train"],
                          num_val=spec["num_val"], num_test=0, batch_size=spec["batch_size"], seed=spec["seed"])
    options = {"max_len": data.max_sequence_length()} if spec["encoding"] == "learned" else {}
    module = SequenceLMModule(data.vocab_size, encoding=spec["encoding"], encoding_options=options, lr=spec["lr"],
                              warmup_steps=max(1, spec["steps"] // 20), max_steps=spec["decay"], **spec["model"])
    trainer = quiet_trainer(spec.get("device"), max_steps=spec["steps"], limit_val_batches=0)
    trainer.fit(module, data)
    (metrics,) = quiet_trainer(spec.get("device")).validate(module, datamodule=data, verbose=False)
    return module.model.cpu().float().eval(), data, float(metrics["val/loss"])  # explained on the CPU in float32


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train and evaluate one (task, encoding, seed): the model's row, its per-method rows under ``methods``."""
    task, encoding, seed = spec["task"], spec["encoding"], spec["seed"]
    t0 = time.perf_counter()
    model, data, val_loss = train(spec)
    train_s = time.perf_counter() - t0
    results, summary = faithfulness(model, evidence_examples(data.task, data.vocab, spec["num_explain"], seed),
                                    seed=seed)
    return {"kind": "model", "task": task, "encoding": encoding, "seed": seed, "lr": spec["lr"], "val_loss": val_loss,
            "train_s": train_s, "eval_s": time.perf_counter() - t0 - train_s, **summary,
            "methods": [{"task": task, "encoding": encoding, "seed": seed, "method": m, **metrics}
                        for m, metrics in results.items()]}


def method_rows(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The per-method rows of every model row, in order."""
    return [row for model in models for row in model["methods"]]


def claims(models: list[dict[str, Any]], min_seeds: int = MIN_SEEDS) -> list[dict]:
    """Per (task, encoding) with a positional encoding (NoPE is a control: the two methods coincide), computed
    verdicts on paired seeds: PA-LRP is more faithful than plain LRP on MoRF (lower area) and on LeRF (higher area);
    plain LRP loses the positional share (Lemma 3.1): PA-LRP's input fraction exceeds plain LRP's (untested for
    RoPE, where plain LRP credits the tables' share to queries and keys instead). Fewer than ``min_seeds``: untested.
    """
    out = []
    for (task, encoding), mine in group_rows(sorted(models, key=lambda m: (m["task"], m["encoding"], m["seed"])),
                                             ("task", "encoding")).items():
        if encoding == "nope":
            continue
        enough = (len(mine) >= min_seeds, f"{len(mine)} seed(s), fewer than {min_seeds}")
        methods = [{r["method"]: r for r in m["methods"]} for m in mine]
        for claim, key, higher in CLAIMS:
            pa, plain = ([m[f"{key}_{x}"] for m in mine] if key == "input_fraction" else [m[x][key] for m in methods]
                         for x in ("pa_lrp", "lrp"))
            name = f"{claim}: {task}, {encoding}"
            out.append(claim_row(untested_claim(name, "not applicable to RoPE: plain LRP hands the cos/sin tables' "
                                                "share to the queries and keys", pa, plain, paired=True)
                                 if encoding == "rope" and key == "input_fraction" else
                                 decide_claim(pa, plain, higher_is_better=higher, paired=True, name=name,
                                              preconditions=[enough]), task=task, encoding=encoding, claim=claim))
    return out


def conservation_checks(models: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, encoding): PA-LRP's ledger balances (``holds``: the largest relative residual of tokens +
    positions + absorbed = logit is at most :data:`IDENTITY_TOLERANCE`), beside the fraction reaching the inputs."""
    out = []
    for (task, encoding), mine in group_rows(sorted(models, key=lambda m: (m["task"], m["encoding"])),
                                             ("task", "encoding")).items():
        residual = max(max(m["identity_residual_pa_lrp"], m["identity_residual_lrp"]) for m in mine)
        out.append({"kind": "check", "task": task, "encoding": encoding,
                    "check": "PA-LRP's ledger balances: tokens + positions + absorbed = logit",
                    "test": f"largest relative residual <= {IDENTITY_TOLERANCE:g} (float32)",
                    "identity_residual_max": residual, "holds": residual <= IDENTITY_TOLERANCE,
                    "input_fraction_pa_lrp": summarize([m["input_fraction_pa_lrp"] for m in mine]).as_dict()})
    return out


def plot_auc(rows: list[dict[str, Any]]) -> Any:
    """MoRF and LeRF areas per (task, encoding) and method, means over seeds."""
    models = sorted({(r["task"], r["encoding"]) for r in rows})
    fig, axes = new_figure(1, 2, size=(max(4.0, 1.3 * len(models)), 4.2))
    width = 0.8 / len(METHODS)
    for ax, key, label in zip(axes[0], ("auc_morf", "auc_lerf"), ("MoRF AUC (lower = more faithful)",
                                                                  "LeRF AUC (higher = more faithful)")):
        for i, method in enumerate(METHODS):
            found = [[r[key] for r in rows if (r["task"], r["encoding"], r["method"]) == (*model, method)
                      and r[key] is not None] for model in models]
            ax.bar([m + i * width for m in range(len(models))],
                   [nan_if_missing(sum(f) / len(f) if f else None) for f in found], width, label=method)
        ax.set_xticks([m + 0.4 - width / 2 for m in range(len(models))], [f"{t}\n{e}" for t, e in models], fontsize=8)
        ax.set_ylabel(label)
    return finish(fig, "the perturbation AUC", fontsize=7)


class Explain(Benchmark):
    name = "explain"
    title = "Explainability: PE-aware LRP perturbation test"
    Config = Config
    key_fields = ("task", "encoding", "seed")
    run_one = staticmethod(run_one)
    summary_by = ("task", "encoding")
    summary_metrics = {"accuracy": (0, 1), "input_fraction_pa_lrp": None, "position_fraction_pa_lrp": None,
                       "input_fraction_lrp": None, "position_share": None}
    run_columns = ("task", "encoding", "seed", "lr", *summary_metrics)
    number_format = ".4f"
    held_out = ("no held-out target is involved: the claims compare two explanations of one model on the same "
                "examples (new draws, seed + 1000, of the training distribution)")
    same_budget = "trains the same steps on the same generated data"

    def check(self, config: Config) -> None:
        distinct("encodings", config.encodings)
        distinct("tasks", config.tasks)
        positives("lrs", config.lrs)
        for key in ("steps", "decay", "task_options"):
            missing = [t for t in config.tasks if t not in getattr(config, key)]
            if missing:
                raise ValueError(f"{key} lacks the task(s) {missing}; {key} has {sorted(getattr(config, key))}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        shared = {"model": dataclasses.asdict(config.model), "num_train": config.num_train, "num_val": config.num_val,
                  "batch_size": config.batch_size, "num_explain": config.num_explain}
        return [{"task": t, "encoding": e, "seed": s, "group": f"{t}/{e}", **shared, "steps": config.steps[t],
                 "decay": config.decay[t], "task_options": config.task_options[t]}
                for t in config.tasks for e in config.encodings for s in config.seeds]

    def tuning(self, config: Config) -> Tuning:
        # chosen by the held-out loss: the claims compare two explanations of one model, so it favours neither
        return Tuning(param="lr", values=[float(lr) for lr in config.lrs], metric="val_loss", maximize=False,
                      group="group", max_extensions=config.max_extensions)

    def claims(self, result: Result) -> list[dict[str, Any]]:
        return claims(result.rows) + conservation_checks(result.rows)

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        methods = sorted(method_rows(result.rows), key=lambda r: (r["task"], r["encoding"]))
        bounded = dict.fromkeys(AUCS, (0, 1))  # areas under probability curves, and a hit rate
        return [{"kind": "method_summary", **entry} for entry in summarize_groups(
            methods, ("task", "encoding", "method"), AUCS, bounds=bounded)] + super().analyze(result)

    def describe(self, result: Result) -> str:
        return ("Perturbation test: prompt inputs replaced in order of score; the area under the probability of the "
                "explained class over the removed fraction. MoRF (most relevant first): lower is more faithful; LeRF: "
                "higher is more faithful. `top1_hit`: the top-scored input is the evidence. NoPE models are a control "
                "(the two methods coincide) and carry no claim.")

    def plot(self, result: Result) -> dict[str, Any]:
        from pe_toolkit.plotting import plot_relevance
        from pe_toolkit.training import TaskDataModule

        figures = {"perturbation_auc.png": plot_auc(method_rows(result.rows))}
        first = min(result.config.seeds)
        for row in (r for r in result.rows if r["seed"] == first):
            ex = row["example"]
            relevance = {"token (PA-LRP)": ex["token"]}
            if ex["position_terms"]:
                relevance["position (PA-LRP, signed)"] = [sum(v) for v in zip(*ex["position_terms"].values())]
            relevance.update({"token (plain LRP)": ex["plain"], "grad x input": ex["grad_x_input"]})
            vocab = TaskDataModule(TASK_NAMES[row["task"]], result.config.task_options[row["task"]]).vocab
            figures[f"heatmap_{row['task']}_{row['encoding']}.png"] = plot_relevance(
                vocab.decode(ex["ids"]), relevance, title=f"{row['task']}, {row['encoding']}, seed {first}")
        return figures

    def report(self, result: Result) -> str:
        return "\n\n".join([
            super().report(result).rstrip(),
            "## Conservation (a property of the implementation, not a claim)\n\n" + markdown_table(
                result.derived_of("check"), ["task", "encoding", ("identity_residual_max", "largest ledger residual"),
                                             "holds"], {"identity_residual_max": ".1e"}),
            f"Ledger: |tokens + positions + absorbed - logit| / |logit|, holds at <= {IDENTITY_TOLERANCE:g}. Fractions "
            "(the summary): mean sum(relevance) / logit, without a threshold (Bakish et al. state none); the rest is "
            "absorbed by the rules. `position_share`: |sum position| / (|sum token| + |sum position|) under PA-LRP.",
            "## Perturbation AUCs over seeds\n\n" + summary_table(result.derived_of("method_summary"),
                                                                  ["task", "encoding", "method", "runs"], AUCS),
            "## Every model's explanations\n\n" + markdown_table(method_rows(result.rows), [
                "task", "encoding", "seed", "method", *AUCS], dict.fromkeys(AUCS, ".3f"))])


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="explain", prog="python benchmarks/explain.py"))
