"""Length generalization of positional encodings on synthetic tasks (Kazemnejad et al. 2023; CoPE; Golkar et al.).

The same ``Transformer`` trunk per (task, encoder, seed), only the PE differing; greedy decoding of a fixed number
of examples per length of the in-distribution (IID: training) and out-of-distribution (OOD: longer, more regions,
another density) splits; exact match per length, seed means with 95 % intervals, the encoders' mean reciprocal
rank, and the papers' claims from ``decide_claim``. Protocol and results: ``docs/tutorials/length_generalization.md``.

    pe-toolkit bench length_generalization --quick        # pipeline check, < 2 minutes
    pe-toolkit bench length_generalization                # full CPU preset: Kazemnejad's copy family and SCAN
    pe-toolkit bench length_generalization --preset families   # CoPE counting, Golkar, selective copy, flip-flop
    pe-toolkit bench length_generalization --preset gpu --accelerator cuda
    pe-toolkit bench length_generalization --set "run_tasks=[addition:icovr, scan_length]" --set "encoders=[nope, rope]"
    python benchmarks/length_generalization.py --quick    # the same code
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Literal, TypedDict

from jsonargparse.typing import NonNegativeInt, OpenUnitInterval, PositiveFloat, PositiveInt

from pe_toolkit.bench import Benchmark, Result, Tuning, trainer_options
from pe_toolkit.bench.checks import distinct
from pe_toolkit.bench.config import Dropout, ModelSize, quiet_trainer
from pe_toolkit.bench.plots import finish, new_figure, plot_intervals
from pe_toolkit.bench.report import markdown_table
from pe_toolkit.bench.summary import summarize_groups
from pe_toolkit.bench.verdict import VERDICTS, claim_row, decide_claim, format_side, summarize

DECODER = "decoder"
# Encoder options of the papers' code: Kazemnejad et al. 2023 rotate the first 25 % of each head's dims; CoPE's
# npos = block_size + 1 (CONTEXT: each run's longest training sequence + 1); CoPE's relative baseline (RelPosEmb: a
# learned vector per distance, shared by the heads, up to the context) is ``music_relative`` with share_heads.
CONTEXT = "context"
ENCODING_OPTIONS: dict[str, dict[str, Any]] = {
    "rope": {"rotary_fraction": 0.25},
    "cope": {"npos_max": CONTEXT},
    "music_relative": {"max_distance": CONTEXT, "share_heads": True},
}
LEARNED_IID = 0.9  # in-distribution exact match below this: the task was not learned, its OOD says nothing
ACCURACY = (0.0, 1.0)
METRICS = {"iid_accuracy": ACCURACY, "ood_accuracy": ACCURACY, "seconds": None}
# The wrong-answer outcomes of pe_toolkit.training.exact_match.OUTCOMES (all but "correct"), spelled out so
# that this module does not import Lightning in the parent process.
FAILURES = ("stopped_early", "ran_over", "wrong_tokens")


# ------------------------------------------------------------------------------------------- config
@dataclasses.dataclass
class Model(ModelSize):  # encoder-decoder: num_layers - 1 encoder layers and 1 decoder layer
    dropout: Dropout = 0.0
    # Token embeddings. Default: T5's N(0, 1) (the paper's model is a T5 decoder), used without a multiplier, and
    # an untied output head (N(0, 0.02); T5 ties it and scales the logits by dim^-0.5 instead). One-run probes at
    # 6,000 steps and rates NoPE 0.001, ALiBi 0.004, APE 0.001, IID exact match (2026-12-04), on the runs that
    # failed with the two other trunks:
    #   trunk                                   copy_replace      copy_replace     copy_random   copy_random
    #                                           NoPE s0           ALiBi s1         APE s0        NoPE s1
    #   scale_embeddings (N(0,1/dim) x sqrt)    0.678             0.555            0.9975        1.000 (late)
    #   GPT-2 (embedding_std null, tied)        1.000             1.000            0.007 (<= 0.018 at 3 lrs)
    #   T5 (embedding_std 1, untied): default   0.962             1.000            0.991         0.994
    # Scaled: the embeddings' Adam steps are sqrt(dim) times larger relative to their scale; GPT-2: the unit-scale
    # sinusoidal APE drowns tokens of scale 0.02.
    scale_embeddings: bool = False
    embedding_std: PositiveFloat | None = 1.0
    tie_embeddings: bool = False


@dataclasses.dataclass
class Training:
    steps: PositiveInt
    batch_size: PositiveInt
    lr: PositiveFloat
    num_train: PositiveInt


@dataclasses.dataclass
class LrTuning:  # the learning rate on the first seed, by IID exact match
    lrs: list[PositiveFloat]  # the starting grid; the first value wins ties (IID accuracy saturates at 1)
    max_extensions: NonNegativeInt = 2
    # encoder: one rate per encoder, tried on the first run task (the same task for every encoder); case: one per
    # task, architecture and encoder (task families whose encoder lists differ share no first task)
    per: Literal["encoder", "case"] = "encoder"


@dataclasses.dataclass
class Evaluation:
    per_length: PositiveInt  # test examples per evaluated length and split
    length_stride: PositiveInt  # every n-th length of a split (its longest always)


class TrainingChange(TypedDict, total=False):
    steps: PositiveInt
    batch_size: PositiveInt
    lr: PositiveFloat
    num_train: PositiveInt


class EvaluationChange(TypedDict, total=False):
    per_length: PositiveInt
    length_stride: PositiveInt


@dataclasses.dataclass
class EarlyStop:  # validation on num_val IID examples every n steps; stop below target_error, or only record
    target_error: OpenUnitInterval
    every_n_steps: PositiveInt
    num_val: PositiveInt
    stop: bool = True


@dataclasses.dataclass
class TaskEntry:  # a task's options; optionally its own encoders, architectures, changes, validation curve
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    encoders: list[str] | None = None
    architectures: list[Literal["decoder", "encdec_causal", "encdec_bidirectional"]] | None = None
    training: TrainingChange | None = None
    early_stop: EarlyStop | None = None
    evaluation: EvaluationChange | None = None


@dataclasses.dataclass
class Config:
    run_tasks: list[str]  # registered tasks, optionally NAME:SCRATCHPAD (addition:icovr, addition:none, :empty)
    encoders: list[str]
    seeds: list[NonNegativeInt]
    model: Model
    training: Training
    evaluation: Evaluation
    tasks: dict[str, TaskEntry] = dataclasses.field(default_factory=dict)
    lr_tuning: LrTuning | None = None  # None: training.lr for every run (or lr_by_encoder)
    # a fixed learning rate per encoder, e.g. the choices of an earlier tuning run (the preset says which); every
    # run encoder needs one (a table, like the task catalogue: --set encoders=[...] may run a subset), and it
    # excludes lr_tuning and a task's own training.lr
    lr_by_encoder: dict[str, PositiveFloat] | None = None


# ------------------------------------------------------------------------------------------- runs
def parse_task(text: str) -> tuple[str, dict[str, Any]]:
    """``"addition:icovr"`` -> ``("addition", {"scratchpad": "icovr"})``; ``"copy_repeat"`` -> ``("copy_repeat", {})``.

    ``NAME:none`` is no scratchpad, ``NAME:empty`` the scratchpad frame without components. ``ValueError`` for an
    unregistered task (listing the registered ones), a scratchpad on a task without one, or an invalid format.
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
    mask = {"none": None, "empty": ""}.get(scratchpad, scratchpad)
    if mask is not None:
        try:
            ScratchpadFormat.parse(mask)
        except (TypeError, ValueError) as error:
            raise ValueError(f"run_tasks {text!r}: {error}") from None
    return name, {"scratchpad": mask}


