"""The shared summary, plot, report and trainer helpers that every benchmark uses."""

import math

import pytest

from pe_toolkit.bench import Result, Tuning, quiet_trainer
from pe_toolkit.bench.plots import finish, interval_errors, new_figure, plot_intervals
from pe_toolkit.bench.report import fairness_section
from pe_toolkit.bench.summary import group_rows, summarize_groups, summary_table

ROWS = [{"pe": "rope", "task": "a", "acc": 0.5, "params": 10}, {"pe": "rope", "task": "a", "acc": 0.7, "params": 10},
        {"pe": "nope", "task": "a", "acc": float("nan"), "params": 9}, {"pe": "nope", "task": "a", "acc": 0.4,
                                                                        "params": 9}]


def test_group_rows_keeps_first_appearance_order_and_checks_fields():
    assert list(group_rows(ROWS, ("pe",))) == [("rope",), ("nope",)]
    with pytest.raises(TypeError, match="by must be a sequence"):
        group_rows(ROWS, "pe")
    with pytest.raises(ValueError, match=r"lacks the grouping field\(s\) \['seed'\]"):
        group_rows(ROWS, ("seed",))


def test_summarize_groups_t_interval_counts_nonfinite_and_keeps_fields():
    rope, nope = summarize_groups(ROWS, ("pe", "task"), ("acc",), bounds=(0, 1), keep=("params",))
    assert (rope["pe"], rope["task"], rope["runs"], rope["params"]) == ("rope", "a", 2, 10)
    half = 12.706204736174707 * math.sqrt(0.02) / math.sqrt(2)  # t(0.975, 1) * sd / sqrt(n)
    assert rope["acc"]["mean"] == pytest.approx(0.6)
    assert rope["acc"]["low"] == pytest.approx(max(0.0, 0.6 - half))
    assert rope["acc"]["high"] == pytest.approx(min(1.0, 0.6 + half))
    assert (nope["acc"]["n"], nope["acc"]["n_nonfinite"], nope["acc"]["mean"]) == (1, 1, 0.4)


def test_summarize_groups_per_metric_bounds_and_their_errors():
    entry = summarize_groups(ROWS, ("pe",), ("acc", "params"), bounds={"acc": (0, 1)})[0]
    assert entry["params"]["method"] == "t" and entry["acc"]["method"] == "t within [0, 1]"
    with pytest.raises(ValueError, match=r"bounds names metrics \['loss'\]"):
        summarize_groups(ROWS, ("pe",), ("acc",), bounds={"loss": (0, 1)})
    with pytest.raises(ValueError, match="outside the metric's bounds"):
        summarize_groups(ROWS, ("pe",), ("params",), bounds=(0, 1))


def test_summary_table_formats_each_metric_as_mean_and_interval():
    entries = summarize_groups(ROWS, ("pe",), ("acc",), bounds=(0, 1))
    table = summary_table(entries, ["pe", "runs"], [("acc", "accuracy")], ".2f").splitlines()
    assert table[0] == "| pe | runs | accuracy |"
    assert table[2].startswith("| rope | 2 | 0.60 [0.00, 1.00] (n=2) |")
    assert table[3] == "| nope | 2 | 0.40 (n=1, 1 non-finite) |"


def test_interval_errors_nan_safe():
    means, (below, above) = interval_errors([{"mean": 1.0, "low": 0.5, "high": 2.0}, {"mean": 3.0, "low": math.nan,
                                                                                       "high": math.nan}, None])
    assert means[:2] == [1.0, 3.0] and math.isnan(means[2])
    assert below == [0.5, 0.0, 0.0] and above == [1.0, 0.0, 0.0]


def test_new_figure_plot_intervals_and_finish_note_empty_panels():
    fig, axes = new_figure(1, 2, size=(3, 2))
    assert axes.shape == (1, 2) and tuple(fig.get_size_inches()) == (6.0, 2.0)
    plot_intervals(axes[0][0], [1, 2], [{"mean": 1.0, "low": 0.5, "high": 1.5}, None], label="rope")
    plot_intervals(axes[0][1], [1], [None], label="nope")
    finish(fig, "accuracy")
    assert axes[0][0].get_legend() is not None
    notes = [t for t in axes[0][1].texts if t.get_gid() == "note_if_empty"]
    assert len(notes) == 1 and "accuracy" in notes[0].get_text() and axes[0][1].get_legend() is None
    with pytest.raises(ValueError, match="xs has 2 values but sides has 1"):
        plot_intervals(axes[0][0], [1, 2], [None])
    with pytest.raises(ValueError, match="ncols must be a positive int, got 0"):
        new_figure(1, 0)


def test_fairness_section_states_grid_seeds_and_held_out_data():
    tuning = Tuning(param="lr", values=[1e-3, 3e-3], metric="val_loss", maximize=False, group="encoder",
                    max_extensions=2)
    text = fairness_section(tuning, [0, 1, 2], held_out="test sequences are scored once",
                            same_budget="trains 500 steps", notes=["a note"])
    assert "the same `lr` grid [0.001, 0.003] per `encoder`" in text
    assert "lowest `val_loss`" in text and "at most 2 value(s)" in text
    assert "every encoder trains 500 steps" in text
    assert "test sequences are scored once." in text and "3 seeds [0, 1, 2]" in text and "* a note" in text
    assert "nothing is tuned" in fairness_section(None, [0], held_out="x")
    with pytest.raises(ValueError, match="held_out"):
        fairness_section(None, [0], held_out="")


def test_result_derived_of_and_quiet_trainer():
    result = Result(config=None, preset="quick", rows=[], derived=[{"kind": "summary", "a": 1}, {"kind": "claim"}])
    assert result.derived_of("summary") == [{"kind": "summary", "a": 1}] and result.derived_of("plot") == []
    trainer = quiet_trainer(None, max_steps=3)
    assert trainer.max_steps == 3 and trainer.logger is None and not trainer.checkpoint_callback
    assert trainer.progress_bar_callback is None
