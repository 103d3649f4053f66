"""Detection: independent decoder stages vs. RecursiveDet's shared stage, with and without box / centerness PEs.

Zhao, Sun, Li 2023, "RecursiveDet" (arXiv:2307.13619) claim that a region-based detector whose decoder stages
share parameters (recursion), with the proposal-box PE and the centerness PE, beats the same detector with
independent stages while having fewer parameters. This benchmark checks that claim at CPU scale, and separates
the two things the claim mixes, sharing and the PEs, with a 2 x 2 design:

* variants (:data:`VARIANTS`): ``independent`` (Sparse R-CNN, every stage its own parameters), ``recursive``
  (first stage + one shared stage applied ``num_stages - 1`` times, its dynamic interaction twice),
  ``recursive_box`` (+ ``box_pe`` in the proposals' self-attention), ``recursive_box_centerness`` (+ the
  ``centerness_pe`` term in the dynamic interaction) and ``independent_box_centerness`` (both PEs, no sharing):
  the PE effect is measured with and without sharing, the sharing effect with and without the PEs. The centerness
  term is one number per RoI cell added before ``LayerNorm(dynamic_dim)``, which subtracts it (the official
  ``DynamicConv`` does the same), so the centerness PE does not change a detector's output: the claim that it
  helps is untested here, and comparisons with both PEs measure the box PE;
* data (``data.kind``): ``shapes`` (:class:`pe_toolkit.domains.detection.ShapesDetectionDataset`, seeded, any
  size and 1-3 classes) or ``coco`` (your COCO JSON + image folders in ``data.coco``, letterboxed to one size;
  the class count is the categories'); train / validation / test sets are fixed for all variants and seeds;
* COCO mAP / AP50 / AP75 (pycocotools COCOeval, ``iscrowd`` regions ignored as COCOeval ignores them) on the
  test set, with the parameter count.

Fairness rule (``docs/benchmarks.md``): every variant trains for the same steps on the same images and gets the
same lr grid (``training.lrs``, chosen per variant on the first seed by validation mAP,
:class:`~pe_toolkit.bench.Tuning`); the test set is scored once per run; >= 3 seeds; every claim from
:func:`pe_toolkit.bench.verdict.decide_claim`.

    python benchmarks/detection.py --quick              # pipeline check, < 2 minutes here
    python benchmarks/detection.py --jobs 2             # full CPU preset
    pe-toolkit bench detection --preset gpu --accelerator cuda --jobs 4
    python benchmarks/detection.py --set data.kind=coco --set data.coco.train_annotations=ann.json \\
        --set data.coco.train_image_dir=imgs/ --set data.coco.test_annotations=test.json \\
        --set data.coco.test_image_dir=imgs_test/ --set data.image_size=128     # your COCO files

Presets: ``benchmarks/presets/detection/{quick,full,gpu}.yaml``. Outputs in ``<out>/detection/``:
``results.json``, ``report.md``, ``map_vs_parameters.png`` and ``predictions.png``; every finished run in
``runs/<preset>/``. Deviation from the issue: torchvision and torchmetrics' MeanAveragePrecision cannot be
used here (torchvision's wheels fail to load beside the pinned CPU torch), so RoI Align, box ops and the metric
are the domain's own / pycocotools (see ``domains/detection``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from typing import Any

from pe_toolkit.bench import Benchmark, Result, Tuning, trainer_options
from pe_toolkit.bench.checks import distinct, positive, positives
from pe_toolkit.bench.plots import nan_if_missing, note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.verdict import claim_row, claims_table, decide_claim, format_side, summarize, untested_claim

# the names of pe_toolkit.domains.detection.DETECTOR_VARIANTS (kept here so that --help and the config checks do not
# import torch; a test keeps the two equal); DetectorConfig.for_variant builds each one
VARIANTS: dict[str, dict[str, bool]] = {
    "independent": {"recursive": False, "box_pe": False, "centerness_pe": False},
    "recursive": {"recursive": True, "box_pe": False, "centerness_pe": False},
    "recursive_box": {"recursive": True, "box_pe": True, "centerness_pe": False},
    "recursive_box_centerness": {"recursive": True, "box_pe": True, "centerness_pe": True},
    "independent_box_centerness": {"recursive": False, "box_pe": True, "centerness_pe": True},
}
CENTERNESS_CANCELS = ("the centerness term cancels in the dynamic layer's LayerNorm (as in the official code), so "
                      "the two variants differ only in their initial weights")
# (a, b, what a - b measures, why untested or None): the claim, then the PE effect with / without sharing, then
# the sharing effect; each "a beats b on test mAP" (the paper's ablations)
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


# ------------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Coco:
    train_annotations: str | None = None
    train_image_dir: str | None = None
    val_annotations: str | None = None
    val_image_dir: str | None = None
    test_annotations: str | None = None
    test_image_dir: str | None = None


@dataclasses.dataclass
class Data:
    kind: str  # shapes (generated, seeded) or coco (your files)
    num_classes: int  # shapes only; coco takes the count from its categories
    image_size: int  # shapes: the image side; coco: the letterbox side
    train_images: int
    val_images: int  # coco: held out of the training file when no validation file is given
    test_images: int
    coco: Coco = dataclasses.field(default_factory=Coco)


@dataclasses.dataclass
class Model:
    dim: int
    num_heads: int
    ffn_dim: int
    dynamic_dim: int
    pooler_resolution: int
    sampling_ratio: int
    num_proposals: int
    num_stages: int
    backbone_channels: list[int]


@dataclasses.dataclass
class Training:
    steps: int
    batch_size: int
    lrs: list[float]  # the tuning grid every variant gets


@dataclasses.dataclass
class Config:
    seeds: list[int]
    variants: list[str]
    data: Data
    model: Model
    training: Training


# ------------------------------------------------------------------------------------------------ data
def build_datasets(data: dict[str, Any]) -> dict[str, Any]:
    """``{"train", "val", "test", "num_classes", "categories"}`` from the config's ``data`` section.

    ``coco``: every split letterboxed to ``image_size``; without a validation file, the last ``val_images``
    images of the training file are held out for validation; all splits must share the same categories.
    """
    from torch.utils.data import Subset

    from pe_toolkit.domains.detection.data import CocoDetectionDataset, Letterbox, ShapesDetectionDataset

    size = data["image_size"]
    if data["kind"] == "shapes":
        options = {"image_size": size, "num_classes": data["num_classes"],
                   "min_size": max(3, round(size * 10 / 64)), "max_size": max(3, round(size * 28 / 64))}
        train = ShapesDetectionDataset(data["train_images"], seed=1000, **options)
        return {"train": train, "val": ShapesDetectionDataset(data["val_images"], seed=1500, **options),
                "test": ShapesDetectionDataset(data["test_images"], seed=2000, **options),
                "num_classes": train.num_classes, "categories": train.categories}
    coco = data["coco"]
    letterbox = Letterbox(size)
    train = CocoDetectionDataset(coco["train_annotations"], coco["train_image_dir"], transform=letterbox)
    test = CocoDetectionDataset(coco["test_annotations"], coco["test_image_dir"], transform=letterbox)
    if coco["val_annotations"]:
        val = CocoDetectionDataset(coco["val_annotations"], coco["val_image_dir"], transform=letterbox)
        fit = train
    else:
        held = data["val_images"]
        if held >= len(train):
            raise ValueError(f"data.val_images ({held}) must be below the {len(train)} training images when no "
                             "validation file is given")
        fit, val = Subset(train, range(len(train) - held)), Subset(train, range(len(train) - held, len(train)))
    for name, other in (("test", test), ("val", val.dataset if isinstance(val, Subset) else val)):
        if other.categories != train.categories:
            raise ValueError(f"the {name} annotations have categories {other.categories}, the training annotations "
                             f"{train.categories}; every split needs the same categories")
    return {"train": fit, "val": val, "test": test, "num_classes": train.num_classes,
            "categories": train.categories}


@functools.lru_cache(maxsize=2)
def _datasets(data_json: str) -> dict[str, Any]:
    return build_datasets(json.loads(data_json))


def datasets_of(data: dict[str, Any]) -> dict[str, Any]:
    """:func:`build_datasets`, built once per process for one ``data`` section."""
    return _datasets(json.dumps(data, sort_keys=True))


# ------------------------------------------------------------------------------------------------ one run
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
    evaluator = L.Trainer(**trainer_options(spec["device"]), logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False)
    L.seed_everything(seed, verbose=False)
    module = DetectionModule(config, lr=spec["lr"], warmup_steps=max(1, training["steps"] // 10),
                             max_steps=training["steps"])
    data = DetectionDataModule(datasets["train"], val=datasets["val"], test=datasets["test"],
                               batch_size=training["batch_size"], seed=seed)
    trainer = L.Trainer(max_steps=training["steps"], **trainer_options(spec["device"]), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, gradient_clip_val=1.0)
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


# ------------------------------------------------------------------------------------------------ summary, claims
def summarize_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per variant: mAP, AP50, AP75 and validation mAP over seeds (bounded in [0, 1]); parameters; runs."""
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        runs = [r for r in rows if r["variant"] == variant]
        entry: dict[str, Any] = {"variant": variant, "parameters": runs[0]["parameters"], "runs": len(runs)}
        for metric in METRICS:
            entry[metric] = summarize([r.get(metric) for r in runs], bounds=(0.0, 1.0)).as_dict()
        out.append(entry)
    return out


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