def task_key(row: dict[str, Any]) -> str:
    """The task as the tables name it: ``addition[scratchpad icovr]``, ``contextual_counting (encdec_causal)``."""
    scratchpad = (row.get("task_options") or {}).get("scratchpad")
    name = row["task"] + ("" if scratchpad is None else f"[scratchpad {scratchpad or 'empty'}]")
    arch = row.get("architecture", DECODER)
    return name if arch == DECODER else f"{name} ({arch})"


def task_entry(config: Config, name: str) -> dict[str, Any]:
    """The config's entry of task ``name`` with every field filled (``options`` from the task's defaults)."""
    entry = config.tasks.get(name) or TaskEntry()
    return {
        "options": dict(entry.options or {}),
        "encoders": list(entry.encoders or config.encoders),
        "architectures": list(entry.architectures or [DECODER]),
        "training": {**dataclasses.asdict(config.training), **(entry.training or {})},
        "early_stop": dataclasses.asdict(entry.early_stop) if entry.early_stop else None,
        "evaluation": {**dataclasses.asdict(config.evaluation), **(entry.evaluation or {})},
    }


def case_name(spec: dict[str, Any]) -> str:
    """A run's name without its seed: task, scratchpad, architecture, encoder, embedding scale."""
    scratchpad = spec["task_options"].get("scratchpad")
    parts = [spec["task"] + ("" if scratchpad is None else f"-sp{scratchpad or 'empty'}")]
    parts += [spec["architecture"]] if spec.get("architecture", DECODER) != DECODER else []
    model, default = spec["model"], Model.__dataclass_fields__
    trunk = ["scaledemb"] if model.get("scale_embeddings") else []
    if not trunk and model.get("embedding_std", default["embedding_std"].default) != default["embedding_std"].default:
        trunk.append("gpt2emb" if model["embedding_std"] is None else f"emb{model['embedding_std']:g}")
    if model.get("tie_embeddings", default["tie_embeddings"].default) != default["tie_embeddings"].default:
        trunk.append("tied" if model["tie_embeddings"] else "untied")
    return "__".join([*parts, spec["encoding"], *trunk])


