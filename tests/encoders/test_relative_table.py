"""The relative-distance table: bias encoders that depend on ``j - i`` evaluate their formula once per
distance and gather, and must give exactly what evaluating it on every pair gives."""

from __future__ import annotations

import pytest
import torch

import pe_toolkit as pet
from pe_toolkit.encoders.base import relative_distance, relative_distance_table
from pe_toolkit.encoders.bias import t5_relative_position_bucket


@pytest.mark.parametrize(
    "q_pos, k_pos",
    [
        (torch.arange(5, 9), torch.arange(0, 12)),  # a query block of a longer sequence
        (torch.arange(3), torch.arange(3)),
        (torch.tensor([[0, 1, 2], [4, 5, 6]]), torch.tensor([[0, 1, 2], [4, 5, 6]])),  # batched
        (torch.tensor([7, 2, 9]), torch.tensor([1, 0, 3, 2])),  # unordered, but within range
    ],
)
def test_table_gathers_every_relative_distance(q_pos, k_pos):
    distances, index = relative_distance_table(q_pos, k_pos)
    assert torch.equal(distances[index], relative_distance(q_pos, k_pos))
    lo = int(k_pos.min()) - int(q_pos.max())
    assert torch.equal(distances, torch.arange(lo, int(k_pos.max()) - int(q_pos.min()) + 1))


def test_contiguous_block_needs_lq_plus_lk_minus_one_distances():
    distances, index = relative_distance_table(torch.arange(1024, 1536), torch.arange(2048))
    assert distances.numel() == 512 + 2048 - 1 and index.shape == (512, 2048)


def test_no_table_for_float_or_scattered_positions():
    assert relative_distance_table(torch.arange(4.0), torch.arange(4.0)) is None
    assert relative_distance_table(torch.tensor([0, 10_000]), torch.tensor([0, 10_000])) is None
    assert relative_distance_table(torch.arange(0), torch.arange(3)) is None


def _encoder(name, **options):
    torch.manual_seed(0)
    enc = pet.get_encoder(name, 32, 4, **options).double()
    with torch.no_grad():  # move every learned parameter off its initial value
        for p in enc.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return enc


@pytest.mark.parametrize(
    "name, options",
    [
        ("bam", {}), ("bam_ssmax", {}), ("kerple", {"variant": "log"}), ("kerple", {"variant": "power"}),
        ("sandwich", {}),
    ],
)
def test_table_path_equals_the_pairwise_formula_exactly(name, options):
    enc = _encoder(name, **options)
    q_pos, k_pos = torch.arange(40, 72), torch.arange(0, 96)
    with torch.no_grad():
        tabulated = enc.position_bias(q_pos, k_pos, torch.float64)
        pairwise = enc.position_bias(q_pos.double(), k_pos.double(), torch.float64)  # float positions: no table
    assert tabulated.shape == (1, 4, 32, 96)
    assert torch.equal(tabulated, pairwise)
    batched = torch.stack([torch.arange(0, 20), torch.arange(7, 27)])  # (B, L): rows with other positions
    with torch.no_grad():
        tabulated = enc.position_bias(batched, batched, torch.float64)
        pairwise = enc.position_bias(batched.double(), batched.double(), torch.float64)
    assert tabulated.shape == (2, 4, 20, 20)
    assert torch.equal(tabulated, pairwise)


def test_t5_table_path_equals_bucketing_every_pair():
    enc = _encoder("t5")
    q_pos, k_pos = torch.arange(100, 164), torch.arange(0, 300)
    buckets = t5_relative_position_bucket(relative_distance(q_pos, k_pos), bidirectional=False)
    expected = enc.relative_attention_bias(buckets).movedim(-1, 0).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(enc.position_bias(q_pos, k_pos, torch.float64), expected.detach())


class _PositionBias(torch.nn.Module):
    """``position_bias`` as a module call, so ``torch.func.functional_call`` can swap the parameters."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, q_pos, k_pos):
        return self.encoder.position_bias(q_pos, k_pos, torch.float64)


@pytest.mark.parametrize("name, options", [("bam", {}), ("kerple", {"variant": "power"}), ("t5", {})])
def test_table_path_gradients_float64(name, options):
    call = _PositionBias(_encoder(name, **options))
    names = [n for n, p in call.named_parameters() if p.requires_grad]
    q_pos, k_pos = torch.arange(3, 7), torch.arange(0, 9)
    weights = torch.randn(1, 4, 4, 9, dtype=torch.float64)

    def loss(positions, *values):
        return (torch.func.functional_call(call, dict(zip(names, values)), positions) * weights).sum()

    values = tuple(p.detach().clone().requires_grad_(True) for n, p in call.named_parameters() if n in names)
    assert torch.autograd.gradcheck(lambda *v: loss((q_pos, k_pos), *v), values)
    if name != "t5":  # the gather's gradients equal those of the pairwise formula (t5 takes integers only)
        tabulated = torch.autograd.grad(loss((q_pos, k_pos), *values), values)
        pairwise = torch.autograd.grad(loss((q_pos.double(), k_pos.double()), *values), values)
        for a, b in zip(tabulated, pairwise):
            torch.testing.assert_close(a, b)
