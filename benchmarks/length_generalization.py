"""Length generalization of positional encodings on synthetic tasks (Kazemnejad et al. 2023; CoPE counting).

Trains the same ``Transformer`` trunk once per (task, encoder, seed) — only the positional encoding
differs — on the task's training lengths, then decodes greedily (KV cache) on in-distribution and
longer test lengths, and reports exact-match accuracy per length, in/out-of-distribution accuracy,
and the mean reciprocal rank (MRR) of the encoders across tasks, as the paper does.

    python benchmarks/length_generalization.py            # full run (hours on 2 CPU cores)
    python benchmarks/length_generalization.py --quick    # pipeline check, < 2 minutes
    python benchmarks/length_generalization.py --tasks copy_repeat --encoders nope rope --seeds 0 1
    python benchmarks/length_generalization.py --model-size large --tasks copy_repeat   # a 6x larger trunk
    python benchmarks/length_generalization.py --tasks cope_counting --checkpoint-every 50 --resume  # hours

Every finished run is stored in ``results/length_generalization/runs/{quick,full}/``; ``--resume`` reuses those
whose configuration matches instead of training again.

Outputs: ``results.json`` (one row per run with per-length accuracy and how the wrong answers failed),
``report.md`` (tables of OOD accuracy, MRR and failure modes) and ``accuracy_vs_length.png``.
"""

from __future__ import annotations

import concurrent.futures
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    Progress,
    markdown_table,
    note_if_empty,
    quiet,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)

NAME = "length_generalization"
ENCODERS = ["nope", "t5", "alibi", "rope", "sinusoidal", "cope", "fire", "kerple", "bam"]

# Task presets: the paper's splits (train lengths <= 20, test 21..40 for copy/reverse); CoPE counting
# with 3 variables as in Golovneva et al. 2024, whose headline numbers are in-distribution errors on
# programs of 3..512 statements. Programs of 3..32 statements (the earlier preset) were learned by every
# encoder (4-9 % error); 3..128 is a step toward the paper (CoPE then trains at about 5.5 s per step on
# one core: about 3 hours per run);
# contextual counting (Golkar et al. 2024) with an encoder-decoder whose encoder is causal or not.
FULL_TASKS: dict[str, dict[str, Any]] = {
    "copy_repeat": {"train_lengths": [1, 20], "test_lengths": [21, 40]},
    "reverse": {"train_lengths": [1, 20], "test_lengths": [21, 40]},
    "cope_counting": {"num_vars": 3, "train_lengths": [3, 128], "test_lengths": [129, 256]},
    "contextual_counting": {
        "train_lengths": [32, 64],
        "test_lengths": [65, 128],
        "train_regions": [1, 4],
        "test_regions": [1, 4],
    },
}
QUICK_TASKS: dict[str, dict[str, Any]] = {
    "copy_repeat": {"train_lengths": [1, 8], "test_lengths": [9, 16]},
}
# Which model family each task is trained with: a decoder-only LM, or an encoder-decoder whose
# encoder is causal / bidirectional (Golkar et al. compare both on contextual counting).
ARCHITECTURES: dict[str, list[str]] = {"contextual_counting": ["encdec_causal", "encdec_bidirectional"]}
DECODER = "decoder"
# Encoder options of the paper's code (Kazemnejad et al. 2023, custom_t5_decoder_only.py): rotary on the first
# 25 % of each head's dims (rotary_dim = int(0.25 * d_head)); every other encoder with its defaults.
# CoPE: the paper's code defaults to npos = block_size + 1, so contextual positions never clamp inside the
# training context. CONTEXT stands for that: each run sets npos_max to its longest training sequence + 1
# (longer test sequences clamp, as positions past the context would in the paper's model).
CONTEXT = "context"
ENCODING_OPTIONS: dict[str, dict[str, Any]] = {"rope": {"rotary_fraction": 0.25}, "cope": {"npos_max": CONTEXT}}
# Per-task changes to the training preset. Reverse needs longer training than copy to be learned at the
# training lengths at all: at 2,000 steps every encoder measured (T5, APE) ended near loss 3 with IID
# exact match <= 0.10, so its out-of-distribution numbers said nothing.
TASK_TRAINING: dict[str, dict[str, Any]] = {"reverse": {"steps": 10_000}}
FULL_MODEL = {"dim": 128, "num_heads": 4, "num_layers": 4}
# Trunks for full runs (--model-size). "base" is the default; "large" (about 6x the parameters and compute)
# tests whether an encoder's ranking depends on model size: the paper trains a 107M-parameter T5-base
# decoder and reports that its ~2.3M-parameter configuration collapses.
MODEL_SIZES: dict[str, dict[str, int]] = {"base": FULL_MODEL, "large": {"dim": 256, "num_heads": 8, "num_layers": 6}}
QUICK_MODEL = {"dim": 32, "num_heads": 2, "num_layers": 2}
FULL_TRAINING = {"steps": 2000, "batch_size": 32, "lr": 1e-3, "num_train": 50_000, "num_test": 200}
QUICK_TRAINING = {"steps": 600, "batch_size": 32, "lr": 3e-3, "num_train": 5_000, "num_test": 40}


