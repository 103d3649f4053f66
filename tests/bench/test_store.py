"""The run store: atomic files, a claim per run key, damaged files named and rerun, spec-exact reuse;
two processes on one folder store every run once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from pe_toolkit.bench.store import RunStore

REPO = Path(__file__).resolve().parents[2]


def test_save_then_load_needs_the_full_spec(tmp_path):
    store = RunStore(tmp_path, resume=True)
    spec = {"method": "a", "seed": 0, "device": {"accelerator": "cpu"}, "threads": 1, "sizes": (1, 2)}
    store.save("a", spec, {"loss": 0.5})
    assert store.load("a", spec) == {"loss": 0.5}
    assert store.load("a", {**spec, "sizes": [1, 2]}) == {"loss": 0.5}  # compared after a JSON round trip
    assert store.load("a", {**spec, "threads": 2}) is None
    assert store.load("a", {**spec, "seed": 1}) is None
    assert store.load("a", {**spec, "device": {"accelerator": "cuda"}}) is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]  # no temporary file or claim left


def test_without_resume_only_runs_written_since_opening_are_reused(tmp_path):
    RunStore(tmp_path, resume=True).save("a", {"x": 1}, {"loss": 0.5})
    fresh = RunStore(tmp_path, resume=False)
    assert fresh.load("a", {"x": 1}) is None
    RunStore(tmp_path, resume=True).save("a", {"x": 1}, {"loss": 0.25})  # a concurrent process finished it
    assert fresh.load("a", {"x": 1}) == {"loss": 0.25}


@pytest.mark.parametrize("content", ['{"spec": {"x": 1}, "row": {"lo', "", '{"spec": {"x": 1}}', "[1, 2]"],
                         ids=["truncated", "empty", "no-row", "not-a-mapping"])
def test_a_damaged_run_file_is_named_and_not_trusted(tmp_path, capsys, content):
    store = RunStore(tmp_path, resume=True)
    (tmp_path / "a.json").write_text(content)
    assert store.load("a", {"x": 1}) is None
    path = str(tmp_path / "a.json")
    assert store.damaged == [path]
    assert f"run store: {path} is damaged or incomplete" in capsys.readouterr().err


def test_a_claim_is_exclusive_until_saved_or_released(tmp_path):
    first, second = RunStore(tmp_path, resume=True), RunStore(tmp_path, resume=True)
    second._identity = f"{socket.gethostname()} {os.getppid()}"  # another live process on this host
    assert first.claim("a") and first.claim("a")
    assert not second.claim("a")
    first.save("a", {}, {"v": 1})
    assert second.claim("a")
    assert not first.claim("a")
    second.release("a")
    assert first.claim("a")


def test_a_stale_claim_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "a.claim").write_text(f"{socket.gethostname()} {int(dead.stdout)} 0\n")
    assert RunStore(tmp_path, resume=True).claim("a")
    (tmp_path / "b.claim").write_text("other-host 1 1e18\n")  # another host, recent: may be alive
    assert not RunStore(tmp_path, resume=True).claim("b")
    (tmp_path / "c.claim").write_text("other-host 1 0\n")  # another host, older than stale_after_s
    assert RunStore(tmp_path, resume=True).claim("c")


def test_bad_keys_are_refused(tmp_path):
    store = RunStore(tmp_path, resume=True)
    for key in ("", "a/b", ".hidden"):
        with pytest.raises(ValueError, match="run key must be a non-empty file name"):
            store.path(key)


def _bench(out, log, *extra):
    code = ("import sys; from pe_toolkit.bench.cli import main; "
            f"sys.exit(main(['tiny_benchmark:Tiny', '--preset', 'full', '--out', {str(out)!r}, "
            f"'--set', 'log={log}', *{list(extra)!r}]))")
    return subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_two_processes_on_one_folder_store_every_run_once(tmp_path):
    log = tmp_path / "executed.log"
    # --resume: the process that starts second reuses what the first finished before it started
    first, second = (_bench(tmp_path / "out", log, "--set", "pause=0.3", "--resume") for _ in range(2))
    for process in (first, second):
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err
    executed = Counter(log.read_text().splitlines())
    assert executed and set(executed.values()) == {1}, executed  # no run done twice
    assert len(executed) == 2 * 3 + 2 * 2  # 2 methods x 3 lrs on seed 0, then 2 methods x 2 seeds
    runs = sorted((tmp_path / "out" / "tiny" / "runs" / "full").iterdir())
    assert [p.suffix for p in runs] == [".json"] * len(executed)  # no claim or temporary file left
    for path in runs:
        document = json.loads(path.read_text())
        assert set(document) == {"spec", "row", "written"}
    rows = json.loads((tmp_path / "out" / "tiny" / "results.json").read_text())["rows"]
    assert len([r for r in rows if "kind" not in r]) == 2 * 3


def test_a_truncated_run_file_is_named_and_rerun(tmp_path):
    log = tmp_path / "executed.log"
    out = tmp_path / "out"
    process = _bench(out, log)
    assert process.wait(timeout=300) == 0
    before = json.loads((out / "tiny" / "results.json").read_text())["rows"]
    victim = out / "tiny" / "runs" / "full" / "method=large__seed=1__lr=0.1.json"
    if not victim.exists():  # the chosen lr of 'large' decides the file name
        victim = next((out / "tiny" / "runs" / "full").glob("method=large__seed=1__*.json"))
    victim.write_text(victim.read_text()[:40])
    log.write_text("")
    process = _bench(out, log, "--resume")
    _, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    assert f"run store: {victim} is damaged or incomplete" in err
    assert log.read_text().splitlines() == [f"large 1 {victim.stem.split('lr=')[1]}"]  # only that run again
    after = json.loads((out / "tiny" / "results.json").read_text())
    assert after["rows"] == before
    assert after["config"]["damaged_run_files"] == [str(victim)]
