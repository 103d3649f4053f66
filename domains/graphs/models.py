"""Graph models with a pluggable positional encoding: GIN (message passing), GPS (local MPNN + global attention)
and Graph Mamba (local MPNN + bidirectional selective state-space model over random-walk tokens and nodes).

The positional encoding enters once, at the input (the ``embed`` hook), in :class:`GraphPEInput`::

    h0 = NodeEmbedding(data.x)                     # Linear (float x) or Embedding (categorical long x)
    h0 = encoder.embed(h0, data[<pe attribute>])   # + a learned projection of the precomputed PE

The precomputed attribute comes from a transform in :mod:`pe_toolkit.domains.graphs.transforms` (as a
``pre_transform`` or ``transform`` of the dataset); the learned part is a registered graph encoder:

| ``pe``              | attribute(s) read from the batch         | transform that writes them        |
| ------------------- | ---------------------------------------- | --------------------------------- |
| ``None`` / "none"   | -                                        | -                                 |
| "random_features"   | - (drawn in the model)                   | -                                 |
| "lap_pe"            | ``lap_pe`` (+ ``lap_eigval``, ``lap_mask``) | :class:`LaplacianEigenvectorPE` |
| "rwse"              | ``rw_pe``                                | :class:`RandomWalkPE`             |
| "rfp"               | ``rfp``                                  | :class:`RandomFeaturePropagation` |

Models take a PyG ``Data`` / ``Batch`` and return logits: ``(num_graphs, num_classes)`` for
``task="graph"`` (sum or mean pooling, then an MLP head), ``(num_nodes, num_classes)`` for ``task="node"``.

References: GIN, Xu et al. 2019, "How Powerful are Graph Neural Networks?", arXiv:1810.00826; GPS,
Rampasek et al. 2022, "Recipe for a General, Powerful, Scalable Graph Transformer", arXiv:2205.12454; Graph
Mamba, Behrouz & Hashemi 2024, "Graph Mamba: Towards Learning on Graphs with State Space Models", arXiv:2402.08678;
random node features, Sato et al. 2021, "Random Features Strengthen Graph Neural Networks", arXiv:2002.03155,
and Abboud et al. 2021, "The Surprising Power of Graph Neural Networks with Random Node Initialization",
arXiv:2010.01179.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GINConv, GPSConv, global_add_pool, global_mean_pool
from torch_geometric.utils import to_dense_batch

import pe_toolkit as pet
import pe_toolkit.domains.graphs.encoders  # noqa: F401  (registers the graph encoders)
from pe_toolkit.domains.graphs.mamba import BidirectionalMamba
from pe_toolkit.domains.graphs.tokenization import WalkTokens, degree_order, random_walk_tokens
from pe_toolkit.encoders.base import check_float, check_int, require_finite
from pe_toolkit.nn.attention import MultiHeadAttention

__all__ = [
    "GINModel", "GPSModel", "GraphMambaLayer", "GraphMambaModel", "GraphPEInput", "PE_ATTRIBUTES", "PE_CHOICES",
    "ToolkitGPSConv", "random_node_features",
]

PE_CHOICES = (None, "none", "random_features", "lap_pe", "rwse", "rfp")
"""Values accepted for ``pe``."""

PE_ATTRIBUTES = {"lap_pe": "lap_pe", "rwse": "rw_pe", "rfp": "rfp"}
"""Default node attribute each registry encoder reads (the default ``attr_name`` of its transform)."""

TASKS = ("graph", "node")
POOLS = ("add", "mean")
ATTENTIONS = ("toolkit", "pyg")

_RF_BLOCK = 256  # rows of the fixed evaluation table drawn per seeded generator


def _choice(owner: str, name: str, value: Any, allowed: tuple) -> Any:
    if value not in allowed:
        raise ValueError(f"{owner}: {name} must be one of {allowed}, got {value!r}")
    return value


def node_index_in_graph(batch: Tensor) -> Tensor:
    """``(N,)`` position of every node inside its own graph (``batch`` sorted, as PyG batches are)."""
    n = batch.numel()
    if n == 0:
        return batch.new_zeros(0)
    counts = torch.bincount(batch)
    starts = torch.cumsum(counts, 0) - counts
    return torch.arange(n, device=batch.device) - starts[batch]


def random_node_features(index: Tensor, num_features: int, seed: int, *, dtype: torch.dtype = torch.float32) -> Tensor:
    """Fixed standard-normal features: row ``index[i]`` of a table seeded by ``seed``, ``(N, num_features)``.

    The table is drawn in blocks of 256 rows, block ``b`` from a generator seeded with ``(seed, b)``, so
    a row's value does not depend on how many rows are requested (``torch.randn`` of different sizes does
    not share a prefix). The global RNG is neither used nor advanced.
    """
    if index.numel() == 0:
        return torch.zeros(0, num_features, dtype=dtype, device=index.device)
    blocks = int(index.max()) // _RF_BLOCK + 1
    table = []
    for b in range(blocks):
        gen = torch.Generator().manual_seed(seed * 1_000_003 + b)
        table.append(torch.randn(_RF_BLOCK, num_features, generator=gen))
    return torch.cat(table)[index.cpu()].to(device=index.device, dtype=dtype)


def check_edge_index(owner: str, edge_index: Any, num_nodes: int) -> Tensor:
    """``edge_index`` must be an integer ``(2, E)`` tensor of node ids in ``[0, num_nodes)`` (errors name it)."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{owner}: data.edge_index must be an integer tensor (2, E), got {type(edge_index).__name__}")
    if edge_index.is_floating_point() or edge_index.dtype == torch.bool or edge_index.is_complex():
        raise TypeError(f"{owner}: data.edge_index must be an integer tensor (2, E), got {edge_index.dtype}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{owner}: data.edge_index must have shape (2, E), got {tuple(edge_index.shape)}")
    if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= num_nodes):
        raise ValueError(f"{owner}: data.edge_index holds node ids in [{int(edge_index.min())}, "
                         f"{int(edge_index.max())}], allowed [0, {num_nodes - 1}] ({num_nodes} nodes)")
    return edge_index


