"""Structure-informed PEs on Bach chorales: next-step prediction and accompaniment, every encoder, several seeds.

Agarwal, Wang, Richard 2024 ("Structure-informed Positional Encoding for Music Generation", arXiv:2402.13301)
claim that structure-informed PEs (S-APE, S-RPE, NS-RPE) improve melodic and structural consistency over
APE / NoPE. This benchmark trains the same small causal Transformer with each encoding on the four-part
chorales of the music21 corpus (16th grid, split by chorale) and measures, on held-out chorales:

* teacher-forced test NLL (nats per step, summed over the cells of a step) and frame-level F1 at p = 0.5;
* generation: ``next_step`` continues the first bar of each test window to the window's end (greedy
  per-voice decoding, KV cache); ``accompaniment`` generates alto, tenor and bass under the given soprano.
  Against the reference (the generated part only): frame F1, note-density distance (lower is better),
  chroma similarity (higher), grooving similarity (higher), SSM distance (lower)
  (:mod:`pe_toolkit.domains.music.metrics`).

Structure-informed encoders receive the score's structure labels of the whole window (melody, chord,
phrase, beat; the chord labels come from the reference harmony, as the paper's chord annotations do), so in
the accompaniment task they see the root and quality of the chord they must voice; the baselines see only
time. Every generated sequence and its reference are written as ``.mid`` files, and PNGs show generated
piano rolls next to the reference.

    python benchmarks/music.py --quick      # < 2 minutes: a corpus subset, tiny model, one seed
    python benchmarks/music.py              # full: all chorales, 3 seeds (sized for ~20-40 min on one free core)

Outputs in ``<out>/music/``: ``results.json`` (one row per task x encoder x seed), ``report.md``,
``metrics.png``, ``rolls_<task>.png``, ``midi/<task>/<encoder>_seed<k>_<n>.mid`` and ``midi/<task>/reference_<n>.mid``.
Runs go seed by seed (every task and encoder with the first seed, then the next seed), and each finished run is
stored in ``runs/`` (its row and its first generated / reference roll): ``--resume`` reuses those with the same
configuration, ``--report-only`` trains nothing and reports what is stored.
"""

from __future__ import annotations

import json
import statistics
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

NAME = "music"
TASKS = ("next_step", "accompaniment")
STRUCTURED = ("s_ape", "s_rpe", "ns_rpe")
BASELINES = ("sinusoidal", "nope")
ENCODINGS: dict[str, dict[str, Any]] = {
    "s_ape": {"structures": ("melody", "beat", "chord", "phrase")},
    "s_rpe": {"structures": ("melody", "chord", "phrase")},
    "ns_rpe": {"structures": ("chord", "phrase"), "segments": ("chord", "phrase")},
    "music_relative": {"max_distance": 256},
    "sinusoidal": {},
    "rope": {},
    "nope": {},
}
# Ablation: the structure-informed encoders without the chord labels (which, taken from the reference, tell the
# model the root and quality of the harmony it must produce): only melody, beat and phrase structure.
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "s_ape-nochord": ("s_ape", {"structures": ("melody", "beat", "phrase")}),
    "s_rpe-nochord": ("s_rpe", {"structures": ("melody", "beat", "phrase")}),
    "ns_rpe-nochord": ("ns_rpe", {"structures": ("beat", "phrase"), "segments": ("phrase",)}),
}
GEN_METRICS = ("gen_f1", "note_density_distance", "chroma_similarity", "grooving_similarity", "ssm_distance")
LOWER_IS_BETTER = {"test_nll", "note_density_distance", "ssm_distance"}

QUICK = {"limit": 40, "length": 64, "stride": 32, "dim": 32, "heads": 4, "layers": 2, "batch_size": 16,
         "steps": 80, "lr": 3e-3, "seeds": [0], "gen_windows": 8, "prompt": 16}
FULL = {"limit": None, "length": 64, "stride": 32, "dim": 64, "heads": 4, "layers": 2, "batch_size": 16,
        "steps": 250, "lr": 3e-3, "seeds": [0, 1, 2], "gen_windows": 16, "prompt": 16}