def build_specs(config: Config) -> list[dict[str, Any]]:
    """One spec per (task, architecture, encoder, seed); CoPE only with causal attention."""
    specs = []
    for text in config.run_tasks:
        name, extra = parse_task(text)
        entry = task_entry(config, name)
        for arch in entry["architectures"]:
            for enc in entry["encoders"]:
                if enc == "cope" and arch == "encdec_bidirectional":
                    continue  # CoPE is defined for causal attention only
                training = entry["training"]
                if config.lr_by_encoder and enc in config.lr_by_encoder:
                    training = {**training, "lr": config.lr_by_encoder[enc]}
                for seed in config.seeds:
                    spec = {
                        "task": name,
                        "task_options": {**entry["options"], **extra},
                        "encoding": enc,
                        **({"encoding_options": ENCODING_OPTIONS[enc]} if enc in ENCODING_OPTIONS else {}),
                        "seed": seed,
                        "model": dataclasses.asdict(config.model),
                        "training": training,
                        "evaluation": entry["evaluation"],
                        **({"early_stop": entry["early_stop"]} if entry["early_stop"] else {}),
                        **({} if arch == DECODER else {"architecture": arch}),
                    }
                    specs.append({"case": case_name(spec), **spec})
    return specs


def run_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train and test one (task, encoder, seed); runs in a worker process. Returns a result row."""
    import lightning as L

    from pe_toolkit.nn import Transformer
    from pe_toolkit.quiet import quiet_third_party
    from pe_toolkit.training import EncoderDecoderModule, SequenceLMModule, TaskDataModule
    from pe_toolkit.training.callbacks import FitClock, LossHistory, ValidationErrorCurve

    quiet_third_party()  # in-process calls (tests) too, not only the executor's workers
    start = time.perf_counter()
    L.seed_everything(spec["seed"], verbose=False)
    training, evaluation, early_stop = spec["training"], spec["evaluation"], spec.get("early_stop")
    architecture, steps = spec.get("architecture", DECODER), training["steps"]
    data = TaskDataModule(spec["task"], spec["task_options"], num_train=training["num_train"],
                          num_val=early_stop["num_val"] if early_stop else 0, num_test=0,
                          batch_size=training["batch_size"], seed=spec["seed"],
                          layout="causal" if architecture == DECODER else "seq2seq")
    encoding_options = {key: data.max_sequence_length(["train"]) + 1 if value == CONTEXT else value
                        for key, value in spec.get("encoding_options", {}).items()}  # CONTEXT: the training context
    common = {"encoding": spec["encoding"], "encoding_options": encoding_options, "lr": training["lr"],
              "warmup_steps": max(1, steps // 20), "max_steps": steps}
    model = dict(spec["model"])
    if architecture == DECODER:
        module = SequenceLMModule(data.vocab_size, **common, **model)
    else:
        module = EncoderDecoderModule(data.vocab_size, encoder_layers=max(1, model.pop("num_layers") - 1),
                                      decoder_layers=1, encoder_causal=architecture == "encdec_causal",
                                      **common, **model)
    losses = LossHistory(every_n_steps=max(1, steps // 20), stream=None,
                         label=f"{task_key(spec)} {spec['encoding']} seed {spec['seed']}")
    clock = FitClock()
    curve = ValidationErrorCurve(early_stop["target_error"], stop=early_stop.get("stop", True)) if early_stop else None
    trainer = quiet_trainer(
        spec.get("device"), max_steps=steps, num_sanity_val_steps=0,
        callbacks=[losses, clock] + ([curve] if curve else []),
        # a same-seed rerun must reproduce: on a GPU, deterministic kernels where they exist
        deterministic="warn" if trainer_options(spec.get("device"))["accelerator"] != "cpu" else None,
        limit_val_batches=1.0 if early_stop else 0, check_val_every_n_epoch=None if early_stop else 1,
        val_check_interval=early_stop["every_n_steps"] if early_stop else None)
    trainer.fit(module, data)
    final_loss, steps_done = float(trainer.callback_metrics.get("train/loss", float("nan"))), int(trainer.global_step)
    per_part = {}
    for part, split in (("iid", "train"), ("ood", "test")):
        data.test_examples = data.task.evaluation_set(split, evaluation["per_length"], spec["seed"],
                                                      stride=evaluation["length_stride"])
        trainer.test(module, data, verbose=False)
        per_part[part] = {int(k): {"correct": c, "total": t, **{n: module.test_outcomes[k][n] for n in FAILURES}}
                          for k, (c, t) in sorted(module.test_results.items())}

    def accuracy(part: str) -> float | None:
        total = sum(v["total"] for v in per_part[part].values())
        return sum(v["correct"] for v in per_part[part].values()) / total if total else None

    def parameters(exclude_positional: bool) -> int:  # the Transformer trunk(s), without the Lightning module
        return sum(m.num_parameters(exclude_positional=exclude_positional) for m in module.modules()
                   if isinstance(m, Transformer))

    return {
        "kind": "run", "task": spec["task"], "task_options": spec["task_options"], "encoding": spec["encoding"],
        "seed": spec["seed"], "iid_accuracy": accuracy("iid"), "ood_accuracy": accuracy("ood"),
        "per_length_iid": per_part["iid"], "per_length_ood": per_part["ood"], "final_train_loss": final_loss,
        "loss_history": [list(point) for point in losses.history], "steps_done": steps_done,
        "validation_curve": [list(point) for point in curve.history] if curve else None,
        "target_reached": curve.reached_at if curve else None, "architecture": architecture,
        "encoding_options": encoding_options, "parameters": parameters(False),
        "parameters_without_pe": parameters(True), "train_lengths": list(data.task.train_lengths),
        "test_lengths": list(data.task.test_lengths), "seconds": time.perf_counter() - start,
        "train_seconds": clock.seconds,
    }


# ------------------------------------------------------------------------------------------- summaries
def summarize_runs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task as :func:`task_key` names it, encoder): :data:`METRICS` over seeds (mean, 95 % t interval, n; a
    missing value is counted in ``n_nonfinite``, never dropped), in the rows' order."""
    return summarize_groups([{**row, "task": task_key(row)} for row in rows], ("task", "encoding"), list(METRICS),
                            bounds=METRICS)


