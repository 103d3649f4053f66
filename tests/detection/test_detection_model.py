"""The detector: shapes, parameter sharing of the recursive decoder, PE wiring, one training step, errors."""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.domains.detection.encoders import BoxPE, CenternessPE
from pe_toolkit.domains.detection.model import DecoderStage, DetectorConfig, RecursiveDetector, count_parameters

SMALL = dict(num_classes=2, dim=16, num_heads=2, ffn_dim=32, dynamic_dim=4, pooler_resolution=3, num_proposals=5,
             num_stages=4, backbone_channels=(8, 8))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def stage_params(config: DetectorConfig, interactions: int = 1) -> int:
    return count_parameters(DecoderStage(config, interactions=interactions))


@pytest.mark.parametrize("box_pe, centerness_pe", [(False, False), (True, False), (True, True)])
def test_recursive_decoder_shares_parameters(box_pe, centerness_pe):
    independent = RecursiveDetector(DetectorConfig(**SMALL, box_pe=box_pe, centerness_pe=centerness_pe))
    recursive = RecursiveDetector(DetectorConfig(**SMALL, recursive=True, box_pe=box_pe, centerness_pe=centerness_pe))
    config = recursive.config
    shared = stage_params(config)
    base = count_parameters(recursive.backbone) + recursive.init_boxes.numel() + recursive.init_features.numel()
    assert count_parameters(independent) == base + 4 * shared  # four stages of their own
    assert count_parameters(recursive) == base + 2 * shared  # the first stage + one shared stage
    modules = recursive.stage_modules()
    assert len(modules) == 4 and modules[1] is modules[2] is modules[3] is not modules[0]
    assert modules[1].interactions == 2 and modules[0].interactions == 1
    assert len({id(m) for m in independent.stage_modules()}) == 4


def test_pe_modules_are_present_only_when_enabled():
    plain = DecoderStage(DetectorConfig(**SMALL))
    assert plain.box_pe is None and plain.centerness_pe is None and plain.self_attn.encoding is None
    full = DecoderStage(DetectorConfig(**SMALL, box_pe=True, centerness_pe=True))
    assert isinstance(full.self_attn.encoding, BoxPE) and isinstance(full.centerness_pe, CenternessPE)
    assert stage_params(DetectorConfig(**SMALL, box_pe=True)) > stage_params(DetectorConfig(**SMALL))


@pytest.mark.parametrize("recursive", [False, True])
def test_forward_shapes_and_predict(recursive):
    model = RecursiveDetector(DetectorConfig(**SMALL, recursive=recursive, box_pe=True, centerness_pe=True))
    images = torch.rand(2, 3, 32, 24)
    outputs = model(images)
    assert len(outputs) == 4
    for logits, boxes in outputs:
        assert logits.shape == (2, 5, 2) and boxes.shape == (2, 5, 4) and torch.isfinite(boxes).all()
        assert (boxes[..., 2:] > 0).all()
    preds = model.predict(images, top_k=3)
    assert len(preds) == 2 and preds[0]["boxes"].shape == (3, 4) and preds[0]["labels"].max() < 2
    assert (preds[0]["scores"][:-1] >= preds[0]["scores"][1:]).all()


def test_boxes_are_detached_between_stages_and_every_stage_gets_gradients():
    model = RecursiveDetector(DetectorConfig(**SMALL, box_pe=True, centerness_pe=True))
    outputs = model(torch.rand(2, 3, 32, 32))
    # the last stage's boxes only: earlier stages' box heads get no gradient (boxes are detached)
    outputs[-1][1].sum().backward(retain_graph=True)
    assert model.stages[0].box_delta.weight.grad is None or model.stages[0].box_delta.weight.grad.abs().sum() == 0
    model.zero_grad()
    sum(logits.sum() + boxes.sum() for logits, boxes in outputs).backward()
    for stage in model.stages:
        assert stage.class_logits.weight.grad.abs().sum() > 0


def test_box_pe_changes_the_output():
    torch.manual_seed(1)
    model = RecursiveDetector(DetectorConfig(**SMALL, box_pe=True))
    images = torch.rand(1, 3, 32, 32)
    before = model(images)[-1][0]
    with torch.no_grad():
        for stage in model.stages:
            stage.box_pe.q_pos_proj.weight.mul_(3.0)
    assert not torch.allclose(before, model(images)[-1][0])


def test_config_and_input_errors():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        DetectorConfig(dim=10, num_heads=4)
    with pytest.raises(ValueError, match="num_stages >= 2"):
        DetectorConfig(recursive=True, num_stages=1)
    with pytest.raises(TypeError, match="box_pe must be a bool"):
        DetectorConfig(box_pe=1)
    with pytest.raises(TypeError, match="DetectorConfig"):
        RecursiveDetector({"dim": 16})
    model = RecursiveDetector(DetectorConfig(**SMALL))
    with pytest.raises(ValueError, match=r"images must be a \(B, 3, H, W\)"):
        model(torch.rand(1, 1, 32, 32))
    bad = torch.rand(1, 3, 32, 32)
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        model(bad)
