"""Timestep schedule and warping, joint DDIM, denoisers, the toy clips, AV-Align, a tiny Lightning run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pe_toolkit.domains.crossmodal import (
    JointDenoiser,
    audio_onsets,
    av_align,
    av_align_batch,
    cosine_alpha_bar,
    ddim_timesteps,
    generate_clips,
    joint_ddim_sample,
    load_av_npz,
    modality_gammas,
    video_motion_peaks,
    warp_timesteps,
)

# ------------------------------------------------------------------------------------ schedule


def test_warp_timesteps_formula():
    t = torch.tensor([0, 25, 50, 75, 100])
    torch.testing.assert_close(warp_timesteps(t, 100, 1.0), t)
    # (t/T)^2 * T: 0, 6.25, 25, 56.25, 100 -> rounded (6.25 -> 6, 56.25 -> 56)
    torch.testing.assert_close(warp_timesteps(t, 100, 2.0), torch.tensor([0, 6, 25, 56, 100]))
    g_v, g_a = modality_gammas(1.5)
    assert math.isclose(g_v, math.sqrt(1.5)) and math.isclose(g_a, 1 / math.sqrt(1.5))
    expected = [round((x / 1000) ** g_v * 1000) for x in range(0, 1001, 50)]
    assert warp_timesteps(torch.arange(0, 1001, 50), 1000, g_v).tolist() == expected


def test_warped_video_runs_ahead_of_audio_and_ends_match():
    t = torch.arange(0, 201)
    g_v, g_a = modality_gammas(1.5)
    tv, ta = warp_timesteps(t, 200, g_v), warp_timesteps(t, 200, g_a)
    assert (tv <= t).all() and (ta >= t).all()
    assert tv[0] == ta[0] == 0 and tv[-1] == ta[-1] == 200
    assert (tv[1:] >= tv[:-1]).all() and (ta[1:] >= ta[:-1]).all()  # monotone


def test_warp_bad_input():
    with pytest.raises(ValueError, match=r"t must lie in \[0, 10\], got \[0, 11\]"):
        warp_timesteps(torch.tensor([0, 11]), 10, 1.5)
    with pytest.raises(TypeError, match="integer tensor"):
        warp_timesteps(torch.tensor([0.5]), 10, 1.5)
    with pytest.raises(ValueError, match="gamma must be > 0"):
        warp_timesteps(torch.tensor([1]), 10, 0.0)
    with pytest.raises(ValueError, match="sampling_steps must be <= num_steps"):
        ddim_timesteps(10, 20)


def test_cosine_schedule():
    a = cosine_alpha_bar(100)
    assert a.shape == (101,) and a[0] == 1 and (a[1:] < a[:-1]).all() and a[-1] < 1e-3
    assert ddim_timesteps(100, 4).tolist() == [100, 75, 50, 25, 0]


def test_joint_ddim_with_an_oracle_denoiser_recovers_the_data():
    """With the true noise (x_t - sqrt(a) x0) / sqrt(1 - a) every DDIM step lands exactly on x0's trajectory."""
    alpha_bar = cosine_alpha_bar(50)
    video0 = torch.rand(2, 4, 3, 3) * 2 - 1
    audio0 = torch.rand(2, 8, 5) * 2 - 1
    calls = []

    def oracle(v, a, tv, ta):
        calls.append((int(tv[0]), int(ta[0])))
        av, aa = alpha_bar[tv].float().view(-1, 1, 1, 1), alpha_bar[ta].float().view(-1, 1, 1)
        return (v - av.sqrt() * video0) / (1 - av).sqrt().clamp(min=1e-8), (a - aa.sqrt() * audio0) / (
            1 - aa).sqrt().clamp(min=1e-8)

    video, audio = joint_ddim_sample(oracle, video0.shape, audio0.shape, alpha_bar, sampling_steps=10, gamma=1.5)
    torch.testing.assert_close(video, video0, atol=1e-4, rtol=0)
    torch.testing.assert_close(audio, audio0, atol=1e-4, rtol=0)
    assert all(tv <= ta for tv, ta in calls) and calls[0] == (50, 50)  # video is less noisy at each step
    with pytest.raises(ValueError, match="batch sizes differ: video 2, audio 3"):
        joint_ddim_sample(oracle, (2, 4, 3, 3), (3, 8, 5), alpha_bar)


def test_joint_ddim_with_an_x0_oracle_recovers_the_data():
    alpha_bar = cosine_alpha_bar(40)
    video0, audio0 = torch.rand(2, 4, 3, 3) * 2 - 1, torch.rand(2, 8, 5) * 2 - 1
    video, audio = joint_ddim_sample(lambda v, a, tv, ta: (video0, audio0), video0.shape, audio0.shape, alpha_bar,
                                     sampling_steps=7, gamma=2.0, prediction="x0")
    torch.testing.assert_close(video, video0)
    torch.testing.assert_close(audio, audio0)
    with pytest.raises(ValueError, match="prediction must be one of"):
        joint_ddim_sample(lambda v, a, tv, ta: (v, a), video0.shape, audio0.shape, alpha_bar, prediction="v")


# ------------------------------------------------------------------------------------ models


def test_joint_denoiser_shapes_and_bad_input():
    model = JointDenoiser((8, 6, 6), (16, 4), dim=16, num_heads=2, num_layers=1, connector="cmc_pe")
    v, a, t = torch.randn(3, 8, 6, 6), torch.randn(3, 16, 4), torch.tensor([1, 5, 9])
    eps_v, eps_a = model(v, a, t, t)
    assert eps_v.shape == v.shape and eps_a.shape == a.shape
    with pytest.raises(ValueError, match="batch sizes differ: video_t 3, audio_t 2"):
        model(v, a[:2], t, t)
    with pytest.raises(ValueError, match="batch sizes differ: x has 3, cond has 2"):
        model.video(v.reshape(3, 8, 36), t, a[:2], t[:2])
    with pytest.raises(ValueError, match=r"video_t must have shape \(B, 8, 6, 6\)"):
        model(torch.randn(3, 7, 6, 6), a, t, t)


