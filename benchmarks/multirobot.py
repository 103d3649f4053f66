"""Multi-robot pose estimation: NOPE (with and without the object PE) against descriptor matching + RANSAC.

Huang et al. 2025, "NOPE: Non-Overlap-Aware Egocentric Pose Estimation for Collaborative Perception in
Connected Autonomy", arXiv:2506.14180, on the seeded 2-D simulator of :mod:`pe_toolkit.domains.multirobot` (30 % of
the pairs do not overlap at all). For every seed (its own worlds for train / val / test and its own
initialisation) it trains NOPE with each object PE (``fourier``, ``rope2d``, ``none``) through Lightning and
evaluates on the test pairs:

* correspondence precision / recall / F1, non-overlap detection accuracy (NDA);
* translation error (m) and rotation error (deg) of ``T_ab`` on overlapping pairs where a pose was given,
  the coverage of those pairs, and the success rate (error <= 1 m and <= 5 deg, declined pairs fail);
* NOPE's pose twice: from its pose head (the paper's low level) and from weighted Procrustes on its own
  matches (``+procrustes``), so the pose head and the matching can be judged separately; the pose head is
  scored on training pairs too (its train-vs-test gap);
* the classical baseline on the same pairs (same overlap rule: >= 3 accepted correspondences);
* bytes per message (descriptors + coordinates, float32 and float16) against the raw RGB-D frame.

Fairness rule (``docs/benchmarks.md``): NOPE's match threshold and the baseline's Lowe ratio x RANSAC inlier
threshold get the same tuning budget (the same number of configurations, checked), are scored by the same
``(F1 + NDA) / 2`` on the same validation pairs of the seed, and only the chosen configuration sees the test
pairs; nothing from the test pairs' ground truth reaches a model. Every number is a mean over >= 3 seeds with
its Student-t 95 % interval, and every verdict comes from :func:`common.interval_verdict`.

    python benchmarks/multirobot.py --quick               # pipeline check, < 2 minutes here
    python benchmarks/multirobot.py --jobs 2              # the full CPU preset
    python benchmarks/multirobot.py --preset gpu --accelerator cuda --jobs 3
    python benchmarks/multirobot.py --set training.steps=800 --set seeds=[0,1,2,3]
    python benchmarks/multirobot.py --resume              # reuse the models an interrupted run finished training

Presets: ``benchmarks/presets/multirobot/{quick,full,gpu}.yaml``. Outputs in ``<out>/multirobot/``:
``results.json``, ``report.md``, ``alignment.png`` (two robots' views with the true and predicted alignments)
and ``metrics.png``; every trained model in ``runs/<preset>/`` (weights and configuration; ``--resume`` loads
those that match and evaluates them again).
"""

from __future__ import annotations

import itertools
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
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)
from presets import check_seeds, device_options, preset_from_args, trainer_options  # noqa: E402

NAME = "multirobot"
PES = ("fourier", "rope2d", "none")
METRICS = ("precision", "recall", "f1", "nda", "te_mean", "te_median", "re_mean_deg", "re_median_deg", "coverage",
           "success")
LOWER_IS_BETTER = {"te_mean", "te_median", "re_mean_deg", "re_median_deg"}


def tuning_score(metrics: dict[str, float]) -> float:
    """The validation score every method is tuned by: ``(F1 + NDA) / 2``."""
    return (metrics["f1"] + metrics["nda"]) / 2


def check_preset(preset: dict[str, Any]) -> None:
    """Errors naming the preset key for a preset that cannot run or would break the fairness rule."""
    check_seeds(preset["seeds"])
    pes = preset["pes"]
    if not isinstance(pes, list) or not pes or not set(pes) <= set(PES):
        raise ValueError(f"pes must be a non-empty list from {list(PES)}, got {pes!r}")
    for group in ("data", "model", "training"):
        for key, value in preset[group].items():
            if key == "lr":
                if not isinstance(value, (int, float)) or not value > 0:
                    raise ValueError(f"training.lr must be a positive number, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{group}.{key} must be a positive int, got {value!r}")
    tuning = preset["tuning"]
    for key in ("nope_match_threshold", "baseline_ratio", "baseline_inlier_threshold"):
        values = tuning[key]
        if not isinstance(values, list) or not values or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values):
            raise ValueError(f"tuning.{key} must be a non-empty list of positive numbers, got {values!r}")
    budget_nope = len(tuning["nope_match_threshold"])
    budget_base = len(tuning["baseline_ratio"]) * len(tuning["baseline_inlier_threshold"])
    if budget_nope != budget_base:
        raise ValueError(f"tuning budgets differ: NOPE gets {budget_nope} match thresholds, the baseline "
                         f"{len(tuning['baseline_ratio'])} ratios x {len(tuning['baseline_inlier_threshold'])} "
                         f"inlier thresholds = {budget_base}; the fairness rule needs the same number")
    for key in ("train_eval_pairs", "raw_frames"):
        if isinstance(preset[key], bool) or not isinstance(preset[key], int) or preset[key] < 1:
            raise ValueError(f"{key} must be a positive int, got {preset[key]!r}")


