"""Bug classes of packed and left-padded batches: positions that do not restart, masks that leak.

Public reports describe packed training where tokens attend to the previous document or positions
keep counting across documents (``position_ids`` not reset), and batched generation where left
padding shifts every position of the shorter prompts or padded keys are attended (NaN rows or
changed logits). The toolkit's contract: ``document_ids`` blocks attention across documents and
restarts default positions per document; ``generate(attention_mask=)`` starts each prompt at
position 0 and never attends to padding.

Checks, for every registered (causal) encoder: a packed row equals each document run alone, and a
left-padded batch's next-token logits equal each prompt alone (float64, 1e-9). The broken variants
(document ids dropped; positions counted across documents; padding counted in positions; the
padding mask dropped) fail them. The same properties are checked across backends and with
``generate`` in ``tests/test_conformance.py``.
"""

from __future__ import annotations

import pytest
import torch
from zoo_helpers import SEQUENCE_ENCODERS, VOCAB, make_model

GEN = torch.Generator().manual_seed(3)
DOCUMENTS = [torch.randint(0, VOCAB, (n,), generator=GEN) for n in (3, 5, 2)]
PROMPTS = [torch.randint(1, VOCAB, (n,), generator=GEN) for n in (3, 6, 4)]


def packed_vs_alone(model, *, drop_document_ids: bool = False, global_positions: bool = False) -> float:
    tokens = torch.cat(DOCUMENTS)[None]
    ids = torch.cat([torch.full((len(d),), i) for i, d in enumerate(DOCUMENTS)])[None]
    options = {} if drop_document_ids else {"document_ids": ids}
    if global_positions:
        options["positions"] = torch.arange(tokens.shape[1])
    with torch.no_grad():
        packed = model(tokens, **options)
        alone = torch.cat([model(d[None]) for d in DOCUMENTS], dim=1)
    return float((packed - alone).abs().max())


def padded_vs_alone(model, *, positions_from_padding: bool = False, drop_mask: bool = False) -> float:
    width = max(len(p) for p in PROMPTS)
    batch = torch.zeros(len(PROMPTS), width, dtype=torch.long)
    mask = torch.zeros(len(PROMPTS), width, dtype=torch.bool)
    for row, p in enumerate(PROMPTS):
        batch[row, width - len(p):], mask[row, width - len(p):] = p, True
    positions = torch.arange(width).expand(len(PROMPTS), -1) if positions_from_padding else \
        (mask.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        last = model(batch, positions=positions, padding_mask=None if drop_mask else mask)[:, -1]
        alone = torch.stack([model(p[None])[0, -1] for p in PROMPTS])
    return float((last - alone).abs().max())


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_packed_row_equals_each_document_alone(name):
    assert packed_vs_alone(make_model(name).double()) <= 1e-9


@pytest.mark.parametrize("name", SEQUENCE_ENCODERS)
def test_left_padded_batch_equals_each_prompt_alone(name):
    assert padded_vs_alone(make_model(name).double()) <= 1e-9


@pytest.mark.parametrize("name", ["rope", "alibi", "cope", "nope"])
def test_broken_attention_across_documents_is_caught(name):
    assert packed_vs_alone(make_model(name).double(), drop_document_ids=True) > 1e-3


@pytest.mark.parametrize("name", ["learned", "sinusoidal", "bam_ssmax"])
def test_broken_positions_counted_across_documents_are_caught(name):
    """Absolute encodings (and BAM-SSMax's log n) see the shift; relative ones are rightly indifferent."""
    assert packed_vs_alone(make_model(name).double(), global_positions=True) > 1e-3


@pytest.mark.parametrize("name", ["learned", "sinusoidal"])
def test_broken_positions_counted_from_the_padding_are_caught(name):
    assert padded_vs_alone(make_model(name).double(), positions_from_padding=True) > 1e-3


@pytest.mark.parametrize("name", ["rope", "alibi", "cope", "nope"])
def test_broken_padding_mask_dropped_is_caught(name):
    assert padded_vs_alone(make_model(name).double(), drop_mask=True) > 1e-3
