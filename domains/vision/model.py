"""A small Vision Transformer on the core :class:`~pe_toolkit.nn.transformer.Transformer`, any positional encoding.

Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words", arXiv:2010.11929: patchify (a strided
convolution), prepend a class token (and optional register tokens, Darcet et al. 2023,
arXiv:2309.16588), run a bidirectional pre-norm Transformer, classify the class token (or the mean
of the patch tokens). The encoding is chosen by name, and the patch positions come from
:func:`~pe_toolkit.domains.vision.positions.patch_positions` for whatever image size arrives, so a model
trained at 32 pixels runs at 48, 64 or 96 as is: the position layout decides how the encoding meets
the larger grid (``"index"``: the grid grows, rotary and sin-cos extrapolate; ``"resample"``: the
centres are given in training-grid units, which for ``learned_2d`` is the bicubic resize of its table).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from pe_toolkit.domains.vision.positions import LAYOUTS, patch_grid, patch_positions
from pe_toolkit.encoders.base import check_choice, check_int, require_finite
from pe_toolkit.nn.transformer import Transformer, TransformerConfig
from pe_toolkit.registry import encoder_info

__all__ = ["ViT", "ViTConfig", "default_position_layout"]


def default_position_layout(encoding: str) -> str:
    """How a ViT feeds ``encoding`` a grid it was not trained on: ``"resample"`` for the learned table
    (its bicubic resize), ``"index"`` for the rest (patch indices extend)."""
    return "resample" if encoding == "learned_2d" else "index"


@dataclass
class ViTConfig:
    """Configuration of :class:`ViT`.

    Attributes:
        num_classes: output classes.
        image_size: the training resolution (pixels, square); sets the reference grid and
            ``learned_2d``'s table size.
        patch_size: pixels per patch side; image sides must be multiples of it.
        in_channels: image channels.
        dim, num_heads, num_layers, mlp_hidden, dropout: Transformer sizes.
        encoding, encoding_options: the positional encoding by registry name (``"nope"`` for none).
        share_encoding: one encoding for all layers (RoPE-Mixed's paper learns one per layer: False).
        position_layout: ``"index"``, ``"resample"`` or ``"normalized"``; ``None``: :func:`default_position_layout`.
        pool: ``"cls"`` (the class token) or ``"mean"`` (mean of the patch tokens).
        num_register_tokens: extra learned tokens after the class token.
    """

    num_classes: int
    image_size: int = 32
    patch_size: int = 4
    in_channels: int = 3
    dim: int = 64
    num_heads: int = 4
    num_layers: int = 4
    mlp_hidden: int | None = None
    dropout: float = 0.0
    encoding: str = "rope_axial"
    encoding_options: dict[str, Any] = field(default_factory=dict)
    share_encoding: bool = True
    position_layout: str | None = None
    pool: str = "cls"
    num_register_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ViT(nn.Module):
    """Patch embedding -> [class, registers, patches] -> Transformer (the encoding's hooks) -> head.

    Shapes: ``forward(images (B, C, H, W)) -> logits (B, num_classes)`` for any ``H``, ``W`` divisible by
    ``patch_size``.

    Example:
        >>> model = ViT(ViTConfig(num_classes=4, dim=32, num_heads=4, num_layers=1))
        >>> model(torch.rand(2, 3, 32, 32)).shape, model(torch.rand(2, 3, 48, 64)).shape
        (torch.Size([2, 4]), torch.Size([2, 4]))
    """

    def __init__(self, config: ViTConfig) -> None:
        super().__init__()
        self.config = config
        check_int("num_classes", config.num_classes)
        check_int("num_register_tokens", config.num_register_tokens, minimum=0)
        check_choice("pool", config.pool, ("cls", "mean"))
        self.train_grid = patch_grid(config.image_size, config.image_size, config.patch_size)
        self.layout = config.position_layout or default_position_layout(config.encoding)
        check_choice("position_layout", self.layout, LAYOUTS)
        options = dict(config.encoding_options)
        if encoder_info(config.encoding).name == "learned_2d":
            options.setdefault("grid_size", self.train_grid)
        self.trunk = Transformer(TransformerConfig(
            vocab_size=None, dim=config.dim, num_heads=config.num_heads, num_layers=config.num_layers, causal=False,
            encoding=config.encoding, encoding_options=options, share_encoding=config.share_encoding,
            norm="layernorm", mlp="gelu", mlp_hidden=config.mlp_hidden, dropout=config.dropout,
        ))
        encoding = self.trunk.encodings[0]
        self.vector_positions = getattr(encoding, "position_vector_dims", 0) == 1
        self.axes = getattr(encoding, "axes", 2)
        if not self.vector_positions and config.encoding != "nope":
            raise ValueError(f"ViT: encoding {config.encoding!r} takes 1-D positions; use an encoder of the vision "
                             "domain (pe_toolkit.list_encoders(domain='vision')) or 'nope'")
        self.patch_embed = nn.Conv2d(config.in_channels, config.dim, config.patch_size, stride=config.patch_size)
        self.num_prefix_tokens = 1 + config.num_register_tokens
        self.prefix = nn.Parameter(torch.randn(1, self.num_prefix_tokens, config.dim) * 0.02)
        self.head = nn.Linear(config.dim, config.num_classes)

    def positions(self, grid_h: int, grid_w: int, device: torch.device | None = None) -> Tensor | None:
        """The token positions for a ``grid_h x grid_w`` patch grid (prefix tokens at 0), or ``None`` for NoPE."""
        if not self.vector_positions:
            return None
        reference = self.train_grid if self.layout == "resample" else None
        return patch_positions(grid_h, grid_w, layout=self.layout, reference_grid=reference,
                               num_prefix_tokens=self.num_prefix_tokens, axes=self.axes, device=device)

    def features(self, images: Tensor) -> Tensor:
        """Final hidden states ``(B, prefix + patches, dim)`` of images ``(B, C, H, W)``."""
        if not isinstance(images, Tensor) or images.dim() != 4 or images.shape[1] != self.config.in_channels:
            shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(f"images must have shape (B, {self.config.in_channels}, H, W), got {shape}")
        if not images.is_floating_point():
            raise TypeError(f"images must be a float tensor (pixel values, e.g. in [0, 1]), got {images.dtype}; "
                            f"convert integer images with images.float() / 255")
        require_finite("images", images)
        try:
            grid_h, grid_w = patch_grid(images.shape[-2], images.shape[-1], self.config.patch_size)
        except ValueError as error:
            raise ValueError(f"images of shape {tuple(images.shape)}: {error}") from error
        images = images.to(self.patch_embed.weight.dtype)  # a float16 image into a float32 model, and so on
        x = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, gh * gw, dim), raster order
        x = torch.cat([self.prefix.expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
        return self.trunk.forward_features(x, positions=self.positions(grid_h, grid_w, images.device))

    def forward(self, images: Tensor) -> Tensor:
        hidden = self.features(images)
        pooled = hidden[:, 0] if self.config.pool == "cls" else hidden[:, self.num_prefix_tokens:].mean(1)
        return self.head(pooled)

    def num_parameters(self, exclude_positional: bool = False) -> int:
        """Parameters (optionally without the positional encodings')."""
        excluded = {id(p) for p in self.trunk.encodings.parameters()} if exclude_positional else set()
        return sum(p.numel() for p in self.parameters() if id(p) not in excluded)
