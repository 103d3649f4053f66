"""The translation benchmark on the harness: presets and their errors, cells and run identity, intervals and claims
(the oracle an upper bound, never a claim), the agreement split, the plot, one tiny end-to-end run with --resume."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from pe_toolkit.bench import Result
from pe_toolkit.bench.cli import main
from pe_toolkit.bench.config import load_config
from pe_toolkit.bench.summary import summary_table
from pe_toolkit.bench.verdict import claims_table
from pe_toolkit.benchmarks import translation as bench

BENCHMARK = bench.Translation()


def summarize(rows):
    """The benchmark's summary rows (its default analysis) of ``rows``."""
    return [r for r in BENCHMARK.analyze(Result(config=None, preset="quick", rows=rows)) if r["kind"] == "summary"]


def quick(*overrides: str):
    return load_config(BENCHMARK, "quick", overrides=list(overrides))[0]


# ------------------------------------------------------------------------------------------ presets
def test_presets_load_and_follow_the_fairness_rule():
    assert BENCHMARK.preset_names() == ["full", "gpu", "quick"]
    for name in ("quick", "full", "gpu"):
        config, run = load_config(BENCHMARK, name)
        assert config.variants == ["pe", "xl_input", "xl_head"] and config.positions == ["reorderer", "oracle"]
        assert run["threads"] == 1
        if name != "quick":
            assert len(config.seeds) >= 3
            assert len(config.training.lrs) >= 3  # a grid that can bracket each cell's optimum
    assert load_config(BENCHMARK, "full")[1]["jobs"] == 2


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("seeds=[]", "seeds must be a non-empty list of distinct values"),
        ("seeds=[0, 0]", r"seeds must be a non-empty list of distinct values, got \[0, 0\]"),
        ("seeds=[-1]", r"(?s)config.seeds.*NonNegativeInt"),
        ("variants=[pe, rope]", r"(?s)config.variants.*Got value: rope"),
        ("variants=[pe, pe]", "variants must be a non-empty list of distinct values"),
        ("positions=[gold]", r"(?s)config.positions.*Got value: gold"),
        ("positions=[]", r"positions must be a non-empty list of distinct values, got \[\]"),
        ("training.lrs=[]", "training.lrs must be a non-empty list of distinct values"),
        ("training.lrs=[0.001, 0.001]", "training.lrs must be a non-empty list of distinct values"),
        ("training.lrs=[-0.001]", r"(?s)config.training.lrs.*PositiveFloat"),
        ("training.steps=0", r"(?s)config.training.steps.*PositiveInt"),
        ("data.max_depth=-1", r"(?s)config.data.max_depth.*NonNegativeInt"),
        ("model.dim=30", r"model.dim \(30\) must be a multiple of 2 \* model.num_heads \(4\)"),
        ("model.dropout=1.0", r"(?s)config.model.dropout.*v>=0.0 and v<1.0"),
        ("reorderer.epochs=0", r"(?s)config.reorderer.epochs.*PositiveInt"),
        ("training.stepz=3", "'training.stepz' does not exist"),
        ("data.pairs=3", "'data.pairs' does not exist"),
        ("extra=1", "'extra' does not exist"),
    ],
)
def test_bad_config_values_name_their_key(override, message):
    with pytest.raises(ValueError, match=message):
        quick(override)


def test_positions_may_be_empty_without_an_xl_variant():
    assert quick("variants=[pe]", "positions=[]").positions == []


def test_a_mistyped_value_is_an_error_naming_the_field():
    with pytest.raises(ValueError, match="lrs"):
        quick("training.lrs=0.001")
    with pytest.raises(ValueError, match="train_pairs"):
        quick("data.train_pairs=1.5")


def test_cells_runs_and_tuning():
    config = quick()
    assert bench.cells(config) == [("pe", "-"), ("xl_input", "reorderer"), ("xl_input", "oracle"),
                                   ("xl_head", "reorderer"), ("xl_head", "oracle")]
    config = quick("seeds=[0, 1]", "variants=[xl_head, pe]", "positions=[reorderer]")
    specs = BENCHMARK.runs(config)
    assert [(s["cell"], s["seed"]) for s in specs] == [("xl_head (reorderer)", 0), ("pe", 0),
                                                       ("xl_head (reorderer)", 1), ("pe", 1)]
    assert all(s["training"] == {"steps": 150, "batch_size": 32} and "lr" not in s for s in specs)
    tuning = BENCHMARK.tuning(quick("training.lrs=[0.001, 0.002]"))
    assert (tuning.param, list(tuning.values), tuning.metric, tuning.maximize, tuning.group) == (
        "lr", [0.001, 0.002], "val_bleu", True, "cell")  # every cell: the same grid, the same validation pairs
    assert tuning.max_extensions == 0 and BENCHMARK.tuning(quick("training.max_extensions=2")).max_extensions == 2


