"""Structure-informed PEs on Bach chorales: next-step prediction and accompaniment, tuned alike, seeds with intervals.

Agarwal, Wang, Richard 2024 ("Structure-informed Positional Encoding for Music Generation", arXiv:2402.13301)
claim that structure-informed PEs (S-APE, S-RPE, NS-RPE) improve structural consistency (chroma, SSM) over APE
and NoPE. The same small causal Transformer is trained with each encoding on the music21 chorales (or a MIDI
folder, ``--set data.midi_folder=DIR``), split by piece, and measured on held-out pieces: teacher-forced NLL and
F1, then generation against the reference with the paper's metrics. Fair rows see only what a composer or an
accompanist has; ``*-oracle`` rows also get the reference melody / chord labels, outside the fair verdicts, and are
compared with ``sinusoidal+labels-oracle`` (plain sinusoidal APE, the same labels as input features): is it the
labels or the way the PE uses them? docs/tutorials/music.md explains the protocol.

    python benchmarks/music.py --quick            # a corpus subset, tiny model: a pipeline check
    python benchmarks/music.py --jobs 2           # the full CPU preset (benchmarks/presets/music/full.yaml)
    python benchmarks/music.py --preset gpu --accelerator cuda --jobs 8
    python benchmarks/music.py --set data.midi_folder=DIR --set encodings=[s_ape,sinusoidal,nope]

Outputs in ``<out>/music/``: results.json, report.md, metrics.png, rolls_<task>.png and
midi/<task>/{<encoding>_seed<k>_<n>,reference_<n>}.mid.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Literal

from jsonargparse.typing import ClosedUnitInterval, NonNegativeInt, PositiveFloat, PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning, quiet_trainer
from pe_toolkit.bench.checks import distinct
from pe_toolkit.bench.config import ModelSize
from pe_toolkit.bench.plots import finish, interval_errors, new_figure
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.summary import group_rows, summarize_groups, summary_table
from pe_toolkit.bench.verdict import claim_row, decide_claim

TASKS = ("next_step", "accompaniment")
STRUCTURED = ("s_ape", "s_rpe", "ns_rpe")
BASELINES = ("sinusoidal", "nope")
# (registry name, options) per encoding and task. Fair rows: only labels known at generation time; oracle rows:
# the reference melody / chord labels (an upper bound).
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
LABELS_ARM = "sinusoidal+labels-oracle"  # the oracle rows' labels (their union) as input features, plain sinusoidal PE
ORACLE_LABELS = ("melody", "beat", "chord", "phrase")
ORACLE = {
    "s_ape-oracle": ("s_ape", {"structures": ("melody", "beat", "chord", "phrase")}),
    "s_rpe-oracle": ("s_rpe", {"structures": ("melody", "chord", "phrase")}),
    "ns_rpe-oracle": ("ns_rpe", {"structures": ("chord", "phrase"), "segments": ("chord", "phrase")}),
    LABELS_ARM: ("sinusoidal", {}),
}
# (claim, favoured encodings, baselines): each favoured encoding is compared with each baseline
QUESTIONS = (("structure-informed PE improves structural consistency (chroma, SSM) over APE and NoPE",
              STRUCTURED, BASELINES),
             ("given the reference labels, a structure-informed PE improves structural consistency (chroma, SSM) over "
              "sinusoidal APE with the same labels as input features", tuple(ORACLE)[:3], (LABELS_ARM,)))
PLAIN = {"music_relative": ("music_relative", {"max_distance": 256}), "sinusoidal": ("sinusoidal", {}),
         "rope": ("rope", {}), "nope": ("nope", {})}
ENCODINGS = (*STRUCTURED, *PLAIN)
METRICS = ("test_nll", "test_f1", "gen_f1", "note_density_distance", "chroma_similarity", "grooving_similarity",
           "ssm_distance", "notes_per_voice", "drone_fraction")
SHOWN = ("test_nll", "gen_f1", "chroma_similarity", "ssm_distance", "grooving_similarity", "note_density_distance")
VERDICT_METRICS = ("test_nll", "chroma_similarity", "ssm_distance", "grooving_similarity", "gen_f1")
STRUCTURAL = ("chroma_similarity", "ssm_distance")
LOWER_IS_BETTER = {"test_nll", "note_density_distance", "ssm_distance", "drone_fraction"}
# fractions: per-side intervals stay inside [0, 1] (of these, only gen_f1 enters a verdict)
BOUNDED = {"gen_f1": (0.0, 1.0), "test_f1": (0.0, 1.0), "drone_fraction": (0.0, 1.0)}
MIN_SEEDS = 3  # fewer seeds a side: the comparison is untested (a pipeline check, not evidence)


def encoding_spec(task: str, encoding: str) -> tuple[str, dict[str, Any]]:
    """``(registry name, options)`` of ``encoding`` (fair, oracle or plain) in ``task``."""
    return {**PLAIN, **ORACLE, **FAIR[task]}[encoding]


@dataclasses.dataclass
class Data:
    limit: PositiveInt | None
    split_seed: int
    midi_folder: str | None = None


@dataclasses.dataclass
class Window:
    length: PositiveInt
    stride: PositiveInt


@dataclasses.dataclass
class Model(ModelSize):
    dropout: ClosedUnitInterval


@dataclasses.dataclass
class Training:
    steps: PositiveInt
    batch_size: PositiveInt
    warmup_fraction: ClosedUnitInterval


@dataclasses.dataclass
class TuningGrid:
    lrs: list[PositiveFloat]
    seed: int
    max_extensions: NonNegativeInt = 0  # learning rates added past an edge choice (log scale), the same for every arm


@dataclasses.dataclass
class Generation:
    windows: PositiveInt
    prompt: PositiveInt


@dataclasses.dataclass
class Config:
    data: Data
    window: Window
    model: Model
    training: Training
    tuning: TuningGrid
    seeds: list[int]
    tasks: list[Literal[TASKS]]
    encodings: list[Literal[ENCODINGS]]
    oracle: list[Literal[tuple(ORACLE)]]
    generation: Generation


def load_pieces(data: dict[str, Any]):
    """The corpus the preset names (the music21 Bach chorales, or ``data.midi_folder``) and its split."""
    from pe_toolkit.domains.music import load_bach_chorales, load_midi_folder

    if data.get("midi_folder"):
        corpus = load_midi_folder(data["midi_folder"], num_voices=4, recursive=True)
    else:
        corpus = load_bach_chorales(limit=data["limit"])
    return corpus, corpus.split((0.8, 0.1, 0.1), seed=data["split_seed"])


def _sparse(roll) -> list[list[int]]:
    return roll.bool().nonzero().tolist()


def _dense(indices: list[list[int]], length: int):
    import torch

    roll = torch.zeros(length, 4, 128, dtype=torch.bool)
    if indices:
        roll[tuple(torch.tensor(indices).T)] = True
    return roll


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one model (``spec``: task, encoding, lr, seed, the preset's parts, device), test it, generate.

    The row: the metrics, the first test window's generated and reference rolls as sparse indices (``example``,
    for the plots) and the first two windows' rolls, onsets and labels (``midi``, for the MIDI files).
    """
    import lightning as L
    import torch

    from pe_toolkit.domains.music import note_counts
    from pe_toolkit.domains.music.data import window_rolls
    from pe_toolkit.domains.music.lightning_module import ChoraleDataModule, PianoRollModule
    from pe_toolkit.domains.music.metrics import generation_metrics
    from pe_toolkit.domains.music.models import MusicModelConfig, generate_windows
    from pe_toolkit.domains.music.structure import LABEL_FIELDS

    start = time.perf_counter()
    task, training, prompt = spec["task"], spec["training"], spec["generation"]["prompt"]
    L.seed_everything(spec["seed"], verbose=False)
    corpus, splits = load_pieces(spec["data"])
    data = ChoraleDataModule(splits, task=task, length=spec["window"]["length"], stride=spec["window"]["stride"],
                             batch_size=training["batch_size"])
    name, options = encoding_spec(task, spec["encoding"])
    labels = torch.cat([piece.labels for piece in corpus.pieces])  # a table per label: as many ids as the corpus has
    label_inputs = {f: int(labels[:, LABEL_FIELDS.index(f)].max()) + 1 for f in ORACLE_LABELS
                    if spec["encoding"] == LABELS_ARM}
    config = MusicModelConfig(task=task, encoding=name, encoding_options=dict(options), label_inputs=label_inputs,
                              **spec["model"])
    steps = training["steps"]
    module = PianoRollModule(config, lr=spec["lr"], warmup_steps=max(1, int(steps * training["warmup_fraction"])),
                             max_steps=steps)
    quiet_trainer(spec["device"], max_steps=steps, limit_val_batches=0).fit(module, data)
    train_seconds = time.perf_counter() - start
    evaluator = quiet_trainer(spec["device"])  # the selection metric once, after training
    val = evaluator.validate(module, data.val_dataloader(), verbose=False)[0]
    test = evaluator.test(module, data.test_dataloader(), verbose=False)[0]
    model = module.model.eval()
    count = min(spec["generation"]["windows"], len(data.test_set))
    windows = [data.test_set[i] for i in range(count)]
    batch = {k: torch.stack([w[k] for w in windows]) for k in windows[0]}
    out, out_on = (x.cpu() for x in generate_windows(model, batch, prompt=prompt if task == "next_step" else None))
    ref, ref_on = window_rolls(task, batch["inputs"], batch["targets"], config.voices)
    part = (slice(None), slice(prompt, None)) if task == "next_step" else (slice(None), slice(None), slice(1, None))
    values = generation_metrics(out[part], ref[part], pred_onsets=out_on[part], ref_onsets=ref_on[part])
    notes, ref_notes = note_counts(out_on[part]), note_counts(ref_on[part])  # (windows, generated voices)
    midi = [{"generated": _sparse(out[n]), "generated_onsets": _sparse(out_on[n]), "reference": _sparse(ref[n]),
             "reference_onsets": _sparse(ref_on[n]), "labels": windows[n]["labels"].tolist()}
            for n in range(min(2, count))]
    return {
        "task": task, "encoding": spec["encoding"], "lr": spec["lr"], "seed": spec["seed"],
        "oracle": spec["encoding"] in ORACLE, "structure_informed": name in STRUCTURED,
        "val_nll": float(val["val/nll"]), "test_nll": float(test["test/nll"]), "test_f1": float(test["test/f1"]),
        "gen_f1": float(values.pop("frame_f1").mean()), **{k: float(v.mean()) for k, v in values.items()},
        "notes_per_voice": float(notes.mean()), "reference_notes_per_voice": float(ref_notes.mean()),
        "notes_per_voice_each": notes.mean(0).tolist(), "reference_notes_per_voice_each": ref_notes.mean(0).tolist(),
        "drone_fraction": float((notes <= 1).double().mean()),
        "parameters": sum(p.numel() for p in model.parameters()),
        "positional_parameters": sum(p.numel() for p in model.trunk.encodings.parameters()),
        "train_windows": len(data.train_set), "val_windows": len(data.val_set), "test_windows": len(data.test_set),
        "generated_windows": count,
        "example": {"generated": _sparse(out[0]), "reference": _sparse(ref[0]), "length": int(out.shape[1])},
        "midi": midi, "train_seconds": train_seconds, "seconds": time.perf_counter() - start,
    }