# ------------------------------------------------------------------------------------------------ plots
def plot_map(summary: list[dict[str, Any]]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for entry in summary:
        side = entry["map"]
        mean, low, high = (nan_if_missing(side[k]) for k in ("mean", "low", "high"))
        error = [[mean - low], [high - mean]] if math.isfinite(low) else None
        ax.errorbar(nan_if_missing(entry["parameters"]) / 1e3, mean, yerr=error, fmt="o", capsize=4,
                    label=entry["variant"])
    ax.set_xlabel("parameters (thousands)")
    ax.set_ylabel("COCO mAP (test, mean and 95 % interval over seeds)")
    ax.set_title("Detection: mAP vs. parameters")
    if not note_if_empty(ax, "test mAP"):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_predictions(test_set, drawn: dict[str, list[dict]], categories: list[str], threshold: float = 0.3) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    colours = ["tab:red", "tab:green", "tab:blue"]
    variants = list(drawn)
    n = len(next(iter(drawn.values())))
    fig, axes = plt.subplots(n, len(variants), figsize=(2.6 * len(variants), 2.6 * n), squeeze=False)
    for col, variant in enumerate(variants):
        for row in range(n):
            ax = axes[row][col]
            image, target = test_set[row]
            ax.imshow(image.permute(1, 2, 0).numpy())
            for (x1, y1, x2, y2) in target["boxes"].tolist():
                ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, ec="white", ls="--", lw=1))
            pred = drawn[variant][row]
            for box, score, label in zip(pred["boxes"], pred["scores"], pred["labels"]):
                if score < threshold:
                    continue
                x1, y1, x2, y2 = box
                ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, ec=colours[label % 3], lw=1.5))
                ax.text(x1, y1, f"{categories[label][:4]} {score:.2f}", color=colours[label % 3], fontsize=6,
                        va="bottom")
            note_if_empty(ax, "the test image")
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(variant, fontsize=8)
    fig.suptitle(f"test images: ground truth (white, dashed), detections with score >= {threshold}", fontsize=9)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ report
