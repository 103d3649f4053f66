"""Length generalization of positional encodings on synthetic tasks (Kazemnejad et al. 2023; CoPE; Golkar et al.).

Trains the same ``Transformer`` trunk once per (task, encoder, seed), where only the positional encoding
differs, on the task's training split, then decodes greedily (KV cache) a fixed number of test examples
at every evaluated length of the in-distribution (IID: the training split) and out-of-distribution (OOD:
the test split: longer inputs, more regions, another density) splits. Reports exact-match accuracy per
length, IID / OOD accuracy as a seed mean with its 95 % Student-t interval, the mean reciprocal rank
(MRR) of the encoders across tasks, and a verdict per paper claim computed from the intervals.

    python benchmarks/length_generalization.py --quick    # pipeline check, < 2 minutes
    python benchmarks/length_generalization.py            # full CPU preset (presets/length_generalization/full.yaml)
    python benchmarks/length_generalization.py --preset gpu --accelerator cuda     # the GPU preset
    python benchmarks/length_generalization.py --tasks addition:icovr scan_length --encoders nope rope
    python benchmarks/length_generalization.py --set training.steps=400 --set seeds=[0,1,2,3]

``--tasks`` takes any registered task (``pe_toolkit.tasks.list_tasks()``), optionally with a scratchpad
format after a colon (``addition:icovr``, ``parity:10110``, ``addition:none`` for no scratchpad, ``:empty``
for the frame without components; tasks with a ``scratchpad`` option only).

Every finished run is stored in ``results/length_generalization/runs/<preset>/`` with the spec that
produced it (task, encoder, seed, model, training, evaluation, torch threads, device); ``--resume``
reuses a run whose spec matches instead of training again.

Outputs: ``results.json`` (one row per run: per-length accuracy, how wrong answers failed, loss and
validation curves), ``report.md`` (tables with intervals, MRR, claims) and ``accuracy_vs_length.png``.
"""

from __future__ import annotations

import concurrent.futures
import json
import math
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    Progress,
    RunStore,
    format_interval,
    interval_verdict,
    markdown_table,
    mean_interval,
    note_if_empty,
    quiet,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)
from presets import device_options, preset_from_args, trainer_options  # noqa: E402

NAME = "length_generalization"
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
# Trunks of --model-size (over the preset's model; not for --quick).
MODEL_SIZES: dict[str, dict[str, int]] = {"large": {"dim": 256, "num_heads": 8, "num_layers": 6}}
# Spec keys that say how a run is executed, not what it computes. torch threads and the device are NOT
# here: they change the numbers (reduction order, kernels), so they are part of a run's identity.
RUNTIME_KEYS = ("print_loss", "checkpoint_every", "checkpoint_dir")
LEARNED_IID = 0.9  # in-distribution exact match below this: the task was not learned, its OOD says nothing


