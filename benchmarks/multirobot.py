"""Multi-robot pose estimation: NOPE (with and without the object PE) against descriptor matching + RANSAC.

Huang et al. 2025, "NOPE: Non-Overlap-Aware Egocentric Pose Estimation for Collaborative Perception in
Connected Autonomy", arXiv:2506.14180, on the seeded 2-D simulator of :mod:`pe_toolkit.domains.multirobot` (30 % of
the pairs do not overlap at all). For every seed (its own worlds for train / val / test and its own
initialisation) it trains NOPE with each object PE (``fourier``, ``rope2d``, ``none``) through Lightning,
picks the match threshold on the validation pairs (the paper also picks its best tau), and evaluates on
the test pairs:

* correspondence precision / recall / F1, non-overlap detection accuracy (NDA);
* translation error (m) and rotation error (deg) of ``T_ab`` on overlapping pairs where a pose was given,
  the coverage of those pairs, and the success rate (error <= 1 m and <= 5 deg, declined pairs fail);
* NOPE's pose twice: from its pose head (the paper's low level) and from weighted Procrustes on its own
  matches (``+procrustes``), so the pose head and the matching can be judged separately;
* the classical baseline on the same pairs (same overlap rule: >= 3 accepted correspondences);
* bytes per message (descriptors + coordinates, float32 and float16) against the raw RGB-D frame.

    python benchmarks/multirobot.py --quick     # pipeline check, < 2 minutes on one idle core
    python benchmarks/multirobot.py             # full run (~40 minutes on a shared core)
    python benchmarks/multirobot.py --resume    # reuse the models an interrupted run finished training

Outputs in ``<out>/multirobot/``: ``results.json``, ``report.md``, ``alignment.png`` (two robots' views
with the true and predicted alignments) and ``metrics.png``; every trained model in ``runs/{quick,full}/``
(weights and configuration; ``--resume`` loads those that match and evaluates them again).
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
    standard_argparser,
    write_report,
    write_results,
)

NAME = "multirobot"
PES = ("fourier", "rope2d", "none")
THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
QUICK = {"seeds": [0, 1], "num_train": 192, "num_val": 48, "num_test": 120, "steps": 30, "batch_size": 16,
         "dim": 32, "num_heads": 4, "graph_layers": 2, "cross_layers": 2, "raw_frames": 8}
FULL = {"seeds": [0, 1, 2], "num_train": 3000, "num_val": 150, "num_test": 500, "steps": 500, "batch_size": 32,
        "dim": 64, "num_heads": 4, "graph_layers": 2, "cross_layers": 2, "raw_frames": 50}
METRICS = ("precision", "recall", "f1", "nda", "te_mean", "te_median", "re_mean_deg", "re_median_deg", "coverage",
           "success")


def train_nope(pe: str, seed: int, data, preset: dict, descriptor_dim: int, store: RunStore | None = None):
    """Train one NOPE variant; returns ``(module, seconds)``.

    With a ``store``, the trained weights (``<key>.pt``, read back with ``weights_only=True``) and the
    training time are kept, and a later call with the same configuration loads them instead of training.
    """
    import lightning as L
    import torch

    from pe_toolkit.domains.multirobot.lightning_module import NOPEModule
    from pe_toolkit.domains.multirobot.model import NOPEConfig

    L.seed_everything(seed, verbose=False)
    config = NOPEConfig(descriptor_dim=descriptor_dim, dim=preset["dim"], num_heads=preset["num_heads"],
                        graph_layers=preset["graph_layers"], cross_layers=preset["cross_layers"], object_pe=pe)
    module = NOPEModule(config, lr=1e-3, warmup_steps=min(50, preset["steps"] // 10), max_steps=preset["steps"])
    key = f"{pe}__seed{seed}"
    spec = {"preset": {k: v for k, v in preset.items() if k != "seeds"}, "descriptor_dim": descriptor_dim}
    if store is not None:
        stored, weights = store.load(key, spec), store.path(key).with_suffix(".pt")
        if stored is not None and weights.exists():
            module.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
            return module, stored["train_seconds"]
    trainer = L.Trainer(max_steps=preset["steps"], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                        limit_val_batches=0, num_sanity_val_steps=0)
    start = time.perf_counter()
    trainer.fit(module, data)
    seconds = time.perf_counter() - start
    if store is not None:
        torch.save(module.state_dict(), store.path(key).with_suffix(".pt"))
        store.save(key, spec, {"train_seconds": seconds})  # written last: a run counts once its weights exist
    return module, seconds


def pick_threshold(model, pairs, scale: float) -> float:
    """The match threshold with the best ``(F1 + NDA) / 2`` on validation pairs."""
    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_nope

    best, best_score = THRESHOLDS[0], -1.0
    for tau in THRESHOLDS:
        model.config.match_threshold = tau
        metrics = evaluate_predictions(pairs, predict_nope(model, pairs, scale))
        score = (metrics["f1"] + metrics["nda"]) / 2
        if score > best_score:
            best, best_score = tau, score
    model.config.match_threshold = best
    return best


def summarize(rows: list[dict]) -> list[dict]:
    """Mean and population std over seeds per method."""
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        group = [r for r in rows if r["method"] == method]
        entry: dict[str, Any] = {"method": method, "seeds": len(group)}
        for key in METRICS + ("message_bytes",):
            values = [r[key] for r in group if r.get(key) is not None and math.isfinite(r[key])]
            entry[key] = statistics.fmean(values) if values else None
            entry[f"{key}_std"] = statistics.pstdev(values) if len(values) > 1 else None
        out.append(entry)
    return out


def _pm(summary: list[dict], key: str, fmt: str) -> None:
    for entry in summary:
        value, std = entry.get(key), entry.get(f"{key}_std")
        entry[f"{key}_pm"] = None if value is None else (format(value, fmt) + ("" if std is None else
                                                                                  " ± " + format(std, fmt)))


def plot_alignment(pair, predictions: dict, config, path: Path, pe: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from pe_toolkit.domains.multirobot.geometry import from_frame

    fig, ax = plt.subplots(figsize=(7, 6))
    half = config.fov_angle / 2
    arc = np.linspace(-half, half, 30)
    cone = np.concatenate([[[0.0, 0.0]], config.fov_range * np.stack([np.cos(arc), np.sin(arc)], 1), [[0.0, 0.0]]])
    ax.plot(cone[:, 0], cone[:, 1], color="tab:blue", lw=1, label="robot a's cone")
    b_cone = from_frame(pair.pose, cone)
    ax.plot(b_cone[:, 0], b_cone[:, 1], color="tab:green", lw=1, label="robot b's cone (true pose)")
    ax.scatter(*pair.a.positions.T, s=40, color="tab:blue", label="a's detections")
    ax.scatter(*from_frame(pair.pose, pair.b.positions).T, s=90, facecolors="none", edgecolors="tab:green",
               label="b's detections, true T_ab")
    markers = {f"NOPE ({pe})+procrustes": ("x", "tab:red"), f"NOPE ({pe})": ("^", "tab:purple"),
               "classical": ("+", "tab:orange")}
    for name, (marker, colour) in markers.items():
        pred = predictions.get(name)
        if pred is not None and np.isfinite(pred.pose).all():
            ax.scatter(*from_frame(pred.pose, pair.b.positions).T, marker=marker, s=60, color=colour,
                       label=f"b's detections, {name}")
        elif pred is not None:
            ax.plot([], [], " ", label=f"{name}: no overlap decided")
    note_if_empty(ax, "detections")
    ax.set_aspect("equal")
    ax.set_xlabel("x in robot a's frame (m)")
    ax.set_ylabel("y (m)")
    ax.set_title("Two robots' views: true vs. predicted alignment\n(first overlapping test pair where the "
                 "baseline and NOPE both gave a pose)", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_metrics(summary: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = ("f1", "nda", "coverage", "success")
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(summary)
    for i, entry in enumerate(summary):
        values = [nan_if_missing(entry.get(k)) for k in keys]  # not measured: no bar, not a zero bar
        errors = [entry.get(f"{k}_std") or 0.0 for k in keys]
        ax.bar(np.arange(len(keys)) + i * width, values, width, yerr=errors, label=entry["method"])
    ax.set_xticks(np.arange(len(keys)) + width * (len(summary) - 1) / 2, ["match F1", "NDA", "coverage", "success"])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction (mean over seeds)")
    if not note_if_empty(ax, "match F1, NDA, coverage or success"):
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds (default 0 1 quick, 0 1 2 full)")
    parser.add_argument("--steps", type=int, help="training steps per model (overrides the preset)")
    parser.add_argument("--pes", nargs="+", choices=PES, default=list(PES), help="object PEs to train")
    parser.add_argument("--resume", action="store_true", help="reuse trained models with the same configuration")
    args = parser.parse_args(argv)
    preset = dict(QUICK if args.quick else FULL)
    if args.seeds:
        preset["seeds"] = args.seeds
    if args.steps:
        preset["steps"] = args.steps

    import numpy as np
    import torch

    from pe_toolkit.domains.multirobot.bandwidth import message_bytes, raw_observation_bytes
    from pe_toolkit.domains.multirobot.data import PairDataModule
    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_baseline, predict_nope
    from pe_toolkit.domains.multirobot.simulator import SimConfig, make_world

    torch.set_num_threads(1)
    start = time.perf_counter()
    sim = SimConfig()
    rows: list[dict] = []
    store = RunStore(Path(args.out) / NAME / "runs" / ("quick" if args.quick else "full"), resume=args.resume)
    progress = Progress(len(preset["seeds"]) * (len(args.pes) + 1), NAME)
    example: dict = {}
    for seed in preset["seeds"]:
        data = PairDataModule(sim, num_train=preset["num_train"], num_val=preset["num_val"],
                              num_test=preset["num_test"], batch_size=preset["batch_size"], seed=100 * seed)
        data.setup()
        test = data.pairs["test"]
        mean_message = float(np.mean([message_bytes(p.a) for p in test] + [message_bytes(p.b) for p in test]))
        base = predict_baseline(test)
        rows.append({"method": "classical", "kind": "run", "seed": seed, "object_pe": None,
                     "pose_source": "ransac+procrustes", "message_bytes": mean_message,
                     **evaluate_predictions(test, base)})
        progress(f"seed {seed} classical")
        predictions = {"classical": base}
        for pe in args.pes:
            module, seconds = train_nope(pe, seed, data, preset, sim.descriptor_dim, store)
            model = module.model
            threshold = pick_threshold(model, data.pairs["val"], sim.fov_range)
            for source in ("head", "procrustes"):
                method = f"NOPE ({pe})" + ("" if source == "head" else "+procrustes")
                pred = predict_nope(model, test, sim.fov_range, pose_source=source)
                predictions[method] = pred
                rows.append({"method": method, "kind": "run", "seed": seed, "object_pe": pe, "pose_source": source,
                             "threshold": threshold, "train_seconds": seconds, "steps": preset["steps"],
                             "parameters": model.num_parameters(),
                             "position_parameters": model.num_parameters() - model.num_parameters(
                                 exclude_position=True),
                             "message_bytes": mean_message, **evaluate_predictions(test, pred)})
            progress(f"seed {seed} NOPE {pe} ({seconds:.0f}s, tau={threshold})")
        if seed == preset["seeds"][0]:
            overlapping = [i for i, p in enumerate(test) if p.overlap]
            # the first overlapping pair on which the baseline and some NOPE variant both gave a pose, if any
            index = next((i for i in overlapping if predictions["classical"][i].overlap
                          and any(v[i].overlap for k, v in predictions.items() if k != "classical")), overlapping[0])
            example = {"pair": test[index], "predictions": {k: v[index] for k, v in predictions.items()}}

    # bandwidth: the message against the raw RGB-D frame, over some test observations
    world = make_world(sim, 100 * preset["seeds"][-1] + 2)  # the last seed's test world (simulate_pairs draws it first)
    frames = [raw_observation_bytes(world, p.a.pose) for p in test[:preset["raw_frames"]]]
    bandwidth = [
        {"payload": "graph message, float32 descriptors + float32 coordinates",
         "bytes": float(np.mean([message_bytes(o) for p in test for o in (p.a, p.b)]))},
        {"payload": "graph message, float16 descriptors + float16 coordinates",
         "bytes": float(np.mean([message_bytes(o, descriptor_dtype="float16", coordinate_dtype="float16")
                                 for p in test for o in (p.a, p.b)]))},
        {"payload": "raw RGB-D frame 640x480 (uint8 RGB + uint16 depth), uncompressed",
         "bytes": float(np.mean([f["raw"] for f in frames]))},
        {"payload": "raw RGB-D frame 640x480, zlib level 6", "bytes": float(np.mean([f["zlib"] for f in frames]))},
    ]
    for entry in bandwidth:
        entry["ratio_to_raw"] = entry["bytes"] / bandwidth[2]["bytes"]
        rows.append({"method": "bandwidth", "kind": "bandwidth", **entry})

    seconds = time.perf_counter() - start
    out_dir = Path(args.out) / NAME
    out_dir.mkdir(parents=True, exist_ok=True)
    method_rows = [r for r in rows if r["method"] != "bandwidth"]
    summary = summarize(method_rows)
    for key, fmt in (("f1", ".3f"), ("precision", ".3f"), ("recall", ".3f"), ("nda", ".3f"), ("te_mean", ".2f"),
                     ("te_median", ".2f"), ("re_mean_deg", ".2f"), ("re_median_deg", ".2f"), ("coverage", ".3f"),
                     ("success", ".3f")):
        _pm(summary, key, fmt)
    config = {"quick": args.quick, **preset, "pes": args.pes, "thresholds": THRESHOLDS, "sim": sim.to_dict(),
              "success": "te <= 1 m and re <= 5 deg", "min_matches": 3}
    write_results(NAME, config, rows + [{**s, "kind": "summary"} for s in summary], seconds, root=args.out)
    plot_alignment(example["pair"], example["predictions"], sim, out_dir / "alignment.png", args.pes[0])
    plot_metrics(summary, out_dir / "metrics.png")

    def find(method: str) -> dict:
        return next((s for s in summary if s["method"] == method), {})

    classical = find("classical")
    claims = []
    for pe in args.pes:
        nope, proc = find(f"NOPE ({pe})"), find(f"NOPE ({pe})+procrustes")

        def verdict(a, b, lower_is_better=False):
            if a is None or b is None:
                return "n/a"
            better = a < b if lower_is_better else a > b
            return "yes" if better else "no"

        claims.append({
            "variant": f"NOPE ({pe})",
            "nda": f"{nope.get('nda', float('nan')):.3f} vs {classical.get('nda', float('nan')):.3f}: "
                   f"{verdict(nope.get('nda'), classical.get('nda'))}",
            "f1": f"{nope.get('f1', float('nan')):.3f} vs {classical.get('f1', float('nan')):.3f}: "
                  f"{verdict(nope.get('f1'), classical.get('f1'))}",
            "head_success": f"{nope.get('success', float('nan')):.3f} vs {classical.get('success', float('nan')):.3f}: "
                            f"{verdict(nope.get('success'), classical.get('success'))}",
            "proc_success": f"{proc.get('success', float('nan')):.3f} vs "
                            f"{classical.get('success', float('nan')):.3f}: "
                            f"{verdict(proc.get('success'), classical.get('success'))}",
            "te": f"{nope.get('te_median') or float('nan'):.2f} vs {classical.get('te_median') or float('nan'):.2f}: "
                  f"{verdict(nope.get('te_median'), classical.get('te_median'), True)}",
        })
    body = [
        f"Simulator: {sim.num_objects} objects in a {sim.world_size:.0f} m square, {sim.num_classes} classes, FOV "
        f"{sim.fov_range:.0f} m / {math.degrees(sim.fov_angle):.0f} deg, position noise {sim.position_noise} m, "
        f"descriptor noise {sim.descriptor_noise}, {sim.non_overlap_fraction:.0%} non-overlapping pairs. "
        f"Per seed: {preset['num_train']} train / {preset['num_val']} val / {preset['num_test']} test pairs; NOPE "
        f"d={preset['dim']}, {preset['graph_layers']} graph + {preset['cross_layers']} cross layers, "
        f"{preset['steps']} steps of batch {preset['batch_size']}. Seeds: {preset['seeds']}. "
        f"Total {seconds:.0f} s.\n\n",
        "## Results (mean ± std over seeds)\n\n",
        "Pose errors are over the overlapping test pairs for which the method decided \"overlap\" (coverage); "
        "success = error <= 1 m and <= 5 deg over all overlapping pairs (declined pairs fail).\n\n",
        markdown_table(summary, ["method", ("f1_pm", "match F1"), ("precision_pm", "precision"),
                                 ("recall_pm", "recall"), ("nda_pm", "NDA"), ("te_median_pm", "TE median (m)"),
                                 ("te_mean_pm", "TE mean (m)"), ("re_median_deg_pm", "RE median (deg)"),
                                 ("re_mean_deg_pm", "RE mean (deg)"), ("coverage_pm", "coverage"),
                                 ("success_pm", "success"), ("message_bytes", "bytes / message")],
                       {"message_bytes": ".0f"}),
        "\n## Bandwidth (per message, mean over test observations)\n\n",
        markdown_table(bandwidth, ["payload", "bytes", ("ratio_to_raw", "fraction of raw")],
                       {"bytes": ".0f", "ratio_to_raw": ".5f"}),
        "\n## The paper's qualitative claims, checked on this run\n\n"
        "NOPE vs. the classical baseline (measured means; 'yes' = NOPE better).\n\n",
        markdown_table(claims, ["variant", ("nda", "NDA higher"), ("f1", "match F1 higher"),
                                ("head_success", "success higher (pose head)"),
                                ("proc_success", "success higher (+procrustes)"),
                                ("te", "median TE lower (pose head)")]),
        "\n## Per seed\n\n",
        markdown_table(method_rows, ["method", "seed", "threshold", ("f1", "F1"), ("nda", "NDA"),
                                     ("te_median", "TE med (m)"), ("re_median_deg", "RE med (deg)"), "coverage",
                                     "success", ("train_seconds", "train s")],
                       {k: ".3f" for k in ("f1", "nda", "coverage", "success")} | {
                           "te_median": ".2f", "re_median_deg": ".2f", "train_seconds": ".0f"}),
        "\n![alignment](alignment.png)\n\n![metrics](metrics.png)\n",
    ]
    write_report(NAME, "Multi-robot pose estimation: NOPE vs. RANSAC + Procrustes", "".join(body), root=args.out)
    print(markdown_table(summary, ["method", ("f1_pm", "F1"), ("nda_pm", "NDA"), ("te_median_pm", "TE med"),
                                   ("re_median_deg_pm", "RE med"), ("success_pm", "success")]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
