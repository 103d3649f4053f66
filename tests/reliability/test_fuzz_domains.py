"""Property-based (hypothesis) tests of the domain loaders and parsers.

The contract (docs/reliability.md): for any input, the outcome is a correct result or a clear
``ValueError`` / ``TypeError`` (``FileNotFoundError`` for a missing path or image) — never another
exception, a hang, or a silent wrong answer.
"""

from __future__ import annotations

import io
import json
import math
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from fuzz_budget import fuzz
from hypothesis import given
from hypothesis import strategies as st

FUZZ = fuzz(100)
FUZZ_MORE = fuzz(150)  # cheap loaders


# ----------------------------------------------------------------------------------------------- MIDI bytes
def _valid_midi_bytes() -> bytes:
    import pretty_midi

    pm = pretty_midi.PrettyMIDI(initial_tempo=100)
    for program, base in ((0, 60), (32, 43)):
        inst = pretty_midi.Instrument(program=program)
        for k in range(6):
            inst.notes.append(pretty_midi.Note(velocity=80, pitch=base + k, start=0.3 * k, end=0.3 * k + 0.3))
        pm.instruments.append(inst)
    buffer = io.BytesIO()
    pm.write(buffer)
    return buffer.getvalue()


VALID_MIDI = _valid_midi_bytes()


def _mutate(data: bytes, flips: list[tuple[int, int]], cut: int | None) -> bytes:
    out = bytearray(data)
    for index, value in flips:
        out[index % len(out)] = value
    return bytes(out[:cut] if cut is not None else out)


MIDI_BYTES = st.one_of(
    st.binary(max_size=200),
    st.builds(_mutate, st.just(VALID_MIDI), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                                      max_size=4),
              st.one_of(st.none(), st.integers(0, len(VALID_MIDI)))),
)


def _check_piece(piece) -> None:
    from pe_toolkit.domains.music.data import Piece

    assert isinstance(piece, Piece)
    roll = piece.roll
    assert roll.dtype == torch.bool and roll.dim() == 3 and roll.shape[-1] == 128 and roll.shape[0] >= 1
    assert roll.any(), "an accepted file has at least one note"


def _read_midi_or_clear_error(content: bytes):
    """``midi_to_piece`` on ``content``: a checked ``Piece``, or ``None`` after a clear ValueError/TypeError."""
    from pe_toolkit.domains.music.midi import midi_to_piece

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "user.mid"
        path.write_bytes(content)
        try:
            piece = midi_to_piece(path)
        except (ValueError, TypeError) as error:
            assert str(error).startswith("midi_to_piece:") and "user" in str(error), error  # names the file
            piece = None
    # the same bytes in memory: the same piece, or the same kind of clear error
    try:
        in_memory = midi_to_piece(content, name="user")
    except (ValueError, TypeError) as error:
        assert str(error).startswith("midi_to_piece:"), error
        assert piece is None, f"the file was read but its bytes were refused: {error}"
        return None
    assert piece is not None, "the bytes were read but the file was refused"
    _check_piece(piece)
    assert torch.equal(in_memory.roll, piece.roll) and torch.equal(in_memory.onsets, piece.onsets)
    return piece


@FUZZ
@given(content=MIDI_BYTES)
def test_midi_bytes_fuzz(content):
    _read_midi_or_clear_error(content)


def _mido_bytes(ticks_per_beat: int, events: list[tuple[str, int, int, int]], meter: tuple[int, int] | None) -> bytes:
    import mido

    mid = mido.MidiFile(ticks_per_beat=ticks_per_beat)
    track = mido.MidiTrack()
    mid.tracks.append(track)
    if meter is not None:
        track.append(mido.MetaMessage("time_signature", numerator=meter[0], denominator=meter[1], time=0))
    for kind, note, velocity, delta in events:
        track.append(mido.Message(kind, note=note, velocity=velocity, time=delta))
    buffer = io.BytesIO()
    mid.save(file=buffer)
    return buffer.getvalue()


