"""The speed benchmark on the harness: a tiny run with Lightning and every domain blocked, its rows and report.

The run goes through ``pe_toolkit.bench.cli.main`` in a fresh interpreter whose ``sys.modules`` maps
Lightning, the domains and their dependencies to ``None`` (an import of any of them fails): the speed
benchmark needs only the core, ``plot`` and the harness's config libraries. A fresh interpreter also
because speed forks children that run torch compute, and a child forked from a process that already
used torch's OpenMP pool (as this pytest process may have) would hang.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pe_toolkit.bench import load_config
from pe_toolkit.benchmarks import speed

ENCODERS = ["rope", "alibi"]
LENGTHS = [32, 48]
BLOCKED = ("lightning", "pytorch_lightning", "lightning_fabric", "torchmetrics", "torch_geometric", "music21",
           "pretty_midi", "pycocotools", "sacrebleu", "scipy", "pe_toolkit.domains", "pe_toolkit.training")
SETTINGS = [
    "layer.lengths=[32, 48]", "layer.encoders=[rope, alibi]",
    "layer.timing={budget_s: null, min_repeats: 3, max_repeats: 3, warmup: 0}",
    "rope.shape=[1, 2, 16, 8]", "rope.timing={budget_s: null, min_repeats: 5, max_repeats: 5, warmup: 1}",
    "backends.lengths=[64]", "backends.encoders=[alibi, cope]",
    "backends.infer_length=128",  # compiled CPU flex refuses less than one 128-block
    "backends.infer_encoders=[alibi]", "backends.compile_length=32", "backends.compile_encoders=[alibi]",
    "backends.backends=[sdpa, blocked]",  # the tiled backend compiles its tile steps: tests/nn/test_tiled_attention.py
    "backends.overhead_lengths=[64]", "backends.overhead_encoders=[alibi, cope]",
]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("speed_out")
    argv = ["--quick", "--out", str(out), *[a for s in SETTINGS for a in ("--set", s)]]
    code = ("import sys\n"
            f"for name in {BLOCKED!r}: sys.modules[name] = None\n"
            "from pe_toolkit.bench.cli import main\n"
            "status = main(sys.argv[1:], name='speed', prog='python benchmarks/speed.py')\n"
            "loaded = sorted(n for n in sys.modules if n.split('.')[0] in ('lightning', 'torch_geometric', 'scipy')"
            " and sys.modules[n] is not None)\n"
            "assert not loaded, loaded\n"
            "sys.exit(status)\n")
    completed = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return out / "speed", completed.stdout


def _rows(directory, kind):
    return [r for r in json.loads((directory / "results.json").read_text())["rows"] if r["kind"] == kind]


def test_smoke_writes_results_report_and_plots(smoke_run):
    directory, stdout = smoke_run
    document = json.loads((directory / "results.json").read_text())
    assert set(document) == {"benchmark", "config", "rows", "environment", "seconds"}
    assert document["benchmark"] == "speed" and document["config"]["preset"] == "quick"
    assert document["config"]["layer"]["lengths"] == LENGTHS and document["config"]["layer"]["encoders"] == ENCODERS
    assert document["config"]["jobs"] == 1  # timings run alone
    assert (directory / "report.md").read_text().startswith("> **Quick mode")
    pngs = sorted(p.name for p in directory.glob("*.png"))
    assert pngs == ["backend_memory_vs_length.png", "layer_time_memory_vs_length.png", "overhead_vs_length.png",
                    "rope_application.png"]
    assert all((directory / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "wrote" in stdout


def test_smoke_uses_the_requested_rounds(smoke_run):
    directory, _ = smoke_run
    timed = [r for kind in ("attention_layer", "rope_application") for r in _rows(directory, kind)
             if r.get("status", "ok") == "ok"]
    assert {r["repeats"] for r in timed} == {3, 5}


def test_smoke_rows_cover_every_encoder_and_length(smoke_run):
    directory, _ = smoke_run
    layer = _rows(directory, "attention_layer")
    assert sorted((r["encoder"], r["length"]) for r in layer) == sorted((e, L) for e in ENCODERS for L in LENGTHS)
    for r in layer:
        assert r["time_status"] == "ok" and r["median_ms"] > 0 and r["min_ms"] <= r["median_ms"]
        assert r["memory_status"] == "ok" and r["peak_mib"] >= 0
        assert r["batch"] == 1 and r["heads"] == 4 and r["head_dim"] == 64
    # the runs of several configurations keep them in "rows"; the results list each once more, flat
    runs = _rows(directory, "attention_layers")
    assert [r["length"] for r in runs] == LENGTHS and sum(len(r["rows"]) for r in runs) == len(layer)


def test_smoke_rope_application_rows(smoke_run):
    directory, _ = smoke_run
    rows = _rows(directory, "rope_application")
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
    assert "python benchmarks/speed.py --quick --out " in text and "--set 'layer.lengths=[32, 48]'" in text
    assert "| encoder | hooks | L=32 ms | L=48 ms | L=32 MiB | L=48 MiB |" in text
    assert "| rope | rotate |" in text and "| alibi | bias |" in text
    assert "theirs / ours" in text and ".png)" in text


def test_smoke_backend_rows(smoke_run):
    directory, _ = smoke_run
    train = {(r["encoder"], r["backend"]): r for r in _rows(directory, "backend_train")}
    assert set(train) == {(e, b) for e in ("alibi", "cope") for b in ("sdpa", "blocked")}
    assert all(r["status"] == "ok" and r["seconds"] > 0 and r["peak_mib"] >= 0 and r["length"] == 64
               for r in train.values())
    infer = {r["backend"]: r for r in _rows(directory, "backend_infer")}
    assert set(infer) == {"sdpa", "blocked", "flex"}
    for r in infer.values():
        assert r["status"] == "ok" and r["max_abs_diff_vs_sdpa"] < 1e-5
    assert infer["flex"]["speedup_vs_sdpa"] > 0
    assert _rows(directory, "overhead_vs_nope") == []  # no NoPE layer row in this run: nothing to divide by
    (compiled,) = _rows(directory, "compiled_vs_eager")
    assert compiled["encoder"] == "alibi" and compiled["length"] == 32 and compiled["status"] == "ok"
    assert compiled["eager_ms"] > 0 and compiled["compiled_ms"] > 0 and compiled["first_call_s"] > 0
    assert compiled["max_abs_diff_out"] < 1e-5 and compiled["max_abs_diff_grad"] < 1e-5
    report = (directory / "report.md").read_text()
    assert "## Attention backends" in report and "GPU rows: not measured" in report
    assert "### Compiled against eager, L=32" in report
    # forward + backward over NoPE's SDPA per backend, interleaved in one child (tiled: tests/nn/test_tiled_*.py)
    ratios = {(r["encoder"], r["backend"]): r for r in _rows(directory, "backend_overhead")}
    assert set(ratios) == {("nope", "sdpa")} | {(e, b) for e in ("alibi", "cope") for b in ("sdpa", "blocked", "auto")}
    assert ratios[("nope", "sdpa")]["ratio_vs_nope_sdpa"] == 1.0
    for r in ratios.values():
        assert r["status"] == "ok" and r["length"] == 64 and r["rounds"] == 3 and r["ratio_vs_nope_sdpa"] > 0
        assert r["first_call_s"] > 0
    assert "### Forward + backward against NoPE's SDPA, per backend" in report


@pytest.mark.parametrize("setting, message", [
    ("layer.encoders=[rope, no_such_encoder]", 'key "config.layer.encoders"'),
    ("backends.infer_encoders=[nope_x]", 'key "config.backends.infer_encoders"'),
    ("layer.lengths=[0]", 'key "config.layer.lengths":\n  Not of type PositiveInt'),
    ("layer.heads=3", "layer.heads (3) must divide layer.dim (256)"),
    ("layer.timing.min_repeats=0", 'key "config.layer.timing.min_repeats":\n  Not of type PositiveInt'),
    ("rope.timing.min_repeats=100", "rope.timing: min_repeats (100) must be <= max_repeats (60)"),
    ("rope.shape=[1, 2, 16, 7]", "rope.shape must be [B, H, L, head_dim] with an even head_dim"),
    ("backends.backends=[sdpa, dense]",
     "Expected a typing.Literal['sdpa', 'blocked', 'tiled', 'flex']. Got value: dense"),
    ("memory_limit_gib=0", 'key "config.memory_limit_gib"'),
    ("layer.no_such_key=1", "config key 'layer.no_such_key' does not exist"),
])
def test_bad_settings_are_errors_naming_the_key(setting, message):
    with pytest.raises(ValueError) as info:
        load_config(speed.Speed(), "quick", overrides=[setting])
    assert message in str(info.value)


@pytest.mark.parametrize("preset", ["quick", "full", "gpu"])
def test_presets_load_and_list_their_runs(preset):
    config, run = load_config(speed.Speed(), preset)
    specs = speed.Speed().runs(config)
    kinds = [s["kind"] for s in specs]
    assert kinds.count("attention_layers") == len(config.layer.lengths)
    b = config.backends
    assert kinds.count("backend_train") == len(b.lengths) * len(b.encoders) * len(b.backends)
    assert kinds.count("rope_applications") == 1
    assert ("flex" in b.backends) == (preset == "gpu") and run == ({"accelerator": "cuda"} if preset == "gpu" else {})


def test_speed_runs_alone():
    assert speed.Speed.exclusive


def test_learned_table_covers_the_length():
    assert speed.encoder_options("learned", 4096)["max_len"] == 4096
    assert speed.encoder_options("rope", 4096) == {}


def test_an_embed_only_encoder_acts_on_the_input_and_the_layer_is_nope():
    encoding, layer = speed.attention("learned", 100, 32, 4, {"causal": True}, query_block_size=16)
    assert encoding.max_len == 100 and layer.encoding is None and layer.query_block_size == 16
    encoding, layer = speed.attention("alibi", 100, 32, 4)
    assert layer.encoding is encoding and layer.causal


def test_overhead_over_nope_at_every_timed_length():
    rows = [dict(encoder=e, length=n, median_ms=ms) for e, n, ms in
            [("nope", 512, 10.0), ("alibi", 512, 15.0), ("nope", 1024, 20.0), ("alibi", 1024, 50.0),
             ("alibi", 2048, 90.0), ("t5", 1024, None)]]
    out = {(r["encoder"], r["length"]): r["ratio"] for r in speed.overhead_rows(rows)}
    # no NoPE row at 2048: no ratio there
    assert out == {("nope", 512): 1.0, ("alibi", 512): 1.5, ("nope", 1024): 1.0, ("alibi", 1024): 2.5}
