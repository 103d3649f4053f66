"""pe_toolkit.atomic: a write is all or nothing, and a failed one names the path and keeps the old file."""

import os

import pytest
import torch

from pe_toolkit.atomic import AtomicWriteError, atomic_torch_save, atomic_write, atomic_write_text


def test_replaces_content_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "a.json"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json"]


def test_exception_midway_keeps_previous_file(tmp_path):
    target = tmp_path / "a.txt"
    atomic_write_text(target, "old")
    with pytest.raises(KeyError), atomic_write(target, "w") as handle:
        handle.write("half")
        raise KeyError("boom")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_torch_save_round_trip(tmp_path):
    target = tmp_path / "w.pt"
    atomic_torch_save({"w": torch.arange(3)}, target)
    assert torch.equal(torch.load(target)["w"], torch.arange(3))


def test_missing_folder_names_path(tmp_path):
    target = tmp_path / "missing" / "a.txt"
    with pytest.raises(AtomicWriteError, match="missing"):
        atomic_write_text(target, "x")


def test_oserror_during_write_names_path_and_keeps_old(tmp_path, monkeypatch):
    target = tmp_path / "a.bin"
    atomic_write_text(target, "old")
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(AtomicWriteError, match=r"a\.bin.*No space left"):
        atomic_write_text(target, "new")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_bad_mode():
    with pytest.raises(ValueError, match="mode"), atomic_write("x", "a"):
        pass
