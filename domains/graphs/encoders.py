"""Learned graph positional encodings: map a precomputed node attribute into the model (``embed`` hook).

The transforms in :mod:`pe_toolkit.domains.graphs.transforms` precompute a node attribute; these modules take it as
``positions`` and add a learned projection to the node features::

    x = x + proj(positions)      # x: (..., N, dim), positions: (..., N, in_features)

Leading dimensions are free: PyG-style flat batches ``x (N_total, dim)`` with ``positions (N_total, k)``,
or dense batches ``x (B, N, dim)`` with ``positions (B, N, k)``. Registered under ``domain="graphs"``:

* ``lap_pe``: :class:`LapPEEncoder` (linear or SignNet, random sign flips in training),
* ``rwse``: :class:`RWSEEncoder` (norm + linear),
* ``rfp``: :class:`RFPEncoder` (a sign-invariant DSS network over the random initialisations, then a symmetric
  pooling),
* ``rfp_learned``: :class:`LearnedRFPEncoder` (RFP with a learned attention operator; needs ``edge_index``).

``example_positions(length)`` of each encoder is its transform applied to :func:`example_graph` ``(length)``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import PositionalEncoding, check_choice, check_int
from pe_toolkit.registry import register_encoder

if TYPE_CHECKING:
    from torch_geometric.data import Data

__all__ = ["DSSLayer", "LapPEEncoder", "LearnedRFPEncoder", "RFPEncoder", "RWSEEncoder", "RunningRMSNorm",
           "example_graph", "random_signs"]


def _check_inputs(owner: str, x: Tensor, positions: Tensor, dim: int, in_features: int) -> None:
    if not isinstance(x, Tensor) or not isinstance(positions, Tensor):
        raise TypeError(f"{owner}: x and positions must be tensors, got {type(x).__name__}, {type(positions).__name__}")
    if x.dim() < 2 or x.size(-1) != dim:
        raise ValueError(f"{owner}: x must have shape (..., N, {dim}), got {tuple(x.shape)}")
    if not positions.is_floating_point():
        raise TypeError(f"{owner}: positions must be a floating tensor (a precomputed PE), got {positions.dtype}")
    want = tuple(x.shape[:-1]) + (in_features,)
    if tuple(positions.shape) != want:
        raise ValueError(f"{owner}: positions has shape {tuple(positions.shape)}, expected {want}")


def random_signs(shape: tuple[int, ...], *, device: torch.device | None = None, dtype: torch.dtype = torch.float32,
                 generator: torch.Generator | None = None) -> Tensor:
    """Uniform random +-1 of ``shape`` (global RNG unless ``generator`` is given)."""
    bits = torch.randint(0, 2, shape, device=device, generator=generator)
    return (bits * 2 - 1).to(dtype)


def example_graph(num_nodes: int) -> Data:
    """The fixed graph behind the encoders' ``example_positions``: ``num_nodes`` nodes on a 2-D grid.

    Node ``i`` sits at row ``i // w``, column ``i % w`` of a grid ``w = ceil(sqrt(num_nodes))`` wide (the last
    row may be partial) and is joined to its right and lower neighbours; undirected, ``edge_index`` both ways.
    """
    from torch_geometric.data import Data
    from torch_geometric.utils import to_undirected

    n = check_int("num_nodes", num_nodes)
    width = math.isqrt(n - 1) + 1  # ceil(sqrt(n))
    nodes = torch.arange(n)
    right = nodes[(nodes % width < width - 1) & (nodes + 1 < n)]
    down = nodes[nodes + width < n]
    edges = torch.cat([torch.stack([right, right + 1]), torch.stack([down, down + width])], dim=1)
    return Data(edge_index=to_undirected(edges, num_nodes=n), num_nodes=n)


class _EmbedWith(PositionalEncoding):
    """``encoder.embed`` with fixed keyword arguments, so that the base recipe of
    :meth:`PositionalEncoding.positional_pattern` can draw an encoder whose ``embed`` needs them; ``flat``
    passes the recipe's ``x (1, N, dim)`` as the flat node batch ``(N, dim)`` that some encoders require."""

    def __init__(self, encoder: PositionalEncoding, *, flat: bool = False, **embed_kwargs: Any) -> None:
        super().__init__(encoder.dim, encoder.num_heads, causal=encoder.causal)
        self.encoder, self.flat, self.embed_kwargs = encoder, flat, embed_kwargs

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        kwargs = {k: v.to(x.device) if isinstance(v, Tensor) else v for k, v in self.embed_kwargs.items()}
        if self.flat:
            return self.encoder.embed(x[0], positions, **kwargs).unsqueeze(0)
        return self.encoder.embed(x, positions, **kwargs)


