"""Inputs that used to fail deep inside torch (or not at all) now raise errors that name them (issue 29)."""

from __future__ import annotations

import lightning as L
import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.conversion import calibration_pair_scores
from pe_toolkit.nn import MultiHeadLatentAttention
from pe_toolkit.training.callbacks import NonFiniteStop
from pe_toolkit.training.qk_learning_rate import QKLearningRateRule


def tiny_model(**overrides) -> pet.Transformer:
    return pet.Transformer(pet.TransformerConfig(vocab_size=11, dim=16, num_heads=2, num_layers=1, encoding="rope",
                                                 **overrides))


@pytest.mark.parametrize("bad", [11, 50, -1])
def test_token_ids_outside_the_vocabulary_name_the_range(bad):
    model = tiny_model()
    with pytest.raises(ValueError, match=rf"tokens must be ids in \[0, vocab_size=11\), got values from .*{bad}"):
        model(torch.tensor([[1, 2, bad]]))
    model(torch.tensor([[0, 10]]))  # the bounds themselves are fine


def test_a_row_of_only_padding_is_an_error():
    model = tiny_model()
    mask = torch.tensor([[True, True, False], [False, False, False]])
    with pytest.raises(ValueError, match=r"key_padding_mask: every row needs at least one real key.*rows \[1\]"):
        model(torch.tensor([[1, 2, 3], [4, 5, 6]]), padding_mask=mask)
    attn = pet.MultiHeadAttention(16, 2, causal=False)
    with pytest.raises(ValueError, match="at least one real key"):
        attn(torch.randn(1, 3, 16), key_padding_mask=torch.zeros(1, 3, dtype=torch.bool))


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nan_features_are_refused_by_the_transformer_and_mla(value):
    x = torch.randn(1, 4, 16)
    x[0, 2, 3] = value
    with pytest.raises(ValueError, match=r"x holds NaN or inf values \(1 of 64 entries\)"):
        tiny_model().forward_features(x)
    mla = MultiHeadLatentAttention(16, 2, latent_dim=8, rope_head_dim=4)
    with pytest.raises(ValueError, match="MultiHeadLatentAttention: x holds NaN or inf"):
        mla(x)


def test_mha2mla_with_an_empty_calibration_set():
    with pytest.raises(ValueError, match=r"tokens: the calibration set is empty \(shape \(0, 8\)\)"):
        calibration_pair_scores(tiny_model(), torch.zeros(0, 8, dtype=torch.long))


def test_qk_rule_on_a_nan_weight_names_the_problem():
    attn = pet.MultiHeadAttention(16, 2, causal=True)
    rule = QKLearningRateRule(attn)
    optimizer = torch.optim.SGD(attn.parameters(), lr=0.1)
    rule.attach(optimizer)
    with torch.no_grad():
        attn.q_proj.weight[0, 0] = float("nan")
    for p in attn.parameters():
        p.grad = torch.zeros_like(p)
    with pytest.raises(ValueError, match=r"needs finite weights: a \(16, 16\) Q/K weight holds NaN or inf"):
        optimizer.step()


class Blowup(L.LightningModule):
    """Trains a linear model whose loss becomes NaN at step ``nan_at`` (its weight is set to NaN)."""

    def __init__(self, nan_at: int):
        super().__init__()
        self.layer, self.nan_at = torch.nn.Linear(2, 1), nan_at

    def training_step(self, batch, batch_idx):
        if self.global_step == self.nan_at:
            with torch.no_grad():
                self.layer.weight.fill_(float("nan"))
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.randn(32, 2), batch_size=2)


def _trainer(callback):
    return L.Trainer(max_steps=10, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])


def test_non_finite_stop_names_the_step():
    # steps count from 1: the weights go NaN during the 4th step (global_step 3 -> 4)
    with pytest.raises(FloatingPointError, match="NonFiniteStop: non-finite loss nan at step 4"):
        _trainer(NonFiniteStop()).fit(Blowup(nan_at=3))
    quiet = NonFiniteStop(raise_error=False)
    trainer = _trainer(quiet)
    trainer.fit(Blowup(nan_at=5))
    assert quiet.failure == "non-finite loss nan at step 6" and trainer.global_step == 6
    with pytest.raises(ValueError, match="weights_every_n_steps"):
        NonFiniteStop(weights_every_n_steps=0)
