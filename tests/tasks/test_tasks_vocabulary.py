"""Vocabulary: special ids, encode/decode, batch collation for a causal LM."""

import pytest
import torch

from pe_toolkit.tasks import Example, Vocabulary, get_task


def test_special_ids_and_order():
    vocab = Vocabulary(["b", "a", "b", "<sep>"])
    assert vocab.tokens == ["<pad>", "<bos>", "<eos>", "<sep>", "b", "a"]
    assert (vocab.pad_id, vocab.bos_id, vocab.eos_id, vocab.sep_id) == (0, 1, 2, 3)
    assert len(vocab) == 6 and "a" in vocab and "z" not in vocab
    assert vocab.token_to_id("a") == 5 and vocab.id_to_token(4) == "b"


def test_encode_layout():
    vocab = Vocabulary(["x", "y", "z"])
    ex = Example(prompt=["x", "y"], answer=["z", "z"], length=2)
    ids, start = vocab.encode(ex)
    assert ids == [1, 4, 5, 3, 6, 6, 2]
    assert start == 4 and ids[start - 1] == vocab.sep_id
    assert vocab.encode_prompt(ex) == ids[:start]
    assert vocab.decode_answer([6, 6, 2, 6]) == ["z", "z"]
    assert vocab.decode_answer([6, 0, 6]) == ["z", "z"]


def test_collate_pads_and_masks_the_prompt():
    task = get_task("copy_random", train_lengths=(4, 8))
    vocab = Vocabulary(task.vocabulary())
    examples = task.generate(4, seed=0)
    batch = vocab.collate(examples)
    lengths = [len(vocab.encode(ex)[0]) for ex in examples]
    assert batch["input_ids"].shape == (4, max(lengths))
    assert batch["lengths"].tolist() == lengths
    for row, ex in enumerate(examples):
        ids, start = vocab.encode(ex)
        assert batch["input_ids"][row, : len(ids)].tolist() == ids
        assert (batch["input_ids"][row, len(ids):] == vocab.pad_id).all()
        labels = batch["labels"][row]
        assert (labels[:start] == -100).all() and (labels[len(ids):] == -100).all()
        assert labels[start : len(ids)].tolist() == ids[start:]
        assert batch["attention_mask"][row].sum().item() == len(ids)
    assert batch["answer_start"].dtype == torch.long and batch["attention_mask"].dtype == torch.bool


def test_vocabulary_errors():
    vocab = Vocabulary(["a"])
    with pytest.raises(ValueError, match="Vocabulary: unknown token 'q'"):
        vocab.encode(Example(prompt=["q"], answer=["a"], length=1))
    with pytest.raises(ValueError, match=r"Vocabulary: id must be in \[0, 4\], got 9"):
        vocab.decode([9])
    with pytest.raises(ValueError, match="non-empty and free of whitespace"):
        Vocabulary(["a b"])
    with pytest.raises(TypeError, match="tokens must be str"):
        Vocabulary([1])
    with pytest.raises(ValueError, match="examples must not be empty"):
        vocab.collate([])
