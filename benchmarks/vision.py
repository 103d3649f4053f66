"""Vision: accuracy of a small ViT at test resolutions it was not trained on, per positional encoding.

Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298, report that RoPE-Mixed
and RoPE-Axial keep their accuracy at higher test resolutions better than a learned table (resized) or fixed
sin-cos. Checked on :class:`~pe_toolkit.domains.vision.data.ShapeRelations` (where the blue square sits relative
to the red disc; chance 25 %): a ViT per encoding and seed trained at ``train_size``, the learning rate chosen
per encoding on validation accuracy, tested at each of ``test_sizes`` as is (rotary and sin-cos read the larger
grid's indices, ``learned_2d`` is resized bicubically), then briefly fine-tuned at ``finetune.sizes`` and tested
again. docs/tutorials/vision.md discusses the task and the results.

    pe-toolkit bench vision --quick                        # pipeline check, < 2 minutes
    pe-toolkit bench vision --jobs 2                       # the full CPU preset (3 seeds)
    pe-toolkit bench vision --preset gpu --accelerator cuda --jobs 3
    python benchmarks/vision.py --set training.steps=300 --set seeds=[0,1,2]   # the same code

Outputs in ``<out>/vision/``: results.json, report.md, accuracy_vs_resolution.png.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import statistics
import time
from typing import Any, Literal

from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning, quiet_trainer
from pe_toolkit.bench.checks import distinct
from pe_toolkit.bench.config import ModelSize
from pe_toolkit.bench.plots import finish, new_figure, plot_intervals
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.summary import summarize_groups, summary_table
from pe_toolkit.bench.verdict import claim_row, decide_claim

ROTARY = ("rope_mixed", "rope_axial")
ABSOLUTE = ("learned_2d", "sincos_2d")
LEARNED_ACC = 0.5
"""A side counts as learned when its mean validation accuracy at the training resolution reaches this
(twice chance, 0.25); a claim with a side below it is untested."""
TASK_CAVEAT = {
    "learned_2d": "ShapeRelations draws objects in proportion to the image, so a resampled learned table sees "
                  "the same relative layout: the task favours learned_2d (Heo et al. test ImageNet, where it does "
                  "not)",
    "sincos_2d": "a procedural 4-class task and a small ViT, not Heo et al.'s ImageNet ViT-S/B",
}


@dataclasses.dataclass
class Data:
    train_size: PositiveInt
    test_sizes: list[PositiveInt]
    num_train: PositiveInt
    num_val: PositiveInt
    num_test: PositiveInt
    seed: NonNegativeInt
    max_distractors: NonNegativeInt


@dataclasses.dataclass
class Model(ModelSize):
    patch_size: PositiveInt
    pool: Literal["cls", "mean"]


@dataclasses.dataclass
class Training:
    steps: PositiveInt
    batch_size: PositiveInt
    lrs: list[PositiveFloat]
    weight_decay: NonNegativeFloat
    warmup_steps: NonNegativeInt
    max_extensions: NonNegativeInt = 0  # learning rates added past an edge choice (log scale), the same for all


@dataclasses.dataclass
class Finetune:
    sizes: list[PositiveInt]
    steps: PositiveInt
    batch_size: PositiveInt
    lr: PositiveFloat
    warmup_steps: NonNegativeInt


@dataclasses.dataclass
class Config:
    seeds: list[int]
    encodings: list[str]
    data: Data
    model: Model
    training: Training
    finetune: Finetune


def accuracy_fields(config: Config) -> list[str]:
    """The row fields of test accuracy: at each test size, then after the fine-tune at each fine-tune size."""
    return [*(f"acc_{s}" for s in config.data.test_sizes), *(f"finetuned_acc_{s}" for s in config.finetune.sizes)]


@functools.lru_cache(maxsize=32)
def dataset(split: str, size: int, data: tuple) -> Any:
    """One split of the scene family at ``size`` pixels (rendered once per process); ``data``: the preset's
    ``data`` items. The splits are consecutive, disjoint index ranges of the family."""
    from pe_toolkit.domains.vision import ShapeRelations

    options = dict(data)
    counts = {"train": options["num_train"], "val": options["num_val"], "test": options["num_test"]}
    offset = {"train": 0, "val": counts["train"], "test": counts["train"] + counts["val"]}[split]
    return ShapeRelations(counts[split], size, seed=options["seed"], offset=offset,
                          max_distractors=options["max_distractors"])


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one (encoding, seed, lr), test it at every size, fine-tune at the fine-tune sizes; a result row."""
    import lightning as L

    from pe_toolkit.domains.vision import ViTConfig
    from pe_toolkit.domains.vision.lightning_module import ImageDataModule, ViTClassifier, accuracy

    def fit(module, size: int, steps: int, batch_size: int) -> float:
        trainer = quiet_trainer(spec.get("device"), max_steps=steps, limit_val_batches=0, num_sanity_val_steps=0,
                                gradient_clip_val=1.0)
        begin = time.perf_counter()
        trainer.fit(module, ImageDataModule(dataset("train", size, data), batch_size=batch_size, seed=seed))
        return time.perf_counter() - begin

    start, cpu_start = time.perf_counter(), time.process_time()
    encoding, seed, lr, preset = spec["encoding"], spec["seed"], spec["lr"], spec["preset"]
    data = tuple((k, preset["data"][k]) for k in ("num_train", "num_val", "num_test", "seed", "max_distractors"))
    training, finetune, size = preset["training"], preset["finetune"], preset["data"]["train_size"]
    L.seed_everything(seed, verbose=False)
    config = ViTConfig(num_classes=4, image_size=size, encoding=encoding, **preset["model"],
                       share_encoding=encoding != "rope_mixed")  # RoPE-Mixed learns its frequencies per layer
    module = ViTClassifier(config, lr=lr, weight_decay=training["weight_decay"],
                           warmup_steps=training["warmup_steps"], max_steps=training["steps"])
    row: dict[str, Any] = {"kind": "run", "encoding": encoding, "seed": seed, "lr": lr,
                           "train_seconds": fit(module, size, training["steps"], training["batch_size"])}
    model, device = module.model, next(module.parameters()).device
    row["parameters"] = model.num_parameters()
    row["position_parameters"] = model.num_parameters() - model.num_parameters(exclude_positional=True)
    row["val_acc"] = accuracy(model, dataset("val", size, data), device=device)
    for test_size in preset["data"]["test_sizes"]:
        row[f"acc_{test_size}"] = accuracy(model, dataset("test", test_size, data), device=device)
    trained = copy.deepcopy(model.state_dict())
    for tune_size in finetune["sizes"]:
        L.seed_everything(seed, verbose=False)
        tuned = ViTClassifier(config, lr=finetune["lr"], weight_decay=training["weight_decay"],
                              warmup_steps=finetune["warmup_steps"], max_steps=finetune["steps"])
        tuned.model.load_state_dict(trained)
        fit(tuned, tune_size, finetune["steps"], finetune["batch_size"])
        row[f"finetuned_acc_{tune_size}"] = accuracy(tuned.model, dataset("test", tune_size, data),
                                                     device=next(tuned.parameters()).device)
    row["seconds"] = time.perf_counter() - start
    row["cpu_seconds"] = time.process_time() - cpu_start  # this process's CPU time: comparable on a shared machine
    return row


