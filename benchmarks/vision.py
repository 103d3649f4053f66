"""Vision: accuracy of a small ViT at test resolutions it was not trained on, per positional encoding.

Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298, report that
RoPE-Mixed and RoPE-Axial keep their accuracy when a ViT trained at one resolution is tested at higher
ones, better than learned absolute embeddings (APE, resized by interpolation) and fixed sin-cos. This
benchmark checks that on :class:`~pe_toolkit.domains.vision.data.ShapeRelations` (where the blue square
sits relative to the red disc; chance 25 %), with the encoders of ``pe_toolkit.domains.vision``:

* train at the preset's ``train_size`` (32 px) for each encoding and seed (Lightning, the same steps,
  batch and schedule for all), the learning rate chosen per encoding from ``training.lrs`` by validation
  accuracy at the training resolution (same budget and validation data for every encoding);
* test at each of ``test_sizes`` (32, 48, 64, 96 px) as is: rotary and sin-cos read the larger patch
  grid's indices (extrapolation), ``learned_2d`` is resized bicubically (``"resample"`` positions),
  ``nope`` has no positions;
* fine-tune a copy briefly at each of ``finetune.sizes`` and test there again.

Means over >= 3 seeds with 95 % Student-t intervals; each claim's verdict is computed by
:func:`pe_toolkit.bench.verdict.decide_claim` (Welch's t on the difference, accuracies bounded to [0, 1]),
untested when a side is not learned; the task's caveat (objects scale with the image, which favours the
resampled learned table) is in each verdict row.

    pe-toolkit bench vision --quick                        # pipeline check, < 2 minutes
    pe-toolkit bench vision --jobs 2                       # the full CPU preset (3 seeds)
    pe-toolkit bench vision --preset gpu --accelerator cuda --jobs 3
    python benchmarks/vision.py --set training.steps=300 --set seeds=[0,1,2]   # the same code

Outputs in ``<out>/vision/``: ``results.json``, ``report.md``, ``accuracy_vs_resolution.png``; each
finished run in ``runs/<preset>/`` (``--resume`` reuses the ones whose configuration matches).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import statistics
import time
from typing import Any

from pe_toolkit.bench import Benchmark, Result, Tuning, trainer_options
from pe_toolkit.bench.plots import nan_if_missing, note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.stats import format_interval, mean_interval
from pe_toolkit.bench.verdict import VERDICTS, claim_row, claims_table, decide_claim

ROTARY = ("rope_mixed", "rope_axial")
ABSOLUTE = ("learned_2d", "sincos_2d")


# ------------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Data:
    train_size: int
    test_sizes: list[int]
    num_train: int
    num_val: int
    num_test: int
    seed: int
    max_distractors: int


@dataclasses.dataclass
class Model:
    patch_size: int
    dim: int
    num_heads: int
    num_layers: int
    pool: str


@dataclasses.dataclass
class Training:
    steps: int
    batch_size: int
    lrs: list[float]
    weight_decay: float
    warmup_steps: int
    max_extensions: int = 0  # learning rates added past an edge choice (log scale), the same for every encoding


@dataclasses.dataclass
class Finetune:
    sizes: list[int]
    steps: int
    batch_size: int
    lr: float
    warmup_steps: int


@dataclasses.dataclass
class Config:
    seeds: list[int]
    encodings: list[str]
    data: Data
    model: Model
    training: Training
    finetune: Finetune


# ------------------------------------------------------------------------------------------------ data
@functools.lru_cache(maxsize=32)
def dataset(split: str, size: int, data: tuple) -> Any:
    """One split of the scene family at ``size`` pixels (rendered once per process)."""
    from pe_toolkit.domains.vision import ShapeRelations

    options = dict(data)
    counts = {"train": options["num_train"], "val": options["num_val"], "test": options["num_test"]}
    offset = {"train": 0, "val": counts["train"], "test": counts["train"] + counts["val"]}[split]
    return ShapeRelations(counts[split], size, seed=options["seed"], offset=offset,
                          max_distractors=options["max_distractors"])


def data_key(preset: dict[str, Any]) -> tuple:
    keys = ("num_train", "num_val", "num_test", "seed", "max_distractors")
    return tuple((k, preset["data"][k]) for k in keys)



# ------------------------------------------------------------------------------------------------ one run
def _fit(module, train, steps: int, batch_size: int, seed: int, device: dict | None) -> float:
    import lightning as L

    from pe_toolkit.domains.vision.lightning_module import ImageDataModule

    trainer = L.Trainer(max_steps=steps, **trainer_options(device), logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, gradient_clip_val=1.0)
    start = time.perf_counter()
    trainer.fit(module, ImageDataModule(train, batch_size=batch_size, seed=seed))
    return time.perf_counter() - start


def train_and_test(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one (encoding, seed, lr), test it at every size, fine-tune at the fine-tune sizes; a result row."""
    import lightning as L

    from pe_toolkit.domains.vision import ViTConfig
    from pe_toolkit.domains.vision.lightning_module import ViTClassifier, accuracy

    start, cpu_start = time.perf_counter(), time.process_time()
    encoding, seed, lr = spec["encoding"], spec["seed"], spec["lr"]
    preset, data = spec["preset"], data_key(spec["preset"])
    model_options, training, finetune = preset["model"], preset["training"], preset["finetune"]
    size = preset["data"]["train_size"]
    L.seed_everything(seed, verbose=False)
    config = ViTConfig(num_classes=4, image_size=size, encoding=encoding,
                       share_encoding=encoding != "rope_mixed",  # RoPE-Mixed learns its frequencies per layer
                       **model_options)
    module = ViTClassifier(config, lr=lr, weight_decay=training["weight_decay"],
                           warmup_steps=training["warmup_steps"], max_steps=training["steps"])
    train_seconds = _fit(module, dataset("train", size, data), training["steps"], training["batch_size"], seed,
                         spec.get("device"))
    device = next(module.parameters()).device
    row: dict[str, Any] = {
        "kind": "run", "encoding": encoding, "seed": seed, "lr": lr, "train_seconds": train_seconds,
        "parameters": module.model.num_parameters(),
        "position_parameters": module.model.num_parameters() - module.model.num_parameters(exclude_positional=True),
        "val_acc": accuracy(module.model, dataset("val", size, data), device=device),
    }
    for test_size in preset["data"]["test_sizes"]:
        row[f"acc_{test_size}"] = accuracy(module.model, dataset("test", test_size, data), device=device)
    trained = copy.deepcopy(module.model.state_dict())
    for tune_size in finetune["sizes"]:
        L.seed_everything(seed, verbose=False)
        tuned = ViTClassifier(config, lr=finetune["lr"], weight_decay=training["weight_decay"],
                              warmup_steps=finetune["warmup_steps"], max_steps=finetune["steps"])
        tuned.model.load_state_dict(trained)
        _fit(tuned, dataset("train", tune_size, data), finetune["steps"], finetune["batch_size"], seed,
             spec.get("device"))
        row[f"finetuned_acc_{tune_size}"] = accuracy(tuned.model, dataset("test", tune_size, data),
                                                     device=next(tuned.parameters()).device)
    row["seconds"] = time.perf_counter() - start
    row["cpu_seconds"] = time.process_time() - cpu_start  # this process's CPU time: comparable on a shared machine
    return row