class GraphPEInput(nn.Module):
    """Node input embedding plus a graph positional encoding: ``h0 = embed(Emb(x), pe)``, ``(N, hidden)``.

    Node features: ``in_features`` (float ``x`` of shape ``(N, in_features)``, ``nn.Linear``) or
    ``num_node_types`` (categorical long ``x`` of shape ``(N,)`` or ``(N, 1)``, ``nn.Embedding``); exactly one.

    Positional encodings (``pe``):

    * ``None`` / ``"none"``: no PE (a 1-WL-bounded GIN stays at chance on CSL).
    * ``"random_features"``: ``h0 + Linear(r)`` with ``r ~ N(0, I)`` of width ``pe_options["num_features"]``
      (default 16; also ``seed``, default 0). In training, fresh features are drawn for every node at
      every forward from the global RNG (seed it for reproducibility). In ``eval()`` they are fixed: a
      node at position ``i`` *within its graph* gets row ``i`` of a table drawn from ``seed``
      (:func:`random_node_features`), so evaluation is deterministic and does not depend on batching,
      but it does depend on node order: random features are not permutation invariant (the price of
      their expressiveness; Sato et al. 2021, arXiv:2002.03155; Abboud et al. 2021, arXiv:2010.01179).
    * ``"lap_pe"``, ``"rwse"``, ``"rfp"``: the registered encoder ``pet.get_encoder(pe, hidden, 1,
      **pe_options)`` (``pe_options`` must hold ``in_features``, the width of the precomputed attribute),
      applied as ``encoder.embed(h0, data[pe_attr])``. ``lap_pe`` also receives ``data.lap_eigval`` (when
      ``use_eigenvalues``), ``data.lap_mask`` (when present) and ``batch`` (per-graph sign flips).

    Args:
        hidden: output width.
        in_features: width of a float ``x``.
        num_node_types: number of categories of a long ``x``.
        pe: one of :data:`PE_CHOICES`.
        pe_options: keyword options of the encoder (see above).
        pe_attr: node attribute holding the precomputed PE (default :data:`PE_ATTRIBUTES` ``[pe]``).

    Shapes: ``forward(data)`` with ``data.x (N, in_features)`` or ``(N,)``, ``data.batch (N,)`` (optional),
    the PE attribute ``(N, k)``; returns ``(N, hidden)``.

    Raises:
        ValueError / TypeError: on a bad argument (naming it, the value and what is allowed) or, at
            forward, when the batch lacks the PE attribute or ``x`` does not match the declared input.
    """

    def __init__(self, hidden: int, *, in_features: int | None = None, num_node_types: int | None = None,
                 pe: str | None = None, pe_options: dict[str, Any] | None = None, pe_attr: str | None = None) -> None:
        super().__init__()
        owner = "GraphPEInput"
        self.hidden = check_int(f"{owner}: hidden", hidden)
        if (in_features is None) == (num_node_types is None):
            raise ValueError(f"{owner}: give exactly one of in_features (float x) and num_node_types (categorical "
                             f"long x), got in_features={in_features!r}, num_node_types={num_node_types!r}")
        if in_features is not None:
            self.in_features: int | None = check_int(f"{owner}: in_features", in_features)
            self.num_node_types: int | None = None
            self.node_embedding: nn.Module = nn.Linear(in_features, hidden)
        else:
            self.in_features = None
            self.num_node_types = check_int(f"{owner}: num_node_types", num_node_types)
            self.node_embedding = nn.Embedding(num_node_types, hidden)
        self.pe = _choice(owner, "pe", pe, PE_CHOICES)
        if self.pe == "none":
            self.pe = None
        if pe_options is not None and not isinstance(pe_options, dict):
            raise TypeError(f"{owner}: pe_options must be a dict or None, got {type(pe_options).__name__}")
        options = dict(pe_options or {})
        self.pe_options = dict(options)
        self.encoder: nn.Module | None = None
        self.pe_attr: str | None = None
        if self.pe is None:
            if options:
                raise ValueError(f"{owner}: pe=None takes no pe_options, got {sorted(options)}")
            if pe_attr is not None:
                raise ValueError(f"{owner}: pe=None reads no attribute, got pe_attr={pe_attr!r}")
        elif self.pe == "random_features":
            unknown = sorted(set(options) - {"num_features", "seed"})
            if unknown:
                raise ValueError(f"{owner}: unknown pe_options {unknown} for pe='random_features'; "
                                 f"allowed: ['num_features', 'seed']")
            if pe_attr is not None:
                raise ValueError(f"{owner}: pe='random_features' reads no attribute, got pe_attr={pe_attr!r}")
            width = options.get("num_features", 16)
            self.num_random_features = check_int(f"{owner}: pe_options['num_features']", width)
            self.seed = check_int(f"{owner}: pe_options['seed']", options.get("seed", 0), minimum=0)
            self.random_proj = nn.Linear(self.num_random_features, hidden)
        else:
            if "in_features" not in options:
                raise ValueError(f"{owner}: pe={self.pe!r} needs pe_options['in_features'], the width of the "
                                 f"precomputed attribute (e.g. k of LaplacianEigenvectorPE, walk_length of "
                                 f"RandomWalkPE, RandomFeaturePropagation.out_features)")
            if pe_attr is not None and not (isinstance(pe_attr, str) and pe_attr):
                raise TypeError(f"{owner}: pe_attr must be a non-empty str or None, got {pe_attr!r}")
            self.pe_attr = pe_attr or PE_ATTRIBUTES[self.pe]
            self.encoder = pet.get_encoder(self.pe, hidden, 1, causal=False, **options)

    def embed_nodes(self, x: Tensor | None) -> Tensor:
        """``(N, hidden)`` embedding of the node features (before the PE)."""
        owner = "GraphPEInput"
        if x is None:
            raise ValueError(f"{owner}: the batch has no x; node features are required (use zeros for none)")
        if not isinstance(x, Tensor):
            raise TypeError(f"{owner}: x must be a tensor of node features, got {type(x).__name__}")
        if self.in_features is not None:
            require_finite(f"{owner}: x", x)
            if not x.is_floating_point():
                raise TypeError(f"{owner}: in_features={self.in_features} expects a float x, got {x.dtype}; "
                                f"for a categorical x build the model with num_node_types instead")
            if x.dim() == 1 and self.in_features == 1:
                x = x.unsqueeze(-1)
            if x.dim() != 2 or x.size(-1) != self.in_features:
                raise ValueError(f"{owner}: x must have shape (N, {self.in_features}), got {tuple(x.shape)}")
            return self.node_embedding(x)
        if x.is_floating_point() or x.dtype == torch.bool:
            raise TypeError(f"{owner}: num_node_types={self.num_node_types} expects an integer x, got {x.dtype}")
        if x.dim() == 2 and x.size(-1) == 1:
            x = x.squeeze(-1)
        if x.dim() != 1:
            raise ValueError(f"{owner}: a categorical x must have shape (N,) or (N, 1), got {tuple(x.shape)}")
        if x.numel() and (int(x.min()) < 0 or int(x.max()) >= self.num_node_types):
            raise ValueError(f"{owner}: categorical x must lie in [0, {self.num_node_types}), got values in "
                             f"[{int(x.min())}, {int(x.max())}]")
        return self.node_embedding(x.long())

    def forward(self, data: Data) -> Tensor:
        h = self.embed_nodes(getattr(data, "x", None))
        n = h.size(0)
        batch = getattr(data, "batch", None)
        if self.pe is None:
            return h
        if self.pe == "random_features":
            if self.training:
                r = torch.randn(n, self.num_random_features, device=h.device, dtype=h.dtype)
            else:
                index = node_index_in_graph(batch) if batch is not None else torch.arange(n, device=h.device)
                r = random_node_features(index, self.num_random_features, self.seed, dtype=h.dtype)
            return h + self.random_proj(r)
        positions = getattr(data, self.pe_attr, None)
        if positions is None:
            raise ValueError(f"GraphPEInput: pe={self.pe!r} reads data.{self.pe_attr}, which the batch lacks; add "
                             f"the matching transform from pe_toolkit.domains.graphs.transforms as a (pre_)transform")
        if not isinstance(positions, Tensor) or not positions.is_floating_point():
            raise TypeError(f"GraphPEInput: data.{self.pe_attr} must be a float tensor (N, k) from the {self.pe!r} "
                            f"transform, got {getattr(positions, 'dtype', type(positions).__name__)}")
        if positions.dim() != 2 or positions.shape[0] != n:
            raise ValueError(f"GraphPEInput: data.{self.pe_attr} must have shape ({n}, k), one row per node, got "
                             f"{tuple(positions.shape)}")
        require_finite(f"GraphPEInput: data.{self.pe_attr}", positions)
        if self.pe == "lap_pe":
            kwargs: dict[str, Any] = {"batch": batch, "mask": getattr(data, "lap_mask", None)}
            if self.encoder.use_eigenvalues:
                kwargs["eigenvalues"] = getattr(data, "lap_eigval", None)
            return self.encoder.embed(h, positions, **kwargs)
        return self.encoder.embed(h, positions)

    def extra_repr(self) -> str:
        return f"hidden={self.hidden}, pe={self.pe!r}, pe_attr={self.pe_attr!r}"


