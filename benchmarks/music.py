"""Structure-informed PEs on Bach chorales: next-step prediction and accompaniment, tuned alike, seeds with intervals.

Agarwal, Wang, Richard 2024 ("Structure-informed Positional Encoding for Music Generation", arXiv:2402.13301)
claim that structure-informed PEs (S-APE, S-RPE, NS-RPE) improve melodic and structural consistency over
APE / NoPE. This benchmark trains the same small causal Transformer with each encoding on the four-part
chorales of the music21 corpus (16th grid with note onsets, split by chorale; or a user's folder of MIDI
files, ``--set data.midi_folder=DIR``) and measures, on held-out pieces:

* teacher-forced test NLL (nats per step, summed over the sounding and onset cells of a step) and frame F1;
* generation: ``next_step`` continues the first ``prompt`` steps of each test window to the window's end
  (greedy per-voice decoding, KV cache); ``accompaniment`` generates alto, tenor and bass under the given
  soprano. Against the reference (the generated part only): frame F1, note-density distance (lower is
  better), chroma similarity (higher), grooving similarity (higher), SSM distance (lower), and the notes
  per generated voice (a drone has 1).

The fairness rule (``docs/benchmarks.md``), as applied here:

1. Every encoding, oracle rows included, gets the same learning-rate grid (``tuning.lrs``), trained with the
   tuning seed and selected by the teacher-forced NLL on the validation chorales; the other seeds train at
   the selected rate. Nothing else is tuned.
2. Generation sees only what a composer (next step) or an accompanist (accompaniment) has: meter (bar,
   beat) and the score's phrase boundaries (fermatas); for accompaniment also the given melody and chords
   inferred from it alone (``melody_chord``, :func:`pe_toolkit.domains.music.structure.melody_chords`).
   The next-step model never receives ``melody`` (the reference soprano it predicts) nor chord labels (the
   harmony of the voices it predicts). Rows named ``*-oracle`` receive the reference ``melody`` / ``chord``
   labels and are reported only as labelled upper bounds, never in a verdict.
3. Seeds ``seeds`` (>= 3 in the full and gpu presets); tables show the mean and 95 % Student-t interval.
4. Verdicts compare intervals (``interval_verdict``): better / worse only when they do not overlap.

    python benchmarks/music.py --quick            # < 2 minutes: a corpus subset, tiny model, pipeline check
    python benchmarks/music.py --jobs 2           # full CPU preset (see benchmarks/presets/music/full.yaml)
    python benchmarks/music.py --preset gpu --accelerator cuda --jobs 8

Outputs in ``<out>/music/``: ``results.json`` (one row per task x encoding x learning rate x seed),
``report.md``, ``metrics.png``, ``rolls_<task>.png``, ``midi/<task>/<encoding>_seed<k>_<n>.mid`` and
``midi/<task>/reference_<n>.mid``. Finished runs are stored in ``runs/<preset>/`` (``RunStore``):
``--resume`` reuses those whose specification (every option that changes the numbers, device included) is
equal; ``--report-only`` trains nothing and reports what is stored.
"""

from __future__ import annotations

import math
import sys
import time
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

