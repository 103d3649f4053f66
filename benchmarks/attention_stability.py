"""Attention stability: a base learning-rate sweep for MHA, QK-norm, the Q/K learning-rate rule, and MLA.

Trains the same byte-level language model (standard-library text, ``ByteLMDataModule``,
``LanguageModelModule``) once per configuration and base learning rate:

* ``mha``: multi-head attention with RoPE;
* ``mha+qknorm``: RMSNorm on queries and keys per head (Dehghani et al. 2023, arXiv:2302.05442);
* ``mha+qk_lr``: the Q/K learning-rate rule ``eta_Q = eta c / ||W_K||``, ``eta_K = eta c / ||W_Q||``
  (Anson & Aitchison 2025, "Controlling changes to attention logits", arXiv:2511.21377; spectral
  norms, per matrix, ``c`` = the norms at the first step, recomputed every step);
* ``mla``: multi-head latent attention (DeepSeek-V2, arXiv:2405.04434) with a decoupled RoPE key;
* ``mla+qk_lr``: MLA with the rule (pairs ``q_nope``/``k_up`` and ``q_rope``/``k_rope``).

Every run uses AdamW (betas 0.9/0.95, weight decay 0.1), linear warmup over 10 % of the steps,
cosine decay to 10 %, gradient clipping at norm 1, one seed. Measured per run: the final validation
loss (held-out documents), the training-loss curve, and the largest attention logit of every layer
every few steps (:class:`AttentionLogitMonitor`). Per configuration the report gives:

* the best final loss and its learning rate;
* the highest *non-diverged* learning rate: the largest swept lr whose final loss is finite and
  below the unigram entropy of the training bytes (a model that falls back to byte frequencies has
  diverged), with every smaller swept lr also non-diverged;
* the highest learning rate *within 10 %* of the best loss of the whole sweep (all configurations).

These are this sweep's definitions; the paper's claim under test is that the Q/K learning-rate rule
raises the highest stable learning rate (it "allows us to increase the base learning rate") and is
competitive with QK-norm under MHA.

    python benchmarks/attention_stability.py --quick     # 5 configs x 3 lrs, tiny model (< 2 min idle)
    python benchmarks/attention_stability.py             # 5 configs x 5 lrs, 100 steps (see FULL)
    python benchmarks/attention_stability.py --resume    # reuse the finished runs of an interrupted one

Outputs: ``results.json`` (one row per run), ``report.md``, ``loss_vs_lr.png``, ``max_logit.png``; every
finished run in ``runs/{quick,full}/`` with its configuration (what ``--resume`` compares).
"""

from __future__ import annotations

import copy
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
from presets import device_options, trainer_options  # noqa: E402

NAME = "attention_stability"
CONFIGS = ("mha", "mha+qknorm", "mha+qk_lr", "mla", "mla+qk_lr")
DIVERGED_TOLERANCE = 0.10  # "within 10 % of the best loss"

QUICK: dict[str, Any] = {
    "model": {"dim": 64, "num_heads": 4, "num_layers": 2},
    "mla": {"latent_dim": 32, "rope_head_dim": 8, "nope_head_dim": 16},
    "context": 64, "batch_size": 8, "steps": 40, "lrs": [3e-3, 3e-2, 3e-1],
    "max_bytes": 400_000, "val_windows": 16, "monitor_every": 5,
}
FULL: dict[str, Any] = {  # sized for ~25 min on the shared 2-core machine at load ~20 (~0.5 s per step there)
    "model": {"dim": 64, "num_heads": 4, "num_layers": 2},
    "mla": {"latent_dim": 32, "rope_head_dim": 8, "nope_head_dim": 16},
    "context": 64, "batch_size": 8, "steps": 100, "lrs": [3e-3, 3e-2, 1e-1, 3e-1, 1.0],
    "max_bytes": 3_000_000, "val_windows": 64, "monitor_every": 5,
}


def model_config(name: str, preset: dict[str, Any]):
    """The ``TransformerConfig`` of configuration ``name`` (byte vocabulary, RoPE)."""
    import pe_toolkit as pet

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