# structurally valid files with extreme content: any resolution, huge delta times (up to the 2^28 - 1 a
# variable-length quantity holds), unmatched note-ons / note-offs, zero-velocity note-ons, odd meters
STRUCTURED_MIDI = st.builds(
    _mido_bytes, st.integers(1, 960),
    st.lists(st.tuples(st.sampled_from(["note_on", "note_off"]), st.integers(0, 127), st.integers(0, 127),
                       st.one_of(st.integers(0, 2_000), st.integers(0, 2**28 - 1))), max_size=8),
    st.one_of(st.none(), st.tuples(st.integers(1, 12), st.sampled_from([1, 2, 4, 8, 16, 32]))),
)


@FUZZ
@given(content=STRUCTURED_MIDI)
def test_structured_midi_fuzz(content):
    piece = _read_midi_or_clear_error(content)
    assert piece is None or piece.roll.shape[0] <= 100_000


def test_midi_huge_note_is_refused_not_allocated():
    """A 40-byte file whose one note lasts 9,000,000 16ths: a clear ValueError (it used to allocate ~1 GiB per
    voice for the roll and die with a RuntimeError from the allocator)."""
    from pe_toolkit.domains.music.midi import midi_to_piece

    content = _mido_bytes(4, [("note_on", 60, 80, 0), ("note_off", 60, 0, 9_000_000)], None)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "huge.mid"
        path.write_bytes(content)
        with pytest.raises(ValueError, match="max_steps=100000"):
            midi_to_piece(path)
        # the limit is an argument: a short file is unaffected, a smaller limit refuses it
        path.write_bytes(_mido_bytes(4, [("note_on", 60, 80, 0), ("note_off", 60, 0, 8)], None))
        assert midi_to_piece(path).roll.shape[0] == 8
        with pytest.raises(ValueError, match="max_steps=4"):
            midi_to_piece(path, max_steps=4)


def test_valid_midi_round_trip():
    """The unmutated file is read exactly: two voices, six steps of notes each on the 16th grid."""
    from pe_toolkit.domains.music.midi import midi_to_piece

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "ok.mid"
        path.write_bytes(VALID_MIDI)
        piece = midi_to_piece(path)
    assert piece.roll.shape[1] == 2
    assert sorted(set(piece.roll[:, 0].nonzero()[:, 1].tolist())) == list(range(60, 66))
    assert sorted(set(piece.roll[:, 1].nonzero()[:, 1].tolist())) == list(range(43, 49))


# ------------------------------------------------------------------------------------------ interaction files
FIELD = st.one_of(
    st.integers(-5, 40).map(str),
    st.sampled_from(["", " ", "x", "1.5", "nan", "inf", "-inf", "1e3", "abc", "07", "+3", "1_0"]),
    st.text(alphabet="0123456789-.:e \tab", max_size=5),
)
ROW = st.one_of(
    st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(1, 5), st.integers(0, 5)).map(list),
    st.lists(FIELD, max_size=6),
)


def _expected(rows: list[list[str]], columns: list[int], width: int, integer_ids: bool, sep: str):
    """Reference parse: None when the file must be rejected, else the (user, item, time) rows."""
    import re

    out = []
    for fields in rows:
        if not sep.join(fields).strip():
            continue  # a blank line
        if len(fields) != width:
            return None
        user, item, stamp = (fields[c].strip() for c in columns)
        for value in (user, item):
            if not value or (integer_ids and not re.fullmatch(r"[+-]?\d+", value)):
                return None
        try:
            t = float(stamp)
        except ValueError:
            return None
        if not math.isfinite(t):
            return None
        out.append((user, item, t))
    return out or None


