"""MHA -> MLA conversion (Ji et al. 2025, MHA2MLA): KV-cache reduction vs. loss, per partial-RoPE strategy.

Ji et al. 2025, "Towards Economical Inference: Enabling DeepSeek's Multi-Head Latent Attention in
Any Transformer-based LLMs", arXiv:2502.14837. Pipeline, all in this run:

1. train a byte-level RoPE language model (MHA, standard-library text, ``LanguageModelModule``);
2. convert it to MLA (:func:`pe_toolkit.conversion.convert_to_mla`) for each partial-RoPE strategy
   (``high``, ``low``, ``uniform``, ``2-norm`` with calibration windows of the training split) and
   each (kept rotary dims ``r``, latent size ``d_kv``), with the joint SVD; plus the split SVD at the
   same cache size (two latents of ``d_kv / 2``);
3. measure the validation loss of the converted model as it is (zero-shot) and after a short
   fine-tune of all parameters; the original model gets the same fine-tune, so "loss change" compares
   models that saw the same number of steps.

KV cache: numbers cached per token over all layers, before (``2 H_kv d`` per layer) and after
(``d_kv + H_kv r`` per layer), and bytes at float32. The paper reports -92.19 % cache for +0.5 %
LongBench at 7B scale with 0.3-0.6 % of the pretraining tokens (v1; v2: 0.6-1 % of the data, -1 %
LongBench) and the ordering 2-norm >~ high > uniform > low, joint > split. Here the model is tiny and
the metric is byte-level validation loss, so only the direction of those claims can be checked.

Seeds: the whole pipeline (MHA training, every conversion's fine-tune) runs once per seed of the
preset (the seed sets the initial weights and the fine-tuning batches; the data split is fixed);
per conversion the report gives the mean and Student-t 95 % interval over seeds, and each paper
claim is decided from intervals (``interval_verdict``): the loss cost of a >= 90 % cache reduction
(reproduced when the interval of the loss change lies below the paper's +1 %), the strategy
ordering (high > uniform > low, 2-norm not worse than high, at the same r and d_kv) and joint >
split at the same cache size. Fewer than 3 seeds: untested.

Decoding: one step of an MLA layer, absorbed against plain, at cache lengths ``decode_lengths``
(512-4,096 in the full preset), with the cache's bytes as allocated (``KVCache.nbytes``) next to the
bytes its held tokens need.

    python benchmarks/mha2mla.py --quick      # tiny model, 6 conversions, 1 seed (< 2 min here)
    python benchmarks/mha2mla.py              # full preset (3 seeds)
    python benchmarks/mha2mla.py --preset gpu --accelerator cuda
    python benchmarks/mha2mla.py --resume     # reuse the trained models and finished conversions
    python benchmarks/mha2mla.py --quick --hf # the same on a tiny Hugging Face LlamaForCausalLM

Presets: ``benchmarks/presets/mha2mla/{quick,full,gpu}.yaml``.

With ``--hf`` the MHA model is a ``transformers.LlamaForCausalLM`` of the same sizes (built from a
``LlamaConfig``, random init, nothing downloads), trained through
:class:`pe_toolkit.integrations.hf.CausalLMLogits`; ``convert_to_mla`` takes the HF model itself
(through :func:`pe_toolkit.integrations.hf.from_hf`), and the MHA baseline is fine-tuned as the HF model.

Outputs: ``results.json``, ``report.md``, ``mha2mla.png``.
"""

from __future__ import annotations

import copy
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from attention_stability import train_language_model, validation_loss  # noqa: E402
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
    write_report,
    write_results,
)
from presets import device_options, preset_from_args  # noqa: E402

NAME = "mha2mla"
STRATEGIES = ("high", "low", "uniform", "2-norm")

MIN_SEEDS = 3
PAPER_LOSS_TOLERANCE_PCT = 1.0  # v2: a 1 % LongBench drop at -92 % KV cache