def claims(rows: list[dict[str, Any]], sizes: list[int], train_size: int) -> list[dict[str, Any]]:
    """RoPE-Mixed / RoPE-Axial beat learned_2d / sincos_2d at every test size above the training one.

    Each a :func:`~pe_toolkit.bench.verdict.decide_claim` row (Welch t on per-seed test accuracies, bounded
    to [0, 1]); untested when a side is not learned at the training resolution (:data:`LEARNED_ACC`). The
    row's ``caveat`` says how the task departs from the paper's.
    """
    by = {e: [r for r in rows if r["encoding"] == e] for e in dict.fromkeys(r["encoding"] for r in rows)}
    out = []
    for rotary, absolute in ((r, a) for r in ROTARY for a in ABSOLUTE if r in by and a in by):
        learned = {e: statistics.fmean(r["val_acc"] for r in by[e]) for e in (rotary, absolute)}
        for size in (s for s in sizes if s > train_size):
            claim = decide_claim(
                [r.get(f"acc_{size}") for r in by[rotary]], [r.get(f"acc_{size}") for r in by[absolute]],
                kind="difference", higher_is_better=True, bounds=(0.0, 1.0),
                name=f"{rotary} beats {absolute} at {size} px (trained at {train_size})",
                preconditions=[(learned[e] >= LEARNED_ACC, f"{e} not learned: validation accuracy {learned[e]:.3f} "
                                f"at {train_size} px < {LEARNED_ACC}") for e in (rotary, absolute)])
            out.append(claim_row(claim, comparison=f"{rotary} vs {absolute}", size=size, caveat=TASK_CAVEAT[absolute]))
    return out