@FUZZ_MORE
@given(rows=st.lists(ROW, max_size=10), kind=st.sampled_from(["recbole", "movielens_tab", "movielens_dat"]),
       header=st.sampled_from(["user_id:token\titem_id:token\trating:float\ttimestamp:float",
                               "item_id:token\ttimestamp:float\tuser_id:token", "user_id:token\titem_id:token", ""]))
def test_interaction_file_fuzz(rows, kind, header):
    from pe_toolkit.domains.recsys.data import build_sequences, load_interactions

    rows = [[str(f) for f in r] for r in rows]
    if any(any(c in f for c in "\r\n") for r in rows for f in r):
        return
    if kind == "recbole":
        names = [h.split(":")[0] for h in header.split("\t")] if header else []
        sep, suffix = "\t", ".inter"
        ok_header = all(c in names for c in ("user_id", "item_id", "timestamp"))
        columns = [names.index(c) for c in ("user_id", "item_id", "timestamp")] if ok_header else []
        width, integer_ids = len(names), False
        lines = [header] + [sep.join(r) for r in rows]
    else:
        sep, suffix = ("\t", ".data") if kind == "movielens_tab" else ("::", ".dat")
        ok_header, columns, width, integer_ids = True, [0, 1, 3], 4, True
        lines = [sep.join(r) for r in rows]
    # a field that contains the separator changes the split: parse the written lines back as the reference
    first = 1 if kind == "recbole" else 0
    parsed_rows = [line.split(sep) for line in lines[first:]]
    expected = _expected(parsed_rows, columns, width, integer_ids, sep) if ok_header else None
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / f"user{suffix}"
        path.write_text("\n".join(lines), encoding="utf-8")
        try:
            log = load_interactions(path)
        except (ValueError, TypeError) as error:
            assert str(error).startswith("load_interactions:") and path.name in str(error), error
            assert expected is None, f"valid file rejected: {error}"
            return
    assert expected is not None, f"invalid file accepted: {lines!r}"
    assert len(log) == len(expected)
    got = [(log.user_ids[u], log.item_ids[i - 1], t) for u, i, t in zip(log.users, log.items, log.timestamps)]
    assert got == expected
    # chronological per user, ties in file order
    sequences = build_sequences(log)
    for u, user in enumerate(log.user_ids):
        want = sorted([(t, n, item) for n, (usr, item, t) in enumerate(expected) if usr == user])
        items, times = sequences.user(u)
        assert [log.item_ids[i - 1] for i in items] == [item for _, _, item in want]
        assert times.tolist() == [t for t, _, _ in want]


# ------------------------------------------------------------------------------------------------- COCO JSON
JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 5), st.floats(allow_nan=True, allow_infinity=True),
                        st.text(max_size=3), st.just(10**30))
BOX_VALUE = st.one_of(st.integers(-5, 20), st.floats(-5, 20), st.just(float("nan")), st.just(float("inf")),
                      JSON_SCALAR)


def _maybe(value_strategy, key):
    return st.one_of(st.just({}), value_strategy.map(lambda v: {key: v}))


ANNOTATION = st.one_of(
    JSON_SCALAR,
    st.fixed_dictionaries({}, optional={
        "id": st.integers(0, 9),
        "image_id": st.one_of(st.integers(-1, 4), JSON_SCALAR, st.lists(st.integers(), max_size=1)),
        "category_id": st.one_of(st.integers(0, 3), JSON_SCALAR, st.lists(st.integers(), max_size=1)),
        "bbox": st.one_of(st.lists(BOX_VALUE, min_size=3, max_size=5), st.lists(st.integers(0, 10), min_size=4,
                                                                                   max_size=4), JSON_SCALAR),
        "iscrowd": st.sampled_from([0, 1, 0]),
    }),
)
IMAGE = st.one_of(JSON_SCALAR, st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.integers(0, 3), JSON_SCALAR), "file_name": st.sampled_from(["a.png", "b.png", "missing.png", 3]),
}))
CATEGORY = st.one_of(JSON_SCALAR, st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.integers(0, 3), JSON_SCALAR), "name": st.one_of(st.text(max_size=3), JSON_SCALAR),
}))
# near-valid files: real images and categories, annotations that are mostly well-formed (duplicate ids,
# unknown image / category ids, negative / NaN / infinite boxes, string ids)
NEAR_BOX = st.one_of(st.lists(st.integers(0, 3), min_size=4, max_size=4),
                     st.lists(st.one_of(st.floats(-2, 5), st.just(float("nan")), st.just(float("inf"))),
                              min_size=4, max_size=4))
