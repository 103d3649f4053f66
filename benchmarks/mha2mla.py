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

    python benchmarks/mha2mla.py --quick      # tiny model, 6 conversions (< 2 min idle)
    python benchmarks/mha2mla.py              # see FULL
    python benchmarks/mha2mla.py --resume     # reuse the trained model and finished conversions
    python benchmarks/mha2mla.py --quick --hf # the same on a tiny Hugging Face LlamaForCausalLM

With ``--hf`` the MHA model is a ``transformers.LlamaForCausalLM`` of the same sizes (built from a
``LlamaConfig``, random init, nothing downloads), trained through
:class:`pe_toolkit.integrations.hf.CausalLMLogits`; ``convert_to_mla`` takes the HF model itself
(through :func:`pe_toolkit.integrations.hf.from_hf`), and the MHA baseline is fine-tuned as the HF model.

Outputs: ``results.json``, ``report.md``, ``mha2mla.png``.
"""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from attention_stability import train_language_model, validation_loss  # noqa: E402
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

NAME = "mha2mla"
STRATEGIES = ("high", "low", "uniform", "2-norm")

QUICK: dict[str, Any] = {
    "model": {"dim": 64, "num_heads": 4, "num_layers": 2},
    "context": 64, "batch_size": 8, "train_steps": 150, "lr": 3e-3,
    "finetune_steps": 20, "finetune_lr": 1e-3, "max_bytes": 400_000, "val_windows": 16, "calibration_windows": 8,
    # (strategy, svd, rope_dim r, latent d_kv per latent)
    "conversions": [(s, "joint", 4, 8) for s in STRATEGIES] + [("2-norm", "joint", 2, 4), ("2-norm", "split", 4, 4)],
    "decode_lengths": [512, 1024], "decode_rounds": 10,
}
FULL: dict[str, Any] = {  # sized for ~30 min on one shared (busy) core
    "model": {"dim": 128, "num_heads": 4, "num_layers": 2},
    "context": 64, "batch_size": 16, "train_steps": 500, "lr": 3e-3,
    "finetune_steps": 80, "finetune_lr": 1e-3, "max_bytes": 3_000_000, "val_windows": 64, "calibration_windows": 32,
    "conversions": [(s, "joint", 4, d) for s in STRATEGIES for d in (8, 16)]
    + [("2-norm", "joint", 2, 16), ("2-norm", "split", 4, 4), ("high", "split", 4, 4)],
    "decode_lengths": [512, 1024, 2048, 4096], "decode_rounds": 30,
}


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--resume", action="store_true",
                        help="reuse the trained MHA model and the finished conversions of the same configuration")
    parser.add_argument("--hf", action="store_true",
                        help="start from a tiny Hugging Face LlamaForCausalLM (needs the 'hf' extra)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    import pe_toolkit as pet
    from pe_toolkit.conversion import convert_to_mla
    from pe_toolkit.data import ByteLMDataModule, random_windows, sequential_windows

    preset = copy.deepcopy(QUICK if args.quick else FULL)
    start = time.perf_counter()
    data = ByteLMDataModule(context=preset["context"], batch_size=preset["batch_size"],
                            steps_per_epoch=preset["train_steps"], max_bytes=preset["max_bytes"], seed=0)
    data.setup()
    val_windows = sequential_windows(data.val_bytes, preset["context"], preset["val_windows"])
    calibration = random_windows(data.train_bytes, preset["context"] - 1, preset["calibration_windows"],
                                 torch.Generator().manual_seed(1)).long()
    progress = Progress(len(preset["conversions"]) + 2, NAME)

    torch.manual_seed(0)
    config = pet.TransformerConfig(vocab_size=256, causal=True, encoding="rope", **preset["model"])
    base = hf_llama(config) if args.hf else pet.Transformer(config)
    runs = ("quick" if args.quick else "full") + ("-hf" if args.hf else "")
    store = RunStore(Path(args.out) / NAME / "runs" / runs, resume=args.resume)
    run_config = {k: v for k, v in preset.items() if k not in ("conversions", "decode_lengths", "decode_rounds")}
    base_weights = store.path("mha").with_suffix(".pt")
    stored = store.load("mha", run_config)
    if stored is not None and base_weights.exists():  # the trained MHA model of an interrupted run
        base.load_state_dict(torch.load(base_weights, map_location="cpu", weights_only=True))
        base_loss, mha_ft_loss = stored["val_loss"], stored["val_loss_finetuned"]
        progress(f"reused the trained MHA: val loss {base_loss:.4f}")
    else:
        module, _ = train_language_model(base, data, lr=preset["lr"], steps=preset["train_steps"])
        base_loss, mha_ft_loss = validation_loss(module, val_windows), None
        progress(f"trained MHA: val loss {base_loss:.4f}")

    ft_data = ByteLMDataModule(context=preset["context"], batch_size=preset["batch_size"],
                               steps_per_epoch=preset["finetune_steps"], max_bytes=preset["max_bytes"], seed=1)

    def finetune(model):
        tuned, _ = train_language_model(model, ft_data, lr=preset["finetune_lr"], steps=preset["finetune_steps"],
                                        weight_decay=0.0, seed=1)
        return validation_loss(tuned, val_windows)

    if mha_ft_loss is None:
        mha_ft_loss = finetune(copy.deepcopy(base))
        torch.save(base.state_dict(), base_weights)
        store.save("mha", run_config, {"val_loss": base_loss, "val_loss_finetuned": mha_ft_loss})
    progress(f"MHA + the same fine-tune: val loss {mha_ft_loss:.4f}")
    head_dim = config.dim // config.num_heads
    kv_heads = config.num_kv_heads or config.num_heads
    rows: list[dict[str, Any]] = [{
        "model": "mha", "strategy": None, "svd": None, "rope_dim": head_dim, "latent_dim": None,
        "cache_per_token": config.num_layers * 2 * kv_heads * head_dim,
        "cache_bytes_per_token": config.num_layers * 2 * kv_heads * head_dim * 4, "cache_reduction": 0.0,
        "val_loss_zero_shot": base_loss, "val_loss_finetuned": mha_ft_loss, "loss_change": 0.0,
        "loss_change_pct": 0.0,
    }]
    scores = None
    for strategy, svd, rope_dim, latent_dim in preset["conversions"]:
        key = f"mla__{strategy}__{svd}__r{rope_dim}__d{latent_dim}"
        row = store.load(key, run_config)
        if row is not None:
            rows.append({k: v for k, v in row.items() if k != "spec"})
            progress(f"{strategy}/{svd} r={rope_dim} d_kv={latent_dim}: reused")
            continue
        extra = {}
        if strategy == "2-norm":
            if scores is None:
                from pe_toolkit.conversion import calibration_pair_scores

                scores = calibration_pair_scores(ported(base), calibration)
            extra["scores"] = scores
        # an HF model goes to convert_to_mla as it is (the conversion ports it with from_hf)
        mla, report = convert_to_mla(base.hf_model if args.hf else base, rope_dim=rope_dim, latent_dim=latent_dim,
                                     strategy=strategy, svd=svd, **extra)
        zero_shot = validation_loss(_module_for(mla), val_windows)
        tuned = finetune(mla)
        rows.append({
            "model": "mla", "strategy": strategy, "svd": svd, "rope_dim": rope_dim, "latent_dim": latent_dim,
            "cache_per_token": report.cache_elements_after, "cache_bytes_per_token": report.cache_elements_after * 4,
            "cache_reduction": report.cache_reduction, "energy_kept": sum(report.energy_kept) / len(report.energy_kept),
            "rope_pairs_layer0": report.rope_pairs[0].tolist(),
            "val_loss_zero_shot": zero_shot, "val_loss_finetuned": tuned, "loss_change": tuned - mha_ft_loss,
            "loss_change_pct": 100 * (tuned - mha_ft_loss) / mha_ft_loss,
        })
        store.save(key, run_config, rows[-1])
        progress(f"{strategy}/{svd} r={rope_dim} d_kv={latent_dim}: cache -{100 * report.cache_reduction:.1f} %, "
                 f"zero-shot {zero_shot:.4f}, fine-tuned {tuned:.4f}")
    seconds = time.perf_counter() - start
    out_dir = Path(args.out) / NAME
    png = _plot(rows, out_dir)
    table = markdown_table(
        rows,
        ["model", "strategy", "svd", "rope_dim", "latent_dim", "cache_per_token", "cache_bytes_per_token",
         ("cache_reduction", "cache reduction"), ("energy_kept", "SVD energy kept"),
         ("val_loss_zero_shot", "val loss, no fine-tune"), ("val_loss_finetuned", "val loss, fine-tuned"),
         ("loss_change_pct", "loss change vs MHA (%)")],
        {"cache_reduction": lambda v: f"-{100 * v:.2f} %", "energy_kept": ".3f", "val_loss_zero_shot": ".4f",
         "val_loss_finetuned": ".4f", "loss_change_pct": "+.2f"},
    )
    big = [r for r in rows if r["model"] == "mla" and r["cache_reduction"] >= 0.9]
    best = min(big, key=lambda r: r["val_loss_finetuned"]) if big else None
    claim = (
        f"Best conversion with at least 90 % less KV cache: {best['strategy']}/{best['svd']} r={best['rope_dim']} "
        f"d_kv={best['latent_dim']}, cache -{100 * best['cache_reduction']:.2f} %, validation loss "
        f"{best['val_loss_finetuned']:.4f} after {preset['finetune_steps']} fine-tuning steps vs. {mha_ft_loss:.4f} "
        f"for MHA with the same steps ({best['loss_change_pct']:+.2f} %)."
        if best else "No conversion in this run reached a 90 % cache reduction."
    )
    origin = ("a Hugging Face `LlamaForCausalLM` (random init from a `LlamaConfig`, trained through "
              "`CausalLMLogits`; converted with `convert_to_mla(hf_model)`)" if args.hf else "a pe_toolkit Transformer")
    body = (
        f"Byte-level RoPE LM {preset['model']}, {origin} (head dim {head_dim}, {kv_heads} KV heads), trained "
        f"{preset['train_steps']} steps (context {preset['context']}, batch {preset['batch_size']}, "
        f"lr {preset['lr']}); "
        f"each converted model fine-tuned {preset['finetune_steps']} steps at lr {preset['finetune_lr']} "
        "(AdamW, no weight decay), and so is the MHA baseline. Cache bytes at float32 over all layers.\n\n"
        f"{claim}\n\n" + table + f"\n![{png}]({png})\n"
    )
    decode = decode_rows(preset, torch)
    body += ("\n## One decoding step: absorbed against plain MLA\n\n"
             f"An MLA layer of the model's size (latent {DECODE_LATENT}, rope dim 4), batch 1, float32, one "
             "thread: one new token attending a cache of L tokens, median of "
             f"{preset['decode_rounds']} interleaved rounds. `plain` rebuilds every cached key and value from "
             "the latents each step; `absorbed` (what `generate` uses for decoding steps) attends in latent "
             "space.\n\n" + markdown_table(decode, ["cache_length", ("plain_ms", "plain ms"),
                                                      ("absorbed_ms", "absorbed ms"), ("speedup", "plain / absorbed"),
                                                      ("max_abs_diff", "max abs diff")],
                                               {"plain_ms": ".3f", "absorbed_ms": ".3f", "speedup": ".2f",
                                                "max_abs_diff": ".1e"}))
    write_results(NAME, {"quick": args.quick, "hf": args.hf, **preset, "bytes_per_element": 4}, rows + decode,
                  time.perf_counter() - start, root=args.out)
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
            rows.append({"kind": "decode_step", "cache_length": length, "plain_ms": plain, "absorbed_ms": absorbed,
                         "speedup": plain / absorbed,
                         "max_abs_diff": float((outputs[True] - outputs[False]).abs().max())})
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
            ax.scatter(100 * r["cache_reduction"], nan_if_missing(r[key]), marker=markers[r["strategy"]],
                       facecolors="none" if r["svd"] == "split" else None, edgecolors="C3" if r["svd"] == "split"
                       else None, color=None if r["svd"] == "split" else f"C{list(markers).index(r['strategy'])}",
                       s=70, label=f"{r['strategy']}/{r['svd']}")
        empty = note_if_empty(ax, "validation loss of the converted models")
        ax.axhline(nan_if_missing(mha[key]), color="grey", linestyle=":", label="MHA")
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles))
        if unique and not empty:
            ax.legend(unique.values(), unique.keys(), fontsize=8)
        ax.set_xlabel("KV-cache reduction (%)")
        ax.set_ylabel("validation loss (nats/byte)")
        ax.set_title(f"MHA -> MLA, {title}")
    fig.tight_layout()
    fig.savefig(out_dir / "mha2mla.png", dpi=110)
    plt.close(fig)
    return "mha2mla.png"


if __name__ == "__main__":
    sys.exit(main())
