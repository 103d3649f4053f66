"""The harness's output files: results.json, report.md, tables, progress lines (pe_toolkit.bench.report / runner)."""

from __future__ import annotations

import json
import time

import pytest

from pe_toolkit.bench.report import RESULT_KEYS, markdown_table, results_dir, write_report, write_results
from pe_toolkit.bench.runner import Progress


# ---------------------------------------------------------------------------------- output files
def test_results_dir_is_created_under_root(tmp_path):
    path = results_dir("demo", tmp_path)
    assert path == tmp_path / "demo" and path.is_dir()


@pytest.mark.parametrize("bad", ["", "a/b", "..", "."])
def test_results_dir_rejects_non_plain_names(tmp_path, bad):
    with pytest.raises(ValueError, match="plain folder name"):
        results_dir(bad, tmp_path)


def test_write_results_has_exactly_the_contract_keys(tmp_path):
    rows = [{"encoder": "rope", "ms": 1.5}, {"encoder": "alibi", "ms": float("nan")}]
    path = write_results("demo", {"lengths": [32]}, rows, 2.5, root=tmp_path)
    assert path == tmp_path / "demo" / "results.json"
    document = json.loads(path.read_text())
    assert list(document) == ["benchmark", "config", "rows", "environment", "seconds"]
    assert set(document) == set(RESULT_KEYS)
    assert document["benchmark"] == "demo"
    assert document["config"] == {"lengths": [32]}
    assert document["rows"] == [
        {"encoder": "rope", "ms": 1.5},
        {"encoder": "alibi", "ms": None},
    ]  # NaN -> null
    assert document["seconds"] == 2.5
    env = document["environment"]
    for key in ("python", "torch", "platform", "cpu_count", "torch_threads", "date"):
        assert key in env


def test_write_results_rejects_non_dict_rows(tmp_path):
    with pytest.raises(TypeError, match="rows"):
        write_results("demo", {}, ["not a dict"], 1.0, root=tmp_path)


def test_markdown_table_exact_text():
    rows = [
        {"name": "rope", "ms": 1.23456, "mib": 10, "note": "a|b"},
        {"name": "alibi", "ms": None, "mib": 2.5},
    ]
    text = markdown_table(rows, ["name", ("ms", "time (ms)"), "mib", "note"], {"ms": ".2f", "mib": ".1f"})
    assert text == (
        "| name | time (ms) | mib | note |\n"
        "| --- | --- | --- | --- |\n"
        "| rope | 1.23 | 10.0 | a\\|b |\n"
        "| alibi | n/a | 2.5 | n/a |\n"
    )


def test_markdown_table_callable_format_and_empty_rows():
    assert markdown_table([{"x": 3}], ["x"], {"x": lambda v: f"<{v}>"}) == "| x |\n| --- |\n| <3> |\n"
    assert markdown_table([], ["a", "b"]) == "| a | b |\n| --- | --- |\n"
    with pytest.raises(ValueError):
        markdown_table([], [])


def test_write_report_states_command_and_date(tmp_path):
    path = write_report("demo", "Demo title", "| a |\n| --- |\n", root=tmp_path,
                        command="pe-toolkit bench demo --preset quick", quick=True)
    text = path.read_text()
    assert path == tmp_path / "demo" / "report.md"
    # a quick run says first that it is a pipeline check, then the title
    assert text.startswith("> **Quick mode: a pipeline check, not evidence**") and "\n# Demo title\n" in text
    assert "`pe-toolkit bench demo --preset quick`" in text
    assert time.strftime("%Y-", time.gmtime()) in text and "UTC" in text
    assert text.endswith("| a |\n| --- |\n")


def test_full_run_report_starts_with_its_title(tmp_path):
    text = write_report("demo", "Demo title", "body", root=tmp_path, command="pe-toolkit bench demo",
                        quick=False).read_text()
    assert text.startswith("# Demo title\n") and "pipeline check" not in text


def test_progress_prints_one_flushed_line_per_step(capsys):
    progress = Progress(2, "demo")
    progress("first")
    progress("second")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("[demo 1/2 ") and lines[0].endswith("] first")
    assert lines[1].startswith("[demo 2/2 ") and lines[1].endswith("] second")
