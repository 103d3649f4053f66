"""Property-based (hypothesis) tests of the domains' forward passes and encoder hooks.

The contract (docs/reliability.md), as for the core's forward passes (``test_fuzz_forward.py``): for any
input the outcome is a correct result (finite output for finite input, the right shape) or a
``ValueError`` / ``TypeError`` whose message names the argument that is wrong. Never an ``IndexError``,
an ``AttributeError``, a ``RuntimeError`` from deep inside torch, a NaN output from finite input, or a
hang. Each example injects at most one fault (NaN, inf, a wrong dtype, rank or size, an empty batch,
negative or huge values, a list instead of a tensor) into one argument of one domain's model; an error is
accepted only when it names that argument.

The models are tiny and built once per configuration (a forward pass in ``eval`` mode changes nothing),
so the default budget (790 examples) runs in about 10 s on one core; ``--hypothesis-profile=long``
multiplies it by 20. Each test's body is a plain ``run_<domain>(...)`` function, so a falsifying example
can be replayed (or every fault enumerated) without hypothesis. The regression cases of what these tests
found are in ``test_domain_clear_errors.py``.
"""

from __future__ import annotations

import functools

import pytest
import torch
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st

import pe_toolkit as pet

HUGE = 1e6  # "huge" finite values: far outside any training range, far inside float32


def _tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, dict):
        for value in out.values():
            yield from _tensors(value)
    elif isinstance(out, (list, tuple)):
        for value in out:
            yield from _tensors(value)


def _check(call, argument: str | None, names: tuple[str, ...], *, finite_input: bool = True):
    """``call()``: a result whose float tensors are finite (for finite input), or an error naming ``argument``.

    ``names``: the words an error about ``argument`` may use (the argument's name, or the key of a batch).
    """
    try:
        out = call()
    except (ValueError, TypeError) as error:
        message = str(error)
        assert argument is not None, f"no fault injected, yet: {type(error).__name__}: {message}"
        assert any(word in message for word in names), f"{argument}: {type(error).__name__}: {message}"
        return None
    if finite_input:
        for tensor in _tensors(out):
            if tensor.is_floating_point() and tensor.numel():
                assert not tensor.isnan().any() and (tensor < float("inf")).all(), (
                    f"non-finite output from finite input (fault in {argument})")
    return out


def _float_fault(t: torch.Tensor, fault: str):
    """One fault in a float tensor (``None`` for no fault)."""
    if fault is None:
        return t
    if fault in ("nan", "inf"):
        t = t.clone(memory_format=torch.contiguous_format)
        t.view(-1)[0] = float(fault)
        return t
    return {"int": lambda: t.long(), "huge": lambda: t * HUGE, "negative": lambda: -t.abs() - HUGE,
            "list": lambda: t.tolist(), "wrong_last": lambda: t[..., :-1], "rank": lambda: t[0],
            "empty": lambda: t[:0], "bool": lambda: t > 0, "half": lambda: t.half()}[fault]()


def _index_fault(t: torch.Tensor, fault: str, high: int):
    """One fault in an integer tensor of ids in ``[0, high)``."""
    if fault is None:
        return t
    t = t.clone(memory_format=torch.contiguous_format)
    if fault == "too_big":
        t.view(-1)[-1] = high + 7
        return t
    if fault == "negative":
        t.view(-1)[0] = -3
        return t
    return {"float": lambda: t.float(), "rank": lambda: t[0], "list": lambda: t.tolist(), "empty": lambda: t[:0],
            "bool": lambda: t > 0, "huge": lambda: t + 10**12}[fault]()


NON_FINITE = ("nan", "inf")


# --------------------------------------------------------------------------------------------- music
MUSIC_ENCODINGS = ["s_ape", "s_rpe", "ns_rpe", "music_relative", "rope"]


@functools.cache
def _music_model(encoding: str, task: str):
    from pe_toolkit.domains.music.models import MusicModelConfig, PianoRollTransformer

    options = dict(pet.encoder_info(encoding).example_options)
    return PianoRollTransformer(MusicModelConfig(task=task, encoding=encoding, encoding_options=options, voices=2,
                                                 dim=16, num_heads=2, num_layers=1, dropout=0.0)).eval()


@functools.cache
def _structure(length: int) -> torch.Tensor:
    return pet.get_encoder("s_ape", 16, 2).example_positions(length)  # (L, F) long: a piece's structure labels


