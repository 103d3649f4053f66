"""The vision encoders against the reference implementations in HF transformers (tiny configs, nothing downloaded).

Qwen2-VL's M-RoPE (text model) and vision rotary, Qwen3-VL's interleaved M-RoPE, DINOv3's patch-centre
rotary (prefix tokens unrotated), Pixtral's 2-D rotary, ViT-MAE's 2-D sin-cos table, ViT's bicubic
position-embedding resize, and Qwen2-VL's ``get_rope_index``.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from pe_toolkit.domains.vision import AxialRoPE, Learned2D, MRoPE, SinCos2D, mrope_positions, patch_positions

transformers = pytest.importorskip("transformers")  # the hf extra; `make test` installs it (the dev tests need it)

warnings.filterwarnings("ignore", category=UserWarning, module="transformers")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def hf_rotate(x, cos, sin):
    """HF's ``q * cos + rotate_half(q) * sin`` (half-split layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def test_mrope_matches_qwen2_vl_text_rotary():
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

    config = Qwen2VLTextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=2,
                               rope_parameters={"rope_type": "default", "rope_theta": 10_000.0,
                                                "mrope_section": [4, 6, 6]})
    reference = Qwen2VLRotaryEmbedding(config)
    positions = torch.randint(0, 50, (3, 2, 9))  # (t, h, w) x batch x tokens, as HF takes them
    cos, sin = reference(torch.zeros(2, 9, 64), positions)
    q = torch.randn(2, 2, 9, 32)
    expected = hf_rotate(q, cos.unsqueeze(1), sin.unsqueeze(1))
    ours = MRoPE(64, 2, sections=(4, 6, 6))
    got, _ = ours.rotate(q, q, positions.permute(1, 2, 0), positions.permute(1, 2, 0))
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-5)
    assert MRoPE(256, 2).sections == (16, 24, 24)  # head_dim 128: the released models' mrope_section


def test_mrope_interleaved_matches_qwen3_vl_text_rotary():
    from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    config = Qwen3VLTextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                               rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                "mrope_section": [6, 5, 5], "mrope_interleaved": True})
    reference = Qwen3VLTextRotaryEmbedding(config)
    positions = torch.randint(0, 50, (3, 1, 7))
    cos, sin = reference(torch.zeros(1, 7, 64), positions)
    q = torch.randn(1, 2, 7, 32)
    ours = MRoPE(64, 2, sections=(6, 5, 5), base=5000.0, layout="sections_interleaved")
    got, _ = ours.rotate(q, q, positions.permute(1, 2, 0), positions.permute(1, 2, 0))
    torch.testing.assert_close(got, hf_rotate(q, cos.unsqueeze(1), sin.unsqueeze(1)), atol=2e-5, rtol=1e-5)


def test_axial_matches_qwen2_vl_vision_rotary():
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLVisionRotaryEmbedding

    reference = Qwen2VLVisionRotaryEmbedding(Qwen2VLVisionConfig(embed_dim=64, num_heads=2, depth=1, hidden_size=64))
    positions = patch_positions(3, 4).long()  # (N, 2): (row, column)
    cos, sin = reference(torch.zeros(12, 64), positions)  # (N, head_dim)
    q = torch.randn(1, 2, 12, 32)
    got, _ = AxialRoPE(64, 2, base=10_000.0).rotate(q, q, positions, positions)
    torch.testing.assert_close(got, hf_rotate(q, cos, sin), atol=2e-5, rtol=1e-5)


