"""Interaction loading, chronological order, leave-one-out split, padding, time positions, synthetic log."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pe_toolkit.domains.recsys import (
    Interactions,
    build_sequences,
    contextual_count_log,
    leave_one_out,
    left_pad,
    load_interactions,
    movielens_100k_path,
    time_positions,
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------- loading
def test_movielens_100k_from_the_recbole_wheel():
    path = movielens_100k_path()
    assert path.name == "ml-100k.inter" and "recbole" in path.parts
    log = load_interactions()
    assert (len(log), log.num_users, log.num_items) == (100_000, 943, 1682)
    seqs = build_sequences(log)
    assert seqs.lengths.min() == 20 and seqs.lengths.sum() == 100_000
    # the field note: 415 of 943 users have their last two interactions at the same second
    last, second = seqs.timestamps[seqs.offsets[1:] - 1], seqs.timestamps[seqs.offsets[1:] - 2]
    assert int((last == second).sum()) == 415


def test_three_formats_give_the_same_log(tmp_path):
    rows = [("7", "30", "4", "100"), ("5", "10", "3", "50"), ("7", "20", "1", "100")]
    inter = write(tmp_path, "x.inter", "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
                  + "".join("\t".join(r) + "\n" for r in rows))
    udata = write(tmp_path, "u.data", "".join("\t".join(r) + "\n" for r in rows))
    dat = write(tmp_path, "ratings.dat", "".join("::".join(r) + "\n" for r in rows))
    logs = [load_interactions(p) for p in (inter, udata, dat)]
    for log in logs:
        assert log.user_ids == ("5", "7") and log.item_ids == ("10", "20", "30")  # numeric order
        np.testing.assert_array_equal(log.users, [1, 0, 1])
        np.testing.assert_array_equal(log.items, [3, 1, 2])  # 1-based, 0 is padding
        np.testing.assert_array_equal(log.timestamps, [100.0, 50.0, 100.0])


def test_recbole_header_in_any_order_and_string_tokens(tmp_path):
    path = write(tmp_path, "y.inter", "timestamp:float\titem_id:token\tuser_id:token\n3\tb\talice\n1\ta\talice\n")
    log = load_interactions(path)
    assert log.user_ids == ("alice",) and log.item_ids == ("a", "b")
    np.testing.assert_array_equal(log.items, [2, 1])


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("m.inter", "user_id:token\titem_id:token\trating:float\n1\t2\t3\n", r"lacks column\(s\) \['timestamp'\]"),
        ("m.inter", "", "empty"),
        ("m.inter", "user_id:token\titem_id:token\ttimestamp:float\n", "no interactions"),
        ("u.data", "1\t2\t3\n", "line 1: expected 4 fields"),
        ("u.data", "1\t2\t3\t4\n\t2\t3\t4\n", "line 2: empty user id"),
        ("u.data", "1\tx7\t3\t4\n", "line 1: item id must be an integer.*'x7'"),
        ("ratings.dat", "1::2::3::4\nu1::2::3::4\n", "line 2: user id must be an integer"),
        ("u.data", "1\t2\t3\tyesterday\n", "timestamp must be a number, got 'yesterday'"),
        ("u.data", "1\t2\t3\tnan\n", "timestamp must be finite"),
    ],
)
def test_bad_files_name_the_problem(tmp_path, name, text, match):
    path = write(tmp_path, name, text)
    with pytest.raises(ValueError, match=match):
        load_interactions(path)


def test_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_interactions(tmp_path / "missing.inter")
    with pytest.raises(ValueError, match="format must be one of"):
        load_interactions(tmp_path / "x", format="csv")
    with pytest.raises(ValueError, match="same length"):
        Interactions.from_arrays([1, 2], [1], [0.0, 1.0])


def test_explicit_format_overrides_the_suffix(tmp_path):
    path = write(tmp_path, "log.txt", "1::2::3::4\n")
    assert len(load_interactions(path, format="movielens_dat")) == 1
    with pytest.raises(ValueError, match="expected 4 fields"):
        load_interactions(path)  # .txt -> tab separated


# ------------------------------------------------------------------------------------- order and split
def test_chronological_order_with_stable_tie_break():
    # user 0: times 5, 1, 5, 3 in file order -> items ordered 2(t1), 4(t3), 1(t5, first in file), 3(t5)
    log = Interactions.from_arrays([0, 0, 0, 0, 1, 1, 1], [1, 2, 3, 4, 1, 2, 3], [5, 1, 5, 3, 9, 9, 9])
    seqs = build_sequences(log)
    items, times = seqs.user(0)
    np.testing.assert_array_equal(items, [2, 4, 1, 3])
    np.testing.assert_array_equal(times, [1, 3, 5, 5])
    np.testing.assert_array_equal(seqs.user(1)[0], [1, 2, 3])  # all tied: file order


def test_short_users_raise_or_are_dropped():
    log = Interactions.from_arrays([0, 0, 0, 1, 1, 2], [1, 2, 3, 1, 2, 3], [0, 1, 2, 0, 1, 0])
    seqs = build_sequences(log)
    with pytest.raises(ValueError, match=r"2 user\(s\) have fewer: user 1 \(2\), user 2 \(1\)"):
        leave_one_out(seqs)
    kept = build_sequences(log, min_length=3)
    assert kept.num_users == 1 and len(leave_one_out(kept)["test"]) == 1
    with pytest.raises(ValueError, match="no user has >= 9"):
        build_sequences(log, min_length=9)


def test_leave_one_out_targets_windows_and_padding():
    items = [11, 12, 13, 14, 15, 16]  # one user, chronological
    log = Interactions.from_arrays([0] * 6, items, [0, 10, 20, 40, 40, 50])
    ex = leave_one_out(build_sequences(log), max_len=4)
    i = {v: k + 1 for k, v in enumerate(sorted(items))}  # raw id -> index
    train, val, test = ex["train"], ex["val"], ex["test"]
    # train sequence s1..s4: inputs s1..s3, targets s2..s4, left-padded to 4
    assert train.items.tolist() == [[0, i[11], i[12], i[13]]]
    assert train.targets.tolist() == [[0, i[12], i[13], i[14]]]
    assert val.items.tolist() == [[i[11], i[12], i[13], i[14]]] and val.targets.tolist() == [i[15]]
    # test window keeps the last 4 of s1..s5; the history keeps all of them
    assert test.items.tolist() == [[i[12], i[13], i[14], i[15]]] and test.targets.tolist() == [i[16]]
    assert test.history.tolist() == [[i[11], i[12], i[13], i[14], i[15]]]
    assert val.history.tolist() == [[i[11], i[12], i[13], i[14]]]
    # time unit = smallest non-zero gap of the training part (10): tau = t / 10, padding repeats the first
    assert train.times.tolist() == [[0.0, 0.0, 1.0, 2.0]]
    assert test.times.tolist() == [[1.0, 2.0, 4.0, 4.0]]
    assert train.items.dtype == torch.long and train.times.dtype == torch.float64


def test_user_with_three_items_has_no_training_window():
    log = Interactions.from_arrays([0, 0, 0, 1, 1, 1, 1], [1, 2, 3, 1, 2, 3, 4], range(7))
    ex = leave_one_out(build_sequences(log), max_len=3)
    assert ex["train"].users.tolist() == [1] and ex["val"].users.tolist() == [0, 1]
    assert ex["test"].history.tolist() == [[1, 2, 0], [1, 2, 3]]  # right-padded to the longest history
    with pytest.raises(ValueError, match="max_len must be an int >= 1"):
        leave_one_out(build_sequences(log), max_len=0)


def test_left_pad_and_time_positions():
    np.testing.assert_array_equal(left_pad(np.array([1, 2, 3]), 5), [0, 0, 1, 2, 3])
    np.testing.assert_array_equal(left_pad(np.array([1, 2, 3]), 2), [2, 3])
    np.testing.assert_array_equal(time_positions(np.array([100.0, 100.0, 130.0, 190.0, 195.0]), 4), [0, 0, 1, 3, 3])
    np.testing.assert_array_equal(time_positions(np.array([7.0, 7.0, 9.0]), 2), [0, 0, 2])  # no gap: unit 1


# ------------------------------------------------------------------------------------------- synthetic
def test_synthetic_targets_are_contextual_recalls():
    lag, signals = 3, 20
    log = contextual_count_log(60, length=(8, 16), num_signal_items=signals, num_filler_items=10, lag=lag, seed=1)
    again = contextual_count_log(60, length=(8, 16), num_signal_items=signals, num_filler_items=10, lag=lag, seed=1)
    np.testing.assert_array_equal(log.items, again.items)
    seqs = build_sequences(log)
    signal_index = {i + 1 for i, raw in enumerate(log.item_ids) if int(raw) <= signals}
    distances = set()
    for u in range(seqs.num_users):
        items, times = seqs.user(u)
        assert np.all(np.diff(times) > 0)
        for end in (len(items) - 2, len(items) - 1):  # validation and test targets
            history = [(pos, it) for pos, it in enumerate(items[:end]) if it in signal_index]
            assert items[end] in signal_index and items[end] == history[-lag][1]
            distances.add(end - history[-lag][0])
    assert len(distances) > 3  # the copied item sits at varying absolute distances


def test_synthetic_bad_arguments():
    with pytest.raises(ValueError, match=r"length must satisfy 5 <= min <= max"):
        contextual_count_log(5, length=(4, 9), lag=3)
    with pytest.raises(ValueError, match=r"filler_prob must be in \[0, 1\)"):
        contextual_count_log(5, filler_prob=1.0)
    with pytest.raises(TypeError, match="lag must be an int"):
        contextual_count_log(5, lag=2.5)


# --------------------------------------------------------------------- field names, encodings, k-core, splits
def test_configurable_field_names_and_optional_timestamp(tmp_path):
    path = write(tmp_path, "z.inter", "session:token\tsku:token\twhen:float\tuser_id:token\n"
                 "s1\ta\t3\tx\ns1\tb\t1\tx\ns2\ta\t2\ty\n")
    log = load_interactions(path, user_field="session", item_field="sku", time_field="when")
    assert log.user_ids == ("s1", "s2") and log.item_ids == ("a", "b") and log.has_timestamps
    np.testing.assert_array_equal(log.timestamps, [3.0, 1.0, 2.0])
    # no timestamp: file order is the chronology, timestamps are the line index
    untimed = write(tmp_path, "n.inter", "user_id:token\titem_id:token\nu\tb\nu\ta\nv\ta\n")
    log = load_interactions(untimed, time_field=None)
    assert not log.has_timestamps and log.timestamps.tolist() == [0.0, 1.0, 2.0]
    assert build_sequences(log).user(0)[0].tolist() == [2, 1]  # b then a, as in the file
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['timestamp'\].*pass time_field=None"):
        load_interactions(untimed)
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['sku'\].*item_field='sku'"):
        load_interactions(untimed, item_field="sku", time_field=None)
    # MovieLens formats: time_field=None ignores the 4th column
    udata = write(tmp_path, "u.data", "1\t5\t3\t900\n1\t6\t3\t100\n")
    assert load_interactions(udata, time_field=None).timestamps.tolist() == [0.0, 1.0]
    with pytest.raises(ValueError, match="user_field must be a non-empty string"):
        load_interactions(untimed, user_field="")
    with pytest.raises(ValueError, match="must differ"):
        load_interactions(untimed, user_field="item_id", time_field=None)
    dup = write(tmp_path, "d.inter", "user_id:token\titem_id:token\titem_id:token\ttimestamp:float\n1\t2\t3\t4\n")
    with pytest.raises(ValueError, match=r"d.inter: header names column\(s\) \['item_id'\] more than once"):
        load_interactions(dup)


def test_bom_and_other_encodings(tmp_path):
    text = "user_id:token\titem_id:token\ttimestamp:float\nJosé\tcafé\t1\nJosé\tthé\t2\n"
    bom = tmp_path / "bom.inter"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    log = load_interactions(bom)  # the BOM is not part of the first header name
    assert log.user_ids == ("José",) and log.item_ids == ("café", "thé")
    utf16 = tmp_path / "utf16.inter"
    utf16.write_bytes(text.encode("utf-16"))  # with its BOM
    assert load_interactions(utf16).item_ids == ("café", "thé")
    latin = tmp_path / "latin.inter"
    latin.write_bytes(text.encode("latin-1"))
    with pytest.raises(ValueError,
                       match=r"latin.inter: line 2 is not valid utf-8 \(byte \d+: b'\\xe9'.*encoding='latin-1'"):
        load_interactions(latin)
    assert load_interactions(latin, encoding="latin-1").item_ids == ("café", "thé")
    with pytest.raises(ValueError, match="encoding 'klingon' is not a known text encoding"):
        load_interactions(latin, encoding="klingon")


def test_kcore_is_applied_until_stable():
    from pe_toolkit.domains.recsys import filter_kcore

    # item c has 1 interaction -> dropped; then user v has 1 left -> dropped; then item b has 1 -> dropped
    users = ["u", "u", "v", "v", "w", "w", "u", "w"]
    items = ["a", "b", "b", "c", "a", "d", "d", "a"]
    log = Interactions.from_arrays(users, items, range(8))
    core = filter_kcore(log, user_core=2, item_core=2)
    assert core.user_ids == ("u", "w") and core.item_ids == ("a", "d")
    kept = [(core.user_ids[u], core.item_ids[i - 1], t) for u, i, t in zip(core.users, core.items, core.timestamps)]
    assert kept == [("u", "a", 0.0), ("w", "a", 4.0), ("w", "d", 5.0), ("u", "d", 6.0), ("w", "a", 7.0)]
    whole = filter_kcore(log, user_core=1, item_core=1)
    np.testing.assert_array_equal(whole.items, log.items)
    np.testing.assert_array_equal(whole.users, log.users)
    with pytest.raises(ValueError, match="no interaction survives"):
        filter_kcore(log, user_core=9)
    with pytest.raises(ValueError, match="item_core must be an int >= 1"):
        filter_kcore(log, item_core=0)


def test_prefix_examples_are_every_training_target():
    from pe_toolkit.domains.recsys import sequential_split

    items = [11, 12, 13, 14, 15, 16]
    log = Interactions.from_arrays([0] * 6, items, [0, 10, 20, 40, 40, 50])
    ex = sequential_split(build_sequences(log), max_len=2, train_targets="prefixes")
    i = {v: k + 1 for k, v in enumerate(sorted(items))}
    train = ex["train"]
    # training part s1..s4: targets s2, s3, s4, each after at most 2 items, in the last slot only
    assert train.items.tolist() == [[0, i[11]], [i[11], i[12]], [i[12], i[13]]]
    assert train.targets.tolist() == [[0, i[12]], [0, i[13]], [0, i[14]]]
    assert train.users.tolist() == [0, 0, 0] and train.times.tolist() == [[0.0, 0.0], [0.0, 1.0], [1.0, 2.0]]
    # validation / test are the same as with shifted windows
    shifted = sequential_split(build_sequences(log), max_len=2)
    for stage in ("val", "test"):
        for name in ("items", "targets", "history", "times"):
            assert torch.equal(getattr(ex[stage], name), getattr(shifted[stage], name))
    # SASRec's one window keeps only the last max_len targets: s3, s4 (s2 lost)
    assert shifted["train"].targets.tolist() == [[i[13], i[14]]]


def test_ratio_split_gives_every_evaluation_item_a_query():
    from pe_toolkit.domains.recsys import sequential_split, split_points

    assert split_points(10, "ratio", (0.8, 0.1, 0.1)) == (8, 9)
    assert split_points(25, "ratio", (0.6, 0.2, 0.2)) == (15, 20)
    assert split_points(3, "ratio") == (1, 2) and split_points(7, "leave_one_out") == (5, 6)
    items = list(range(1, 11))
    log = Interactions.from_arrays([0] * 10, items, range(10))
    ex = sequential_split(build_sequences(log), max_len=3, split="ratio", ratios=(0.6, 0.2, 0.2))
    assert ex["val"].targets.tolist() == [7, 8] and ex["test"].targets.tolist() == [9, 10]
    assert ex["test"].items.tolist() == [[6, 7, 8], [7, 8, 9]]
    assert ex["test"].history[1].tolist() == list(range(1, 10))
    assert ex["train"].targets.tolist() == [[4, 5, 6]]  # shifted window over s1..s6, last 3 targets
    for bad, match in (((0.8, 0.2), "three numbers"), ((0.8, 0.3, 0.1), "sum to 1"), ((1.0, 0.0, 0.0), r"\(0, 1\)")):
        with pytest.raises(ValueError, match=match):
            sequential_split(build_sequences(log), split="ratio", ratios=bad)
    with pytest.raises(ValueError, match="split must be one of"):
        sequential_split(build_sequences(log), split="random")
    with pytest.raises(ValueError, match="train_targets must be one of"):
        sequential_split(build_sequences(log), train_targets="all")