def plot_accuracy(summary: list[dict[str, Any]], sizes: list[int], tune_sizes: list[int]) -> Any:
    fig, axes = new_figure(size=(7, 4.5))
    ax, markers = axes[0][0], "osD^vP*X"
    spread = 0.012 * (max(sizes) - min(sizes) if len(sizes) > 1 else 1)  # side by side: no series hides another
    for index, entry in enumerate(summary):
        shift = (index - (len(summary) - 1) / 2) * spread
        plot_intervals(ax, [size + shift for size in sizes], [entry[f"acc_{s}"] for s in sizes],
                       marker=markers[index % len(markers)], color=f"C{index}", label=entry["encoding"])
        if tune_sizes:
            ax.plot(tune_sizes, [entry[f"finetuned_acc_{s}"]["mean"] for s in tune_sizes], linestyle="none",
                    marker="*", markersize=11, color=f"C{index}")
    ax.axhline(0.25, color="0.6", linestyle=":", linewidth=1, label="chance (4 classes)")
    ax.set(xticks=sizes, xlabel="test resolution (pixels; trained at the first)", ylim=(0, 1.02),
           ylabel="test accuracy (mean, 95 % interval over seeds)")
    ax.set_title("Accuracy vs resolution without fine-tuning (lines) and after a short fine-tune (stars)", fontsize=9)
    return finish(fig, "test accuracy")


class Vision(Benchmark):
    name, title = "vision", "Vision: ViT accuracy vs test resolution per positional encoding"
    Config, key_fields = Config, ("encoding", "seed")
    run_one = staticmethod(run_one)
    held_out = ("no test scene and no test resolution feeds training or the choice of learning rate; the fine-tunes "
                "train on training scenes rendered at the test size")
    same_budget = "shares the model, steps, batch, schedule and fine-tune, scored on the same validation scenes"

    def check(self, config: Config) -> None:
        distinct("encodings", config.encodings)

    def runs(self, config: Config) -> list[dict[str, Any]]:
        run_preset = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("seeds", "encodings")}
        return [{"encoding": e, "seed": s, "preset": run_preset} for e in config.encodings for s in config.seeds]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="lr", values=config.training.lrs, metric="val_acc", maximize=True, group="encoding",
                      max_extensions=config.training.max_extensions)

    def progress_label(self, row: dict[str, Any]) -> str:
        accuracies = " ".join(f"{k[4:]}px={v:.2f}" for k, v in row.items() if k.startswith("acc_"))
        return (f"{row['encoding']} seed {row['seed']} lr {row['lr']:g}: val {row['val_acc']:.2f} {accuracies} "
                f"({row['seconds']:.0f}s)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        data = result.config.data
        summary = summarize_groups(result.rows, ("encoding",), ["val_acc", *accuracy_fields(result.config)],
                                   bounds=(0.0, 1.0), keep=("lr", "position_parameters"))
        return [{**s, "kind": "summary"} for s in summary] + claims(result.rows, data.test_sizes, data.train_size)

    def plot(self, result: Result) -> dict[str, Any]:
        return {"accuracy_vs_resolution.png": plot_accuracy(result.derived_of("summary"), result.config.data.test_sizes,
                                                            result.config.finetune.sizes)}

    def describe(self, result: Result) -> str:
        data = result.config.data
        return (f"ShapeRelations (where the square is relative to the disc, 4 classes, chance 0.25), up to "
                f"{data.max_distractors} distractors; trained at {data.train_size} px. Device {result.device}.")

    def fairness_notes(self, result: Result) -> list[str]:
        return [f"A claim is untested when a side's validation accuracy at the training size is below {LEARNED_ACC} "
                "(not learned). How the task departs from the paper's (ViT-S/B on ImageNet-1k): "
                + "; ".join(f"against {name}: {caveat}" for name, caveat in TASK_CAVEAT.items()) + "."]

    def report(self, result: Result) -> str:
        accuracies = accuracy_fields(result.config)
        headers = [(f, f"{f.split('_')[-1]} px" + (", fine-tuned" if f.startswith("fine") else "")) for f in accuracies]
        return (super().report(result) + "\n## Test accuracy (mean [95 % interval] over seeds)\n\n"
                + summary_table(result.derived_of("summary"), ["encoding", ("runs", "seeds"), "lr"], headers)
                + "\n## Every run\n\n" + markdown_table(
                    result.rows, ["encoding", "seed", "lr", "val_acc", *accuracies, "position_parameters", "seconds"],
                    {**dict.fromkeys(["val_acc", *accuracies], ".3f"), "seconds": ".0f"}))


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="vision", prog="python benchmarks/vision.py"))