MUSIC_FAULTS = {"x": ["nan", "inf", "int", "list", "wrong_last", "rank", "empty", "huge"],
                "structure": ["negative", "huge", "float", "nan", "wrong_length", "wrong_fields", "rank", "list",
                              "bool"]}


@fuzz(80)
@given(encoding=st.sampled_from(MUSIC_ENCODINGS), task=st.sampled_from(["next_step", "accompaniment"]),
       batch=st.integers(1, 2), length=st.integers(1, 8), argument=st.sampled_from([None, "x", "structure"]),
       data=st.data())
def test_music_model_fuzz(encoding, task, batch, length, argument, data):
    fault = data.draw(st.sampled_from(MUSIC_FAULTS[argument])) if argument else None
    column = data.draw(st.integers(0, 13))
    run_music(encoding, task, batch, length, argument, fault, column)


def run_music(encoding, task, batch, length, argument, fault, column=0):
    model = _music_model(encoding, task)
    x = torch.randint(0, 2, (batch, length, model.in_features)).float()
    structure = _structure(length).expand(batch, -1, -1).clone()
    if argument == "x":
        x = _float_fault(x, fault)
    elif argument == "structure":
        if fault == "negative":
            structure[..., column] = -1 - structure[..., column]
        elif fault == "huge":
            structure[..., column] += 10**9
        elif fault == "float":
            structure = structure.float() + 0.5
        elif fault == "nan":
            structure = structure.float()
            structure[0, 0, column] = float("nan")
        elif fault == "wrong_length":
            structure = torch.cat([structure, structure[:, :1]], 1)
        elif fault == "wrong_fields":
            structure = structure[..., :-1]
        else:
            structure = {"rank": structure[0], "list": structure.tolist(), "bool": structure > 0}[fault]
    finite = not (argument == "x" and fault in NON_FINITE)
    names = {"x": ("x ", "x must", "x holds"), "structure": ("structure",)}
    out = _check(lambda: model(x, structure), argument, names.get(argument, ()), finite_input=finite)
    if out is not None:
        assert finite, f"{fault} x accepted"
        assert out.shape == (x.shape[0], length, model.out_features)


# --------------------------------------------------------------------------------------------- recsys
RECSYS_ENCODINGS = ["learned", "cape", "time_interval", "rope", "nope"]
ITEMS = 20
MAX_LEN = 8


@functools.cache
def _sasrec(encoding: str):
    from pe_toolkit.domains.recsys.model import SASRec

    return SASRec(ITEMS, max_len=MAX_LEN, dim=16, num_heads=2, num_layers=1, dropout=0.0, encoding=encoding).eval()


RECSYS_FAULTS = {"items": ["too_big", "negative", "float", "rank", "list", "empty", "too_long", "bool", "huge",
                           "all_padding"],
                 "times": ["nan", "inf", "wrong_shape", "list", "negative", "huge", "decreasing", "missing", "bool"]}


@fuzz(80)
@given(encoding=st.sampled_from(RECSYS_ENCODINGS), batch=st.integers(1, 3), length=st.integers(1, MAX_LEN),
       padding=st.integers(0, MAX_LEN), argument=st.sampled_from([None, "items", "times"]), data=st.data())
def test_recsys_model_fuzz(encoding, batch, length, padding, argument, data):
    fault = data.draw(st.sampled_from(RECSYS_FAULTS[argument])) if argument else None
    run_recsys(encoding, batch, length, padding, argument, fault)


def run_recsys(encoding, batch, length, padding, argument, fault):
    model = _sasrec(encoding)
    items = torch.randint(1, ITEMS + 1, (batch, length))
    items[0, : min(padding, length - 1)] = 0  # left padding, one real item at least
    times = torch.cumsum(torch.randint(0, 10**6, (batch, length)), 1).double() + 1.6e9
    if argument == "items":
        if fault == "too_long":
            items = torch.randint(1, ITEMS + 1, (batch, MAX_LEN + 1))
            times = torch.arange(MAX_LEN + 1.0).expand(batch, -1)
        elif fault == "empty":
            items, times = items[:0], times[:0]
        elif fault == "all_padding":
            items[-1] = 0
        else:
            items = _index_fault(items, fault, ITEMS + 1)
    elif argument == "times":
        if fault == "wrong_shape":
            times = times[:, :-1]
        elif fault == "decreasing":
            times = times.flip(-1) if length > 1 else times
        elif fault == "missing":
            times = None
        else:
            times = _float_fault(times, fault)
    uses_time = model.uses_time
    finite = not (argument == "times" and fault in NON_FINITE and uses_time)
    names = {"items": ("items", "item"), "times": ("times",)}
    out = _check(lambda: model(items, times), argument, names.get(argument, ()), finite_input=finite)
    if out is not None:
        assert finite, f"{fault} times accepted by {encoding}"
        assert out.shape == (items.shape[0], items.shape[1], 16)


