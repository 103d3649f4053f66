"""The byte corpus: stdlib sources, user files, the document split, training and evaluation windows."""

import doctest
import time

import pytest
import torch

import pe_toolkit.data.text_corpus as text_corpus
from pe_toolkit.data.text_corpus import (
    BYTE_VOCAB_SIZE,
    DOC_SEPARATOR,
    Document,
    TextCorpus,
    build_stdlib_corpus,
    equal_token_windows,
    join_documents,
    load_text_files,
    random_windows,
    sequential_windows,
    stdlib_source_files,
)


@pytest.fixture(scope="module")
def stdlib_corpus() -> TextCorpus:
    return build_stdlib_corpus()


def toy_corpus(n: int = 12) -> TextCorpus:
    return TextCorpus([(f"doc{i:02d}", bytes([65 + i]) * (10 + 3 * i)) for i in range(n)])


# --- the standard-library corpus -------------------------------------------------------------------


def test_stdlib_corpus_is_large_fast_and_clean(stdlib_corpus):
    start = time.perf_counter()
    again = build_stdlib_corpus()
    assert time.perf_counter() - start < 5.0
    assert again.names == stdlib_corpus.names
    assert len(stdlib_corpus) > 300 and stdlib_corpus.num_bytes > 2_000_000
    names = stdlib_corpus.names
    assert "stdlib/json/decoder.py" in names and any(n.startswith("pydoc_topics/") for n in names)
    assert not any(part in {"test", "tests", "site-packages", "idle_test"} for n in names for part in n.split("/"))
    assert "stdlib/pydoc_data/topics.py" not in names  # its texts enter as topic documents
    joined = stdlib_corpus.to_tensor()
    assert joined.dtype == torch.uint8
    assert int((joined == DOC_SEPARATOR).sum()) == len(stdlib_corpus) - 1  # separators only


def test_stdlib_source_files_are_sorted_python_files():
    files = stdlib_source_files()
    assert files and all(f.suffix == ".py" and f.is_file() for f in files)
    assert len(files) == len(set(files))


def test_max_bytes_is_exact_and_seeded(stdlib_corpus):
    a, b = build_stdlib_corpus(max_bytes=50_000, seed=3), build_stdlib_corpus(max_bytes=50_000, seed=3)
    assert a.num_bytes == 50_000
    assert a.names == b.names and [d.data for d in a] == [d.data for d in b]
    assert build_stdlib_corpus(max_bytes=50_000, seed=4).names != a.names
    full = {d.name: d.data for d in stdlib_corpus}
    assert all(full[d.name].startswith(d.data) for d in a)  # whole documents, the last one cut
    assert build_stdlib_corpus(max_bytes=10**12).num_bytes == stdlib_corpus.num_bytes


@pytest.mark.parametrize("bad", [0, -5])
def test_max_bytes_must_be_positive(bad):
    with pytest.raises(ValueError, match="max_bytes"):
        build_stdlib_corpus(max_bytes=bad)


# --- the split -------------------------------------------------------------------------------------


def test_split_is_disjoint_covering_and_seeded(stdlib_corpus):
    train, val = stdlib_corpus.split_documents(0.1, seed=0)
    train_names, val_names = {d.name for d in train}, {d.name for d in val}
    assert not train_names & val_names
    assert train_names | val_names == set(stdlib_corpus.names)
    val_bytes = sum(len(d) for d in val)
    assert 0.1 * stdlib_corpus.num_bytes <= val_bytes < 0.1 * stdlib_corpus.num_bytes + max(len(d) for d in val)
    again = stdlib_corpus.split_documents(0.1, seed=0)
    assert [d.name for d in again[1]] == [d.name for d in val]
    assert [d.name for d in stdlib_corpus.split_documents(0.1, seed=1)[1]] != [d.name for d in val]


