"""A byte-level language-modelling corpus built offline from text that ships with Python.

Nothing is downloaded: :func:`build_stdlib_corpus` reads the standard library's own ``*.py`` sources
(found with ``sysconfig.get_paths()["stdlib"]``; test suites, ``site-packages`` / ``dist-packages``,
virtual environments and ``__pycache__`` are left out) and the interactive-help texts of
``pydoc_data.topics``. :func:`load_text_files` reads a user's own UTF-8 text files instead.

Vocabulary: the 256 byte values, :data:`BYTE_VOCAB_SIZE`. There are no special ids: documents are
joined with the byte :data:`DOC_SEPARATOR` (``0x00``), which never occurs in the standard-library
texts, and masks (not padding ids) mark what a loss should ignore. A model that needs a padding id
can use ``vocab_size = BYTE_VOCAB_SIZE + 1`` and id 256.

Size on CPython 3.11.7 (measured): 812 documents, 11,827,747 bytes (733 source files, 11,361,630
bytes, and 79 help topics, 464,970 bytes); reading them takes about 0.1 s and joining them into a
tensor about 0.02 s. Other Python versions give other sizes: ``len(corpus)`` and
``corpus.num_bytes`` report them.

Example:
    >>> from pe_toolkit.data.text_corpus import build_stdlib_corpus, random_windows
    >>> corpus = build_stdlib_corpus(max_bytes=100_000, seed=0)
    >>> corpus.num_bytes
    100000
    >>> train, val = corpus.split(val_fraction=0.1, seed=0)
    >>> train.dtype, train.dim()
    (torch.uint8, 1)
    >>> random_windows(train, 64, 8, torch.Generator().manual_seed(0)).shape
    torch.Size([8, 65])
"""

from __future__ import annotations

import os
import random
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

BYTE_VOCAB_SIZE = 256
"""Number of byte ids (``0..255``)."""

DOC_SEPARATOR = 0
"""The byte placed between two documents by :func:`join_documents` (``0x00``)."""

TEXT_SUFFIXES: tuple[str, ...] = (".txt", ".md", ".py")
"""File suffixes :func:`load_text_files` reads from a directory when ``recursive=True``."""

# Directory names pruned from the standard-library walk: third-party packages, test suites, caches.
_EXCLUDED_DIRS = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"})
# pydoc_data/topics.py is the help texts as Python source; they enter once, as topic documents.
_EXCLUDED_FILES = frozenset({"pydoc_data/topics.py"})


# ---------------------------------------------------------------------------------------------------
# Validation helpers shared by the data package
# ---------------------------------------------------------------------------------------------------


def _check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def _check_fraction(name: str, value: Any, *, open_low: bool = False, open_high: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} ({value!r})")
    value = float(value)
    low_ok = value > 0.0 if open_low else value >= 0.0
    high_ok = value < 1.0 if open_high else value <= 1.0
    if not (low_ok and high_ok):  # also rejects NaN
        interval = ("(" if open_low else "[") + "0, 1" + (")" if open_high else "]")
        raise ValueError(f"{name} must be in {interval}, got {value}")
    return value


def _check_byte_tensor(name: str, data: Any) -> Tensor:
    if not isinstance(data, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(data).__name__}")
    if data.dim() != 1 or data.is_floating_point() or data.is_complex() or data.dtype == torch.bool:
        raise ValueError(f"{name} must be a 1-D integer tensor of byte ids, got {tuple(data.shape)} {data.dtype}")
    return data


# ---------------------------------------------------------------------------------------------------
# Documents and the corpus
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Document:
    """One text document: a unique ``name`` (a relative path or a topic) and its UTF-8 ``data``."""

    name: str
    data: bytes

    def __len__(self) -> int:
        return len(self.data)


def join_documents(documents: Iterable[Document], separator: int = DOC_SEPARATOR) -> Tensor:
    """The documents' bytes in the given order, one ``separator`` byte between two documents.

    Returns:
        A 1-D ``torch.uint8`` tensor of ``sum(len(d)) + len(documents) - 1`` bytes (empty if none).
    """
    _check_int("separator", separator, minimum=0, maximum=255)
    joined = bytes([separator]).join(d.data for d in documents)
    if not joined:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(joined), dtype=torch.uint8)


