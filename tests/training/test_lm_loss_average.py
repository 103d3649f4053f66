"""``LanguageModelModule(loss_average=...)``: token- vs row-averaged next-token loss, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from pe_toolkit.training import LanguageModelModule


class _FixedLogits(torch.nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = logits

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.logits


def _module_with_logits(logits: torch.Tensor, loss_average: str) -> LanguageModelModule:
    module = LanguageModelModule(vocab_size=3, dim=8, num_heads=1, num_layers=1, loss_average=loss_average)
    module.model = _FixedLogits(logits)
    return module


# Two rows over a 3-symbol vocabulary: row 0 scores one token, row 1 scores three, row 2 none.
LOGITS = torch.log(torch.tensor([
    [[0.5, 0.25, 0.25], [1 / 3, 1 / 3, 1 / 3], [1 / 3, 1 / 3, 1 / 3]],
    [[0.5, 0.5, 0.0], [0.25, 0.25, 0.5], [0.1, 0.8, 0.1]],
    [[1 / 3, 1 / 3, 1 / 3], [1 / 3, 1 / 3, 1 / 3], [1 / 3, 1 / 3, 1 / 3]],
], dtype=torch.float64))
TARGETS = torch.tensor([[0, -100, -100], [1, 2, 1], [-100, -100, -100]])
BATCH = {"input_ids": torch.zeros(3, 3, dtype=torch.long), "targets": TARGETS}
ROW0 = -math.log(0.5)
ROW1 = (-math.log(0.5) - math.log(0.5) - math.log(0.8)) / 3


def test_token_average_weighs_every_scored_token_equally():
    loss = _module_with_logits(LOGITS, "tokens").answer_loss(BATCH)
    assert loss.item() == pytest.approx((ROW0 + 3 * ROW1) / 4, abs=1e-12)


def test_row_average_weighs_every_scored_row_equally_and_skips_empty_rows():
    loss = _module_with_logits(LOGITS, "rows").answer_loss(BATCH)
    assert loss.item() == pytest.approx((ROW0 + ROW1) / 2, abs=1e-12)


def test_row_average_equals_token_average_when_rows_score_equally_many_tokens():
    logits = torch.randn(4, 5, 7, dtype=torch.float64)
    batch = {"input_ids": torch.zeros(4, 5, dtype=torch.long), "targets": torch.randint(0, 7, (4, 5))}
    tokens = _module_with_logits(logits, "tokens").answer_loss(batch)
    rows = _module_with_logits(logits, "rows").answer_loss(batch)
    torch.testing.assert_close(rows, tokens)


def test_row_average_gradient_float64():
    logits = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([[1, -100, -100], [0, 3, 2]])
    module = LanguageModelModule(vocab_size=4, dim=8, num_heads=1, num_layers=1, loss_average="rows")

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        module.model = _FixedLogits(x)
        return module.answer_loss({"input_ids": torch.zeros(2, 3, dtype=torch.long), "targets": targets})

    assert torch.autograd.gradcheck(loss_of, (logits,))


def test_row_average_without_any_scored_token_is_an_error():
    batch = {"input_ids": torch.zeros(1, 3, dtype=torch.long), "targets": torch.full((1, 3), -100)}
    with pytest.raises(ValueError, match="no scored token"):
        _module_with_logits(LOGITS[:1], "rows").answer_loss(batch)


def test_unknown_loss_average_is_rejected():
    with pytest.raises(ValueError, match="loss_average must be one of .*'sum'"):
        LanguageModelModule(dim=8, num_heads=1, num_layers=1, loss_average="sum")
