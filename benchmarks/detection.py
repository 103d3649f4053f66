"""Detection: independent decoder stages vs. RecursiveDet's shared stage, with and without box / centerness PEs.

Zhao, Sun, Li 2023, "RecursiveDet" (arXiv:2307.13619) claim that a region-based detector whose decoder stages
share parameters (recursion), with the proposal-box PE and the centerness PE, matches or beats the same detector
with independent stages while having fewer parameters. This benchmark checks that claim at CPU scale:

* data: :class:`pe_toolkit.domains.detection.ShapesDetectionDataset` (64 x 64 images, rectangles / ellipses / triangles,
  1-4 objects, random colours, noise), one fixed training set and one fixed test set for all variants;
* variants (:data:`VARIANTS`): ``independent`` (Sparse R-CNN, every stage its own parameters), ``recursive``
  (first stage + one shared stage applied ``num_stages - 1`` times, its dynamic interaction twice),
  ``recursive_box`` (+ ``box_pe`` in the proposals' self-attention), ``recursive_box_centerness`` (+ the
  ``centerness_pe`` term in the dynamic interaction); optionally ``independent_box_centerness``;
* each variant is trained from scratch with Lightning for the same number of steps for every seed, then COCO
  mAP / AP50 / AP75 (pycocotools COCOeval) is measured on the test set, together with the parameter count.

    python benchmarks/detection.py --quick            # pipeline check, < 2 minutes on an idle core
    python benchmarks/detection.py                    # full run (3 seeds)
    python benchmarks/detection.py --resume           # reuse the finished runs of an interrupted one

Outputs in ``<out>/detection/``: ``results.json`` (one row per variant x seed), ``runs/<quick|full>/`` (each
run as it finishes, with its configuration; ``--resume`` reuses those that match), ``report.md`` (per-run table,
mean +- std per variant, the claim check), ``map_vs_parameters.png`` and ``predictions.png`` (test images with
ground truth and each variant's detections). Deviation from the issue: torchvision and torchmetrics'
MeanAveragePrecision cannot be used here (torchvision's wheels fail to load beside the pinned CPU torch), so
RoI Align, box ops and the metric are the domain's own / pycocotools (see ``domains/detection``).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (  # noqa: E402
    Progress,
    RunStore,
    markdown_table,
    nan_if_missing,
    note_if_empty,
    results_dir,
    standard_argparser,
    write_report,
    write_results,
)
from presets import device_options, trainer_options  # noqa: E402

NAME = "detection"

VARIANTS: dict[str, dict[str, bool]] = {
    "independent": {"recursive": False, "box_pe": False, "centerness_pe": False},
    "recursive": {"recursive": True, "box_pe": False, "centerness_pe": False},
    "recursive_box": {"recursive": True, "box_pe": True, "centerness_pe": False},
    "recursive_box_centerness": {"recursive": True, "box_pe": True, "centerness_pe": True},
    "independent_box_centerness": {"recursive": False, "box_pe": True, "centerness_pe": True},
}
DEFAULT_VARIANTS = ["independent", "recursive", "recursive_box", "recursive_box_centerness"]

MODEL = {"dim": 32, "num_heads": 4, "ffn_dim": 64, "dynamic_dim": 8, "pooler_resolution": 7, "sampling_ratio": 1,
         "num_proposals": 16, "num_stages": 4, "backbone_channels": (16, 32)}
PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"train_images": 128, "test_images": 32, "steps": 25, "batch_size": 8, "seeds": [0], "lr": 5e-4},
    # 250 steps proved too few (every variant below mAP 0.01, 2026-11-30); at 800 steps a single seed reached
    # mAP 0.36-0.41. 800 steps x 12 runs is about 30 minutes on an idle core.
    "full": {"train_images": 1024, "test_images": 128, "steps": 800, "batch_size": 8, "seeds": [0, 1, 2],
             "lr": 5e-4},
}


def mean_std(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and population standard deviation of the finite values (``(None, None)`` if there are none)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return None, None
    return statistics.fmean(finite), (statistics.pstdev(finite) if len(finite) > 1 else 0.0)


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per variant: mean / std over seeds of map, map_50, map_75; parameters; run count."""
    out = []
    for variant in dict.fromkeys(r["variant"] for r in rows):
        runs = [r for r in rows if r["variant"] == variant]
        row: dict[str, Any] = {"variant": variant, "parameters": runs[0]["parameters"], "runs": len(runs)}
        for metric in ("map", "map_50", "map_75"):
            row[f"{metric}_mean"], row[f"{metric}_std"] = mean_std([r[metric] for r in runs])
        out.append(row)
    return out


