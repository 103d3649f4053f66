"""Context-length extrapolation on real text: perplexity vs length and passkey retrieval, per encoder.

Trains the same byte-level ``LanguageModelModule`` trunk once per base encoder (nope, rope, alibi, t5,
kerple, fire, bam, bam_ssmax) at a short context on Python's standard-library text, a quarter of each
batch being passkey prompts so that the models learn the retrieval format. The loss is averaged per
row (``loss_average="rows"``), so the passkey rows, scored on their 6 answer bytes only, carry a
quarter of the loss; averaged over tokens they carried 0.8 % (24 of 3,096 scored bytes per batch),
and no model learned retrieval even at the training context (digit accuracy at chance, 0.1).
Evaluation *variants* are derived from the trained weights (see :data:`VARIANTS`):

* NoPE with a uniform attention temperature (Wang et al. 2024, arXiv:2404.12224), applied at
  inference, and with HeadScale (one learned scale per head and layer, init 1.6, clamped >= 1,
  fine-tuned alone for a short run at a longer context, as the paper does);
* RoPE with position interpolation / NTK / dynamic NTK / YaRN applied at inference without
  retraining (factor = longest evaluated length / training context), and PI / YaRN after a short
  fine-tune at a longer context (factor = that context / the training context);
* the trained bias encoders as they are: ALiBi, T5, KERPLE, FIRE, BAM, BAM-SSMax
  (Bianchessi et al. 2025, arXiv:2505.22842).

Measured for every variant: validation perplexity at 1x .. 32x the training context (sequential
windows of held-out documents), passkey retrieval on a length x depth grid up to 64x the training
context (the template of the papers without its instruction prefix, so that it fits the short
training context; one teacher-forced forward pass per prompt: per-digit accuracy, and exact match
of all five digits, which equals greedy decoding's exact match — checked with greedy decoding at
the training context), the attention entropy at 1x and 8x the context, and the peak memory of one
BAM attention layer at L = 32,768 (batch 1, 4 heads, head_dim 32, query blocks of 1024, in a forked
process). Long inputs are evaluated with query blocks (``attention_block_size``) so memory stays
linear in the length.

    python benchmarks/extrapolation.py --quick          # pipeline check, about a minute on 2 cores
    python benchmarks/extrapolation.py                  # the full run (see the estimate below)
    python benchmarks/extrapolation.py --variants bam alibi rope rope+yarn --resume
    python benchmarks/extrapolation.py --memory-only    # only the BAM attention-layer memory

Full-run estimate, from timings measured on this 2-core machine while another job kept both cores
busy (one thread per process): the full model (dim 128, 4 heads, 4 layers, 824k parameters) trains
at 0.35-0.9 s per step of batch 16 x 256 bytes, so 3000 steps take 20-40 min per base encoder. One
forward pass with query blocks of 512 took 1.0 s (rope), 2.3 s (t5), 5.2 s (fire) and 6.4 s (bam)
at L = 4096, and 4.8 s (rope) and 37 s (bam) at L = 8192 (the bam bias is rebuilt for every query
block and layer); L = 16,384 costs about 4x that again. Evaluating one bam / bam_ssmax / fire variant
(perplexity to 8192, passkey grid to 16,384) therefore took ~20 min, an alibi / t5 / kerple variant
~8 min, a nope / rope variant ~3 min (plus ~3 min for a fine-tune). These times predate the
relative-distance table (``pe_toolkit.encoders.base.relative_distance_table``), which made the bias
of one 512 x 16,384 query block 3x cheaper for bam and t5 and 1.6x for kerple. The memory measurement at
L = 32,768 took 134 s. In all about 8 CPU-hours: **about 4 hours of wall time with ``--jobs 2``**.

Why 3000 steps and row-averaged loss: the passkey numbers at long lengths mean something only if a
model retrieves the key at its own training context. Measured with rope (seed 0, this preset
otherwise): 1500 steps with token-averaged loss gave digit accuracy 0.13 at 256 bytes (chance 0.1);
1500 steps with row-averaged loss 0.61 (first digit 1.00, exact match 0.00); 3000 steps with
row-averaged loss 1.00 (exact match 30 of 30). The report flags any variant that has not learned
retrieval at the training context.

Every trained model (``runs/train__<encoder>.pt``, a ``state_dict`` read back with
``torch.load(weights_only=True)``) and every evaluated variant (``runs/eval__<variant>.json``) is
stored under ``results/extrapolation/runs/{quick,full}/``; ``--resume`` reuses those whose configuration matches.

Outputs: ``results.json`` (rows of kind ``training``, ``variant`` and ``memory``), ``report.md``,
``ppl_vs_length.png`` and ``passkey_heatmap.png``. ``--memory-only`` writes a results.json and
report with the memory row alone.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import json
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
    markdown_table,
    note_if_empty,
    peak_memory_in_subprocess,
    quiet,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)

NAME = "extrapolation"
PASSKEY_DIGIT_CHANCE = 0.1  # one of ten digits
MIB = 2**20


# ------------------------------------------------------------------------------------------ variants
@dataclass
class Variant:
    """One evaluated model: a trained base encoder, optionally with another encoding swapped in.

    Attributes:
        base: the encoder the model was trained with (its weights are reused).
        encoding: the encoder swapped in before evaluation; ``None`` keeps the trained one.
        options: options of the swapped-in encoder (``factor`` and ``original_max_position`` are
            filled in from ``factor``).
        per_layer: one encoding per layer (HeadScale learns one scale per head *and* layer).
        factor: ``"inference"``: longest evaluated length / training context; ``"finetune"``: the
            fine-tune context / training context; ``None``: no factor.
        finetune: ``None``; ``"positional"``: train the encodings only (``train_positional_only``);
            ``"full"``: train every weight. Both at ``preset["finetune"]["multiple"]`` x the context.
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
    "rope+linear": Variant("rope", "rope", {"scaling": "linear"}, factor="inference",
                           description="RoPE + position interpolation at inference"),
    "rope+ntk": Variant("rope", "rope", {"scaling": "ntk"}, factor="inference",
                        description="RoPE + NTK-aware base at inference"),
    "rope+dynamic": Variant("rope", "rope", {"scaling": "dynamic"}, factor="inference",
                            description="RoPE + dynamic NTK at inference"),
    "rope+yarn": Variant("rope", "rope", {"scaling": "yarn"}, factor="inference",
                         description="RoPE + YaRN at inference"),
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
# Bases are trained in this order: those whose variants take longest to evaluate first (the bias of
# bam / fire is rebuilt per query block and layer; rope has seven variants), so the run's tail is short.
TRAIN_ORDER = ["rope", "bam_ssmax", "bam", "fire", "nope", "t5", "kerple", "alibi"]
QUICK_VARIANTS = ["nope", "nope+temp1.5", "rope", "rope+yarn", "alibi", "bam"]