class TextCorpus:
    """Named documents with a seeded, document-level train / validation split.

    Documents are kept sorted by name, so everything derived from a corpus (splits, tensors) depends
    only on its contents and the seed, never on the order a filesystem lists files in.

    Args:
        documents: :class:`Document` objects or ``(name, bytes)`` pairs; names must be unique.

    Raises:
        ValueError: two documents share a name.
    """

    def __init__(self, documents: Iterable[Document | tuple[str, bytes]]) -> None:
        docs = []
        for d in documents:
            name, data = (d.name, d.data) if isinstance(d, Document) else d
            if not isinstance(name, str) or not isinstance(data, (bytes, bytearray)):
                raise TypeError(f"a document is (name: str, data: bytes), got ({type(name).__name__}, "
                                f"{type(data).__name__})")
            docs.append(Document(name, bytes(data)))
        docs.sort(key=lambda d: d.name)
        for a, b in zip(docs, docs[1:]):
            if a.name == b.name:
                raise ValueError(f"TextCorpus: document names must be unique, {a.name!r} appears twice")
        self.documents: tuple[Document, ...] = tuple(docs)

    def __len__(self) -> int:
        return len(self.documents)

    def __iter__(self) -> Iterator[Document]:
        return iter(self.documents)

    def __repr__(self) -> str:
        return f"TextCorpus({len(self)} documents, {self.num_bytes:,} bytes)"

    @property
    def names(self) -> list[str]:
        """Document names, sorted."""
        return [d.name for d in self.documents]

    @property
    def num_bytes(self) -> int:
        """Total bytes of all documents (separators not counted)."""
        return sum(len(d) for d in self.documents)

    def to_tensor(self) -> Tensor:
        """All documents in name order, joined with :data:`DOC_SEPARATOR`: a 1-D ``uint8`` tensor."""
        return join_documents(self.documents)

    def split_documents(self, val_fraction: float = 0.1, seed: int = 0) -> tuple[list[Document], list[Document]]:
        """Documents of the train and validation sides (each side in its shuffled order).

        The sorted documents are shuffled with ``random.Random(seed)``; the validation side is the
        shortest prefix of that order holding at least ``val_fraction`` of the corpus bytes (so at
        least one document), the train side is the rest (never empty). Every document lands on
        exactly one side.

        Raises:
            ValueError: ``val_fraction`` not in ``(0, 1)``, or fewer than two documents.
        """
        val_fraction = _check_fraction("val_fraction", val_fraction, open_low=True, open_high=True)
        _check_int("seed", seed)
        if len(self.documents) < 2:
            raise ValueError(f"TextCorpus.split needs at least 2 documents, the corpus has {len(self.documents)}")
        order = list(self.documents)
        random.Random(seed).shuffle(order)
        target = val_fraction * self.num_bytes
        taken, count = 0, 0
        while count < len(order) - 1 and (count == 0 or taken < target):
            taken += len(order[count])
            count += 1
        return order[count:], order[:count]

    def split(self, val_fraction: float = 0.1, seed: int = 0) -> tuple[Tensor, Tensor]:
        """Train and validation bytes: :meth:`split_documents`, each side joined by :func:`join_documents`.

        Returns:
            ``(train_bytes, val_bytes)``: 1-D ``torch.uint8`` tensors.
        """
        train, val = self.split_documents(val_fraction, seed)
        return join_documents(train), join_documents(val)

    def subset(self, max_bytes: int, seed: int = 0) -> TextCorpus:
        """A corpus of exactly ``min(max_bytes, num_bytes)`` bytes, documents chosen at random.

        Documents are taken whole in a ``random.Random(seed)`` shuffle of the sorted order until the
        budget is reached; the last one taken is cut at the budget (it keeps its name).
        """
        _check_int("max_bytes", max_bytes, minimum=1)
        _check_int("seed", seed)
        if max_bytes >= self.num_bytes:
            return self
        order = list(self.documents)
        random.Random(seed).shuffle(order)
        chosen, left = [], max_bytes
        for doc in order:
            if left == 0:
                break
            chosen.append(doc if len(doc) <= left else Document(doc.name, doc.data[:left]))
            left -= len(chosen[-1])
        return TextCorpus(chosen)


# ---------------------------------------------------------------------------------------------------
# Sources: the standard library, a user's files
# ---------------------------------------------------------------------------------------------------


def _is_virtualenv(path: str) -> bool:
    return os.path.exists(os.path.join(path, "pyvenv.cfg")) or os.path.realpath(path) == os.path.realpath(sys.prefix)