def run_one(name: str, lr: float, preset: dict[str, Any], data, val_windows) -> dict[str, Any]:
    import torch

    import pe_toolkit as pet
    from pe_toolkit.training.callbacks import AttentionLogitMonitor, QKLearningRateCallback

    torch.manual_seed(0)  # the same initial weights for every learning rate of a configuration
    model = pet.Transformer(model_config(name, preset))
    monitor = AttentionLogitMonitor(every_n_steps=preset["monitor_every"])
    callbacks = [monitor]
    if name.endswith("qk_lr"):
        callbacks.append(QKLearningRateCallback(norm="spectral", granularity="matrix"))
    start = time.perf_counter()
    module, losses = train_language_model(model, data, lr=lr, steps=preset["steps"], callbacks=callbacks,
                                           device=preset.get("device"))
    seconds = time.perf_counter() - start
    val = validation_loss(module, val_windows)
    finite = [x for x in losses if math.isfinite(x)]
    tail = losses[-max(1, len(losses) // 10):]
    row = {
        "config": name, "lr": lr, "val_loss": val,
        "train_loss_final": sum(tail) / len(tail) if all(math.isfinite(x) for x in tail) else float("inf"),
        "train_loss_min": min(finite) if finite else None,
        "nonfinite_steps": len(losses) - len(finite),
        "max_logit_final": max(monitor.history[-1][1]) if monitor.history else None,
        "max_logit_peak": max(max(v) for _, v in monitor.history) if monitor.history else None,
        "max_logit_steps": [step for step, _ in monitor.history],
        "max_logit_per_layer": [values for _, values in monitor.history],
        "train_losses": losses,
        "parameters": model.num_parameters(),
        "seconds": seconds,
    }
    return row


def summarize(rows: list[dict[str, Any]], unigram: float) -> list[dict[str, Any]]:
    """Per configuration: best loss and lr, highest non-diverged lr, highest lr within 10 % of the best."""
    best_overall = min(r["val_loss"] for r in rows)
    summary = []
    for name in dict.fromkeys(r["config"] for r in rows):
        runs = sorted((r for r in rows if r["config"] == name), key=lambda r: r["lr"])
        best = min(runs, key=lambda r: r["val_loss"])
        stable = None
        for r in runs:  # highest lr such that it and every smaller lr did not diverge
            if not (math.isfinite(r["val_loss"]) and r["val_loss"] < unigram):
                break
            stable = r["lr"]
        good = [r["lr"] for r in runs if r["val_loss"] <= best_overall * (1 + DIVERGED_TOLERANCE)]
        summary.append({
            "config": name, "best_val_loss": best["val_loss"], "best_lr": best["lr"],
            "highest_nondiverged_lr": stable, "highest_lr_within_10pct": max(good) if good else None,
            "max_logit_at_highest_lr": runs[-1]["max_logit_final"],
        })
    return summary


def plot(rows: list[dict[str, Any]], out_dir: Path, unigram: float) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["config"] for r in rows))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name in names:
        runs = sorted((r for r in rows if r["config"] == name), key=lambda r: r["lr"])
        losses = [nan_if_missing(r["val_loss"]) for r in runs]  # inf (diverged) is left out like NaN
        ax.plot([r["lr"] for r in runs], losses, marker="o", label=name)
    ax.axhline(unigram, color="grey", linestyle=":", label="unigram entropy (diverged above)")
    ax.set_xscale("log")
    empty = note_if_empty(ax, "final validation loss")
    ax.set_xlabel("base learning rate")
    ax.set_ylabel("final validation loss (nats/byte)")
    ax.set_title("Final loss vs. base learning rate")
    if not empty:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "loss_vs_lr.png", dpi=110)
    plt.close(fig)

    lrs = sorted({r["lr"] for r in rows})
    shown = lrs[-2:] if len(lrs) > 1 else lrs
    fig, axes = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4), squeeze=False)
    for ax, lr in zip(axes[0], shown):
        for name in names:
            run = next(r for r in rows if r["config"] == name and r["lr"] == lr)
            peaks = [max((x for x in map(nan_if_missing, v) if math.isfinite(x)), default=float("nan"))
                     for v in run["max_logit_per_layer"]]
            ax.plot(run["max_logit_steps"], peaks, marker=".", label=name)
        ax.set_yscale("symlog")
        ax.set_xlabel("step")
        ax.set_ylabel("max attention logit over layers")
        ax.set_title(f"base lr = {lr:g}")
        if not note_if_empty(ax, "the max attention logit"):
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "max_logit.png", dpi=110)
    plt.close(fig)
    return ["loss_vs_lr.png", "max_logit.png"]


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS))
    parser.add_argument("--lrs", nargs="+", type=float, help="override the swept learning rates")
    parser.add_argument("--steps", type=int, help="override the training steps")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from pe_toolkit.data import ByteLMDataModule, sequential_windows

    preset = copy.deepcopy(QUICK if args.quick else FULL)
    if args.lrs:
        preset["lrs"] = sorted(args.lrs)
    if args.steps:
        preset["steps"] = args.steps
    preset["device"] = device_options(args)  # part of each run's identity
    start = time.perf_counter()
    data = ByteLMDataModule(context=preset["context"], batch_size=preset["batch_size"],
                            steps_per_epoch=preset["steps"], max_bytes=preset["max_bytes"], seed=0)
    data.setup()
    val_windows = sequential_windows(data.val_bytes, preset["context"], preset["val_windows"])
    unigram = unigram_entropy(data.train_bytes)
    runs = [(name, lr) for name in args.configs for lr in preset["lrs"]]
    progress = Progress(len(runs), NAME)
    rows = []
    store = RunStore(Path(args.out) / NAME / "runs" / ("quick" if args.quick else "full"), resume=args.resume)
    run_config = {k: v for k, v in preset.items() if k != "lrs"}
    for name, lr in runs:
        key = f"{name.replace('+', '_')}__lr{lr:g}"
        row = store.load(key, {**run_config, "config": name, "lr": lr})
        if row is None:
            row = run_one(name, lr, preset, data, val_windows)
            store.save(key, {**run_config, "config": name, "lr": lr}, row)
        row = {k: v for k, v in row.items() if k != "spec"}
        rows.append(row)
        progress(f"{name} lr={lr:g}: val loss {row['val_loss']:.3f}, max logit {row['max_logit_final']}")
    summary = summarize(rows, unigram)
    seconds = time.perf_counter() - start
    out_dir = Path(args.out) / NAME
    config = {"quick": args.quick, **preset, "configs": args.configs, "unigram_entropy": unigram,
              "optimizer": "AdamW(0.9, 0.95), wd 0.1, warmup 10 %, cosine to 10 %, grad clip 1.0",
              "qk_lr_rule": "spectral norm, per matrix, reference = norms at the first step, every step"}
    write_results(NAME, config, rows + [{"kind": "summary", **s} for s in summary], seconds, root=args.out)
    pngs = plot(rows, out_dir, unigram)
    runs_table = markdown_table(
        rows, ["config", "lr", "val_loss", "train_loss_final", "nonfinite_steps", "max_logit_final", "max_logit_peak",
               "seconds"],
        {"lr": "g", "val_loss": ".3f", "train_loss_final": ".3f", "max_logit_final": ".2f", "max_logit_peak": ".2f",
         "seconds": ".1f"},
    )
    summary_table = markdown_table(
        summary, ["config", "best_val_loss", "best_lr", "highest_nondiverged_lr", "highest_lr_within_10pct",
                  "max_logit_at_highest_lr"],
        {"best_val_loss": ".3f", "best_lr": "g", "highest_nondiverged_lr": "g", "highest_lr_within_10pct": "g",
         "max_logit_at_highest_lr": ".2f"},
    )
    by = {s["config"]: s for s in summary}
    verdict = []
    for base, rule in (("mha", "mha+qk_lr"), ("mla", "mla+qk_lr")):
        if base in by and rule in by:
            a, b = by[base]["highest_lr_within_10pct"], by[rule]["highest_lr_within_10pct"]
            if a is None or b is None:
                text = "not comparable (a configuration never came within 10 % of the best loss)"
            else:
                text = "raises" if b > a else ("keeps" if b == a else "lowers")
                text += f" it ({a:g} -> {b:g})"
            verdict.append(f"- {rule} vs {base}: the Q/K learning-rate rule {text} (highest lr within 10 % of the "
                           "best loss of the sweep).")
    body = (
        f"Byte-level LM on standard-library text; model {preset['model']}, MLA {preset['mla']}; context "
        f"{preset['context']}, batch {preset['batch_size']}, {preset['steps']} steps per run, one seed. "
        f"Unigram entropy of the training bytes: {unigram:.3f} nats (a run at or above it has diverged).\n\n"
        "## Summary per configuration\n\n" + summary_table + "\n" + "\n".join(verdict) + "\n\n"
        "## Every run\n\n" + runs_table + "\n"
        + "".join(f"![{p}]({p})\n\n" for p in pngs)
    )
    write_report(NAME, "Attention stability: base learning-rate sweep", body, root=args.out)
    print(f"wrote {out_dir} in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
