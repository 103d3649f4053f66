"""Context-length extrapolation on real text: perplexity vs length and passkey retrieval, per encoder.

Trains the same byte-level ``LanguageModelModule`` trunk per base encoder (nope, rope, alibi, t5,
kerple, fire, bam, bam_ssmax), per seed and per *passkey mode*, at a short context on Python's
standard-library text:

* ``zero_shot``: text only (no passkey rows in training), as the papers train; its passkey numbers
  are zero-shot retrieval, and its perplexities carry the papers' perplexity claims;
* ``trained``: a ``training.passkey_fraction`` of every batch is passkey prompts (loss on their
  answer bytes, averaged per row), so the model learns the retrieval format; reported separately.

Evaluation *variants* are derived from the trained weights (see :data:`VARIANTS`):

* NoPE with a uniform attention temperature (Wang et al. 2024, arXiv:2404.12224), applied at
  inference, and with HeadScale (one learned scale per head and layer, init 1.6, clamped >= 1,
  fine-tuned alone for a short run at a longer context, as the paper does);
* RoPE with the fixed-factor scalings PI (``linear``), NTK-aware, YaRN, Llama 3.1 and LongRoPE
  applied at inference at the factor ``scalings.factor`` of the preset, each also swept over
  ``scalings.sweep_factors`` (perplexity of the zero-shot models); dynamic NTK, whose frequencies
  follow the evaluated length ``l`` exactly as HF's ``dynamic`` rule (``_compute_dynamic_ntk_parameters``):
  NTK scale ``1 + f (max(l, L0) / L0 - 1)`` with ``f = scalings.dynamic_factor`` (1: the scale is
  ``max(1, l / L0)``); PI / YaRN after a short fine-tune at ``finetune.multiple`` x the context
  (factor = that multiple). LongRoPE takes its long rescale factors from NTK-by-parts at the factor
  (short factors 1): the paper's evolutionary search of the factors is not run;
* the trained bias encoders as they are: ALiBi, T5, KERPLE, FIRE, BAM, BAM-SSMax
  (Bianchessi et al. 2025, arXiv:2505.22842).

One run per (base, mode, seed) trains the base and evaluates every variant of it (the variants share
its weights, so they are paired per seed). For every variant:

* perplexity at every length of ``evaluation.ppl_lengths`` on the *same* ``evaluation.ppl_tokens``
  held-out bytes (the first ones of the validation split), cut into windows of that length, so every
  length scores exactly the same targets;
* passkey retrieval on a length x depth grid, ``evaluation.passkey_samples`` prompts per cell (the
  template of the papers without its instruction prefix, so that it fits the short training
  context), scored teacher-forced in one forward pass per prompt: per-digit accuracy, and exact
  match of all five digits, which equals greedy decoding's exact match (checked with greedy
  decoding on ``evaluation.greedy_samples`` prompts per depth at the training context);
* the attention entropy at ``evaluation.entropy_multiples`` x the context.

Over the seeds: mean and Student-t 95 % interval in every table; each paper claim is decided by
:func:`pe_toolkit.bench.verdict.decide_claim` (:func:`claims`): paired per-seed differences for
variants of one model, Welch for different trainings, and a stated margin (:data:`PPL_MARGIN_PCT`)
for "does not rise" / "at least as well". Plus the peak memory of one BAM attention layer at
``memory.length`` (batch 1, query blocks, in a fresh process's forked child).

    pe-toolkit bench extrapolation --quick                      # pipeline check
    pe-toolkit bench extrapolation --jobs 2                     # the full CPU preset
    pe-toolkit bench extrapolation --preset gpu --accelerator cuda
    python benchmarks/extrapolation.py --set scalings.factor=4 --set seeds=[0,1,2,3,4] --resume
    python benchmarks/extrapolation.py --set variants=[bam,alibi,rope,rope+yarn] --resume
    python benchmarks/extrapolation.py --set memory_only=true   # only the BAM attention-layer memory

Outputs in ``<out>/extrapolation/``: ``results.json`` (rows of kind ``training``, each with its
``variants``, ``memory``, ``summary`` and ``claim``), ``report.md``, ``ppl_vs_length.png``,
``factor_sweep.png``, ``passkey_heatmap.png`` (zero-shot) and ``passkey_heatmap_trained.png``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonargparse.typing import ClosedUnitInterval, NonNegativeInt, PositiveInt, restricted_number_type

from pe_toolkit.bench import Benchmark, Result, trainer_options
from pe_toolkit.bench.plots import note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.verdict import decide_claim, format_side, untested_claim
from pe_toolkit.bench.verdict import summarize as side

MODES = ("zero_shot", "trained")
PASSKEY_DIGIT_CHANCE = 0.1  # one of ten digits
MIB = 2**20
PPL_MARGIN_PCT = 5.0
"""The margin of the claims of no rise ("does not rise", "at least as well"): perplexity up by at most 5 %,
tested on log perplexity (nats per byte) with margin ``log(1.05)``."""
MIN_SEEDS = 2


# ------------------------------------------------------------------------------------------ config
AtLeastOne = restricted_number_type("AtLeastOne", float, (">=", 1))
Fraction = restricted_number_type("Fraction", float, [(">", 0), ("<=", 1)], join="and")


@dataclass
class Model:
    dim: PositiveInt
    num_heads: PositiveInt
    num_layers: PositiveInt


@dataclass
class Training:
    context: PositiveInt
    steps: PositiveInt
    batch_size: PositiveInt
    lr: float
    warmup_steps: PositiveInt
    weight_decay: float
    passkey_fraction: Fraction
    """The trained mode's share of passkey rows (the zero-shot mode trains with none)."""
    passkey_template: Literal["compact", "paper"]
    split_seed: int
    max_bytes: PositiveInt | None
    loss_average: str


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
    """One evaluated model: a trained base encoder, optionally with another encoding swapped in.

    Attributes:
        base: the encoder the model was trained with (its weights are reused).
        encoding: the encoder swapped in before evaluation; ``None`` keeps the trained one.
        options: options of the swapped-in encoder (``factor`` and ``original_max_position`` are
            filled in by :func:`resolve_options`).
        per_layer: one encoding per layer (HeadScale learns one scale per head *and* layer).
        factor: ``"scaling"``: the preset's ``scalings.factor`` (and its sweep); ``"dynamic"``:
            ``scalings.dynamic_factor`` (the frequencies follow the evaluated length); ``"finetune"``:
            ``finetune.multiple``; ``None``: no factor.
        finetune: ``None``; ``"positional"``: train the encodings only (``train_positional_only``);
            ``"full"``: train every weight. Both at ``finetune.multiple`` x the context.
        description: one line for the report.
    """

    base: str
    encoding: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    per_layer: bool = False
    factor: str | None = None
    finetune: str | None = None
    description: str = ""


