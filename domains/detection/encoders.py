"""Box and centerness positional encodings of RecursiveDet.

Zhao, Sun, Li 2023, "RecursiveDet: End-to-End Region-based Recursive Object Detection", ICCV 2023,
arXiv:2307.13619 (official code ``bravezzzzzz/RecursiveDet``, ``sparsercnn/head.py`` and
``util/box_ops.py``). Registered under ``domain="detection"``:

* ``box_pe`` (:class:`BoxPE`): each of a proposal box's ``(cx, cy, w, h)`` (normalised to ``[0, 1]``) is
  encoded with interleaved sinusoids of ``2 pi u / T^(2 floor(i/2) / F)``, the four codes are concatenated
  in the order ``(y, x, w, h)`` and an MLP maps them to ``p``. In the proposals' self-attention ``p`` enters
  queries and keys only (Conditional-DETR style): ``q = W_qc f + W_qp p``, ``k = W_kc f + W_kp p``,
  ``v = W_v f``. The ``W_.c`` / ``W_v`` projections are the attention's own; this encoder adds
  ``W_qp p`` / ``W_kp p`` in the ``rotate`` hook, per head. ``embed`` adds ``p`` to features.
* ``centerness_pe`` (:class:`CenternessPE`): the FCOS centerness of each RoI cell,
  ``c = sqrt(min(l, r) / max(l, r) * min(t, b) / max(t, b))``, weights (a) the image's 2-D sine PE pooled
  over the RoI like the features and (b) the dynamic-convolution kernel's box PE (the ``(y, x)`` half of
  the box code, scaled by ``query_scale(f)`` and modulated by ``ref_w / w``, ``ref_h / h`` with
  ``ref = sigmoid(MLP(f))``). The first dynamic layer becomes ``F W1 + <PE_roi, PE_kernel>`` per cell: a
  per-(proposal, cell) additive term, which this encoder returns from its ``bias`` hook.

Shapes:
    boxes ``(..., N, 4)`` cxcywh; features ``(B, N, dim)``; q / k ``(B, H, N, dim / H)``;
    RoI grid of ``R x R`` cells flattened to ``R * R``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pe_toolkit.domains.detection.box_ops import box_cxcywh_to_xyxy, check_boxes
from pe_toolkit.domains.detection.roi_align import roi_align
from pe_toolkit.encoders.base import PositionalEncoding, check_choice, check_float, check_int
from pe_toolkit.registry import register_encoder

__all__ = ["BoxPE", "CenternessPE", "MLP", "box_sine_embedding", "centerness_grid", "grid_boxes", "sine_position_map"]

REFERENCE = "Zhao, Sun, Li 2023, RecursiveDet: End-to-End Region-based Recursive Object Detection, arXiv:2307.13619"


class MLP(nn.Sequential):
    """``Linear -> ReLU -> ... -> Linear`` with ``num_layers`` linear layers (DETR's MLP)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, num_layers: int) -> None:
        sizes = [in_dim] + [hidden] * (num_layers - 1) + [out_dim]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(a, b))
            if i < num_layers - 1:
                layers.append(nn.ReLU())
        super().__init__(*layers)


def _sine(values: Tensor, num_feats: int, temperature: float) -> Tensor:
    """Interleaved ``[sin(a_0), cos(a_0), sin(a_1), cos(a_1), ...]`` of ``a_j = values / T^(2j / F)``.

    ``values (...)`` (already multiplied by the scale) -> ``(..., num_feats)``.
    """
    i = torch.arange(num_feats, device=values.device, dtype=values.dtype)
    dim_t = temperature ** (2 * torch.div(i, 2, rounding_mode="floor") / num_feats)
    angles = values[..., None] / dim_t  # (..., F); entries 2j and 2j + 1 share a frequency
    return torch.stack([angles[..., 0::2].sin(), angles[..., 1::2].cos()], dim=-1).flatten(-2)


