"""Translation domain: cross-lingual position representations (Ding et al. 2020, arXiv:2004.13310).

BTG reordering of a source sentence toward target order (:mod:`~pe_toolkit.domains.translation.btg`), a source-only
BTG reorderer for test time (:mod:`~pe_toolkit.domains.translation.reorderer`), the ``xl_pe`` encoder
(:mod:`~pe_toolkit.domains.translation.encoders`), a seeded SVO -> SOV toy language pair and a parallel-corpus loader
(:mod:`~pe_toolkit.domains.translation.data`), the toy XL-PE task with oracle and reorderer positions
(:mod:`~pe_toolkit.domains.translation.task`), an encoder-decoder model and Lightning modules with BLEU.

``import pe_toolkit.domains.translation`` registers ``xl_pe`` under ``domain="translation"``:

>>> import pe_toolkit as pet, pe_toolkit.domains.translation
>>> pet.list_encoders(domain="translation")
['xl_pe']

The Lightning parts live in :mod:`pe_toolkit.domains.translation.lightning_module` (imported on demand).
"""

from pe_toolkit.extras import require_extra

require_extra("translation", __name__)

from pe_toolkit.domains.translation.btg import (
    BTGNode,
    NonBTGPermutationWarning,
    alignment_permutation,
    btg_tree_from_alignment,
    btg_tree_from_permutation,
    cross_lingual_positions,
    parse_pharaoh,
    reorder,
)
from pe_toolkit.domains.translation.data import SentencePair, Vocabulary, generate_corpus, load_parallel_corpus
from pe_toolkit.domains.translation.encoders import CrossLingualPositionEncoding
from pe_toolkit.domains.translation.model import TranslationModel
from pe_toolkit.domains.translation.reorderer import BTGReorderer, position_accuracy
from pe_toolkit.domains.translation.task import ReorderingTask, oracle_positions, toy_reordering_task

__all__ = [
    "BTGNode", "BTGReorderer", "CrossLingualPositionEncoding", "NonBTGPermutationWarning", "ReorderingTask",
    "SentencePair", "TranslationModel", "Vocabulary",
    "alignment_permutation", "btg_tree_from_alignment", "btg_tree_from_permutation", "cross_lingual_positions",
    "generate_corpus", "load_parallel_corpus", "oracle_positions", "parse_pharaoh", "position_accuracy", "reorder",
    "toy_reordering_task",
]