def stored_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` without its runtime keys: what a stored run is matched on."""
    return {k: v for k, v in spec.items() if k not in RUNTIME_KEYS}


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
        raise ValueError(f"--tasks: unknown task {name!r}; registered tasks: {', '.join(allowed)} "
                         "(optionally NAME:SCRATCHPAD, e.g. addition:icovr)")
    if not scratchpad:
        return name, {}
    with_scratchpad = [t for t in allowed if "scratchpad" in task_options(t)]
    if name not in with_scratchpad:
        raise ValueError(f"--tasks: task {name!r} has no scratchpad option; tasks with one: "
                         f"{', '.join(with_scratchpad)}")
    if scratchpad == "none":  # no scratchpad at all (a preset entry may set one)
        return name, {"scratchpad": None}
    mask = "" if scratchpad == "empty" else scratchpad  # "empty": the scratchpad frame with no component
    try:
        ScratchpadFormat.parse(mask)
    except (TypeError, ValueError) as error:
        raise ValueError(f"--tasks {text!r}: {error}") from None
    return name, {"scratchpad": mask}


def task_key(row: dict[str, Any]) -> str:
    """The task as the tables name it: ``addition[scratchpad icovr]``, ``contextual_counting (encdec_causal)``."""
    options = row.get("task_options") or row.get("spec", {}).get("task_options") or {}
    name = row["task"]
    if options.get("scratchpad") is not None:
        name += f"[scratchpad {options['scratchpad'] or 'empty'}]"
    arch = row.get("architecture", DECODER)
    return name if arch == DECODER else f"{name} ({arch})"


def task_entry(preset: dict[str, Any], name: str) -> dict[str, Any]:
    """The preset's entry of task ``name`` with every field filled (``options`` from the task's defaults)."""
    entry = dict(preset.get("tasks", {}).get(name) or {})
    unknown = set(entry) - {"options", "encoders", "architectures", "training", "early_stop", "evaluation"}
    if unknown:
        raise ValueError(f"preset tasks.{name}: unknown keys {sorted(unknown)}; allowed: options, encoders, "
                         "architectures, training, early_stop, evaluation")
    return {
        "options": dict(entry.get("options") or {}),
        "encoders": list(entry.get("encoders") or preset["encoders"]),
        "architectures": list(entry.get("architectures") or [DECODER]),
        "training": {**preset["training"], **(entry.get("training") or {})},
        "early_stop": entry.get("early_stop"),
        "evaluation": {**preset["evaluation"], **(entry.get("evaluation") or {})},
    }


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
    import torch

    from pe_toolkit.training import EncoderDecoderModule, SequenceLMModule, TaskDataModule
    from pe_toolkit.training.callbacks import FitClock, LossHistory

    class EvaluationData(TaskDataModule):
        """The task's data with fixed test sets: ``parts[part]`` is what ``trainer.test`` decodes."""

        parts: dict[str, list[Any]] = {}
        part = "iid"

        def examples(self, split: str) -> list[Any]:
            return self.parts[self.part] if split == "test" else super().examples(split)

    quiet()  # in-process calls (tests) too, not only worker_pool's workers
    torch.set_num_threads(spec["threads"])
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
    losses = LossHistory(every_n_steps=max(1, steps // 20), label=label,
                         stream=sys.stderr if spec.get("print_loss") else None)
    clock = FitClock()
    curve = ValidationCurve(early_stop["target_error"]) if early_stop else None
    callbacks: list[Any] = [losses, clock, *([curve] if curve else [])]
    resume_from = None
    if spec.get("checkpoint_dir"):
        checkpoint, resume_from = run_checkpoint(spec)
        callbacks.append(checkpoint)
    device = trainer_options(spec.get("device"))
    trainer = L.Trainer(
        max_steps=steps,
        **device,
        # a same-seed rerun must reproduce: on a GPU, deterministic kernels where they exist
        deterministic="warn" if device["accelerator"] != "cpu" else None,
        logger=False,
        enable_checkpointing=bool(spec.get("checkpoint_dir")),
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=1.0 if early_stop else 0,
        check_val_every_n_epoch=None if early_stop else 1,
        val_check_interval=early_stop["every_n_steps"] if early_stop else None,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )
    trainer.fit(module, data, ckpt_path=resume_from)
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
        "seconds": time.perf_counter() - start + clock.resumed_seconds,
        "train_seconds": clock.seconds,
        "resumed": resume_from is not None,
        "spec": stored_spec(spec),
    }


def _validation_curve_class():
    import lightning as L

    class _ValidationCurve(L.Callback):
        """In-distribution validation error after each validation; stops the fit below ``target_error``.

        :attr:`history` holds ``(global step, validation exact-match error)``; :attr:`reached_at` is the
        first step whose error was below the target (``None`` if the budget ran out first).
        """

        def __init__(self, target_error: float) -> None:
            super().__init__()
            if not 0.0 < target_error < 1.0:
                raise ValueError(f"early_stop.target_error must be in (0, 1), got {target_error}")
            self.target_error = float(target_error)
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
            if error < self.target_error:
                self.reached_at = int(trainer.global_step)
                trainer.should_stop = True

    return _ValidationCurve


def ValidationCurve(target_error: float) -> Any:  # noqa: N802  (a class built lazily: Lightning stays out of the parent)
    """A Lightning callback recording the validation error curve and stopping below ``target_error``."""
    return _validation_curve_class()(target_error)


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


def run_checkpoint(spec: dict[str, Any]) -> tuple[Any, str | None]:
    """The checkpoint callback of a run with ``checkpoint_dir``, and the checkpoint to resume from.

    ``<checkpoint_dir>/last.ckpt`` is rewritten every ``checkpoint_every`` steps; ``spec.json`` beside it
    records the configuration, and a checkpoint of another configuration is deleted, not resumed.
    The training data are a seeded ``ResumableDataLoader``, so a resumed run sees the batches the
    interrupted one would have.
    """
    from lightning.pytorch.callbacks import ModelCheckpoint

    directory = Path(spec["checkpoint_dir"])
    configuration = json.dumps(stored_spec(spec), sort_keys=True)
    spec_file = directory / "spec.json"
    if directory.exists() and not (spec_file.exists() and spec_file.read_text() == configuration):
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(configuration)
    last = directory / "last.ckpt"
    callback = ModelCheckpoint(dirpath=directory, every_n_train_steps=spec["checkpoint_every"], save_top_k=0,
                               save_last=True)
    return callback, (str(last) if last.exists() else None)


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
    """Per (task, encoder): IID / OOD accuracy over seeds as :func:`common.mean_interval` (mean, 95 % interval)."""
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
                "iid": mean_interval(m["iid_accuracy"] for m in members),
                "ood": mean_interval(m["ood_accuracy"] for m in members),
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
VERDICTS = {"better": "reproduced", "worse": "not reproduced (reversed)", "tie": "not reproduced (intervals overlap)"}


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


def _metric(summary: dict[str, Any], metric: str) -> dict[str, Any]:
    if metric == "iid_error":
        s = summary["iid"]
        return {"mean": 1 - s["mean"], "low": 1 - s["high"], "high": 1 - s["low"], "n": s["n"]}
    return summary[metric]


def claims(summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each claim of :func:`claim_list` with its verdict from the intervals (:func:`common.interval_verdict`).

    ``reproduced``: the intervals separate in the paper's direction; ``not reproduced``: they overlap or
    separate the other way; ``untested``: a side has no runs, fewer than 2 seeds (no interval), or (copy,
    reverse, contextual counting, selective copy, flip-flop: every claim on an out-of-distribution metric) did
    not learn the task in distribution (IID mean < :data:`LEARNED_IID`): its OOD numbers then say nothing.
    """
    by = {(r["task"], r["encoding"]): r for r in summary}
    out = []
    for claim in claim_list():
        a = by.get((claim["task"], claim["a"]))
        b = by.get((claim.get("task_b", claim["task"]), claim["b"]))
        result = {**claim, "a_value": None, "b_value": None}
        if a is None or b is None:
            missing = [name for name, side in ((claim["a"], a), (claim["b"], b)) if side is None]
            result["verdict"], result["why"] = "untested", f"no runs of {missing}"
        else:
            result["a_value"], result["b_value"] = _metric(a, claim["metric"]), _metric(b, claim["metric"])
            unlearned = [s["encoding"] for s in (a, b) if claim["learned"] and not s["iid"]["mean"] >= LEARNED_IID]
            if min(a["iid"]["n"], b["iid"]["n"]) < 2:
                result["verdict"], result["why"] = "untested", "fewer than 2 seeds: no interval"
            elif unlearned:
                result["verdict"], result["why"] = "untested", f"not learned in distribution by {unlearned}"
            else:
                verdict = interval_verdict(result["a_value"], result["b_value"],
                                           higher_is_better=claim["higher_is_better"])
                result["verdict"], result["why"] = VERDICTS[verdict], ""
        out.append(result)
    return out


def claim_lines(results: list[dict[str, Any]]) -> list[str]:
    """The claims as report lines, grouped by task, with the measured intervals."""
    lines = []
    for r in results:
        shown = ""
        if r["a_value"] is not None:
            fmt = ".3f"
            shown = f" Measured {format_interval(r['a_value'], fmt)} vs {format_interval(r['b_value'], fmt)}."
        why = f" ({r['why']})" if r["why"] else ""
        lines.append(f"- {r['paper']}, {r['task']}: {r['text']}: **{r['verdict']}**{why}.{shown}")
    return lines


def counting_section(rows: list[dict[str, Any]]) -> str:
    """CoPE counting: the validation learning curves, whether the target was reached, and the paper's budget."""
    counting = [r for r in rows if r["task"] == "cope_counting" and r.get("validation_curve")]
    if not counting:
        return ""
    target = counting[0]["spec"]["early_stop"]["target_error"]
    batch = counting[0]["spec"]["training"]["batch_size"]
    budget = counting[0]["spec"]["training"]["steps"]
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
        f"\n## CoPE counting: training until the in-distribution error is below {target:.0%}\n\n"
        f"Validation exact-match error on in-distribution programs (mean [95 % interval] over seeds) every "
        f"{counting[0]['spec']['early_stop']['every_n_steps']} steps; a run stops once it is below {target:.0%} "
        f"or after the preset's budget of {budget} steps of batch {batch}. 'stopped' = every run of that "
        "encoder had stopped.\n\n"
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


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Accuracy against length per task: seed means with 95 % intervals as error bars (IID solid, OOD dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({task_key(r) for r in rows})
    columns = min(3, len(tasks))
    grid_rows = math.ceil(len(tasks) / columns)
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ------------------------------------------------------------------------------------------- command line
def build_parser():
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--tasks", nargs="+", metavar="TASK[:SCRATCHPAD]",
                        help="registered tasks to run (default: the preset's `run` list), e.g. addition:icovr")
    parser.add_argument("--encoders", nargs="+", help="encoders of every task (default: the preset's, per task)")
    parser.add_argument("--seeds", nargs="+", type=int, help="seeds (default: the preset's `seeds`)")
    parser.add_argument("--steps", type=int, help="training steps per run (overrides the preset for every task)")
    parser.add_argument("--jobs", type=int, default=2, help="runs in parallel, one thread each (default 2)")
    parser.add_argument(
        "--threads", type=int,
        help="torch threads per run (default: 1 with --jobs > 1, else 2); part of a run's identity. Use 1 when "
        "another benchmark shares the CPUs: two multi-threaded processes on the same cores stall each other",
    )
    parser.add_argument(
        "--embedding-scale", choices=["vaswani", "gpt2"], default="vaswani",
        help="token embeddings: 'vaswani' (N(0, 1/dim) times sqrt(dim), unit scale like a sinusoidal PE; "
        "default) or 'gpt2' (N(0, 0.02), under which an additive sinusoidal PE drowns the tokens)",
    )
    parser.add_argument("--model-size", choices=sorted(MODEL_SIZES),
                        help=f"a larger trunk over the preset's; runs and report go to {NAME}_<size>/ (not --quick)")
    parser.add_argument("--dropout", type=float, default=0.0,
                        help=f"trunk dropout (default 0; the paper trains with 0.1); runs go to "
                             f"{NAME}[_<size>]_dropout<p>/")
    parser.add_argument("--checkpoint-every", type=int, metavar="STEPS",
                        help="save each run every STEPS steps; an interrupted run restarted with --resume continues")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same spec")
    parser.add_argument("--report-only", action="store_true",
                        help="train nothing: write the report from the finished runs found (implies --resume)")
    return parser


def run_key(spec: dict[str, Any]) -> str:
    """The file name (without ``.json``) of a run: task, scratchpad, architecture, encoder, embedding, seed."""
    scratchpad = spec["task_options"].get("scratchpad")
    parts = [spec["task"] + ("" if scratchpad is None else f"-sp{scratchpad or 'empty'}")]
    if spec.get("architecture", DECODER) != DECODER:
        parts.append(spec["architecture"])
    parts.append(spec["encoding"])
    if not spec["model"].get("scale_embeddings", True):
        parts.append("gpt2emb")
    parts.append(f"seed{spec['seed']}")
    return "__".join(parts)


def build_specs(preset: dict[str, Any], tasks: list[tuple[str, dict[str, Any]]], *, encoders: list[str] | None,
                seeds: list[int], model: dict[str, Any], steps: int | None, threads: int,
                device: dict[str, Any], print_loss: bool) -> list[dict[str, Any]]:
    """One spec per (task, architecture, encoder, seed); CoPE only with causal attention."""
    specs = []
    for name, extra in tasks:
        entry = task_entry(preset, name)
        training = {**entry["training"], **({"steps": steps} if steps is not None else {})}
        for arch in entry["architectures"]:
            if arch not in ARCHITECTURES:
                raise ValueError(f"preset tasks.{name}.architectures: {arch!r} is not one of {ARCHITECTURES}")
            for enc in encoders or entry["encoders"]:
                if enc == "cope" and arch == "encdec_bidirectional":
                    continue  # CoPE is defined for causal attention only
                for seed in seeds:
                    specs.append({
                        "task": name,
                        "task_options": {**entry["options"], **extra},
                        "encoding": enc,
                        **({"encoding_options": ENCODING_OPTIONS[enc]} if enc in ENCODING_OPTIONS else {}),
                        "seed": seed,
                        "model": model,
                        "training": training,
                        "evaluation": entry["evaluation"],
                        **({"early_stop": entry["early_stop"]} if entry["early_stop"] else {}),
                        **({} if arch == DECODER else {"architecture": arch}),
                        "threads": threads,
                        "device": device,
                        "print_loss": print_loss,
                    })
    return specs


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.resume = args.resume or args.report_only
    try:
        preset = preset_from_args(args, NAME)
        tasks = [parse_task(t) for t in (args.tasks or preset["run"])]
    except ValueError as error:
        parser.error(str(error))
    import pe_toolkit as pet

    if args.encoders:
        bad = [e for e in args.encoders if e not in pet.list_encoders()]
        if bad:
            parser.error(f"unknown encoder(s) {bad}; available: {pet.list_encoders()}")
    seeds = args.seeds or list(preset["seeds"])
    if args.quick and args.model_size is not None:
        parser.error(f"--model-size {args.model_size}: quick runs always use the quick trunk {preset['model']}")
    if not 0.0 <= args.dropout < 1.0:
        parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        parser.error(f"--checkpoint-every must be >= 1 step, got {args.checkpoint_every}")
    jobs = max(1, args.jobs)
    threads = args.threads or (1 if jobs > 1 else 2)
    # a variant of the trunk keeps its runs and report apart: length_generalization_large_dropout0.1/
    name = (NAME + (f"_{args.model_size}" if args.model_size else "")
            + (f"_dropout{args.dropout:g}" if args.dropout else ""))
    model = {**preset["model"], **(MODEL_SIZES[args.model_size] if args.model_size else {}),
             "scale_embeddings": args.embedding_scale == "vaswani",
             **({"dropout": args.dropout} if args.dropout else {})}
    device = device_options(args)
    try:
        specs = build_specs(preset, tasks, encoders=args.encoders, seeds=seeds, model=model, steps=args.steps,
                            threads=threads, device=device, print_loss=not args.quick)
    except ValueError as error:
        parser.error(str(error))

    out_dir = Path(args.out) / name
    store = RunStore(out_dir / "runs" / args.preset, resume=args.resume)  # presets never overwrite each other
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    todo = []
    for spec in specs:
        key = run_key(spec)
        stored = store.load(key, stored_spec(spec))
        if stored is not None:
            for part in ("iid", "ood"):  # JSON keys are str
                stored[f"per_length_{part}"] = {int(k): v for k, v in stored[f"per_length_{part}"].items()}
            rows.append(stored)
            continue
        if args.checkpoint_every is not None:
            checkpoints = store.runs_dir / "checkpoints" / key
            if not args.resume:
                shutil.rmtree(checkpoints, ignore_errors=True)  # a fresh run: never continue an old one
            spec = {**spec, "checkpoint_every": args.checkpoint_every, "checkpoint_dir": str(checkpoints)}
        todo.append((spec, key))
    if args.report_only:
        print(f"{name}: --report-only: {len(rows)} finished runs; not run: {[key for _, key in todo]}", flush=True)
        if not rows:
            parser.error("--report-only: no finished runs to report")
        todo = []
    print(f"{name}: {len(specs)} runs ({len(rows)} reused), {jobs} in parallel, preset {args.preset}", flush=True)
    progress = Progress(len(todo), name)
    with worker_pool(jobs) as pool:
        futures = {pool.submit(run_one, spec): (spec, key) for spec, key in todo}
        for future in concurrent.futures.as_completed(futures):
            spec, key = futures[future]
            row = future.result()
            store.save(key, stored_spec(spec), {k: v for k, v in row.items() if k != "spec"})
            if spec.get("checkpoint_dir"):
                shutil.rmtree(spec["checkpoint_dir"], ignore_errors=True)  # the stored row is the record now
            rows.append(row)
            ood = "n/a" if row["ood_accuracy"] is None else f"{row['ood_accuracy']:.3f}"
            progress(f"{task_key(row)} {spec['encoding']} seed {spec['seed']}: iid {row['iid_accuracy']:.3f} "
                     f"ood {ood} ({row['seconds']:.0f}s, {row['steps_done']} steps)")
    rows.sort(key=lambda r: (task_key(r), r["encoding"], r["seed"]))
    seconds = time.perf_counter() - start
    write_outputs(name, args, preset, rows, seconds, tasks=tasks, seeds=seeds, model=model, device=device,
                  threads=threads, jobs=jobs)
    print(f"{name}: wrote {out_dir} in {seconds:.0f} s", flush=True)
    return 0


def write_outputs(name: str, args: Any, preset: dict[str, Any], rows: list[dict[str, Any]], seconds: float, *,
                  tasks: list[tuple[str, dict[str, Any]]], seeds: list[int], model: dict[str, Any],
                  device: dict[str, Any], threads: int, jobs: int) -> None:
    """``results.json``, ``accuracy_vs_length.png`` and ``report.md``."""
    out_dir = Path(args.out) / name
    config = {"preset": args.preset, "tasks": [f"{t}{':' + o['scratchpad'] if 'scratchpad' in o else ''}"
                                               for t, o in tasks],
              "seeds": seeds, "model": model, "device": device, "threads": threads, "jobs": jobs,
              "task_entries": {t: task_entry(preset, t) for t, _ in tasks}}
    run_seconds = sum(r["seconds"] for r in rows)
    write_results(name, config, rows, seconds, root=args.out)
    plot(rows, out_dir / "accuracy_vs_length.png")
    summary = summarize(rows)
    mrr = mean_reciprocal_rank(rows)
    failing = failure_summary(rows)
    verdicts = claims(summary)
    counts = {v: sum(r["verdict"].startswith(v) for r in verdicts)
              for v in ("reproduced", "not reproduced", "untested")}
    if args.report_only:
        timing = (f"\nAssembled with --report-only from {len(rows)} stored runs, which took {run_seconds:.0f} s of "
                  "worker time when they ran.\n")
    else:
        timing = f"\nTotal wall time {seconds:.0f} s ({run_seconds:.0f} s of worker time, {jobs} jobs).\n"
    per_task = "; ".join(
        f"{task_key({'task': t, 'task_options': o})}: "
        f"{task_entry(preset, t)['training']['steps'] if args.steps is None else args.steps} steps"
        for t, o in tasks)
    table = [{"task": s["task"], "encoding": s["encoding"], "seeds": s["seeds"],
              "iid": format_interval(s["iid"]), "ood": format_interval(s["ood"]), "seconds": s["seconds"]}
             for s in summary]
    body = (
        f"Preset `{args.preset}`. Model: {model} (same trunk for every encoder; {rows[0]['parameters_without_pe']:,} "
        f"parameters without the PE in the first run), batch {preset['training']['batch_size']}, AdamW lr "
        f"{preset['training']['lr']}; {per_task}. Seeds {seeds}; torch threads {threads}; device {device}. "
        f"Encoder options: {ENCODING_OPTIONS} ({CONTEXT!r} = the run's longest training sequence + 1; the rest "
        "use their defaults). Accuracy is exact match of greedy decoding on "
        f"{preset['evaluation']['per_length']} examples per evaluated length and split (unless a task's "
        "evaluation says otherwise); IID = the training split, OOD = the test split (longer inputs; more regions "
        "for contextual counting; another density for selective copy and flip-flop).\n\n"
        "## Accuracy per task and encoder (mean [95 % Student-t interval] over seeds)\n\n"
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
        + counting_section(rows)
        + "\n## Against the papers' claims\n\n"
        f"Verdicts from the 95 % intervals over seeds (`interval_verdict`): **reproduced** = the intervals "
        "separate in the paper's direction. Kazemnejad et al.'s claims are every pair of encoders whose paper "
        f"means differ by >= {PAPER_GAP} (their reverse numbers are for `reverse_x2`, compared only with "
        f"`reverse_x2` here). Counts: {counts['reproduced']} reproduced, {counts['not reproduced']} not, "
        f"{counts['untested']} untested.\n\n" + "\n".join(claim_lines(verdicts)) + "\n"
        + "\n![accuracy vs length](accuracy_vs_length.png)\n"
        + timing
    )
    write_report(name, "Length generalization of positional encodings", body, root=args.out)


if __name__ == "__main__":
    sys.exit(main())