# --------------------------------------------------------------------------------------------- translation
TRANSLATION_ENCODINGS = ["xl_pe", "sinusoidal", "rope"]
SOURCE_VOCAB, TARGET_VOCAB = 10, 12


@functools.cache
def _translation_model(encoding: str):
    from pe_toolkit.domains.translation.model import TranslationModel

    options = dict(pet.encoder_info(encoding).example_options) if encoding == "xl_pe" else {}
    return TranslationModel(SOURCE_VOCAB, TARGET_VOCAB, dim=16, num_heads=2, encoder_layers=1, decoder_layers=1,
                            encoding=encoding, encoding_options=options).eval()


TRANSLATION_FAULTS = {
    "source": ["too_big", "negative", "float", "rank", "list", "empty", "bool"],
    "source_mask": ["int", "wrong_shape", "empty_row", "list"],
    "target_in": ["too_big", "negative", "float", "rank", "list", "batch"],
    "xl_positions": ["too_big", "negative", "float", "repeat", "wrong_shape", "missing", "list"],
}


@fuzz(80)
@given(encoding=st.sampled_from(TRANSLATION_ENCODINGS), batch=st.integers(1, 3), length=st.integers(1, 6),
       target=st.integers(1, 6), argument=st.sampled_from([None, *TRANSLATION_FAULTS]), data=st.data())
def test_translation_model_fuzz(encoding, batch, length, target, argument, data):
    fault = data.draw(st.sampled_from(TRANSLATION_FAULTS[argument])) if argument else None
    run_translation(encoding, batch, length, target, argument, fault, data.draw(st.integers(1, length)))