def _edge(value: float, grid: list[float]) -> bool:
    """The chosen value lies on the border of a grid of >= 3 values (the optimum may lie outside)."""
    return len(grid) >= 3 and value in (min(grid), max(grid))


def tune_baseline(pairs, ratios: list[float], inlier_thresholds: list[float], seed: int) -> dict[str, Any]:
    """The baseline configuration with the best :func:`tuning_score` on ``pairs`` (first best on ties)."""
    from pe_toolkit.domains.multirobot.baseline import ClassicalBaseline
    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_baseline

    best: dict[str, Any] = {"score": -math.inf}
    for ratio, inlier in itertools.product(ratios, inlier_thresholds):
        baseline = ClassicalBaseline(ratio=ratio, inlier_threshold=inlier, seed=seed)
        score = tuning_score(evaluate_predictions(pairs, predict_baseline(pairs, baseline)))
        if score > best["score"]:
            best = {"ratio": ratio, "inlier_threshold": inlier, "score": score}
    best["edge"] = _edge(best["ratio"], ratios) or _edge(best["inlier_threshold"], inlier_thresholds)
    return best


def pick_threshold(model, pairs, scale: float, thresholds: list[float]) -> dict[str, Any]:
    """The match threshold with the best :func:`tuning_score` on validation pairs (set on ``model``)."""
    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_nope

    best: dict[str, Any] = {"score": -math.inf}
    for tau in thresholds:
        model.config.match_threshold = tau
        score = tuning_score(evaluate_predictions(pairs, predict_nope(model, pairs, scale)))
        if score > best["score"]:
            best = {"threshold": tau, "score": score}
    model.config.match_threshold = best["threshold"]
    best["edge"] = _edge(best["threshold"], thresholds)
    return best


def make_data(preset: dict[str, Any], seed: int):
    from pe_toolkit.domains.multirobot.data import PairDataModule
    from pe_toolkit.domains.multirobot.simulator import SimConfig

    data = PairDataModule(SimConfig(), num_train=preset["data"]["num_train"], num_val=preset["data"]["num_val"],
                          num_test=preset["data"]["num_test"], batch_size=preset["training"]["batch_size"],
                          seed=100 * seed)
    data.setup()
    return data


