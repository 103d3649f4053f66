"""MHA -> MLA conversion (Ji et al. 2025, MHA2MLA, arXiv:2502.14837): KV-cache reduction against loss.

Per seed: train a byte-level RoPE language model (MHA; its lr tuned on the first seed's validation loss), convert it
to MLA (:func:`pe_toolkit.conversion.convert_to_mla`) for each ``[strategy, svd, r, d_kv]`` of the preset, and measure
the validation loss as converted and after a short fine-tune that the MHA model gets as well. Every conversion of a
seed starts from that seed's MHA model, so the claims (the paper's method at >= 90 % less cache costs <= 1 % loss;
high > uniform > low; 2-norm not worse than high; joint > split at the same cache) compare per-seed loss changes
paired (:func:`pe_toolkit.bench.verdict.decide_claim`). A last run times one MLA decoding step, absorbed against
plain. Design, caveats of the scale and the measured full preset: ``docs/tutorials/mla_conversion.md``.

    pe-toolkit bench mha2mla --quick                     # tiny model, 6 conversions, 1 seed
    pe-toolkit bench mha2mla                             # full preset (3 seeds)
    pe-toolkit bench mha2mla --preset gpu --accelerator cuda
    python benchmarks/mha2mla.py --quick --set hf=true   # the same on a tiny Hugging Face LlamaForCausalLM
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any, Literal

from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning
from pe_toolkit.bench.checks import distinct
from pe_toolkit.bench.config import ModelSize
from pe_toolkit.bench.plots import finish, nan_if_missing, new_figure
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.verdict import claim_row, decide_claim, untested_claim
from pe_toolkit.training.lm_text_module import train_language_model, validation_loss

STRATEGIES = ("high", "low", "uniform", "2-norm")
MIN_SEEDS = 3
PAPER_LOSS_TOLERANCE_PCT = 1.0  # v2: a 1 % LongBench drop at -92 % KV cache
DECODE_LATENT = 16
MODEL_KEY = ("model", "strategy", "svd", "rope_dim", "latent_dim")


@dataclasses.dataclass
class Config:
    seeds: list[NonNegativeInt]
    model: ModelSize
    context: PositiveInt
    batch_size: PositiveInt
    train_steps: PositiveInt
    lrs: list[PositiveFloat]
    """The MHA model's learning-rate grid (tuned on the first seed's validation loss)."""
    finetune_steps: PositiveInt
    finetune_lr: PositiveFloat
    max_bytes: PositiveInt
    val_windows: PositiveInt
    calibration_windows: PositiveInt
    conversions: list[tuple[Literal[STRATEGIES], Literal["joint", "split"], PositiveInt, PositiveInt]]
    """``[strategy, svd, kept rotary dims r, latent size d_kv]`` per conversion."""
    decode_lengths: list[PositiveInt]
    decode_rounds: PositiveInt
    max_extensions: NonNegativeInt = 0
    hf: bool = False
    """Start from a tiny Hugging Face ``LlamaForCausalLM`` (the ``hf`` extra) instead of a pe_toolkit Transformer."""


# ------------------------------------------------------------------------------------------ one seed
def _module_for(model):
    """A ``LanguageModelModule`` wrapping ``model`` (for its ``perplexity``), without training."""
    from pe_toolkit.training import LanguageModelModule

    module = LanguageModelModule(vocab_size=256, dim=8, num_heads=1, num_layers=1)
    module.model = model
    return module


def convert_seed(spec: dict[str, Any]) -> dict[str, Any]:
    """Train the MHA model of ``spec["seed"]``, fine-tune a copy, convert and fine-tune each conversion.

    Returns the MHA row (``model: "mha"``) with one row per conversion under ``"conversions"``.
    """
    import torch

    import pe_toolkit as pet
    from pe_toolkit.conversion import calibration_pair_scores, convert_to_mla
    from pe_toolkit.data import ByteLMDataModule, random_windows, sequential_windows

    start = time.perf_counter()
    seed, device = spec["seed"], spec.get("device")
    data = ByteLMDataModule(context=spec["context"], batch_size=spec["batch_size"],
                            steps_per_epoch=spec["train_steps"], max_bytes=spec["max_bytes"], seed=0)
    data.setup()
    val_windows = sequential_windows(data.val_bytes, spec["context"], spec["val_windows"])
    calibration = random_windows(data.train_bytes, spec["context"] - 1, spec["calibration_windows"],
                                 torch.Generator().manual_seed(1)).long()
    ft_data = ByteLMDataModule(context=spec["context"], batch_size=spec["batch_size"],
                               steps_per_epoch=spec["finetune_steps"], max_bytes=spec["max_bytes"], seed=1)
    config = pet.TransformerConfig(vocab_size=256, causal=True, encoding="rope", **spec["model"])
    torch.manual_seed(seed)
    base = pet.Transformer(config)
    if spec["hf"]:  # the same architecture as an HF LlamaForCausalLM (hf_config_from_transformer), HF's initialisation
        import transformers

        from pe_toolkit.integrations.hf import CausalLMLogits, hf_config_from_transformer

        base = CausalLMLogits(transformers.LlamaForCausalLM(hf_config_from_transformer(base)))
    module, _ = train_language_model(base, data, lr=spec["lr"], steps=spec["train_steps"], seed=seed, device=device)
    base = base.cpu()
    base_loss = validation_loss(module, val_windows)
    source = base.hf_model if spec["hf"] else base  # an HF model goes to the conversion as it is (ported there)

    def finetune(model) -> float:
        tuned, _ = train_language_model(model, ft_data, lr=spec["finetune_lr"], steps=spec["finetune_steps"],
                                        weight_decay=0.0, seed=1000 + seed, device=device)
        return validation_loss(tuned, val_windows)

    mha_ft_loss = finetune(copy.deepcopy(base))
    kv_heads = config.num_kv_heads or config.num_heads
    cache = config.num_layers * 2 * kv_heads * (config.dim // config.num_heads)
    row = {"model": "mha", "seed": seed, "lr": spec["lr"], "strategy": None, "svd": None,
           "rope_dim": config.dim // config.num_heads, "latent_dim": None, "cache_per_token": cache,
           "cache_bytes_per_token": cache * 4, "cache_reduction": 0.0, "val_loss_zero_shot": base_loss,
           "val_loss_finetuned": mha_ft_loss, "loss_change": 0.0, "loss_change_pct": 0.0, "conversions": []}
    scores = None
    for strategy, svd, rope_dim, latent_dim in spec["conversions"]:
        if strategy == "2-norm" and scores is None:
            scores = calibration_pair_scores(source, calibration)
        mla, report = convert_to_mla(source, rope_dim=rope_dim, latent_dim=latent_dim, strategy=strategy, svd=svd,
                                     **({"scores": scores} if strategy == "2-norm" else {}))
        zero_shot = validation_loss(_module_for(mla), val_windows)
        tuned = finetune(mla)
        row["conversions"].append({
            "model": "mla", "seed": seed, "strategy": strategy, "svd": svd, "rope_dim": rope_dim,
            "latent_dim": latent_dim, "cache_per_token": report.cache_elements_after,
            "cache_bytes_per_token": report.cache_elements_after * 4, "cache_reduction": report.cache_reduction,
            "energy_kept": sum(report.energy_kept) / len(report.energy_kept),
            "rope_pairs_layer0": report.rope_pairs[0].tolist(),
            "val_loss_zero_shot": zero_shot, "val_loss_finetuned": tuned, "loss_change": tuned - mha_ft_loss,
            "loss_change_pct": 100 * (tuned - mha_ft_loss) / mha_ft_loss,
        })
    row["seconds"] = time.perf_counter() - start
    return row


def decode_rows(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Time one decoding step (absorbed vs plain) of an MLA layer at each cache length of ``spec``: the median of
    ``decode_rounds`` interleaved rounds, and the cache's bytes as allocated (``KVCache.nbytes``) and as needed."""
    import torch

    from pe_toolkit.nn.latent_attention import LatentKVCache, MultiHeadLatentAttention

    dim, heads = spec["model"]["dim"], spec["model"]["num_heads"]
    torch.manual_seed(0)
    layer = MultiHeadLatentAttention(dim, heads, causal=True, latent_dim=DECODE_LATENT, rope_head_dim=4).eval()
    rows = []
    with torch.no_grad():
        for length in spec["decode_lengths"]:
            cache = LatentKVCache(max_length=length + 1)  # room for the step: no buffer growth inside the timing
            layer(torch.randn(1, length, dim), cache=cache, absorb=False)
            step = torch.randn(1, 1, dim)
            times: dict[bool, list[float]] = {False: [], True: []}
            outputs = {}
            for _ in range(spec["decode_rounds"]):
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


