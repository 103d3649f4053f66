"""Cross-lingual position representations (Ding et al. 2020, arXiv:2004.13310) on a toy SVO -> SOV language pair.

Trains the same encoder-decoder Transformer (:class:`pe_toolkit.domains.translation.TranslationModel`, token
embeddings scaled as Vaswani et al.) with

* ``pe``: the standard sinusoidal PE only (the baseline);
* ``xl_input``: PE + XL-PE at the encoder input (Inputs XL SANs);
* ``xl_head``: PE at the input, XL-PE in half of the heads of every encoder layer (Head XL SANs);

where the cross-lingual positions come from ``positions:`` in the preset:

* ``reorderer``: a source-only discriminative BTG parser (:class:`pe_toolkit.domains.translation.BTGReorderer`)
  trained on the training alignments and applied to the source of the training, validation and test sentences
  (as a real system must: the test target is unknown). These are the methods.
* ``oracle``: the BTG reordering of each pair's own alignment, also for validation and test. It reads the
  reference translation, so its rows are an **oracle upper bound**, never a method: no claim is checked on them.

Fairness rule (``docs/benchmarks.md``): every (variant, positions) cell trains for the same steps on the same
training pairs, once per lr of the same grid (``training.lr``), and keeps the lr with the best BLEU on the same
validation pairs (ties: lower validation loss); the test set is translated once, by the chosen model; >= 3 seeds
(full and gpu presets) give the mean and Student-t 95 % interval, and every verdict is
:func:`common.interval_verdict` of those intervals.

    python benchmarks/translation.py --quick                  # pipeline check, < 2 minutes here
    python benchmarks/translation.py --jobs 2                 # full CPU preset, < 30 minutes on 2 idle cores
    python benchmarks/translation.py --preset gpu --accelerator cuda
    python benchmarks/translation.py --set training.steps=400 --set seeds=[0,1,2,3]
    python benchmarks/translation.py --resume                 # reuse the finished runs of an interrupted one

Presets: ``benchmarks/presets/translation/{quick,full,gpu}.yaml``. Outputs in ``<out>/translation/``:
``results.json`` (one row per run, the summaries and verdicts), ``report.md``, ``bleu.png``, and every finished
run in ``runs/<preset>/`` with its spec (what ``--resume`` compares).
"""

from __future__ import annotations

import concurrent.futures
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (  # noqa: E402
    Progress,
    RunStore,
    format_interval,
    interval_verdict,
    markdown_table,
    mean_interval,
    nan_if_missing,
    note_if_empty,
    results_dir,
    standard_argparser,
    worker_pool,
    write_report,
    write_results,
)
from presets import device_options, preset_from_args, trainer_options  # noqa: E402

NAME = "translation"
VARIANTS: dict[str, dict[str, Any]] = {
    "pe": {"encoding": "sinusoidal", "encoding_options": {}},
    "xl_input": {"encoding": "xl_pe", "encoding_options": {"strategy": "input"}},
    "xl_head": {"encoding": "xl_pe", "encoding_options": {"strategy": "head"}},
}
POSITIONS = ("reorderer", "oracle")
#: what a row is: the oracle reads the reference translation (an upper bound), the others are methods
ROLES = {"-": "method", "reorderer": "method", "oracle": "oracle upper bound (reads the reference)"}
MIN_SEEDS = 3
PRESET_KEYS = {
    "seeds", "variants", "positions", "jobs", "threads", "data", "reorderer", "model", "training",
}
SECTION_KEYS = {
    "data": {"train_pairs", "val_pairs", "test_pairs", "max_depth"},
    "reorderer": {"epochs"},
    "model": {"dim", "num_heads", "encoder_layers", "decoder_layers", "dropout"},
    "training": {"steps", "batch_size", "lr"},
}


