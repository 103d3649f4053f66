"""Faithfulness of attribution methods on a trained model: the perturbation test over a set of examples.

Bakish et al. 2025 (arXiv:2506.02138) compare PA-LRP with plain LRP and baselines by perturbation: the
inputs of each example are replaced in order of a method's score, most relevant first (MoRF: a lower
area under the probability curve is more faithful) and least relevant first (LeRF: higher is more
faithful). :func:`faithfulness` runs that test for every method of :data:`METHODS` on a list of
examples (batched by length), with the top-1 hit rate against known evidence and PA-LRP's and plain
LRP's conservation (:meth:`~pe_toolkit.explain.Attribution.conservation`).

An example is a dict: ``ids`` (token ids, the explained output last), ``removable`` (positions that
may be replaced), ``truth`` (the positions holding the evidence), ``replacement`` (the token id written
into a removed position; the same for every example of one length) and ``label`` (the reference class).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pe_toolkit.explain.baselines import gradient_x_input, rollout
from pe_toolkit.explain.lrp import explain
from pe_toolkit.explain.perturbation import area_under_curve, perturbation_curve

__all__ = ["EVIDENCE_TASKS", "FRACTIONS", "METHODS", "evidence_examples", "faithfulness"]

METHODS = ("pa_lrp", "pa_lrp_token", "lrp", "grad_x_input", "rollout", "random")
"""PA-LRP's score (token relevance + |each positional term|), its token relevance alone, plain AttnLRP,
gradient x input, attention rollout (Abnar & Zuidema 2020) and a seeded random order."""
FRACTIONS = tuple(i / 10 for i in range(11))
"""The removed fractions of the removable inputs at which the curves are measured."""
EVIDENCE_TASKS = {"explain_sentiment": "sentiment", "copy_random": "copy"}
"""The generated tasks whose evidence :func:`evidence_examples` knows (task name: short name)."""


def evidence_examples(generator: Any, vocab: Any, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` examples of a generated task with known evidence, in this module's format.

    New draws (seed ``seed + 1000``) of the task's train split, each cut after the explained output:

    * ``explain_sentiment`` (:mod:`pe_toolkit.explain.sentiment`): the label after ``<sep>`` is explained; the
      evidence is the polar words and their negators; a removed word becomes the filler ``the``;
    * ``copy_random`` (``<bos> Copy : s.. <sep> s..``): one answer symbol per example, drawn with a seeded
      ``random.Random``, is explained under teacher forcing; the evidence is the source symbol it copies; a
      removed symbol becomes ``<pad>``.

    Args:
        generator: the task (``pe_toolkit.tasks.get_task(name, ...)``), one of :data:`EVIDENCE_TASKS`.
        vocab: its :class:`~pe_toolkit.tasks.Vocabulary`.
    """
    name = getattr(generator, "name", None)
    if name not in EVIDENCE_TASKS:
        raise ValueError(f"generator must be one of the tasks {sorted(EVIDENCE_TASKS)}, got {name!r}")
    kind = EVIDENCE_TASKS[name]
    rng = random.Random(f"explain/{kind}/{seed}")
    items = []
    for ex in generator.generate(count, "train", seed + 1000):
        ids, answer_start = vocab.encode(ex)
        if kind == "sentiment":
            index, removable = answer_start - 1, list(range(1, 1 + len(ex.prompt)))
            truth, replacement = [1 + i for i in ex.meta["evidence"]], vocab.token_to_id("the")
        else:
            j = rng.randrange(len(ex.answer))
            index, removable = answer_start - 1 + j, list(range(3, 3 + len(ex.answer)))
            truth, replacement = [3 + j], vocab.pad_id
        items.append({"ids": ids[: index + 1], "index": index, "removable": removable, "truth": truth,
                      "replacement": replacement, "label": ids[index + 1]})
    return items