def evaluate_generation(model, task: str, batch: dict, prompt: int) -> tuple[Any, Any, dict[str, float]]:
    """Generate for a batch of test windows; return (generated, reference) rolls of the generated part and metrics."""
    import torch

    from pe_toolkit.domains.music import metrics
    from pe_toolkit.domains.music.models import generate_accompaniment, generate_continuation

    voices = model.config.voices
    structure = batch["structure"]
    if task == "next_step":
        # window steps 0..L: inputs hold steps 0..L-1, targets steps 1..L
        full = torch.cat([batch["inputs"][:, :1], batch["targets"]], dim=1).view(structure.shape[0], -1, voices, 128)
        steps = full.shape[1] - prompt
        out = generate_continuation(model, full[:, :prompt], structure, steps)
        generated, reference = out[:, prompt:], full[:, prompt:]
    else:
        melody = batch["inputs"][..., :128]
        lower = batch["targets"].view(structure.shape[0], -1, voices - 1, 128)
        out = generate_accompaniment(model, melody, structure)
        generated, reference = out[:, :, 1:], lower
    values = {
        "gen_f1": metrics.frame_f1(generated, reference),
        "note_density_distance": metrics.note_density_distance(generated, reference),
        "chroma_similarity": metrics.chroma_similarity(generated, reference),
        "grooving_similarity": metrics.grooving_similarity(generated, reference),
        "ssm_distance": metrics.ssm_distance(generated, reference),
    }
    return out, generated, {k: float(v.mean()) for k, v in values.items()}


