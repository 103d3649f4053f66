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

Protocol, for every variant, mode and seed:

* perplexity at every length of ``evaluation.ppl_lengths`` on the *same* ``evaluation.ppl_tokens``
  held-out bytes (the first ones of the validation split), cut into windows of that length, so every
  length scores exactly the same targets;
* passkey retrieval on a length x depth grid, ``evaluation.passkey_samples`` prompts per cell (the
  template of the papers without its instruction prefix, so that it fits the short training
  context), scored teacher-forced in one forward pass per prompt: per-digit accuracy, and exact
  match of all five digits, which equals greedy decoding's exact match (checked with greedy
  decoding on ``evaluation.greedy_samples`` prompts per depth at the training context);
* the attention entropy at ``evaluation.entropy_multiples`` x the context.

Over the seeds: mean and Student-t 95 % interval (``common.mean_interval``) in every table, and
each paper claim is stated reproduced / not reproduced / untested from the intervals
(``common.interval_verdict``: a difference counts only where the intervals separate). Plus the
peak memory of one BAM attention layer at ``memory.length`` (batch 1, query blocks, forked process).

    python benchmarks/extrapolation.py --quick              # under 2 minutes on 2 cores
    python benchmarks/extrapolation.py --jobs 2             # the full CPU preset, under 2 hours on 2 cores
    python benchmarks/extrapolation.py --preset gpu --accelerator cuda
    python benchmarks/extrapolation.py --set scalings.factor=4 --set seeds=[0,1,2,3,4] --resume
    python benchmarks/extrapolation.py --variants bam alibi rope rope+yarn --resume
    python benchmarks/extrapolation.py --memory-only        # only the BAM attention-layer memory

Presets are the YAML files ``benchmarks/presets/extrapolation/{quick,full,gpu}.yaml`` (their comments
give the timings they were sized from); ``--config FILE`` and ``--set KEY.PATH=VALUE`` override them
(``--variants``, ``--steps``, ``--jobs``, ``--memory-length`` are shortcuts for preset keys).
``--accelerator`` / ``--devices`` / ``--precision`` reach every training and fine-tune run through
its spec; evaluation runs on the same device in float32.

Every trained model (``runs/<preset>/train__<base>__<mode>__s<seed>.pt``, a ``state_dict`` read back
with ``torch.load(weights_only=True)``) and every evaluated variant (``eval__<variant>__<mode>__s<seed>.json``)
is stored under ``results/extrapolation/runs/<preset>/``; ``--resume`` reuses a run only when its
whole spec matches: model, data, steps, seed, thread count, device and (for evaluations) the spec of
the model it evaluates.

Outputs: ``results.json`` (rows of kind ``training``, ``variant``, ``memory`` and ``failed``, plus the
per-seed ``summary`` and the ``claims`` in ``config``), ``report.md``, ``ppl_vs_length.png``,
``factor_sweep.png``, ``passkey_heatmap.png`` (zero-shot) and ``passkey_heatmap_trained.png``.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import math
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    Progress,
    RunStore,
    interval_verdict,
    markdown_table,
    mean_interval,
    note_if_empty,
    peak_memory_in_subprocess,
    quiet,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)
from presets import device_options, preset_from_args, trainer_options  # noqa: E402

NAME = "extrapolation"
MODES = ("zero_shot", "trained")
PASSKEY_DIGIT_CHANCE = 0.1  # one of ten digits
PASSKEY_ANSWER_BYTES = 6  # " " + 5 digits
MIB = 2**20


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
BASE_ENCODERS = list(dict.fromkeys(v.base for v in VARIANTS.values()))
FIXED_FACTOR_SCALINGS = ("linear", "ntk", "yarn", "llama3", "longrope")
# Bases are trained in this order: those whose variants take longest to evaluate first (the bias of
# bam / fire is rebuilt per query block and layer; rope has the most variants), so the run's tail is short.
TRAIN_ORDER = ["rope", "fire", "bam_ssmax", "bam", "kerple", "alibi", "nope", "t5"]


