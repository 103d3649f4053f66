"""Music domain: structure-informed positional encodings on 16th-note piano rolls (Bach chorales), MIDI in/out.

``import pe_toolkit.domains.music`` registers the encoders under ``domain="music"``:

>>> import pe_toolkit as pet, pe_toolkit.domains.music
>>> pet.list_encoders(domain="music")
['music_relative', 'ns_rpe', 's_ape', 's_rpe']

Data (:mod:`pe_toolkit.domains.music.scores`, :mod:`pe_toolkit.domains.music.midi`), structure labels
(:mod:`pe_toolkit.domains.music.structure`), encoders (:mod:`pe_toolkit.domains.music.encoders`), tasks and models
(:mod:`pe_toolkit.domains.music.data`, :mod:`pe_toolkit.domains.music.models`), metrics
(:mod:`pe_toolkit.domains.music.metrics`). Lightning lives in :mod:`pe_toolkit.domains.music.lightning_module`
and :mod:`pe_toolkit.domains.music.data`, imported on demand.
"""

from pe_toolkit.extras import require_extra

require_extra("music", __name__)

from pe_toolkit.domains.music.encoders import (
    MusicRelativeAttention,
    NonStationaryStructureRPE,
    StructureAPE,
    StructureRPE,
)
from pe_toolkit.domains.music.metrics import (
    chroma_similarity,
    frame_f1,
    grooving_similarity,
    nll_per_step,
    note_counts,
    note_density_distance,
    ssm_distance,
)
from pe_toolkit.domains.music.midi import load_midi_folder, midi_to_piece, roll_to_midi
from pe_toolkit.domains.music.scores import ChoraleCorpus, Piece, load_bach_chorales, load_score_file, score_to_piece
from pe_toolkit.domains.music.structure import FIELDS, LABEL_FIELDS, add_segment_fields, estimate_key, melody_chords

__all__ = [
    "FIELDS", "LABEL_FIELDS", "ChoraleCorpus", "MusicRelativeAttention", "NonStationaryStructureRPE", "Piece",
    "StructureAPE", "StructureRPE", "add_segment_fields", "chroma_similarity", "estimate_key", "frame_f1",
    "grooving_similarity", "load_bach_chorales", "load_midi_folder", "load_score_file", "melody_chords",
    "midi_to_piece", "nll_per_step", "note_counts", "note_density_distance", "roll_to_midi", "score_to_piece",
    "ssm_distance",
]
