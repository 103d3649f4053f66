"""The chance floor of AV-Align (the same clips re-paired), the real clips' reference levels, and the compact
pictures and clip plot of :mod:`pe_toolkit.domains.crossmodal.plotting`."""

from __future__ import annotations

import pytest
import torch

from pe_toolkit.domains.crossmodal import generate_clips
from pe_toolkit.domains.crossmodal.alignment import av_align_batch, chance_floor, reference_levels
from pe_toolkit.domains.crossmodal.plotting import decode_picture, encode_picture, plot_clips


def test_chance_floor_repairs_clip_i_audio_with_the_next_clips_video():
    clips = generate_clips(24, seed=3)
    floor = chance_floor(clips.video, clips.audio)
    assert floor == av_align_batch(torch.roll(clips.video, 1, dims=0), clips.audio)
    real = av_align_batch(clips.video, clips.audio)
    assert real["av_align"] > 0.9 and floor["av_align"] < 0.4  # real clips align, re-paired ones do not
    assert floor["audio_events"] == real["audio_events"]  # the same events, only re-paired
    assert chance_floor(clips.video, clips.audio, tolerance=3.0) == av_align_batch(
        torch.roll(clips.video, 1, dims=0), clips.audio, tolerance=3.0)  # options reach av_align_batch
    levels = reference_levels(clips.video, clips.audio)
    assert levels == {"real": real["av_align"], "shuffled": floor["av_align"],
                      "real_audio_events": real["audio_events"], "real_video_events": real["video_events"]}
    with pytest.raises(ValueError, match="needs >= 2 clips to re-pair, got 1"):
        chance_floor(clips.video[:1], clips.audio[:1])


def test_pictures_are_stored_as_grey_levels():
    x = torch.tensor([[-1.0, -0.5, 0.0], [0.25, 1.0, 3.0]])
    encoded = encode_picture(x)
    assert encoded["shape"] == [2, 3] and len(encoded["int8_base64"]) == 8  # 6 bytes
    decoded = decode_picture(encoded)
    expected = torch.tensor([[-127, -64, 0], [32, 127, 127]]) / 127  # 3.0 at the top grey level, as imshow draws it
    assert torch.equal(torch.from_numpy(decoded), expected.float())


def test_plot_clips_draws_frames_side_by_side_and_refuses_bad_shapes():
    pytest.importorskip("matplotlib")
    clips = generate_clips(2, seed=0)
    figure = plot_clips({"a": (clips.video[0], clips.audio[0]), "b": (clips.video[1], clips.audio[1])})
    t, h, w = clips.video.shape[1:]
    assert len(figure.axes) == 4 and figure.axes[0].images[0].get_array().shape == (h, t * w)
    assert figure.axes[1].images[0].get_array().shape == tuple(clips.audio[0].T.shape)  # frequency up
    with pytest.raises(ValueError, match="at least one clip"):
        plot_clips({})
    with pytest.raises(ValueError, match=r"clip 'a' needs video \(T_v, H, W\)"):
        plot_clips({"a": (clips.video, clips.audio[0])})