def test_split_tensors_join_the_documents():
    corpus = toy_corpus()
    train_docs, val_docs = corpus.split_documents(0.3, seed=5)
    train, val = corpus.split(0.3, seed=5)
    assert train.dtype == val.dtype == torch.uint8
    assert bytes(train.tolist()) == b"\x00".join(d.data for d in train_docs)
    assert bytes(val.tolist()) == b"\x00".join(d.data for d in val_docs)
    assert train.numel() + val.numel() == corpus.num_bytes + len(corpus) - 2


def test_split_does_not_depend_on_input_order():
    docs = list(toy_corpus())
    forward, backward = TextCorpus(docs), TextCorpus(reversed(docs))
    assert forward.names == backward.names
    assert torch.equal(forward.split(0.2, seed=7)[1], backward.split(0.2, seed=7)[1])


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, float("nan")])
def test_split_rejects_bad_fraction(bad):
    with pytest.raises(ValueError, match="val_fraction"):
        toy_corpus().split(bad)


def test_split_needs_two_documents_and_unique_names():
    with pytest.raises(ValueError, match="at least 2 documents"):
        TextCorpus([("a", b"x")]).split()
    with pytest.raises(ValueError, match="'a' appears twice"):
        TextCorpus([("a", b"x"), Document("a", b"y")])


def test_join_documents():
    assert join_documents([]).numel() == 0
    assert join_documents([Document("a", b"ab"), Document("b", b"c")], separator=10).tolist() == [97, 98, 10, 99]


# --- user files ------------------------------------------------------------------------------------


def test_load_text_files(tmp_path):
    (tmp_path / "b.txt").write_text("héllo\n", encoding="utf-8")
    (tmp_path / "a.md").write_text("# title\n", encoding="utf-8")
    corpus = load_text_files([tmp_path / "b.txt", str(tmp_path / "a.md")])
    assert corpus.names == sorted([(tmp_path / "a.md").as_posix(), (tmp_path / "b.txt").as_posix()])
    assert {d.data for d in corpus} == {"héllo\n".encode(), b"# title\n"}