def test_unconditioned_video_ignores_the_audio():
    model = JointDenoiser((8, 6, 6), (16, 4), dim=16, num_heads=2, num_layers=1, connector="none")
    v, t = torch.randn(2, 8, 6, 6), torch.tensor([3, 4])
    torch.testing.assert_close(model(v, torch.randn(2, 16, 4), t, t)[0], model(v, torch.randn(2, 16, 4), t, t)[0])


# ------------------------------------------------------------------------------------ data


def test_clips_are_seeded_and_clicks_sit_at_the_bounces():
    clips = generate_clips(6, seed=5)
    again = generate_clips(6, seed=5)
    torch.testing.assert_close(clips.video, again.video)
    torch.testing.assert_close(clips.audio, again.audio)
    assert clips.video.shape == (6, 32, 16, 16) and clips.audio.shape == (6, 64, 16)
    assert clips.video.min() >= -1 and clips.video.max() <= 1
    for video, audio, bounces in zip(clips.video, clips.audio, clips.bounces):
        onsets = [t / 2 for t in audio_onsets(audio)]  # 2 audio frames per video frame
        for b in bounces:
            if 1 <= b <= 30:
                assert any(abs(o - b) <= 1 for o in onsets), (b, onsets)
                assert any(abs(p - b) <= 1 for p in video_motion_peaks(video)), b


def test_generate_clips_bad_arguments():
    with pytest.raises(ValueError, match="num_clips must be an int >= 1, got 0"):
        generate_clips(0, seed=0)
    with pytest.raises(ValueError, match="frame_size must be >= 6"):
        generate_clips(1, seed=0, frame_size=4)


def test_load_av_npz(tmp_path):
    clips = generate_clips(2, seed=0)
    np.savez(tmp_path / "ok.npz", video=clips.video.numpy(), audio=clips.audio.numpy())
    loaded = load_av_npz(tmp_path / "ok.npz")
    torch.testing.assert_close(loaded.video, clips.video)
    np.savez(tmp_path / "bad.npz", video=clips.video.numpy(), audio=clips.audio[:1].numpy())
    with pytest.raises(ValueError, match="video has 2 clips but audio has 1"):
        load_av_npz(tmp_path / "bad.npz")
    np.savez(tmp_path / "missing.npz", video=clips.video.numpy())
    with pytest.raises(ValueError, match="no array 'audio'"):
        load_av_npz(tmp_path / "missing.npz")
    with pytest.raises(FileNotFoundError):
        load_av_npz(tmp_path / "none.npz")


# ------------------------------------------------------------------------------------ metric


def test_av_align_hand_computed():
    # onsets 2, 10, 20; peaks 3, 15: p1 = 1/3 (only 2 is near 3), p2 = 1/2 (only 3 is near 2)
    p1, p2 = 1 / 3, 1 / 2
    assert av_align([2, 10, 20], [3, 15]) == pytest.approx(p1 * p2 / (p1 + p2 - p1 * p2))
    assert av_align([1, 5], [1, 5]) == 1.0
    assert math.isnan(av_align([], [])) and av_align([1], []) == 0.0
    assert av_align([2], [4], tolerance=1) == 0.0 and av_align([2], [4], tolerance=2) == 1.0
    with pytest.raises(ValueError, match="tolerance must be a finite number >= 0"):
        av_align([1], [1], tolerance=-1)


def test_av_align_real_clips_beat_shuffled_pairs():
    clips = generate_clips(24, seed=2)
    silent = av_align_batch(torch.full((2, 32, 16, 16), -1.0), torch.zeros(2, 64, 16))
    assert math.isnan(silent["av_align"]) and silent["silent_clips"] == 1.0
    real = av_align_batch(clips.video, clips.audio)["av_align"]
    shuffled = av_align_batch(clips.video, clips.audio[torch.roll(torch.arange(24), 1)])["av_align"]
    assert real > 0.85 and shuffled < 0.4
    with pytest.raises(ValueError, match="video has 24 clips but audio has 3"):
        av_align_batch(clips.video, clips.audio[:3])


# ------------------------------------------------------------------------------------ Lightning


def test_tiny_joint_training_and_sampling():
    import lightning as L

    from pe_toolkit.domains.crossmodal.lightning_module import AVDataModule, JointDiffusionModule

    train = generate_clips(16, seed=0, video_frames=8, audio_frames=16, frame_size=8, freq_bins=4)
    module = JointDiffusionModule((8, 8, 8), (16, 4), dim=16, num_heads=2, num_layers=1, num_steps=20, max_steps=2)
    before = [p.detach().clone() for p in module.model.video.connectors.parameters()]
    trainer = L.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                        limit_val_batches=0)
    trainer.fit(module, AVDataModule(train, train, batch_size=8))
    after = list(module.model.video.connectors.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # the connectors are trained
    scores = module.evaluate_alignment(2, sampling_steps=3, gamma=1.5)
    assert math.isnan(scores["av_align"]) or 0.0 <= scores["av_align"] <= 1.0  # nan: no events in any clip
    assert 0.0 <= scores["silent_clips"] <= 1.0
    with pytest.raises(ValueError, match="video has batch size 2 but audio has 3"):
        module.loss(train.video[:2], train.audio[:3])
