"""Detection: independent decoder stages vs. RecursiveDet's shared stage, with and without box / centerness PEs.

Zhao, Sun, Li 2023, "RecursiveDet" (arXiv:2307.13619) claim that a region-based detector whose decoder stages
share parameters (recursion), with the proposal-box PE and the centerness PE, matches or beats the same detector
with independent stages while having fewer parameters. This benchmark checks that claim at CPU scale, and
separates the two things the claim mixes, sharing and the PEs, with a 2 x 2 design:

* variants (:data:`VARIANTS`): ``independent`` (Sparse R-CNN, every stage its own parameters), ``recursive``
  (first stage + one shared stage applied ``num_stages - 1`` times, its dynamic interaction twice),
  ``recursive_box`` (+ ``box_pe`` in the proposals' self-attention), ``recursive_box_centerness`` (+ the
  ``centerness_pe`` term in the dynamic interaction) and ``independent_box_centerness`` (both PEs, no sharing):
  the PE effect is measured with and without sharing, the sharing effect with and without the PEs. The centerness
  term is one number per RoI cell added before ``LayerNorm(dynamic_dim)``, which subtracts it (the official
  ``DynamicConv`` does the same), so the centerness PE does not change a detector's output: its comparisons
  measure the box PE and the initial weights;
* data from the preset / arguments: ``shapes`` (:class:`pe_toolkit.domains.detection.ShapesDetectionDataset`,
  seeded, any size and 1-3 classes) or ``coco`` (your COCO JSON + image folders, letterboxed to one size; the
  class count is the categories'); train / validation / test sets are fixed for all variants and seeds;
* COCO mAP / AP50 / AP75 (pycocotools COCOeval, ``iscrowd`` regions ignored as COCOeval ignores them) on the
  test set, with the parameter count.

Fairness rule (``docs/benchmarks.md``): every variant trains for the same steps on the same images and gets the
same lr grid (``training.lr``), the lr chosen per variant and seed by validation mAP; the test set is scored
once, for the chosen model; >= 3 seeds with mean and Student-t 95 % interval; verdicts from
:func:`common.interval_verdict`.

    python benchmarks/detection.py --quick              # pipeline check, < 2 minutes here
    python benchmarks/detection.py --jobs 2             # full CPU preset
    python benchmarks/detection.py --preset gpu --accelerator cuda --jobs 4
    python benchmarks/detection.py --coco-train ann.json imgs/ --coco-test test.json imgs_test/ \
        --set data.image_size=128       # your COCO files, letterboxed to 128 px
    python benchmarks/detection.py --resume             # reuse the finished runs of an interrupted one

Presets: ``benchmarks/presets/detection/{quick,full,gpu}.yaml``. Outputs in ``<out>/detection/``:
``results.json`` (one row per variant x seed, the summaries and verdicts), ``runs/<preset>/`` (each run as it
finishes, with its configuration; ``--resume`` reuses those that match), ``report.md``, ``map_vs_parameters.png``
and ``predictions.png``. Deviation from the issue: torchvision and torchmetrics' MeanAveragePrecision cannot be
used here (torchvision's wheels fail to load beside the pinned CPU torch), so RoI Align, box ops and the metric
are the domain's own / pycocotools (see ``domains/detection``).
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
    results_dir,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)
from presets import device_options, preset_from_args, trainer_options  # noqa: E402

NAME = "detection"

# the names of pe_toolkit.domains.detection.DETECTOR_VARIANTS (kept here so that --help and the preset checks do not
# import torch; a test keeps the two equal); DetectorConfig.for_variant builds each one
VARIANTS: dict[str, dict[str, bool]] = {
    "independent": {"recursive": False, "box_pe": False, "centerness_pe": False},
    "recursive": {"recursive": True, "box_pe": False, "centerness_pe": False},
    "recursive_box": {"recursive": True, "box_pe": True, "centerness_pe": False},
    "recursive_box_centerness": {"recursive": True, "box_pe": True, "centerness_pe": True},
    "independent_box_centerness": {"recursive": False, "box_pe": True, "centerness_pe": True},
}
# (a, b, what a - b measures): the claim, then the PE effect with / without sharing, then the sharing effect
COMPARISONS = (
    ("recursive_box_centerness", "independent", "the paper's claim: recursion + both PEs vs independent stages"),
    ("independent_box_centerness", "independent", "both PEs, independent stages (PE effect without sharing)"),
    ("recursive_box_centerness", "recursive", "both PEs, shared stages (PE effect with sharing)"),
    ("recursive_box", "recursive", "box PE alone, shared stages"),
    ("recursive_box_centerness", "recursive_box", "centerness PE on top of the box PE, shared stages (its term cancels "
     "in the dynamic layer's LayerNorm, as in the official code: this measures only initialisation)"),
    ("recursive", "independent", "sharing without PEs"),
    ("recursive_box_centerness", "independent_box_centerness", "sharing with both PEs"),
)


def check_preset(preset: dict[str, Any]) -> None:
    """Errors naming the preset key for a preset that cannot run."""
    seeds = preset["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds) or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct ints, got {seeds!r}")
    variants = preset["variants"]
    if not isinstance(variants, list) or not variants or not set(variants) <= set(VARIANTS):
        raise ValueError(f"variants must be a non-empty list from {list(VARIANTS)}, got {variants!r}")
    data = preset["data"]
    if data["kind"] not in ("shapes", "coco"):
        raise ValueError(f"data.kind must be 'shapes' or 'coco', got {data['kind']!r}")
    for key in ("image_size", "train_images", "val_images", "test_images", "num_classes"):
        if isinstance(data[key], bool) or not isinstance(data[key], int) or data[key] < 1:
            raise ValueError(f"data.{key} must be a positive int, got {data[key]!r}")
    if data["kind"] == "coco":
        for split in ("train", "test"):
            if not data["coco"][f"{split}_annotations"] or not data["coco"][f"{split}_image_dir"]:
                raise ValueError(f"data.kind 'coco' needs data.coco.{split}_annotations and "
                                 f"data.coco.{split}_image_dir (or --coco-{split} ANNOTATIONS IMAGE_DIR)")
    training = preset["training"]
    lrs = training["lr"]
    if not isinstance(lrs, list) or not lrs or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                       and v > 0 for v in lrs):
        raise ValueError(f"training.lr must be a non-empty list of positive numbers (the tuning grid), got {lrs!r}")
    for key in ("steps", "batch_size"):
        if isinstance(training[key], bool) or not isinstance(training[key], int) or training[key] < 1:
            raise ValueError(f"training.{key} must be a positive int, got {training[key]!r}")


def build_datasets(data: dict[str, Any]) -> dict[str, Any]:
    """``{"train", "val", "test", "num_classes", "categories"}`` from the preset's ``data`` section.

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


