"""QK-clip (Kimi K2, arXiv:2507.20534) on hand-computed logits; MLA's K2 form; GQA; the Lightning callback."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.nn.latent_attention import MultiHeadLatentAttention
from pe_toolkit.training.callbacks import QKClipCallback
from pe_toolkit.training.qk_clip import clip_factors, head_max_logits, qk_clip_

D = torch.float64


def hand_set_attention() -> pet.MultiHeadAttention:
    """One head, dim 2, NoPE: W_Q = diag(3, 1), W_K = diag(2, 0.5). On x = I the largest logit is 3 * 2 / sqrt(2)."""
    attn = pet.MultiHeadAttention(2, 1, causal=False).double()
    with torch.no_grad():
        attn.q_proj.weight.copy_(torch.diag(torch.tensor([3.0, 1.0])))
        attn.k_proj.weight.copy_(torch.diag(torch.tensor([2.0, 0.5])))
    return attn


X = torch.eye(2, dtype=D)[None]  # (1, 2, 2): tokens e_1, e_2


def test_hand_computed_clip_scales_by_sqrt_gamma_and_caps_the_logit():
    attn = hand_set_attention()
    s_max = head_max_logits(attn, X)
    assert s_max.item() == pytest.approx(6 / math.sqrt(2))  # q_1 . k_1 / sqrt(2) = (3 * 2) / sqrt(2)
    gamma = qk_clip_(attn, s_max, tau=3.0)
    assert gamma.item() == pytest.approx(3.0 / (6 / math.sqrt(2)))  # = sqrt(2) / 2
    factor = math.sqrt(math.sqrt(2) / 2)
    torch.testing.assert_close(attn.q_proj.weight, torch.diag(torch.tensor([3.0, 1.0], dtype=D)) * factor)
    torch.testing.assert_close(attn.k_proj.weight, torch.diag(torch.tensor([2.0, 0.5], dtype=D)) * factor)
    assert head_max_logits(attn, X).item() == pytest.approx(3.0)
    # below tau nothing changes
    before = attn.q_proj.weight.clone()
    assert qk_clip_(attn, head_max_logits(attn, X), tau=5.0).item() == 1.0
    assert torch.equal(attn.q_proj.weight, before)


def test_only_heads_above_tau_are_clipped_and_gqa_keeps_each_heads_gamma():
    torch.manual_seed(0)
    attn = pet.MultiHeadAttention(8, 4, num_kv_heads=2, causal=True).double()
    with torch.no_grad():
        attn.q_proj.weight.mul_(6.0)
    x = torch.randn(2, 5, 8, dtype=D)
    before = attn.attention_logits(x)
    s_max = head_max_logits(attn, x)
    tau = float(s_max.median())
    gamma = qk_clip_(attn, s_max, tau)
    torch.testing.assert_close(gamma, clip_factors(s_max, tau))
    assert (gamma < 1).any() and (gamma == 1).any()
    after = attn.attention_logits(x)
    visible = torch.isfinite(before)
    # every head's logits are multiplied by exactly its own gamma, shared key heads included
    torch.testing.assert_close(after[visible], (before * gamma[None, :, None, None])[visible])
    assert head_max_logits(attn, x).max().item() <= tau * (1 + 1e-12)


def test_mla_follows_kimi_k2_nope_by_sqrt_gamma_rope_query_by_gamma_shared_rope_key_untouched():
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(8, 2, latent_dim=6, rope_head_dim=2, nope_head_dim=4, query_latent_dim=6).double()
    with torch.no_grad():
        for p in (mla.q_nope_proj.weight, mla.q_rope_proj.weight):
            p.mul_(8.0)
    x = torch.randn(1, 6, 8, dtype=D)
    weights = {n: getattr(mla, n).weight.clone() for n in ("q_nope_proj", "k_up", "q_rope_proj", "k_rope_proj")}
    before = mla.attention_logits(x)
    s_max = head_max_logits(mla, x)
    tau = 0.5 * float(s_max.min())  # both heads over tau
    gamma = qk_clip_(mla, s_max, tau)
    rows = lambda g, n: g.repeat_interleave(n)[:, None]  # noqa: E731
    torch.testing.assert_close(mla.q_nope_proj.weight, weights["q_nope_proj"] * rows(gamma.sqrt(), 4))
    torch.testing.assert_close(mla.k_up.weight, weights["k_up"] * rows(gamma.sqrt(), 4))
    torch.testing.assert_close(mla.q_rope_proj.weight, weights["q_rope_proj"] * rows(gamma, 2))
    assert torch.equal(mla.k_rope_proj.weight, weights["k_rope_proj"])
    visible = torch.isfinite(before)
    torch.testing.assert_close(mla.attention_logits(x)[visible], (before * gamma[None, :, None, None])[visible])
    torch.testing.assert_close(head_max_logits(mla, x), torch.full((2,), tau, dtype=D))


def test_bad_input_is_refused_by_name():
    attn = hand_set_attention()
    with pytest.raises(ValueError, match="tau must be a finite number > 0"):
        qk_clip_(attn, torch.ones(1, dtype=D), tau=0.0)
    with pytest.raises(ValueError, match=r"max_logits must have shape \(1,\)"):
        qk_clip_(attn, torch.ones(2, dtype=D), tau=1.0)
    with pytest.raises(ValueError, match="QK-norm"):
        qk_clip_(pet.MultiHeadAttention(4, 2, qk_norm=True), torch.ones(2), tau=1.0)
    with pytest.raises(TypeError, match="MultiHeadAttention or MultiHeadLatentAttention"):
        qk_clip_(torch.nn.Linear(2, 2), torch.ones(1), tau=1.0)
    with pytest.raises(ValueError, match="measure must be one of"):
        QKClipCallback(1.0, measure="before")
    with pytest.raises(ValueError, match="tau must be"):
        QKClipCallback(float("inf"))


class OneLayer(L.LightningModule):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.attn, self.lr = hand_set_attention(), lr

    def training_step(self, batch, batch_idx):
        return self.attn(batch[0]).pow(2).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def fit(module, callback):
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X), batch_size=1)
    trainer = L.Trainer(max_steps=1, callbacks=[callback], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.fit(module, loader)


@pytest.mark.parametrize("measure", ["forward", "after_step"])
def test_callback_clips_after_the_optimizer_step(measure):
    # lr = 0: the step changes nothing, so both measures clip by the hand-computed sqrt(gamma)
    module = OneLayer(lr=0.0)
    callback = QKClipCallback(3.0, measure=measure)
    fit(module, callback)
    factor = math.sqrt(3.0 / (6 / math.sqrt(2)))
    torch.testing.assert_close(module.attn.q_proj.weight, torch.diag(torch.tensor([3.0, 1.0], dtype=D)) * factor)
    assert callback.clipped == 1 and callback.history == [(0, 1, pytest.approx(factor**2))]
    assert callback._step_hooks == [] and callback._hooks == []


def test_after_step_measure_caps_the_logit_of_the_updated_weights():
    module = OneLayer(lr=0.05)  # the SGD step moves the weights; the clip sees the moved ones
    fit(module, QKClipCallback(3.0, measure="after_step"))
    assert head_max_logits(module.attn, X).item() == pytest.approx(3.0)
