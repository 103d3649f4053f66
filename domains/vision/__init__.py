"""Vision domain: multi-axis rotary (axial, mixed, M-RoPE), 2-D sin-cos and learned 2-D tables in a small ViT.

Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", arXiv:2403.13298 (RoPE-Axial,
RoPE-Mixed); Wang et al. 2024, "Qwen2-VL", arXiv:2409.12191 (M-RoPE); He et al. 2021, MAE,
arXiv:2111.06377 (2-D sin-cos); Dosovitskiy et al. 2020, ViT, arXiv:2010.11929 (learned table, bicubic
resize). Patch positions for any image size (:mod:`~pe_toolkit.domains.vision.positions`), a seeded
procedural dataset renderable at any resolution and an ImageFolder loader
(:mod:`~pe_toolkit.domains.vision.data`), a small ViT (:mod:`~pe_toolkit.domains.vision.model`) and its
Lightning module (:mod:`~pe_toolkit.domains.vision.lightning_module`, needs the ``train`` extra).

``import pe_toolkit.domains.vision`` registers the encoders under ``domain="vision"``:

>>> import pe_toolkit as pet, pe_toolkit.domains.vision
>>> pet.list_encoders(domain="vision")
['learned_2d', 'mrope', 'rope_axial', 'rope_mixed', 'sincos_2d']
"""

from pe_toolkit.domains.vision.data import (
    CLASSES,
    ImageFolderDataset,
    Scene,
    Shape,
    ShapeRelations,
    make_scene,
    render_scene,
    save_image_folder,
)
from pe_toolkit.domains.vision.encoders import (
    AxialRoPE,
    Learned2D,
    MixedRoPE,
    MRoPE,
    SinCos2D,
    mrope_default_sections,
    sincos_2d_table,
)
from pe_toolkit.domains.vision.model import ViT, ViTConfig, default_position_layout
from pe_toolkit.domains.vision.positions import mrope_positions, patch_grid, patch_positions

__all__ = [
    "CLASSES", "AxialRoPE", "ImageFolderDataset", "Learned2D", "MRoPE", "MixedRoPE", "Scene", "Shape",
    "ShapeRelations", "SinCos2D", "ViT", "ViTConfig", "default_position_layout", "make_scene", "mrope_default_sections",
    "mrope_positions", "patch_grid", "patch_positions", "render_scene", "save_image_folder", "sincos_2d_table",
]