def _metric_summary(values: list[float]) -> dict[str, Any]:
    return mean_interval([nan_if_missing(v) for v in values])


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per variant: mean and 95 % interval over seeds of map, map_50, map_75; parameters; run count."""
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        runs = [r for r in rows if r["variant"] == variant]
        row: dict[str, Any] = {"variant": variant, "parameters": runs[0]["parameters"], "runs": len(runs)}
        for metric in ("map", "map_50", "map_75", "val_map"):
            summary = _metric_summary([r[metric] for r in runs])
            row[f"{metric}_ci"] = summary
            row[metric] = summary["mean"] if summary["n"] else None
            row[f"{metric}_pm"] = format_interval(summary, ".4f")
        out.append(row)
    return out


def verdicts(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every comparison of :data:`COMPARISONS` whose two variants were run, verdict from the mAP intervals."""
    by = {r["variant"]: r for r in summary}
    out = []
    for a, b, what in COMPARISONS:
        if a in by and b in by:
            out.append({"comparison": f"{a} vs {b}", "measures": what, "a": by[a]["map_pm"], "b": by[b]["map_pm"],
                        "parameter_ratio": by[a]["parameters"] / by[b]["parameters"],
                        "verdict": interval_verdict(by[a]["map_ci"], by[b]["map_ci"], higher_is_better=True)})
    return out


