"""Object positional encodings for robot observation graphs (``object_pe``) and NOPE's edge-aware attention.

Positions are an object's 2-D coordinates in the observing robot's own frame, so every encoder here
declares ``position_vector_dims = 1``: positions are ``(L, 2)`` or ``(B, L, 2)`` (the edge-aware encoder
takes ``(B, L, 2 + L)``, see :class:`EdgeAwareGraphEncoding`). Registered under ``domain="multirobot"``:

* ``object_rope2d``: :class:`Rotary2DEncoding`, 2-D rotary (``rotate`` hook), axial or mixed frequencies.
* ``object_fourier``: :class:`FourierFeatureEncoding`, learned Fourier features (``embed`` hook).
* ``edge_aware_graph``: :class:`EdgeAwareGraphEncoding`, NOPE's Delaunay-edge attention term (``bias``
  hook), optionally wrapping a 2-D rotary object PE (``rotate`` hook).

Coordinates are expected in units of the sensor range (the model divides metres by ``fov_range``), so
the default wavelengths suit values in ``[-1, 1]``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.encoders.base import (
    BiasFunction,
    PositionalEncoding,
    PositionCheck,
    bias_on_grid,
    check_choice,
    check_float,
    check_int,
)
from pe_toolkit.encoders.rotary import apply_rope
from pe_toolkit.registry import register_encoder

__all__ = ["EdgeAwareGraphEncoding", "FourierFeatureEncoding", "Rotary2DEncoding", "object_layout",
           "split_graph_positions"]

_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0  # 0.618..., the golden-ratio conjugate


def _check_xy(owner: str, positions: Tensor, dims: int = 2) -> None:
    if positions.dim() not in (2, 3) or positions.shape[-1] != dims:
        raise ValueError(f"{owner}: positions must have shape (L, {dims}) or (B, L, {dims}), "
                         f"got {tuple(positions.shape)}")


def object_layout(count: int, *, fov_angle: float = math.radians(100.0)) -> Tensor:
    """A fixed layout of ``count`` objects seen by one robot, ``(count, 2)`` float32, in units of the sensor range.

    Coordinates in the robot's frame (``x`` ahead), spread evenly over its sensing cone of opening ``fov_angle``
    (the simulator's default 100 degrees) and range 1: object ``i`` is at distance ``sqrt((i + 0.5) / count)``
    (uniform density over the area) and bearing ``fov_angle * (frac((i + 0.5) * 0.618...) - 1/2)`` (golden-ratio
    spacing, strictly inside the cone), so no two objects coincide and from three on they are not all on a line.
    """
    check_int("count", count)
    i = torch.arange(count, dtype=torch.float64)
    distance = torch.sqrt((i + 0.5) / count)
    bearing = fov_angle * (torch.remainder((i + 0.5) * _GOLDEN, 1.0) - 0.5)
    return torch.stack([distance * bearing.cos(), distance * bearing.sin()], dim=-1).float()


@register_encoder(
    "object_rope2d",
    domain="multirobot",
    relative=True,
    reference="Heo et al. 2024, Rotary Position Embedding for Vision Transformer, arXiv:2403.13298 (RoPE-Axial, "
    "RoPE-Mixed); Su et al. 2021, RoFormer, arXiv:2104.09864",
    example_options={},
)
class Rotary2DEncoding(PositionalEncoding):
    """2-D rotary position embedding of object coordinates: ``q_i . k_j`` depends on ``p_j - p_i`` only.

    Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298. Each head's
    ``head_dim / 2`` rotation pairs (half-split layout of :func:`pe_toolkit.encoders.rotary.apply_rope`)
    turn by an angle that is linear in the 2-D position ``p = (x, y)``:

    * ``mode="axial"`` (RoPE-Axial): the first half of the pairs rotate by ``x * omega_k``, the second half
      by ``y * omega_k``, ``k = 0 .. head_dim/4 - 1``, with ``omega_k = 2 pi / lambda_k`` and wavelengths
      ``lambda_k`` geometric from ``max_wavelength`` down to ``min_wavelength``.
    * ``mode="mixed"`` (RoPE-Mixed): pair ``k`` of head ``h`` rotates by ``p . f_{h,k}`` with a learned
      2-D frequency vector ``f_{h,k}`` (initialised as the axial frequencies turned by a random angle
      per head), so directions other than the axes can be encoded.

    Both are relative: the rotated ``q_i . k_j`` equals ``q_i^T R(p_j - p_i) k_j``, so a common shift of
    all coordinates (of queries and keys together) leaves attention unchanged.

    Options:
        mode: ``"axial"`` or ``"mixed"``.
        min_wavelength, max_wavelength: wavelength range in coordinate units (0.05 and 4).

    Shapes: q ``(B, H, Lq, hd)``, k ``(B, H, Lk, hd)``; positions ``(L, 2)`` or ``(B, L, 2)``.

    Raises:
        ValueError: ``head_dim`` not divisible by 4, a bad wavelength range, positions of the wrong shape.
    """

    position_vector_dims = 1

    def __init__(self, dim: int, num_heads: int, *, mode: str = "axial", min_wavelength: float = 0.05,
                 max_wavelength: float = 4.0, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        if self.head_dim % 4:
            raise ValueError(f"object_rope2d: head_dim = dim / num_heads = {self.head_dim} must be divisible by 4 "
                             f"(pairs split between x and y)")
        self.mode = check_choice("object_rope2d: mode", mode, ("axial", "mixed"))
        low, high = check_float("min_wavelength", min_wavelength), check_float("max_wavelength", max_wavelength)
        if not 0 < low < high:
            raise ValueError(f"object_rope2d: need 0 < min_wavelength < max_wavelength, got {low} and {high}")
        self.min_wavelength, self.max_wavelength = low, high
        per_axis = self.head_dim // 4
        wavelengths = torch.logspace(math.log10(high), math.log10(low), per_axis, dtype=torch.float64)
        omega = (2 * math.pi / wavelengths).float()  # (hd/4,)
        zeros = torch.zeros_like(omega)
        axial = torch.cat([torch.stack([omega, zeros], -1), torch.stack([zeros, omega], -1)])  # (hd/2, 2)
        if self.mode == "axial":
            self.register_buffer("frequencies", axial, persistent=False)
        else:
            turn = torch.rand(num_heads, 1) * 2 * math.pi
            c, s = turn.cos(), turn.sin()
            fx, fy = axial[:, 0], axial[:, 1]
            mixed = torch.stack([c * fx - s * fy, s * fx + c * fy], -1)  # (H, hd/2, 2)
            self.frequencies = nn.Parameter(mixed)

    def angles(self, positions: Tensor, dtype: torch.dtype) -> Tensor:
        """Rotation angles ``(1 or B, 1 or H, L, hd/2)`` of positions ``(L, 2)`` / ``(B, L, 2)``."""
        _check_xy("object_rope2d", positions)
        p = positions.to(dtype)
        if p.dim() == 2:
            p = p.unsqueeze(0)
        f = self.frequencies.to(dtype)
        if self.mode == "axial":
            return (p @ f.T).unsqueeze(1)  # (B, 1, L, hd/2)
        return torch.einsum("bld,hkd->bhlk", p, f)  # (B, H, L, hd/2)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
        out = []
        for x, pos in ((q, q_pos), (k, k_pos)):
            theta = self.angles(pos, dtype)
            out.append(apply_rope(x.to(dtype), theta.cos(), theta.sin()).to(x.dtype))
        return out[0], out[1]

    def example_positions(self, length: int) -> Tensor:
        """The 2-D coordinates of ``length`` objects spread over one robot's sensing cone, ``(length, 2)``.

        :func:`object_layout`: in the robot's frame and units of the sensor range (as the model feeds them),
        at evenly spread distances and golden-ratio bearings inside the default 100-degree cone.
        """
        return object_layout(check_int("length", length))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mode={self.mode}, wavelengths=[{self.min_wavelength}, {self.max_wavelength}]"


@register_encoder(
    "object_fourier",
    domain="multirobot",
    relative=False,
    reference="Li et al. 2021, Learnable Fourier Features for Multi-Dimensional Spatial Positional Encoding, "
    "arXiv:2106.02795",
    example_options={},
)
class FourierFeatureEncoding(PositionalEncoding):
    """Learned Fourier features of object coordinates, added to the node features (``embed`` hook).

    Li et al. 2021, "Learnable Fourier Features for Multi-Dimensional Spatial Positional Encoding",
    arXiv:2106.02795, Eq. 2-3: ``r_p = [cos(p W_r^T), sin(p W_r^T)] / sqrt(F)`` with a learned
    ``W_r`` ``(F/2, M)`` initialised from ``N(0, gamma^-2)``, then ``PE_p = MLP(r_p)`` (one GELU hidden
    layer), and ``x <- x + PE_p``. Absolute: the encoding depends on the coordinates themselves.

    Options:
        num_features: ``F`` (even), the Fourier feature count (64).
        gamma: the initial frequency scale ``gamma`` (0.5: wavelengths around ``2 pi gamma`` coordinate units).
        hidden: MLP hidden width (default ``dim``).
        position_dims: ``M``, coordinates per position (2).

    Shapes: x ``(B, L, dim)``; positions ``(L, M)`` or ``(B, L, M)``.
    """

    position_vector_dims = 1

    def __init__(self, dim: int, num_heads: int, *, num_features: int = 64, gamma: float = 0.5,
                 hidden: int | None = None, position_dims: int = 2, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        self.num_features = check_int("object_fourier: num_features", num_features)
        if num_features % 2:
            raise ValueError(f"object_fourier: num_features must be even (cos and sin halves), got {num_features}")
        self.gamma = check_float("object_fourier: gamma", gamma)
        self.position_dims = check_int("object_fourier: position_dims", position_dims)
        hidden = dim if hidden is None else check_int("object_fourier: hidden", hidden)
        self.projection = nn.Linear(position_dims, num_features // 2, bias=False)
        nn.init.normal_(self.projection.weight, std=1.0 / self.gamma)
        self.mlp = nn.Sequential(nn.Linear(num_features, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def features(self, positions: Tensor) -> Tensor:
        """``r_p`` ``(..., L, F)`` of positions ``(..., L, M)``."""
        _check_xy("object_fourier", positions, self.position_dims)
        z = self.projection(positions.to(self.projection.weight.dtype))
        return torch.cat([z.cos(), z.sin()], dim=-1) / math.sqrt(self.num_features)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"object_fourier: x must have shape (B, L, {self.dim}), got {tuple(x.shape)}")
        if positions.shape[-2] != x.shape[1] or (positions.dim() == 3 and positions.shape[0] != x.shape[0]):
            raise ValueError(f"object_fourier: positions {tuple(positions.shape)} do not match x {tuple(x.shape)}")
        return x + self.mlp(self.features(positions)).to(x.dtype)

    def example_positions(self, length: int) -> Tensor:
        """The coordinates of ``length`` objects spread over one robot's sensing cone, ``(length, position_dims)``.

        The planar :func:`object_layout` (robot frame, units of the sensor range); with ``position_dims = 1``
        only the forward coordinate ``x``, and with ``position_dims > 2`` the objects lie on the ground plane
        (the extra coordinates, e.g. a height, are 0).
        """
        xy = object_layout(check_int("length", length))
        extra = xy.new_zeros(length, max(self.position_dims - 2, 0))
        return torch.cat([xy[:, : self.position_dims], extra], dim=-1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_features={self.num_features}, gamma={self.gamma}"


def split_graph_positions(positions: Tensor) -> tuple[Tensor, Tensor]:
    """Split graph positions ``(..., L, 2 + L)`` into coordinates ``(..., L, 2)`` and edge lengths ``(..., L, L)``."""
    if positions.dim() not in (2, 3) or positions.shape[-1] != 2 + positions.shape[-2]:
        raise ValueError(f"edge_aware_graph: positions must have shape (L, 2 + L) or (B, L, 2 + L) "
                         f"(coordinates, then the row of edge lengths), got {tuple(positions.shape)}")
    return positions[..., :2], positions[..., 2:]


@register_encoder(
    "edge_aware_graph",
    domain="multirobot",
    relative=False,
    reference="Huang et al. 2025, NOPE: Non-Overlap-Aware Egocentric Pose Estimation for Collaborative Perception "
    "in Connected Autonomy, arXiv:2506.14180 (edge-aware graph attention)",
    example_options={},
)
class EdgeAwareGraphEncoding(PositionalEncoding):
    """NOPE's edge-aware graph attention term over Delaunay edges, with an optional 2-D rotary object PE.

    Huang et al. 2025, arXiv:2506.14180, high level: ``alpha_ij = softmax_j(q_i^T (k_j + W_e A_ij) / sqrt(d))``
    over the neighbours ``j`` of ``i``. Here ``q_i^T k_j / sqrt(d)`` is the attention's own score and this
    encoder's ``bias`` adds ``A_ij (q_i . w_h) / sqrt(d)`` per head ``h`` (``w_h`` = head ``h``'s slice of
    ``W_e``, learned), and ``-inf`` for pairs that are not edges (self loops are edges of length 0), so
    attention follows the graph. The edge term uses the queries after ``rotate`` (with ``object_pe="rope2d"``
    the rotated query); that is still a learned linear function of the query.

    Positions pack each node's coordinates and its row of the edge-length matrix
    (:func:`pe_toolkit.domains.multirobot.graph.edge_distance_matrix`): ``(L, 2 + L)`` or ``(B, L, 2 + L)``, with
    ``A_ij >= 0`` for an edge and a negative entry (``-1``) for no edge; the diagonal must be an edge (>= 0)
    so that every query sees at least itself. Keys and queries are the same nodes (self-attention).

    Options:
        object_pe: ``None`` (edges only) or ``"rope2d"`` (also rotate by the coordinates, see
            :class:`Rotary2DEncoding`).
        object_pe_options: options for the rotary encoder.

    Raises:
        ValueError: positions of the wrong shape, a negative diagonal entry, queries and keys of different lengths.
    """

    position_vector_dims = 1

    def __init__(self, dim: int, num_heads: int, *, object_pe: str | None = None,
                 object_pe_options: dict[str, Any] | None = None, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        check_choice("edge_aware_graph: object_pe", object_pe, (None, "rope2d"))
        self.object_pe = object_pe
        self.rotary = Rotary2DEncoding(dim, num_heads, **(object_pe_options or {})) if object_pe else None
        self.edge_weight = nn.Parameter(torch.randn(num_heads, self.head_dim) / math.sqrt(self.head_dim))

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        if self.rotary is None:
            return q, k
        return self.rotary.rotate(q, k, split_graph_positions(q_pos)[0], split_graph_positions(k_pos)[0])

    bias_reads_key_indices = True  # column j of a query's edge row is key j of the whole graph

    def position_checks(self, positions: Tensor, name: str = "positions") -> list[PositionCheck]:
        """Every node is its own neighbour: the diagonal of the edge lengths is ``>= 0`` (else a query sees no
        key). Run once by the entry point, not in each layer's :meth:`bias_function`."""
        if positions.dim() not in (2, 3) or positions.shape[-1] != 2 + positions.shape[-2]:
            return []  # the hooks raise the shape error
        edges = positions[..., 2:]
        return [((edges.diagonal(dim1=-2, dim2=-1) >= 0).all(),
                 f"edge_aware_graph: the diagonal of the edge-length matrix ({name}[..., 2:]) must be >= 0 "
                 "(self loops)", None)]

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The edge term on every (query, key) pair, ``(B, H, L, L)``: :meth:`bias_function` on the full grid."""
        return bias_on_grid(self.bias_function(q, k, q_pos, k_pos), q.shape[0], q.shape[1], (0, q.shape[-2]),
                            (0, k.shape[-2]), q.device)

    def bias_function(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> BiasFunction:
        """Pointwise: ``A_ij (q_i . w_h) / sqrt(d)`` for an edge (``A_ij >= 0``), ``-inf`` otherwise.

        ``q`` ``(B, H, L, hd)`` (rotated), positions ``(L, 2 + L)`` / ``(B, L, 2 + L)``; the per-query term
        ``(B, H, L)`` is computed once here, and ``A_ij = q_pos[b, i, 2 + j]`` is looked up per pair.
        """
        _, edges = split_graph_positions(q_pos)
        if k_pos.shape != q_pos.shape or q.shape[-2] != k.shape[-2]:
            raise ValueError(f"edge_aware_graph: self-attention only (same nodes for queries and keys), got q_pos "
                             f"{tuple(q_pos.shape)} and k_pos {tuple(k_pos.shape)}")
        compute = torch.float64 if q.dtype == torch.float64 else torch.float32
        edges = (edges if edges.dim() == 3 else edges.unsqueeze(0)).to(compute)  # (B or 1, L, L)
        batched = edges.shape[0] > 1 or q_pos.dim() == 3
        query_term = (torch.einsum("bhid,hd->bhi", q.to(compute), self.edge_weight.to(compute))
                      / math.sqrt(self.head_dim))  # (B, H, L)

        def function(b: Tensor, h: Tensor, i: Tensor, j: Tensor) -> Tensor:
            length = edges[b if batched else torch.zeros_like(b), i, j]
            return torch.where(length >= 0, length.clamp_min(0) * query_term[b, h, i], float("-inf"))

        return function

    def example_positions(self, length: int) -> Tensor:
        """One robot's observation graph of ``length`` objects, ``(length, 2 + length)`` float32.

        Coordinates of :func:`object_layout` (spread over the sensing cone, units of the sensor range), then
        each object's row of :func:`~pe_toolkit.domains.multirobot.graph.edge_distance_matrix` of them: the
        Delaunay edge lengths, 0 on the diagonal and -1 for pairs that are not edges.
        """
        from pe_toolkit.domains.multirobot.graph import edge_distance_matrix

        xy = object_layout(check_int("length", length))
        edges = torch.from_numpy(edge_distance_matrix(xy.double().numpy())).float()
        return torch.cat([xy, edges], dim=-1)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, object_pe={self.object_pe}"