# ------------------------------------------------------------------------------------------------ summary
def summarize(rows: list[dict[str, Any]], sizes: list[int], tune_sizes: list[int]) -> list[dict[str, Any]]:
    """One entry per encoding: mean and 95 % interval over seeds of each accuracy column."""
    out = []
    for encoding in dict.fromkeys(r["encoding"] for r in rows):
        group = [r for r in rows if r["encoding"] == encoding]
        entry: dict[str, Any] = {"encoding": encoding, "seeds": len(group), "lr": group[0]["lr"],
                                 "position_parameters": group[0].get("position_parameters")}
        for key in ["val_acc"] + [f"acc_{s}" for s in sizes] + [f"finetuned_acc_{s}" for s in tune_sizes]:
            entry[key] = mean_interval(r.get(key) for r in group)
            entry[f"{key}_text"] = format_interval(entry[key])
        out.append(entry)
    return out


LEARNED_ACC = 0.5
"""A side counts as learned when its mean validation accuracy at the training resolution reaches this
(twice chance, 0.25); a claim with a side below it is untested."""

TASK_CAVEAT = {
    "learned_2d": "ShapeRelations draws objects in proportion to the image, so a resampled learned table sees "
                  "the same relative layout: the task favours learned_2d (Heo et al. test ImageNet, where it does "
                  "not)",
    "sincos_2d": "a procedural 4-class task and a small ViT, not Heo et al.'s ImageNet ViT-S/B",
}