NEAR_ANNOTATION = st.fixed_dictionaries(
    {"id": st.integers(0, 9), "image_id": st.one_of(st.integers(0, 2), st.just("1")),
     "category_id": st.one_of(st.integers(0, 3), st.just(1.0)), "bbox": NEAR_BOX},
    optional={"iscrowd": st.sampled_from([0, 1, 0])})
NEAR_COCO = st.fixed_dictionaries({
    "images": st.lists(st.sampled_from([0, 1, 2]), max_size=3).map(
        lambda ids: [{"id": i, "file_name": "a.png" if n % 2 == 0 else "b.png"} for n, i in enumerate(ids)]),
    "categories": st.lists(st.integers(0, 3), max_size=3).map(
        lambda ids: [{"id": i, "name": f"c{i}"} for i in ids]),
    "annotations": st.lists(NEAR_ANNOTATION, max_size=4),
})
COCO = st.one_of(
    NEAR_COCO,
    NEAR_COCO,
    JSON_SCALAR,
    st.fixed_dictionaries({}, optional={
        "images": st.one_of(st.lists(IMAGE, max_size=3), JSON_SCALAR),
        "annotations": st.one_of(st.lists(ANNOTATION, max_size=4), JSON_SCALAR),
        "categories": st.one_of(st.lists(CATEGORY, max_size=3), JSON_SCALAR),
    }),
)


def _is_id(v) -> bool:
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())


def _coco_valid(data) -> bool:
    """Reference check of the strict reading: the only files that must load."""
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list)
                                               for k in ("images", "annotations", "categories")):
        return False
    cats, images = data["categories"], data["images"]
    if not all(isinstance(c, dict) and _is_id(c.get("id")) for c in cats):
        return False
    if not all(isinstance(im, dict) and _is_id(im.get("id")) and im.get("file_name") in ("a.png", "b.png")
               for im in images):
        return False
    cat_ids, image_ids = [c["id"] for c in cats], [im["id"] for im in images]
    if len(set(cat_ids)) != len(cat_ids) or len(set(image_ids)) != len(image_ids):
        return False
    for ann in data["annotations"]:
        if not isinstance(ann, dict) or not {"image_id", "category_id", "bbox"} <= set(ann):
            return False
        if ann.get("iscrowd", 0):
            continue
        if not _is_id(ann["image_id"]) or ann["image_id"] not in image_ids:
            return False
        if not _is_id(ann["category_id"]) or ann["category_id"] not in cat_ids:
            return False
        box = ann["bbox"]
        if not (isinstance(box, list) and len(box) == 4 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 1e300 and math.isfinite(v)
                for v in box) and box[2] >= 0 and box[3] >= 0):
            return False
    return True


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("coco_images")
    Image.fromarray(np.zeros((3, 4, 3), np.uint8)).save(root / "a.png")
    Image.fromarray(np.full((3, 4), 200, np.uint8)).save(root / "b.png")
    return root


