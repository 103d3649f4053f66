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
  matches (``+procrustes``), so the pose head and the matching can be judged separately (one run, two rows:
  :meth:`MultiRobot.expand`); every pose source is scored on training pairs too (``train_success``);
* the classical baseline on the same pairs (same overlap rule: >= 3 accepted correspondences);
* bytes per message (descriptors + coordinates, float32 and float16) against the raw RGB-D frame.

Fairness rule (``docs/benchmarks.md``): NOPE's match threshold and the baseline's Lowe ratio x RANSAC inlier
threshold get the same tuning budget (the same number of configurations, checked), are scored by the same
``(F1 + NDA) / 2`` on the same validation pairs of the seed, and only the chosen configuration sees the test
pairs; nothing from the test pairs' ground truth reaches a model. Claims come from
:func:`pe_toolkit.bench.verdict.decide_claim`, paired per seed (both sides see the seed's worlds); a pose claim is
untested unless the pose source fits its own training pairs (:data:`TRAIN_FIT`, measured).

    python benchmarks/multirobot.py --quick               # pipeline check, < 2 minutes here
    python benchmarks/multirobot.py --jobs 2              # the full CPU preset
    pe-toolkit bench multirobot --preset gpu --accelerator cuda --jobs 3
    python benchmarks/multirobot.py --set training.steps=800 --set seeds=[0,1,2,3] --resume

Presets: ``benchmarks/presets/multirobot/{quick,full,gpu}.yaml``. Outputs in ``<out>/multirobot/``:
``results.json``, ``report.md``, ``alignment.png`` (two robots' views with the true and predicted alignments)
and ``metrics.png``; every finished run in ``runs/<preset>/``.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import time
from typing import Any

from pe_toolkit.bench import Benchmark, Result, load_config, trainer_options
from pe_toolkit.bench.checks import distinct, positive, positives
from pe_toolkit.bench.plots import nan_if_missing, note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.verdict import claim_row, claims_table, decide_claim, format_side, summarize

PES = ("fourier", "rope2d", "none")
METRICS = ("precision", "recall", "f1", "nda", "te_mean", "te_median", "re_mean_deg", "re_median_deg", "coverage",
           "success")
LOWER_IS_BETTER = {"te_mean", "te_median", "re_mean_deg", "re_median_deg"}
FRACTIONS = {"precision", "recall", "f1", "nda", "coverage", "success", "train_success"}
TRAIN_FIT = 0.5  # a pose source fits its training pairs when >= half of them succeed (<= 1 m and <= 5 deg)


# ------------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Data:
    num_train: int
    num_val: int
    num_test: int


@dataclasses.dataclass
class Model:
    dim: int
    num_heads: int
    graph_layers: int
    cross_layers: int


@dataclasses.dataclass
class Training:
    steps: int
    batch_size: int
    lr: float


@dataclasses.dataclass
class TuningGrid:
    nope_match_threshold: list[float]
    baseline_ratio: list[float]
    baseline_inlier_threshold: list[float]


@dataclasses.dataclass
class Config:
    seeds: list[int]
    pes: list[str]
    data: Data
    model: Model
    training: Training
    tuning: TuningGrid
    train_eval_pairs: int  # training pairs scored too: each pose source's fit of its own training pairs
    raw_frames: int


# ------------------------------------------------------------------------------------------------ tuning
def tuning_score(metrics: dict[str, float]) -> float:
    """The validation score every method is tuned by: ``(F1 + NDA) / 2``."""
    return (metrics["f1"] + metrics["nda"]) / 2


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


# ------------------------------------------------------------------------------------------------ data
@functools.lru_cache(maxsize=4)
def make_data(num_train: int, num_val: int, num_test: int, batch_size: int, seed: int):
    """The seed's train / val / test pairs (each split its own world, seeds ``100 seed + 0, 1, 2``)."""
    from pe_toolkit.domains.multirobot.data import PairDataModule
    from pe_toolkit.domains.multirobot.simulator import SimConfig

    data = PairDataModule(SimConfig(), num_train=num_train, num_val=num_val, num_test=num_test,
                          batch_size=batch_size, seed=100 * seed)
    data.setup()
    return data


@functools.lru_cache(maxsize=4)
def test_pairs(num_test: int, seed: int) -> list:
    """The seed's test pairs alone (the split :func:`make_data` draws third)."""
    from pe_toolkit.domains.multirobot.simulator import SimConfig, simulate_pairs

    return simulate_pairs(num_test, 100 * seed + 2, SimConfig())


def _data(spec: dict[str, Any]):
    data = spec["data"]
    return make_data(data["num_train"], data["num_val"], data["num_test"], spec["batch_size"], spec["seed"])


def _message_bytes(pairs) -> float:
    import numpy as np

    from pe_toolkit.domains.multirobot.bandwidth import message_bytes

    return float(np.mean([message_bytes(p.a) for p in pairs] + [message_bytes(p.b) for p in pairs]))


def _drawn(predictions) -> dict[str, list]:
    """Test predictions in a row (for the alignment plot): overlap decisions and poses (None where not finite)."""
    import numpy as np

    return {"overlap": [bool(p.overlap) for p in predictions],
            "pose": [[round(float(x), 4) for x in p.pose] if np.isfinite(p.pose).all() else None for p in predictions]}


# ------------------------------------------------------------------------------------------------ runs
def run_classical(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Tune the baseline on the seed's validation pairs; score it on the test pairs and some training pairs."""
    from pe_toolkit.domains.multirobot.baseline import ClassicalBaseline
    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_baseline

    data, seed, grid = _data(spec), spec["seed"], spec["tuning"]
    test = data.pairs["test"]
    chosen = tune_baseline(data.pairs["val"], grid["baseline_ratio"], grid["baseline_inlier_threshold"], seed)

    def baseline() -> ClassicalBaseline:
        return ClassicalBaseline(ratio=chosen["ratio"], inlier_threshold=chosen["inlier_threshold"], seed=seed)

    base = predict_baseline(test, baseline())
    train_subset = data.pairs["train"][:spec["train_eval_pairs"]]
    on_train = evaluate_predictions(train_subset, predict_baseline(train_subset, baseline()))
    row = {"method": "classical", "kind": "run", "seed": seed, "object_pe": None, "pose_source": "ransac+procrustes",
           "ratio": chosen["ratio"], "inlier_threshold": chosen["inlier_threshold"], "val_score": chosen["score"],
           "tuned_at_edge": chosen["edge"], "message_bytes": _message_bytes(test), **evaluate_predictions(test, base),
           "train_success": on_train["success"], "train_te_median": on_train["te_median"]}
    return [{**row, "predictions": _drawn(base)} if spec["draw"] else row]


def train_nope(spec: dict[str, Any], data, descriptor_dim: int) -> tuple[Any, float]:
    """Train one NOPE variant (Lightning); ``(module on the CPU, training seconds)``."""
    import lightning as L

    from pe_toolkit.domains.multirobot.lightning_module import NOPEModule
    from pe_toolkit.domains.multirobot.model import NOPEConfig

    L.seed_everything(spec["seed"], verbose=False)
    model, training = spec["model"], spec["training"]
    config = NOPEConfig(descriptor_dim=descriptor_dim, dim=model["dim"], num_heads=model["num_heads"],
                        graph_layers=model["graph_layers"], cross_layers=model["cross_layers"], object_pe=spec["arm"])
    module = NOPEModule(config, lr=training["lr"], warmup_steps=min(50, training["steps"] // 10),
                        max_steps=training["steps"])
    trainer = L.Trainer(max_steps=training["steps"], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        num_sanity_val_steps=0, **trainer_options(spec["device"]))
    start = time.perf_counter()
    trainer.fit(module, data)
    return module.cpu(), time.perf_counter() - start


def run_nope(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Train NOPE with one object PE, tune its threshold on the validation pairs, score it on the test pairs and
    some training pairs: one row per pose source (pose head, +procrustes)."""
    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions, predict_nope

    data, pe, seed = _data(spec), spec["arm"], spec["seed"]
    sim = data.config
    module, seconds = train_nope(spec, data, sim.descriptor_dim)
    model = module.model
    chosen = pick_threshold(model, data.pairs["val"], sim.fov_range, spec["thresholds"])
    test = data.pairs["test"]
    train_subset = data.pairs["train"][:spec["train_eval_pairs"]]
    rows = []
    for source in ("head", "procrustes"):
        pred = predict_nope(model, test, sim.fov_range, pose_source=source)
        on_train = evaluate_predictions(train_subset, predict_nope(model, train_subset, sim.fov_range,
                                                                    pose_source=source))
        row = {"method": f"NOPE ({pe})" + ("" if source == "head" else "+procrustes"), "kind": "run", "seed": seed,
               "object_pe": pe, "pose_source": source, "threshold": chosen["threshold"], "val_score": chosen["score"],
               "tuned_at_edge": chosen["edge"], "train_seconds": seconds, "steps": spec["training"]["steps"],
               "parameters": model.num_parameters(),
               "position_parameters": model.num_parameters() - model.num_parameters(exclude_position=True),
               **evaluate_predictions(test, pred), "train_success": on_train["success"],
               "train_te_median": on_train["te_median"], "message_bytes": _message_bytes(test)}
        rows.append({**row, "predictions": _drawn(pred)} if spec["draw"] else row)
    return rows


def run_bandwidth(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Bytes per message against the raw RGB-D frame, over the test observations of the seed (the last one)."""
    import numpy as np

    from pe_toolkit.domains.multirobot.bandwidth import message_bytes, raw_observation_bytes
    from pe_toolkit.domains.multirobot.simulator import SimConfig, make_world

    pairs = test_pairs(spec["data"]["num_test"], spec["seed"])
    world = make_world(SimConfig(), 100 * spec["seed"] + 2)  # the test world (simulate_pairs draws it first)
    frames = [raw_observation_bytes(world, p.a.pose) for p in pairs[:spec["raw_frames"]]]
    observations = [o for p in pairs for o in (p.a, p.b)]
    rows = [
        {"payload": "graph message, float32 descriptors + float32 coordinates",
         "bytes": float(np.mean([message_bytes(o) for o in observations]))},
        {"payload": "graph message, float16 descriptors + float16 coordinates",
         "bytes": float(np.mean([message_bytes(o, descriptor_dtype="float16", coordinate_dtype="float16")
                                 for o in observations]))},
        {"payload": "raw RGB-D frame 640x480 (uint8 RGB + uint16 depth), uncompressed",
         "bytes": float(np.mean([f["raw"] for f in frames]))},
        {"payload": "raw RGB-D frame 640x480, zlib level 6", "bytes": float(np.mean([f["zlib"] for f in frames]))},
    ]
    return [{"method": "bandwidth", "kind": "bandwidth", **r, "ratio_to_raw": r["bytes"] / rows[2]["bytes"]}
            for r in rows]


# ------------------------------------------------------------------------------------------------ summary, claims
def summarize_rows(rows: list[dict]) -> list[dict]:
    """Per method: every metric's mean and 95 % interval over seeds (fractions within [0, 1]), non-finite counted."""
    out = []
    for method in dict.fromkeys(r["method"] for r in rows):
        group = [r for r in rows if r["method"] == method]
        entry: dict[str, Any] = {"method": method, "seeds": len(group)}
        for key in METRICS + ("train_success", "message_bytes"):
            bounds = (0.0, 1.0) if key in FRACTIONS else None
            entry[key] = summarize([r.get(key) for r in group], bounds=bounds).as_dict()
        out.append(entry)
    return out


def claims(rows: list[dict]) -> list[dict]:
    """Each NOPE variant against the baseline and each object PE against no PE (paired per seed: the same worlds).

    A pose claim (success, translation error) is untested unless every NOPE side's pose source fits its own
    training pairs: mean training-pair success >= :data:`TRAIN_FIT` (measured in each run).
    """
    by: dict[str, dict[int, dict]] = {}
    for row in rows:
        by.setdefault(row["method"], {})[row["seed"]] = row
    pes = list(dict.fromkeys(r["object_pe"] for r in rows if r.get("object_pe")))
    out = []

    def fit(method: str) -> tuple[bool, str]:
        values = [r["train_success"] for r in by[method].values() if r.get("train_success") is not None]
        mean = sum(values) / len(values) if values else math.nan
        return mean >= TRAIN_FIT, (f"{method} does not fit its own training pairs (mean training-pair success "
                                   f"{mean:.3f} < {TRAIN_FIT}): its pose is not learned")

    def add(a: str, b: str, key: str, what: str, pose: bool) -> None:
        if a not in by or b not in by:
            return
        seeds = sorted(set(by[a]) & set(by[b]))
        preconditions = [fit(m) for m in (a, b) if m != "classical"] if pose else []
        claim = decide_claim([by[a][s].get(key) for s in seeds], [by[b][s].get(key) for s in seeds],
                             higher_is_better=key not in LOWER_IS_BETTER, paired=True,
                             bounds=(0.0, 1.0) if key in FRACTIONS else None, name=f"{a} beats {b} on {what}",
                             preconditions=preconditions)
        out.append(claim_row(claim, comparison=f"{a} vs {b}", metric=key, pose=pose))

    for pe in pes:
        add(f"NOPE ({pe})", "classical", "nda", "NDA", pose=False)
        add(f"NOPE ({pe})", "classical", "f1", "match F1", pose=False)
        add(f"NOPE ({pe})", "classical", "success", "success (pose head)", pose=True)
        add(f"NOPE ({pe})+procrustes", "classical", "success", "success (+procrustes)", pose=True)
        add(f"NOPE ({pe})", "classical", "te_median", "median TE (pose head)", pose=True)
    for pe in pes:
        if pe != "none":
            add(f"NOPE ({pe})", "NOPE (none)", "f1", "match F1", pose=False)
            add(f"NOPE ({pe})+procrustes", "NOPE (none)+procrustes", "success", "success (+procrustes)", pose=True)
    return out


# ------------------------------------------------------------------------------------------------ plots
def example(rows: list[dict]) -> tuple[int, dict[str, Any]]:
    """The first overlapping test pair of the first seed on which the baseline and some NOPE variant both gave a
    pose (else the first overlapping pair), and every drawn method's prediction there."""
    drawn = {r["method"]: r["predictions"] for r in rows if r.get("predictions")}
    truth = test_pairs(len(next(iter(drawn.values()))["overlap"]), min(r["seed"] for r in rows if r.get("predictions")))
    overlapping = [i for i, p in enumerate(truth) if p.overlap]
    index = next((i for i in overlapping if drawn.get("classical", {"overlap": [False] * len(truth)})["overlap"][i]
                  and any(v["overlap"][i] for k, v in drawn.items() if k != "classical")), overlapping[0])
    return index, {"pair": truth[index], "predictions": {k: v["pose"][index] for k, v in drawn.items()}}


def plot_alignment(pair, predictions: dict[str, list | None], pe: str) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from pe_toolkit.domains.multirobot.geometry import from_frame
    from pe_toolkit.domains.multirobot.simulator import SimConfig

    config = SimConfig()
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
        if name not in predictions:
            continue
        pose = predictions[name]
        if pose is not None:
            ax.scatter(*from_frame(np.asarray(pose), pair.b.positions).T, marker=marker, s=60, color=colour,
                       label=f"b's detections, {name}")
        else:
            ax.plot([], [], " ", label=f"{name}: no overlap decided")
    note_if_empty(ax, "detections")
    ax.set_aspect("equal")
    ax.set_xlabel("x in robot a's frame (m)")
    ax.set_ylabel("y (m)")
    ax.set_title("Two robots' views: true vs. predicted alignment\n(first overlapping test pair where the "
                 "baseline and NOPE both gave a pose)", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return fig


def plot_metrics(summary: list[dict]) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    keys = ("f1", "nda", "coverage", "success")
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / max(1, len(summary))
    for i, entry in enumerate(summary):
        values = [nan_if_missing(entry[k]["mean"]) for k in keys]  # not measured: no bar, not a zero bar
        low = [nan_if_missing(entry[k]["low"]) for k in keys]
        high = [nan_if_missing(entry[k]["high"]) for k in keys]
        errors = np.nan_to_num(np.array([np.subtract(values, low), np.subtract(high, values)]))
        ax.bar(np.arange(len(keys)) + i * width, values, width, yerr=errors, label=entry["method"])
    ax.set_xticks(np.arange(len(keys)) + width * (len(summary) - 1) / 2, ["match F1", "NDA", "coverage", "success"])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("fraction (mean, 95 % interval over seeds)")
    if not note_if_empty(ax, "match F1, NDA, coverage or success"):
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------------ report
def pose_head_note(summary: list[dict], config: Config) -> str:
    """The measured train-vs-test success of the pose head against Procrustes on NOPE's own matches."""
    by = {s["method"]: s for s in summary}
    lines = []
    for pe in config.pes:
        head, proc = by.get(f"NOPE ({pe})"), by.get(f"NOPE ({pe})+procrustes")
        if head is None or proc is None:
            continue
        lines.append(f"* NOPE ({pe}): pose-head success {format_side(head['train_success'])} on training pairs, "
                     f"{format_side(head['success'])} on test pairs; Procrustes on its own matches "
                     f"{format_side(proc['train_success'])} on training pairs, {format_side(proc['success'])} on "
                     "test pairs.")
    data, training = config.data, config.training
    gpu = load_config(MultiRobot(), "gpu")[0]
    return ("\n".join(lines) + "\n\n"
            f"These models saw {data.num_train} distinct training pairs for {training.steps} steps of "
            f"{training.batch_size} ({training.steps * training.batch_size / data.num_train:.1f} passes). A pose "
            f"claim counts only where the pose source fits its own training pairs (mean success >= {TRAIN_FIT}); "
            "where the head's success stays below Procrustes on the same matches, the head has not learned to "
            "regress a pose from the matched geometry. The `gpu` preset (a GPU run, not part of this report "
            f"unless it is preset `gpu`) has {gpu.data.num_train} distinct pairs, {gpu.training.steps} steps of "
            f"{gpu.training.batch_size}, d={gpu.model.dim} and {gpu.model.cross_layers} cross layers.\n")


def report_body(result: Result) -> str:
    from pe_toolkit.domains.multirobot.simulator import SimConfig

    config, sim = result.config, SimConfig()
    method_rows = [r for r in result.rows if r["kind"] == "run"]
    bandwidth = [r for r in result.rows if r["kind"] == "bandwidth"]
    summary = [s for s in result.derived if s["kind"] == "summary"]
    claim_rows = [c for c in result.derived if c["kind"] == "claim"]
    tuning, training, seeds = config.tuning, config.training, config.seeds
    budget = len(tuning.nope_match_threshold)
    edges = sorted({r["method"] for r in method_rows if r.get("tuned_at_edge")})
    shown = [{"method": s["method"], **{k: format_side(s[k], ".2f" if k.startswith(("te", "re")) else ".3f")
                                        for k in METRICS + ("train_success",)},
              "message_bytes": s["message_bytes"]["mean"]} for s in summary]
    return "".join([
        f"Simulator: {sim.num_objects} objects in a {sim.world_size:.0f} m square, {sim.num_classes} classes, FOV "
        f"{sim.fov_range:.0f} m / {math.degrees(sim.fov_angle):.0f} deg, position noise {sim.position_noise} m, "
        f"descriptor noise {sim.descriptor_noise}, {sim.non_overlap_fraction:.0%} non-overlapping pairs. "
        f"Per seed {config.data.num_train} train / {config.data.num_val} val / {config.data.num_test} test pairs "
        f"(each split its own world); NOPE d={config.model.dim}, {config.model.graph_layers} graph + "
        f"{config.model.cross_layers} cross layers, {training.steps} steps of batch {training.batch_size}, lr "
        f"{training.lr} (one value: not tuned). Seeds: {seeds}. Device: {result.device}. Total "
        f"{result.seconds:.0f} s.\n\n",
        "## How the fairness rule is met\n\n",
        f"* Same tuning budget on the same validation data: NOPE's match threshold takes {budget} values "
        f"{tuning.nope_match_threshold}; the baseline's Lowe ratio {tuning.baseline_ratio} x RANSAC inlier "
        f"threshold {tuning.baseline_inlier_threshold} m, {budget} configurations. Both pick the configuration "
        "with the best (F1 + NDA) / 2 on the seed's validation pairs (its own world), and the overlap rule "
        "(>= 3 accepted correspondences) is the same for both.\n"
        "* Nothing from the test target reaches a model: the test pairs' poses and correspondences are used only "
        "by the metrics; NOPE's training and threshold choice, and the baseline's choice, see training / "
        "validation pairs only.\n"
        f"* {len(seeds)} seeds (each its own worlds and initialisation): mean and Student-t 95 % interval "
        "(fractions within [0, 1]); every verdict from `pe_toolkit.bench.verdict.decide_claim` on the per-seed "
        "differences (both sides of a claim see the same worlds in a seed).\n"
        + (f"* Chosen at the edge of its grid in some seed (the optimum may lie outside): {', '.join(edges)}.\n"
           if edges else "* No method was tuned to the edge of its grid.\n"),
        "\n## Results (mean [95 % interval] over seeds)\n\n",
        "Pose errors are over the overlapping test pairs for which the method decided \"overlap\" (coverage); "
        "success = error <= 1 m and <= 5 deg over all overlapping pairs (declined pairs fail); train success = the "
        f"same on the first {config.train_eval_pairs} training pairs.\n\n",
        markdown_table(shown, ["method", ("f1", "match F1"), ("nda", "NDA"), ("te_median", "TE median (m)"),
                               ("re_median_deg", "RE median (deg)"), ("coverage", "coverage"), ("success", "success"),
                               ("train_success", "train success")]),
        "\n", markdown_table(shown, ["method", "precision", "recall", ("te_mean", "TE mean (m)"),
                                     ("re_mean_deg", "RE mean (deg)"), ("message_bytes", "bytes / message")],
                             {"message_bytes": ".0f"}),
        "\n## Claims (a = the first method; paired per seed)\n\n", claims_table(claim_rows),
        "\n## The pose head: train vs test\n\n", pose_head_note(summary, config),
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
    ])


# ------------------------------------------------------------------------------------------------ benchmark
class MultiRobot(Benchmark):
    name = "multirobot"
    title = "Multi-robot pose estimation: NOPE vs. RANSAC + Procrustes"
    description = ("NOPE with each object PE against tuned RANSAC + Procrustes on simulated robot pairs: match F1, "
                   "non-overlap detection, pose success, bytes per message (Huang et al. 2025)")
    Config = Config
    key_fields = ("arm", "seed")

    def check(self, config: Config) -> None:
        distinct("seeds", config.seeds)
        distinct("pes", config.pes, allowed=PES)
        for group in ("data", "model", "training"):
            for key, value in dataclasses.asdict(getattr(config, group)).items():
                positive(f"{group}.{key}", value)
        for key, values in dataclasses.asdict(config.tuning).items():
            positives(f"tuning.{key}", values)
        positive("train_eval_pairs", config.train_eval_pairs)
        positive("raw_frames", config.raw_frames)
        tuning = config.tuning
        budget_nope = len(tuning.nope_match_threshold)
        budget_base = len(tuning.baseline_ratio) * len(tuning.baseline_inlier_threshold)
        if budget_nope != budget_base:
            raise ValueError(f"tuning budgets differ: NOPE gets {budget_nope} match thresholds, the baseline "
                             f"{len(tuning.baseline_ratio)} ratios x {len(tuning.baseline_inlier_threshold)} "
                             f"inlier thresholds = {budget_base}; the fairness rule needs the same number")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        data, tuning = dataclasses.asdict(config.data), dataclasses.asdict(config.tuning)
        specs = []
        for seed in config.seeds:
            common = {"seed": seed, "data": data, "batch_size": config.training.batch_size,
                      "train_eval_pairs": config.train_eval_pairs, "draw": seed == config.seeds[0]}
            specs.append({"arm": "classical", **common, "tuning": {k: v for k, v in tuning.items()
                                                                   if k.startswith("baseline")}})
            specs += [{"arm": pe, **common, "model": dataclasses.asdict(config.model),
                       "training": dataclasses.asdict(config.training), "thresholds": tuning["nope_match_threshold"]}
                      for pe in config.pes]
        return specs + [{"arm": "bandwidth", "seed": config.seeds[-1], "data": {"num_test": config.data.num_test},
                         "raw_frames": config.raw_frames}]

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        run = {"classical": run_classical, "bandwidth": run_bandwidth}.get(spec["arm"], run_nope)
        return {"arm": spec["arm"], "seed": spec["seed"], "rows": run(spec)}

    def expand(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        return row["rows"]

    def progress_label(self, row: dict[str, Any]) -> str:
        first = row["rows"][0]
        if row["arm"] == "bandwidth":
            return f"bandwidth (seed {row['seed']}): {first['bytes']:.0f} bytes per message"
        if row["arm"] == "classical":
            return (f"seed {row['seed']} classical (ratio {first['ratio']}, inlier {first['inlier_threshold']} m): "
                    f"NDA {first['nda']:.3f}, success {first['success']:.3f}")
        return (f"seed {row['seed']} NOPE {row['arm']} ({first['train_seconds']:.0f}s, tau={first['threshold']}): "
                f"NDA {first['nda']:.3f}, success head {first['success']:.3f} / +procrustes "
                f"{row['rows'][1]['success']:.3f}")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        from pe_toolkit.domains.multirobot.simulator import SimConfig

        method_rows = [r for r in result.rows if r["kind"] == "run"]
        setting = {"kind": "setting", "sim": SimConfig().to_dict(), "tuning_score": "(f1 + nda) / 2 on the validation "
                   "pairs", "success": "te <= 1 m and re <= 5 deg", "min_matches": 3, "train_fit": TRAIN_FIT}
        return [setting] + [{"kind": "summary", **s} for s in summarize_rows(method_rows)] + claims(method_rows)

    def plot(self, result: Result) -> dict[str, Any]:
        summary = [s for s in result.derived if s["kind"] == "summary"]
        figures = {"metrics.png": plot_metrics(summary)}
        if any(r.get("predictions") for r in result.rows):
            _, shown = example([r for r in result.rows if r["kind"] == "run"])
            figures = {"alignment.png": plot_alignment(shown["pair"], shown["predictions"], result.config.pes[0]),
                       **figures}
        return figures

    def report(self, result: Result) -> str:
        return report_body(result)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="multirobot", prog="python benchmarks/multirobot.py"))