def report_body(result: Result) -> str:
    config, rows = result.config, result.rows
    summary = [s for s in result.derived if s["kind"] == "summary"]
    claim_rows = [c for c in result.derived if c["kind"] == "claim"]
    datasets = datasets_of(dataclasses.asdict(config.data))
    data, training, lrs = config.data, config.training, config.training.lrs
    source = (f"shapes ({data.num_classes} classes, {data.image_size} x {data.image_size} px)"
              if data.kind == "shapes" else
              f"COCO files {dataclasses.asdict(data.coco)} letterboxed to {data.image_size} px")
    edges = sorted(v for v, lr in result.chosen.items() if len(lrs) > 1 and lr in (min(lrs), max(lrs)))
    fmt = {k: ".4f" for k in ("map", "map_50", "map_75", "val_map", "final_train_loss")}
    fmt |= {"seconds": ".0f", "parameter_ratio": ".0%", "lr": "g"}
    cells = [{**s, **{m: format_side(s[m], ".4f") for m in METRICS}} for s in summary]
    body = [
        f"Data: {source}, {len(datasets['train'])} training / {len(datasets['val'])} validation / "
        f"{len(datasets['test'])} test images, classes {datasets['categories']}. {training.steps} steps of batch "
        f"{training.batch_size} per run, seeds {config.seeds}. Model: {dataclasses.asdict(config.model)}. Device: "
        f"{result.device}. COCO metrics from pycocotools COCOeval on the test set.\n\n",
        "## How the fairness rule is met\n\n",
        f"* Same tuning budget on the same validation data: on the first seed every variant trains with each lr of "
        f"{lrs} (same steps, same images, same seed), and the lr with the best mAP on the {len(datasets['val'])} "
        f"validation images is kept for every seed of that variant ({result.chosen})"
        + (" (one value: no variant is tuned)" if len(lrs) == 1 else "") + ".\n"
        "* Nothing from the test target reaches a model: the test images are scored after training, never chosen "
        "on.\n"
        f"* {len(config.seeds)} seeds: mean and Student-t 95 % interval within [0, 1]; every verdict from "
        "`pe_toolkit.bench.verdict.decide_claim` (Welch's interval of the mAP difference: independent trainings).\n"
        + (f"* The chosen lr lies on the edge of the grid for: {', '.join(edges)}.\n" if edges else ""),
        "\n## Mean [95 % interval] over seeds\n\n",
        markdown_table(cells, ["variant", "parameters", "runs", ("map", "mAP"), ("map_50", "AP50"),
                               ("map_75", "AP75"), ("val_map", "val mAP")]),
        "\n\n## Claims (test mAP; each a paper ablation: a beats b)\n\n",
        markdown_table(claim_rows, ["comparison", "measures", ("parameter_ratio", "params a / b"), "verdict"],
                       formats=fmt),
        "\n", claims_table(claim_rows, ".4f"),
        "\n## Every run\n\n",
        markdown_table(rows, ["variant", "seed", "lr", "parameters", "map", "map_50", "map_75", "val_map",
                              "final_train_loss", "seconds"], formats=fmt),
        "\n\n![mAP vs parameters](map_vs_parameters.png)\n\n"
        + ("![predictions](predictions.png)\n" if any("predictions" in r for r in rows) else ""),
    ]
    return "".join(body)