def faithfulness(model: torch.nn.Module, examples: Sequence[Mapping[str, Any]], *, seed: int = 0,
                 fractions: Sequence[float] = FRACTIONS) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Perturbation AUCs per method, accuracy and conservation of ``model`` over ``examples``.

    The model's own prediction at the last position of each example is explained (and the curves
    follow the probability of that class).

    Args:
        model: a ``pe_toolkit`` Transformer in evaluation mode (what :func:`~pe_toolkit.explain.explain` supports).
        examples: dicts as described in the module docstring.
        seed: the random order of the ``"random"`` method.
        fractions: increasing values in ``[0, 1]`` starting at 0 and ending at 1 (the areas' range).

    Returns:
        ``(per_method, summary)``. ``per_method[m]``: ``auc_morf``, ``auc_lerf``, ``top1_hit`` (means over the
        examples) and ``curve_morf``, ``curve_lerf`` (mean probability per fraction). ``summary``: ``accuracy``
        (prediction = ``label``), ``examples``, ``position_share`` (mean |sum position| / (|sum token| + |sum
        position|) under PA-LRP), ``identity_residual_pa_lrp`` / ``_lrp`` (the largest relative residual of
        the ledger), the mean ``token_fraction`` / ``position_fraction`` / ``input_fraction`` /
        ``absorbed_fraction`` of each (suffix ``_pa_lrp`` / ``_lrp``), and ``example``: the relevances of the
        first example of the longest length (token and positional terms of PA-LRP, plain LRP, gradient x input).
    """
    if not examples:
        raise ValueError("examples must not be empty")
    grid = torch.tensor(list(fractions), dtype=torch.float64)
    if grid.dim() != 1 or len(grid) < 2 or grid[0] != 0 or grid[-1] != 1 or not bool((grid.diff() > 0).all()):
        raise ValueError(f"fractions must increase from 0 to 1, got {list(fractions)}")
    groups: dict[int, list[Mapping[str, Any]]] = {}
    for example in examples:
        groups.setdefault(len(example["ids"]), []).append(example)
    sums = {m: {"morf": 0.0, "lerf": 0.0, "top1_hit": 0.0} for m in METHODS}
    curves = {m: {o: torch.zeros(len(grid), dtype=torch.float64) for o in ("morf", "lerf")} for m in METHODS}
    correct, count, position_share = 0, 0, 0.0
    conservation: dict[str, float] = {}
    residual = {"pa_lrp": 0.0, "lrp": 0.0}
    generator = torch.Generator().manual_seed(seed)
    shown = None
    for length, group in sorted(groups.items()):
        tokens = torch.tensor([g["ids"] for g in group])
        index = torch.full((len(group),), length - 1)
        with torch.no_grad():
            predicted = model(tokens)[:, -1].argmax(-1)
        correct += int((predicted == torch.tensor([g["label"] for g in group])).sum())
        count += len(group)
        aware = explain(model, tokens, predicted, index=index)
        plain = explain(model, tokens, predicted, index=index, position_aware=False)
        scores = {"pa_lrp": aware.scores("pa_lrp"), "pa_lrp_token": aware.token, "lrp": plain.token,
                  "grad_x_input": gradient_x_input(model, tokens, predicted, index=index),
                  "rollout": rollout(plain.attention, index),
                  "random": torch.rand(tokens.shape, generator=generator, dtype=torch.float64)}
        removable = torch.zeros(tokens.shape, dtype=torch.bool)
        for row, g in enumerate(group):
            removable[row, g["removable"]] = True
        for label, attribution in (("pa_lrp", aware), ("lrp", plain)):
            parts = attribution.conservation()
            residual[label] = max(residual[label], float(parts.pop("identity_residual").max()))
            for part, value in parts.items():
                conservation[f"{part}_{label}"] = conservation.get(f"{part}_{label}", 0.0) + float(value.double().sum())
        token, position = aware.token.sum(-1).double().abs(), aware.position.sum(-1).double().abs()
        position_share += float((position / (token + position + 1e-12)).sum())
        for method, score in scores.items():
            for order in ("morf", "lerf"):
                curve = perturbation_curve(model, tokens, score, target=predicted, index=index, removable=removable,
                                           replacement=group[0]["replacement"], fractions=grid, order=order).double()
                sums[method][order] += float(area_under_curve(curve, grid).sum())
                curves[method][order] += curve.sum(1)
            top = score.double().masked_fill(~removable, float("-inf")).argmax(-1)
            sums[method]["top1_hit"] += sum(int(top[r]) in g["truth"] for r, g in enumerate(group))
        if shown is None or length > len(shown["ids"]):
            shown = {"ids": group[0]["ids"], "token": aware.token[0].tolist(),
                     "position_terms": {k: v[0].tolist() for k, v in aware.position_terms.items()},
                     "plain": plain.token[0].tolist(), "grad_x_input": scores["grad_x_input"][0].tolist(),
                     "removable": group[0]["removable"]}
    per_method = {m: {"auc_morf": sums[m]["morf"] / count, "auc_lerf": sums[m]["lerf"] / count,
                      "top1_hit": sums[m]["top1_hit"] / count, "curve_morf": (curves[m]["morf"] / count).tolist(),
                      "curve_lerf": (curves[m]["lerf"] / count).tolist()} for m in METHODS}
    summary = {"accuracy": correct / count, "examples": count, "position_share": position_share / count,
               "identity_residual_pa_lrp": residual["pa_lrp"], "identity_residual_lrp": residual["lrp"],
               **{name: value / count for name, value in conservation.items()}, "example": shown}
    return per_method, summary