def comparisons(rows: list[dict[str, Any]], tasks: list[str]) -> list[dict[str, Any]]:
    """Each favoured encoding beats each baseline of :data:`QUESTIONS`, per task and metric: decide_claim rows.

    Welch's t on the per-seed values at each encoding's selected learning rate (independent trainings). A side
    with a non-finite value or fewer than :data:`MIN_SEEDS` seeds: untested.
    """
    out = []
    for task in tasks:
        per = {enc: sorted(group, key=lambda r: r["seed"]) for (t, enc), group in
               group_rows(rows, ("task", "encoding")).items() if t == task}
        for (_, favoured, baselines), metric in ((q, m) for q in QUESTIONS for m in VERDICT_METRICS):
            for enc, base in ((e, b) for e in favoured for b in baselines if e in per and b in per):
                n = min(len(per[enc]), len(per[base]))
                result = decide_claim([r[metric] for r in per[enc]], [r[metric] for r in per[base]],
                                      higher_is_better=metric not in LOWER_IS_BETTER, bounds=BOUNDED.get(metric),
                                      name=f"{enc} beats {base} on {metric} ({task})",
                                      preconditions=[(n >= MIN_SEEDS, f"{n} seed(s), fewer than {MIN_SEEDS}")])
                out.append(claim_row(result, task=task, metric=metric, encoding=enc, baseline=base))
    return out


