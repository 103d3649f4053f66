"""Faithfulness of PE-aware LRP (PA-LRP) against plain LRP, gradient x input and attention rollout.

Bakish et al. 2025, "Revisiting LRP: Positional Attribution as the Missing Ingredient for Transformer
Explainability", arXiv:2506.02138: perturbation tests on trained models. Here small decoder-only
Transformers are trained by the toolkit (``SequenceLMModule`` + ``TaskDataModule``) on two generated
tasks, one per positional encoding:

* ``sentiment``: the generated sentiment classifier of :mod:`pe_toolkit.explain.sentiment` (label token
  after ``<sep>``; removed words are replaced by the filler word ``the``);
* ``copy``: ``copy_random`` (Kazemnejad et al. 2023) with a 20-symbol alphabet; one answer token per
  example is explained (teacher forcing), removed prompt symbols are replaced by ``<pad>``. The copied
  source position is the ground truth: ``top1_hit`` is how often a method ranks it first.

For every example the model's own prediction is explained; input words / symbols of the prompt are
replaced in order of their score, most relevant first (MoRF, lower area = more faithful) and least
relevant first (LeRF, higher area = more faithful), at fractions 0, 0.1, ..., 1 of the prompt. The
curve is the probability of the explained class; areas by the trapezoid rule. Methods:

* ``pa_lrp``: PA-LRP score = token relevance + |each positional term| (the paper's combination);
* ``pa_lrp_token``: the token relevance of the PA-LRP run alone (isolates the positional terms);
* ``lrp``: plain AttnLRP, positions held constant;
* ``grad_x_input``, ``rollout`` (Abnar & Zuidema 2020), ``random`` (a seeded random order).

It also records conservation: ``coverage = sum(input relevance) / logit`` for PA-LRP and plain LRP.

    python benchmarks/explain.py --quick          # pipeline check (< 2 minutes on one idle core)
    python benchmarks/explain.py                  # full run

Outputs in ``<out>/explain/``: results.json, report.md, ``perturbation_auc.png`` and one heatmap
``heatmap_<task>_<encoding>.png`` of token and position relevance per trained model. Every finished
model is stored in ``<out>/explain/runs/{quick,full}/<task>_<encoding>.json``; ``--resume`` reuses
those whose configuration matches, ``--report-only`` trains nothing and reports what is stored.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (  # noqa: E402
    Progress,
    markdown_table,
    nan_if_missing,
    note_if_empty,
    standard_argparser,
    write_report,
    write_results,
)

NAME = "explain"
METHODS = ("pa_lrp", "pa_lrp_token", "lrp", "grad_x_input", "rollout", "random")
TASKS = ("sentiment", "copy")
ENCODINGS = ("nope", "rope", "learned", "alibi", "sinusoidal")
FRACTIONS = [i / 10 for i in range(11)]

# "decay": steps of the cosine decay (0 = constant rate after warm-up: the sentiment models sit on a loss
# plateau for a few hundred steps, and a decaying rate kept them there)
FULL = {
    "encodings": ["rope", "learned", "alibi"],
    "model": {"dim": 64, "num_heads": 4, "num_layers": 2},
    "steps": {"sentiment": 1000, "copy": 1200},
    "decay": {"sentiment": 0, "copy": 1200},
    "task_options": {"sentiment": {"train_lengths": [6, 14]},
                     "copy": {"train_lengths": [4, 10], "num_symbols": 20}},
    "num_train": 8000,
    "batch_size": 64,
    "lr": 3e-3,
    "num_explain": 100,
    "seed": 0,
}
QUICK = {
    "encodings": ["rope", "learned"],
    "model": {"dim": 32, "num_heads": 4, "num_layers": 2},
    "steps": {"sentiment": 300, "copy": 120},
    "decay": {"sentiment": 0, "copy": 120},
    "task_options": {"sentiment": {"train_lengths": [6, 7]},
                     "copy": {"train_lengths": [4, 8], "num_symbols": 20}},
    "num_train": 2000,
    "batch_size": 64,
    "lr": 3e-3,
    "num_explain": 24,
    "seed": 0,
}
TASK_NAMES = {"sentiment": "explain_sentiment", "copy": "copy_random"}


def task_module(task: str, config: dict[str, Any]):
    import pe_toolkit.explain.sentiment  # noqa: F401  (registers explain_sentiment)
    from pe_toolkit.training import TaskDataModule

    return TaskDataModule(
        TASK_NAMES[task], config["task_options"][task], num_train=config["num_train"], num_val=0, num_test=0,
        batch_size=config["batch_size"], seed=config["seed"],
    )


def train(task: str, encoding: str, config: dict[str, Any]):
    """Train a decoder-only Transformer on ``task`` with ``encoding``; return (model, data, final loss)."""
    import lightning as L

    from pe_toolkit.training import SequenceLMModule

    L.seed_everything(config["seed"], verbose=False)
    data = task_module(task, config)
    options = {"max_len": data.max_sequence_length()} if encoding == "learned" else {}
    steps = config["steps"][task]
    module = SequenceLMModule(
        data.vocab_size, encoding=encoding, encoding_options=options, lr=config["lr"],
        warmup_steps=max(1, steps // 20), max_steps=config["decay"][task], **config["model"],
    )
    trainer = L.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )
    trainer.fit(module, data)
    loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
    return module.model.eval(), data, loss


def make_task(task: str, config: dict[str, Any]):
    """The task generator and its vocabulary (without Lightning)."""
    import pe_toolkit.explain.sentiment  # noqa: F401  (registers explain_sentiment)
    from pe_toolkit.tasks import Vocabulary, get_task

    options = {k: tuple(v) if isinstance(v, list) else v for k, v in config["task_options"][task].items()}
    generator = get_task(TASK_NAMES[task], **options)
    return generator, Vocabulary(generator.vocabulary())


def explain_set(task: str, generator, vocab, count: int, seed: int) -> list[dict[str, Any]]:
    """Examples to explain: token ids, the explained output index, the removable prompt positions, the truth."""
    rng = random.Random(f"explain/{task}/{seed}")
    examples = generator.generate(count, "train", seed + 1000)
    items = []
    for ex in examples:
        ids, answer_start = vocab.encode(ex)
        if task == "sentiment":
            index, removable = answer_start - 1, list(range(1, 1 + len(ex.prompt)))
            truth = [1 + i for i in ex.meta["evidence"]]
            replacement = vocab.token_to_id("the")
        else:  # copy: prompt = Copy : s.. ; explain the prediction of answer token j
            j = rng.randrange(len(ex.answer))
            index, removable = answer_start - 1 + j, list(range(3, 3 + len(ex.answer)))
            truth = [3 + j]
            replacement = vocab.pad_id
        items.append({"ids": ids[: index + 1], "index": index, "removable": removable, "truth": truth,
                      "replacement": replacement, "label": ids[index + 1]})
    return items


def evaluate(model, items: list[dict[str, Any]], seed: int) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Perturbation AUCs per method, accuracy and conservation over ``items`` (batched by length)."""
    import torch

    from pe_toolkit.explain import explain
    from pe_toolkit.explain.baselines import gradient_x_input, rollout
    from pe_toolkit.explain.perturbation import area_under_curve, perturbation_curve

    fractions = torch.tensor(FRACTIONS, dtype=torch.float64)
    groups: dict[int, list[dict[str, Any]]] = {}
    for item in items:
        groups.setdefault(len(item["ids"]), []).append(item)
    sums: dict[str, dict[str, float]] = {m: {"morf": 0.0, "lerf": 0.0, "top1_hit": 0.0} for m in METHODS}
    curves: dict[str, dict[str, Any]] = {m: {"morf": torch.zeros(len(FRACTIONS), dtype=torch.float64),
                                             "lerf": torch.zeros(len(FRACTIONS), dtype=torch.float64)}
                                         for m in METHODS}
    stats = {"correct": 0, "count": 0, "coverage_pa": 0.0, "coverage_plain": 0.0, "position_share": 0.0}
    generator = torch.Generator().manual_seed(seed)
    example = None
    for length, group in sorted(groups.items()):
        tokens = torch.tensor([g["ids"] for g in group])
        index = torch.full((len(group),), length - 1)
        with torch.no_grad():
            predicted = model(tokens)[:, -1].argmax(-1)
        labels = torch.tensor([g["label"] for g in group])
        stats["correct"] += int((predicted == labels).sum())
        stats["count"] += len(group)
        aware = explain(model, tokens, predicted, index=index)
        plain = explain(model, tokens, predicted, index=index, position_aware=False)
        scores = {
            "pa_lrp": aware.scores("pa_lrp"),
            "pa_lrp_token": aware.token,
            "lrp": plain.token,
            "grad_x_input": gradient_x_input(model, tokens, predicted, index=index),
            "rollout": rollout(plain.attention, index),
            "random": torch.rand(tokens.shape, generator=generator, dtype=torch.float64),
        }
        removable = torch.zeros(tokens.shape, dtype=torch.bool)
        for row, g in enumerate(group):
            removable[row, g["removable"]] = True
        replacement = group[0]["replacement"]
        logit = aware.logit.double()
        stats["coverage_pa"] += float((aware.total().double() / logit).sum())
        stats["coverage_plain"] += float((plain.total().double() / logit).sum())
        stats["position_share"] += float((aware.position.sum(-1).double().abs()
                                          / (aware.token.sum(-1).double().abs() + aware.position.sum(-1).double().abs()
                                             + 1e-12)).sum())
        for method, score in scores.items():
            for order in ("morf", "lerf"):
                curve = perturbation_curve(model, tokens, score, target=predicted, index=index, removable=removable,
                                           replacement=replacement, fractions=fractions, order=order).double()
                sums[method][order] += float(area_under_curve(curve, fractions).sum())
                curves[method][order] += curve.sum(1)
            masked = score.double().masked_fill(~removable, float("-inf"))
            top = masked.argmax(-1)
            sums[method]["top1_hit"] += sum(int(top[r]) in g["truth"] for r, g in enumerate(group))
        if example is None or length > len(example["ids"]):
            example = {"ids": group[0]["ids"], "token": aware.token[0].tolist(),
                       "position_terms": {k: v[0].tolist() for k, v in aware.position_terms.items()},
                       "plain": plain.token[0].tolist(), "grad_x_input": scores["grad_x_input"][0].tolist(),
                       "removable": group[0]["removable"]}
    n = stats["count"]
    results = {
        m: {"auc_morf": sums[m]["morf"] / n, "auc_lerf": sums[m]["lerf"] / n, "top1_hit": sums[m]["top1_hit"] / n,
            "curve_morf": (curves[m]["morf"] / n).tolist(), "curve_lerf": (curves[m]["lerf"] / n).tolist()}
        for m in METHODS
    }
    summary = {"accuracy": stats["correct"] / n, "examples": n, "coverage_pa_lrp": stats["coverage_pa"] / n,
               "coverage_lrp": stats["coverage_plain"] / n, "position_share": stats["position_share"] / n,
               "example": example}
    return results, summary


