"""Smoke tests of benchmarks/speed.py.

The full run goes through ``speed.main`` in a fresh interpreter: speed.py forks children that run
torch compute, and a child forked from a process that already used torch's OpenMP pool (as this
pytest process may have, in other tests) would hang. See benchmarks/common.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from benchmarks import speed

ENCODERS = ["rope", "alibi"]
LENGTHS = [32, 48]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("speed_out")
    argv = [
        "--quick",
        "--lengths",
        *map(str, LENGTHS),
        "--encoders",
        *ENCODERS,
        "--out",
        str(out),
        "--rope-shape",
        "1",
        "2",
        "16",
        "8",
        "--repeats",
        "3",
        "--rope-repeats",
        "5",
        "--backend-lengths", "64",
        "--backend-encoders", "alibi", "cope",
        "--infer-length", "128",  # compiled CPU flex refuses less than one 128-block
        "--infer-encoders", "alibi",
        "--compile-length", "32",
        "--compile-encoders", "alibi",
        "--backends", "sdpa", "blocked",  # the tiled backend compiles its tile steps: tests/nn/test_tiled_attention.py
        "--overhead-lengths", "64",
        "--overhead-encoders", "alibi", "cope",
    ]
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from benchmarks import speed; sys.exit(speed.main(sys.argv[2:]))"
    )
    root = str(speed.Path(speed.__file__).resolve().parents[1])
    completed = subprocess.run([sys.executable, "-c", code, root, *argv], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return out / "speed", completed.stdout


def test_smoke_writes_results_report_and_plots(smoke_run):
    directory, stdout = smoke_run
    document = json.loads((directory / "results.json").read_text())
    assert set(document) == {"benchmark", "config", "rows", "environment", "seconds"}
    assert document["benchmark"] == "speed"
    assert document["config"]["lengths"] == LENGTHS and document["config"]["encoders"] == ENCODERS
    assert (directory / "report.md").is_file()
    pngs = sorted(directory.glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "wrote" in stdout


def test_smoke_uses_the_requested_rounds(smoke_run):
    directory, _ = smoke_run
    rows = json.loads((directory / "results.json").read_text())["rows"]
    timed = [r for r in rows if r["kind"] in ("attention_layer", "rope_application") and r.get("status", "ok") == "ok"]
    assert {r["repeats"] for r in timed} == {3, 5}


def test_smoke_rows_cover_every_encoder_and_length(smoke_run):
    directory, _ = smoke_run
    rows = json.loads((directory / "results.json").read_text())["rows"]
    layer = [r for r in rows if r["kind"] == "attention_layer"]
    assert sorted((r["encoder"], r["length"]) for r in layer) == sorted((e, L) for e in ENCODERS for L in LENGTHS)
    for r in layer:
        assert r["time_status"] == "ok" and r["median_ms"] > 0 and r["min_ms"] <= r["median_ms"]
        assert r["memory_status"] == "ok" and r["peak_mib"] >= 0
        assert r["batch"] == 1 and r["heads"] == 4 and r["head_dim"] == 64


def test_smoke_rope_application_rows(smoke_run):
    directory, _ = smoke_run
    rows = [r for r in json.loads((directory / "results.json").read_text())["rows"] if r["kind"] == "rope_application"]
    by_name = {r["implementation"]: r for r in rows}
    assert by_name["ours"]["status"] == "ok" and by_name["ours"]["ratio_vs_ours"] == 1.0
    for r in rows:
        assert r["status"] in ("ok", "not installed")
        if r["status"] == "ok":
            assert r["median_ms"] > 0 and r["ratio_vs_ours"] > 0
            assert r["max_abs_diff_vs_ours"] < 1e-4  # the same rotation, in the same layout
        else:
            assert "median_ms" not in r  # nothing reported that was not measured


def test_smoke_report_has_tables_and_command(smoke_run):
    directory, _ = smoke_run
    text = (directory / "report.md").read_text()
    assert "python benchmarks/speed.py --quick --lengths 32 48 --encoders rope alibi" in text
    assert "| encoder | hooks | L=32 ms | L=48 ms |" in text
    assert "| encoder | L=32 MiB | L=48 MiB |" in text
    assert "| rope | rotate |" in text and "| alibi | bias |" in text
    assert "theirs / ours" in text and ".png)" in text


@pytest.mark.parametrize(
    "argv",
    [["--encoders", "rope", "no_such_encoder"], ["--lengths", "0"], ["--heads", "3"], ["--repeats", "0"]],
)
def test_bad_arguments_are_usage_errors(argv):
    with pytest.raises(SystemExit) as info:
        speed.main(argv)
    assert info.value.code == 2


def test_unknown_encoder_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        speed.main(["--encoders", "rope", "no_such_encoder"])
    assert info.value.code == 2
    assert "no_such_encoder" in capsys.readouterr().err


def test_learned_table_covers_the_length():
    assert speed._encoder_options("learned", 4096)["max_len"] == 4096
    assert speed._encoder_options("rope", 4096) == {}


def test_smoke_backend_rows(smoke_run):
    directory, _ = smoke_run
    rows = json.loads((directory / "results.json").read_text())["rows"]
    train = {(r["encoder"], r["backend"]): r for r in rows if r["kind"] == "backend_train"}
    assert set(train) == {(e, b) for e in ("alibi", "cope") for b in ("sdpa", "blocked")}
    assert all(r["status"] == "ok" and r["seconds"] > 0 and r["peak_mib"] >= 0 and r["length"] == 64
               for r in train.values())
    infer = {r["backend"]: r for r in rows if r["kind"] == "backend_infer"}
    assert set(infer) == {"sdpa", "blocked", "flex"}
    for r in infer.values():
        assert r["status"] == "ok" and r["max_abs_diff_vs_sdpa"] < 1e-5
    assert infer["flex"]["speedup_vs_sdpa"] > 0
    overhead = {r["encoder"]: r for r in rows if r["kind"] == "overhead_vs_nope"}
    assert overhead == {}  # no NoPE row at L=2048 in this smoke run: nothing to divide by
    (compiled,) = [r for r in rows if r["kind"] == "compiled_vs_eager"]
    assert compiled["encoder"] == "alibi" and compiled["length"] == 32 and compiled["status"] == "ok"
    assert compiled["eager_ms"] > 0 and compiled["compiled_ms"] > 0 and compiled["first_call_s"] > 0
    assert compiled["max_abs_diff_out"] < 1e-5 and compiled["max_abs_diff_grad"] < 1e-5
    report = (directory / "report.md").read_text()
    assert "## Attention backends" in report and "GPU rows: not measured" in report
    assert "### Compiled against eager, L=32" in report
    assert (directory / "backend_memory_vs_length.png").is_file()
    # forward + backward over NoPE's SDPA per backend, interleaved in one child (cope has no tiled path)
    ratios = {(r["encoder"], r["backend"]): r for r in rows if r["kind"] == "backend_overhead"}
    assert set(ratios) == {("nope", "sdpa")} | {(e, b) for e in ("alibi", "cope") for b in ("sdpa", "blocked", "auto")}
    assert ratios[("nope", "sdpa")]["ratio_vs_nope_sdpa"] == 1.0
    for r in ratios.values():
        assert r["status"] == "ok" and r["length"] == 64 and r["rounds"] == 3 and r["ratio_vs_nope_sdpa"] > 0
        assert r["first_call_s"] > 0
    assert "### Forward + backward against NoPE's SDPA, per backend" in report
    assert (directory / "overhead_vs_length.png").is_file()
    allocator = json.loads((directory / "results.json").read_text())["config"]["allocator"]
    assert allocator.startswith("glibc defaults in every child (no mallopt")