def claim_check(summary: list[dict[str, Any]]) -> str:
    """A sentence on the paper's claim (recursive + both PEs vs independent), from the intervals only."""
    by = {r["variant"]: r for r in summary}
    if "independent" not in by or "recursive_box_centerness" not in by:
        return "The claim needs both `independent` and `recursive_box_centerness`; not both were run."
    ind, rec = by["independent"], by["recursive_box_centerness"]
    verdict = interval_verdict(rec["map_ci"], ind["map_ci"], higher_is_better=True)
    ratio = rec["parameters"] / ind["parameters"]
    meaning = {"better": "it beats independent stages (the intervals separate)",
               "worse": "it is worse than independent stages (the intervals separate)",
               "tie": "the runs do not separate the two (overlapping intervals, or fewer than 2 seeds)"}[verdict]
    return (f"Recursive + box PE + centerness PE reaches mAP {rec['map_pm']} vs. {ind['map_pm']} for independent "
            f"stages, with {ratio:.0%} of the parameters: {verdict}; {meaning}.")


def run_spec(variant: str, preset: dict[str, Any], draw_images: int) -> dict[str, Any]:
    return {"variant": variant, "data": preset["data"], "model": preset["model"], "training": preset["training"],
            "device": preset["device"], "draw_images": draw_images}