# Spec keys that say how a run is executed, not what it computes: left out of the stored spec, so a
# finished run is reused whatever they were.
RUNTIME_KEYS = ("threads", "print_loss", "checkpoint_every", "checkpoint_dir")


def stored_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` without its runtime keys: what a stored run is matched on."""
    return {k: v for k, v in spec.items() if k not in RUNTIME_KEYS}


def training_preset(task: str, *, quick: bool, steps: int | None = None) -> dict[str, Any]:
    """The training settings of ``task``: the preset, its per-task changes (full runs only), then ``steps``."""
    preset = {**(QUICK_TRAINING if quick else FULL_TRAINING), **({} if quick else TASK_TRAINING.get(task, {}))}
    return preset if steps is None else {**preset, "steps": steps}


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train and test one (task, encoder, seed); runs in a worker process. Returns a result row."""
    import lightning as L
    import torch

    from pe_toolkit.training import EncoderDecoderModule, SequenceLMModule, TaskDataModule
    from pe_toolkit.training.callbacks import FitClock, LossHistory

    quiet()  # in-process calls (tests) too, not only worker_pool's workers
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    L.seed_everything(spec["seed"], verbose=False)
    training = spec["training"]
    architecture = spec.get("architecture", DECODER)
    data = TaskDataModule(
        spec["task"],
        spec["task_options"],
        num_train=training["num_train"],
        num_val=0,
        num_test=training["num_test"],
        batch_size=training["batch_size"],
        seed=spec["seed"],
        layout="causal" if architecture == DECODER else "seq2seq",
    )
    encoding_options = resolve_encoding_options(spec.get("encoding_options"), data)
    steps = training["steps"]
    optimisation = {"lr": training["lr"], "warmup_steps": max(1, steps // 20), "max_steps": steps}
    if architecture == DECODER:
        module = SequenceLMModule(data.vocab_size, encoding=spec["encoding"],
                                  encoding_options=encoding_options, **optimisation, **spec["model"])
    else:
        model = dict(spec["model"])
        layers = model.pop("num_layers")
        module = EncoderDecoderModule(
            data.vocab_size,
            encoding=spec["encoding"],
            encoding_options=encoding_options,
            encoder_layers=max(1, layers - 1),
            decoder_layers=1,
            encoder_causal=architecture == "encdec_causal",
            **optimisation,
            **model,
        )
    trunk = module.model if architecture == DECODER else module
    label = f"{spec['task']} {spec['encoding']} seed {spec['seed']}"
    losses = LossHistory(every_n_steps=max(1, steps // 20), label=label,
                         stream=sys.stderr if spec.get("print_loss") else None)
    clock = FitClock()
    callbacks: list[Any] = [losses, clock]
    resume_from = None
    if spec.get("checkpoint_dir"):
        checkpoint, resume_from = run_checkpoint(spec)
        callbacks.append(checkpoint)
    trainer = L.Trainer(
        max_steps=training["steps"],
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=bool(spec.get("checkpoint_dir")),
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=callbacks,
    )
    trainer.fit(module, data, ckpt_path=resume_from)
    final_loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
    trainer.test(module, data, verbose=False)
    train_low, train_high = data.task.train_lengths
    per_length = {int(k): {"correct": c, "total": t, **failures(module.test_outcomes[k])}
                  for k, (c, t) in sorted(module.test_results.items())}

    def accuracy(selected):
        correct = sum(v["correct"] for k, v in per_length.items() if selected(k))
        total = sum(v["total"] for k, v in per_length.items() if selected(k))
        return correct / total if total else None

    return {
        "task": spec["task"],
        "encoding": spec["encoding"],
        "seed": spec["seed"],
        "iid_accuracy": accuracy(lambda k: train_low <= k <= train_high),
        "ood_accuracy": accuracy(lambda k: k > train_high),
        "per_length": per_length,
        "final_train_loss": final_loss,
        "loss_history": [[step, loss] for step, loss in losses.history],
        "architecture": architecture,
        "encoding_options": encoding_options,
        "parameters": _count(trunk),
        "parameters_without_pe": _count(trunk, exclude_positional=True),
        "train_lengths": list(data.task.train_lengths),
        "test_lengths": list(data.task.test_lengths),
        "seconds": time.perf_counter() - start + clock.resumed_seconds,
        "resumed": resume_from is not None,
        "spec": stored_spec(spec),
    }


def resolve_encoding_options(options: dict[str, Any] | None, data: Any) -> dict[str, Any]:
    """The encoder options of a run, with ``npos_max: "context"`` replaced by the longest training sequence + 1."""
    resolved = dict(options or {})
    if resolved.get("npos_max") == CONTEXT:
        resolved["npos_max"] = data.max_sequence_length(["train"]) + 1
    return resolved


def failures(outcomes: dict[str, int]) -> dict[str, int]:
    """The counts of the ways an answer went wrong (:data:`FAILURES`) from one length's outcome counts."""
    return {name: outcomes[name] for name in FAILURES}


def run_checkpoint(spec: dict[str, Any]) -> tuple[Any, str | None]:
    """The checkpoint callback of a run with ``checkpoint_dir``, and the checkpoint to resume from.

    ``<checkpoint_dir>/last.ckpt`` is rewritten every ``checkpoint_every`` steps; ``spec.json`` beside it
    records the configuration, and a checkpoint of another configuration is deleted, not resumed.
    The training data are a seeded ``ResumableDataLoader``, so a resumed run sees the batches the
    interrupted one would have.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint

    directory = Path(spec["checkpoint_dir"])
    configuration = json.dumps(stored_spec(spec), sort_keys=True)
    spec_file = directory / "spec.json"
    if directory.exists() and not (spec_file.exists() and spec_file.read_text() == configuration):
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(configuration)
    last = directory / "last.ckpt"
    callback = ModelCheckpoint(dirpath=directory, every_n_train_steps=spec["checkpoint_every"], save_top_k=0,
                               save_last=True)
    return callback, (str(last) if last.exists() else None)


def _count(module, exclude_positional: bool = False) -> int:
    from pe_toolkit.nn import Transformer

    if isinstance(module, Transformer):
        return module.num_parameters(exclude_positional=exclude_positional)
    return sum(_count(m, exclude_positional) for m in module.children() if isinstance(m, Transformer))


def task_key(row: dict[str, Any]) -> str:
    """A task, qualified by its architecture when it is not the default decoder-only LM."""
    arch = row.get("architecture", DECODER)
    return row["task"] if arch == DECODER else f"{row['task']} ({arch})"


def mean_reciprocal_rank(rows: list[dict[str, Any]], metric: str = "ood_accuracy") -> dict[str, float]:
    """MRR of each encoder across tasks: rank encoders per task by the seed-mean ``metric``.

    Ties share the best rank (competition ranking), so equal encoders are not ordered by accident.
    """
    by_task: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row[metric] is not None:
            by_task.setdefault(task_key(row), {}).setdefault(row["encoding"], []).append(row[metric])
    reciprocal: dict[str, list[float]] = {}
    for scores in by_task.values():
        means = {enc: sum(v) / len(v) for enc, v in scores.items()}
        for enc, value in means.items():
            rank = 1 + sum(other > value for other in means.values())
            reciprocal.setdefault(enc, []).append(1.0 / rank)
    return {enc: sum(v) / len(v) for enc, v in reciprocal.items()}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seed-mean IID / OOD accuracy per (task, encoder)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((task_key(row), row["encoding"]), []).append(row)
    out = []
    for (task, enc), members in sorted(groups.items()):

        def mean(key, members=members):
            values = [m[key] for m in members if m[key] is not None]
            return sum(values) / len(values) if values else None

        out.append(
            {
                "task": task,
                "encoding": enc,
                "seeds": len(members),
                "iid_accuracy": mean("iid_accuracy"),
                "ood_accuracy": mean("ood_accuracy"),
                "seconds": mean("seconds"),
            }
        )
    return out


# The wrong-answer outcomes of pe_toolkit.training.exact_match.OUTCOMES (all but "correct"), spelled out so
# that this module does not import Lightning in the parent process.
FAILURES = ("stopped_early", "ran_over", "wrong_tokens")


def failure_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, encoder): the share of out-of-distribution answers that stopped early, ran over, or
    had a wrong token, summed over seeds. Runs stored before outcomes were recorded are left out."""
    groups: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        high = row["train_lengths"][1]
        ood = [v for k, v in row["per_length"].items() if int(k) > high]
        if not ood or any(name not in v for v in ood for name in FAILURES):
            continue
        sums = groups.setdefault((task_key(row), row["encoding"]), dict.fromkeys(("total", *FAILURES), 0))
        for v in ood:
            for name in ("total", *FAILURES):
                sums[name] += v[name]
    return [{"task": task, "encoding": enc, "answers": sums["total"],
             **{name: sums[name] / sums["total"] for name in FAILURES}}
            for (task, enc), sums in sorted(groups.items())]


# The papers' numbers the claims are checked against. Kazemnejad et al. 2023, repo means over 3 seeds of
# out-of-distribution exact match (reverse: their ``reverse_x2`` split); Golovneva et al. 2024, Table 3,
# in-distribution test error (%) on counting with 3 variables.
PAPER_OOD_ACCURACY: dict[str, dict[str, float]] = {
    "copy_repeat": {"nope": 0.986, "t5": 0.771, "alibi": 0.289, "rope": 0.000, "sinusoidal": 0.000},
    "reverse": {"nope": 0.473, "t5": 0.448, "alibi": 0.195, "rope": 0.053, "sinusoidal": 0.011},
}
PAPER_COUNTING_ERROR: dict[str, float] = {"cope": 1.2, "t5": 17.8, "sinusoidal": 67.6}
LEARNED_IID = 0.9  # in-distribution exact match below this: the task was not learned, OOD says nothing


def seeds_text(count: int) -> str:
    """``"1 seed"``, ``"3 seeds"``."""
    return f"{count} seed" if count == 1 else f"{count} seeds"


def claims(summary: list[dict[str, Any]]) -> list[str]:
    """The papers' claims checked against the seed means of ``summarize``, each with its numbers.

    Copy and reverse: NoPE and T5 both above ALiBi, RoPE and APE out of distribution. CoPE counting:
    CoPE's in-distribution error below T5's (relative) and APE's (absolute).
    """
    by = {(r["task"], r["encoding"]): r for r in summary}
    lines = []
    for task, paper in PAPER_OOD_ACCURACY.items():
        missing = [e for e in paper if (task, e) not in by]
        if missing:
            lines.append(f"- {task}: NoPE and T5 above ALiBi, RoPE and APE: not measured (no runs of {missing}).")
            continue
        ood = {e: by[(task, e)]["ood_accuracy"] for e in paper}
        verdict = "holds" if min(ood["nope"], ood["t5"]) > max(ood["alibi"], ood["rope"], ood["sinusoidal"]) else (
            "does not hold")
        shown = ", ".join(f"{e} {ood[e]:.3f} (paper {paper[e]:.3f}, {seeds_text(by[(task, e)]['seeds'])})"
                          for e in paper)
        unlearned = [e for e in paper if by[(task, e)]["iid_accuracy"] < LEARNED_IID]
        note = (f" Not learned in distribution (IID < {LEARNED_IID}) by {unlearned}: their OOD numbers say nothing."
                if unlearned else "")
        lines.append(f"- {task}: NoPE and T5 above ALiBi, RoPE and APE out of distribution ({shown}): "
                     f"**{verdict}** here.{note}")
    missing = [e for e in PAPER_COUNTING_ERROR if ("cope_counting", e) not in by]
    if missing:
        lines.append(f"- cope_counting: CoPE's error below T5's and APE's: not measured (no runs of {missing}).")
    else:
        error = {e: 100 * (1 - by[("cope_counting", e)]["iid_accuracy"]) for e in PAPER_COUNTING_ERROR}
        verdict = "holds" if error["cope"] < min(error["t5"], error["sinusoidal"]) else "does not hold"
        shown = ", ".join(
            f"{e} {error[e]:.1f} % (paper {PAPER_COUNTING_ERROR[e]} %, {seeds_text(by[('cope_counting', e)]['seeds'])})"
            for e in PAPER_COUNTING_ERROR)
        lines.append(f"- cope_counting: CoPE's in-distribution error below T5's and APE's ({shown}): "
                     f"**{verdict}** here.")
    return lines


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({task_key(r) for r in rows})
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.5 * len(tasks), 4), squeeze=False)
    filled = []
    for ax, task in zip(axes[0], tasks):
        task_rows = [r for r in rows if task_key(r) == task]
        encodings = sorted({r["encoding"] for r in task_rows})
        for enc in encodings:
            members = [r for r in task_rows if r["encoding"] == enc]
            lengths = sorted({int(k) for m in members for k in m["per_length"]})
            accuracy = []
            for k in lengths:
                counts = [m["per_length"][k] for m in members if k in m["per_length"]]
                total = sum(c["total"] for c in counts)
                accuracy.append(sum(c["correct"] for c in counts) / total if total else float("nan"))
            ax.plot(lengths, accuracy, marker=".", label=enc)
        high = task_rows[0]["train_lengths"][1]
        ax.axvline(high + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.set_title(f"{task} (train lengths <= {high})")
        ax.set_xlabel("length")
        ax.set_ylabel("exact-match accuracy")
        ax.set_ylim(-0.02, 1.02)
        if not note_if_empty(ax, "exact-match accuracy"):
            filled.append(ax)
    if filled:
        filled[-1].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", help="subset of the preset tasks")
    parser.add_argument("--encoders", nargs="+", default=ENCODERS)
    parser.add_argument("--seeds", nargs="+", type=int, help="default: 0 1 2 (full), 0 (quick)")
    parser.add_argument("--steps", type=int, help="training steps per run (overrides the preset)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each (default 2)")
    parser.add_argument(
        "--threads", type=int,
        help="torch threads per run (default: 1 with --jobs > 1, else 2). Use 1 when another benchmark shares "
        "the CPUs: two multi-threaded processes on the same cores stall each other in OpenMP barriers",
    )
    parser.add_argument(
        "--embedding-scale", choices=["vaswani", "gpt2"], default="vaswani",
        help="token embeddings: 'vaswani' (N(0, 1/dim) times sqrt(dim), unit scale like a sinusoidal PE; "
        "default) or 'gpt2' (N(0, 0.02), under which an additive sinusoidal PE drowns the tokens)",
    )
    parser.add_argument(
        "--model-size", choices=sorted(MODEL_SIZES),
        help="trunk of a full run (default 'base'); runs and report of another size go to "
        f"{NAME}_<size>/. Quick runs always use the small quick trunk",
    )
    parser.add_argument(
        "--dropout", type=float, default=0.0,
        help="attention, residual and MLP dropout of the trunk (default 0; the paper trains with 0.1); "
        f"runs and report with dropout go to {NAME}[_<size>]_dropout<p>/",
    )
    parser.add_argument(
        "--checkpoint-every", type=int, metavar="STEPS",
        help="save each run every STEPS training steps under runs/.../checkpoints/<run>/; an interrupted run "
        "restarted with --resume continues from its last checkpoint (for runs longer than a session)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="reuse finished runs with the same configuration"
    )
    parser.add_argument(
        "--report-only", action="store_true",
        help="train nothing: write the report from the finished runs found (implies --resume)",
    )
    args = parser.parse_args(argv)
    args.resume = args.resume or args.report_only

    presets = QUICK_TASKS if args.quick else FULL_TASKS
    tasks = args.tasks or list(presets)
    unknown = [t for t in tasks if t not in presets]
    if unknown:
        parser.error(f"unknown task(s) {unknown}; available: {sorted(presets)}")
    import pe_toolkit as pet

    bad = [e for e in args.encoders if e not in pet.list_encoders()]
    if bad:
        parser.error(f"unknown encoder(s) {bad}; available: {pet.list_encoders()}")
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    if args.quick and args.model_size is not None:
        parser.error(f"--model-size {args.model_size}: quick runs always use the quick trunk {QUICK_MODEL}")
    if not 0.0 <= args.dropout < 1.0:
        parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
    size = args.model_size or "base"
    # a variant of the trunk keeps its runs and report apart: length_generalization_large_dropout0.1/
    name = NAME + ("" if size == "base" else f"_{size}") + (f"_dropout{args.dropout:g}" if args.dropout else "")
    trunk = QUICK_MODEL if args.quick else MODEL_SIZES[size]
    # dropout enters the spec only when set, so runs stored before the option existed still match
    model = {**trunk, "scale_embeddings": args.embedding_scale == "vaswani",
             **({"dropout": args.dropout} if args.dropout else {})}
    training = dict(QUICK_TRAINING if args.quick else FULL_TRAINING)

    def training_for(task: str) -> dict[str, Any]:
        return training_preset(task, quick=args.quick, steps=args.steps)
    jobs = max(1, args.jobs)
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    threads = args.threads or (1 if jobs > 1 else 2)
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        parser.error(f"--checkpoint-every must be >= 1 step, got {args.checkpoint_every}")

    out_dir = Path(args.out) / name
    runs_dir = out_dir / "runs" / ("quick" if args.quick else "full")  # quick runs never overwrite full ones
    runs_dir.mkdir(parents=True, exist_ok=True)
    specs = [
        {
            "task": t,
            "task_options": presets[t],
            "encoding": e,
            **({"encoding_options": ENCODING_OPTIONS[e]} if e in ENCODING_OPTIONS else {}),
            "seed": s,
            "model": model,
            "training": training_for(t),
            "threads": threads,
            "print_loss": not args.quick,  # quick runs take seconds: no loss lines
            **({} if arch == DECODER else {"architecture": arch}),
        }
        for t in tasks
        for arch in ARCHITECTURES.get(t, [DECODER])
        for e in args.encoders
        for s in seeds
        if not (e == "cope" and arch == "encdec_bidirectional")  # CoPE is defined for causal attention only
    ]
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    todo = []
    for spec in specs:
        arch = "" if spec.get("architecture", DECODER) == DECODER else f"__{spec['architecture']}"
        scale = "" if spec["model"]["scale_embeddings"] else "__gpt2emb"
        path = runs_dir / f"{spec['task']}{arch}__{spec['encoding']}{scale}__seed{spec['seed']}.json"
        if args.resume and path.exists():
            stored = json.loads(path.read_text())
            stored["per_length"] = {int(k): v for k, v in stored["per_length"].items()}  # JSON keys are str
            if stored.get("spec") == stored_spec(spec):
                rows.append(stored)
                continue
        if args.checkpoint_every is not None:
            checkpoints = runs_dir / "checkpoints" / path.stem
            if not args.resume:
                shutil.rmtree(checkpoints, ignore_errors=True)  # a fresh run: never continue an old one
            spec = {**spec, "checkpoint_every": args.checkpoint_every, "checkpoint_dir": str(checkpoints)}
        todo.append((spec, path))
    if args.report_only:
        missing = [path.name for _, path in todo]
        print(f"{name}: --report-only: {len(rows)} finished runs; not run: {missing}", flush=True)
        if not rows:
            parser.error("--report-only: no finished runs to report")
        todo = []
    print(f"{name}: {len(specs)} runs ({len(rows)} reused), {jobs} in parallel", flush=True)
    progress = Progress(len(todo), name)
    with worker_pool(jobs) as pool:
        futures = {pool.submit(run_one, spec): (spec, path) for spec, path in todo}
        for future in concurrent.futures.as_completed(futures):
            spec, path = futures[future]
            row = future.result()
            path.write_text(json.dumps(row, indent=1) + "\n")
            if spec.get("checkpoint_dir"):
                shutil.rmtree(spec["checkpoint_dir"], ignore_errors=True)  # the stored row is the record now
            rows.append(row)
            ood = "n/a" if row["ood_accuracy"] is None else f"{row['ood_accuracy']:.3f}"
            progress(
                f"{task_key(row)} {spec['encoding']} seed {spec['seed']}: iid {row['iid_accuracy']:.3f} "
                f"ood {ood} ({row['seconds']:.0f}s)"
            )
    rows.sort(key=lambda r: (task_key(r), r["encoding"], r["seed"]))
    seconds = time.perf_counter() - start

    config = {
        "quick": args.quick,
        "tasks": {t: presets[t] for t in tasks},
        "encoders": args.encoders,
        "seeds": seeds,
        "model": model,
        "training": {t: training_for(t) for t in tasks},
        "jobs": jobs,
    }
    run_seconds = sum(r["seconds"] for r in rows)
    if args.report_only:
        timing = (f"\nAssembled with --report-only from {len(rows)} stored runs, which took {run_seconds:.0f} s of "
                  "worker time when they ran.\n")
    else:
        timing = f"\nTotal wall time {seconds:.0f} s ({run_seconds:.0f} s of worker time).\n"
    write_results(name, config, rows, seconds, root=args.out)
    plot(rows, out_dir / "accuracy_vs_length.png")
    mrr = mean_reciprocal_rank(rows)
    summary = summarize(rows)
    failing = failure_summary(rows)
    steps_by_task = {t: training_for(t)["steps"] for t in tasks}
    steps_text = f"{steps_by_task[tasks[0]]} steps" if len(set(steps_by_task.values())) == 1 else (
        "steps per task " + ", ".join(f"{t} {n}" for t, n in steps_by_task.items()))
    body = (
        f"Model: {model} (same trunk for every encoder; {rows[0]['parameters_without_pe']:,} parameters without "
        f"the PE), {steps_text} of batch {training['batch_size']}, AdamW lr {training['lr']}; "
        f"seeds {seeds}. Encoder options: {ENCODING_OPTIONS} (as the papers' code; "
        f"{CONTEXT!r} = the run's longest training sequence + 1; the rest use their "
        "defaults). Accuracy is exact match of greedy decoding; IID = training lengths, OOD = longer.\n\n"
        "## Accuracy per task and encoder (mean over seeds)\n\n"
        + markdown_table(
            summary,
            [
                "task",
                "encoding",
                "seeds",
                ("iid_accuracy", "IID acc"),
                ("ood_accuracy", "OOD acc"),
                ("seconds", "s / run"),
            ],
            {"iid_accuracy": ".3f", "ood_accuracy": ".3f", "seconds": ".0f"},
        )
        + "\n## Mean reciprocal rank across tasks (by OOD accuracy)\n\n"
        "Each encoder is ranked only on the tasks it has runs for: compare MRRs over the same tasks.\n\n"
        + markdown_table(
            sorted(({"encoding": k, "mrr": v, "tasks": sum(r["encoding"] == k for r in summary)}
                    for k, v in mrr.items()), key=lambda r: -r["mrr"]),
            ["encoding", ("mrr", "MRR"), ("tasks", "tasks ranked on")],
            {"mrr": ".3f"},
        )
        + "\n## How out-of-distribution answers fail\n\nShares of the OOD answers, over the runs that recorded "
        "how their answers failed (runs stored before this was recorded are left out).\n\n"
        + (markdown_table(failing, ["task", "encoding", ("answers", "OOD answers"),
                                                   ("stopped_early", "stopped early"), ("ran_over", "ran over"),
                                                   ("wrong_tokens", "wrong token")],
                          {name: ".3f" for name in FAILURES})
           if failing else "No run recorded its answers' outcomes.\n")
        + "\n## Against the papers' claims (measured here)\n\n" + "\n".join(claims(summary)) + "\n"
        + "\n![accuracy vs length](accuracy_vs_length.png)\n"
        + timing
    )
    write_report(name, "Length generalization of positional encodings", body, root=args.out)
    print(f"{name}: wrote {out_dir} in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