def claim_check(summary: list[dict[str, Any]]) -> str:
    """A sentence comparing recursive + both PEs with independent stages, from the measured numbers only."""
    by = {r["variant"]: r for r in summary}
    if "independent" not in by or "recursive_box_centerness" not in by:
        return "The claim needs both `independent` and `recursive_box_centerness`; not both were run."
    ind, rec = by["independent"], by["recursive_box_centerness"]
    diff = rec["map_mean"] - ind["map_mean"]
    noise = max(ind["map_std"], rec["map_std"])
    ratio = rec["parameters"] / ind["parameters"]
    if max(rec["map_mean"], ind["map_mean"]) < 0.01:
        verdict = "both are below mAP 0.01, too little training to test the claim"
    elif diff >= 0:
        verdict = "at this scale it matches or beats the independent baseline"
    elif -diff <= noise:
        verdict = "at this scale it is below the independent baseline, but within one seed standard deviation"
    else:
        verdict = "at this scale it is worse than the independent baseline"
    return (f"Recursive + box PE + centerness PE reaches mAP {rec['map_mean']:.4f} +- {rec['map_std']:.4f} vs. "
            f"{ind['map_mean']:.4f} +- {ind['map_std']:.4f} for independent stages (difference {diff:+.4f}, "
            f"{rec['runs']} vs. {ind['runs']} seeds) with {ratio:.0%} of the parameters: {verdict}.")


