"""Windows for the two tasks, the piano-roll Transformer, KV-cache generation, decoding and a training smoke test."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit.domains.music  # noqa: F401
from pe_toolkit.domains.music.data import (
    WindowDataset,
    split_step_features,
    step_features,
    task_features,
    task_tensors,
    window_rolls,
)
from pe_toolkit.domains.music.models import (
    MusicModelConfig,
    PianoRollTransformer,
    decode_step,
    generate_accompaniment,
    generate_continuation,
    generate_windows,
)
from pe_toolkit.domains.music.scores import Piece
from pe_toolkit.domains.music.structure import FIELDS, LABEL_FIELDS, field_index

ENCODINGS = {"s_ape": {}, "s_rpe": {}, "ns_rpe": {}, "music_relative": {"max_distance": 32}, "sinusoidal": {},
             "rope": {}, "nope": {}}


def synthetic_piece(length: int = 40, seed: int = 0) -> Piece:
    """Four voices striking random chord tones every two steps (a repeated pitch is re-struck), 4/4 bars, a
    phrase every 16 steps."""
    g = torch.Generator().manual_seed(seed)
    roll = torch.zeros(length, 4, 128, dtype=torch.bool)
    onsets = torch.zeros_like(roll)
    for v, base in enumerate((72, 64, 57, 48)):
        pitches = base + torch.randint(0, 5, (length // 2 + 1,), generator=g).repeat_interleave(2)[:length]
        roll[torch.arange(length), v, pitches] = True
        onsets[torch.arange(0, length, 2), v, pitches[::2]] = True
    labels = torch.zeros(length, len(LABEL_FIELDS), dtype=torch.long)
    t = torch.arange(length)
    for name, values in (("time", t), ("bar", t // 16), ("beat", t % 16), ("phrase", t // 16),
                         ("chord", 1 + (t // 4) % 3), ("melody", roll[:, 0].float().argmax(-1))):
        labels[:, LABEL_FIELDS.index(name)] = values
    return Piece("synthetic", roll, labels, onsets=onsets)


def test_step_features_layout_and_inverse():
    roll = torch.zeros(3, 2, 128, dtype=torch.bool)
    roll[:, 0, 60] = True  # voice 0 holds C4 for three steps, struck again at step 2
    roll[1, 1, 48] = True
    onsets = torch.zeros_like(roll)
    onsets[[0, 2], 0, 60] = True
    onsets[1, 1, 48] = True
    f = step_features(roll, onsets)
    assert f.shape == (3, 512)
    # per voice: 128 sounding, then 128 onset cells
    assert torch.nonzero(f[0]).flatten().tolist() == [60, 128 + 60]
    assert torch.nonzero(f[1]).flatten().tolist() == [60, 256 + 48, 256 + 128 + 48]
    assert torch.nonzero(f[2]).flatten().tolist() == [60, 128 + 60]
    back_roll, back_onsets = split_step_features(f, 2)
    assert torch.equal(back_roll.bool(), roll) and torch.equal(back_onsets.bool(), onsets)
    # derived onsets: only where a run starts (the re-strike at step 2 is invisible in the roll)
    derived = split_step_features(step_features(roll), 2)[1]
    assert torch.nonzero(derived[:, 0, 60]).flatten().tolist() == [0]
    with pytest.raises(ValueError, match="features"):
        split_step_features(f, 3)
    with pytest.raises(ValueError, match="onsets .* must have the roll's shape"):
        step_features(roll, onsets[:2])


def test_task_tensors_align_inputs_targets_and_structure():
    piece = synthetic_piece(9)
    nxt = task_tensors("next_step", piece.roll, piece.labels, piece.onsets)
    flat = step_features(piece.roll, piece.onsets)
    assert torch.equal(nxt["inputs"], flat[:-1]) and torch.equal(nxt["targets"], flat[1:])
    assert nxt["structure"].shape == (8, len(FIELDS)) and nxt["labels"].shape == (9, len(LABEL_FIELDS))
    # the repeated notes are in the targets: an onset every second step in every voice
    assert split_step_features(nxt["targets"], 4)[1].sum((1, 2)).tolist() == [0, 4, 0, 4, 0, 4, 0, 4]
    acc = task_tensors("accompaniment", piece.roll, piece.labels, piece.onsets)
    assert acc["inputs"].shape == (9, 1024) and acc["targets"].shape == (9, 768)
    assert torch.equal(acc["inputs"][:, :256], flat[:, :256])  # the soprano (sounding + onsets) of the same step
    assert acc["inputs"][0, 256:].eq(0).all()  # no lower voices before the first step
    assert torch.equal(acc["inputs"][1:, 256:], acc["targets"][:-1])  # the lower voices of the previous step
    assert task_features("next_step") == (1024, 1024) and task_features("accompaniment") == (1024, 768)
    with pytest.raises(ValueError, match="task must be one of"):
        task_tensors("continuation", piece.roll, piece.labels)


def test_window_dataset_counts_and_skips_short_pieces():
    ds = WindowDataset([synthetic_piece(40), synthetic_piece(10, seed=1)], "next_step", 16, stride=8)
    assert len(ds) == len(range(0, 40 - 17 + 1, 8)) and ds.skipped == ["synthetic"]
    item = ds[1]
    assert item["inputs"].shape == (16, 1024) and item["structure"][:, field_index("time")].tolist() == list(range(16))
    with pytest.raises(ValueError, match="length must be >= 1"):
        WindowDataset([synthetic_piece()], "next_step", 0)


def test_window_starting_inside_a_note_starts_it_at_the_first_step():
    piece = synthetic_piece(20)
    ds = WindowDataset([piece], "accompaniment", 8, stride=3)  # the window at 3 starts in the middle of notes
    start = ds.index[1][1]
    assert start == 3 and not piece.onsets[3].any()
    onsets = split_step_features(ds[1]["targets"], 3)[1]
    assert torch.equal(onsets[0].bool(), piece.roll[3, 1:]) and torch.equal(onsets[1:].bool(), piece.onsets[4:11, 1:])


@pytest.mark.parametrize("name", list(ENCODINGS))
@pytest.mark.parametrize("task", ["next_step", "accompaniment"])
def test_cached_decoding_equals_full_forward(name, task):
    model = PianoRollTransformer(MusicModelConfig(task=task, encoding=name, encoding_options=ENCODINGS[name],
                                                  dim=16, num_heads=2, num_layers=2, dropout=0.0)).double().eval()
    batch = [task_tensors(task, synthetic_piece(13, seed=s).roll, synthetic_piece(13, seed=s).labels,
                          synthetic_piece(13, seed=s).onsets) for s in range(2)]
    x = torch.stack([b["inputs"] for b in batch]).double()
    s = torch.stack([b["structure"] for b in batch])
    with torch.no_grad():
        full = model(x, s)
        cache = model.new_cache()
        steps = [model(x[:, :3], s[:, :3], cache=cache)] + [model(x[:, t:t + 1], s[:, t:t + 1], cache=cache)
                                                             for t in range(3, x.shape[1])]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-12, rtol=1e-12)


def test_structure_encoders_see_structure_and_baselines_only_time():
    piece = synthetic_piece(12)
    b = task_tensors("next_step", piece.roll, piece.labels)
    x, s = b["inputs"][None], b["structure"][None]
    changed = s.clone()
    changed[..., field_index("chord")] += 7
    for name, sensitive in (("s_ape", True), ("sinusoidal", False)):
        model = PianoRollTransformer(MusicModelConfig(encoding=name, dim=16, num_heads=2, dropout=0.0)).eval()
        differs = not torch.allclose(model(x, s), model(x, changed))
        assert differs == sensitive, name


def test_label_inputs_add_one_embedding_per_field_to_the_input_and_decode_alike_with_the_cache():
    torch.manual_seed(0)
    labels = {"melody": 128, "beat": 16, "chord": 61, "phrase": 4}
    model = PianoRollTransformer(MusicModelConfig(encoding="sinusoidal", dim=16, num_heads=2, dropout=0.0,
                                                  label_inputs=labels)).double().eval()
    batch = [task_tensors("next_step", synthetic_piece(24, seed=k).roll, synthetic_piece(24, seed=k).labels,
                          synthetic_piece(24, seed=k).onsets) for k in range(2)]
    x, s = torch.stack([b["inputs"] for b in batch]).double(), torch.stack([b["structure"] for b in batch])
    assert all(model.label_inputs[f].weight.abs().min() > 0 for f in labels)  # nonzero tables: the test can fail
    with torch.no_grad():
        hidden = model.input(x) + sum(model.label_inputs[f](s[..., field_index(f)]) for f in labels)
        expected = model.head(model.trunk.forward_features(hidden, positions=s[..., field_index("time")]))
        torch.testing.assert_close(model(x, s), expected, atol=0, rtol=0)
        changed = s.clone()
        changed[..., field_index("chord")] += 7  # the plain sinusoidal PE ignores it; the label input does not
        assert not torch.allclose(model(x, s), model(x, changed))
        cache = model.new_cache()
        steps = [model(x[:, :3], s[:, :3], cache=cache)] + [model(x[:, t:t + 1], s[:, t:t + 1], cache=cache)
                                                             for t in range(3, x.shape[1])]
        torch.testing.assert_close(torch.cat(steps, 1), model(x, s), atol=1e-12, rtol=1e-12)
    with pytest.raises(ValueError, match=r"field 'phrase' has labels in \[0, 4\]; label_inputs allows 0 .. 3"):
        structure = task_tensors("next_step", synthetic_piece(70).roll, synthetic_piece(70).labels)["structure"]
        PianoRollTransformer(MusicModelConfig(encoding="nope", dim=16, num_heads=2, label_inputs={"phrase": 4}))(
            torch.zeros(1, 69, 1024), structure[None])  # phrases 0 .. 4
    with pytest.raises(ValueError, match="unknown structure field 'mood'"):
        PianoRollTransformer(MusicModelConfig(encoding="nope", dim=16, num_heads=2, label_inputs={"mood": 4}))
    with pytest.raises(ValueError, match=r"label_inputs\['beat'\] must be >= 1, got 0"):
        PianoRollTransformer(MusicModelConfig(encoding="nope", dim=16, num_heads=2, label_inputs={"beat": 0}))
    with pytest.raises(TypeError, match=r"label_inputs\['beat'\] must be an int, got float"):
        PianoRollTransformer(MusicModelConfig(encoding="nope", dim=16, num_heads=2, label_inputs={"beat": 16.0}))


def test_decode_step_modes():
    # layout per voice: 128 sounding logits, then 128 onset logits
    logits = torch.full((1, 2 * 256), -9.0)
    logits[0, 60] = 3.0   # voice 0: one likely pitch
    logits[0, 61] = 2.0
    logits[0, 256:384] = -3.0  # voice 1: every pitch at p = 0.047: P(voice sounds) = 1 - 0.953^128 > 0.99
    logits[0, 256 + 50] = -2.5
    top = decode_step(logits, 2)  # after silence: every sounding pitch starts a note
    assert torch.nonzero(top[0]).flatten().tolist() == [60, 128 + 60, 256 + 50, 256 + 128 + 50]
    previous = torch.zeros(1, 2, 128)
    previous[0, 0, 60] = previous[0, 1, 50] = 1.0
    held = decode_step(logits, 2, previous=previous)  # the same pitches held: no onset (onset p = 1e-4)
    assert torch.nonzero(held[0]).flatten().tolist() == [60, 256 + 50]
    logits[0, 128 + 60] = 2.0  # a likely re-strike of voice 0's pitch
    struck = decode_step(logits, 2, previous=previous)
    assert torch.nonzero(struck[0]).flatten().tolist() == [60, 128 + 60, 256 + 50]
    logits[0, 128 + 61] = 2.0  # an onset on a pitch that does not sound is dropped
    assert torch.nonzero(decode_step(logits, 2, mode="threshold", previous=previous)[0]).flatten().tolist() == [
        60, 61, 128 + 60, 128 + 61]
    quiet = decode_step(torch.full((1, 256), -9.0), 1)
    assert quiet.sum() == 0  # P(voice sounds) = 1 - (1 - 1.2e-4)^128 < 0.5: a rest
    sample = decode_step(logits, 2, mode="bernoulli", generator=torch.Generator().manual_seed(0))
    sample_roll, sample_onsets = split_step_features(sample, 2)
    assert set(sample.unique().tolist()) <= {0.0, 1.0} and bool((sample_onsets <= sample_roll).all())
    with pytest.raises(ValueError, match="mode must be one of"):
        decode_step(logits, 2, mode="beam")
    with pytest.raises(ValueError, match="features"):
        decode_step(logits, 3)
    with pytest.raises(ValueError, match="previous must have shape"):
        decode_step(logits, 2, previous=torch.zeros(1, 128))


def test_generate_continuation_matches_greedy_full_recompute():
    model = PianoRollTransformer(MusicModelConfig(encoding="ns_rpe", dim=16, num_heads=2, dropout=0.0)).eval()
    piece = synthetic_piece(20)
    b = task_tensors("next_step", piece.roll, piece.labels)
    prompt, prompt_onsets = piece.roll[None, :4].float(), piece.onsets[None, :4].float()
    out, onsets = generate_continuation(model, prompt, b["structure"][None], 6, prompt_onsets=prompt_onsets)
    assert out.shape == onsets.shape == (1, 10, 4, 128) and torch.equal(out[:, :4], prompt)
    assert torch.equal(onsets[:, :4], prompt_onsets) and bool((onsets <= out).all())
    features = step_features(prompt, prompt_onsets)
    for t in range(4, 10):  # no cache: recompute the whole prefix every step
        with torch.no_grad():
            logits = model(features, b["structure"][None, :t])[:, -1]
        previous = split_step_features(features[:, -1], 4)[0]
        features = torch.cat([features, decode_step(logits, 4, previous=previous)[:, None]], dim=1)
    assert torch.equal(torch.stack([out, onsets], dim=-2).flatten(-3), features)
    with pytest.raises(ValueError, match="structure must cover"):
        generate_continuation(model, prompt, b["structure"][None, :5], 6)


def test_generate_accompaniment_keeps_the_melody():
    model = PianoRollTransformer(MusicModelConfig(task="accompaniment", encoding="s_rpe", dim=16, num_heads=2))
    piece = synthetic_piece(12)
    b = task_tensors("accompaniment", piece.roll, piece.labels)
    out, onsets = generate_accompaniment(model, piece.roll[None, :, 0].float(), b["structure"][None],
                                         melody_onsets=piece.onsets[None, :, 0].float())
    assert out.shape == onsets.shape == (1, 12, 4, 128) and torch.equal(out[0, :, 0], piece.roll[:, 0].float())
    assert torch.equal(onsets[0, :, 0], piece.onsets[:, 0].float())  # the melody's repeated notes are kept
    assert (out[0, :, 1:].sum(-1) <= 1).all()  # at most one note per generated voice
    assert bool((onsets <= out).all())
    with pytest.raises(ValueError, match="melody_onsets must have the melody's shape"):
        generate_accompaniment(model, piece.roll[None, :, 0].float(), b["structure"][None],
                               melody_onsets=piece.onsets[None, :3, 0].float())
    with pytest.raises(ValueError, match="needs a next_step model"):
        generate_continuation(model, piece.roll[None, :2].float(), b["structure"][None], 2)


@pytest.mark.parametrize("task", ["next_step", "accompaniment"])
def test_window_rolls_invert_task_tensors_on_windows_and_batches(task):
    pieces = [synthetic_piece(9, seed=s) for s in (0, 1)]
    windows = [task_tensors(task, p.roll, p.labels, p.onsets) for p in pieces]
    roll, onsets = window_rolls(task, windows[0]["inputs"], windows[0]["targets"])
    assert torch.equal(roll, pieces[0].roll.float()) and torch.equal(onsets, pieces[0].onsets.float())
    stacked = {k: torch.stack([w[k] for w in windows]) for k in ("inputs", "targets")}
    batch = window_rolls(task, stacked["inputs"], stacked["targets"])
    assert torch.equal(batch[0], torch.stack([p.roll for p in pieces]).float())
    assert torch.equal(batch[1], torch.stack([p.onsets for p in pieces]).float())
    with pytest.raises(ValueError, match="task"):
        window_rolls("melody", windows[0]["inputs"], windows[0]["targets"])


@pytest.mark.parametrize("task", ["next_step", "accompaniment"])
def test_generate_windows_gives_the_model_only_the_given_part(task):
    torch.manual_seed(0)
    model = PianoRollTransformer(MusicModelConfig(task=task, encoding="s_rpe", dim=16, num_heads=2)).eval()
    pieces = [synthetic_piece(13, seed=s) for s in (0, 1)]
    windows = [task_tensors(task, p.roll, p.labels, p.onsets) for p in pieces]
    batch = {k: torch.stack([w[k] for w in windows]) for k in ("inputs", "targets", "structure")}
    roll, onsets = torch.stack([p.roll for p in pieces]).float(), torch.stack([p.onsets for p in pieces]).float()
    if task == "next_step":
        out = generate_windows(model, batch, prompt=5)
        expected = generate_continuation(model, roll[:, :5], batch["structure"], 8, prompt_onsets=onsets[:, :5])
        with pytest.raises(ValueError, match="prompt must be at most the window's 13 steps, got 14"):
            generate_windows(model, batch, prompt=14)
        with pytest.raises(ValueError, match="needs prompt"):
            generate_windows(model, batch)
    else:
        out = generate_windows(model, batch)
        expected = generate_accompaniment(model, roll[:, :, 0], batch["structure"], melody_onsets=onsets[:, :, 0])
        with pytest.raises(ValueError, match="prompt is for next_step models"):
            generate_windows(model, batch, prompt=5)
    assert out[0].shape == roll.shape and torch.equal(out[0], expected[0]) and torch.equal(out[1], expected[1])
    # whatever the model generates, the given part is the reference's
    given = (slice(None), slice(0, 5)) if task == "next_step" else (slice(None), slice(None), 0)
    assert torch.equal(out[0][given], roll[given]) and torch.equal(out[1][given], onsets[given])


def test_model_input_errors():
    model = PianoRollTransformer(MusicModelConfig(dim=16, num_heads=2))
    with pytest.raises(ValueError, match=r"x must have shape \(B, L, 1024\)"):
        model(torch.zeros(1, 4, 768), torch.zeros(1, 4, len(FIELDS), dtype=torch.long))
    with pytest.raises(ValueError, match="structure must have shape"):
        model(torch.zeros(1, 4, 1024), torch.zeros(1, 4, 3, dtype=torch.long))


def test_lightning_training_lowers_the_loss():
    import lightning as L

    from pe_toolkit.domains.music.lightning_module import ChoraleDataModule, PianoRollModule

    L.seed_everything(0, verbose=False)
    pieces = [synthetic_piece(40, seed=s) for s in range(4)]
    data = ChoraleDataModule((pieces[:2], pieces[2:3], pieces[3:]), task="accompaniment", length=16, batch_size=4)
    module = PianoRollModule(MusicModelConfig(task="accompaniment", encoding="s_rpe", dim=16, num_heads=2),
                             lr=1e-2, max_steps=30)
    trainer = L.Trainer(max_steps=30, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    before = trainer.test(module, data, verbose=False)[0]
    trainer.fit(module, data)
    after = trainer.test(module, data, verbose=False)[0]
    assert after["test/nll"] < 0.7 * before["test/nll"]
    assert 0.0 <= after["test/f1"] <= 1.0
