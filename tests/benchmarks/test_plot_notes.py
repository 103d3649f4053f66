"""A plot with no data says so: ``pe_toolkit.bench.plots.note_if_empty`` and the benchmarks' plotting functions.

Quick runs train too little for some metrics (NaN / None in every row); a panel left without a
finite point must carry the note instead of empty axes, and the figure must still be written.
The plotting functions are called directly with fabricated rows: no training.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.figure  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from pe_toolkit.bench import plots as common  # noqa: E402

NAN = float("nan")
NOTE = "no finite values of"


@pytest.fixture
def ax():
    fig, axes = plt.subplots()
    yield axes
    plt.close(fig)


def _notes(axes) -> list[str]:
    return [t.get_text() for t in axes.texts if t.get_text().startswith(NOTE)]


# ------------------------------------------------------------------------------------------ helper
def test_nan_if_missing():
    assert math.isnan(common.nan_if_missing(None))
    with pytest.raises(ValueError):  # a value that is not a number is an error, not a silent gap
        common.nan_if_missing("n/a")
    assert common.nan_if_missing(2) == 2.0 and isinstance(common.nan_if_missing(2), float)


@pytest.mark.parametrize("draw", [
    lambda a: a.plot([1, 2, 3], [NAN, NAN, NAN], marker="o", label="x"),
    lambda a: a.plot([1, 2], [math.inf, NAN]),
    lambda a: a.plot([], []),
    lambda a: a.bar([0, 1], [NAN, NAN], yerr=[0.1, 0.1], label="x"),
    lambda a: a.barh(["a", "b"], [NAN, NAN]),
    lambda a: a.errorbar([1.0], [NAN], yerr=[0.1], fmt="o"),
    lambda a: a.scatter([1.0, 2.0], [NAN, NAN]),
    lambda a: a.imshow([[NAN, NAN], [NAN, NAN]]),
    lambda a: (a.plot([1, 2], [NAN, NAN]), a.axhline(0.5), a.axvline(1.0), a.text(1, 1, "label")),
], ids=["line", "inf-line", "no-points", "bars", "barh", "errorbar", "scatter", "image", "reference-lines"])
def test_no_finite_data_writes_the_note(ax, draw):
    draw(ax)
    assert not common.has_finite_data(ax)
    assert common.note_if_empty(ax, "passkey accuracy") is True
    (note,) = _notes(ax)
    assert note.startswith("no finite values of passkey accuracy in this run")
    assert common.EMPTY_PANEL_REASON in note
    text = next(t for t in ax.texts if t.get_text() == note)
    assert text.get_transform() == ax.transAxes and text.get_position() == (0.5, 0.5)  # centred on the axes


@pytest.mark.parametrize("draw", [
    lambda a: a.plot([1, 2, 3], [NAN, 0.5, NAN]),
    lambda a: a.bar([0, 1], [NAN, 0.0]),  # a measured zero is data
    lambda a: a.barh(["a"], [3.0]),
    lambda a: a.errorbar([1.0], [0.2], yerr=[0.1], fmt="o"),
    lambda a: a.scatter([1.0], [2.0]),
    lambda a: a.imshow([[NAN, 0.3]]),
], ids=["line", "bars", "barh", "errorbar", "scatter", "image"])
def test_finite_data_writes_nothing(ax, draw):
    draw(ax)
    texts = len(ax.texts)
    assert common.has_finite_data(ax)
    assert common.note_if_empty(ax, "passkey accuracy") is False
    assert len(ax.texts) == texts


def test_the_reason_can_be_given(ax):
    assert common.note_if_empty(ax, "time", reason="nothing was measured")
    assert _notes(ax) == ["no finite values of time in this run\n(nothing was measured)"]


# ------------------------------------------------------------------------------ benchmark plots
@pytest.fixture
def saved(monkeypatch):
    """Every figure saved while the test runs: ``[(path, [notes of each axes])]``; the files are still written."""
    figures = []
    original = matplotlib.figure.Figure.savefig

    def record(fig, path, *args, **kwargs):
        figures.append((path, [_notes(a) for a in fig.axes if a.get_label() != "<colorbar>"]))
        return original(fig, path, *args, **kwargs)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", record)
    return figures


def _assert_all_panels_noted(figures, count=1):
    assert len(figures) == count
    for path, panels in figures:
        assert path.exists() and path.stat().st_size > 0, path
        assert panels and all(len(notes) == 1 for notes in panels), (path, panels)


def test_recsys_plot_with_no_metric():
    from pe_toolkit.bench.verdict import summarize
    from pe_toolkit.benchmarks import recsys

    rows = [{"dataset": d, "protocol": "recbole", "encoding": e, "hr@10": None, "ndcg@10": summarize([NAN]).as_dict()}
            for d in recsys.DATASETS for e in ("rope", "learned")]
    figure = recsys.plot(rows)
    panels = [_notes(a) for a in figure.axes]
    assert len(panels) == 2 and all(len(notes) == 1 for notes in panels)
    assert "HR@10 or NDCG@10" in panels[0][0]
    plt.close(figure)


def test_recsys_plot_with_one_metric_has_no_note():
    from pe_toolkit.bench.verdict import summarize
    from pe_toolkit.benchmarks import recsys

    rows = [{"dataset": "synthetic", "protocol": "recbole", "encoding": "rope", "hr@10": summarize([0.3]).as_dict(),
             "ndcg@10": None}]
    figure = recsys.plot(rows)
    assert [_notes(a) for a in figure.axes] == [[]]
    plt.close(figure)


def _summaries(cls, rows) -> list[dict]:
    """The benchmark's default summary rows (its declared groups and metrics) of ``rows``."""
    from pe_toolkit.bench.summary import summarize_groups

    return summarize_groups(rows, cls.summary_by, list(cls.summary_metrics), bounds=dict(cls.summary_metrics),
                            keep=cls.summary_keep)