def run_spec(preset: dict[str, Any], descriptor_dim: int) -> dict[str, Any]:
    """What a trained model depends on (its identity in the RunStore)."""
    return {"data": preset["data"], "model": preset["model"], "training": preset["training"],
            "device": preset["device"], "descriptor_dim": descriptor_dim}


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
    model, training = preset["model"], preset["training"]
    config = NOPEConfig(descriptor_dim=descriptor_dim, dim=model["dim"], num_heads=model["num_heads"],
                        graph_layers=model["graph_layers"], cross_layers=model["cross_layers"], object_pe=pe)
    module = NOPEModule(config, lr=training["lr"], warmup_steps=min(50, training["steps"] // 10),
                        max_steps=training["steps"])
    key = f"{pe}__seed{seed}"
    spec = run_spec(preset, descriptor_dim)
    if store is not None:
        stored, weights = store.load(key, spec), store.path(key).with_suffix(".pt")
        if stored is not None and weights.exists():
            module.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
            return module, stored["train_seconds"]
    trainer = L.Trainer(max_steps=training["steps"], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, **trainer_options(preset.get("device")))
    start = time.perf_counter()
    trainer.fit(module, data)
    seconds = time.perf_counter() - start
    module.cpu()
    if store is not None:
        torch.save(module.state_dict(), store.path(key).with_suffix(".pt"))
        store.save(key, spec, {"train_seconds": seconds})  # written last: a run counts once its weights exist
    return module, seconds


def nope_run(pe: str, seed: int, preset: dict[str, Any], runs_dir: str, resume: bool, threads: int,
             data=None) -> dict[str, Any]:
    """Train (or load) one NOPE model, tune its threshold on the validation pairs, score it on the test pairs.

    Runs in a spawned worker with ``--jobs > 1`` (the seeded data is drawn again there). Returns the two
    result rows (pose head, +procrustes) and the test predictions.
    """
    import torch

    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_nope

    torch.set_num_threads(threads)
    data = data if data is not None else make_data(preset, seed)
    sim = data.config
    module, seconds = train_nope(pe, seed, data, preset, sim.descriptor_dim, RunStore(runs_dir, resume=resume))
    model = module.model
    chosen = pick_threshold(model, data.pairs["val"], sim.fov_range, preset["tuning"]["nope_match_threshold"])
    test = data.pairs["test"]
    train_subset = data.pairs["train"][:preset["train_eval_pairs"]]
    rows, predictions = [], {}
    for source in ("head", "procrustes"):
        method = f"NOPE ({pe})" + ("" if source == "head" else "+procrustes")
        pred = predict_nope(model, test, sim.fov_range, pose_source=source)
        on_train = evaluate_predictions(train_subset, predict_nope(model, train_subset, sim.fov_range,
                                                                    pose_source=source))
        predictions[method] = pred
        rows.append({"method": method, "kind": "run", "seed": seed, "object_pe": pe, "pose_source": source,
                     "threshold": chosen["threshold"], "val_score": chosen["score"], "tuned_at_edge": chosen["edge"],
                     "train_seconds": seconds, "steps": preset["training"]["steps"],
                     "parameters": model.num_parameters(),
                     "position_parameters": model.num_parameters() - model.num_parameters(exclude_position=True),
                     **evaluate_predictions(test, pred),
                     "train_success": on_train["success"], "train_te_median": on_train["te_median"]})
    return {"rows": rows, "predictions": predictions}


def summarize(rows: list[dict]) -> list[dict]:
    """Per method: the mean and 95 % interval over seeds of every metric (``<metric>_ci``)."""
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        group = [r for r in rows if r["method"] == method]
        entry: dict[str, Any] = {"method": method, "seeds": len(group)}
        for key in METRICS + ("train_success", "message_bytes"):
            summary = mean_interval([nan_if_missing(r.get(key)) for r in group])
            entry[key] = summary["mean"] if summary["n"] else None
            entry[f"{key}_ci"] = summary
            fmt = ".2f" if key.startswith(("te", "re")) else ".3f"
            entry[f"{key}_pm"] = format_interval(summary, fmt)
        out.append(entry)
    return out


def claims(summary: list[dict], pes: list[str]) -> list[dict]:
    """Each NOPE variant against the baseline and each object PE against no PE, from the intervals."""
    by = {s["method"]: s for s in summary}
    out = []

    def add(a: str, b: str, key: str, what: str) -> None:
        if a not in by or b not in by:
            return
        verdict = interval_verdict(by[a][f"{key}_ci"], by[b][f"{key}_ci"], higher_is_better=key not in LOWER_IS_BETTER)
        out.append({"comparison": f"{a} vs {b}", "metric": what, "a": by[a][f"{key}_pm"], "b": by[b][f"{key}_pm"],
                    "verdict": verdict})

    for pe in pes:
        add(f"NOPE ({pe})", "classical", "nda", "NDA")
        add(f"NOPE ({pe})", "classical", "f1", "match F1")
        add(f"NOPE ({pe})", "classical", "success", "success (pose head)")
        add(f"NOPE ({pe})+procrustes", "classical", "success", "success (+procrustes)")
        add(f"NOPE ({pe})", "classical", "te_median", "median TE (pose head)")
    for pe in pes:
        if pe != "none":
            add(f"NOPE ({pe})", "NOPE (none)", "f1", "match F1")
            add(f"NOPE ({pe})+procrustes", "NOPE (none)+procrustes", "success", "success (+procrustes)")
    return out


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
        low = [nan_if_missing(entry[f"{k}_ci"]["low"]) for k in keys]
        high = [nan_if_missing(entry[f"{k}_ci"]["high"]) for k in keys]
        errors = np.nan_to_num(np.array([np.subtract(values, low), np.subtract(high, values)]))
        ax.bar(np.arange(len(keys)) + i * width, values, width, yerr=errors, label=entry["method"])
    ax.set_xticks(np.arange(len(keys)) + width * (len(summary) - 1) / 2, ["match F1", "NDA", "coverage", "success"])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction (mean, 95 % interval over seeds)")
    if not note_if_empty(ax, "match F1, NDA, coverage or success"):
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--seeds", nargs="+", type=int, help="shortcut for --set seeds=[...]")
    parser.add_argument("--steps", type=int, help="shortcut for --set training.steps=N")
    parser.add_argument("--pes", nargs="+", choices=PES, help="shortcut for --set pes=[...]")
    parser.add_argument("--jobs", type=int, default=1, help="NOPE models trained in parallel (spawned workers)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (default 1)")
    parser.add_argument("--resume", action="store_true", help="reuse trained models with the same configuration")
    args = parser.parse_args(argv)
    preset = preset_from_args(args, NAME)
    if args.seeds:
        preset["seeds"] = list(args.seeds)
    if args.steps is not None:
        preset["training"]["steps"] = args.steps
    if args.pes:
        preset["pes"] = list(args.pes)
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    check_preset(preset)
    preset["device"] = device_options(args)

    import numpy as np
    import torch

    from pe_toolkit.domains.multirobot.bandwidth import message_bytes, raw_observation_bytes
    from pe_toolkit.domains.multirobot.baseline import ClassicalBaseline
    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_baseline
    from pe_toolkit.domains.multirobot.simulator import make_world

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    rows: list[dict] = []
    runs_dir = Path(args.out) / NAME / "runs" / preset["preset"]
    RunStore(runs_dir, resume=args.resume)  # creates the folder before workers write into it
    pes, seeds = preset["pes"], preset["seeds"]
    progress = Progress(len(seeds) * (len(pes) + 1), NAME)
    datasets = {}
    pool = worker_pool(args.jobs) if args.jobs > 1 else None
    futures = {}
    tuning = preset["tuning"]
    for seed in seeds:
        data = datasets[seed] = make_data(preset, seed)
        if pool is not None:
            for pe in pes:
                futures[(pe, seed)] = pool.submit(nope_run, pe, seed, preset, str(runs_dir), args.resume,
                                                  args.threads)
    example_predictions: dict[str, Any] = {}
    messages = {}
    for seed in seeds:
        data = datasets[seed]
        test = data.pairs["test"]
        messages[seed] = float(np.mean([message_bytes(p.a) for p in test] + [message_bytes(p.b) for p in test]))
        chosen = tune_baseline(data.pairs["val"], tuning["baseline_ratio"], tuning["baseline_inlier_threshold"], seed)
        base = predict_baseline(test, ClassicalBaseline(ratio=chosen["ratio"],
                                                        inlier_threshold=chosen["inlier_threshold"], seed=seed))
        train_subset = data.pairs["train"][:preset["train_eval_pairs"]]
        on_train = evaluate_predictions(train_subset, predict_baseline(train_subset, ClassicalBaseline(
            ratio=chosen["ratio"], inlier_threshold=chosen["inlier_threshold"], seed=seed)))
        rows.append({"method": "classical", "kind": "run", "seed": seed, "object_pe": None,
                     "pose_source": "ransac+procrustes", "ratio": chosen["ratio"],
                     "inlier_threshold": chosen["inlier_threshold"], "val_score": chosen["score"],
                     "tuned_at_edge": chosen["edge"], "message_bytes": messages[seed],
                     **evaluate_predictions(test, base), "train_success": on_train["success"],
                     "train_te_median": on_train["te_median"]})
        progress(f"seed {seed} classical (ratio {chosen['ratio']}, inlier {chosen['inlier_threshold']} m)")
        if seed == seeds[0]:
            example_predictions["classical"] = base
        for pe in pes:
            if pool is None:
                result = nope_run(pe, seed, preset, str(runs_dir), args.resume, args.threads, data=data)
            else:
                result = futures[(pe, seed)].result()
            for row in result["rows"]:
                rows.append({**row, "message_bytes": messages[seed]})
            if seed == seeds[0]:
                example_predictions.update(result["predictions"])
            head = result["rows"][0]
            progress(f"seed {seed} NOPE {pe} ({head['train_seconds']:.0f}s, tau={head['threshold']})")
    if pool is not None:
        pool.shutdown()
    data = datasets[seeds[0]]
    test = data.pairs["test"]
    sim = data.config
    overlapping = [i for i, p in enumerate(test) if p.overlap]
    # the first overlapping pair on which the baseline and some NOPE variant both gave a pose, if any
    index = next((i for i in overlapping if example_predictions["classical"][i].overlap
                  and any(v[i].overlap for k, v in example_predictions.items() if k != "classical")), overlapping[0])
    example = {"pair": test[index], "predictions": {k: v[index] for k, v in example_predictions.items()}}

    # bandwidth: the message against the raw RGB-D frame, over some test observations of the last seed
    last = datasets[seeds[-1]].pairs["test"]
    world = make_world(sim, 100 * seeds[-1] + 2)  # the last seed's test world (simulate_pairs draws it first)
    frames = [raw_observation_bytes(world, p.a.pose) for p in last[:preset["raw_frames"]]]
    bandwidth = [
        {"payload": "graph message, float32 descriptors + float32 coordinates",
         "bytes": float(np.mean([message_bytes(o) for p in last for o in (p.a, p.b)]))},
        {"payload": "graph message, float16 descriptors + float16 coordinates",
         "bytes": float(np.mean([message_bytes(o, descriptor_dtype="float16", coordinate_dtype="float16")
                                 for p in last for o in (p.a, p.b)]))},
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
    verdicts = claims(summary, pes)
    config = {**preset, "quick": args.quick, "jobs": args.jobs, "threads": args.threads, "sim": sim.to_dict(),
              "tuning_score": "(f1 + nda) / 2 on the validation pairs",
              "success": "te <= 1 m and re <= 5 deg", "min_matches": 3}
    stored_summary = [{k: v for k, v in s.items() if not k.endswith("_pm")} for s in summary]
    write_results(NAME, config, rows + [{**s, "kind": "summary"} for s in stored_summary]
                  + [{**v, "kind": "verdict"} for v in verdicts], seconds, root=args.out)
    plot_alignment(example["pair"], example["predictions"], sim, out_dir / "alignment.png", pes[0])
    plot_metrics(summary, out_dir / "metrics.png")
    training = preset["training"]
    budget = len(tuning["nope_match_threshold"])
    edges = sorted({r["method"] for r in method_rows if r.get("tuned_at_edge")})
    body = [
        f"Simulator: {sim.num_objects} objects in a {sim.world_size:.0f} m square, {sim.num_classes} classes, FOV "
        f"{sim.fov_range:.0f} m / {math.degrees(sim.fov_angle):.0f} deg, position noise {sim.position_noise} m, "
        f"descriptor noise {sim.descriptor_noise}, {sim.non_overlap_fraction:.0%} non-overlapping pairs. "
        f"Preset `{preset['preset']}`; per seed {preset['data']['num_train']} train / {preset['data']['num_val']} "
        f"val / {preset['data']['num_test']} test pairs (each split its own world); NOPE d={preset['model']['dim']}, "
        f"{preset['model']['graph_layers']} graph + {preset['model']['cross_layers']} cross layers, "
        f"{training['steps']} steps of batch {training['batch_size']}, lr {training['lr']}. Seeds: {seeds}. "
        f"Device: {preset['device']}. Total {seconds:.0f} s.\n\n",
        "## How the fairness rule is met\n\n",
        f"* Same tuning budget on the same validation data: NOPE's match threshold takes {budget} values "
        f"{tuning['nope_match_threshold']}; the baseline's Lowe ratio {tuning['baseline_ratio']} x RANSAC inlier "
        f"threshold {tuning['baseline_inlier_threshold']} m, {budget} configurations. Both pick the configuration "
        "with the best (F1 + NDA) / 2 on the seed's validation pairs (its own world), and the overlap rule "
        "(>= 3 accepted correspondences) is the same for both.\n"
        "* Nothing from the test target reaches a model: the test pairs' poses and correspondences are used only "
        "by the metrics; NOPE's training and threshold choice, and the baseline's choice, see training / "
        "validation pairs only.\n"
        f"* {len(seeds)} seeds (each its own worlds and initialisation): mean and Student-t 95 % interval; every "
        "verdict below comes from `interval_verdict` (better / worse only when the intervals do not overlap).\n"
        + (f"* Chosen at the edge of its grid in some seed (the optimum may lie outside): {', '.join(edges)}.\n"
           if edges else "* No method was tuned to the edge of its grid.\n"),
        "\n## Results (mean [95 % interval] over seeds)\n\n",
        "Pose errors are over the overlapping test pairs for which the method decided \"overlap\" (coverage); "
        "success = error <= 1 m and <= 5 deg over all overlapping pairs (declined pairs fail); train success = the "
        f"same on the first {preset['train_eval_pairs']} training pairs.\n\n",
        markdown_table(summary, ["method", ("f1_pm", "match F1"), ("nda_pm", "NDA"),
                                 ("te_median_pm", "TE median (m)"), ("re_median_deg_pm", "RE median (deg)"),
                                 ("coverage_pm", "coverage"), ("success_pm", "success"),
                                 ("train_success_pm", "train success")]),
        "\n\n", markdown_table(summary, ["method", ("precision_pm", "precision"), ("recall_pm", "recall"),
                                         ("te_mean_pm", "TE mean (m)"), ("re_mean_deg_pm", "RE mean (deg)"),
                                         ("message_bytes", "bytes / message")], {"message_bytes": ".0f"}),
        "\n## Verdicts (from the intervals; 'better' = the first method is better)\n\n",
        markdown_table(verdicts, ["comparison", "metric", "a", "b", "verdict"]),
        "\n\n## The pose head: train vs test\n\n", pose_head_note(summary, pes, preset),
        "\n## Bandwidth (per message, mean over test observations)\n\n",
        markdown_table(bandwidth, ["payload", "bytes", ("ratio_to_raw", "fraction of raw")],
                       {"bytes": ".0f", "ratio_to_raw": ".5f"}),
        "\n## Per seed\n\n",
        markdown_table(method_rows, ["method", "seed", "threshold", "ratio", "inlier_threshold",
                                     ("val_score", "val score"), ("f1", "F1"), ("nda", "NDA"),
                                     ("te_median", "TE med (m)"), "coverage", "success",
                                     ("train_success", "train success"), ("train_seconds", "train s")],
                       {k: ".3f" for k in ("f1", "nda", "coverage", "success", "val_score", "train_success")} | {
                           "te_median": ".2f", "train_seconds": ".0f"}),
        "\n![alignment](alignment.png)\n\n![metrics](metrics.png)\n",
    ]
    write_report(NAME, "Multi-robot pose estimation: NOPE vs. RANSAC + Procrustes", "".join(body), root=args.out)
    print(markdown_table(summary, ["method", ("f1_pm", "F1"), ("nda_pm", "NDA"), ("success_pm", "success"),
                                   ("train_success_pm", "train success")]))
    print(markdown_table(verdicts, ["comparison", "metric", "verdict"]))
    return 0


def pose_head_note(summary: list[dict], pes: list[str], preset: dict[str, Any]) -> str:
    """The measured train-vs-test success of the pose head against Procrustes on NOPE's own matches."""
    by = {s["method"]: s for s in summary}
    lines = []
    for pe in pes:
        head, proc = by.get(f"NOPE ({pe})"), by.get(f"NOPE ({pe})+procrustes")
        if head is None or proc is None:
            continue
        lines.append(f"* NOPE ({pe}): pose-head success {head['train_success_pm']} on training pairs, "
                     f"{head['success_pm']} on test pairs; Procrustes on its own matches {proc['success_pm']} "
                     f"on test pairs.")
    data, training = preset["data"], preset["training"]
    from presets import load_preset

    gpu = load_preset(NAME, "gpu")
    return ("\n".join(lines) + "\n\n"
            f"These models saw {data['num_train']} distinct training pairs for {training['steps']} steps of "
            f"{training['batch_size']} ({training['steps'] * training['batch_size'] / data['num_train']:.1f} "
            "passes). Where the head's test success stays below Procrustes on the same matches, the head has not "
            "learned to regress a pose from the matched geometry; the `gpu` preset (a GPU run, not part of "
            f"this report unless it is preset `gpu`) has {gpu['data']['num_train']} distinct pairs, "
            f"{gpu['training']['steps']} steps of {gpu['training']['batch_size']}, d={gpu['model']['dim']} and "
            f"{gpu['model']['cross_layers']} cross layers.\n")


if __name__ == "__main__":
    raise SystemExit(main())
