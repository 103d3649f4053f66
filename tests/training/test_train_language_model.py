"""``train_language_model`` / ``validation_loss``: the LanguageModelModule recipe around a model built elsewhere."""

import math

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.data import ByteLMDataModule, sequential_windows
from pe_toolkit.training.lm_text_module import train_language_model, validation_loss


def tiny_model(seed: int = 0) -> pet.Transformer:
    torch.manual_seed(seed)
    return pet.Transformer(pet.TransformerConfig(vocab_size=256, dim=16, num_heads=2, num_layers=1, causal=True,
                                                 encoding="rope"))


@pytest.fixture(scope="module")
def data():
    module = ByteLMDataModule(context=16, batch_size=4, steps_per_epoch=6, max_bytes=20_000, seed=0)
    module.setup()
    return module


def test_trains_the_given_model_in_place_and_reproducibly(data):
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    module, losses = train_language_model(model, data, lr=3e-3, steps=6, seed=1)
    state = torch.random.get_rng_state()
    assert module.model is model and len(losses) == 6 and all(math.isfinite(x) for x in losses)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert module.hparams.betas == (0.9, 0.95) and module.hparams.warmup_steps == 1
    train_language_model(tiny_model(), data, lr=3e-3, steps=2, seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)  # what the fit draws does not leak out
    _, again = train_language_model(tiny_model(), data, lr=3e-3, steps=6, seed=1)
    assert again == losses  # same seed, same start: the same run
    with pytest.raises(ValueError, match="steps must be an int >= 1, got 0"):
        train_language_model(tiny_model(), data, lr=3e-3, steps=0)


class _Uniform(torch.nn.Module):
    """Equal logits for every byte: the loss is ln 256 exactly."""

    def __init__(self, fill: float = 0.0) -> None:
        super().__init__()
        self.fill = fill

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.full((*ids.shape, 256), self.fill)


def test_validation_loss_is_the_mean_cross_entropy_and_inf_when_diverged(data):
    module, _ = train_language_model(tiny_model(), data, lr=1e-3, steps=1)
    windows = sequential_windows(data.val_bytes, 16, 5)
    logits = module.model(windows[:, :-1])
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), windows[:, 1:].reshape(-1))
    assert validation_loss(module, windows, batch_size=2) == pytest.approx(float(expected), rel=1e-5)
    module.model = _Uniform()
    assert validation_loss(module, windows) == pytest.approx(math.log(256))
    module.model = _Uniform(float("nan"))
    assert validation_loss(module, windows) == math.inf