@FUZZ_MORE
@given(data=COCO)
def test_coco_json_fuzz(image_dir, data):
    from pe_toolkit.domains.detection.data import CocoDetectionDataset

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "ann.json"
        path.write_text(json.dumps(data))
        valid = _coco_valid(data)
        try:
            dataset = CocoDetectionDataset(path, image_dir)
        except FileNotFoundError as error:
            assert "missing.png" in str(error)
            assert not valid
            return
        except (ValueError, TypeError) as error:
            assert "ann.json" in str(error), f"the error must name the file: {error}"
            assert not valid, f"valid COCO rejected: {error}"
            return
    assert valid, f"invalid COCO accepted: {data!r}"
    cat_ids = sorted(c["id"] for c in data["categories"])
    assert dataset.num_classes == len(cat_ids)
    assert dataset.image_ids == sorted(im["id"] for im in data["images"])
    for index, image_id in enumerate(dataset.image_ids):
        anns = [a for a in data["annotations"] if not a.get("iscrowd", 0) and a["image_id"] == image_id]
        image, target = dataset[index]
        assert image.shape == (3, 3, 4)
        want = torch.tensor([[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in anns)],
                            dtype=torch.float32).reshape(-1, 4)
        torch.testing.assert_close(target["boxes"], want)
        assert target["labels"].tolist() == [cat_ids.index(a["category_id"]) for a in anns]


# -------------------------------------------------------------------------------------------- .npz loaders
def _npz_bytes(arrays: dict) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _corrupt(data: bytes, flips, cut) -> bytes:
    return _mutate(data, flips, cut)


FLIPS = st.lists(st.tuples(st.integers(0, 5_000), st.integers(0, 255)), max_size=3)
ARRAY = st.one_of(
    st.integers(0, 3).flatmap(lambda n: st.lists(st.floats(-2, 2), min_size=n * 2, max_size=n * 2)
                              .map(lambda v: np.array(v).reshape(-1, 2))),
    st.lists(st.integers(-2, 4), max_size=4).map(lambda v: np.array(v, np.int64)),
    st.sampled_from([np.zeros((0, 2)), np.zeros((1, 3)), np.array([np.nan]), np.array(["a"]), np.zeros((2, 2, 2))]),
)


def _pair_arrays(counts_a, counts_b, dim, matches_per_pair):
    num = len(counts_a)
    rng = np.random.default_rng(len(counts_a) + 7 * sum(counts_a))
    arrays = {"poses": rng.normal(size=(num, 3)), "overlap": np.ones(num, bool),
              "counts_a": np.array(counts_a, np.int64), "counts_b": np.array(counts_b, np.int64)}
    for side, counts in (("a", counts_a), ("b", counts_b)):
        arrays[f"positions_{side}"] = rng.normal(size=(sum(counts), 2))
        arrays[f"descriptors_{side}"] = rng.normal(size=(sum(counts), dim)).astype(np.float32)
    arrays["matches"] = np.array([m for pair in matches_per_pair for m in pair], np.int64).reshape(-1, 2)
    arrays["match_counts"] = np.array([len(pair) for pair in matches_per_pair], np.int64)
    return arrays


NEAR_PAIRS = st.integers(0, 3).flatmap(lambda n: st.builds(
    _pair_arrays, st.lists(st.integers(0, 3), min_size=n, max_size=n), st.lists(st.integers(0, 3), min_size=n,
                                                                                   max_size=n),
    st.integers(0, 3), st.lists(st.lists(st.tuples(st.integers(-1, 3), st.integers(-1, 3)), max_size=2),
                                min_size=n, max_size=n)))


@FUZZ_MORE
@given(arrays=NEAR_PAIRS, replace=st.one_of(st.none(), st.tuples(st.sampled_from(
    ["positions_a", "counts_b", "poses", "overlap", "matches", "match_counts", "descriptors_b"]), ARRAY)),
    drop=st.one_of(st.none(), st.sampled_from(["poses", "matches"])),
    shift=st.one_of(st.none(), st.tuples(st.sampled_from(["counts_a", "match_counts"]), st.integers(-4, 4)),
                    st.sampled_from(["counts_a", "match_counts"]).map(lambda k: (k, 0.5))))
