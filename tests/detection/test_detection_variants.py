"""Named detector variants: ``independent_box_centerness`` separates the PE effect from sharing (issue 28 item 7).

Both PEs with independent stages: every stage owns its box PE and centerness PE, nothing is shared, and with the
PEs' output projections at zero the model is exactly the plain ``independent`` detector.
"""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.benchmarks import detection as bench
from pe_toolkit.domains.detection import DETECTOR_VARIANTS, DetectorConfig, RecursiveDetector, count_parameters
from pe_toolkit.domains.detection.encoders import BoxPE, CenternessPE

SMALL = dict(num_classes=2, dim=16, num_heads=2, ffn_dim=32, dynamic_dim=4, pooler_resolution=3, num_proposals=5,
             num_stages=4, backbone_channels=(8, 8))
PE_KEYS = ("box_pe", "self_attn.encoding", "centerness_pe")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def build(variant: str) -> RecursiveDetector:
    return RecursiveDetector(DetectorConfig.for_variant(variant, **SMALL))


def test_variants_are_the_benchmarks_and_build_their_flags():
    assert bench.VARIANTS == tuple(DETECTOR_VARIANTS)  # the same names in the same order
    config = DetectorConfig.for_variant("independent_box_centerness", **SMALL)
    assert (config.recursive, config.box_pe, config.centerness_pe) == (False, True, True)
    assert config.num_stages == 4 and config.dim == 16
    for name, flags in DETECTOR_VARIANTS.items():
        assert {k: getattr(DetectorConfig.for_variant(name), k) for k in flags} == flags


def test_for_variant_rejects_unknown_names_and_conflicting_flags():
    with pytest.raises(ValueError, match=r"variant must be one of \[.*'independent_box_centerness'\], got 'shared'"):
        DetectorConfig.for_variant("shared")
    with pytest.raises(ValueError, match=r"sets \['recursive'\] itself"):
        DetectorConfig.for_variant("independent_box_centerness", recursive=True)


def test_independent_box_centerness_shapes():
    model = build("independent_box_centerness")
    outputs = model(torch.rand(2, 3, 32, 24))
    assert len(outputs) == 4
    for logits, boxes in outputs:
        assert logits.shape == (2, 5, 2) and boxes.shape == (2, 5, 4) and torch.isfinite(logits).all()
    assert model.predict(torch.rand(1, 3, 32, 32), top_k=3)[0]["boxes"].shape == (3, 4)


def test_every_stage_owns_its_pe_modules_and_parameters():
    model = build("independent_box_centerness")
    pes = model.pe_modules()
    assert len(pes) == 4
    assert all(isinstance(p["box_pe"], BoxPE) and isinstance(p["centerness_pe"], CenternessPE) for p in pes)
    for kind in ("box_pe", "centerness_pe"):
        assert len({id(p[kind]) for p in pes}) == 4  # four distinct modules ...
        storages = [{q.data_ptr() for q in p[kind].parameters()} for p in pes]
        assert all(a.isdisjoint(b) for i, a in enumerate(storages) for b in storages[i + 1:])  # ... no shared tensor
    # the recursive variant, for contrast: steps 2..4 return the one shared stage's modules
    shared = build("recursive_box_centerness").pe_modules()
    assert shared[1]["box_pe"] is shared[2]["box_pe"] is shared[3]["box_pe"] is not shared[0]["box_pe"]


def test_perturbing_one_stages_pe_changes_only_that_stage_onward():
    images = torch.rand(1, 3, 32, 32)
    for variant, first_changed in (("independent_box_centerness", 2), ("recursive_box_centerness", 1)):
        model = build(variant).eval()
        before = [logits.clone() for logits, _ in model(images)]
        with torch.no_grad():
            model.pe_modules()[2]["box_pe"].q_pos_proj.weight.mul_(5.0)
        after = [logits for logits, _ in model(images)]
        for step, (a, b) in enumerate(zip(before, after)):
            # independent: steps 0 and 1 have their own PEs; recursive: step 2's PE is the shared one of steps 1..3
            assert torch.equal(a, b) == (step < first_changed), (variant, step)


def test_parameter_counts_by_hand():
    # per stage, for dim d = 16: box PE = MLP(2d -> d -> d) + W_qp + W_kp = 3d^2 + 2d + 2(d^2 + d) = 5d^2 + 4d = 1344;
    # centerness PE = query_scale MLP(d -> d -> d) + ref_head MLP(d -> d -> 2) + roi_proj + kernel_proj
    #               = 2(d^2 + d) + (d^2 + d + 2d + 2) + 2(d^2 + d) = 5d^2 + 7d + 2 = 1394
    per_stage = 1344 + 1394
    counts = {name: count_parameters(build(name)) for name in DETECTOR_VARIANTS}
    assert counts["independent_box_centerness"] - counts["independent"] == 4 * per_stage  # four stages, four copies
    assert counts["recursive_box_centerness"] - counts["recursive"] == 2 * per_stage  # first + one shared stage
    assert counts["recursive_box"] - counts["recursive"] == 2 * 1344


def test_with_zero_pe_projections_it_is_the_independent_detector():
    """The variant differs from ``independent`` by the PEs alone: with the PEs' output projections at zero (box PE
    ``W_qp``, ``W_kp``; centerness ``W_roi``) and the other weights copied, the two give identical outputs."""
    with_pe = build("independent_box_centerness").eval()
    plain = build("independent").eval()
    with torch.no_grad():
        for pes in with_pe.pe_modules():
            for linear in (pes["box_pe"].q_pos_proj, pes["box_pe"].k_pos_proj, pes["centerness_pe"].roi_proj):
                linear.weight.zero_()
                linear.bias.zero_()
    state = {k: v for k, v in with_pe.state_dict().items() if not any(f".{key}." in k for key in PE_KEYS)}
    plain.load_state_dict(state)  # strict: exactly the plain detector's parameters remain
    images = torch.rand(2, 3, 32, 32)
    for (la, ba), (lb, bb) in zip(with_pe(images), plain(images)):
        torch.testing.assert_close(la, lb)
        torch.testing.assert_close(ba, bb)
    with torch.no_grad():
        with_pe.pe_modules()[0]["box_pe"].q_pos_proj.weight.fill_(0.5)  # one nonzero projection: a difference
    assert not torch.allclose(with_pe(images)[0][0], plain(images)[0][0])


def test_the_centerness_term_is_cancelled_by_the_first_layer_norm():
    """As in the official code (``DynamicConv.forward``: ``features + features_pos[:, :, None]`` then
    ``norm1 = LayerNorm(dim_dynamic)``), the centerness term is one number per RoI cell added to every channel of
    the dynamic convolution's first layer, and the LayerNorm over those channels subtracts it again: the
    centerness PE does not change the detector's output (up to rounding), whatever its weights."""
    model = build("independent_box_centerness").eval()
    images = torch.rand(2, 3, 32, 32)
    before = model(images)
    with torch.no_grad():
        for pes in model.pe_modules():
            pes["centerness_pe"].roi_proj.weight.normal_(std=3.0)
            pes["centerness_pe"].kernel_proj.bias.fill_(2.0)
    stage = model.stages[0]
    features = torch.randn(10, 16)
    roi = torch.randn(10, 9, 16)
    term = 5 * torch.randn(10, 9)
    torch.testing.assert_close(stage.interaction(features, roi, term), stage.interaction(features, roi, None),
                               atol=1e-4, rtol=1e-4)
    for (la, ba), (lb, bb) in zip(before, model(images)):
        torch.testing.assert_close(la, lb, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ba, bb, atol=1e-4, rtol=1e-4)
