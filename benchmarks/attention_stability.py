"""Attention stability: a base learning-rate sweep for MHA, QK-norm, the Q/K learning-rate rule, MLA and QK-clip.

Claims (Anson & Aitchison 2025, "Controlling changes to attention logits", arXiv:2511.21377): the Q/K rule
``eta_Q = eta c / ||W_K||``, ``eta_K = eta c / ||W_Q||`` (:mod:`pe_toolkit.training.qk_learning_rate`) allows a
higher base lr under MHA and MLA (DeepSeek-V2, arXiv:2405.04434), is competitive with QK-norm (Dehghani et al. 2023)
and outperforms QK-clip (Kimi K2, arXiv:2507.20534). One byte-level LM with RoPE per (configuration, lr, seed); the
seed sets the initial weights on shared data, so configurations pair per seed. A diverged run (validation loss not
below the unigram entropy) counts capped at ln 256, never dropped. The lr is swept (every lr, every seed), not tuned;
``extend_edges`` adds lrs past a grid edge holding a configuration's best.

    python benchmarks/attention_stability.py --quick              # tiny sweep (< 2 min here), 1 seed: claims untested
    python benchmarks/attention_stability.py --jobs 2             # full preset: 3 seeds, 1,000 steps
    python benchmarks/attention_stability.py --preset gpu --accelerator cuda --jobs 6
    python benchmarks/attention_stability.py --set steps=200 --set seeds=[0,1,2] --set configs=[mha,mha+qk_lr]
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from typing import Any, Literal

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from pe_toolkit.bench import Benchmark, Result
from pe_toolkit.bench.checks import distinct, positives
from pe_toolkit.bench.config import ModelSize
from pe_toolkit.bench.plots import finish, nan_if_missing, new_figure, plot_intervals
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.summary import group_rows, summarize_groups, summary_table
from pe_toolkit.bench.tuning import extend_value
from pe_toolkit.bench.verdict import claim_row, decide_claim, untested_claim
from pe_toolkit.training.lm_text_module import train_language_model, validation_loss
from pe_toolkit.training.qk_clip import QK_CLIP_MEASURES
from pe_toolkit.training.qk_learning_rate import QK_NORMS

CONFIGS = ("mha", "mha+qknorm", "mha+qk_lr", "mla", "mla+qk_lr", "mla+qk_clip")
UNIFORM_LOSS = math.log(256)  # what a diverged run counts as in the statistics
RUN_KEYS = ("model", "mla", "context", "batch_size", "steps", "max_bytes", "val_windows", "monitor_every",
            "qk_clip", "qk_lr")
COMPETITIVE_MARGIN = 0.05  # 'competitive': not worse than QK-norm by more (nats/byte, ~2 % of the losses here)
COMPOSITE_REASONS = {"untested": "no swept lr to compare at",
                     "reproduced": "reproduced at one or more lrs, contradicted at none",
                     "contradicted": "contradicted at one or more lrs, reproduced at none",
                     "inconclusive": "no lr reproduces it, or the lrs disagree"}


@dataclasses.dataclass
class MLA:
    latent_dim: PositiveInt
    rope_head_dim: PositiveInt
    nope_head_dim: PositiveInt
    query_latent_dim: PositiveInt


@dataclasses.dataclass
class QKClip:
    tau: PositiveFloat
    measure: Literal[QK_CLIP_MEASURES]


@dataclasses.dataclass
class QKLearningRate:
    norm: Literal[QK_NORMS]
    every: PositiveInt


@dataclasses.dataclass
class Config:
    configs: list[Literal[CONFIGS]]
    seeds: list[NonNegativeInt]
    model: ModelSize
    mla: MLA
    context: PositiveInt
    batch_size: PositiveInt
    steps: PositiveInt
    lrs: list[float]
    max_bytes: PositiveInt
    val_windows: PositiveInt
    monitor_every: PositiveInt
    qk_clip: QKClip
    extend_edges: NonNegativeInt
    qk_lr: QKLearningRate


@functools.lru_cache(maxsize=1)
def load_data(context: int, batch_size: int, steps: int, max_bytes: int, val_windows: int):
    """``(data module, validation windows, unigram entropy)``, built once per process."""
    from pe_toolkit.data import ByteLMDataModule, sequential_windows, unigram_entropy

    data = ByteLMDataModule(context=context, batch_size=batch_size, steps_per_epoch=steps, max_bytes=max_bytes, seed=0)
    data.setup()
    return data, sequential_windows(data.val_bytes, context, val_windows), unigram_entropy(data.train_bytes)


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one (configuration, lr, seed) of ``spec``: a byte-level Transformer with RoPE."""
    import torch

    import pe_toolkit as pet
    from pe_toolkit.training.callbacks import AttentionLogitMonitor, QKClipCallback, QKLearningRateCallback

    name, lr, seed = spec["config"], spec["lr"], spec["seed"]
    data, val_windows, unigram = load_data(*(spec[k] for k in ("context", "batch_size", "steps", "max_bytes",
                                                                 "val_windows")))
    torch.manual_seed(seed)  # the same initial weights for every learning rate of a (configuration, seed)
    mla = name.startswith("mla")
    model = pet.Transformer(pet.TransformerConfig(
        vocab_size=256, causal=True, encoding="rope", **spec["model"], qk_norm=name == "mha+qknorm",
        attention="mla" if mla else "mha", latent_options=spec["mla"] if mla else {}))
    monitor = AttentionLogitMonitor(every_n_steps=spec["monitor_every"])
    clip = QKClipCallback(spec["qk_clip"]["tau"], measure=spec["qk_clip"]["measure"]) if name.endswith("qk_clip") \
        else None
    rule = QKLearningRateCallback(norm=spec["qk_lr"]["norm"], granularity="matrix", factors="all",
                                  every=spec["qk_lr"]["every"]) if name.endswith("qk_lr") else None
    callbacks = [c for c in (monitor, rule, clip) if c is not None]
    start = time.perf_counter()
    module, losses = train_language_model(model, data, lr=lr, steps=spec["steps"], callbacks=callbacks, seed=seed,
                                          device=spec.get("device"))
    seconds = time.perf_counter() - start
    finite = [x for x in losses if math.isfinite(x)]
    tail = losses[-max(1, len(losses) // 10):]
    history = monitor.history
    return {
        "config": name, "lr": lr, "seed": seed, "val_loss": validation_loss(module, val_windows),
        "train_loss_final": sum(tail) / len(tail) if all(math.isfinite(x) for x in tail) else float("inf"),
        "train_loss_min": min(finite) if finite else None, "nonfinite_steps": len(losses) - len(finite),
        "max_logit_final": max(history[-1][1]) if history else None,
        "max_logit_peak": max(max(v) for _, v in history) if history else None,
        "max_logit_steps": [step for step, _ in history], "max_logit_per_layer": [values for _, values in history],
        "qk_clip_heads": clip.clipped if clip is not None else None,
        "qk_clip_steps": len(clip.history) if clip is not None else None,
        "train_losses": losses, "unigram_entropy": unigram, "parameters": model.num_parameters(), "seconds": seconds,
    }


def capped_loss(value: float | None) -> float:
    """The loss a run counts with in the statistics: ``ln 256`` when diverged to non-finite or above it."""
    return UNIFORM_LOSS if value is None or not math.isfinite(value) else min(float(value), UNIFORM_LOSS)


def summarize_lrs(rows: list[dict[str, Any]], unigram: float) -> list[dict[str, Any]]:
    """Per (configuration, lr) over seeds: the capped validation loss, the fraction of runs that diverged (not below
    the ``unigram`` entropy) and the peak attention logit."""
    capped = [{**r, "val_loss": capped_loss(r["val_loss"]),
               "diverged": float(not (math.isfinite(r["val_loss"]) and r["val_loss"] < unigram))} for r in rows]
    return [{"kind": "summary", **entry} for entry in summarize_groups(
        capped, AttentionStability.summary_by, list(AttentionStability.summary_metrics), bounds={"diverged": (0, 1)})]


def summarize_configs(lr_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration: the best lr (lowest mean; at a ``"low"`` / ``"high"`` edge of three or more lrs, or
    ``None``) and the highest stable lr (no seed diverged there nor at any lower lr)."""
    out = []
    for (name,), runs in group_rows(lr_rows, ("config",)).items():
        runs = sorted(runs, key=lambda r: r["lr"])
        at = min(range(len(runs)), key=lambda i: runs[i]["val_loss"]["mean"])
        edge = None if len(runs) < 3 else "low" if at == 0 else "high" if at == len(runs) - 1 else None
        stable = next((i for i, r in enumerate(runs) if r["diverged"]["mean"] > 0), len(runs))
        out.append({"kind": "config_summary", "config": name, "best_lr": runs[at]["lr"],
                    "best_val_loss": runs[at]["val_loss"], "best_lr_at_grid_edge": edge,
                    "highest_stable_lr": runs[stable - 1]["lr"] if stable else None,
                    "runs": min(r["runs"] for r in runs), "lrs": [r["lr"] for r in runs]})
    return out


def claims(rows: list[dict[str, Any]], config_rows: list[dict[str, Any]], min_seeds: int = 3) -> list[dict]:
    """The paper's claims, paired per seed on the capped loss of the runs ``rows`` (lower is better): "the rule
    allows a higher base lr" (MHA, MLA; one difference claim per swept lr above the baseline's best); "it is
    competitive with QK-norm" (non-inferiority at each one's best lr, margin :data:`COMPETITIVE_MARGIN`); "it
    outperforms QK-clip" (MLA; at the best lrs and at each lr above QK-clip's best). A composite claim's
    ``claim_summary`` row is reproduced when a part is and none contradicted (mirror case: contradicted; else
    inconclusive). Fewer than ``min_seeds`` seeds or a configuration not run: untested."""
    losses: dict[tuple, dict[int, float]] = {}
    for r in rows:
        losses.setdefault((r["config"], r["lr"]), {})[r["seed"]] = capped_loss(r["val_loss"])
    by = {r["config"]: r for r in config_rows}
    out: list[dict[str, Any]] = []

    def gate(*needed: str) -> str | None:
        missing = [c for c in needed if c not in by]
        few = [c for c in needed if c in by and by[c]["runs"] < min_seeds]
        return f"configurations not run: {missing}" if missing else f"fewer than {min_seeds} seeds for {few}" if few \
            else None

    def decide(a: tuple[str, float], b: tuple[str, float], name: str, why: str | None = None, **options: Any) -> dict:
        """(config, lr) ``a`` against ``b``, paired on the seeds both ran."""
        seeds = sorted(set(losses[a]) & set(losses[b]))
        enough = (len(seeds) >= min_seeds, f"{len(seeds)} paired seed(s), fewer than {min_seeds}")
        return decide_claim([losses[a][s] for s in seeds], [losses[b][s] for s in seeds], higher_is_better=False,
                            paired=True, name=name, preconditions=[(why is None, why), enough], **options)

    def beats(rule: str, base: str, claim: str, at_best: bool) -> None:
        why, parts = gate(rule, base), []
        if not why:
            start, best = by[base]["best_lr"], by[rule]["best_lr"]
            pairs = [(best, start, f"{rule} beats {base} at the best lrs ({best:g} vs {start:g})")] if at_best else []
            pairs += [(lr, lr, f"{rule} beats {base} at lr {lr:g} (above {base}'s best lr {start:g})")
                      for lr in by[rule]["lrs"] if lr > start and lr in by[base]["lrs"]]
            parts = [claim_row(decide((rule, a), (base, b), name), claim=claim, lr=a) for a, b, name in pairs]
        found = {p["verdict"] for p in parts}
        verdict = ("untested" if why or not parts else "inconclusive" if {"reproduced", "contradicted"} <= found
                   else "reproduced" if "reproduced" in found else "contradicted" if "contradicted" in found
                   else "inconclusive")
        out.extend([*parts, {"kind": "claim_summary", "claim": claim, "verdict": verdict,
                             "reason": why or COMPOSITE_REASONS[verdict], "parts": [p["name"] for p in parts],
                             "evidence": "; ".join(f"{p['name']}: {p['verdict']}" for p in parts) or "-"}])

    beats("mha+qk_lr", "mha", "mha+qk_lr allows a higher base lr than mha", at_best=False)
    beats("mla+qk_lr", "mla", "mla+qk_lr allows a higher base lr than mla", at_best=False)
    name, why = "mha+qk_lr is competitive with mha+qknorm", gate("mha+qk_lr", "mha+qknorm")
    common = dict(kind="noninferiority", margin=COMPETITIVE_MARGIN)
    if "mha+qk_lr" in by and "mha+qknorm" in by:  # both sides at their best lr (the record, if untested)
        a, b = ("mha+qk_lr", by["mha+qk_lr"]["best_lr"]), ("mha+qknorm", by["mha+qknorm"]["best_lr"])
        out.append(claim_row(decide(a, b, why=why, **common, name=name if why else f"{name}: best loss (lr {a[1]:g} "
                                    f"vs {b[1]:g}) not worse by more than {COMPETITIVE_MARGIN} nats/byte"), claim=name))
    else:
        out.append(claim_row(untested_claim(name, why, higher_is_better=False, paired=True, **common), claim=name))
    beats("mla+qk_lr", "mla+qk_clip", "mla+qk_lr outperforms mla+qk_clip", at_best=True)
    return out


def plot(rows: list[dict[str, Any]], lr_rows: list[dict[str, Any]], unigram: float) -> dict[str, Any]:
    """``{"loss_vs_lr.png": figure, "max_logit.png": figure}``."""
    groups = group_rows(lr_rows, ("config",))
    fig, axes = new_figure(size=(7, 4.4))
    ax = axes[0][0]
    for (name,), runs in groups.items():
        runs = sorted(runs, key=lambda r: r["lr"])
        plot_intervals(ax, [r["lr"] for r in runs], [r["val_loss"] for r in runs], label=name)
    ax.axhline(unigram, color="grey", linestyle=":", label="unigram entropy (diverged above)")
    ax.set(xscale="log", xlabel="base learning rate", ylabel="final validation loss (nats/byte), mean, 95 % interval")
    ax.set_title(f"Final loss vs. base learning rate (diverged runs count as ln 256 = {UNIFORM_LOSS:.2f})", fontsize=9)
    figures = {"loss_vs_lr.png": finish(fig, "final validation loss")}

    lrs, seed = sorted({r["lr"] for r in rows})[-2:], min(r["seed"] for r in rows)
    fig, axes = new_figure(1, len(lrs), size=(6, 4))
    for ax, lr in zip(axes[0], lrs):
        for run in (r for (name,) in groups for r in rows if (r["config"], r["lr"], r["seed"]) == (name, lr, seed)):
            peaks = [max((x for x in map(nan_if_missing, v) if math.isfinite(x)), default=float("nan"))
                     for v in run["max_logit_per_layer"]]
            ax.plot(run["max_logit_steps"], peaks, marker=".", label=run["config"])
        ax.set(yscale="symlog", xlabel="step", ylabel="max attention logit over layers",
               title=f"base lr = {lr:g}, seed {seed}")
    figures["max_logit.png"] = finish(fig, "the max attention logit")
    return figures


class AttentionStability(Benchmark):
    name, title = "attention_stability", "Attention stability: base learning-rate sweep"
    Config, key_fields, run_one = Config, ("config", "lr", "seed"), staticmethod(run_one)
    summary_by = ("config", "lr")
    summary_metrics = {"val_loss": None, "diverged": (0, 1), "max_logit_peak": None}
    run_columns = ("config", "lr", "seed", "val_loss", "nonfinite_steps", "max_logit_peak", "qk_clip_heads", "seconds")
    held_out = "the validation loss is measured on held-out documents"
    same_budget = "runs every lr of the sweep on every seed, from the same initial weights per seed"

    def __init__(self) -> None:
        self.extended: dict[str, list[float]] = {}  # lrs added beyond a grid edge, per configuration
        self.rounds = 0  # edge-extension passes so far

    def check(self, config: Config) -> None:
        distinct("configs", config.configs)
        positives("lrs", config.lrs)

    def runs(self, config: Config) -> list[dict[str, Any]]:
        base = {k: v for k, v in dataclasses.asdict(config).items() if k in RUN_KEYS}
        return [{**base, "config": c, "lr": lr, "seed": s} for c in config.configs
                for lr in sorted({float(x) for x in config.lrs} | set(self.extended.get(c, []))) for s in config.seeds]

    def extend(self, config: Config, result: Result) -> bool:
        """Up to ``extend_edges`` passes: a configuration whose best lr is at a grid edge gets the next lr beyond."""
        edges = [r for r in result.derived_of("config_summary") if r["best_lr_at_grid_edge"]]
        if self.rounds >= config.extend_edges or not edges:
            return False
        self.rounds += 1
        for r in edges:
            self.extended.setdefault(r["config"], []).append(extend_value(r["lrs"], r["best_lr_at_grid_edge"], "log"))
        print(f"attention_stability: edge extension {self.rounds} {self.extended}", flush=True)
        return True

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        lr_rows = summarize_lrs(result.rows, result.rows[0]["unigram_entropy"])  # the same training bytes in every run
        config_rows = summarize_configs(lr_rows)
        return lr_rows + config_rows + claims(result.rows, config_rows)

    def plot(self, result: Result) -> dict[str, Any]:
        return plot(result.rows, result.derived_of("summary"), result.rows[0]["unigram_entropy"])

    def report(self, result: Result) -> str:
        configs = result.derived_of("config_summary")
        edges = [r["config"] for r in configs if r["best_lr_at_grid_edge"]]
        return "\n\n".join([
            f"Unigram entropy of the training bytes: {result.rows[0]['unigram_entropy']:.3f} nats; a run not below it "
            f"has diverged. Losses count capped at ln 256 = {UNIFORM_LOSS:.3f}.",
            "## Paper claims\n\n" + markdown_table(result.derived_of("claim_summary"), ["claim", "verdict", "reason",
                                                                                       "evidence"]),
            "## Per configuration\n\n" + summary_table(configs, ["config", "best_lr", "best_lr_at_grid_edge",
                                                                 "highest_stable_lr", "runs"], ["best_val_loss"]),
            *([f"**Grid edge:** the best lr of {', '.join(edges)} is at an edge of the swept grid: extend `lrs` before "
               "reading its verdicts."] if edges else []),
            super().report(result)])


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="attention_stability", prog="python benchmarks/attention_stability.py"))
