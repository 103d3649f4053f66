"""Cross-lingual position representations (Ding et al. 2020, arXiv:2004.13310) on a toy SVO -> SOV language pair.

Trains the same encoder-decoder Transformer (:class:`pe_toolkit.domains.translation.TranslationModel`) with

* ``pe``: the standard sinusoidal PE only (the baseline);
* ``xl_input``: PE + XL-PE at the encoder input (Inputs XL SANs);
* ``xl_head``: PE at the input, XL-PE in half of the heads of every encoder layer (Head XL SANs);

where the cross-lingual positions come from ``--positions``:

* ``reorderer``: a source-only discriminative BTG parser (:class:`pe_toolkit.domains.translation.BTGReorderer`)
  trained on the training alignments and applied to the source of both training and test sentences (as a
  real system must: the test target is unknown);
* ``oracle``: the BTG tree of each pair's own alignment, also at test time (an upper bound that reads the
  reference translation's word order; not a fair system).

Reports corpus BLEU (sacrebleu, ``tokenize="none"``) and exact match of greedy translations of a held-out
test set, per seed, and the reorderer's accuracy. Data: :func:`pe_toolkit.domains.translation.generate_corpus`.

    python benchmarks/translation.py --quick      # pipeline check, < 2 minutes
    python benchmarks/translation.py              # full run (about 40 minutes on a shared core)
    python benchmarks/translation.py --resume     # reuse the finished runs of an interrupted one

Outputs in ``<out>/translation/``: ``results.json``, ``report.md``, ``bleu.png``, and every finished run in
``runs/{quick,full}/`` with its configuration (what ``--resume`` compares).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
from presets import device_options, trainer_options  # noqa: E402

NAME = "translation"
VARIANTS: dict[str, dict[str, Any]] = {
    "pe": {"encoding": "sinusoidal", "encoding_options": {}},
    "xl_input": {"encoding": "xl_pe", "encoding_options": {"strategy": "input"}},
    "xl_head": {"encoding": "xl_pe", "encoding_options": {"strategy": "head"}},
}
FULL = {"train_pairs": 3000, "test_pairs": 500, "max_depth": 2, "dim": 64, "num_heads": 4, "encoder_layers": 2,
        "decoder_layers": 2, "steps": 1000, "batch_size": 64, "lr": 2e-3, "reorderer_epochs": 4, "seeds": [0],
        "positions": ["reorderer", "oracle"]}
QUICK = {**FULL, "train_pairs": 600, "test_pairs": 100, "max_depth": 1, "dim": 32, "encoder_layers": 1,
         "decoder_layers": 1, "steps": 150, "lr": 3e-3, "batch_size": 32, "reorderer_epochs": 1,
         "positions": ["reorderer"]}


def build_data(config: dict[str, Any]) -> dict[str, Any]:
    """Corpus, vocabularies, oracle and reorderer positions, and the reorderer's held-out accuracy."""
    from pe_toolkit.domains.translation import BTGReorderer, Vocabulary, alignment_permutation, generate_corpus
    from pe_toolkit.domains.translation.lightning_module import oracle_positions

    train = generate_corpus(config["train_pairs"], seed=1000, max_depth=config["max_depth"])
    test = generate_corpus(config["test_pairs"], seed=2000, max_depth=config["max_depth"])
    source_vocab = Vocabulary(w for p in train for w in p.source)
    target_vocab = Vocabulary(w for p in train for w in p.target)
    start = time.perf_counter()
    reorderer = BTGReorderer(len(source_vocab))
    history = reorderer.fit([source_vocab.encode(p.source) for p in train],
                            [alignment_permutation(p.alignment, len(p.source)) for p in train],
                            epochs=config["reorderer_epochs"], seed=0)["train_accuracy"]
    predicted = {split: [reorderer.positions(source_vocab.encode(p.source)) for p in pairs]
                 for split, pairs in (("train", train), ("test", test))}
    oracle = {"train": oracle_positions(train), "test": oracle_positions(test)}
    same = [a == b for a, b in zip(predicted["test"], oracle["test"])]
    tokens = sum(sum(x == y for x, y in zip(a, b)) for a, b in zip(predicted["test"], oracle["test"]))
    return {
        "train": train, "test": test, "source_vocab": source_vocab, "target_vocab": target_vocab,
        "positions": {"reorderer": predicted, "oracle": oracle},
        "reorderer": {"train_accuracy_per_epoch": history, "test_sentence_accuracy": sum(same) / len(same),
                      "test_token_accuracy": tokens / sum(len(p.source) for p in test),
                      "seconds": time.perf_counter() - start},
    }