def _doubling(start: int, stop: int) -> list[int]:
    out = [start]
    while out[-1] * 2 <= stop:
        out.append(out[-1] * 2)
    return out


FULL: dict[str, Any] = {
    "model": {"dim": 128, "num_heads": 4, "num_layers": 4},
    "training": {
        "context": 256, "steps": 3000, "batch_size": 16, "lr": 2e-3, "warmup_steps": 75, "weight_decay": 0.1,
        "passkey_fraction": 0.25, "passkey_template": "compact", "loss_average": "rows", "seed": 0,
    },
    # rope+*+ft: every weight; nope+headscale: the scales only (the paper: 200 steps, lr 0.05-0.1)
    "finetune": {"multiple": 4, "steps": 150, "batch_size": 4, "lr": 5e-4, "positional_lr": 0.05},
    "evaluation": {
        "ppl_lengths": _doubling(256, 8192),
        "ppl_tokens": 32768,  # windows per length: ppl_tokens // length, clamped to [min, max]
        "ppl_min_windows": 2,
        "ppl_max_windows": 64,
        "passkey_lengths": _doubling(256, 16384),
        "passkey_depths": [0.0, 0.25, 0.5, 0.75, 1.0],
        "passkey_tokens": 8192,  # samples per (length, depth): passkey_tokens // length, clamped to [1, max]
        "passkey_max_samples": 4,
        "block_size": 512,
        "entropy_multiples": [1, 8],
    },
    "memory": {"length": 32768, "dim": 128, "num_heads": 4, "block_size": 1024, "encoding": "bam"},
    "variants": list(VARIANTS),
}
QUICK: dict[str, Any] = {
    "model": {"dim": 32, "num_heads": 2, "num_layers": 2},
    "training": {
        "context": 128, "steps": 150, "batch_size": 16, "lr": 3e-3, "warmup_steps": 15, "weight_decay": 0.1,
        "passkey_fraction": 0.25, "passkey_template": "compact", "loss_average": "rows", "seed": 0,
    },
    "finetune": {"multiple": 2, "steps": 20, "batch_size": 8, "lr": 1e-3, "positional_lr": 0.05},
    "evaluation": {
        "ppl_lengths": _doubling(128, 1024),
        "ppl_tokens": 8192,
        "ppl_min_windows": 1,
        "ppl_max_windows": 16,
        "passkey_lengths": _doubling(128, 2048),
        "passkey_depths": [0.0, 0.5, 1.0],
        "passkey_tokens": 512,
        "passkey_max_samples": 2,
        "block_size": 512,
        "entropy_multiples": [1, 8],
    },
    "memory": {"length": 4096, "dim": 128, "num_heads": 4, "block_size": 1024, "encoding": "bam"},
    "variants": QUICK_VARIANTS,
}


def resolve_options(variant: Variant, preset: dict[str, Any]) -> dict[str, Any]:
    """The swapped-in encoder's options with ``factor`` / ``original_max_position`` filled in."""
    options = dict(variant.options)
    context = preset["training"]["context"]
    if variant.factor == "inference":
        evaluation = preset["evaluation"]
        longest = max(max(evaluation["ppl_lengths"]), max(evaluation["passkey_lengths"]))
        options["factor"] = max(1.0, longest / context)
    elif variant.factor == "finetune":
        options["factor"] = float(preset["finetune"]["multiple"])
    elif variant.factor is not None:
        raise ValueError(f"variant factor must be None, 'inference' or 'finetune', got {variant.factor!r}")
    if options.get("scaling") in ("dynamic", "yarn", "llama3", "longrope"):
        options["original_max_position"] = context
    return options


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
    model.encodings = nn.ModuleList(built)
    model.config = dataclasses.replace(config, encoding=name, encoding_options=options, share_encoding=not per_layer)
    return model


