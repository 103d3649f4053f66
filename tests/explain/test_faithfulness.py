"""``pe_toolkit.explain.faithfulness``: the perturbation test per method, and the relevance heatmap."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.explain.faithfulness import EVIDENCE_TASKS, FRACTIONS, METHODS, evidence_examples, faithfulness


def model(encoding: str = "rope") -> pet.Transformer:
    torch.manual_seed(0)
    config = pet.TransformerConfig(vocab_size=12, dim=16, num_heads=2, num_layers=1, encoding=encoding)
    return pet.Transformer(config).eval()


def examples() -> list[dict]:
    # two lengths (two batches); position 0 (a <bos>-like token) is never removed; the truth is one position
    return [{"ids": [1, 4, 5, 6, 2], "removable": [1, 2, 3], "truth": [2], "replacement": 0, "label": 7},
            {"ids": [1, 8, 9, 2], "removable": [1, 2], "truth": [1], "replacement": 0, "label": 3},
            {"ids": [1, 5, 4, 7, 2], "removable": [1, 2, 3], "truth": [3], "replacement": 0, "label": 5}]


def test_per_method_areas_curves_and_hits():
    net, items = model(), examples()
    results, summary = faithfulness(net, items, seed=0)
    assert set(results) == set(METHODS)
    for metrics in results.values():
        assert 0.0 <= metrics["auc_morf"] <= 1.0 and 0.0 <= metrics["auc_lerf"] <= 1.0
        assert metrics["top1_hit"] in (0.0, 1 / 3, 2 / 3, 1.0)
        # MoRF and LeRF remove the same inputs at fraction 0 (none) and 1 (all)
        assert len(metrics["curve_morf"]) == len(FRACTIONS)
        assert metrics["curve_morf"][0] == pytest.approx(metrics["curve_lerf"][0])
        assert metrics["curve_morf"][-1] == pytest.approx(metrics["curve_lerf"][-1])
    # fraction 0 is the probability of the model's own prediction, averaged over the examples
    with torch.no_grad():
        top = [net(torch.tensor([e["ids"]]))[0, -1].softmax(-1).max().item() for e in items]
    assert results["pa_lrp"]["curve_morf"][0] == pytest.approx(sum(top) / 3, rel=1e-5)
    # the area is the trapezoid rule over the mean curve
    curve = torch.tensor(results["lrp"]["curve_lerf"], dtype=torch.float64)
    area = torch.trapezoid(curve, torch.tensor(FRACTIONS, dtype=torch.float64)).item()
    assert results["lrp"]["auc_lerf"] == pytest.approx(area)
    predicted = [int(net(torch.tensor([e["ids"]]))[0, -1].argmax()) for e in items]
    assert summary["accuracy"] == pytest.approx(sum(p == e["label"] for p, e in zip(predicted, items)) / 3)
    assert summary["examples"] == 3 and summary["example"]["ids"] == items[0]["ids"]  # the longest length
    # conservation: the ledger balances; PA-LRP's input fraction = token + position fractions; plain LRP has none
    assert summary["identity_residual_pa_lrp"] < 1e-4 and summary["identity_residual_lrp"] < 1e-4
    assert summary["input_fraction_pa_lrp"] == pytest.approx(
        summary["token_fraction_pa_lrp"] + summary["position_fraction_pa_lrp"], abs=1e-6)
    assert summary["position_fraction_pa_lrp"] != 0.0 and summary["position_fraction_lrp"] == 0.0
    assert 0.0 < summary["position_share"] < 1.0
    # the random order depends on the seed only
    again, _ = faithfulness(net, items, seed=0)
    other, _ = faithfulness(net, items, seed=1)
    assert again["random"] == results["random"] and other["random"] != results["random"]
    assert again["pa_lrp"] == results["pa_lrp"] and other["pa_lrp"] == results["pa_lrp"]


def test_nope_has_no_positional_relevance():
    _, summary = faithfulness(model("nope"), examples())
    assert summary["position_share"] == 0.0 and summary["position_fraction_pa_lrp"] == 0.0
    assert summary["example"]["position_terms"] == {}


def test_bad_arguments():
    with pytest.raises(ValueError, match="examples must not be empty"):
        faithfulness(model(), [])
    with pytest.raises(ValueError, match="fractions must increase from 0 to 1"):
        faithfulness(model(), examples(), fractions=[0.0, 0.5])
    with pytest.raises(ValueError, match="fractions must increase from 0 to 1"):
        faithfulness(model(), examples(), fractions=[0.0, 0.5, 0.5, 1.0])


def test_relevance_heatmap(tmp_path):
    from pe_toolkit.plotting import plot_relevance

    fig = plot_relevance(["<bos>", "a", "b"], {"token": [0.1, -0.5, 0.2], "position": [0.0, 0.0, 0.0]}, title="demo")
    image = fig.axes[0].images[0].get_array()
    assert image.flatten().tolist() == pytest.approx([0.2, -1.0, 0.4, 0.0, 0.0, 0.0])  # rows scaled by max |relevance|
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["token", "position"]
    fig.savefig(tmp_path / "heatmap.png")
    assert (tmp_path / "heatmap.png").stat().st_size > 1000
    with pytest.raises(ValueError, match=r"len\(words\) = 3 values, got \{'token': 2\}"):
        plot_relevance(["a", "b", "c"], {"token": [0.1, 0.2]})
    with pytest.raises(ValueError, match="NaN or inf"):
        plot_relevance(["a"], {"token": [float("nan")]})
    with pytest.raises(ValueError, match="at least one row"):
        plot_relevance(["a"], {})


@pytest.mark.parametrize("name", sorted(EVIDENCE_TASKS))
def test_evidence_examples_mark_the_evidence_and_cut_after_the_explained_output(name):
    from pe_toolkit.explain.sentiment import NEGATIVE, NEGATOR, POSITIVE  # (registers explain_sentiment)
    from pe_toolkit.tasks import Vocabulary, get_task

    options = {"train_lengths": (6, 7)} if name == "explain_sentiment" else {"train_lengths": (4, 8), "num_symbols": 20}
    generator = get_task(name, **options)
    vocab = Vocabulary(generator.vocabulary())
    items = evidence_examples(generator, vocab, 4, seed=0)
    assert len(items) == 4 and items == evidence_examples(generator, vocab, 4, seed=0)  # seeded
    for item in items:
        assert item["index"] == len(item["ids"]) - 1
        assert set(item["truth"]) <= set(item["removable"]) and 0 not in item["removable"]
        words = vocab.decode(item["ids"])
        if name == "copy_random":  # the explained output copies the truth's symbol
            assert words[:3] == ["<bos>", "Copy", ":"] and vocab.id_to_token(item["label"]) == words[item["truth"][0]]
            assert item["replacement"] == vocab.pad_id
        else:
            assert words[-1] == "<sep>" and item["replacement"] == vocab.token_to_id("the")
            assert all(words[t] in (NEGATOR, *POSITIVE, *NEGATIVE) for t in item["truth"])
    with pytest.raises(ValueError, match=r"generator must be one of the tasks .*, got 'copy_repeat'"):
        evidence_examples(get_task("copy_repeat"), vocab, 1, seed=0)
