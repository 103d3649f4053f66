"""Attention stability: a base learning-rate sweep for MHA, QK-norm, the Q/K learning-rate rule, MLA and QK-clip.

Trains the same byte-level language model (standard-library text, ``ByteLMDataModule``,
``LanguageModelModule``) once per configuration, base learning rate and seed:

* ``mha``: multi-head attention with RoPE;
* ``mha+qknorm``: RMSNorm on queries and keys per head (Dehghani et al. 2023, arXiv:2302.05442);
* ``mha+qk_lr``: the Q/K learning-rate rule ``eta_Q = eta c / ||W_K||``, ``eta_K = eta c / ||W_Q||``
  (Anson & Aitchison 2025, "Controlling changes to attention logits", arXiv:2511.21377; spectral
  norms, per matrix, ``c`` = the norms at the first step, recomputed every ``qk_lr.every`` steps);
* ``mla``: multi-head latent attention (DeepSeek-V2, arXiv:2405.04434) with query compression
  (``q_down``) and a decoupled RoPE key;
* ``mla+qk_lr``: MLA with the rule on every factor of its logits: the pairs ``q_nope``/``k_up`` and
  ``q_rope``/``k_rope`` and the down-projections ``q_down``, ``kv_down`` (which feed RMSNorms, so their
  rate is ``c ||W|| / (product of the other factors' norms)``; :mod:`pe_toolkit.training.qk_learning_rate`);
* ``mla+qk_clip``: MLA with QK-clip after every AdamW step (Kimi K2, arXiv:2507.20534: per head, if
  the largest logit of the step's batch exceeds ``tau``, the non-rotated query/key parts are scaled
  by ``sqrt(tau / max)`` and the rotated query by ``tau / max``; the paper's MLA baseline;
  :class:`~pe_toolkit.training.callbacks.QKClipCallback`).

Every run uses AdamW (betas 0.9/0.95, weight decay 0.1), linear warmup over 10 % of the steps,
cosine decay to 10 %, gradient clipping at norm 1. A seed sets the initial weights (the data split
and the training windows are the same for every run, so configurations are paired per seed).
Measured per run: the final validation loss (held-out documents), the training-loss curve, and the
largest attention logit of every layer every few steps (:class:`AttentionLogitMonitor`).

A run is *diverged* when its final validation loss is not finite or not below the unigram entropy
of the training bytes (the loss of a model that ignores context). For the statistics a diverged or
non-finite loss counts as ``ln 256`` (uniform prediction), so a diverged seed is never dropped. Per
configuration and learning rate: the mean and Student-t 95 % interval over seeds. Per
configuration: the best learning rate (lowest mean), flagged when it lies at an edge of the grid
(the sweep then does not bracket the optimum), and the highest stable learning rate (the largest lr
at which no seed diverged, every smaller lr also stable). With ``extend_edges: N`` a configuration
whose best lr is at an edge gets the next lr beyond that edge (all seeds), up to N times, so each
optimum ends up bracketed; one still at an edge is flagged in the report.

Paper claims checked, each verdict computed by :func:`pe_toolkit.bench.verdict.decide_claim` on the
per-seed losses, paired by seed (:func:`claims`):

1. the rule allows a higher base learning rate (MHA and MLA): at the learning rates above the
   baseline's best one, the rule is better at one or more and worse at none;
2. the rule is competitive with QK-norm under MHA: at each one's best lr, not worse by more than
   :data:`COMPETITIVE_MARGIN` nats/byte (non-inferiority);
3. in the MLA setting the rule outperforms QK-clip: better at its best lr, or at lrs above it, and
   worse at none.

The base learning rate is the swept variable (every lr runs every seed), not a tuned setting; the
edge extension uses the harness's rule (:func:`pe_toolkit.bench.tuning.extend_value`).

    python benchmarks/attention_stability.py --quick              # tiny sweep (< 2 min here), 1 seed: claims untested
    python benchmarks/attention_stability.py --jobs 2             # full preset: 3 seeds, 1,000 steps
    python benchmarks/attention_stability.py --preset gpu --accelerator cuda --jobs 6
    python benchmarks/attention_stability.py --set steps=200 --set seeds=[0,1,2] --set configs=[mha,mha+qk_lr]
    python benchmarks/attention_stability.py --resume             # reuse the finished runs of an interrupted one

Presets: ``benchmarks/presets/attention_stability/{quick,full,gpu}.yaml``. Outputs: ``results.json``
(one row per run, then the per-(config, lr) and per-config summaries and the claims),
``report.md``, ``loss_vs_lr.png``, ``max_logit.png``; every finished run in ``runs/<preset>/``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from pe_toolkit.bench import Benchmark, Result, trainer_options
from pe_toolkit.bench.plots import nan_if_missing, note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.stats import format_interval, mean_interval
from pe_toolkit.bench.tuning import extend_value
from pe_toolkit.bench.verdict import claim_row, claims_table, decide_claim, untested_claim

CONFIGS = ("mha", "mha+qknorm", "mha+qk_lr", "mla", "mla+qk_lr", "mla+qk_clip")
UNIFORM_LOSS = math.log(256)  # what a diverged run counts as in the statistics
RUN_KEYS = ("model", "mla", "context", "batch_size", "steps", "max_bytes", "val_windows", "monitor_every",
            "qk_clip", "qk_lr")


# ------------------------------------------------------------------------------------------------ config
@dataclasses.dataclass
class Model:
    dim: int
    num_heads: int
    num_layers: int


@dataclasses.dataclass
class MLA:
    latent_dim: int
    rope_head_dim: int
    nope_head_dim: int
    query_latent_dim: int


@dataclasses.dataclass
class QKClip:
    tau: float
    measure: str


@dataclasses.dataclass
class QKLearningRate:
    norm: str
    every: int


@dataclasses.dataclass
class Config:
    configs: list[str]
    seeds: list[int]
    model: Model
    mla: MLA
    context: int
    batch_size: int
    steps: int
    lrs: list[float]
    max_bytes: int
    val_windows: int
    monitor_every: int
    qk_clip: QKClip
    extend_edges: int
    qk_lr: QKLearningRate


# ------------------------------------------------------------------------------------------------ one run
def model_config(name: str, preset: dict[str, Any]):
    """The ``TransformerConfig`` of configuration ``name`` (byte vocabulary, RoPE)."""
    import pe_toolkit as pet

    if name not in CONFIGS:
        raise ValueError(f"config must be one of {CONFIGS}, got {name!r}")
    mla = name.startswith("mla")
    return pet.TransformerConfig(
        vocab_size=256, causal=True, encoding="rope", **preset["model"],
        qk_norm=name == "mha+qknorm", attention="mla" if mla else "mha",
        latent_options=dict(preset["mla"]) if mla else {},
    )


def unigram_entropy(data) -> float:
    """Entropy (nats) of the byte distribution of ``data``: the loss of a model that ignores context."""
    import torch

    counts = torch.bincount(data.long(), minlength=256).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())


def train_language_model(
    model, data, *, lr: float, steps: int, callbacks: list | None = None, warmup_fraction: float = 0.1,
    weight_decay: float = 0.1, seed: int = 0, device: dict | None = None,
):
    """Train ``model`` (a byte-level ``Transformer``) with ``LanguageModelModule`` for ``steps`` steps.

    Returns ``(module, train_losses)``; the module's ``model`` is ``model`` (trained in place).
    """
    import lightning as L
    import torch

    from pe_toolkit.training import LanguageModelModule
    from pe_toolkit.training.callbacks import LossHistory

    L.seed_everything(seed, verbose=False)
    warmup = max(1, int(warmup_fraction * steps))
    # the module's own Transformer is replaced by ``model``: build it minimal
    module = LanguageModelModule(vocab_size=256, dim=8, num_heads=1, num_layers=1, lr=lr, warmup_steps=warmup,
                                 max_steps=steps, weight_decay=weight_decay, betas=(0.9, 0.95))
    module.model = model
    losses = LossHistory(every_n_steps=1)
    trainer = L.Trainer(
        max_steps=steps, **trainer_options(device), logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, gradient_clip_val=1.0,
        callbacks=[losses, *(callbacks or [])], num_sanity_val_steps=0,
    )
    with torch.random.fork_rng():
        trainer.fit(module, datamodule=data)
    return module, [loss for _, loss in losses.history]


def validation_loss(module, windows, batch_size: int = 16) -> float:
    """Mean next-byte cross-entropy (nats) over ``windows (W, T + 1)``; ``inf`` if not finite."""
    value = math.log(module.perplexity(windows, batch_size=batch_size))
    return value if math.isfinite(value) else float("inf")


_DATA: dict[str, Any] = {}


def load_data(spec: dict[str, Any]):
    """``(data module, validation windows, unigram entropy)`` for ``spec``, built once per process."""
    from pe_toolkit.data import ByteLMDataModule, sequential_windows

    key = repr((spec["context"], spec["batch_size"], spec["steps"], spec["max_bytes"], spec["val_windows"]))
    if key not in _DATA:
        data = ByteLMDataModule(context=spec["context"], batch_size=spec["batch_size"],
                                steps_per_epoch=spec["steps"], max_bytes=spec["max_bytes"], seed=0)
        data.setup()
        val = sequential_windows(data.val_bytes, spec["context"], spec["val_windows"])
        _DATA.clear()
        _DATA[key] = (data, val, unigram_entropy(data.train_bytes))
    return _DATA[key]


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one (configuration, lr, seed) of ``spec``; runs in a worker process or in this one."""
    import torch

    import pe_toolkit as pet
    from pe_toolkit.training.callbacks import AttentionLogitMonitor, QKClipCallback, QKLearningRateCallback

    name, lr, seed = spec["config"], spec["lr"], spec["seed"]
    data, val_windows, unigram = load_data(spec)
    torch.manual_seed(seed)  # the same initial weights for every learning rate of a (configuration, seed)
    model = pet.Transformer(model_config(name, spec))
    monitor = AttentionLogitMonitor(every_n_steps=spec["monitor_every"])
    callbacks: list[Any] = [monitor]
    clip = None
    if name.endswith("qk_lr"):
        callbacks.append(QKLearningRateCallback(norm=spec["qk_lr"]["norm"], granularity="matrix", factors="all",
                                                every=spec["qk_lr"]["every"]))
    if name.endswith("qk_clip"):
        clip = QKClipCallback(spec["qk_clip"]["tau"], measure=spec["qk_clip"]["measure"])
        callbacks.append(clip)
    start = time.perf_counter()
    module, losses = train_language_model(model, data, lr=lr, steps=spec["steps"], callbacks=callbacks, seed=seed,
                                           device=spec.get("device"))
    seconds = time.perf_counter() - start
    val = validation_loss(module, val_windows)
    finite = [x for x in losses if math.isfinite(x)]
    tail = losses[-max(1, len(losses) // 10):]
    return {
        "config": name, "lr": lr, "seed": seed, "val_loss": val,
        "train_loss_final": sum(tail) / len(tail) if all(math.isfinite(x) for x in tail) else float("inf"),
        "train_loss_min": min(finite) if finite else None,
        "nonfinite_steps": len(losses) - len(finite),
        "max_logit_final": max(monitor.history[-1][1]) if monitor.history else None,
        "max_logit_peak": max(max(v) for _, v in monitor.history) if monitor.history else None,
        "max_logit_steps": [step for step, _ in monitor.history],
        "max_logit_per_layer": [values for _, values in monitor.history],
        "qk_clip_heads": clip.clipped if clip is not None else None,
        "qk_clip_steps": len(clip.history) if clip is not None else None,
        "train_losses": losses,
        "unigram_entropy": unigram,
        "parameters": model.num_parameters(),
        "seconds": seconds,
    }


# ------------------------------------------------------------------------------------------ statistics
def capped_loss(value: float | None) -> float:
    """The loss a run counts with in the statistics: ``ln 256`` when diverged to non-finite or above it."""
    if value is None or not math.isfinite(value):
        return UNIFORM_LOSS
    return min(float(value), UNIFORM_LOSS)


def summarize_lrs(rows: list[dict[str, Any]], unigram: float) -> list[dict[str, Any]]:
    """Per (configuration, lr): mean and interval of the capped validation loss over seeds, divergences."""
    out = []
    for name in dict.fromkeys(r["config"] for r in rows):
        for lr in sorted({r["lr"] for r in rows if r["config"] == name}):
            runs = [r for r in rows if r["config"] == name and r["lr"] == lr]
            diverged = sum(not (math.isfinite(r["val_loss"]) and r["val_loss"] < unigram) for r in runs)
            runs.sort(key=lambda r: r["seed"])  # aligned by seed: configurations are paired per seed
            values = [capped_loss(r["val_loss"]) for r in runs]
            out.append({"kind": "lr_summary", "config": name, "lr": lr, "seeds": len(runs), "diverged": diverged,
                        "val_loss": mean_interval(values), "values": values,
                        "seed_list": [r["seed"] for r in runs]})
    return out


def summarize_configs(lr_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per configuration: best lr (lowest mean; flagged at a grid edge) and the highest stable lr."""
    out = []
    for name in dict.fromkeys(r["config"] for r in lr_rows):
        runs = sorted((r for r in lr_rows if r["config"] == name), key=lambda r: r["lr"])
        best = min(runs, key=lambda r: r["val_loss"]["mean"])
        position = runs.index(best)
        edge = None if len(runs) < 3 else ("lowest" if position == 0 else "highest" if position == len(runs) - 1
                                           else None)
        stable = None
        for r in runs:
            if r["diverged"]:
                break
            stable = r["lr"]
        out.append({"kind": "config_summary", "config": name, "best_lr": best["lr"], "best_val_loss": best["val_loss"],
                    "best_lr_at_grid_edge": edge, "highest_stable_lr": stable,
                    "seeds": min(r["seeds"] for r in runs), "lrs": [r["lr"] for r in runs]})
    return out


def edge_extensions(config_rows: list[dict[str, Any]]) -> dict[str, float]:
    """For each configuration whose best lr is at a grid edge, the next lr beyond that edge.

    The step is the grid's own ratio at that edge (e.g. 0.1 -> 0.316 on a half-decade grid).
    """
    out = {}
    for row in config_rows:
        edge = {"highest": "high", "lowest": "low"}.get(row["best_lr_at_grid_edge"])
        if edge is not None:
            out[row["config"]] = extend_value(row["lrs"], edge, "log")
    return out


COMPETITIVE_MARGIN = 0.05
"""'Competitive' (Anson & Aitchison 2025): the rule's best final validation loss is not worse than QK-norm's
by more than this (nats/byte, about 2 % of the losses here); a non-inferiority test with this margin."""


def _paired(lr_rows: list[dict[str, Any]], a: tuple[str, float], b: tuple[str, float]) -> tuple[list, list]:
    """Per-seed capped losses of (config, lr) ``a`` and ``b`` over the seeds both have, in seed order."""
    by = {(r["config"], r["lr"]): dict(zip(r["seed_list"], r["values"])) for r in lr_rows}
    seeds = sorted(set(by[a]) & set(by[b]))
    return [by[a][s] for s in seeds], [by[b][s] for s in seeds]


def claims(lr_rows: list[dict[str, Any]], config_rows: list[dict[str, Any]], min_seeds: int = 3) -> list[dict]:
    """The paper claims as :func:`~pe_toolkit.bench.verdict.decide_claim` rows, and one summary per composite claim.

    Every comparison is paired per seed (a seed sets the initial weights; data and windows are shared) on the
    capped final validation loss (lower is better; a diverged run counts as ln 256, never dropped):

    1. "the rule allows a higher base lr" (MHA and MLA): one difference claim per swept lr above the
       baseline's best lr; the summary (``kind`` ``"claim_summary"``) is reproduced when one or more of them is
       reproduced and none contradicted, contradicted in the mirror case, else inconclusive;
    2. "the rule is competitive with QK-norm": non-inferiority at each one's best lr with margin
       :data:`COMPETITIVE_MARGIN`;
    3. "the rule outperforms QK-clip" (MLA): a difference claim at each one's best lr, and one per swept lr
       above QK-clip's best; summarised as in 1.
    Fewer than ``min_seeds`` seeds or a configuration not run: untested.
    """
    by = {r["config"]: r for r in config_rows}
    out: list[dict[str, Any]] = []

    def gate(needed: tuple[str, ...]) -> str | None:
        missing = [c for c in needed if c not in by]
        few = [c for c in needed if c in by and by[c]["seeds"] < min_seeds]
        return (f"configurations not run: {missing}" if missing else
                f"fewer than {min_seeds} seeds for {few}" if few else None)

    def summary(name: str, parts: list[dict[str, Any]], why: str | None) -> None:
        verdicts = [p["verdict"] for p in parts]
        if why is not None or not parts:
            verdict, reason = "untested", why or "no swept lr to compare at"
        elif "reproduced" in verdicts and "contradicted" not in verdicts:
            verdict, reason = "reproduced", "reproduced at one or more lrs, contradicted at none"
        elif "contradicted" in verdicts and "reproduced" not in verdicts:
            verdict, reason = "contradicted", "contradicted at one or more lrs, reproduced at none"
        else:
            verdict, reason = "inconclusive", "no lr reproduces it, or the lrs disagree"
        out.append({"kind": "claim_summary", "claim": name, "verdict": verdict, "reason": reason,
                    "parts": [p["name"] for p in parts],
                    "evidence": "; ".join(f"{p['name']}: {p['verdict']}" for p in parts) or "-"})

    def above(rule: str, base: str, start: float, claim: str) -> list[dict[str, Any]]:
        lrs = sorted(r["lr"] for r in lr_rows if r["config"] == rule and r["lr"] > start
                     and any(q["config"] == base and q["lr"] == r["lr"] for q in lr_rows))
        parts = []
        for lr in lrs:
            a, b = _paired(lr_rows, (rule, lr), (base, lr))
            result = decide_claim(a, b, higher_is_better=False, paired=True,
                                  name=f"{rule} beats {base} at lr {lr:g} (above {base}'s best lr {start:g})",
                                  preconditions=[(len(a) >= min_seeds, f"{len(a)} paired seed(s), fewer than "
                                                  f"{min_seeds}")])
            parts.append(claim_row(result, claim=claim, lr=lr))
        return parts

    for base, rule in (("mha", "mha+qk_lr"), ("mla", "mla+qk_lr")):
        name = f"{rule} allows a higher base lr than {base}"
        why = gate((base, rule))
        parts = [] if why else above(rule, base, by[base]["best_lr"], name)
        out += parts
        summary(name, parts, why)

    name = "mha+qk_lr is competitive with mha+qknorm"
    why = gate(("mha+qk_lr", "mha+qknorm"))
    if why:
        sides: tuple[list, list] = ([], [])
        if "mha+qk_lr" in by and "mha+qknorm" in by:  # the record: both sides at their best lr, as measured
            sides = _paired(lr_rows, ("mha+qk_lr", by["mha+qk_lr"]["best_lr"]),
                            ("mha+qknorm", by["mha+qknorm"]["best_lr"]))
        out.append(claim_row(untested_claim(name, why, *sides, kind="noninferiority", higher_is_better=False,
                                            margin=COMPETITIVE_MARGIN, paired=True), claim=name))
    else:
        a_lr, b_lr = by["mha+qk_lr"]["best_lr"], by["mha+qknorm"]["best_lr"]
        a, b = _paired(lr_rows, ("mha+qk_lr", a_lr), ("mha+qknorm", b_lr))
        result = decide_claim(a, b, kind="noninferiority", margin=COMPETITIVE_MARGIN, higher_is_better=False,
                              paired=True, name=f"{name}: best loss (lr {a_lr:g} vs {b_lr:g}) not worse by more "
                              f"than {COMPETITIVE_MARGIN} nats/byte")
        out.append(claim_row(result, claim=name))

    name = "mla+qk_lr outperforms mla+qk_clip"
    why = gate(("mla+qk_lr", "mla+qk_clip"))
    parts = []
    if not why:
        a_lr, b_lr = by["mla+qk_lr"]["best_lr"], by["mla+qk_clip"]["best_lr"]
        a, b = _paired(lr_rows, ("mla+qk_lr", a_lr), ("mla+qk_clip", b_lr))
        parts.append(claim_row(decide_claim(a, b, higher_is_better=False, paired=True,
                                            name=f"mla+qk_lr beats mla+qk_clip at the best lrs ({a_lr:g} vs {b_lr:g})"),
                               claim=name))
        parts += above("mla+qk_lr", "mla+qk_clip", b_lr, name)
    out += parts
    summary(name, parts, why)
    return out


# ------------------------------------------------------------------------------------------------ plots


def plot(rows: list[dict[str, Any]], lr_rows: list[dict[str, Any]], unigram: float) -> dict[str, Any]:
    """``{"loss_vs_lr.png": figure, "max_logit.png": figure}``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["config"] for r in lr_rows))
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for name in names:
        runs = sorted((r for r in lr_rows if r["config"] == name), key=lambda r: r["lr"])
        lrs = [r["lr"] for r in runs]
        mean = [nan_if_missing(r["val_loss"]["mean"]) for r in runs]
        low = [m - nan_if_missing(r["val_loss"]["low"]) for m, r in zip(mean, runs)]
        high = [nan_if_missing(r["val_loss"]["high"]) - m for m, r in zip(mean, runs)]
        ax.errorbar(lrs, mean, yerr=[low, high], marker="o", capsize=3, label=name)
    ax.axhline(unigram, color="grey", linestyle=":", label="unigram entropy (diverged above)")
    ax.set_xscale("log")
    empty = note_if_empty(ax, "final validation loss")
    ax.set_xlabel("base learning rate")
    ax.set_ylabel("final validation loss (nats/byte), mean and 95 % interval")
    ax.set_title(f"Final loss vs. base learning rate (diverged runs count as ln 256 = {UNIFORM_LOSS:.2f})",
                 fontsize=9)
    if not empty:
        ax.legend(fontsize=8)
    fig.tight_layout()
    figures = {"loss_vs_lr.png": fig}

    lrs = sorted({r["lr"] for r in rows})
    shown = lrs[-2:] if len(lrs) > 1 else lrs
    seed = min(r["seed"] for r in rows)
    fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4), squeeze=False)
    for ax, lr in zip(axes[0], shown):
        for name in names:
            run = next((r for r in rows if r["config"] == name and r["lr"] == lr and r["seed"] == seed), None)
            if run is None:
                continue
            peaks = [max((x for x in map(nan_if_missing, v) if math.isfinite(x)), default=float("nan"))
                     for v in run["max_logit_per_layer"]]
            ax.plot(run["max_logit_steps"], peaks, marker=".", label=name)
        ax.set_yscale("symlog")
        ax.set_xlabel("step")
        ax.set_ylabel("max attention logit over layers")
        ax.set_title(f"base lr = {lr:g}, seed {seed}")
        if not note_if_empty(ax, "the max attention logit"):
            ax.legend(fontsize=8)
    fig.tight_layout()
    figures["max_logit.png"] = fig
    return figures