def _empty() -> dict:
    from pe_toolkit.bench.verdict import summarize

    return summarize([]).as_dict()


def _panels(figure) -> list[list[str]]:
    return [_notes(a) for a in figure.axes if a.get_label() != "<colorbar>"]


def _saved(figure, path) -> None:
    from pe_toolkit.bench.report import save_figure

    save_figure(figure, path, quick=False)
    assert path.stat().st_size > 0


def test_extrapolation_passkey_with_no_accuracy(tmp_path):
    from pe_toolkit.benchmarks import extrapolation

    rows = [{"variant": v, "mode": "zero_shot", **{f"digits@{n} depth {d:g}": _empty() for n in (64, 128)
                                                   for d in (0.0, 0.5)}} for v in ("rope", "alibi", "nope")]
    figure = extrapolation.plot_passkey(rows, "zero_shot", [64, 128], [0.0, 0.5], 64)
    # one note per variant's panel (no colorbar, nothing to scale)
    assert [len(p) for p in _panels(figure)] == [1, 1, 1]
    assert "passkey digit accuracy" in _panels(figure)[0][0]
    _saved(figure, tmp_path / "passkey.png")


def test_extrapolation_passkey_mixed(tmp_path):
    from pe_toolkit.bench.verdict import summarize
    from pe_toolkit.benchmarks import extrapolation

    rows = [{"variant": "rope", "mode": "trained", "digits@64 depth 0.5": summarize([0.4, 0.5]).as_dict()},
            {"variant": "nope", "mode": "trained", "digits@64 depth 0.5": _empty()}]
    figure = extrapolation.plot_passkey(rows, "trained", [64], [0.5], 64)
    assert [len(p) for p in _panels(figure)] == [0, 1]
    _saved(figure, tmp_path / "passkey.png")


def test_extrapolation_ppl_with_no_perplexity(tmp_path):
    from pe_toolkit.benchmarks import extrapolation

    rows = [{"variant": "rope", "mode": "zero_shot", "runs": 3, **{f"ppl@{n}": _empty() for n in (64, 128)}}]
    figure = extrapolation.plot_ppl(rows, "zero_shot", [64, 128], 64)
    assert [len(p) for p in _panels(figure)] == [1]
    _saved(figure, tmp_path / "ppl.png")


