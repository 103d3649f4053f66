"""TaskDataModule and SequenceLMModule: batching, loss on answers only, exact match, a short real run."""

from __future__ import annotations

import subprocess
import sys

import lightning as L
import pytest
import torch
import torch.nn.functional as F

from pe_toolkit.training import SequenceLMModule, TaskDataModule
from pe_toolkit.training.exact_match import OUTCOMES
from pe_toolkit.training.task_data import same_prompt_length_batches


def tiny_data(**overrides):
    options = dict(task="copy_repeat", task_options={"train_lengths": [1, 4], "test_lengths": [5, 6]},
                   num_train=64, num_val=16, num_test=16, batch_size=8, seed=3)
    options.update(overrides)
    return TaskDataModule(**options)


def test_batches_group_equal_prompt_lengths():
    assert same_prompt_length_batches([3, 5, 3, 3, 5], batch_size=2) == [[0, 2], [3], [1, 4]]


def test_data_is_seeded_and_test_covers_both_splits():
    a, b = tiny_data(), tiny_data()
    assert [e.prompt for e in a.examples("train")] == [e.prompt for e in b.examples("train")]
    assert [e.prompt for e in tiny_data(seed=4).examples("train")] != [e.prompt for e in a.examples("train")]
    lengths = {e.length for e in a.examples("test")}
    assert lengths & {1, 2, 3, 4} and lengths & {5, 6} and lengths <= set(range(1, 7))
    for batch in a.test_dataloader():
        assert batch["prompt_ids"].shape[0] == batch["input_ids"].shape[0]
        assert (batch["prompt_ids"][:, -1] == a.vocab.sep_id).all()


def test_each_eval_example_once_across_ranks():
    data = tiny_data()
    groups = same_prompt_length_batches([len(data.vocab.encode_prompt(e)) for e in data.examples("test")], 8)
    from pe_toolkit.training.task_data import _ShardedBatches

    shards = [list(_ShardedBatches(list(range(len(groups))), rank, 3)) for rank in range(3)]
    assert sorted(i for shard in shards for i in shard) == list(range(len(groups)))


def test_loss_covers_answer_tokens_only():
    data = tiny_data()
    module = SequenceLMModule(data.vocab_size, dim=32, num_heads=4, num_layers=1)
    batch = next(iter(data.train_dataloader()))
    logits = module.model(batch["input_ids"])
    answer = batch["labels"][:, 1:] != -100
    expected = F.cross_entropy(logits[:, :-1][answer], batch["input_ids"][:, 1:][answer])
    torch.testing.assert_close(module.answer_loss(batch), expected)
    # every answer token and the <eos> are supervised, nothing in the prompt
    for row in range(batch["input_ids"].shape[0]):
        start, end = int(batch["answer_start"][row]), int(batch["lengths"][row])
        assert answer[row].nonzero().flatten().tolist() == list(range(start - 1, end - 1))


def test_exact_match_needs_the_whole_answer_and_eos(monkeypatch):
    data = tiny_data()
    module = SequenceLMModule(data.vocab_size, dim=32, num_heads=4, num_layers=1)
    batch = next(iter(data.test_dataloader()))
    answers = [batch["input_ids"][r, batch["answer_start"][r]: batch["lengths"][r] - 1].tolist()
               for r in range(batch["input_ids"].shape[0])]
    eos = data.vocab.eos_id

    def fake(outputs):
        width = max(len(o) for o in outputs)
        return lambda prompt_ids, n: torch.tensor([o + [0] * (width - len(o)) for o in outputs])

    monkeypatch.setattr(module, "greedy_answers", fake([a + [eos] for a in answers]))
    assert module.exact_match(batch).tolist() == [1] * len(answers)
    monkeypatch.setattr(module, "greedy_answers", fake([a for a in answers]))  # never stops
    assert module.exact_match(batch).sum() == 0
    wrong = [[(a[0] + 1) % data.vocab_size] + a[1:] + [eos] for a in answers]
    monkeypatch.setattr(module, "greedy_answers", fake(wrong))
    assert module.exact_match(batch).sum() == 0


