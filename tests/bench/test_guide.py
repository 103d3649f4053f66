"""The "Which positional encoding should I use?" page: built from results, checked against its evidence."""

import importlib.util
import json
from pathlib import Path

import pytest

from pe_toolkit.bench.registry import BENCHMARKS
from pe_toolkit.bench.report import write_results
from pe_toolkit.bench.verdict import VERDICTS, claim_row, decide_claim, untested_claim

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("guide", ROOT / "docs" / "scripts" / "guide.py")
guide = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guide)


def _results(root, preset, *, tuning=None):
    claims = [claim_row(decide_claim([0.91, 0.93, 0.92], [0.85, 0.86, 0.88], higher_is_better=True,
                                     bounds=(0, 1), name="recursive beats independent"),
                        caveat="a procedural task, not the paper's benchmark"),
              claim_row(untested_claim("box PE helps", "independent is not learned"))]
    rows = [{"variant": v, "seed": s, "map": 0.5, "kind": "run", "seconds": 30.0}
            for v in ("independent", "recursive") for s in (0, 1)]
    config = {"preset": preset, "seeds": [0, 1], "command": f"pe-toolkit bench detection --preset {preset}",
              "jobs": 2, "threads": 1, "device": {"accelerator": "cpu"}, **(tuning or {})}
    chosen = {**rows[0], "kind": "tuning_trial"}  # the chosen trial is also the run: counted once
    other = {**rows[0], "map": 0.4, "seconds": 60.0, "kind": "tuning_trial"}  # a trial at another value
    write_results("detection", config, rows + [chosen, other] + claims, 61.0, root=root)
    return root / "detection" / "results.json"


def test_collect_keeps_full_runs_with_their_claims_and_skips_quick_ones(tmp_path):
    _results(tmp_path / "full", "full")
    _results(tmp_path / "quick", "quick")
    evidence = guide.collect([tmp_path / "full", tmp_path / "quick"])
    entry = evidence["benchmarks"]["detection"]
    assert list(evidence["benchmarks"]) == ["detection"] and entry["preset"] == "full"
    assert entry["methods"] == ["independent", "recursive"] and entry["seeds"] == [0, 1]
    assert entry["command"] == "pe-toolkit bench detection --preset full"
    reproduced, untested = entry["claims"]
    assert reproduced["verdict"] == "reproduced" and reproduced["a"]["n"] == 3
    assert reproduced["test"].startswith("Welch t")
    assert reproduced["difference"]["low"] > 0
    assert untested["verdict"] == "untested" and untested["a"]["mean"] is None  # NaN stored as null
    assert guide.collect([tmp_path / "quick"]) == {"benchmarks": {}}


def test_the_methods_are_the_encodings_where_runs_are_keyed_by_one(tmp_path):
    """music keys its runs by (task, encoding, seed): the page lists the encodings, not the tasks."""
    rows = [{"task": t, "encoding": e, "seed": 0, "kind": "run"} for t in ("next_step", "accompaniment")
            for e in ("s_ape", "nope")]
    write_results("music", {"preset": "full", "seeds": [0]}, rows, 1.0, root=tmp_path)
    assert guide.collect([tmp_path])["benchmarks"]["music"]["methods"] == ["nope", "s_ape"]


def test_collect_names_a_damaged_file_and_a_bad_verdict(tmp_path):
    path = _results(tmp_path, "full")
    document = json.loads(path.read_text())
    document["rows"][-1]["verdict"] = "not reproduced"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=r"results\.json: claim 'box PE helps' has verdict 'not reproduced'"):
        guide.collect([tmp_path])
    path.write_text('{"benchmark": "detect')
    with pytest.raises(ValueError, match=f"{path}: not a valid results.json"):
        guide.collect([tmp_path])
    with pytest.raises(ValueError, match="is not a folder"):
        guide.collect([tmp_path / "missing"])