def run_translation(encoding, batch, length, target, argument, fault, real=1):
    model = _translation_model(encoding)
    source = torch.randint(3, SOURCE_VOCAB, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[0, real:] = False  # right padding in the first row
    xl = torch.stack([torch.randperm(length) for _ in range(batch)])
    xl[0] = torch.where(mask[0], torch.argsort(torch.rand(length).masked_fill(~mask[0], 2.0)), xl[0])
    target_in = torch.randint(0, TARGET_VOCAB, (batch, target))
    if argument == "source":
        source = _index_fault(source, fault, SOURCE_VOCAB)
    elif argument == "source_mask":
        mask = {"int": mask.long(), "wrong_shape": mask[:, :-1], "list": mask.tolist(),
                "empty_row": torch.zeros_like(mask)}[fault]
    elif argument == "target_in":
        target_in = target_in[:0] if fault == "batch" else _index_fault(target_in, fault, TARGET_VOCAB)
    elif argument == "xl_positions":
        if fault == "too_big":
            xl[0, 0] = 999
        elif fault == "negative":
            xl[0, 0] = -1
        elif fault == "repeat":
            xl[0, :] = 0
            if int(mask[0].sum()) == 1:  # one token: a repeat needs two
                xl = xl.float() + 0.5
        else:
            xl = {"float": xl.float() + 0.5, "wrong_shape": xl[:, :-1], "missing": None, "list": xl.tolist()}[fault]
    names = {"source": ("source",), "source_mask": ("source_mask", "padding_mask"),
             "target_in": ("target_in",), "xl_positions": ("xl_positions",)}
    accepted_when_unused = argument == "xl_positions" and not model.uses_xl
    out = _check(lambda: model(source, mask, target_in, xl if (model.uses_xl or argument == "xl_positions") else None),
                 argument, names.get(argument, ()))
    if out is not None:
        assert argument is None or accepted_when_unused, f"{argument}: {fault} accepted"
        assert out.shape == (batch, target, TARGET_VOCAB)


# --------------------------------------------------------------------------------------------- vision
VISION_ENCODINGS = [*pet.list_encoders(domain="vision"), "nope"]


@functools.cache
def _vit(encoding: str):
    from pe_toolkit.domains.vision.model import ViT, ViTConfig

    return ViT(ViTConfig(num_classes=3, image_size=8, patch_size=4, dim=16, num_heads=2, num_layers=1,
                         encoding=encoding)).eval()


IMAGE_FAULTS = ["nan", "inf", "int", "list", "rank", "empty", "huge", "channels", "not_multiple", "bool", "half"]


@fuzz(60)
@given(encoding=st.sampled_from(VISION_ENCODINGS), batch=st.integers(1, 2), height=st.integers(1, 4),
       width=st.integers(1, 4), fault=st.one_of(st.none(), st.sampled_from(IMAGE_FAULTS)))
def test_vision_model_fuzz(encoding, batch, height, width, fault):
    run_vision(encoding, batch, height, width, fault)


def run_vision(encoding, batch, height, width, fault):
    model = _vit(encoding)
    images = torch.rand(batch, 3, 4 * height, 4 * width)
    if fault == "channels":
        images = images[:, :2]
    elif fault == "not_multiple":
        images = images[..., :-1]
    else:
        images = _float_fault(images, fault)
    out = _check(lambda: model(images), "images" if fault else None, ("images",),
                 finite_input=fault not in NON_FINITE)
    if out is not None:
        assert fault not in (*NON_FINITE, "channels", "not_multiple", "list", "rank"), f"{fault} images accepted"
        assert out.shape == (images.shape[0], 3)


# --------------------------------------------------------------------------------------------- detection
@functools.cache
def _detector(box_pe: bool, centerness_pe: bool, recursive: bool):
    from pe_toolkit.domains.detection.model import DetectorConfig, RecursiveDetector

    config = DetectorConfig(num_classes=3, dim=16, num_heads=2, ffn_dim=16, dynamic_dim=4, pooler_resolution=2,
                            num_proposals=4, num_stages=2, recursive=recursive, box_pe=box_pe,
                            centerness_pe=centerness_pe, backbone_channels=(4, 8))
    return RecursiveDetector(config).eval()


@fuzz(50)
@given(box_pe=st.booleans(), centerness_pe=st.booleans(), recursive=st.booleans(), batch=st.integers(1, 2),
       height=st.integers(1, 24), width=st.integers(1, 24),
       fault=st.one_of(st.none(), st.sampled_from(["nan", "inf", "int", "list", "rank", "empty", "huge", "channels",
                                                   "bool", "half", "constant"])))
def test_detection_model_fuzz(box_pe, centerness_pe, recursive, batch, height, width, fault):
    run_detection(box_pe, centerness_pe, recursive, batch, height, width, fault)


def run_detection(box_pe, centerness_pe, recursive, batch, height, width, fault):
    model = _detector(box_pe, centerness_pe, recursive)
    images = torch.rand(batch, 3, height, width)
    if fault == "channels":
        images = images[:, :2]
    elif fault == "constant":
        images = torch.zeros_like(images)  # no contrast at all: a valid image
    else:
        images = _float_fault(images, fault)
    argument = "images" if fault not in (None, "constant") else None
    out = _check(lambda: model(images), argument, ("images",), finite_input=fault not in NON_FINITE)
    if out is not None:
        assert fault not in (*NON_FINITE, "channels", "list", "rank"), f"{fault} images accepted"
        assert len(out) == 2
        for logits, boxes in out:
            assert logits.shape == (images.shape[0], 4, 3) and boxes.shape == (images.shape[0], 4, 4)


# --------------------------------------------------------------------------------------------- multirobot
@functools.cache
def _nope(object_pe: str):
    from pe_toolkit.domains.multirobot.model import NOPE, NOPEConfig
    from pe_toolkit.domains.multirobot.simulator import SimConfig

    return NOPE(NOPEConfig(descriptor_dim=SimConfig().descriptor_dim, dim=16, num_heads=2, graph_layers=1,
                           cross_layers=1, sinkhorn_iterations=5, object_pe=object_pe)).eval()


@functools.cache
def _robot_batch(seed: int):
    from pe_toolkit.domains.multirobot.data import collate_pairs
    from pe_toolkit.domains.multirobot.simulator import SimConfig, simulate_pairs

    config = SimConfig()
    return collate_pairs(simulate_pairs(2, seed=seed, config=config), config.fov_range)


ROBOT_KEYS = ["desc_a", "xy_a", "edges_a", "mask_a", "desc_b", "xy_b", "edges_b", "mask_b"]
ROBOT_FAULTS = {"float": ["nan", "inf", "int", "list", "wrong_last", "rank", "huge", "missing", "batch"],
                "mask": ["int", "wrong_shape", "list", "missing", "batch", "empty_row"]}


@fuzz(80)
@given(object_pe=st.sampled_from(["fourier", "rope2d", "none"]), seed=st.integers(0, 2),
       key=st.one_of(st.none(), st.sampled_from(ROBOT_KEYS)), data=st.data())
def test_multirobot_model_fuzz(object_pe, seed, key, data):
    fault = None if key is None else data.draw(st.sampled_from(ROBOT_FAULTS["mask" if key.startswith("mask")
                                                                             else "float"]))
    run_multirobot(object_pe, seed, key, fault)


def run_multirobot(object_pe, seed, key, fault):
    model = _nope(object_pe)
    batch = dict(_robot_batch(seed))
    if key is not None:
        value = batch[key]
        if fault == "missing":
            del batch[key]
        elif fault == "batch":
            batch[key] = value[:1]
        elif key.startswith("mask"):
            batch[key] = {"int": value.long(), "wrong_shape": value[:, :-1], "list": value.tolist(),
                          "empty_row": torch.zeros_like(value)}[fault]
        else:
            batch[key] = _float_fault(value, fault)
    empty_row = fault == "empty_row"  # a robot that sees nothing: a valid observation
    argument = None if key is None or empty_row else key
    out = _check(lambda: model(batch), argument, (key,) if key else (), finite_input=fault not in NON_FINITE)
    if out is not None:
        assert argument is None or fault == "huge", f"{key}: {fault} accepted"
        b = batch["mask_a"].shape[0]
        assert out["pose"].shape == (b, 4) and out["log_assignment"].shape[0] == b


# --------------------------------------------------------------------------------------------- crossmodal
VIDEO_SHAPE, AUDIO_SHAPE = (4, 4, 4), (8, 4)


@functools.cache
def _denoiser(connector: str):
    from pe_toolkit.domains.crossmodal.models import JointDenoiser

    return JointDenoiser(VIDEO_SHAPE, AUDIO_SHAPE, dim=16, num_heads=2, num_layers=1, connector=connector).eval()


CROSSMODAL_ARGUMENTS = ["video_t", "audio_t", "t_video", "t_audio", "video_cond", "audio_cond"]
CROSSMODAL_FAULTS = {"signal": ["nan", "inf", "int", "list", "wrong_last", "rank", "huge", "empty"],
                     "t": ["nan", "inf", "float", "negative", "list", "rank", "huge", "bool"]}


@fuzz(80)
@given(connector=st.sampled_from(["none", "cmc_pe", "cross_attention"]), batch=st.integers(1, 3),
       argument=st.one_of(st.none(), st.sampled_from(CROSSMODAL_ARGUMENTS)), data=st.data())
def test_crossmodal_model_fuzz(connector, batch, argument, data):
    fault = None
    if argument is not None:
        fault = data.draw(st.sampled_from(CROSSMODAL_FAULTS["t" if argument.startswith("t_") else "signal"]))
    run_crossmodal(connector, batch, argument, fault)


def run_crossmodal(connector, batch, argument, fault):
    model = _denoiser(connector)
    inputs = {"video_t": torch.randn(batch, *VIDEO_SHAPE), "audio_t": torch.randn(batch, *AUDIO_SHAPE),
              "t_video": torch.randint(0, 1000, (batch,)), "t_audio": torch.randint(0, 1000, (batch,)),
              "video_cond": None, "audio_cond": None}
    if argument is not None:
        kind = "t" if argument.startswith("t_") else "signal"
        base = inputs[argument]
        if base is None:  # a conditioning signal: the other modality's sample
            base = inputs["video_t" if argument == "video_cond" else "audio_t"].clone()
        if kind == "t" and fault in ("negative", "float", "huge"):  # any finite timestep is a valid input
            inputs[argument] = {"negative": -base - 1, "float": base.float() + 0.5, "huge": base + 10**12}[fault]
        elif kind == "t":
            inputs[argument] = _float_fault(base.float(), fault) if fault in NON_FINITE else \
                _index_fault(base, fault, 1000)
        else:
            inputs[argument] = _float_fault(base, fault)
    names = {name: (name,) for name in CROSSMODAL_ARGUMENTS}
    out = _check(lambda: model(**inputs), argument, names.get(argument, ()), finite_input=fault not in NON_FINITE)
    if out is not None:
        assert fault in (None, "huge", "negative", "float"), f"{argument}: {fault} accepted"
        assert out[0].shape[1:] == VIDEO_SHAPE and out[1].shape[1:] == AUDIO_SHAPE


# --------------------------------------------------------------------------------------------- graphs
GRAPH_PES = [None, "rwse", "lap_pe", "rfp", "random_features"]


@functools.cache
def _gin(pe: str | None):
    from pe_toolkit.domains.graphs.models import GINModel

    options = {"rwse": {"in_features": 4}, "lap_pe": {"in_features": 3}, "rfp": {"in_features": 4, "num_inits": 2},
               "random_features": {"num_features": 4}}.get(pe)
    return GINModel(num_classes=3, hidden=8, layers=1, in_features=2, pe=pe, pe_options=options).eval()


@functools.cache
def _transforms():
    from pe_toolkit.domains.graphs.transforms import LaplacianEigenvectorPE, RandomFeaturePropagation, RandomWalkPE

    return {"rwse": RandomWalkPE(4), "lap_pe": LaplacianEigenvectorPE(3),
            "rfp": RandomFeaturePropagation(1, steps=1, num_inits=2, seed=0)}


def _graph(num_nodes: int, edges: list[tuple[int, int]], pe: str | None):
    from torch_geometric.data import Data

    edge_index = torch.tensor(edges, dtype=torch.long).reshape(-1, 2).T
    data = Data(x=torch.randn(num_nodes, 2), edge_index=edge_index, num_nodes=num_nodes)
    if pe in _transforms():
        data = _transforms()[pe](data)
    return data


GRAPH_FAULTS = {"x": ["nan", "inf", "int", "wrong_last", "rank", "huge", "list", "missing"],
                "edge_index": ["too_big", "negative", "float", "rank", "three_rows", "list"],
                "pe": ["nan", "inf", "wrong_last", "wrong_rows", "missing", "int", "list"]}
PE_ATTRIBUTES = {"rwse": "rw_pe", "lap_pe": "lap_pe", "rfp": "rfp"}  # the transforms' default attributes


@fuzz(80)
@given(pe=st.sampled_from(GRAPH_PES), num_nodes=st.integers(1, 7),
       pairs=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=10),
       argument=st.one_of(st.none(), st.sampled_from(list(GRAPH_FAULTS))), data=st.data())