def set_query_block_size(model, block_size: int | None) -> None:
    """Evaluate every self-attention layer ``block_size`` queries at a time (memory linear in L)."""
    for block in model.blocks:
        block.attn.query_block_size = block_size
    model.config.attention_block_size = block_size


# ------------------------------------------------------------------------------------ worker helpers
def _trainer(steps: int):
    import lightning as L

    quiet()  # also when called in-process (tests), not only in worker_pool's workers
    return L.Trainer(
        max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )


def _module(spec: dict[str, Any], *, lr: float | None = None, steps: int = 0, warmup: int = 1):
    from pe_toolkit.training import LanguageModelModule

    training = spec["training"]
    return LanguageModelModule(
        256, encoding=spec["base"], **spec["model"], lr=training["lr"] if lr is None else lr,
        weight_decay=training["weight_decay"], warmup_steps=warmup, max_steps=steps,
        loss_average=training["loss_average"],
    )


def _data(training: dict[str, Any], context: int, batch_size: int, steps: int):
    from pe_toolkit.data import ByteLMDataModule

    # The seed also fixes the document split: every stage uses the same one, so validation text is
    # never trained on.
    return ByteLMDataModule(
        context=context, batch_size=batch_size, steps_per_epoch=steps,
        passkey_fraction=training["passkey_fraction"], passkey_template=training["passkey_template"],
        seed=training["seed"],
    )


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
    L.seed_everything(training["seed"], verbose=False)
    data = _data(training, training["context"], training["batch_size"], training["steps"])
    module = _module(spec, steps=training["steps"], warmup=training["warmup_steps"])
    trainer = _trainer(training["steps"])
    trainer.fit(module, data)
    torch.save(module.state_dict(), weights_path)
    return {
        "kind": "training",
        "base": spec["base"],
        "final_train_loss": float(trainer.callback_metrics.get("train/loss", float("nan"))),
        "parameters": module.model.num_parameters(),
        "parameters_without_pe": module.model.num_parameters(exclude_positional=True),
        "seconds": time.perf_counter() - start,
        "spec": _public(spec),
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
    L.seed_everything(training["seed"] + 1, verbose=False)
    data = _data(training, context, ft["batch_size"], ft["steps"])
    trainer = _trainer(ft["steps"])
    trainer.fit(module, data)
    module.model.requires_grad_(True)
    return {
        "kind": kind, "context": context, "steps": ft["steps"], "batch_size": ft["batch_size"],
        "lr": module.hparams.lr, "final_train_loss": float(trainer.callback_metrics.get("train/loss", float("nan"))),
        "seconds": time.perf_counter() - start,
    }


def _passkey_samples(evaluation: dict[str, Any], length: int) -> int:
    return max(1, min(evaluation["passkey_max_samples"], evaluation["passkey_tokens"] // length))


def _ppl_windows(evaluation: dict[str, Any], length: int) -> int:
    return max(evaluation["ppl_min_windows"], min(evaluation["ppl_max_windows"], evaluation["ppl_tokens"] // length))


def build_variant(spec: dict[str, Any], weights_path: str):
    """The trained base model with the variant's encoding swapped in, fine-tuned if the variant says so.

    Returns:
        ``(module, finetune)``: the ``LanguageModelModule`` and the fine-tune's summary (or ``None``).
    """
    import torch

    variant = spec["variant"]
    module = _module(spec)
    module.load_state_dict(torch.load(weights_path, weights_only=True))
    if variant["encoding"] is not None:
        swap_encoding(module.model, variant["encoding"], spec["options"], per_layer=variant["per_layer"])
    finetune = _finetune(module, spec, variant["finetune"]) if variant["finetune"] else None
    return module, finetune


def evaluate_variant(spec: dict[str, Any], weights_path: str) -> dict[str, Any]:
    """Load a trained base model, derive the variant (swap / fine-tune), evaluate it. Runs in a worker.

    Returns:
        a ``variant`` row: ``ppl`` per length, ``passkey`` per (length, depth), ``passkey_by_length``,
        ``greedy_check``, ``entropy``, learned encoder parameters, seconds, the spec.
    """
    import torch

    from pe_toolkit.data import COMPACT_TEMPLATE, PAPER_TEMPLATE, passkey_accuracy, passkey_grid, sequential_windows
    from pe_toolkit.data import teacher_forced_digit_accuracy as digit_accuracy
    from pe_toolkit.nn import attention_entropy

    quiet()
    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    variant, training, evaluation = spec["variant"], spec["training"], spec["evaluation"]
    template = {"compact": COMPACT_TEMPLATE, "paper": PAPER_TEMPLATE}[training["passkey_template"]]
    module, finetune = build_variant(spec, weights_path)
    module.eval()
    set_query_block_size(module.model, evaluation["block_size"])
    data = _data(training, training["context"], 1, 1)
    data.setup()
    val = data.val_bytes

    ppl = []
    for length in evaluation["ppl_lengths"]:
        windows = sequential_windows(val, length, _ppl_windows(evaluation, length))
        value = module.perplexity(windows, batch_size=max(1, 4096 // length))
        ppl.append({"length": length, "ppl": value, "windows": int(windows.shape[0])})

    passkey = []
    with torch.no_grad():
        for length in evaluation["passkey_lengths"]:
            # prompt + 5 answer bytes (the last not fed) = `length` input bytes
            examples = passkey_grid([length - 5], evaluation["passkey_depths"], _passkey_samples(evaluation, length),
                                    seed=length, template=template)
            for depth in evaluation["passkey_depths"]:
                scores = [digit_accuracy(module.model, ex) for ex in examples if ex.depth == depth]
                passkey.append({
                    "length": length, "depth": depth, "samples": len(scores),
                    "digit_accuracy": sum(scores) / len(scores),
                    "exact_match": sum(s == 1.0 for s in scores) / len(scores),
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
    context = training["context"]
    greedy_examples = passkey_grid([context - 5], evaluation["passkey_depths"], _passkey_samples(evaluation, context),
                                   seed=context, template=template)
    greedy = passkey_accuracy(module.model.generate, greedy_examples)
    with torch.no_grad():
        forced = [digit_accuracy(module.model, ex) == 1.0 for ex in greedy_examples]
    greedy_check = {
        "length": context, "examples": len(greedy_examples), "greedy_exact_match": greedy,
        "teacher_forced_exact_match": sum(forced) / len(forced),
    }

    entropy = []
    for multiple in evaluation["entropy_multiples"]:
        length = context * multiple
        tokens = sequential_windows(val, length, 1)[:, :-1]
        per_head = attention_entropy(module.model, tokens)  # (layers, heads), bits
        entropy.append({
            "multiple": multiple, "length": length, "mean_bits": float(per_head.mean()),
            "per_layer_bits": [float(v) for v in per_head.mean(-1)],
        })

    return {
        "kind": "variant",
        "variant": spec["name"],
        "base": variant["base"],
        "encoding": variant["encoding"] or variant["base"],
        "options": spec["options"],
        "description": variant["description"],
        "finetune": finetune,
        "ppl": ppl,
        "passkey": passkey,
        "passkey_by_length": by_length,
        "greedy_check": greedy_check,
        "entropy": entropy,
        "learned": _learned_parameters(module.model),
        "seconds": time.perf_counter() - start,
        "spec": _public(spec),
    }


def _learned_parameters(model) -> dict[str, Any]:
    """Per-head parameters worth reading in the report: BAM's shape/scale/location, HeadScale's scales."""
    out: dict[str, Any] = {}

    def values(tensor, digits: int) -> list[float]:
        return [round(float(v), digits) for v in tensor.detach()]

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


def _public(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec without the thread count (not part of the configuration that --resume compares)."""
    return {k: v for k, v in spec.items() if k != "threads"}


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
def _value_at(items: list[dict[str, Any]], length: int, key: str) -> float | None:
    for item in items:
        if item["length"] == length:
            return item[key]
    return None


def _fmt_len(length: int) -> str:
    return f"{length // 1024}k" if length >= 1024 and length % 1024 == 0 else str(length)


def _fmt_num(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if value >= 1000:
        return f"{value:.3g}"
    return f"{value:.2f}"


def summary_tables(variant_rows: list[dict[str, Any]], context: int) -> tuple[list[dict], list[dict]]:
    """One row per variant for the perplexity table and the passkey table."""
    ppl_table, passkey_table = [], []
    for row in variant_rows:
        ppl = {f"x{item['length'] // context}": item["ppl"] for item in row["ppl"]}
        base_ppl = _value_at(row["ppl"], context, "ppl")
        longest = row["ppl"][-1]
        ratio = longest["ppl"] / base_ppl if base_ppl and longest["ppl"] is not None else None
        ppl_table.append({"variant": row["variant"], **ppl, "ratio": ratio})
        exact = {f"x{item['length'] // context}": item["exact_match"] for item in row["passkey_by_length"]}
        last = row["passkey_by_length"][-1]
        passkey_table.append({"variant": row["variant"], **exact, "digits_last": last["digit_accuracy"]})
    return ppl_table, passkey_table


def claims(variant_rows: list[dict[str, Any]], context: int) -> list[str]:
    """Checks of the papers' qualitative claims, each with the measured numbers it rests on."""
    by_name = {r["variant"]: r for r in variant_rows}
    lines = []

    def ratio(name: str) -> float | None:
        row = by_name.get(name)
        if row is None:
            return None
        base = _value_at(row["ppl"], context, "ppl")
        last = row["ppl"][-1]["ppl"]
        return None if not base or last is None else last / base

    flat, blowup = 1.25, 2.0
    longest = variant_rows[0]["ppl"][-1]["length"] if variant_rows else None
    how = f"PPL at {longest} / PPL at {context}"
    rope = ratio("rope")
    if rope is not None:
        verdict = "holds" if rope >= blowup else "does not hold"
        lines.append(f"- RoPE's perplexity blows up past the training context ({how}: {rope:.3f}; blown up = at "
                     f"least {blowup}): **{verdict}** here.")
    for name in ("alibi", "bam", "bam_ssmax"):
        r = ratio(name)
        if r is not None:
            verdict = "holds" if r <= flat else "does not hold"
            compare = f" (rope: {rope:.3f})" if rope is not None else ""
            lines.append(f"- {name} keeps perplexity flat past the training context ({how}: {r:.3f}{compare}; "
                         f"flat = at most {flat}): **{verdict}** here.")
    passkey_last = {
        name: row["passkey_by_length"][-1] for name, row in by_name.items() if row["passkey_by_length"]
    }
    at_context = {
        name: row["passkey_by_length"][0] for name, row in by_name.items()
        if row["passkey_by_length"] and row["passkey_by_length"][0]["length"] == context
    }
    if at_context:
        # Chance is 0.1 per digit; a model at most 2x chance at its own context never learned the task,
        # and its passkey numbers at longer lengths say nothing about extrapolation.
        floor = 2 * PASSKEY_DIGIT_CHANCE
        unlearned = sorted(n for n, v in at_context.items() if v["digit_accuracy"] <= floor)
        shown = ", ".join(f"{n} {v['exact_match']:.2f} ({v['digit_accuracy']:.2f})" for n, v in at_context.items())
        verdict = "learned by all"
        if unlearned:
            verdict = (f"**not learned** by {', '.join(unlearned)} (digit accuracy at most {floor:.1f}, chance "
                       f"{PASSKEY_DIGIT_CHANCE}): their longer-length passkey numbers say nothing")
        lines.append(f"- Passkey retrieval at the training context ({context} bytes), exact match (digit accuracy): "
                     f"{shown}. Retrieval {verdict}.")
    if "bam" in passkey_last or "bam_ssmax" in passkey_last:
        length = next(iter(passkey_last.values()))["length"]
        ranking = sorted(passkey_last.items(), key=lambda kv: (-kv[1]["exact_match"], -kv[1]["digit_accuracy"]))
        shown = ", ".join(f"{n} {v['exact_match']:.2f} ({v['digit_accuracy']:.2f})" for n, v in ranking)
        lines.append(
            f"- Passkey retrieval at {length} bytes ({length // context}x the training context), exact match "
            f"(digit accuracy): {shown}. BAM (Bianchessi et al. 2025) reports retrieval far beyond its training "
            "context with BAM-SSMax."
        )
    # Methods that extend a model are compared by their perplexity at the longest length, "better"
    # meaning at least 2 % lower (the last digits of a few windows' perplexity are noise).
    def last_ppl(name: str) -> float | None:
        row = by_name.get(name)
        return None if row is None else row["ppl"][-1]["ppl"]

    margin = 0.98
    at = f"PPL at {longest}"
    nope = last_ppl("nope")
    for name in ("nope+temp1.2", "nope+temp1.5", "nope+headscale"):
        value = last_ppl(name)
        if value is not None and nope is not None:
            verdict = "holds" if value <= margin * nope else "does not hold"
            lines.append(f"- {name} extends NoPE (Wang et al. 2024): {at} {value:.3f} vs NoPE {nope:.3f} "
                         f"(better = at least 2 % lower): **{verdict}** here.")
    head = last_ppl("nope+headscale")
    uniform = [v for v in (last_ppl("nope+temp1.2"), last_ppl("nope+temp1.5")) if v is not None]
    if head is not None and uniform:
        verdict = "holds" if head <= margin * min(uniform) else "does not hold"
        lines.append(f"- HeadScale beats a uniform scale (Wang et al. 2024): {at} {head:.3f} vs best uniform "
                     f"{min(uniform):.3f}: **{verdict}** here.")
    for scaling in ("linear", "yarn"):
        inference, tuned = last_ppl(f"rope+{scaling}"), last_ppl(f"rope+{scaling}+ft")
        if inference is not None and tuned is not None:
            verdict = "holds" if tuned <= margin * inference else "does not hold"
            lines.append(f"- A short fine-tune helps rope+{scaling}: {at} {tuned:.3f} after vs {inference:.3f} at "
                         f"inference only: **{verdict}** here.")
    for name in ("rope+linear", "rope+ntk", "rope+dynamic", "rope+yarn"):
        value, plain = last_ppl(name), last_ppl("rope")
        if value is not None and plain is not None:
            verdict = "holds" if value <= margin * plain else "does not hold"
            lines.append(f"- {name} at inference improves on plain RoPE past the context: {at} {value:.3f} vs "
                         f"{plain:.3f}: **{verdict}** here.")
    return lines


# ------------------------------------------------------------------------------------------- plots
def plot_ppl(variant_rows: list[dict[str, Any]], context: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    fig, ax = plt.subplots(figsize=(9, 5))
    colors = plt.get_cmap("tab10").colors
    bases = list(dict.fromkeys(row["base"] for row in variant_rows))
    markers = "o^sDvP*X"
    seen: dict[str, int] = {}
    for row in variant_rows:
        # one colour per trained model; line style: as trained / swapped at inference / fine-tuned
        spec_variant = row["spec"]["variant"]
        style = ":" if spec_variant["finetune"] else ("--" if spec_variant["encoding"] else "-")
        index = seen[row["base"]] = seen.get(row["base"], -1) + 1
        finite = [p for p in row["ppl"] if p["ppl"] is not None and math.isfinite(p["ppl"])]
        lengths = [p["length"] for p in finite]
        values = [p["ppl"] for p in finite]
        ax.plot(lengths, values, style, marker=markers[index % len(markers)], markersize=4,
                color=colors[bases.index(row["base"]) % len(colors)], label=row["variant"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    empty = note_if_empty(ax, "validation perplexity")  # an empty panel: y back to linear
    lengths = sorted({p["length"] for row in variant_rows for p in row["ppl"]})
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
    ax.set_xlabel("evaluation length (bytes)")
    ax.set_ylabel("validation perplexity (bytes)")
    ax.set_title("Perplexity vs length (solid: as trained; dashed: swapped at inference; dotted: fine-tuned)",
                 fontsize=9)
    if not empty:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_passkey(variant_rows: list[dict[str, Any]], context: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    count = len(variant_rows)
    columns = min(4, count)
    rows_n = math.ceil(count / columns)
    fig, axes = plt.subplots(rows_n, columns, figsize=(3.6 * columns, 2.7 * rows_n), squeeze=False,
                             layout="constrained")
    image = None
    for ax, row in zip(axes.flat, variant_rows):
        lengths = sorted({p["length"] for p in row["passkey"]})
        depths = sorted({p["depth"] for p in row["passkey"]})
        grid = np.full((len(depths), len(lengths)), np.nan)
        for p in row["passkey"]:
            if p["digit_accuracy"] is not None:
                grid[depths.index(p["depth"]), lengths.index(p["length"])] = p["digit_accuracy"]
        shown = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
        if not note_if_empty(ax, "passkey digit accuracy"):
            image = shown
        for (i, j), value in np.ndenumerate(grid):
            if math.isfinite(value):
                ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=6,
                        color="white" if value < 0.6 else "black")
        ax.set_xticks(range(len(lengths)), [_fmt_len(n) for n in lengths], fontsize=7)
        ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths], fontsize=7)
        ax.set_title(row["variant"], fontsize=9)
        ax.set_xlabel("length (bytes)", fontsize=7)
        if ax in axes[:, 0]:
            ax.set_ylabel("needle depth", fontsize=7)
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, shrink=0.8, label="passkey digit accuracy")
    fig.suptitle(f"Passkey retrieval (teacher-forced digit accuracy); training context {context}", fontsize=10)
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


def build_report(config: dict[str, Any], rows: list[dict[str, Any]], seconds: float) -> str:
    context = config["training"]["context"]
    training_rows = [r for r in rows if r["kind"] == "training"]
    variant_rows = [r for r in rows if r["kind"] == "variant"]
    failed = [r for r in rows if r["kind"] == "failed"]
    memory = next((r for r in rows if r["kind"] == "memory"), None)
    model, training, ft = config["model"], config["training"], config["finetune"]
    parameters = training_rows[0]["parameters_without_pe"] if training_rows else None
    body = (
        f"Model: byte-level decoder, {model} (same trunk for every encoder; "
        + (f"{parameters:,} parameters without the PE" if parameters else "parameters n/a")
        + f"), trained {training['steps']} steps of batch {training['batch_size']} x {context} bytes, AdamW lr "
        f"{training['lr']}, on the standard-library corpus with {training['passkey_fraction']:.0%} of each batch "
        f"passkey prompts ({training['passkey_template']} template, loss on the answer only); one seed "
        f"({training['seed']}). Fine-tunes: {ft['steps']} steps of batch {ft['batch_size']} at "
        f"{ft['multiple']}x the context (lr {ft['lr']} for every weight, {ft['positional_lr']} for HeadScale "
        f"alone). Inference-time RoPE scalings use factor {config['inference_factor']:g} (longest evaluated "
        f"length / training context). Perplexity: held-out documents, sequential windows. Passkey: "
        f"{config['passkey_template']} template, depths {config['evaluation']['passkey_depths']}, 5-digit keys, "
        "scored teacher-forced (exact match = all 5 digits right = what greedy decoding gives).\n\n"
    )
    if failed:
        body += "**Failed runs:** " + "; ".join(f"{r['name']}: {r['error']}" for r in failed) + "\n\n"
    if training_rows:
        body += "## Training\n\n" + markdown_table(
            training_rows, ["base", ("final_train_loss", "final loss (nats/byte)"), "parameters",
                            ("seconds", "seconds")], {"final_train_loss": ".3f", "seconds": ".0f"})
    if variant_rows:
        ppl_table, passkey_table = summary_tables(variant_rows, context)
        multiples = [f"x{n // context}" for n in config["evaluation"]["ppl_lengths"]]
        body += (
            f"\n## Validation perplexity (bytes) by length, as a multiple of the training context {context}\n\n"
            + markdown_table(ppl_table, ["variant", *multiples, ("ratio", "last / x1")],
                             dict.fromkeys([*multiples, "ratio"], _fmt_num))
            + "\n![perplexity vs length](ppl_vs_length.png)\n"
        )
        pk_multiples = [f"x{n // context}" for n in config["evaluation"]["passkey_lengths"]]
        last = pk_multiples[-1]
        body += (
            "\n## Passkey retrieval: exact match by length (mean over depths)\n\n"
            + markdown_table(passkey_table, ["variant", *pk_multiples, ("digits_last", f"digit acc. {last}")],
                             dict.fromkeys([*pk_multiples, "digits_last"], ".2f"))
            + "\n![passkey heatmap](passkey_heatmap.png)\n"
        )
        greedy = [{"variant": r["variant"], **r["greedy_check"]} for r in variant_rows]
        body += (
            "\n### Greedy decoding check at the training context\n\n"
            + markdown_table(greedy, ["variant", "length", "examples", ("greedy_exact_match", "greedy exact match"),
                                      ("teacher_forced_exact_match", "teacher-forced exact match")],
                             {"greedy_exact_match": ".2f", "teacher_forced_exact_match": ".2f"})
        )
        entropy_rows = []
        for r in variant_rows:
            entry = {"variant": r["variant"]}
            for e in r["entropy"]:
                entry[f"x{e['multiple']}"] = e["mean_bits"]
            entropy_rows.append(entry)
        entropy_cols = [f"x{m}" for m in config["evaluation"]["entropy_multiples"]]
        body += (
            "\n## Attention entropy (bits, mean over layers, heads and queries) at multiples of the context\n\n"
            "Rising entropy past the training context is the 'distraction' of Wang et al. 2024.\n\n"
            + markdown_table(entropy_rows, ["variant", *entropy_cols], dict.fromkeys(entropy_cols, ".2f"))
        )
        finetuned = [{"variant": r["variant"], **r["finetune"]} for r in variant_rows if r["finetune"]]
        if finetuned:
            body += "\n## Fine-tunes\n\n" + markdown_table(
                finetuned, ["variant", "kind", "context", "steps", "lr", ("final_train_loss", "final loss"),
                            ("seconds", "seconds")], {"final_train_loss": ".3f", "seconds": ".0f"})
        learned = [{"variant": r["variant"], "parameter": k, "per head": ", ".join(map(str, v))}
                   for r in variant_rows for k, v in r["learned"].items()]
        if learned:
            body += "\n## Learned positional parameters\n\n" + markdown_table(learned, ["variant", "parameter",
                                                                                       "per head"])
        checks = claims(variant_rows, context)
        if checks:
            body += "\n## Against the papers' claims (measured here)\n\n" + "\n".join(checks) + "\n"
    body += "\n" + _memory_text(memory)
    body += f"\nTotal wall time {seconds:.0f} s.\n"
    return body


# -------------------------------------------------------------------------------------------- main
def _load_if_same(path: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    stored = json.loads(path.read_text())
    return stored if stored.get("spec") == json.loads(json.dumps(spec)) else None


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", help=f"subset of {list(VARIANTS)}")
    parser.add_argument("--steps", type=int, help="training steps per base encoder (overrides the preset)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each (default 2)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    parser.add_argument("--memory-only", action="store_true", help="only measure the BAM attention layer's memory")
    parser.add_argument("--memory-length", type=int, help="sequence length of the memory measurement "
                        "(default: 32768, quick: 4096)")
    args = parser.parse_args(argv)

    preset = copy.deepcopy(QUICK if args.quick else FULL)
    variants = args.variants or preset["variants"]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; available: {list(VARIANTS)}")
    if args.steps is not None:
        if args.steps < 1:
            parser.error(f"--steps must be >= 1, got {args.steps}")
        preset["training"]["steps"] = args.steps
        preset["training"]["warmup_steps"] = max(1, min(preset["training"]["warmup_steps"], args.steps // 10))
    if args.memory_length is not None:
        if args.memory_length < 1:
            parser.error(f"--memory-length must be >= 1, got {args.memory_length}")
        preset["memory"]["length"] = args.memory_length
    jobs = max(1, args.jobs)
    threads = 1  # small models: a second OpenMP thread gains little, and on a busy machine it stalls
    out_dir = Path(args.out) / NAME
    runs_dir = out_dir / "runs" / ("quick" if args.quick else "full")  # quick runs never overwrite full ones
    runs_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()

    memory_path = runs_dir / f"memory__{preset['memory']['encoding']}_L{preset['memory']['length']}.json"

    def memory_row() -> dict[str, Any]:
        stored = _load_if_same(memory_path, preset["memory"]) if args.resume else None
        if stored is not None:
            return stored
        print(f"{NAME}: measuring one {preset['memory']['encoding']} attention layer at "
              f"L={preset['memory']['length']} in a forked process", flush=True)
        row = measure_memory(preset["memory"])  # this process has run no torch compute: forking is safe
        if row["status"] == "ok":
            memory_path.write_text(json.dumps(row, indent=1) + "\n")
        return row

    if args.memory_only:
        row = memory_row()
        seconds = time.perf_counter() - start
        write_results(NAME, {"quick": args.quick, "memory_only": True, "memory": preset["memory"]}, [row], seconds,
                      root=args.out)
        write_report(NAME, "Extrapolation benchmark: attention memory only", _memory_text(row)
                     + f"\nTotal wall time {seconds:.0f} s.\n", root=args.out)
        print(f"{NAME}: memory {row.get('peak_mib')} MiB, {row.get('seconds')} s ({row['status']})", flush=True)
        return 0 if row["status"] == "ok" else 1

    bases = list(dict.fromkeys(VARIANTS[v].base for v in variants))
    common_spec = {"model": preset["model"], "training": preset["training"], "threads": threads}
    train_specs = {b: {"base": b, **common_spec} for b in bases}
    eval_specs = {}
    for name in variants:
        v = VARIANTS[name]
        eval_specs[name] = {
            "name": name, "base": v.base, "variant": dataclasses.asdict(v), "options": resolve_options(v, preset),
            "finetune": preset["finetune"] if v.finetune else None, "evaluation": preset["evaluation"],
            **common_spec,
        }
    weights = {b: runs_dir / f"train__{b}.pt" for b in bases}
    train_paths = {b: runs_dir / f"train__{b}.json" for b in bases}
    eval_paths = {n: runs_dir / f"eval__{n}.json" for n in variants}

    rows: list[dict[str, Any]] = []
    trained: set[str] = set()
    train_todo, eval_todo = [], {}
    for b in bases:
        stored = _load_if_same(train_paths[b], _public(train_specs[b])) if args.resume else None
        if stored is not None and weights[b].exists():
            rows.append(stored)
            trained.add(b)
        else:
            train_todo.append(b)
    for name in variants:
        stored = _load_if_same(eval_paths[name], _public(eval_specs[name])) if args.resume else None
        if stored is not None and VARIANTS[name].base in trained:
            rows.append(stored)
        else:
            eval_todo[name] = eval_specs[name]
    reused = len(bases) - len(train_todo) + len(variants) - len(eval_todo)
    total = len(train_todo) + len(eval_todo)
    print(f"{NAME}: {len(bases)} base models, {len(variants)} variants ({reused} reused), {jobs} in parallel",
          flush=True)
    progress = Progress(total, NAME)
    with worker_pool(jobs) as pool:
        futures: dict[concurrent.futures.Future, tuple[str, str]] = {}

        def submit_evals(base: str) -> None:
            for name, spec in list(eval_todo.items()):
                if spec["base"] == base:
                    futures[pool.submit(evaluate_variant, spec, str(weights[base]))] = ("eval", name)
                    del eval_todo[name]

        for b in sorted(train_todo, key=lambda b: TRAIN_ORDER.index(b) if b in TRAIN_ORDER else len(TRAIN_ORDER)):
            futures[pool.submit(train_base, train_specs[b], str(weights[b]))] = ("train", b)
        for b in trained:
            submit_evals(b)
        while futures:
            done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                kind, name = futures.pop(future)
                try:
                    row = future.result()
                except Exception as error:  # noqa: BLE001  (report it, keep the other runs going)
                    message = "".join(traceback.format_exception_only(type(error), error)).strip()
                    rows.append({"kind": "failed", "name": f"{kind} {name}", "error": message[-300:]})
                    progress(f"{kind} {name}: FAILED {message.splitlines()[-1][:200]}")
                    if kind == "train":  # its variants cannot run
                        for variant_name in [n for n, s in eval_todo.items() if s["base"] == name]:
                            rows.append({"kind": "failed", "name": f"eval {variant_name}",
                                         "error": f"base model {name} failed"})
                            del eval_todo[variant_name]
                    continue
                rows.append(row)
                if kind == "train":
                    train_paths[name].write_text(json.dumps(row, indent=1) + "\n")
                    progress(f"trained {name}: loss {row['final_train_loss']:.3f} ({row['seconds']:.0f}s)")
                    submit_evals(name)
                else:
                    eval_paths[name].write_text(json.dumps(row, indent=1) + "\n")
                    first, last = row["ppl"][0], row["ppl"][-1]
                    pk = row["passkey_by_length"][-1]
                    progress(f"{name}: ppl {first['ppl']:.2f} @{first['length']} -> {last['ppl']:.3g} "
                             f"@{last['length']}; passkey @{pk['length']} exact {pk['exact_match']:.2f} "
                             f"digits {pk['digit_accuracy']:.2f} ({row['seconds']:.0f}s)")

    rows.append(memory_row())
    order = {name: i for i, name in enumerate(VARIANTS)}
    kinds = {"training": 0, "variant": 1, "memory": 2, "failed": 3}
    rows.sort(key=lambda r: (kinds[r["kind"]], BASE_ENCODERS.index(r["base"]) if r["kind"] == "training" else 0,
                             order.get(r.get("variant"), 0)))
    seconds = time.perf_counter() - start
    config = {
        "quick": args.quick,
        "variants": variants,
        "bases": bases,
        "model": preset["model"],
        "training": preset["training"],
        "finetune": preset["finetune"],
        "evaluation": preset["evaluation"],
        "inference_factor": resolve_options(VARIANTS["rope+yarn"], preset)["factor"],
        "passkey_template": preset["training"]["passkey_template"],
        "memory": preset["memory"],
        "jobs": jobs,
    }
    write_results(NAME, config, rows, seconds, root=args.out)
    variant_rows = [r for r in rows if r["kind"] == "variant"]
    if variant_rows:
        plot_ppl(variant_rows, preset["training"]["context"], out_dir / "ppl_vs_length.png")
        plot_passkey(variant_rows, preset["training"]["context"], out_dir / "passkey_heatmap.png")
    write_report(NAME, "Context-length extrapolation: perplexity and passkey retrieval",
                 build_report(config, rows, seconds), root=args.out)
    print(f"{NAME}: wrote {out_dir} in {seconds:.0f} s", flush=True)
    return 1 if any(r["kind"] == "failed" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