def test_multirobot_near_valid_npz_fuzz(arrays, replace, drop, shift):
    """Well-formed archives with one array replaced or dropped, or counts moved between pairs (same sum, maybe
    negative or fractional): exact content when accepted."""
    from pe_toolkit.domains.multirobot.data import load_pairs

    if replace is not None:
        arrays[replace[0]] = replace[1]
    if shift is not None and len(arrays[shift[0]]) >= 2:
        counts = arrays[shift[0]].astype(type(shift[1]))
        counts[0] += shift[1]
        counts[-1] -= shift[1]
        arrays[shift[0]] = counts
    if drop is not None:
        del arrays[drop]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "pairs.npz"
        path.write_bytes(_npz_bytes(arrays))
        try:
            pairs = load_pairs(path)
        except (ValueError, TypeError) as error:
            assert str(error).startswith("load_pairs:") and "pairs.npz" in str(error), error
            return
    assert drop is None
    assert len(pairs) == len(arrays["poses"])
    offsets = {side: np.concatenate([[0], np.cumsum(arrays[f"counts_{side}"])]).astype(int) for side in "ab"}
    match_offsets = np.concatenate([[0], np.cumsum(arrays["match_counts"])]).astype(int)
    for s, pair in enumerate(pairs):
        assert len(pair.matches) == arrays["match_counts"][s]
        for side in "ab":
            lo, hi = offsets[side][s], offsets[side][s + 1]
            assert len(getattr(pair, side)) == arrays[f"counts_{side}"][s]
            np.testing.assert_array_equal(getattr(pair, side).positions, arrays[f"positions_{side}"][lo:hi])
            np.testing.assert_array_equal(getattr(pair, side).descriptors, arrays[f"descriptors_{side}"][lo:hi])
        matches = arrays["matches"][match_offsets[s]:match_offsets[s + 1]]
        np.testing.assert_array_equal(pair.matches, matches)
        if len(matches):
            assert matches.min() >= 0 and matches[:, 0].max() < len(pair.a) and matches[:, 1].max() < len(pair.b)
        np.testing.assert_array_equal(pair.pose, arrays["poses"][s])
        assert pair.overlap == bool(arrays["overlap"][s])


@FUZZ
@given(keys=st.dictionaries(st.sampled_from(["positions_a", "descriptors_a", "counts_a", "positions_b",
                                             "descriptors_b", "counts_b", "poses", "overlap", "matches",
                                             "match_counts"]), ARRAY),
       flips=FLIPS, cut=st.one_of(st.none(), st.integers(0, 2_000)), corrupt=st.booleans())
def test_multirobot_npz_fuzz(keys, flips, cut, corrupt):
    from pe_toolkit.domains.multirobot.data import load_pairs

    content = _npz_bytes(keys)
    if corrupt:
        content = _corrupt(content, flips, cut)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "pairs.npz"
        path.write_bytes(content)
        try:
            pairs = load_pairs(path)
        except (ValueError, TypeError) as error:
            assert str(error).startswith("load_pairs:") and "pairs.npz" in str(error), error
            return
    # accepted: the file held every key with consistent shapes; each pair's parts come from those arrays
    num = len(pairs)
    assert num == len(keys["poses"])
    assert sum(len(p.a) for p in pairs) == int(np.sum(keys["counts_a"])) if num else True
    for p in pairs:
        assert np.isfinite(p.a.positions).all() and np.isfinite(p.b.positions).all()
        if len(p.matches):
            assert p.matches.min() >= 0 and p.matches[:, 0].max() < len(p.a) and p.matches[:, 1].max() < len(p.b)


def test_multirobot_negative_count_is_refused():
    """counts_a = [3, -1] has the right sum (2 rows) but used to split silently into pairs of 2 and 0 rows."""
    from pe_toolkit.domains.multirobot.data import load_pairs

    arrays = _pair_arrays([1, 1], [1, 1], 2, [[], []])
    arrays["counts_a"] = np.array([3, -1])
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "pairs.npz"
        path.write_bytes(_npz_bytes(arrays))
        with pytest.raises(ValueError, match="counts_a must hold non-negative integers"):
            load_pairs(path)