def test_short_training_run_learns_and_reports_per_length():
    L.seed_everything(0)
    data = tiny_data(num_train=512, batch_size=32)
    module = SequenceLMModule(data.vocab_size, dim=32, num_heads=4, num_layers=2, lr=3e-3, warmup_steps=5)
    batch = next(iter(data.train_dataloader()))
    before = module.answer_loss(batch).item()
    trainer = L.Trainer(max_steps=60, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0)
    trainer.fit(module, data)
    assert module.answer_loss(batch).item() < 0.5 * before
    trainer.test(module, data, verbose=False)
    assert set(module.test_results) == {e.length for e in data.examples("test")}
    assert sum(t for _, t in module.test_results.values()) == len(data.examples("test"))
    # every answer has exactly one outcome, and the correct ones are the exact matches
    assert set(module.test_outcomes) == set(module.test_results)
    for n, (correct, total) in module.test_results.items():
        assert set(module.test_outcomes[n]) == set(OUTCOMES)
        assert sum(module.test_outcomes[n].values()) == total and module.test_outcomes[n]["correct"] == correct


def test_answer_outcomes_by_hand():
    eos = 2
    reference = [5, 6, 7]
    generated = [
        [5, 6, 7, eos, 0],  # correct
        [5, 6, eos, 0, 0],  # stopped early after a correct prefix
        [eos, 0, 0, 0, 0],  # stopped before any token: also early
        [5, 6, 7, 7, eos],  # the whole answer, then one token too many
        [5, 6, 7, 7, 7],  # the whole answer, never stopped
        [5, 9, 7, eos, 0],  # a wrong token
        [5, 9, eos, 0, 0],  # stopped early but after a wrong token: wrong
    ]
    outcomes = SequenceLMModule.answer_outcomes(generated, [reference] * len(generated), eos)
    assert [OUTCOMES[o] for o in outcomes] == ["correct", "stopped_early", "stopped_early", "ran_over", "ran_over",
                                               "wrong_tokens", "wrong_tokens"]
    assert SequenceLMModule.compare_answers(generated, [reference] * len(generated), eos) == [
        True, False, False, False, False, False, False]


