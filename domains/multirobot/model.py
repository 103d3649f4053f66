"""NOPE: non-overlap-aware egocentric pose estimation from two robots' observation graphs.

Huang et al. 2025, "NOPE: Non-Overlap-Aware Egocentric Pose Estimation for Collaborative Perception in
Connected Autonomy", IROS 2025, arXiv:2506.14180. Two levels on top of each robot's Delaunay graph:

* **High level (co-identification)**: a shared (siamese) graph transformer ``Psi`` with edge-aware
  attention (:class:`~pe_toolkit.domains.multirobot.encoders.EdgeAwareGraphEncoding`, post-norm layers as in the
  paper: ``h <- LayerNorm(h + attn)``, ``h <- LayerNorm(h + MLP)``) embeds the nodes; the similarity
  ``S = H_a H_b^T / sqrt(d)`` goes through log-space Sinkhorn with a dustbin (SuperGlue) and hard matches
  are extracted (mutual best or Hungarian, with a threshold). Fewer than ``min_matches`` matches means
  "no overlap" (:func:`~pe_toolkit.domains.multirobot.matching.decide_overlap`).
* **Low level (pose)**: position-aware cross-attention between the two graphs (each side attends to the
  other, ``h <- LayerNorm(h + cross_attn)``, weights shared by the two directions), a self-attention
  layer and an MLP-softmax gate that pools each graph to one vector, ``h = sum_i g_i H_i``; an MLP maps
  ``[h_a, h_b]`` to ``(x, y, cos theta, sin theta)`` of ``T_ab`` (b's pose in a's frame), trained with
  :func:`~pe_toolkit.domains.multirobot.geometry.chordal_pose_loss`.

``object_pe`` chooses how the object coordinates (each in its own robot's frame) enter:

* ``"fourier"``: learned Fourier features (:class:`~pe_toolkit.domains.multirobot.encoders.FourierFeatureEncoding`)
  added to the node features before ``Psi`` and again before the cross-attention.
* ``"rope2d"``: 2-D rotary (:class:`~pe_toolkit.domains.multirobot.encoders.Rotary2DEncoding`) in ``Psi``'s
  self-attention, in the cross-attention (queries rotate by their own frame's coordinates, keys by theirs)
  and in the pooling self-attention.
* ``"none"``: no coordinates at all (only descriptors and the edge lengths of ``Psi``): the ablation.

Deviations from the paper: the DGMC consensus step and the learned order embeddings ``P_i = U[i]`` of the
low level are replaced by the object PE above (the point of this domain), and matching is trained with
SuperGlue's assignment loss rather than a thresholded-similarity loss.

All attention runs through :class:`pe_toolkit.nn.MultiHeadAttention`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from pe_toolkit.domains.multirobot.encoders import EdgeAwareGraphEncoding, FourierFeatureEncoding, Rotary2DEncoding
from pe_toolkit.domains.multirobot.matching import decide_overlap, extract_matches, log_sinkhorn_dustbin
from pe_toolkit.encoders.base import check_choice, check_float, check_int
from pe_toolkit.nn.attention import MultiHeadAttention

__all__ = ["NOPE", "NOPEConfig", "OBJECT_PES"]

OBJECT_PES = ("fourier", "rope2d", "none")


@dataclass
class NOPEConfig:
    """Hyper-parameters of :class:`NOPE` (the paper: d = 256, 4 heads, 2 graph layers, 4 cross layers).

    Attributes:
        descriptor_dim: input descriptor size.
        dim, num_heads: model width and heads (``dim / num_heads`` divisible by 4 for ``rope2d``).
        graph_layers, cross_layers: depth of ``Psi`` and of the cross-attention.
        object_pe: ``"fourier"``, ``"rope2d"`` or ``"none"`` (see the module docstring).
        object_pe_options: options of the object encoder.
        dropout: dropout in attention and MLPs.
        sinkhorn_iterations: Sinkhorn iterations.
        match_threshold: minimum assignment probability of a match.
        match_method: ``"mutual"`` or ``"hungarian"``.
        min_matches: matches needed to decide "overlap".
        match_on: ``"graph"`` (the paper: similarity of ``Psi``'s node embeddings) or ``"cross"`` (similarity
            of the node features after the position-aware cross-attention, as SuperGlue matches after its
            cross-attention layers).
    """

    descriptor_dim: int
    dim: int = 64
    num_heads: int = 4
    graph_layers: int = 2
    cross_layers: int = 2
    object_pe: str = "fourier"
    object_pe_options: dict | None = None
    dropout: float = 0.0
    sinkhorn_iterations: int = 30
    match_threshold: float = 0.2
    match_method: str = "mutual"
    min_matches: int = 3
    match_on: str = "graph"

    def __post_init__(self) -> None:
        for name in ("descriptor_dim", "dim", "num_heads", "graph_layers", "cross_layers", "sinkhorn_iterations",
                     "min_matches"):
            check_int(f"NOPEConfig.{name}", getattr(self, name))
        check_choice("NOPEConfig.object_pe", self.object_pe, OBJECT_PES)
        check_choice("NOPEConfig.match_method", self.match_method, ("mutual", "hungarian"))
        check_choice("NOPEConfig.match_on", self.match_on, ("graph", "cross"))
        check_float("NOPEConfig.match_threshold", self.match_threshold, positive=False, minimum=0.0)
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"NOPEConfig.dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict:
        return asdict(self)


def _mlp(dim: int, hidden: int, out: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout), nn.Linear(hidden, out))


def _keys_mask(mask: Tensor) -> Tensor:
    """``mask`` with the first (padding) slot opened in rows that have no real node.

    Attention over keys that are all padding has no distribution (the core attention refuses it). A robot
    that sees nothing still gets a defined forward pass: its rows attend to one padding slot, and every
    output that depends on them is masked later (no matches, a zero pooling gate, no overlap decided).
    """
    empty = ~mask.any(-1, keepdim=True)  # (B, 1)
    first = torch.zeros_like(mask)
    first[..., 0] = True
    return mask | (empty & first)


class _GraphLayer(nn.Module):
    """One layer of ``Psi``: edge-aware self-attention and an MLP, each followed by residual + LayerNorm."""

    def __init__(self, config: NOPEConfig) -> None:
        super().__init__()
        rope = "rope2d" if config.object_pe == "rope2d" else None
        encoding = EdgeAwareGraphEncoding(config.dim, config.num_heads, object_pe=rope,
                                          object_pe_options=config.object_pe_options if rope else None)
        self.attn = MultiHeadAttention(config.dim, config.num_heads, encoding=encoding, dropout=config.dropout)
        self.norm1, self.norm2 = nn.LayerNorm(config.dim), nn.LayerNorm(config.dim)
        self.mlp = _mlp(config.dim, 2 * config.dim, config.dim, config.dropout)

    def forward(self, h: Tensor, graph_pos: Tensor, mask: Tensor) -> Tensor:
        h = self.norm1(h + self.attn(h, q_pos=graph_pos, key_padding_mask=_keys_mask(mask)))
        return self.norm2(h + self.mlp(h))


class _CrossLayer(nn.Module):
    """Position-aware cross-attention of one graph over the other, then an MLP (post-norm)."""

    def __init__(self, config: NOPEConfig) -> None:
        super().__init__()
        encoding = (Rotary2DEncoding(config.dim, config.num_heads, **(config.object_pe_options or {}))
                    if config.object_pe == "rope2d" else None)
        self.attn = MultiHeadAttention(config.dim, config.num_heads, encoding=encoding, dropout=config.dropout)
        self.norm1, self.norm2 = nn.LayerNorm(config.dim), nn.LayerNorm(config.dim)
        self.mlp = _mlp(config.dim, 2 * config.dim, config.dim, config.dropout)

    def forward(self, h: Tensor, other: Tensor, xy: Tensor, other_xy: Tensor, other_mask: Tensor) -> Tensor:
        positions = {"q_pos": xy, "k_pos": other_xy} if self.attn.encoding is not None else {}
        h = self.norm1(h + self.attn(h, other, key_padding_mask=_keys_mask(other_mask), **positions))
        return self.norm2(h + self.mlp(h))


class _GatedPooling(nn.Module):
    """Self-attention, then ``g = softmax_i(MLP(h_i))`` over real nodes and ``h = sum_i g_i h_i``."""

    def __init__(self, config: NOPEConfig) -> None:
        super().__init__()
        encoding = (Rotary2DEncoding(config.dim, config.num_heads, **(config.object_pe_options or {}))
                    if config.object_pe == "rope2d" else None)
        self.attn = MultiHeadAttention(config.dim, config.num_heads, encoding=encoding, dropout=config.dropout)
        self.norm = nn.LayerNorm(config.dim)
        self.gate = _mlp(config.dim, config.dim, 1, config.dropout)

    def forward(self, h: Tensor, xy: Tensor, mask: Tensor) -> Tensor:
        positions = {"q_pos": xy} if self.attn.encoding is not None else {}
        h = self.norm(h + self.attn(h, key_padding_mask=_keys_mask(mask), **positions))
        logits = self.gate(h).squeeze(-1).masked_fill(~mask, float("-inf"))  # (B, L)
        any_node = mask.any(-1, keepdim=True)
        gate = torch.softmax(torch.where(any_node, logits, 0.0), dim=-1) * any_node  # a graph without nodes -> 0
        return (gate.unsqueeze(-1) * h).sum(1)


BATCH_KEYS = ("desc_a", "xy_a", "edges_a", "mask_a", "desc_b", "xy_b", "edges_b", "mask_b")


def check_batch(batch, descriptor_dim: int) -> None:
    """Validate a NOPE batch (the keys of :func:`~pe_toolkit.domains.multirobot.data.collate_pairs`).

    Per side ``s`` of ``M_s`` slots: ``desc_s (B, M_s, descriptor_dim)``, ``xy_s (B, M_s, 2)`` and
    ``edges_s (B, M_s, M_s)`` finite float tensors, ``mask_s (B, M_s)`` bool, one ``B`` for all.

    Raises:
        TypeError: ``batch`` not a mapping, an entry not a tensor or of the wrong dtype (named by its key).
        ValueError: a missing key, a wrong shape, or NaN / inf (named by its key).
    """
    if not isinstance(batch, dict):
        raise TypeError(f"NOPE: batch must be a dict with keys {BATCH_KEYS}, got {type(batch).__name__}")
    missing = [key for key in BATCH_KEYS if key not in batch]
    if missing:
        raise ValueError(f"NOPE: batch lacks {missing} (keys of collate_pairs: {BATCH_KEYS})")
    for key in BATCH_KEYS:
        value = batch[key]
        if not isinstance(value, Tensor):
            raise TypeError(f"NOPE: batch[{key!r}] must be a tensor, got {type(value).__name__}")
        if key.startswith("mask") and value.dtype != torch.bool:
            raise TypeError(f"NOPE: batch[{key!r}] must be a bool tensor (True = real object), got {value.dtype}")
        if not key.startswith("mask") and not value.is_floating_point():
            raise TypeError(f"NOPE: batch[{key!r}] must be a float tensor, got {value.dtype}")
    b = batch["mask_a"].shape[0] if batch["mask_a"].dim() == 2 else None
    for side in "ab":
        mask = batch[f"mask_{side}"]
        if mask.dim() != 2 or mask.shape[0] != b:
            raise ValueError(f"NOPE: batch['mask_{side}'] must have shape (B={b}, M), got {tuple(mask.shape)}")
        m = mask.shape[1]
        expected = {f"desc_{side}": (b, m, descriptor_dim), f"xy_{side}": (b, m, 2), f"edges_{side}": (b, m, m)}
        for key, shape in expected.items():
            value = batch[key]
            if tuple(value.shape) != shape:
                raise ValueError(f"NOPE: batch[{key!r}] must have shape {shape} (mask_{side} has shape "
                                 f"{tuple(mask.shape)}, descriptor_dim={descriptor_dim}), got {tuple(value.shape)}")
            if not bool(torch.isfinite(value).all()):
                count = int((~torch.isfinite(value)).sum())
                raise ValueError(f"NOPE: batch[{key!r}] holds NaN or inf ({count} of {value.numel()} entries)")


class NOPE(nn.Module):
    """The two-level NOPE model (see the module docstring).

    Shapes (a batch from :func:`pe_toolkit.domains.multirobot.data.collate_pairs`): ``desc_a (B, M, D)``,
    ``xy_a (B, M, 2)``, ``edges_a (B, M, M)``, ``mask_a (B, M)`` and the same for b with ``N`` nodes.
    """

    def __init__(self, config: NOPEConfig) -> None:
        super().__init__()
        self.config = config
        dim = config.dim
        self.input = nn.Linear(config.descriptor_dim, dim)
        fourier = config.object_pe == "fourier"
        options = config.object_pe_options or {}
        self.graph_pe = FourierFeatureEncoding(dim, config.num_heads, **options) if fourier else None
        self.cross_pe = FourierFeatureEncoding(dim, config.num_heads, **options) if fourier else None
        self.graph_layers = nn.ModuleList(_GraphLayer(config) for _ in range(config.graph_layers))
        self.match_proj = nn.Linear(dim, dim)
        self.dustbin = nn.Parameter(torch.tensor(1.0))
        self.cross_layers = nn.ModuleList(_CrossLayer(config) for _ in range(config.cross_layers))
        self.pool = _GatedPooling(config)
        self.pose_head = _mlp(2 * dim, 2 * dim, 4, config.dropout)

    def embed_graph(self, desc: Tensor, xy: Tensor, edges: Tensor, mask: Tensor) -> Tensor:
        """``Psi``: node embeddings ``(B, L, dim)`` of one side."""
        h = self.input(desc)
        if self.graph_pe is not None:
            h = self.graph_pe.embed(h, xy)
        graph_pos = torch.cat([xy, edges], dim=-1)  # (B, L, 2 + L): coordinates, then edge lengths
        for layer in self.graph_layers:
            h = layer(h, graph_pos, mask)
        return h

    def forward(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Returns ``log_assignment (B, M+1, N+1)``, ``pose (B, 4)`` = ``(x, y, cos, sin)`` (translation in
        the batch's scaled units), ``match_a (B, M)``, ``match_score (B, M)``, ``overlap (B,)`` bool.

        Raises:
            TypeError / ValueError: a batch that :func:`check_batch` refuses (the error names the key).
        """
        check_batch(batch, self.config.descriptor_dim)
        h_a = self.embed_graph(batch["desc_a"], batch["xy_a"], batch["edges_a"], batch["mask_a"])
        h_b = self.embed_graph(batch["desc_b"], batch["xy_b"], batch["edges_b"], batch["mask_b"])
        # low level: position-aware cross-attention
        x_a, x_b = h_a, h_b
        if self.cross_pe is not None:
            x_a, x_b = self.cross_pe.embed(x_a, batch["xy_a"]), self.cross_pe.embed(x_b, batch["xy_b"])
        for layer in self.cross_layers:
            x_a, x_b = (layer(x_a, x_b, batch["xy_a"], batch["xy_b"], batch["mask_b"]),
                        layer(x_b, x_a, batch["xy_b"], batch["xy_a"], batch["mask_a"]))
        # high level: co-identification
        m_a, m_b = (h_a, h_b) if self.config.match_on == "graph" else (x_a, x_b)
        f_a, f_b = self.match_proj(m_a), self.match_proj(m_b)
        scores = f_a @ f_b.transpose(1, 2) / math.sqrt(self.config.dim)
        log_assignment = log_sinkhorn_dustbin(scores, self.dustbin, iterations=self.config.sinkhorn_iterations,
                                              mask_a=batch["mask_a"], mask_b=batch["mask_b"])
        match_a, score = extract_matches(log_assignment.detach(), threshold=self.config.match_threshold,
                                         method=self.config.match_method, mask_a=batch["mask_a"],
                                         mask_b=batch["mask_b"])
        overlap = decide_overlap((match_a >= 0).sum(1), self.config.min_matches)
        # low level: gated pooling and the pose head
        pooled = torch.cat([self.pool(x_a, batch["xy_a"], batch["mask_a"]),
                            self.pool(x_b, batch["xy_b"], batch["mask_b"])], dim=-1)
        return {"log_assignment": log_assignment, "pose": self.pose_head(pooled), "match_a": match_a,
                "match_score": score, "overlap": overlap}

    def num_parameters(self, *, exclude_position: bool = False) -> int:
        """Parameter count; ``exclude_position`` leaves out the object PE's own parameters."""
        position = {id(p) for m in self.modules() if isinstance(m, (FourierFeatureEncoding, Rotary2DEncoding))
                    for p in m.parameters()} if exclude_position else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in position)