def test_multirobot_npz_round_trip():
    from pe_toolkit.domains.multirobot.data import Observation, PairSample, load_pairs, save_pairs

    rng = np.random.default_rng(0)
    pairs = []
    for n_a, n_b in ((3, 2), (0, 1)):
        a = Observation(rng.normal(size=(n_a, 2)), rng.normal(size=(n_a, 4)).astype(np.float32), np.full(n_a, -1),
                        np.full(3, np.nan))
        b = Observation(rng.normal(size=(n_b, 2)), rng.normal(size=(n_b, 4)).astype(np.float32), np.full(n_b, -1),
                        np.full(3, np.nan))
        matches = np.array([[0, 1]] if n_a else np.zeros((0, 2)), np.int64).reshape(-1, 2)
        pairs.append(PairSample(a, b, rng.normal(size=3), bool(n_a), matches))
    with tempfile.TemporaryDirectory() as directory:
        loaded = load_pairs(save_pairs(Path(directory) / "p.npz", pairs))
    for want, got in zip(pairs, loaded):
        np.testing.assert_allclose(got.a.positions, want.a.positions)
        np.testing.assert_allclose(got.b.descriptors, want.b.descriptors)
        np.testing.assert_array_equal(got.matches, want.matches)
        assert got.overlap == want.overlap


AV_ARRAY = st.one_of(
    st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(1, 3), st.integers(1, 3)).map(lambda s: np.ones(s)),
    st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(1, 3)).map(lambda s: np.ones(s)),
    st.sampled_from([np.array(["a"]), np.array([np.nan]), np.full((1, 1, 1, 1), np.inf), np.zeros(3, bool)]),
)


@FUZZ_MORE
@given(keys=st.dictionaries(st.sampled_from(["video", "audio", "other"]), AV_ARRAY), flips=FLIPS,
       cut=st.one_of(st.none(), st.integers(0, 1_000)), corrupt=st.booleans())
def test_crossmodal_npz_fuzz(keys, flips, cut, corrupt):
    from pe_toolkit.domains.crossmodal.data import load_av_npz

    content = _npz_bytes(keys)
    if corrupt:
        content = _corrupt(content, flips, cut)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "clips.npz"
        path.write_bytes(content)
        try:
            clips = load_av_npz(path)
        except (ValueError, TypeError) as error:
            assert "clips.npz" in str(error), f"the error must name the file: {error}"
            return
    if not corrupt:
        np.testing.assert_array_equal(clips.video.numpy(), keys["video"].astype(np.float32))
        np.testing.assert_array_equal(clips.audio.numpy(), keys["audio"].astype(np.float32))
    assert clips.video.dim() == 4 and clips.audio.dim() == 3
    assert torch.isfinite(clips.video).all() and torch.isfinite(clips.audio).all()


# ------------------------------------------------------------------------------------- translation corpora
PHARAOH_FIELD = st.one_of(
    st.tuples(st.integers(0, 4), st.integers(0, 4)).map(lambda t: f"{t[0]}-{t[1]}"),
    st.text(alphabet="0123456789-x ²", max_size=5),
)


@FUZZ_MORE
@given(fields=st.lists(PHARAOH_FIELD, max_size=5))
def test_pharaoh_parser_fuzz(fields):
    from pe_toolkit.domains.translation.btg import parse_pharaoh

    line = " ".join(fields)
    try:
        links = parse_pharaoh(line)
    except (ValueError, TypeError) as error:
        assert "alignment field" in str(error), error
        return
    assert links == [tuple(int(x) for x in f.split("-")) for f in line.split()]


SENTENCE = st.text(alphabet="ab c", max_size=6)