def train_one(variant: str, seed: int, preset: dict[str, Any], datasets: dict[str, Any] | None = None,
              draw_images: int = 0, threads: int = 1) -> tuple[dict[str, Any], list | None]:
    """Train ``variant`` once per lr of the grid, keep the best validation mAP, score it on the test set.

    Runs in a spawned worker with ``--jobs > 1`` (the datasets are built again there from the preset).
    """
    import lightning as L
    import torch

    from pe_toolkit.domains.detection import DetectorConfig, count_parameters
    from pe_toolkit.domains.detection.lightning_module import DetectionDataModule, DetectionModule

    torch.set_num_threads(threads)
    datasets = datasets if datasets is not None else build_datasets(preset["data"])
    start = time.perf_counter()
    training = preset["training"]
    model_options = {**preset["model"], "backbone_channels": tuple(preset["model"]["backbone_channels"])}
    config = DetectorConfig.for_variant(variant, num_classes=datasets["num_classes"], **model_options)
    best: dict[str, Any] = {"val_map": -math.inf}
    tried = []
    evaluator = L.Trainer(**trainer_options(preset.get("device")), logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False)
    for lr in training["lr"]:
        L.seed_everything(seed, verbose=False)
        module = DetectionModule(config, lr=lr, warmup_steps=max(1, training["steps"] // 10),
                                 max_steps=training["steps"])
        data = DetectionDataModule(datasets["train"], val=datasets["val"], test=datasets["test"],
                                   batch_size=training["batch_size"], seed=seed)
        trainer = L.Trainer(max_steps=training["steps"], **trainer_options(preset.get("device")), logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            limit_val_batches=0, gradient_clip_val=1.0)
        trainer.fit(module, data)
        train_loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
        val_map = float(evaluator.validate(module, data, verbose=False)[0]["val/map"])
        tried.append({"lr": lr, "val_map": val_map})
        if val_map > best["val_map"]:
            best = {"val_map": val_map, "lr": lr, "module": module, "data": data, "train_loss": train_loss}
    module, data = best["module"], best["data"]
    result = evaluator.test(module, data, verbose=False)[0]  # the test set, once, for the chosen lr
    drawn = None
    if draw_images:
        images = torch.stack([datasets["test"][i][0] for i in range(draw_images)]).to(module.device)
        module.model.eval()
        drawn = [{k: v.cpu().tolist() for k, v in p.items()} for p in module.model.predict(images)]
    row = {"variant": variant, "seed": seed, "map": float(result["test/map"]), "map_50": float(result["test/map_50"]),
           "map_75": float(result["test/map_75"]), "val_map": best["val_map"], "lr": best["lr"],
           "lr_tried": tried, "lr_at_edge": len(training["lr"]) >= 2 and best["lr"] in (min(training["lr"]),
                                                                                     max(training["lr"])),
           "parameters": count_parameters(module.model), "final_train_loss": best["train_loss"],
           "steps": training["steps"], "seconds": time.perf_counter() - start}
    return row, drawn


def plot_map(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for row in summary:
        ci, mean = row["map_ci"], nan_if_missing(row["map"])
        error = [[mean - ci["low"]], [ci["high"] - mean]] if math.isfinite(ci["low"]) else None
        ax.errorbar(nan_if_missing(row["parameters"]) / 1e3, mean, yerr=error, fmt="o", capsize=4,
                    label=row["variant"])
    ax.set_xlabel("parameters (thousands)")
    ax.set_ylabel("COCO mAP (test, mean and 95 % interval over seeds)")
    ax.set_title("Shapes detection: mAP vs. parameters")
    if not note_if_empty(ax, "test mAP"):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_predictions(test_set, drawn: dict[str, list[dict]], categories: list[str], path: Path,
                     threshold: float = 0.3) -> None:
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="shortcut for --set variants=[...]")
    parser.add_argument("--seeds", nargs="+", type=int, help="shortcut for --set seeds=[...]")
    parser.add_argument("--steps", type=int, help="shortcut for --set training.steps=N")
    for split in ("train", "val", "test"):
        parser.add_argument(f"--coco-{split}", nargs=2, metavar=("ANNOTATIONS", "IMAGE_DIR"),
                            help=f"COCO {split} annotations and images (sets data.kind=coco)")
    parser.add_argument("--num-classes", type=int, help="shapes: classes 1-3 (shortcut for --set data.num_classes)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (spawned workers)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    args = parser.parse_args(argv)
    preset = preset_from_args(args, NAME)
    if args.variants:
        preset["variants"] = list(args.variants)
    if args.seeds is not None:
        preset["seeds"] = list(args.seeds)
    if args.steps is not None:
        preset["training"]["steps"] = args.steps
    if args.num_classes is not None:
        preset["data"]["num_classes"] = args.num_classes
    for split in ("train", "val", "test"):
        given = getattr(args, f"coco_{split}")
        if given:
            preset["data"]["kind"] = "coco"
            preset["data"]["coco"][f"{split}_annotations"], preset["data"]["coco"][f"{split}_image_dir"] = given
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    check_preset(preset)
    preset["device"] = device_options(args)  # part of each run's identity

    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    datasets = build_datasets(preset["data"])
    variants, seeds = preset["variants"], preset["seeds"]
    store = RunStore(results_dir(NAME, args.out) / "runs" / preset["preset"], resume=args.resume)
    todo = [(seed, variant) for seed in seeds for variant in variants]
    progress = Progress(len(todo), f"{NAME} train")
    results: dict[tuple[int, str], tuple[dict, list | None]] = {}
    pending = {}
    pool = None
    for seed, variant in todo:
        draw = min(4, len(datasets["test"])) if seed == seeds[-1] else 0
        key, spec = f"{variant}__seed{seed}", run_spec(variant, preset, draw)
        stored = store.load(key, spec)
        if stored is not None:
            preds = stored.pop("predictions")
            results[(seed, variant)] = ({k: v for k, v in stored.items() if k != "spec"}, preds)
            progress(f"{variant} seed {seed}: reused (mAP {results[(seed, variant)][0]['map']:.4f})")
        elif args.jobs > 1:
            pool = pool or worker_pool(args.jobs)
            pending[(seed, variant)] = (key, spec, pool.submit(train_one, variant, seed, preset, None, draw,
                                                               args.threads))
        else:
            pending[(seed, variant)] = (key, spec, None)
    for (seed, variant), (key, spec, future) in pending.items():
        draw = spec["draw_images"]
        row, preds = future.result() if future is not None else train_one(variant, seed, preset, datasets, draw,
                                                                           args.threads)
        store.save(key, spec, {**row, "predictions": preds})  # every finished run survives an interruption
        results[(seed, variant)] = (row, preds)
        progress(f"{variant} seed {seed}: mAP {row['map']:.4f} AP50 {row['map_50']:.4f} (lr {row['lr']}, "
                 f"{row['parameters']} params, {row['seconds']:.0f}s)")
    if pool is not None:
        pool.shutdown()
    rows = [results[k][0] for k in todo]
    drawn = {variant: results[(seeds[-1], variant)][1] for variant in variants if results[(seeds[-1], variant)][1]}
    summary = summarize(rows)
    checks = verdicts(summary)
    stored_summary = [{k: v for k, v in r.items() if not k.endswith("_pm")} for r in summary]
    data_config = {**preset["data"], "num_classes": datasets["num_classes"], "categories": datasets["categories"]}
    out_dir = Path(write_results(NAME, {**preset, "data": data_config, "jobs": args.jobs, "threads": args.threads},
                                 [{**r, "kind": "run"} for r in rows]
                                 + [{**r, "kind": "summary"} for r in stored_summary]
                                 + [{**v, "kind": "verdict"} for v in checks],
                                 time.perf_counter() - start, root=args.out)).parent
    plot_map(summary, out_dir / "map_vs_parameters.png")
    if drawn:
        plot_predictions(datasets["test"], drawn, datasets["categories"], out_dir / "predictions.png")

    fmt = {k: ".4f" for k in ("map", "map_50", "map_75", "val_map", "final_train_loss")}
    fmt |= {"seconds": ".0f", "parameter_ratio": ".0%"}
    data, training = preset["data"], preset["training"]
    source = (f"shapes ({data['num_classes']} classes, {data['image_size']} x {data['image_size']} px)"
              if data["kind"] == "shapes" else f"COCO files {data['coco']} letterboxed to {data['image_size']} px")
    edges = sorted({r["variant"] for r in rows if r["lr_at_edge"]})
    body = [
        f"Preset `{preset['preset']}`. Data: {source}, {len(datasets['train'])} training / {len(datasets['val'])} "
        f"validation / {len(datasets['test'])} test images, classes {datasets['categories']}. {training['steps']} "
        f"steps of batch {training['batch_size']} per run, seeds {seeds}. Model: {preset['model']}. Device: "
        f"{preset['device']}. COCO metrics from pycocotools COCOeval on the test set.\n\n",
        "## How the fairness rule is met\n\n",
        f"* Same tuning budget on the same validation data: every variant trains with each lr of {training['lr']} "
        f"({len(training['lr'])} run(s) per variant and seed, same steps, same images, same seed), and the lr with "
        f"the best mAP on the {len(datasets['val'])} validation images is kept"
        + (" (one value: no variant is tuned)" if len(training["lr"]) == 1 else "") + ".\n"
        "* Nothing from the test target reaches a model: the test images are scored once, for the chosen model.\n"
        f"* {len(seeds)} seeds: mean and Student-t 95 % interval; every verdict comes from `interval_verdict` "
        "(better / worse only when the intervals do not overlap).\n"
        + (f"* The chosen lr lies on the edge of the grid for: {', '.join(edges)}.\n" if edges else ""),
        "\n## Mean [95 % interval] over seeds\n\n",
        markdown_table(summary, ["variant", "parameters", "runs", ("map_pm", "mAP"), ("map_50_pm", "AP50"),
                                 ("map_75_pm", "AP75"), ("val_map_pm", "val mAP")]),
        "\n\n## Verdicts (mAP, from the intervals)\n\n",
        markdown_table(checks, ["comparison", "measures", "a", "b", ("parameter_ratio", "params a / b"), "verdict"],
                       formats=fmt),
        "\n\n## Claim check\n\n", claim_check(summary), "\n\n",
        "## Every run\n\n",
        markdown_table(rows, ["variant", "seed", "lr", "parameters", "map", "map_50", "map_75", "val_map",
                              "final_train_loss", "seconds"], formats=fmt),
        "\n\n![mAP vs parameters](map_vs_parameters.png)\n\n" + ("![predictions](predictions.png)\n" if drawn else ""),
    ]
    write_report(NAME, "Detection: recursive decoder with box and centerness PEs (RecursiveDet)", "".join(body),
                 root=args.out)
    print(markdown_table(summary, ["variant", ("map_pm", "mAP"), "parameters"]))
    print(markdown_table(checks, ["comparison", "verdict"]))
    print(claim_check(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