# ------------------------------------------------------------------------------------------ presets
def _fail(key: str, value: Any, allowed: str) -> None:
    raise ValueError(f"extrapolation preset: {key} must be {allowed}, got {value!r}")


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_preset(preset: dict[str, Any]) -> dict[str, Any]:
    """Validate a preset (from YAML, ``--config`` and ``--set``); ``ValueError`` naming the key.

    Returns:
        ``preset`` (unchanged).
    """
    seeds = preset.get("seeds")
    if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        _fail("seeds", seeds, "a non-empty list of distinct ints >= 0")
    modes = preset.get("passkey_modes")
    if not isinstance(modes, list) or not modes or len(set(modes)) != len(modes) or not set(modes) <= set(MODES):
        _fail("passkey_modes", modes, f"a non-empty list of distinct modes from {list(MODES)}")
    variants = preset.get("variants")
    if not isinstance(variants, list) or not variants or any(v not in VARIANTS for v in variants):
        _fail("variants", variants, f"a non-empty list of names from {list(VARIANTS)}")
    trained_variants = preset.get("trained_variants")
    if trained_variants is not None and (
            not isinstance(trained_variants, list) or not trained_variants
            or any(v not in variants for v in trained_variants)):
        _fail("trained_variants", trained_variants,
              f"null (every variant) or a non-empty list from variants {variants}")
    for key in ("threads", "jobs"):
        if not _positive_int(preset.get(key)):
            _fail(key, preset.get(key), "an int >= 1")
    training = preset["training"]
    for key in ("context", "steps", "batch_size", "warmup_steps"):
        if not _positive_int(training.get(key)):
            _fail(f"training.{key}", training.get(key), "an int >= 1")
    if not isinstance(training.get("split_seed"), int) or isinstance(training.get("split_seed"), bool):
        _fail("training.split_seed", training.get("split_seed"), "an int (the document split of every run)")
    max_bytes = training.get("max_bytes", "missing")
    if max_bytes is not None and not _positive_int(max_bytes):
        _fail("training.max_bytes", max_bytes, "null (the whole corpus) or an int >= 1 (a cap on its bytes)")
    fraction = training.get("passkey_fraction")
    if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction <= 1:
        _fail("training.passkey_fraction", fraction, "a number in (0, 1] (the trained mode's share of passkey rows)")
    context = training["context"]
    scalings = preset["scalings"]
    for key in ("factor", "dynamic_factor"):
        value = scalings.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 1:
            _fail(f"scalings.{key}", value, "a number >= 1")
    sweep = scalings.get("sweep_factors")
    if not isinstance(sweep, list) or any(
            not isinstance(f, (int, float)) or isinstance(f, bool) or f < 1 for f in sweep):
        _fail("scalings.sweep_factors", sweep, "a list of numbers >= 1 (may be empty)")
    if not _positive_int(preset["finetune"].get("multiple")):
        _fail("finetune.multiple", preset["finetune"].get("multiple"), "an int >= 1")
    evaluation = preset["evaluation"]
    for key in ("ppl_lengths", "passkey_lengths"):
        lengths = evaluation.get(key)
        if not isinstance(lengths, list) or not lengths or not all(_positive_int(n) for n in lengths) \
                or lengths != sorted(set(lengths)) or lengths[0] != context:
            _fail(f"evaluation.{key}", lengths,
                  f"a strictly increasing list of ints starting at the training context {context}")
    tokens = evaluation.get("ppl_tokens")
    bad = [n for n in evaluation["ppl_lengths"] if _positive_int(tokens) and tokens % n]
    if not _positive_int(tokens) or bad:
        _fail("evaluation.ppl_tokens", tokens,
              f"an int divisible by every ppl length (so each length scores the same tokens); not by {bad}")
    depths = evaluation.get("passkey_depths")
    if not isinstance(depths, list) or not depths or not all(
            isinstance(d, (int, float)) and not isinstance(d, bool) and 0 <= d <= 1 for d in depths):
        _fail("evaluation.passkey_depths", depths, "a non-empty list of numbers in [0, 1]")
    for key in ("passkey_samples", "greedy_samples", "passkey_batch_tokens", "block_size"):
        if not _positive_int(evaluation.get(key)):
            _fail(f"evaluation.{key}", evaluation.get(key), "an int >= 1")
    multiples = evaluation.get("entropy_multiples")
    if not isinstance(multiples, list) or not all(_positive_int(m) for m in multiples):
        _fail("evaluation.entropy_multiples", multiples, "a list of ints >= 1")
    return preset


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
        preset: the preset (``training.context``, ``scalings``, ``finetune``, ``model``).
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
def train_spec(preset: dict[str, Any], base: str, mode: str, seed: int, device: dict[str, Any]) -> dict[str, Any]:
    """Everything that changes a trained model: its identity for ``--resume``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if base not in BASE_ENCODERS:
        raise ValueError(f"base must be one of {BASE_ENCODERS}, got {base!r}")
    return {"base": base, "mode": mode, "seed": seed, "model": preset["model"], "training": preset["training"],
            "threads": preset["threads"], "device": device}


def eval_spec(preset: dict[str, Any], name: str, mode: str, seed: int, device: dict[str, Any]) -> dict[str, Any]:
    """Everything that changes one evaluated variant, the spec of the model it evaluates included."""
    if name not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}, got {name!r}")
    v = VARIANTS[name]
    sweep = []
    if v.factor == "scaling" and mode == "zero_shot":  # perplexity claims rest on the text-only models
        sweep = [{"factor": float(f), "options": resolve_options(v, preset, f)}
                 for f in preset["scalings"]["sweep_factors"]]
    return {
        "name": name, "base": v.base, "mode": mode, "seed": seed, "variant": dataclasses.asdict(v),
        "options": resolve_options(v, preset), "sweep": sweep,
        "finetune": preset["finetune"] if v.finetune else None, "evaluation": preset["evaluation"],
        "model": preset["model"], "training": preset["training"], "threads": preset["threads"], "device": device,
        "trained": train_spec(preset, v.base, mode, seed, device),
    }


def mode_variants(preset: dict[str, Any], mode: str) -> list[str]:
    """The variants evaluated in ``mode``: all of ``variants``, or ``trained_variants`` in the trained mode.

    The trained mode only carries passkey claims, so a preset may evaluate (and train bases for) fewer
    variants there.
    """
    if mode == "trained" and preset.get("trained_variants") is not None:
        return [v for v in preset["variants"] if v in preset["trained_variants"]]
    return list(preset["variants"])


def run_key(kind: str, name: str, mode: str, seed: int) -> str:
    return f"{kind}__{name}__{mode}__s{seed}"


# ------------------------------------------------------------------------------------ worker helpers
def _trainer(steps: int, device: dict[str, Any] | None):
    import lightning as L

    quiet()  # also when called in-process (tests), not only in worker_pool's workers
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


def train_base(spec: dict[str, Any], weights_path: str) -> dict[str, Any]:
    """Train one base encoder at the training context; save its ``state_dict``. Runs in a worker.

    Returns:
        a ``training`` row: final training loss, parameter counts, seconds, the spec.
    """
    import lightning as L
    import torch

    quiet()
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    training = spec["training"]
    L.seed_everything(spec["seed"], verbose=False)
    data = training_data(training, spec["mode"], spec["seed"], training["context"], training["batch_size"],
                         training["steps"])
    module = _module(spec, steps=training["steps"], warmup=training["warmup_steps"])
    trainer = _trainer(training["steps"], spec["device"])
    trainer.fit(module, data)
    torch.save({k: v.cpu() for k, v in module.state_dict().items()}, weights_path)
    return {
        "kind": "training",
        "base": spec["base"],
        "mode": spec["mode"],
        "seed": spec["seed"],
        "final_train_loss": float(trainer.callback_metrics.get("train/loss", float("nan"))),
        "parameters": module.model.num_parameters(),
        "parameters_without_pe": module.model.num_parameters(exclude_positional=True),
        "seconds": time.perf_counter() - start,
    }


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
    trainer = _trainer(ft["steps"], spec["device"])
    trainer.fit(module, data)
    module.model.requires_grad_(True)
    return {
        "kind": kind, "context": context, "steps": ft["steps"], "batch_size": ft["batch_size"],
        "lr": module.hparams.lr, "final_train_loss": float(trainer.callback_metrics.get("train/loss", float("nan"))),
        "seconds": time.perf_counter() - start,
    }


def build_variant(spec: dict[str, Any], weights_path: str):
    """The trained base model with the variant's encoding swapped in, fine-tuned if the variant says so.

    Returns:
        ``(module, finetune)``: the ``LanguageModelModule`` and the fine-tune's summary (or ``None``).
    """
    from pe_toolkit.checkpoint import load_weights

    variant = spec["variant"]
    module = _module(spec)
    module.load_state_dict(load_weights(weights_path))  # a corrupt stored model names its file
    if variant["encoding"] is not None:
        swap_encoding(module.model, variant["encoding"], spec["options"], per_layer=variant["per_layer"])
    finetune = _finetune(module, spec, variant["finetune"]) if variant["finetune"] else None
    return module, finetune


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


def evaluate_variant(spec: dict[str, Any], weights_path: str) -> dict[str, Any]:
    """Load a trained base model, derive the variant (swap / fine-tune), evaluate it. Runs in a worker.

    Returns:
        a ``variant`` row: ``ppl`` per length, ``sweep`` (perplexity per swept factor), ``passkey`` per
        (length, depth), ``passkey_by_length``, ``greedy_check``, ``entropy``, learned encoder
        parameters, seconds.
    """
    import torch

    from pe_toolkit.data import COMPACT_TEMPLATE, PAPER_TEMPLATE, passkey_accuracy, passkey_grid, sequential_windows
    from pe_toolkit.nn import attention_entropy

    quiet()
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    variant, training, evaluation = spec["variant"], spec["training"], spec["evaluation"]
    seed, context = spec["seed"], training["context"]
    template = {"compact": COMPACT_TEMPLATE, "paper": PAPER_TEMPLATE}[training["passkey_template"]]
    module, finetune = build_variant(spec, weights_path)
    device = eval_device(spec["device"])
    module.to(device).eval()
    set_query_block_size(module.model, evaluation["block_size"])
    data = training_data(training, spec["mode"], seed, context, 1, 1)
    data.setup()
    windows = equal_token_windows(data.val_bytes, evaluation["ppl_lengths"], evaluation["ppl_tokens"])
    batch_tokens = evaluation["passkey_batch_tokens"]

    def perplexities() -> list[dict[str, Any]]:
        out = []
        for length, w in windows.items():
            value = module.perplexity(w, batch_size=max(1, batch_tokens // length))
            out.append({"length": length, "ppl": value, "windows": int(w.shape[0]),
                        "tokens": int(w[:, 1:].numel())})
        return out

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
            passkey.append({
                "length": length, "depth": depth, "samples": len(cell),
                "digit_accuracy": sum(cell) / len(cell),
                "exact_match": sum(s == 1.0 for s in cell) / len(cell),
            })
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
    greedy_check = {
        "length": context, "examples": len(greedy_examples), "greedy_exact_match": greedy,
        "teacher_forced_exact_match": sum(s == 1.0 for s in forced) / len(forced),
    }

    entropy = []
    for multiple in evaluation["entropy_multiples"]:
        length = context * multiple
        tokens = sequential_windows(data.val_bytes, length, 1)[:, :-1].to(device)
        with torch.no_grad():
            per_head = attention_entropy(module.model, tokens)  # (layers, heads), bits
        entropy.append({
            "multiple": multiple, "length": length, "mean_bits": float(per_head.mean()),
            "per_layer_bits": [float(v) for v in per_head.mean(-1)],
        })

    return {
        "kind": "variant",
        "variant": spec["name"],
        "base": variant["base"],
        "mode": spec["mode"],
        "seed": seed,
        "encoding": variant["encoding"] or variant["base"],
        "options": spec["options"],
        "description": variant["description"],
        "finetune": finetune,
        "ppl": ppl,
        "sweep": sweep,
        "passkey": passkey,
        "passkey_by_length": by_length,
        "greedy_check": greedy_check,
        "entropy": entropy,
        "learned": _learned_parameters(module.model),
        "seconds": time.perf_counter() - start,
    }


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

    The calling process must not have run torch compute (see ``common.peak_memory_in_subprocess``).
    """
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


