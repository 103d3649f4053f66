"""LossHistory: window means of the training loss, the printed lines, its checkpoint state and its argument check."""

from __future__ import annotations

import io

import lightning as L
import pytest
import torch

from pe_toolkit.training.callbacks import LossHistory


class StepLoss(L.LightningModule):
    """A module whose training loss at step s is exactly s (plus a zero that carries a gradient)."""

    def __init__(self, skip_batches: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.skip_batches = skip_batches

    def training_step(self, batch, batch_idx):
        if batch_idx in self.skip_batches:
            return None  # Lightning skips the optimizer step
        return (self.weight * 0).sum() + float(self.global_step)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def fit(history: LossHistory, steps: int, module: StepLoss | None = None) -> None:
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(32, 1)), batch_size=1)
    trainer = L.Trainer(max_steps=steps, callbacks=[history], logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.fit(module or StepLoss(), loader)


def test_window_means_and_the_last_partial_window():
    history = LossHistory(every_n_steps=3)
    fit(history, steps=7)  # losses 0..6
    assert history.history == [(3, 1.0), (6, 4.0), (7, 6.0)]


def test_a_skipped_step_adds_nothing():
    history = LossHistory(every_n_steps=1)
    # batch 0 returns None; Lightning still counts it as step 1, so batches 1 and 2 have losses 1 and 2
    fit(history, steps=3, module=StepLoss(skip_batches=(0,)))
    assert history.history == [(2, 1.0), (3, 2.0)]


def test_prints_each_window_to_the_stream():
    stream = io.StringIO()
    fit(LossHistory(every_n_steps=2, label="copy nope", stream=stream), steps=4)
    assert stream.getvalue().splitlines() == ["copy nope step 2/4: loss 0.5000", "copy nope step 4/4: loss 2.5000"]


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_rejects_a_bad_window(bad):
    with pytest.raises((ValueError, TypeError), match="every_n_steps"):
        LossHistory(every_n_steps=bad)


def test_checkpoint_state_round_trips_the_history_and_the_open_window():
    history = LossHistory(every_n_steps=3)
    fit(history, steps=3)  # one full window, (3, 1.0)
    history._window = [3.0, 4.0]  # two steps into the next window when the checkpoint is taken
    resumed = LossHistory(every_n_steps=3)
    resumed.load_state_dict(history.state_dict())
    assert resumed.history == [(3, 1.0)] and resumed._window == [3.0, 4.0]
