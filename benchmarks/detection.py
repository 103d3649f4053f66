"""Detection: RecursiveDet's shared decoder stage with box / centerness PEs against independent stages.

Zhao, Sun, Li 2023, "RecursiveDet" (arXiv:2307.13619): a region-based detector whose decoder stages share parameters,
with the proposal-box PE and the centerness PE, beats independent stages with fewer parameters. Five variants (a 2 x 2
design of sharing x PEs, :data:`COMPARISONS`) train on the same images (seeded shapes, or your COCO files) with the
same lr grid; COCO mAP (pycocotools) on the test set. Design, COCO use and results: docs/tutorials/detection.md.

    python benchmarks/detection.py --quick              # pipeline check, < 2 minutes here
    python benchmarks/detection.py --jobs 2             # full CPU preset
    pe-toolkit bench detection --preset gpu --accelerator cuda --jobs 4
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
import typing
from typing import Any, Literal

from jsonargparse.typing import PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning, quiet_trainer
from pe_toolkit.bench.checks import distinct, positives
from pe_toolkit.bench.config import TrainingGrid
from pe_toolkit.bench.plots import finish, new_figure, plot_intervals
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.verdict import claim_row, decide_claim, untested_claim

# pe_toolkit.domains.detection.DETECTOR_VARIANTS without importing torch (a test keeps the two equal)
Variant = Literal["independent", "recursive", "recursive_box", "recursive_box_centerness", "independent_box_centerness"]
VARIANTS = typing.get_args(Variant)
CENTERNESS_CANCELS = ("the centerness term cancels in the dynamic layer's LayerNorm (as in the official code), so "
                      "the two variants differ only in their initial weights")
# (a, b, what a - b measures, why untested or None), each "a beats b on test mAP": the paper's claim, the PE effect
# with / without sharing, then the sharing effect
COMPARISONS = (
    ("recursive_box_centerness", "independent", "the paper's claim: recursion + both PEs vs independent stages", None),
    ("independent_box_centerness", "independent", "both PEs, independent stages (PE effect without sharing)", None),
    ("recursive_box_centerness", "recursive", "both PEs, shared stages (PE effect with sharing)", None),
    ("recursive_box", "recursive", "box PE alone, shared stages", None),
    ("recursive_box_centerness", "recursive_box", "centerness PE on top of the box PE, shared stages",
     CENTERNESS_CANCELS),
    ("recursive", "independent", "sharing without PEs", None),
    ("recursive_box_centerness", "independent_box_centerness", "sharing with both PEs", None),
)
METRICS = ("map", "map_50", "map_75", "val_map")
LEARNED_MAP = 0.05  # a variant whose mean validation mAP stays below this has not learned to detect: no claim on it


@dataclasses.dataclass
class Coco:
    train_annotations: str | None = None
    train_image_dir: str | None = None
    val_annotations: str | None = None
    val_image_dir: str | None = None
    test_annotations: str | None = None
    test_image_dir: str | None = None


@dataclasses.dataclass
class Data:  # the arguments of pe_toolkit.domains.detection.data.build_datasets
    kind: Literal["shapes", "coco"]
    num_classes: PositiveInt
    image_size: PositiveInt
    train_images: PositiveInt
    val_images: PositiveInt
    test_images: PositiveInt
    coco: Coco = dataclasses.field(default_factory=Coco)


@dataclasses.dataclass
class Model:
    dim: PositiveInt
    num_heads: PositiveInt
    ffn_dim: PositiveInt
    dynamic_dim: PositiveInt
    pooler_resolution: PositiveInt
    sampling_ratio: PositiveInt
    num_proposals: PositiveInt
    num_stages: PositiveInt
    backbone_channels: list[PositiveInt]




@dataclasses.dataclass
class Config:
    seeds: list[int]
    variants: list[Variant]
    data: Data
    model: Model
    training: TrainingGrid


@functools.lru_cache(maxsize=2)
def _datasets(data_json: str) -> dict[str, Any]:
    from pe_toolkit.domains.detection.data import build_datasets

    return build_datasets(**json.loads(data_json))


def datasets_of(data: dict[str, Any]) -> dict[str, Any]:
    """``build_datasets(**data)``, built once per process for one ``data`` section."""
    return _datasets(json.dumps(data, sort_keys=True))


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train ``spec["variant"]`` at ``spec["lr"]``, score validation mAP, then the test set once; a row.

    The last seed's run also keeps its detections on the first ``draw_images`` test images (for the plot).
    """
    import lightning as L
    import torch

    from pe_toolkit.domains.detection import DetectorConfig, count_parameters
    from pe_toolkit.domains.detection.lightning_module import DetectionDataModule, DetectionModule

    datasets = datasets_of(spec["data"])
    start = time.perf_counter()
    training, seed = spec["training"], spec["seed"]
    model_options = {**spec["model"], "backbone_channels": tuple(spec["model"]["backbone_channels"])}
    config = DetectorConfig.for_variant(spec["variant"], num_classes=datasets["num_classes"], **model_options)
    evaluator = quiet_trainer(spec["device"])
    L.seed_everything(seed, verbose=False)
    module = DetectionModule(config, lr=spec["lr"], warmup_steps=max(1, training["steps"] // 10),
                             max_steps=training["steps"])
    data = DetectionDataModule(datasets["train"], val=datasets["val"], test=datasets["test"],
                               batch_size=training["batch_size"], seed=seed)
    trainer = quiet_trainer(spec["device"], max_steps=training["steps"], limit_val_batches=0, gradient_clip_val=1.0)
    trainer.fit(module, data)
    train_loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
    val_map = float(evaluator.validate(module, data, verbose=False)[0]["val/map"])
    result = evaluator.test(module, data, verbose=False)[0]
    row = {"variant": spec["variant"], "seed": seed, "map": float(result["test/map"]),
           "map_50": float(result["test/map_50"]), "map_75": float(result["test/map_75"]), "val_map": val_map,
           "lr": spec["lr"], "parameters": count_parameters(module.model), "final_train_loss": train_loss,
           "steps": training["steps"], "seconds": time.perf_counter() - start, "kind": "run"}
    if spec["draw_images"]:
        count = min(spec["draw_images"], len(datasets["test"]))
        images = torch.stack([datasets["test"][i][0] for i in range(count)]).to(module.device)
        module.model.eval()
        row["predictions"] = [{k: v.cpu().tolist() for k, v in p.items()} for p in module.model.predict(images)]
    return row


def _mean_val_map(runs: list[dict[str, Any]]) -> float:
    values = [r["val_map"] for r in runs if r.get("val_map") is not None and math.isfinite(r["val_map"])]
    return sum(values) / len(values) if values else math.nan


def claims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every comparison of :data:`COMPARISONS` whose two variants were run: "a beats b on test mAP" (independent
    trainings: Welch), untested unless both variants learned (mean validation mAP >= :data:`LEARNED_MAP`). The
    paper's claim also needs ``a`` to have fewer parameters than ``b`` (measured)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by.setdefault(row["variant"], []).append(row)
    out = []
    for a, b, measures, untested in COMPARISONS:
        if a not in by or b not in by:
            continue
        values_a, values_b = [r["map"] for r in by[a]], [r["map"] for r in by[b]]
        ratio = by[a][0]["parameters"] / by[b][0]["parameters"]
        name = f"{a} beats {b} on test mAP"
        if untested is not None:
            claim = untested_claim(name, untested, values_a, values_b, bounds=(0.0, 1.0))
        else:
            paper = (a, b) == COMPARISONS[0][:2]  # "... with fewer parameters"
            learned = [(_mean_val_map(by[v]) >= LEARNED_MAP, f"{v} is not learned (mean validation mAP "
                        f"{_mean_val_map(by[v]):.3f} < {LEARNED_MAP})") for v in (a, b)]
            fewer = (ratio < 1 or not paper, f"{a} has {ratio:.0%} of {b}'s parameters, not fewer")
            claim = decide_claim(values_a, values_b, higher_is_better=True, bounds=(0.0, 1.0), name=name,
                                 preconditions=[*learned, fewer])
        out.append(claim_row(claim, comparison=f"{a} vs {b}", measures=measures, metric="map",
                             parameter_ratio=ratio))
    return out


def plot_map(summary: list[dict[str, Any]]) -> Any:
    fig, axes = new_figure()
    for entry in summary:
        plot_intervals(axes[0][0], [entry["parameters"] / 1e3], [entry["map"]], label=entry["variant"])
    axes[0][0].set(xlabel="parameters (thousands)", ylabel="COCO mAP (test, mean and 95 % interval over seeds)",
                   title="Detection: mAP vs. parameters")
    return finish(fig, "test mAP")


class Detection(Benchmark):
    name = "detection"
    title = "Detection: recursive decoder with box and centerness PEs (RecursiveDet)"
    Config = Config
    key_fields = ("variant", "seed")
    run_one = staticmethod(run_one)
    summary_by, summary_keep = ("variant",), ("parameters",)
    summary_metrics = {metric: (0.0, 1.0) for metric in METRICS}
    run_columns = ("variant", "seed", "lr", "parameters", *METRICS, "seconds")
    number_format = ".4f"
    held_out = "the test images are scored once after training, never chosen on"
    same_budget = "trains for the same steps on the same images"

    def check(self, config: Config) -> None:
        distinct("variants", config.variants)
        positives("training.lrs", config.training.lrs)
        coco = dataclasses.asdict(config.data.coco)
        for split in ("train", "test") if config.data.kind == "coco" else ():
            if not coco[f"{split}_annotations"] or not coco[f"{split}_image_dir"]:
                raise ValueError(f"data.kind 'coco' needs data.coco.{split}_annotations and "
                                 f"data.coco.{split}_image_dir")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        parts = {"data": dataclasses.asdict(config.data), "model": dataclasses.asdict(config.model),
                 "training": {"steps": config.training.steps, "batch_size": config.training.batch_size}}
        return [{"variant": v, "seed": s, **parts, "draw_images": 4 if s == config.seeds[-1] else 0}
                for s in config.seeds for v in config.variants]

    def tuning(self, config: Config) -> Tuning:
        return config.training.lr_tuning(metric="val_map", maximize=True, group="variant")

    def claims(self, result: Result) -> list[dict[str, Any]]:
        return claims(result.rows)

    def describe(self, result: Result) -> str:
        data, training = result.config.data, result.config.training
        datasets = datasets_of(dataclasses.asdict(data))
        source = (f"shapes ({data.num_classes} classes, {data.image_size} x {data.image_size} px)"
                  if data.kind == "shapes" else f"your COCO files letterboxed to {data.image_size} px")
        return (f"Data: {source}, {len(datasets['train'])} training / {len(datasets['val'])} validation / "
                f"{len(datasets['test'])} test images, classes {datasets['categories']}; {training.steps} steps of "
                f"batch {training.batch_size} per run. COCO metrics (pycocotools) on the test set.")

    def report(self, result: Result) -> str:
        return super().report(result) + "\n## What each claim measures\n\n" + markdown_table(
            result.derived_of("claim"), ["comparison", "measures", ("parameter_ratio", "params a / b")],
            formats={"parameter_ratio": ".0%"})

    def plot(self, result: Result) -> dict[str, Any]:
        figures = {"map_vs_parameters.png": plot_map(result.derived_of("summary"))}
        drawn = {r["variant"]: r["predictions"] for r in result.rows if r.get("predictions")}
        if drawn:
            from pe_toolkit.domains.detection.plotting import plot_detections

            datasets = datasets_of(dataclasses.asdict(result.config.data))
            figures["predictions.png"] = plot_detections(datasets["test"], drawn, datasets["categories"])
        return figures


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="detection", prog="python benchmarks/detection.py"))