# ------------------------------------------------------------------------------------------ summaries
def _rows(cells):
    rows = []
    for (variant, positions), values in cells.items():
        for seed, bleu in enumerate(values):
            rows.append({"variant": variant, "positions": positions, "role": bench.ROLES[positions], "seed": seed,
                         "bleu": bleu, "exact_match": 0.5, "val_bleu": bleu, "parameters": 100, "lr": 0.002,
                         "seconds": 1.0, "bleu_agree": bleu,
                         "bleu_differ": bleu - 10, "exact_match_differ": 0.25})
    return rows


CELLS = {("pe", "-"): (80.0, 81.0, 82.0), ("xl_input", "reorderer"): (90.0, 91.0, 92.0),
         ("xl_input", "oracle"): (95.0, 96.0, 97.0), ("xl_head", "reorderer"): (80.0, 82.0, 84.0),
         ("xl_head", "oracle"): (79.0, 80.0, 81.0)}


def test_summary_intervals_by_hand():
    summary = summarize(_rows(CELLS))
    assert [(r["variant"], r["positions"]) for r in summary] == list(CELLS)
    head = summary[3]["bleu"]
    # mean 82, sd 2, t(0.975, 2) = 4.302653: half-width 4.302653 * 2 / sqrt(3) = 4.96827
    assert head["mean"] == pytest.approx(82.0) and head["n"] == 3
    assert head["low"] == pytest.approx(77.03173, abs=1e-4)
    assert head["high"] == pytest.approx(86.96827, abs=1e-4)
    assert "82.00 [77.03, 86.97] (n=3)" in summary_table(summary, ["variant"], ["bleu"], bench.METRICS)
    assert [r["role"] for r in summary] == ["method", "method", "oracle upper bound (reads the reference)", "method",
                                            "oracle upper bound (reads the reference)"]
    assert summary[0]["bleu_differ"]["mean"] == pytest.approx(71.0) and summary[0]["parameters"] == 100
    near_top = summarize(_rows({("pe", "-"): (99.0, 100.0, 100.0)}))[0]["bleu"]
    assert near_top["high"] == 100.0  # BLEU's interval stays within [0, 100]
    missing = summarize([{**r, "bleu_differ": None} for r in _rows(CELLS)])[0]["bleu_differ"]
    assert (missing["n"], missing["n_nonfinite"]) == (0, 3)  # a missing subset counts, never dropped


def test_claims_are_decided_on_the_difference_and_the_oracle_is_never_a_claim():
    checks = bench.claims(_rows(CELLS))
    by = {c["comparison"]: c for c in checks}
    claims = [c for c in checks if c["kind"] == "claim"]
    assert [c["comparison"] for c in claims] == ["xl_input (reorderer) vs pe", "xl_head (reorderer) vs pe"]
    # xl_input - pe: 10, se sqrt(1/3 + 1/3) = 0.8165, Welch df 4, t 2.776: [7.73, 12.27] above 0
    xl_input = by["xl_input (reorderer) vs pe"]
    assert xl_input["verdict"] == "reproduced" and xl_input["test"].startswith("Welch t")
    assert xl_input["difference"]["low"] == pytest.approx(10 - 2.776445 * 0.816497, abs=1e-3)
    # xl_head - pe: 1, se sqrt(4/3 + 1/3) = 1.29: the interval contains 0
    xl_head = by["xl_head (reorderer) vs pe"]
    assert xl_head["verdict"] == "inconclusive" and xl_head["min_detectable_effect"] > 1
    assert xl_head["a"]["n"] == xl_head["b"]["n"] == 3 and xl_head["paper"] == "Ding et al. 2020"
    bounds = [c for c in checks if c["kind"] == "upper bound"]
    assert len(bounds) == 4 and all("oracle" in c["comparison"] for c in bounds)
    assert by["xl_input (oracle) vs xl_input (reorderer)"]["verdict"] == "reproduced"
    assert by["xl_head (oracle) vs xl_head (reorderer)"]["verdict"] == "inconclusive"
    table = claims_table([xl_head], ".2f")
    assert "| 82.00 [77.03, 86.97] (n=3) | 81.00 [78.52, 83.48] (n=3) |" in table
    assert "**inconclusive**" in table and "not reproduced" not in table
    one_seed = bench.claims([r for r in _rows(CELLS) if r["seed"] == 0])
    assert {c["verdict"] for c in one_seed} == {"untested"}
    assert "fewer than 2 replicates" in one_seed[0]["reason"]
    reversed_ = bench.claims(_rows({("pe", "-"): (90.0, 91.0, 92.0), ("xl_input", "reorderer"): (80.0, 81.0, 82.0)}))
    assert reversed_[0]["verdict"] == "contradicted"