def claim(lines: list[dict[str, Any]], tasks: list[str]) -> list[dict[str, Any]]:
    """Each question's claim per task, summed up from its structural comparisons (chroma, SSM): ``reproduced`` when
    some favoured encoding is reproduced against every baseline on one structural metric and no structural
    comparison is contradicted; ``contradicted`` when some is contradicted and none reproduced against every
    baseline; ``untested`` when every structural comparison is; else ``inconclusive``."""
    out = []
    for task, (question, _, baselines) in ((t, q) for t in tasks for q in QUESTIONS):
        every, both = ("both baselines", "both") if len(baselines) == 2 else ("the baseline", "it")
        structural = [x for x in lines if x["task"] == task and x["metric"] in STRUCTURAL
                      and x["baseline"] in baselines]
        if not structural:
            continue
        cells = group_rows(structural, ("encoding", "metric"))
        wins = [f"{e} on {m}" for (e, m), xs in cells.items()
                if len(xs) == len(baselines) and all(x["verdict"] == "reproduced" for x in xs)]
        losses = [f"{x['encoding']} vs {x['baseline']} on {x['metric']}" for x in structural
                  if x["verdict"] == "contradicted"]
        if all(x["verdict"] == "untested" for x in structural):
            verdict, reason = "untested", structural[0]["reason"]
        elif wins and not losses:
            verdict, reason = "reproduced", f"better than {every} on a structural metric, worse on none"
        elif losses and not wins:
            verdict, reason = "contradicted", (f"worse than a baseline on a structural metric, better than {both} "
                                               "on none")
        else:
            verdict, reason = "inconclusive", f"no encoding separates from {every}, or the comparisons disagree"
        out.append({"task": task, "claim": question, "verdict": verdict, "reason": reason,
                    "better than both": ", ".join(wins) or "none", "worse than one": ", ".join(losses) or "none"})
    return out