def stdlib_source_files() -> list[Path]:
    """The standard library's ``*.py`` files that :func:`build_stdlib_corpus` reads, sorted.

    Directories named ``site-packages``, ``dist-packages``, ``test``, ``tests``, ``idle_test`` or
    ``__pycache__`` are skipped, and so is any virtual environment (a directory holding
    ``pyvenv.cfg``, or ``sys.prefix``) below the library directory; ``pydoc_data/topics.py`` is
    skipped because its texts are read as topic documents.
    """
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = [
            s for s in subdirs if s not in _EXCLUDED_DIRS and not _is_virtualenv(os.path.join(directory, s))
        ]
        for name in names:
            if name.endswith(".py"):
                path = Path(directory, name)
                if path.relative_to(root).as_posix() not in _EXCLUDED_FILES:
                    files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def build_stdlib_corpus(max_bytes: int | None = None, seed: int = 0) -> TextCorpus:
    """The byte corpus of Python's own standard-library sources and ``pydoc`` help topics.

    Document names are ``"stdlib/<path relative to the library>"`` (e.g. ``"stdlib/json/decoder.py"``)
    and ``"pydoc_topics/<topic>"``. The full corpus on CPython 3.11.7 is 812 documents, 11,827,747
    bytes; building it takes about 0.1 s. Nothing is cached.

    Args:
        max_bytes: keep exactly ``min(max_bytes, total)`` bytes (:meth:`TextCorpus.subset`);
            ``None`` keeps everything.
        seed: which documents :meth:`TextCorpus.subset` keeps under ``max_bytes`` (unused without it).

    Raises:
        ValueError: ``max_bytes < 1``.
    """
    if max_bytes is not None:
        _check_int("max_bytes", max_bytes, minimum=1)
    _check_int("seed", seed)
    root = sysconfig.get_paths()["stdlib"]
    documents = [
        Document("stdlib/" + path.relative_to(root).as_posix(), path.read_bytes()) for path in stdlib_source_files()
    ]
    from pydoc_data.topics import topics  # a plain dict of str, part of the standard library

    documents += [Document(f"pydoc_topics/{name}", text.encode("utf-8")) for name, text in topics.items()]
    corpus = TextCorpus(documents)
    return corpus if max_bytes is None else corpus.subset(max_bytes, seed)


def _read_utf8(path: Path) -> bytes:
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"load_text_files: {str(path)!r} is not UTF-8 text (byte {error.start}: {error.reason})"
        ) from None
    return data