def test_graph_model_fuzz(pe, num_nodes, pairs, argument, data):
    if argument == "pe" and pe not in PE_ATTRIBUTES:
        argument = None
    fault = data.draw(st.sampled_from(GRAPH_FAULTS[argument])) if argument else None
    run_graph(pe, num_nodes, pairs, argument, fault)


def run_graph(pe, num_nodes, pairs, argument, fault):
    edges = [(a % num_nodes, b % num_nodes) for a, b in pairs]
    edges += [(b, a) for a, b in edges]
    model = _gin(pe)
    graph = _graph(num_nodes, edges, pe)
    attribute = PE_ATTRIBUTES.get(pe)
    if argument == "x":
        if fault == "missing":
            del graph.x
        else:
            graph.x = _float_fault(graph.x, fault)
    elif argument == "edge_index":
        e = graph.edge_index
        if e.shape[1] == 0 and fault in ("too_big", "negative"):
            e = torch.tensor([[0], [0]])
        graph.edge_index = {"three_rows": lambda: torch.cat([e, e[:1]]), "rank": lambda: e[0],
                            }.get(fault, lambda: _index_fault(e, fault, num_nodes))()
    elif argument == "pe":
        value = graph[attribute]
        if fault == "missing":
            del graph[attribute]
        elif fault == "wrong_rows":
            graph[attribute] = torch.cat([value, value[:1]])
        else:
            graph[attribute] = _float_fault(value, fault)
    names = {"x": ("x ", "x must", "x holds", "x;", "no x", "float x", "integer x"),
             "edge_index": ("edge_index",), "pe": (attribute or "-", "positions")}
    finite = fault not in NON_FINITE
    out = _check(lambda: model(graph), argument, names.get(argument, ()), finite_input=finite)
    if out is not None:
        assert argument is None or fault == "huge", f"{argument}: {fault} accepted"
        assert out.shape == (1, 3)