# ------------------------------------------------------------------------------------------ analysis
def conversion_name(row: dict[str, Any]) -> str:
    return f"{row['strategy']}/{row['svd']} r={row['rope_dim']} d_kv={row['latent_dim']}"


def model_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every seed's MHA row and its conversions' rows, flat (the MHA row without its nested list)."""
    out = []
    for row in rows:
        if "conversions" in row:  # a seed's run (not the decode run)
            out.append({k: v for k, v in row.items() if k != "conversions"})
            out.extend(row["conversions"])
    return out


def claims(rows: list[dict[str, Any]], min_seeds: int = MIN_SEEDS) -> list[dict[str, Any]]:
    """The paper's claims on the per-seed loss change against the fine-tuned MHA (%) of :func:`model_rows`, paired
    per seed: every conversion of a seed starts from that seed's MHA model (whose change is 0)."""
    by: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        if r["model"] == "mla":
            by.setdefault(tuple(r[k] for k in MODEL_KEY[1:]), {**r, "per_seed": {}})["per_seed"][r["seed"]] = \
                r["loss_change_pct"]
    out, margin = [], PAPER_LOSS_TOLERANCE_PCT

    def add(text: str, a: dict[str, Any] | None, b: dict[str, Any] | None, *, kind: str = "difference",
            reason: str = "") -> None:
        options = dict(kind=kind, higher_is_better=False, paired=True, margin=None if kind == "difference" else margin)
        if a is None:
            claim = untested_claim(text, reason, **options)
        else:
            seeds = sorted(a["per_seed"]) if b is None else sorted(set(a["per_seed"]) & set(b["per_seed"]))
            baseline = [0.0] * len(seeds) if b is None else [b["per_seed"][s] for s in seeds]
            claim = decide_claim([a["per_seed"][s] for s in seeds], baseline, name=text, **options,
                                 preconditions=[(len(seeds) >= min_seeds, f"fewer than {min_seeds} seeds")])
        out.append(claim_row(claim, a_name=conversion_name(a) if a else "-",
                             b_name="mha (fine-tuned)" if b is None else conversion_name(b)))

    paper = [m for m in by.values() if m["cache_reduction"] >= 0.9 and m["strategy"] == "2-norm"
             and m["svd"] == "joint"]
    claim = (f">= 90 % less KV cache for <= {margin:g} % more loss after the same fine-tune (the paper's method, "
             f"2-norm / joint SVD; non-inferiority to MHA, margin {margin:g} %)")
    if not paper:
        add(claim, None, None, kind="noninferiority", reason="no 2-norm / joint conversion reaches 90 % less cache")
    for m in paper:
        add(f"{claim}: {conversion_name(m)}, cache -{100 * m['cache_reduction']:.2f} %", m, None, kind="noninferiority")
    # the strategy ordering at each (r, d_kv) where all four strategies were converted with the joint SVD
    for r, d in sorted({(k[2], k[3]) for k in by if k[1] == "joint"}):
        models = {s: by.get((s, "joint", r, d)) for s in STRATEGIES}
        if any(m is None for m in models.values()):
            continue
        add(f"high beats uniform (joint, r={r}, d_kv={d})", models["high"], models["uniform"])
        add(f"uniform beats low (joint, r={r}, d_kv={d})", models["uniform"], models["low"])
        add(f"2-norm not worse than high (joint, r={r}, d_kv={d}; non-inferiority, margin {margin:g} % of the MHA "
            "loss)", models["2-norm"], models["high"], kind="noninferiority")
    # joint against split at the same cache size (the same numbers cached per token)
    for (strategy, svd, r, _), split in sorted(by.items()):
        joint = next((m for k, m in by.items() if k[:3] == (strategy, "joint", r)
                      and m["cache_per_token"] == split["cache_per_token"]), None)
        if svd == "split" and joint is not None:
            add(f"joint SVD beats split SVD at the same cache ({strategy}, r={r}, {split['cache_per_token']} per "
                "token)", joint, split)
    return out


