"""Locally generated graph datasets (CSL, PATTERN, CLUSTER) and an edge-list loader.

Every dataset here is generated on this machine from a seed; nothing is downloaded. They are PyG
`InMemoryDataset`s with a real root directory (``root=None`` means
``$PE_TOOLKIT_CACHE/graphs/<name>``, default ``~/.cache/pe_toolkit/graphs/<name>``; PyG's own
``root=None`` would write into a literal ``./???/processed`` folder). The processed file name
encodes the format version and every generation parameter (plus a hash of ``pre_transform`` /
``pre_filter`` when given), so a changed configuration never loads a stale file: it generates a new
one next to the old, in ``<root>/processed/<tag>/<tag>.pt``. The hash is of ``repr(pre_transform)``:
a transform whose repr omits its options (PyG's ``AddRandomWalkPE()`` does; this package's
``RandomWalkPE(walk_length=8, ...)`` does not) needs ``force_reload=True`` after a change, and a
lambda's repr changes every run (no reuse).

References:
    - Murphy, Srinivasan, Rao, Ribeiro, "Relational Pooling for Graph Representations", ICML 2019
      (arXiv 1903.02541): the Circular Skip Links (CSL) graphs.
    - Dwivedi, Joshi, Luu, Laurent, Bengio, Bresson, "Benchmarking Graph Neural Networks",
      JMLR 24(43), 2023 (arXiv 2003.00982): the CSL protocol (5-fold CV) and the SBM PATTERN and
      CLUSTER datasets (``data/SBMs/generate_SBM_{PATTERN,CLUSTER}.ipynb`` in
      ``graphdeeplearning/benchmarking-gnns``).

Conventions shared by all datasets: ``edge_index`` is undirected (both directions stored), coalesced
(sorted, no duplicates) and free of self-loops; node ids are ``0 .. num_nodes - 1``.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from pe_toolkit.atomic import atomic_torch_save

__all__ = [
    "CSL_SKIPS",
    "FORMAT_VERSION",
    "CLUSTERDataset",
    "CSLDataset",
    "PATTERNDataset",
    "circulant_edge_index",
    "csl_folds",
    "default_root",
    "load_edge_list",
    "random_sparse_graph",
    "sbm_splits",
]

#: Bumped whenever the stored format or the generator changes; part of every processed file name.
FORMAT_VERSION = 2  # 2: PATTERN draws a size per pattern (5..34) and has 100 patterns

#: Skip lengths of the 10 CSL classes (Murphy et al. 2019; Benchmarking GNNs).
CSL_SKIPS: tuple[int, ...] = (2, 3, 4, 5, 6, 9, 11, 12, 13, 16)


def default_root(name: str) -> str:
    """Default dataset directory: ``$PE_TOOLKIT_CACHE/graphs/<name>`` (``~/.cache/pe_toolkit`` if unset)."""
    base = os.environ.get("PE_TOOLKIT_CACHE") or str(Path.home() / ".cache" / "pe_toolkit")
    return str(Path(base).expanduser() / "graphs" / name)


# --------------------------------------------------------------------------------------------------
# validation helpers


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _check_prob(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a float in [0, 1], got {type(value).__name__} {value!r}")
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return value


def _check_range(name: str, value: object) -> tuple[int, int]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a (min, max) pair of ints, got {value!r}")
    low = _check_int(f"{name}[0]", value[0], 1)
    high = _check_int(f"{name}[1]", value[1], 1)
    if low > high:
        raise ValueError(f"{name} must satisfy min <= max, got {tuple(value)}")
    return low, high


def _fmt(value: float) -> str:
    """Float formatting for file names: shortest round-trip repr (0.5, 0.35, 1e-05)."""
    return repr(float(value))


# --------------------------------------------------------------------------------------------------
# base class


CACHE_FORMAT = 2  # layout of the processed file: a dict, see _GeneratedDataset.process


def _digest_tensors(mapping: dict) -> str:
    """sha256 over the keys, dtypes, shapes and bytes of a ``{str: Tensor | dict | other}`` mapping."""
    h = hashlib.sha256()

    def feed(prefix: str, value) -> None:
        if isinstance(value, dict):
            for key in sorted(value, key=str):
                feed(f"{prefix}/{key}", value[key])
        elif isinstance(value, Tensor):
            t = value.detach().cpu().contiguous()
            h.update(f"{prefix}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(f"{prefix}|{value!r}|".encode())

    feed("", mapping)
    return h.hexdigest()


class StaleCacheError(ValueError):
    """A processed file that is unreadable, of another format, another configuration, or corrupted."""


class _GeneratedDataset(InMemoryDataset):
    """Base: a seeded generator stored in ``<root>/processed/<tag>/<tag>.pt``, ``tag`` = :attr:`file_tag`.

    Safe cache: the processed file is a dict ``{"format": CACHE_FORMAT, "config": sha256 of the generation
    configuration, "digest": sha256 of the stored tensors, "data": ..., "slices": ...}`` read with
    ``torch.load(weights_only=True)`` and no fallback (PyG's own loader retries with ``weights_only=False``,
    which would unpickle a crafted file; its ``pre_transform.pt`` check also loads unsafely, so
    :meth:`_process` is overridden to never read those bookkeeping files). A file that cannot be read
    safely, has another format or configuration hash, or whose tensors do not match the digest is
    regenerated with a warning.
    """

    name: str = "generated"

    def __init__(
        self,
        root: str | os.PathLike | None,
        transform: Callable | None,
        pre_transform: Callable | None,
        pre_filter: Callable | None,
        force_reload: bool,
        log: bool,
    ) -> None:
        root = default_root(self.name) if root is None else str(Path(os.fspath(root)).expanduser())
        super().__init__(root, transform, pre_transform, pre_filter, log=log, force_reload=force_reload)
        path = self.processed_paths[0]
        try:
            self._load_checked(path)
        except StaleCacheError as error:
            warnings.warn(f"{type(self).__name__}: rebuilding the processed file {path}: {error}", stacklevel=2)
            self.process()
            self._load_checked(path)

    @property
    def config_hash(self) -> str:
        """sha256 of the generation configuration: class, :attr:`file_tag` (parameters, format version),
        and the reprs of ``pre_transform`` and ``pre_filter``."""
        key = f"{type(self).__module__}.{type(self).__qualname__}|{self.file_tag}|{self.pre_transform!r}|"
        key += f"{self.pre_filter!r}"
        return hashlib.sha256(key.encode()).hexdigest()

    def _load_checked(self, path: str) -> None:
        """Load ``path`` with ``weights_only=True`` only; raise :class:`StaleCacheError` for anything not valid."""
        try:
            out = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # truncated zip, junk bytes, disallowed globals in a pickle: all unusable
            raise StaleCacheError(f"cannot be read safely ({type(error).__name__}: {str(error)[:200]})") from None
        if not isinstance(out, dict) or out.get("format") != CACHE_FORMAT:
            found = out.get("format") if isinstance(out, dict) else type(out).__name__
            raise StaleCacheError(f"cache format {found!r}, expected {CACHE_FORMAT}")
        if out.get("config") != self.config_hash:
            raise StaleCacheError("it was generated with another configuration")
        data, slices = out.get("data"), out.get("slices")
        if not isinstance(data, dict) or not isinstance(slices, dict):
            raise StaleCacheError("data or slices missing")
        if out.get("digest") != _digest_tensors({"data": data, "slices": slices}):
            raise StaleCacheError("its tensors do not match the stored digest (corrupted)")
        try:
            self.data, self.slices = Data.from_dict(data), slices
        except Exception as error:
            raise StaleCacheError(f"data cannot be rebuilt ({type(error).__name__}: {error})") from None

    def _process(self) -> None:
        # PyG's version torch.load(weights_only=False)s pre_transform.pt / pre_filter.pt; here they are only
        # written (kept for PyG's layout) and never read: pre_transform / pre_filter are part of file_tag.
        if not self.force_reload and all(os.path.exists(p) for p in self.processed_paths):
            return
        os.makedirs(self.processed_dir, exist_ok=True)
        self.process()
        for name, value in (("pre_transform", self.pre_transform), ("pre_filter", self.pre_filter)):
            atomic_torch_save(repr(value), os.path.join(self.processed_dir, f"{name}.pt"))

    # subclasses: the parameter part of the file name and the generator
    def _config_tag(self) -> str:
        raise NotImplementedError

    def _generate(self) -> list[Data]:
        raise NotImplementedError

    @property
    def raw_file_names(self) -> list[str]:
        return []  # nothing to download; `download` is not overridden so PyG never calls it

    @property
    def file_tag(self) -> str:
        """``<name>_v<FORMAT_VERSION>_<parameters>[_pre<hash>]``: names the processed folder and file."""
        tag = f"{self.name}_v{FORMAT_VERSION}_{self._config_tag()}"
        if self.pre_transform is not None or self.pre_filter is not None:
            # PyG only warns when these change and then loads the stale file; hash them into the name.
            key = f"{self.pre_transform!r}|{self.pre_filter!r}".encode()
            tag += "_pre" + hashlib.sha1(key).hexdigest()[:10]
        return tag

    @property
    def processed_dir(self) -> str:
        # One folder per configuration, so PyG's pre_transform.pt / pre_filter.pt bookkeeping files
        # belong to that configuration too (a shared folder would warn about a mismatch spuriously).
        return os.path.join(self.root, "processed", self.file_tag)

    @property
    def processed_file_names(self) -> list[str]:
        return [self.file_tag + ".pt"]

    def process(self) -> None:
        data_list = self._generate()
        if self.pre_filter is not None:
            data_list = [d for d in data_list if self.pre_filter(d)]
        if self.pre_transform is not None:
            data_list = [self.pre_transform(d) for d in data_list]
        data, slices = self.collate(data_list)
        data = data.to_dict()
        payload = {"format": CACHE_FORMAT, "config": self.config_hash,
                   "digest": _digest_tensors({"data": data, "slices": slices}), "data": data, "slices": slices}
        # a unique temporary name, fsynced and renamed: an interrupted run never leaves a truncated file that
        # looks processed, and two processes (or threads) generating the same dataset never share a temporary
        atomic_torch_save(payload, self.processed_paths[0])


def _undirected(pairs_u: np.ndarray, pairs_v: np.ndarray, num_nodes: int) -> Tensor:
    edge_index = torch.from_numpy(np.stack([pairs_u, pairs_v]).astype(np.int64))
    return to_undirected(edge_index, num_nodes=num_nodes)


# --------------------------------------------------------------------------------------------------
# CSL


def circulant_edge_index(num_nodes: int, skips: Sequence[int] = (1,)) -> Tensor:
    """Edges of the circulant graph C(n, S): node i is joined to i ± s (mod n) for every s in S.

    Args:
        num_nodes: n.
        skips: the jump lengths S (CSL uses ``(1, s)``), each in ``[1, n - 1]``.

    Returns:
        ``(2, E)`` long tensor, undirected (both directions) and coalesced.
    """
    num_nodes = _check_int("num_nodes", num_nodes, 2)
    skips = [_check_int("skip", s, 1) for s in skips]
    for s in skips:
        if s >= num_nodes:
            raise ValueError(f"circulant_edge_index: skip must be in [1, {num_nodes - 1}], got {s}")
    nodes = np.arange(num_nodes)
    u = np.concatenate([nodes for _ in skips])
    v = np.concatenate([(nodes + s) % num_nodes for s in skips])
    return _undirected(u, v, num_nodes)


def random_sparse_graph(num_nodes: int, seed: int = 0, *, edges_per_node: int = 2) -> Data:
    """A connected random sparse graph: the ring ``i -- i+1 (mod N)`` plus ``edges_per_node * N`` node pairs drawn
    uniformly (numpy ``default_rng(seed)``), self-loops dropped, undirected and coalesced; mean degree about
    ``2 + 2 * edges_per_node`` (~6 by default). A scalable test input for graph PEs (the ring keeps it connected).

    Returns:
        ``Data(edge_index (2, E), num_nodes=N)``.
    """
    num_nodes = _check_int("random_sparse_graph: num_nodes", num_nodes, 1)
    edges_per_node = _check_int("random_sparse_graph: edges_per_node", edges_per_node, 0)
    rng = np.random.default_rng(_check_int("random_sparse_graph: seed", seed, 0))
    ring = np.arange(num_nodes)
    u = np.concatenate([ring, rng.integers(0, num_nodes, edges_per_node * num_nodes)])
    v = np.concatenate([(ring + 1) % num_nodes, rng.integers(0, num_nodes, edges_per_node * num_nodes)])
    edge_index, _ = remove_self_loops(torch.from_numpy(np.stack([u, v])).long())
    edge_index = coalesce(to_undirected(edge_index, num_nodes=num_nodes), num_nodes=num_nodes)
    return Data(edge_index=edge_index, num_nodes=num_nodes)


class CSLDataset(_GeneratedDataset):
    """Circular Skip Links graphs (graph classification, 10 classes, 1-WL cannot separate them).

    Class c is the circulant graph C(41, {1, s_c}) with s_c = ``CSL_SKIPS[c]`` =
    2, 3, 4, 5, 6, 9, 11, 12, 13, 16: a 41-cycle plus skip links of length s_c. Each class holds
    ``graphs_per_class`` = 15 copies with independently drawn random node permutations, 150 graphs
    in total, as in Murphy et al. (ICML 2019, arXiv 1903.02541) and Benchmarking GNNs (Dwivedi et
    al., JMLR 2023, arXiv 2003.00982). Every graph is 4-regular with 82 undirected edges. The
    original pickle has self-loops that Benchmarking GNNs removes; here there are none.

    Graph g of class c with permutation ``perm`` has the edges ``(perm[i], perm[j])`` for every
    edge ``(i, j)`` of C(41, {1, s_c}); ``perm`` is stored so tests and users can undo it.

    Attributes of each ``Data`` (N = ``num_nodes`` = 41):
        - ``x``: ``(N, 1)`` float32 zeros, a constant feature as in Benchmarking GNNs (no node
          carries information; models need a positional encoding to beat chance, 10%).
        - ``edge_index``: ``(2, 4N)`` long, undirected, coalesced, no self-loops.
        - ``y``: ``(1,)`` long, the class index c (graph-level).
        - ``skip``: ``(1,)`` long, s_c.
        - ``perm``: ``(N,)`` long; node i of C(41, {1, s_c}) is node ``perm[i]`` of this graph.

    Args:
        root: dataset directory (``None``: :func:`default_root` ``("CSL")``).
        num_nodes: cycle length (paper: 41).
        skips: one skip length per class (paper: :data:`CSL_SKIPS`); each in ``[2, num_nodes / 2)``
            so that every graph is 4-regular; distinct.
        graphs_per_class: permuted copies per class (paper: 15).
        seed: seed of the permutations (numpy ``default_rng``).
        transform, pre_transform, pre_filter, force_reload, log: as in PyG.

    Raises:
        ValueError / TypeError: on an invalid parameter, naming it.
    """

    name = "CSL"

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        num_nodes: int = 41,
        skips: Sequence[int] = CSL_SKIPS,
        graphs_per_class: int = 15,
        seed: int = 0,
        transform: Callable | None = None,
        pre_transform: Callable | None = None,
        pre_filter: Callable | None = None,
        force_reload: bool = False,
        log: bool = False,
    ) -> None:
        self.num_nodes_per_graph = _check_int("num_nodes", num_nodes, 5)
        self.skips = tuple(_check_int("skips[i]", s, 2) for s in skips)
        if not self.skips:
            raise ValueError("CSL: skips must not be empty")
        if len(set(self.skips)) != len(self.skips):
            raise ValueError(f"CSL: skips must be distinct, got {self.skips}")
        for s in self.skips:
            if not 2 <= s < num_nodes / 2:
                raise ValueError(f"CSL: every skip must be in [2, num_nodes/2) = [2, {num_nodes / 2}), got {s}")
        self.graphs_per_class = _check_int("graphs_per_class", graphs_per_class, 1)
        self.seed = _check_int("seed", seed, 0)
        super().__init__(root, transform, pre_transform, pre_filter, force_reload, log)

    def _config_tag(self) -> str:
        skips = "-".join(str(s) for s in self.skips)
        return f"n{self.num_nodes_per_graph}_s{skips}_g{self.graphs_per_class}_seed{self.seed}"

    def _generate(self) -> list[Data]:
        n = self.num_nodes_per_graph
        rng = np.random.default_rng(self.seed)
        data_list = []
        for cls, s in enumerate(self.skips):
            base = circulant_edge_index(n, (1, s))
            for _ in range(self.graphs_per_class):
                perm = torch.from_numpy(rng.permutation(n).astype(np.int64))
                edge_index = coalesce(perm[base], num_nodes=n)
                data_list.append(
                    Data(
                        x=torch.zeros(n, 1),
                        edge_index=edge_index,
                        y=torch.tensor([cls]),
                        skip=torch.tensor([s]),
                        perm=perm,
                        num_nodes=n,
                    )
                )
        return data_list


def csl_folds(dataset: CSLDataset, num_folds: int = 5, seed: int = 0) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Stratified k-fold cross-validation splits for CSL, as in Benchmarking GNNs.

    Benchmarking GNNs (``data/CSL.py``) uses sklearn's ``StratifiedKFold(5, shuffle=True)`` for the
    test folds and, inside each fold, ``train_test_split(test_size=0.25, stratify=y)`` of the rest:
    train/val/test = 90/30/30 = 3:1:1 on 150 graphs. This reimplements that protocol without
    sklearn (same proportions, not the same random draws):

    1. Per class, shuffle its graph indices (numpy ``default_rng(seed)``) and cut them into
       ``num_folds`` nearly equal chunks (``np.array_split``); test fold k is the union of chunk k
       of every class. The test folds partition the dataset.
    2. For fold k, the remaining indices of each class are cut into train (first 3/4, rounded) and
       val (the last 1/4) in the shuffled order, so val is also stratified.

    With the defaults on 150 graphs: every fold has 90 train / 30 val / 30 test graphs, i.e. 9 / 3 / 3
    per class.

    Args:
        dataset: a :class:`CSLDataset` (anything with a graph-level ``y``).
        num_folds: k >= 2.
        seed: seed of the shuffles.

    Returns:
        ``num_folds`` tuples ``(train_idx, val_idx, test_idx)`` of sorted long tensors.
    """
    num_folds = _check_int("num_folds", num_folds, 2)
    seed = _check_int("seed", seed, 0)
    y = np.asarray(dataset.y).reshape(-1)
    if len(y) != len(dataset):
        raise ValueError(f"csl_folds: expected one graph-level label per graph, got {len(y)} for {len(dataset)}")
    rng = np.random.default_rng(seed)
    chunks = {}  # class -> list of num_folds index arrays
    for cls in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == cls))
        if len(members) < num_folds:
            raise ValueError(f"csl_folds: class {cls} has {len(members)} graphs, fewer than num_folds={num_folds}")
        chunks[cls] = np.array_split(members, num_folds)
    folds = []
    for k in range(num_folds):
        train, val, test = [], [], []
        for parts in chunks.values():
            test.append(parts[k])
            rest = np.concatenate([parts[j] for j in range(num_folds) if j != k])
            n_train = round(0.75 * len(rest))
            train.append(rest[:n_train])
            val.append(rest[n_train:])
        folds.append(tuple(torch.from_numpy(np.sort(np.concatenate(p))).long() for p in (train, val, test)))
    return folds


