"""The "Which positional encoding should I use?" page, built from the benchmarks' results, never typed by hand.

Two steps, so that the page can be checked against exactly what it was built from:

1. :func:`collect` reads ``<root>/<benchmark>/results.json`` of every run but quick ones (pipeline checks, not
   evidence) into an *evidence* document: per benchmark and preset the command, date, seeds, the methods
   measured, what was tuned (per method the values tried, the choice, a cap hit) or fixed, and every claim row
   (both sides' means, intervals and n, the test, the computed verdict; none of a search preset such as
   ``lr_search``, whose one seed is there to choose what a full preset fixes). It updates the committed evidence:
   a benchmark keeps its latest run, so a benchmark rerun in one sitting replaces only its own entry (run
   folders do not outlive a machine; the evidence file does).
2. :func:`render` turns the evidence into the markdown page, per job a user has (train short / run long, extend
   a pretrained RoPE model, graphs, vision, ...): what was measured, the verdicts with their evidence, and what
   this machine could not test.

    python docs/scripts/guide.py --results results/            # update evidence + page from results
    python docs/scripts/guide.py --results results/ --fresh    # evidence from these results only
    python docs/scripts/guide.py --check                       # the page matches its evidence file

The evidence file (``docs/guide_evidence.json``) is committed beside the page; a test rebuilds the page from it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pe_toolkit.atomic import atomic_write_text
from pe_toolkit.bench.registry import BENCHMARKS
from pe_toolkit.bench.verdict import VERDICTS, format_side

__all__ = ["JOBS", "collect", "main", "render", "unextended_edges"]

JOBS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Train on short sequences, run on longer ones",
     "Which encoder generalizes to lengths it never saw (copy, SCAN, counting; Kazemnejad et al. 2023)?",
     ("length_generalization",)),
    ("Extend a pretrained model's context",
     "Which RoPE scaling, NoPE temperature or relative bias keeps perplexity and passkey retrieval past the "
     "training length?", ("extrapolation",)),
    ("Shrink the KV cache of a RoPE model (MLA)",
     "Which partial-RoPE strategy keeps the loss when converting MHA to MLA (Ji et al. 2025)?", ("mha2mla",)),
    ("Train stably at high learning rates",
     "Do QK-norm, the Q/K learning-rate rule or QK-clip keep attention logits bounded?", ("attention_stability",)),
    ("Explain a model's predictions", "Is PE-aware LRP more faithful than plain LRP (Bakish et al. 2025)?",
     ("explain",)),
    ("Graphs", "Which graph PE (LapPE, RWSE, ...) with which model separates CSL / learns PATTERN and CLUSTER?",
     ("graphs",)),
    ("Images at new resolutions", "Which 2-D encoding keeps ViT accuracy at test resolutions it was not trained on?",
     ("vision",)),
    ("Sequential recommendation", "Does CAPE beat the other encodings (and no PE) in SASRec?", ("recsys",)),
    ("Symbolic music", "Do structure-informed PEs beat plain ones on Bach chorales (Agarwal et al. 2024)?",
     ("music",)),
    ("Object detection", "Do RecursiveDet's shared stages with box / centerness PEs beat independent stages?",
     ("detection",)),
    ("Multi-robot pose", "Does NOPE with an object PE beat tuned RANSAC + Procrustes (Huang et al. 2025)?",
     ("multirobot",)),
    ("Audio-video generation", "Does CMC-PE align jointly generated audio and video better than cross-attention?",
     ("crossmodal",)),
    ("Translation", "Do cross-lingual positions (XL-PE) beat plain PEs on a reordering language pair?",
     ("translation",)),
    ("Speed, memory and extreme inputs", "What does each encoder cost per layer, and does it stay finite far out?",
     ("speed", "extreme_inputs")),
)
"""``(job, the question it answers, benchmarks)``, in the page's order; every registered benchmark is in one."""

NOT_EVIDENCE = ("quick",)  # pipeline checks
SEARCH_PRESETS = ("lr_search",)  # a search whose choices a full preset fixes: its tuning is evidence, its one-seed
# claims are not (the full preset's are)
SIDE_KEYS = ("mean", "low", "high", "n", "n_nonfinite")