def train_one(variant: str, seed: int, preset: dict[str, Any], train_set, test_set, draw_images: int = 0):
    import lightning as L
    import torch

    from pe_toolkit.domains.detection import DetectorConfig, count_parameters
    from pe_toolkit.domains.detection.lightning_module import DetectionDataModule, DetectionModule

    start = time.perf_counter()
    L.seed_everything(seed, verbose=False)
    config = DetectorConfig(num_classes=3, **MODEL, **VARIANTS[variant])
    module = DetectionModule(config, lr=preset["lr"], warmup_steps=max(1, preset["steps"] // 10),
                             max_steps=preset["steps"])
    data = DetectionDataModule(train_set, test=test_set, batch_size=preset["batch_size"], seed=seed)
    trainer = L.Trainer(max_steps=preset["steps"], **trainer_options(preset.get("device")), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, gradient_clip_val=1.0)
    trainer.fit(module, data)
    train_loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
    result = trainer.test(module, data, verbose=False)[0]
    drawn = None
    if draw_images:
        images = torch.stack([test_set[i][0] for i in range(draw_images)])
        module.model.eval()
        drawn = [{k: v.tolist() for k, v in p.items()} for p in module.model.predict(images)]
    row = {"variant": variant, "seed": seed, "map": float(result["test/map"]), "map_50": float(result["test/map_50"]),
           "map_75": float(result["test/map_75"]), "parameters": count_parameters(module.model),
           "final_train_loss": train_loss, "steps": preset["steps"], "seconds": time.perf_counter() - start}
    return row, drawn


def plot_map(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for row in summary:
        std = nan_if_missing(row["map_std"])
        ax.errorbar(nan_if_missing(row["parameters"]) / 1e3, nan_if_missing(row["map_mean"]),
                    yerr=std if math.isfinite(std) else None, fmt="o", capsize=4, label=row["variant"])
    ax.set_xlabel("parameters (thousands)")
    ax.set_ylabel("COCO mAP (test, mean +- std over seeds)")
    ax.set_title("Shapes detection: mAP vs. parameters")
    if not note_if_empty(ax, "test mAP"):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_predictions(test_set, drawn: dict[str, list[dict]], path: Path, threshold: float = 0.3) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    from pe_toolkit.domains.detection import SHAPE_CLASSES

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
                ax.text(x1, y1, f"{SHAPE_CLASSES[label][:4]} {score:.2f}", color=colours[label % 3], fontsize=6,
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
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=None)
    parser.add_argument("--seeds", nargs="+", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="training steps per run (overrides the preset)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    args = parser.parse_args(argv)

    import torch

    from pe_toolkit.domains.detection import ShapesDetectionDataset

    torch.set_num_threads(args.threads)
    preset = dict(PRESETS["quick" if args.quick else "full"])
    if args.seeds is not None:
        preset["seeds"] = args.seeds
    if args.steps is not None:
        preset["steps"] = args.steps
    preset["device"] = device_options(args)  # part of each run's identity
    variants = args.variants or DEFAULT_VARIANTS
    start = time.perf_counter()
    train_set = ShapesDetectionDataset(preset["train_images"], seed=1000)
    test_set = ShapesDetectionDataset(preset["test_images"], seed=2000)
    rows, drawn = [], {}
    store = RunStore(results_dir(NAME, args.out) / "runs" / ("quick" if args.quick else "full"), resume=args.resume)
    run_preset = {k: v for k, v in preset.items() if k != "seeds"}
    progress = Progress(len(variants) * len(preset["seeds"]), f"{NAME} train")
    for seed in preset["seeds"]:
        for variant in variants:
            draw = 4 if seed == preset["seeds"][-1] else 0
            key, spec = f"{variant}__seed{seed}", {"preset": run_preset, "model": MODEL, "draw_images": draw}
            stored = store.load(key, spec)
            if stored is not None:
                preds = stored.pop("predictions")
                row = {k: v for k, v in stored.items() if k != "spec"}
                print(f"{NAME}: reused {key} (mAP {row['map']:.4f})", flush=True)
            else:
                row, preds = train_one(variant, seed, preset, train_set, test_set, draw_images=draw)
                store.save(key, spec, {**row, "predictions": preds})  # every finished run survives an interruption
            rows.append(row)
            if preds is not None:
                drawn[variant] = preds
            progress(f"{variant} seed {seed}: mAP {row['map']:.4f} AP50 {row['map_50']:.4f} "
                     f"({row['parameters']} params, {row['seconds']:.0f}s)")
    summary = summarize(rows)
    out_dir = Path(write_results(NAME, {"preset": preset, "model": MODEL, "variants": variants}, rows,
                                 time.perf_counter() - start, root=args.out)).parent
    plot_map(summary, out_dir / "map_vs_parameters.png")
    plot_predictions(test_set, drawn, out_dir / "predictions.png")

    fmt = {k: ".4f" for k in ("map", "map_50", "map_75", "map_mean", "map_std", "map_50_mean", "map_50_std",
                              "map_75_mean", "map_75_std", "final_train_loss")}
    fmt["seconds"] = ".0f"
    body = [
        f"Shapes detection, {preset['train_images']} training / {preset['test_images']} test images (64 x 64), "
        f"{preset['steps']} steps of batch {preset['batch_size']} per run, lr {preset['lr']}, seeds "
        f"{preset['seeds']}. Model: {MODEL}. COCO metrics from pycocotools COCOeval on the test set.\n\n",
        "## Mean over seeds\n\n",
        markdown_table(summary, ["variant", "parameters", "runs", "map_mean", "map_std", "map_50_mean",
                                 "map_50_std", "map_75_mean", "map_75_std"], formats=fmt),
        "\n\n## Claim check\n\n", claim_check(summary), "\n\n",
        "## Every run\n\n",
        markdown_table(rows, ["variant", "seed", "parameters", "map", "map_50", "map_75", "final_train_loss",
                              "seconds"], formats=fmt),
        "\n\n![mAP vs parameters](map_vs_parameters.png)\n\n![predictions](predictions.png)\n",
    ]
    write_report(NAME, "Detection: recursive decoder with box and centerness PEs (RecursiveDet)", "".join(body),
                 root=args.out)
    print(claim_check(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