def plot(summary: list[dict[str, Any]]):
    """Validation loss against cache reduction, before and after the fine-tune: a figure."""
    fig, axes = new_figure(1, 2, size=(6, 4.2))
    markers = {"high": "o", "low": "v", "uniform": "s", "2-norm": "*"}
    for key, ax, title in (("val_loss_zero_shot", axes[0][0], "no fine-tune"),
                           ("val_loss_finetuned", axes[0][1], "after fine-tune")):
        labelled = set()
        for r in summary[1:]:
            split, label = r["svd"] == "split", f"{r['strategy']}/{r['svd']}"
            ax.scatter(100 * r["cache_reduction"], nan_if_missing(r[key]["mean"]), marker=markers[r["strategy"]],
                       facecolors="none" if split else None, edgecolors="C3" if split else None,
                       color=None if split else f"C{list(markers).index(r['strategy'])}", s=70,
                       label=None if label in labelled else label)
            labelled.add(label)
        ax.axhline(nan_if_missing(summary[0][key]["mean"]), color="grey", linestyle=":", label="MHA")
        ax.set_xlabel("KV-cache reduction (%)")
        ax.set_ylabel("validation loss (nats/byte)")
        ax.set_title(f"MHA -> MLA, {title} (mean over seeds)")
    return finish(fig, "validation loss of the converted models")