# ------------------------------------------------------------------------------------------------ benchmark
class AttentionStability(Benchmark):
    name = "attention_stability"
    title = "Attention stability: base learning-rate sweep"
    description = ("final loss and attention logits over a base learning-rate sweep: MHA, QK-norm, the Q/K "
                   "learning-rate rule, MLA, QK-clip (Anson & Aitchison 2025; Kimi K2)")
    Config = Config
    key_fields = ("config", "lr", "seed")

    def __init__(self) -> None:
        self.extended: dict[str, list[float]] = {}  # lrs added beyond a grid edge, per configuration
        self.rounds = 0  # edge-extension passes so far

    def extend(self, config: Config, result: Result) -> bool:
        """Up to ``extend_edges`` passes: each configuration whose best lr is at a grid edge gets the next lr
        beyond it (all seeds); the runner reruns with the earlier runs reused."""
        if self.rounds >= config.extend_edges:
            return False
        beyond = edge_extensions([r for r in result.derived if r["kind"] == "config_summary"])
        if not beyond:
            return False
        self.rounds += 1
        for name, lr in beyond.items():
            self.extended.setdefault(name, []).append(lr)
        print(f"attention_stability: edge extension {self.rounds} "
              f"({', '.join(f'{c}: lr {lr:g}' for c, lr in beyond.items())})", flush=True)
        return True

    def check(self, config: Config) -> None:
        for key in ("steps", "batch_size", "context", "max_bytes", "val_windows", "monitor_every"):
            if getattr(config, key) < 1:
                raise ValueError(f"{key} must be a positive int, got {getattr(config, key)!r}")
        if not config.lrs or not all(x > 0 for x in config.lrs):
            raise ValueError(f"lrs must be a non-empty list of numbers > 0, got {config.lrs!r}")
        if not config.seeds or not all(s >= 0 for s in config.seeds):
            raise ValueError(f"seeds must be a non-empty list of ints >= 0, got {config.seeds!r}")
        if len(set(config.seeds)) != len(config.seeds):
            raise ValueError(f"seeds must be distinct, got {config.seeds!r}")
        unknown = [c for c in config.configs if c not in CONFIGS]
        if not config.configs or unknown:
            raise ValueError(f"configs must be a non-empty list of {CONFIGS}, got {config.configs!r}")
        if config.extend_edges < 0:
            raise ValueError(f"extend_edges must be an int >= 0, got {config.extend_edges!r}")
        if config.qk_lr.every < 1:
            raise ValueError(f"qk_lr.every must be an int >= 1, got {config.qk_lr.every!r}")
        if not config.qk_clip.tau > 0:
            raise ValueError(f"qk_clip.tau must be a number > 0, got {config.qk_clip.tau!r}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        base = {k: v for k, v in dataclasses.asdict(config).items() if k in RUN_KEYS}
        return [{**base, "config": c, "lr": lr, "seed": s} for c in config.configs
                for lr in sorted({float(x) for x in config.lrs} | set(self.extended.get(c, []))) for s in config.seeds]

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return run_one(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        return (f"{row['config']} lr={row['lr']:g} seed {row['seed']}: val loss {row['val_loss']:.3f}, "
                f"max logit {row['max_logit_final']}, {row['seconds']:.0f}s")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        lr_rows = summarize_lrs(result.rows, result.rows[0]["unigram_entropy"])  # the same training bytes in every run
        config_rows = summarize_configs(lr_rows)
        for row in config_rows:
            row["extended_lrs"] = self.extended.get(row["config"], [])
        return lr_rows + config_rows + claims(lr_rows, config_rows)

    def plot(self, result: Result) -> dict[str, Any]:
        lr_rows = [r for r in result.derived if r["kind"] == "lr_summary"]
        return plot(result.rows, lr_rows, result.rows[0]["unigram_entropy"])

    def report(self, result: Result) -> str:
        preset, rows = dataclasses.asdict(result.config), result.rows
        lr_rows = [r for r in result.derived if r["kind"] == "lr_summary"]
        config_rows = [r for r in result.derived if r["kind"] == "config_summary"]
        claim_rows = [r for r in result.derived if r["kind"] == "claim"]
        summaries = [r for r in result.derived if r["kind"] == "claim_summary"]
        unigram = rows[0]["unigram_entropy"]
        interval = lambda v: format_interval(v, ".3f")  # noqa: E731
        lr_table = markdown_table(lr_rows, ["config", "lr", "seeds", "diverged",
                                            ("val_loss", "val loss, mean [95 % CI]")],
                                  {"lr": "g", "val_loss": interval})
        config_table = markdown_table(
            config_rows, ["config", "best_lr", ("best_val_loss", "best val loss [95 % CI]"), "best_lr_at_grid_edge",
                          ("extended_lrs", "lrs added beyond an edge"), "highest_stable_lr", "seeds"],
            {"best_lr": "g", "best_val_loss": interval, "highest_stable_lr": "g",
             "best_lr_at_grid_edge": lambda v: f"**yes ({v})**" if v else "no",
             "extended_lrs": lambda v: ", ".join(f"{x:g}" for x in v) or "-"},
        )
        edges = [r["config"] for r in config_rows if r["best_lr_at_grid_edge"]]
        edge_note = (f"**Grid edge:** the best lr of {', '.join(edges)} is at an edge of the swept grid, so the "
                     "sweep does not bracket its optimum; extend `lrs` before reading its verdicts.\n\n" if edges else
                     "Every configuration's best lr lies inside the grid (the sweep brackets each optimum).\n\n")
        summary_table = markdown_table(summaries, ["claim", ("verdict", "verdict"), "reason", "evidence"],
                                       {"verdict": lambda v: f"**{v}**"})
        runs_table = markdown_table(
            rows, ["config", "lr", "seed", "val_loss", "train_loss_final", "nonfinite_steps", "max_logit_final",
                   "max_logit_peak", "qk_clip_heads", "seconds"],
            {"lr": "g", "val_loss": ".3f", "train_loss_final": ".3f", "max_logit_final": ".2f",
             "max_logit_peak": ".2f", "seconds": ".1f"},
        )
        return (
            f"Byte-level LM on standard-library text; model {preset['model']}, MLA {preset['mla']}; context "
            f"{preset['context']}, batch {preset['batch_size']}, {preset['steps']} steps per run, seeds "
            f"{preset['seeds']} (initial weights), learning rates {sorted(preset['lrs'])} (a configuration whose "
            f"best lr is at an edge gets the next lr beyond it, up to {preset['extend_edges']} time(s)); AdamW "
            "(0.9, 0.95), weight decay 0.1, warmup 10 %, cosine to 10 %, gradient clipping 1.0; Q/K rule with "
            f"{preset['qk_lr']['norm']} norms per matrix (reference: the norms at the first step) on every factor "
            f"of the logit (MLA: q_down and kv_down too), recomputed every {preset['qk_lr']['every']} step(s); "
            f"QK-clip tau {preset['qk_clip']['tau']} (S_max measured {preset['qk_clip']['measure']}); device "
            f"{result.device}. Unigram entropy of the training bytes: {unigram:.3f} nats (a run at or above it has "
            f"diverged; diverged runs count as ln 256 = {UNIFORM_LOSS:.3f} in the means).\n\n"
            "## Paper claims\n\n" + summary_table + "\n"
            + claims_table(claim_rows) + "\n"
            "Verdicts computed by `pe_toolkit.bench.verdict.decide_claim` on per-seed differences of the capped final "
            "validation loss, paired by seed (reproduced / contradicted only when the difference's 95 % interval "
            "excludes 0); 'competitive' is a non-inferiority test with margin "
            f"{COMPETITIVE_MARGIN} nats/byte stated in the claim; a composite claim sums up its per-lr rows "
            "(reproduced at one or more lrs and contradicted at none); fewer than 3 seeds: untested. The swept "
            "learning rate is the measured variable here, not a tuned one: every lr runs every seed.\n\n"
            "## Per configuration\n\n" + config_table + "\n" + edge_note
            + "## Per configuration and learning rate\n\n" + lr_table + "\n"
            + "## Every run\n\n" + runs_table + "\n"
            + "".join(f"![{p}]({p})\n\n" for p in ("loss_vs_lr.png", "max_logit.png"))
        )


# ------------------------------------------------------------------------------------------------ edge rounds
if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="attention_stability", prog="python benchmarks/attention_stability.py"))