def test_axial_matches_pixtral_rotary():
    from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig
    from transformers.models.pixtral.modeling_pixtral import PixtralVisionRotaryEmbedding

    config = PixtralVisionConfig(hidden_size=64, num_attention_heads=2, head_dim=32, image_size=64, patch_size=8)
    positions = patch_positions(5, 3).long()
    cos, sin = PixtralVisionRotaryEmbedding(config)(torch.zeros(15, 64), positions)
    q = torch.randn(1, 2, 15, 32)
    got, _ = AxialRoPE(64, 2, base=10_000.0, layout="interleaved").rotate(q, q, positions, positions)
    torch.testing.assert_close(got, hf_rotate(q, cos, sin), atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("registers", [0, 2])
def test_axial_matches_dinov3_rotary_with_unrotated_prefix_tokens(registers):
    from transformers.models.dinov3_vit import modeling_dinov3_vit as dinov3
    from transformers.models.dinov3_vit.configuration_dinov3_vit import DINOv3ViTConfig

    config = DINOv3ViTConfig(hidden_size=64, num_attention_heads=2, patch_size=4, image_size=32,
                             num_register_tokens=registers)
    cos, sin = dinov3.DINOv3ViTRopePositionEmbedding(config).eval()(torch.zeros(1, 3, 16, 24))  # a 4 x 6 grid
    prefix = 1 + registers
    q, k = torch.randn(1, 2, prefix + 24, 32), torch.randn(1, 2, prefix + 24, 32)
    expected_q, expected_k = dinov3.apply_rotary_pos_emb(q, k, cos, sin)
    ours = AxialRoPE(64, 2, base=config.rope_theta, scale=2 * math.pi)
    positions = patch_positions(4, 6, layout="normalized", num_prefix_tokens=prefix)
    got_q, got_k = ours.rotate(q, k, positions, positions)
    torch.testing.assert_close(got_q, expected_q, atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(got_k, expected_k, atol=2e-5, rtol=1e-5)
    assert torch.equal(got_q[:, :, :prefix], q[:, :, :prefix])  # the class and register tokens are not rotated


def test_sincos_2d_matches_vit_mae_table():
    from transformers.models.vit_mae.modeling_vit_mae import build_2d_sinusoidal_position_embedding

    expected = build_2d_sinusoidal_position_embedding(3, 5, embed_dim=32, dtype=torch.float64)  # (15, 32)
    encoding = SinCos2D(32, 4).double()
    got = encoding.embed(torch.zeros(1, 15, 32, dtype=torch.float64), patch_positions(3, 5))
    torch.testing.assert_close(got[0], expected, atol=1e-12, rtol=0)


def test_learned_2d_resample_matches_vit_interpolate_pos_encoding():
    from transformers import ViTConfig
    from transformers.models.vit.modeling_vit import ViTEmbeddings

    config = ViTConfig(hidden_size=16, image_size=32, patch_size=4, num_channels=3)
    embeddings = ViTEmbeddings(config)
    ours = Learned2D(16, 2, grid_size=8)
    with torch.no_grad():  # the same table in both: (1, 1 + 64, dim) there, (dim, 8, 8) here
        ours.table.copy_(embeddings.position_embeddings[0, 1:].T.reshape(16, 8, 8))
    for height, width in ((48, 48), (64, 40), (24, 32)):
        expected = embeddings.interpolate_pos_encoding(torch.zeros(1, (height // 4) * (width // 4) + 1, 16),
                                                       height, width)[0, 1:]
        positions = patch_positions(height // 4, width // 4, layout="resample", reference_grid=8)
        got = ours.embed(torch.zeros(1, len(positions), 16), positions)[0]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ours.resized(height // 4, width // 4).reshape(-1, 16), expected, atol=1e-5,
                                   rtol=1e-5)


def test_mrope_positions_match_qwen2_vl_get_rope_index():
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel

    config = Qwen2VLConfig(text_config={"hidden_size": 32, "num_attention_heads": 2, "num_key_value_heads": 2,
                                        "num_hidden_layers": 1, "intermediate_size": 32, "vocab_size": 64},
                           vision_config={"embed_dim": 32, "hidden_size": 32, "num_heads": 2, "depth": 1,
                                          "spatial_merge_size": 2})
    stub = Qwen2VLModel.__new__(Qwen2VLModel)  # get_rope_index reads only the config; no weights are built
    stub.config = config
    grids = [(1, 4, 6), (2, 4, 4)]  # an image and a two-frame video, in patches before merging
    layout = [("text", 3), ("image", grids[0]), ("text", 2), ("video", grids[1]), ("text", 4)]
    types = [0] * 3 + [1] * 6 + [0] * 2 + [2] * 8 + [0] * 4
    ids = torch.zeros(1, len(types), dtype=torch.long)
    expected, _ = stub.get_rope_index(ids, torch.tensor([types]), image_grid_thw=torch.tensor([grids[0]]),
                                      video_grid_thw=torch.tensor([grids[1]]))
    got = mrope_positions(layout, spatial_merge_size=2)
    assert torch.equal(got, expected[:, 0].T)