def _mlp(sizes: list[int], *, norm: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            if norm:
                layers.append(nn.BatchNorm1d(b))
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class _GraphModel(nn.Module):
    """Shared shell: input + PE, the layers of a subclass, then node logits or pooled graph logits."""

    owner = "GraphModel"

    def __init__(self, *, num_classes: int, hidden: int, layers: int, task: str, in_features: int | None,
                 num_node_types: int | None, pe: str | None, pe_options: dict[str, Any] | None, pe_attr: str | None,
                 pool: str, dropout: float) -> None:
        super().__init__()
        owner = self.owner
        self.num_classes = check_int(f"{owner}: num_classes", num_classes, minimum=2)
        self.hidden = check_int(f"{owner}: hidden", hidden)
        self.num_layers = check_int(f"{owner}: layers", layers)
        self.task = _choice(owner, "task", task, TASKS)
        self.pool = _choice(owner, "pool", pool, POOLS)
        self.dropout = check_float(f"{owner}: dropout", dropout, positive=False, minimum=0.0)
        if self.dropout >= 1:
            raise ValueError(f"{owner}: dropout must be in [0, 1), got {dropout!r}")
        self.input = GraphPEInput(hidden, in_features=in_features, num_node_types=num_node_types, pe=pe,
                                  pe_options=pe_options, pe_attr=pe_attr)
        self.head = _mlp([hidden, hidden, num_classes])

    def node_states(self, h: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, data: Data) -> Tensor:
        """Logits ``(num_graphs, num_classes)`` (``task="graph"``) or ``(num_nodes, num_classes)`` (``"node"``)."""
        h = self.input(data)
        batch = getattr(data, "batch", None)
        if batch is None:
            batch = torch.zeros(h.size(0), dtype=torch.long, device=h.device)
        h = self.node_states(h, check_edge_index(self.owner, getattr(data, "edge_index", None), h.size(0)), batch)
        if self.task == "graph":
            num_graphs = int(getattr(data, "num_graphs", 1) or 1)
            pool = global_add_pool if self.pool == "add" else global_mean_pool
            h = pool(h, batch, size=num_graphs)
        return self.head(h)

    def num_parameters(self, *, exclude_pe: bool = False) -> int:
        """Parameter count; ``exclude_pe`` leaves out the PE's learned part (for fair PE comparisons)."""
        skip = set()
        if exclude_pe:
            for name in ("encoder", "random_proj"):
                module = getattr(self.input, name, None)
                if module is not None:
                    skip |= {id(p) for p in module.parameters()}
        return sum(p.numel() for p in self.parameters() if id(p) not in skip)


class GINModel(_GraphModel):
    """GIN with a graph positional encoding at the input (Xu et al. 2019, arXiv:1810.00826).

    ``layers`` residual blocks ``h <- h + Dropout(ReLU(BN(GINConv(h))))``, each ``GINConv`` with a
    2-layer MLP (BatchNorm inside) and a learned ``eps``, as in Benchmarking GNNs' GIN (Dwivedi et al.,
    arXiv:2003.00982). Graph task: sum (``pool="add"``, the injective GIN readout) or mean pooling, then
    an MLP head; node task: the head on every node.

    Args:
        num_classes: output classes (>= 2).
        hidden: width; layers: number of GIN blocks.
        task: ``"graph"`` or ``"node"``.
        in_features / num_node_types: the node input (see :class:`GraphPEInput`), exactly one.
        pe, pe_options, pe_attr: the positional encoding (see :class:`GraphPEInput`).
        pool: ``"add"`` or ``"mean"`` (graph task).
        dropout: dropout after every block.

    Shapes: ``forward(data)`` -> ``(num_graphs, num_classes)`` or ``(num_nodes, num_classes)``.
    """

    owner = "GINModel"

    def __init__(self, *, num_classes: int, hidden: int = 64, layers: int = 4, task: str = "graph",
                 in_features: int | None = None, num_node_types: int | None = None, pe: str | None = None,
                 pe_options: dict[str, Any] | None = None, pe_attr: str | None = None, pool: str = "add",
                 dropout: float = 0.0) -> None:
        super().__init__(num_classes=num_classes, hidden=hidden, layers=layers, task=task, in_features=in_features,
                         num_node_types=num_node_types, pe=pe, pe_options=pe_options, pe_attr=pe_attr, pool=pool,
                         dropout=dropout)
        self.convs = nn.ModuleList(GINConv(_mlp([hidden, hidden, hidden], norm=True), train_eps=True)
                                   for _ in range(layers))
        self.norms = nn.ModuleList(nn.BatchNorm1d(hidden) for _ in range(layers))

    def node_states(self, h: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        for conv, norm in zip(self.convs, self.norms):
            h = h + F.dropout(F.relu(norm(conv(h, edge_index))), p=self.dropout, training=self.training)
        return h


class ToolkitGPSConv(GPSConv):
    """PyG's :class:`~torch_geometric.nn.GPSConv` with the toolkit's :class:`MultiHeadAttention` as global part.

    Same recipe and parameters as ``GPSConv`` (local MPNN + residual + norm, global attention + residual +
    norm, sum, MLP + residual + norm; Rampasek et al. 2022, arXiv:2205.12454). The global attention is
    ``pe_toolkit.nn.MultiHeadAttention`` (SDPA, ``causal=False``, no encoding: graph PEs enter once through
    ``embed``) over ``to_dense_batch`` with ``key_padding_mask`` (True = real node), so padding nodes of
    smaller graphs are never attended to. Extra argument ``attn_dropout``: attention-weight dropout.
    """

    def __init__(self, channels: int, conv: nn.Module | None, heads: int = 1, dropout: float = 0.0,
                 act: str = "relu", norm: str | None = "batch_norm", attn_dropout: float = 0.0) -> None:
        super().__init__(channels, conv, heads=heads, dropout=dropout, act=act, norm=norm)
        # replaces the torch.nn.MultiheadAttention built by GPSConv (same q/k/v/out parameters, out without bias)
        self.attn = MultiHeadAttention(channels, heads, causal=False, qkv_bias=True, dropout=attn_dropout)

    def reset_parameters(self) -> None:
        if self.conv is not None:
            self.conv.reset_parameters()
        for module in self.attn.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()
        for module in self.mlp.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()
        for norm in (self.norm1, self.norm2, self.norm3):
            if norm is not None:
                norm.reset_parameters()

    def global_attention(self, x: Tensor, batch: Tensor | None) -> Tensor:
        """Self-attention within each graph: ``(N, C)`` -> ``(N, C)``."""
        dense, mask = to_dense_batch(x, batch)  # (B, N_max, C), (B, N_max) True = real node
        return self.attn(dense, key_padding_mask=mask)[mask]

    def _norm(self, norm: nn.Module | None, h: Tensor, batch: Tensor | None) -> Tensor:
        if norm is None:
            return h
        return norm(h, batch=batch) if self.norm_with_batch else norm(h)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None, **kwargs: Any) -> Tensor:
        hs = []
        if self.conv is not None:  # local message passing
            h = F.dropout(self.conv(x, edge_index, **kwargs), p=self.dropout, training=self.training)
            hs.append(self._norm(self.norm1, h + x, batch))
        h = F.dropout(self.global_attention(x, batch), p=self.dropout, training=self.training)
        hs.append(self._norm(self.norm2, h + x, batch))
        out = sum(hs)
        return self._norm(self.norm3, out + self.mlp(out), batch)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.channels}, conv={self.conv}, heads={self.heads}, attn=toolkit)"