# ------------------------------------------------------------------------------------------------ benchmark
class Detection(Benchmark):
    name = "detection"
    title = "Detection: recursive decoder with box and centerness PEs (RecursiveDet)"
    description = ("RecursiveDet's shared decoder stage with box / centerness PEs against independent stages: "
                   "COCO mAP and parameters, a 2 x 2 design (Zhao et al. 2023)")
    Config = Config
    key_fields = ("variant", "seed")

    def check(self, config: Config) -> None:
        distinct("seeds", config.seeds)
        distinct("variants", config.variants, allowed=VARIANTS)
        data = config.data
        if data.kind not in ("shapes", "coco"):
            raise ValueError(f"data.kind must be 'shapes' or 'coco', got {data.kind!r}")
        for key in ("image_size", "train_images", "val_images", "test_images", "num_classes"):
            positive(f"data.{key}", getattr(data, key))
        if data.kind == "coco":
            for split in ("train", "test"):
                if not getattr(data.coco, f"{split}_annotations") or not getattr(data.coco, f"{split}_image_dir"):
                    raise ValueError(f"data.kind 'coco' needs data.coco.{split}_annotations and "
                                     f"data.coco.{split}_image_dir")
        positives("training.lrs", config.training.lrs)
        positive("training.steps", config.training.steps)
        positive("training.batch_size", config.training.batch_size)

    def runs(self, config: Config) -> list[dict[str, Any]]:
        parts = {"data": dataclasses.asdict(config.data), "model": dataclasses.asdict(config.model),
                 "training": {"steps": config.training.steps, "batch_size": config.training.batch_size}}
        return [{"variant": v, "seed": s, **parts, "draw_images": 4 if s == config.seeds[-1] else 0}
                for s in config.seeds for v in config.variants]

    def tuning(self, config: Config) -> Tuning:
        return Tuning(param="lr", values=[float(lr) for lr in config.training.lrs], metric="val_map", maximize=True,
                      group="variant")

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return run_one(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        return (f"{row['variant']} seed {row['seed']} lr {row['lr']:g}: mAP {row['map']:.4f} AP50 "
                f"{row['map_50']:.4f} (val {row['val_map']:.4f}, {row['parameters']} params, {row['seconds']:.0f}s)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        return [{"kind": "summary", **s} for s in summarize_rows(result.rows)] + claims(result.rows)

    def plot(self, result: Result) -> dict[str, Any]:
        figures = {"map_vs_parameters.png": plot_map([s for s in result.derived if s["kind"] == "summary"])}
        drawn = {r["variant"]: r["predictions"] for r in result.rows if r.get("predictions")}
        if drawn:
            datasets = datasets_of(dataclasses.asdict(result.config.data))
            figures["predictions.png"] = plot_predictions(datasets["test"], drawn, datasets["categories"])
        return figures

    def report(self, result: Result) -> str:
        return report_body(result)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="detection", prog="python benchmarks/detection.py"))