class Mha2Mla(Benchmark):
    name = "mha2mla"
    title = "MHA2MLA: KV-cache reduction vs. loss"
    Config = Config
    key_fields = ("run",)
    summary_by = MODEL_KEY
    summary_metrics = dict.fromkeys(("val_loss_zero_shot", "val_loss_finetuned", "loss_change_pct"))
    summary_keep = ("cache_per_token", "cache_bytes_per_token", "cache_reduction")
    run_columns = ("model", "seed", "strategy", "svd", "rope_dim", "latent_dim", ("energy_kept", "SVD energy kept"),
                   "val_loss_zero_shot", "val_loss_finetuned", "loss_change_pct")
    number_format = ".4f"
    held_out = "the losses are measured on the validation bytes, which no model trains or fine-tunes on"
    same_budget = "trains the same steps; the MHA model and each conversion fine-tune the same steps at the same lr"

    def check(self, config: Config) -> None:
        distinct("decode_lengths", config.decode_lengths)

    def runs(self, config: Config) -> list[dict[str, Any]]:
        common = {k: v for k, v in dataclasses.asdict(config).items()
                  if k not in ("seeds", "lrs", "max_extensions", "decode_lengths", "decode_rounds")}
        parent = "mha-hf" if config.hf else "mha"
        decode = {"run": "decode", "model": dataclasses.asdict(config.model), "decode_lengths": config.decode_lengths,
                  "decode_rounds": config.decode_rounds}  # no "parent": not tuned, runs once
        return [{"run": f"{parent}__seed{s}", "parent": parent, **common, "seed": s} for s in config.seeds] + [decode]

    def tuning(self, config: Config) -> Tuning:
        # the MHA model's lr, by its own validation loss; the first seed's conversions come with each trial
        return Tuning(param="lr", values=[float(v) for v in config.lrs], metric="val_loss_zero_shot",
                      maximize=False, group="parent", max_extensions=config.max_extensions)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return {"kind": "decode", "steps": decode_rows(spec)} if spec["run"] == "decode" else convert_seed(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        if row.get("kind") == "decode":
            return "decode step timed"
        return f"seed {row['seed']} lr {row['lr']:g}: MHA val loss {row['val_loss_zero_shot']:.4f}"

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        return super().analyze(dataclasses.replace(result, rows=model_rows(result.rows)))

    def claims(self, result: Result) -> list[dict[str, Any]]:
        return claims(result.rows)

    def plot(self, result: Result) -> dict[str, Any]:
        return {"mha2mla.png": plot(result.derived_of("summary"))}

    def describe(self, result: Result) -> str:
        config = result.config
        origin = ("a Hugging Face `LlamaForCausalLM` (trained through `CausalLMLogits`, converted with "
                  "`convert_to_mla(hf_model)`)" if config.hf else "a pe_toolkit Transformer")
        return (f"Byte-level RoPE LM {dataclasses.asdict(config.model)}, {origin}, trained {config.train_steps} steps "
                f"(context {config.context}, batch {config.batch_size}); it and each conversion fine-tuned "
                f"{config.finetune_steps} steps at lr {config.finetune_lr} (AdamW, no weight decay). Claims: loss "
                f"change against the fine-tuned MHA model (%), paired per seed, non-inferiority margin "
                f"{PAPER_LOSS_TOLERANCE_PCT:g} %, untested below {MIN_SEEDS} seeds; byte-level validation loss, not "
                f"LongBench. Cache bytes at float32 over all layers. Device: {result.device}.")

    def report(self, result: Result) -> str:
        decode = [s for r in result.rows if r.get("kind") == "decode" for s in r["steps"]]
        return (super().report(dataclasses.replace(result, rows=model_rows(result.rows)))
                + f"\n## One decoding step: absorbed against plain MLA\n\nAn MLA layer of the model's size (latent "
                f"{DECODE_LATENT}, rope dim 4), batch 1, float32, one thread, one token against a cache of L tokens, "
                f"median of {result.config.decode_rounds} interleaved rounds: `plain` rebuilds every cached key and "
                "value, `absorbed` (what `generate` uses) attends in latent space; cache bytes as allocated against "
                "as needed.\n\n"
                + markdown_table(decode, ["cache_length", ("plain_ms", "plain ms"), ("absorbed_ms", "absorbed ms"),
                                          ("speedup", "plain / absorbed"), ("max_abs_diff", "max abs diff"),
                                          ("allocated_tokens", "allocated tokens"), ("held_tokens", "held tokens"),
                                          ("allocated_bytes", "allocated bytes"), ("needed_bytes", "needed bytes")],
                                 {"plain_ms": ".3f", "absorbed_ms": ".3f", "speedup": ".2f", "max_abs_diff": ".1e"}))


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="mha2mla", prog="python benchmarks/mha2mla.py"))