class GPSModel(_GraphModel):
    """GraphGPS: ``layers`` GPS layers (local GINConv + global attention) over a PE-augmented input.

    Rampasek et al. 2022, "Recipe for a General, Powerful, Scalable Graph Transformer", arXiv:2205.12454;
    the wiring of PyG's ``examples/graph_gps.py`` with a GIN local model (no edge features, so GIN rather
    than GINE). ``attention="toolkit"`` (default) uses :class:`ToolkitGPSConv` (the project's
    ``MultiHeadAttention`` with a key padding mask); ``attention="pyg"`` uses PyG's ``GPSConv`` unchanged
    (``torch.nn.MultiheadAttention``, ``key_padding_mask=~mask``), a reference for the toolkit path.

    Args:
        num_classes, hidden, layers, task, in_features, num_node_types, pe, pe_options, pe_attr, pool,
        dropout: as for :class:`GINModel` (``dropout`` is GPSConv's dropout).
        heads: attention heads (must divide ``hidden``).
        attn_dropout: attention-weight dropout.
        attention: ``"toolkit"`` or ``"pyg"``.

    Shapes: ``forward(data)`` -> ``(num_graphs, num_classes)`` or ``(num_nodes, num_classes)``.
    """

    owner = "GPSModel"

    def __init__(self, *, num_classes: int, hidden: int = 64, layers: int = 4, task: str = "graph",
                 in_features: int | None = None, num_node_types: int | None = None, pe: str | None = None,
                 pe_options: dict[str, Any] | None = None, pe_attr: str | None = None, pool: str = "add",
                 dropout: float = 0.0, heads: int = 4, attn_dropout: float = 0.0, attention: str = "toolkit") -> None:
        super().__init__(num_classes=num_classes, hidden=hidden, layers=layers, task=task, in_features=in_features,
                         num_node_types=num_node_types, pe=pe, pe_options=pe_options, pe_attr=pe_attr, pool=pool,
                         dropout=dropout)
        self.heads = check_int("GPSModel: heads", heads)
        if hidden % heads:
            raise ValueError(f"GPSModel: heads ({heads}) must divide hidden ({hidden})")
        self.attn_dropout = check_float("GPSModel: attn_dropout", attn_dropout, positive=False, minimum=0.0)
        if self.attn_dropout >= 1:
            raise ValueError(f"GPSModel: attn_dropout must be in [0, 1), got {attn_dropout!r}")
        self.attention = _choice("GPSModel", "attention", attention, ATTENTIONS)

        def local() -> GINConv:
            return GINConv(_mlp([hidden, hidden, hidden]))

        if attention == "toolkit":
            self.convs = nn.ModuleList(ToolkitGPSConv(hidden, local(), heads=heads, dropout=dropout,
                                                      attn_dropout=attn_dropout) for _ in range(layers))
        else:
            self.convs = nn.ModuleList(GPSConv(hidden, local(), heads=heads, dropout=dropout,
                                               attn_kwargs={"dropout": attn_dropout}) for _ in range(layers))

    def node_states(self, h: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        for conv in self.convs:
            h = conv(h, edge_index, batch)
        return h


class GraphMambaLayer(nn.Module):
    """One Graph Mamba layer (Behrouz & Hashemi 2024, arXiv:2402.08678, Sec. 4), in the GPS layer recipe.

    1. Token stage (``tokens`` given): every node's sequence ``[x^{ms}, .., x^1, x^0]`` of pooled token
       states (largest random-walk neighbourhood first, the node itself last) goes through a
       :class:`~pe_toolkit.domains.graphs.mamba.BidirectionalMamba`; the node's summary ``y(v)`` is the last row.
       Without tokens (node tokenization, ``walk_length=0``) ``y(v) = h(v)``.
    2. Node stage: the nodes of each graph, ordered by degree (``order``), form one sequence through a
       second bidirectional Mamba (padding last, each graph reversed within its own length).
    3. Local stage: a GIN convolution (the paper's optional MPNN ``Psi``).

    ``h <- N3(s + MLP(s))`` with ``s = N1(h + Drop(GIN(h))) + N2(h + Drop(BiMamba_nodes(y)))``: the two
    branches are combined as in GPS (``GPSConv``), with BatchNorm.

    Token embedding ``x^j(v)``: the mean of the current node states over the token's node set (a DeepSets
    readout of ``G[T]``). The paper encodes the induced subgraph ``G[T]`` with an MPNN (or CRaWl's walk
    encoder); here the node states already carry their GIN neighbourhoods from the previous layers, and the
    readout keeps the tokenization vectorised (one ``index_add`` for all tokens of the batch).

    Shapes: ``forward(h (N, C), edge_index (2, E), batch (N,), tokens, order (N,))`` -> ``(N, C)``.
    """

    def __init__(self, hidden: int, *, use_tokens: bool, dropout: float = 0.0, mamba_options: dict | None = None
                 ) -> None:
        super().__init__()
        options = dict(mamba_options or {})
        self.dropout = dropout
        self.token_mamba = BidirectionalMamba(hidden, **options) if use_tokens else None
        self.node_mamba = BidirectionalMamba(hidden, **options)
        self.local = GINConv(_mlp([hidden, hidden, hidden]))
        self.norm1, self.norm2, self.norm3 = (nn.BatchNorm1d(hidden) for _ in range(3))
        self.mlp = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.ReLU(), nn.Linear(2 * hidden, hidden))

    def forward(self, h: Tensor, edge_index: Tensor, batch: Tensor, tokens: WalkTokens | None, order: Tensor
                ) -> Tensor:
        y = h
        if self.token_mamba is not None and tokens is not None:
            seq = torch.cat([tokens.pool(h), h.unsqueeze(1)], dim=1)  # (N, m*s + 1, C), node token last
            y = self.token_mamba(seq)[:, -1]
        dense, mask = to_dense_batch(y[order], batch[order])  # (B, N_max, C), graphs in degree order
        g = self.node_mamba(dense, mask.sum(1))[mask]  # (N, C) in `order`
        glob = torch.empty_like(g)
        glob[order] = g
        drop = lambda t: F.dropout(t, p=self.dropout, training=self.training)  # noqa: E731
        out = self.norm1(h + drop(self.local(h, edge_index))) + self.norm2(h + drop(glob))
        return self.norm3(out + drop(self.mlp(out)))