def claims(rows: list[dict[str, Any]], sizes: list[int], train_size: int) -> list[dict[str, Any]]:
    """RoPE-Mixed / RoPE-Axial beat learned_2d / sincos_2d at every test size above the training one.

    Each a :func:`~pe_toolkit.bench.verdict.decide_claim` row (Welch t on per-seed test accuracies, bounded
    to [0, 1]); untested when a side is not learned at the training resolution (:data:`LEARNED_ACC`). The
    row's ``caveat`` says how the task departs from the paper's.
    """
    by = {e: [r for r in rows if r["encoding"] == e] for e in dict.fromkeys(r["encoding"] for r in rows)}
    out = []
    for rotary in ROTARY:
        for absolute in ABSOLUTE:
            if rotary not in by or absolute not in by:
                continue
            learned = {e: statistics.fmean(r["val_acc"] for r in by[e]) for e in (rotary, absolute)}
            for size in sizes:
                if size <= train_size:
                    continue
                claim = decide_claim(
                    [r.get(f"acc_{size}") for r in by[rotary]], [r.get(f"acc_{size}") for r in by[absolute]],
                    kind="difference", higher_is_better=True, bounds=(0.0, 1.0),
                    name=f"{rotary} beats {absolute} at {size} px (trained at {train_size})",
                    preconditions=[(learned[e] >= LEARNED_ACC,
                                    f"{e} not learned: validation accuracy {learned[e]:.3f} at {train_size} px < "
                                    f"{LEARNED_ACC}") for e in (rotary, absolute)])
                out.append(claim_row(claim, comparison=f"{rotary} vs {absolute}", size=size,
                                     caveat=TASK_CAVEAT[absolute]))
    return out


def claim_sentence(claim_rows: list[dict[str, Any]]) -> str:
    if not claim_rows:
        return "Not tested in this run (it needs a rotary and an absolute encoding and a test size above training)."
    parts = []
    for comparison in dict.fromkeys(c["comparison"] for c in claim_rows):
        mine = [c for c in claim_rows if c["comparison"] == comparison]
        counts = {v: sum(c["verdict"] == v for c in mine) for v in VERDICTS}
        parts.append(f"{comparison}: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
                     + f" (of {len(mine)} sizes)")
    return "; ".join(parts) + "."