def test_render_gives_every_job_its_verdicts_evidence_and_what_was_not_tested(tmp_path):
    _results(tmp_path, "full")
    page = guide.render(guide.collect([tmp_path]))
    assert "| Object detection | `detection` | `full`, " in page and "| 1 / 0 / 0 / 1 |" in page
    assert "Evidence: the `full` preset, `pe-toolkit bench detection --preset full`, run 20" in page
    # the runs' and trials' own seconds (4 x 30 + 60), not the last pass's wall; 4 min if the chosen trial counted twice
    assert "(3 min of runs, summed, 2 job(s) x 1 thread(s)" in page
    assert "| recursive beats independent | **reproduced** | 0.92 [" in page
    assert "- box PE helps: independent is not learned" in page
    assert ("How the protocol departs from the paper's (read the verdicts with it):\n\n- a procedural task, not the "
            "paper's benchmark (1 claim(s): recursive beats independent)") in page
    assert "The `gpu` preset (bigger models, more data) has not been run here." in page
    assert "| Graphs | `graphs` | not measured yet | - |" in page
    assert "not reproduced" not in page
    with pytest.raises(ValueError, match=r"no job of JOBS covers"):
        guide.render({"benchmarks": {"mine": {}}})


TUNED = {"tuned": {"param": "lr", "group": "variant", "metric": "val_loss"},
         "tuning": {"independent": {"grid": [1e-3, 2e-3], "tried": [5e-4, 1e-3, 2e-3], "scores": [0.3, 0.2, 0.4],
                                    "chosen": 1e-3, "extensions": 1, "max_extensions": 2, "cap_hit": False,
                                    "edge": None},
                    "recursive": {"grid": [1e-3, 2e-3], "tried": [1e-3, 2e-3, 4e-3, 8e-3],
                                  "scores": [0.4, 0.3, 0.2, 0.1], "chosen": 8e-3, "extensions": 2, "max_extensions": 2,
                                  "cap_hit": True, "edge": "high"}}}


def test_the_page_states_each_methods_tuning_and_flags_a_capped_edge(tmp_path):
    _results(tmp_path, "full", tuning=TUNED)
    entry = guide.collect([tmp_path])["benchmarks"]["detection"]
    assert entry["tuning"]["param"] == "lr" and entry["tuning"]["groups"]["recursive"]["cap_hit"] is True
    assert entry["tuning"]["groups"]["independent"]["tried"] == [5e-4, 1e-3, 2e-3]
    page = guide.render({"benchmarks": {"detection": entry}})
    assert ("Tuning: `lr` per `variant` by `val_loss`: independent 0.001 (of 3, 1 extension(s)); recursive 0.008 "
            "(of 4, 2 extension(s)). **At a capped grid edge: recursive (high edge)**") in page
    interior = {**TUNED, "tuning": {"independent": TUNED["tuning"]["independent"]}}
    _results(tmp_path, "full", tuning=interior)
    page = guide.render(guide.collect([tmp_path]))
    assert "Every choice is interior to what was tried." in page and "capped" not in page
    _results(tmp_path, "full")  # a benchmark that tunes nothing
    assert "Tuning: none (one setting per method)." in guide.render(guide.collect([tmp_path]))
    legacy = {k: v for k, v in entry.items() if k != "tuning"}  # evidence built before tuning was collected
    assert "Tuning: not recorded in this evidence" in guide.render({"benchmarks": {"detection": legacy}})


def test_a_margin_is_stated_once_in_the_test_column(tmp_path):
    _results(tmp_path, "full")
    claim = claim_row(decide_claim([1.0, 1.01, 0.99], [1.0, 1.0, 1.0], kind="noninferiority", margin=0.05,
                                   paired=True, higher_is_better=False, name="does not rise"))
    assert "margin 0.05" in claim["test"]
    entry = guide.collect([tmp_path])["benchmarks"]["detection"]
    entry["claims"] = [guide._claim(claim, "test")]
    page = guide.render({"benchmarks": {"detection": entry}})
    row = next(line for line in page.splitlines() if line.startswith("| does not rise |"))
    assert row.count("margin 0.05") == 1


