"""Clear errors of the domains' forward passes, the cross-modal metric and the explainers (issue 29).

Each case is a bad input the fuzzers (``test_fuzz_domain_forward.py``) or a user found, kept as a
regression test: before the fix it raised an ``AttributeError`` / ``IndexError`` / a ``RuntimeError`` from
deep inside torch, an error naming an internal argument (``positions``, ``tokens``, ``q_pos``,
``key_padding_mask``) instead of the user's, or nothing at all (NaN passed through). Each must now raise a
``ValueError`` / ``TypeError`` whose message names the argument.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch

import pe_toolkit as pet

NAN, INF = float("nan"), float("inf")


def _with(t: torch.Tensor, index: tuple, value: float) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


# ----------------------------------------------------------------------------------------------- models
@functools.cache
def music_model():
    from pe_toolkit.domains.music.models import MusicModelConfig, PianoRollTransformer

    return PianoRollTransformer(MusicModelConfig(encoding="s_ape", voices=2, dim=16, num_heads=2, num_layers=1,
                                                 dropout=0.0)).eval()


def music_inputs(length: int = 4):
    model = music_model()
    structure = pet.get_encoder("s_ape", 16, 2).example_positions(length)[None]
    return torch.randint(0, 2, (1, length, model.in_features)).float(), structure


def music(x=None, structure=None):
    default_x, default_structure = music_inputs()
    return music_model()(default_x if x is None else x, default_structure if structure is None else structure)


@functools.cache
def sasrec(encoding: str = "time_interval"):
    from pe_toolkit.domains.recsys.model import SASRec

    return SASRec(20, max_len=8, dim=16, num_heads=2, num_layers=1, dropout=0.0, encoding=encoding).eval()


ITEMS = torch.tensor([[0, 3, 4, 5], [1, 2, 3, 4]])
TIMES = torch.tensor([[0.0, 10.0, 20.0, 30.0], [1.0, 2.0, 3.0, 4.0]])


@functools.cache
def translation_model():
    from pe_toolkit.domains.translation.model import TranslationModel

    return TranslationModel(10, 12, dim=16, num_heads=2, encoder_layers=1, decoder_layers=1, encoding="sinusoidal")


SOURCE = torch.tensor([[3, 4, 5], [6, 7, 8]])
MASK = torch.ones(2, 3, dtype=torch.bool)
TARGET = torch.tensor([[1, 4], [1, 5]])


def translate(source=SOURCE, source_mask=MASK, target_in=TARGET):
    return translation_model()(source, source_mask, target_in)


@functools.cache
def vit():
    from pe_toolkit.domains.vision.model import ViT, ViTConfig

    return ViT(ViTConfig(num_classes=3, image_size=8, patch_size=4, dim=16, num_heads=2, num_layers=1)).eval()


@functools.cache
def detector():
    from pe_toolkit.domains.detection.model import DetectorConfig, RecursiveDetector

    return RecursiveDetector(DetectorConfig(num_classes=3, dim=16, num_heads=2, ffn_dim=16, dynamic_dim=4,
                                            pooler_resolution=2, num_proposals=4, num_stages=2, box_pe=True,
                                            centerness_pe=True, backbone_channels=(8, 8))).eval()


@functools.cache
def nope_model_and_batch():
    from pe_toolkit.domains.multirobot.data import collate_pairs
    from pe_toolkit.domains.multirobot.model import NOPE, NOPEConfig
    from pe_toolkit.domains.multirobot.simulator import SimConfig, simulate_pairs

    config = SimConfig()
    model = NOPE(NOPEConfig(descriptor_dim=config.descriptor_dim, dim=16, num_heads=2, graph_layers=1,
                            cross_layers=1, sinkhorn_iterations=5)).eval()
    return model, collate_pairs(simulate_pairs(2, seed=0, config=config), config.fov_range)


def nope(key: str, change):
    model, batch = nope_model_and_batch()
    batch = dict(batch)
    if change is None:
        del batch[key]
    else:
        batch[key] = change(batch[key])
    return model(batch)


@functools.cache
def denoiser():
    from pe_toolkit.domains.crossmodal.models import JointDenoiser

    return JointDenoiser((4, 4, 4), (8, 4), dim=16, num_heads=2, num_layers=1, connector="cmc_pe").eval()


def denoise(**changes):
    inputs = {"video_t": torch.randn(2, 4, 4, 4), "audio_t": torch.randn(2, 8, 4), "t_video": torch.tensor([1, 2]),
              "t_audio": torch.tensor([3, 4])}
    inputs.update(changes)
    return denoiser()(**inputs)


@functools.cache
def gin():
    from pe_toolkit.domains.graphs.models import GINModel

    return GINModel(num_classes=3, hidden=8, layers=1, in_features=2, pe="rwse", pe_options={"in_features": 4}).eval()


def graph(**changes):
    from torch_geometric.data import Data

    from pe_toolkit.domains.graphs.transforms import RandomWalkPE

    data = RandomWalkPE(4)(Data(x=torch.randn(3, 2), edge_index=torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]),
                                num_nodes=3))
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value(data[key])
    return gin()(data)


MODEL_CASES = {
    # music: PianoRollTransformer(x, structure)
    "music x int": (lambda: music(x=music_inputs()[0].long()), TypeError, "x must be a float tensor"),
    "music x list": (lambda: music(x=music_inputs()[0].tolist()), TypeError, "x must be a float tensor"),
    "music structure NaN": (lambda: music(structure=_with(music_inputs()[1].float(), (0, 0, 3), NAN)), TypeError,
                            "structure must hold integer structure labels"),
    "music structure bool": (lambda: music(structure=music_inputs()[1] > 0), TypeError, "structure must hold integer"),
    "music structure list": (lambda: music(structure=music_inputs()[1].tolist()), TypeError,
                             "structure must be a Tensor"),
    # recsys: SASRec(items, times)
    "recsys items list": (lambda: sasrec()(ITEMS.tolist(), TIMES), TypeError, "items must be an integer tensor"),
    "recsys items bool": (lambda: sasrec()(ITEMS > 0, TIMES), TypeError, "items must be an integer tensor"),
    "recsys items all padding": (lambda: sasrec()(_with(ITEMS, (1,), 0), TIMES), ValueError,
                                 r"items rows \[1\] hold only padding"),
    "recsys times NaN": (lambda: sasrec()(ITEMS, _with(TIMES, (1, 2), NAN)), ValueError,
                         r"times holds NaN or inf \(first at \[1, 2\]\)"),
    "recsys times inf": (lambda: sasrec()(ITEMS, _with(TIMES, (0, 0), INF)), ValueError, "times holds NaN or inf"),
    "recsys times list": (lambda: sasrec()(ITEMS, TIMES.tolist()), TypeError, "times must be a real-valued tensor"),
    "recsys times bool": (lambda: sasrec()(ITEMS, TIMES > 0), TypeError, "times must be a real-valued tensor"),
    # translation: TranslationModel(source, source_mask, target_in)
    "translation source >= vocab": (lambda: translate(source=_with(SOURCE, (0, 1), 17)), ValueError,
                                    r"source must be ids in \[0, vocab_size=10\), got values from 3 to 17"),
    "translation source negative": (lambda: translate(source=_with(SOURCE, (1, 0), -3)), ValueError,
                                    r"source must be ids in \[0, vocab_size=10\)"),
    "translation source bool": (lambda: translate(source=SOURCE > 4), TypeError, "source must be an integer tensor"),
    "translation source list": (lambda: translate(source=SOURCE.tolist()), TypeError, "source must be an integer"),
    "translation source_mask list": (lambda: translate(source_mask=MASK.tolist()), TypeError,
                                     "source_mask must be a bool tensor"),
    "translation target_in >= vocab": (lambda: translate(target_in=_with(TARGET, (0, 1), 19)), ValueError,
                                       r"target_in must be ids in \[0, vocab_size=12\)"),
    "translation target_in float": (lambda: translate(target_in=TARGET.float()), TypeError,
                                    "target_in must be an integer tensor"),
    "translation target_in list": (lambda: translate(target_in=TARGET.tolist()), TypeError, "target_in must be"),
    # vision: ViT(images)
    "vision images NaN": (lambda: vit()(_with(torch.rand(1, 3, 8, 8), (0, 0, 0, 0), NAN)), ValueError,
                          "images holds NaN or inf"),
    "vision images uint8": (lambda: vit()((torch.rand(1, 3, 8, 8) * 255).to(torch.uint8)), TypeError,
                            "images must be a float tensor"),
    "vision images bool": (lambda: vit()(torch.rand(1, 3, 8, 8) > 0.5), TypeError, "images must be a float tensor"),
    "vision image width 11": (lambda: vit()(torch.rand(1, 3, 8, 11)), ValueError,
                              r"images of shape \(1, 3, 8, 11\): image width 11 is not divisible by patch_size 4"),
    # detection: RecursiveDetector(images)
    "detection images int": (lambda: detector()(torch.randint(0, 255, (1, 3, 16, 16))), TypeError,
                             "images must be a float tensor"),
    "detection images bool": (lambda: detector()(torch.rand(1, 3, 16, 16) > 0.5), TypeError,
                              "images must be a float tensor"),
    "detection empty batch": (lambda: detector()(torch.rand(0, 3, 16, 16)), ValueError,
                              "images must hold at least one image"),
    "detection images inf": (lambda: detector()(_with(torch.rand(1, 3, 16, 16), (0, 1, 2, 3), INF)), ValueError,
                             "images contain NaN or inf"),
    # multirobot: NOPE(batch)
    "multirobot batch not a dict": (lambda: nope_model_and_batch()[0](list(nope_model_and_batch()[1].values())),
                                    TypeError, "batch must be a dict"),
    "multirobot desc_a missing": (lambda: nope("desc_a", None), ValueError, r"batch lacks \['desc_a'\]"),
    "multirobot desc_a NaN": (lambda: nope("desc_a", lambda v: _with(v, (0, 0, 0), NAN)), ValueError,
                              r"batch\['desc_a'\] holds NaN or inf"),
    "multirobot xy_b inf": (lambda: nope("xy_b", lambda v: _with(v, (1, 0, 1), INF)), ValueError,
                            r"batch\['xy_b'\] holds NaN or inf"),
    "multirobot edges_a NaN": (lambda: nope("edges_a", lambda v: _with(v, (0, 0, 1), NAN)), ValueError,
                               r"batch\['edges_a'\] holds NaN or inf"),
    "multirobot desc_b width": (lambda: nope("desc_b", lambda v: v[..., :-1]), ValueError,
                                r"batch\['desc_b'\] must have shape"),
    "multirobot xy_a batch": (lambda: nope("xy_a", lambda v: v[:1]), ValueError, r"batch\['xy_a'\] must have shape"),
    "multirobot xy_a int": (lambda: nope("xy_a", lambda v: v.long()), TypeError,
                            r"batch\['xy_a'\] must be a float tensor"),
    "multirobot mask_b int": (lambda: nope("mask_b", lambda v: v.long()), TypeError,
                              r"batch\['mask_b'\] must be a bool tensor"),
    "multirobot edges_b list": (lambda: nope("edges_b", lambda v: v.tolist()), TypeError,
                                r"batch\['edges_b'\] must be a tensor"),
    # crossmodal: JointDenoiser(video_t, audio_t, t_video, t_audio, video_cond, audio_cond, ...)
    "crossmodal video_t NaN": (lambda: denoise(video_t=_with(torch.randn(2, 4, 4, 4), (1, 0, 0, 0), NAN)), ValueError,
                               "video_t holds NaN or inf"),
    "crossmodal audio_t inf": (lambda: denoise(audio_t=_with(torch.randn(2, 8, 4), (0, 3, 1), INF)), ValueError,
                               "audio_t holds NaN or inf"),
    "crossmodal video_t int": (lambda: denoise(video_t=torch.randint(0, 3, (2, 4, 4, 4))), TypeError,
                               "video_t must be a float tensor"),
    "crossmodal audio_t list": (lambda: denoise(audio_t=torch.randn(2, 8, 4).tolist()), TypeError,
                                "audio_t must be a float tensor"),
    "crossmodal t_video NaN": (lambda: denoise(t_video=torch.tensor([1.0, NAN])), ValueError,
                               "t_video holds NaN or inf"),
    "crossmodal t_audio bool": (lambda: denoise(t_audio=torch.tensor([True, False])), TypeError,
                                "t_audio must be a tensor of diffusion timesteps"),
    "crossmodal t_audio scalar": (lambda: denoise(t_audio=torch.tensor(3)), ValueError,
                                  r"t_audio must have shape \(2,\)"),
    "crossmodal video_cond NaN": (lambda: denoise(video_cond=_with(torch.randn(2, 4, 4, 4), (0, 1, 1, 1), NAN)),
                                  ValueError, "video_cond holds NaN or inf"),
    "crossmodal audio_cond width": (lambda: denoise(audio_cond=torch.randn(2, 8, 3)), ValueError,
                                    "audio_cond must have shape"),
    "crossmodal t_video_cond inf": (lambda: denoise(t_video_cond=torch.tensor([INF, 1.0])), ValueError,
                                    "t_video_cond holds NaN or inf"),
    # graphs: GINModel(data)
    "graphs x NaN": (lambda: graph(x=lambda v: _with(v, (1, 0), NAN)), ValueError, "GraphPEInput: x holds NaN or inf"),
    "graphs x list": (lambda: graph(x=lambda v: v.tolist()), TypeError, "x must be a tensor of node features"),
    "graphs edge_index >= num_nodes": (lambda: graph(edge_index=lambda e: _with(e, (1, 0), 9)), ValueError,
                                       r"data.edge_index holds node ids in \[0, 9\], allowed \[0, 2\]"),
    "graphs edge_index negative": (lambda: graph(edge_index=lambda e: _with(e, (0, 0), -3)), ValueError,
                                   "data.edge_index holds node ids in"),
    "graphs edge_index float": (lambda: graph(edge_index=lambda e: e.float()), TypeError,
                                "data.edge_index must be an integer tensor"),
    "graphs edge_index missing": (lambda: graph(edge_index=None), TypeError,
                                  "data.edge_index must be an integer tensor"),
    "graphs rw_pe NaN": (lambda: graph(rw_pe=lambda v: _with(v, (0, 1), NAN)), ValueError,
                         "data.rw_pe holds NaN or inf"),
    "graphs rw_pe rows": (lambda: graph(rw_pe=lambda v: v[:-1]), ValueError, r"data.rw_pe must have shape \(3, k\)"),
    "graphs rw_pe int": (lambda: graph(rw_pe=lambda v: v.long()), TypeError, "data.rw_pe must be a float tensor"),
}


@pytest.mark.parametrize("case", list(MODEL_CASES))
def test_domain_forward_names_the_bad_argument(case):
    call, error, match = MODEL_CASES[case]
    with pytest.raises(error, match=match):
        call()


def test_what_the_fixes_still_accept():
    """The valid neighbours of the refused inputs: a float16 image runs as float32, a 1x1 single image through a
    backbone whose GroupNorm sees one value per group (torch refused a batch of one), float64 CMC-PE features."""
    image = torch.rand(1, 3, 8, 8)
    torch.testing.assert_close(vit()(image.half()), vit()(image.half().float()))
    tiny = torch.rand(1, 3, 1, 1)
    alone = detector()(tiny)[-1][0]
    in_batch = detector()(torch.cat([tiny, torch.rand(1, 3, 1, 1)]))[-1][0][:1]
    torch.testing.assert_close(alone, in_batch, atol=1e-5, rtol=1e-5)
    encoder = pet.get_encoder("cmc_pe", 16, 2, in_features=8).eval()
    features = encoder.example_positions(4)
    x = torch.zeros(1, 4, 16)
    torch.testing.assert_close(encoder.embed(x, features.double()), encoder.embed(x, features))
    items = torch.tensor([[0, 0, 3], [1, 2, 3]])  # left padding, one real item at least
    assert sasrec("learned")(items).shape == (2, 3, 16)


# ----------------------------------------------------------------------------------------------- cross-modal metric
def test_nan_video_is_an_error_not_a_silent_clip():
    """Issue 29: a NaN video scored 0.0 and counted as a clip with no events (NaN compares False with every
    threshold); the metric now refuses it, naming the argument."""
    from pe_toolkit.domains.crossmodal import av_align, av_align_batch, generate_clips

    clips = generate_clips(2, seed=0, video_frames=8, audio_frames=16, freq_bins=4)
    assert not math.isnan(av_align_batch(clips.video, clips.audio)["video_events"])
    with pytest.raises(ValueError, match="av_align_batch: video holds NaN or inf"):
        av_align_batch(_with(clips.video, (1, 2, 3, 4), NAN), clips.audio)
    with pytest.raises(ValueError, match="av_align_batch: audio holds NaN or inf"):
        av_align_batch(clips.video, _with(clips.audio, (0, 0, 0), -INF))
    with pytest.raises(ValueError, match="av_align: peaks must be finite"):
        av_align([1.0], [NAN])
    with pytest.raises(ValueError, match="av_align: tolerance must be a finite number"):
        av_align([1.0], [1.0], tolerance=NAN)


@pytest.mark.parametrize(("call", "match"), [
    (lambda: __import__("pe_toolkit.domains.crossmodal", fromlist=["x"]).audio_onsets(
        _with(torch.zeros(6, 4), (2, 1), NAN)), "audio_onsets: spectrogram holds NaN or inf"),
    (lambda: __import__("pe_toolkit.domains.crossmodal", fromlist=["x"]).video_motion_peaks(
        _with(torch.zeros(6, 4, 4), (2, 1, 1), INF)), "video_motion_peaks: video holds NaN or inf"),
    (lambda: __import__("pe_toolkit.domains.crossmodal", fromlist=["x"]).audio_onsets(
        torch.zeros(6, 4), threshold=NAN), "audio_onsets: threshold must be a finite number"),
    (lambda: pet.get_encoder("cmc_pe", 16, 2, in_features=8).embed(
        torch.zeros(1, 4, 16), _with(torch.zeros(1, 8, 8), (0, 3, 3), NAN)), "cmc_pe: positions .* holds NaN or inf"),
], ids=["spectrogram NaN", "video inf", "threshold NaN", "cmc_pe features NaN"])
def test_crossmodal_features_refuse_nan(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------------------------- explainers
@functools.cache
def lm():
    return pet.Transformer(pet.TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1)).eval()


def nan_weight_model():
    model = pet.Transformer(pet.TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1)).eval()
    with torch.no_grad():
        model.blocks[0].attn.q_proj.weight[0, 0] = NAN
    return model


TOKENS = torch.tensor([[1, 4, 5]])


def _explain(*args, **kwargs):
    from pe_toolkit.explain import explain

    return explain(*args, **kwargs)


def _baseline(name, *args, **kwargs):
    from pe_toolkit.explain import baselines

    return getattr(baselines, name)(*args, **kwargs)


def _perturbation(name, *args, **kwargs):
    from pe_toolkit.explain import perturbation

    return getattr(perturbation, name)(*args, **kwargs)


def overflowing_model():
    model = pet.Transformer(pet.TransformerConfig(vocab_size=10, dim=16, num_heads=2, num_layers=1)).eval()
    with torch.no_grad():
        model.final_norm.weight.fill_(3e38)  # finite weights whose hidden state overflows float32
    return model


EXPLAIN_CASES = {
    "explain NaN weight": (lambda: _explain(nan_weight_model(), TOKENS, 2),
                           r"model: parameter 'blocks.0.attn.q_proj.weight' holds NaN or inf"),
    "gradient_x_input NaN weight": (lambda: _baseline("gradient_x_input", nan_weight_model(), TOKENS, 2),
                                    r"model: parameter 'blocks.0.attn.q_proj.weight' holds NaN or inf"),
    "explain epsilon inf": (lambda: _explain(lm(), TOKENS, 2, epsilon=INF), "epsilon must be a finite number >= 0"),
    "explain NaN positions": (lambda: _explain(lm(), TOKENS, 2, positions=torch.tensor([0.0, NAN, 2.0])),
                              "positions contains NaN or inf"),
    "explain overflowing logit": (lambda: _explain(overflowing_model(), TOKENS, 2),
                                  "the explained logit is not finite"),
    "rollout NaN attention": (lambda: _baseline("rollout", [torch.full((1, 2, 3, 3), NAN)], torch.tensor([0])),
                              r"rollout: attention\[0\] holds NaN or inf"),
    "removal_masks NaN scores": (lambda: _perturbation("removal_masks", torch.tensor([[NAN, 1.0, 2.0]]),
                                                       torch.ones(1, 3, dtype=torch.bool), torch.tensor([0.5])),
                                 "scores hold NaN or inf"),
    "removal_masks NaN fractions": (lambda: _perturbation("removal_masks", torch.tensor([[0.0, 1.0, 2.0]]),
                                                          torch.ones(1, 3, dtype=torch.bool), torch.tensor([NAN])),
                                    r"fractions must be a non-empty 1-D tensor in \[0, 1\]"),
    "area_under_curve NaN curve": (lambda: _perturbation("area_under_curve", torch.tensor([NAN, 1.0]),
                                                         torch.tensor([0.0, 1.0])), "curve holds NaN or inf"),
}


@pytest.mark.parametrize("case", list(EXPLAIN_CASES))
def test_explainers_refuse_nan(case):
    """Issue 29: NaN passed silently through LRP (NaN relevances that sum, sort and plot without an error)."""
    call, match = EXPLAIN_CASES[case]
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(("positions", "error", "match"), [
    (torch.tensor([0.0, NAN, 2.0]), ValueError, "positions holds NaN or inf"),
    (torch.tensor([True, False, True]), TypeError, "positions must hold integer or float values"),
    ([0, 1, 2], TypeError, "positions must be a torch.Tensor"),
], ids=["NaN", "bool", "list"])
def test_positional_pattern_checks_explicit_positions(positions, error, match):
    """Found by the hook fuzzer: explicit NaN positions gave a NaN pattern for axial / mixed RoPE, SinCos2D, the
    graph and multirobot encoders; bool positions reached a subtraction inside ``music_relative``."""
    for name in ("rope", "music_relative" if isinstance(positions, torch.Tensor) and positions.dtype == torch.bool
                 else "sinusoidal"):
        encoder = pet.get_encoder(name, 16, 2, **pet.encoder_info(name).example_options)
        with pytest.raises(error, match=match):
            encoder.positional_pattern(3, positions=positions)