def conversion_name(row: dict[str, Any]) -> str:
    return f"{row['strategy']}/{row['svd']} r={row['rope_dim']} d_kv={row['latent_dim']}"


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per model (MHA, each conversion): mean and 95 % interval over seeds of the losses and the loss change."""
    out = []
    keys = list(dict.fromkeys((r["model"], r["strategy"], r["svd"], r["rope_dim"], r["latent_dim"]) for r in rows))
    for key in keys:
        runs = [r for r in rows if (r["model"], r["strategy"], r["svd"], r["rope_dim"], r["latent_dim"]) == key]
        first = runs[0]
        out.append({
            "kind": "summary",
            **{k: first[k] for k in ("model", "strategy", "svd", "rope_dim", "latent_dim", "cache_per_token",
                                     "cache_bytes_per_token", "cache_reduction")},
            "seeds": len(runs),
            **{k: mean_interval([r[k] for r in runs]) for k in ("val_loss_zero_shot", "val_loss_finetuned",
                                                                "loss_change_pct")},
        })
    return out


def claims(summary: list[dict[str, Any]], min_seeds: int = MIN_SEEDS) -> list[dict[str, Any]]:
    """The paper's claims, each ``reproduced`` / ``not reproduced`` / ``untested``, from the intervals."""
    mla = [r for r in summary if r["model"] == "mla"]
    by = {(r["strategy"], r["svd"], r["rope_dim"], r["latent_dim"]): r for r in mla}
    out = []

    def add(claim: str, verdict: str, evidence: str, used: list[dict[str, Any]]) -> None:
        if used and min(r["seeds"] for r in used) < min_seeds:
            verdict, evidence = "untested", f"fewer than {min_seeds} seeds: no interval ({evidence})"
        out.append({"kind": "claim", "claim": claim, "verdict": verdict, "evidence": evidence})

    big = [r for r in mla if r["cache_reduction"] >= 0.9]
    claim = f">= 90 % less KV cache for <= {PAPER_LOSS_TOLERANCE_PCT:g} % more loss (after the same fine-tune)"
    if not big:
        add(claim, "untested", "no conversion in this run reaches a 90 % cache reduction", [])
    else:
        best = min(big, key=lambda r: r["loss_change_pct"]["mean"])
        change = best["loss_change_pct"]
        ok = math.isfinite(change["high"]) and change["high"] <= PAPER_LOSS_TOLERANCE_PCT
        add(claim, "reproduced" if ok else "not reproduced",
            f"best: {conversion_name(best)}, cache -{100 * best['cache_reduction']:.2f} %, loss change "
            f"{format_interval(change, '+.2f')} %", [best])

    def finetuned(strategy: str, svd: str, r: int, d: int):
        return by.get((strategy, svd, r, d))

    # the strategy ordering at each (r, d_kv) where all four strategies were converted with the joint SVD
    shapes = sorted({(k[2], k[3]) for k in by if k[1] == "joint"})
    for r, d in shapes:
        models = {s: finetuned(s, "joint", r, d) for s in STRATEGIES}
        if any(m is None for m in models.values()):
            continue
        pairs = (("high", "uniform", "better"), ("uniform", "low", "better"), ("2-norm", "high", "not worse"))
        results = []
        for a, b, wanted in pairs:
            v = interval_verdict(models[a]["val_loss_finetuned"], models[b]["val_loss_finetuned"],
                                 higher_is_better=False)
            results.append((a, b, wanted, v, v == "better" if wanted == "better" else v != "worse"))
        add(f"ordering 2-norm >~ high > uniform > low (joint, r={r}, d_kv={d}, fine-tuned loss)",
            "reproduced" if all(ok for *_, ok in results) else "not reproduced",
            "; ".join(f"{a} vs {b}: {v} (wanted {w})" for a, b, w, v, _ in results), list(models.values()))
    # joint against split at the same cache size (the same numbers cached per token)
    for (strategy, svd, r, _), split in sorted(by.items()):
        if svd != "split":
            continue
        joint = next((m for k, m in by.items() if k[0] == strategy and k[1] == "joint" and k[2] == r
                      and m["cache_per_token"] == split["cache_per_token"]), None)
        if joint is None:
            continue
        v = interval_verdict(joint["val_loss_finetuned"], split["val_loss_finetuned"], higher_is_better=False)
        add(f"joint SVD > split SVD at the same cache ({strategy}, r={r}, {split['cache_per_token']} per token)",
            "reproduced" if v == "better" else "not reproduced",
            f"{conversion_name(joint)} {format_interval(joint['val_loss_finetuned'], '.4f')} vs "
            f"{conversion_name(split)} {format_interval(split['val_loss_finetuned'], '.4f')}: {v}", [joint, split])
    return out


