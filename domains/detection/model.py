"""A Sparse R-CNN-style detector whose decoder stages are independent or shared (RecursiveDet).

Sun et al. 2021, "Sparse R-CNN: End-to-End Object Detection with Learnable Proposals", arXiv:2011.12450;
Zhao, Sun, Li 2023, "RecursiveDet", arXiv:2307.13619 (official code ``bravezzzzzz/RecursiveDet``).

Pipeline for images ``(B, 3, H, W)``:

1. a small CNN backbone (plain ``torch.nn`` conv layers, trained from scratch) gives features
   ``(B, dim, H / 4, W / 4)``;
2. ``num_proposals`` learnable proposal boxes (normalised cxcywh, initialised to the whole image) and
   proposal features ``(N, dim)``;
3. each decoder stage: self-attention among the proposals (the toolkit's ``MultiHeadAttention``, with the
   ``box_pe`` encoding when enabled), RoI Align of the features under each box, dynamic instance interaction
   (two per-proposal 1x1 "dynamic convolutions" whose kernels come from the proposal feature, plus the
   ``centerness_pe`` term when enabled), an FFN, then class logits and a box refinement;
4. boxes are detached between stages; every stage is supervised (deep supervision).

``recursive=False``: ``num_stages`` stages with their own parameters, one interaction each (Sparse R-CNN).
``recursive=True``: RecursiveDet: the first stage has its own parameters, stages 2..S reuse **one** shared
stage, which applies the dynamic interaction twice (same weights) for extra depth.

Box refinement uses Sparse R-CNN's deltas (``cx += dx w / 2``, ``w *= exp(dw)``, weights (2, 2, 1, 1)) rather
than RecursiveDet's ``sigmoid(inverse_sigmoid(b) + delta)``: with proposals initialised to the whole image,
``inverse_sigmoid(1)`` saturates the sigmoid and the short CPU runs here would barely move the box sizes.

Deviation from the issue: torchvision is unavailable here (its wheels fail to load beside the pinned CPU torch
build), so the backbone is plain conv layers and RoI Align is :func:`pe_toolkit.domains.detection.roi_align.roi_align`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pe_toolkit.domains.detection.box_ops import box_cxcywh_to_xyxy
from pe_toolkit.domains.detection.encoders import BoxPE, CenternessPE, sine_position_map
from pe_toolkit.domains.detection.roi_align import roi_align
from pe_toolkit.encoders.base import check_float, check_int
from pe_toolkit.nn.attention import MultiHeadAttention

__all__ = ["DETECTOR_VARIANTS", "Backbone", "DecoderStage", "DetectorConfig", "DynamicInteraction", "RecursiveDetector",
           "count_parameters"]

_SCALE_CLAMP = math.log(1000.0 / 16)  # Sparse R-CNN's clamp on the size deltas

#: Named detectors (``recursive``, ``box_pe``, ``centerness_pe`` flags of :class:`DetectorConfig`). RecursiveDet's claim
#: mixes two changes, sharing the stages and adding the PEs; with ``independent_box_centerness`` (both PEs, every
#: stage its own parameters, its own PE modules included) the four corner variants form a 2 x 2 design, so the PE
#: effect is measured with and without sharing and the sharing effect with and without the PEs.
DETECTOR_VARIANTS: dict[str, dict[str, bool]] = {
    "independent": {"recursive": False, "box_pe": False, "centerness_pe": False},  # Sparse R-CNN
    "recursive": {"recursive": True, "box_pe": False, "centerness_pe": False},
    "recursive_box": {"recursive": True, "box_pe": True, "centerness_pe": False},
    "recursive_box_centerness": {"recursive": True, "box_pe": True, "centerness_pe": True},  # RecursiveDet
    "independent_box_centerness": {"recursive": False, "box_pe": True, "centerness_pe": True},
}


@dataclass
class DetectorConfig:
    """Hyper-parameters of :class:`RecursiveDetector` (paper defaults in brackets; small ones for CPU runs).

    Attributes:
        num_classes: object classes (no background class: focal loss).
        dim: hidden width [256]; num_heads: self-attention heads [8]; ffn_dim: FFN width [2048].
        dynamic_dim: inner width of the dynamic convolution [64].
        pooler_resolution: ``R`` of the ``R x R`` RoI grid [7]; sampling_ratio: RoI Align samples per bin axis [2].
        num_proposals: learnable proposals [100 / 300]; num_stages: decoder stages [6].
        recursive: share stages 2..S (RecursiveDet) instead of independent stages (Sparse R-CNN).
        box_pe: use the ``box_pe`` encoding in the proposals' self-attention.
        centerness_pe: add the ``centerness_pe`` term in the dynamic interaction.
        backbone_channels: widths of the two stride-2 conv blocks of the backbone.
        prior_prob: initial foreground probability of the class logits (focal-loss bias init) [0.01].
    """

    num_classes: int = 3
    dim: int = 64
    num_heads: int = 4
    ffn_dim: int = 128
    dynamic_dim: int = 16
    pooler_resolution: int = 7
    sampling_ratio: int = 2
    num_proposals: int = 16
    num_stages: int = 4
    recursive: bool = False
    box_pe: bool = False
    centerness_pe: bool = False
    backbone_channels: tuple[int, int] = (32, 64)
    prior_prob: float = 0.01

    def __post_init__(self) -> None:
        for name in ("num_classes", "dim", "num_heads", "ffn_dim", "dynamic_dim", "pooler_resolution",
                     "sampling_ratio", "num_proposals", "num_stages"):
            check_int(f"DetectorConfig.{name}", getattr(self, name))
        if self.dim % self.num_heads or self.dim % 2:
            raise ValueError(f"DetectorConfig: dim ({self.dim}) must be even and divisible by num_heads "
                             f"({self.num_heads})")
        if self.recursive and self.num_stages < 2:
            raise ValueError(f"DetectorConfig: recursive=True needs num_stages >= 2, got {self.num_stages}")
        for name in ("recursive", "box_pe", "centerness_pe"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"DetectorConfig.{name} must be a bool, got {getattr(self, name)!r}")
        check_float("DetectorConfig.prior_prob", self.prior_prob)
        if not self.prior_prob < 1:
            raise ValueError(f"DetectorConfig.prior_prob must be in (0, 1), got {self.prior_prob}")
        self.backbone_channels = tuple(self.backbone_channels)
        if len(self.backbone_channels) != 2:
            raise ValueError(f"DetectorConfig.backbone_channels must have 2 entries, got {self.backbone_channels}")
        for c in self.backbone_channels:
            check_int("DetectorConfig.backbone_channels[i]", c)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def for_variant(cls, variant: str, **options) -> DetectorConfig:
        """The config of a named detector of :data:`DETECTOR_VARIANTS`, with ``options`` for everything else.

        Example:
            >>> c = DetectorConfig.for_variant("independent_box_centerness", num_stages=3)
            >>> c.recursive, c.box_pe, c.centerness_pe, c.num_stages
            (False, True, True, 3)

        Raises:
            ValueError: an unknown variant, or ``options`` that set a flag the variant fixes.
        """
        if variant not in DETECTOR_VARIANTS:
            raise ValueError(f"DetectorConfig.for_variant: variant must be one of {list(DETECTOR_VARIANTS)}, "
                             f"got {variant!r}")
        fixed = sorted(set(options) & set(DETECTOR_VARIANTS[variant]))
        if fixed:
            raise ValueError(f"DetectorConfig.for_variant: the variant {variant!r} sets {fixed} itself; pass the "
                             "other options only")
        return cls(**options, **DETECTOR_VARIANTS[variant])


class Backbone(nn.Sequential):
    """Stride-4 CNN: two ``conv3x3 stride 2 -> GroupNorm -> ReLU`` blocks and a ``conv3x3`` to ``dim`` channels.

    Shapes: ``(B, 3, H, W) -> (B, dim, ceil(H / 4), ceil(W / 4))``.
    """

    stride = 4

    def __init__(self, dim: int, channels: tuple[int, int] = (32, 64)) -> None:
        c1, c2 = channels

        def block(cin: int, cout: int, stride: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.GroupNorm(8 if cout % 8 == 0
                    else 1, cout), nn.ReLU()]

        super().__init__(*block(3, c1, 2), *block(c1, c1, 1), *block(c1, c2, 2), *block(c2, c2, 1),
                         nn.Conv2d(c2, dim, 3, padding=1))

    def _single_value_groups(self, height: int, width: int) -> bool:
        """Whether a GroupNorm would see one value per group (``channels / groups = 1`` on a ``1 x 1`` map)."""
        stride = 1
        for module in self:
            if isinstance(module, nn.Conv2d):
                stride *= module.stride[0]
            elif isinstance(module, nn.GroupNorm):
                cells = math.ceil(height / stride) * math.ceil(width / stride)
                if cells * (module.num_channels // module.num_groups) < 2:
                    return True
        return False

    def forward(self, x: Tensor) -> Tensor:
        # A group of one value normalises to 0 (then the affine bias), but torch refuses it for a batch of one
        # ("Expected more than 1 value per channel"): a tiny single image runs as a batch of two copies.
        if x.shape[0] == 1 and self._single_value_groups(x.shape[-2], x.shape[-1]):
            return super().forward(x.expand(2, -1, -1, -1))[:1]
        return super().forward(x)


class DynamicInteraction(nn.Module):
    """Sparse R-CNN's dynamic instance interaction, optionally with RecursiveDet's centerness PE term.

    ``W1 (dim x dyn)`` and ``W2 (dyn x dim)`` are predicted from each proposal feature; the RoI features
    ``F (R*R, dim)`` become ``relu(LN(relu(LN(F W1 + term)) W2))``, flattened and projected to ``dim``.

    Shapes: proposal features ``(K, dim)``, RoI features ``(K, R*R, dim)``, term ``(K, R*R)`` or ``None``
    -> ``(K, dim)``.
    """

    def __init__(self, dim: int, dynamic_dim: int, resolution: int) -> None:
        super().__init__()
        self.dim, self.dynamic_dim = dim, dynamic_dim
        self.dynamic_layer = nn.Linear(dim, 2 * dim * dynamic_dim)
        self.norm1 = nn.LayerNorm(dynamic_dim)
        self.norm2 = nn.LayerNorm(dim)
        self.out_layer = nn.Linear(dim * resolution**2, dim)
        self.norm3 = nn.LayerNorm(dim)

    def forward(self, proposal: Tensor, roi: Tensor, term: Tensor | None = None) -> Tensor:
        params = self.dynamic_layer(proposal)  # (K, 2 * dim * dyn)
        w1 = params[:, : self.dim * self.dynamic_dim].view(-1, self.dim, self.dynamic_dim)
        w2 = params[:, self.dim * self.dynamic_dim:].view(-1, self.dynamic_dim, self.dim)
        x = torch.bmm(roi, w1)  # (K, R*R, dyn)
        if term is not None:
            x = x + term.unsqueeze(-1)  # <PE_roi, PE_kernel> per cell, the same for every output channel
        x = F.relu(self.norm1(x))
        x = F.relu(self.norm2(torch.bmm(x, w2)))  # (K, R*R, dim)
        return F.relu(self.norm3(self.out_layer(x.flatten(1))))


class DecoderStage(nn.Module):
    """One Sparse R-CNN / RecursiveDet head: self-attention, dynamic interaction(s), FFN, class and box heads.

    Args:
        config: the detector's :class:`DetectorConfig`.
        interactions: how many times the (same) dynamic interaction is applied (1, or 2 for RecursiveDet's
            shared stage).

    Shapes (:meth:`forward`): features ``(B, dim, h, w)``, pos_map ``(1, dim, h, w)``, boxes ``(B, N, 4)``
    normalised cxcywh, proposal features ``(B, N, dim)``, image_size ``(H, W)``; returns logits
    ``(B, N, num_classes)``, refined boxes ``(B, N, 4)`` and new proposal features ``(B, N, dim)``.
    """

    def __init__(self, config: DetectorConfig, *, interactions: int = 1) -> None:
        super().__init__()
        c = config
        self.config = c
        self.interactions = check_int("interactions", interactions)
        self.box_pe = BoxPE(c.dim, c.num_heads) if c.box_pe else None
        self.self_attn = MultiHeadAttention(c.dim, c.num_heads, qkv_bias=True, encoding=self.box_pe)
        self.centerness_pe = (CenternessPE(c.dim, c.num_heads, resolution=c.pooler_resolution)
                              if c.centerness_pe else None)
        self.interaction = DynamicInteraction(c.dim, c.dynamic_dim, c.pooler_resolution)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(c.dim), nn.LayerNorm(c.dim), nn.LayerNorm(c.dim)
        self.ffn = nn.Sequential(nn.Linear(c.dim, c.ffn_dim), nn.ReLU(), nn.Linear(c.ffn_dim, c.dim))
        self.cls_head = nn.Sequential(nn.Linear(c.dim, c.dim, bias=False), nn.LayerNorm(c.dim), nn.ReLU())
        self.reg_head = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(c.dim, c.dim, bias=False),
                                                                       nn.LayerNorm(c.dim), nn.ReLU())])
        self.class_logits = nn.Linear(c.dim, c.num_classes)
        self.box_delta = nn.Linear(c.dim, 4)
        nn.init.constant_(self.class_logits.bias, -math.log((1 - c.prior_prob) / c.prior_prob))
        nn.init.zeros_(self.box_delta.weight)
        nn.init.zeros_(self.box_delta.bias)

    def forward(self, features: Tensor, pos_map: Tensor | None, boxes: Tensor, proposal: Tensor,
                image_size: tuple[int, int]) -> tuple[Tensor, Tensor, Tensor]:
        c = self.config
        b, n, _ = boxes.shape
        r = c.pooler_resolution
        height, width = image_size
        # RoI features (and the image PE, pooled the same way) under each box, in pixels.
        # As torchvision's roi_align, no gradient flows into the pooling boxes (only the features).
        xyxy = box_cxcywh_to_xyxy(boxes.detach()) * boxes.new_tensor([width, height, width, height])
        spatial_scale = features.shape[-1] / width
        roi = roi_align(features, xyxy, r, spatial_scale=spatial_scale, sampling_ratio=c.sampling_ratio)
        roi = roi.flatten(2).transpose(1, 2)  # (B*N, R*R, dim)
        roi_pos = None
        if pos_map is not None:  # a constant map: pooled without autograd
            with torch.no_grad():
                roi_pos = roi_align(pos_map.expand(b, -1, -1, -1), xyxy, r, spatial_scale=spatial_scale,
                                    sampling_ratio=c.sampling_ratio).flatten(2).transpose(1, 2)

        # Self-attention among the proposals of each image (box PE on queries and keys when enabled).
        attn = self.self_attn(proposal, q_pos=boxes) if self.box_pe is not None else self.self_attn(proposal)
        x = self.norm1(proposal + attn).reshape(b * n, c.dim)

        flat_boxes = boxes.reshape(b * n, 4)
        for _ in range(self.interactions):
            term = None if self.centerness_pe is None else self.centerness_pe.roi_term(x, flat_boxes, roi_pos)
            x = self.norm2(x + self.interaction(x, roi, term))
        x = self.norm3(x + self.ffn(x))

        logits = self.class_logits(self.cls_head(x)).view(b, n, c.num_classes)
        delta = self.box_delta(self.reg_head(x)).view(b, n, 4)
        cx, cy, w, h = boxes.unbind(-1)
        dx, dy = delta[..., 0] / 2, delta[..., 1] / 2  # Sparse R-CNN bbox_weights (2, 2, 1, 1)
        dw, dh = delta[..., 2].clamp(max=_SCALE_CLAMP), delta[..., 3].clamp(max=_SCALE_CLAMP)
        new_boxes = torch.stack([cx + dx * w, cy + dy * h, w * dw.exp(), h * dh.exp()], dim=-1)
        return logits, new_boxes, x.view(b, n, c.dim)


class RecursiveDetector(nn.Module):
    """Sparse R-CNN-style detector with independent or recursive (shared) decoder stages.

    Args:
        config: a :class:`DetectorConfig`.

    Shapes: images ``(B, 3, H, W)`` (any ``H, W``; normalised inside with per-image mean/std); returns a list
    of ``num_stages`` pairs ``(logits (B, N, C), boxes (B, N, 4))`` with image-normalised cxcywh boxes.
    """

    def __init__(self, config: DetectorConfig) -> None:
        super().__init__()
        if not isinstance(config, DetectorConfig):
            raise TypeError(f"config must be a DetectorConfig, got {type(config).__name__}")
        c = self.config = config
        self.backbone = Backbone(c.dim, c.backbone_channels)
        self.init_boxes = nn.Parameter(torch.tensor([0.5, 0.5, 1.0, 1.0]).repeat(c.num_proposals, 1))
        self.init_features = nn.Parameter(torch.randn(c.num_proposals, c.dim) * 0.02)
        if c.recursive:
            self.first_stage = DecoderStage(c, interactions=1)
            self.shared_stage = DecoderStage(c, interactions=2)
            self.stages = None
        else:
            self.stages = nn.ModuleList(DecoderStage(c, interactions=1) for _ in range(c.num_stages))

    def stage_modules(self) -> list[DecoderStage]:
        """The stage applied at each of the ``num_stages`` steps (the same object repeats when recursive)."""
        if self.stages is not None:
            return list(self.stages)
        return [self.first_stage] + [self.shared_stage] * (self.config.num_stages - 1)

    def pe_modules(self) -> list[dict[str, nn.Module | None]]:
        """Per step, the stage's ``{"box_pe", "centerness_pe"}`` modules (``None`` when disabled).

        With independent stages every step has its own PE modules (and parameters); with recursion steps
        2..S return the same shared objects.
        """
        return [{"box_pe": stage.box_pe, "centerness_pe": stage.centerness_pe} for stage in self.stage_modules()]

    def forward(self, images: Tensor) -> list[tuple[Tensor, Tensor]]:
        if not isinstance(images, Tensor) or images.dim() != 4 or images.shape[1] != 3:
            got = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(f"images must be a (B, 3, H, W) tensor, got {got}")
        if not images.is_floating_point():
            raise TypeError(f"images must be a float tensor (B, 3, H, W), got {images.dtype}; convert integer "
                            f"images with images.float() / 255")
        if images.shape[0] == 0:
            raise ValueError(f"images must hold at least one image, got shape {tuple(images.shape)}")
        if not torch.isfinite(images).all():
            raise ValueError("images contain NaN or inf")
        c = self.config
        b, _, height, width = images.shape
        images = images.to(self.init_features.dtype)  # a float16 image into a float32 model, and so on
        mean = images.mean(dim=(1, 2, 3), keepdim=True)
        std = images.std(dim=(1, 2, 3), keepdim=True).clamp(min=1e-3)
        features = self.backbone((images - mean) / std)
        pos_map = None
        if c.centerness_pe:
            pos_map = sine_position_map(features.shape[-2], features.shape[-1], c.dim // 2,
                                        dtype=features.dtype, device=features.device).unsqueeze(0)
        boxes = self.init_boxes.unsqueeze(0).expand(b, -1, -1)
        proposal = self.init_features.unsqueeze(0).expand(b, -1, -1)
        outputs = []
        for stage in self.stage_modules():
            logits, new_boxes, proposal = stage(features, pos_map, boxes, proposal, (height, width))
            outputs.append((logits, new_boxes))
            boxes = new_boxes.detach()  # as in Sparse R-CNN / RecursiveDet
        return outputs

    @torch.no_grad()
    def predict(self, images: Tensor, *, top_k: int | None = None) -> list[dict[str, Tensor]]:
        """Detections per image: ``boxes (K, 4)`` xyxy pixels, ``scores (K,)``, ``labels (K,)``.

        As Sparse R-CNN's focal-loss inference: the ``top_k`` (default ``num_proposals``) highest of the
        ``N * C`` sigmoid scores of the last stage, each with its proposal's box; no NMS.
        """
        logits, boxes = self.forward(images)[-1]
        b, n, classes = logits.shape
        k = n if top_k is None else check_int("top_k", top_k)
        k = min(k, n * classes)
        height, width = images.shape[-2:]
        xyxy = box_cxcywh_to_xyxy(boxes) * boxes.new_tensor([width, height, width, height])
        scores, flat = logits.sigmoid().flatten(1).topk(k, dim=1)
        labels, proposal = flat % classes, torch.div(flat, classes, rounding_mode="floor")
        return [{"boxes": xyxy[i, proposal[i]], "scores": scores[i], "labels": labels[i]} for i in range(b)]


def count_parameters(module: nn.Module) -> int:
    """Number of distinct parameters (a shared stage counts once)."""
    return sum(p.numel() for p in module.parameters())
