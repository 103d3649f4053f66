"""The Q/K learning-rate rule (Anson & Aitchison 2025) on hand-set weights; Lightning callbacks."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
import torch.nn.functional as F

import pe_toolkit as pet
from pe_toolkit.nn.latent_attention import MultiHeadLatentAttention
from pe_toolkit.training.callbacks import AttentionLogitMonitor, QKLearningRateCallback
from pe_toolkit.training.qk_learning_rate import (
    QKLearningRateRule,
    QKPair,
    attach_qk_learning_rates,
    qk_logit_factors,
    qk_weight_pairs,
)


def hand_set_attention() -> pet.MultiHeadAttention:
    """One head, dim 2: W_Q = diag(3, 1) (spectral 3, Frobenius sqrt 10), W_K = diag(2, 0.5) (2, sqrt 4.25)."""
    attn = pet.MultiHeadAttention(2, 1).double()
    with torch.no_grad():
        attn.q_proj.weight.copy_(torch.diag(torch.tensor([3.0, 1.0])))
        attn.k_proj.weight.copy_(torch.diag(torch.tensor([2.0, 0.5])))
    return attn


def sgd_step(attn, rule=None, lr=0.1):
    optimizer = torch.optim.SGD([attn.q_proj.weight, attn.k_proj.weight], lr=lr)
    if rule is not None:
        rule.attach(optimizer)
    before_q, before_k = attn.q_proj.weight.detach().clone(), attn.k_proj.weight.detach().clone()
    attn.q_proj.weight.grad = torch.ones(2, 2, dtype=torch.float64)
    attn.k_proj.weight.grad = torch.ones(2, 2, dtype=torch.float64)
    optimizer.step()
    return attn.q_proj.weight.detach() - before_q, attn.k_proj.weight.detach() - before_k


@pytest.mark.parametrize(("norm", "norm_q", "norm_k"), [("spectral", 3.0, 2.0), ("frobenius", 10**0.5, 4.25**0.5)])
def test_hand_set_example_gives_the_stated_ratios(norm, norm_q, norm_k):
    attn = hand_set_attention()
    rule = QKLearningRateRule(attn, norm=norm, reference=1.0)
    delta_q, delta_k = sgd_step(attn, rule, lr=0.1)
    # SGD: delta = -lr_eff * grad with grad = 1, so the effective learning rates are read off directly
    torch.testing.assert_close(delta_q, torch.full((2, 2), -0.1 / norm_k, dtype=torch.float64))
    torch.testing.assert_close(delta_k, torch.full((2, 2), -0.1 / norm_q, dtype=torch.float64))
    assert (delta_q / delta_k)[0, 0].item() == pytest.approx(norm_q / norm_k)  # eta_Q / eta_K = ||W_Q|| / ||W_K||
    assert rule.multipliers[".query"].item() == pytest.approx(1 / norm_k)


def test_default_reference_starts_at_one_and_follows_the_norms():
    attn = hand_set_attention()
    rule = QKLearningRateRule(attn)  # c = the partner norms at the first step
    optimizer = torch.optim.SGD([attn.q_proj.weight, attn.k_proj.weight], lr=0.1)
    rule.attach(optimizer)
    for p in (attn.q_proj.weight, attn.k_proj.weight):
        p.grad = torch.zeros_like(p)
    optimizer.step()
    assert rule.multipliers[".query"].item() == pytest.approx(1.0)
    assert rule.multipliers[".key"].item() == pytest.approx(1.0)
    with torch.no_grad():
        attn.k_proj.weight.mul_(4.0)  # ||W_K|| 2 -> 8: eta_Q drops to 1/4
        attn.q_proj.weight.mul_(0.5)  # ||W_Q|| 3 -> 1.5: eta_K doubles
    optimizer.step()
    assert rule.multipliers[".query"].item() == pytest.approx(0.25)
    assert rule.multipliers[".key"].item() == pytest.approx(2.0)


def test_every_keeps_multipliers_between_recomputations():
    attn = hand_set_attention()
    rule = QKLearningRateRule(attn, reference=1.0, every=3)
    optimizer = torch.optim.SGD([attn.q_proj.weight, attn.k_proj.weight], lr=0.0)
    rule.attach(optimizer)
    for p in (attn.q_proj.weight, attn.k_proj.weight):
        p.grad = torch.zeros_like(p)
    optimizer.step()
    with torch.no_grad():
        attn.k_proj.weight.mul_(2.0)
    optimizer.step()  # step 1: not recomputed
    assert rule.multipliers[".query"].item() == pytest.approx(0.5)
    optimizer.step()
    optimizer.step()  # step 3: recomputed
    assert rule.multipliers[".query"].item() == pytest.approx(0.25)


def test_head_granularity_with_gqa():
    # 4 query heads, 2 key heads, head_dim 1, input dim 4: each head's block is one row, norm = |row|
    query = torch.nn.Parameter(torch.tensor([[1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 3.0, 0], [0, 0, 0, 4.0]]))
    key = torch.nn.Parameter(torch.tensor([[5.0, 0, 0, 0], [0, 0, 10.0, 0]]))
    rule = QKLearningRateRule([QKPair("p", query, key, 4, 2)], granularity="head", norm="frobenius", reference=1.0)
    rule.update_multipliers()
    torch.testing.assert_close(rule.multipliers["p.query"], torch.tensor([1 / 5, 1 / 5, 1 / 10, 1 / 10],
                                                                          dtype=torch.float64))
    torch.testing.assert_close(rule.multipliers["p.key"], torch.tensor([1 / 2, 1 / 4], dtype=torch.float64))
    optimizer = torch.optim.SGD([query, key], lr=1.0)
    rule.attach(optimizer)
    query.grad, key.grad = torch.ones_like(query), torch.ones_like(key)
    before = query.detach().clone()
    optimizer.step()
    torch.testing.assert_close(query.detach() - before, -torch.tensor([0.2, 0.2, 0.1, 0.1])[:, None].expand(4, 4))


def test_adamw_with_rule_equals_adamw_with_scaled_param_group_lr():
    torch.manual_seed(0)
    attn = pet.MultiHeadAttention(8, 2).double()
    twin = pet.MultiHeadAttention(8, 2).double()
    twin.load_state_dict(attn.state_dict())
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    opt = torch.optim.AdamW(attn.parameters(), lr=0.05, weight_decay=0.1)
    rule = QKLearningRateRule(attn, reference=1.5).attach(opt)
    groups = [
        {"params": [twin.q_proj.weight]}, {"params": [twin.k_proj.weight]},
        {"params": [twin.v_proj.weight, twin.o_proj.weight]},
    ]
    twin_opt = torch.optim.AdamW(groups, lr=0.05, weight_decay=0.1)
    for _ in range(3):
        spectral = lambda w: torch.linalg.matrix_norm(w.detach(), ord=2).item()  # noqa: E731
        twin_opt.param_groups[0]["lr"] = 0.05 * 1.5 / spectral(twin.k_proj.weight)
        twin_opt.param_groups[1]["lr"] = 0.05 * 1.5 / spectral(twin.q_proj.weight)
        for module, optimizer in ((attn, opt), (twin, twin_opt)):
            optimizer.zero_grad()
            module(x).pow(2).mean().backward()
            optimizer.step()
    for a, b in zip(attn.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b)
    assert rule.steps == 3


def test_pairs_of_mha_and_mla():
    mha = pet.MultiHeadAttention(16, 4, num_kv_heads=2)
    (pair,) = qk_weight_pairs(mha)
    assert pair.query is mha.q_proj.weight and pair.key is mha.k_proj.weight and pair.key_heads == 2
    mla = MultiHeadLatentAttention(16, 4, latent_dim=6, rope_head_dim=2, rope_heads=1)
    nope, rope = qk_weight_pairs(mla)
    assert nope.query is mla.q_nope_proj.weight and nope.key is mla.k_up.weight
    assert rope.query is mla.q_rope_proj.weight and rope.key is mla.k_rope_proj.weight and rope.key_heads == 1
    rule = QKLearningRateRule(mla, granularity="head", reference=1.0)
    rule.update_multipliers()
    assert rule.multipliers[".rope.key"].shape == (1,) and rule.multipliers[".rope.query"].shape == (4,)


def fro(p) -> float:
    return torch.linalg.matrix_norm(p.detach().double(), ord="fro").item()


def test_rule_covers_every_factor_of_an_mla_logit_q_down_and_kv_down():
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(8, 2, latent_dim=6, rope_head_dim=2, nope_head_dim=4, query_latent_dim=5).double()
    q_down, kv_down = mla.q_down.weight, mla.kv_down.weight
    qn, ku, qr, kr = (mla.q_nope_proj.weight, mla.k_up.weight, mla.q_rope_proj.weight, mla.k_rope_proj.weight)
    assert [f.name for f in qk_logit_factors(mla)] == [".q_down", ".kv_down"]
    rule = QKLearningRateRule(mla, norm="frobenius", reference=1.0)
    rule.update_multipliers()
    # q_down feeds an RMSNorm and enters both terms: c ||W_DQ|| / (||W_UQ|| ||W_UK|| + ||W_QR|| ||W_KR||)
    assert rule.multipliers[".q_down"].item() == pytest.approx(fro(q_down) / (fro(qn) * fro(ku) + fro(qr) * fro(kr)))
    assert rule.multipliers[".kv_down"].item() == pytest.approx(fro(kv_down) / (fro(qn) * fro(ku)))
    assert rule.multipliers[".nope.query"].item() == pytest.approx(1 / fro(ku))  # normed latents carry no scale
    # the step each factor takes is the base step times its multiplier (SGD, grad = 1)
    optimizer = torch.optim.SGD(mla.parameters(), lr=0.1)
    rule.attach(optimizer)
    for p in mla.parameters():
        p.grad = torch.ones_like(p)
    before = {"q_down": q_down.detach().clone(), "kv_down": kv_down.detach().clone()}
    expected = {k: rule.multipliers[f".{k}"].item() for k in before}
    optimizer.step()
    for name, param in (("q_down", q_down), ("kv_down", kv_down)):
        torch.testing.assert_close(param.detach() - before[name], torch.full_like(param, -0.1 * expected[name]))
    # factors="pairs" leaves the down-projections at the base rate
    assert set(QKLearningRateRule(mla, factors="pairs", reference=1.0).factors) == set()
    with pytest.raises(ValueError, match="factors must be one of"):
        QKLearningRateRule(mla, factors="some")


def test_without_latent_norm_kv_down_carries_scale_into_the_pairs():
    torch.manual_seed(1)
    mla = MultiHeadLatentAttention(8, 2, latent_dim=6, rope_head_dim=2, nope_head_dim=4, latent_norm=False).double()
    qn, ku, kv_down = mla.q_nope_proj.weight, mla.k_up.weight, mla.kv_down.weight
    rule = QKLearningRateRule(mla, norm="frobenius", reference=1.0)
    rule.update_multipliers()
    assert rule.multipliers[".nope.query"].item() == pytest.approx(1 / (fro(ku) * fro(kv_down)))
    assert rule.multipliers[".nope.key"].item() == pytest.approx(1 / (fro(qn) * fro(kv_down)))  # its own upstream too
    assert rule.multipliers[".kv_down"].item() == pytest.approx(1 / (fro(qn) * fro(ku)))
    assert rule.multipliers[".rope.query"].item() == pytest.approx(1 / fro(mla.k_rope_proj.weight))
    # with the default reference the multipliers start at 1 and follow the norms: k_up x 2 halves kv_down's
    rule = QKLearningRateRule(mla, norm="frobenius")
    rule.update_multipliers()
    with torch.no_grad():
        ku.mul_(2.0)
    rule.update_multipliers()
    assert rule.multipliers[".kv_down"].item() == pytest.approx(0.5)
    assert rule.multipliers[".nope.query"].item() == pytest.approx(0.5)


def test_bad_rule_arguments():
    attn = hand_set_attention()
    with pytest.raises(ValueError, match="norm must be one of"):
        QKLearningRateRule(attn, norm="nuclear")
    with pytest.raises(ValueError, match="granularity must be one of"):
        QKLearningRateRule(attn, granularity="row")
    with pytest.raises(ValueError, match="reference must be None or a number > 0"):
        QKLearningRateRule(attn, reference=0.0)
    with pytest.raises(ValueError, match="every must be >= 1"):
        QKLearningRateRule(attn, every=0)
    with pytest.raises(ValueError, match="no query/key weight pairs"):
        QKLearningRateRule(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="does not hold the query/key weights"):
        QKLearningRateRule(attn).attach(torch.optim.SGD([attn.v_proj.weight], lr=0.1))
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        QKLearningRateRule(attn).attach("adam")
    with pytest.raises(ValueError, match="must divide query_heads"):
        QKPair("p", torch.nn.Parameter(torch.ones(3, 2)), torch.nn.Parameter(torch.ones(2, 2)), 3, 2)
    with torch.no_grad():
        attn.k_proj.weight.zero_()
    with pytest.raises(ValueError, match="norm 0"):
        attach_qk_learning_rates(torch.optim.SGD(attn.parameters(), lr=0.1), attn).update_multipliers()
    with pytest.raises(TypeError, match="unknown option"):
        QKLearningRateCallback(lr=0.1)


class TinyLM(L.LightningModule):
    def __init__(self, attention: str) -> None:
        super().__init__()
        options = {"latent_dim": 8, "rope_head_dim": 4} if attention == "mla" else {}
        self.model = pet.Transformer(pet.TransformerConfig(vocab_size=20, dim=16, num_heads=2, num_layers=2,
                                                           attention=attention, latent_options=options))

    def training_step(self, batch, batch_idx):
        tokens = batch[0]
        logits = self.model(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


def test_lightning_callbacks_apply_the_rule_and_record_max_logits(tmp_path):
    L.seed_everything(0)
    module = TinyLM("mla")  # MLA: both pairs (nope and rope); the MHA rule is checked against AdamW above
    initial = copy.deepcopy(module.model).eval()
    data = torch.utils.data.TensorDataset(torch.randint(0, 20, (12, 9)))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    qk = QKLearningRateCallback()
    monitor = AttentionLogitMonitor(every_n_steps=2)
    trainer = L.Trainer(max_steps=3, callbacks=[qk, monitor], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                        log_every_n_steps=1)
    trainer.fit(module, loader)
    assert qk.rule.steps == 3 and qk.rule._handles == []  # detached after the fit
    assert all(torch.isfinite(m).all() and (m > 0).all() for m in qk.rule.multipliers.values())
    assert [step for step, _ in monitor.history] == [0, 2]
    # step 0: the largest visible logit per layer of the untrained model on the first batch
    tokens = next(iter(loader))[0][:, :-1]
    inputs = []
    hooks = [b.attn.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for b in initial.blocks]
    with torch.no_grad():
        initial(tokens)
        expected = [
            b.attn.attention_logits(x, q_pos=torch.arange(8), encoding=initial.encodings[0]).amax().item()
            for b, x in zip(initial.blocks, inputs)
        ]
    for hook in hooks:
        hook.remove()
    assert monitor.history[0][1] == pytest.approx(expected, rel=1e-5)