def test_load_text_files_directory(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.py").write_text("x = 1\n")
    (tmp_path / "y.txt").write_text("y\n")
    (tmp_path / "skip.bin").write_bytes(b"\xff\xfe")
    with pytest.raises(ValueError, match="is a directory; pass recursive=True"):
        load_text_files([tmp_path])
    corpus = load_text_files(tmp_path, recursive=True)
    assert corpus.names == [f"{tmp_path.as_posix()}/sub/x.py", f"{tmp_path.as_posix()}/y.txt"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no file"):
        load_text_files([tmp_path / "empty"], recursive=True)


def test_load_text_files_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        load_text_files([tmp_path / "missing.txt"])
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("café".encode("latin-1"))
    with pytest.raises(ValueError, match="latin1.txt.*not UTF-8"):
        load_text_files([bad])
    with pytest.raises(ValueError, match="empty"):
        load_text_files([])


# --- windows ---------------------------------------------------------------------------------------


def test_random_windows_are_slices_of_the_data():
    data = torch.arange(256, dtype=torch.uint8)  # every value once: a window's first byte is its start
    windows = random_windows(data, 16, 64, torch.Generator().manual_seed(0))
    assert windows.shape == (64, 17) and windows.dtype == torch.long
    for row in windows:
        start = int(row[0])
        assert torch.equal(row, data[start : start + 17].long())
    assert int(windows[:, 0].max()) <= 256 - 17
    again = random_windows(data, 16, 64, torch.Generator().manual_seed(0))
    assert torch.equal(windows, again)


def test_random_windows_cover_both_ends():
    data = torch.arange(6, dtype=torch.uint8)
    starts = set(random_windows(data, 4, 200, torch.Generator().manual_seed(0))[:, 0].tolist())
    assert starts == {0, 1}


def test_random_windows_on_the_corpus(stdlib_corpus):
    train, _ = build_stdlib_corpus(max_bytes=20_000).split()
    windows = random_windows(train, 128, 4)
    text = bytes(train.tolist())
    assert all(bytes(row.tolist()) in text for row in windows)
    assert int(windows.max()) < BYTE_VOCAB_SIZE


def test_sequential_windows():
    data = torch.arange(100, dtype=torch.uint8)
    windows = sequential_windows(data, 10)
    assert windows.shape == (9, 11)  # (100 - 1) // 10
    for j, row in enumerate(windows):
        assert torch.equal(row, data[j * 10 : j * 10 + 11].long())
    targets = windows[:, 1:].flatten().tolist()
    assert len(set(targets)) == len(targets)  # each byte predicted at most once
    few = sequential_windows(data, 10, max_windows=3)
    assert few[:, 0].tolist() == [0, 40, 80]
    assert torch.equal(sequential_windows(data, 10, max_windows=50), windows)
    assert sequential_windows(data, 99).shape == (1, 100)


def test_window_errors():
    data = torch.zeros(10, dtype=torch.uint8)
    with pytest.raises(ValueError, match="needs 11"):
        random_windows(data, 10, 1)
    with pytest.raises(ValueError, match="needs 11"):
        sequential_windows(data, 10)
    with pytest.raises(ValueError, match="1-D integer"):
        random_windows(torch.zeros(2, 10), 3, 1)
    with pytest.raises(ValueError, match="length"):
        sequential_windows(data, 0)
    with pytest.raises(TypeError, match="batch"):
        random_windows(data, 3, 2.0)


def test_module_docstring_example_runs():
    result = doctest.testmod(text_corpus, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_byte_lm_data_module():
    from pe_toolkit.data import ByteLMDataModule

    dm = ByteLMDataModule(context=128, batch_size=4, steps_per_epoch=3, val_context=64, val_windows=5,
                          max_bytes=30_000, passkey_fraction=0.5, passkey_template="compact", seed=1)
    train = list(dm.train_dataloader())
    assert len(train) == 3
    for batch in train:
        assert batch["input_ids"].shape == batch["targets"].shape == (4, 128)
        assert torch.equal(batch["targets"][:2], torch.cat([batch["input_ids"][:2, 1:],
                                                               batch["targets"][:2, -1:]], 1))
        assert (batch["targets"][2:] != -100).sum(1).tolist() == [6, 6]  # passkey rows: the answer only
    assert not torch.equal(train[0]["input_ids"], train[1]["input_ids"])
    assert dm.vocab_size == 256
    val = list(dm.val_dataloader())
    assert sum(b["input_ids"].shape[0] for b in val) == 5 and val[0]["input_ids"].shape[1] == 64
    assert torch.equal(list(ByteLMDataModule(context=128, batch_size=4, steps_per_epoch=3, max_bytes=30_000,
                                             passkey_fraction=0.5, passkey_template="compact",
                                             seed=1).train_dataloader())[0]["input_ids"], train[0]["input_ids"])
    with pytest.raises(ValueError, match="length must be >= 252"):
        ByteLMDataModule(context=128, passkey_fraction=0.25)  # the paper template needs a longer context


def test_equal_token_windows_score_the_same_tokens_at_every_length():
    data = torch.arange(5000) % 251
    lengths = [64, 128, 256, 512]
    windows = equal_token_windows(data, lengths, 1024)
    for length, w in windows.items():
        assert w.shape == (1024 // length, length + 1) and w.dtype == torch.long
        torch.testing.assert_close(w[:, 1:].reshape(-1), data[1:1025])  # the same targets, in order
        torch.testing.assert_close(w[:, 0], data[torch.arange(0, 1024, length)])
    with pytest.raises(ValueError, match=r"divisible by every length; lengths \[96\]"):
        equal_token_windows(data, [64, 96], 1024)
    with pytest.raises(ValueError, match="data has 1000 bytes; 1024 scored tokens need 1025"):
        equal_token_windows(data[:1000], lengths, 1024)
    with pytest.raises(ValueError, match="tokens must be >= 1, got 0"):
        equal_token_windows(data, lengths, 0)
    with pytest.raises(TypeError, match="length must be an int"):
        equal_token_windows(data, [64.0], 1024)