@fuzz(80)
@given(transform=st.sampled_from(["rwse", "lap_pe", "rfp"]), num_nodes=st.integers(0, 7),
       pairs=st.lists(st.tuples(st.integers(-2, 8), st.integers(-2, 8)), max_size=10),
       symmetric=st.booleans())
def test_graph_transform_fuzz(transform, num_nodes, pairs, symmetric):
    """The PE transforms on any small graph: isolated nodes, self-loops, repeated or directed edges, no nodes,
    edge ids outside ``[0, num_nodes)`` or a directed graph for LapPE / RFP (an error naming ``edge_index``)."""
    from torch_geometric.data import Data

    if symmetric:
        pairs = pairs + [(b, a) for a, b in pairs]
    edge_index = torch.tensor(pairs, dtype=torch.long).reshape(-1, 2).T
    ids_valid = all(0 <= v < num_nodes for pair in pairs for v in pair)
    if transform != "rwse" and {(a, b) for a, b in pairs} != {(b, a) for a, b in pairs}:
        ids_valid = False  # LapPE and RFP's symmetric operator need an undirected graph (an error naming edge_index)
    valid = ids_valid and num_nodes > 0
    data = Data(edge_index=edge_index, num_nodes=num_nodes)
    names = (() if ids_valid else ("edge_index",)) + (() if num_nodes else ("0 nodes",))
    out = _check(lambda: _transforms()[transform](data.clone()), None if valid else "the graph", names)
    if out is not None:
        assert valid, "edge ids outside the graph, or a graph without nodes, accepted"
        value = out[PE_ATTRIBUTES[transform]]
        assert value.shape[0] == num_nodes and torch.isfinite(value).all()