def test_detection_map_with_no_map(tmp_path):
    from pe_toolkit.bench.report import save_figure
    from pe_toolkit.benchmarks import detection

    rows = [{"variant": v, "seed": s, "parameters": 1000, "map": None} for v in ("a", "b") for s in (0, 1)]
    figure = detection.plot_map(_summaries(detection.Detection, rows))
    assert figure.axes and all(len(_notes(a)) == 1 for a in figure.axes)
    save_figure(figure, tmp_path / "map.png", quick=True)
    assert (tmp_path / "map.png").stat().st_size > 0


def test_music_metrics_all_nan(tmp_path):
    from pe_toolkit.bench.report import save_figure
    from pe_toolkit.benchmarks import music

    metrics = ("test_nll", "gen_f1", "chroma_similarity", "ssm_distance", "grooving_similarity",
               "note_density_distance")
    side = {"mean": NAN, "low": NAN, "high": NAN, "n": 0}
    rows = [{"task": t, "encoding": e, **{m: side for m in metrics}} for t in music.TASKS for e in ("ape", "s_ape")]
    figure = music.plot_metrics(rows)
    assert figure.axes and all(len(_notes(a)) == 1 for a in figure.axes)
    save_figure(figure, tmp_path / "music.png", quick=False)
    assert (tmp_path / "music.png").stat().st_size > 0


def test_crossmodal_scores_all_nan(tmp_path):
    from pe_toolkit.bench.report import save_figure
    from pe_toolkit.benchmarks import crossmodal

    rows = [{"variant": v, "gamma": g, "seed": s, "av_align": None, "floor": None}
            for v in ("none", "cmc_pe") for g in (1.0, 1.5) for s in (0, 1)]
    figure = crossmodal.plot_scores(_summaries(crossmodal.CrossModal, rows), {"real": 0.8, "shuffled": 0.4})
    assert figure.axes and all(len(_notes(a)) == 1 for a in figure.axes)
    save_figure(figure, tmp_path / "scores.png", quick=True)
    assert (tmp_path / "scores.png").stat().st_size > 0


def test_translation_all_none():
    from pe_toolkit.benchmarks import translation

    figure = translation.plot([{"variant": "rope", "positions": "-", "bleu": None, "bleu_std": None}])
    assert [len(_notes(a)) for a in figure.axes] == [1]
    plt.close(figure)


def test_multirobot_metrics_all_none(tmp_path):
    from pe_toolkit.bench.report import save_figure
    from pe_toolkit.benchmarks import multirobot

    rows = [{"method": m, "seed": s} for m in ("a", "b") for s in (0, 1)]  # every metric missing
    figure = multirobot.plot_metrics(_summaries(multirobot.MultiRobot, rows))
    assert figure.axes and all(len(_notes(a)) == 1 for a in figure.axes)
    save_figure(figure, tmp_path / "metrics.png", quick=True)
    assert (tmp_path / "metrics.png").stat().st_size > 0


def test_attention_stability_all_nan(tmp_path):
    from pe_toolkit.bench.report import save_figure
    from pe_toolkit.bench.verdict import summarize
    from pe_toolkit.benchmarks import attention_stability

    rows = [{"config": c, "lr": lr, "seed": 0, "val_loss": NAN, "max_logit_per_layer": [[NAN], [NAN]],
             "max_logit_steps": [1, 2]} for c in ("mha", "mla") for lr in (0.01, 0.1)]
    lr_rows = [{"config": c, "lr": lr, "val_loss": summarize([]).as_dict()} for c in ("mha", "mla")
               for lr in (0.01, 0.1)]
    figures = attention_stability.plot(rows, lr_rows, unigram=3.0)
    assert sorted(figures) == ["loss_vs_lr.png", "max_logit.png"]
    for name, figure in figures.items():
        assert figure.axes and all(len(_notes(a)) == 1 for a in figure.axes), name
        save_figure(figure, tmp_path / name, quick=False)
        assert (tmp_path / name).stat().st_size > 0


def test_mha2mla_all_nan(tmp_path):
    from pe_toolkit.bench.verdict import summarize
    from pe_toolkit.benchmarks import mha2mla

    rows = [{"val_loss_zero_shot": summarize([NAN]).as_dict(), "val_loss_finetuned": _empty()},
            {"cache_reduction": 0.5, "strategy": "high", "svd": "joint",
             "val_loss_zero_shot": summarize([NAN]).as_dict(), "val_loss_finetuned": _empty()}]
    figure = mha2mla.plot(rows)
    assert [len(p) for p in _panels(figure)] == [1, 1]
    _saved(figure, tmp_path / "mha2mla.png")