def run_one(task: str, encoding: str, seed: int, splits, hp: dict[str, Any], midi_dir: Path) -> tuple[dict, Any, Any]:
    """Train one model, test it, generate; returns (row, first generated roll, first reference roll)."""
    import lightning as L
    import torch

    from pe_toolkit.domains.music.lightning_module import ChoraleDataModule, PianoRollModule
    from pe_toolkit.domains.music.midi import roll_to_midi
    from pe_toolkit.domains.music.models import MusicModelConfig

    start = time.perf_counter()
    L.seed_everything(seed, verbose=False)
    data = ChoraleDataModule(splits, task=task, length=hp["length"], stride=hp["stride"], batch_size=hp["batch_size"])
    name, options = VARIANTS.get(encoding, (encoding, ENCODINGS.get(encoding)))
    config = MusicModelConfig(task=task, encoding=name, encoding_options=dict(options),
                              dim=hp["dim"], num_heads=hp["heads"], num_layers=hp["layers"], dropout=0.1)
    module = PianoRollModule(config, lr=hp["lr"], warmup_steps=max(1, hp["steps"] // 10), max_steps=hp["steps"])
    trainer = L.Trainer(max_steps=hp["steps"], accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(module, data)
    train_seconds = time.perf_counter() - start
    test = trainer.test(module, data, verbose=False)[0]
    model = module.model.eval()
    windows = [data.test_set[i] for i in range(min(hp["gen_windows"], len(data.test_set)))]
    batch = {k: torch.stack([w[k] for w in windows]) for k in windows[0]}
    out, _, gen = evaluate_generation(model, task, batch, hp["prompt"])
    reference = (torch.cat([batch["inputs"][:, :1], batch["targets"]], dim=1).view(len(windows), -1, 4, 128)
                 if task == "next_step" else
                 torch.cat([batch["inputs"][..., :128].unsqueeze(2), batch["targets"].view(len(windows), -1, 3, 128)],
                           dim=2))
    task_dir = midi_dir / task
    task_dir.mkdir(parents=True, exist_ok=True)
    for n in range(min(2, len(windows))):
        labels = windows[n]["labels"]
        roll_to_midi(out[n].bool(), task_dir / f"{encoding}_seed{seed}_{n}.mid", labels=labels)
        if not (task_dir / f"reference_{n}.mid").exists():
            roll_to_midi(reference[n].bool(), task_dir / f"reference_{n}.mid", labels=labels)
    row = {
        "task": task, "encoding": encoding, "seed": seed,
        "structure_informed": encoding in STRUCTURED or encoding in VARIANTS,
        "test_nll": float(test["test/nll"]), "test_f1": float(test["test/f1"]),
        **gen,
        "parameters": sum(p.numel() for p in model.parameters()),
        "positional_parameters": sum(p.numel() for p in model.trunk.encodings.parameters()),
        "train_windows": len(data.train_set), "test_windows": len(data.test_set),
        "generated_windows": len(windows),
        "train_seconds": train_seconds, "seconds": time.perf_counter() - start,
    }
    return row, out[0], reference[0]


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean and (sample) std over seeds per (task, encoding)."""
    keys = ("test_nll", "test_f1", *GEN_METRICS)
    out = []
    for task in TASKS:
        for enc in [*ENCODINGS, *VARIANTS]:
            group = [r for r in rows if r["task"] == task and r["encoding"] == enc]
            if not group:
                continue
            summary: dict[str, Any] = {"task": task, "encoding": enc, "seeds": len(group)}
            for k in keys:
                values = [r[k] for r in group]
                summary[k] = statistics.fmean(values)
                summary[f"{k}_std"] = statistics.stdev(values) if len(values) > 1 else None
            out.append(summary)
    return out


def claim_check(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task and metric: best structure-informed encoder vs best of APE (sinusoidal) / NoPE."""
    lines = []
    for task in TASKS:
        by_enc = {r["encoding"]: r for r in summary if r["task"] == task}
        if not all(e in by_enc for e in (*STRUCTURED, *BASELINES)):
            continue
        for metric in ("test_nll", *GEN_METRICS):
            lower = metric in LOWER_IS_BETTER
            pick = min if lower else max
            s_enc = pick(STRUCTURED, key=lambda e: by_enc[e][metric])
            b_enc = pick(BASELINES, key=lambda e: by_enc[e][metric])
            s_val, b_val = by_enc[s_enc][metric], by_enc[b_enc][metric]
            better = s_val < b_val if lower else s_val > b_val
            all_better = all((by_enc[e][metric] < b_val) if lower else (by_enc[e][metric] > b_val) for e in STRUCTURED)
            lines.append({"task": task, "metric": metric + (" (lower better)" if lower else " (higher better)"),
                          "best_structured": f"{s_enc} {s_val:.3f}", "best_ape_nope": f"{b_enc} {b_val:.3f}",
                          "structured_better": "yes" if better else "no",
                          "all_three_better": "yes" if all_better else "no"})
    return lines


def plot_metrics(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ("test_nll", "gen_f1", "chroma_similarity", "ssm_distance", "grooving_similarity",
               "note_density_distance")
    fig, axes = plt.subplots(len(TASKS), len(metrics), figsize=(3.2 * len(metrics), 3.4 * len(TASKS)), squeeze=False)
    for i, task in enumerate(TASKS):
        rows = [r for r in summary if r["task"] == task]
        for j, metric in enumerate(metrics):
            ax = axes[i][j]
            names = [r["encoding"] for r in rows]
            values = [nan_if_missing(r[metric]) for r in rows]
            errors = [r[f"{metric}_std"] or 0.0 for r in rows]
            colors = ["tab:orange" if n in STRUCTURED else "tab:olive" if n in VARIANTS else "tab:blue" for n in names]
            ax.bar(range(len(names)), values, yerr=errors, color=colors, capsize=2)
            note_if_empty(ax, metric)
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=60, fontsize=7)
            ax.set_title(f"{task}: {metric}" + (" (lower)" if metric in LOWER_IS_BETTER else ""), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_rolls(rolls: dict[str, Any], reference, task: str, path: Path) -> None:
    """Reference and generated rolls of the first test window, voices in colours, one panel per encoder."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    panels = [("reference", reference), *rolls.items()]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.7 * len(panels)), sharex=True)
    colors = np.array([[0.85, 0.1, 0.1], [0.1, 0.6, 0.1], [0.1, 0.3, 0.9], [0.5, 0.2, 0.6]])
    for ax, (name, roll) in zip(axes, panels):
        r = roll.numpy() > 0.5  # (T, V, 128)
        image = np.ones((128, r.shape[0], 3))
        for v in range(r.shape[1]):
            image[r[:, v].T] = colors[v % len(colors)]
        lo = max(0, int(np.nonzero(r.any((0, 1)))[0].min()) - 2) if r.any() else 36
        hi = min(127, int(np.nonzero(r.any((0, 1)))[0].max()) + 2) if r.any() else 84
        ax.imshow(image[lo:hi + 1], origin="lower", aspect="auto", extent=(0, r.shape[0], lo, hi + 1),
                  interpolation="nearest")
        note_if_empty(ax, "the piano roll")
        ax.set_ylabel(name, fontsize=8)
        for x in range(0, r.shape[0], 16):
            ax.axvline(x, color="0.8", linewidth=0.5)
    axes[-1].set_xlabel("16th-note steps")
    fig.suptitle(f"{task}: first test window (soprano red, alto green, tenor blue, bass purple)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--encodings", nargs="+", choices=[*ENCODINGS, *VARIANTS], default=list(ENCODINGS),
                        help="default: every encoding; the *-nochord ablations run only when named")
    parser.add_argument("--seeds", nargs="+", type=int, help="training seeds (default 0 1 full, 0 quick)")
    parser.add_argument("--steps", type=int, help="optimiser steps per run (overrides the preset)")
    parser.add_argument("--limit", type=int, help="use only the first N corpus files (default all; quick 40)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    parser.add_argument("--report-only", action="store_true", help="train nothing; report the stored runs")
    args = parser.parse_args(argv)
    args.resume = args.resume or args.report_only
    import torch

    from pe_toolkit.domains.music.scores import load_bach_chorales

    torch.set_num_threads(args.threads)
    hp = dict(QUICK if args.quick else FULL)
    if args.seeds:
        hp["seeds"] = args.seeds
    if args.steps:
        hp["steps"] = args.steps
    if args.limit:
        hp["limit"] = args.limit
    out_dir = Path(args.out) / NAME
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    corpus = load_bach_chorales(limit=hp["limit"], progress=True)
    splits = corpus.split((0.8, 0.1, 0.1), seed=0)
    print(f"{NAME}: {len(corpus.pieces)} chorales ({len(corpus.skipped)} files skipped), split "
          f"{[len(s) for s in splits]}", flush=True)

    runs = [(t, e, s) for s in hp["seeds"] for t in args.tasks for e in args.encodings]  # seed-major
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    run_config = {k: v for k, v in hp.items() if k != "seeds"}
    progress = Progress(len(runs), f"{NAME}")
    rows, examples, references = [], {t: {} for t in TASKS}, {}
    for task, encoding, seed in runs:
        stem = runs_dir / f"{task}__{encoding}__seed{seed}"
        stored = None
        if args.resume and stem.with_suffix(".json").exists():
            stored = json.loads(stem.with_suffix(".json").read_text())
            if stored.get("run_config") != json.loads(json.dumps(run_config)):
                stored = None
        if stored is None and args.report_only:
            continue
        if stored is None:
            row, generated, reference = run_one(task, encoding, seed, splits, hp, out_dir / "midi")
            row["run_config"] = run_config
            stem.with_suffix(".json").write_text(json.dumps(row, indent=1) + "\n")
            torch.save({"generated": generated.bool(), "reference": reference.bool()}, stem.with_suffix(".pt"))
            label = "trained"
        else:
            row = stored
            saved = torch.load(stem.with_suffix(".pt"), weights_only=True)
            generated, reference = saved["generated"].float(), saved["reference"].float()
            label = "reused"
        rows.append(row)
        if seed == hp["seeds"][0]:
            examples[task][encoding] = generated
            references[task] = reference
        progress(f"{task} {encoding} seed {seed} ({label}): nll {row['test_nll']:.2f} ssm {row['ssm_distance']:.2f} "
                 f"chroma {row['chroma_similarity']:.1f} ({row['seconds']:.0f}s)")
    if not rows:
        print(f"{NAME}: no finished runs to report", flush=True)
        return 1
    seconds = time.perf_counter() - start

    summary = summarize(rows)
    checks = claim_check(summary)
    plot_metrics(summary, out_dir / "metrics.png")
    for task in args.tasks:
        if examples[task]:
            plot_rolls(examples[task], references[task], task, out_dir / f"rolls_{task}.png")
    seeds_done = sorted({r["seed"] for r in rows})
    config = {"quick": args.quick, "tasks": args.tasks, "seeds_finished": seeds_done, "runs_finished": len(rows),
              "runs_planned": len(runs),
              "encodings": {e: VARIANTS.get(e, (e, ENCODINGS.get(e))) for e in args.encodings},
              **hp, "chorales": len(corpus.pieces), "skipped_files": len(corpus.skipped),
              "split_chorales": [len(s) for s in splits], "threads": args.threads}
    write_results(NAME, config, rows, seconds, root=args.out)

    fmt = {k: ".3f" for k in ("test_nll", "test_f1", *GEN_METRICS)}
    fmt.update({f"{k}_std": ".3f" for k in ("test_nll", "test_f1", *GEN_METRICS)})
    columns = ["task", "encoding", "seeds", ("test_nll", "NLL/step"), ("test_nll_std", "±"), ("test_f1", "F1 (tf)"),
               ("gen_f1", "F1 (gen)"), ("note_density_distance", "ND dist ↓"), ("chroma_similarity", "chroma ↑"),
               ("chroma_similarity_std", "±"), ("grooving_similarity", "groove ↑"), ("ssm_distance", "SSM dist ↓"),
               ("ssm_distance_std", "±")]
    body = [
        f"{len(corpus.pieces)} four-part chorales from the music21 corpus ({len(corpus.skipped)} files skipped: not "
        f"four parts or unparsable), split by chorale {[len(s) for s in splits]} (train / val / test). Windows of "
        f"{hp['length']} 16th steps (stride {hp['stride']} in training). Model: causal Transformer, dim {hp['dim']}, "
        f"{hp['heads']} heads, {hp['layers']} layers, {hp['steps']} AdamW steps (lr {hp['lr']}, warmup + cosine), "
        f"batch {hp['batch_size']}; seeds planned {hp['seeds']}, runs finished {len(rows)} of {len(runs)} (a task x "
        "encoder row lists its own number of seeds). Generation on the first {hp['gen_windows']} test windows "
        f"(greedy per-voice decoding with the KV cache; next_step continues from the first {hp['prompt']} steps). "
        "Mean over seeds, ± = sample std (blank with one seed). NLL: nats per step, teacher-forced; F1 (tf): "
        "teacher-forced frame F1 at p = 0.5; the other columns compare the generated part with the reference.\n",
        "\n## Results\n\n" + markdown_table(summary, columns, fmt),
        "\n![metrics](metrics.png)\n",
        "\n## Paper claim: structure-informed PEs vs APE (sinusoidal) / NoPE\n\n"
        "Best of S-APE / S-RPE / NS-RPE against the best of sinusoidal APE / NoPE, per metric (means over seeds; "
        "differences smaller than the ± columns above are not meaningful).\n\n"
        + (markdown_table(checks, ["task", "metric", "best_structured", "best_ape_nope", "structured_better",
                                   "all_three_better"]) if checks else "Not all encoders were run.\n"),
        "\nAblation rows `*-nochord` (when run): the same encoders with the melody, beat and phrase structure only "
        "(NS-RPE: phrase segments), no chord labels.\n"
        "\nCaveat: the structure-informed encoders see the chord labels of the reference (root and quality per "
        "step), the phrase and beat structure and the melody; the baselines see only time. In the accompaniment "
        "task the chord labels describe exactly the harmony to be generated.\n",
    ]
    for task in [t for t in args.tasks if examples[t]]:
        body.append(f"\n## Generated piano rolls, {task}\n\n![{task}](rolls_{task}.png)\n\nMIDI files: "
                    f"`midi/{task}/` (`reference_<n>.mid` and `<encoding>_seed<k>_<n>.mid`).\n")
    write_report(NAME, "Music: structure-informed positional encodings on Bach chorales", "".join(body), root=args.out)
    print(f"{NAME}: done in {seconds:.0f}s -> {out_dir}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
