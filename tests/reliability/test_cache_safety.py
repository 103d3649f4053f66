"""Safe, self-checking graph dataset caches (domains/graphs/datasets.py): the processed file is read with
``torch.load(weights_only=True)`` only, carries a format version, a hash of the generation configuration
and a digest of its tensors, and a corrupted, stale or malicious file is rebuilt (with a warning) rather
than loaded, crashing, or executed."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from pe_toolkit.domains.graphs import CSLDataset
from pe_toolkit.domains.graphs.datasets import CACHE_FORMAT


def _same(a: CSLDataset, b: CSLDataset) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x.keys():
            if isinstance(x[key], torch.Tensor):
                assert torch.equal(x[key], y[key]), key
            else:
                assert x[key] == y[key], key


@pytest.fixture()
def built(tmp_path):
    dataset = CSLDataset(root=tmp_path / "csl", graphs_per_class=1)
    return dataset, dataset.processed_paths[0], CSLDataset(root=tmp_path / "fresh", graphs_per_class=1)


def _reopen(tmp_path):
    with pytest.warns(UserWarning, match="rebuilding the processed file"):
        return CSLDataset(root=tmp_path / "csl", graphs_per_class=1)


def test_processed_file_carries_format_config_hash_and_digest(built):
    dataset, path, _ = built
    stored = torch.load(path, weights_only=True)
    assert stored["format"] == CACHE_FORMAT
    assert stored["config"] == dataset.config_hash and len(stored["config"]) == 64
    assert CSLDataset(root=os.path.dirname(os.path.dirname(os.path.dirname(path))), graphs_per_class=2).config_hash \
        != dataset.config_hash


@pytest.mark.parametrize("damage", ["truncate", "junk", "empty"])
def test_corrupted_file_is_rebuilt_and_equals_a_fresh_one(built, tmp_path, damage):
    _, path, fresh = built
    raw = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write({"truncate": raw[: len(raw) // 2], "junk": os.urandom(len(raw)), "empty": b""}[damage])
    rebuilt = _reopen(tmp_path)
    _same(rebuilt, fresh)
    torch.load(path, weights_only=True)  # the rewritten file is valid again


def test_flipped_tensor_bytes_are_detected_by_the_digest(built, tmp_path):
    _, path, fresh = built
    stored = torch.load(path, weights_only=True)
    stored["data"]["edge_index"][0, 0] += 1  # a readable file with silently wrong content
    torch.save(stored, path)
    _same(_reopen(tmp_path), fresh)


@pytest.mark.parametrize("stale", ["pyg_tuple", "old_format", "other_config"])
def test_stale_file_is_rebuilt(built, tmp_path, stale):
    dataset, path, fresh = built
    stored = torch.load(path, weights_only=True)
    if stale == "pyg_tuple":  # the layout PyG's InMemoryDataset.save writes (previous versions of this cache)
        payload = (stored["data"], stored["slices"])
    else:
        payload = dict(stored, **({"format": CACHE_FORMAT - 1} if stale == "old_format" else {"config": "0" * 64}))
    torch.save(payload, path)
    _same(_reopen(tmp_path), fresh)


class _Exploit:
    """Unpickling this calls ``_write_marker(path)``: what a crafted cache file would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (_write_marker, (self.marker,))


def _write_marker(path: str) -> str:
    with open(path, "w") as f:
        f.write("executed")
    return path


def test_exploit_pickle_is_never_executed(built, tmp_path):
    _, path, fresh = built
    marker = tmp_path / "marker"
    # sanity: the payload really executes when unpickled unsafely
    pickle.loads(pickle.dumps(_Exploit(str(marker))))
    assert marker.exists()
    marker.unlink()
    torch.save({"format": CACHE_FORMAT, "evil": _Exploit(str(marker))}, path)  # a torch zip file
    _same(_reopen(tmp_path), fresh)
    assert not marker.exists()
    with open(path, "wb") as f:  # a bare (legacy, non-zip) pickle
        pickle.dump(_Exploit(str(marker)), f)
    _same(_reopen(tmp_path), fresh)
    assert not marker.exists()


def test_exploit_in_pyg_bookkeeping_files_is_never_executed(built, tmp_path):
    # PyG's Dataset._process reads pre_transform.pt with weights_only=False; the override never reads it
    _, path, fresh = built
    marker = tmp_path / "marker"
    for name in ("pre_transform.pt", "pre_filter.pt"):
        torch.save(_Exploit(str(marker)), os.path.join(os.path.dirname(path), name))
    _same(CSLDataset(root=tmp_path / "csl", graphs_per_class=1), fresh)
    assert not marker.exists()