def run_one(variant: str, positions: str, seed: int, data: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """Train one model and return its test BLEU / exact match."""
    import lightning as L

    from pe_toolkit.domains.translation.lightning_module import (
        TranslationDataModule,
        TranslationDataset,
        TranslationModule,
    )

    start = time.perf_counter()
    sv, tv = data["source_vocab"], data["target_vocab"]
    xl = data["positions"][positions]
    train = TranslationDataset(data["train"], sv, tv, xl["train"])
    test = TranslationDataset(data["test"], sv, tv, xl["test"])
    L.seed_everything(seed, verbose=False)
    options = {"dim": config["dim"], "num_heads": config["num_heads"], "encoder_layers": config["encoder_layers"],
               "decoder_layers": config["decoder_layers"], **VARIANTS[variant]}
    module = TranslationModule(tv.itos, len(sv), options, lr=config["lr"], max_steps=config["steps"],
                               warmup_steps=max(1, config["steps"] // 20))
    trainer = L.Trainer(max_steps=config["steps"], **trainer_options(config.get("device")), logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        limit_val_batches=0, num_sanity_val_steps=0)
    data_module = TranslationDataModule(train, test, batch_size=config["batch_size"], seed=seed)
    trainer.fit(module, data_module)
    train_loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
    trainer.test(module, data_module.test_dataloader(), verbose=False)
    return {
        "variant": variant, "positions": positions if variant != "pe" else "-", "seed": seed,
        "bleu": module.results["bleu"], "exact_match": module.results["exact_match"], "train_loss": train_loss,
        "parameters": sum(p.numel() for p in module.model.parameters()), "seconds": time.perf_counter() - start,
        "example": " ".join(module.hypotheses[0]) if module.hypotheses else None,
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["variant"], row["positions"]), []).append(row)
    baseline = groups.get(("pe", "-"))
    base_bleu = statistics.fmean(r["bleu"] for r in baseline) if baseline else None
    out = []
    for (variant, positions), members in groups.items():
        bleu = statistics.fmean(r["bleu"] for r in members)
        out.append({
            "variant": variant, "positions": positions, "seeds": len(members), "bleu": bleu,
            "bleu_std": statistics.pstdev(r["bleu"] for r in members) if len(members) > 1 else None,
            "delta_bleu": None if base_bleu is None else bleu - base_bleu,
            "exact_match": statistics.fmean(r["exact_match"] for r in members),
            "seconds": statistics.fmean(r["seconds"] for r in members),
        })
    return out


def plot(summary: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["variant"] if r["positions"] == "-" else f"{r['variant']}\n({r['positions']})" for r in summary]
    fig, ax = plt.subplots(figsize=(1.6 * len(summary) + 2, 3.5))
    ax.bar(range(len(summary)), [nan_if_missing(r["bleu"]) for r in summary],
           yerr=[r["bleu_std"] or 0.0 for r in summary], capsize=3, color="tab:blue")
    note_if_empty(ax, "test BLEU")
    ax.set_xticks(range(len(summary)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("test BLEU")
    ax.set_title("SVO -> SOV toy translation")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_all(rows: list[dict[str, Any]], total_runs: int, data: dict[str, Any], config: dict[str, Any],
              root: Path, seconds: float) -> Path:
    """Write results.json, report.md and bleu.png for the runs finished so far (called after every run)."""
    summary = summarize(rows)
    reorderer = data["reorderer"]
    out_dir = write_results(NAME, {**config, "reorderer": reorderer, "runs_finished": len(rows),
                                   "runs_planned": total_runs}, rows, seconds, root=root).parent
    plot(summary, out_dir / "bleu.png")
    partial = "" if len(rows) == total_runs else f" **Partial: {len(rows)} of {total_runs} runs finished.**"
    body = [
        "Toy SVO -> SOV translation with nested relative and complement clauses "
        f"({config['train_pairs']} training pairs, {config['test_pairs']} test pairs, clause depth <= "
        f"{config['max_depth']}); encoder-decoder Transformer, dim {config['dim']}, {config['encoder_layers']}+"
        f"{config['decoder_layers']} layers, {config['steps']} steps of batch {config['batch_size']}. Greedy decoding; "
        "corpus BLEU with sacrebleu on the target tokens." + partial,
        "",
        "## BLEU per variant (mean over seeds)",
        "",
        markdown_table(summary, ["variant", "positions", "seeds", ("bleu", "BLEU"), ("bleu_std", "std"),
                                 ("delta_bleu", "BLEU - pe"), ("exact_match", "exact match"), ("seconds", "s/run")],
                       {"bleu": ".2f", "bleu_std": ".2f", "delta_bleu": "+.2f", "exact_match": ".3f",
                        "seconds": ".0f"}),
        "## Source-only BTG reorderer",
        "",
        f"Perceptron epochs: {len(reorderer['train_accuracy_per_epoch'])}; training-sentence accuracy per epoch "
        f"{', '.join(f'{a:.3f}' for a in reorderer['train_accuracy_per_epoch'])}. On the test sentences it "
        f"reproduces the alignment's reordering exactly for {100 * reorderer['test_sentence_accuracy']:.1f} % of "
        f"the sentences and puts {100 * reorderer['test_token_accuracy']:.1f} % of the tokens at their oracle "
        "cross-lingual position.",
        "",
        "## Runs",
        "",
        markdown_table(rows, ["variant", "positions", "seed", ("bleu", "BLEU"), ("exact_match", "exact match"),
                              ("train_loss", "final train loss"), "parameters", ("seconds", "s")],
                       {"bleu": ".2f", "exact_match": ".3f", "train_loss": ".3f", "seconds": ".0f"}),
        "`oracle` positions are read from the test pair's own alignment, i.e. from the reference translation; "
        "they bound what a perfect reorderer could give and are not a fair system. The paper's claim (Ding et "
        "al. 2020: XL-PE improves BLEU over the PE-only Transformer) is checked by `xl_*` with `reorderer` "
        "positions against `pe`.",
        "",
        "![BLEU](bleu.png)",
    ]
    write_report(NAME, "Translation: cross-lingual position representations (XL-PE)", "\n".join(body), root=root)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    parser = standard_argparser(__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="training steps per model")
    parser.add_argument("--seeds", type=int, nargs="+", help="training seeds")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--positions", nargs="+", choices=["reorderer", "oracle"],
                        help="sources of the cross-lingual positions")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--resume", action="store_true", help="reuse finished runs with the same configuration")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    config = dict(QUICK if args.quick else FULL)
    for key in ("steps", "seeds", "positions"):
        if getattr(args, key) is not None:
            config[key] = getattr(args, key)
    config["variants"] = args.variants
    config["device"] = device_options(args)  # part of run_config: a run on another device is not reused
    start = time.perf_counter()
    data = build_data(config)
    # the baseline, then reorderer positions (the fair setting), then oracle ones: a partial run already
    # answers the main question
    runs = [(v, p, s) for s in config["seeds"] for p in ["-", *config["positions"]] for v in args.variants
            if (v == "pe") == (p == "-")]
    progress = Progress(len(runs), NAME)
    rows: list[dict[str, Any]] = []
    out_dir = None
    store = RunStore(Path(args.out) / NAME / "runs" / ("quick" if args.quick else "full"), resume=args.resume)
    run_config = {k: v for k, v in config.items() if k not in ("seeds", "variants", "positions")}
    for variant, positions, seed in runs:
        key = f"{variant}__{positions if positions != '-' else 'none'}__seed{seed}"
        row = store.load(key, run_config)
        if row is None:
            row = run_one(variant, "oracle" if positions == "-" else positions, seed, data, config)
            store.save(key, run_config, row)
        row = {k: v for k, v in row.items() if k != "spec"}
        rows.append(row)
        progress(f"{variant} ({positions}) seed {seed}: BLEU {row['bleu']:.2f}, exact {row['exact_match']:.3f}")
        out_dir = write_all(rows, len(runs), data, config, args.out, time.perf_counter() - start)
    print(f"wrote {out_dir}")


if __name__ == "__main__":
    main()