NAME = "music"
TASKS = ("next_step", "accompaniment")
STRUCTURED = ("s_ape", "s_rpe", "ns_rpe")
BASELINES = ("sinusoidal", "nope")
# What each encoding receives, per task. Fair rows: only labels available at generation time (see the module
# docstring); "*-oracle" rows: reference melody / chord labels, an upper bound.
FAIR = {
    "next_step": {
        "s_ape": ("s_ape", {"structures": ("beat", "phrase")}),
        "s_rpe": ("s_rpe", {"structures": ("beat", "phrase")}),
        "ns_rpe": ("ns_rpe", {"structures": ("beat", "phrase"), "segments": ("phrase",)}),
    },
    "accompaniment": {
        "s_ape": ("s_ape", {"structures": ("melody", "beat", "melody_chord", "phrase")}),
        "s_rpe": ("s_rpe", {"structures": ("melody", "melody_chord", "phrase")}),
        "ns_rpe": ("ns_rpe", {"structures": ("melody_chord", "phrase"), "segments": ("melody_chord", "phrase")}),
    },
}
ORACLE = {
    "s_ape-oracle": ("s_ape", {"structures": ("melody", "beat", "chord", "phrase")}),
    "s_rpe-oracle": ("s_rpe", {"structures": ("melody", "chord", "phrase")}),
    "ns_rpe-oracle": ("ns_rpe", {"structures": ("chord", "phrase"), "segments": ("chord", "phrase")}),
}
PLAIN = {
    "music_relative": ("music_relative", {"max_distance": 256}),
    "sinusoidal": ("sinusoidal", {}),
    "rope": ("rope", {}),
    "nope": ("nope", {}),
}
ENCODINGS = (*STRUCTURED, "music_relative", "sinusoidal", "rope", "nope")
GEN_METRICS = ("gen_f1", "note_density_distance", "chroma_similarity", "grooving_similarity", "ssm_distance")
METRICS = ("test_nll", "test_f1", *GEN_METRICS, "notes_per_voice", "drone_fraction")
VERDICT_METRICS = ("test_nll", "chroma_similarity", "ssm_distance", "grooving_similarity", "gen_f1")
LOWER_IS_BETTER = {"test_nll", "note_density_distance", "ssm_distance", "drone_fraction"}


def encoding_spec(task: str, encoding: str) -> tuple[str, dict[str, Any]]:
    """``(registry name, options)`` of ``encoding`` in ``task`` (fair, oracle or plain)."""
    if encoding in FAIR[task]:
        return FAIR[task][encoding]
    if encoding in ORACLE:
        return ORACLE[encoding]
    if encoding in PLAIN:
        return PLAIN[encoding]
    raise ValueError(f"unknown encoding {encoding!r}; allowed: {[*ENCODINGS, *ORACLE]}")


def check_config(config: dict[str, Any]) -> None:
    """Reject a preset that cannot run, naming the key."""
    for task in config["tasks"]:
        if task not in TASKS:
            raise ValueError(f"tasks: unknown task {task!r}; allowed: {list(TASKS)}")
    for enc in [*config["encodings"], *config["oracle"]]:
        encoding_spec(TASKS[0], enc)
    for enc in config["oracle"]:
        if enc not in ORACLE:
            raise ValueError(f"oracle: {enc!r} is not an oracle row; allowed: {list(ORACLE)}")
    seeds = config["seeds"]
    if not seeds or len(set(seeds)) != len(seeds) or not all(isinstance(s, int) for s in seeds):
        raise ValueError(f"seeds must be distinct ints, got {seeds!r}")
    lrs = config["tuning"]["lrs"]
    if not lrs or not all(isinstance(x, (int, float)) and x > 0 for x in lrs):
        raise ValueError(f"tuning.lrs must be positive numbers, got {lrs!r}")
    if config["tuning"]["seed"] not in seeds:
        raise ValueError(f"tuning.seed {config['tuning']['seed']!r} must be one of seeds {seeds}")
    for key in ("steps", "batch_size"):
        value = config["training"][key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"training.{key} must be a positive int, got {value!r}")


def load_pieces(data: dict[str, Any]):
    """The corpus the preset names: the music21 Bach chorales, or ``data.midi_folder``; and its split."""
    from pe_toolkit.domains.music.midi import load_midi_folder
    from pe_toolkit.domains.music.scores import load_bach_chorales

    if data.get("midi_folder"):
        corpus = load_midi_folder(data["midi_folder"], num_voices=4, recursive=True)
    else:
        corpus = load_bach_chorales(limit=data["limit"])
    splits = corpus.split((0.8, 0.1, 0.1), seed=data["split_seed"])
    return corpus, splits