def test_run_seconds_count_every_run_once_at_its_whole_cost_and_no_aggregate():
    trial = {"kind": "tuning_trial", "base": "rope", "lr": 3e-3, "seconds": 60.0, "run_seconds": 90.0}
    rows = [trial, {**trial, "kind": "training"},  # the chosen trial is the seed-0 run: once, with its evaluation
            {"kind": "training", "base": "rope", "lr": 3e-3, "seed": 1, "seconds": 50.0, "run_seconds": 80.0},
            {"kind": "memory", "length": 32768, "seconds": 20.0},  # a run of another kind
            {"kind": "summary", "base": "rope", "seconds": 55.0},  # a mean over runs
            {"kind": "claim", "name": "x"}]
    assert guide._run_seconds(rows) == 90.0 + 80.0 + 20.0
    assert guide._run_seconds([{"kind": "summary", "seconds": 5.0}, {"kind": "run"}]) is None


def test_a_search_presets_tuning_is_evidence_and_its_one_seed_claims_are_not(tmp_path):
    _results(tmp_path, "lr_search", tuning=TUNED)
    entry = guide.collect([tmp_path])["benchmarks"]["detection@lr_search"]
    assert entry["claims"] == [] and entry["tuning"]["groups"]["recursive"]["chosen"] == 8e-3
    page = guide.render({"benchmarks": {"detection@lr_search": entry}})
    assert "### `detection`, `lr_search` preset" in page and "recursive 0.008 (of 4, 2 extension(s))" in page
    assert "A search (seeds [0, 1]): its choices are what the full preset fixes; its one-seed claims are not verdicts" \
        in page
    assert "Verdicts (reproduced" not in page and "recursive beats independent" not in page
    assert "| `lr_search`, " in page and "| a search: no verdicts |" in page and "| 0 / 0 / 0 / 0 |" not in page


def test_a_benchmark_without_claims_is_summarised_as_measuring_not_as_zero_verdicts(tmp_path):
    _results(tmp_path, "full")
    entry = {**guide.collect([tmp_path])["benchmarks"]["detection"], "claims": []}
    page = guide.render({"benchmarks": {"detection": entry}})
    assert "| no claims: measures |" in page and "| 0 / 0 / 0 / 0 |" not in page
    assert "This benchmark states no claim with a verdict" in page


def test_values_a_preset_fixes_are_stated_as_fixed_not_as_untuned(tmp_path):
    fixed = {"fixed": {"param": "lr", "group": "variant", "values": {"independent": 1e-3, "recursive": 4e-3}}}
    _results(tmp_path, "full", tuning=fixed)
    entry = guide.collect([tmp_path])["benchmarks"]["detection"]
    assert entry["fixed"] == fixed["fixed"] and entry["tuning"] is None
    assert ("Tuning: `lr` per `variant` fixed by the preset, not tuned in this run (an earlier search's choices): "
            "independent 0.001; recursive 0.004.") in guide.render({"benchmarks": {"detection": entry}})


def test_results_update_the_evidence_file_and_keep_the_other_benchmarks(tmp_path):
    evidence, page = tmp_path / "evidence.json", tmp_path / "guide.md"
    options = ["--evidence", str(evidence), "--page", str(page)]
    older = {"benchmark": "graphs", "preset": "full", "command": "pe-toolkit bench graphs --preset full",
             "date": "2026-01-01T00:00:00+00:00", "seconds": 60.0, "methods": [], "claims": [], "tuning": None}
    stale_detection = {**older, "benchmark": "detection", "command": "old detection run"}
    evidence.write_text(json.dumps({"benchmarks": {"graphs": older, "detection": stale_detection}}))
    _results(tmp_path / "results", "full")
    assert guide.main(["--results", str(tmp_path / "results"), *options]) == 0
    updated = json.loads(evidence.read_text())["benchmarks"]
    assert updated["graphs"] == older  # not rerun: kept
    assert updated["detection"]["command"] == "pe-toolkit bench detection --preset full"  # rerun: replaced
    assert "| Graphs | `graphs` | `full`, 2026-01-01 |" in page.read_text()
    assert "run 2026-01-01T00:00:00+00:00 on None CPU cores (1 min," in page.read_text()  # no run_seconds: the wall
    assert guide.main(["--results", str(tmp_path / "results"), "--fresh", *options]) == 0
    assert list(json.loads(evidence.read_text())["benchmarks"]) == ["detection"]
    newer = {**stale_detection, "date": "2999-01-01T00:00:00+00:00"}  # a later run than the results: kept
    kept = guide.collect([tmp_path / "results"], {"benchmarks": {"detection": newer}})
    assert kept["benchmarks"]["detection"] == newer
    with pytest.raises(SystemExit):
        guide.main(["--fresh", *options])