class _MLP(nn.Sequential):
    def __init__(self, sizes: list[int]) -> None:
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        super().__init__(*layers)


@register_encoder(
    "lap_pe",
    domain="graphs",
    relative=False,
    reference="Dwivedi et al. 2020, Benchmarking Graph Neural Networks, arXiv:2003.00982; SignNet: Lim et al. "
    "2022, Sign and Basis Invariant Networks for Spectral Graph Representation Learning, arXiv:2202.13013",
    example_options={"in_features": 4},
)
class LapPEEncoder(PositionalEncoding):
    """Laplacian eigenvector PE, learned part: ``x + Linear(v)`` or ``x + rho(phi(v) + phi(-v))`` (SignNet).

    Dwivedi et al. 2020, "Benchmarking Graph Neural Networks", arXiv:2003.00982 (linear projection, random
    sign flips in training); Lim et al. 2022, "Sign and Basis Invariant Networks", arXiv:2202.13013 (SignNet).

    Sign flips (training only, global RNG, like dropout): ``sign_flip="batch"`` draws one sign per
    eigenvector per call, shared by every node and graph of the batch (as in Benchmarking GNNs);
    ``"graph"`` draws one sign per eigenvector per graph, graphs given by ``batch`` (the PyG node-to-graph
    index) or, for dense ``(B, N, k)`` positions, by the leading dimension; ``"none"`` disables them. In
    ``eval()`` nothing is flipped.

    SignNet (``signnet=True``): ``phi`` is an MLP applied to each entry ``v[n, j]`` (with the eigenvalue
    ``lambda_j`` if ``use_eigenvalues``), ``h = phi(v) + phi(-v)`` is exactly invariant to the sign of each
    eigenvector, and ``rho`` maps the concatenated ``(k * hidden)`` features to ``dim``. Because ``phi`` sees
    one entry at a time this variant only uses ``|v[n, j]|`` (the GraphGPS "MLP" SignNet); the full SignNet
    runs a GNN as ``phi`` over each eigenvector, which needs the graph and is not implemented here.

    Args:
        dim: model width; num_heads: heads (must divide dim; unused here).
        in_features: ``k``, the number of eigenvectors in ``positions``.
        use_eigenvalues: also feed the eigenvalues (``embed(..., eigenvalues=...)`` then required).
        sign_flip: ``"batch"``, ``"graph"`` or ``"none"``.
        signnet: use the SignNet ``rho(phi(v) + phi(-v))`` instead of a linear map.
        hidden: width of ``phi`` (SignNet).

    Shapes (:meth:`embed`): ``x (..., N, dim)``, ``positions (..., N, k)``, ``eigenvalues (..., N, k)``,
    ``mask (..., N, k)`` bool (padded eigenvectors are False), ``batch (N,)``; returns ``(..., N, dim)``.
    """

    def __init__(self, dim: int, num_heads: int, *, in_features: int, use_eigenvalues: bool = False,
                 sign_flip: str = "batch", signnet: bool = False, hidden: int = 16, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.in_features = check_int("lap_pe: in_features", in_features)
        for name, value in (("use_eigenvalues", use_eigenvalues), ("signnet", signnet)):
            if not isinstance(value, bool):
                raise TypeError(f"lap_pe: {name} must be a bool, got {value!r}")
        self.use_eigenvalues = use_eigenvalues
        self.sign_flip = check_choice("lap_pe: sign_flip", sign_flip, ("batch", "graph", "none"))
        self.signnet = signnet
        self.hidden = check_int("lap_pe: hidden", hidden)
        k = self.in_features
        if signnet:
            self.phi = _MLP([2 if use_eigenvalues else 1, hidden, hidden])
            self.rho = _MLP([k * hidden, dim, dim])
        else:
            self.proj = nn.Linear(2 * k if use_eigenvalues else k, dim)

    def flip_signs(self, v: Tensor, batch: Tensor | None = None) -> Tensor:
        """``v`` with random eigenvector signs (training) or unchanged (eval / ``sign_flip="none"``)."""
        if not self.training or self.sign_flip == "none":
            return v
        k = v.size(-1)
        if self.sign_flip == "batch":
            return v * random_signs((k,), device=v.device, dtype=v.dtype)
        if batch is not None:
            if batch.shape != v.shape[:1] or v.dim() != 2:
                raise ValueError(f"lap_pe: batch must have shape ({v.size(0)},) for flat positions, got "
                                 f"{tuple(batch.shape)} with positions {tuple(v.shape)}")
            num_graphs = int(batch.max()) + 1 if batch.numel() else 0
            return v * random_signs((num_graphs, k), device=v.device, dtype=v.dtype)[batch]
        if v.dim() >= 3:  # dense batch: one graph per leading index
            shape = tuple(v.shape[:-2]) + (1, k)
            return v * random_signs(shape, device=v.device, dtype=v.dtype)
        return v * random_signs((k,), device=v.device, dtype=v.dtype)  # a single graph

    def encode(self, positions: Tensor, *, eigenvalues: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """The ``(..., N, dim)`` projection of (already sign-flipped) eigenvectors."""
        v = positions
        if self.use_eigenvalues:
            if eigenvalues is None or eigenvalues.shape != v.shape:
                got = None if eigenvalues is None else tuple(eigenvalues.shape)
                raise ValueError(f"lap_pe: use_eigenvalues=True needs eigenvalues of shape {tuple(v.shape)}, got {got}")
            lam = eigenvalues.to(v.dtype)
        if mask is not None:
            if mask.shape != v.shape or mask.dtype != torch.bool:
                raise ValueError(f"lap_pe: mask must be a bool tensor of shape {tuple(v.shape)}, "
                                 f"got {mask.dtype} {tuple(mask.shape)}")
            v = v * mask
            if self.use_eigenvalues:
                lam = lam * mask
        if not self.signnet:
            feats = torch.cat([v, lam], dim=-1) if self.use_eigenvalues else v
            return self.proj(feats)
        entries = v.unsqueeze(-1)  # (..., N, k, 1)
        if self.use_eigenvalues:
            pos_in = torch.cat([entries, lam.unsqueeze(-1)], dim=-1)
            neg_in = torch.cat([-entries, lam.unsqueeze(-1)], dim=-1)
        else:
            pos_in, neg_in = entries, -entries
        h = self.phi(pos_in) + self.phi(neg_in)  # (..., N, k, hidden), invariant to each column's sign
        if mask is not None:
            h = h * mask.unsqueeze(-1)
        return self.rho(h.flatten(-2))

    def embed(self, x: Tensor, positions: Tensor, *, eigenvalues: Tensor | None = None, mask: Tensor | None = None,
              batch: Tensor | None = None) -> Tensor:
        _check_inputs("lap_pe", x, positions, self.dim, self.in_features)
        v = self.flip_signs(positions.to(x.dtype), batch)
        return x + self.encode(v, eigenvalues=eigenvalues, mask=mask)

    def example_data(self, length: int) -> Data:
        """:class:`~pe_toolkit.domains.graphs.transforms.LaplacianEigenvectorPE` ``(in_features)`` (float32) applied
        to :func:`example_graph` ``(length)``: ``lap_pe``, ``lap_eigval`` and ``lap_mask``, each ``(length, k)``."""
        from pe_toolkit.domains.graphs.transforms import LaplacianEigenvectorPE

        return LaplacianEigenvectorPE(self.in_features)(example_graph(check_int("length", length)))

    def example_positions(self, length: int) -> Tensor:
        """The Laplacian eigenvectors of the grid graph :func:`example_graph` ``(length)``, as one dense graph.

        ``(1, length, in_features)`` float32: the ``in_features`` smallest non-trivial eigenvectors of the
        normalised Laplacian, canonical signs, zero columns past the ``length - 1`` that exist (see
        :meth:`example_data`, which also holds the eigenvalues and padding mask that
        :meth:`positional_pattern` passes to :meth:`embed`).
        """
        return self.example_data(length).lap_pe.unsqueeze(0)

    def positional_pattern(self, length: int = 32, *, positions: Tensor | None = None,
                           eigenvalues: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """The base recipe (:meth:`PositionalEncoding.positional_pattern`), passing ``eigenvalues`` and ``mask``
        to :meth:`embed` as the graph models do. Without ``positions`` all three come from :meth:`example_data`
        (with a leading graph dimension); with ``positions``, ``eigenvalues`` / ``mask`` are used as given
        (``eigenvalues`` required when ``use_eigenvalues``). Returns ``(H, length, length)``."""
        check_int("length", length)
        if positions is None:
            data = self.example_data(length)
            positions, eigenvalues, mask = (t.unsqueeze(0) for t in (data.lap_pe, data.lap_eigval, data.lap_mask))
        eigenvalues = eigenvalues if self.use_eigenvalues else None
        return _EmbedWith(self, eigenvalues=eigenvalues, mask=mask).positional_pattern(length, positions=positions)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, in_features={self.in_features}, signnet={self.signnet}, "
                f"use_eigenvalues={self.use_eigenvalues}, sign_flip={self.sign_flip!r}")


@register_encoder(
    "rwse",
    domain="graphs",
    relative=False,
    reference="Dwivedi et al. 2022, Graph Neural Networks with Learnable Structural and Positional "
    "Representations, arXiv:2110.07875; Rampasek et al. 2022, GraphGPS, arXiv:2205.12454",
    example_options={"in_features": 4},
)
class RWSEEncoder(PositionalEncoding):
    """Random-walk structural encoding, learned part: ``x + Linear(Norm(p))``.

    Dwivedi et al. 2022, arXiv:2110.07875 (RWPE); GraphGPS (Rampasek et al. 2022, arXiv:2205.12454) RWSE
    with a BatchNorm on the raw return probabilities, which span several orders of magnitude.

    Args:
        dim, num_heads: as for every encoder.
        in_features: walk length ``T`` of the precomputed ``(..., N, T)`` return probabilities.
        norm: ``"batch"`` (BatchNorm1d over all nodes of the batch), ``"layer"`` or ``"none"``.

    Shapes (:meth:`embed`): ``x (..., N, dim)``, ``positions (..., N, T)`` -> ``(..., N, dim)``.
    """

    def __init__(self, dim: int, num_heads: int, *, in_features: int, norm: str = "batch",
                 causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.in_features = check_int("rwse: in_features", in_features)
        self.norm_kind = check_choice("rwse: norm", norm, ("batch", "layer", "none"))
        self.norm = {"batch": lambda: nn.BatchNorm1d(in_features), "layer": lambda: nn.LayerNorm(in_features),
                     "none": nn.Identity}[norm]()
        self.proj = nn.Linear(in_features, dim)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        _check_inputs("rwse", x, positions, self.dim, self.in_features)
        p = positions.to(x.dtype).reshape(-1, self.in_features)  # (nodes, T): BatchNorm over all nodes
        return x + self.proj(self.norm(p)).view(x.shape)

    def example_positions(self, length: int) -> Tensor:
        """Random-walk return probabilities of the grid graph :func:`example_graph` ``(length)``, one dense graph.

        ``(1, length, in_features)`` float32: :class:`~pe_toolkit.domains.graphs.transforms.RandomWalkPE`
        ``(walk_length=in_features)`` (exact), so entry ``t - 1`` of node ``i`` is ``diag(P^t)_i``.
        """
        from pe_toolkit.domains.graphs.transforms import RandomWalkPE

        data = RandomWalkPE(self.in_features)(example_graph(check_int("length", length)))
        return data.rw_pe.unsqueeze(0)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, in_features={self.in_features}, norm={self.norm_kind!r}"


class RunningRMSNorm(nn.Module):
    """Divide each channel by its root mean square over all nodes (and initialisations) of the batch.

    BatchNorm without the centring and the affine part, so it is odd (``f(-h) = -f(h)``) and keeps the sign
    symmetry of random features: in training the statistics of the batch (and a running average, momentum
    ``momentum``), in ``eval()`` the running average. RFP's columns have unit norm over the nodes, i.e.
    entries ``~1 / sqrt(N)``; this brings them to ``~1`` whatever the graph size, where the layers that follow
    are not linear (the even, sign-invariant part that survives the pooling over initialisations is second
    order in the input).

    Shapes: ``h (..., C) -> (..., C)``.
    """

    def __init__(self, num_features: int, *, momentum: float = 0.1, eps: float = 1e-12) -> None:
        super().__init__()
        self.momentum, self.eps = float(momentum), float(eps)
        self.register_buffer("running_ms", torch.ones(num_features))

    def forward(self, h: Tensor) -> Tensor:
        if self.training:
            ms = h.pow(2).reshape(-1, h.size(-1)).mean(dim=0)
            with torch.no_grad():
                self.running_ms.lerp_(ms.detach().to(self.running_ms.dtype), self.momentum)
        else:
            ms = self.running_ms.to(h.dtype)
        return h * torch.rsqrt(ms + self.eps)


class DSSLayer(nn.Module):
    """One DSS layer over a set of ``B`` elements: ``y_i = L1(h_i) + L2(mean_j h_j)``.

    Maron, Litany, Chechik, Fetaya 2020, "On Learning Sets of Symmetric Elements", ICML 2020, arXiv:2002.08599:
    the Siamese part ``L1`` (shared by every element) plus the aggregation part ``L2`` on the (normalised) sum
    of the elements. Both are linear maps of each node's features, so the layer is equivariant to
    permutations of the elements and of the nodes. The mean instead of the sum keeps the scale fixed as ``B``
    grows.

    Shapes: ``h (..., B, in_features) -> (..., B, out_features)``.
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.siamese = nn.Linear(in_features, out_features)
        self.aggregate = nn.Linear(in_features, out_features, bias=False)

    def forward(self, h: Tensor) -> Tensor:
        return self.siamese(h) + self.aggregate(h.mean(dim=-2, keepdim=True))


@register_encoder(
    "rfp",
    domain="graphs",
    relative=False,
    reference="Eliasof et al. 2023, Graph Positional Encoding via Random Feature Propagation, ICML 2023, "
    "arXiv:2303.02918; DSS: Maron et al. 2020, On Learning Sets of Symmetric Elements, arXiv:2002.08599",
    example_options={"in_features": 6, "num_inits": 2},
)
class RFPEncoder(PositionalEncoding):
    """Random feature propagation, learned part: a DSS network over the initialisations, then a symmetric pool.

    Eliasof et al. 2023, arXiv:2303.02918 processes the ``B`` random trajectories of
    :class:`~pe_toolkit.domains.graphs.transforms.RandomFeaturePropagation` (``positions``: ``B`` blocks of equal
    width, init-major) with a DSS network (Maron et al. 2020, arXiv:2002.08599; DSS-GNN, Bevilacqua et al.
    2022), invariant to the order of the initialisations. Here, per node::

        u_i = Norm(t_i)                                          # trajectory of init i, RunningRMSNorm
        h_i = ReLU(W u_i + b) + ReLU(-W u_i + b)                 # shared network, invariant to the sign of u_i
        h_i = ReLU(L1(h_i) + L2(mean_j h_j))                     # DSSLayer (Siamese + aggregation), x layers
        x + Linear(pool_i h_i)                                   # pool: mean, sum or max over the inits

    Why not map each init and average (the earlier version): a linear map commutes with the average, and the
    average of ``B`` independent trajectories shrinks like ``1 / sqrt(B)`` because a trajectory is odd in its
    random start (``X0`` and ``-X0`` are equally likely): the positional signal vanished as ``B`` grew (RMS
    0.156 -> 0.021 from 1 to 64 inits). The shared network here is invariant to each init's sign (as SignNet
    is to an eigenvector's), so the per-init features are even functions of the start, which do not cancel:
    their average converges to an expectation that depends on the graph (e.g. squared entries estimate the
    diagonal of spectral projectors), and the output converges as ``B`` grows instead of vanishing.

    Simplification: the layers act on each node's features; the paper's DSS-GNN also passes messages over the
    graph inside each layer (here the graph model's own layers do that after the input).

    Args:
        dim, num_heads: as for every encoder.
        in_features: total width ``num_inits * (steps + 1) * num_features``.
        num_inits: number of trajectories ``B`` in ``positions`` (must divide ``in_features``).
        hidden: width of the shared network and the DSS layers (default ``dim``).
        layers: number of DSS layers (>= 1).
        pool: ``"mean"``, ``"sum"`` or ``"max"`` over the inits.
        norm: ``"rms"`` (:class:`RunningRMSNorm` of the input) or ``"none"``.

    Shapes (:meth:`embed`): ``x (..., N, dim)``, ``positions (..., N, in_features)`` -> ``(..., N, dim)``.
    """

    def __init__(self, dim: int, num_heads: int, *, in_features: int, num_inits: int = 1, hidden: int | None = None,
                 layers: int = 1, pool: str = "mean", norm: str = "rms", causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.in_features = check_int("rfp: in_features", in_features)
        self.num_inits = check_int("rfp: num_inits", num_inits)
        if in_features % num_inits:
            raise ValueError(f"rfp: num_inits ({num_inits}) must divide in_features ({in_features})")
        self.hidden = dim if hidden is None else check_int("rfp: hidden", hidden)
        self.num_layers = check_int("rfp: layers", layers)
        self.pool = check_choice("rfp: pool", pool, ("mean", "sum", "max"))
        self.norm_kind = check_choice("rfp: norm", norm, ("rms", "none"))
        width = in_features // num_inits
        self.norm = RunningRMSNorm(width) if norm == "rms" else nn.Identity()
        self.shared = nn.Linear(width, self.hidden)
        self.layers = nn.ModuleList(DSSLayer(self.hidden, self.hidden) for _ in range(self.num_layers))
        self.proj = nn.Linear(self.hidden, dim)

    def encode(self, positions: Tensor) -> Tensor:
        """``(..., N, dim)``: the DSS network and the pooling over inits, without the residual ``x``."""
        u = self.norm(positions.unflatten(-1, (self.num_inits, -1)))  # (..., N, inits, width)
        z = nn.functional.linear(u, self.shared.weight)
        h = torch.relu(z + self.shared.bias) + torch.relu(self.shared.bias - z)  # sign-invariant per init
        for layer in self.layers:
            h = torch.relu(layer(h))
        if self.pool == "mean":
            pooled = h.mean(dim=-2)
        elif self.pool == "sum":
            pooled = h.sum(dim=-2)
        else:
            pooled = h.amax(dim=-2)
        return self.proj(pooled)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        _check_inputs("rfp", x, positions, self.dim, self.in_features)
        return x + self.encode(positions.to(x.dtype))

    def example_positions(self, length: int) -> Tensor:
        """Random feature propagation on the grid graph :func:`example_graph` ``(length)``, one dense graph.

        ``(1, length, in_features)`` float32: :class:`~pe_toolkit.domains.graphs.transforms.RandomFeaturePropagation`
        with ``num_inits`` initialisations of one random channel each (seed 0, epoch 0, the start keyed by the
        graph's structure; the global RNG is not used), propagated ``in_features / num_inits - 1`` steps, so
        each init's block is the trajectory ``X_0, ..., X_steps``. (With one column per init,
        ``in_features == num_inits``, the blocks are ``X_0``.)
        """
        from pe_toolkit.domains.graphs.transforms import RandomFeaturePropagation

        width = self.in_features // self.num_inits
        rfp = RandomFeaturePropagation(1, max(width - 1, 1), num_inits=self.num_inits, seed=0)
        features = rfp(example_graph(check_int("length", length))).rfp  # (length, num_inits * max(width, 2))
        return features.unflatten(-1, (self.num_inits, -1))[..., :width].flatten(-2).unsqueeze(0)

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, in_features={self.in_features}, num_inits={self.num_inits}, hidden={self.hidden}, "
                f"layers={self.num_layers}, pool={self.pool!r}, norm={self.norm_kind!r}")


@register_encoder(
    "rfp_learned",
    domain="graphs",
    relative=False,
    reference="Eliasof et al. 2023, Graph Positional Encoding via Random Feature Propagation, ICML 2023, "
    "arXiv:2303.02918 (learned, attention-based propagation operator)",
    example_options={"in_features": 4, "steps": 2},
)
class LearnedRFPEncoder(PositionalEncoding):
    """RFP with a learned, feature-dependent propagation operator: ``x + Linear([X_0 | X_1 | ... | X_L])``.

    Eliasof et al. 2023, arXiv:2303.02918: besides fixed operators, the paper learns the operator with
    attention. Here ``A_hat[i, j] = softmax_{j in N(i) + i}(<W_q x_i, W_k x_j> / sqrt(hidden))`` over the
    in-neighbours ``j`` of ``i`` (``edge_index`` rows are sources, columns targets, PyG convention) plus ``i``
    itself, one operator shared by all steps; ``X_l = Norm(A_hat X_{l-1})`` with column l2 normalisation per
    graph (``batch``). With ``W_q = 0`` or ``W_k = 0`` the operator is the mean over ``N(i) + i``, i.e. the
    fixed ``operator="rw"`` of :class:`~pe_toolkit.domains.graphs.transforms.RandomFeaturePropagation` on undirected
    graphs. Gradients flow into the operator through the whole trajectory.

    Args:
        dim, num_heads: as for every encoder.
        in_features: ``r``, width of the random start features ``positions`` (e.g. step 0 of
            ``RandomFeaturePropagation``: ``data.rfp[:, :r]``).
        steps: propagation steps ``L`` (>= 1).
        hidden: width of the query/key projections (default ``dim``).

    Shapes (:meth:`embed`): ``x (N, dim)``, ``positions (N, r)``, ``edge_index (2, E)``, ``batch (N,)``;
    returns ``(N, dim)``. Dense ``(B, N, ...)`` batches are not supported (the operator needs the edges).
    """

    requires_edge_index = True

    def __init__(self, dim: int, num_heads: int, *, in_features: int, steps: int, hidden: int | None = None,
                 causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.in_features = check_int("rfp_learned: in_features", in_features)
        self.steps = check_int("rfp_learned: steps", steps)
        self.hidden = dim if hidden is None else check_int("rfp_learned: hidden", hidden)
        self.query = nn.Linear(dim, self.hidden, bias=False)
        self.key = nn.Linear(dim, self.hidden, bias=False)
        self.proj = nn.Linear(in_features * (steps + 1), dim)

    def operator(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(target, source, weight)``: ``A_hat[target, source] = weight``, rows summing to 1."""
        from torch_geometric.utils import add_self_loops, remove_self_loops, softmax

        n = x.size(0)
        edge_index, _ = add_self_loops(remove_self_loops(edge_index)[0], num_nodes=n)
        source, target = edge_index
        scores = (self.query(x)[target] * self.key(x)[source]).sum(-1) / self.hidden**0.5
        return target, source, softmax(scores, target, num_nodes=n)

    def trajectory(self, x: Tensor, positions: Tensor, edge_index: Tensor, batch: Tensor | None = None) -> Tensor:
        """``(N, in_features * (steps + 1))``: ``[X_0 | ... | X_L]``, each column l2-normalised per graph."""
        from torch_geometric.utils import scatter

        n = x.size(0)
        batch = torch.zeros(n, dtype=torch.long, device=x.device) if batch is None else batch
        if batch.shape != (n,):
            raise ValueError(f"rfp_learned: batch must have shape ({n},), got {tuple(batch.shape)}")

        def normalize(h: Tensor) -> Tensor:
            norm = scatter(h * h, batch, dim=0, reduce="sum").sqrt()[batch]  # per graph and column
            return h / norm.clamp(min=1e-12)

        target, source, weight = self.operator(x, edge_index)
        h = normalize(positions.to(x.dtype))
        out = [h]
        for _ in range(self.steps):
            h = normalize(scatter(weight[:, None] * h[source], target, dim=0, dim_size=n, reduce="sum"))
            out.append(h)
        return torch.cat(out, dim=-1)

    def embed(self, x: Tensor, positions: Tensor, *, edge_index: Tensor | None = None,
              batch: Tensor | None = None) -> Tensor:
        _check_inputs("rfp_learned", x, positions, self.dim, self.in_features)
        if x.dim() != 2:
            raise ValueError(f"rfp_learned: x must be a flat (N, {self.dim}) node batch, got {tuple(x.shape)}")
        if edge_index is None or not isinstance(edge_index, Tensor) or edge_index.dim() != 2 or edge_index.size(0) != 2:
            got = None if edge_index is None else tuple(getattr(edge_index, "shape", ()))
            raise ValueError(f"rfp_learned: embed needs edge_index of shape (2, E), got {got}")
        return x + self.proj(self.trajectory(x, positions, edge_index, batch))

    def example_positions(self, length: int) -> Tensor:
        """Random start features of the grid graph :func:`example_graph` ``(length)``, a flat node batch.

        ``(length, in_features)`` float32: step 0 of
        :class:`~pe_toolkit.domains.graphs.transforms.RandomFeaturePropagation` ``(in_features, steps, operator="rw",
        normalization="l2")`` (seed 0; the start keyed by the graph's structure), i.e. ``data.rfp[:, :in_features]``:
        standard normal channels, each l2-normalised over the nodes, as :meth:`trajectory` normalises.
        """
        from pe_toolkit.domains.graphs.transforms import RandomFeaturePropagation

        rfp = RandomFeaturePropagation(self.in_features, self.steps, operator="rw", normalization="l2", seed=0)
        return rfp(example_graph(check_int("length", length))).rfp[:, : self.in_features]

    def positional_pattern(self, length: int = 32, *, positions: Tensor | None = None,
                           edge_index: Tensor | None = None) -> Tensor:
        """The base recipe (:meth:`PositionalEncoding.positional_pattern`) on a flat node batch, which is what
        :meth:`embed` accepts, with the graph's ``edge_index`` (default: that of :func:`example_graph`
        ``(length)``, the graph of :meth:`example_positions`). The recipe's ``x = 0`` makes every attention score
        of the learned operator 0, so it propagates by the mean over ``N(i) + i``. Returns ``(H, length, length)``."""
        check_int("length", length)
        positions = self.example_positions(length) if positions is None else positions
        edge_index = example_graph(length).edge_index if edge_index is None else edge_index
        return _EmbedWith(self, flat=True, edge_index=edge_index).positional_pattern(length, positions=positions)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, in_features={self.in_features}, steps={self.steps}, hidden={self.hidden}"
