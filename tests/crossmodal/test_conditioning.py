"""CMC-PE: interpolation onto another time axis, the encoder's formula, connectors, registry, bad input."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
import pe_toolkit.domains.crossmodal  # noqa: F401  (registers cmc_pe)
from pe_toolkit.domains.crossmodal.conditioning import (
    CMCPEConnector,
    CMCPositionalEncoding,
    CrossAttentionConnector,
    interpolate_time,
    make_connector,
)


def test_interpolation_upsamples_a_ramp_with_half_step_centres():
    # source steps at times 0, 1, 2, 3 (values = times); 8 output steps read t = (j + 0.5) / 2 - 0.5
    ramp = torch.arange(4, dtype=torch.float64).view(1, 4, 1)
    out = interpolate_time(ramp, 8)[0, :, 0]
    expected = torch.tensor([0.0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.0], dtype=torch.float64)  # ends held
    torch.testing.assert_close(out, expected)


def test_interpolation_downsamples_by_averaging_neighbours_and_keeps_identity():
    x = torch.tensor([[[0.0], [2.0], [4.0], [6.0]]])
    torch.testing.assert_close(interpolate_time(x, 2), torch.tensor([[[1.0], [5.0]]]))
    y = torch.randn(2, 5, 3)
    torch.testing.assert_close(interpolate_time(y, 5), y)
    c = torch.full((1, 3, 2), 7.0)
    torch.testing.assert_close(interpolate_time(c, 11), torch.full((1, 11, 2), 7.0))


def test_interpolation_nearest():
    x = torch.tensor([[[1.0], [2.0]]])
    torch.testing.assert_close(interpolate_time(x, 4, mode="nearest"), torch.tensor([[[1.0], [1.0], [2.0], [2.0]]]))


def test_an_event_lands_at_the_same_relative_time():
    # a click at audio step 40 of 64 must appear at video step 20 of 32
    audio = torch.zeros(1, 64, 1)
    audio[0, 40] = 1.0
    video_axis = interpolate_time(audio, 32)[0, :, 0]
    assert int(video_axis.argmax()) == 20


@pytest.mark.parametrize(
    ("signal", "length", "mode", "match"),
    [
        (torch.zeros(4, 3), 5, "linear", r"shape \(B, T, C\)"),
        (torch.zeros(1, 0, 3), 5, "linear", "empty time axis"),
        (torch.zeros(1, 4, 3), 0, "linear", "length must be >= 1, got 0"),
        (torch.zeros(1, 4, 3), 5, "cubic", "mode must be one of"),
    ],
)
def test_interpolation_bad_input(signal, length, mode, match):
    with pytest.raises(ValueError, match=match):
        interpolate_time(signal, length, mode=mode)


def test_cmc_pe_formula():
    enc = CMCPositionalEncoding(8, 2, in_features=3, groups=2).double()
    torch.nn.init.normal_(enc.norm.weight)
    torch.nn.init.normal_(enc.norm.bias)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    c = torch.randn(2, 4, 5, 3, dtype=torch.float64)  # (B, T_c, S, C_in)
    pooled = enc.ffn(c).mean(2).transpose(1, 2)       # (B, dim, T_c)
    normed = torch.nn.functional.group_norm(pooled, 2, enc.norm.weight, enc.norm.bias, eps=enc.norm.eps)
    expected = x + torch.nn.functional.interpolate(normed, size=6, mode="linear", align_corners=False).transpose(1, 2)
    torch.testing.assert_close(enc.embed(x, c), expected)
    # spatial hidden states: the same signal tiled over the space axis
    xs = torch.randn(2, 6, 3, 8, dtype=torch.float64)
    torch.testing.assert_close(enc.embed(xs, c) - xs, (expected - x).unsqueeze(2).expand(-1, -1, 3, -1))


def test_cmc_pe_is_registered():
    info = pet.encoder_info("cmc_pe")
    assert info.domain == "crossmodal" and info.hooks == ("embed",) and "2409.17550" in info.reference
    enc = pet.get_encoder("cmc_pe", 16, 4, **info.example_options)
    assert enc.embed(torch.randn(2, 5, 16), torch.randn(2, 9, 8)).shape == (2, 5, 16)


def test_cmc_pe_gradcheck():
    enc = CMCPositionalEncoding(4, 2, in_features=2, groups=2).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    c = torch.randn(1, 5, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: enc.embed(a, b), (x, c))


def test_cmc_pe_bad_input():
    enc = CMCPositionalEncoding(8, 2, in_features=3)
    with pytest.raises(ValueError, match="batch sizes differ: x has 2, the features have 3"):
        enc.embed(torch.randn(2, 4, 8), torch.randn(3, 4, 3))
    with pytest.raises(ValueError, match=r"C_in=3"):
        enc.embed(torch.randn(2, 4, 8), torch.randn(2, 4, 5))
    with pytest.raises(TypeError, match="float features"):
        enc.embed(torch.randn(2, 4, 8), torch.arange(4).expand(2, 4))
    with pytest.raises(ValueError, match=r"groups \(3\) must divide dim \(8\)"):
        CMCPositionalEncoding(8, 2, in_features=3, groups=3)


def test_connectors_start_as_identity_and_depend_on_the_condition_after_training_starts():
    h = torch.randn(2, 6, 16)
    cond = torch.randn(2, 12, 16)
    for connector in (CMCPEConnector(16, 4, 16), CrossAttentionConnector(16, 4, 16, time_encoding="rope")):
        torch.testing.assert_close(connector(h, cond), h)  # zero-initialised proj_out
        torch.nn.init.normal_(connector.proj_out.weight)
        assert not torch.allclose(connector(h, cond), connector(h, torch.randn(2, 12, 16)))


def test_cmc_pe_connector_follows_a_time_shift_of_the_condition():
    # shifting the condition in time shifts its contribution: the additive signal is time-aligned
    enc = CMCPositionalEncoding(8, 2, in_features=1)
    cond = torch.zeros(1, 16, 1)
    cond[0, 4] = 5.0
    shifted = torch.roll(cond, 4, dims=1)
    x = torch.zeros(1, 16, 8)
    a, b = enc.embed(x, cond), enc.embed(x, shifted)
    torch.testing.assert_close(a[0, 2:10], b[0, 6:14])


def test_cross_attention_without_time_ignores_the_order_of_the_condition():
    connector = CrossAttentionConnector(16, 4, 16, time_encoding="none")
    torch.nn.init.normal_(connector.proj_out.weight)
    h, cond = torch.randn(1, 6, 16), torch.randn(1, 10, 16)
    permuted = cond[:, torch.randperm(10)]
    torch.testing.assert_close(connector(h, cond), connector(h, permuted))
    rope = CrossAttentionConnector(16, 4, 16, time_encoding="rope")
    torch.nn.init.normal_(rope.proj_out.weight)
    assert not torch.allclose(rope(h, cond), rope(h, permuted))


def test_make_connector_and_bad_kinds():
    assert make_connector("none", 8, 2, 8) is None
    with pytest.raises(ValueError, match="connector must be one of"):
        make_connector("film", 8, 2, 8)
    with pytest.raises(ValueError, match="time_encoding must be one of"):
        CrossAttentionConnector(8, 2, 8, time_encoding="alibi")
    with pytest.raises(ValueError, match="batch sizes differ: h has 2, cond has 3"):
        CrossAttentionConnector(8, 2, 8)(torch.randn(2, 4, 8), torch.randn(3, 4, 8))