def test_a_gpu_or_families_run_sits_beside_the_full_run_and_does_not_replace_it(tmp_path):
    _results(tmp_path / "full", "full")
    _results(tmp_path / "gpu", "gpu")
    _results(tmp_path / "families", "families")
    evidence = guide.collect([tmp_path / "gpu", tmp_path / "full", tmp_path / "families"])
    assert list(evidence["benchmarks"]) == ["detection", "detection@families", "detection@gpu"]
    page = guide.render(evidence)
    summary = [line for line in page.splitlines() if line.startswith("| Object detection |")]
    assert [line.split("|")[3].strip().split(",")[0] for line in summary] == ["`full`", "`families`", "`gpu`"]
    assert page.index("### `detection`\n") < page.index("### `detection`, `families` preset") \
        < page.index("### `detection`, `gpu` preset")
    assert "The `gpu` preset (bigger models, more data) has not been run here." not in page
    assert guide.evidence_key("graphs", "full") == "graphs" and guide.evidence_key("graphs", "gpu") == "graphs@gpu"


def test_every_registered_benchmark_has_a_job():
    covered = [name for _, _, names in guide.JOBS for name in names]
    assert sorted(covered) == sorted(BENCHMARKS)


def test_main_builds_the_page_and_check_detects_a_hand_edit(tmp_path, capsys):
    _results(tmp_path / "results", "full")
    evidence, page = tmp_path / "evidence.json", tmp_path / "guide.md"
    options = ["--evidence", str(evidence), "--page", str(page)]
    assert guide.main(["--results", str(tmp_path / "results"), *options]) == 0
    assert guide.main([*options, "--check"]) == 0
    page.write_text(page.read_text().replace("reproduced", "confirmed"))
    assert guide.main([*options, "--check"]) == 1
    assert "differs from" in capsys.readouterr().out


def test_the_committed_page_is_its_committed_evidence_rendered():
    evidence = json.loads((ROOT / "docs" / "guide_evidence.json").read_text())
    for entry in evidence["benchmarks"].values():
        assert entry["preset"] != "quick" and entry["command"] and entry["date"]
        for claim in entry["claims"]:
            assert claim["verdict"] in VERDICTS and claim["test"] and claim["reason"]
            assert claim["a"]["n"] is not None and claim["b"]["n"] is not None
    assert (ROOT / "docs" / "guide.md").read_text() == guide.render(evidence)


def test_no_committed_evidence_was_tuned_to_an_unextended_grid_edge():
    """Issue 39: a choice at a grid edge is allowed only after the grid extended to its cap (and is flagged)."""
    evidence = json.loads((ROOT / "docs" / "guide_evidence.json").read_text())
    assert {name: guide.unextended_edges(entry) for name, entry in evidence["benchmarks"].items()
            if guide.unextended_edges(entry)} == {}


def test_an_edge_choice_stands_only_after_the_grid_extended_to_its_cap():
    capped = TUNED["tuning"]["recursive"]  # at the high edge after 2 of 2 extensions: allowed (and flagged)
    entry = {"tuning": {"groups": {"capped": capped, "interior": TUNED["tuning"]["independent"],
                                   "unextended": {**capped, "tried": [1e-3, 2e-3], "extensions": 0,
                                                  "max_extensions": 0},
                                   "short": {**capped, "extensions": 1},
                                   "single": {**capped, "tried": [1e-3], "extensions": 0, "max_extensions": 0}}}}
    assert guide.unextended_edges(entry) == ["unextended", "short", "single"]
    assert guide.unextended_edges({"tuning": None}) == guide.unextended_edges({}) == []