def _generation(model, task: str, batch: dict, prompt: int, voices: int):
    """Generate for a batch of test windows: (full generated roll, onsets, generated part, its reference)."""
    import torch

    from pe_toolkit.domains.music.data import split_step_features
    from pe_toolkit.domains.music.models import generate_accompaniment, generate_continuation

    device = next(model.parameters()).device
    structure = batch["structure"].to(device)
    if task == "next_step":
        full = torch.cat([batch["inputs"][:, :1], batch["targets"]], dim=1).to(device)  # steps 0..L
        roll, onsets = split_step_features(full, voices)
        out, out_onsets = generate_continuation(model, roll[:, :prompt], structure, roll.shape[1] - prompt,
                                                prompt_onsets=onsets[:, :prompt])
        part = slice(prompt, None)
        return out, out_onsets, (out[:, part], out_onsets[:, part]), (roll[:, part], onsets[:, part])
    melody_roll, melody_onsets = split_step_features(batch["inputs"][..., :256].to(device), 1)
    lower_roll, lower_onsets = split_step_features(batch["targets"].to(device), voices - 1)
    out, out_onsets = generate_accompaniment(model, melody_roll[:, :, 0], structure,
                                             melody_onsets=melody_onsets[:, :, 0])
    return out, out_onsets, (out[:, :, 1:], out_onsets[:, :, 1:]), (lower_roll, lower_onsets)