@pytest.mark.slow
def test_cli_runs_ddp_on_two_cpu_processes(tmp_path):
    command = [
        sys.executable, "-m", "pe_toolkit.training.cli", "fit", "--data.task", "copy_repeat",
        "--data.num_train", "64", "--data.num_val", "16", "--data.num_test", "16", "--data.batch_size", "16",
        "--model.dim", "16", "--model.num_layers", "1", "--trainer.max_steps", "2", "--trainer.devices", "2",
        "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar", "false",
        "--trainer.default_root_dir", str(tmp_path),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "max_steps=2" in result.stdout + result.stderr


def test_seq2seq_layout_and_encoder_decoder_training():
    from pe_toolkit.training import EncoderDecoderModule

    L.seed_everything(0)
    data = tiny_data(task="contextual_counting",
                     task_options={"train_lengths": [4, 6], "test_lengths": [7, 8], "train_regions": [1, 2],
                                   "test_regions": [2, 3]},
                     num_train=256, batch_size=32, layout="seq2seq")
    batch = next(iter(data.train_dataloader()))
    assert (batch["source_ids"][:, 0] == data.vocab.bos_id).all()
    assert (batch["target_ids"][:, 0] == data.vocab.bos_id).all()
    for causal in (True, False):
        module = EncoderDecoderModule(data.vocab_size, dim=32, num_heads=2, encoder_layers=1, decoder_layers=1,
                                      encoder_causal=causal, lr=3e-3, warmup_steps=5)
        assert module.encoder.config.causal is causal and module.decoder.config.cross_attention
        before = module.answer_loss(batch).item()
        trainer = L.Trainer(max_steps=40, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, limit_val_batches=0)
        trainer.fit(module, data)
        assert module.answer_loss(batch).item() < before
        trainer.test(module, data, verbose=False)
        assert sum(t for _, t in module.test_results.values()) == len(data.examples("test"))


def test_encoder_decoder_exact_match_is_exact(monkeypatch):
    from pe_toolkit.training import EncoderDecoderModule

    data = tiny_data(layout="seq2seq")
    module = EncoderDecoderModule(data.vocab_size, dim=16, num_heads=2, encoder_layers=1, decoder_layers=1)
    batch = next(iter(data.test_dataloader()))
    references = [row[1: int(m.sum()) - 1] for row, m in zip(batch["target_ids"].tolist(), batch["target_mask"])]
    eos = data.vocab.eos_id

    def fake_generate(start, budget, **kwargs):
        rows = [[data.vocab.bos_id] + r + [eos] + [0] * (budget - len(r) - 1) for r in references]
        return torch.tensor(rows)

    monkeypatch.setattr(module.decoder, "generate", fake_generate)
    assert module.exact_match(batch).tolist() == [1] * len(references)


def test_layout_must_be_known():
    with pytest.raises(ValueError, match="layout must be"):
        tiny_data(layout="encoder")


def test_randomized_positions_in_training_only(monkeypatch):
    data = tiny_data()
    module = SequenceLMModule(data.vocab_size, dim=16, num_heads=2, num_layers=1, encoding="alibi",
                              randomized_max_position=200)
    seen = []
    original = module.model.forward

    def spy(tokens, positions=None, **kwargs):
        seen.append(positions)
        return original(tokens, positions=positions, **kwargs)

    monkeypatch.setattr(module.model, "forward", spy)
    batch = next(iter(data.train_dataloader()))
    module.train()
    module.answer_loss(batch)
    assert seen[-1].shape == batch["input_ids"].shape and (seen[-1].diff(dim=1) > 0).all()
    assert seen[-1].max() >= batch["input_ids"].shape[1]  # drawn from the larger range
    module.eval()
    module.answer_loss(batch)
    assert seen[-1] is None  # evaluation keeps arange(L)


def test_head_scale_stays_at_least_one_during_training():
    L.seed_everything(0)
    data = tiny_data(num_train=128, batch_size=32)
    module = SequenceLMModule(data.vocab_size, dim=16, num_heads=2, num_layers=1, encoding="nope_temperature",
                              encoding_options={"learned": True, "scale": 1.0}, lr=0.5, warmup_steps=1)
    trainer = L.Trainer(max_steps=8, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, limit_val_batches=0)
    trainer.fit(module, data)
    assert (module.model.encodings[0].head_scale >= 1.0).all()


def test_language_model_module_on_bytes():
    from pe_toolkit.data import ByteLMDataModule, sequential_windows
    from pe_toolkit.training import LanguageModelModule

    L.seed_everything(0)
    data = ByteLMDataModule(context=32, batch_size=8, steps_per_epoch=20, max_bytes=200_000, val_windows=8)
    module = LanguageModelModule(dim=32, num_heads=2, num_layers=1, encoding="alibi", warmup_steps=2, lr=3e-3)
    data.setup()
    windows = sequential_windows(data.val_bytes, 32, 4)
    before = module.perplexity(windows)
    assert 200 < before < 400  # an untrained byte model is close to uniform over 256 values
    trainer = L.Trainer(max_steps=20, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(module, data)
    assert module.perplexity(windows) < before / 2
    assert "val/perplexity" in trainer.callback_metrics


def test_max_sequence_length_by_split():
    """The longest encoded example of the chosen splits; test lengths 4-5 are longer than train 1-3."""
    data = TaskDataModule("copy_repeat", {"train_lengths": [1, 3], "test_lengths": [4, 5]}, num_train=64, num_val=0,
                          num_test=8, batch_size=8, seed=0)
    longest = {split: max(len(data.vocab.encode(ex)[0]) for ex in data.examples(split)) for split in ("train", "test")}
    assert data.max_sequence_length(["train"]) == longest["train"]
    assert data.max_sequence_length() == max(longest.values()) > longest["train"]
    with pytest.raises(ValueError, match=r"TaskDataModule: splits must be one of .*got 'dev'"):
        data.max_sequence_length(["dev"])
    with pytest.raises(ValueError, match=r"no examples in splits \['val'\]"):
        data.max_sequence_length(["val"])
    with pytest.raises(TypeError, match=r"splits must be a sequence of split names, got the string 'train'"):
        data.max_sequence_length("train")