def check_preset(preset: dict[str, Any]) -> None:
    """``ValueError`` naming the preset entry that cannot run."""
    seeds = preset["seeds"]
    if not seeds or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds) \
            or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct ints >= 0, got {seeds!r}")
    for key in ("train_steps", "finetune_steps", "context", "batch_size", "max_bytes", "val_windows",
                "calibration_windows", "decode_rounds"):
        value = preset[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{key} must be a positive int, got {value!r}")
    for item in preset["conversions"]:
        if (not isinstance(item, (list, tuple)) or len(item) != 4 or item[0] not in STRATEGIES
                or item[1] not in ("joint", "split")):
            raise ValueError(f"conversions entries must be [strategy in {STRATEGIES}, 'joint' | 'split', rope_dim, "
                             f"latent_dim], got {item!r}")
    lengths = preset["decode_lengths"]
    if not lengths or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in lengths):
        raise ValueError(f"decode_lengths must be a non-empty list of positive ints, got {lengths!r}")


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--seeds", nargs="+", type=int, help="shortcut for --set seeds=[...]")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the trained MHA models and the finished conversions of the same configuration")
    parser.add_argument("--hf", action="store_true",
                        help="start from a tiny Hugging Face LlamaForCausalLM (needs the 'hf' extra)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    import pe_toolkit as pet
    from pe_toolkit.checkpoint import load_weights
    from pe_toolkit.conversion import convert_to_mla
    from pe_toolkit.data import ByteLMDataModule, random_windows, sequential_windows

    preset = preset_from_args(args, NAME)
    if args.seeds is not None:
        preset["seeds"] = list(args.seeds)
    check_preset(preset)
    preset["conversions"] = [list(c) for c in preset["conversions"]]
    preset["device"] = device_options(args)  # part of each run's identity
    start = time.perf_counter()
    data = ByteLMDataModule(context=preset["context"], batch_size=preset["batch_size"],
                            steps_per_epoch=preset["train_steps"], max_bytes=preset["max_bytes"], seed=0)
    data.setup()
    val_windows = sequential_windows(data.val_bytes, preset["context"], preset["val_windows"])
    calibration = random_windows(data.train_bytes, preset["context"] - 1, preset["calibration_windows"],
                                 torch.Generator().manual_seed(1)).long()
    progress = Progress(len(preset["seeds"]) * (len(preset["conversions"]) + 2), NAME)
    config = pet.TransformerConfig(vocab_size=256, causal=True, encoding="rope", **preset["model"])
    runs = preset["preset"] + ("-hf" if args.hf else "")
    store = RunStore(Path(args.out) / NAME / "runs" / runs, resume=args.resume)
    ft_data = ByteLMDataModule(context=preset["context"], batch_size=preset["batch_size"],
                               steps_per_epoch=preset["finetune_steps"], max_bytes=preset["max_bytes"], seed=1)
    head_dim = config.dim // config.num_heads
    kv_heads = config.num_kv_heads or config.num_heads
    rows: list[dict[str, Any]] = []
    for seed in preset["seeds"]:
        run_config = {k: v for k, v in preset.items()
                      if k not in ("conversions", "decode_lengths", "decode_rounds", "seeds", "preset")}
        run_config["seed"] = seed
        torch.manual_seed(seed)
        base = hf_llama(config) if args.hf else pet.Transformer(config)
        base_weights = store.path(f"mha__seed{seed}").with_suffix(".pt")
        stored = store.load(f"mha__seed{seed}", run_config)
        if stored is not None and base_weights.exists():  # the trained MHA model of an interrupted run
            base.load_state_dict(load_weights(base_weights, map_location="cpu"))  # names a corrupt file
            base_loss, mha_ft_loss = stored["val_loss"], stored["val_loss_finetuned"]
            progress(f"seed {seed}: reused the trained MHA: val loss {base_loss:.4f}")
        else:
            module, _ = train_language_model(base, data, lr=preset["lr"], steps=preset["train_steps"], seed=seed,
                                             device=preset["device"])
            base = base.cpu()
            base_loss, mha_ft_loss = validation_loss(module, val_windows), None
            progress(f"seed {seed}: trained MHA: val loss {base_loss:.4f}")

        def finetune(model, seed=seed):
            tuned, _ = train_language_model(model, ft_data, lr=preset["finetune_lr"], steps=preset["finetune_steps"],
                                            weight_decay=0.0, seed=1000 + seed, device=preset["device"])
            return validation_loss(tuned, val_windows)

        if mha_ft_loss is None:
            mha_ft_loss = finetune(copy.deepcopy(base))
            torch.save(base.state_dict(), base_weights)
            store.save(f"mha__seed{seed}", run_config, {"val_loss": base_loss, "val_loss_finetuned": mha_ft_loss})
        progress(f"seed {seed}: MHA + the same fine-tune: val loss {mha_ft_loss:.4f}")
        rows.append({
            "model": "mha", "seed": seed, "strategy": None, "svd": None, "rope_dim": head_dim, "latent_dim": None,
            "cache_per_token": config.num_layers * 2 * kv_heads * head_dim,
            "cache_bytes_per_token": config.num_layers * 2 * kv_heads * head_dim * 4, "cache_reduction": 0.0,
            "val_loss_zero_shot": base_loss, "val_loss_finetuned": mha_ft_loss, "loss_change": 0.0,
            "loss_change_pct": 0.0,
        })
        scores = None
        for strategy, svd, rope_dim, latent_dim in preset["conversions"]:
            key = f"mla__{strategy}__{svd}__r{rope_dim}__d{latent_dim}__seed{seed}"
            row = store.load(key, run_config)
            if row is not None:
                rows.append({k: v for k, v in row.items() if k != "spec"})
                progress(f"seed {seed}: {strategy}/{svd} r={rope_dim} d_kv={latent_dim}: reused")
                continue
            extra = {}
            if strategy == "2-norm":
                if scores is None:
                    from pe_toolkit.conversion import calibration_pair_scores

                    scores = calibration_pair_scores(ported(base), calibration)
                extra["scores"] = scores
            # an HF model goes to convert_to_mla as it is (the conversion ports it with from_hf)
            mla, report = convert_to_mla(base.hf_model if args.hf else base, rope_dim=rope_dim,
                                         latent_dim=latent_dim, strategy=strategy, svd=svd, **extra)
            zero_shot = validation_loss(_module_for(mla), val_windows)
            tuned = finetune(mla)
            rows.append({
                "model": "mla", "seed": seed, "strategy": strategy, "svd": svd, "rope_dim": rope_dim,
                "latent_dim": latent_dim, "cache_per_token": report.cache_elements_after,
                "cache_bytes_per_token": report.cache_elements_after * 4, "cache_reduction": report.cache_reduction,
                "energy_kept": sum(report.energy_kept) / len(report.energy_kept),
                "rope_pairs_layer0": report.rope_pairs[0].tolist(),
                "val_loss_zero_shot": zero_shot, "val_loss_finetuned": tuned, "loss_change": tuned - mha_ft_loss,
                "loss_change_pct": 100 * (tuned - mha_ft_loss) / mha_ft_loss,
            })
            store.save(key, run_config, rows[-1])
            progress(f"seed {seed}: {strategy}/{svd} r={rope_dim} d_kv={latent_dim}: cache "
                     f"-{100 * report.cache_reduction:.1f} %, zero-shot {zero_shot:.4f}, fine-tuned {tuned:.4f}")
    seconds = time.perf_counter() - start
    out_dir = Path(args.out) / NAME
    summary = aggregate(rows)
    claim_rows = claims(summary)
    png = _plot(summary, out_dir)
    interval = lambda v: format_interval(v, ".4f")  # noqa: E731
    table = markdown_table(
        summary,
        ["model", "strategy", "svd", "rope_dim", "latent_dim", "cache_per_token", "cache_bytes_per_token",
         ("cache_reduction", "cache reduction"), "seeds", ("val_loss_zero_shot", "val loss, no fine-tune"),
         ("val_loss_finetuned", "val loss, fine-tuned"), ("loss_change_pct", "loss change vs MHA (%)")],
        {"cache_reduction": lambda v: f"-{100 * v:.2f} %", "val_loss_zero_shot": interval,
         "val_loss_finetuned": interval, "loss_change_pct": lambda v: format_interval(v, "+.2f")},
    )
    per_seed = markdown_table(
        rows, ["model", "seed", "strategy", "svd", "rope_dim", "latent_dim", ("energy_kept", "SVD energy kept"),
               "val_loss_zero_shot", "val_loss_finetuned", "loss_change_pct"],
        {"energy_kept": ".3f", "val_loss_zero_shot": ".4f", "val_loss_finetuned": ".4f", "loss_change_pct": "+.2f"},
    )
    origin = ("a Hugging Face `LlamaForCausalLM` (random init from a `LlamaConfig`, trained through "
              "`CausalLMLogits`; converted with `convert_to_mla(hf_model)`)" if args.hf else "a pe_toolkit Transformer")
    body = (
        f"Byte-level RoPE LM {preset['model']}, {origin} (head dim {head_dim}, {kv_heads} KV heads), trained "
        f"{preset['train_steps']} steps (context {preset['context']}, batch {preset['batch_size']}, "
        f"lr {preset['lr']}); "
        f"each converted model fine-tuned {preset['finetune_steps']} steps at lr {preset['finetune_lr']} "
        "(AdamW, no weight decay), and so is the MHA baseline. Cache bytes at float32 over all layers. Seeds "
        f"{preset['seeds']}; device {preset['device']}.\n\n"
        "## Paper claims\n\n" + markdown_table(claim_rows, ["claim", "verdict", "evidence"])
        + "\nVerdicts from 95 % Student-t intervals over seeds (better / worse only when the intervals do not "
        f"overlap); fewer than {MIN_SEEDS} seeds: untested. At this scale the metric is byte-level validation "
        "loss, not LongBench.\n\n## Per model over seeds\n\n" + table + f"\n![{png}]({png})\n\n"
        "## Per seed\n\n" + per_seed
    )
    decode = decode_rows(preset, torch)
    body += ("\n## One decoding step: absorbed against plain MLA\n\n"
             f"An MLA layer of the model's size (latent {DECODE_LATENT}, rope dim 4), batch 1, float32, one "
             "thread: one new token attending a cache of L tokens, median of "
             f"{preset['decode_rounds']} interleaved rounds. `plain` rebuilds every cached key and value from "
             "the latents each step; `absorbed` (what `generate` uses for decoding steps) attends in latent "
             "space. Cache bytes: what the layer's cache buffers occupy (`KVCache.nbytes`, latents, rope keys "
             "and positions as allocated) against what its held tokens need; the cache is preallocated for the "
             "prompt and the step, as `generate` does.\n\n"
             + markdown_table(decode, ["cache_length", ("plain_ms", "plain ms"), ("absorbed_ms", "absorbed ms"),
                                       ("speedup", "plain / absorbed"), ("max_abs_diff", "max abs diff"),
                                       ("allocated_tokens", "allocated tokens"), ("held_tokens", "held tokens"),
                                       ("allocated_bytes", "allocated bytes"), ("needed_bytes", "needed bytes")],
                              {"plain_ms": ".3f", "absorbed_ms": ".3f", "speedup": ".2f", "max_abs_diff": ".1e"}))
    write_results(NAME, {"quick": args.quick, "hf": args.hf, **preset, "bytes_per_element": 4},
                  rows + summary + claim_rows + decode, time.perf_counter() - start, root=args.out)
    write_report(NAME, "MHA2MLA: KV-cache reduction vs. loss", body, root=args.out)
    print(f"wrote {out_dir} in {seconds:.0f} s")
    return 0


DECODE_LATENT = 16


def decode_rows(preset: dict[str, Any], torch) -> list[dict[str, Any]]:
    """Time one decoding step (absorbed vs plain) of an MLA layer at each cache length of the preset."""
    from pe_toolkit.nn.latent_attention import LatentKVCache, MultiHeadLatentAttention

    dim, heads = preset["model"]["dim"], preset["model"]["num_heads"]
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(dim, heads, causal=True, latent_dim=DECODE_LATENT, rope_head_dim=4).eval()
    rows = []
    with torch.no_grad():
        for length in preset["decode_lengths"]:
            cache = LatentKVCache(max_length=length + 1)  # room for the step: no buffer growth inside the timing
            layer(torch.randn(1, length, dim), cache=cache, absorb=False)
            step = torch.randn(1, 1, dim)
            times: dict[bool, list[float]] = {False: [], True: []}
            outputs = {}
            for _ in range(preset["decode_rounds"]):
                for absorb in (False, True):
                    trial = copy.deepcopy(cache)  # the same cache of `length` tokens for every step
                    begin = time.perf_counter()
                    outputs[absorb] = layer(step, cache=trial, absorb=absorb)
                    times[absorb].append(time.perf_counter() - begin)
            plain, absorbed = (sorted(times[a])[len(times[a]) // 2] * 1e3 for a in (False, True))
            trial = copy.deepcopy(cache)
            layer(step, cache=trial)  # the step as generate takes it (absorb=None: the absorbed path)
            needed = trial.nbytes * trial.held // trial.allocated  # every buffer is linear in its token capacity
            rows.append({"kind": "decode_step", "cache_length": length, "plain_ms": plain, "absorbed_ms": absorbed,
                         "speedup": plain / absorbed,
                         "max_abs_diff": float((outputs[True] - outputs[False]).abs().max()),
                         "allocated_tokens": trial.allocated, "held_tokens": trial.held,
                         "allocated_bytes": trial.nbytes, "needed_bytes": needed})
    return rows


def hf_llama(config):
    """A ``CausalLMLogits``-wrapped HF ``LlamaForCausalLM`` with ``config``'s sizes (tied head, RMSNorm eps 1e-5)."""
    import transformers

    from pe_toolkit.integrations.hf import CausalLMLogits
    from pe_toolkit.nn.block import MLP

    hf_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.dim, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads or config.num_heads,
        intermediate_size=MLP(config.dim).up.out_features, rms_norm_eps=1e-5, tie_word_embeddings=True,
        max_position_embeddings=4096, bos_token_id=None, eos_token_id=None,
    )
    return CausalLMLogits(transformers.LlamaForCausalLM(hf_config))


def ported(model):
    """Our Transformer for a ``CausalLMLogits`` model (``from_hf``), the model itself otherwise."""
    if hasattr(model, "hf_model"):
        from pe_toolkit.integrations.hf import from_hf

        return from_hf(model.hf_model)
    return model


def _module_for(model):
    """A ``LanguageModelModule`` wrapping ``model`` (for its ``perplexity``), without training."""
    from pe_toolkit.training import LanguageModelModule

    module = LanguageModelModule(vocab_size=256, dim=8, num_heads=1, num_layers=1)
    module.model = model
    return module


def _plot(rows: list[dict[str, Any]], out_dir: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    mha = rows[0]
    markers = {"high": "o", "low": "v", "uniform": "s", "2-norm": "*"}
    for key, ax, title in (("val_loss_zero_shot", axes[0], "no fine-tune"),
                           ("val_loss_finetuned", axes[1], "after fine-tune")):
        for r in rows[1:]:
            ax.scatter(100 * r["cache_reduction"], nan_if_missing(r[key]["mean"]), marker=markers[r["strategy"]],
                       facecolors="none" if r["svd"] == "split" else None, edgecolors="C3" if r["svd"] == "split"
                       else None, color=None if r["svd"] == "split" else f"C{list(markers).index(r['strategy'])}",
                       s=70, label=f"{r['strategy']}/{r['svd']}")
        empty = note_if_empty(ax, "validation loss of the converted models")
        ax.axhline(nan_if_missing(mha[key]["mean"]), color="grey", linestyle=":", label="MHA")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        if unique and not empty:
            ax.legend(unique.values(), unique.keys(), fontsize=8)
        ax.set_xlabel("KV-cache reduction (%)")
        ax.set_ylabel("validation loss (nats/byte)")
        ax.set_title(f"MHA -> MLA, {title} (mean over seeds)")
    fig.tight_layout()
    fig.savefig(out_dir / "mha2mla.png", dpi=110)
    plt.close(fig)
    return "mha2mla.png"


if __name__ == "__main__":
    sys.exit(main())