class GraphMambaModel(_GraphModel):
    """Graph Mamba (GMN; Behrouz & Hashemi 2024, "Graph Mamba: Towards Learning on Graphs with State Space Models",
    KDD 2024, arXiv:2402.08678): random-walk neighbourhood tokenization, degree-ordered nodes, bidirectional
    selective SSMs (:mod:`pe_toolkit.domains.graphs.mamba`), a local GIN, and an optional PE/SE at the input.

    Tokens (:func:`~pe_toolkit.domains.graphs.tokenization.random_walk_tokens`) are drawn once per forward and shared by
    all layers: from the global RNG in training (fresh every step), from a generator seeded with ``seed`` in
    ``eval()`` (deterministic predictions). Node order (:func:`~pe_toolkit.domains.graphs.tokenization.degree_order`):
    degree ascending, ties random in training and by node id in eval.

    Permutation behaviour. The input, the GIN and the token pooling are permutation equivariant, but the
    node sequence is an *order*: a selective SSM is not permutation invariant, so the output depends on how
    degree ties are broken (every simple graph has two nodes of equal degree), and, with ``walk_length >= 1``,
    on which random walks each node id draws. In ``eval()`` with ``walk_length=0`` the node outputs are
    exactly equivariant (graph outputs invariant) under relabellings that keep the id order of nodes of equal
    degree; under other relabellings, and with random-walk tokens, only in distribution (over the training-time
    random tie-breaking and walks). The paper accepts the same for its degree, PPR and k-core orderings.

    Args:
        num_classes, hidden, layers, task, in_features, num_node_types, pe, pe_options, pe_attr, pool,
        dropout: as for :class:`GINModel`.
        walk_length: ``m`` (>= 0); 0 = node tokenization (no token stage).
        num_walks: ``M`` walks per token. repeats: ``s`` tokens per walk length.
        d_state, expand, d_conv: :class:`~pe_toolkit.domains.graphs.mamba.MambaBlock` options.
        seed: seed of the evaluation-time tokens.

    Shapes: ``forward(data)`` -> ``(num_graphs, num_classes)`` or ``(num_nodes, num_classes)``.
    """

    owner = "GraphMambaModel"

    def __init__(self, *, num_classes: int, hidden: int = 64, layers: int = 4, task: str = "graph",
                 in_features: int | None = None, num_node_types: int | None = None, pe: str | None = None,
                 pe_options: dict[str, Any] | None = None, pe_attr: str | None = None, pool: str = "add",
                 dropout: float = 0.0, walk_length: int = 2, num_walks: int = 4, repeats: int = 1, d_state: int = 8,
                 expand: int = 1, d_conv: int = 4, seed: int = 0) -> None:
        super().__init__(num_classes=num_classes, hidden=hidden, layers=layers, task=task, in_features=in_features,
                         num_node_types=num_node_types, pe=pe, pe_options=pe_options, pe_attr=pe_attr, pool=pool,
                         dropout=dropout)
        owner = self.owner
        self.walk_length = check_int(f"{owner}: walk_length", walk_length, minimum=0)
        self.num_walks = check_int(f"{owner}: num_walks", num_walks)
        self.repeats = check_int(f"{owner}: repeats", repeats)
        self.seed = check_int(f"{owner}: seed", seed, minimum=0)
        options = {"d_state": check_int(f"{owner}: d_state", d_state), "expand": check_int(f"{owner}: expand", expand),
                   "d_conv": check_int(f"{owner}: d_conv", d_conv)}
        self.convs = nn.ModuleList(GraphMambaLayer(hidden, use_tokens=walk_length > 0, dropout=self.dropout,
                                                   mamba_options=options) for _ in range(layers))

    def tokens_and_order(self, edge_index: Tensor, batch: Tensor) -> tuple[WalkTokens | None, Tensor]:
        """The random-walk tokens (None for ``walk_length=0``) and the degree order of this forward."""
        generator = None if self.training else torch.Generator().manual_seed(self.seed)
        tokens = None
        if self.walk_length > 0:
            tokens = random_walk_tokens(edge_index, batch.numel(), walk_length=self.walk_length,
                                        num_walks=self.num_walks, repeats=self.repeats, generator=generator)
        return tokens, degree_order(edge_index, batch, random_ties=self.training)

    def node_states(self, h: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        tokens, order = self.tokens_and_order(edge_index, batch)
        for conv in self.convs:
            h = conv(h, edge_index, batch, tokens, order)
        return h
