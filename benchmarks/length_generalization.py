"""Length generalization of positional encodings on synthetic tasks (Kazemnejad et al. 2023; CoPE; Golkar et al.).

Trains the same ``Transformer`` trunk once per (task, encoder, seed), where only the positional encoding
differs, on the task's training split, then decodes greedily (KV cache) a fixed number of test examples
at every evaluated length of the in-distribution (IID: the training split) and out-of-distribution (OOD:
the test split: longer inputs, more regions, another density) splits. Reports exact-match accuracy per
length, IID / OOD accuracy as a seed mean with its 95 % Student-t interval, the mean reciprocal rank
(MRR) of the encoders across tasks, and every paper claim decided by
:func:`pe_toolkit.bench.verdict.decide_claim` (untested where a side did not learn the task in
distribution: IID exact match below :data:`LEARNED_IID`).

    pe-toolkit bench length_generalization --quick        # pipeline check, < 2 minutes
    pe-toolkit bench length_generalization                # full CPU preset: Kazemnejad's copy family and SCAN
    pe-toolkit bench length_generalization --preset families   # CoPE counting, Golkar, selective copy, flip-flop
    pe-toolkit bench length_generalization --preset gpu --accelerator cuda
    pe-toolkit bench length_generalization --set "run_tasks=[addition:icovr, scan_length]" --set "encoders=[nope, rope]"
    python benchmarks/length_generalization.py --quick    # the same code

``run_tasks`` takes any registered task (``pe_toolkit.tasks.list_tasks()``), optionally with a scratchpad
format after a colon (``addition:icovr``, ``parity:10110``, ``addition:none`` for no scratchpad, ``:empty``
for the frame without components; tasks with a ``scratchpad`` option only). ``model.dropout`` (default 0;
the paper trains with 0.1) and ``model.scale_embeddings`` (default true: N(0, 1/dim) times sqrt(dim), unit
scale like a sinusoidal PE; false: GPT-2's N(0, 0.02)) are config keys like the others.

Every finished run is stored in ``<out>/length_generalization/runs/<preset>/`` with its spec (the
harness's run store; ``--resume`` reuses a run whose spec matches). Outputs: ``results.json`` (one row
per run: per-length accuracy, how wrong answers failed, loss and validation curves; summaries; claims),
``report.md`` and ``accuracy_vs_length.png``.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from typing import Any

from pe_toolkit.bench import Benchmark, Result, trainer_options
from pe_toolkit.bench.plots import note_if_empty
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.stats import format_interval, mean_interval
from pe_toolkit.bench.verdict import decide_claim, format_side, untested_claim
from pe_toolkit.bench.verdict import summarize as bounded_interval

DECODER = "decoder"
ARCHITECTURES = (DECODER, "encdec_causal", "encdec_bidirectional")
# Encoder options of the papers' code. Kazemnejad et al. 2023 (custom_t5_decoder_only.py): rotary on the
# first 25 % of each head's dims. CoPE (Golovneva et al. 2024): npos = block_size + 1, so contextual
# positions never clamp inside the training context; CONTEXT stands for that (each run sets it to its
# longest training sequence + 1). Their relative PE baseline (projects/cope/src/models/relative_position.py,
# RelPosEmb): a learned vector per distance, one table shared by the heads, N(0, 1/head_dim), logits q . e[i - j]
# up to the context: the registry's ``music_relative`` (Shaw/Huang relative attention) with share_heads
# and max_distance = the training context.
CONTEXT = "context"
ENCODING_OPTIONS: dict[str, dict[str, Any]] = {
    "rope": {"rotary_fraction": 0.25},
    "cope": {"npos_max": CONTEXT},
    "music_relative": {"max_distance": CONTEXT, "share_heads": True},
}
ENCODING_LABELS = {"music_relative": "relative PE (learned per distance)", "sinusoidal": "APE (sinusoidal)"}
LEARNED_IID = 0.9  # in-distribution exact match below this: the task was not learned, its OOD says nothing
ACCURACY = (0.0, 1.0)


# ------------------------------------------------------------------------------------------- config
@dataclasses.dataclass
class Model:
    dim: int
    num_heads: int
    num_layers: int
    dropout: float = 0.0
    scale_embeddings: bool = True


@dataclasses.dataclass
class Training:
    steps: int
    batch_size: int
    lr: float
    num_train: int


@dataclasses.dataclass
class Evaluation:
    per_length: int
    length_stride: int


@dataclasses.dataclass
class EarlyStop:
    """Validation exact match on ``num_val`` in-distribution examples every ``every_n_steps`` steps; with
    ``stop`` the fit ends once the error is below ``target_error``, else the curve is only recorded."""

    target_error: float
    every_n_steps: int
    num_val: int
    stop: bool = True


@dataclasses.dataclass
class TaskEntry:
    """A task's settings: options of the registered task, and optionally its own encoders, architectures,
    changes to ``training`` / ``evaluation`` and a validation curve (``early_stop``)."""

    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    encoders: list[str] | None = None
    architectures: list[str] | None = None
    training: dict[str, Any] | None = None
    early_stop: EarlyStop | None = None
    evaluation: dict[str, Any] | None = None


@dataclasses.dataclass
class Config:
    run_tasks: list[str]
    encoders: list[str]
    seeds: list[int]
    model: Model
    training: Training
    evaluation: Evaluation
    tasks: dict[str, TaskEntry] = dataclasses.field(default_factory=dict)


# ------------------------------------------------------------------------------------------- tasks
def parse_task(text: str) -> tuple[str, dict[str, Any]]:
    """``"addition:icovr"`` -> ``("addition", {"scratchpad": "icovr"})``; ``"copy_repeat"`` -> ``("copy_repeat", {})``.

    Raises:
        ValueError: the task is not registered (the message lists the registered tasks), or a scratchpad
            format is given for a task without one, or the format is not valid.
    """
    from pe_toolkit.tasks import ScratchpadFormat, list_tasks, task_options

    name, _, scratchpad = str(text).partition(":")
    allowed = list_tasks()
    if name not in allowed:
        raise ValueError(f"run_tasks: unknown task {name!r}; registered tasks: {', '.join(allowed)} "
                         "(optionally NAME:SCRATCHPAD, e.g. addition:icovr)")
    if not scratchpad:
        return name, {}
    with_scratchpad = [t for t in allowed if "scratchpad" in task_options(t)]
    if name not in with_scratchpad:
        raise ValueError(f"run_tasks: task {name!r} has no scratchpad option; tasks with one: "
                         f"{', '.join(with_scratchpad)}")
    if scratchpad == "none":  # no scratchpad at all (a preset entry may set one)
        return name, {"scratchpad": None}
    mask = "" if scratchpad == "empty" else scratchpad  # "empty": the scratchpad frame with no component
    try:
        ScratchpadFormat.parse(mask)
    except (TypeError, ValueError) as error:
        raise ValueError(f"run_tasks {text!r}: {error}") from None
    return name, {"scratchpad": mask}


def task_key(row: dict[str, Any]) -> str:
    """The task as the tables name it: ``addition[scratchpad icovr]``, ``contextual_counting (encdec_causal)``."""
    options = row.get("task_options") or {}
    name = row["task"]
    if options.get("scratchpad") is not None:
        name += f"[scratchpad {options['scratchpad'] or 'empty'}]"
    arch = row.get("architecture", DECODER)
    return name if arch == DECODER else f"{name} ({arch})"


def task_entry(config: Config, name: str) -> dict[str, Any]:
    """The config's entry of task ``name`` with every field filled (``options`` from the task's defaults)."""
    entry = config.tasks.get(name) or TaskEntry()
    for section, cls in (("training", Training), ("evaluation", Evaluation)):
        unknown = set(getattr(entry, section) or {}) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"config key tasks.{name}.{section}: unknown keys {sorted(unknown)}; allowed: "
                             f"{sorted(f.name for f in dataclasses.fields(cls))}")
    return {
        "options": dict(entry.options or {}),
        "encoders": list(entry.encoders or config.encoders),
        "architectures": list(entry.architectures or [DECODER]),
        "training": {**dataclasses.asdict(config.training), **(entry.training or {})},
        "early_stop": dataclasses.asdict(entry.early_stop) if entry.early_stop else None,
        "evaluation": {**dataclasses.asdict(config.evaluation), **(entry.evaluation or {})},
    }


def build_specs(config: Config) -> list[dict[str, Any]]:
    """One spec per (task, architecture, encoder, seed); CoPE only with causal attention."""
    specs = []
    for text in config.run_tasks:
        name, extra = parse_task(text)
        entry = task_entry(config, name)
        for arch in entry["architectures"]:
            if arch not in ARCHITECTURES:
                raise ValueError(f"config key tasks.{name}.architectures: {arch!r} is not one of {ARCHITECTURES}")
            for enc in entry["encoders"]:
                if enc == "cope" and arch == "encdec_bidirectional":
                    continue  # CoPE is defined for causal attention only
                for seed in config.seeds:
                    spec = {
                        "task": name,
                        "task_options": {**entry["options"], **extra},
                        "encoding": enc,
                        **({"encoding_options": ENCODING_OPTIONS[enc]} if enc in ENCODING_OPTIONS else {}),
                        "seed": seed,
                        "model": dataclasses.asdict(config.model),
                        "training": entry["training"],
                        "evaluation": entry["evaluation"],
                        **({"early_stop": entry["early_stop"]} if entry["early_stop"] else {}),
                        **({} if arch == DECODER else {"architecture": arch}),
                    }
                    specs.append({"case": case_name(spec), **spec})
    return specs


def case_name(spec: dict[str, Any]) -> str:
    """A run's name without its seed: task, scratchpad, architecture, encoder, embedding scale."""
    scratchpad = spec["task_options"].get("scratchpad")
    parts = [spec["task"] + ("" if scratchpad is None else f"-sp{scratchpad or 'empty'}")]
    if spec.get("architecture", DECODER) != DECODER:
        parts.append(spec["architecture"])
    parts.append(spec["encoding"])
    if not spec["model"].get("scale_embeddings", True):
        parts.append("gpt2emb")
    return "__".join(parts)