def plot_metrics(summary: list[dict[str, Any]]) -> Any:
    """Bars per encoding with the 95 % interval, one row of panels per task."""
    fig, axes = new_figure(len(TASKS), len(SHOWN), size=(3.2, 3.4))
    for row, task in zip(axes, TASKS):
        entries = [s for s in summary if s["task"] == task]
        names = [s["encoding"] for s in entries]
        for ax, metric in zip(row, SHOWN):
            means, errors = interval_errors([s.get(metric) for s in entries])
            ax.bar(range(len(names)), means, yerr=errors, capsize=2, color=[
                "tab:gray" if n in ORACLE else "tab:orange" if n in STRUCTURED else "tab:blue" for n in names])
            ax.set_xticks(range(len(names)), names, rotation=60, fontsize=7)
            ax.set_title(f"{task}: {metric}" + (" (lower)" if metric in LOWER_IS_BETTER else ""), fontsize=8)
    fig.suptitle("mean and 95 % interval over seeds; grey: oracle rows (reference labels, upper bound)", fontsize=9)
    return finish(fig, "this metric", legend=False)


def write_midi(rows: list[dict[str, Any]], folder: Path) -> None:
    """``folder/<task>/<encoding>_seed<k>_<n>.mid`` (generated) and ``reference_<n>.mid`` from the rows' ``midi``."""
    import torch

    from pe_toolkit.domains.music import roll_to_midi

    for row in rows:
        (folder / row["task"]).mkdir(parents=True, exist_ok=True)
        length = row["example"]["length"]
        for n, window in enumerate(row["midi"]):
            labels = torch.tensor(window["labels"], dtype=torch.long)
            for kind, path in (("generated", f"{row['encoding']}_seed{row['seed']}_{n}.mid"),
                               ("reference", f"reference_{n}.mid")):
                if kind == "generated" or not (folder / row["task"] / path).exists():
                    roll_to_midi(_dense(window[kind], length), folder / row["task"] / path, labels=labels,
                                 onsets=_dense(window[f"{kind}_onsets"], length))


