"""Offline data for language modelling and long-context evaluation, at byte level.

* :mod:`pe_toolkit.data.text_corpus`: the standard-library byte corpus, a user's text files,
  train/validation split, random and sequential windows.
* :mod:`pe_toolkit.data.passkey`: passkey-retrieval prompts, a seeded grid, scorers, training windows.
* :mod:`pe_toolkit.data.byte_lm`: ``ByteLMDataModule`` (imports Lightning; loaded on first access here).
"""

from typing import Any

from pe_toolkit.data.passkey import (
    COMPACT_TEMPLATE,
    PAPER_TEMPLATE,
    PasskeyExample,
    PasskeyTemplate,
    batched_digit_accuracies,
    make_passkey_example,
    passkey_accuracy,
    passkey_depth_scores,
    passkey_grid,
    passkey_training_windows,
    score_passkey,
    teacher_forced_digit_accuracy,
)
from pe_toolkit.data.text_corpus import (
    BYTE_VOCAB_SIZE,
    DOC_SEPARATOR,
    Document,
    TextCorpus,
    build_stdlib_corpus,
    equal_token_windows,
    join_documents,
    load_text_files,
    random_windows,
    sequential_windows,
    stdlib_source_files,
    unigram_entropy,
)

__all__ = [
    "BYTE_VOCAB_SIZE", "COMPACT_TEMPLATE", "DOC_SEPARATOR", "PAPER_TEMPLATE", "ByteLMDataModule", "Document",
    "PasskeyExample", "PasskeyTemplate", "TextCorpus", "batched_digit_accuracies", "build_stdlib_corpus",
    "equal_token_windows", "join_documents", "load_text_files", "make_passkey_example", "passkey_accuracy",
    "passkey_depth_scores", "passkey_grid", "passkey_training_windows", "random_windows", "score_passkey",
    "sequential_windows", "stdlib_source_files", "teacher_forced_digit_accuracy", "unigram_entropy",
]


def __getattr__(name: str) -> Any:
    if name == "ByteLMDataModule":  # keep Lightning out of `import pe_toolkit.data`
        from pe_toolkit.data.byte_lm import ByteLMDataModule

        return ByteLMDataModule
    raise AttributeError(f"module 'pe_toolkit.data' has no attribute {name!r}")