def _sparse(x) -> list[list[int]]:
    return x.bool().nonzero().tolist()


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one model (``spec``: task, encoding, lr, seed, preset parts, device), test it, generate.

    Runs in a spawned worker (or in-process with ``--jobs 0``); returns the row (metrics, and the first test
    window's generated and reference rolls as sparse index lists for the plots).
    """
    quiet()
    import lightning as L
    import torch

    from pe_toolkit.domains.music import metrics
    from pe_toolkit.domains.music.lightning_module import ChoraleDataModule, PianoRollModule
    from pe_toolkit.domains.music.midi import roll_to_midi
    from pe_toolkit.domains.music.models import MusicModelConfig

    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    _, splits = load_pieces(spec["data"])
    task, training, model_opts = spec["task"], spec["training"], spec["model"]
    L.seed_everything(spec["seed"], verbose=False)
    data = ChoraleDataModule(splits, task=task, length=spec["window"]["length"], stride=spec["window"]["stride"],
                             batch_size=training["batch_size"])
    name, options = encoding_spec(task, spec["encoding"])
    config = MusicModelConfig(task=task, encoding=name, encoding_options=dict(options), dim=model_opts["dim"],
                              num_heads=model_opts["num_heads"], num_layers=model_opts["num_layers"],
                              dropout=model_opts["dropout"])
    steps = training["steps"]
    module = PianoRollModule(config, lr=spec["lr"], warmup_steps=max(1, int(steps * training["warmup_fraction"])),
                             max_steps=steps)
    trainer = L.Trainer(max_steps=steps, **trainer_options(spec["device"]), logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(module, data)
    train_seconds = time.perf_counter() - start
    # no validation during training (limit_val_batches=0); the selection metric is computed once, after it
    evaluator = L.Trainer(**trainer_options(spec["device"]), logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False)
    val = evaluator.validate(module, data.val_dataloader(), verbose=False)[0]
    test = evaluator.test(module, data.test_dataloader(), verbose=False)[0]
    model = module.model.eval()
    count = min(spec["generation"]["windows"], len(data.test_set))
    windows = [data.test_set[i] for i in range(count)]
    batch = {k: torch.stack([w[k] for w in windows]) for k in windows[0]}
    voices = config.voices
    out, out_onsets, (gen, gen_on), (ref, ref_on) = _generation(model, task, batch, spec["generation"]["prompt"],
                                                                voices)
    gen, gen_on, ref, ref_on = (x.cpu() for x in (gen, gen_on, ref, ref_on))
    values = {
        "gen_f1": metrics.frame_f1(gen, ref),
        "note_density_distance": metrics.note_density_distance(gen, ref),
        "chroma_similarity": metrics.chroma_similarity(gen, ref, pred_onsets=gen_on, ref_onsets=ref_on),
        "grooving_similarity": metrics.grooving_similarity(gen, ref, pred_onsets=gen_on, ref_onsets=ref_on),
        "ssm_distance": metrics.ssm_distance(gen, ref),
    }
    notes = metrics.note_counts(gen_on)  # (windows, generated voices)
    ref_notes = metrics.note_counts(ref_on)
    if spec.get("midi_dir"):
        task_dir = Path(spec["midi_dir"]) / task
        task_dir.mkdir(parents=True, exist_ok=True)
        full_ref = _reference(task, batch, voices)
        for n in range(min(2, count)):
            labels = windows[n]["labels"]
            roll_to_midi(out[n].cpu().bool(), task_dir / f"{spec['encoding']}_seed{spec['seed']}_{n}.mid",
                         labels=labels, onsets=out_onsets[n].cpu().bool())
            reference = task_dir / f"reference_{n}.mid"
            if not reference.exists():
                roll_to_midi(full_ref[0][n].bool(), reference, labels=labels, onsets=full_ref[1][n].bool())
    row = {
        "task": task, "encoding": spec["encoding"], "lr": spec["lr"], "seed": spec["seed"],
        "oracle": spec["encoding"] in ORACLE,
        "structure_informed": name in STRUCTURED,
        "val_nll": float(val["val/nll"]), "test_nll": float(test["test/nll"]), "test_f1": float(test["test/f1"]),
        **{k: float(v.mean()) for k, v in values.items()},
        "notes_per_voice": float(notes.mean()), "reference_notes_per_voice": float(ref_notes.mean()),
        "notes_per_voice_each": notes.mean(0).tolist(), "reference_notes_per_voice_each": ref_notes.mean(0).tolist(),
        "drone_fraction": float((notes <= 1).double().mean()),
        "parameters": sum(p.numel() for p in model.parameters()),
        "positional_parameters": sum(p.numel() for p in model.trunk.encodings.parameters()),
        "train_windows": len(data.train_set), "val_windows": len(data.val_set), "test_windows": len(data.test_set),
        "generated_windows": count,
        "example": {"generated": _sparse(out[0]), "reference": _sparse(_reference(task, batch, voices)[0][0]),
                    "length": int(out.shape[1])},
        "train_seconds": train_seconds, "seconds": time.perf_counter() - start,
    }
    return row


def _reference(task: str, batch: dict, voices: int):
    """The full reference windows (roll, onsets), each ``(B, T, V, 128)``, as generation lays them out."""
    import torch

    from pe_toolkit.domains.music.data import split_step_features

    if task == "next_step":
        return split_step_features(torch.cat([batch["inputs"][:, :1], batch["targets"]], dim=1), voices)
    melody = split_step_features(batch["inputs"][..., :256], 1)
    lower = split_step_features(batch["targets"], voices - 1)
    return torch.cat([melody[0], lower[0]], dim=2), torch.cat([melody[1], lower[1]], dim=2)


def _dense(example: dict[str, Any]):
    import torch

    roll = torch.zeros(example["length"], 4, 128)
    for t, v, p in example["generated"]:
        roll[t, v, p] = 1.0
    ref = torch.zeros(example["length"], 4, 128)
    for t, v, p in example["reference"]:
        ref[t, v, p] = 1.0
    return roll, ref


def select_lrs(rows: list[dict[str, Any]], config: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (task, encoding): the grid learning rate with the lowest validation NLL at the tuning seed."""
    chosen = {}
    lrs = sorted(config["tuning"]["lrs"])
    for task in config["tasks"]:
        for enc in [*config["encodings"], *config["oracle"]]:
            trials = {r["lr"]: r["val_nll"] for r in rows if r["task"] == task and r["encoding"] == enc
                      and r["seed"] == config["tuning"]["seed"] and r["lr"] in lrs}
            finite = {lr: v for lr, v in trials.items() if v is not None and math.isfinite(v)}
            if not finite:
                continue
            best = min(finite, key=finite.get)
            edge = len(lrs) > 1 and best in (lrs[0], lrs[-1])
            chosen[(task, enc)] = {"lr": best, "trials": trials, "at_edge": edge}
    return chosen


def summarize(rows: list[dict[str, Any]], chosen: dict) -> list[dict[str, Any]]:
    """Mean and 95 % interval over seeds per (task, encoding), at the selected learning rate."""
    out = []
    for (task, enc), choice in chosen.items():
        group = [r for r in rows if r["task"] == task and r["encoding"] == enc and r["lr"] == choice["lr"]]
        summary: dict[str, Any] = {"task": task, "encoding": enc, "lr": choice["lr"], "lr_at_edge": choice["at_edge"],
                                   "oracle": enc in ORACLE, "seeds": len(group)}
        for k in (*METRICS, "reference_notes_per_voice"):
            interval = mean_interval([r[k] for r in group])
            summary[k] = interval["mean"]
            summary[f"{k}_interval"] = interval
            summary[f"{k}_low"], summary[f"{k}_high"] = interval["low"], interval["high"]
        voices = len(group[0]["notes_per_voice_each"]) if group else 0
        summary["notes_each"] = [statistics_mean([r["notes_per_voice_each"][v] for r in group]) for v in range(voices)]
        summary["reference_notes_each"] = group[0]["reference_notes_per_voice_each"] if group else []
        out.append(summary)
    return out


def statistics_mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def verdicts(summary: list[dict[str, Any]], tasks: list[str]) -> list[dict[str, Any]]:
    """Each fair structure-informed encoding against each baseline, per task and metric, from the intervals."""
    lines = []
    for task in tasks:
        by = {r["encoding"]: r for r in summary if r["task"] == task}
        for metric in VERDICT_METRICS:
            higher = metric not in LOWER_IS_BETTER
            for enc in STRUCTURED:
                if enc not in by:
                    continue
                line = {"task": task, "metric": metric + (" ↑" if higher else " ↓"), "encoding": enc,
                        "value": format_interval(by[enc][f"{metric}_interval"])}
                for base in BASELINES:
                    line[f"vs {base}"] = "-" if base not in by else interval_verdict(
                        by[enc][f"{metric}_interval"], by[base][f"{metric}_interval"], higher_is_better=higher)
                lines.append(line)
    return lines


def claim(lines: list[dict[str, Any]], seeds: int, tasks: list[str]) -> list[dict[str, Any]]:
    """The paper's claim per task: reproduced when some fair structure-informed encoding is better than both
    baselines on a structural metric (chroma, SSM) with no such encoding worse than a baseline on it; not
    reproduced otherwise; untested with fewer than 3 seeds."""
    out = []
    for task in tasks:
        structural = [x for x in lines if x["task"] == task and x["metric"].split()[0] in ("chroma_similarity",
                                                                                         "ssm_distance")]
        if not structural:
            continue
        wins = [f"{x['encoding']} on {x['metric']}" for x in structural
                if all(x[f"vs {b}"] == "better" for b in BASELINES)]
        losses = [f"{x['encoding']} on {x['metric']}" for x in structural if "worse" in (x["vs sinusoidal"],
                                                                                         x["vs nope"])]
        if seeds < 3:
            verdict = "untested (fewer than 3 seeds)"
        elif wins and not losses:
            verdict = "reproduced"
        else:
            verdict = "not reproduced"
        out.append({"task": task, "claim": "structure-informed PE improves structural consistency (chroma, SSM) "
                    "over APE and NoPE", "verdict": verdict, "better than both": ", ".join(wins) or "none",
                    "worse than one": ", ".join(losses) or "none"})
    return out


def plot_metrics(summary: list[dict[str, Any]], path: Path) -> None:
    """Bars per encoding with the 95 % interval (``<metric>_low`` / ``_high``; ``<metric>_std`` if given)."""
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
            values = [nan_if_missing(r.get(metric)) for r in rows]
            errors = []
            for r, v in zip(rows, values):
                low, high = r.get(f"{metric}_low"), r.get(f"{metric}_high")
                if low is not None and high is not None and math.isfinite(low) and math.isfinite(high):
                    errors.append((v - low, high - v))
                else:
                    std = r.get(f"{metric}_std")
                    errors.append((std or 0.0, std or 0.0))
            colors = ["tab:gray" if n in ORACLE else "tab:orange" if n in STRUCTURED else "tab:blue" for n in names]
            ax.bar(range(len(names)), values, yerr=[[e[0] for e in errors], [e[1] for e in errors]] if errors else None,
                   color=colors, capsize=2)
            note_if_empty(ax, metric)
            ax.set_xticks(range(len(names)))
            ax.set_xticklabels(names, rotation=60, fontsize=7)
            ax.set_title(f"{task}: {metric}" + (" (lower)" if metric in LOWER_IS_BETTER else ""), fontsize=8)
    fig.suptitle("mean and 95 % interval over seeds; grey: oracle rows (reference labels, upper bound)", fontsize=9)
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
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.7 * len(panels)), sharex=True, squeeze=False)
    colors = np.array([[0.85, 0.1, 0.1], [0.1, 0.6, 0.1], [0.1, 0.3, 0.9], [0.5, 0.2, 0.6]])
    for ax, (name, roll) in zip(axes[:, 0], panels):
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
    axes[-1, 0].set_xlabel("16th-note steps")
    fig.suptitle(f"{task}: first test window (soprano red, alto green, tenor blue, bass purple)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _execute(specs: list[tuple[str, dict]], store: RunStore, jobs: int, progress: Progress) -> list[dict[str, Any]]:
    rows = []
    todo = []
    for key, spec in specs:
        stored = store.load(key, spec)
        if stored is not None:
            rows.append(stored)
            progress(f"{key}: stored run")
        else:
            todo.append((key, spec))

    def done(key: str, spec: dict, row: dict) -> None:
        store.save(key, spec, row)
        rows.append(row)
        progress(f"{key}: val nll {row['val_nll']:.2f}, test nll {row['test_nll']:.2f}, chroma "
                 f"{row['chroma_similarity']:.1f}, notes/voice {row['notes_per_voice']:.1f} ({row['seconds']:.0f}s)")

    if jobs <= 0:
        for key, spec in todo:
            done(key, spec, run_one(spec))
    elif todo:
        import concurrent.futures

        with worker_pool(jobs) as pool:
            futures = {pool.submit(run_one, spec): (key, spec) for key, spec in todo}
            for future in concurrent.futures.as_completed(futures):
                key, spec = futures[future]
                done(key, spec, future.result())
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--tasks", nargs="+", choices=TASKS, help="shortcut for --set tasks=[...]")
    parser.add_argument("--encodings", nargs="+", choices=ENCODINGS, help="shortcut for --set encodings=[...]")
    parser.add_argument("--seeds", nargs="+", type=int, help="shortcut for --set seeds=[...]")
    parser.add_argument("--jobs", type=int, default=1, help="parallel runs in spawned workers (0: in-process)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    parser.add_argument("--resume", action="store_true", help="reuse stored runs whose specification matches")
    parser.add_argument("--report-only", action="store_true", help="train nothing; report the stored runs")
    args = parser.parse_args(argv)
    config = preset_from_args(args, NAME)
    for key in ("tasks", "encodings", "seeds"):
        if getattr(args, key):
            config[key] = list(getattr(args, key))
    try:
        check_config(config)
    except ValueError as error:
        parser.error(str(error))
    start = time.perf_counter()
    out_dir = Path(args.out) / NAME
    corpus, splits = load_pieces(config["data"])
    print(f"{NAME}: {len(corpus.pieces)} pieces ({len(corpus.skipped)} files skipped), split "
          f"{[len(s) for s in splits]}", flush=True)
    base = {k: config[k] for k in ("data", "window", "model", "training", "generation")}
    base.update({"device": device_options(args), "threads": args.threads, "preset": config["preset"],
                 "midi_dir": str(out_dir / "midi")})
    store = RunStore(out_dir / "runs" / config["preset"], resume=args.resume or args.report_only)
    encodings = [*config["encodings"], *config["oracle"]]

    def spec_of(task, enc, lr, seed):
        return (f"{task}__{enc}__lr{lr:g}__seed{seed}",
                {**base, "task": task, "encoding": enc, "lr": float(lr), "seed": seed})

    tuning_seed = config["tuning"]["seed"]
    phase1 = [spec_of(t, e, lr, tuning_seed)
              for t in config["tasks"] for e in encodings for lr in config["tuning"]["lrs"]]
    total = len(phase1) + len(config["tasks"]) * len(encodings) * (len(config["seeds"]) - 1)
    progress = Progress(total, NAME)
    if args.report_only:
        phase1 = [s for s in phase1 if store.load(*s) is not None]
    rows = _execute(phase1, store, 0 if args.report_only else args.jobs, progress)
    chosen = select_lrs(rows, config)
    phase2 = [spec_of(t, e, chosen[(t, e)]["lr"], s) for (t, e) in chosen for s in config["seeds"] if s != tuning_seed]
    if args.report_only:
        phase2 = [s for s in phase2 if store.load(*s) is not None]
    rows += _execute(phase2, store, 0 if args.report_only else args.jobs, progress)
    if not rows:
        print(f"{NAME}: no finished runs to report", flush=True)
        return 1
    for row in rows:
        row.pop("spec", None)
    seconds = time.perf_counter() - start
    report(rows, chosen, config, corpus, splits, seconds, out_dir, args)
    print(f"{NAME}: done in {seconds:.0f}s -> {out_dir}", flush=True)
    return 0


def report(rows, chosen, config, corpus, splits, seconds, out_dir: Path, args) -> None:
    summary = summarize(rows, chosen)
    lines = verdicts(summary, config["tasks"])
    seeds = min((s["seeds"] for s in summary), default=0)
    claims = claim(lines, seeds, config["tasks"])
    plot_metrics(summary, out_dir / "metrics.png")
    for task in config["tasks"]:
        examples = {}
        reference = None
        for s in summary:
            if s["task"] != task:
                continue
            row = next((r for r in rows if r["task"] == task and r["encoding"] == s["encoding"] and r["lr"] == s["lr"]
                        and r["seed"] == config["tuning"]["seed"]), None)
            if row is not None:
                examples[s["encoding"]], reference = _dense(row["example"])
        if examples:
            plot_rolls(examples, reference, task, out_dir / f"rolls_{task}.png")
    public_rows = [{k: v for k, v in r.items() if k != "example"} for r in rows]
    write_results(NAME, {**config, "device": device_options(args), "threads": args.threads, "jobs": args.jobs,
                         "pieces": len(corpus.pieces), "skipped_files": len(corpus.skipped),
                         "split_pieces": [len(s) for s in splits],
                         "fair_encodings": {t: FAIR[t] for t in config["tasks"]}, "oracle_encodings": ORACLE,
                         "selected_lr": {f"{t}/{e}": c for (t, e), c in chosen.items()}},
                  public_rows, seconds, root=args.out)
    table = []
    for s in summary:
        table.append({
            "task": s["task"], "encoding": s["encoding"] + (" (oracle)" if s["oracle"] else ""),
            "lr": f"{s['lr']:g}" + (" (edge)" if s["lr_at_edge"] else ""), "seeds": s["seeds"],
            **{m: format_interval(s[f"{m}_interval"], ".3f" if m in ("test_nll", "test_f1", "gen_f1",
                                                                      "grooving_similarity",
                                                                      "note_density_distance") else ".1f")
               for m in ("test_nll", "gen_f1", "chroma_similarity", "ssm_distance", "grooving_similarity",
                         "note_density_distance")},
            "notes": " / ".join(f"{x:.1f}" for x in s["notes_each"]) + "  (ref " +
                     " / ".join(f"{x:.1f}" for x in s["reference_notes_each"]) + ")",
            "drone": f"{s['drone_fraction']:.2f}",
        })
    tr = config["training"]
    folder = config["data"].get("midi_folder")
    source = f"MIDI folder {folder}" if folder else "four-part Bach chorales of the music21 corpus"
    body = [
        f"{len(corpus.pieces)} pieces ({source}; "
        f"{len(corpus.skipped)} files skipped), split by piece {[len(s) for s in splits]} (train / val / test). "
        f"Windows of {config['window']['length']} 16th steps (training stride {config['window']['stride']}); each "
        f"voice and step is a sounding row and an onset row, so repeated notes stay apart. Model: causal "
        f"Transformer, dim {config['model']['dim']}, {config['model']['num_heads']} heads, "
        f"{config['model']['num_layers']} layers; {tr['steps']} AdamW steps (warm-up + cosine), batch "
        f"{tr['batch_size']}. Device: `{device_options(args)}`. Generation on the first "
        f"{config['generation']['windows']} test windows (greedy per-voice decoding, KV cache; next_step "
        f"continues from the first {config['generation']['prompt']} steps).\n",
        "\n## How the fairness rule is met\n\n"
        f"1. Same tuning budget: every encoding (oracle rows too) is trained at each learning rate of "
        f"{config['tuning']['lrs']} with seed {config['tuning']['seed']} and the rate with the lowest "
        "teacher-forced validation NLL (validation chorales, never the test ones) is kept; the other seeds train "
        "at that rate. `(edge)` marks a rate at the edge of the grid (the optimum may lie beyond it).\n"
        "2. Nothing from the test target at inference: next_step positions carry only beat and phrase "
        "(fermatas of the score); accompaniment positions also the given melody and chords inferred from the "
        "melody alone (`melody_chord`). Rows marked *(oracle)* receive the reference melody / chord labels "
        "(the harmony to be generated) and are an upper bound, not part of any verdict.\n"
        f"3. Seeds {config['seeds']}: mean and 95 % Student-t interval, `mean [low, high] (n)`.\n"
        "4. Verdicts below come from `interval_verdict`: better / worse only where the intervals do not "
        "overlap.\n",
        "\n## Results (selected learning rate)\n\n"
        + markdown_table(table, ["task", "encoding", "lr", "seeds", ("test_nll", "NLL/step ↓"),
                                 ("gen_f1", "F1 (gen) ↑"), ("chroma_similarity", "chroma ↑"),
                                 ("ssm_distance", "SSM dist ↓"), ("grooving_similarity", "groove ↑"),
                                 ("note_density_distance", "ND dist ↓"),
                                 ("notes", "notes per generated voice"), ("drone", "drone share ↓")]),
        "\n`notes per generated voice`: mean notes (onsets) per generated voice and window, per voice "
        "(next_step: S/A/T/B; accompaniment: A/T/B), against the reference; `drone share`: fraction of "
        "generated voices with at most one note in a window.\n",
        "\n![metrics](metrics.png)\n",
        "\n## Verdicts: each fair structure-informed encoding against sinusoidal APE and NoPE\n\n"
        + (markdown_table(lines, ["task", "metric", "encoding", "value", "vs sinusoidal", "vs nope"])
           if lines else "Not all encodings were run.\n"),
        "\n## Paper claim\n\n" + (markdown_table(claims, ["task", "claim", "verdict", "better than both",
                                                            "worse than one"]) if claims else "Not tested.\n"),
        "\nThe oracle rows show what the reference labels are worth; they are not evidence for the claim.\n",
    ]
    for task in config["tasks"]:
        if (out_dir / f"rolls_{task}.png").exists():
            body.append(f"\n## Generated piano rolls, {task}\n\n![{task}](rolls_{task}.png)\n\nMIDI files: "
                        f"`midi/{task}/` (`reference_<n>.mid` and `<encoding>_seed<k>_<n>.mid`).\n")
    write_report(NAME, "Music: structure-informed positional encodings on Bach chorales", "".join(body), root=args.out)


if __name__ == "__main__":
    raise SystemExit(main())