def plot_heatmap(example: dict[str, Any], vocab, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    words = vocab.decode(example["ids"])
    position_terms = example["position_terms"]
    rows = {"token (PA-LRP)": example["token"]}
    if position_terms:
        rows["position (PA-LRP, signed)"] = list(np.sum([v for v in position_terms.values()], axis=0))
    rows["token (plain LRP)"] = example["plain"]
    rows["grad x input"] = example["grad_x_input"]
    matrix = np.array(list(rows.values()), dtype=float)
    scale = np.abs(matrix).max(axis=1, keepdims=True)
    matrix = matrix / np.where(scale > 0, scale, 1.0)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(words)), 0.6 * len(rows) + 1.6))
    image = ax.imshow(matrix, cmap="bwr", vmin=-1, vmax=1, aspect="auto")
    note_if_empty(ax, "relevance")
    ax.set_xticks(range(len(words)), words, rotation=60, fontsize=8)
    ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
    ax.set_title(title + " (each row scaled by its max |relevance|)", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_auc(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = sorted({(r["task"], r["encoding"]) for r in rows})
    fig, axes = plt.subplots(1, 2, figsize=(max(8.0, 1.3 * len(models) * 2), 4.2))
    width = 0.8 / len(METHODS)
    empty = []
    for ax, key, label in zip(axes, ("auc_morf", "auc_lerf"), ("MoRF AUC (lower = more faithful)",
                                                                "LeRF AUC (higher = more faithful)")):
        for m_i, method in enumerate(METHODS):
            values = [nan_if_missing(next((r[key] for r in rows
                                           if (r["task"], r["encoding"]) == model and r["method"] == method), None))
                      for model in models]
            ax.bar([i + m_i * width for i in range(len(models))], values, width, label=method)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(models))], [f"{t}\n{e}" for t, e in models], fontsize=8)
        ax.set_ylabel(label)
        empty.append(note_if_empty(ax, label.split(" (")[0]))
    if not all(empty):
        axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compare(gain: float, tolerance: float = 1e-3) -> str:
    """``"better"`` / ``"worse"`` / ``"tie"`` for a gain of PA-LRP over plain LRP (positive = better)."""
    return "tie" if abs(gain) < tolerance else ("better" if gain > 0 else "worse")


