"""Lightning modules and data modules shared by tasks and domains.

Importing this package imports Lightning; ``import pe_toolkit`` alone does not.
"""

from pe_toolkit.extras import require_extra

require_extra("train", __name__)

from pe_toolkit.training.exact_match import ExactMatchModule
from pe_toolkit.training.lm_module import SequenceLMModule
from pe_toolkit.training.lm_text_module import LanguageModelModule
from pe_toolkit.training.seq2seq_module import EncoderDecoderModule
from pe_toolkit.training.task_data import TaskDataModule

__all__ = [
    "EncoderDecoderModule", "ExactMatchModule", "LanguageModelModule", "SequenceLMModule", "TaskDataModule",
]