def _number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def _claim(row: Mapping[str, Any], where: str) -> dict[str, Any]:
    missing = [k for k in ("name", "verdict", "reason", "test", "a", "b", "difference") if k not in row]
    if missing:
        raise ValueError(f"{where}: claim row {row.get('name')!r} lacks {missing}")
    if row["verdict"] not in VERDICTS:
        raise ValueError(f"{where}: claim {row['name']!r} has verdict {row['verdict']!r}, not one of {VERDICTS}")
    sides = {}
    for side in ("a", "b"):
        if not isinstance(row[side], Mapping) or "n" not in row[side]:
            raise ValueError(f"{where}: claim {row['name']!r} side {side!r} lacks its n")
        sides[side] = {k: _number(row[side].get(k)) for k in SIDE_KEYS}
    difference = {k: _number(row["difference"].get(k)) for k in ("mean", "low", "high")}
    return {"name": row["name"], "verdict": row["verdict"], "reason": row["reason"], "test": row["test"],
            "claim_kind": row.get("claim_kind", "difference"), "margin": _number(row.get("margin")),
            "paired": bool(row.get("paired", False)), **sides, "difference": difference,
            "min_detectable_effect": _number(row.get("min_detectable_effect")), "caveat": row.get("caveat")}


METHOD_FIELDS = ("encoding", "encoder")  # a key field of these names is what a benchmark compares