@FUZZ_MORE
@given(rows=st.lists(st.tuples(SENTENCE, SENTENCE, st.lists(PHARAOH_FIELD, max_size=3).map(" ".join)), max_size=4),
       drop=st.sampled_from([None, 0, 1, 2]))
def test_parallel_corpus_fuzz(rows, drop):
    from pe_toolkit.domains.translation.btg import check_alignment, parse_pharaoh
    from pe_toolkit.domains.translation.data import load_parallel_corpus

    columns = [[r[k] for r in rows] for k in range(3)]
    if drop is not None and columns[drop]:
        columns[drop] = columns[drop][:-1]
    with tempfile.TemporaryDirectory() as directory:
        paths = [Path(directory) / name for name in ("s.txt", "t.txt", "a.txt")]
        for path, column in zip(paths, columns):
            path.write_text("\n".join(column) + ("\n" if column else ""), encoding="utf-8")
        try:
            pairs = load_parallel_corpus(*paths)
        except (ValueError, TypeError) as error:
            assert str(error).startswith("load_parallel_corpus:"), error
            assert any(name in str(error) for name in ("s.txt", "t.txt", "a.txt")), f"no file named: {error}"
            return
    assert len({len(c) for c in columns}) == 1
    assert len(pairs) == len(rows)
    for pair, (source, target, alignment) in zip(pairs, rows):
        assert pair.source == tuple(source.split()) and pair.target == tuple(target.split())
        links = parse_pharaoh(alignment)
        check_alignment(links, len(pair.source), len(pair.target))
        assert pair.alignment == tuple(sorted(set(links)))


def test_truncated_zip_is_a_zip():
    """The corrupted-.npz strategies reach the zip reader (not only numpy's pickle fallback)."""
    content = _npz_bytes({"video": np.ones((1, 1, 1, 1))})
    assert zipfile.is_zipfile(io.BytesIO(content))


def test_coco_duplicate_category_id_is_refused(image_dir, tmp_path):
    """Two categories with id 0 used to load as num_classes == 2 with every label 1 (a silent wrong answer)."""
    from pe_toolkit.domains.detection.data import CocoDetectionDataset

    path = tmp_path / "ann.json"
    path.write_text(json.dumps({"images": [{"id": 0, "file_name": "a.png"}], "annotations": [],
                                "categories": [{"id": 0, "name": "x"}, {"id": 0, "name": "y"}]}))
    with pytest.raises(ValueError, match=r"category id\(s\) \[0\] appear more than once"):
        CocoDetectionDataset(path, image_dir)
    path.write_text(json.dumps({"images": [{"id": 1.5, "file_name": "a.png"}], "annotations": [],
                                "categories": []}))
    with pytest.raises(ValueError, match="image id must be an integer, got 1.5"):
        CocoDetectionDataset(path, image_dir)


def test_pharaoh_parser_refuses_non_ascii_digits():
    """Found by the fuzzing above: '²'.isdigit() is True but int('²') fails with an unclear error."""
    from pe_toolkit.domains.translation.btg import parse_pharaoh

    with pytest.raises(ValueError, match="alignment field '²-1'"):
        parse_pharaoh("0-0 ²-1")


@pytest.mark.parametrize("arrays, match", [
    ({"video": np.ones((0, 0, 1)), "audio": np.ones((1, 2, 3))}, r"clips.npz: AVClips: video must have shape"),
    ({"video": np.ones((0, 1, 1, 1)), "audio": np.ones((1, 2, 3))}, r"clips.npz: AVClips: video has 0 clips"),
])
def test_crossmodal_npz_shape_errors_name_the_file(arrays, match, tmp_path):
    """Found by the file-naming check of ``test_crossmodal_npz_fuzz``: AVClips' shape errors did not say which
    file they came from."""
    from pe_toolkit.domains.crossmodal.data import load_av_npz

    path = tmp_path / "clips.npz"
    path.write_bytes(_npz_bytes(arrays))
    with pytest.raises(ValueError, match=match):
        load_av_npz(path)