# --------------------------------------------------------------------------------------------- encoder hooks
DOMAIN_ENCODERS = [name for domain in ("graphs", "music", "recsys", "detection", "multirobot", "crossmodal",
                                       "translation", "vision") for name in pet.list_encoders(domain=domain)]
# value faults: a hook receives positions whose shape the attention already checked (check_positions against
# the queries and keys; the models' shape faults are fuzzed above), but their values are the encoder's own
POSITION_FAULTS = ["nan", "inf", "negative", "huge", "float", "list", "bool"]


@functools.cache
def _domain_encoder(name: str):
    return pet.get_encoder(name, 16, 2, **pet.encoder_info(name).example_options).eval()


@fuzz(120)
@given(name=st.sampled_from(DOMAIN_ENCODERS), length=st.integers(1, 6),
       fault=st.one_of(st.none(), st.sampled_from(POSITION_FAULTS)))
def test_domain_encoder_hooks_fuzz(name, length, fault):
    run_encoder_hooks(name, length, fault)


def run_encoder_hooks(name, length, fault):
    """Every domain encoder's hooks (``embed``, ``rotate``, ``bias`` through ``positional_pattern``) on its own
    example positions with one fault: NaN / inf (float positions), negative or huge values, the wrong dtype,
    length, width or rank, a list. A pattern is finite except where the encoder masks a pair (``-inf``)."""
    encoder = _domain_encoder(name)
    positions = encoder.example_positions(length)
    if fault in NON_FINITE and not positions.is_floating_point():
        fault = "float"
    if fault == "float":
        positions = positions.float() + 0.5 if not positions.is_floating_point() else positions.double()
    elif fault == "negative":
        positions = -positions - 1
    elif fault == "huge":
        positions = positions + (10**9 if not positions.is_floating_point() else HUGE)
    else:
        positions = _float_fault(positions, fault)
    try:
        pattern = encoder.positional_pattern(length, positions=positions)
    except (ValueError, TypeError) as error:
        assert fault is not None, f"{name}: example positions refused: {error}"
        # positions under their name, or under what they are for this encoder (detection: boxes; edge_aware_graph:
        # the coordinates and the edge-length matrix)
        words = ("positions", "q_pos", "boxes", "edge-length matrix")
        assert any(word in str(error) for word in words), f"{name}: {fault}: {error}"
        return
    assert not pattern.isnan().any() and (pattern < float("inf")).all(), f"{name}: {fault} positions gave NaN / inf"
    assert fault not in NON_FINITE, f"{name}: {fault} positions accepted"


def test_the_contract_rejects_an_unnamed_error_and_nan_output():
    with pytest.raises(AssertionError, match="structure"):
        _check(lambda: (_ for _ in ()).throw(ValueError("index out of range")), "structure", ("structure",))
    with pytest.raises(AssertionError, match="non-finite output"):
        _check(lambda: {"pose": torch.tensor([float("nan")])}, None, ())