def box_sine_embedding(boxes: Tensor, num_feats: int, *, temperature: float = 10000.0) -> Tensor:
    """Sinusoidal code of cxcywh boxes, ``(..., 4) -> (..., 4 * num_feats)`` in the order ``(y, x, w, h)``.

    RecursiveDet's ``gen_sineembed_for_position``: each coordinate ``u`` gives
    ``sin / cos(2 pi u / T^(2 floor(i/2) / F))`` interleaved (even index sin, odd index cos), ``i < F``.

    Raises:
        ValueError / TypeError: for invalid boxes (NaN, negative width, wrong shape) or an odd ``num_feats``.
    """
    check_boxes("boxes", boxes, fmt="cxcywh")
    check_int("num_feats", num_feats)
    if num_feats % 2:
        raise ValueError(f"num_feats must be even (sin/cos pairs), got {num_feats}")
    code = _sine(boxes * (2 * math.pi), num_feats, temperature)  # (..., 4, F) in the order (x, y, w, h)
    cx, cy, w, h = code.unbind(-2)
    return torch.cat([cy, cx, w, h], dim=-1)


def centerness_grid(resolution: int, *, dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """FCOS centerness of the cell centres of an ``R x R`` grid, ``(R, R)``.

    For the cell centre ``(x, y)`` with ``x, y in {0.5, ..., R - 0.5}``: ``l = x``, ``r = R - x``,
    ``t = y``, ``b = R - y`` and ``c = sqrt(min(l, r) / max(l, r) * min(t, b) / max(t, b))``
    (Tian et al. 2019, FCOS, arXiv:1904.01355; RecursiveDet's ``gen_centerness_for_position``).
    """
    check_int("resolution", resolution)
    centres = torch.arange(resolution, dtype=dtype, device=device) + 0.5
    near, far = torch.minimum(centres, resolution - centres), torch.maximum(centres, resolution - centres)
    ratio = near / far  # (R,)
    return torch.sqrt(ratio[:, None] * ratio[None, :])  # rows: y, columns: x


def sine_position_map(height: int, width: int, num_feats: int, *, temperature: float = 10000.0,
                      dtype: torch.dtype = torch.float32, device=None) -> Tensor:
    """DETR's normalised 2-D sine PE of a feature map, ``(2 * num_feats, H, W)``, channels ``(y, x)``.

    Carion et al. 2020, DETR, arXiv:2005.12872 (``PositionEmbeddingSine(normalize=True)``): row ``r``
    (1-based) is at ``r / (H + 1e-6) * 2 pi``, column likewise, each encoded by interleaved sin/cos.
    """
    check_int("height", height)
    check_int("width", width)
    eps = 1e-6
    y = torch.arange(1, height + 1, dtype=dtype, device=device) / (height + eps) * (2 * math.pi)
    x = torch.arange(1, width + 1, dtype=dtype, device=device) / (width + eps) * (2 * math.pi)
    pos_y = _sine(y, num_feats, temperature)[:, None, :].expand(height, width, num_feats)
    pos_x = _sine(x, num_feats, temperature)[None, :, :].expand(height, width, num_feats)
    return torch.cat([pos_y, pos_x], dim=-1).permute(2, 0, 1)


def grid_boxes(count: int) -> Tensor:
    """``count`` proposal boxes tiling the image on a grid, ``(count, 4)`` normalised cxcywh float32.

    Box ``i`` is centred in cell ``(i // c, i % c)`` of a grid ``c = ceil(sqrt(count))`` columns by
    ``ceil(count / c)`` rows (the last row may be partial) and covers 80 % of the cell's width and height.
    """
    check_int("count", count)
    cols = math.isqrt(count - 1) + 1  # ceil(sqrt(count))
    rows = -(-count // cols)
    i = torch.arange(count, dtype=torch.float32)
    cx, cy = (i % cols + 0.5) / cols, (torch.div(i, cols, rounding_mode="floor") + 0.5) / rows
    return torch.stack([cx, cy, torch.full_like(i, 0.8 / cols), torch.full_like(i, 0.8 / rows)], dim=-1)


def _check_even_dim(owner: str, dim: int) -> None:
    if dim % 2:
        raise ValueError(f"{owner}: dim must be even (half for y, half for x), got {dim}")


@register_encoder("box_pe", domain="detection", relative=False, reference=REFERENCE)
class BoxPE(PositionalEncoding):
    """Proposal-box PE of RecursiveDet: sinusoids of ``(cx, cy, w, h)`` -> MLP -> added to queries and keys.

    Zhao, Sun, Li 2023, RecursiveDet, arXiv:2307.13619 (``pos_xywh``, ``sa_qpos_proj``, ``sa_kpos_proj``).

    ``encode(boxes)``: ``p = MLP(box_sine_embedding(boxes, dim / 2))`` with the MLP ``2 dim -> dim -> dim``.
    ``rotate``: ``q + split_heads(W_qp p(q_pos))``, ``k + split_heads(W_kp p(k_pos))`` (the content
    projections are the attention's own ``q_proj`` / ``k_proj``; values get no position).
    ``embed``: ``x + p(positions)``.

    Args:
        dim: model width (even); num_heads: attention heads (must divide ``dim``).
        temperature: ``T`` of the sinusoids (10000 in the paper).

    Shapes: positions / q_pos / k_pos ``(B, N, 4)`` or ``(N, 4)`` cxcywh boxes (finite, ``w, h >= 0``);
    x ``(B, N, dim)``; q ``(B, H, Nq, dim / H)``, k ``(B, H, Nk, dim / H)``.
    """

    position_vector_dims = 1  # positions carry a trailing box dimension (MultiHeadAttention checks shapes)

    def __init__(self, dim: int, num_heads: int, *, temperature: float = 10000.0, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        _check_even_dim("box_pe", dim)
        self.temperature = check_float("box_pe: temperature", temperature)
        self.mlp = MLP(2 * dim, dim, dim, 2)
        self.q_pos_proj = nn.Linear(dim, dim)
        self.k_pos_proj = nn.Linear(dim, dim)

    def encode(self, boxes: Tensor) -> Tensor:
        """``p``: ``(..., 4)`` cxcywh boxes -> ``(..., dim)``."""
        return self.mlp(box_sine_embedding(boxes, self.dim // 2, temperature=self.temperature))

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        if x.shape[:-1] != positions.shape[:-1] or x.shape[-1] != self.dim:
            raise ValueError(f"box_pe: x {tuple(x.shape)} and positions {tuple(positions.shape)} must be "
                             f"(..., N, {self.dim}) and (..., N, 4)")
        return x + self.encode(positions.to(x.dtype))

    def example_positions(self, length: int) -> Tensor:
        """``length`` proposal boxes of one image on a grid, ``(1, length, 4)`` cxcywh, as the detector passes them.

        :func:`grid_boxes`: the boxes tile the image row by row, each covering 80 % of its grid cell; the
        leading image dimension is the batch that :meth:`embed` requires to match its features ``(1, L, dim)``.
        """
        return grid_boxes(check_int("length", length)).unsqueeze(0)

    def _heads(self, p: Tensor, heads: int) -> Tensor:
        # (B, N, dim) or (N, dim) -> (B or 1, heads, N, dim / heads)
        p = p if p.dim() == 3 else p.unsqueeze(0)
        return p.view(p.shape[0], p.shape[1], heads, -1).transpose(1, 2)

    def rotate(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> tuple[Tensor, Tensor]:
        if q.shape[1] * q.shape[-1] != self.dim or k.shape[1] * k.shape[-1] != self.dim:
            raise ValueError(f"box_pe: q and k must have heads * head_dim = {self.dim} (no grouped KV heads), "
                             f"got {tuple(q.shape)} and {tuple(k.shape)}")
        p_q = self.encode(q_pos.to(q.dtype))
        p_k = p_q if k_pos is q_pos else self.encode(k_pos.to(k.dtype))
        return q + self._heads(self.q_pos_proj(p_q), q.shape[1]), k + self._heads(self.k_pos_proj(p_k), k.shape[1])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}, temperature={self.temperature}"


@register_encoder("centerness_pe", domain="detection", relative=False, reference=REFERENCE,
                  example_options={"resolution": 7})
class CenternessPE(PositionalEncoding):
    """Centerness-weighted RoI and kernel PEs of RecursiveDet's dynamic convolution (a per-cell additive term).

    Zhao, Sun, Li 2023, RecursiveDet, arXiv:2307.13619 (``DynamicConv.forward``, ``gen_centerness_for_position``).

    For proposal ``k`` with features ``f`` and box ``(cx, cy, w, h)`` and RoI cell ``j`` (centerness ``c_j``)::

        PE_roi[k, j]    = W_roi (c_j * pooled_image_pe[k, j])
        g               = box_sine_embedding(box, dim / 2)[:dim] * query_scale(f)   # (y-half, x-half)
        (ref_w, ref_h)  = sigmoid(ref_head(f));  g_x *= ref_w / w;  g_y *= ref_h / h
        PE_kernel[k, j] = W_ker (c_j * g)
        term[k, j]      = <PE_roi[k, j], PE_kernel[k, j]>

    which the dynamic convolution adds to ``(F W1)[k, j, :]``.

    Args:
        dim: model width (even); num_heads: kept for the common constructor (unused).
        resolution: ``R`` of the ``R x R`` RoI grid (7 in the paper).
        weighting: ``"centerness"`` (the paper) or ``"none"`` (``c_j = 1``, an ablation).
        temperature: ``T`` of the box sinusoids.

    Shapes (:meth:`roi_term`): features ``(K, dim)``, boxes ``(K, 4)`` cxcywh with ``w, h > 0``,
    roi_pos ``(K, R*R, dim)`` -> ``(K, R*R)``. :meth:`bias` is the same with ``q (K, 1, 1, dim)``,
    ``q_pos (K, 1, 4)``, ``k_pos (K, R*R, dim)`` -> ``(K, 1, 1, R*R)``.
    """

    def __init__(self, dim: int, num_heads: int, *, resolution: int = 7, weighting: str = "centerness",
                 temperature: float = 10000.0, causal: bool = False) -> None:
        super().__init__(dim, num_heads, causal=causal)
        _check_even_dim("centerness_pe", dim)
        self.resolution = check_int("centerness_pe: resolution", resolution)
        self.weighting = check_choice("centerness_pe: weighting", weighting, ("centerness", "none"))
        self.temperature = check_float("centerness_pe: temperature", temperature)
        grid = centerness_grid(resolution) if weighting == "centerness" else torch.ones(resolution, resolution)
        self.register_buffer("centerness", grid.flatten(), persistent=False)  # (R*R,)
        self.query_scale = MLP(dim, dim, dim, 2)
        self.ref_head = MLP(dim, dim, 2, 2)
        self.roi_proj = nn.Linear(dim, dim)
        self.kernel_proj = nn.Linear(dim, dim)

    def kernel_pe(self, features: Tensor, boxes: Tensor) -> Tensor:
        """The kernel-side box PE before the centerness weighting, ``(K, dim)``."""
        half = self.dim // 2
        g = box_sine_embedding(boxes, half, temperature=self.temperature)[..., : self.dim]  # (y-half, x-half)
        g = g * self.query_scale(features)
        ref = self.ref_head(features).sigmoid()  # (K, 2): (ref_w, ref_h)
        scale_y = (ref[..., 1] / boxes[..., 3]).unsqueeze(-1)
        scale_x = (ref[..., 0] / boxes[..., 2]).unsqueeze(-1)
        return torch.cat([g[..., :half] * scale_y, g[..., half:] * scale_x], dim=-1)

    def roi_term(self, features: Tensor, boxes: Tensor, roi_pos: Tensor) -> Tensor:
        """``<PE_roi, PE_kernel>`` per proposal and RoI cell: ``(K, dim), (K, 4), (K, R*R, dim) -> (K, R*R)``.

        Raises:
            ValueError: for mismatched shapes, or boxes with a zero width or height (the kernel PE divides by them).
        """
        cells = self.resolution**2
        k = features.shape[0]
        if features.shape != (k, self.dim) or boxes.shape != (k, 4) or roi_pos.shape != (k, cells, self.dim):
            raise ValueError(f"centerness_pe: expected features ({k}, {self.dim}), boxes ({k}, 4), roi_pos "
                             f"({k}, {cells}, {self.dim}); got {tuple(features.shape)}, {tuple(boxes.shape)}, "
                             f"{tuple(roi_pos.shape)}")
        check_boxes("boxes", boxes, fmt="cxcywh")
        if (boxes[:, 2:] <= 0).any():
            raise ValueError("centerness_pe: boxes must have w > 0 and h > 0 (the kernel PE divides by them)")
        c = self.centerness.to(roi_pos.dtype)[None, :, None]  # (1, R*R, 1)
        pe_roi = self.roi_proj(roi_pos * c)  # (K, R*R, dim)
        pe_kernel = self.kernel_proj(self.kernel_pe(features, boxes.to(features.dtype)).unsqueeze(1) * c)
        return (pe_roi * pe_kernel).sum(-1)

    def bias(self, q: Tensor, k: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """The :meth:`roi_term` as a (proposal, cell) bias ``(K, 1, 1, R*R)``; ``k`` (RoI features) is unused."""
        if q.dim() != 4 or q.shape[1:3] != (1, 1) or q_pos.dim() != 3 or q_pos.shape[1] != 1:
            raise ValueError(f"centerness_pe: bias expects q (K, 1, 1, dim) and q_pos (K, 1, 4), got "
                             f"{tuple(q.shape)} and {tuple(q_pos.shape)}")
        return self.roi_term(q[:, 0, 0], q_pos[:, 0], k_pos)[:, None, None, :]

    def example_positions(self, length: int) -> Tensor:
        """The boxes of ``length`` proposals of one image on a grid, ``(length, 4)`` cxcywh (:func:`grid_boxes`).

        Each box covers 80 % of its cell of a ``ceil(sqrt(length))``-column grid over the image; these are the
        proposals (queries) of :meth:`positional_pattern`, whose RoI cells (keys) are pooled under them.
        """
        return grid_boxes(check_int("length", length))

    def example_roi_positions(self, boxes: Tensor, map_size: int = 32) -> Tensor:
        """The image PE pooled under ``boxes`` ``(K, 4)`` cxcywh, ``(K, R*R, dim)``, as the detector does.

        DETR's sine map (:func:`sine_position_map`) of a ``map_size x map_size`` feature map (the
        whole image), RoI-aligned over each box into ``R x R`` cells (sampling ratio 2), cells row-major.
        """
        pos_map = sine_position_map(map_size, map_size, self.dim // 2, dtype=boxes.dtype, device=boxes.device)
        xyxy = box_cxcywh_to_xyxy(boxes) * map_size
        roi = roi_align(pos_map.unsqueeze(0), xyxy.unsqueeze(0), self.resolution, sampling_ratio=2)
        return roi.flatten(2).transpose(1, 2)

    @torch.no_grad()
    def positional_pattern(self, length: int = 32, *, positions: Tensor | None = None) -> Tensor:
        """The centerness PE term per proposal and RoI cell, ``(H, length, R*R)``: not a query-key pattern.

        Rows are ``length`` proposals with boxes ``positions`` ``(length, 4)`` cxcywh (default
        :meth:`example_positions`) and the content convention's fixed features ``f = ones(dim)``; columns are
        the ``R x R`` RoI cells of each proposal, row-major, whose positions are :meth:`example_roi_positions`.
        Entry ``[h, k, j]`` is :meth:`roi_term` ``(f, boxes, roi_pos)[k, j]``, the term the dynamic convolution
        adds at cell ``j`` of proposal ``k``; it has no head, so every ``h`` holds the same map. Eval mode,
        module modes restored.
        """
        check_int("length", length)
        boxes = self.example_positions(length) if positions is None else positions
        if not isinstance(boxes, Tensor):
            raise TypeError(f"positions must be a torch.Tensor, got {type(boxes).__name__}")
        if tuple(boxes.shape) != (length, 4):
            raise ValueError(f"centerness_pe: positions must be ({length}, 4) cxcywh boxes, got {tuple(boxes.shape)}")
        modes = [(module, module.training) for module in self.modules()]
        self.eval()
        try:
            weight = self.roi_proj.weight
            dtype = torch.float64 if weight.dtype == torch.float64 else torch.float32
            boxes = boxes.to(weight.device, dtype)
            features = torch.ones(length, 1, 1, self.dim, dtype=dtype, device=weight.device)
            term = self.bias(features, features, boxes.unsqueeze(1), self.example_roi_positions(boxes))
            return term[:, 0, 0].expand(self.num_heads, length, self.resolution**2)
        finally:
            for module, training in modes:
                module.training = training

    def extra_repr(self) -> str:
        return f"dim={self.dim}, resolution={self.resolution}, weighting={self.weighting!r}"