# ------------------------------------------------------------------------------------------ preset
def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_preset(preset: dict[str, Any]) -> dict[str, Any]:
    """``preset`` unchanged when it can run; otherwise a ``ValueError`` naming the preset key at fault."""
    missing = PRESET_KEYS - set(preset)
    if missing:
        raise ValueError(f"preset is missing the keys {sorted(missing)}")
    unknown = set(preset) - PRESET_KEYS - {"preset"}
    if unknown:
        raise ValueError(f"preset has unknown keys {sorted(unknown)}; allowed: {sorted(PRESET_KEYS)}")
    for section, keys in SECTION_KEYS.items():
        if not isinstance(preset[section], dict) or set(preset[section]) != keys:
            got = sorted(preset[section]) if isinstance(preset[section], dict) else preset[section]
            raise ValueError(f"preset key {section!r} must be a mapping with the keys {sorted(keys)}, got {got!r}")
    seeds = preset["seeds"]
    if (not isinstance(seeds, list) or not seeds or len(set(seeds)) != len(seeds)
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)):
        raise ValueError(f"preset key 'seeds' must be a non-empty list of distinct ints >= 0, got {seeds!r}")
    variants = preset["variants"]
    if not isinstance(variants, list) or not variants or not set(variants) <= set(VARIANTS):
        raise ValueError(f"preset key 'variants' must be a non-empty list from {list(VARIANTS)}, got {variants!r}")
    positions = preset["positions"]
    if not isinstance(positions, list) or not set(positions) <= set(POSITIONS) or len(set(positions)) != len(positions):
        raise ValueError(f"preset key 'positions' must be a list from {list(POSITIONS)}, got {positions!r}")
    if any(v != "pe" for v in variants) and not positions:
        raise ValueError("preset key 'positions' is empty but the XL-PE variants need cross-lingual positions")
    if isinstance(preset["jobs"], bool) or not isinstance(preset["jobs"], int) or preset["jobs"] < 0:
        raise ValueError(f"preset key 'jobs' must be an int >= 0 (0: in this process), got {preset['jobs']!r}")
    checks = [("threads", preset["threads"]), ("reorderer.epochs", preset["reorderer"]["epochs"])]
    checks += [(f"data.{k}", v) for k, v in preset["data"].items() if k != "max_depth"]
    checks += [(f"model.{k}", v) for k, v in preset["model"].items() if k != "dropout"]
    checks += [(f"training.{k}", preset["training"][k]) for k in ("steps", "batch_size")]
    for key, value in checks:
        if not _positive_int(value):
            raise ValueError(f"preset key {key!r} must be a positive int, got {value!r}")
    depth = preset["data"]["max_depth"]
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ValueError(f"preset key 'data.max_depth' must be an int >= 0, got {depth!r}")
    dropout = preset["model"]["dropout"]
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"preset key 'model.dropout' must be a number in [0, 1), got {dropout!r}")
    model = preset["model"]
    if model["dim"] % (2 * model["num_heads"]):
        raise ValueError(f"preset keys 'model.dim' ({model['dim']}) and 'model.num_heads' ({model['num_heads']}): dim "
                         "must be a multiple of 2 * num_heads")
    lrs = preset["training"]["lr"]
    if not isinstance(lrs, list) or not lrs or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in lrs):
        raise ValueError(f"preset key 'training.lr' must be a non-empty list of positive numbers (the tuning grid "
                         f"every cell gets), got {lrs!r}")
    return preset


def cells(preset: dict[str, Any]) -> list[tuple[str, str]]:
    """The (variant, positions) cells of a preset: ``("pe", "-")`` and each XL variant with each positions source."""
    out = []
    for variant in preset["variants"]:
        out.extend([(variant, "-")] if variant == "pe" else [(variant, p) for p in preset["positions"]])
    return out


def run_specs(preset: dict[str, Any], device: dict[str, Any]) -> list[dict[str, Any]]:
    """One spec per (seed, cell), seeds outermost (an interrupted run still has every cell at the first seeds)."""
    threads = preset["threads"] if preset["jobs"] == 0 else 1
    return [{"variant": v, "positions": p, "seed": s, "data": preset["data"], "reorderer": preset["reorderer"],
             "model": preset["model"], "training": preset["training"], "device": device, "threads": threads}
            for s in preset["seeds"] for v, p in cells(preset)]


def run_key(spec: dict[str, Any]) -> str:
    positions = "none" if spec["positions"] == "-" else spec["positions"]
    return f"{spec['variant']}__{positions}__seed{spec['seed']}"


