"""Context-length extrapolation on real text: perplexity vs length and passkey retrieval, per encoder.

Claims tested: the bias encoders (ALiBi, KERPLE, FIRE, BAM, BAM-SSMax; Press et al. 2022, Chi et al. 2022,
Li et al. 2023, Bianchessi et al. 2025) keep their perplexity past the training context and RoPE does not;
RoPE scalings at inference (PI, NTK, YaRN, Llama 3.1, LongRoPE, dynamic NTK) and after a short fine-tune
beat plain RoPE; NoPE with a temperature or HeadScale (Wang et al. 2024) extends further; passkey retrieval.

Design: one run per (base encoder, passkey mode, seed) trains a byte-level ``LanguageModelModule`` at a
short context on the standard-library text (``zero_shot``: text only; ``trained``: a share of passkey rows;
the learning rate tuned per base on the first seed by validation loss) and evaluates every variant derived
from its weights (:data:`VARIANTS`): perplexity on the same held-out bytes at every length, passkey retrieval
on a length x depth grid, attention entropy; claims paired per seed for variants of one model. Plus the peak
memory of one BAM attention layer. The protocol in detail: docs/tutorials/yarn_extension.md.

    pe-toolkit bench extrapolation --quick                      # pipeline check
    pe-toolkit bench extrapolation --jobs 2                     # the full CPU preset
    pe-toolkit bench extrapolation --preset gpu --accelerator cuda
    python benchmarks/extrapolation.py --set scalings.factor=4 --set variants=[alibi,rope,rope+yarn] --resume
    python benchmarks/extrapolation.py --set memory_only=true   # only the BAM attention-layer memory
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonargparse.typing import ClosedUnitInterval, NonNegativeInt, PositiveFloat, PositiveInt, restricted_number_type

from pe_toolkit.bench import Benchmark, Result, Tuning, quiet_trainer, trainer_options
from pe_toolkit.bench.checks import distinct
from pe_toolkit.bench.config import ModelSize
from pe_toolkit.bench.plots import finish, has_finite_data, nan_if_missing, new_figure, note_if_empty, plot_intervals
from pe_toolkit.bench.report import fairness_section, markdown_table
from pe_toolkit.bench.summary import group_rows, summarize_groups, summary_table
from pe_toolkit.bench.verdict import claim_row, claims_table, decide_claim, untested_claim

MODES = ("zero_shot", "trained")
PPL_MARGIN_PCT = 5.0  # claims of no rise: perplexity up by at most 5 %, i.e. log perplexity by log(1.05)
MIN_SEEDS = 2
UNIT = (0.0, 1.0)


# ------------------------------------------------------------------------------------------ config
AtLeastOne = restricted_number_type("AtLeastOne", float, (">=", 1))
Fraction = restricted_number_type("Fraction", float, [(">", 0), ("<=", 1)], join="and")


@dataclass
class Training:
    context: PositiveInt
    steps: PositiveInt
    batch_size: PositiveInt
    lrs: list[PositiveFloat]  # the grid of every base, tried on the first seed (the lowest val_loss wins)
    warmup_steps: PositiveInt
    weight_decay: float
    passkey_fraction: Fraction  # the trained mode's share of passkey rows (the zero-shot mode trains with none)
    passkey_template: Literal["compact", "paper"]
    split_seed: int
    max_bytes: PositiveInt | None
    loss_average: str
    max_extensions: NonNegativeInt = 0  # learning rates added past an edge choice (log scale)


@dataclass
class Scalings:
    factor: AtLeastOne
    sweep_factors: list[AtLeastOne]
    dynamic_factor: AtLeastOne


@dataclass
class Finetune:
    multiple: PositiveInt
    steps: PositiveInt
    batch_size: PositiveInt
    lr: float
    positional_lr: float


@dataclass
class Evaluation:
    ppl_lengths: list[PositiveInt]
    ppl_tokens: PositiveInt
    passkey_lengths: list[PositiveInt]
    passkey_depths: list[ClosedUnitInterval]
    passkey_samples: PositiveInt
    passkey_batch_tokens: PositiveInt
    greedy_samples: PositiveInt
    block_size: PositiveInt
    entropy_multiples: list[PositiveInt]


@dataclass
class Memory:
    length: PositiveInt
    dim: PositiveInt
    num_heads: PositiveInt
    block_size: PositiveInt
    encoding: str


# ------------------------------------------------------------------------------------------ variants
@dataclass
class Variant:
    """The trained ``base`` with ``encoding`` (``options``; one per layer with ``per_layer``) swapped in (``None``: as
    trained); ``factor``: which config key sets its scaling factor (:func:`resolve_options`); ``finetune``:
    ``"positional"`` (the encodings alone) or ``"full"``, at ``finetune.multiple`` x the context."""

    base: str
    encoding: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    per_layer: bool = False
    factor: str | None = None
    finetune: str | None = None
    description: str = ""


def _scaled(scaling: str, factor: str, text: str, finetune: str | None = None) -> Variant:
    return Variant("rope", "rope", {"scaling": scaling}, factor=factor, finetune=finetune, description=text)


VARIANTS: dict[str, Variant] = {
    "nope": Variant("nope", description="NoPE, as trained"),
    **{f"nope+temp{t}": Variant("nope", "nope_temperature", {"scale": t},
                                description=f"NoPE, logits x {t} at inference (UniformScale)") for t in (1.2, 1.5)},
    "nope+headscale": Variant("nope", "nope_temperature", {"scale": 1.6, "learned": True}, per_layer=True,
                              finetune="positional", description="NoPE + HeadScale (init 1.6, >= 1), scales "
                              "fine-tuned alone at the longer context"),
    "rope": Variant("rope", description="RoPE, as trained"),
    "rope+linear": _scaled("linear", "scaling", "RoPE + position interpolation at inference"),
    "rope+ntk": _scaled("ntk", "scaling", "RoPE + NTK-aware base at inference"),
    "rope+yarn": _scaled("yarn", "scaling", "RoPE + YaRN at inference"),
    "rope+llama3": _scaled("llama3", "scaling", "RoPE + Llama 3.1 scaling at inference"),
    "rope+longrope": _scaled("longrope", "scaling",
                             "RoPE + LongRoPE form at inference (rescale from NTK-by-parts, no search)"),
    "rope+dynamic": _scaled("dynamic", "dynamic",
                            "RoPE + dynamic NTK at inference (scale follows the length, HF rule)"),
    "rope+linear+ft": _scaled("linear", "finetune", "RoPE + position interpolation, fine-tuned at the longer context",
                              "full"),
    "rope+yarn+ft": _scaled("yarn", "finetune", "RoPE + YaRN, fine-tuned at the longer context", "full"),
    "alibi": Variant("alibi", description="ALiBi, as trained"),
    "t5": Variant("t5", description="T5 relative buckets, as trained"),
    "kerple": Variant("kerple", description="KERPLE (log), as trained"),
    "fire": Variant("fire", description="FIRE, as trained"),
    "bam": Variant("bam", description="BAM (generalized-Gaussian prior), as trained"),
    "bam_ssmax": Variant("bam_ssmax", description="BAM + Scalable-Softmax, as trained"),
}
# Bases are trained in this order: those whose variants take longest to evaluate first (the bias of
# bam / fire is rebuilt per query block and layer; rope has the most variants), so the run's tail is short.
TRAIN_ORDER = ["rope", "fire", "bam_ssmax", "bam", "kerple", "alibi", "nope", "t5"]


@dataclass
class Config:
    seeds: list[NonNegativeInt]
    passkey_modes: list[Literal[MODES]]
    model: ModelSize
    training: Training
    scalings: Scalings
    finetune: Finetune
    evaluation: Evaluation
    memory: Memory
    variants: list[Literal[tuple(VARIANTS)]]
    trained_variants: list[Literal[tuple(VARIANTS)]] | None = None  # of the trained passkey mode (None: all)
    memory_only: bool = False  # only measure the attention layer's memory


def resolve_options(variant: Variant, preset: dict[str, Any], factor: float | None = None) -> dict[str, Any]:
    """The swapped-in encoder's options with ``factor`` (``factor``: one of the sweep's, else the config's) and
    ``original_max_position`` (and LongRoPE's factors); ``preset``: the config as a dict."""
    from pe_toolkit.encoders.rotary import longrope_factors_from_yarn

    options, context = dict(variant.options), preset["training"]["context"]
    where = {"scaling": ("scalings", "factor"), "dynamic": ("scalings", "dynamic_factor"),
             "finetune": ("finetune", "multiple")}
    if variant.factor is not None:
        section, key = where[variant.factor]
        options["factor"] = float(preset[section][key] if factor is None else factor)
    if options.get("scaling") in ("dynamic", "yarn", "llama3", "longrope"):
        options["original_max_position"] = context
    if options.get("scaling") == "longrope":
        model = preset["model"]
        options.update(longrope_factors_from_yarn(model["dim"] // model["num_heads"], 10_000.0, options["factor"],
                                                  context))
    return options


# ------------------------------------------------------------------------------------------- specs
def mode_variants(preset: dict[str, Any], mode: str) -> list[str]:
    """The variants evaluated in ``mode``: ``variants``, or those also in ``trained_variants`` in the trained
    mode (it carries passkey claims only, so a preset may train fewer bases there)."""
    if mode == "trained" and preset.get("trained_variants") is not None:
        return [v for v in preset["variants"] if v in preset["trained_variants"]]
    return list(preset["variants"])


def variant_spec(preset: dict[str, Any], name: str, mode: str) -> dict[str, Any]:
    """What changes one evaluated variant: its definition, resolved options and (zero-shot) factor sweep."""
    v = VARIANTS[name]
    sweep = []
    if v.factor == "scaling" and mode == "zero_shot":  # perplexity claims rest on the text-only models
        sweep = [{"factor": float(f), "options": resolve_options(v, preset, f)}
                 for f in preset["scalings"]["sweep_factors"]]
    return {"name": name, "variant": dataclasses.asdict(v), "options": resolve_options(v, preset), "sweep": sweep}


def run_spec(preset: dict[str, Any], base: str, mode: str, seed: int) -> dict[str, Any]:
    """One run: train ``base`` in ``mode`` with ``seed``, then evaluate each of its variants in this mode."""
    variants = [variant_spec(preset, n, mode) for n in mode_variants(preset, mode) if VARIANTS[n].base == base]
    return {"run": f"train__{base}__{mode}__s{seed}", "base": base, "mode": mode, "seed": seed,
            "model": preset["model"], "evaluation": preset["evaluation"],
            "training": {k: v for k, v in preset["training"].items() if k not in ("lrs", "max_extensions")},
            "finetune": preset["finetune"] if any(v["variant"]["finetune"] for v in variants) else None,
            "variants": variants}


# ------------------------------------------------------------------------------------ training
def _module(spec: dict[str, Any], *, steps: int = 0, warmup: int = 1):
    from pe_toolkit.training import LanguageModelModule

    training = spec["training"]
    return LanguageModelModule(256, encoding=spec["base"], **spec["model"], lr=spec["lr"], max_steps=steps,
                               weight_decay=training["weight_decay"], warmup_steps=warmup,
                               loss_average=training["loss_average"])


def training_data(training: dict[str, Any], mode: str, seed: int, context: int, batch_size: int, steps: int):
    """The ``ByteLMDataModule`` of a run (passkey rows only in the ``trained`` mode): the document split drawn with
    ``training.split_seed`` (the same held-out text for every seed), the training windows with ``seed``."""
    from pe_toolkit.data import ByteLMDataModule

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    data = ByteLMDataModule(
        context=context, batch_size=batch_size, steps_per_epoch=steps,
        passkey_fraction=training["passkey_fraction"] if mode == "trained" else 0.0,
        passkey_template=training["passkey_template"], seed=training["split_seed"],
        max_bytes=training["max_bytes"],
    )
    data.setup()  # the split, with split_seed
    data.hparams.seed = seed  # the windows, with the run's seed (read when the train dataloader is built)
    return data


def _fit(module, data, steps: int, device: dict[str, Any] | None) -> float:
    """Train ``module`` for ``steps``; the final training loss."""
    trainer = quiet_trainer(device, max_steps=steps, limit_val_batches=0)
    trainer.fit(module, data)
    return float(trainer.callback_metrics.get("train/loss", float("nan")))


def train_base(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train one base encoder at the training context with ``spec["lr"]``: ``(training row, state_dict on the CPU)``.

    The row's ``val_loss`` (nats per byte at the training context, what tuning compares) is scored on the
    ``evaluation.ppl_tokens`` validation bytes that follow the ones the perplexity claims are scored on.
    """
    import lightning as L

    from pe_toolkit.data import equal_token_windows

    start = time.perf_counter()
    training, tokens = spec["training"], spec["evaluation"]["ppl_tokens"]
    L.seed_everything(spec["seed"], verbose=False)
    data = training_data(training, spec["mode"], spec["seed"], training["context"], training["batch_size"],
                         training["steps"])
    module = _module(spec, steps=training["steps"], warmup=training["warmup_steps"])
    loss = _fit(module, data, training["steps"], spec.get("device"))
    windows = equal_token_windows(data.val_bytes[tokens + 1:], [training["context"]], tokens)[training["context"]]
    row = {
        "kind": "training", "base": spec["base"], "mode": spec["mode"], "seed": spec["seed"], "lr": spec["lr"],
        "final_train_loss": loss, "val_loss": math.log(module.perplexity(windows, batch_size=len(windows))),
        "parameters": module.model.num_parameters(),
        "parameters_without_pe": module.model.num_parameters(exclude_positional=True),
        "seconds": time.perf_counter() - start,
    }
    return row, {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def _finetune(module, spec: dict[str, Any], kind: str) -> dict[str, Any]:
    """Fine-tune ``module`` at ``multiple`` x the context: every weight (``"full"``) or the encodings only."""
    import lightning as L

    ft, training = spec["finetune"], spec["training"]
    context = training["context"] * ft["multiple"]
    if kind == "positional":
        module.model.train_positional_only()
    module.hparams.update(lr=ft["positional_lr"] if kind == "positional" else ft["lr"], max_steps=ft["steps"],
                          warmup_steps=max(1, ft["steps"] // 10))
    start = time.perf_counter()
    L.seed_everything(spec["seed"] + 1, verbose=False)
    data = training_data(training, spec["mode"], spec["seed"], context, ft["batch_size"], ft["steps"])
    loss = _fit(module, data, ft["steps"], spec.get("device"))
    module.model.requires_grad_(True)
    return {"kind": kind, "context": context, "steps": ft["steps"], "batch_size": ft["batch_size"],
            "lr": module.hparams.lr, "final_train_loss": loss, "seconds": time.perf_counter() - start}


def build_variant(spec: dict[str, Any], state: dict[str, Any]):
    """``(module, finetune row or None)``: the trained base (``state``) with the variant's encoding swapped in,
    fine-tuned if the variant says so; ``spec``: the run's spec merged with one of its ``variants`` entries."""
    variant = spec["variant"]
    module = _module(spec)
    module.load_state_dict(state)
    if variant["encoding"] is not None:
        module.model.replace_encoding(variant["encoding"], spec["options"], per_layer=variant["per_layer"])
    finetune = _finetune(module, spec, variant["finetune"]) if variant["finetune"] else None
    return module, finetune


# ------------------------------------------------------------------------------------ evaluation
def _passkey_seed(seed: int, length: int) -> int:
    return 1_000_003 * seed + length  # the same prompts for every variant and mode of one seed


def evaluate_variant(spec: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Derive the variant from the trained weights ``state`` (swap / fine-tune) and evaluate it: a ``variant`` row
    (``ppl`` per length, ``sweep`` per factor, ``passkey`` per (length, depth) and by length, ``greedy_check``,
    ``entropy``, learned encoder parameters)."""
    import torch

    from pe_toolkit import data as pdata
    from pe_toolkit.nn import attention_entropy

    start = time.perf_counter()
    variant, training, evaluation = spec["variant"], spec["training"], spec["evaluation"]
    seed, context, batch_tokens = spec["seed"], training["context"], evaluation["passkey_batch_tokens"]
    template = {"compact": pdata.COMPACT_TEMPLATE, "paper": pdata.PAPER_TEMPLATE}[training["passkey_template"]]
    module, finetune = build_variant(spec, state)
    accelerator = trainer_options(spec.get("device"))["accelerator"]
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    device = "cuda" if gpu else "cpu"
    module.to(device).eval()
    model = module.model
    for block in model.blocks:  # query blocks: memory linear in the length
        block.attn.query_block_size = evaluation["block_size"]
    model.config.attention_block_size = evaluation["block_size"]
    data = training_data(training, spec["mode"], seed, context, 1, 1)
    windows = pdata.equal_token_windows(data.val_bytes, evaluation["ppl_lengths"], evaluation["ppl_tokens"])

    def perplexities() -> list[dict[str, Any]]:
        return [{"length": length, "ppl": module.perplexity(w, batch_size=max(1, batch_tokens // length)),
                 "windows": int(w.shape[0]), "tokens": int(w[:, 1:].numel())} for length, w in windows.items()]

    def swap(options: dict[str, Any]) -> None:
        model.replace_encoding(variant["encoding"], options, per_layer=variant["per_layer"])

    ppl, sweep = perplexities(), []
    for entry in spec["sweep"]:
        same = entry["options"] == spec["options"]  # the preset's factor is not evaluated twice
        if not same:
            swap(entry["options"])
        sweep.append({"factor": entry["factor"], "ppl": ppl if same else perplexities()})
    if spec["sweep"]:  # back to the variant's own factor for passkey and entropy
        swap(spec["options"])

    passkey = [cell for length in evaluation["passkey_lengths"] for cell in pdata.passkey_depth_scores(
        model, length, evaluation["passkey_depths"], evaluation["passkey_samples"], seed=_passkey_seed(seed, length),
        template=template, batch_tokens=batch_tokens, device=device)]
    by_length = []
    for length in evaluation["passkey_lengths"]:
        cells = [p for p in passkey if p["length"] == length]
        examples = sum(c["samples"] for c in cells)
        mean = {key: sum(c[key] * c["samples"] for c in cells) / examples for key in ("digit_accuracy", "exact_match")}
        by_length.append({"length": length, "examples": examples, **mean})

    # greedy decoding (the papers' metric) must agree with the teacher-forced exact match at the training context
    greedy_examples = pdata.passkey_grid([context - 5], evaluation["passkey_depths"], evaluation["greedy_samples"],
                                         seed=_passkey_seed(seed, context), template=template)
    with torch.no_grad():
        greedy = pdata.passkey_accuracy(model.generate, greedy_examples, device=device)
    forced = pdata.batched_digit_accuracies(model, greedy_examples, batch_tokens=batch_tokens, device=device)
    greedy_check = {"length": context, "examples": len(greedy_examples), "greedy_exact_match": greedy,
                    "teacher_forced_exact_match": sum(s == 1.0 for s in forced) / len(forced)}

    entropy = []
    for multiple in evaluation["entropy_multiples"]:
        length = context * multiple
        tokens = pdata.sequential_windows(data.val_bytes, length, 1)[:, :-1].to(device)
        with torch.no_grad():
            per_head = attention_entropy(model, tokens)  # (layers, heads), bits
        entropy.append({"multiple": multiple, "length": length, "mean_bits": float(per_head.mean()),
                        "per_layer_bits": [float(v) for v in per_head.mean(-1)]})

    return {
        "kind": "variant", "variant": spec["name"], "base": variant["base"], "mode": spec["mode"], "seed": seed,
        "encoding": variant["encoding"] or variant["base"], "options": spec["options"],
        "description": variant["description"], "finetune": finetune, "ppl": ppl, "sweep": sweep,
        "passkey": passkey, "passkey_by_length": by_length, "greedy_check": greedy_check, "entropy": entropy,
        "learned": _learned_parameters(model), "seconds": time.perf_counter() - start,
    }


def _learned_parameters(model) -> dict[str, Any]:
    """Per-head parameters worth reading: BAM's shape / scale / location, SSMax's and HeadScale's scales."""
    out: dict[str, Any] = {}
    for index, encoding in enumerate(model.encodings):
        prefix = "" if len(model.encodings) == 1 else f"layer{index}."
        found = {}
        if hasattr(encoding, "shape") and hasattr(encoding, "location"):  # BAM, BAM-SSMax
            found = {"bam_shape": (encoding.shape, 4), "bam_scale_exp": (encoding.scale.exp(), 5),
                     "bam_location": (encoding.location(), 3)}
        if hasattr(encoding, "ssmax_scale"):
            found["ssmax_scale"] = (encoding.ssmax_scale, 4)
        if getattr(encoding, "learned", False) and hasattr(encoding, "head_scale"):
            found["head_scale"] = (encoding.head_scale, 4)
        out.update({prefix + k: [round(float(v), d) for v in t.detach().cpu()] for k, (t, d) in found.items()})
    return out


# ---------------------------------------------------------------------------------------- memory
def _attention_memory(length: int, dim: int, heads: int, block_size: int, encoding: str) -> dict[str, Any]:
    """Child: one causal attention layer with ``encoding``, batch 1, no grad, query blocks."""
    import torch

    import pe_toolkit as pet

    torch.set_num_threads(1)
    attention = pet.MultiHeadAttention(dim, heads, causal=True, query_block_size=block_size,
                                       encoding=pet.get_encoder(encoding, dim, heads, causal=True))
    with torch.no_grad():
        x = torch.randn(1, length, dim, generator=torch.Generator().manual_seed(0))
        start = time.perf_counter()
        out = attention(x)
        return {"seconds": time.perf_counter() - start, "finite": bool(torch.isfinite(out).all())}


def measure_memory(memory: dict[str, Any], timeout: float = 1800.0) -> dict[str, Any]:
    """Peak RSS growth of one attention layer at ``memory["length"]`` in a forked child (:mod:`pe_toolkit.bench.memory`:
    the caller must not have run torch compute, so :func:`memory_row` runs this in a freshly spawned process)."""
    from pe_toolkit.bench.memory import run_in_child

    args = (memory["length"], memory["dim"], memory["num_heads"], memory["block_size"], memory["encoding"])
    row: dict[str, Any] = {
        "kind": "memory", "encoding": memory["encoding"], "length": memory["length"], "batch": 1,
        "num_heads": memory["num_heads"], "head_dim": memory["dim"] // memory["num_heads"],
        "query_block_size": memory["block_size"], "grad": False, "dtype": "float32", "threads": 1,
        "spec": dict(memory),
    }
    result, peak, error = run_in_child(_attention_memory, *args, timeout=timeout,
                                       warmup=lambda: _attention_memory(64, *args[1:]))
    if error is not None:
        return {**row, "status": f"failed: {error[:300]}", "peak_mib": None, "seconds": None}
    return {**row, "status": "ok", "peak_mib": peak / 2**20, "seconds": result["seconds"],
            "output_finite": result["finite"]}


def memory_row(memory: dict[str, Any]) -> dict[str, Any]:
    """:func:`measure_memory` in a spawned process (a worker that trained a model must not fork)."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure_memory, memory).result()


# --------------------------------------------------------------------------------------- summaries
LABELS = ("variant", "mode", "seed", "description", "finetune")  # the fields of metrics_of that are not metrics
BOUNDED = ("exact@", "digits@", "greedy")  # metrics in [0, 1]


def ppl_key(length: int, factor: float | None = None) -> str:
    return f"ppl@{length}" if factor is None else f"ppl@{length} factor {float(factor):g}"


def metrics_of(row: dict[str, Any]) -> dict[str, Any]:
    """A variant row as one flat dict: ``ppl@<length>`` (``... factor <f>``: swept), ``exact@<length>`` /
    ``digits@<length>`` (mean over depths), ``digits@<length> depth <d>``, ``entropy x<multiple>``, ``greedy_exact``,
    ``greedy_agrees`` (1: equals the teacher-forced exact match) and ``finetune_loss``."""
    out = {key: row[key] for key in LABELS}
    out.update({ppl_key(p["length"]): p["ppl"] for p in row["ppl"]})
    out.update({ppl_key(p["length"], s["factor"]): p["ppl"] for s in row["sweep"] for p in s["ppl"]})
    for p in row["passkey_by_length"]:
        out[f"exact@{p['length']}"], out[f"digits@{p['length']}"] = p["exact_match"], p["digit_accuracy"]
    out.update({f"digits@{p['length']} depth {p['depth']:g}": p["digit_accuracy"] for p in row["passkey"]})
    out.update({f"entropy x{e['multiple']}": e["mean_bits"] for e in row["entropy"]})
    greedy = row["greedy_check"]
    out["greedy_exact"] = greedy["greedy_exact_match"]
    out["greedy_agrees"] = float(greedy["greedy_exact_match"] == greedy["teacher_forced_exact_match"])
    if row.get("finetune"):
        out["finetune_loss"] = row["finetune"]["final_train_loss"]
    return out


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per (variant, mode) of the variant rows: every metric of :func:`metrics_of` as mean and 95 %
    interval over the seeds (a group's metrics depend on the variant, hence not the default ``analyze``)."""
    order = {name: i for i, name in enumerate(VARIANTS)}
    flat = sorted(map(metrics_of, rows), key=lambda r: (MODES.index(r["mode"]), order.get(r["variant"], 99), r["seed"]))
    out = []
    for group in group_rows(flat, ("variant", "mode")).values():
        metrics = [k for k in group[0] if k not in LABELS]
        bounds = {k: UNIT for k in metrics if k.startswith(BOUNDED)}
        out += [{"kind": "summary", **entry} for entry in summarize_groups(
            group, ("variant", "mode"), metrics, bounds=bounds, keep=("description", "finetune"))]
    return out


def passkey_learned(summary: list[dict[str, Any]], context: int) -> dict[str, list[str]]:
    """Per mode, the variants whose digit accuracy at the training context is not above twice chance (interval
    upper end at most 0.2): their passkey numbers at longer lengths say nothing."""
    out: dict[str, list[str]] = {}
    for entry in summary:
        at = entry.get(f"digits@{context}")
        if at is not None and at["n"] and (at["high"] if math.isfinite(at["high"]) else at["mean"]) <= 2 * 0.1:
            out.setdefault(entry["mode"], []).append(entry["variant"])
    return out


# ------------------------------------------------------------------------------------------ claims
def per_seed(rows: list[dict[str, Any]], name: str, mode: str, key: str | None) -> dict[int, float] | None:
    """``{seed: value}`` of one variant's metric ``key`` (``None``: not measured); perplexity as its log (nats per
    byte), a missing or non-positive one as NaN (counted, not dropped)."""
    if key is None:
        return None
    out = {r["seed"]: r[key] for r in rows if r["variant"] == name and r["mode"] == mode and key in r}
    if key.startswith("ppl@"):
        out = {s: math.log(v) if v is not None and v > 0 else math.nan for s, v in out.items()}
    return out or None


YARN, PI = "Peng et al. 2023 (YaRN, arXiv:2309.00071)", "Chen et al. 2023 (PI, arXiv:2306.15595)"
PRESS, BAM = "Press et al. 2022 (ALiBi, arXiv:2108.12409)", "Bianchessi et al. 2025 (BAM, arXiv:2505.22842)"
WANG = "Wang et al. 2024 (NoPE length generalization, arXiv:2404.12224)"
LONGROPE = "Ding et al. 2024 (LongRoPE, arXiv:2402.13753)"


def claims(rows: list[dict[str, Any]], config: dict[str, Any]) -> list[dict[str, Any]]:
    """Each paper claim, decided by :func:`~pe_toolkit.bench.verdict.decide_claim`: log perplexity of the ``zero_shot``
    models when that mode ran, passkey exact match per mode; paired per seed for variants of one model, Welch across
    trainings. Claim rows with ``paper``, ``mode``, ``metric`` and the sides' names ``a_name`` / ``b_name``."""
    context, evaluation = config["training"]["context"], config["evaluation"]
    ppl_lengths, pk_lengths = evaluation["ppl_lengths"], evaluation["passkey_lengths"]
    longest, pk_longest = ppl_lengths[-1], pk_lengths[-1]
    factor, multiple, modes = config["scalings"]["factor"], config["finetune"]["multiple"], config["passkey_modes"]
    ppl_mode = "zero_shot" if "zero_shot" in modes else modes[0]
    margin = math.log(1 + PPL_MARGIN_PCT / 100)

    def length_or_none(n: float) -> int | None:
        return int(round(n)) if int(round(n)) in ppl_lengths else None

    ext = length_or_none(factor * context)  # the length a factor-s scaling is meant for
    ft_len = length_or_none(multiple * context)  # the fine-tune length
    out: list[dict[str, Any]] = []
    flat = [metrics_of(r) for r in rows]

    def ppl(name: str, length: int | None, swept: float | None = None):
        return per_seed(flat, name, ppl_mode, None if length is None else ppl_key(length, swept))

    def add(paper: str, text: str, mode: str, metric: str, a_name: str, a, b_name: str, b, *, paired: bool,
            higher: bool = False, kind: str = "difference", preconditions=(), bounds=None) -> None:
        options = dict(kind=kind, higher_is_better=higher, paired=paired, bounds=bounds,
                       margin=margin if kind != "difference" else None)
        if a is None or b is None:
            claim = untested_claim(text, f"{a_name if a is None else b_name} not measured in this run", **options)
        else:
            va, vb = ([x[s] for s in (sorted(set(a) & set(b)) if paired else sorted(x))] for x in (a, b))
            enough = min(len(va), len(vb)) >= MIN_SEEDS
            claim = decide_claim(va, vb, name=text, preconditions=(
                (enough, f"fewer than {MIN_SEEDS} seeds per side: no interval"), *preconditions), **options)
        out.append(claim_row(claim, paper=paper, mode=mode, metric=metric, a_name=a_name, b_name=b_name))

    rise = f"+{PPL_MARGIN_PCT:g} % perplexity"
    log_ppl = f"log perplexity (nats/byte) at {longest} vs at {context}, paired per seed"
    for name, paper in (("alibi", PRESS), ("kerple", "Chi et al. 2022 (KERPLE, arXiv:2205.09921)"),
                        ("fire", "Li et al. 2023 (FIRE, arXiv:2310.04418)"), ("bam", BAM), ("bam_ssmax", BAM)):
        add(paper, f"{name}'s perplexity does not rise past the training context ({longest // context}x; "
            f"non-inferiority, margin {rise})", ppl_mode, log_ppl, f"{name}@{longest}", ppl(name, longest),
            f"{name}@{context}", ppl(name, context), paired=True, kind="noninferiority")
    add(PRESS, "RoPE's perplexity rises past the training context", ppl_mode, log_ppl, f"rope@{context}",
        ppl("rope", context), f"rope@{longest}", ppl("rope", longest), paired=True)
    at_long = f"log perplexity at {longest}"
    add(PRESS, "ALiBi extrapolates better than RoPE", ppl_mode, at_long, "alibi", ppl("alibi", longest), "rope",
        ppl("rope", longest), paired=False)
    add(BAM, f"BAM-SSMax extrapolates at least as well as ALiBi (non-inferiority, margin {rise})", ppl_mode, at_long,
        "bam_ssmax", ppl("bam_ssmax", longest), "alibi", ppl("alibi", longest), paired=False, kind="noninferiority")

    at_ext = f"log perplexity at {ext} ({factor:g}x, factor {factor:g}, no fine-tune), paired per seed"
    llama = "Meta 2024 (Llama 3.1 scaling, arXiv:2407.21783)"
    for name, paper in (("rope+ntk", "bloc97 2023 (NTK-aware scaling)"), ("rope+yarn", YARN), ("rope+llama3", llama),
                        ("rope+longrope", LONGROPE)):
        add(paper, f"{name} at inference beats plain RoPE at {factor:g}x the context", ppl_mode, at_ext, name,
            ppl(name, ext), "rope", ppl("rope", ext), paired=True)
    for other in ("rope+linear", "rope+ntk"):
        add(YARN, f"YaRN beats {other.split('+')[1]} at the same factor without fine-tuning", ppl_mode, at_ext,
            "rope+yarn", ppl("rope+yarn", ext), other, ppl(other, ext), paired=True)
    out.append(claim_row(untested_claim("searched non-uniform rescale factors beat PI / NTK / YaRN",
                                        "the evolutionary search is not run (long factors taken from NTK-by-parts)"),
                         paper=LONGROPE, mode=ppl_mode, metric="-", a_name="rope+longrope (searched)",
                         b_name="rope+linear / ntk / yarn"))
    add("emozilla 2023 (dynamic NTK; HF 'dynamic')", "dynamic NTK at inference beats plain RoPE past the context",
        ppl_mode, f"{at_long} (scale follows the length), paired per seed", "rope+dynamic",
        ppl("rope+dynamic", longest), "rope", ppl("rope", longest), paired=True)
    at_ft = f"log perplexity at {ft_len} (the fine-tune length, {multiple}x), paired per seed"
    add(PI, "PI with a short fine-tune extends the context past plain RoPE", ppl_mode, at_ft, "rope+linear+ft",
        ppl("rope+linear+ft", ft_len), "rope", ppl("rope", ft_len), paired=True)
    add(PI, "PI needs the fine-tune: fine-tuned beats inference-only at the same factor", ppl_mode, at_ft,
        "rope+linear+ft", ppl("rope+linear+ft", ft_len), f"rope+linear (factor {multiple})",
        ppl("rope+linear", ft_len, multiple), paired=True)
    add(YARN, "a short YaRN fine-tune beats YaRN at inference at the same factor", ppl_mode, at_ft, "rope+yarn+ft",
        ppl("rope+yarn+ft", ft_len), f"rope+yarn (factor {multiple})", ppl("rope+yarn", ft_len, multiple),
        paired=True)

    # NoPE vs RoPE is read where the papers' extension is (8x, 16x), not at 2x where NoPE's in-distribution
    # perplexity gap to RoPE dominates; the longest length when the preset has neither
    for n in [n for n in (8 * context, 16 * context) if n in ppl_lengths] or [longest]:
        add(WANG, f"NoPE extends past its training context further than RoPE (read at {n // context}x)", ppl_mode,
            f"log perplexity at {n} ({n // context}x)", "nope", ppl("nope", n), "rope", ppl("rope", n), paired=False)
    for name in ("nope+temp1.2", "nope+temp1.5", "nope+headscale"):
        add(WANG, f"{name} improves on NoPE past the context", ppl_mode, at_ft, name, ppl(name, ft_len), "nope",
            ppl("nope", ft_len), paired=True)
    uniform = [(n, ppl(n, ft_len)) for n in ("nope+temp1.2", "nope+temp1.5") if ppl(n, ft_len) is not None]
    best_name, best = min(uniform, key=lambda nv: math.fsum(nv[1].values()) / len(nv[1])) if uniform else (
        "best uniform scale", None)
    add(WANG, "HeadScale beats the best uniform scale (chosen by its mean here)", ppl_mode, at_ft, "nope+headscale",
        ppl("nope+headscale", ft_len), best_name, best, paired=True)

    for mode in modes:
        def exact(name: str, length: int | None, mode: str = mode):
            return per_seed(flat, name, mode, None if length is None else f"exact@{length}")

        def learned(*names: str, mode: str = mode) -> tuple[bool, str]:
            """Precondition: every side retrieves some passkey at the training context (any seed, prompt)."""
            none = [n for n in names if (at := exact(n, context, mode)) is not None and max(at.values()) <= 0]
            return (not none, f"{', '.join(none)}: no passkey retrieved at the training context {context}, so "
                              "retrieval past it is not a test of extrapolation")

        metric = f"passkey exact match at {pk_longest} ({pk_longest // context}x)"
        for other in ("alibi", "rope"):
            add(BAM, f"BAM-SSMax retrieves the passkey past the training context better than {other}", mode, metric,
                "bam_ssmax", exact("bam_ssmax", pk_longest), other, exact(other, pk_longest), higher=True,
                paired=False, bounds=UNIT, preconditions=[learned("bam_ssmax", other)])
        pk_ft = ft_len if ft_len in pk_lengths else None
        add(WANG, "HeadScale extends NoPE's passkey retrieval", mode,
            f"passkey exact match at {pk_ft}, paired per seed", "nope+headscale", exact("nope+headscale", pk_ft),
            "nope", exact("nope", pk_ft), higher=True, paired=True, bounds=UNIT,
            preconditions=[learned("nope+headscale", "nope")])
    return out


# ------------------------------------------------------------------------------------------- plots
def plot_ppl(summary: list[dict[str, Any]], mode: str, lengths: list[int], context: int):
    """Perplexity vs length of every variant of ``mode`` (log-log, the training context as a grey line): a figure."""
    import matplotlib
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    entries = [s for s in summary if s["mode"] == mode]
    fig, axes = new_figure(size=(9, 5))
    ax, colors = axes[0][0], matplotlib.colormaps["tab10"].colors
    bases = list(dict.fromkeys(VARIANTS[s["variant"]].base for s in entries))
    seen: dict[str, int] = {}
    for entry in entries:
        variant = VARIANTS[entry["variant"]]
        index = seen[variant.base] = seen.get(variant.base, -1) + 1
        plot_intervals(ax, lengths, [entry.get(ppl_key(n)) for n in lengths], marker="o^sDvP*X<>"[index % 10],
                       linestyle=":" if variant.finetune else ("--" if variant.encoding else "-"), markersize=4,
                       capsize=2, color=colors[bases.index(variant.base) % len(colors)], label=entry["variant"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set(major_locator=FixedLocator(lengths), major_formatter=ScalarFormatter(), minor_locator=NullLocator())
    ax.yaxis.set_major_formatter(ScalarFormatter())
    low, high = ax.get_ylim()
    if has_finite_data(ax) and high / low < 10:  # within one decade the log axis has no major tick: label minor ones
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.axvline(context, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("evaluation length (bytes; the same scored bytes at every length)")
    ax.set_ylabel("validation perplexity (bytes)")
    seeds = max((s["runs"] for s in entries), default=0)
    ax.set_title(f"Perplexity vs length, {mode} models, mean and 95 % interval over {seeds} seeds; grey line: the "
                 "training context\n(solid: as trained; dashed: swapped at inference; dotted: fine-tuned)", fontsize=9)
    return finish(fig, "validation perplexity", fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))


def plot_passkey(summary: list[dict[str, Any]], mode: str, lengths: list[int], depths: list[float], context: int):
    """Passkey digit accuracy per (length, depth), one panel per variant of ``mode``: a figure."""
    import numpy as np

    entries = [s for s in summary if s["mode"] == mode]
    columns = min(4, max(1, len(entries)))
    fig, axes = new_figure(math.ceil(max(1, len(entries)) / columns), columns, size=(3.6, 2.7))
    fig.set_layout_engine("constrained")
    image = None
    for ax, entry in zip(axes.flat, entries):
        grid = np.array([[nan_if_missing((entry.get(f"digits@{n} depth {d:g}") or {}).get("mean")) for n in lengths]
                         for d in depths])
        shown = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        if not note_if_empty(ax, "passkey digit accuracy"):
            image = shown
        for (i, j), value in np.ndenumerate(grid):
            if math.isfinite(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if value < 0.6 else "black")
        ax.set_xticks(range(len(lengths)), [f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in lengths],
                      fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=7)
        ax.set_title(entry["variant"], fontsize=9)
        ax.set_xlabel("length (bytes)", fontsize=7)
        ax.set_ylabel("needle depth", fontsize=7)
    if not entries:
        note_if_empty(axes[0, 0], "passkey digit accuracy", reason=f"no {mode} run")
    for ax in list(axes.flat)[len(entries):]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="digit accuracy (mean over seeds)")
    fig.suptitle(f"Passkey retrieval, {mode} models (teacher-forced digit accuracy, chance 0.1); training context "
                 f"{context}", fontsize=10)
    return fig


# ------------------------------------------------------------------------------------------ benchmark
MODE_TITLES = {"zero_shot": "zero-shot models (text only)", "trained": "passkey-trained models"}


class Extrapolation(Benchmark):
    name = "extrapolation"
    title = "Context-length extrapolation: perplexity and passkey retrieval"
    Config = Config
    key_fields = ("run",)
    held_out = ("one document split (the same held-out text) for every seed; perplexity is scored on validation text "
                "never trained on (tuning on the validation bytes after it), passkey prompts are drawn apart from "
                "training's")
    same_budget = ("trains the same trunk for the same steps on the same text; the variants of a base share its "
                   "weights, so they are paired per seed")

    def check(self, config: Config) -> None:
        for key in ("passkey_modes", "variants"):
            distinct(key, getattr(config, key))
        if config.trained_variants is not None:
            distinct("trained_variants", config.trained_variants, allowed=config.variants)
        evaluation, context = config.evaluation, config.training.context
        for key in ("ppl_lengths", "passkey_lengths"):
            lengths = getattr(evaluation, key)
            if lengths != sorted(set(lengths)) or lengths[:1] != [context]:
                raise ValueError(f"evaluation.{key} must be a strictly increasing list starting at the training "
                                 f"context {context}, got {lengths}")
        bad = [n for n in evaluation.ppl_lengths if evaluation.ppl_tokens % n]
        if bad:
            raise ValueError(f"evaluation.ppl_tokens must be divisible by every ppl length (so each length scores the "
                             f"same tokens), got {evaluation.ppl_tokens}, not divisible by {bad}")

    def runs(self, config: Config) -> list[dict[str, Any]]:
        memory = dataclasses.asdict(config.memory)
        specs = [{"run": f"memory__{memory['encoding']}_L{memory['length']}", "memory": memory}]
        if config.memory_only:
            return specs
        preset = dataclasses.asdict(config)
        modes, seeds = config.passkey_modes, config.seeds
        bases = {(VARIANTS[n].base, m) for m in modes for n in mode_variants(preset, m)}
        order = sorted(((b, m, s) for b, m in bases for s in seeds),
                       key=lambda k: (seeds.index(k[2]), TRAIN_ORDER.index(k[0]), modes.index(k[1])))
        return specs + [run_spec(preset, b, m, s) for b, m, s in order]

    def tuning(self, config: Config) -> Tuning:
        """The base models' learning rate, per base encoding (both passkey modes; every variant of a base reuses it)."""
        return Tuning(param="lr", values=[float(lr) for lr in config.training.lrs], metric="val_loss", maximize=False,
                      group="base", max_extensions=config.training.max_extensions)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        """The memory row, or: train the base, then evaluate each variant from a copy of its weights."""
        if "memory" in spec:
            return memory_row(spec["memory"])
        start = time.perf_counter()
        row, state = train_base(spec)
        variants = [evaluate_variant({**spec, **entry}, copy.deepcopy(state)) for entry in spec["variants"]]
        return {**row, "variants": variants, "run_seconds": time.perf_counter() - start}

    def progress_label(self, row: dict[str, Any]) -> str:
        if row["kind"] == "memory":
            return f"memory {row['encoding']} L={row['length']}: {row.get('peak_mib')} MiB ({row['status']})"
        ppl = "; ".join(f"{v['variant']} ppl {v['ppl'][0]['ppl']:.2f}->{v['ppl'][-1]['ppl']:.3g}"
                        for v in row["variants"])
        return f"{row['base']} {row['mode']} seed {row['seed']} lr {row['lr']:g}: val loss {row['val_loss']:.3f}; {ppl}"

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        rows = [v for r in result.rows if r["kind"] == "training" for v in r["variants"]]
        return summarize(rows) + claims(rows, dataclasses.asdict(result.config)) if rows else []

    def plot(self, result: Result) -> dict[str, Any]:
        summary = result.derived_of("summary")
        if not summary:
            return {}
        config, ev = result.config, result.config.evaluation
        context, modes, lengths = config.training.context, config.passkey_modes, ev.ppl_lengths
        figures = {"ppl_vs_length.png": plot_ppl(summary, "zero_shot" if "zero_shot" in modes else modes[0], lengths,
                                                 context)}
        for mode in modes:
            figures["passkey_heatmap.png" if mode == "zero_shot" else "passkey_heatmap_trained.png"] = plot_passkey(
                summary, mode, ev.passkey_lengths, ev.passkey_depths, context)
        return figures

    def describe(self, result: Result) -> str:
        training, tokens = result.config.training, result.config.evaluation.ppl_tokens
        parameters = next(r["parameters_without_pe"] for r in result.rows if r["kind"] == "training")
        return (f"Byte-level decoders ({parameters:,} parameters without the PE), {training.steps} steps of batch "
                f"{training.batch_size} x {training.context} bytes of standard-library text (`trained` mode: "
                f"{training.passkey_fraction:.0%} passkey rows). Perplexity on the same {tokens:,} held-out bytes at "
                "every length; passkey scored teacher-forced (the exact match of all 5 digits is what greedy decoding "
                "gives). The protocol: docs/tutorials/yarn_extension.md.")

    def fairness_notes(self, result: Result) -> list[str]:
        return [f"Claims of no rise are non-inferiority tests with a margin of {PPL_MARGIN_PCT:g} % perplexity; a "
                "passkey claim is untested when a side retrieves no passkey at the training context."]

    def report(self, result: Result) -> str:
        config, summary, claim_list = result.config, result.derived_of("summary"), result.derived_of("claim")
        context, ev, rows = config.training.context, config.evaluation, result.rows
        memory = next((r for r in rows if r["kind"] == "memory"), None)
        memory_text = "" if memory is None else (
            f"## Memory\n\nPeak RSS growth of one causal `{memory['encoding']}` attention layer (batch 1, "
            f"{memory['num_heads']} heads of {memory['head_dim']}, float32, no grad, query blocks of "
            f"{memory['query_block_size']}, one thread).\n\n" + markdown_table(
                [memory], [("length", "L"), ("peak_mib", "peak MiB"), "seconds", "status"], {"peak_mib": ".1f"}))
        training_rows = [r for r in rows if r["kind"] == "training"]
        if not training_rows:
            return memory_text
        body = [self.describe(result), fairness_section(
            self.tuning(config), config.seeds, held_out=self.held_out, same_budget=self.same_budget,
            notes=self.fairness_notes(result)), "## Training\n\n" + summary_table(
            summarize_groups(training_rows, ("base", "mode"), ("val_loss", "final_train_loss", "seconds")),
            ["base", "mode", ("runs", "seeds")], [("val_loss", "validation loss (nats/byte)"),
                                                  ("final_train_loss", "final train loss"), "seconds"],
            {"seconds": ".0f"})]
        if claim_list:
            body.append("## Against the papers' claims\n\nLog perplexity in nats per byte; passkey: exact match.\n\n"
                        + claims_table(claim_list, extra=[("paper", "paper"), ("mode", "mode"), ("metric", "metric")]))

        def columns(prefix: str, lengths: list[int]) -> list[tuple[str, str]]:
            return [(f"{prefix}{n}", f"{prefix[:-1]} x{n // context}" if n % context == 0 else f"{prefix}{n}")
                    for n in lengths]

        unlearned = passkey_learned(summary, context)
        for mode in config.passkey_modes:
            entries = [s for s in summary if s["mode"] == mode]
            if not entries:
                continue
            heading = ["variant", ("runs", "seeds")]
            body.append(f"## Validation perplexity by length, {MODE_TITLES[mode]}\n\n"
                        + summary_table(entries, heading, columns("ppl@", ev.ppl_lengths), ".2f"))
            swept = [{"variant": s["variant"], "factor": f"{f:g}", **{ppl_key(n): s[ppl_key(n, f)]
                                                                       for n in ev.ppl_lengths}}
                     for s in entries for f in config.scalings.sweep_factors if ppl_key(context, f) in s]
            if swept:
                body.append("### Factor sweep of the fixed-factor scalings at inference\n\n"
                            + summary_table(swept, ["variant", "factor"], columns("ppl@", ev.ppl_lengths), ".2f"))
            body.append(f"## Passkey retrieval by length (mean over depths), {MODE_TITLES[mode]}\n\n" + summary_table(
                entries, heading, columns("exact@", ev.passkey_lengths) + columns("digits@", ev.passkey_lengths), ".2f")
                + (f"\nNot retrieved at the training context (digit accuracy at most twice chance): "
                   f"{', '.join(unlearned[mode])}.\n" if unlearned.get(mode) else ""))
            checks = [{**s, "agree": f"{sum(v == 1.0 for v in s['greedy_agrees']['values'])} of {s['runs']}",
                       "finetune": s["finetune"] and f"{s['finetune']['kind']}, {s['finetune']['steps']} steps at "
                                                     f"{s['finetune']['context']}"} for s in entries]
            body.append("Checks: greedy exact match at the training context (seeds where it equals teacher-forced); "
                        "attention entropy (bits) at multiples of the context; fine-tunes.\n\n" + summary_table(
                            checks, ["variant", ("agree", "greedy agrees"), ("finetune", "fine-tune")],
                            [("greedy_exact", "greedy exact"), *[f"entropy x{m}" for m in ev.entropy_multiples],
                             ("finetune_loss", "fine-tune loss")], ".2f"))
        return "\n\n".join(part.strip() for part in [*body, memory_text, f"Total wall time {result.seconds:.0f} s."]
                           if part) + "\n"


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="extrapolation", prog="python benchmarks/extrapolation.py"))