class Music(Benchmark):
    name, title = "music", "Music: structure-informed positional encodings on Bach chorales"
    Config, key_fields = Config, ("task", "encoding", "seed")
    run_one = staticmethod(run_one)
    same_budget = "(task / encoding, oracle rows too) trains the same model for the same steps on the same chorales"
    held_out = ("next_step positions carry only beat and phrase (the score's fermatas); accompaniment positions also "
                "the given melody and chords inferred from it alone (`melody_chord`); `*-oracle` rows receive the "
                "reference melody / chord labels and are compared only with each other")

    def check(self, config: Config) -> None:
        distinct("tuning.lrs", config.tuning.lrs)
        if config.tuning.seed not in config.seeds:
            raise ValueError(f"tuning.seed {config.tuning.seed!r} must be one of seeds {config.seeds}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        base = {k: dataclasses.asdict(getattr(config, k)) for k in ("data", "window", "model", "training",
                                                                     "generation")}
        seeds = [config.tuning.seed, *(s for s in config.seeds if s != config.tuning.seed)]  # tuned on the first
        return [{**base, "task": t, "encoding": e, "arm": f"{t}/{e}", "seed": s}
                for t in config.tasks for e in [*config.encodings, *config.oracle] for s in seeds]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="lr", values=config.tuning.lrs, metric="val_nll", maximize=False, group="arm",
                      max_extensions=config.tuning.max_extensions)

    def progress_label(self, row: dict[str, Any]) -> str:
        return (f"{row['task']} {row['encoding']} lr {row['lr']:g} seed {row['seed']}: val nll {row['val_nll']:.2f}, "
                f"test nll {row['test_nll']:.2f}, chroma {row['chroma_similarity']:.1f}, notes/voice "
                f"{row['notes_per_voice']:.1f} ({row['seconds']:.0f}s)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        rows = result.rows  # every arm at its selected learning rate; non-finite runs are counted, never dropped
        summary = summarize_groups(rows, ("task", "encoding"), (*METRICS, "reference_notes_per_voice"),
                                   bounds=BOUNDED, keep=("lr", "oracle", "reference_notes_per_voice_each"))
        for entry, group in zip(summary, group_rows(rows, ("task", "encoding")).values()):
            entry["notes_each"] = [sum(v) / len(v) for v in zip(*(r["notes_per_voice_each"] for r in group))]
        lines = comparisons(rows, result.config.tasks)
        return ([{"kind": "summary", **s} for s in summary] + lines
                + [{"kind": "claim_summary", **c} for c in claim(lines, result.config.tasks)])

    def write_artifacts(self, result: Result, folder: Path) -> None:
        write_midi(result.rows, folder / "midi")

    def plot(self, result: Result) -> dict[str, Any]:
        from pe_toolkit.domains.music.plotting import plot_piano_rolls

        figures = {"metrics.png": plot_metrics(result.derived_of("summary"))}
        for task in result.config.tasks:  # the first test window at the tuning seed
            rows = [r for r in result.rows if r["task"] == task and r["seed"] == result.config.tuning.seed]
            if rows:
                rolls = {r["encoding"]: _dense(r["example"]["generated"], r["example"]["length"]) for r in rows}
                reference = _dense(rows[-1]["example"]["reference"], rows[-1]["example"]["length"])
                figures[f"rolls_{task}.png"] = plot_piano_rolls({"reference": reference, **rolls}, title=(
                    f"{task}: first test window (soprano red, alto green, tenor blue, bass purple)"))
        return figures

    def describe(self, result: Result) -> str:
        config = result.config
        corpus, splits = load_pieces(dataclasses.asdict(config.data))
        source = f"MIDI folder {config.data.midi_folder}" if config.data.midi_folder else "music21 Bach chorales"
        return (f"{len(corpus.pieces)} pieces ({source}; {len(corpus.skipped)} files skipped), split by piece "
                f"{[len(s) for s in splits]} (train / val / test). Generation: greedy per-voice decoding with a KV "
                f"cache. MIDI files: `midi/<task>/` (`reference_<n>.mid`, `<encoding>_seed<k>_<n>.mid`).")

    def fairness_notes(self, result: Result) -> list[str]:
        return [f"Fewer than {MIN_SEEDS} seeds a side: the comparison is untested. `{LABELS_ARM}` gets the oracle "
                f"rows' labels ({', '.join(ORACLE_LABELS)}) as learned embeddings added to its input."]

    def report(self, result: Result) -> str:
        cells = [{**s, "notes": " / ".join(f"{x:.1f}" for x in s["notes_each"]) + "  (ref "
                  + " / ".join(f"{x:.1f}" for x in s["reference_notes_per_voice_each"]) + ")"}
                 for s in result.derived_of("summary")]
        claims = result.derived_of("claim_summary")
        return (super().report(result) + "\n## Claims per task\n\n" + (markdown_table(claims, [
            "task", "claim", "verdict", "reason", ("better than both", "beats all baselines"), "worse than one"], {
                "verdict": lambda v: f"**{v}**"}) if claims else "Not tested.\n")
            + "\n## Results (selected learning rate)\n\n" + summary_table(
                cells, ["task", "encoding", "lr", ("runs", "seeds"), ("notes", "notes per generated voice")],
                [("test_nll", "NLL/step ↓"), ("gen_f1", "F1 (gen) ↑"), ("chroma_similarity", "chroma ↑"),
                 ("ssm_distance", "SSM dist ↓"), ("grooving_similarity", "groove ↑"),
                 ("note_density_distance", "ND dist ↓"), ("drone_fraction", "drone share ↓")],
                {"chroma_similarity": ".1f", "ssm_distance": ".1f", "drone_fraction": ".2f"})
            + "\n`notes per generated voice`: mean notes (onsets) per generated voice and window (next_step: S/A/T/B; "
            "accompaniment: A/T/B) against the reference; `drone share`: generated voices with at most one note.\n")


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="music", prog="python benchmarks/music.py"))