def evaluated_lengths(task: Any, split: str, stride: int) -> list[int]:
    """Every ``stride``-th length ``split`` draws from (``task.lengths``), always with the longest one."""
    support = task.lengths(split)
    return sorted({*support[:: max(1, stride)], support[-1]})


def evaluation_examples(task: Any, split: str, lengths: list[int], per_length: int, seed: int) -> list[Any]:
    """``per_length`` examples of ``split`` at each length, from a stream independent of the training data."""
    examples = []
    for length in lengths:
        rng = random.Random(f"{task.name}/{split}/evaluation/{seed}/{length}")
        examples += [task.sample(rng, length, split=split) for _ in range(per_length)]
    return examples


# ------------------------------------------------------------------------------------------- one run
def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train and test one (task, encoder, seed); runs in a worker process. Returns a result row."""
    import lightning as L

    from pe_toolkit.quiet import quiet_third_party
    from pe_toolkit.training import EncoderDecoderModule, SequenceLMModule, TaskDataModule
    from pe_toolkit.training.callbacks import FitClock, LossHistory

    class EvaluationData(TaskDataModule):
        """The task's data with fixed test sets: ``parts[part]`` is what ``trainer.test`` decodes."""

        parts: dict[str, list[Any]] = {}
        part = "iid"

        def examples(self, split: str) -> list[Any]:
            return self.parts[self.part] if split == "test" else super().examples(split)

    quiet_third_party()  # in-process calls (tests) too, not only the executor's workers
    start = time.perf_counter()
    L.seed_everything(spec["seed"], verbose=False)
    training, evaluation = spec["training"], spec["evaluation"]
    early_stop = spec.get("early_stop")
    architecture = spec.get("architecture", DECODER)
    data = EvaluationData(
        spec["task"],
        spec["task_options"],
        num_train=training["num_train"],
        num_val=early_stop["num_val"] if early_stop else 0,
        num_test=0,
        batch_size=training["batch_size"],
        seed=spec["seed"],
        layout="causal" if architecture == DECODER else "seq2seq",
    )
    task = data.task
    stride, per_length = evaluation["length_stride"], evaluation["per_length"]
    data.parts = {
        "iid": evaluation_examples(task, "train", evaluated_lengths(task, "train", stride), per_length,
                                   spec["seed"]),
        "ood": evaluation_examples(task, "test", evaluated_lengths(task, "test", stride), per_length,
                                   spec["seed"]),
    }
    encoding_options = resolve_encoding_options(spec.get("encoding_options"), data)
    steps = training["steps"]
    optimisation = {"lr": training["lr"], "warmup_steps": max(1, steps // 20), "max_steps": steps}
    if architecture == DECODER:
        module = SequenceLMModule(data.vocab_size, encoding=spec["encoding"],
                                  encoding_options=encoding_options, **optimisation, **spec["model"])
    else:
        model = dict(spec["model"])
        layers = model.pop("num_layers")
        module = EncoderDecoderModule(
            data.vocab_size,
            encoding=spec["encoding"],
            encoding_options=encoding_options,
            encoder_layers=max(1, layers - 1),
            decoder_layers=1,
            encoder_causal=architecture == "encdec_causal",
            **optimisation,
            **model,
        )
    trunk = module.model if architecture == DECODER else module
    label = f"{task_key(spec)} {spec['encoding']} seed {spec['seed']}"
    losses = LossHistory(every_n_steps=max(1, steps // 20), label=label, stream=None)
    clock = FitClock()
    curve = ValidationCurve(early_stop["target_error"], stop=early_stop.get("stop", True)) if early_stop else None
    callbacks: list[Any] = [losses, clock, *([curve] if curve else [])]
    device = trainer_options(spec.get("device"))
    trainer = L.Trainer(
        max_steps=steps,
        **device,
        # a same-seed rerun must reproduce: on a GPU, deterministic kernels where they exist
        deterministic="warn" if device["accelerator"] != "cpu" else None,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1.0 if early_stop else 0,
        check_val_every_n_epoch=None if early_stop else 1,
        val_check_interval=early_stop["every_n_steps"] if early_stop else None,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )
    trainer.fit(module, data)
    final_loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
    steps_done = int(trainer.global_step)
    per_part = {}
    for part in ("iid", "ood"):
        data.part = part
        trainer.test(module, data, verbose=False)
        per_part[part] = {int(k): {"correct": c, "total": t, **failures(module.test_outcomes[k])}
                          for k, (c, t) in sorted(module.test_results.items())}

    def accuracy(part: str) -> float | None:
        correct = sum(v["correct"] for v in per_part[part].values())
        total = sum(v["total"] for v in per_part[part].values())
        return correct / total if total else None

    return {
        "kind": "run",
        "task": spec["task"],
        "task_options": spec["task_options"],
        "encoding": spec["encoding"],
        "seed": spec["seed"],
        "iid_accuracy": accuracy("iid"),
        "ood_accuracy": accuracy("ood"),
        "per_length_iid": per_part["iid"],
        "per_length_ood": per_part["ood"],
        "final_train_loss": final_loss,
        "loss_history": [[step, loss] for step, loss in losses.history],
        "steps_done": steps_done,
        "validation_curve": [list(point) for point in curve.history] if curve else None,
        "target_reached": curve.reached_at if curve else None,
        "architecture": architecture,
        "encoding_options": encoding_options,
        "parameters": _count(trunk),
        "parameters_without_pe": _count(trunk, exclude_positional=True),
        "train_lengths": list(task.train_lengths),
        "test_lengths": list(task.test_lengths),
        "seconds": time.perf_counter() - start,
        "train_seconds": clock.seconds,
    }


def _validation_curve_class():
    import lightning as L

    class _ValidationCurve(L.Callback):
        """In-distribution validation error after each validation; with ``stop``, ends the fit below ``target_error``.

        :attr:`history` holds ``(global step, validation exact-match error)``; :attr:`reached_at` is the
        first step whose error was below the target (``None`` if the budget ran out first).
        """

        def __init__(self, target_error: float, stop: bool = True) -> None:
            super().__init__()
            if not 0.0 < target_error < 1.0:
                raise ValueError(f"early_stop.target_error must be in (0, 1), got {target_error}")
            self.target_error, self.stop = float(target_error), bool(stop)
            self.history: list[tuple[int, float]] = []
            self.reached_at: int | None = None

        def state_dict(self) -> dict[str, Any]:
            return {"history": [list(p) for p in self.history], "reached_at": self.reached_at}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.history = [(int(s), float(e)) for s, e in state_dict["history"]]
            self.reached_at = state_dict["reached_at"]

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.sanity_checking:
                return
            correct = sum(c for c, _ in pl_module.val_results.values())
            total = sum(t for _, t in pl_module.val_results.values())
            error = 1.0 - correct / max(total, 1)
            self.history.append((int(trainer.global_step), error))
            if error < self.target_error and self.reached_at is None:
                self.reached_at = int(trainer.global_step)
            if error < self.target_error and self.stop:
                trainer.should_stop = True

    return _ValidationCurve


def ValidationCurve(target_error: float, stop: bool = True) -> Any:  # noqa: N802  (built lazily: no Lightning here)
    """A Lightning callback recording the validation error curve (with ``stop``: stopping below ``target_error``)."""
    return _validation_curve_class()(target_error, stop)


def resolve_encoding_options(options: dict[str, Any] | None, data: Any) -> dict[str, Any]:
    """The encoder options of a run, each ``"context"`` replaced by the longest training sequence + 1."""
    resolved = dict(options or {})
    for key, value in resolved.items():
        if value == CONTEXT:
            resolved[key] = data.max_sequence_length(["train"]) + 1
    return resolved


def failures(outcomes: dict[str, int]) -> dict[str, int]:
    """The counts of the ways an answer went wrong (:data:`FAILURES`) from one length's outcome counts."""
    return {name: outcomes[name] for name in FAILURES}


def _count(module, exclude_positional: bool = False) -> int:
    from pe_toolkit.nn import Transformer

    if isinstance(module, Transformer):
        return module.num_parameters(exclude_positional=exclude_positional)
    return sum(_count(m, exclude_positional) for m in module.children() if isinstance(m, Transformer))


# ------------------------------------------------------------------------------------------- summaries
def mean_reciprocal_rank(rows: list[dict[str, Any]], metric: str = "ood_accuracy") -> dict[str, float]:
    """MRR of each encoder across tasks: rank encoders per task by the seed-mean ``metric``.

    Ties share the best rank (competition ranking), so equal encoders are not ordered by accident.
    """
    by_task: dict[str, dict[str, list[float]]] = {}
    for row in rows:
        if row[metric] is not None:
            by_task.setdefault(task_key(row), {}).setdefault(row["encoding"], []).append(row[metric])
    reciprocal: dict[str, list[float]] = {}
    for scores in by_task.values():
        means = {enc: sum(v) / len(v) for enc, v in scores.items()}
        for enc, value in means.items():
            rank = 1 + sum(other > value for other in means.values())
            reciprocal.setdefault(enc, []).append(1.0 / rank)
    return {enc: sum(v) / len(v) for enc, v in reciprocal.items()}


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, encoder): IID / OOD accuracy over seeds (mean, 95 % t interval within [0, 1], n; a missing value
    is counted in ``n_nonfinite``, never dropped silently)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((task_key(row), row["encoding"]), []).append(row)
    out = []
    for (task, enc), members in sorted(groups.items()):
        seconds = [m["seconds"] for m in members if m.get("seconds") is not None]
        out.append(
            {
                "task": task,
                "encoding": enc,
                "seeds": len(members),
                "iid": bounded_interval((m["iid_accuracy"] for m in members), bounds=ACCURACY).as_dict(),
                "ood": bounded_interval((m["ood_accuracy"] for m in members), bounds=ACCURACY).as_dict(),
                "seconds": sum(seconds) / len(seconds) if seconds else None,
            }
        )
    return out


# The wrong-answer outcomes of pe_toolkit.training.exact_match.OUTCOMES (all but "correct"), spelled out so
# that this module does not import Lightning in the parent process.
FAILURES = ("stopped_early", "ran_over", "wrong_tokens")


def failure_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, encoder): the share of OOD answers that stopped early, ran over, or had a wrong token
    (summed over seeds)."""
    groups: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        ood = list(row.get("per_length_ood", {}).values())
        if not ood or any(name not in v for v in ood for name in FAILURES):
            continue
        sums = groups.setdefault((task_key(row), row["encoding"]), dict.fromkeys(("total", *FAILURES), 0))
        for v in ood:
            for name in ("total", *FAILURES):
                sums[name] += v[name]
    return [{"task": task, "encoding": enc, "answers": sums["total"],
             **{name: sums[name] / sums["total"] for name in FAILURES}}
            for (task, enc), sums in sorted(groups.items()) if sums["total"]]


# ------------------------------------------------------------------------------------------- claims
# The papers' numbers the claims are derived from. Kazemnejad et al. 2023: means over 3 seeds of OOD exact
# match from the repo's result dumps (McGill-NLP/length-generalization, results/*.jsonl; reverse = their
# reverse_x2 split mc2x_tr20_ts40, addition = full scratchpad). A claim "a above b" is made for every pair
# whose paper means differ by at least PAPER_GAP.
PAPER_OOD_ACCURACY: dict[str, dict[str, float]] = {
    "copy_repeat": {"nope": 0.986, "t5": 0.771, "alibi": 0.289, "rope": 0.000, "sinusoidal": 0.000},
    "copy_replace": {"nope": 0.967, "t5": 0.939, "alibi": 0.170, "rope": 0.016, "sinusoidal": 0.000},
    "copy_random": {"nope": 0.305, "t5": 0.420, "alibi": 0.331, "rope": 0.011, "sinusoidal": 0.028},
    "copy_repeat_x2": {"nope": 0.974, "t5": 0.558, "alibi": 0.194, "rope": 0.000, "sinusoidal": 0.000},
    "reverse_x2": {"nope": 0.473, "t5": 0.448, "alibi": 0.195, "rope": 0.053, "sinusoidal": 0.011},
    "scan_length": {"nope": 0.797, "t5": 0.798, "alibi": 0.438, "rope": 0.283, "sinusoidal": 0.057},
    "pcfg_productivity": {"nope": 0.433, "t5": 0.439, "alibi": 0.428, "rope": 0.439, "sinusoidal": 0.366},
    "addition[scratchpad icovr]": {"nope": 0.166, "t5": 0.162, "alibi": 0.117, "rope": 0.066,
                                   "sinusoidal": 0.075},
}
PAPER_GAP = 0.1
# Golovneva et al. 2024, Table 3: in-distribution test error (%) on counting with 3 variables.
PAPER_COUNTING_ERROR: dict[str, float] = {"cope": 1.2, "music_relative": 17.8, "sinusoidal": 67.6}
PAPER_COUNTING_BUDGET = {"programs": 100 * 10_000, "batch_size": 64, "max_statements": 512}


def claim_list() -> list[dict[str, Any]]:
    """Every paper claim the benchmark checks: ``{paper, task, a, b, metric, higher_is_better, text}``."""
    claims = []
    for task, paper in PAPER_OOD_ACCURACY.items():
        for a, va in paper.items():
            for b, vb in paper.items():
                if va - vb >= PAPER_GAP:
                    claims.append({"paper": "Kazemnejad et al. 2023", "task": task, "a": a, "b": b,
                                   "metric": "ood", "higher_is_better": True, "learned": True,
                                   "text": f"{a} above {b} out of distribution (paper {va:.3f} vs {vb:.3f})"})
    for a, va in PAPER_COUNTING_ERROR.items():
        for b, vb in PAPER_COUNTING_ERROR.items():
            if va < vb:
                claims.append({"paper": "Golovneva et al. 2024 (Table 3)", "task": "cope_counting", "a": a, "b": b,
                               "metric": "iid_error", "higher_is_better": False, "learned": False,
                               "text": f"{a} error below {b} in distribution (paper {va} % vs {vb} %)"})
    causal, bidirectional = "contextual_counting (encdec_causal)", "contextual_counting (encdec_bidirectional)"
    for enc in ("nope", "rope", "sinusoidal"):
        claims.append({"paper": "Golkar et al. 2024", "task": causal, "task_b": bidirectional, "a": enc, "b": enc,
                       "metric": "ood", "higher_is_better": True, "learned": True,
                       "text": f"causal encoder above bidirectional with {enc}, more regions than in training"})
    for enc in ("nope", "rope"):
        claims.append({"paper": "Golkar et al. 2024", "task": causal, "a": enc, "b": "sinusoidal", "metric": "ood",
                       "higher_is_better": True, "learned": True,
                       "text": f"{enc} above APE (causal encoder), more regions than in training"})
    for task in ("selective_copy", "flip_flop"):
        for b in ("rope", "sinusoidal"):
            claims.append({"paper": "Golovneva et al. 2024 (Tables 1-2; numbers not transcribed)", "task": task,
                           "a": "cope", "b": b, "metric": "ood", "higher_is_better": True, "learned": True,
                           "text": f"CoPE above {b} out of distribution (other density)"})
    return claims


def _values(members: list[dict[str, Any]], metric: str) -> list[Any]:
    """Per-seed values of ``metric`` (``"ood"``, or ``"iid_error"`` = 1 - IID exact match); ``None`` when missing."""
    if metric == "iid_error":
        return [None if m["iid_accuracy"] is None else 1.0 - m["iid_accuracy"] for m in members]
    return [m[f"{metric}_accuracy"] for m in members]


def _iid_mean(members: list[dict[str, Any]]) -> float:
    values = [m["iid_accuracy"] for m in members]
    return math.nan if not values or any(v is None for v in values) else sum(values) / len(values)


def claims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each claim of :func:`claim_list` decided by :func:`~pe_toolkit.bench.verdict.decide_claim` (Welch t on the
    difference of per-seed values, accuracies bounded to [0, 1]).

    ``untested`` when a side has no runs or fewer than 2 seeds, or (every claim on an out-of-distribution metric:
    copy, reverse, SCAN, contextual counting, selective copy, flip-flop) when a side did not learn the task in
    distribution (seed-mean IID exact match < :data:`LEARNED_IID`): its OOD numbers then say nothing.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((task_key(row), row["encoding"]), []).append(row)
    out = []
    for claim in claim_list():
        a = groups.get((claim["task"], claim["a"]))
        b = groups.get((claim.get("task_b", claim["task"]), claim["b"]))
        name = f"{claim['paper']}, {claim['task']}: {claim['text']}"
        common = {"higher_is_better": claim["higher_is_better"], "bounds": ACCURACY}
        if a is None or b is None:
            missing = [enc for enc, side in ((claim["a"], a), (claim["b"], b)) if side is None]
            decided = untested_claim(name, f"no runs of {missing}", _values(a or [], claim["metric"]),
                                     _values(b or [], claim["metric"]), **common)
            iid = (math.nan, math.nan)
        else:
            iid = (_iid_mean(a), _iid_mean(b))
            unlearned = [side[0]["encoding"] for side, mean in ((a, iid[0]), (b, iid[1])) if not mean >= LEARNED_IID]
            preconditions = [(not (claim["learned"] and unlearned),
                              f"not learned in distribution by {unlearned} (seed-mean IID exact match below "
                              f"{LEARNED_IID})")]
            decided = decide_claim(_values(a, claim["metric"]), _values(b, claim["metric"]), name=name,
                                   preconditions=preconditions, **common)
        row = decided.as_row()
        out.append({**row, "claim_kind": row["kind"], "kind": "claim", "paper": claim["paper"],
                    "task": claim["task"], "encoder_a": claim["a"], "encoder_b": claim["b"],
                    "metric": claim["metric"], "iid_a": iid[0], "iid_b": iid[1]})
    return out


def claim_lines(results: list[dict[str, Any]]) -> list[str]:
    """The claims as report lines, with both sides' intervals, the difference's and the test."""
    lines = []
    for r in results:
        diff = r["difference"]
        shown = f" Measured {format_side(r['a'])} vs {format_side(r['b'])}"
        if math.isfinite(diff["mean"]):
            shown += f"; difference {diff['mean']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}] ({r['test']})"
        if r.get("min_detectable_effect") is not None:
            shown += f"; this n detects about {r['min_detectable_effect']:.3f}"
        lines.append(f"- {r['name']}: **{r['verdict']}** ({r['reason']}).{shown}.")
    return lines


def counting_section(rows: list[dict[str, Any]], config: Config) -> str:
    """CoPE counting: the validation learning curves, whether the target was reached, and the paper's budget."""
    counting = [r for r in rows if r["task"] == "cope_counting" and r.get("validation_curve")]
    if not counting:
        return ""
    entry = task_entry(config, "cope_counting")
    early_stop = entry["early_stop"]
    target, batch, budget = early_stop["target_error"], entry["training"]["batch_size"], entry["training"]["steps"]
    stops = early_stop.get("stop", True)
    steps = sorted({s for r in counting for s, _ in r["validation_curve"]})
    encodings = sorted({r["encoding"] for r in counting})
    table = []
    for step in steps:
        line = {"step": step}
        for enc in encodings:
            errors = [e for r in counting if r["encoding"] == enc for s, e in r["validation_curve"] if s == step]
            line[enc] = format_interval(mean_interval(errors), ".3f") if errors else "stopped"
        table.append(line)
    runs = []
    paper = PAPER_COUNTING_BUDGET
    for r in sorted(counting, key=lambda r: (r["encoding"], r["seed"])):
        per_step = r["train_seconds"] / max(1, r["steps_done"])
        paper_steps = paper["programs"] / batch
        runs.append({"encoding": r["encoding"], "seed": r["seed"], "steps": r["steps_done"],
                     "reached": "yes" if r["target_reached"] is not None else "no",
                     "last_error": r["validation_curve"][-1][1], "programs": r["steps_done"] * batch,
                     "s_per_step": per_step, "paper_hours": paper_steps * per_step / 3600})
    text = (
        "\n## CoPE counting: the in-distribution validation error during training\n\n"
        f"Validation exact-match error on in-distribution programs (mean [95 % interval] over seeds) every "
        f"{early_stop['every_n_steps']} steps; "
        + (f"a run stops once it is below {target:.0%} or after the preset's budget of {budget} steps of batch "
           f"{batch} ('stopped' = every run of that encoder had stopped; an early stop truncates the final error, "
           "so the claims on it compare runs stopped at different errors)"
           if stops else f"every run trains the whole budget of {budget} steps of batch {batch} (no early stop: "
           f"the final error is the metric the claims compare); 'reached' = the first step below {target:.0%}")
        + ".\n\n"
        + markdown_table(table, ["step", *encodings])
        + "\n" + markdown_table(
            runs, ["encoding", "seed", ("steps", "steps trained"), ("reached", f"error < {target:.0%}"),
                   ("last_error", "last val error"), ("programs", "programs seen"),
                   ("s_per_step", "s / step"), ("paper_hours", "paper's budget here (h)")],
            {"last_error": ".3f", "s_per_step": ".3f", "paper_hours": ".1f"})
        + f"\nThe paper trains 100 epochs of 10,000 programs ({paper['programs']:,} programs, "
        f"{paper['programs'] // paper['batch_size']:,} steps of batch {paper['batch_size']}) on programs of up to "
        f"{paper['max_statements']} statements with a 4-layer, 256-wide model. 'paper's budget here' is the "
        "time that many programs would take at this run's measured seconds per step (this preset's shorter "
        "programs and smaller model: the paper's setting costs more per step).\n"
    )
    return text


def length_curve(members: list[dict[str, Any]], part: str) -> tuple[list[int], list[dict[str, Any]]]:
    """Lengths of ``part`` (``"iid"`` / ``"ood"``) and, at each, the accuracy over seeds as ``mean_interval``."""
    key = f"per_length_{part}"
    lengths = sorted({int(k) for m in members for k in m.get(key, {})})
    summaries = []
    for n in lengths:
        values = []
        for m in members:
            counts = m.get(key, {}).get(n) or m.get(key, {}).get(str(n))
            if counts and counts["total"]:
                values.append(counts["correct"] / counts["total"])
        summaries.append(mean_interval(values))
    return lengths, summaries


def plot(rows: list[dict[str, Any]]) -> Any:
    """Accuracy against length per task: seed means with 95 % intervals as error bars (IID solid, OOD dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({task_key(r) for r in rows})
    columns = max(1, min(3, len(tasks)))
    grid_rows = max(1, math.ceil(len(tasks) / columns))
    fig, axes = plt.subplots(grid_rows, columns, figsize=(5.5 * columns, 4 * grid_rows), squeeze=False)
    colors = {enc: f"C{i % 10}" for i, enc in enumerate(sorted({r["encoding"] for r in rows}))}  # one per encoder
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks):
        task_rows = [r for r in rows if task_key(r) == task]
        for enc in sorted({r["encoding"] for r in task_rows}):
            members = [r for r in task_rows if r["encoding"] == enc]
            for part, style in (("iid", "-"), ("ood", "--")):
                lengths, summaries = length_curve(members, part)
                means = [s["mean"] for s in summaries]
                errors = [[s["mean"] - s["low"] if math.isfinite(s["low"]) else 0.0 for s in summaries],
                          [s["high"] - s["mean"] if math.isfinite(s["high"]) else 0.0 for s in summaries]]
                ax.errorbar(lengths, means, yerr=errors, color=colors[enc], linestyle=style, marker=".", capsize=2,
                            label=enc if part == "iid" else None)
        high = task_rows[0]["train_lengths"][1]
        ax.axvline(high + 0.5, color="grey", linestyle=":", linewidth=1)
        encodings = {r["encoding"] for r in task_rows}
        seeds = sorted({sum(r["encoding"] == e for r in task_rows) for e in encodings})
        ax.set_title(f"{task}\n(train <= {high}; IID solid, OOD dashed; seeds {seeds})", fontsize=9)
        ax.set_xlabel("length")
        ax.set_ylabel("exact match (mean, 95 % interval)")
        ax.set_ylim(-0.02, 1.02)
        if not note_if_empty(ax, "exact-match accuracy"):
            ax.legend(fontsize=7, loc="best")
    if not tasks:
        note_if_empty(axes.flat[0], "exact-match accuracy")
    fig.tight_layout()
    return fig


def trunk_sizes(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task: the architecture and the trunk's parameters without the PE (the vocabulary is the task's)."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = out.setdefault(task_key(row), {"task": task_key(row), "architecture": row.get("architecture", DECODER),
                                               "counts": set()})
        entry["counts"].add(row["parameters_without_pe"])
    return [{"task": e["task"], "architecture": e["architecture"],
             "parameters": " / ".join(f"{c:,}" for c in sorted(e["counts"]))} for e in out.values()]


def report_body(result: Result) -> str:
    config, rows, seconds = result.config, result.rows, result.seconds
    verdicts = [r for r in result.derived if r["kind"] == "claim"]
    summary = summarize(rows)
    mrr = mean_reciprocal_rank(rows)
    failing = failure_summary(rows)
    counts = {v: sum(r["verdict"] == v for r in verdicts) for v in ("reproduced", "contradicted", "inconclusive",
                                                                   "untested")}
    kazemnejad = [r for r in verdicts if r["paper"].startswith("Kazemnejad") and r["task"] in
                  {task_key({"task": parse_task(t)[0], "task_options": parse_task(t)[1]}) for t in config.run_tasks}]
    run_seconds = sum(r["seconds"] for r in rows)
    per_task = "; ".join(f"{t}: {task_entry(config, parse_task(t)[0])['training']['steps']} steps"
                         for t in config.run_tasks)
    table = [{"task": s["task"], "encoding": s["encoding"], "seeds": s["seeds"],
              "iid": format_side(s["iid"]), "ood": format_side(s["ood"]), "seconds": s["seconds"]}
             for s in summary]
    model = dataclasses.asdict(config.model)
    head = config.model.dim // config.model.num_heads
    rotary = int(head * ENCODING_OPTIONS["rope"]["rotary_fraction"]) // 2
    return (
        f"Preset `{result.preset}`. Model: {model} (head size {head}: RoPE rotates "
        f"{ENCODING_OPTIONS['rope']['rotary_fraction']:.0%} of it, {rotary} frequencies; the same trunk for every "
        f"encoder), batch {config.training.batch_size}, AdamW lr {config.training.lr}; {per_task}. Seeds "
        f"{config.seeds}; device {result.device}. Encoder options: {ENCODING_OPTIONS} ({CONTEXT!r} = the run's "
        "longest training sequence + 1; the rest use their defaults). Accuracy is exact match of greedy decoding on "
        f"{config.evaluation.per_length} examples per evaluated length and split (unless a task's evaluation says "
        "otherwise); IID = the training split, OOD = the test split (longer inputs; more regions for contextual "
        "counting; another density for selective copy and flip-flop).\n\n"
        "Trunk parameters without the PE, per task (the embedding and output layers follow the task's "
        "vocabulary):\n\n"
        + markdown_table(trunk_sizes(rows), ["task", "architecture", ("parameters", "parameters without the PE")])
        + "\n## Accuracy per task and encoder (mean [95 % Student-t interval] over seeds)\n\n"
        + markdown_table(table, ["task", "encoding", "seeds", ("iid", "IID exact match"),
                                 ("ood", "OOD exact match"), ("seconds", "s / run")], {"seconds": ".0f"})
        + "\n## Mean reciprocal rank across tasks (by seed-mean OOD accuracy)\n\n"
        "Each encoder is ranked only on the tasks it has runs for: compare MRRs over the same tasks.\n\n"
        + markdown_table(
            sorted(({"encoding": k, "mrr": v, "tasks": sum(r["encoding"] == k for r in summary)}
                    for k, v in mrr.items()), key=lambda r: -r["mrr"]),
            ["encoding", ("mrr", "MRR"), ("tasks", "tasks ranked on")], {"mrr": ".3f"})
        + "\n## How out-of-distribution answers fail\n\nShares of the OOD answers, summed over seeds.\n\n"
        + (markdown_table(failing, ["task", "encoding", ("answers", "OOD answers"),
                                    ("stopped_early", "stopped early"), ("ran_over", "ran over"),
                                    ("wrong_tokens", "wrong token")], {n: ".3f" for n in FAILURES})
           if failing else "No run recorded its answers' outcomes.\n")
        + counting_section(rows, config)
        + "\n## Against the papers' claims\n\n"
        "Each claim is decided by `pe_toolkit.bench.verdict.decide_claim` on the difference of per-seed values "
        "(Welch t, two-sided, alpha 0.05; accuracies bounded to [0, 1]): **reproduced** = the difference's interval "
        "lies on the paper's side of 0, **contradicted** = on the other side, **inconclusive** = it contains 0 "
        "(the row gives the smallest difference this n could detect), **untested** = a side has no runs or fewer "
        f"than 2 seeds, or did not learn the task in distribution (seed-mean IID exact match below {LEARNED_IID}). "
        "Kazemnejad et al.'s claims are every pair of encoders whose paper means differ by >= "
        f"{PAPER_GAP} (their reverse numbers are for `reverse_x2`, compared only with `reverse_x2` here). Counts: "
        + ", ".join(f"{n} {v}" for v, n in counts.items()) + ".\n\n"
        + (markdown_table([{"task": r["task"], "claim": f"{r['encoder_a']} > {r['encoder_b']}",
                            "paper": f"{PAPER_OOD_ACCURACY[r['task']][r['encoder_a']]:.3f} vs "
                                     f"{PAPER_OOD_ACCURACY[r['task']][r['encoder_b']]:.3f}",
                            "measured": f"{format_side(r['a'])} vs {format_side(r['b'])}",
                            "verdict": r["verdict"]} for r in kazemnejad],
                          ["task", "claim", ("paper", "paper OOD"), ("measured", "measured OOD"), "verdict"])
           + "\n" if kazemnejad else "")
        + "\n".join(claim_lines(verdicts)) + "\n"
        + "\n![accuracy vs length](accuracy_vs_length.png)\n"
        + f"\nTotal wall time {seconds:.0f} s ({run_seconds:.0f} s of run time).\n"
    )


# ------------------------------------------------------------------------------------------- benchmark
class LengthGeneralization(Benchmark):
    name = "length_generalization"
    title = "Length generalization of positional encodings"
    description = ("exact match in and beyond the training lengths per encoder on synthetic tasks: copy, SCAN, "
                   "counting, selective copy (Kazemnejad et al. 2023; CoPE; Golkar et al. 2024)")
    Config = Config
    key_fields = ("case", "seed")

    def check(self, config: Config) -> None:
        import pe_toolkit as pet

        seeds = config.seeds
        if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
            raise ValueError(f"config key 'seeds' must be a non-empty list of distinct ints >= 0, got {seeds!r}")
        if not config.run_tasks:
            raise ValueError("config key 'run_tasks' must name at least one task")
        encoders = set(config.encoders) | {e for t in config.tasks.values() for e in (t.encoders or [])}
        bad = sorted(encoders - set(pet.list_encoders()))
        if bad:
            raise ValueError(f"config key 'encoders': unknown encoder(s) {bad}; available: {pet.list_encoders()}")
        if not 0.0 <= config.model.dropout < 1.0:
            raise ValueError(f"config key 'model.dropout' must be in [0, 1), got {config.model.dropout!r}")
        for key, value in (("model.dim", config.model.dim), ("model.num_heads", config.model.num_heads),
                           ("model.num_layers", config.model.num_layers), ("training.steps", config.training.steps),
                           ("training.batch_size", config.training.batch_size),
                           ("training.num_train", config.training.num_train),
                           ("evaluation.per_length", config.evaluation.per_length),
                           ("evaluation.length_stride", config.evaluation.length_stride)):
            if value < 1:
                raise ValueError(f"config key {key!r} must be a positive int, got {value!r}")
        build_specs(config)  # unknown tasks, scratchpads, architectures and task keys: ValueError naming them

    def runs(self, config: Config) -> list[dict[str, Any]]:
        return build_specs(config)

    def run_one(self, spec: dict[str, Any]) -> dict[str, Any]:
        return run_one(spec)

    def progress_label(self, row: dict[str, Any]) -> str:
        ood = "n/a" if row["ood_accuracy"] is None else f"{row['ood_accuracy']:.3f}"
        return (f"{task_key(row)} {row['encoding']} seed {row['seed']}: iid {row['iid_accuracy']:.3f} ood {ood} "
                f"({row['seconds']:.0f}s, {row['steps_done']} steps)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        result.rows.sort(key=lambda r: (task_key(r), r["encoding"], r["seed"]))
        summary = [{**s, "kind": "summary"} for s in summarize(result.rows)]
        return summary + claims(result.rows)

    def plot(self, result: Result) -> dict[str, Any]:
        return {"accuracy_vs_length.png": plot(result.rows)}

    def report(self, result: Result) -> str:
        return report_body(result)


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="length_generalization", prog="python benchmarks/length_generalization.py"))


