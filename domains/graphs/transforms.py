"""Graph positional encodings as PyG transforms (the precompute half of a graph PE).

Each transform takes a :class:`torch_geometric.data.Data`, never mutates it, and returns a shallow
copy with one node attribute added (``attr_name``), or, with ``attr_name=None``, the encoding
concatenated to ``data.x``. The learned half (projection into the model) is in
:mod:`pe_toolkit.domains.graphs.encoders`.

* :class:`LaplacianEigenvectorPE`: k smallest non-trivial eigenvectors of the normalised Laplacian
  (Dwivedi et al. 2020, "Benchmarking Graph Neural Networks", arXiv:2003.00982).
* :class:`RandomWalkPE`: return probabilities of the random walk, ``diag(P^t)`` for ``t = 1..T``
  (Dwivedi et al. 2022, "Graph Neural Networks with Learnable Structural and Positional
  Representations", arXiv:2110.07875), exact or Monte-Carlo.
* :class:`RandomFeaturePropagation`: the trajectory of power iteration from random features
  (Eliasof et al. 2023, "Graph Positional Encoding via Random Feature Propagation", arXiv:2303.02918).

All computations run in float64 (numpy / scipy) and are cast to ``dtype`` (default float32) at the end.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from torch_geometric.utils import is_undirected

from pe_toolkit.encoders.base import check_choice, check_int

__all__ = ["LaplacianEigenvectorPE", "RandomFeaturePropagation", "RandomWalkPE", "epoch_transforms",
           "graph_adjacency", "laplacian_residual"]


# --------------------------------------------------------------------------------------------- helpers
def _check_attr_name(owner: str, name: str, value: Any) -> str | None:
    if value is not None and not (isinstance(value, str) and value):
        raise TypeError(f"{owner}: {name} must be a non-empty str or None, got {value!r}")
    return value


def _check_dtype(owner: str, dtype: Any) -> torch.dtype:
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise TypeError(f"{owner}: dtype must be a floating torch.dtype, got {dtype!r}")
    return dtype


_DIRECTED_ERROR = (
    "{owner}: data.edge_index must describe an undirected graph (each edge (i, j) with its reverse (j, i) and the "
    "same weight), got a directed graph; apply torch_geometric.transforms.ToUndirected first"
)


def _check_data(owner: str, data: Any, *, undirected: bool) -> int:
    """Validate ``data`` and return its number of nodes."""
    if not isinstance(data, Data):
        raise TypeError(f"{owner}: expected a torch_geometric.data.Data, got {type(data).__name__}")
    edge_index = data.edge_index
    if edge_index is None:
        raise ValueError(f"{owner}: data.edge_index is None; an edge_index of shape (2, E) is required")
    if not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{owner}: data.edge_index must be a (2, E) tensor, got {getattr(edge_index, 'shape', None)}")
    if edge_index.is_floating_point() or edge_index.dtype == torch.bool:
        raise TypeError(f"{owner}: data.edge_index must be an integer tensor, got {edge_index.dtype}")
    num_nodes = data.num_nodes
    if num_nodes is None or num_nodes == 0:
        raise ValueError(f"{owner}: the graph has {num_nodes} nodes; at least 1 node is required")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(
            f"{owner}: data.edge_index holds node ids in [{int(edge_index.min())}, {int(edge_index.max())}], "
            f"allowed [0, {num_nodes - 1}]"
        )
    weight = data.edge_weight if "edge_weight" in data else None
    if weight is not None:
        if weight.dim() != 1 or weight.numel() != edge_index.size(1):
            raise ValueError(
                f"{owner}: data.edge_weight must have shape ({edge_index.size(1)},), got {tuple(weight.shape)}"
            )
        if not torch.isfinite(weight).all() or bool((weight < 0).any()):
            raise ValueError(f"{owner}: data.edge_weight must be finite and >= 0")
    if undirected and not is_undirected(edge_index, weight, num_nodes=num_nodes):
        raise ValueError(_DIRECTED_ERROR.format(owner=owner))
    return num_nodes


def graph_adjacency(data: Data, *, self_loops: bool = True) -> sp.csr_matrix:
    """The weighted adjacency ``A`` of ``data`` as a float64 CSR matrix ``(N, N)``, ``A[i, j]`` for edge ``i -> j``.

    Duplicate edges are summed (``data.edge_weight`` or 1 per edge); ``self_loops=False`` drops ``A[i, i]``.
    """
    n = data.num_nodes
    row, col = data.edge_index.cpu().numpy()
    weight = data.edge_weight if "edge_weight" in data else None
    value = np.ones(row.shape[0]) if weight is None else weight.detach().cpu().double().numpy()
    if not self_loops:
        keep = row != col
        row, col, value = row[keep], col[keep], value[keep]
    adj = sp.coo_matrix((value, (row, col)), shape=(n, n)).tocsr()
    adj.sum_duplicates()
    adj.eliminate_zeros()
    return adj


def _inv_sqrt(deg: np.ndarray) -> np.ndarray:
    out = np.zeros_like(deg)
    pos = deg > 0
    out[pos] = 1.0 / np.sqrt(deg[pos])
    return out


def _add_node_attr(owner: str, data: Data, value: Tensor, attr_name: str | None) -> Data:
    """Store ``value`` (N, F) as ``data[attr_name]``, or concatenate it to ``data.x`` if ``attr_name`` is None."""
    if attr_name is not None:
        data[attr_name] = value
        return data
    x = data.x
    if x is None:
        data.x = value
        return data
    if not x.is_floating_point():
        raise TypeError(
            f"{owner}: attr_name=None concatenates to data.x, which has dtype {x.dtype}; a floating x is "
            f"required (casting the encoding to an integer dtype would truncate it); pass an attr_name instead"
        )
    x = x.view(-1, 1) if x.dim() == 1 else x
    data.x = torch.cat([x, value.to(x.device, x.dtype)], dim=-1)
    return data


def canonical_signs(vectors: np.ndarray, atol: float = 1e-8) -> np.ndarray:
    """Flip each column so that its largest-magnitude entry is positive (the first such entry in node order
    when several entries tie within ``atol``). Deterministic, independent of any RNG."""
    if vectors.size == 0:
        return vectors
    mag = np.abs(vectors)
    top = mag.max(axis=0, keepdims=True)
    first = np.argmax(mag >= top - atol, axis=0)  # first node reaching the max magnitude
    signs = np.sign(vectors[first, np.arange(vectors.shape[1])])
    signs[signs == 0] = 1.0
    return vectors * signs


# ------------------------------------------------------------------------------------------ Laplacian
class LaplacianEigenvectorPE(BaseTransform):
    """Laplacian eigenvector PE: the ``k`` smallest non-trivial eigenvectors of the normalised Laplacian.

    Dwivedi et al. 2020, "Benchmarking Graph Neural Networks", arXiv:2003.00982 (JMLR 2023).

    The Laplacian is ``L = I - D^-1/2 A D^-1/2`` (``normalization="sym"``) on the *non-isolated* nodes
    (self-loops dropped, duplicate edges summed, ``data.edge_weight`` used when present). Eigenvalues lie in
    ``[0, 2]``. ``normalization="rw"`` uses ``I - D^-1 A``, which has the same eigenvalues; its eigenvectors
    are ``D^-1/2 u`` for the sym eigenvectors ``u``, rescaled to unit norm.

    Trivial eigenvectors, and disconnected graphs: the eigenvalue 0 has one eigenvector per connected
    component (``D^1/2`` times the component's indicator). These ``c`` vectors only say which component a
    node is in, and any rotation of them is as valid, so all ``c`` are dropped (the number of components is
    counted with ``scipy.sparse.csgraph.connected_components``, not by an eigenvalue tolerance). The PE is
    the next ``k`` eigenvectors in ascending eigenvalue order, taken across components; each is supported on
    a single component (components are solved separately; ties in eigenvalue go to the component holding the
    lowest node id first). An isolated node (no edge other than a self-loop) is a component of its own whose
    only eigenvector is trivial: its PE row is 0. For a connected graph this is exactly PyG's
    ``AddLaplacianEigenvectorPE`` (which drops one trivial vector however many components there are).

    Signs: each eigenvector is flipped so that its largest-magnitude entry is positive (first in node order on
    ties), so the result is deterministic and does not consume the global RNG (PyG's transform flips signs
    with it). Randomise signs during training in the learned encoder instead. Inside a repeated eigenvalue
    the basis is whatever the solver returns (only the eigenspace is defined; e.g. CSL circulant graphs).

    Padding: a graph with fewer than ``k`` non-trivial eigenvectors (fewer than ``k + c`` non-isolated nodes)
    gets zero columns; ``data[mask_attr]`` ``(N, k)`` bool marks the real columns (the same for every node).

    Solvers: ``"dense"`` (LAPACK ``syevr`` / ``syevd`` in float64), ``"sparse"`` (Lanczos, ARPACK's
    ``eigsh``), ``"auto"``: dense for connected components of at most ``dense_threshold`` nodes (each
    component is solved on its own). A graph of at most ``dense_threshold`` nodes never touches scipy.sparse:
    its adjacency, components (label propagation) and Laplacian are dense numpy arrays, which is what keeps
    small graphs (CSL, PATTERN, molecules) cheaper than PyG's dense path.

    The sparse solver runs Lanczos (a Krylov basis of at least 30 vectors, at most 300 restarts) for the
    ``m + 1`` *largest* eigenvalues ``mu`` of ``S = D^-1/2 A D^-1/2 = I - L`` and drops the trivial
    ``mu = 1``; then ``lambda = 1 - mu``. The Krylov space is the one PyG's ``eigsh(L, k + 1, which="SA")``
    builds, but ARPACK's stopping test ``|S x - mu x| <= tol |mu|`` is relative to ``mu ~ 1`` instead of to
    the small ``lambda``, so it stops after about half the matrix-vector products for the same absolute
    accuracy. ``precision`` chooses the arithmetic of the Lanczos run:

    * ``"single"`` (the default for float32 outputs): Lanczos in float32 at float32 machine precision (as PyG,
      whose ``get_laplacian`` builds float32 weights), then a float64 Rayleigh-Ritz step on the subspace
      spanned by the exact trivial vector ``D^1/2 1`` and the returned vectors. The Rayleigh-Ritz step costs
      ``m + 1`` sparse products and makes the eigenvalues accurate to ``~1e-9`` (second order in the subspace
      error) and the eigenvectors orthonormal and orthogonal to the trivial one in float64. Its float64
      residuals ``|L v - lambda v|`` are checked: above ``SINGLE_PRECISION_MAX_RESIDUAL`` (1e-5) the pairs are
      recomputed in float64. The residual is ~1e-6 (as PyG's); an eigenvector is then accurate to about
      ``residual / gap`` (the gap to the nearest other eigenvalue), e.g. ~1e-2 on a 400-node path whose smallest
      eigenvalues are 1e-4 apart, where ``"double"`` gives ~1e-8.
    * ``"double"`` (the default for float64 outputs): Lanczos in float64 at ``tol``.

    Accuracy, measured on the benchmark's random graphs (ring + 2N random edges, mean degree ~6), k = 8, against
    a float64 machine-precision reference (max residual ``|L v - lambda v|``; max eigenvalue error; sine of the
    largest principal angle of the 8 eigenvectors): at 100,000 nodes PyG 1.1e-6, 1e-6, 1.5e-3; ``"single"``
    1.2e-6, 1e-9, 1.8e-3; ``"double"`` (``tol=1e-7``) 6.5e-8, 7e-14, 2.5e-6. At 10,000 nodes: 5.6e-6, 5e-6,
    2.3e-3; 1.2e-6, 5e-10, 9e-4; 4e-8, 7e-14, 4e-6. The angles are large because the 8th and 9th eigenvalues
    are ~1e-3 apart; the residual is the accuracy that a solver controls. Speed: float32 Lanczos is 2-3x
    faster than float64 Lanczos for the same number of products (half the memory traffic in ARPACK's
    re-orthogonalisation, which dominates), and ``which="LA"`` on ``S`` needs ~0.5-0.8x the products of PyG's
    ``"SA"`` on ``L`` (411 against 775 at 100k nodes), so ``"single"`` is faster than PyG at every size of the
    benchmark (CPU seconds, one run of ``benchmarks/graphs.py --sections precompute``: 1.05x at 1k nodes, 1.3x
    at 10k, 1.8x at 100k, 1.6x on CSL, 3.4x on PATTERN), while float64 Lanczos is not at 100k. The products use
    scipy's COO kernel, which was ~2x faster than its CSR kernel here.

    If Lanczos has not converged (long paths and grids, tiny spectral gaps; float32 Lanczos first retries in
    float64) it falls back to shift-invert around ``sigma = -1e-3`` (LU with a minimum-degree ordering), never
    slow on those.

    Args:
        k: number of non-trivial eigenvectors (>= 1).
        normalization: ``"sym"`` or ``"rw"``.
        attr_name: node attribute for the eigenvectors ``(N, k)``; ``None`` concatenates them to ``data.x``.
        eigval_attr: node attribute for the eigenvalues ``(N, k)`` (row-repeated so that PyG batching
            concatenates per node); padded entries are 0.
        mask_attr: node attribute for the padding mask ``(N, k)`` (True = real eigenvector).
        solver: ``"auto"``, ``"dense"`` or ``"sparse"``.
        dense_threshold: largest component (in nodes) solved densely by ``"auto"``; graphs of at most this many
            nodes are handled with dense arrays throughout.
        precision: arithmetic of the sparse (Lanczos) solver: ``"auto"`` (``"single"`` for outputs of fewer
            than 64 bits, ``"double"`` for float64), ``"single"`` or ``"double"``.
        tol: relative tolerance passed to ``eigsh`` (0 = machine precision of the Lanczos arithmetic);
            ``None``: 0 for ``"single"``, and for ``"double"`` ``1e-7`` for outputs of fewer than 64 bits, 0 for
            float64.
        dtype: floating dtype of the stored tensors.

    Returns (from ``__call__``): a copy of ``data`` with ``data[attr_name]`` ``(N, k)``,
    ``data[eigval_attr]`` ``(N, k)`` and ``data[mask_attr]`` ``(N, k)``.

    Raises:
        TypeError / ValueError: bad arguments; a graph with 0 nodes; a directed graph; negative weights.
    """

    def __init__(
        self,
        k: int,
        normalization: str = "sym",
        attr_name: str | None = "lap_pe",
        *,
        eigval_attr: str = "lap_eigval",
        mask_attr: str = "lap_mask",
        solver: str = "auto",
        dense_threshold: int = 300,
        precision: str = "auto",
        tol: float | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        owner = "LaplacianEigenvectorPE"
        self.k = check_int(f"{owner}: k", k)
        self.normalization = check_choice(f"{owner}: normalization", normalization, ("sym", "rw"))
        self.attr_name = _check_attr_name(owner, "attr_name", attr_name)
        for name, value in (("eigval_attr", eigval_attr), ("mask_attr", mask_attr)):
            if not (isinstance(value, str) and value):
                raise TypeError(f"{owner}: {name} must be a non-empty str, got {value!r}")
        self.eigval_attr, self.mask_attr = eigval_attr, mask_attr
        self.solver = check_choice(f"{owner}: solver", solver, ("auto", "dense", "sparse"))
        self.dense_threshold = check_int(f"{owner}: dense_threshold", dense_threshold, minimum=0)
        if tol is not None and (isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < 1):
            raise ValueError(f"{owner}: tol must be None or a number in [0, 1), got {tol!r}")
        self.dtype = _check_dtype(owner, dtype)
        precision = check_choice(f"{owner}: precision", precision, ("auto", "single", "double"))
        wide = torch.finfo(self.dtype).bits >= 64
        self.precision = ("double" if wide else "single") if precision == "auto" else precision
        if tol is None:
            tol = 0.0 if self.precision == "single" or wide else 1e-7
        self.tol = float(tol)

    def eigenpairs(self, data: Data) -> tuple[np.ndarray, np.ndarray, int]:
        """``(eigvals (m,), eigvecs (N, m), num_trivial)``: the ``m <= k`` non-trivial pairs, ascending."""
        n = _check_data("LaplacianEigenvectorPE", data, undirected=False)
        small = n <= self.dense_threshold and self.solver != "sparse"
        # small graphs: dense numpy throughout (scipy.sparse's per-call overhead would dominate their solve)
        adj = _dense_adjacency(data, n) if small else graph_adjacency(data, self_loops=False)
        if not _is_symmetric(adj):  # as _check_data(undirected=True), on the summed matrix: no extra sort
            raise ValueError(_DIRECTED_ERROR.format(owner="LaplacianEigenvectorPE"))
        deg = np.asarray(adj.sum(axis=1)).ravel()
        active = np.flatnonzero(deg > 0)
        out_vecs = np.zeros((n, 0))
        if active.size == 0:
            return np.zeros(0), out_vecs, n
        d_is = _inv_sqrt(deg[active])
        if small:
            sub = adj if active.size == n else adj[np.ix_(active, active)]
            norm_adj = d_is[:, None] * sub * d_is[None, :]  # S = D^-1/2 A D^-1/2; L = I - S
            count = min(self.k, active.size - 1)
            vals, vecs = _dense_smallest(norm_adj, count)
            if vals[1] > CONNECTED_MIN_EIGENVALUE:
                # connected: lambda_1 of a disconnected graph is exactly 0 (~1e-15 computed), so a clearly positive
                # one proves connectivity and the components need not be labelled (most small graphs)
                return self._finish(vals[1:], vecs[:, 1:], n, active, d_is, 1)
            num_comp, labels = _dense_components(sub)
        else:
            sub = adj if active.size == n else adj[active][:, active]
            norm_adj = _scale_rows_and_columns(sub, d_is)
            num_comp, labels = connected_components(sub, directed=False)
        # L is block diagonal over the components: solve each one, drop its (simple) zero eigenpair, and
        # merge. Cheaper than one global solve for k + c pairs when there are many components (a batch of
        # molecules), and every eigenvector lives on one component.
        order = np.argsort(labels, kind="stable")
        bounds = np.searchsorted(labels[order], np.arange(num_comp + 1))
        all_vals, all_vecs, owners = [], [], []
        for c in range(num_comp):
            nodes = order[bounds[c]:bounds[c + 1]]
            m_c = min(self.k, nodes.size - 1)
            if m_c <= 0:
                continue
            if num_comp == 1:
                s_c = norm_adj
            else:
                s_c = norm_adj[np.ix_(nodes, nodes)] if small else norm_adj[nodes][:, nodes]
            dense = self.solver == "dense" or (self.solver == "auto" and nodes.size <= self.dense_threshold)
            if dense or m_c + 1 >= nodes.size - 1:  # ARPACK needs fewer pairs than nodes
                vals, vecs = _dense_smallest(s_c if small else s_c.toarray(), m_c)
                vals, vecs = vals[1:], vecs[:, 1:]
            else:
                vals, vecs = _eigsh_smallest_nontrivial(s_c, m_c, self.tol, self.precision,
                                                        trivial=1.0 / d_is[nodes])
            all_vals.append(vals)
            all_vecs.append(vecs)
            owners.append(nodes)
        if not all_vals:
            return np.zeros(0), out_vecs, num_comp + n - active.size
        flat_vals = np.concatenate(all_vals)
        pick = np.argsort(flat_vals, kind="stable")[: self.k]  # ties: component order, then solver order
        m = pick.size
        vecs = np.zeros((active.size, m))
        starts = np.cumsum([0] + [v.size for v in all_vals])
        for col, j in enumerate(pick):
            c = int(np.searchsorted(starts, j, side="right") - 1)
            vecs[owners[c], col] = all_vecs[c][:, j - starts[c]]
        return self._finish(flat_vals[pick], vecs, n, active, d_is, num_comp)

    def _finish(self, vals: np.ndarray, vecs: np.ndarray, n: int, active: np.ndarray, d_is: np.ndarray,
                num_comp: int) -> tuple[np.ndarray, np.ndarray, int]:
        """``(eigvals, eigvecs (N, m), num_trivial)`` from the pairs of the active nodes: normalisation, signs."""
        if self.normalization == "rw":
            vecs = d_is[:, None] * vecs
            vecs = vecs / np.linalg.norm(vecs, axis=0, keepdims=True)
        vecs = canonical_signs(vecs)
        full = vecs if active.size == n else np.zeros((n, vecs.shape[1]))
        if active.size != n:
            full[active] = vecs
        return np.clip(vals, 0.0, 2.0), full, num_comp + n - active.size

    def forward(self, data: Data) -> Data:
        vals, vecs, _ = self.eigenpairs(data)
        n, m, k = vecs.shape[0], vecs.shape[1], self.k
        device = data.edge_index.device
        pe = torch.zeros(n, k, dtype=self.dtype, device=device)
        pe[:, :m] = torch.from_numpy(vecs).to(device, self.dtype)
        eig = torch.zeros(n, k, dtype=self.dtype, device=device)
        eig[:, :m] = torch.from_numpy(vals).to(device, self.dtype)
        mask = torch.zeros(n, k, dtype=torch.bool, device=device)
        mask[:, :m] = True
        data[self.eigval_attr] = eig
        data[self.mask_attr] = mask
        return _add_node_attr("LaplacianEigenvectorPE", data, pe, self.attr_name)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(k={self.k}, normalization={self.normalization!r}, "
                f"attr_name={self.attr_name!r}, precision={self.precision!r}, tol={self.tol!r})")


#: ``lambda_1`` above which a small graph is connected without labelling its components (a disconnected graph
#: has ``lambda_1 = 0``, computed as ~1e-15; below this bound the components are labelled exactly).
CONNECTED_MIN_EIGENVALUE = 1e-8

#: Largest residual ``|L v - lambda v|`` accepted from float32 Lanczos (after the float64 Rayleigh-Ritz step);
#: above it the pairs are recomputed in float64. Float32 Lanczos reaches ~1e-6 (PyG's float32 run: the same).
SINGLE_PRECISION_MAX_RESIDUAL = 1e-5


def _scale_rows_and_columns(adj: sp.csr_matrix, scale: np.ndarray) -> sp.csr_matrix:
    """``diag(scale) @ adj @ diag(scale)`` (CSR), by scaling the stored values (no sparse products)."""
    rows = np.repeat(np.arange(adj.shape[0]), np.diff(adj.indptr))
    return sp.csr_matrix((adj.data * scale[rows] * scale[adj.indices], adj.indices, adj.indptr), shape=adj.shape)


def _dense_adjacency(data: Data, n: int) -> np.ndarray:
    """``A`` as a dense float64 ``(N, N)`` array: duplicate edges summed, self-loops dropped (small graphs)."""
    row, col = data.edge_index.cpu().numpy()
    weight = data.edge_weight if "edge_weight" in data else None
    value = None if weight is None else weight.detach().cpu().double().numpy()
    flat = np.bincount(row * n + col, weights=value, minlength=n * n).astype(np.float64, copy=False)
    adj = flat.reshape(n, n)
    np.fill_diagonal(adj, 0.0)
    return adj


def _dense_components(adj: np.ndarray) -> tuple[int, np.ndarray]:
    """``(count, labels)`` of the connected components of a dense symmetric adjacency, numbered by their lowest
    node (as scipy's ``connected_components`` numbers them): min-label propagation with pointer jumping."""
    n = adj.shape[0]
    linked = adj != 0
    np.fill_diagonal(linked, True)
    labels = np.arange(n)
    while True:
        new = np.where(linked, labels[None, :], n).min(axis=1)  # the lowest label among the neighbours
        new = new[new]  # jump: a node takes its representative's label (labels only ever decrease)
        if np.array_equal(new, labels):
            break
        labels = new
    roots, labels = np.unique(labels, return_inverse=True)
    return roots.size, labels.reshape(-1)


def _dense_smallest(norm_adj: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``count + 1`` smallest eigenpairs of ``L = I - S`` (dense), ascending (for one connected component the
    first is the trivial one): LAPACK in float64, only the wanted pairs (``syevr``) when that is cheaper."""
    from scipy.linalg import eigh

    n = norm_adj.shape[0]
    lap = np.eye(n) - norm_adj
    if n > 64:  # measured: syevr with an index subset is 1.5-2.5x faster than the full syevd from ~100 nodes
        vals, vecs = eigh(lap, subset_by_index=[0, count], driver="evr", check_finite=False)
    else:
        vals, vecs = np.linalg.eigh(lap)
    return vals[:count + 1], vecs[:, :count + 1]


def _eigsh_smallest_nontrivial(norm_adj: sp.csr_matrix, count: int, tol: float, precision: str, *,
                               trivial: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``count`` smallest eigenpairs of ``L = I - S`` (``S = norm_adj``, one connected component) other than
    the trivial ``(0, D^1/2 1)`` (``trivial`` = ``D^1/2 1``, any scale), ascending. See
    :class:`LaplacianEigenvectorPE` (Solvers)."""
    from scipy.sparse.linalg import ArpackNoConvergence, LinearOperator, eigsh, splu

    n = norm_adj.shape[0]
    v0 = np.random.default_rng(0).standard_normal(n)  # a fixed start vector keeps ARPACK deterministic
    ncv = min(n - 1, max(2 * count + 3, 30))
    if precision == "single":
        try:
            # the largest eigenvalues of S are 1 - (the smallest of L); the largest, 1, is the trivial pair
            # COO: scipy's coo_matvec is ~2x faster than its csr_matvec here (measured, float32 and float64)
            mu, vecs = eigsh(_products(norm_adj.astype(np.float32).tocoo()), k=count + 1, which="LA",
                             v0=v0.astype(np.float32),
                             tol=tol, ncv=ncv, maxiter=300)
            vals, vecs, residual = _rayleigh_ritz_nontrivial(norm_adj, vecs[:, np.argsort(-mu)[1:]], trivial)
            if residual <= SINGLE_PRECISION_MAX_RESIDUAL:
                return vals, vecs
        except ArpackNoConvergence:
            pass
        tol = max(tol, 1e-7)  # retry in float64 (then shift-invert)
    try:
        mu, vecs = eigsh(_products(norm_adj.tocoo()), k=count + 1, which="LA", v0=v0, tol=tol, ncv=ncv, maxiter=300)
        order = np.argsort(-mu)[1:]
        vals, vecs = 1.0 - mu[order], vecs[:, order]
    except ArpackNoConvergence:
        # Shift-invert around a point just below 0: L - sigma I is positive definite (L is singular), and
        # the wanted eigenvalues become the largest of (L - sigma I)^-1. The LU uses a minimum-degree
        # ordering on A^T + A: 3x less fill-in and 3x faster than scipy's default COLAMD on random graphs.
        sigma = -1e-3
        lap = (sp.identity(n) - norm_adj).tocsc()
        lu = splu((lap - sigma * sp.identity(n)).tocsc(), permc_spec="MMD_AT_PLUS_A")
        op_inv = LinearOperator((n, n), matvec=lu.solve, dtype=np.float64)
        vals, vecs = eigsh(lap, k=count + 1, sigma=sigma, which="LM", OPinv=op_inv, v0=v0, tol=tol)
        order = np.argsort(vals)[1:]  # drop the trivial pair
        vals, vecs = vals[order], vecs[:, order]
    order = np.argsort(vals)
    return vals[order], vecs[:, order]


def _products(matrix: sp.coo_matrix):
    from scipy.sparse.linalg import LinearOperator

    class Products(LinearOperator):
        """``x -> matrix @ x`` for ARPACK without ``LinearOperator.matvec``'s checks and reshapes: ARPACK always
        passes a contiguous ``(n,)`` slice. At 1,000 nodes these per-call checks were ~11 % of the solve."""

        def __init__(self) -> None:
            super().__init__(matrix.dtype, matrix.shape)

        def _matvec(self, x: np.ndarray) -> np.ndarray:
            return matrix @ x.ravel()

        def matvec(self, x: np.ndarray) -> np.ndarray:
            return matrix @ x

    return Products()


def _rayleigh_ritz_nontrivial(norm_adj: sp.csr_matrix, vecs: np.ndarray,
                              trivial: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Float64 Rayleigh-Ritz of ``S`` on ``span(vecs)`` orthogonalised against the exact trivial vector.

    ``vecs`` ``(n, m)``: approximate non-trivial eigenvectors of ``S`` (e.g. from float32 Lanczos). Returns the
    ``m`` Ritz pairs as eigenpairs of ``L = I - S``, ascending in ``lambda``, and the largest residual
    ``|L v - lambda v|`` (float64)."""
    basis, _ = np.linalg.qr(np.column_stack([trivial, vecs.astype(np.float64)]))
    basis = basis[:, 1:]  # orthonormal, orthogonal to D^1/2 1 in float64
    image = norm_adj @ basis
    h = basis.T @ image
    mu, y = np.linalg.eigh((h + h.T) / 2)
    mu, y = mu[::-1], y[:, ::-1]
    residual = np.linalg.norm(image @ y - (basis @ y) * mu, axis=0).max(initial=0.0)  # |S v - mu v| = |L v - lambda v|
    return 1.0 - mu, basis @ y, float(residual)


# ---------------------------------------------------------------------------------------- random walk
class RandomWalkPE(BaseTransform):
    """Random-walk structural encoding (RWSE): return probabilities ``diag(P^t)``, ``t = 1..walk_length``.

    Dwivedi et al. 2022, "Graph Neural Networks with Learnable Structural and Positional Representations",
    arXiv:2110.07875; used as RWSE in GraphGPS (Rampasek et al. 2022, arXiv:2205.12454).

    ``P = D^-1 A`` is the random-walk matrix (self-loops and ``data.edge_weight`` included, duplicate edges
    summed, out-degrees). Entry ``(i, t-1)`` is the probability that a walk from ``i`` is back at ``i`` after
    ``t`` steps. A node without out-edges has return probability 0 for every ``t``.

    ``method="exact"`` splits each power into two half-powers, ``t = a + b`` with ``a = floor(t / 2)``:

        ``diag(P^t)_i = sum_j (P^a)_ij (P^b)_ji``, i.e. the row sums of ``P^a * (P^b)^T`` (elementwise),

    so only ``P^1 .. P^h``, ``h = ceil(T / 2)``, are ever formed, never ``P^T``. Undirected graphs use the
    symmetric ``S = D^-1/2 A D^-1/2`` instead (same diagonal, ``(S^b)^T = S^b``), so one sequence of powers
    serves both factors; directed graphs take the rows of ``P^a`` and of ``(P^T)^b``.

    * Dense path (``N <= dense_threshold``): ``P^1 .. P^h`` as dense matrices (``h - 1`` products, against
      ``T - 1`` for PyG's ``AddRandomWalkPE``), built straight from ``edge_index`` with numpy, ~``(T / 2) N^3``
      flops. ``forward`` multiplies in float32 (relative rounding ~1e-7, the precision of the float32 result;
      PyG also multiplies in float32) unless ``dtype`` is float64; :meth:`return_probabilities` in float64.
    * Sparse path: the rows of ``S^a`` are sparse, holding the ``a``-hop neighbourhood of each node. Row
      blocks of ``S`` are multiplied by ``S`` (scipy sparse products) up to ``S^h``: time and memory
      ``O(N * |h-hop neighbourhood| * degree)``, never an ``N x N`` matrix. When a block's powers get dense
      (more than ``dense_fraction`` of the block's entries nonzero: small or expanding graphs with long walks),
      that block continues with dense columns ``S @ Y`` (``O(nnz(S))`` per column and step), each chunk at most
      ``2^24`` float64 entries (128 MiB).

    Both paths are exact up to rounding (no truncation, no sampling); the sparse path runs in float64, and the
    result is cast to ``dtype``.

    ``method="monte_carlo"``: ``num_walks`` independent walks per node (seeded ``torch.Generator``; the
    global RNG is not used); the estimate is the fraction of walks at their start after ``t`` steps. It is
    unbiased, with standard error ``sqrt(p (1 - p) / num_walks) <= 0.5 / sqrt(num_walks)`` per entry (binomial),
    in ``O(N num_walks T)`` time.

    Args:
        walk_length: number of steps ``T`` (>= 1); the encoding has ``T`` features.
        attr_name: node attribute for the ``(N, T)`` encoding; ``None`` concatenates it to ``data.x``.
        method: ``"exact"`` or ``"monte_carlo"``.
        block_size: rows per block of the sparse exact path (>= 1).
        dense_threshold: graphs of at most this many nodes take the dense exact path (>= 0; 0: never).
        dense_fraction: density in ``(0, 1]`` of a block's power above which the sparse path turns dense.
        num_walks: walks per node in ``"monte_carlo"``.
        seed: seed of the Monte-Carlo generator.
        dtype: floating dtype of the stored tensor.

    Raises:
        TypeError / ValueError: bad arguments; a graph with 0 nodes; negative weights.
    """

    def __init__(
        self,
        walk_length: int,
        attr_name: str | None = "rw_pe",
        *,
        method: str = "exact",
        block_size: int = 4096,
        dense_threshold: int = 256,
        dense_fraction: float = 0.05,
        num_walks: int = 1000,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        owner = "RandomWalkPE"
        self.walk_length = check_int(f"{owner}: walk_length", walk_length)
        self.attr_name = _check_attr_name(owner, "attr_name", attr_name)
        self.method = check_choice(f"{owner}: method", method, ("exact", "monte_carlo"))
        self.block_size = check_int(f"{owner}: block_size", block_size)
        self.dense_threshold = check_int(f"{owner}: dense_threshold", dense_threshold, minimum=0)
        if (isinstance(dense_fraction, bool) or not isinstance(dense_fraction, (int, float))
                or not 0 < dense_fraction <= 1):
            raise ValueError(f"{owner}: dense_fraction must be a number in (0, 1], got {dense_fraction!r}")
        self.dense_fraction = float(dense_fraction)
        self.num_walks = check_int(f"{owner}: num_walks", num_walks)
        self.seed = check_int(f"{owner}: seed", seed, minimum=0)
        self.dtype = _check_dtype(owner, dtype)

    def return_probabilities(self, data: Data, nodes: Any = None) -> np.ndarray:
        """The ``(N, walk_length)`` float64 return probabilities of ``data``.

        ``nodes``: optional node ids (a 1-D integer sequence or tensor); then only their rows are computed,
        ``(len(nodes), walk_length)``, at about ``len(nodes) / N`` of the cost (sparse path), e.g. the target
        nodes of a large graph.
        """
        n = _check_data("RandomWalkPE", data, undirected=False)
        if nodes is not None:
            nodes = np.asarray(nodes.cpu() if isinstance(nodes, Tensor) else nodes)
            if nodes.ndim != 1 or not np.issubdtype(nodes.dtype, np.integer):
                raise TypeError(f"RandomWalkPE: nodes must be a 1-D sequence of integer node ids, got {nodes!r}")
            if nodes.size and (nodes.min() < 0 or nodes.max() >= n):
                raise ValueError(f"RandomWalkPE: nodes must lie in [0, {n - 1}], got [{nodes.min()}, {nodes.max()}]")
        if self.method == "exact" and n <= self.dense_threshold:
            out = _dense_returns(data, n, self.walk_length, np.float64)
            return out if nodes is None else out[nodes]
        adj = graph_adjacency(data, self_loops=True)
        if self.method == "monte_carlo":
            return _monte_carlo_returns(adj, self.walk_length, self.num_walks, self.seed, nodes=nodes)
        return _sparse_returns(adj, self.walk_length, nodes=nodes, block=self.block_size,
                               dense_fraction=self.dense_fraction)

    def forward(self, data: Data) -> Data:
        if self.method == "exact" and _check_data("RandomWalkPE", data, undirected=False) <= self.dense_threshold:
            precision = np.float64 if torch.finfo(self.dtype).bits >= 64 else np.float32
            pe = torch.from_numpy(_dense_returns(data, data.num_nodes, self.walk_length, precision))
        else:
            pe = torch.from_numpy(self.return_probabilities(data))
        return _add_node_attr("RandomWalkPE", data, pe.to(data.edge_index.device, self.dtype), self.attr_name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(walk_length={self.walk_length}, method={self.method!r})"


def _is_symmetric(adj: sp.csr_matrix | np.ndarray) -> bool:
    if isinstance(adj, np.ndarray):
        scale = max(float(np.abs(adj).max(initial=0.0)), 1.0)
        return adj.size == 0 or float(np.abs(adj - adj.T).max()) <= 1e-12 * scale
    diff = adj - adj.T
    return diff.nnz == 0 or float(abs(diff).max()) <= 1e-12 * max(float(abs(adj).max()), 1.0)


def _half_split(t: int) -> tuple[int, int]:
    """``t = a + b`` with ``a = floor(t / 2)``, ``b = ceil(t / 2)``: ``diag(P^t) = rowsum(P^a * (P^b)^T)``."""
    return t // 2, t - t // 2


def _dense_returns(data: Data, n: int, steps: int, dtype: type) -> np.ndarray:
    """Exact return probabilities from dense half-powers (small graphs), computed in the numpy ``dtype``.

    Undirected (``A == A^T``): powers of ``S = D^-1/2 A D^-1/2``, so ``(S^b)^T = S^b`` and every product is a
    contiguous row sum; directed: powers of ``P = D^-1 A`` against the transposed powers. numpy rather than
    torch: a few dozen small operations per graph, where torch's per-operation overhead doubled the time."""
    row, col = data.edge_index.cpu().numpy()
    weight = data.edge_weight if "edge_weight" in data else None
    value = None if weight is None else weight.detach().cpu().double().numpy()
    # duplicate edges summed
    adj = np.bincount(row * n + col, weights=value, minlength=n * n).reshape(n, n).astype(dtype, copy=False)
    deg = adj.sum(1)
    symmetric = np.array_equal(adj, adj.T)
    positive = deg > 0
    if symmetric:
        d_is = np.zeros_like(deg)
        d_is[positive] = 1.0 / np.sqrt(deg[positive])
        m = d_is[:, None] * adj * d_is[None, :]
    else:
        m = adj / np.where(positive, deg, 1)[:, None]  # zero rows stay zero
    # diag(M^t)_i = sum_j (M^a)_ij (M^b)_ji: row sums of M^a * M^b (symmetric) or of M^a * (M^b)^T
    pair = "ij,ij->i" if symmetric else "ij,ji->i"
    out = np.empty((n, steps), dtype=dtype)
    out[:, 0] = m.diagonal()
    power = m  # M^a
    for a in range(1, (steps + 1) // 2 + 1):
        if a > 1:
            previous, power = power, power @ m
            out[:, 2 * a - 2] = np.einsum(pair, previous, power)  # t = 2a - 1 = (a - 1) + a
        if 2 * a <= steps:
            out[:, 2 * a - 1] = np.einsum(pair, power, power)  # t = 2a = a + a
    return out


def _rowsum_product(a: sp.csr_matrix, b: sp.csr_matrix) -> np.ndarray:
    """``rowsum(a * b)`` (elementwise) of two CSR matrices of the same shape."""
    if a is not b:
        return np.asarray(a.multiply(b).sum(axis=1)).ravel()
    # a * a: no sort, no pattern merge, the squares of the stored values summed per row
    out = np.zeros(a.shape[0])
    if a.nnz:
        full = np.diff(a.indptr) > 0  # reduceat would return a neighbour's value for an empty row
        out[full] = np.add.reduceat(a.data * a.data, a.indptr[:-1][full])
    return out


def _sparse_returns(adj: sp.csr_matrix, steps: int, *, nodes: np.ndarray | None, block: int,
                    dense_fraction: float) -> np.ndarray:
    """Exact return probabilities from sparse half-powers, in row blocks (see :class:`RandomWalkPE`)."""
    n = adj.shape[0]
    deg = np.asarray(adj.sum(axis=1)).ravel()
    symmetric = _is_symmetric(adj)
    if symmetric:  # S = D^-1/2 A D^-1/2 is symmetric and has the diagonal powers of P
        d_is = _inv_sqrt(deg)
        m = (sp.diags(d_is) @ adj @ sp.diags(d_is)).tocsr()
        mt = m
    else:
        d_inv = np.where(deg > 0, 1.0 / np.where(deg > 0, deg, 1.0), 0.0)
        m = (sp.diags(d_inv) @ adj).tocsr()
        mt = m.T.tocsr()
    targets = np.arange(n) if nodes is None else nodes
    out = np.zeros((targets.size, steps))
    out[:, 0] = m.diagonal()[targets]
    h = (steps + 1) // 2
    for start in range(0, targets.size, block):
        rows = slice(start, min(start + block, targets.size))
        idx = targets[rows]
        left = m[idx]  # rows idx of M^p
        right = left if symmetric else mt[idx]  # rows idx of (M^T)^p
        prev_left = None
        for p in range(1, h + 1):
            if p > 1:
                if left.nnz > dense_fraction * left.shape[0] * n:  # dense from here on: cheaper than sparse
                    _dense_continue(m, mt, symmetric, left, right, p, steps, out[rows])
                    break
                prev_left, left = left, left @ m
                right = left if symmetric else right @ mt
                out[rows, 2 * p - 2] = _rowsum_product(prev_left, right)  # t = 2p - 1 = (p - 1) + p
            if 2 * p <= steps:
                out[rows, 2 * p - 1] = _rowsum_product(left, right)  # t = 2p = p + p
    return out


def _dense_continue(m: sp.csr_matrix, mt: sp.csr_matrix, symmetric: bool, left: sp.csr_matrix,
                    right: sp.csr_matrix, p: int, steps: int, out: np.ndarray) -> None:
    """Continue :func:`_sparse_returns` for one block from ``left`` / ``right`` (power ``p - 1``), dense.

    Works on transposes: ``Y^T = (rows of M^a)^T`` is ``N x block`` and ``(M^(a+1))^T = M^T (M^a)^T``."""
    n, h = m.shape[0], (steps + 1) // 2
    chunk = max(1, 2**24 // n)
    for c0 in range(0, left.shape[0], chunk):
        cols = slice(c0, min(c0 + chunk, left.shape[0]))
        lt = left[cols].T.toarray()  # (N, chunk): rows of M^(p-1), transposed
        rt = lt if symmetric else right[cols].T.toarray()
        for q in range(p, h + 1):
            prev_lt = lt
            lt = mt @ lt
            rt = lt if symmetric else m @ rt
            out[cols, 2 * q - 2] = np.einsum("ij,ij->j", prev_lt, rt)  # t = 2q - 1
            if 2 * q <= steps:
                out[cols, 2 * q - 1] = np.einsum("ij,ij->j", lt, rt)  # t = 2q


def _monte_carlo_returns(adj: sp.csr_matrix, steps: int, walks: int, seed: int,
                         nodes: np.ndarray | None = None) -> np.ndarray:
    n = adj.shape[0]
    gen = torch.Generator().manual_seed(seed)
    indptr = torch.from_numpy(adj.indptr.astype(np.int64))
    indices = torch.from_numpy(adj.indices.astype(np.int64))
    # cumulative weights per row, for weighted neighbour sampling by binary search
    cum = torch.from_numpy(np.asarray(adj.data, dtype=np.float64)).cumsum(0)
    cum_before = torch.cat([torch.zeros(1, dtype=torch.float64), cum])
    deg = cum_before[indptr[1:]] - cum_before[indptr[:-1]]
    unweighted = adj.nnz == 0 or bool(np.all(adj.data == adj.data[0]))
    targets = torch.arange(n) if nodes is None else torch.from_numpy(np.asarray(nodes, dtype=np.int64))
    out = np.zeros((targets.numel(), steps))
    chunk = max(1, 2**20 // walks)  # start nodes per chunk: at most ~1M walkers in memory
    for start in range(0, targets.numel(), chunk):
        origin = targets[start:start + chunk].repeat_interleave(walks)
        pos = origin.clone()
        alive = torch.ones_like(origin, dtype=torch.bool)
        for t in range(steps):
            u = torch.rand(pos.numel(), generator=gen, dtype=torch.float64)
            alive &= deg[pos] > 0  # a walker at a node without out-edges stops (P has a zero row there)
            a = alive.nonzero().squeeze(1)
            if a.numel():
                p = pos[a]
                lo, hi = indptr[p], indptr[p + 1] - 1
                if unweighted:  # a uniform neighbour
                    j = lo + (u[a] * (hi + 1 - lo)).long()
                else:  # the neighbour whose cumulative-weight interval contains the uniform draw
                    j = torch.searchsorted(cum, cum_before[lo] + u[a] * deg[p], right=True)
                pos[a] = indices[torch.minimum(torch.maximum(j, lo), hi)]
            back = ((pos == origin) & alive).view(-1, walks).double().mean(1)
            out[start:start + back.numel(), t] = back.numpy()
    return out


# ------------------------------------------------------------------------------- random feature propagation
class RandomFeaturePropagation(BaseTransform):
    """Random feature propagation (RFP): the trajectory of normalised power iteration from random features.

    Eliasof, Frasca, Bevilacqua, Treister, Chechik, Maron 2023, "Graph Positional Encoding via Random
    Feature Propagation", ICML 2023, arXiv:2303.02918.

    ``X0`` ``(N, num_features)`` is standard normal. Then ``X_l = Norm(A_hat X_{l-1})`` for ``l = 1..steps``, with

    * ``operator="sym"``: ``A_hat = D^-1/2 (A + I) D^-1/2`` (undirected graphs only),
    * ``operator="rw"``: ``A_hat = D^-1 (A + I)`` (row-stochastic; directed graphs allowed),

    (``+ I`` only when ``add_self_loops``; it damps the period-2 oscillation of bipartite graphs), and

    * ``normalization="qr"`` (default, as the paper): reduced QR, ``X <- Q`` with ``diag(R) >= 0`` (subspace, or
      orthogonal, iteration): the columns stay orthonormal and converge to the ``num_features`` leading
      eigenvectors of ``A_hat``; when ``N < num_features`` the last ``num_features - N`` columns are 0,
    * ``normalization="l2"``: each column divided by its l2 norm over the nodes (power iteration; every column
      converges to the same leading eigenvector, the trivial ``D^1/2 1`` for ``"sym"``, so late steps of
      different columns carry the same information),
    * ``normalization="none"``: ``X_l = A_hat X_{l-1}`` (the spectral radius of ``A_hat`` is 1: no blow-up).

    ``X0`` is normalised the same way. With ``num_inits > 1`` independent trajectories are drawn; map them with
    a network that is invariant to their order (:class:`~pe_toolkit.domains.graphs.encoders.RFPEncoder`, DSS).

    The random start, redrawn per graph and per epoch: ``X0`` of every init comes from numpy's generator seeded
    with ``(seed, epoch, graph key)`` (a ``SeedSequence``; the global RNGs are neither used nor advanced):

    * ``epoch``: set with :meth:`set_epoch` (default 0). ``GraphDataModule`` calls it with the training epoch
      before each training batch (evaluation uses its own copy at epoch 0), so every epoch sees new starts,
      and a resumed run the same starts as an uninterrupted one.
    * graph key: ``data[index_attr]`` (default ``"graph_id"``, the graph's index in its dataset, which
      ``GraphDataModule`` attaches; not ``*index*``, which PyG's batching would offset by the node count) when
      present; otherwise a sha256 of the graph (``num_nodes`` and the sorted
      edges with their weights), so different graphs get different starts even without an index, and one
      graph the same start every time it is transformed at the same epoch, whatever the order of its edge list.

    As a ``pre_transform`` (computed once and cached) the start is fixed per graph for the whole training, the
    simplification of the earlier versions; the paper's redraw needs a per-access ``transform``.

    Output shape: ``(N, num_inits * (steps + 1) * num_features)``, ordered init-major, then step, then
    feature: column ``(i * (steps + 1) + l) * num_features + f`` is feature ``f`` of step ``l`` of init ``i``.

    Args:
        num_features: random channels per init (>= 1).
        steps: propagation steps (>= 1).
        operator: ``"sym"`` or ``"rw"``.
        normalization: ``"qr"``, ``"l2"`` or ``"none"``.
        num_inits: independent random initialisations (>= 1).
        seed: base seed of the starts (>= 0).
        attr_name: node attribute; ``None`` concatenates to ``data.x``.
        add_self_loops: add ``I`` to ``A`` before normalising.
        index_attr: graph-level attribute holding the graph's index (an int or a one-element integer tensor);
            ``None``: always key the start by the graph's structure.
        dtype: floating dtype of the stored tensor.

    Raises:
        TypeError / ValueError: bad arguments; a graph with 0 nodes; a directed graph with ``operator="sym"``; a
        negative or non-integer ``data[index_attr]``.
    """

    def __init__(
        self,
        num_features: int,
        steps: int,
        operator: str = "sym",
        normalization: str = "qr",
        num_inits: int = 1,
        seed: int = 0,
        attr_name: str | None = "rfp",
        *,
        add_self_loops: bool = True,
        index_attr: str | None = "graph_id",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        owner = "RandomFeaturePropagation"
        self.num_features = check_int(f"{owner}: num_features", num_features)
        self.steps = check_int(f"{owner}: steps", steps)
        self.operator = check_choice(f"{owner}: operator", operator, ("sym", "rw"))
        self.normalization = check_choice(f"{owner}: normalization", normalization, ("qr", "l2", "none"))
        self.num_inits = check_int(f"{owner}: num_inits", num_inits)
        self.seed = check_int(f"{owner}: seed", seed, minimum=0)
        self.attr_name = _check_attr_name(owner, "attr_name", attr_name)
        if not isinstance(add_self_loops, bool):
            raise TypeError(f"{owner}: add_self_loops must be a bool, got {add_self_loops!r}")
        self.add_self_loops = add_self_loops
        self.index_attr = _check_attr_name(owner, "index_attr", index_attr)
        self.dtype = _check_dtype(owner, dtype)
        self.epoch = 0

    @property
    def out_features(self) -> int:
        """Width of the encoding: ``num_inits * (steps + 1) * num_features``."""
        return self.num_inits * (self.steps + 1) * self.num_features

    def set_epoch(self, epoch: int) -> None:
        """Draw the starts of ``epoch`` from now on (``GraphDataModule`` calls this before each training batch)."""
        self.epoch = check_int("RandomFeaturePropagation: epoch", epoch, minimum=0)

    def operator_matrix(self, data: Data) -> sp.csr_matrix:
        """The propagation operator ``A_hat`` of ``data`` (float64 CSR)."""
        n = _check_data("RandomFeaturePropagation", data, undirected=self.operator == "sym")
        adj = graph_adjacency(data, self_loops=True)
        if self.add_self_loops:
            adj = (adj + sp.identity(n, format="csr")).tocsr()
        deg = np.asarray(adj.sum(axis=1)).ravel()
        if self.operator == "sym":
            return _scale_rows_and_columns(adj, _inv_sqrt(deg))
        d_inv = np.where(deg > 0, 1.0 / np.where(deg > 0, deg, 1.0), 0.0)
        return (sp.diags(d_inv) @ adj).tocsr()

    def graph_key(self, data: Data) -> tuple[int, int]:
        """``(0, index)`` from ``data[index_attr]``, or ``(1, structure hash)`` when the graph has no index."""
        if self.index_attr is not None and self.index_attr in data:
            value = data[self.index_attr]
            if isinstance(value, Tensor):
                if value.numel() != 1 or value.is_floating_point() or value.dtype == torch.bool:
                    raise ValueError(f"RandomFeaturePropagation: data.{self.index_attr} must be one integer (the "
                                     f"graph's index), got {value.dtype} of shape {tuple(value.shape)}")
                value = int(value.reshape(()))
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"RandomFeaturePropagation: data.{self.index_attr} must be an integer >= 0 (the "
                                 f"graph's index), got {value!r}")
            return 0, int(value)
        edges = data.edge_index.detach().cpu().to(torch.int64).numpy()
        order = np.lexsort((edges[1], edges[0]))  # the edge list's order does not change the graph, nor its key
        digest = hashlib.sha256(f"{data.num_nodes}|".encode())
        digest.update(np.ascontiguousarray(edges[:, order]).tobytes())
        if "edge_weight" in data and data.edge_weight is not None:
            digest.update(data.edge_weight.detach().cpu().to(torch.float64).numpy()[order].tobytes())
        return 1, int.from_bytes(digest.digest()[:8], "little")

    def starts(self, num_nodes: int, key: tuple[int, int], epoch: int | None = None) -> np.ndarray:
        """The raw standard-normal starts ``(num_inits, num_nodes, num_features)`` (float64) for a graph key."""
        epoch = self.epoch if epoch is None else check_int("RandomFeaturePropagation: epoch", epoch, minimum=0)
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, epoch, *key]))
        return rng.standard_normal((self.num_inits, num_nodes, self.num_features))

    def _normalize(self, x: np.ndarray) -> np.ndarray:
        """Normalise every init's ``(N, F)`` block of ``x`` ``(inits, N, F)``."""
        if self.normalization == "none":
            return x
        if self.normalization == "l2":
            norm = np.linalg.norm(x, axis=1, keepdims=True)
            return x / np.where(norm > 0, norm, 1.0)
        q, r = np.linalg.qr(x)  # reduced, batched over inits: q (inits, N, min(N, F))
        signs = np.sign(np.diagonal(r, axis1=1, axis2=2))
        signs[signs == 0] = 1.0
        q = q * signs[:, None, :]
        if q.shape[2] < x.shape[2]:
            q = np.concatenate([q, np.zeros((*x.shape[:2], x.shape[2] - q.shape[2]))], axis=2)
        return q

    def features(self, data: Data, *, epoch: int | None = None) -> np.ndarray:
        """The ``(N, out_features)`` float64 encoding of ``data`` (at ``epoch``, default :attr:`epoch`)."""
        op = self.operator_matrix(data)
        n, inits, width = op.shape[0], self.num_inits, self.num_features
        x = self._normalize(self.starts(n, self.graph_key(data), epoch))
        out = np.empty((n, inits, self.steps + 1, width))
        out[:, :, 0] = x.transpose(1, 0, 2)
        for step in range(1, self.steps + 1):
            flat = op @ x.transpose(1, 0, 2).reshape(n, inits * width)  # one sparse product for every init
            x = self._normalize(flat.reshape(n, inits, width).transpose(1, 0, 2))
            out[:, :, step] = x.transpose(1, 0, 2)
        return out.reshape(n, -1)

    def forward(self, data: Data) -> Data:
        pe = torch.from_numpy(self.features(data)).to(data.edge_index.device, self.dtype)
        return _add_node_attr("RandomFeaturePropagation", data, pe, self.attr_name)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_features={self.num_features}, steps={self.steps}, "
            f"operator={self.operator!r}, normalization={self.normalization!r}, num_inits={self.num_inits}, "
            f"seed={self.seed}, add_self_loops={self.add_self_loops}, index_attr={self.index_attr!r})"
        )


def epoch_transforms(transform: Any) -> list[Any]:
    """The transforms inside ``transform`` (itself, or the members of a PyG ``Compose``, recursively) that draw
    per epoch, i.e. have ``set_epoch`` (e.g. :class:`RandomFeaturePropagation`)."""
    if transform is None:
        return []
    if hasattr(transform, "set_epoch"):
        return [transform]
    return [t for member in getattr(transform, "transforms", ()) or () for t in epoch_transforms(member)]


def random_walk_std(probabilities: Tensor | np.ndarray, num_walks: int) -> np.ndarray:
    """Standard error of the Monte-Carlo return probabilities: ``sqrt(p (1 - p) / num_walks)``."""
    p = np.asarray(probabilities, dtype=np.float64)
    return np.sqrt(np.clip(p * (1 - p), 0, None) / num_walks) if num_walks > 0 else np.full_like(p, math.inf)


def laplacian_residual(data: Data, vectors: Tensor | np.ndarray, eigenvalues: Any = None) -> float:
    """How far ``vectors`` are from eigenvectors of ``L = I - D^-1/2 A D^-1/2``: ``max_j |L v_j - lambda_j v_j|``.

    In float64, for the unit-normalised nonzero columns ``v_j`` of ``vectors`` ``(N, k)`` (all-zero columns, e.g. the
    padding of :class:`LaplacianEigenvectorPE` on a small graph, are left out); ``lambda_j`` is ``eigenvalues[j]``
    (the first entries, one per kept column) or, if None, the Rayleigh quotient ``v_j^T L v_j``. Self-loops are
    ignored, as the transforms ignore them. Use it to check any eigensolver's output (this package's or PyG's
    ``laplacian_eigenvector_pe``).
    """
    n = data.num_nodes
    v = vectors.detach().cpu().double().numpy() if isinstance(vectors, Tensor) else np.asarray(vectors, np.float64)
    if v.ndim != 2 or v.shape[0] != n:
        raise ValueError(f"laplacian_residual: vectors must have shape (num_nodes={n}, k), got {tuple(v.shape)}")
    adj = graph_adjacency(data, self_loops=False)
    scale = sp.diags(_inv_sqrt(np.asarray(adj.sum(axis=1)).ravel()))
    lap = sp.identity(n) - scale @ adj @ scale
    v = v[:, np.linalg.norm(v, axis=0) > 0]
    v = v / np.linalg.norm(v, axis=0)
    lv = lap @ v
    if eigenvalues is None:
        lam = (v * lv).sum(0)
    else:
        lam = np.asarray(eigenvalues.detach().cpu() if isinstance(eigenvalues, Tensor) else eigenvalues, np.float64)
        if lam.ndim != 1 or lam.shape[0] < v.shape[1]:
            raise ValueError(f"laplacian_residual: eigenvalues must be 1-D with at least {v.shape[1]} entries (one per "
                             f"nonzero column of vectors), got shape {tuple(lam.shape)}")
        lam = lam[: v.shape[1]]
    return float(np.linalg.norm(lv - v * lam, axis=0).max(initial=0.0))