# --------------------------------------------------------------------------------------- summaries
def _at(items: list[dict[str, Any]] | None, key: str, value: Any) -> dict[str, Any] | None:
    for item in items or []:
        if item[key] == value:
            return item
    return None


def summarize(variant_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (variant, mode): every metric as ``mean_interval`` over the seeds.

    Returns:
        entries with ``variant``, ``mode``, ``seeds``, ``ppl`` / ``passkey_exact`` /
        ``passkey_digits`` (``[{"length", "mean", "low", "high", "n"}]``), ``sweep``
        (``[{"factor", "ppl": [...]}]``), ``passkey_cells`` (mean digit accuracy and exact match per
        (length, depth)), ``entropy``, ``greedy_agrees`` and the mean fine-tune loss.
    """
    order = {name: i for i, name in enumerate(VARIANTS)}
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in variant_rows:
        groups.setdefault((row["variant"], row["mode"]), []).append(row)
    out = []
    for (name, mode), rows in sorted(groups.items(), key=lambda kv: (MODES.index(kv[0][1]), order.get(kv[0][0], 99))):
        rows = sorted(rows, key=lambda r: r["seed"])

        def over(items_of, key: str, field_name: str, rows=rows) -> list[dict[str, Any]]:
            """``[{key: value, **mean_interval}]`` of ``field_name`` over the seeds, for each value of ``key``."""
            values = [p[key] for p in items_of(rows[0])]
            return [{key: v, **mean_interval([_at(items_of(r), key, v)[field_name] for r in rows
                                              if _at(items_of(r), key, v) is not None])}
                    for v in values]

        sweep = []
        for entry in rows[0]["sweep"]:
            factor = entry["factor"]
            per_seed = [_at(r["sweep"], "factor", factor) for r in rows]
            lengths = [p["length"] for p in entry["ppl"]]
            sweep.append({"factor": factor, "ppl": [
                {"length": n, **mean_interval([_at(s["ppl"], "length", n)["ppl"] for s in per_seed if s])}
                for n in lengths]})
        cells = []
        for cell in rows[0]["passkey"]:
            matches = [p for r in rows for p in r["passkey"]
                       if p["length"] == cell["length"] and p["depth"] == cell["depth"]]
            cells.append({"length": cell["length"], "depth": cell["depth"], "samples": cell["samples"],
                          "digit_accuracy": mean_interval([p["digit_accuracy"] for p in matches]),
                          "exact_match": mean_interval([p["exact_match"] for p in matches])})
        finetune_losses = [r["finetune"]["final_train_loss"] for r in rows if r.get("finetune")]
        out.append({
            "variant": name, "mode": mode, "seeds": [r["seed"] for r in rows],
            "description": rows[0]["description"],
            "ppl": over(lambda r: r["ppl"], "length", "ppl"),
            "sweep": sweep,
            "passkey_exact": over(lambda r: r["passkey_by_length"], "length", "exact_match"),
            "passkey_digits": over(lambda r: r["passkey_by_length"], "length", "digit_accuracy"),
            "passkey_samples": rows[0]["passkey"][0]["samples"] if rows[0]["passkey"] else 0,
            "passkey_cells": cells,
            "entropy": over(lambda r: r["entropy"], "multiple", "mean_bits"),
            "greedy_agrees": sum(r["greedy_check"]["greedy_exact_match"]
                                 == r["greedy_check"]["teacher_forced_exact_match"] for r in rows),
            "greedy_exact": mean_interval([r["greedy_check"]["greedy_exact_match"] for r in rows]),
            "finetune": rows[0]["finetune"],
            "finetune_loss": mean_interval(finetune_losses) if finetune_losses else None,
        })
    return out


def _find(summary: list[dict[str, Any]], name: str, mode: str) -> dict[str, Any] | None:
    return next((s for s in summary if s["variant"] == name and s["mode"] == mode), None)


def _interval_at(entry: dict[str, Any] | None, key: str, length: int | None, factor: float | None = None):
    if entry is None or length is None:
        return None
    items = entry[key]
    if factor is not None:
        swept = _at(entry["sweep"], "factor", float(factor))
        if swept is None:
            return None
        items = swept["ppl"]
    found = _at(items, "length", length)
    return None if found is None or found["n"] == 0 else found


def _iv(summary: dict[str, Any] | None, fmt: str = ".2f") -> str:
    """``mean [low, high]``; ``mean`` alone with one seed; ``-`` for nothing (n is in the table's heading)."""
    if summary is None or summary["n"] == 0:
        return "-"
    if not math.isfinite(summary["mean"]):
        return "n/a"
    if not (math.isfinite(summary["low"]) and math.isfinite(summary["high"])):
        return f"{summary['mean']:{fmt}}"
    return f"{summary['mean']:{fmt}} [{summary['low']:{fmt}}, {summary['high']:{fmt}}]"


def verdict(a: dict[str, Any] | None, b: dict[str, Any] | None, *, higher_is_better: bool,
            expect: tuple[str, ...]) -> str:
    """``"reproduced"`` when ``interval_verdict(a, b)`` is one of ``expect``, else ``"not reproduced"``;
    ``"untested"`` when a side was not measured or has fewer than 2 seeds (no interval)."""
    if a is None or b is None or a["n"] < 2 or b["n"] < 2:
        return "untested"
    return "reproduced" if interval_verdict(a, b, higher_is_better=higher_is_better) in expect else "not reproduced"


def claims(summary: list[dict[str, Any]], config: dict[str, Any]) -> list[dict[str, Any]]:
    """Each paper claim tested here: ``{"paper", "claim", "mode", "evidence", "verdict"}``.

    Verdicts come from the seed intervals (:func:`verdict`). Perplexity claims use the ``zero_shot``
    models (trained on text only, as the papers train) when that mode ran, passkey claims each mode.
    """
    context = config["training"]["context"]
    evaluation = config["evaluation"]
    ppl_lengths, pk_lengths = evaluation["ppl_lengths"], evaluation["passkey_lengths"]
    longest, pk_longest = ppl_lengths[-1], pk_lengths[-1]
    factor = config["scalings"]["factor"]
    multiple = config["finetune"]["multiple"]
    modes = config["passkey_modes"]
    ppl_mode = "zero_shot" if "zero_shot" in modes else modes[0]

    def length_or_none(n: float) -> int | None:
        n = int(round(n))
        return n if n in ppl_lengths else None

    ext = length_or_none(factor * context)  # the length a factor-s scaling is meant for
    ft_len = length_or_none(multiple * context)  # the fine-tune length
    twice = length_or_none(2 * context)
    out: list[dict[str, Any]] = []

    def ppl(name: str, length: int | None, swept: float | None = None):
        return _interval_at(_find(summary, name, ppl_mode), "ppl", length, swept)

    def add(paper: str, text: str, mode: str, a_name: str, a, b_name: str, b, *, higher: bool,
            expect: tuple[str, ...], metric: str, unlearned: list[str] | None = None) -> None:
        result = verdict(a, b, higher_is_better=higher, expect=expect)
        if a is None or b is None:
            missing = a_name if a is None else b_name
            evidence = f"{missing} not measured in this run"
        else:
            evidence = f"{metric}: {a_name} {_iv(a)} vs {b_name} {_iv(b)}"
            if result == "untested":
                evidence += " (fewer than 2 seeds: no interval)"
            elif unlearned:
                result = "untested"
                evidence += (f" ({', '.join(unlearned)}: no passkey retrieved at the training context {context}, "
                             "so retrieval past it is not a test of extrapolation)")
        out.append({"paper": paper, "claim": text, "mode": mode, "evidence": evidence, "verdict": result})

    no_rise = ("better", "tie")
    press = "Press et al. 2022 (ALiBi, arXiv:2108.12409)"
    at_long, at_ctx = f"PPL at {longest}", f"PPL at {longest} vs at {context}"
    for name, paper in (("alibi", press), ("kerple", "Chi et al. 2022 (KERPLE, arXiv:2205.09921)"),
                        ("fire", "Li et al. 2023 (FIRE, arXiv:2310.04418)"),
                        ("bam", "Bianchessi et al. 2025 (BAM, arXiv:2505.22842)"),
                        ("bam_ssmax", "Bianchessi et al. 2025 (BAM, arXiv:2505.22842)")):
        add(paper, f"{name}'s perplexity does not rise past the training context ({longest // context}x)", ppl_mode,
            f"{name}@{longest}", ppl(name, longest), f"{name}@{context}", ppl(name, context), higher=False,
            expect=no_rise, metric=at_ctx)
    add(press, "RoPE's perplexity rises past the training context", ppl_mode, f"rope@{longest}", ppl("rope", longest),
        f"rope@{context}", ppl("rope", context), higher=False, expect=("worse",), metric=at_ctx)
    add(press, "ALiBi extrapolates better than RoPE", ppl_mode, "alibi", ppl("alibi", longest), "rope",
        ppl("rope", longest), higher=False, expect=("better",), metric=at_long)
    add("Bianchessi et al. 2025 (BAM, arXiv:2505.22842)", "BAM-SSMax extrapolates at least as well as ALiBi",
        ppl_mode, "bam_ssmax", ppl("bam_ssmax", longest), "alibi", ppl("alibi", longest), higher=False,
        expect=no_rise, metric=at_long)

    at_ext = f"PPL at {ext} ({factor:g}x, factor {factor:g}, no fine-tune)"
    for name, paper in (("rope+ntk", "bloc97 2023 (NTK-aware scaling)"),
                        ("rope+yarn", "Peng et al. 2023 (YaRN, arXiv:2309.00071)"),
                        ("rope+llama3", "Meta 2024 (Llama 3.1 scaling, arXiv:2407.21783)"),
                        ("rope+longrope", "Ding et al. 2024 (LongRoPE, arXiv:2402.13753)")):
        add(paper, f"{name} at inference beats plain RoPE at {factor:g}x the context", ppl_mode, name,
            ppl(name, ext), "rope", ppl("rope", ext), higher=False, expect=("better",), metric=at_ext)
    for other in ("rope+linear", "rope+ntk"):
        add("Peng et al. 2023 (YaRN, arXiv:2309.00071)", f"YaRN beats {other.split('+')[1]} at the same factor "
            "without fine-tuning", ppl_mode, "rope+yarn", ppl("rope+yarn", ext), other, ppl(other, ext),
            higher=False, expect=("better",), metric=at_ext)
    out.append({"paper": "Ding et al. 2024 (LongRoPE, arXiv:2402.13753)",
                "claim": "searched non-uniform rescale factors beat PI / NTK / YaRN", "mode": ppl_mode,
                "evidence": "the evolutionary search is not run (long factors taken from NTK-by-parts)",
                "verdict": "untested"})
    add("emozilla 2023 (dynamic NTK; HF 'dynamic')", "dynamic NTK at inference beats plain RoPE past the context",
        ppl_mode, "rope+dynamic", ppl("rope+dynamic", longest), "rope", ppl("rope", longest), higher=False,
        expect=("better",), metric=f"{at_long} (scale follows the length)")
    at_ft = f"PPL at {ft_len} (the fine-tune length, {multiple}x)"
    add("Chen et al. 2023 (PI, arXiv:2306.15595)", "PI with a short fine-tune extends the context past plain RoPE",
        ppl_mode, "rope+linear+ft", ppl("rope+linear+ft", ft_len), "rope", ppl("rope", ft_len), higher=False,
        expect=("better",), metric=at_ft)
    add("Chen et al. 2023 (PI, arXiv:2306.15595)", "PI needs the fine-tune: fine-tuned beats inference-only at the "
        "same factor", ppl_mode, "rope+linear+ft", ppl("rope+linear+ft", ft_len), f"rope+linear (factor {multiple})",
        ppl("rope+linear", ft_len, multiple), higher=False, expect=("better",), metric=at_ft)
    add("Peng et al. 2023 (YaRN, arXiv:2309.00071)", "a short YaRN fine-tune beats YaRN at inference at the same "
        "factor", ppl_mode, "rope+yarn+ft", ppl("rope+yarn+ft", ft_len), f"rope+yarn (factor {multiple})",
        ppl("rope+yarn", ft_len, multiple), higher=False, expect=("better",), metric=at_ft)

    wang = "Wang et al. 2024 (NoPE length generalization, arXiv:2404.12224)"
    add(wang, "NoPE extends past its training context further than RoPE", ppl_mode, "nope", ppl("nope", twice),
        "rope", ppl("rope", twice), higher=False, expect=("better",), metric=f"PPL at {twice} (2x)")
    for name in ("nope+temp1.2", "nope+temp1.5", "nope+headscale"):
        add(wang, f"{name} improves on NoPE past the context", ppl_mode, name, ppl(name, ft_len), "nope",
            ppl("nope", ft_len), higher=False, expect=("better",), metric=at_ft)
    uniform = [(n, ppl(n, ft_len)) for n in ("nope+temp1.2", "nope+temp1.5") if ppl(n, ft_len) is not None]
    best_name, best = min(uniform, key=lambda nv: nv[1]["mean"]) if uniform else ("best uniform scale", None)
    add(wang, "HeadScale beats the best uniform scale", ppl_mode, "nope+headscale", ppl("nope+headscale", ft_len),
        best_name, best, higher=False, expect=("better",), metric=at_ft)

    bam = "Bianchessi et al. 2025 (BAM, arXiv:2505.22842)"
    for mode in modes:
        def exact(name: str, length: int | None, mode: str = mode):
            return _interval_at(_find(summary, name, mode), "passkey_exact", length)

        def unlearned(*names: str, mode: str = mode) -> list[str]:
            """The variants that retrieve no passkey at all at the training context (every seed, prompt)."""
            return [n for n in names if (at := exact(n, context, mode)) is not None and at["mean"] <= 0]

        metric = f"passkey exact match at {pk_longest} ({pk_longest // context}x)"
        for other in ("alibi", "rope"):
            add(bam, f"BAM-SSMax retrieves the passkey past the training context better than {other}", mode,
                "bam_ssmax", exact("bam_ssmax", pk_longest), other, exact(other, pk_longest), higher=True,
                expect=("better",), metric=metric, unlearned=unlearned("bam_ssmax", other))
        pk_ft = ft_len if ft_len in pk_lengths else None
        add(wang, "HeadScale extends NoPE's passkey retrieval", mode, "nope+headscale",
            exact("nope+headscale", pk_ft), "nope", exact("nope", pk_ft), higher=True, expect=("better",),
            metric=f"passkey exact match at {pk_ft}", unlearned=unlearned("nope+headscale", "nope"))
    return out


def passkey_learned(summary: list[dict[str, Any]], context: int) -> dict[str, list[str]]:
    """Per mode, the variants whose digit accuracy at the training context is not above 2x chance
    (interval upper end at most 0.2): their passkey numbers at longer lengths say nothing."""
    floor = 2 * PASSKEY_DIGIT_CHANCE
    out: dict[str, list[str]] = {}
    for entry in summary:
        at = _interval_at(entry, "passkey_digits", context)
        if at is not None:
            high = at["high"] if math.isfinite(at["high"]) else at["mean"]
            if high <= floor:
                out.setdefault(entry["mode"], []).append(entry["variant"])
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


def plot_ppl(summary: list[dict[str, Any]], mode: str, context: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

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
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_sweep(summary: list[dict[str, Any]], context: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    entries = [s for s in summary if s["sweep"]]
    count = max(1, len(entries))
    fig, axes = plt.subplots(1, count, figsize=(3.6 * count, 3.4), squeeze=False, sharey=True)
    cmap = plt.get_cmap("viridis")
    for ax, entry in zip(axes.flat, entries):
        for i, swept in enumerate(entry["sweep"]):
            _errorbar(ax, swept["ppl"], "length", marker="o", markersize=3,
                      color=cmap(i / max(1, len(entry["sweep"]) - 1)), label=f"factor {swept['factor']:g}")
        rope = _find(summary, "rope", entry["mode"])
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_passkey(summary: list[dict[str, Any]], mode: str, context: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

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
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------ report
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


MODE_TITLES = {"zero_shot": "zero-shot models (trained on text only)",
               "trained": "passkey-trained models (passkey rows in training)"}


def _length_table(entries: list[dict[str, Any]], key: str, lengths: list[int], context: int, fmt: str) -> str:
    columns = [f"x{n // context}" if n % context == 0 else str(n) for n in lengths]
    rows = []
    for entry in entries:
        row = {"variant": entry["variant"], "n": len(entry["seeds"])}
        for n, column in zip(lengths, columns):
            row[column] = _iv(_at(entry[key], "length", n), fmt)
        rows.append(row)
    return markdown_table(rows, ["variant", ("n", "seeds"), *columns])


def build_report(config: dict[str, Any], rows: list[dict[str, Any]], summary: list[dict[str, Any]],
                 claim_list: list[dict[str, Any]], seconds: float) -> str:
    context = config["training"]["context"]
    training_rows = [r for r in rows if r["kind"] == "training"]
    failed = [r for r in rows if r["kind"] == "failed"]
    memory = next((r for r in rows if r["kind"] == "memory"), None)
    model, training, ft = config["model"], config["training"], config["finetune"]
    evaluation, scalings = config["evaluation"], config["scalings"]
    parameters = training_rows[0]["parameters_without_pe"] if training_rows else None
    body = (
        f"Preset `{config['preset']}`. Model: byte-level decoder, {model} (same trunk for every encoder; "
        + (f"{parameters:,} parameters without the PE" if parameters else "parameters n/a")
        + f"), trained {training['steps']} steps of batch {training['batch_size']} x {context} bytes, AdamW lr "
        f"{training['lr']}, on the standard-library corpus; seeds {config['seeds']} (model initialisation and "
        f"training windows; one document split, split seed {training['split_seed']}, for all), "
        f"{config['threads']} thread(s) per run, device {config['device']}. Passkey modes: "
        f"{', '.join(config['passkey_modes'])} (zero-shot: no passkey rows in training; trained: "
        + (f"only {', '.join(config['trained_variants'])}, " if config.get("trained_variants") else "")
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
    if failed:
        body += "**Failed runs:** " + "; ".join(f"{r['name']}: {r['error']}" for r in failed) + "\n\n"
    if training_rows:
        groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for r in training_rows:
            groups.setdefault((r["base"], r["mode"]), []).append(r)
        table = [{"base": b, "mode": m, "n": len(rs),
                  "loss": _iv(mean_interval([r["final_train_loss"] for r in rs]), ".3f"),
                  "seconds": statistics_mean([r["seconds"] for r in rs])}
                 for (b, m), rs in groups.items()]
        body += "## Training\n\n" + markdown_table(
            table, ["base", "mode", ("n", "seeds"), ("loss", "final loss (nats/byte)"), ("seconds", "seconds (mean)")],
            {"seconds": ".0f"})
    claim_rows = [{"verdict": f"**{c['verdict']}**", **{k: c[k] for k in ("paper", "claim", "mode", "evidence")}}
                  for c in claim_list]
    if claim_rows:
        counts = {v: sum(c["verdict"] == v for c in claim_list) for v in ("reproduced", "not reproduced", "untested")}
        body += (
            "\n## Against the papers' claims\n\n"
            "A claim is *reproduced* when the intervals over seeds separate in the claimed direction (for 'does not "
            "rise': when the longer length is not separated above the training context), *not reproduced* "
            "otherwise, *untested* when a side was not measured, has fewer than 2 seeds, or (passkey) retrieves no "
            "passkey at the training context. "
            f"Here: {counts['reproduced']} reproduced, {counts['not reproduced']} not reproduced, "
            f"{counts['untested']} untested.\n\n"
            + markdown_table(claim_rows, ["paper", "claim", "mode", "verdict", "evidence"])
        )
    unlearned = passkey_learned(summary, context)
    for mode in config["passkey_modes"]:
        entries = [s for s in summary if s["mode"] == mode]
        if not entries:
            continue
        body += (f"\n## Validation perplexity (bytes) by length, {MODE_TITLES[mode]}, as a multiple of the training "
                 f"context {context}\n\n"
                 + _length_table(entries, "ppl", evaluation["ppl_lengths"], context, ".2f"))
        if mode == "zero_shot":
            body += "\n![perplexity vs length](ppl_vs_length.png)\n"
        swept = [s for s in entries if s["sweep"]]
        if swept:
            lengths = evaluation["ppl_lengths"]
            sweep_rows = []
            for s in swept:
                for entry in s["sweep"]:
                    sweep_rows.append({"variant": s["variant"], "factor": f"{entry['factor']:g}",
                                       **{f"x{n // context}": _iv(_at(entry["ppl"], "length", n)) for n in lengths}})
            body += ("\n### Factor sweep of the fixed-factor scalings at inference (perplexity)\n\n"
                     + markdown_table(sweep_rows, ["variant", "factor", *[f"x{n // context}" for n in lengths]])
                     + "\n![factor sweep](factor_sweep.png)\n")
        samples = entries[0]["passkey_samples"]
        body += (f"\n## Passkey retrieval, {MODE_TITLES[mode]}: exact match by length (mean over depths; "
                 f"{samples} prompts per length and depth per seed)\n\n"
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
        entropy_cols = [f"x{m}" for m in evaluation["entropy_multiples"]]
        entropy_rows = [{"variant": s["variant"], **{f"x{e['multiple']}": _iv(e) for e in s["entropy"]}}
                        for s in entries]
        body += (f"\nAttention entropy (bits, mean over layers, heads and queries), {mode}; rising entropy past the "
                 "training context is the 'distraction' of Wang et al. 2024:\n\n"
                 + markdown_table(entropy_rows, ["variant", *entropy_cols]))
        tuned = [{"variant": s["variant"], "kind": s["finetune"]["kind"], "context": s["finetune"]["context"],
                  "steps": s["finetune"]["steps"], "loss": _iv(s["finetune_loss"], ".3f")}
                 for s in entries if s["finetune"]]
        if tuned:
            body += f"\nFine-tunes ({mode}):\n\n" + markdown_table(
                tuned, ["variant", "kind", "context", "steps", ("loss", "final loss")])
    body += "\n" + _memory_text(memory)
    body += f"\nTotal wall time {seconds:.0f} s.\n"
    return body


def statistics_mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


# -------------------------------------------------------------------------------------------- main
def load_preset_from_args(args, parser) -> dict[str, Any]:
    """The preset (``--preset``/``--quick``, ``--config``, ``--set``) with the shortcut flags applied."""
    try:
        preset = preset_from_args(args, NAME)
    except ValueError as error:
        parser.error(str(error))
    if args.variants is not None:
        preset["variants"] = list(args.variants)
    if args.steps is not None:
        if args.steps < 1:
            parser.error(f"--steps must be >= 1, got {args.steps}")
        preset["training"]["steps"] = args.steps
        preset["training"]["warmup_steps"] = max(1, min(preset["training"]["warmup_steps"], args.steps // 10))
    if args.jobs is not None:
        if args.jobs < 1:
            parser.error(f"--jobs must be >= 1, got {args.jobs}")
        preset["jobs"] = args.jobs
    if args.memory_length is not None:
        if args.memory_length < 1:
            parser.error(f"--memory-length must be >= 1, got {args.memory_length}")
        preset["memory"]["length"] = args.memory_length
    try:
        return check_preset(preset)
    except ValueError as error:
        parser.error(str(error))


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--variants", nargs="+", help=f"subset of {list(VARIANTS)} (preset key variants)")
    parser.add_argument("--steps", type=int, help="training steps per base model (preset key training.steps)")
    parser.add_argument("--jobs", type=int, help="runs in parallel, each with the preset's threads (preset key jobs)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs whose whole spec matches")
    parser.add_argument("--memory-only", action="store_true", help="only measure the BAM attention layer's memory")
    parser.add_argument("--memory-length", type=int, help="sequence length of the memory measurement "
                        "(preset key memory.length)")
    args = parser.parse_args(argv)
    preset = load_preset_from_args(args, parser)
    device = device_options(args)
    jobs = preset["jobs"]
    out_dir = Path(args.out) / NAME
    store = RunStore(out_dir / "runs" / preset["preset"], resume=args.resume)  # presets never overwrite each other
    start = time.perf_counter()

    memory_key = f"memory__{preset['memory']['encoding']}_L{preset['memory']['length']}"

    def memory_row() -> dict[str, Any]:
        stored = store.load(memory_key, preset["memory"])
        if stored is not None:
            return stored
        print(f"{NAME}: measuring one {preset['memory']['encoding']} attention layer at "
              f"L={preset['memory']['length']} in a forked process", flush=True)
        row = measure_memory(preset["memory"])  # this process has run no torch compute: forking is safe
        if row["status"] == "ok":
            store.save(memory_key, preset["memory"], row)
        return row

    if args.memory_only:
        row = memory_row()
        seconds = time.perf_counter() - start
        write_results(NAME, {"preset": preset["preset"], "memory_only": True, "memory": preset["memory"]}, [row],
                      seconds, root=args.out)
        write_report(NAME, "Extrapolation benchmark: attention memory only", _memory_text(row)
                     + f"\nTotal wall time {seconds:.0f} s.\n", root=args.out)
        print(f"{NAME}: memory {row.get('peak_mib')} MiB, {row.get('seconds')} s ({row['status']})", flush=True)
        return 0 if row["status"] == "ok" else 1

    variants, modes, seeds = preset["variants"], preset["passkey_modes"], preset["seeds"]
    bases = list(dict.fromkeys(VARIANTS[v].base for v in variants))
    evals = {(n, m, s): eval_spec(preset, n, m, s, device)
             for m in modes for n in mode_variants(preset, m) for s in seeds}
    trainings = {(VARIANTS[n].base, m, s): train_spec(preset, VARIANTS[n].base, m, s, device) for n, m, s in evals}
    weights = {k: store.runs_dir / (run_key("train", *k) + ".pt") for k in trainings}

    rows: list[dict[str, Any]] = []
    trained: set[tuple[str, str, int]] = set()
    train_todo, eval_todo = [], dict(evals)
    for key, spec in trainings.items():
        stored = store.load(run_key("train", *key), spec)
        if stored is not None and weights[key].exists():
            rows.append(stored)
            trained.add(key)
        else:
            train_todo.append(key)
    for key, spec in evals.items():
        stored = store.load(run_key("eval", *key), spec)
        if stored is not None and (spec["base"], key[1], key[2]) in trained:
            rows.append(stored)
            del eval_todo[key]
    reused = len(rows)
    total = len(train_todo) + len(eval_todo)
    print(f"{NAME}: preset {preset['preset']}: {len(trainings)} trained models (bases x modes x {len(seeds)} seeds), "
          f"{len(evals)} evaluations ({reused} runs reused), {jobs} in parallel", flush=True)
    progress = Progress(total, NAME)
    with worker_pool(jobs) as pool:
        futures: dict[concurrent.futures.Future, tuple[str, tuple]] = {}

        def submit_evals(train_key: tuple[str, str, int]) -> None:
            base, mode, seed = train_key
            for key, spec in list(eval_todo.items()):
                if spec["base"] == base and key[1] == mode and key[2] == seed:
                    futures[pool.submit(evaluate_variant, spec, str(weights[train_key]))] = ("eval", key)
                    del eval_todo[key]

        def order(key: tuple[str, str, int]) -> tuple:
            base, mode, seed = key
            return (seeds.index(seed), TRAIN_ORDER.index(base) if base in TRAIN_ORDER else len(TRAIN_ORDER),
                    modes.index(mode))

        for key in sorted(train_todo, key=order):
            futures[pool.submit(train_base, trainings[key], str(weights[key]))] = ("train", key)
        for key in trained:
            submit_evals(key)
        while futures:
            done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                kind, key = futures.pop(future)
                label = f"{kind} {key[0]} {key[1]} seed {key[2]}"
                try:
                    row = future.result()
                except Exception as error:  # noqa: BLE001  (report it, keep the other runs going)
                    message = "".join(traceback.format_exception_only(type(error), error)).strip()
                    rows.append({"kind": "failed", "name": label, "error": message[-300:]})
                    progress(f"{label}: FAILED {message.splitlines()[-1][:200]}")
                    if kind == "train":  # its variants cannot run
                        for eval_key in [k for k, s in eval_todo.items()
                                         if s["base"] == key[0] and k[1] == key[1] and k[2] == key[2]]:
                            rows.append({"kind": "failed", "name": f"eval {eval_key[0]} {key[1]} seed {key[2]}",
                                         "error": f"base model {key[0]} failed"})
                            del eval_todo[eval_key]
                    continue
                if kind == "train":
                    store.save(run_key("train", *key), trainings[key], row)
                    rows.append({**row, "spec": trainings[key]})
                    progress(f"trained {key[0]} ({key[1]}, seed {key[2]}): loss {row['final_train_loss']:.3f} "
                             f"({row['seconds']:.0f}s)")
                    submit_evals(key)
                else:
                    store.save(run_key("eval", *key), evals[key], row)
                    rows.append({**row, "spec": evals[key]})
                    first, last = row["ppl"][0], row["ppl"][-1]
                    pk = row["passkey_by_length"]
                    progress(f"{label}: ppl {first['ppl']:.2f} @{first['length']} -> {last['ppl']:.3g} "
                             f"@{last['length']}; passkey exact {pk[0]['exact_match']:.2f} @{pk[0]['length']}, "
                             f"{pk[-1]['exact_match']:.2f} @{pk[-1]['length']} ({row['seconds']:.0f}s)")

    rows.append(memory_row())
    order_of = {name: i for i, name in enumerate(VARIANTS)}
    kinds = {"training": 0, "variant": 1, "memory": 2, "failed": 3}
    rows.sort(key=lambda r: (kinds[r["kind"]], BASE_ENCODERS.index(r["base"]) if r["kind"] == "training" else 0,
                             order_of.get(r.get("variant"), 0), MODES.index(r["mode"]) if "mode" in r else 0,
                             r.get("seed", 0)))
    variant_rows = [r for r in rows if r["kind"] == "variant"]
    summary = summarize(variant_rows)
    config = {
        "preset": preset["preset"], "variants": variants, "trained_variants": preset.get("trained_variants"),
        "bases": bases, "seeds": seeds, "passkey_modes": modes,
        "model": preset["model"], "training": preset["training"], "scalings": preset["scalings"],
        "finetune": preset["finetune"], "evaluation": preset["evaluation"], "memory": preset["memory"],
        "threads": preset["threads"], "jobs": jobs, "device": device,
    }
    claim_list = claims(summary, config)
    seconds = time.perf_counter() - start
    write_results(NAME, {**config, "summary": summary, "claims": claim_list}, rows, seconds, root=args.out)
    context = preset["training"]["context"]
    plot_ppl(summary, "zero_shot" if "zero_shot" in modes else modes[0], context, out_dir / "ppl_vs_length.png")
    plot_sweep(summary, context, out_dir / "factor_sweep.png")
    for mode in modes:
        name = "passkey_heatmap.png" if mode == "zero_shot" else "passkey_heatmap_trained.png"
        plot_passkey(summary, mode, context, out_dir / name)
    write_report(NAME, "Context-length extrapolation: perplexity and passkey retrieval",
                 build_report(config, rows, summary, claim_list, seconds), root=args.out)
    print(f"{NAME}: wrote {out_dir} in {seconds:.0f} s", flush=True)
    return 1 if any(r["kind"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
