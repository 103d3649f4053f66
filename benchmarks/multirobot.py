"""Multi-robot pose estimation: NOPE (with and without the object PE) against descriptor matching + RANSAC.

Huang et al. 2025, "NOPE" (arXiv:2506.14180), on the seeded 2-D simulator of :mod:`pe_toolkit.domains.multirobot`.
Per seed (its own worlds and initialisation) NOPE trains with each object PE (its lr tuned per PE by the harness);
it and the classical baseline get the same number of decision-threshold configurations, tuned on the seed's
validation pairs by ``(F1 + NDA) / 2``. Test metrics: match F1, non-overlap detection, pose errors and success,
bytes per message. A pose claim is untested unless the pose source fits its own training pairs (:data:`TRAIN_FIT`).
Design and results: docs/tutorials/multirobot.md.

    python benchmarks/multirobot.py --quick               # pipeline check, < 2 minutes here
    python benchmarks/multirobot.py --jobs 2              # the full CPU preset
    pe-toolkit bench multirobot --preset gpu --accelerator cuda --jobs 3
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Literal

from jsonargparse.typing import PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning, quiet_trainer
from pe_toolkit.bench.checks import distinct, positives
from pe_toolkit.bench.config import TrainingGrid
from pe_toolkit.bench.plots import finish, new_figure, plot_intervals
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.verdict import claim_row, decide_claim

METRICS = ("precision", "recall", "f1", "nda", "te_mean", "te_median", "re_mean_deg", "re_median_deg", "coverage",
           "success")
LOWER_IS_BETTER = {"te_mean", "te_median", "re_mean_deg", "re_median_deg"}
FRACTIONS = {"precision", "recall", "f1", "nda", "coverage", "success", "train_success"}
TRAIN_FIT = 0.5  # a pose source fits its training pairs when >= half of them succeed (<= 1 m and <= 5 deg)


@dataclasses.dataclass
class Data:
    num_train: PositiveInt
    num_val: PositiveInt
    num_test: PositiveInt


@dataclasses.dataclass
class Model:
    dim: PositiveInt
    num_heads: PositiveInt
    graph_layers: PositiveInt
    cross_layers: PositiveInt




@dataclasses.dataclass
class TuningGrid:
    nope_match_threshold: list[float]
    baseline_ratio: list[float]
    baseline_inlier_threshold: list[float]


@dataclasses.dataclass
class Config:
    seeds: list[int]
    pes: list[Literal["fourier", "rope2d", "none"]]
    data: Data
    model: Model
    training: TrainingGrid
    tuning: TuningGrid
    train_eval_pairs: PositiveInt  # training pairs scored too: each pose source's fit of its own training pairs
    raw_frames: PositiveInt


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


def _setup(spec: dict[str, Any]) -> tuple[Any, list, list, float]:
    """The spec's data, its test pairs, the training pairs scored too, and the mean bytes per test message."""
    from pe_toolkit.domains.multirobot.bandwidth import mean_message_bytes

    d = spec["data"]
    data = make_data(d["num_train"], d["num_val"], d["num_test"], spec["batch_size"], spec["seed"])
    test = data.pairs["test"]
    return data, test, data.pairs["train"][:spec["train_eval_pairs"]], mean_message_bytes(
        [p.a for p in test] + [p.b for p in test])


def _row(spec: dict[str, Any], row: dict[str, Any], predict) -> dict[str, Any]:
    """``row`` with the test metrics and the training-pair fit of ``predict(pairs)``; the first seed keeps its test
    predictions (overlap decisions and poses, None where not finite) for the alignment plot."""
    import numpy as np

    from pe_toolkit.domains.multirobot.evaluation import evaluate_predictions

    _, test, train_subset, _ = _setup(spec)
    pred = predict(test)
    on_train = evaluate_predictions(train_subset, predict(train_subset))
    row = {**row, **evaluate_predictions(test, pred), "train_success": on_train["success"],
           "train_te_median": on_train["te_median"]}
    if spec["draw"]:
        row["predictions"] = {"overlap": [bool(p.overlap) for p in pred], "pose": [
            [round(float(x), 4) for x in p.pose] if np.isfinite(p.pose).all() else None for p in pred]}
    return row