def load_text_files(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    recursive: bool = False,
    suffixes: Sequence[str] = TEXT_SUFFIXES,
) -> TextCorpus:
    """A corpus of a user's UTF-8 text files, one document per file.

    A file is named by its path as given (POSIX separators); a file found in a directory is named
    ``"<directory as given>/<path relative to it>"``.

    Args:
        paths: files, or directories when ``recursive=True`` (a single path is accepted too).
        recursive: read every file below a directory whose suffix is in ``suffixes``, in sorted order.
        suffixes: the suffixes read from directories (default ``.txt``, ``.md``, ``.py``).

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: no paths; a path is a directory and ``recursive`` is False; a directory holds no
            file with one of ``suffixes``; a file is not valid UTF-8 (the message names the file);
            two paths name the same document.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("load_text_files: paths is empty, give at least one file or directory")
    suffixes = tuple(suffixes)
    documents = []
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"load_text_files: no such file or directory: {str(path)!r}")
        if path.is_dir():
            if not recursive:
                raise ValueError(
                    f"load_text_files: {str(path)!r} is a directory; pass recursive=True to read its "
                    f"{'/'.join('*' + s for s in suffixes)} files"
                )
            found = sorted(
                (p for p in path.rglob("*") if p.is_file() and p.suffix in suffixes),
                key=lambda p: p.relative_to(path).as_posix(),
            )
            if not found:
                raise ValueError(f"load_text_files: directory {str(path)!r} holds no file ending in {suffixes}")
            documents += [Document(f"{path.as_posix()}/{p.relative_to(path).as_posix()}", _read_utf8(p)) for p in found]
        else:
            documents.append(Document(path.as_posix(), _read_utf8(path)))
    return TextCorpus(documents)


# ---------------------------------------------------------------------------------------------------
# Windows for next-byte prediction
# ---------------------------------------------------------------------------------------------------


def random_windows(data: Tensor, length: int, batch: int, generator: torch.Generator | None = None) -> Tensor:
    """``batch`` contiguous windows of ``length + 1`` bytes at uniformly random starts.

    A window ``w`` trains next-byte prediction: inputs ``w[:, :-1]``, targets ``w[:, 1:]``.

    Args:
        data: ``(N,)`` integer byte ids (e.g. :meth:`TextCorpus.split`'s output), ``N >= length + 1``.
        length: the context length (number of predicted bytes per window).
        batch: number of windows.
        generator: the ``torch.Generator`` drawing the starts (the global one if ``None``).

    Returns:
        ``(batch, length + 1)`` ``torch.long``; row ``i`` equals ``data[s_i : s_i + length + 1]``.

    Raises:
        ValueError: ``data`` is shorter than ``length + 1``; ``length`` or ``batch`` < 1.
    """
    data = _check_byte_tensor("data", data)
    _check_int("length", length, minimum=1)
    _check_int("batch", batch, minimum=1)
    if data.numel() < length + 1:
        raise ValueError(f"random_windows: data has {data.numel()} bytes, a window of length {length} needs "
                         f"{length + 1}")
    starts = torch.randint(0, data.numel() - length, (batch,), generator=generator)
    return data[starts[:, None] + torch.arange(length + 1)].long()  # (batch, length + 1)


def sequential_windows(data: Tensor, length: int, max_windows: int | None = None) -> Tensor:
    """Deterministic evaluation windows of ``length + 1`` bytes that predict disjoint bytes.

    Window ``j`` is ``data[j * length : j * length + length + 1]`` (consecutive windows share one
    byte: the last target of one is the first input of the next), so each byte ``1..N-1`` is a target
    at most once. There are ``A = (N - 1) // length`` such windows; with ``max_windows < A``,
    ``max_windows`` of them evenly spread over the data are returned, in order.

    Returns:
        ``(W, length + 1)`` ``torch.long`` with ``W = min(A, max_windows)``.

    Raises:
        ValueError: ``data`` is shorter than ``length + 1``; ``length`` or ``max_windows`` < 1.
    """
    data = _check_byte_tensor("data", data)
    _check_int("length", length, minimum=1)
    if max_windows is not None:
        _check_int("max_windows", max_windows, minimum=1)
    available = (data.numel() - 1) // length
    if available < 1:
        raise ValueError(f"sequential_windows: data has {data.numel()} bytes, a window of length {length} needs "
                         f"{length + 1}")
    if max_windows is None or max_windows >= available:
        index = torch.arange(available)
    else:  # spacing >= 1, so rounding keeps the indices distinct
        index = torch.linspace(0, available - 1, max_windows, dtype=torch.float64).round().long()
    return data[index[:, None] * length + torch.arange(length + 1)].long()  # (W, length + 1)


def equal_token_windows(data: Tensor, lengths: Sequence[int], tokens: int) -> dict[int, Tensor]:
    """Windows of every length cut from the same ``tokens + 1`` bytes, so each length scores the same targets.

    For perplexity against length (length-extrapolation benchmarks): window ``j`` of length ``n`` is
    ``data[j n : (j + 1) n + 1]`` (:func:`sequential_windows`); with ``n`` dividing ``tokens`` the
    ``tokens / n`` windows predict bytes ``1 .. tokens`` exactly once, at every length.

    Returns:
        ``{length: (tokens // length, length + 1) torch.long}``.

    Raises:
        ValueError: ``tokens`` not divisible by a length, or ``data`` shorter than ``tokens + 1`` bytes.
        TypeError: ``tokens`` or a length not an int.
    """
    _check_int("tokens", tokens, minimum=1)
    for length in lengths:
        _check_int("length", length, minimum=1)
    bad = [n for n in lengths if tokens % n]
    if bad:
        raise ValueError(f"tokens={tokens} must be divisible by every length; lengths {bad} do not divide it")
    data = _check_byte_tensor("data", data)
    if data.numel() < tokens + 1:
        raise ValueError(f"data has {data.numel()} bytes; {tokens} scored tokens need {tokens + 1}")
    text = data[: tokens + 1]
    return {n: sequential_windows(text, n) for n in lengths}


def unigram_entropy(data: Tensor) -> float:
    """Entropy in nats of the byte distribution of ``data`` (1-D bytes): the loss of a model that ignores context.

    A language model whose next-byte loss is not below it has learned nothing from the context (e.g. it diverged).

    Example:
        >>> round(unigram_entropy(torch.tensor([0, 0, 1, 1], dtype=torch.uint8)), 4)  # ln 2
        0.6931
    """
    data = _check_byte_tensor("data", data)
    if data.numel() == 0 or int(data.min()) < 0 or int(data.max()) >= BYTE_VOCAB_SIZE:
        raise ValueError(f"data must hold at least one byte id in [0, {BYTE_VOCAB_SIZE}), got {data.numel()} "
                         f"value(s)" + (f" in [{int(data.min())}, {int(data.max())}]" if data.numel() else ""))
    counts = torch.bincount(data.long(), minlength=BYTE_VOCAB_SIZE).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())