VARIANTS: dict[str, Variant] = {
    "nope": Variant("nope", description="NoPE, as trained"),
    "nope+temp1.2": Variant(
        "nope", "nope_temperature", {"scale": 1.2}, description="NoPE, logits x 1.2 at inference (UniformScale)"
    ),
    "nope+temp1.5": Variant(
        "nope", "nope_temperature", {"scale": 1.5}, description="NoPE, logits x 1.5 at inference (UniformScale)"
    ),
    "nope+headscale": Variant(
        "nope", "nope_temperature", {"scale": 1.6, "learned": True}, per_layer=True, finetune="positional",
        description="NoPE + HeadScale (init 1.6, >= 1), scales fine-tuned alone at the longer context",
    ),
    "rope": Variant("rope", description="RoPE, as trained"),
    "rope+linear": Variant("rope", "rope", {"scaling": "linear"}, factor="scaling",
                           description="RoPE + position interpolation at inference"),
    "rope+ntk": Variant("rope", "rope", {"scaling": "ntk"}, factor="scaling",
                        description="RoPE + NTK-aware base at inference"),
    "rope+yarn": Variant("rope", "rope", {"scaling": "yarn"}, factor="scaling",
                         description="RoPE + YaRN at inference"),
    "rope+llama3": Variant("rope", "rope", {"scaling": "llama3"}, factor="scaling",
                           description="RoPE + Llama 3.1 scaling at inference"),
    "rope+longrope": Variant("rope", "rope", {"scaling": "longrope"}, factor="scaling",
                             description="RoPE + LongRoPE form at inference (rescale from NTK-by-parts, no search)"),
    "rope+dynamic": Variant("rope", "rope", {"scaling": "dynamic"}, factor="dynamic",
                            description="RoPE + dynamic NTK at inference (scale follows the length, HF rule)"),
    "rope+linear+ft": Variant("rope", "rope", {"scaling": "linear"}, factor="finetune", finetune="full",
                              description="RoPE + position interpolation, fine-tuned at the longer context"),
    "rope+yarn+ft": Variant("rope", "rope", {"scaling": "yarn"}, factor="finetune", finetune="full",
                            description="RoPE + YaRN, fine-tuned at the longer context"),
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
    model: Model
    training: Training
    scalings: Scalings
    finetune: Finetune
    evaluation: Evaluation
    memory: Memory
    variants: list[Literal[tuple(VARIANTS)]]
    trained_variants: list[Literal[tuple(VARIANTS)]] | None = None
    """The variants of the trained passkey mode (``None``: every variant)."""
    memory_only: bool = False
    """Only measure the attention layer's memory."""


def longrope_factors(head_dim: int, base: float, factor: float, original_max_position: int) -> dict[str, list[float]]:
    """LongRoPE's ``short_factor`` / ``long_factor`` without its search: 1 below ``L0``, NTK-by-parts above.

    The long factors are ``theta_k / theta'_k`` of YaRN's NTK-by-parts frequencies at ``factor``
    (1 for the fast pairs, ``factor`` for the slow ones), one of the starting points of the paper's
    evolutionary search; the search itself is not run.
    """
    from pe_toolkit.encoders.rotary import rope_inverse_frequencies, yarn_inverse_frequencies

    plain = rope_inverse_frequencies(head_dim, base)
    scaled = yarn_inverse_frequencies(head_dim, base, factor, original_max_position)
    return {"short_factor": [1.0] * (head_dim // 2), "long_factor": [float(v) for v in plain / scaled]}


def resolve_options(variant: Variant, preset: dict[str, Any], factor: float | None = None) -> dict[str, Any]:
    """The swapped-in encoder's options with ``factor`` / ``original_max_position`` filled in.

    Args:
        variant: the variant.
        preset: the config as a dict (``training.context``, ``scalings``, ``finetune``, ``model``).
        factor: for ``factor="scaling"`` variants, a factor other than ``scalings.factor`` (the sweep).
    """
    options = dict(variant.options)
    context = preset["training"]["context"]
    if factor is not None and variant.factor != "scaling":
        raise ValueError(f"factor applies to fixed-factor scaling variants only, not to {variant.factor!r}")
    if variant.factor == "scaling":
        options["factor"] = float(preset["scalings"]["factor"] if factor is None else factor)
        if options["factor"] < 1:
            raise ValueError(f"factor must be >= 1, got {options['factor']}")
    elif variant.factor == "dynamic":
        options["factor"] = float(preset["scalings"]["dynamic_factor"])
    elif variant.factor == "finetune":
        options["factor"] = float(preset["finetune"]["multiple"])
    elif variant.factor is not None:
        raise ValueError(f"variant factor must be None, 'scaling', 'dynamic' or 'finetune', got {variant.factor!r}")
    if options.get("scaling") in ("dynamic", "yarn", "llama3", "longrope"):
        options["original_max_position"] = context
    if options.get("scaling") == "longrope":
        model = preset["model"]
        options.update(longrope_factors(model["dim"] // model["num_heads"], 10_000.0, options["factor"], context))
    return options


def dynamic_ntk_scale(length: int, original_max_position: int, factor: float) -> float:
    """The NTK scale HF's ``dynamic`` rule uses at input length ``length``: ``factor * l / L0 - (factor - 1)``
    with ``l = max(length, L0)`` (``_compute_dynamic_ntk_parameters``); ``max(1, length / L0)`` for factor 1."""
    longest = max(length, original_max_position)
    return factor * longest / original_max_position - (factor - 1)


def swap_encoding(model, name: str, options: dict[str, Any] | None = None, *, per_layer: bool = False):
    """Replace a trained ``Transformer``'s positional encoding by ``get_encoder(name, ...)``, in place.

    Every other weight is left untouched. ``per_layer`` builds one encoding per layer (each with its
    own parameters), otherwise one shared by all layers; ``model.config`` is updated to match.

    Returns:
        ``model``.
    """
    import torch.nn as nn

    import pe_toolkit as pet

    options = dict(options or {})
    config = model.config
    count = config.num_layers if per_layer else 1
    built = [pet.get_encoder(name, config.dim, config.num_heads, causal=config.causal, **options) for _ in range(count)]
    device = next(model.parameters()).device
    model.encodings = nn.ModuleList(built).to(device)
    model.config = dataclasses.replace(config, encoding=name, encoding_options=options, share_encoding=not per_layer)
    return model


def set_query_block_size(model, block_size: int | None) -> None:
    """Evaluate every self-attention layer ``block_size`` queries at a time (memory linear in L)."""
    for block in model.blocks:
        block.attn.query_block_size = block_size
    model.config.attention_block_size = block_size


# ------------------------------------------------------------------------------------------- specs
def mode_variants(preset: dict[str, Any], mode: str) -> list[str]:
    """The variants evaluated in ``mode``: all of ``variants``, or ``trained_variants`` in the trained mode.

    The trained mode only carries passkey claims, so a preset may evaluate (and train bases for) fewer
    variants there.
    """
    if mode == "trained" and preset.get("trained_variants") is not None:
        return [v for v in preset["variants"] if v in preset["trained_variants"]]
    return list(preset["variants"])


def variant_spec(preset: dict[str, Any], name: str, mode: str) -> dict[str, Any]:
    """What changes one evaluated variant: its definition, resolved options and (zero-shot) factor sweep."""
    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}, got {name!r}")
    v = VARIANTS[name]
    sweep = []
    if v.factor == "scaling" and mode == "zero_shot":  # perplexity claims rest on the text-only models
        sweep = [{"factor": float(f), "options": resolve_options(v, preset, f)}
                 for f in preset["scalings"]["sweep_factors"]]
    return {"name": name, "variant": dataclasses.asdict(v), "options": resolve_options(v, preset), "sweep": sweep}


def run_spec(preset: dict[str, Any], base: str, mode: str, seed: int) -> dict[str, Any]:
    """One run: train ``base`` in ``mode`` with ``seed``, then evaluate each of its variants in this mode."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    variants = [variant_spec(preset, n, mode) for n in mode_variants(preset, mode) if VARIANTS[n].base == base]
    return {"run": f"train__{base}__{mode}__s{seed}", "base": base, "mode": mode, "seed": seed,
            "model": preset["model"], "training": preset["training"], "evaluation": preset["evaluation"],
            "finetune": preset["finetune"] if any(v["variant"]["finetune"] for v in variants) else None,
            "variants": variants}


# ------------------------------------------------------------------------------------ training
def _trainer(steps: int, device: dict[str, Any] | None):
    import lightning as L

    return L.Trainer(
        max_steps=steps, **trainer_options(device), logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )


def eval_device(device: dict[str, Any] | None) -> str:
    """Where evaluation runs: ``"cuda"`` for a GPU accelerator (or ``auto`` with a GPU), else ``"cpu"``."""
    import torch

    accelerator = trainer_options(device)["accelerator"]
    if accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available()):
        return "cuda"
    return "cpu"


def _module(spec: dict[str, Any], *, lr: float | None = None, steps: int = 0, warmup: int = 1):
    from pe_toolkit.training import LanguageModelModule

    training = spec["training"]
    return LanguageModelModule(
        256, encoding=spec["base"], **spec["model"], lr=training["lr"] if lr is None else lr,
        weight_decay=training["weight_decay"], warmup_steps=warmup, max_steps=steps,
        loss_average=training["loss_average"],
    )


def training_data(training: dict[str, Any], mode: str, seed: int, context: int, batch_size: int, steps: int):
    """The ``ByteLMDataModule`` of a run: passkey rows only in the ``trained`` mode.

    The document split is drawn with ``training.split_seed``, the same for every seed, so all runs
    hold out (and are evaluated on) the same text and validation text is never trained on; ``seed``
    draws the training windows (and passkey rows).
    """
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


def train_base(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train one base encoder at the training context.

    Returns:
        ``(row, state_dict)``: a ``training`` row (final training loss, parameter counts, seconds) and
        the trained weights (on the CPU).
    """
    import lightning as L

    start = time.perf_counter()
    training = spec["training"]
    L.seed_everything(spec["seed"], verbose=False)
    data = training_data(training, spec["mode"], spec["seed"], training["context"], training["batch_size"],
                         training["steps"])
    module = _module(spec, steps=training["steps"], warmup=training["warmup_steps"])
    trainer = _trainer(training["steps"], spec.get("device"))
    trainer.fit(module, data)
    row = {
        "kind": "training", "base": spec["base"], "mode": spec["mode"], "seed": spec["seed"],
        "final_train_loss": float(trainer.callback_metrics.get("train/loss", float("nan"))),
        "parameters": module.model.num_parameters(),
        "parameters_without_pe": module.model.num_parameters(exclude_positional=True),
        "seconds": time.perf_counter() - start,
    }
    return row, {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def _finetune(module, spec: dict[str, Any], kind: str) -> dict[str, Any]:
    """Fine-tune ``module`` at ``multiple`` x the context: every weight, or the encodings only."""
    import lightning as L

    ft, training = spec["finetune"], spec["training"]
    context = training["context"] * ft["multiple"]
    if kind == "positional":
        module.model.train_positional_only()
        module.hparams.lr = ft["positional_lr"]
    elif kind == "full":
        module.hparams.lr = ft["lr"]
    else:
        raise ValueError(f"finetune must be 'positional' or 'full', got {kind!r}")
    module.hparams.max_steps = ft["steps"]
    module.hparams.warmup_steps = max(1, ft["steps"] // 10)
    start = time.perf_counter()
    L.seed_everything(spec["seed"] + 1, verbose=False)
    data = training_data(training, spec["mode"], spec["seed"], context, ft["batch_size"], ft["steps"])
    trainer = _trainer(ft["steps"], spec.get("device"))
    trainer.fit(module, data)
    module.model.requires_grad_(True)
    return {
        "kind": kind, "context": context, "steps": ft["steps"], "batch_size": ft["batch_size"],
        "lr": module.hparams.lr, "final_train_loss": float(trainer.callback_metrics.get("train/loss", float("nan"))),
        "seconds": time.perf_counter() - start,
    }


def build_variant(spec: dict[str, Any], state: dict[str, Any]):
    """The trained base model (``state``) with the variant's encoding swapped in, fine-tuned if the variant says so.

    ``spec``: the run's spec merged with one of its ``variants`` entries.

    Returns:
        ``(module, finetune)``: the ``LanguageModelModule`` and the fine-tune's summary (or ``None``).
    """
    variant = spec["variant"]
    module = _module(spec)
    module.load_state_dict(state)
    if variant["encoding"] is not None:
        swap_encoding(module.model, variant["encoding"], spec["options"], per_layer=variant["per_layer"])
    finetune = _finetune(module, spec, variant["finetune"]) if variant["finetune"] else None
    return module, finetune


# ------------------------------------------------------------------------------------ evaluation
def equal_token_windows(data, lengths: list[int], tokens: int) -> dict[int, Any]:
    """Windows of every length cut from the same ``tokens + 1`` bytes, so each length scores the same targets.

    Window ``j`` of length ``n`` is ``data[j n : (j + 1) n + 1]`` (``sequential_windows``); with ``n``
    dividing ``tokens`` the ``tokens / n`` windows predict bytes ``1 .. tokens`` exactly once.

    Returns:
        ``{length: (tokens // length, length + 1) long tensor}``.

    Raises:
        ValueError: ``tokens`` not divisible by a length, or ``data`` shorter than ``tokens + 1`` bytes.
    """
    from pe_toolkit.data import sequential_windows

    if not _positive_int(tokens):
        raise ValueError(f"tokens must be an int >= 1, got {tokens!r}")
    bad = [n for n in lengths if not _positive_int(n) or tokens % n]
    if bad:
        raise ValueError(f"tokens={tokens} must be divisible by every length; lengths {bad} do not divide it")
    if data.numel() < tokens + 1:
        raise ValueError(f"data has {data.numel()} bytes; {tokens} scored tokens need {tokens + 1}")
    text = data[: tokens + 1]
    return {n: sequential_windows(text, n) for n in lengths}


def passkey_scores(model, examples, *, batch_tokens: int, device: str = "cpu") -> list[float]:
    """Teacher-forced digit accuracy of each example, ``batch_tokens // length`` prompts per forward pass.

    Equals ``pe_toolkit.data.teacher_forced_digit_accuracy(model, example)`` for every example (the
    prompts of one length are stacked; a causal model's rows do not see each other).

    Raises:
        ValueError: examples of different lengths.
    """
    import torch

    from pe_toolkit.data.passkey import NUM_DIGITS

    if not examples:
        return []
    sequences = [ex.prompt_bytes + ex.answer for ex in examples]
    lengths = {len(s) for s in sequences}
    if len(lengths) != 1:
        raise ValueError(f"passkey_scores: examples must have one length, got {sorted(lengths)}")
    total = lengths.pop()
    per_batch = max(1, batch_tokens // total)
    ids = torch.tensor([list(s) for s in sequences], dtype=torch.long)  # (N, L + 6)
    first = total - NUM_DIGITS  # index of the first digit in each sequence
    scores: list[float] = []
    with torch.no_grad():
        for start in range(0, len(examples), per_batch):
            chunk = ids[start : start + per_batch].to(device)
            logits = model(chunk[:, :-1])  # (b, L + 5, V)
            predicted = logits[:, first - 1 : total - 1].argmax(-1)  # (b, 5)
            correct = (predicted == chunk[:, first:]).sum(-1)  # digits right, per prompt
            scores.extend(int(v) / NUM_DIGITS for v in correct.cpu())
    return scores


def _passkey_seed(seed: int, length: int) -> int:
    return 1_000_003 * seed + length  # the same prompts for every variant and mode of one seed


def evaluate_variant(spec: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """Derive the variant from the trained weights ``state`` (swap / fine-tune) and evaluate it.

    Returns:
        a ``variant`` row: ``ppl`` per length, ``sweep`` (perplexity per swept factor), ``passkey`` per
        (length, depth), ``passkey_by_length``, ``greedy_check``, ``entropy``, learned encoder
        parameters, seconds.
    """
    import torch

    from pe_toolkit.data import COMPACT_TEMPLATE, PAPER_TEMPLATE, passkey_accuracy, passkey_grid, sequential_windows
    from pe_toolkit.nn import attention_entropy

    start = time.perf_counter()
    variant, training, evaluation = spec["variant"], spec["training"], spec["evaluation"]
    seed, context = spec["seed"], training["context"]
    template = {"compact": COMPACT_TEMPLATE, "paper": PAPER_TEMPLATE}[training["passkey_template"]]
    module, finetune = build_variant(spec, state)
    device = eval_device(spec.get("device"))
    module.to(device).eval()
    set_query_block_size(module.model, evaluation["block_size"])
    data = training_data(training, spec["mode"], seed, context, 1, 1)
    data.setup()
    windows = equal_token_windows(data.val_bytes, evaluation["ppl_lengths"], evaluation["ppl_tokens"])
    batch_tokens = evaluation["passkey_batch_tokens"]

    def perplexities() -> list[dict[str, Any]]:
        return [{"length": length, "ppl": module.perplexity(w, batch_size=max(1, batch_tokens // length)),
                 "windows": int(w.shape[0]), "tokens": int(w[:, 1:].numel())} for length, w in windows.items()]

    ppl = perplexities()
    sweep = []
    for entry in spec["sweep"]:
        if entry["options"] == spec["options"]:
            sweep.append({"factor": entry["factor"], "ppl": ppl})
            continue
        swap_encoding(module.model, variant["encoding"], entry["options"], per_layer=variant["per_layer"])
        sweep.append({"factor": entry["factor"], "ppl": perplexities()})
    if spec["sweep"]:  # back to the variant's own factor for passkey and entropy
        swap_encoding(module.model, variant["encoding"], spec["options"], per_layer=variant["per_layer"])

    passkey = []
    for length in evaluation["passkey_lengths"]:
        # prompt + 5 answer bytes (the last not fed) = `length` input bytes
        examples = passkey_grid([length - 5], evaluation["passkey_depths"], evaluation["passkey_samples"],
                                seed=_passkey_seed(seed, length), template=template)
        scores = passkey_scores(module.model, examples, batch_tokens=batch_tokens, device=device)
        for depth in evaluation["passkey_depths"]:
            cell = [s for ex, s in zip(examples, scores) if ex.depth == depth]
            passkey.append({"length": length, "depth": depth, "samples": len(cell),
                            "digit_accuracy": sum(cell) / len(cell),
                            "exact_match": sum(s == 1.0 for s in cell) / len(cell)})
    by_length = []
    for length in evaluation["passkey_lengths"]:
        cells = [p for p in passkey if p["length"] == length]
        total = sum(c["samples"] for c in cells)
        by_length.append({
            "length": length, "examples": total,
            "digit_accuracy": sum(c["digit_accuracy"] * c["samples"] for c in cells) / total,
            "exact_match": sum(c["exact_match"] * c["samples"] for c in cells) / total,
        })

    # Greedy decoding (the papers' metric) at the training context: must agree with the teacher-forced
    # exact match, which the long lengths use instead (one forward pass instead of a decoding loop).
    greedy_examples = passkey_grid([context - 5], evaluation["passkey_depths"], evaluation["greedy_samples"],
                                   seed=_passkey_seed(seed, context), template=template)
    with torch.no_grad():
        greedy = passkey_accuracy(module.model.generate, greedy_examples, device=device)
    forced = passkey_scores(module.model, greedy_examples, batch_tokens=batch_tokens, device=device)
    greedy_check = {"length": context, "examples": len(greedy_examples), "greedy_exact_match": greedy,
                    "teacher_forced_exact_match": sum(s == 1.0 for s in forced) / len(forced)}

    entropy = []
    for multiple in evaluation["entropy_multiples"]:
        length = context * multiple
        tokens = sequential_windows(data.val_bytes, length, 1)[:, :-1].to(device)
        with torch.no_grad():
            per_head = attention_entropy(module.model, tokens)  # (layers, heads), bits
        entropy.append({"multiple": multiple, "length": length, "mean_bits": float(per_head.mean()),
                        "per_layer_bits": [float(v) for v in per_head.mean(-1)]})

    return {
        "kind": "variant", "variant": spec["name"], "base": variant["base"], "mode": spec["mode"], "seed": seed,
        "encoding": variant["encoding"] or variant["base"], "options": spec["options"],
        "description": variant["description"], "finetune": finetune, "ppl": ppl, "sweep": sweep,
        "passkey": passkey, "passkey_by_length": by_length, "greedy_check": greedy_check, "entropy": entropy,
        "learned": _learned_parameters(module.model), "seconds": time.perf_counter() - start,
    }


def train_and_evaluate(spec: dict[str, Any]) -> dict[str, Any]:
    """One run: train the base, then evaluate each variant from a copy of its weights; the training row
    with the variant rows under ``"variants"``."""
    start = time.perf_counter()
    row, state = train_base(spec)
    variants = [evaluate_variant({**spec, **entry}, copy.deepcopy(state)) for entry in spec["variants"]]
    return {**row, "variants": variants, "run_seconds": time.perf_counter() - start}


def _learned_parameters(model) -> dict[str, Any]:
    """Per-head parameters worth reading in the report: BAM's shape/scale/location, HeadScale's scales."""
    out: dict[str, Any] = {}

    def values(tensor, digits: int) -> list[float]:
        return [round(float(v), digits) for v in tensor.detach().cpu()]

    for index, encoding in enumerate(model.encodings):
        prefix = "" if len(model.encodings) == 1 else f"layer{index}."
        if hasattr(encoding, "shape") and hasattr(encoding, "location"):  # BAM, BAM-SSMax
            out[prefix + "bam_shape"] = values(encoding.shape, 4)
            out[prefix + "bam_scale_exp"] = values(encoding.scale.exp(), 5)
            out[prefix + "bam_location"] = values(encoding.location(), 3)
        if hasattr(encoding, "ssmax_scale"):
            out[prefix + "ssmax_scale"] = values(encoding.ssmax_scale, 4)
        if getattr(encoding, "learned", False) and hasattr(encoding, "head_scale"):
            out[prefix + "head_scale"] = values(encoding.head_scale, 4)
    return out


# ---------------------------------------------------------------------------------------- memory
def _attention_memory(length: int, dim: int, heads: int, block_size: int, encoding: str) -> dict[str, Any]:
    """Child: one causal attention layer with ``encoding``, batch 1, no grad, query blocks."""
    import torch

    import pe_toolkit as pet

    torch.set_num_threads(1)
    attention = pet.MultiHeadAttention(
        dim, heads, causal=True, encoding=pet.get_encoder(encoding, dim, heads, causal=True),
        query_block_size=block_size,
    )
    with torch.no_grad():
        x = torch.randn(1, length, dim, generator=torch.Generator().manual_seed(0))
        start = time.perf_counter()
        out = attention(x)
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "finite": bool(torch.isfinite(out).all())}


def _attention_warmup(dim: int, heads: int, block_size: int, encoding: str) -> None:
    _attention_memory(64, dim, heads, block_size, encoding)


def measure_memory(memory: dict[str, Any], timeout: float = 1800.0) -> dict[str, Any]:
    """Peak RSS growth of one attention layer at ``memory["length"]`` in a forked child.

    The calling process must not have run torch compute (see :mod:`pe_toolkit.bench.memory`):
    :func:`memory_row` calls this in a freshly spawned process.
    """
    from pe_toolkit.bench.memory import peak_memory_in_subprocess

    args = (memory["length"], memory["dim"], memory["num_heads"], memory["block_size"], memory["encoding"])
    row: dict[str, Any] = {
        "kind": "memory", "encoding": memory["encoding"], "length": memory["length"], "batch": 1,
        "num_heads": memory["num_heads"], "head_dim": memory["dim"] // memory["num_heads"],
        "query_block_size": memory["block_size"], "grad": False, "dtype": "float32", "threads": 1,
        "spec": dict(memory),
    }
    try:
        result, peak = peak_memory_in_subprocess(
            _attention_memory, *args, warmup=lambda: _attention_warmup(*args[1:]), timeout=timeout
        )
        row.update(status="ok", peak_mib=peak / MIB, seconds=result["seconds"], output_finite=result["finite"])
    except RuntimeError as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        row.update(status="failed: " + (lines[-1] if lines else "unknown")[:300], peak_mib=None, seconds=None)
    return row


def memory_row(memory: dict[str, Any]) -> dict[str, Any]:
    """:func:`measure_memory` in a spawned process (a worker that trained a model must not fork)."""
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measure_memory, memory).result()


# --------------------------------------------------------------------------------------- summaries
def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _at(items: list[dict[str, Any]] | None, key: str, value: Any) -> dict[str, Any] | None:
    for item in items or []:
        if item[key] == value:
            return item
    return None


def variant_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The variant rows of every training run, in run order."""
    return [v for r in rows if r.get("kind") == "training" for v in r["variants"]]


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (variant, mode) of the variant rows: every metric's mean and 95 % interval over the seeds.

    Returns:
        entries with ``variant``, ``mode``, ``seeds``, ``ppl`` / ``passkey_exact`` /
        ``passkey_digits`` (``[{"length", "mean", "low", "high", "n", "n_nonfinite", ...}]``), ``sweep``
        (``[{"factor", "ppl": [...]}]``), ``passkey_cells`` (digit accuracy and exact match per
        (length, depth)), ``entropy``, ``greedy_agrees`` and the fine-tune loss.
    """
    order = {name: i for i, name in enumerate(VARIANTS)}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["variant"], row["mode"]), []).append(row)
    unit = (0.0, 1.0)
    out = []
    for (name, mode), group in sorted(groups.items(), key=lambda kv: (MODES.index(kv[0][1]), order.get(kv[0][0], 99))):
        group = sorted(group, key=lambda r: r["seed"])

        def over(items_of, key: str, field_name: str, bounds=None, group=group) -> list[dict[str, Any]]:
            """``[{key: value, **interval}]`` of ``field_name`` over the seeds, for each value of ``key``."""
            return [{key: v, **side([(_at(items_of(r), key, v) or {}).get(field_name) for r in group],
                                    bounds=bounds).as_dict()}
                    for v in [p[key] for p in items_of(group[0])]]

        sweep = [{"factor": e["factor"], "ppl": over(lambda r, f=e["factor"]: _at(r["sweep"], "factor", f)["ppl"],
                                                     "length", "ppl")} for e in group[0]["sweep"]]
        cells = []
        for cell in group[0]["passkey"]:
            matches = [p for r in group for p in r["passkey"]
                       if p["length"] == cell["length"] and p["depth"] == cell["depth"]]
            cells.append({"length": cell["length"], "depth": cell["depth"], "samples": cell["samples"],
                          **{k: side([p[k] for p in matches], bounds=unit).as_dict()
                             for k in ("digit_accuracy", "exact_match")}})
        finetune_losses = [r["finetune"]["final_train_loss"] for r in group if r.get("finetune")]
        out.append({
            "kind": "summary", "variant": name, "mode": mode, "seeds": [r["seed"] for r in group],
            "description": group[0]["description"],
            "ppl": over(lambda r: r["ppl"], "length", "ppl"),
            "sweep": sweep,
            "passkey_exact": over(lambda r: r["passkey_by_length"], "length", "exact_match", unit),
            "passkey_digits": over(lambda r: r["passkey_by_length"], "length", "digit_accuracy", unit),
            "passkey_samples": group[0]["passkey"][0]["samples"] if group[0]["passkey"] else 0,
            "passkey_cells": cells,
            "entropy": over(lambda r: r["entropy"], "multiple", "mean_bits"),
            "greedy_agrees": sum(r["greedy_check"]["greedy_exact_match"]
                                 == r["greedy_check"]["teacher_forced_exact_match"] for r in group),
            "greedy_exact": side([r["greedy_check"]["greedy_exact_match"] for r in group], bounds=unit).as_dict(),
            "finetune": group[0]["finetune"],
            "finetune_loss": side(finetune_losses).as_dict() if finetune_losses else None,
        })
    return out


def passkey_learned(summary: list[dict[str, Any]], context: int) -> dict[str, list[str]]:
    """Per mode, the variants whose digit accuracy at the training context is not above 2x chance
    (interval upper end at most 0.2): their passkey numbers at longer lengths say nothing."""
    floor = 2 * PASSKEY_DIGIT_CHANCE
    out: dict[str, list[str]] = {}
    for entry in summary:
        at = _at(entry["passkey_digits"], "length", context)
        if at is not None and at["n"]:
            high = at["high"] if math.isfinite(at["high"]) else at["mean"]
            if high <= floor:
                out.setdefault(entry["mode"], []).append(entry["variant"])
    return out


# ------------------------------------------------------------------------------------------ claims
def per_seed(rows: list[dict[str, Any]], name: str, mode: str, metric: str, length: int | None,
             factor: float | None = None) -> dict[int, float] | None:
    """``{seed: value}`` of one variant's metric at ``length`` (``None``: not measured in this run).

    ``metric``: ``"log_ppl"`` (log perplexity, nats per byte; ``factor``: from the factor sweep) or
    ``"passkey_exact"`` (exact match over the depths).
    """
    if length is None:
        return None
    out = {}
    for row in rows:
        if row["variant"] != name or row["mode"] != mode:
            continue
        if metric == "passkey_exact":
            found = _at(row["passkey_by_length"], "length", length)
            value = None if found is None else found["exact_match"]
        else:
            items = row["ppl"] if factor is None else (_at(row["sweep"], "factor", float(factor)) or {}).get("ppl")
            found = _at(items, "length", length)
            ppl = None if found is None else found["ppl"]
            value = math.log(ppl) if ppl is not None and ppl > 0 else math.nan  # NaN / None: counted, not dropped
        if found is not None:
            out[row["seed"]] = value
    return out or None


def claims(rows: list[dict[str, Any]], config: dict[str, Any]) -> list[dict[str, Any]]:
    """Each paper claim tested here, decided by :func:`pe_toolkit.bench.verdict.decide_claim`.

    Perplexity claims read log perplexity (nats per byte) of the ``zero_shot`` models (trained on text
    only, as the papers train) when that mode ran; passkey claims read exact match in each mode.
    Variants of one trained model (a scaling or temperature at inference, a fine-tune from it, two
    lengths of one model) are compared with paired per-seed differences; different trainings with
    Welch's test. Claims of no rise are non-inferiority tests with the margin :data:`PPL_MARGIN_PCT`.

    Returns:
        ``ClaimResult.as_row()`` rows with ``kind: "claim"`` (the claim's kind under ``claim_kind``),
        ``paper``, ``mode``, ``metric``, and the two sides' names ``a_name`` / ``b_name``.
    """
    context = config["training"]["context"]
    evaluation = config["evaluation"]
    ppl_lengths, pk_lengths = evaluation["ppl_lengths"], evaluation["passkey_lengths"]
    longest, pk_longest = ppl_lengths[-1], pk_lengths[-1]
    factor = config["scalings"]["factor"]
    multiple = config["finetune"]["multiple"]
    modes = config["passkey_modes"]
    ppl_mode = "zero_shot" if "zero_shot" in modes else modes[0]
    margin = math.log(1 + PPL_MARGIN_PCT / 100)

    def length_or_none(n: float) -> int | None:
        n = int(round(n))
        return n if n in ppl_lengths else None

    ext = length_or_none(factor * context)  # the length a factor-s scaling is meant for
    ft_len = length_or_none(multiple * context)  # the fine-tune length
    out: list[dict[str, Any]] = []

    def ppl(name: str, length: int | None, swept: float | None = None):
        return per_seed(rows, name, ppl_mode, "log_ppl", length, swept)

    def add(paper: str, text: str, mode: str, metric: str, a_name: str, a, b_name: str, b, *, paired: bool,
            higher: bool = False, kind: str = "difference", preconditions=(), bounds=None) -> None:
        options = dict(kind=kind, higher_is_better=higher, paired=paired, bounds=bounds,
                       margin=margin if kind != "difference" else None)
        if a is None or b is None:
            claim = untested_claim(text, f"{a_name if a is None else b_name} not measured in this run", **options)
        else:
            seeds = sorted(set(a) & set(b)) if paired else None
            va = [a[s] for s in seeds] if paired else [a[s] for s in sorted(a)]
            vb = [b[s] for s in seeds] if paired else [b[s] for s in sorted(b)]
            enough = min(len(va), len(vb)) >= MIN_SEEDS
            claim = decide_claim(va, vb, name=text, preconditions=(
                (enough, f"fewer than {MIN_SEEDS} seeds per side: no interval"), *preconditions), **options)
        row = claim.as_row()
        row["claim_kind"] = row.pop("kind")
        out.append({"kind": "claim", "paper": paper, "mode": mode, "metric": metric, "a_name": a_name,
                    "b_name": b_name, **row})

    rise = f"+{PPL_MARGIN_PCT:g} % perplexity"
    log_ppl = f"log perplexity (nats/byte) at {longest} vs at {context}, paired per seed"
    press = "Press et al. 2022 (ALiBi, arXiv:2108.12409)"
    bam = "Bianchessi et al. 2025 (BAM, arXiv:2505.22842)"
    for name, paper in (("alibi", press), ("kerple", "Chi et al. 2022 (KERPLE, arXiv:2205.09921)"),
                        ("fire", "Li et al. 2023 (FIRE, arXiv:2310.04418)"), ("bam", bam), ("bam_ssmax", bam)):
        add(paper, f"{name}'s perplexity does not rise past the training context ({longest // context}x; "
            f"non-inferiority, margin {rise})", ppl_mode, log_ppl, f"{name}@{longest}", ppl(name, longest),
            f"{name}@{context}", ppl(name, context), paired=True, kind="noninferiority")
    add(press, "RoPE's perplexity rises past the training context", ppl_mode, log_ppl, f"rope@{context}",
        ppl("rope", context), f"rope@{longest}", ppl("rope", longest), paired=True)
    at_long = f"log perplexity at {longest}"
    add(press, "ALiBi extrapolates better than RoPE", ppl_mode, at_long, "alibi", ppl("alibi", longest), "rope",
        ppl("rope", longest), paired=False)
    add(bam, f"BAM-SSMax extrapolates at least as well as ALiBi (non-inferiority, margin {rise})", ppl_mode, at_long,
        "bam_ssmax", ppl("bam_ssmax", longest), "alibi", ppl("alibi", longest), paired=False, kind="noninferiority")

    at_ext = f"log perplexity at {ext} ({factor:g}x, factor {factor:g}, no fine-tune), paired per seed"
    for name, paper in (("rope+ntk", "bloc97 2023 (NTK-aware scaling)"),
                        ("rope+yarn", "Peng et al. 2023 (YaRN, arXiv:2309.00071)"),
                        ("rope+llama3", "Meta 2024 (Llama 3.1 scaling, arXiv:2407.21783)"),
                        ("rope+longrope", "Ding et al. 2024 (LongRoPE, arXiv:2402.13753)")):
        add(paper, f"{name} at inference beats plain RoPE at {factor:g}x the context", ppl_mode, at_ext, name,
            ppl(name, ext), "rope", ppl("rope", ext), paired=True)
    for other in ("rope+linear", "rope+ntk"):
        add("Peng et al. 2023 (YaRN, arXiv:2309.00071)", f"YaRN beats {other.split('+')[1]} at the same factor "
            "without fine-tuning", ppl_mode, at_ext, "rope+yarn", ppl("rope+yarn", ext), other, ppl(other, ext),
            paired=True)
    longrope = untested_claim("searched non-uniform rescale factors beat PI / NTK / YaRN",
                              "the evolutionary search is not run (long factors taken from NTK-by-parts)").as_row()
    longrope["claim_kind"] = longrope.pop("kind")
    out.append({"kind": "claim", "paper": "Ding et al. 2024 (LongRoPE, arXiv:2402.13753)", "mode": ppl_mode,
                "metric": "-", "a_name": "rope+longrope (searched)", "b_name": "rope+linear / ntk / yarn", **longrope})
    add("emozilla 2023 (dynamic NTK; HF 'dynamic')", "dynamic NTK at inference beats plain RoPE past the context",
        ppl_mode, f"{at_long} (scale follows the length), paired per seed", "rope+dynamic",
        ppl("rope+dynamic", longest), "rope", ppl("rope", longest), paired=True)
    at_ft = f"log perplexity at {ft_len} (the fine-tune length, {multiple}x), paired per seed"
    pi = "Chen et al. 2023 (PI, arXiv:2306.15595)"
    add(pi, "PI with a short fine-tune extends the context past plain RoPE", ppl_mode, at_ft, "rope+linear+ft",
        ppl("rope+linear+ft", ft_len), "rope", ppl("rope", ft_len), paired=True)
    add(pi, "PI needs the fine-tune: fine-tuned beats inference-only at the same factor", ppl_mode, at_ft,
        "rope+linear+ft", ppl("rope+linear+ft", ft_len), f"rope+linear (factor {multiple})",
        ppl("rope+linear", ft_len, multiple), paired=True)
    add("Peng et al. 2023 (YaRN, arXiv:2309.00071)", "a short YaRN fine-tune beats YaRN at inference at the same "
        "factor", ppl_mode, at_ft, "rope+yarn+ft", ppl("rope+yarn+ft", ft_len), f"rope+yarn (factor {multiple})",
        ppl("rope+yarn", ft_len, multiple), paired=True)

    wang = "Wang et al. 2024 (NoPE length generalization, arXiv:2404.12224)"
    # read where the papers' extension is about (8x, 16x the context), not at 2x, where NoPE's in-distribution
    # perplexity gap to RoPE dominates; the longest length when the preset has neither
    far = [n for n in (8 * context, 16 * context) if n in ppl_lengths] or [longest]
    for n in far:
        add(wang, f"NoPE extends past its training context further than RoPE (read at {n // context}x)", ppl_mode,
            f"log perplexity at {n} ({n // context}x)", "nope", ppl("nope", n), "rope", ppl("rope", n), paired=False)
    for name in ("nope+temp1.2", "nope+temp1.5", "nope+headscale"):
        add(wang, f"{name} improves on NoPE past the context", ppl_mode, at_ft, name, ppl(name, ft_len), "nope",
            ppl("nope", ft_len), paired=True)
    uniform = [(n, ppl(n, ft_len)) for n in ("nope+temp1.2", "nope+temp1.5") if ppl(n, ft_len) is not None]
    best_name, best = min(uniform, key=lambda nv: math.fsum(nv[1].values()) / len(nv[1])) if uniform else (
        "best uniform scale", None)
    add(wang, "HeadScale beats the best uniform scale (chosen by its mean here)", ppl_mode, at_ft, "nope+headscale",
        ppl("nope+headscale", ft_len), best_name, best, paired=True)

    unit = (0.0, 1.0)
    for mode in modes:
        def exact(name: str, length: int | None, mode: str = mode):
            return per_seed(rows, name, mode, "passkey_exact", length)

        def learned(*names: str, mode: str = mode) -> tuple[bool, str]:
            """Precondition: every side retrieves some passkey at the training context (any seed, prompt)."""
            none = [n for n in names if (at := exact(n, context, mode)) is not None and max(at.values()) <= 0]
            return (not none, f"{', '.join(none)}: no passkey retrieved at the training context {context}, so "
                              "retrieval past it is not a test of extrapolation")

        metric = f"passkey exact match at {pk_longest} ({pk_longest // context}x)"
        for other in ("alibi", "rope"):
            add(bam, f"BAM-SSMax retrieves the passkey past the training context better than {other}", mode, metric,
                "bam_ssmax", exact("bam_ssmax", pk_longest), other, exact(other, pk_longest), higher=True,
                paired=False, bounds=unit, preconditions=[learned("bam_ssmax", other)])
        pk_ft = ft_len if ft_len in pk_lengths else None
        add(wang, "HeadScale extends NoPE's passkey retrieval", mode,
            f"passkey exact match at {pk_ft}, paired per seed", "nope+headscale", exact("nope+headscale", pk_ft),
            "nope", exact("nope", pk_ft), higher=True, paired=True, bounds=unit,
            preconditions=[learned("nope+headscale", "nope")])
    return out


# ------------------------------------------------------------------------------------------- plots
def _fmt_len(length: int) -> str:
    return f"{length // 1024}k" if length >= 1024 and length % 1024 == 0 else str(length)


def _errorbar(ax, entries: list[dict[str, Any]], key: str, **style) -> None:
    finite = [e for e in entries if e["n"] and math.isfinite(e["mean"])]
    xs = [e[key] for e in finite]
    ys = [e["mean"] for e in finite]
    low = [e["mean"] - e["low"] if math.isfinite(e["low"]) else 0.0 for e in finite]
    high = [e["high"] - e["mean"] if math.isfinite(e["high"]) else 0.0 for e in finite]
    ax.errorbar(xs, ys, yerr=[low, high], capsize=2, **style)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_ppl(summary: list[dict[str, Any]], mode: str, context: int):
    """Perplexity vs length of every variant of ``mode``: a figure."""
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    plt = _pyplot()
    entries = [s for s in summary if s["mode"] == mode]
    fig, ax = plt.subplots(figsize=(9, 5))
    colors = plt.get_cmap("tab10").colors
    bases = list(dict.fromkeys(VARIANTS[s["variant"]].base for s in entries))
    markers = "o^sDvP*X<>"
    seen: dict[str, int] = {}
    for entry in entries:
        variant = VARIANTS[entry["variant"]]
        style = ":" if variant.finetune else ("--" if variant.encoding else "-")
        index = seen[variant.base] = seen.get(variant.base, -1) + 1
        _errorbar(ax, entry["ppl"], "length", linestyle=style, marker=markers[index % len(markers)], markersize=4,
                  color=colors[bases.index(variant.base) % len(colors)], label=entry["variant"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    empty = note_if_empty(ax, "validation perplexity")
    lengths = sorted({e["length"] for s in entries for e in s["ppl"]})
    if lengths:
        ax.xaxis.set_major_locator(FixedLocator(lengths))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(ScalarFormatter())
    low, high = ax.get_ylim()
    if not empty and high / low < 10:  # within one decade the log axis has no major tick: label the minor ones
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.axvline(context, color="grey", linestyle="--", linewidth=1)
    ax.text(context, ax.get_ylim()[1], " training context", va="top", fontsize=8, color="grey")
    ax.set_xlabel("evaluation length (bytes; the same scored bytes at every length)")
    ax.set_ylabel("validation perplexity (bytes)")
    seeds = max((len(s["seeds"]) for s in entries), default=0)
    ax.set_title(f"Perplexity vs length, {mode} models, mean and 95 % interval over {seeds} seeds\n"
                 "(solid: as trained; dashed: swapped at inference; dotted: fine-tuned)", fontsize=9)
    if not empty:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def plot_sweep(summary: list[dict[str, Any]], context: int):
    """Perplexity vs length per swept factor of each fixed-factor scaling: a figure."""
    plt = _pyplot()
    entries = [s for s in summary if s["sweep"]]
    count = max(1, len(entries))
    fig, axes = plt.subplots(1, count, figsize=(3.6 * count, 3.4), squeeze=False, sharey=True)
    cmap = plt.get_cmap("viridis")
    for ax, entry in zip(axes.flat, entries):
        for i, swept in enumerate(entry["sweep"]):
            _errorbar(ax, swept["ppl"], "length", marker="o", markersize=3,
                      color=cmap(i / max(1, len(entry["sweep"]) - 1)), label=f"factor {swept['factor']:g}")
        rope = next((s for s in summary if s["variant"] == "rope" and s["mode"] == entry["mode"]), None)
        if rope is not None:
            _errorbar(ax, rope["ppl"], "length", color="black", linestyle="--", label="rope (no scaling)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.axvline(context, color="grey", linestyle="--", linewidth=1)
        ax.set_title(entry["variant"], fontsize=9)
        ax.set_xlabel("length (bytes)", fontsize=8)
        ax.legend(fontsize=6)
    if not entries:
        note_if_empty(axes[0, 0], "factor sweep", reason="no fixed-factor scaling variant with a sweep ran")
    axes[0, 0].set_ylabel("validation perplexity (bytes)")
    fig.suptitle("Fixed-factor RoPE scalings at inference, by factor (zero-shot models, mean and 95 % interval)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_passkey(summary: list[dict[str, Any]], mode: str, context: int):
    """Passkey digit accuracy per (length, depth), one panel per variant of ``mode``: a figure."""
    import numpy as np

    plt = _pyplot()
    entries = [s for s in summary if s["mode"] == mode]
    count = max(1, len(entries))
    columns = min(4, count)
    rows_n = math.ceil(count / columns)
    fig, axes = plt.subplots(rows_n, columns, figsize=(3.6 * columns, 2.7 * rows_n), squeeze=False,
                             layout="constrained")
    image = None
    for ax, entry in zip(axes.flat, entries):
        lengths = sorted({p["length"] for p in entry["passkey_cells"]})
        depths = sorted({p["depth"] for p in entry["passkey_cells"]})
        grid = np.full((len(depths), len(lengths)), np.nan)
        for p in entry["passkey_cells"]:
            if p["digit_accuracy"]["n"]:
                grid[depths.index(p["depth"]), lengths.index(p["length"])] = p["digit_accuracy"]["mean"]
        shown = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        if not note_if_empty(ax, "passkey digit accuracy"):
            image = shown
        for (i, j), value in np.ndenumerate(grid):
            if math.isfinite(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6,
                        color="white" if value < 0.6 else "black")
        ax.set_xticks(range(len(lengths)), [_fmt_len(n) for n in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=7)
        ax.set_title(entry["variant"], fontsize=9)
        ax.set_xlabel("length (bytes)", fontsize=7)
        if ax in axes[:, 0]:
            ax.set_ylabel("needle depth", fontsize=7)
    if not entries:
        note_if_empty(axes[0, 0], "passkey digit accuracy", reason=f"no {mode} run")
    for ax in list(axes.flat)[len(entries):]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="passkey digit accuracy (mean over seeds)")
    fig.suptitle(f"Passkey retrieval, {mode} models (teacher-forced digit accuracy, chance 0.1); training context "
                 f"{context}", fontsize=10)
    return fig


# ------------------------------------------------------------------------------------------ report
MODE_TITLES = {"zero_shot": "zero-shot models (trained on text only)",
               "trained": "passkey-trained models (passkey rows in training)"}


def _iv(summary: dict[str, Any] | None, fmt: str = ".2f") -> str:
    """``mean [low, high]``; ``mean`` alone with one seed; ``-`` for nothing (n is in the table's heading)."""
    if summary is None or summary["n"] == 0:
        return "-"
    if not math.isfinite(summary["mean"]):
        return "n/a"
    extra = f" ({summary['n_nonfinite']} non-finite)" if summary.get("n_nonfinite") else ""
    if not (math.isfinite(summary["low"]) and math.isfinite(summary["high"])):
        return f"{summary['mean']:{fmt}}{extra}"
    return f"{summary['mean']:{fmt}} [{summary['low']:{fmt}}, {summary['high']:{fmt}}]{extra}"


def _memory_text(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    head = (f"One causal attention layer with `{row['encoding']}`, L = {row['length']:,}, batch 1, {row['num_heads']} "
            f"heads, head_dim {row['head_dim']}, float32, no grad, query blocks of {row['query_block_size']}, "
            f"{row['threads']} thread, in a forked process (peak RSS growth, input and output included).\n\n")
    if row["status"] != "ok":
        return "## Memory\n\n" + head + f"Status: {row['status']}\n"
    table = markdown_table([row], [("length", "L"), ("peak_mib", "peak MiB"), ("seconds", "seconds"),
                                   ("output_finite", "finite output")], {"peak_mib": ".1f", "seconds": ".2f"})
    return "## Memory\n\n" + head + table


def _length_table(entries: list[dict[str, Any]], key: str, lengths: list[int], context: int, fmt: str) -> str:
    columns = [f"x{n // context}" if n % context == 0 else str(n) for n in lengths]
    rows = [{"variant": e["variant"], "n": len(e["seeds"]),
             **{c: _iv(_at(e[key], "length", n), fmt) for n, c in zip(lengths, columns)}} for e in entries]
    return markdown_table(rows, ["variant", ("n", "seeds"), *columns])


def _claim_evidence(claim: dict[str, Any]) -> str:
    if claim["verdict"] == "untested":
        sides = "" if not claim["a"]["n"] else (f"{claim['a_name']} {format_side(claim['a'])} vs {claim['b_name']} "
                                               f"{format_side(claim['b'])}; ")
        return sides + claim["reason"]
    d = claim["difference"]
    text = (f"{claim['metric']}: {claim['a_name']} {format_side(claim['a'])} vs {claim['b_name']} "
            f"{format_side(claim['b'])}; difference (positive: the paper's direction) {d['mean']:+.3f} "
            f"[{d['low']:+.3f}, {d['high']:+.3f}], {claim['test']}: {claim['reason']}")
    if claim.get("min_detectable_effect"):
        text += f" (smallest effect this n detects: {claim['min_detectable_effect']:.3f})"
    return text


def build_report(config: Config, rows: list[dict[str, Any]], derived: list[dict[str, Any]]) -> str:
    preset = dataclasses.asdict(config)
    context = config.training.context
    training_rows = [r for r in rows if r["kind"] == "training"]
    memory = next((r for r in rows if r["kind"] == "memory"), None)
    summary = [d for d in derived if d["kind"] == "summary"]
    claim_list = [d for d in derived if d["kind"] == "claim"]
    model, training, ft = preset["model"], preset["training"], preset["finetune"]
    evaluation, scalings = preset["evaluation"], preset["scalings"]
    if not training_rows:
        return _memory_text(memory)
    parameters = training_rows[0]["parameters_without_pe"]
    body = (
        f"Model: byte-level decoder, {model} (same trunk for every encoder; {parameters:,} parameters without the "
        f"PE), trained {training['steps']} steps of batch {training['batch_size']} x {context} bytes, AdamW lr "
        f"{training['lr']}, on the standard-library corpus; seeds {config.seeds} (model initialisation and "
        f"training windows; one document split, split seed {training['split_seed']}, for all). One run per "
        "(base, mode, seed) trains the base and evaluates all its variants from its weights. Passkey modes: "
        f"{', '.join(config.passkey_modes)} (zero-shot: no passkey rows in training; trained: "
        + (f"only {', '.join(config.trained_variants)}, " if config.trained_variants else "")
        + f"{training['passkey_fraction']:.0%} of each batch passkey prompts, {training['passkey_template']} template, "
        f"loss on the answer only, averaged per row). Fine-tunes: {ft['steps']} steps of batch {ft['batch_size']} at "
        f"{ft['multiple']}x the context (lr {ft['lr']} for every weight, {ft['positional_lr']} for HeadScale alone), "
        f"on the data of the model's mode. Fixed-factor RoPE scalings at inference use factor {scalings['factor']:g} "
        f"(swept over {scalings['sweep_factors']} on the zero-shot models); dynamic NTK uses HF's rule with factor "
        f"{scalings['dynamic_factor']:g}: NTK scale {scalings['dynamic_factor']:g} x max(l, {context}) / {context} - "
        f"{scalings['dynamic_factor'] - 1:g} at evaluated length l.\n\n"
        f"Perplexity: the first {evaluation['ppl_tokens']:,} held-out bytes of the validation split, cut into "
        f"windows of each length, so every length scores the same {evaluation['ppl_tokens']:,} bytes. Passkey: "
        f"{evaluation['passkey_samples']} prompts per (length, depth), depths {evaluation['passkey_depths']}, 5-digit "
        "keys, scored teacher-forced (exact match = all 5 digits right = what greedy decoding gives). Every cell: "
        "mean over seeds [Student-t 95 % interval].\n\n"
    )
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in training_rows:
        groups.setdefault((r["base"], r["mode"]), []).append(r)
    table = [{"base": b, "mode": m, "n": len(rs), "seconds": math.fsum(r["seconds"] for r in rs) / len(rs),
              "loss": _iv(side([r["final_train_loss"] for r in rs]).as_dict(), ".3f")} for (b, m), rs in groups.items()]
    body += "## Training\n\n" + markdown_table(
        table, ["base", "mode", ("n", "seeds"), ("loss", "final loss (nats/byte)"), ("seconds", "seconds (mean)")],
        {"seconds": ".0f"})
    if claim_list:
        counts = {v: sum(c["verdict"] == v for c in claim_list)
                  for v in ("reproduced", "contradicted", "inconclusive", "untested")}
        claim_rows = [{"verdict": f"**{c['verdict']}**", "evidence": _claim_evidence(c),
                       **{k: c[k] for k in ("paper", "name", "mode")}} for c in claim_list]
        body += (
            "\n## Against the papers' claims\n\n"
            "Decided by `pe_toolkit.bench.verdict.decide_claim` from the 95 % interval of the difference (log "
            "perplexity: nats per byte; passkey: exact match): *reproduced* when it lies on the paper's side of 0, "
            "*contradicted* when on the other, *inconclusive* otherwise. Variants of one trained model (a scaling or "
            "temperature at inference, a fine-tune from it, two lengths of one model) are paired per seed; different "
            f"trainings use Welch's test. Claims of no rise are non-inferiority tests with a margin of "
            f"{PPL_MARGIN_PCT:g} % perplexity (log {1 + PPL_MARGIN_PCT / 100:g}): reproduced only when the 90 % "
            "interval shows a rise below it. *Untested*: a side not measured, fewer than "
            f"{MIN_SEEDS} seeds, a non-finite run, or (passkey) no passkey retrieved at the training context. "
            "NoPE against RoPE (Wang et al.) is read at 8x and 16x the context where the preset has them (at 2x "
            "NoPE's in-distribution gap dominates). "
            f"Here: {counts['reproduced']} reproduced, {counts['contradicted']} contradicted, "
            f"{counts['inconclusive']} inconclusive, {counts['untested']} untested.\n\n"
            + markdown_table(claim_rows, ["paper", ("name", "claim"), "mode", "verdict", "evidence"])
        )
    unlearned = passkey_learned(summary, context)
    for mode in config.passkey_modes:
        entries = [s for s in summary if s["mode"] == mode]
        if not entries:
            continue
        body += (f"\n## Validation perplexity (bytes) by length, {MODE_TITLES[mode]}, as a multiple of the training "
                 f"context {context}\n\n" + _length_table(entries, "ppl", evaluation["ppl_lengths"], context, ".2f"))
        if mode == "zero_shot":
            body += "\n![perplexity vs length](ppl_vs_length.png)\n"
        swept = [s for s in entries if s["sweep"]]
        if swept:
            lengths = evaluation["ppl_lengths"]
            sweep_rows = [{"variant": s["variant"], "factor": f"{entry['factor']:g}",
                           **{f"x{n // context}": _iv(_at(entry["ppl"], "length", n)) for n in lengths}}
                          for s in swept for entry in s["sweep"]]
            body += ("\n### Factor sweep of the fixed-factor scalings at inference (perplexity)\n\n"
                     + markdown_table(sweep_rows, ["variant", "factor", *[f"x{n // context}" for n in lengths]])
                     + "\n![factor sweep](factor_sweep.png)\n")
        body += (f"\n## Passkey retrieval, {MODE_TITLES[mode]}: exact match by length (mean over depths; "
                 f"{entries[0]['passkey_samples']} prompts per length and depth per seed)\n\n"
                 + _length_table(entries, "passkey_exact", evaluation["passkey_lengths"], context, ".2f")
                 + f"\nDigit accuracy (chance {PASSKEY_DIGIT_CHANCE}):\n\n"
                 + _length_table(entries, "passkey_digits", evaluation["passkey_lengths"], context, ".2f"))
        heatmap = "passkey_heatmap.png" if mode == "zero_shot" else "passkey_heatmap_trained.png"
        body += f"\n![passkey heatmap, {mode}]({heatmap})\n"
        if unlearned.get(mode):
            body += (f"\nNot retrieved at the training context (digit accuracy interval at most "
                     f"{2 * PASSKEY_DIGIT_CHANCE:.1f}, twice chance): {', '.join(unlearned[mode])}; their passkey "
                     "numbers at longer lengths say nothing about extrapolation.\n")
        greedy = [{"variant": s["variant"], "agree": f"{s['greedy_agrees']} of {len(s['seeds'])}",
                   "greedy": _iv(s["greedy_exact"])} for s in entries]
        body += ("\nGreedy decoding check at the training context (greedy exact match, and the seeds where it "
                 "equals the teacher-forced exact match):\n\n"
                 + markdown_table(greedy, ["variant", ("greedy", "greedy exact match"), ("agree", "agrees")]))
        entropy_rows = [{"variant": s["variant"], **{f"x{e['multiple']}": _iv(e) for e in s["entropy"]}}
                        for s in entries]
        body += (f"\nAttention entropy (bits, mean over layers, heads and queries), {mode}; rising entropy past the "
                 "training context is the 'distraction' of Wang et al. 2024:\n\n"
                 + markdown_table(entropy_rows, ["variant", *[f"x{m}" for m in evaluation["entropy_multiples"]]]))
        tuned = [{"variant": s["variant"], "kind": s["finetune"]["kind"], "context": s["finetune"]["context"],
                  "steps": s["finetune"]["steps"], "loss": _iv(s["finetune_loss"], ".3f")}
                 for s in entries if s["finetune"]]
        if tuned:
            body += f"\nFine-tunes ({mode}):\n\n" + markdown_table(
                tuned, ["variant", "kind", "context", "steps", ("loss", "final loss")])
    return body + "\n" + _memory_text(memory)


# ------------------------------------------------------------------------------------------ benchmark
class Extrapolation(Benchmark):
    name = "extrapolation"
    title = "Context-length extrapolation: perplexity and passkey retrieval"
    description = ("perplexity vs length and passkey retrieval past the training context: NoPE temperatures, RoPE "
                   "scalings (PI, NTK, YaRN, Llama 3.1, LongRoPE, dynamic), ALiBi, T5, KERPLE, FIRE, BAM")
    Config = Config
    key_fields = ("run",)

    def check(self, config: Config) -> None:
        """What the types do not say (they are checked already): ``ValueError`` naming the key."""
        def require(holds: bool, key: str, value: Any, allowed: str) -> None:
            if not holds:
                raise ValueError(f"extrapolation config: {key} must be {allowed}, got {value!r}")

        for key in ("seeds", "passkey_modes", "variants", "trained_variants"):
            value = getattr(config, key)
            require(value is None or (value and len(set(value)) == len(value)), key, value, "a non-empty distinct list")
        trained = config.trained_variants or []
        require(set(trained) <= set(config.variants), "trained_variants", trained, f"a subset of {config.variants}")
        evaluation, context = config.evaluation, config.training.context
        for key in ("ppl_lengths", "passkey_lengths"):
            lengths = getattr(evaluation, key)
            require(lengths == sorted(set(lengths)) and lengths[:1] == [context], f"evaluation.{key}", lengths,
                    f"a strictly increasing list starting at the training context {context}")
        bad = [n for n in evaluation.ppl_lengths if evaluation.ppl_tokens % n]
        require(not bad, "evaluation.ppl_tokens", evaluation.ppl_tokens,
                f"divisible by every ppl length (so each length scores the same tokens); not by {bad}")

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

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return memory_row(spec["memory"]) if "memory" in spec else train_and_evaluate(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        if row["kind"] == "memory":
            return f"memory {row['encoding']} L={row['length']}: {row.get('peak_mib')} MiB ({row['status']})"
        parts = []
        for v in row["variants"]:
            first, last = v["ppl"][0], v["ppl"][-1]
            parts.append(f"{v['variant']} ppl {first['ppl']:.2f}@{first['length']}->{last['ppl']:.3g}@{last['length']}")
        return (f"{row['base']} {row['mode']} seed {row['seed']}: loss {row['final_train_loss']:.3f}; "
                + "; ".join(parts) + f" ({row['run_seconds']:.0f}s)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        rows = variant_rows(result.rows)
        if not rows:
            return []
        return summarize(rows) + claims(rows, dataclasses.asdict(result.config))

    def plot(self, result: Result) -> dict[str, Any]:
        config = result.config
        summary = [d for d in result.derived if d["kind"] == "summary"]
        if not summary:
            return {}
        context, modes = config.training.context, config.passkey_modes
        figures = {"ppl_vs_length.png": plot_ppl(summary, "zero_shot" if "zero_shot" in modes else modes[0], context),
                   "factor_sweep.png": plot_sweep(summary, context)}
        for mode in modes:
            name = "passkey_heatmap.png" if mode == "zero_shot" else "passkey_heatmap_trained.png"
            figures[name] = plot_passkey(summary, mode, context)
        return figures

    def report(self, result: Result) -> str:
        return build_report(result.config, result.rows, result.derived) + f"\nTotal wall time {result.seconds:.0f} s.\n"


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="extrapolation", prog="python benchmarks/extrapolation.py"))
