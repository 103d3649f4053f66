"""Cross-modal domain: CMC-PE for sounding-video generation (Ishii et al. 2024, arXiv:2409.17550).

A seeded bouncing-ball video with clicks at the bounces (:mod:`~pe_toolkit.domains.crossmodal.data`), CMC-PE and a
cross-attention baseline (:mod:`~pe_toolkit.domains.crossmodal.conditioning`), two small denoisers joined by those
connectors (:mod:`~pe_toolkit.domains.crossmodal.models`), DDPM / joint DDIM with the per-modality timestep
adjustment (:mod:`~pe_toolkit.domains.crossmodal.diffusion`) and the AV-Align metric
(:mod:`~pe_toolkit.domains.crossmodal.alignment`).

``import pe_toolkit.domains.crossmodal`` registers ``cmc_pe`` under ``domain="crossmodal"``:

>>> import pe_toolkit as pet, pe_toolkit.domains.crossmodal
>>> pet.list_encoders(domain="crossmodal")
['cmc_pe']

The Lightning parts live in :mod:`pe_toolkit.domains.crossmodal.lightning_module` (imported on demand).
"""

from pe_toolkit.domains.crossmodal.alignment import audio_onsets, av_align, av_align_batch, video_motion_peaks
from pe_toolkit.domains.crossmodal.conditioning import (
    CMCPEConnector,
    CMCPositionalEncoding,
    CrossAttentionConnector,
    interpolate_time,
    make_connector,
)
from pe_toolkit.domains.crossmodal.data import AVClips, generate_clips, load_av_npz
from pe_toolkit.domains.crossmodal.diffusion import (
    cosine_alpha_bar,
    ddim_timesteps,
    joint_ddim_sample,
    modality_gammas,
    warp_timesteps,
)
from pe_toolkit.domains.crossmodal.models import JointDenoiser, ModalityDenoiser

__all__ = [
    "AVClips", "CMCPEConnector", "CMCPositionalEncoding", "CrossAttentionConnector", "JointDenoiser",
    "ModalityDenoiser", "audio_onsets", "av_align", "av_align_batch", "cosine_alpha_bar", "ddim_timesteps",
    "generate_clips", "interpolate_time", "joint_ddim_sample", "load_av_npz", "make_connector", "modality_gammas",
    "video_motion_peaks", "warp_timesteps",
]