def winner_line(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per trained model: is PA-LRP more faithful than plain LRP (MoRF lower, LeRF higher)?"""
    out = []
    for task, encoding in sorted({(r["task"], r["encoding"]) for r in rows}):
        by = {r["method"]: r for r in rows if r["task"] == task and r["encoding"] == encoding}
        pa, plain = by["pa_lrp"], by["lrp"]
        best = min(METHODS, key=lambda m: by[m]["auc_morf"])
        morf, lerf = pa["auc_morf"] - plain["auc_morf"], pa["auc_lerf"] - plain["auc_lerf"]
        out.append({"task": task, "encoding": encoding, "pa_minus_lrp_morf": morf, "pa_minus_lrp_lerf": lerf,
                    "pa_vs_lrp_morf": compare(-morf), "pa_vs_lrp_lerf": compare(lerf), "best_morf": best})
    return out


def run_config(config: dict[str, Any], task: str) -> dict[str, Any]:
    """The part of the configuration one trained model depends on (the key of its stored run)."""
    keys = ("model", "num_train", "batch_size", "lr", "num_explain", "seed")
    return {"task": task, **{k: config[k] for k in keys}, "steps": config["steps"][task],
            "decay": config["decay"][task], "task_options": config["task_options"][task]}


def run_one(task: str, encoding: str, config: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """Train, evaluate, plot the heatmap; return the stored run ``{"config", "model", "rows"}``."""
    t0 = time.perf_counter()
    model, data, loss = train(task, encoding, config)
    train_s = time.perf_counter() - t0
    items = explain_set(task, data.task, data.vocab, config["num_explain"], config["seed"])
    results, summary = evaluate(model, items, config["seed"])
    example = summary.pop("example")
    plot_heatmap(example, data.vocab, f"{task}, {encoding}", out_dir / f"heatmap_{task}_{encoding}.png")
    return {
        "config": run_config(config, task),
        "model": {"task": task, "encoding": encoding, "final_loss": loss, "train_s": train_s,
                  "eval_s": time.perf_counter() - t0 - train_s, **summary},
        "rows": [{"task": task, "encoding": encoding, "method": m, **metrics} for m, metrics in results.items()],
    }


def report(runs: list[dict[str, Any]], config: dict[str, Any], seconds: float, out: Path) -> None:
    models = [r["model"] for r in runs]
    rows = [row for r in runs for row in r["rows"]]
    plot_auc(rows, out / NAME / "perturbation_auc.png")
    verdict = winner_line(rows)
    write_results(NAME, config, rows + [{"kind": "model", **m} for m in models]
                  + [{"kind": "comparison", **v} for v in verdict], seconds, root=out)
    fmt = {k: ".3f" for k in ("auc_morf", "auc_lerf", "top1_hit", "final_loss", "accuracy", "coverage_pa_lrp",
                              "coverage_lrp", "position_share", "pa_minus_lrp_morf", "pa_minus_lrp_lerf")}
    fmt.update({"train_s": ".0f", "eval_s": ".0f"})
    body = [
        "Perturbation test (Bakish et al. 2025, arXiv:2506.02138): prompt inputs replaced in order of score; the "
        "area under the probability-of-the-explained-class curve over the removed fraction (0 to 1). MoRF (most "
        "relevant first): lower is more faithful. LeRF (least relevant first): higher is more faithful. "
        "`top1_hit`: the top-scored input is the ground truth (copy: the copied source symbol; sentiment: a "
        "polar word or its negator).",
        "",
        "## Trained models",
        "",
        markdown_table(models, ["task", "encoding", "accuracy", "examples", "final_loss", "coverage_pa_lrp",
                                "coverage_lrp", "position_share", "train_s", "eval_s"], fmt),
        "`accuracy`: the explained prediction equals the reference (teacher forcing). `coverage`: mean of "
        "sum(input relevance) / logit (1 = conserved; the rest is the softmax rule's remainder and the stabiliser, "
        "and for plain LRP also the positional share). `position_share`: |sum position relevance| / "
        "(|sum token| + |sum position|) under PA-LRP.",
        "",
        "## Perturbation AUCs",
        "",
        markdown_table(rows, ["task", "encoding", "method", "auc_morf", "auc_lerf", "top1_hit"], fmt),
        "## PA-LRP against plain LRP",
        "",
        markdown_table(verdict, ["task", "encoding", "pa_minus_lrp_morf", "pa_vs_lrp_morf", "pa_minus_lrp_lerf",
                                 "pa_vs_lrp_lerf", "best_morf"], fmt),
        "`better` / `worse` / `tie` (|difference| < 0.001) of PA-LRP against plain LRP on each curve. For NoPE "
        "models (`--encodings nope`) the two coincide (no positional input): a control.",
        "",
        "Plots: `perturbation_auc.png`; `heatmap_<task>_<encoding>.png` (token and position relevance of one example).",
    ]
    write_report(NAME, "Explainability: PE-aware LRP perturbation test", "\n".join(body), root=out)


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--encodings", nargs="+", choices=ENCODINGS, help="positional encodings to train")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: a shared machine)")
    parser.add_argument("--num-explain", type=int, help="examples explained per model (default 100 full, 24 quick)")
    parser.add_argument("--steps", type=int, help="training steps for every task (cosine decay over them for copy)")
    parser.add_argument("--resume", action="store_true", help="reuse stored runs whose configuration matches")
    parser.add_argument("--report-only", action="store_true", help="train nothing; report the stored runs")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    config = {k: (dict(v) if isinstance(v, dict) else v) for k, v in (QUICK if args.quick else FULL).items()}
    if args.encodings:
        config["encodings"] = list(args.encodings)
    if args.num_explain is not None:
        if args.num_explain < 1:
            parser.error(f"--num-explain must be >= 1, got {args.num_explain}")
        config["num_explain"] = args.num_explain
    if args.steps is not None:
        if args.steps < 1:
            parser.error(f"--steps must be >= 1, got {args.steps}")
        config["steps"] = {t: args.steps for t in TASKS}
        config["decay"] = {t: (args.steps if config["decay"][t] else 0) for t in TASKS}
    config["tasks"] = list(args.tasks)
    config["quick"] = args.quick
    config["fractions"] = FRACTIONS
    out_dir = Path(args.out) / NAME
    runs_dir = out_dir / "runs" / ("quick" if args.quick else "full")  # quick runs never overwrite full ones
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = [(t, e) for t in config["tasks"] for e in config["encodings"]]
    progress = Progress(len(todo), NAME)
    runs = []
    for task, encoding in todo:
        path = runs_dir / f"{task}_{encoding}.json"
        stored = json.loads(path.read_text()) if path.exists() else None
        if stored is not None and (args.report_only or (args.resume and stored["config"] == run_config(config, task))):
            runs.append(stored)
            progress(f"{task} {encoding}: stored run")
            continue
        if args.report_only:
            progress(f"{task} {encoding}: no stored run, skipped")
            continue
        run = run_one(task, encoding, config, out_dir)
        path.write_text(json.dumps(run, indent=1))
        runs.append(run)
        by = {r["method"]: r for r in run["rows"]}
        progress(f"{task} {encoding}: accuracy {run['model']['accuracy']:.2f}, MoRF PA-LRP "
                 f"{by['pa_lrp']['auc_morf']:.3f} vs LRP {by['lrp']['auc_morf']:.3f}")
    if not runs:
        print("no runs to report")
        return 1
    seconds = time.perf_counter() - start
    report(runs, config, seconds, Path(args.out))
    print(f"wrote {out_dir} in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