def mean_reciprocal_rank(summary: list[dict[str, Any]], metric: str = "ood_accuracy") -> dict[str, float]:
    """MRR of each encoder across tasks, ranking the encoders per task by the seed mean of ``metric``
    (:func:`summarize_runs` entries). Ties share the best rank (competition ranking)."""
    by_task: dict[str, dict[str, float]] = {}
    for entry in summary:
        if entry[metric]["n"]:
            by_task.setdefault(entry["task"], {})[entry["encoding"]] = entry[metric]["mean"]
    reciprocal: dict[str, list[float]] = {}
    for means in by_task.values():
        for enc, value in means.items():
            reciprocal.setdefault(enc, []).append(1.0 / (1 + sum(other > value for other in means.values())))
    return {enc: sum(v) / len(v) for enc, v in reciprocal.items()}


def failure_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (task, encoder): the shares of OOD answers that stopped early, ran over, or had a wrong token (summed
    over seeds; runs that did not record their outcomes are left out)."""
    sums: dict[tuple[str, str], dict[str, int]] = {}
    for row in rows:
        ood = list(row.get("per_length_ood", {}).values())
        if ood and all(name in v for v in ood for name in FAILURES):
            group = sums.setdefault((task_key(row), row["encoding"]), dict.fromkeys(("total", *FAILURES), 0))
            for name in group:
                group[name] += sum(v[name] for v in ood)
    return [{"task": task, "encoding": enc, "answers": s["total"], **{n: s[n] / s["total"] for n in FAILURES}}
            for (task, enc), s in sorted(sums.items()) if s["total"]]


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
KAZEMNEJAD = "Kazemnejad et al. 2023"
# Golovneva et al. 2024, Table 3: in-distribution test error (%) on counting with 3 variables.
PAPER_COUNTING_ERROR: dict[str, float] = {"cope": 1.2, "music_relative": 17.8, "sinusoidal": 67.6}
PAPER_COUNTING_BUDGET = {"programs": 100 * 10_000, "batch_size": 64, "max_statements": 512}


def claim_list() -> list[dict[str, Any]]:
    """Every paper claim the benchmark checks: ``{paper, task, a, b, metric, higher_is_better, learned, text}``."""
    ood = {"metric": "ood", "higher_is_better": True, "learned": True}
    claims = [{"paper": KAZEMNEJAD, "task": task, "a": a, "b": b, **ood,
               "text": f"{a} above {b} out of distribution (paper {va:.3f} vs {vb:.3f})"}
              for task, paper in PAPER_OOD_ACCURACY.items() for a, va in paper.items() for b, vb in paper.items()
              if va - vb >= PAPER_GAP]
    claims += [{"paper": "Golovneva et al. 2024 (Table 3)", "task": "cope_counting", "a": a, "b": b,
                "metric": "iid_error", "higher_is_better": False, "learned": False,
                "text": f"{a} error below {b} in distribution (paper {va} % vs {vb} %)"}
               for a, va in PAPER_COUNTING_ERROR.items() for b, vb in PAPER_COUNTING_ERROR.items() if va < vb]
    causal, bidirectional = "contextual_counting (encdec_causal)", "contextual_counting (encdec_bidirectional)"
    claims += [{"paper": "Golkar et al. 2024", "task": causal, "task_b": bidirectional, "a": enc, "b": enc, **ood,
                "text": f"causal encoder above bidirectional with {enc}, more regions than in training"}
               for enc in ("nope", "rope", "sinusoidal")]
    claims += [{"paper": "Golkar et al. 2024", "task": causal, "a": enc, "b": "sinusoidal", **ood,
                "text": f"{enc} above APE (causal encoder), more regions than in training"} for enc in ("nope", "rope")]
    return claims + [{"paper": "Golovneva et al. 2024 (Tables 1-2; numbers not transcribed)", "task": task,
                      "a": "cope", "b": b, **ood, "text": f"CoPE above {b} out of distribution (other density)"}
                     for task in ("selective_copy", "flip_flop") for b in ("rope", "sinusoidal")]


def claims(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each claim of :func:`claim_list` decided by :func:`~pe_toolkit.bench.verdict.decide_claim` (Welch t on the
    difference of per-seed values, accuracies bounded to [0, 1]); untested when a side has no runs or fewer than
    2 seeds, or (claims on OOD accuracy) a side did not learn the task in distribution (:data:`LEARNED_IID`).
    Only the claims of papers with at least one task in ``rows``: a paper none of whose tasks ran is left out."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((task_key(row), row["encoding"]), []).append(row)

    def values(members: list[dict[str, Any]], metric: str) -> list[Any]:  # per seed; "iid_error" = 1 - IID
        if metric == "iid_error":
            return [None if m["iid_accuracy"] is None else 1.0 - m["iid_accuracy"] for m in members]
        return [m[f"{metric}_accuracy"] for m in members]

    def iid_mean(members: list[dict[str, Any]]) -> float:
        iid = [m["iid_accuracy"] for m in members]
        return math.nan if None in iid else sum(iid) / len(iid)

    # a paper's claims are decided by a run that has at least one of its tasks (the full preset the copy family's,
    # the families preset the counting and copy-density ones): the others are another preset's evidence
    ran, listed = {task for task, _ in groups}, claim_list()
    papers = {c["paper"] for c in listed if {c["task"], c.get("task_b", c["task"])} & ran}
    out = []
    for claim in [c for c in listed if c["paper"] in papers]:
        a = groups.get((claim["task"], claim["a"]), [])
        b = groups.get((claim.get("task_b", claim["task"]), claim["b"]), [])
        # the sides' names; a claim across two tasks (Golkar's causal vs bidirectional encoder) names their tasks
        names = ((claim["a"], claim["b"]) if "task_b" not in claim else
                 (f"{claim['a']} on {claim['task']}", f"{claim['b']} on {claim['task_b']}"))
        missing = [name for name, side in zip(names, (a, b)) if not side]
        iid = (math.nan, math.nan) if missing else (iid_mean(a), iid_mean(b))
        unlearned = [name for name, mean in zip(names, iid) if not mean >= LEARNED_IID]
        decided = decide_claim(
            values(a, claim["metric"]), values(b, claim["metric"]), higher_is_better=claim["higher_is_better"],
            bounds=ACCURACY, name=f"{claim['paper']}, {claim['task']}: {claim['text']}", preconditions=[
                (not missing, f"no runs of {missing}"),
                (not (claim["learned"] and unlearned), f"not learned in distribution by {unlearned} (seed-mean IID "
                 f"exact match below {LEARNED_IID})")])
        out.append(claim_row(decided, paper=claim["paper"], task=claim["task"], encoder_a=claim["a"],
                             encoder_b=claim["b"], metric=claim["metric"], iid_a=iid[0], iid_b=iid[1]))
    return out


# ------------------------------------------------------------------------------------------- report
def main_comparison_section(summary: list[dict[str, Any]], claim_rows: list[dict[str, Any]]) -> str:
    """The report's section of :func:`main_comparison`; empty when the run has no claim of Kazemnejad et al. (no
    copy-family task ran, e.g. the ``families`` preset)."""
    if not any(c.get("paper") == KAZEMNEJAD for c in claim_rows):
        return ""
    return (f"\n## {KAZEMNEJAD}'s main comparison\n\nOut-of-distribution exact match, ours (seed mean [95 % "
            "interval]) / the paper's (its 3-seed mean), and our in-distribution mean; a claim on a pair needs both "
            f"sides learned in distribution (IID >= {LEARNED_IID}).\n\n" + main_comparison(summary, claim_rows))


def main_comparison(summary: list[dict[str, Any]], claim_rows: list[dict[str, Any]]) -> str:
    """Kazemnejad et al.'s main comparison as a markdown table: per task of :data:`PAPER_OOD_ACCURACY` and encoder
    our OOD exact match (seed mean [95 % interval]) beside the paper's, our IID mean, and the task's claims counted
    by verdict. A task or encoder without runs shows ``-``; its claims count as untested."""
    cells = {(s["task"], s["encoding"]): s for s in summary}
    encoders = list(PAPER_OOD_ACCURACY["copy_repeat"])
    rows = []
    for task, paper in PAPER_OOD_ACCURACY.items():
        mine = [c for c in claim_rows if c.get("paper") == KAZEMNEJAD and c["task"] == task]
        if not mine:  # no pair of its encoders differs by PAPER_GAP in the paper
            continue
        row = {"task": task}
        for enc in encoders:
            cell = cells.get((task, enc))
            if cell is None or not cell["ood_accuracy"]["n"]:
                row[enc] = f"- / {paper[enc]:.2f}"
                continue
            ood, iid = cell["ood_accuracy"], cell["iid_accuracy"]
            interval = f" [{ood['low']:.2f}, {ood['high']:.2f}]" if math.isfinite(ood["low"]) else ""
            row[enc] = f"{ood['mean']:.2f}{interval} / {paper[enc]:.2f} (IID {iid['mean']:.2f})"
        counts = {v: sum(c["verdict"] == v for c in mine) for v in VERDICTS}
        row["claims"] = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
        rows.append(row)
    return markdown_table(rows, ["task", *((e, f"{e}: ours [95 %] / paper") for e in encoders),
                                 ("claims", "claims (pairs >= 0.1 apart in the paper)")])


def counting_section(rows: list[dict[str, Any]], config: Config) -> str:
    """CoPE counting: the validation error during training, per run whether it reached the target, and the time the
    paper's budget (:data:`PAPER_COUNTING_BUDGET`) would take at the run's seconds per step."""
    counting = sorted((r for r in rows if r["task"] == "cope_counting" and r.get("validation_curve")),
                      key=lambda r: (r["encoding"], r["seed"]))
    if not counting:
        return ""
    entry, paper = task_entry(config, "cope_counting"), PAPER_COUNTING_BUDGET
    target, batch = entry["early_stop"]["target_error"], entry["training"]["batch_size"]
    encodings = sorted({r["encoding"] for r in counting})
    curves = []
    for step in sorted({s for r in counting for s, _ in r["validation_curve"]}):
        errors = {enc: [e for r in counting if r["encoding"] == enc for s, e in r["validation_curve"] if s == step]
                  for enc in encodings}
        curves.append({"step": step, **{e: format_side(summarize(v)) if v else "stopped" for e, v in errors.items()}})
    runs = [{**r, "reached": "no" if r["target_reached"] is None else "yes", "last_error": r["validation_curve"][-1][1],
             "paper_hours": paper["programs"] / batch * r["train_seconds"] / max(1, r["steps_done"]) / 3600}
            for r in counting]
    return (
        "\n## CoPE counting: in-distribution validation error during training\n\n"
        f"Mean [95 % interval] over seeds ('stopped': every run of the encoder had stopped early). The paper trains "
        f"{paper['programs']:,} programs (batch {paper['batch_size']}, up to {paper['max_statements']} statements).\n\n"
        + markdown_table(curves, ["step", *encodings]) + "\n"
        + markdown_table(runs, ["encoding", "seed", ("steps_done", "steps trained"),
                                ("reached", f"error < {target:.0%}"), ("last_error", "last val error"),
                                ("paper_hours", "the paper's budget here (h)")],
                         {"last_error": ".3f", "paper_hours": ".1f"}))


def plot(rows: list[dict[str, Any]]) -> Any:
    """Accuracy against length per task: seed means with 95 % intervals as error bars (IID solid, OOD dashed)."""
    tasks = sorted({task_key(r) for r in rows})
    columns = max(1, min(3, len(tasks)))
    fig, axes = new_figure(max(1, math.ceil(len(tasks) / columns)), columns, size=(5.5, 4))
    colors = {enc: f"C{i % 10}" for i, enc in enumerate(sorted({r["encoding"] for r in rows}))}  # one per encoder
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks):
        task_rows = [r for r in rows if task_key(r) == task]
        for enc in sorted({r["encoding"] for r in task_rows}):
            for part, style in (("iid", "-"), ("ood", "--")):
                per_length = [{int(n): c for n, c in r.get(f"per_length_{part}", {}).items()}
                              for r in task_rows if r["encoding"] == enc]
                lengths = sorted({n for counts in per_length for n in counts})
                sides = [summarize([c[n]["correct"] / c[n]["total"] if n in c and c[n]["total"] else None
                                    for c in per_length]).as_dict() for n in lengths]
                plot_intervals(ax, lengths, sides, color=colors[enc], linestyle=style, marker=".", capsize=2,
                               label=enc if part == "iid" else None)
        high = task_rows[0]["train_lengths"][1]
        ax.axvline(high + 0.5, color="grey", linestyle=":", linewidth=1)
        seeds = sorted({sum(r["encoding"] == e for r in task_rows) for e in {r["encoding"] for r in task_rows}})
        ax.set_title(f"{task}\n(train <= {high}; IID solid, OOD dashed; seeds {seeds})", fontsize=9)
        ax.set(xlabel="length", ylabel="exact match (mean, 95 % interval)", ylim=(-0.02, 1.02))
    return finish(fig, "exact-match accuracy", fontsize=7, loc="best")


# ------------------------------------------------------------------------------------------- benchmark
class LengthGeneralization(Benchmark):
    name = "length_generalization"
    title = "Length generalization of positional encodings"
    Config = Config
    key_fields = ("case", "seed")
    summary_by, summary_metrics = ("task", "encoding"), METRICS
    held_out = ("the test sets are drawn from their own seeded streams, at the test split's lengths, regions or "
                "density, none of which training sees")
    same_budget = "trains the same trunk for the same steps on the same data"
    runs = staticmethod(build_specs)
    run_one = staticmethod(run_one)

    def check(self, config: Config) -> None:
        import pe_toolkit as pet

        distinct("run_tasks", config.run_tasks)
        for key, encoders in [("encoders", config.encoders), *((f"tasks.{name}.encoders", entry.encoders)
                                                              for name, entry in config.tasks.items())]:
            if encoders is not None:
                distinct(key, encoders, allowed=pet.list_encoders())
        specs = build_specs(config)  # unknown tasks and scratchpads: ValueError naming them
        own_lr = [name for name, entry in config.tasks.items()  # run tasks with their own training.lr
                  if name in {s["task"] for s in specs} and entry.training and "lr" in entry.training]
        if config.lr_by_encoder is not None:
            if config.lr_tuning is not None:
                raise ValueError("lr_by_encoder fixes the learning rates that lr_tuning would choose; set one of "
                                 "them, the other to null")
            run = list(dict.fromkeys(s["encoding"] for s in specs))
            missing = [enc for enc in run if enc not in config.lr_by_encoder]
            if missing:
                raise ValueError(f"lr_by_encoder must give a learning rate for every encoder that runs, {run}; "
                                 f"missing {missing} (it has {sorted(config.lr_by_encoder)})")
            if own_lr:
                raise ValueError(f"lr_by_encoder sets the learning rates, but tasks {own_lr} set their own "
                                 "training.lr")
        if config.lr_tuning is not None:
            distinct("lr_tuning.lrs", config.lr_tuning.lrs)
            first_task = {}
            for spec in specs:
                first_task.setdefault(spec["encoding"], spec["task"])
            if config.lr_tuning.per == "encoder" and len(set(first_task.values())) > 1:
                raise ValueError(f"lr_tuning tunes every encoder on one task, but their first tasks differ: "
                                 f"{first_task}; put a task that every encoder runs first in run_tasks, or set "
                                 "lr_tuning.per: case")
            if own_lr:
                raise ValueError(f"lr_tuning chooses the learning rate, but tasks {own_lr} set their own "
                                 "training.lr; remove it or set lr_tuning: null")

    def fixed(self, config: Config) -> dict[str, Any] | None:
        """The learning rates ``lr_by_encoder`` fixes (of the encoders that run), or ``None``."""
        if not config.lr_by_encoder:
            return None
        run = dict.fromkeys(s["encoding"] for s in build_specs(config))
        return {"param": "training.lr", "group": "encoding", "values": {e: config.lr_by_encoder[e] for e in run}}

    def tuning(self, config: Config) -> Tuning | None:
        """The learning rate by in-distribution exact match (never the OOD target) on the first seed, the same grid
        for every group: per encoder on the first run task (``lr_tuning.per: encoder``), or per case (task,
        architecture and encoder, ``per: case``); ``None`` without ``lr_tuning``."""
        if config.lr_tuning is None:
            return None
        per_case = config.lr_tuning.per == "case"
        return Tuning(param="training.lr", values=list(config.lr_tuning.lrs), metric="iid_accuracy", maximize=True,
                      group="case" if per_case else "encoding", max_extensions=config.lr_tuning.max_extensions,
                      trials_on=None if per_case else "task")

    def progress_label(self, row: dict[str, Any]) -> str:
        ood = "n/a" if row["ood_accuracy"] is None else f"{row['ood_accuracy']:.3f}"
        return (f"{task_key(row)} {row['encoding']} seed {row['seed']}: iid {row['iid_accuracy']:.3f} ood {ood} "
                f"({row['seconds']:.0f}s, {row['steps_done']} steps)")

    def analyze(self, result: Result) -> list[dict[str, Any]]:
        result.rows.sort(key=lambda r: (task_key(r), r["encoding"], r["seed"]))
        return [{**s, "kind": "summary"} for s in summarize_runs(result.rows)] + claims(result.rows)

    def describe(self, result: Result) -> str:
        config = result.config
        sizes: dict[str, set[int]] = {}
        for row in result.rows:
            sizes.setdefault(task_key(row), set()).add(row["parameters_without_pe"])
        head, rotary = config.model.dim // config.model.num_heads, ENCODING_OPTIONS["rope"]["rotary_fraction"]
        steps = "; ".join(f"{t} {task_entry(config, parse_task(t)[0])['training']['steps']}" for t in config.run_tasks)
        lrs = (", ".join(f"{enc} {lr:g}" for enc, lr in config.lr_by_encoder.items()) + " (fixed by `lr_by_encoder`)"
               if config.lr_by_encoder else f"tuned per {config.lr_tuning.per} (the Tuning section)" if config.lr_tuning
               else f"{config.training.lr}")
        return (
            f"Model {dataclasses.asdict(config.model)}, the same trunk for every encoder (head size {head}: RoPE "
            f"rotates {rotary:.0%} of it, {int(head * rotary) // 2} frequencies); trunk parameters without the PE: "
            + "; ".join(f"{t} {' / '.join(f'{n:,}' for n in sorted(v))}" for t, v in sizes.items())
            + f". Batch {config.training.batch_size}, AdamW lr {lrs}; steps: {steps}. Device "
            f"{result.device}. Encoder options {ENCODING_OPTIONS} ({CONTEXT!r}: the longest training sequence + 1). "
            f"Accuracy: exact match of greedy decoding, {config.evaluation.per_length} examples per evaluated length; "
            "IID = the training split, OOD = the test split (longer inputs; more regions for contextual counting; "
            "another density for selective copy and flip-flop).")

    def fairness_notes(self, result: Result) -> list[str]:
        fixed = ([f"Learning rates fixed per encoder by `lr_by_encoder` ({result.config.lr_by_encoder}): the choices "
                  "of an earlier tuning run with the same grid for every encoder (the preset names it), not tuned "
                  "here."] if result.config.lr_by_encoder else [])
        return fixed + [f"A claim on OOD accuracy is untested when a side did not learn the task in distribution "
                        f"(seed-mean IID exact match below {LEARNED_IID}).",
                        f"Kazemnejad et al.'s claims: every pair of encoders whose paper means differ by >= "
                        f"{PAPER_GAP} (their reverse numbers are `reverse_x2`'s)."]

    def report(self, result: Result) -> str:
        summary = result.derived_of("summary")
        mrr = sorted(({"encoding": k, "mrr": v, "tasks": sum(s["encoding"] == k for s in summary)}
                      for k, v in mean_reciprocal_rank(summary).items()), key=lambda r: -r["mrr"])
        failing = failure_summary(result.rows)
        return (
            super().report(result)
            + main_comparison_section(summary, result.derived_of("claim"))
            + "\n## Mean reciprocal rank across tasks (by seed-mean OOD accuracy; compare over the same tasks)\n\n"
            + markdown_table(mrr, ["encoding", ("mrr", "MRR"), ("tasks", "tasks ranked on")], {"mrr": ".3f"})
            + "\n## How out-of-distribution answers fail (shares of the OOD answers, summed over seeds)\n\n"
            + (markdown_table(failing, ["task", "encoding", ("answers", "OOD answers"), *FAILURES],
                              dict.fromkeys(FAILURES, ".3f")) if failing else "No run recorded the outcomes.\n")
            + counting_section(result.rows, result.config))

    def plot(self, result: Result) -> dict[str, Any]:
        return {"accuracy_vs_length.png": plot(result.rows)}


if __name__ == "__main__":
    from pe_toolkit.bench.cli import main

    raise SystemExit(main(name="length_generalization", prog="python benchmarks/length_generalization.py"))