# ------------------------------------------------------------------------------------------ data
def build_data(data: dict[str, Any], reorderer_options: dict[str, Any]) -> dict[str, Any]:
    """Corpora (train / val / test from fixed seeds), vocabularies, the oracle and reorderer positions of every
    split, and the reorderer's accuracy against the oracle on each split.

    The reorderer is trained once, on the training pairs' alignments, and shared by every run.
    """
    from pe_toolkit.domains.translation import BTGReorderer, Vocabulary, alignment_permutation, generate_corpus
    from pe_toolkit.domains.translation.lightning_module import oracle_positions

    depth = data["max_depth"]
    pairs = {"train": generate_corpus(data["train_pairs"], seed=1000, max_depth=depth),
             "val": generate_corpus(data["val_pairs"], seed=1500, max_depth=depth),
             "test": generate_corpus(data["test_pairs"], seed=2000, max_depth=depth)}
    source_vocab = Vocabulary(w for p in pairs["train"] for w in p.source)
    target_vocab = Vocabulary(w for p in pairs["train"] for w in p.target)
    start = time.perf_counter()
    reorderer = BTGReorderer(len(source_vocab))
    history = reorderer.fit([source_vocab.encode(p.source) for p in pairs["train"]],
                            [alignment_permutation(p.alignment, len(p.source)) for p in pairs["train"]],
                            epochs=reorderer_options["epochs"], seed=0)["train_accuracy"]
    positions = {"oracle": {split: oracle_positions(split_pairs) for split, split_pairs in pairs.items()},
                 "reorderer": {split: [reorderer.positions(source_vocab.encode(p.source)) for p in split_pairs]
                               for split, split_pairs in pairs.items()}}
    accuracy = {}
    for split, split_pairs in pairs.items():
        predicted, oracle = positions["reorderer"][split], positions["oracle"][split]
        tokens = sum(sum(x == y for x, y in zip(a, b)) for a, b in zip(predicted, oracle))
        accuracy[split] = {"sentence": sum(a == b for a, b in zip(predicted, oracle)) / len(oracle),
                           "token": tokens / sum(len(p.source) for p in split_pairs)}
    return {"pairs": pairs, "source_vocab": source_vocab, "target_vocab": target_vocab, "positions": positions,
            "reorderer": {"train_accuracy_per_epoch": history, "accuracy": accuracy,
                          "seconds": time.perf_counter() - start}}