# --------------------------------------------------------------------------------------------------
# SBM datasets (PATTERN, CLUSTER)


def _sbm_pairs(rng: np.random.Generator, blocks: np.ndarray, prob: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sample each unordered pair {i, j} (i < j) independently with probability prob[blocks[i], blocks[j]]."""
    iu, ju = np.triu_indices(len(blocks), k=1)
    keep = rng.random(len(iu)) < prob[blocks[iu], blocks[ju]]
    return iu[keep], ju[keep]


def _relabel(rng: np.random.Generator, n: int, u: np.ndarray, v: np.ndarray, *node_arrays: np.ndarray):
    """Shuffle node ids (the notebooks' ``schuffle``): old node i becomes new node perm[i]."""
    perm = rng.permutation(n)
    inv = np.empty(n, dtype=np.int64)
    inv[perm] = np.arange(n)
    return (perm[u], perm[v], *[a[inv] for a in node_arrays])


class PATTERNDataset(_GeneratedDataset):
    """SBM PATTERN: node classification, is the node part of the injected pattern P?

    From Benchmarking GNNs (Dwivedi et al., JMLR 2023, arXiv 2003.00982), as its released generator
    ``data/SBMs/generate_SBM_PATTERN.ipynb`` (the "v2" code that made the published dataset) draws it:

    1. ``num_patterns`` patterns, drawn once per dataset. Pattern k has ``m_k`` nodes, ``m_k`` uniform in
       ``pattern_size`` (both ends inclusive; the default 5..34 is the notebook's ``np.random.randint(5, 35)``),
       each pair of them an edge with probability ``p_pattern``, and fixed node features uniform in
       ``{0, .., num_node_types - 1}``.
    2. Graph g uses pattern ``g % num_patterns`` (the notebook generates 100 train, 20 val and 20 test graphs
       per pattern; :func:`sbm_splits` stratifies by pattern the same way). A stochastic block model of
       ``num_communities`` communities with sizes uniform in ``community_size_range`` (5..34 by default,
       ``randint(5, 35)``), edge probability ``p`` inside a community and ``q`` between two, node features
       uniform in ``{0, .., num_node_types - 1}``; then the pattern's nodes are added, each joined to each
       community node with probability ``q_pattern``, and the node ids shuffled. Label 1 on the pattern's
       nodes, 0 elsewhere.

    Parameters, here (default) vs the paper / generator:

    | parameter | default here | generator (v2, the released data) |
    | --- | --- | --- |
    | num_communities | 5 | 5 (``nb_clusters``) |
    | community_size_range | (5, 34) | ``randint(5, 35)``: 5..34 (``size_min``, ``size_max``) |
    | p, q | 0.5, 0.35 | 0.5, 0.35 ("v4" of ``p`` / ``q`` in the notebook) |
    | pattern_size | (5, 34) | ``randint(5, 35)`` per pattern (``size_subgraph_min/max``) |
    | p_pattern | 0.5 | the notebook passes ``p`` (0.5) to ``random_pattern``: the same value |
    | q_pattern | 0.5 | 0.5 |
    | num_node_types | 3 | 3 (``vocab_size``) |
    | num_patterns | 100 | 100 (``nb_pattern_instances``) |
    | num_graphs | 1400 | 14,000 (10,000 / 2,000 / 2,000) |

    An int ``pattern_size`` fixes every pattern's size: 20 is the "v1" generator, which the paper's text and
    DGL's docs describe (graphs of 44..188 nodes).

    Attributes of each ``Data`` (N nodes, 30..204 with the defaults, mean ``97.5 + mean pattern size``, 117 on
    average over draws of the patterns; PyG lists ~118.9 nodes and ~6,098.9 edges for the released data, which
    this formula and the edge expectation of the tests give for a mean pattern size of ~21.4):
        - ``x``: ``(N,)`` long, categorical feature in ``[0, num_node_types)``; embed it with
          ``nn.Embedding(dataset.num_node_types, dim)``. Being categorical, it cannot take a
          concatenated PE: give PE transforms their own ``attr_name``.
        - ``edge_index``: ``(2, E)`` long, undirected, coalesced, no self-loops.
        - ``y``: ``(N,)`` long, 1 on pattern nodes and 0 elsewhere (node-level).
        - ``block``: ``(N,)`` long, community id in ``[0, num_communities)``, ``num_communities``
          on pattern nodes.
        - ``pattern_id``: ``(1,)`` long, which of the ``num_patterns`` patterns was injected.

    Args:
        root: dataset directory (``None``: :func:`default_root` ``("PATTERN")``).
        num_graphs, num_communities, community_size_range, p, q, pattern_size, p_pattern,
        q_pattern, num_node_types, num_patterns: see the table; ``pattern_size`` is an int (every
        pattern that size) or a ``(min, max)`` range.
        seed: seed of everything (numpy ``default_rng``).
        transform, pre_transform, pre_filter, force_reload, log: as in PyG.

    The paper's metric is mean per-class recall (``accuracy_SBM``); use :func:`sbm_splits` for
    splits stratified by pattern (the paper has 100 / 20 / 20 graphs per pattern).
    """

    name = "PATTERN"
    PAPER_SPLIT = (10_000, 2_000, 2_000)

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        num_graphs: int = 1400,
        num_communities: int = 5,
        community_size_range: tuple[int, int] = (5, 34),
        p: float = 0.5,
        q: float = 0.35,
        pattern_size: int | tuple[int, int] = (5, 34),
        p_pattern: float = 0.5,
        q_pattern: float = 0.5,
        num_node_types: int = 3,
        num_patterns: int = 100,
        seed: int = 0,
        transform: Callable | None = None,
        pre_transform: Callable | None = None,
        pre_filter: Callable | None = None,
        force_reload: bool = False,
        log: bool = False,
    ) -> None:
        self.num_graphs = _check_int("num_graphs", num_graphs, 1)
        self.num_communities = _check_int("num_communities", num_communities, 1)
        self.community_size_range = _check_range("community_size_range", community_size_range)
        self.p = _check_prob("p", p)
        self.q = _check_prob("q", q)
        if isinstance(pattern_size, (tuple, list)):
            self.pattern_size_range = _check_range("pattern_size", pattern_size)
        else:
            size = _check_int("pattern_size", pattern_size, 1)
            self.pattern_size_range = (size, size)
        self.p_pattern = _check_prob("p_pattern", p_pattern)
        self.q_pattern = _check_prob("q_pattern", q_pattern)
        self.num_node_types = _check_int("num_node_types", num_node_types, 1)
        self.num_patterns = _check_int("num_patterns", num_patterns, 1)
        self.seed = _check_int("seed", seed, 0)
        super().__init__(root, transform, pre_transform, pre_filter, force_reload, log)

    def _config_tag(self) -> str:
        lo, hi = self.community_size_range
        plo, phi = self.pattern_size_range
        return (
            f"g{self.num_graphs}_c{self.num_communities}_s{lo}-{hi}_p{_fmt(self.p)}_q{_fmt(self.q)}"
            f"_ps{plo}-{phi}_pp{_fmt(self.p_pattern)}_qp{_fmt(self.q_pattern)}"
            f"_t{self.num_node_types}_np{self.num_patterns}_seed{self.seed}"
        )

    def _generate(self) -> list[Data]:
        rng = np.random.default_rng(self.seed)
        c = self.num_communities
        plo, phi = self.pattern_size_range
        patterns = []  # (size, u, v, features) of each fixed pattern, in pattern-local ids
        for _ in range(self.num_patterns):
            m = int(rng.integers(plo, phi + 1))
            pu, pv = _sbm_pairs(rng, np.zeros(m, dtype=np.int64), np.array([[self.p_pattern]]))
            patterns.append((m, pu, pv, rng.integers(0, self.num_node_types, size=m)))
        # block c (the pattern) has q_pattern to every community; its internal edges are the fixed pattern
        prob = np.full((c + 1, c + 1), self.q)
        np.fill_diagonal(prob, self.p)
        prob[c, :] = prob[:, c] = self.q_pattern
        prob[c, c] = 0.0
        lo, hi = self.community_size_range
        data_list = []
        for g in range(self.num_graphs):
            k = g % self.num_patterns
            m, pu, pv, pfeat = patterns[k]
            sizes = rng.integers(lo, hi + 1, size=c)
            blocks = np.concatenate([np.repeat(np.arange(c), sizes), np.full(m, c)])
            n = len(blocks)
            u, v = _sbm_pairs(rng, blocks, prob)
            offset = n - m
            u = np.concatenate([u, pu + offset])
            v = np.concatenate([v, pv + offset])
            x = np.concatenate([rng.integers(0, self.num_node_types, size=n - m), pfeat])
            u, v, x, blocks = _relabel(rng, n, u, v, x, blocks)
            block = torch.from_numpy(blocks.astype(np.int64))
            data_list.append(
                Data(
                    x=torch.from_numpy(x.astype(np.int64)),
                    edge_index=_undirected(u, v, n),
                    y=(block == c).long(),
                    block=block,
                    pattern_id=torch.tensor([k]),
                    num_nodes=n,
                )
            )
        return data_list


class CLUSTERDataset(_GeneratedDataset):
    """SBM CLUSTER: semi-supervised node clustering, assign every node its community.

    From Benchmarking GNNs (Dwivedi et al., JMLR 2023, arXiv 2003.00982;
    ``data/SBMs/generate_SBM_CLUSTER.ipynb``). A graph is a stochastic block model of
    ``num_clusters`` clusters with sizes drawn uniformly from ``cluster_size_range`` (both ends
    inclusive; the default 5..34 is what the notebook's ``np.random.randint(5, 35)`` draws),
    edge probability ``p`` inside a cluster and ``q`` between clusters, node ids shuffled. In each
    cluster c exactly one node, chosen uniformly, has feature ``c + 1``; all other nodes have
    feature 0. The target of every node is its cluster id.

    Parameters, here (default) vs the paper:

    | parameter | default here | paper / notebook |
    | --- | --- | --- |
    | num_clusters | 6 | 6 |
    | cluster_size_range | (5, 34) | 5..34: notebook ``randint(5, 35)`` (paper: [5, 35]) |
    | p, q | 0.55, 0.25 | 0.55, 0.25 |
    | num_graphs | 1200 | 12,000 (10,000 / 1,000 / 1,000) |

    Attributes of each ``Data`` (N nodes, 30..204 with the defaults, mean 117, as PyG reports for the
    released data: 117.2):
        - ``x``: ``(N,)`` long in ``[0, num_clusters]`` (``num_node_types = num_clusters + 1``
          values; 7 in the paper); embed it with ``nn.Embedding``. Being categorical, it cannot
          take a concatenated PE: give PE transforms their own ``attr_name``.
        - ``edge_index``: ``(2, E)`` long, undirected, coalesced, no self-loops.
        - ``y``: ``(N,)`` long, cluster id in ``[0, num_clusters)`` (node-level).

    Args:
        root: dataset directory (``None``: :func:`default_root` ``("CLUSTER")``).
        num_graphs, num_clusters, cluster_size_range, p, q: see the table.
        seed: seed of everything (numpy ``default_rng``).
        transform, pre_transform, pre_filter, force_reload, log: as in PyG.

    The paper's metric is mean per-class recall (``accuracy_SBM``).
    """

    name = "CLUSTER"
    PAPER_SPLIT = (10_000, 1_000, 1_000)

    def __init__(
        self,
        root: str | os.PathLike | None = None,
        *,
        num_graphs: int = 1200,
        num_clusters: int = 6,
        cluster_size_range: tuple[int, int] = (5, 34),
        p: float = 0.55,
        q: float = 0.25,
        seed: int = 0,
        transform: Callable | None = None,
        pre_transform: Callable | None = None,
        pre_filter: Callable | None = None,
        force_reload: bool = False,
        log: bool = False,
    ) -> None:
        self.num_graphs = _check_int("num_graphs", num_graphs, 1)
        self.num_clusters = _check_int("num_clusters", num_clusters, 1)
        self.cluster_size_range = _check_range("cluster_size_range", cluster_size_range)
        self.p = _check_prob("p", p)
        self.q = _check_prob("q", q)
        self.seed = _check_int("seed", seed, 0)
        super().__init__(root, transform, pre_transform, pre_filter, force_reload, log)

    @property
    def num_node_types(self) -> int:
        """Number of distinct values of ``x``: 0 (unlabelled) and 1..num_clusters."""
        return self.num_clusters + 1

    def _config_tag(self) -> str:
        lo, hi = self.cluster_size_range
        return f"g{self.num_graphs}_c{self.num_clusters}_s{lo}-{hi}_p{_fmt(self.p)}_q{_fmt(self.q)}_seed{self.seed}"

    def _generate(self) -> list[Data]:
        rng = np.random.default_rng(self.seed)
        c = self.num_clusters
        prob = np.full((c, c), self.q)
        np.fill_diagonal(prob, self.p)
        lo, hi = self.cluster_size_range
        data_list = []
        for _ in range(self.num_graphs):
            sizes = rng.integers(lo, hi + 1, size=c)
            blocks = np.repeat(np.arange(c), sizes)
            n = len(blocks)
            u, v = _sbm_pairs(rng, blocks, prob)
            u, v, blocks = _relabel(rng, n, u, v, blocks)
            x = np.zeros(n, dtype=np.int64)
            for r in range(c):
                members = np.flatnonzero(blocks == r)
                x[members[rng.integers(len(members))]] = r + 1
            data_list.append(
                Data(
                    x=torch.from_numpy(x),
                    edge_index=_undirected(u, v, n),
                    y=torch.from_numpy(blocks.astype(np.int64)),
                    num_nodes=n,
                )
            )
        return data_list


def sbm_splits(
    dataset: PATTERNDataset | CLUSTERDataset,
    fractions: Sequence[float] | None = None,
    seed: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Seeded train/val/test split of a PATTERN or CLUSTER dataset.

    Default fractions are the paper's proportions (``dataset.PAPER_SPLIT``): PATTERN
    10,000 / 2,000 / 2,000 (5:1:1), CLUSTER 10,000 / 1,000 / 1,000 (10:1:1). For PATTERN the split
    is stratified by ``pattern_id`` (the paper splits each pattern's graphs 100 / 20 / 20): each part
    gets the floor or the ceiling of its fraction of every pattern's graphs. CLUSTER is split
    uniformly at random (one group). Leftover graphs of a group go to the parts furthest below their
    share, so part sizes stay close to ``fraction * len(dataset)`` (within one graph for a single
    group, i.e. largest-remainder apportionment). The three parts partition ``range(len(dataset))``.

    Args:
        dataset: a :class:`PATTERNDataset` or :class:`CLUSTERDataset`.
        fractions: ``(train, val, test)``, non-negative, summing to 1; ``None`` for the paper's.
        seed: seed of the shuffle (numpy ``default_rng``).

    Returns:
        ``(train_idx, val_idx, test_idx)``: sorted long tensors partitioning ``range(len(dataset))``.
    """
    seed = _check_int("seed", seed, 0)
    if fractions is None:
        paper = getattr(dataset, "PAPER_SPLIT", None)
        if paper is None:
            raise ValueError("sbm_splits: fractions=None needs a PATTERNDataset or CLUSTERDataset")
        fractions = [s / sum(paper) for s in paper]
    fractions = [float(f) for f in fractions]
    if len(fractions) != 3 or min(fractions) < 0 or not math.isclose(sum(fractions), 1.0, abs_tol=1e-6):
        raise ValueError(f"sbm_splits: fractions must be 3 non-negative numbers summing to 1, got {fractions}")
    n = len(dataset)
    pattern_id = getattr(dataset, "pattern_id", None) if isinstance(dataset, PATTERNDataset) else None
    groups = np.zeros(n, dtype=np.int64) if pattern_id is None else np.asarray(pattern_id).reshape(-1)
    rng = np.random.default_rng(seed)
    frac = np.asarray(fractions)
    sizes_so_far = np.zeros(3)
    seen = 0
    parts: list[list[np.ndarray]] = [[], [], []]
    for grp in rng.permutation(np.unique(groups)):
        members = rng.permutation(np.flatnonzero(groups == grp))
        m = len(members)
        exact = frac * m
        size = np.floor(exact + 1e-9).astype(np.int64)
        leftover = m - int(size.sum())
        if leftover:
            # the group's leftover graphs go to the parts that are furthest below their global share
            # (random tie-break), so each part gets floor or ceil of its share of every group and the
            # part sizes stay close to fraction * len(dataset)
            deficit = frac * (seen + m) - (sizes_so_far + size)
            candidates = np.flatnonzero(exact - size > 1e-9)
            order = candidates[np.lexsort((rng.random(len(candidates)), -deficit[candidates]))]
            size[order[:leftover]] += 1
        start = 0
        for i in range(3):
            parts[i].append(members[start : start + size[i]])
            start += size[i]
        sizes_so_far += size
        seen += m
    return tuple(torch.from_numpy(np.sort(np.concatenate(p))).long() for p in parts)


# --------------------------------------------------------------------------------------------------
# user graphs

_INT = re.compile(r"[+-]?\d+")


def load_edge_list(path: str | os.PathLike, num_nodes: int | None = None, undirected: bool = True) -> Data:
    """Read a whitespace-separated edge list (``u v`` per line, 0-based ids) into a PyG ``Data``.

    Text after ``#`` is a comment; blank lines are skipped. Duplicate edges are merged; self-loops
    are kept (they are in the file). This is the plain format of SNAP and networkx's
    ``write_edgelist(data=False)``.

    Args:
        path: the file.
        num_nodes: number of nodes; ``None`` means ``max id + 1`` (0 for a file without edges).
            Give it to keep isolated nodes with the highest ids.
        undirected: store both directions of every edge (the convention of this package).

    Returns:
        ``Data(edge_index=(2, E) long, coalesced, num_nodes=num_nodes)``.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a line that is not two integers, a negative id, or an id >= ``num_nodes``;
            the message names the file and the line number.
    """
    path = Path(os.fspath(path))
    if num_nodes is not None:
        num_nodes = _check_int("num_nodes", num_nodes, 0)
    us: list[int] = []
    vs: list[int] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            where = f"load_edge_list: {path}, line {lineno}"
            if len(fields) != 2:
                raise ValueError(
                    f"{where}: expected 2 whitespace-separated node ids, got {len(fields)}: {line.strip()!r}"
                )
            for field in fields:
                if not _INT.fullmatch(field):
                    raise ValueError(f"{where}: node id must be an integer, got {field!r}")
            u, v = int(fields[0]), int(fields[1])
            if u < 0 or v < 0:
                raise ValueError(f"{where}: node ids must be >= 0, got {u} {v}")
            if num_nodes is not None and max(u, v) >= num_nodes:
                raise ValueError(f"{where}: node id {max(u, v)} out of range for num_nodes={num_nodes}")
            us.append(u)
            vs.append(v)
    edge_index = torch.tensor([us, vs], dtype=torch.long).reshape(2, -1)
    if num_nodes is None:
        num_nodes = int(edge_index.max()) + 1 if edge_index.numel() else 0
    if undirected:
        edge_index = to_undirected(edge_index, num_nodes=num_nodes)
    else:
        edge_index = coalesce(edge_index, num_nodes=num_nodes)
    return Data(edge_index=edge_index, num_nodes=num_nodes)