def test_agreement_subsets_split_the_test_set_where_the_positions_differ():
    from pe_toolkit.domains.translation import SentencePair
    from pe_toolkit.domains.translation.lightning_module import corpus_bleu

    pairs = [SentencePair(("a", "b"), ("A", "B"), ((0, 0), (1, 1))), SentencePair(("c",), ("C",), ((0, 0),)),
             SentencePair(("d", "e"), ("E", "D"), ((0, 1), (1, 0)))]
    data = SimpleNamespace(pairs={"test": pairs}, positions={"oracle": {"test": [[0, 1], [0], [1, 0]]},
                                                             "reorderer": {"test": [[0, 1], [0], [0, 1]]}})
    out = bench.agreement_subsets([["A", "B"], ["X"], ["E", "D"]], data)
    assert (out["test_agree"], out["test_differ"]) == (2, 1)
    assert out["exact_match_agree"] == 0.5 and out["exact_match_differ"] == 1.0
    assert out["bleu_agree"] == corpus_bleu([["A", "B"], ["X"]], [["A", "B"], ["C"]])
    assert out["bleu_differ"] == corpus_bleu([["E", "D"]], [["E", "D"]])
    data.positions["reorderer"]["test"] = data.positions["oracle"]["test"]
    out = bench.agreement_subsets([["A", "B"], ["X"], ["E", "D"]], data)
    assert out["test_differ"] == 0 and out["bleu_differ"] is None and out["exact_match_differ"] is None


def test_plot_takes_interval_rows_and_bare_rows(tmp_path):
    from pe_toolkit.bench.report import save_figure

    save_figure(bench.plot(summarize(_rows(CELLS))), tmp_path / "bleu.png", quick=False)
    figure = bench.plot([{"variant": "pe", "positions": "-", "bleu": None}])
    assert any(t.get_gid() == "note_if_empty" for t in figure.axes[0].texts)  # no finite BLEU: said, not drawn
    save_figure(figure, tmp_path / "empty.png", quick=False)
    assert (tmp_path / "bleu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "empty.png").stat().st_size > 0


# ------------------------------------------------------------------------------------------ end to end
TINY = ["--quick", "--accelerator", "cpu", "--jobs", "1", "--set", "variants=[pe, xl_input]",
        "--set", "data.train_pairs=24", "--set", "data.val_pairs=4", "--set", "data.test_pairs=6",
        "--set", "model.dim=8", "--set", "model.num_heads=2", "--set", "training.steps=2",
        "--set", "training.batch_size=4", "--set", "training.lrs=[0.003]"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("translation_out")
    assert main([*TINY, "--out", str(out)], name="translation") == 0
    return out / "translation", json.loads((out / "translation" / "results.json").read_text())


def test_tiny_end_to_end_run_writes_results_report_and_plot(tiny_run):
    out, document = tiny_run
    config = document["config"]
    assert config["preset"] == "quick" and config["device"]["accelerator"] == "cpu"
    assert config["training"]["steps"] == 2 and config["chosen"] == {"pe": 0.003, "xl_input (reorderer)": 0.003,
                                                                     "xl_input (oracle)": 0.003}
    runs = [r for r in document["rows"] if r["kind"] == "run"]
    assert [(r["variant"], r["positions"]) for r in runs] == [("pe", "-"), ("xl_input", "reorderer"),
                                                              ("xl_input", "oracle")]
    for row in runs:
        assert row["lr"] == 0.003 and 0.0 <= row["bleu"] <= 100.0 and row["test_agree"] + row["test_differ"] == 6
    assert runs[2]["role"] == "oracle upper bound (reads the reference)" and runs[1]["role"] == "method"
    claim = next(r for r in document["rows"] if r["kind"] == "claim")
    assert claim["comparison"] == "xl_input (reorderer) vs pe" and claim["verdict"] == "untested"  # one seed
    report = (out / "report.md").read_text()
    for text in ("How the fairness rule is met", "oracle upper bound", "**untested**", "bleu_differ"):
        assert text in report
    assert (out / "bleu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((out / "runs" / "quick").glob("*.json"))) == 3


def test_resume_reuses_every_finished_run(tiny_run, monkeypatch):
    out, document = tiny_run

    def no_training(spec):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(bench.Translation, "run_one", staticmethod(no_training))
    assert main([*TINY, "--out", str(out.parent), "--resume"], name="translation") == 0
    rerun = json.loads((out / "results.json").read_text())
    assert [r for r in rerun["rows"] if r["kind"] == "run"] == [r for r in document["rows"] if r["kind"] == "run"]