# ------------------------------------------------------------------------------------------ one run
def best_trial(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The trial the tuning keeps: the highest validation BLEU, ties broken by the lower validation loss, then by
    the earlier lr of the grid. Only validation numbers enter (the test set is never looked at here)."""
    if not trials:
        raise ValueError("best_trial: no trials")

    def key(trial: dict[str, Any]) -> tuple[float, float]:
        bleu, loss = nan_if_missing(trial["val_bleu"]), nan_if_missing(trial["val_loss"])
        return (bleu if math.isfinite(bleu) else -math.inf, -loss if math.isfinite(loss) else -math.inf)

    return max(trials, key=key)  # max keeps the first of equal keys: the earlier lr


def train_one(spec: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """Train one (variant, positions, seed) cell once per lr of the grid, keep the best validation BLEU (ties:
    lower validation loss), translate the test set once with that model. Runs in a spawned worker with jobs > 1."""
    import lightning as L
    import torch

    from pe_toolkit.domains.translation.lightning_module import (
        TranslationDataModule,
        TranslationDataset,
        TranslationModule,
    )

    torch.set_num_threads(spec["threads"])
    start = time.perf_counter()
    sv, tv = data["source_vocab"], data["target_vocab"]
    if spec["positions"] == "-":  # the baseline reads no cross-lingual position: the identity fills the field
        xl = {split: [list(range(len(p.source))) for p in pairs] for split, pairs in data["pairs"].items()}
    else:
        xl = data["positions"][spec["positions"]]
    splits = {split: TranslationDataset(data["pairs"][split], sv, tv, xl[split]) for split in ("train", "val", "test")}
    training, device = spec["training"], trainer_options(spec["device"])
    options = {**spec["model"], **VARIANTS[spec["variant"]]}
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
             "enable_model_summary": False}
    evaluator = L.Trainer(**device, **quiet)
    best: dict[str, Any] | None = None
    tried = []
    for lr in training["lr"]:
        L.seed_everything(spec["seed"], verbose=False)
        module = TranslationModule(tv.itos, len(sv), options, lr=lr, max_steps=training["steps"],
                                   warmup_steps=max(1, training["steps"] // 20))
        loaders = TranslationDataModule(splits["train"], splits["val"], splits["test"],
                                        batch_size=training["batch_size"], seed=spec["seed"])
        trainer = L.Trainer(max_steps=training["steps"], **device, **quiet, limit_val_batches=0,
                            num_sanity_val_steps=0)
        trainer.fit(module, loaders)
        train_loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
        val = evaluator.validate(module, loaders, verbose=False)[0]
        trial = {"lr": lr, "val_bleu": float(val["val/bleu"]), "val_loss": float(val["val/loss"]),
                 "train_loss": train_loss}
        tried.append(trial)
        if best_trial(tried) is trial:
            best = {**trial, "module": module, "loaders": loaders}
    module = best["module"]
    evaluator.test(module, best["loaders"].test_dataloader(), verbose=False)  # the test set, once
    grid = training["lr"]
    subsets = agreement_subsets(module.hypotheses, data)
    return {
        "variant": spec["variant"], "positions": spec["positions"], "role": ROLES[spec["positions"]],
        "seed": spec["seed"], "bleu": module.results["bleu"], "exact_match": module.results["exact_match"],
        "val_bleu": best["val_bleu"], "val_loss": best["val_loss"], "train_loss": best["train_loss"],
        "lr": best["lr"], "lr_tried": tried, "lr_at_edge": len(grid) >= 2 and best["lr"] in (min(grid), max(grid)),
        "parameters": sum(p.numel() for p in module.model.parameters()), "steps": training["steps"],
        "seconds": time.perf_counter() - start, **subsets,
        "example": " ".join(module.hypotheses[0]) if module.hypotheses else None,
    }


def agreement_subsets(hypotheses: list[list[str]], data: dict[str, Any]) -> dict[str, Any]:
    """Test BLEU and exact match on the test sentences where the reorderer's cross-lingual positions equal the
    oracle's (``agree``) and where they do not (``differ``); the same split for every row, so the oracle and
    reorderer rows can be compared where their inputs differ at all."""
    from pe_toolkit.domains.translation.lightning_module import corpus_bleu

    pairs = data["pairs"]["test"]
    predicted, oracle = data["positions"]["reorderer"]["test"], data["positions"]["oracle"]["test"]
    out: dict[str, Any] = {}
    for name, keep in (("agree", True), ("differ", False)):
        index = [i for i, (a, b) in enumerate(zip(predicted, oracle)) if (a == b) == keep]
        out[f"test_{name}"] = len(index)
        if index and len(hypotheses) == len(pairs):
            hyps, refs = [hypotheses[i] for i in index], [list(pairs[i].target) for i in index]
            out[f"bleu_{name}"] = corpus_bleu(hyps, refs)
            out[f"exact_match_{name}"] = sum(h == r for h, r in zip(hyps, refs)) / len(index)
        else:
            out[f"bleu_{name}"] = out[f"exact_match_{name}"] = None
    return out


# ------------------------------------------------------------------------------------------ summaries
def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (variant, positions): mean and 95 % interval over seeds of test BLEU, exact match, val BLEU."""
    out = []
    for variant, positions in dict.fromkeys((r["variant"], r["positions"]) for r in rows):
        members = [r for r in rows if r["variant"] == variant and r["positions"] == positions]
        row: dict[str, Any] = {"variant": variant, "positions": positions, "role": ROLES[positions],
                               "seeds": len(members), "parameters": members[0]["parameters"],
                               "lrs": sorted({r["lr"] for r in members})}
        for metric, fmt in (("bleu", ".2f"), ("exact_match", ".3f"), ("val_bleu", ".2f"), ("bleu_agree", ".2f"),
                            ("bleu_differ", ".2f"), ("exact_match_differ", ".3f")):
            ci = mean_interval([nan_if_missing(r.get(metric)) for r in members])
            row[metric] = ci["mean"] if ci["n"] else None
            row[f"{metric}_ci"] = ci
            row[f"{metric}_pm"] = format_interval(ci, fmt)
        row["seconds"] = sum(r["seconds"] for r in members) / len(members)
        out.append(row)
    return out


def _claim_status(verdict: str, n: int, min_seeds: int) -> str:
    if n < min_seeds:
        return "untested"
    return "reproduced" if verdict == "better" else "not reproduced"


def verdicts(summary: list[dict[str, Any]], min_seeds: int = MIN_SEEDS) -> list[dict[str, Any]]:
    """Test-BLEU comparisons, each with its :func:`interval_verdict`.

    ``kind="claim"``: an XL-PE strategy with reorderer positions against ``pe`` (Ding et al. 2020: XL-PE improves
    BLEU), ``reproduced`` only when its interval lies above, ``untested`` with fewer than ``min_seeds`` seeds.
    ``kind="upper bound"``: the oracle rows against the same strategy with reorderer positions and against ``pe``;
    they say how much a perfect reorderer could add, and are no method comparison.
    """
    by = {(r["variant"], r["positions"]): r for r in summary}
    out = []

    def compare(kind: str, a: tuple[str, str], b: tuple[str, str], what: str) -> None:
        if a not in by or b not in by:
            return
        ra, rb = by[a], by[b]
        verdict = interval_verdict(ra["bleu_ci"], rb["bleu_ci"], higher_is_better=True)
        n = min(ra["bleu_ci"]["n"], rb["bleu_ci"]["n"])
        name_a = a[0] if a[1] == "-" else f"{a[0]} ({a[1]})"
        name_b = b[0] if b[1] == "-" else f"{b[0]} ({b[1]})"
        row = {"kind": kind, "comparison": f"{name_a} vs {name_b}", "measures": what, "a": ra["bleu_pm"],
               "b": rb["bleu_pm"], "verdict": verdict, "seeds": n}
        if kind == "claim":
            row["claim"] = _claim_status(verdict, n, min_seeds)
        out.append(row)

    for variant in VARIANTS:
        if variant == "pe":
            continue
        compare("claim", (variant, "reorderer"), ("pe", "-"),
                f"Ding et al. 2020: XL-PE ({VARIANTS[variant]['encoding_options']['strategy']} strategy, source-only "
                "reorderer positions) improves BLEU over PE alone")
    for variant in VARIANTS:
        if variant == "pe":
            continue
        compare("upper bound", (variant, "oracle"), (variant, "reorderer"),
                "what a reorderer that always agreed with the reference alignment could add")
        compare("upper bound", (variant, "oracle"), ("pe", "-"), "XL-PE with the reference's reordering vs PE alone")
    return out


def verdict_sentence(row: dict[str, Any]) -> str:
    """The sentence a report prints for one comparison, from its measured intervals only."""
    meaning = {"better": "higher (the intervals do not overlap)", "worse": "lower (the intervals do not overlap)",
               "tie": "not separated (the intervals overlap, or a side has fewer than 2 seeds)"}[row["verdict"]]
    text = f"{row['comparison']}: test BLEU {row['a']} vs {row['b']}, {meaning}"
    if row["kind"] == "claim":
        text += f"; claim **{row['claim']}**"
        if row["claim"] == "untested":
            text += f" ({row['seeds']} seed(s), fewer than {MIN_SEEDS})"
    return text + "."


# ------------------------------------------------------------------------------------------ outputs
def _label(row: dict[str, Any]) -> str:
    if row.get("positions", "-") == "-":
        return row["variant"]
    suffix = "oracle,\nupper bound" if row["positions"] == "oracle" else row["positions"]
    return f"{row['variant']}\n({suffix})"


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    """Test BLEU per cell with its 95 % interval; oracle upper-bound bars grey and hatched."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1.6 * len(summary) + 2, 3.8))
    for i, row in enumerate(summary):
        mean = nan_if_missing(row.get("bleu"))
        ci = row.get("bleu_ci") or {}
        low, high = nan_if_missing(ci.get("low")), nan_if_missing(ci.get("high"))
        error = [[mean - low], [high - mean]] if math.isfinite(low) and math.isfinite(high) else None
        oracle = row.get("positions") == "oracle"
        ax.bar(i, mean, yerr=error, capsize=3, color="0.75" if oracle else "tab:blue", hatch="//" if oracle else None,
               edgecolor="0.3")
    note_if_empty(ax, "test BLEU")
    ax.set_xticks(range(len(summary)))
    ax.set_xticklabels([_label(r) for r in summary], fontsize=8)
    ax.set_ylabel("test BLEU (mean, 95 % interval)")
    ax.set_title("SVO -> SOV toy translation (hatched: oracle upper bound)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report_body(rows: list[dict[str, Any]], summary: list[dict[str, Any]], checks: list[dict[str, Any]],
                preset: dict[str, Any], reorderer: dict[str, Any], planned: int) -> str:
    data, model, training = preset["data"], preset["model"], preset["training"]
    grid = training["lr"]
    partial = "" if len(rows) == planned else f" **Partial: {len(rows)} of {planned} runs finished.**"
    edges = sorted({f"{r['variant']} ({r['positions']})" for r in rows if r["lr_at_edge"]})
    acc = reorderer["accuracy"]
    body = [
        f"Preset `{preset['preset']}`. Toy SVO -> SOV translation with nested relative and complement clauses "
        f"({data['train_pairs']} training, {data['val_pairs']} validation, {data['test_pairs']} test pairs, clause "
        f"depth <= {data['max_depth']}); encoder-decoder Transformer with scaled token embeddings, dim {model['dim']}, "
        f"{model['encoder_layers']}+{model['decoder_layers']} layers, {training['steps']} steps of batch "
        f"{training['batch_size']}, seeds {preset['seeds']}. Greedy decoding; corpus BLEU (sacrebleu, "
        f"`tokenize='none'`) on the target tokens. Device: {preset['device']}.{partial}\n",
        "## How the fairness rule is met\n",
        f"* Same tuning budget on the same validation data: every (variant, positions) cell trains with each lr of "
        f"{grid} ({len(grid)} run(s) per cell and seed: same steps, same training pairs, same seed) and keeps the lr "
        f"with the best BLEU on the same {data['val_pairs']} validation pairs (ties: lower validation loss)"
        + (" (one value: no cell is tuned)" if len(grid) == 1 else "") + ". The BTG reorderer is trained once, on "
        "the training alignments only, and shared by every XL-PE method.\n"
        "* Nothing from the test target reaches a method: the reorderer rows see the reorderer's positions of the "
        "test source. The `oracle` rows read the reference translation's alignment; they are an upper bound, not a "
        "method, and no claim is checked on them.\n"
        f"* Seeds: mean and Student-t 95 % interval over {len(preset['seeds'])} seed(s); every verdict is "
        f"`interval_verdict` (better / worse only when the intervals do not overlap); a claim with fewer than "
        f"{MIN_SEEDS} seeds is untested.\n"
        + (f"* The chosen lr lies on the edge of the grid for: {', '.join(edges)}.\n" if edges else ""),
        "## Test BLEU, mean [95 % interval] over seeds\n",
        markdown_table(summary, ["variant", "positions", "role", "seeds", ("bleu_pm", "BLEU"),
                                 ("exact_match_pm", "exact match"), ("val_bleu_pm", "val BLEU"), ("lrs", "lr chosen"),
                                 "parameters", ("seconds", "s/run")], {"seconds": ".0f"}),
        "## Verdicts (test BLEU, from the intervals)\n",
        "\n".join(f"* {verdict_sentence(r)}" for r in checks) + "\n" if checks else "No comparison was run.\n",
        "## Source-only BTG reorderer\n",
        f"Perceptron epochs: {len(reorderer['train_accuracy_per_epoch'])}; training-sentence accuracy per epoch "
        f"{', '.join(f'{a:.3f}' for a in reorderer['train_accuracy_per_epoch'])}. Agreement with the oracle "
        "(the reference alignment's reordering), sentences exactly / tokens at their oracle position: "
        + "; ".join(f"{split} {100 * a['sentence']:.1f} % / {100 * a['token']:.1f} %" for split, a in acc.items())
        + ". Where the two agree, the reorderer and oracle rows see the same positions; the oracle can differ only "
        "on the other sentences, so its margin is bounded by how often the reorderer is wrong.\n",
        f"Test BLEU on the {rows[0]['test_agree']} test sentences where the reorderer's positions equal the oracle's "
        f"(`agree`) and the {rows[0]['test_differ']} where they do not (`differ`), mean [95 % interval] over seeds "
        "(the same split for every row; the `pe` row reads no cross-lingual position):\n",
        markdown_table(summary, ["variant", "positions", ("bleu_agree_pm", "BLEU agree"),
                                 ("bleu_differ_pm", "BLEU differ"), ("exact_match_differ_pm", "exact match differ")]),
        "## Every run\n",
        markdown_table(rows, ["variant", "positions", "seed", "lr", ("bleu", "BLEU"), ("exact_match", "exact match"),
                              ("val_bleu", "val BLEU"), ("train_loss", "final train loss"), "parameters",
                              ("seconds", "s")],
                       {"bleu": ".2f", "exact_match": ".3f", "val_bleu": ".2f", "train_loss": ".3f",
                        "seconds": ".0f"}),
        "![BLEU](bleu.png)\n",
    ]
    return "\n".join(body)


def write_all(rows: list[dict[str, Any]], planned: int, data: dict[str, Any], preset: dict[str, Any], root: Path,
              seconds: float, *, jobs: int) -> Path:
    """results.json, report.md and bleu.png for the runs finished so far (called after every finished run)."""
    summary = summarize(rows)
    checks = verdicts(summary)
    stored = [{k: v for k, v in r.items() if not k.endswith("_pm")} for r in summary]
    config = {**preset, "jobs": jobs, "reorderer_result": data["reorderer"], "runs_finished": len(rows),
              "runs_planned": planned}
    out_dir = write_results(NAME, config, [{**r, "kind": "run"} for r in rows]
                            + [{**r, "kind": "summary"} for r in stored]
                            + [{**c, "kind": f"verdict ({c['kind']})"} for c in checks], seconds, root=root).parent
    plot(summary, out_dir / "bleu.png")
    write_report(NAME, "Translation: cross-lingual position representations (XL-PE)",
                 report_body(rows, summary, checks, preset, data["reorderer"], planned), root=root)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = standard_argparser(__doc__.splitlines()[0], presets=NAME)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), help="shortcut for --set variants=[...]")
    parser.add_argument("--positions", nargs="+", choices=list(POSITIONS),
                        help="sources of the cross-lingual positions (shortcut for --set positions=[...])")
    parser.add_argument("--seeds", nargs="+", type=int, help="shortcut for --set seeds=[...]")
    parser.add_argument("--steps", type=int, help="shortcut for --set training.steps=N")
    parser.add_argument("--jobs", type=int, help="runs in parallel, one thread each (0: in this process)")
    parser.add_argument("--threads", type=int, help="torch threads with --jobs 0 (shortcut for --set threads=N)")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same spec")
    args = parser.parse_args(argv)
    preset = preset_from_args(args, NAME)
    for key in ("variants", "positions", "seeds", "jobs", "threads"):
        if getattr(args, key) is not None:
            preset[key] = list(getattr(args, key)) if isinstance(getattr(args, key), list) else getattr(args, key)
    if args.steps is not None:
        preset["training"]["steps"] = args.steps
    check_preset(preset)
    device = device_options(args)  # part of each run's spec: a run on another device is never reused
    preset["device"] = device

    import torch

    torch.set_num_threads(preset["threads"])
    start = time.perf_counter()
    data = build_data(preset["data"], preset["reorderer"])
    specs = run_specs(preset, device)
    store = RunStore(results_dir(NAME, args.out) / "runs" / preset["preset"], resume=args.resume)
    done: dict[str, dict[str, Any]] = {}
    todo = []
    for spec in specs:
        stored = store.load(run_key(spec), spec)
        if stored is not None:
            done[run_key(spec)] = {k: v for k, v in stored.items() if k != "spec"}
        else:
            todo.append(spec)
    print(f"{NAME}: {len(specs)} runs ({len(specs) - len(todo)} reused), jobs={preset['jobs']}", flush=True)
    progress = Progress(len(todo), NAME)
    out_dir = results_dir(NAME, args.out)

    def record(spec: dict[str, Any], row: dict[str, Any]) -> None:
        store.save(run_key(spec), spec, row)  # every finished run survives an interruption
        done[run_key(spec)] = row
        progress(f"{row['variant']} ({row['positions']}) seed {row['seed']}: BLEU {row['bleu']:.2f}, exact "
                 f"{row['exact_match']:.3f} (lr {row['lr']}, {row['seconds']:.0f}s)")
        ordered = [done[run_key(s)] for s in specs if run_key(s) in done]
        write_all(ordered, len(specs), data, preset, args.out, time.perf_counter() - start, jobs=preset["jobs"])

    if preset["jobs"] == 0 or len(todo) <= 1:
        for spec in todo:
            record(spec, train_one(spec, data))
    else:
        with worker_pool(min(preset["jobs"], len(todo))) as pool:
            futures = {pool.submit(train_one, spec, data): spec for spec in todo}
            for future in concurrent.futures.as_completed(futures):
                record(futures[future], future.result())
    ordered = [done[run_key(s)] for s in specs]
    out_dir = write_all(ordered, len(specs), data, preset, args.out, time.perf_counter() - start,
                        jobs=preset["jobs"])
    summary = summarize(ordered)
    print(markdown_table(summary, ["variant", "positions", "role", ("bleu_pm", "BLEU")]), end="")
    for check in verdicts(summary):
        print(verdict_sentence(check))
    print(f"{NAME}: wrote {out_dir} in {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