def plot_accuracy(summary: list[dict[str, Any]], sizes: list[int], tune_sizes: list[int]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    markers = "osD^vP*X"
    spread = 0.012 * (max(sizes) - min(sizes) if len(sizes) > 1 else 1)  # side by side: no series hides another
    for index, entry in enumerate(summary):
        colour, marker = f"C{index}", markers[index % len(markers)]
        shift = (index - (len(summary) - 1) / 2) * spread
        means = [nan_if_missing(entry[f"acc_{s}"]["mean"]) for s in sizes]
        low = [m - nan_if_missing(entry[f"acc_{s}"]["low"]) for m, s in zip(means, sizes)]
        high = [nan_if_missing(entry[f"acc_{s}"]["high"]) - m for m, s in zip(means, sizes)]
        errors = [[0.0 if v != v else v for v in low], [0.0 if v != v else v for v in high]]
        ax.errorbar([size + shift for size in sizes], means, yerr=errors, marker=marker, capsize=3, color=colour,
                    label=entry["encoding"])
        if tune_sizes:
            tuned = [nan_if_missing(entry[f"finetuned_acc_{s}"]["mean"]) for s in tune_sizes]
            ax.plot(tune_sizes, tuned, linestyle="none", marker="*", markersize=11, color=colour)
    ax.axhline(0.25, color="0.6", linestyle=":", linewidth=1, label="chance (4 classes)")
    ax.set_xticks(sizes)
    ax.set_xlabel("test resolution (pixels; trained at the first)")
    ax.set_ylabel("test accuracy (mean, 95 % interval over seeds)")
    ax.set_ylim(0, 1.02)
    ax.set_title("Accuracy vs resolution without fine-tuning (lines) and after a short fine-tune (stars)",
                 fontsize=9)
    if not note_if_empty(ax, "test accuracy"):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig



# ------------------------------------------------------------------------------------------------ benchmark
class Vision(Benchmark):
    name = "vision"
    title = "Vision: ViT accuracy vs test resolution per positional encoding"
    description = "ViT accuracy at test resolutions it was not trained on, per 2-D encoding (Heo et al. 2024)"
    Config = Config
    key_fields = ("encoding", "seed")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        run_preset = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("seeds", "encodings")}
        return [{"encoding": e, "seed": s, "preset": run_preset} for e in config.encodings for s in config.seeds]

    def tuning(self, config: Config) -> Tuning:
        # the same learning-rate budget for every encoding: the first seed tries each lr, validation picks one
        return Tuning(param="lr", values=[float(lr) for lr in config.training.lrs], metric="val_acc", maximize=True,
                      group="encoding", max_extensions=config.training.max_extensions)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return train_and_test(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        accuracies = " ".join(f"{k[4:]}px={v:.2f}" for k, v in row.items() if k.startswith("acc_"))
        return (f"{row['encoding']} seed {row['seed']} lr {row['lr']:g}: val {row['val_acc']:.2f} {accuracies} "
                f"({row['seconds']:.0f}s)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        config = result.config
        summary = summarize(result.rows, config.data.test_sizes, config.finetune.sizes)
        return [{**s, "kind": "summary"} for s in summary] + claims(result.rows, config.data.test_sizes,
                                                                    config.data.train_size)

    def plot(self, result: Result) -> dict[str, Any]:
        config = result.config
        summary = [s for s in result.derived if s["kind"] == "summary"]
        return {"accuracy_vs_resolution.png": plot_accuracy(summary, config.data.test_sizes, config.finetune.sizes)}

    def report(self, result: Result) -> str:
        config, rows, device, seconds = result.config, result.rows, result.device, result.seconds
        summary = [s for s in result.derived if s["kind"] == "summary"]
        sizes, tune_sizes, train_size = config.data.test_sizes, config.finetune.sizes, config.data.train_size
        claim_rows = [c for c in result.derived if c["kind"] == "claim"]
        lrs, seeds = config.training.lrs, config.seeds
        preset = dataclasses.asdict(config)
        model, training, finetune, data = preset["model"], preset["training"], preset["finetune"], preset["data"]
        columns = ["encoding", "seeds", "lr"] + [(f"acc_{s}_text", f"{s} px") for s in sizes]
        tuned_columns = ["encoding"] + [(f"finetuned_acc_{s}_text", f"{s} px, fine-tuned") for s in tune_sizes]
        body = [
            f"ShapeRelations (where the square is relative to the disc, 4 classes, chance 0.25): {data['num_train']} "
            f"train / {data['num_val']} val / {data['num_test']} test scenes, up to {data['max_distractors']} "
            f"distractors. ViT: patch {model['patch_size']}, dim {model['dim']}, {model['num_heads']} heads, "
            f"{model['num_layers']} layers, {model['pool']} pooling; trained at {train_size} px for "
            f"{training['steps']} steps of batch {training['batch_size']} (AdamW, warmup {training['warmup_steps']}, "
            f"cosine), learning rate per encoding from {lrs} by validation accuracy at {train_size} px "
            f"(seed {seeds[0]}). Fine-tune: "
            f"{finetune['steps']} steps of batch {finetune['batch_size']} at lr {finetune['lr']} at each of "
            f"{tune_sizes} px. Seeds {seeds}; device {device}; {seconds:.0f} s in all.\n\n",
            "## How the fairness rule is met\n\n"
            f"Every encoding gets the same learning-rate grid {lrs}, extended past an edge choice by up to "
            f"{config.training.max_extensions} value(s) (the Tuning section below), tried on the same seed "
            f"({seeds[0]}) and chosen by "
            f"accuracy on the same validation scenes at the training resolution ({train_size} px); every other "
            "setting (model, steps, batch, schedule, fine-tune) is shared. No test scene and no test resolution feeds "
            "training or the choice of learning rate; the fine-tunes train on training scenes rendered at the test "
            f"size. Seeds {seeds}: mean and 95 % Student-t interval; each comparison below is computed from the "
            "intervals. Departure from the paper (Heo et al. 2024: ViT-S/B on ImageNet-1k at 224 px, tested up to "
            "512 px): a procedural 4-class dataset and a small ViT that fit this machine, so the finding is tested, "
            "not its numbers.\n\n",
            "## Test accuracy without fine-tuning (mean [95 % interval] over seeds)\n\n",
            markdown_table(summary, columns),
            "\n## After a short fine-tune at the test resolution\n\n" if tune_sizes else "",
            markdown_table(summary, tuned_columns) if tune_sizes else "",
            "\n## Does RoPE extrapolate better than absolute embeddings? (Heo et al. 2024)\n\n"
            "Verdicts computed by `pe_toolkit.bench.verdict.decide_claim`: Welch's t interval of the difference in "
            "test accuracy (per-side intervals within [0, 1]); **reproduced** when it lies above 0, "
            "**contradicted** below 0, **inconclusive** otherwise (with the smallest difference this n could "
            f"detect); **untested** with fewer than 2 seeds or a side whose validation accuracy at {train_size} px "
            f"is below {LEARNED_ACC} (not learned). The caveat column says how the task departs from the "
            "paper's.\n\n",
            claims_table(claim_rows, extra=[("caveat", "caveat")]) if claim_rows else "",
            f"\nMeasured: {claim_sentence(claim_rows)}\n\n",
            "## Every run\n\n",
            markdown_table(rows, ["encoding", "seed", "lr", "val_acc"] + [f"acc_{s}" for s in sizes]
                           + [f"finetuned_acc_{s}" for s in tune_sizes] + ["position_parameters", "seconds"],
                           {**{f"acc_{s}": ".3f" for s in sizes}, **{f"finetuned_acc_{s}": ".3f" for s in tune_sizes},
                            "val_acc": ".3f", "seconds": ".0f"}),
            "\n![accuracy vs resolution](accuracy_vs_resolution.png)\n",
        ]
        return "".join(body)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="vision", prog="python benchmarks/vision.py"))
