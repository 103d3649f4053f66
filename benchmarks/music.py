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
4. Verdicts are computed by :func:`pe_toolkit.bench.verdict.decide_claim` (Welch's t on each difference);
   the paper's claim per task is summed up from the structural comparisons (:func:`claim`).

    python benchmarks/music.py --quick            # < 3 minutes: a corpus subset, tiny model, pipeline check
    python benchmarks/music.py --jobs 2           # full CPU preset (see benchmarks/presets/music/full.yaml)
    python benchmarks/music.py --preset gpu --accelerator cuda --jobs 8
    python benchmarks/music.py --set data.midi_folder=DIR --set encodings=[s_ape,sinusoidal,nope]

Outputs in ``<out>/music/``: ``results.json`` (one row per task x encoding x seed at the selected learning
rate, then every tuning trial, the summaries, verdicts and claims), ``report.md``, ``metrics.png``,
``rolls_<task>.png``, ``midi/<task>/<encoding>_seed<k>_<n>.mid`` and ``midi/<task>/reference_<n>.mid``.
Finished runs are stored in ``runs/<preset>/``: ``--resume`` reuses those whose specification (every option
that changes the numbers, device included) is equal.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from pe_toolkit.bench import Benchmark, Result, Tuning, trainer_options
from pe_toolkit.bench.plots import nan_if_missing, note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.stats import format_interval, mean_interval
from pe_toolkit.bench.verdict import claim_row, claims_table, decide_claim

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



# ------------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Data:
    limit: int | None
    split_seed: int
    midi_folder: str | None = None


@dataclasses.dataclass
class Window:
    length: int
    stride: int


@dataclasses.dataclass
class Model:
    dim: int
    num_heads: int
    num_layers: int
    dropout: float


@dataclasses.dataclass
class Training:
    steps: int
    batch_size: int
    warmup_fraction: float


@dataclasses.dataclass
class TuningGrid:
    lrs: list[float]
    seed: int
    max_extensions: int = 0  # learning rates added past an edge choice (log scale), the same for every arm


@dataclasses.dataclass
class Generation:
    windows: int
    prompt: int


@dataclasses.dataclass
class Config:
    data: Data
    window: Window
    model: Model
    training: Training
    tuning: TuningGrid
    seeds: list[int]
    tasks: list[str]
    encodings: list[str]
    oracle: list[str]
    generation: Generation


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

    Returns the row: metrics, the first test window's generated and reference rolls as sparse index lists
    (``example``, for the plots) and the first two windows' rolls, onsets and labels (``midi``).
    """
    import lightning as L
    import torch

    from pe_toolkit.domains.music import metrics
    from pe_toolkit.domains.music.lightning_module import ChoraleDataModule, PianoRollModule
    from pe_toolkit.domains.music.models import MusicModelConfig

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
    full_ref = _reference(task, batch, voices)
    midi = [{"generated": _sparse(out[n]), "generated_onsets": _sparse(out_onsets[n]),
             "reference": _sparse(full_ref[0][n]), "reference_onsets": _sparse(full_ref[1][n]),
             "labels": windows[n]["labels"].tolist()}
            for n in range(min(2, count))]  # written as MIDI files next to the report (write_midi)
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
        "example": {"generated": _sparse(out[0]), "reference": _sparse(full_ref[0][0]), "length": int(out.shape[1])},
        "midi": midi,
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


STRUCTURAL = ("chroma_similarity", "ssm_distance")
MIN_SEEDS = 3  # fewer seeds a side: the comparison is untested (a pipeline check, not evidence)
BOUNDED = {"gen_f1": (0.0, 1.0)}  # metrics with a known range: per-side intervals stay inside it


def comparisons(rows: list[dict[str, Any]], chosen: dict, tasks: list[str]) -> list[dict[str, Any]]:
    """Each fair structure-informed encoding beats each baseline, per task and metric: decide_claim rows.

    Welch's t on the per-seed values at each encoding's selected learning rate (independent trainings);
    oracle rows never enter. A side with a non-finite value or fewer than :data:`MIN_SEEDS` seeds: untested.
    """
    out = []
    for task in tasks:
        per = {enc: sorted((r for r in rows if r["task"] == task and r["encoding"] == enc
                            and r["lr"] == chosen[(task, enc)]["lr"]), key=lambda r: r["seed"])
               for (t, enc) in chosen if t == task and enc not in ORACLE}
        for metric in VERDICT_METRICS:
            higher = metric not in LOWER_IS_BETTER
            for enc in STRUCTURED:
                for base in BASELINES:
                    if enc not in per or base not in per:
                        continue
                    n = min(len(per[enc]), len(per[base]))
                    result = decide_claim([r[metric] for r in per[enc]], [r[metric] for r in per[base]],
                                          higher_is_better=higher, bounds=BOUNDED.get(metric),
                                          name=f"{enc} beats {base} on {metric} ({task})",
                                          preconditions=[(n >= MIN_SEEDS, f"{n} seed(s), fewer than {MIN_SEEDS}")])
                    out.append(claim_row(result, task=task, metric=metric, encoding=enc, baseline=base))
    return out


def claim(lines: list[dict[str, Any]], tasks: list[str]) -> list[dict[str, Any]]:
    """The paper's claim per task, summed up from the structural comparisons (chroma, SSM): ``reproduced`` when
    some fair structure-informed encoding is reproduced against both baselines on one structural metric and no
    structural comparison is contradicted; ``contradicted`` when some is contradicted and none reproduced
    against both; ``untested`` when every structural comparison is; else ``inconclusive``."""
    out = []
    for task in tasks:
        structural = [x for x in lines if x["task"] == task and x["metric"] in STRUCTURAL]
        if not structural:
            continue
        cells = {(x["encoding"], x["metric"]): [] for x in structural}
        for x in structural:
            cells[(x["encoding"], x["metric"])].append(x["verdict"])
        wins = [f"{e} on {m}" for (e, m), v in cells.items() if len(v) == len(BASELINES)
                and set(v) == {"reproduced"}]
        losses = [f"{x['encoding']} vs {x['baseline']} on {x['metric']}" for x in structural
                  if x["verdict"] == "contradicted"]
        if all(x["verdict"] == "untested" for x in structural):
            verdict, reason = "untested", structural[0]["reason"]
        elif wins and not losses:
            verdict, reason = "reproduced", "better than both baselines on a structural metric, worse on none"
        elif losses and not wins:
            verdict, reason = "contradicted", "worse than a baseline on a structural metric, better than both on none"
        else:
            verdict, reason = "inconclusive", "no encoding separates from both baselines, or the comparisons disagree"
        out.append({"task": task, "claim": "structure-informed PE improves structural consistency (chroma, SSM) "
                    "over APE and NoPE", "verdict": verdict, "reason": reason,
                    "better than both": ", ".join(wins) or "none", "worse than one": ", ".join(losses) or "none"})
    return out


def plot_metrics(summary: list[dict[str, Any]]) -> Any:
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
    return fig


def plot_rolls(rolls: dict[str, Any], reference, task: str) -> Any:
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
    return fig



# ------------------------------------------------------------------------------------------------ benchmark
def roll_examples(result: Result, task: str) -> tuple[dict[str, Any], Any]:
    """``({encoding: generated roll}, reference roll)`` of the first test window, tuning seed, for ``task``."""
    summary = [s for s in result.derived if s["kind"] == "summary"]
    examples, reference = {}, None
    for s in summary:
        if s["task"] != task:
            continue
        row = next((r for r in result.rows if r["task"] == task and r["encoding"] == s["encoding"]
                    and r["lr"] == s["lr"] and r["seed"] == result.config.tuning.seed), None)
        if row is not None:
            examples[s["encoding"]], reference = _dense(row["example"])
    return examples, reference


def write_midi(rows: list[dict[str, Any]], folder: Path) -> None:
    """``folder/<task>/<encoding>_seed<k>_<n>.mid`` (generated) and ``reference_<n>.mid`` from the rows' ``midi``."""
    import torch

    from pe_toolkit.domains.music.midi import roll_to_midi

    def dense(indices: list[list[int]], length: int):
        roll = torch.zeros(length, 4, 128, dtype=torch.bool)
        for t, v, p in indices:
            roll[t, v, p] = True
        return roll

    for row in rows:
        task_dir = folder / row["task"]
        task_dir.mkdir(parents=True, exist_ok=True)
        length = row["example"]["length"]
        for n, window in enumerate(row["midi"]):
            labels = torch.tensor(window["labels"], dtype=torch.long)
            roll_to_midi(dense(window["generated"], length), task_dir / f"{row['encoding']}_seed{row['seed']}_{n}.mid",
                         labels=labels, onsets=dense(window["generated_onsets"], length))
            reference = task_dir / f"reference_{n}.mid"
            if not reference.exists():
                roll_to_midi(dense(window["reference"], length), reference, labels=labels,
                             onsets=dense(window["reference_onsets"], length))


class Music(Benchmark):
    name = "music"
    title = "Music: structure-informed positional encodings on Bach chorales"
    description = ("structure-informed PEs on Bach chorales: next-step prediction and accompaniment, NLL and "
                   "generation metrics (Agarwal et al. 2024)")
    Config = Config
    key_fields = ("task", "encoding", "seed")

    def check(self, config: Config) -> None:
        for task in config.tasks:
            if task not in TASKS:
                raise ValueError(f"tasks: unknown task {task!r}; allowed: {list(TASKS)}")
        for enc in [*config.encodings, *config.oracle]:
            encoding_spec(TASKS[0], enc)
        for enc in config.oracle:
            if enc not in ORACLE:
                raise ValueError(f"oracle: {enc!r} is not an oracle row; allowed: {list(ORACLE)}")
        seeds = config.seeds
        if not seeds or len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds must be distinct ints, got {seeds!r}")
        lrs = config.tuning.lrs
        if not lrs or not all(x > 0 for x in lrs) or len(set(lrs)) != len(lrs):
            raise ValueError(f"tuning.lrs must be distinct positive numbers, got {lrs!r}")
        if config.tuning.seed not in seeds:
            raise ValueError(f"tuning.seed {config.tuning.seed!r} must be one of seeds {seeds}")
        for key in ("steps", "batch_size"):
            value = getattr(config.training, key)
            if value < 1:
                raise ValueError(f"training.{key} must be a positive int, got {value!r}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        base = {k: dataclasses.asdict(getattr(config, k)) for k in ("data", "window", "model", "training",
                                                                     "generation")}
        seeds = [config.tuning.seed, *(s for s in config.seeds if s != config.tuning.seed)]  # tuned on the first
        return [{**base, "task": t, "encoding": e, "arm": f"{t}/{e}", "seed": s}
                for t in config.tasks for e in [*config.encodings, *config.oracle] for s in seeds]

    def tuning(self, config: Config) -> Tuning:
        # the same grid for every (task, encoding), oracle rows too: the tuning seed tries each lr, validation NLL picks
        return Tuning(param="lr", values=[float(lr) for lr in config.tuning.lrs], metric="val_nll", maximize=False,
                      group="arm", max_extensions=config.tuning.max_extensions)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return run_one(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        return (f"{row['task']} {row['encoding']} lr {row['lr']:g} seed {row['seed']}: val nll {row['val_nll']:.2f}, "
                f"test nll {row['test_nll']:.2f}, chroma {row['chroma_similarity']:.1f}, notes/voice "
                f"{row['notes_per_voice']:.1f} ({row['seconds']:.0f}s)")

    def chosen(self, result: Result) -> dict[tuple[str, str], dict[str, Any]]:
        """Per (task, encoding) with a finite validation NLL: the selected lr, every trial, whether at a grid edge."""
        lrs = sorted(result.config.tuning.lrs)
        out = {}
        for task in result.config.tasks:
            for enc in [*result.config.encodings, *result.config.oracle]:
                trials = {r["lr"]: r["val_nll"] for r in result.trials if r["task"] == task and r["encoding"] == enc}
                if not any(v is not None and math.isfinite(v) for v in trials.values()):
                    continue
                best = result.chosen[f"{task}/{enc}"]
                record = result.tuning.get(f"{task}/{enc}")  # the runner's search: extensions included
                at_edge = (record["cap_hit"] and len(record["tried"]) > 1 if record is not None
                           else len(lrs) > 1 and best in (lrs[0], lrs[-1]))
                out[(task, enc)] = {"lr": best, "trials": trials, "at_edge": at_edge}
        return out

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        chosen = self.chosen(result)
        summary = summarize(result.rows, chosen)
        lines = comparisons(result.rows, chosen, result.config.tasks)
        return ([{"kind": "summary", **s} for s in summary] + lines
                + [{"kind": "claim_summary", **c} for c in claim(lines, result.config.tasks)])

    def write_artifacts(self, result: Result, folder: Path) -> None:
        write_midi(result.rows, folder / "midi")

    def plot(self, result: Result) -> dict[str, Any]:
        figures = {"metrics.png": plot_metrics([s for s in result.derived if s["kind"] == "summary"])}
        for task in result.config.tasks:
            examples, reference = roll_examples(result, task)
            if examples:
                figures[f"rolls_{task}.png"] = plot_rolls(examples, reference, task)
        return figures

    def report(self, result: Result) -> str:
        config = dataclasses.asdict(result.config)
        corpus, splits = load_pieces(config["data"])
        summary = [s for s in result.derived if s["kind"] == "summary"]
        lines = [x for x in result.derived if x["kind"] == "claim"]
        claims = [c for c in result.derived if c["kind"] == "claim_summary"]
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
        folder = config["data"]["midi_folder"]
        source = f"MIDI folder {folder}" if folder else "four-part Bach chorales of the music21 corpus"
        body = [
            f"{len(corpus.pieces)} pieces ({source}; "
            f"{len(corpus.skipped)} files skipped), split by piece {[len(s) for s in splits]} (train / val / test). "
            f"Windows of {config['window']['length']} 16th steps (training stride {config['window']['stride']}); each "
            f"voice and step is a sounding row and an onset row, so repeated notes stay apart. Model: causal "
            f"Transformer, dim {config['model']['dim']}, {config['model']['num_heads']} heads, "
            f"{config['model']['num_layers']} layers; {tr['steps']} AdamW steps (warm-up + cosine), batch "
            f"{tr['batch_size']}. Device: `{result.device}`. Generation on the first "
            f"{config['generation']['windows']} test windows (greedy per-voice decoding, KV cache; next_step "
            f"continues from the first {config['generation']['prompt']} steps).\n",
            "\n## How the fairness rule is met\n\n"
            f"1. Same tuning budget: every encoding (oracle rows too) is trained at each learning rate of "
            f"{config['tuning']['lrs']} with seed {config['tuning']['seed']} and the rate with the lowest "
            "teacher-forced validation NLL (validation chorales, never the test ones) is kept, the grid extended past "
            f"an edge choice by up to {config['tuning']['max_extensions']} value(s) (the Tuning section); the other "
            "seeds train at that rate. `(edge)` marks a rate still at the edge of what was tried (the optimum may lie "
            "beyond it).\n"
            "2. Nothing from the test target at inference: next_step positions carry only beat and phrase "
            "(fermatas of the score); accompaniment positions also the given melody and chords inferred from the "
            "melody alone (`melody_chord`). Rows marked *(oracle)* receive the reference melody / chord labels "
            "(the harmony to be generated) and are an upper bound, not part of any verdict.\n"
            f"3. Seeds {config['seeds']}: mean and 95 % Student-t interval, `mean [low, high] (n)`.\n"
            "4. Verdicts below are computed by `pe_toolkit.bench.verdict.decide_claim`: Welch's t interval of the "
            "difference (signed so that positive is the paper's direction); reproduced / contradicted only when it "
            f"excludes 0, inconclusive otherwise; fewer than {MIN_SEEDS} seeds: untested.\n",
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
            "\n## Comparisons: each fair structure-informed encoding against sinusoidal APE and NoPE\n\n"
            + (claims_table(lines) if lines else "Not all encodings were run.\n"),
            "\n## Paper claim\n\n" + (markdown_table(claims, ["task", "claim", "verdict", "reason",
                                                                "better than both", "worse than one"],
                                                       {"verdict": lambda v: f"**{v}**"})
                                        if claims else "Not tested.\n"),
            "\nThe oracle rows show what the reference labels are worth; they are not evidence for the claim.\n",
        ]
        for task in config["tasks"]:
            if roll_examples(result, task)[0]:
                body.append(f"\n## Generated piano rolls, {task}\n\n![{task}](rolls_{task}.png)\n\nMIDI files: "
                            f"`midi/{task}/` (`reference_<n>.mid` and `<encoding>_seed<k>_<n>.mid`).\n")
        return "".join(body)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="music", prog="python benchmarks/music.py"))
