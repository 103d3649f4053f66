"""The `pe-toolkit` command, run as users run it: the console script and `python -m pe_toolkit`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from pe_toolkit import cli

SCRIPT = Path(sys.executable).with_name("pe-toolkit")  # the console script pip made next to this python
REPO = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path = REPO, module: bool = False, hide: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The command in a fresh interpreter: the console script, ``python -m pe_toolkit``, or with packages hidden."""
    if hide:  # as if these packages were not installed
        code = (f"import sys\nfor m in {hide!r}:\n    sys.modules[m] = None\n"
                "from pe_toolkit.cli import main\nsys.exit(main())")
        command = [sys.executable, "-c", code, *args]
    else:
        command = [sys.executable, "-m", "pe_toolkit", *args] if module else [str(SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300,
                          env={**os.environ, "PYTHONWARNINGS": "default"})


def call(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``cli.main(args)`` in this process (no interpreter start: ~8 s of CPU each for ``list``), same result shape.

    The console script, ``python -m`` and the quiet output are tested through :func:`run`; the
    third-party quieting is left out here so that it does not change this test process's loggers.
    """
    stdout, stderr, previous = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with mock.patch("pe_toolkit.quiet.quiet_third_party"), \
                contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = cli.main(list(args))
            except SystemExit as exit_:  # argparse's --help and usage errors
                code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(["pe-toolkit", *args], code, stdout.getvalue(), stderr.getvalue())


def test_console_script_is_installed():
    assert SCRIPT.is_file(), "make test installs the project, which creates the pe-toolkit script"


def test_list_shows_every_domain():
    result = run("list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "domain", "hooks", "relative", "reference"]
    rows = {line.split()[0]: line.split()[1:4] for line in lines[1:]}
    assert rows["rope"] == ["sequence", "rotate", "yes"]
    assert rows["alibi"] == ["sequence", "bias", "yes"]
    assert rows["rwse"] == ["graphs", "embed", "no"]
    assert rows["s_rpe"][0] == "music" and rows["xl_pe"][0] == "translation" and rows["cmc_pe"][0] == "crossmodal"
    assert {r[0] for r in rows.values()} == {"sequence", "graphs", "music", "recsys", "detection", "multirobot",
                                             "crossmodal", "translation", "vision"}
    assert "arXiv:2104.09864" in next(line for line in lines if line.startswith("rope "))
    assert result.stderr == ""  # quiet: no third-party warnings or tips


def test_list_one_domain_as_json_and_markdown():
    result = call("list", "--domain", "graphs", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["name"] for r in rows] == ["lap_pe", "rfp", "rfp_learned", "rwse"]
    assert rows[3] == {"name": "rwse", "domain": "graphs", "hooks": ["embed"], "relative": False,
                       "reference": rows[3]["reference"], "missing": None}
    markdown = call("list", "--domain", "recsys", "--format", "markdown").stdout.splitlines()
    assert markdown[:2] == ["| name | domain | hooks | relative | reference |", "| --- | --- | --- | --- | --- |"]
    assert markdown[2].startswith("| cape | recsys | bias | no | ")


def test_list_names_the_extra_of_a_domain_that_is_not_installed():
    result = run("list", hide=("torch_geometric",))
    assert result.returncode == 0, result.stderr
    rwse = next(line for line in result.stdout.splitlines() if line.startswith("rwse "))
    assert rwse.split()[1:4] == ["graphs", "-", "-"]
    assert rwse.endswith("not installed: pip install 'torch-pe-toolkit[graphs]'")
    assert next(line for line in result.stdout.splitlines() if line.startswith("rope ")).split()[2] == "rotate"


def test_unknown_domain_is_an_error():
    result = call("list", "--domain", "graph")
    assert result.returncode == 1
    assert result.stderr.startswith("pe-toolkit list: unknown domain 'graph'; did you mean 'graphs'?")


def test_info_shows_options_defaults_and_summary():
    result = call("info", "rope")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("rope  (sequence)  pe_toolkit.encoders.rotary.RotaryEncoding")
    assert "RoPE: rotate query/key dimension pairs" in out
    assert "reference: Su et al. 2021" in out
    base = next(line for line in out.splitlines() if line.strip().startswith("base "))
    assert base.split()[1:3] == ["=", "10000.0"] and "frequency base" in base
    assert any(line.split()[:3] == ["scaling", "=", "None"] for line in out.splitlines())
    graph = call("info", "rwse").stdout
    assert any(line.split()[:2] == ["in_features", "required"] for line in graph.splitlines())
    assert "example options: {'in_features': 4}" in graph


def test_info_unknown_name_suggests():
    result = call("info", "rop")
    assert result.returncode == 1 and result.stdout == ""
    assert "unknown encoder 'rop'; did you mean 'rope'" in result.stderr


def test_plot_writes_a_figure(tmp_path):
    target = tmp_path / "figs" / "t5.png"
    result = call("plot", "t5", "-o", str(target), "--length", "12", "--heads", "2", "--dim", "16",
                 "--option", "num_buckets=8", "--option", "max_distance=16")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    default = call("plot", "alibi", cwd=tmp_path)
    assert default.returncode == 0 and (tmp_path / "alibi.png").is_file()


@pytest.mark.parametrize(("args", "message"), [
    (("plot", "alibi", "-o", "x.txt"), "--output must end in .png, .pdf or .svg, got 'x.txt'"),
    (("plot", "alibi", "--option", "no_equals"), "--option must look like KEY=VALUE"),
    (("plot", "alibi", "--option", "bogus=1"), "bogus"),
    (("plot", "alibi", "--length", "0"), "length must be >= 1, got 0"),
    (("plot", "nosuch"), "unknown encoder 'nosuch'"),
])
def test_plot_errors(tmp_path, args, message):
    result = call(*args, cwd=tmp_path)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert not list(tmp_path.iterdir())  # nothing written


def test_plot_without_matplotlib_names_the_extra(tmp_path):
    result = run("plot", "alibi", "-o", str(tmp_path / "a.png"), hide=("matplotlib",))
    assert result.returncode == 1
    assert "pip install 'torch-pe-toolkit[plot]'" in result.stderr


def test_bench_passes_arguments_to_the_benchmark():
    result = call("bench", "speed", "--help")
    assert result.returncode == 0, result.stderr
    assert "--quick" in result.stdout and "--out" in result.stdout and "--accelerator" in result.stdout


def test_bench_unknown_name_lists_the_benchmarks():
    result = call("bench", "sped")
    assert result.returncode == 2  # a usage error, as argparse gives for any unknown choice
    assert "unknown benchmark 'sped'; available: attention_stability, " in result.stderr
    assert "speed, translation, vision (or a 'module:Class' of your own)" in result.stderr


def test_every_benchmark_script_is_on_the_harness_and_listed():
    from pe_toolkit.bench.registry import BENCHMARKS

    scripts = {p.stem for p in (REPO / "benchmarks").glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(BENCHMARKS)
    result = call("bench", "--list")
    assert result.returncode == 0, result.stderr
    listed = {line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ")}
    assert set(BENCHMARKS) <= listed


def test_missing_command_is_a_usage_error():
    result = run(module=True)  # python -m pe_toolkit
    assert result.returncode == 2 and "usage: pe-toolkit" in result.stderr


def test_argument_docs_parses_google_style():
    doc = "Summary.\n\nArgs:\n    a: first. Second sentence.\n    b, c: shared\n" \
          "        continued (Sun et al. 2022).\n\n" \
          "Returns:\n    x: not an argument."
    assert cli.argument_docs(doc) == {"a": "first", "b": "shared continued (Sun et al. 2022)",
                                      "c": "shared continued (Sun et al. 2022)"}
    assert cli.argument_docs("no sections") == {}


def test_parse_option():
    assert cli.parse_option("factor=4.0") == ("factor", 4.0)
    assert cli.parse_option("scaling=yarn") == ("scaling", "yarn")
    assert cli.parse_option("short_factor=[1, 2]") == ("short_factor", [1, 2])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        cli.parse_option("=3")


def test_every_pe_toolkit_command_in_the_readme_runs(tmp_path):
    import re
    import shlex

    readme = (REPO / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
    commands = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()
                if line.startswith("pe-toolkit ")]
    assert len(commands) >= 3
    for command in commands:
        result = call(*shlex.split(command)[1:], cwd=tmp_path)
        assert result.returncode == 0, (command, result.stderr)
    assert (tmp_path / "alibi.png").is_file()


def test_readme_figure_is_what_its_command_draws(tmp_path):
    """The committed picture has the size `pe-toolkit plot alibi` gives today (regenerate it if not)."""
    import struct

    def png_size(path: Path) -> tuple[int, int]:
        return struct.unpack(">II", path.read_bytes()[16:24])

    committed = REPO / "docs" / "assets" / "alibi_pattern.png"
    assert "](docs/assets/alibi_pattern.png)" in (REPO / "README.md").read_text()
    assert call("plot", "alibi", "-o", str(tmp_path / "a.png")).returncode == 0
    assert png_size(committed) == png_size(tmp_path / "a.png")


def test_list_json_keeps_the_whole_import_error():
    result = run("list", "--format", "json", hide=("pycocotools",))
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["box_pe"]["hooks"] is None
    assert rows["box_pe"]["missing"].startswith("domain 'detection' (pe_toolkit.domains.detection): ")
    assert rows["rwse"]["missing"] is None