def _methods(name: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What was compared: the distinct values over the run rows of the benchmark's key field named in
    :data:`METHOD_FIELDS` (music's and recsys's runs are keyed by task or dataset first), else its first."""
    from pe_toolkit.bench.registry import get_benchmark

    try:
        fields = get_benchmark(name).key_fields
    except (ImportError, ValueError):  # a benchmark whose domain is not installed here
        return []
    field = next((f for f in fields if f in METHOD_FIELDS), fields[0])
    runs = [r for r in rows if r.get("kind") in (None, "run") and field in r]
    return sorted({str(r[field]) for r in runs})


def _tuning(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """What the runner tuned (``None``: nothing): the parameter, per method the values tried and the choice."""
    tuned, record = config.get("tuned"), config.get("tuning") or {}
    if not record:
        return None
    keys = ("tried", "chosen", "extensions", "max_extensions", "cap_hit", "edge")
    return {"param": (tuned or {}).get("param"), "group": (tuned or {}).get("group"),
            "metric": (tuned or {}).get("metric"),
            "groups": {str(group): {k: entry.get(k) for k in keys} for group, entry in record.items()}}


def collect(roots: Iterable[str | Path], previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The evidence of every non-quick ``results.json`` under ``roots`` (``<root>/<benchmark>/results.json``).

    ``previous``: an evidence document to update (its benchmarks stay unless a root holds a run at least as
    recent). A benchmark found several times keeps its latest run (by date). Raises ``ValueError`` naming the
    file when a results file is not valid JSON or a claim row lacks what a verdict needs.
    """
    found: dict[str, dict[str, Any]] = dict((previous or {}).get("benchmarks", {}))
    for root in map(Path, roots):
        if not root.is_dir():
            raise ValueError(f"results root {str(root)!r} is not a folder")
        for path in sorted(root.glob("*/results.json")):
            try:
                document = json.loads(path.read_text())
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise ValueError(f"{path}: not a valid results.json ({error})") from error
            name, config = document.get("benchmark"), document.get("config", {})
            preset = config.get("preset")
            if name not in BENCHMARKS or preset in NOT_EVIDENCE:
                continue
            rows = document.get("rows", [])
            entry = {"benchmark": name, "preset": preset,
                     "command": config.get("command") or f"pe-toolkit bench {name} --preset {preset}",
                     "date": document.get("environment", {}).get("date"), "seconds": document.get("seconds"),
                     "device": config.get("device"), "jobs": config.get("jobs"), "threads": config.get("threads"),
                     "cpu_count": document.get("environment", {}).get("cpu_count"),
                     "gpu": document.get("environment", {}).get("gpu"), "seeds": config.get("seeds"),
                     "methods": _methods(name, rows), "tuning": _tuning(config), "fixed": config.get("fixed"),
                     "run_seconds": _run_seconds(rows),
                     "claims": [] if preset in SEARCH_PRESETS else
                     [_claim(r, str(path)) for r in rows if r.get("kind") == "claim"]}
            key = evidence_key(name, preset)
            if key not in found or (entry["date"] or "") >= (found[key]["date"] or ""):
                found[key] = entry
    return {"benchmarks": {key: found[key] for key in sorted(found)}}


AGGREGATE_KINDS = frozenset({"summary", "claim", "claim_summary", "config_summary", "method_summary", "speedup"})
"""Row kinds computed from the runs (their ``seconds``, if any, are means, not a run's cost)."""


def _run_seconds(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """The seconds of every run and tuning trial, summed (a resumed run's last pass reuses stored runs, so its
    wall time says nothing of what the evidence cost); ``None`` when the runs do not record them. A run is any
    row not of an aggregate kind; its cost is ``run_seconds`` where it records one (training and evaluation,
    e.g. extrapolation's), else ``seconds``."""
    runs = {}
    for r in rows:
        if r.get("kind") in AGGREGATE_KINDS:
            continue
        cost = r.get("run_seconds", r.get("seconds"))
        key = json.dumps({k: v for k, v in r.items() if k != "kind"}, sort_keys=True, default=str)
        runs[key] = cost  # a chosen trial is also a run: counted once
    numbers = [float(v) for v in runs.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(numbers) if numbers else None


def evidence_key(name: str, preset: str) -> str:
    """An evidence entry per benchmark and preset: ``name`` for the full CPU preset, ``name@preset`` otherwise
    (a `gpu` run, or length_generalization's `families`, must not replace the full run's evidence)."""
    return name if preset == "full" else f"{name}@{preset}"


def _entries(benchmarks: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """The evidence entries of benchmark ``name``: the full preset's first, then the others by preset name."""
    mine = [entry for entry in benchmarks.values() if entry["benchmark"] == name]
    return sorted(mine, key=lambda entry: (entry["preset"] != "full", entry["preset"]))


def _side(side: Mapping[str, Any]) -> str:
    filled = {k: (math.nan if side.get(k) is None else side[k]) for k in ("mean", "low", "high")}
    return format_side({**side, **filled}, ".4g")


def _difference(claim: Mapping[str, Any]) -> str:
    d = claim["difference"]
    if d.get("mean") is None:
        return "-"
    interval = f" [{d['low']:+.4g}, {d['high']:+.4g}]" if d.get("low") is not None else ""
    return f"{d['mean']:+.4g}{interval}"


def _counts(claims: Sequence[Mapping[str, Any]]) -> str:
    return " / ".join(str(sum(c["verdict"] == v for c in claims)) for v in VERDICTS)


def _summary_cell(entry: Mapping[str, Any]) -> str:
    """The summary table's verdict cell: the counts, or why an entry has none (a search, a benchmark that measures)."""
    if entry["preset"] in SEARCH_PRESETS:
        return "a search: no verdicts"
    return _counts(entry["claims"]) if entry["claims"] else "no claims: measures"


def _evidence_line(entry: Mapping[str, Any]) -> str:
    if entry.get("run_seconds") is not None:
        minutes = f"{entry['run_seconds'] / 60:.0f} min of runs, summed"
    else:
        minutes = f"{entry['seconds'] / 60:.0f} min" if entry.get("seconds") is not None else "time not recorded"
    where = entry.get("gpu") or f"{entry.get('cpu_count')} CPU cores"
    seeds = entry.get("seeds")
    return (f"Evidence: the `{entry['preset']}` preset, `{entry['command']}`, run {entry.get('date')} on {where} "
            f"({minutes}, {entry.get('jobs')} job(s) x {entry.get('threads')} thread(s)"
            + (f", seeds {seeds}" if seeds else "") + ").")


def unextended_edges(entry: Mapping[str, Any]) -> list[str]:
    """The methods of an evidence entry tuned to a grid edge without extending the grid to its cap (issue 39's
    rule: an edge choice stands only once the grid has grown past it as far as the stated cap allows)."""
    groups = ((entry.get("tuning") or {}).get("groups")) or {}
    return [name for name, g in groups.items()
            if g.get("cap_hit") and not (len(g["tried"]) > 1 and g["extensions"] == g["max_extensions"] > 0)]


def _tuning_line(entry: Mapping[str, Any]) -> str:
    if "tuning" not in entry:
        return "Tuning: not recorded in this evidence (built before tuning was collected)."
    tuning, fixed = entry["tuning"], entry.get("fixed")
    if tuning is None and fixed:
        values = "; ".join(f"{name} {value:g}" for name, value in fixed["values"].items())
        return (f"Tuning: `{fixed['param']}` per `{fixed['group']}` fixed by the preset, not tuned in this run "
                f"(an earlier search's choices): {values}.")
    if tuning is None:
        return "Tuning: none (one setting per method)."
    param, group = tuning.get("param") or "the tuned value", tuning.get("group") or "method"
    parts, capped = [], []
    for name, g in tuning["groups"].items():
        extended = f", {g['extensions']} extension(s)" if g.get("extensions") else ""
        parts.append(f"{name} {g['chosen']:g} (of {len(g['tried'])}{extended})")
        if g.get("cap_hit"):
            capped.append(f"{name} ({g.get('edge')} edge)")
    metric = f" by `{tuning['metric']}`" if tuning.get("metric") else ""
    flag = (f" **At a capped grid edge: {', '.join(capped)}** (their optimum may lie beyond)." if capped
            else " Every choice is interior to what was tried.")
    return f"Tuning: `{param}` per `{group}`{metric}: " + "; ".join(parts) + "." + flag


def _section(job: str, question: str, names: Sequence[str], evidence: Mapping[str, Any]) -> list[str]:
    lines = [f"## {job}", "", question, ""]
    for name in names:
        entries = _entries(evidence, name)
        if not entries:
            lines += [f"### `{name}`", "",
                      f"Not measured at full scale on this machine yet: run `pe-toolkit bench {name} --preset full "
                      "--jobs 2 --resume` (or the `gpu` preset on a GPU), then rebuild this page.", ""]
            continue
        for entry in entries:
            lines += _entry_lines(name, entry)
        if not any(entry["preset"] == "gpu" for entry in entries):
            lines += ["The `gpu` preset (bigger models, more data) has not been run here.", ""]
    return lines


def _entry_lines(name: str, entry: Mapping[str, Any]) -> list[str]:
    lines = [f"### `{name}`" + ("" if entry["preset"] == "full" else f", `{entry['preset']}` preset"), ""]
    lines += [_evidence_line(entry), "", _tuning_line(entry), ""]
    if entry["methods"]:
        lines += ["Measured: " + ", ".join(f"`{m}`" for m in entry["methods"]) + ".", ""]
    claims = entry["claims"]
    if entry["preset"] in SEARCH_PRESETS:
        return lines + [f"A search (seeds {entry.get('seeds')}): its choices are what the full preset fixes; its "
                        "one-seed claims are not verdicts (the full preset's are).", ""]
    if not claims:
        return lines + ["This benchmark states no claim with a verdict (it measures; read its report).", ""]
    lines += [f"Verdicts (reproduced / contradicted / inconclusive / untested): {_counts(claims)}.", "",
              "| claim | verdict | a (favoured) | b (baseline) | a - b, paper's direction [95 %] | test |",
              "| --- | --- | --- | --- | --- | --- |"]
    for c in claims:
        named = c.get("margin") is None or "margin" in c["test"]  # decide_claim's test names its margin
        margin = "" if named else f", margin {c['margin']:g}"
        lines.append(f"| {c['name']} | **{c['verdict']}** | {_side(c['a'])} | {_side(c['b'])} | "
                     f"{_difference(c)} | {c['test']}{margin} |")
    untested = [c for c in claims if c["verdict"] == "untested"]
    if untested:
        lines += ["", "Not testable here:", ""]
        lines += [f"- {c['name']}: {c['reason']}" for c in untested]
    caveats: dict[str, list[str]] = {}
    for c in claims:
        if c.get("caveat"):
            caveats.setdefault(c["caveat"], []).append(c["name"])
    if caveats:
        lines += ["", "How the protocol departs from the paper's (read the verdicts with it):", ""]
        lines += [f"- {text} ({len(names)} claim(s): {', '.join(names)})" for text, names in caveats.items()]
    lines.append("")
    return lines


def render(evidence: Mapping[str, Any]) -> str:
    """The markdown page of ``evidence`` (from :func:`collect`)."""
    benchmarks = evidence.get("benchmarks", {})
    named = {entry.get("benchmark", key) for key, entry in benchmarks.items()}
    unknown = sorted(named - {n for _, _, names in JOBS for n in names})
    if unknown:
        raise ValueError(f"evidence names benchmarks {unknown} that no job of JOBS covers")
    lines = ["# Which positional encoding should I use?", "",
             "<!-- generated by `python docs/scripts/guide.py` from docs/guide_evidence.json: do not edit -->", "",
             "Per job, what the benchmarks measured on this project's machine and what their verdicts are. Only full "
             "and `gpu` preset runs count (a quick run is a pipeline check). Every verdict is computed by "
             "`pe_toolkit.bench.verdict.decide_claim`: *reproduced* (the paper's effect is detected in its "
             "direction), *contradicted* (the opposite is detected), *inconclusive* (neither, at this number of "
             "seeds: no evidence either way), *untested* (a precondition failed; the reason is given). A claim of "
             "no difference needs the whole interval of the difference inside its stated margin.", "",
             "| job | benchmark | evidence | reproduced / contradicted / inconclusive / untested |",
             "| --- | --- | --- | --- |"]
    for job, _, names in JOBS:
        for name in names:
            entries = _entries(benchmarks, name)
            if not entries:
                lines.append(f"| {job} | `{name}` | not measured yet | - |")
            for entry in entries:
                date = (entry.get("date") or "")[:10]
                lines.append(f"| {job} | `{name}` | `{entry['preset']}`, {date} | {_summary_cell(entry)} |")
    lines.append("")
    for job, question, names in JOBS:
        lines += _section(job, question, names, benchmarks)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python docs/scripts/guide.py", description=__doc__.split("\n")[0])
    parser.add_argument("--results", action="append", default=[], metavar="DIR",
                        help="a results root (repeatable); updates the evidence file from its results.json files")
    parser.add_argument("--fresh", action="store_true",
                        help="with --results: build the evidence from these results only (default: update the file)")
    parser.add_argument("--evidence", default="docs/guide_evidence.json", help="the evidence file")
    parser.add_argument("--page", default="docs/guide.md", help="the page")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from its evidence's render")
    args = parser.parse_args(argv)
    evidence_path, page_path = Path(args.evidence), Path(args.page)
    if args.fresh and not args.results:
        parser.error("--fresh needs --results DIR")
    if args.results:
        previous = None if args.fresh or not evidence_path.is_file() else json.loads(evidence_path.read_text())
        text = json.dumps(collect(args.results, previous), indent=1, sort_keys=True) + "\n"
        atomic_write_text(evidence_path, text)
        evidence = json.loads(text)  # the page is the file rendered (sorted keys order the methods)
    else:
        if not evidence_path.is_file():
            parser.error(f"--evidence {str(evidence_path)!r} is not a file (build it with --results DIR)")
        evidence = json.loads(evidence_path.read_text())
    page = render(evidence)
    if args.check:
        same = page_path.is_file() and page_path.read_text() == page
        print(f"{page_path}: {'matches' if same else 'differs from'} {evidence_path}")
        return 0 if same else 1
    atomic_write_text(page_path, page)
    print(f"wrote {page_path} from {len(evidence['benchmarks'])} benchmark(s) of evidence ({evidence_path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