def test_length_generalization_no_counts():
    from pe_toolkit.benchmarks import length_generalization

    rows = [{"task": "copy", "encoding": e, "per_length": {21: {"correct": 0, "total": 0}}, "train_lengths": [1, 20]}
            for e in ("rope", "nope")]
    figure = length_generalization.plot(rows)
    assert [len(_notes(a)) for a in figure.axes if a.get_visible()] == [1]
    plt.close(figure)
    empty = length_generalization.plot([])  # no run at all: one panel that says so
    assert [len(_notes(a)) for a in empty.axes] == [1]
    plt.close(empty)


def test_graphs_accuracy_none(tmp_path):
    from pe_toolkit.benchmarks import graphs

    pe, model = graphs.PE_NAMES[0], next(iter(graphs.MODELS))
    # a cell without a value (None) and what summarize gives for no finite value (NaN)
    rows = [{"task": "csl", "pe": pe, "model": model, "test_metric": {"mean": None, "low": None, "high": None}},
            {"task": "sbm", "pe": pe, "model": model, "test_metric": {"mean": NAN, "low": NAN, "high": NAN, "n": 0}}]
    accuracy = graphs.plot_accuracy(rows, ["csl", "sbm"], "accuracy (%)")
    precompute = graphs.plot_precompute([{"method": "x", "num_nodes": 10, "median_s": 1.0, "status": "failed"}])
    assert [len(_notes(a)) for a in accuracy.axes + precompute.axes] == [1, 1, 1]
    import matplotlib.pyplot as plt

    plt.close(accuracy)
    plt.close(precompute)


def test_explain_auc_none(tmp_path):
    from pe_toolkit.bench.report import save_figure
    from pe_toolkit.benchmarks import explain

    rows = [{"task": "copy", "encoding": "rope", "method": m, "auc_morf": None, "auc_lerf": NAN}
            for m in explain.METHODS]
    figure = explain.plot_auc(rows)
    assert figure.axes and all(len(_notes(a)) == 1 for a in figure.axes)
    save_figure(figure, tmp_path / "auc.png", quick=False)
    assert (tmp_path / "auc.png").stat().st_size > 0


def test_extreme_inputs_no_memory(tmp_path):
    from pe_toolkit.bench.report import save_figure
    from pe_toolkit.benchmarks import extreme_inputs

    rows = [{"length": 4096, "encoder": "rope", "dtype": "float32", "peak_mib": None}]
    figure = extreme_inputs.plot_memory(rows, 4096)
    assert [len(_notes(a)) for a in figure.axes] == [1]
    save_figure(figure, tmp_path / "mem.png", quick=False)
    assert (tmp_path / "mem.png").stat().st_size > 0


def test_speed_nothing_measured(tmp_path):
    from pe_toolkit.bench.report import save_figure
    from pe_toolkit.benchmarks import speed

    rows = [{"encoder": "rope", "length": n, "median_ms": None, "peak_mib": None} for n in (256, 512)]
    figure = speed.plot_layer(rows)
    assert [len(_notes(a)) for a in figure.axes] == [1, 1]
    save_figure(figure, tmp_path / "layer.png", quick=True)
    assert (tmp_path / "layer.png").stat().st_size > 0
    overhead = [{"encoder": "alibi", "backend": "sdpa", "length": 512, "status": "failed: x"}]
    figure = speed.plot_backend_overhead(overhead)
    assert [len(_notes(a)) for a in figure.axes] == [1]
    save_figure(figure, tmp_path / "overhead.png", quick=False)


def test_an_empty_log_scaled_panel_is_still_written(tmp_path):
    fig, ax = plt.subplots()
    ax.plot([1, 2], [NAN, NAN])
    ax.axhline(1.0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    assert common.note_if_empty(ax, "time")
    assert (ax.get_xscale(), ax.get_yscale()) == ("linear", "linear")  # log ticks need data to place
    fig.savefig(tmp_path / "empty.png")
    plt.close(fig)
    assert (tmp_path / "empty.png").stat().st_size > 0