def run_classical(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Tune the baseline on the seed's validation pairs; score it on the test pairs and some training pairs."""
    from pe_toolkit.domains.multirobot.baseline import ClassicalBaseline
    from pe_toolkit.domains.multirobot.evaluation import predict_baseline, tune_baseline

    (data, _, _, message_bytes), seed, grid = _setup(spec), spec["seed"], spec["tuning"]
    chosen = tune_baseline(data.pairs["val"], grid["baseline_ratio"], grid["baseline_inlier_threshold"], seed=seed)
    row = {"method": "classical", "kind": "run", "seed": seed, "object_pe": None, "pose_source": "ransac+procrustes",
           "ratio": chosen["ratio"], "inlier_threshold": chosen["inlier_threshold"], "val_score": chosen["score"],
           "tuned_at_edge": chosen["edge"], "message_bytes": message_bytes}
    return [_row(spec, row, lambda pairs: predict_baseline(pairs, ClassicalBaseline(
        ratio=chosen["ratio"], inlier_threshold=chosen["inlier_threshold"], seed=seed)))]


def run_nope(spec: dict[str, Any]) -> dict[str, Any]:
    """Train NOPE with one object PE (Lightning) at ``spec["lr"]``, tune its match threshold on the validation pairs,
    score it on the test pairs and some training pairs: one row per pose source (pose head, +procrustes), and the
    validation score that tunes the learning rate."""
    import lightning as L

    from pe_toolkit.domains.multirobot.evaluation import predict_nope, tune_match_threshold
    from pe_toolkit.domains.multirobot.lightning_module import NOPEModule
    from pe_toolkit.domains.multirobot.model import NOPEConfig

    data, _, _, message_bytes = _setup(spec)
    pe, seed, training = spec["arm"], spec["seed"], spec["training"]
    L.seed_everything(seed, verbose=False)
    config = NOPEConfig(descriptor_dim=data.config.descriptor_dim, object_pe=pe, **spec["model"])
    module = NOPEModule(config, lr=spec["lr"], warmup_steps=min(50, training["steps"] // 10),
                        max_steps=training["steps"])
    trainer = quiet_trainer(spec["device"], max_steps=training["steps"], limit_val_batches=0, num_sanity_val_steps=0)
    start = time.perf_counter()
    trainer.fit(module, data)
    seconds, nope, scale = time.perf_counter() - start, module.cpu().model, data.config.fov_range
    chosen = tune_match_threshold(nope, data.pairs["val"], scale, spec["thresholds"])
    rows = [_row(spec, {
        "method": f"NOPE ({pe})" + ("" if source == "head" else "+procrustes"), "kind": "run", "seed": seed,
        "object_pe": pe, "pose_source": source, "threshold": chosen["threshold"], "val_score": chosen["score"],
        "tuned_at_edge": chosen["edge"], "lr": spec["lr"], "train_seconds": seconds, "steps": training["steps"],
        "parameters": nope.num_parameters(),
        "position_parameters": nope.num_parameters() - nope.num_parameters(exclude_position=True),
        "message_bytes": message_bytes}, functools.partial(predict_nope, nope, scale=scale, pose_source=source))
        for source in ("head", "procrustes")]
    return {"val_score": chosen["score"], "rows": rows}


def run_bandwidth(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Bytes per message against the raw RGB-D frame, over the test observations of the seed (the last one)."""
    from pe_toolkit.domains.multirobot.bandwidth import bandwidth_table
    from pe_toolkit.domains.multirobot.simulator import SimConfig, make_world

    world = make_world(SimConfig(), 100 * spec["seed"] + 2)  # the test world (simulate_pairs draws it first)
    table = bandwidth_table(world, test_pairs(spec["data"]["num_test"], spec["seed"]), raw_frames=spec["raw_frames"])
    return [{"method": "bandwidth", "kind": "bandwidth", **row} for row in table]


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


def example(rows: list[dict]) -> tuple[Any, dict[str, Any]]:
    """The first overlapping test pair of the first seed on which the baseline and some NOPE variant both gave a
    pose (else the first overlapping pair), and every drawn method's pose there."""
    drawn = {r["method"]: r["predictions"] for r in rows if r.get("predictions")}
    truth = test_pairs(len(next(iter(drawn.values()))["overlap"]), min(r["seed"] for r in rows if r.get("predictions")))
    overlapping = [i for i, p in enumerate(truth) if p.overlap]
    index = next((i for i in overlapping if drawn.get("classical", {"overlap": [False] * len(truth)})["overlap"][i]
                  and any(v["overlap"][i] for k, v in drawn.items() if k != "classical")), overlapping[0])
    return truth[index], {k: v["pose"][index] for k, v in drawn.items()}


def plot_metrics(summary: list[dict]) -> Any:
    keys = ("f1", "nda", "coverage", "success")
    fig, axes = new_figure(size=(9, 4))
    for i, entry in enumerate(summary):
        plot_intervals(axes[0][0], [k + 0.8 * i / len(summary) for k in range(len(keys))], [entry[k] for k in keys],
                       linestyle="none", label=entry["method"])
    axes[0][0].set_xticks([k + 0.4 * (len(summary) - 1) / len(summary) for k in range(len(keys))],
                          ["match F1", "NDA", "coverage", "success"])
    axes[0][0].set(ylim=(0, 1.05), ylabel="fraction (mean, 95 % interval over seeds)")
    return finish(fig, "match F1, NDA, coverage or success", fontsize=7, ncol=2)


class MultiRobot(Benchmark):
    name = "multirobot"
    title = "Multi-robot pose estimation: NOPE vs. RANSAC + Procrustes"
    Config = Config
    key_fields = ("arm", "seed")
    summary_by = ("method",)
    summary_metrics = {k: (0.0, 1.0) if k in FRACTIONS else None for k in (*METRICS, "train_success", "message_bytes")}
    run_columns = ("method", "seed", "lr", "threshold", "ratio", "inlier_threshold", "val_score", "f1", "nda",
                   "te_median", "coverage", "success", "train_success")
    held_out = "test poses and matches are used only by the metrics"
    same_budget = "trains the same steps on the seed's own worlds (each seed its own worlds and initialisation)"

    def check(self, config: Config) -> None:
        distinct("pes", config.pes)
        positives("training.lrs", config.training.lrs)
        for key, values in dataclasses.asdict(config.tuning).items():
            positives(f"tuning.{key}", values)
        tuning = config.tuning
        budget_nope = len(tuning.nope_match_threshold)
        budget_base = len(tuning.baseline_ratio) * len(tuning.baseline_inlier_threshold)
        if budget_nope != budget_base:
            raise ValueError(f"tuning budgets differ: NOPE gets {budget_nope} match thresholds, the baseline "
                             f"{len(tuning.baseline_ratio)} ratios x {len(tuning.baseline_inlier_threshold)} "
                             f"inlier thresholds = {budget_base}; the fairness rule needs the same number")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        data, tuning = dataclasses.asdict(config.data), dataclasses.asdict(config.tuning)
        training = {"steps": config.training.steps, "batch_size": config.training.batch_size}
        specs = []
        for seed in config.seeds:
            common = {"seed": seed, "data": data, "batch_size": config.training.batch_size,
                      "train_eval_pairs": config.train_eval_pairs, "draw": seed == config.seeds[0]}
            specs.append({"arm": "classical", **common, "tuning": {k: v for k, v in tuning.items()
                                                                   if k.startswith("baseline")}})
            specs += [{"arm": pe, "pe": pe, **common, "model": dataclasses.asdict(config.model), "training": training,
                       "thresholds": tuning["nope_match_threshold"]} for pe in config.pes]
        return specs + [{"arm": "bandwidth", "seed": config.seeds[-1], "data": {"num_test": config.data.num_test},
                         "raw_frames": config.raw_frames}]

    def tuning(self, config: Config) -> Tuning:
        """NOPE's learning rate per object PE (the specs with a ``pe``; the baseline has none to tune)."""
        return config.training.lr_tuning(metric="val_score", maximize=True, group="pe")

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        out = run_nope(spec) if "pe" in spec else {
            "rows": (run_bandwidth if spec["arm"] == "bandwidth" else run_classical)(spec)}
        return {"arm": spec["arm"], "seed": spec["seed"], **out}

    def expand(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        return row["rows"]

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        from pe_toolkit.domains.multirobot.simulator import SimConfig

        setting = {"kind": "setting", "sim": SimConfig().to_dict(), "tuning_score": "(f1 + nda) / 2 on the validation "
                   "pairs", "success": "te <= 1 m and re <= 5 deg", "min_matches": 3, "train_fit": TRAIN_FIT}
        return [setting, *super().analyze(_method_rows(result))]

    def claims(self, result: Result) -> list[dict[str, Any]]:
        return claims(result.rows)

    def describe(self, result: Result) -> str:
        from pe_toolkit.domains.multirobot.simulator import SimConfig

        config, sim = result.config, SimConfig()
        return (f"Simulator: {sim.num_objects} objects in a {sim.world_size:.0f} m square, FOV {sim.fov_range:.0f} "
                f"m / {math.degrees(sim.fov_angle):.0f} deg, {sim.non_overlap_fraction:.0%} non-overlapping pairs. Per "
                f"seed {config.data.num_train} train / {config.data.num_val} val / {config.data.num_test} test pairs, "
                f"each split its own world; {config.training.steps} steps of batch {config.training.batch_size}. Pose "
                "errors over the overlapping test pairs where a method decided \"overlap\" (coverage); success: <= 1 m "
                f"and <= 5 deg over all overlapping pairs; train_success: the same on {config.train_eval_pairs} "
                f"training pairs (train vs test: a pose claim counts only where train_success >= {TRAIN_FIT}).")

    def fairness_notes(self, result: Result) -> list[str]:
        tuning = result.config.tuning
        edges = sorted({r["method"] for r in _method_rows(result).rows if r.get("tuned_at_edge")})
        return [f"Inside every run, NOPE's match threshold {tuning.nope_match_threshold} and the baseline's Lowe ratio "
                f"{tuning.baseline_ratio} x RANSAC inlier threshold {tuning.baseline_inlier_threshold} m: "
                f"{len(tuning.nope_match_threshold)} configurations each, chosen by (F1 + NDA) / 2 on the seed's "
                "validation pairs; the same overlap rule (>= 3 accepted correspondences)."
                + (f" Chosen at the edge of its grid in some seed: {', '.join(edges)}." if edges else "")]

    def report(self, result: Result) -> str:
        return super().report(_method_rows(result)) + "\n## Bandwidth (bytes per message, mean over test views)\n\n" + (
            markdown_table([r for r in result.rows if r["kind"] == "bandwidth"], [
                "payload", "bytes", ("ratio_to_raw", "fraction of raw")], {"bytes": ".0f", "ratio_to_raw": ".5f"}))

    def plot(self, result: Result) -> dict[str, Any]:
        figures = {"metrics.png": plot_metrics(result.derived_of("summary"))}
        if any(r.get("predictions") for r in result.rows):
            from pe_toolkit.domains.multirobot.plotting import plot_alignment

            pair, poses = example(_method_rows(result).rows)
            pe = result.config.pes[0]
            shown = {k: poses[k] for k in (f"NOPE ({pe})+procrustes", f"NOPE ({pe})", "classical") if k in poses}
            figures = {"alignment.png": plot_alignment(pair, shown, title=(
                "Two robots' views: true vs. predicted alignment\n(first overlapping test pair where the baseline and "
                "NOPE both gave a pose)")), **figures}
        return figures


def _method_rows(result: Result) -> Result:
    """``result`` with only the method runs (not the bandwidth table's rows)."""
    return dataclasses.replace(result, rows=[r for r in result.rows if r["kind"] == "run"])


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="multirobot", prog="python benchmarks/multirobot.py"))
