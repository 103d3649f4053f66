"""Graph models (GIN, GPS) with every PE choice, the Lightning module, the data module and the metrics."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch
from torch_geometric.data import Batch, Data
from torch_geometric.nn import GPSConv
from torch_geometric.transforms import Compose

from pe_toolkit.domains.graphs import CSLDataset, LaplacianEigenvectorPE, RandomFeaturePropagation, RandomWalkPE
from pe_toolkit.domains.graphs.lightning_module import (
    GraphClassificationModule,
    GraphDataModule,
    accuracy,
    weighted_accuracy,
)
from pe_toolkit.domains.graphs.models import (
    PE_CHOICES,
    GINModel,
    GPSModel,
    GraphMambaModel,
    GraphPEInput,
    ToolkitGPSConv,
    node_index_in_graph,
)

WALK, EIG = 4, 3
RFP = RandomFeaturePropagation(2, 2)
PE_TRANSFORM = Compose([RandomWalkPE(WALK), LaplacianEigenvectorPE(EIG), RFP])
PE_OPTIONS = {
    None: {},
    "none": {},
    "random_features": {"num_features": 4, "seed": 3},
    "lap_pe": {"in_features": EIG, "use_eigenvalues": True},
    "rwse": {"in_features": WALK},
    "rfp": {"in_features": RFP.out_features},
}
MODELS = (GINModel, GPSModel, GraphMambaModel)


def undirected(pairs: list[tuple[int, int]]) -> torch.Tensor:
    e = torch.tensor(pairs, dtype=torch.long).t()
    return torch.cat([e, e.flip(0)], dim=1)


def ring_with_chord(n: int) -> list[tuple[int, int]]:
    return [(i, (i + 1) % n) for i in range(n)] + [(0, n // 2)]


def graph(n: int, *, categorical: bool = False, extra: list[tuple[int, int]] = ()) -> Data:
    """An irregular connected graph (ring + chord + extra edges) with all PE attributes."""
    x = torch.arange(n) % 3 if categorical else torch.linspace(-1, 1, n).unsqueeze(-1)
    data = Data(x=x, edge_index=undirected(ring_with_chord(n) + list(extra)), num_nodes=n)
    data.y = torch.arange(n) % 2
    return PE_TRANSFORM(data)


def permuted(data: Data, perm: torch.Tensor) -> Data:
    """The same graph with node ``perm[i]`` of the result being node ``i`` of ``data``; PEs recomputed."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel())
    out = Data(x=data.x[inv], edge_index=perm[data.edge_index], num_nodes=data.num_nodes, y=data.y[inv])
    return PE_TRANSFORM(out)


@pytest.fixture
def batch() -> Batch:
    return Batch.from_data_list([graph(5), graph(8, extra=[(1, 3)]), graph(6)])


def build(model_cls, pe, task: str = "graph", **kwargs):
    kwargs.setdefault("in_features", 1)
    return model_cls(num_classes=3, hidden=8, layers=2, task=task, pe=pe, pe_options=PE_OPTIONS[pe], **kwargs)


# ------------------------------------------------------------------------------------------------ shapes


@pytest.mark.parametrize("task", ["graph", "node"])
@pytest.mark.parametrize("pe", PE_CHOICES)
@pytest.mark.parametrize("model_cls", MODELS)
def test_output_shapes_every_pe(model_cls, pe, task, batch):
    model = build(model_cls, pe, task)
    want = (3, 3) if task == "graph" else (19, 3)
    for mode in (model.train, model.eval):
        mode()
        out = model(batch)
        assert out.shape == want
        assert torch.isfinite(out).all()
    out.sum().backward()


@pytest.mark.parametrize("model_cls", MODELS)
def test_categorical_input_and_single_graph(model_cls):
    data = graph(7, categorical=True)
    model = build(model_cls, "rwse", "node", in_features=None, num_node_types=3)
    assert model(data).shape == (7, 3)  # a plain Data without .batch
    model = build(model_cls, "lap_pe", "graph", in_features=None, num_node_types=3)
    assert model(data).shape == (1, 3)


def test_num_parameters_can_exclude_the_pe():
    model = build(GINModel, "rwse")
    pe_params = sum(p.numel() for p in model.input.encoder.parameters())
    assert model.num_parameters(exclude_pe=True) == model.num_parameters() - pe_params
    assert build(GINModel, None).num_parameters() == model.num_parameters(exclude_pe=True)


# ------------------------------------------------------------------------------------- invariance, padding


@pytest.mark.parametrize("model_cls,attention", [(GINModel, None), (GPSModel, "toolkit"), (GPSModel, "pyg")])
def test_graph_outputs_are_permutation_invariant_with_rwse(model_cls, attention):
    kwargs = {} if attention is None else {"attention": attention}
    model = build(model_cls, "rwse", **kwargs).eval()
    g = graph(9, extra=[(2, 6), (3, 7)])
    perm = torch.randperm(9)
    other = graph(6)
    with torch.no_grad():
        ref = model(Batch.from_data_list([g, other]))
        out = model(Batch.from_data_list([permuted(g, perm), other]))
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attention", ["toolkit", "pyg"])
def test_gps_padding_nodes_do_not_affect_real_nodes(attention):
    model = build(GPSModel, "rwse", "node", attention=attention).eval()
    small, big = graph(4), graph(10, extra=[(1, 7)])
    with torch.no_grad():
        alone = model(Batch.from_data_list([small]))
        mixed = model(Batch.from_data_list([small, big]))  # small is padded to 10 nodes in the dense batch
        big_alone = model(Batch.from_data_list([big]))
    torch.testing.assert_close(mixed[:4], alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mixed[4:], big_alone, rtol=1e-5, atol=1e-5)


def test_toolkit_gps_layer_matches_pyg_gpsconv():
    from torch_geometric.nn import GINConv

    c, heads = 8, 2

    def local():
        torch.manual_seed(1)
        return GINConv(torch.nn.Sequential(torch.nn.Linear(c, c), torch.nn.ReLU(), torch.nn.Linear(c, c)))

    ours, ref = ToolkitGPSConv(c, local(), heads=heads).eval(), GPSConv(c, local(), heads=heads).eval()
    shared = {k: v for k, v in ref.state_dict().items() if not k.startswith("attn.")}
    ours.load_state_dict(shared, strict=False)
    w_q, w_k, w_v = ref.attn.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = ref.attn.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for proj, w, b in ((ours.attn.q_proj, w_q, b_q), (ours.attn.k_proj, w_k, b_k), (ours.attn.v_proj, w_v, b_v)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        ours.attn.o_proj.weight.copy_(ref.attn.out_proj.weight)
        ref.attn.out_proj.bias.zero_()  # the toolkit's output projection has no bias
    b = Batch.from_data_list([graph(4), graph(7)])
    x = torch.randn(b.num_nodes, c)
    with torch.no_grad():
        torch.testing.assert_close(ours(x, b.edge_index, b.batch), ref(x, b.edge_index, b.batch),
                                   rtol=1e-5, atol=1e-5)


def test_random_features_fresh_in_training_fixed_in_eval():
    enc = GraphPEInput(8, in_features=1, pe="random_features", pe_options={"num_features": 4, "seed": 7})
    g, other = graph(5), graph(6)
    b = Batch.from_data_list([g, other])
    enc.train()
    assert not torch.allclose(enc(b), enc(b))
    enc.eval()
    torch.testing.assert_close(enc(b), enc(b))
    torch.testing.assert_close(enc(b)[:5], enc(Batch.from_data_list([g])))  # independent of the batching
    torch.testing.assert_close(node_index_in_graph(b.batch), torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5]))


# -------------------------------------------------------------------------------------------------- metrics


def test_weighted_accuracy_hand_case():
    target = torch.tensor([0, 0, 0, 1])
    pred = torch.tensor([0, 0, 1, 1])
    assert accuracy(pred, target) == pytest.approx(0.75)
    assert weighted_accuracy(pred, target, 2) == pytest.approx((2 / 3 + 1) / 2)
    # a class that is only predicted does not count; one that is never recalled counts 0
    assert weighted_accuracy(torch.tensor([0, 2, 2]), torch.tensor([0, 0, 1]), 3) == pytest.approx((0.5 + 0) / 2)
    assert math.isnan(weighted_accuracy(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long), 2))
    with pytest.raises(ValueError, match=r"target values must lie in \[0, 2\)"):
        weighted_accuracy(torch.tensor([0]), torch.tensor([2]), 2)


# ------------------------------------------------------------------------------------------------ lightning


class EpochLosses(L.Callback):
    def __init__(self) -> None:
        self.losses: list[list[float]] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.losses.append([])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses[-1].append(float(outputs["loss"]))


def test_lightning_fit_on_csl_decreases_loss(tmp_path):
    L.seed_everything(0, verbose=False)
    dataset = CSLDataset(root=tmp_path / "csl", graphs_per_class=3, pre_transform=RandomWalkPE(8))
    assert len(dataset) == 30
    order = torch.randperm(30)
    data = GraphDataModule(dataset, (order[:20], order[20:25], order[25:]), batch_size=5)
    model = GINModel(num_classes=10, hidden=32, layers=2, in_features=1, pe="rwse", pe_options={"in_features": 8})
    module = GraphClassificationModule(model, num_classes=10, lr=1e-2, warmup_steps=2, max_steps=8)
    losses = EpochLosses()
    trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[losses])
    trainer.fit(module, datamodule=data)
    assert [len(epoch) for epoch in losses.losses] == [4, 4]
    first, second = (sum(epoch) / len(epoch) for epoch in losses.losses)
    assert second < first
    assert {"val/loss", "val/acc", "val/weighted_acc", "train/acc"} <= set(trainer.logged_metrics)
    metrics = trainer.test(module, datamodule=data, verbose=False)[0]
    assert {"test/loss", "test/acc", "test/weighted_acc"} <= set(metrics)
    assert 0.0 <= metrics["test/acc"] <= 1.0


def test_node_task_step_and_datamodule_transform(tmp_path):
    graphs = [graph(5, categorical=True), graph(6, categorical=True), graph(7, categorical=True)]
    model = build(GINModel, "rwse", "node", in_features=None, num_node_types=3)
    module = GraphClassificationModule(model, num_classes=3)
    module.log = lambda *args, **kwargs: None  # no trainer attached
    loss = module.training_step(Batch.from_data_list(graphs), 0)
    assert loss.ndim == 0 and torch.isfinite(loss)

    dataset = CSLDataset(root=tmp_path / "csl", skips=(2, 3), graphs_per_class=2)
    data = GraphDataModule(dataset, ([0, 1], [2], [3]), transform=RandomWalkPE(3), batch_size=2)
    b = next(iter(data.train_dataloader()))
    assert b.rw_pe.shape == (82, 3) and b.num_graphs == 2
    assert dataset.transform is None and "rw_pe" not in dataset[0]  # the dataset itself is untouched


# ------------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize("kwargs,match", [
    ({"pe": "rfp_learned"}, "pe must be one of"),
    ({"pe": "rwse", "pe_options": {}}, r"needs pe_options\['in_features'\]"),
    ({"pe": "random_features", "pe_options": {"walk": 3}}, r"unknown pe_options \['walk'\]"),
    ({"pe": None, "pe_options": {"in_features": 3}}, "pe=None takes no pe_options"),
    ({"pe": "rwse", "pe_options": {"in_features": 4, "norm": "group"}}, "rwse: norm must be one of"),
    ({"task": "edge"}, "task must be one of"),
    ({"pool": "max"}, "pool must be one of"),
    ({"num_node_types": 3}, "exactly one of in_features"),
    ({"in_features": None}, "exactly one of in_features"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
])
@pytest.mark.parametrize("model_cls", MODELS)
def test_bad_options_raise(model_cls, kwargs, match):
    options = {"num_classes": 3, "hidden": 8, "layers": 1, "in_features": 1, **kwargs}
    with pytest.raises(ValueError, match=match):
        model_cls(**options)


def test_gps_specific_errors():
    with pytest.raises(ValueError, match=r"heads \(3\) must divide hidden \(8\)"):
        GPSModel(num_classes=3, hidden=8, heads=3, in_features=1)
    with pytest.raises(ValueError, match="attention must be one of"):
        GPSModel(num_classes=3, hidden=8, in_features=1, attention="flash")


def test_forward_errors():
    model = build(GINModel, "lap_pe")
    data = Data(x=torch.zeros(4, 1), edge_index=undirected([(0, 1), (1, 2), (2, 3)]), num_nodes=4)
    with pytest.raises(ValueError, match=r"reads data.lap_pe, which the batch lacks"):
        model(data)
    with pytest.raises(ValueError, match=r"x must have shape \(N, 1\)"):
        model(graph(4).update({"x": torch.zeros(4, 2)}))
    with pytest.raises(TypeError, match="expects a float x"):
        model(graph(4, categorical=True))
    cat = build(GINModel, None, in_features=None, num_node_types=2)
    with pytest.raises(ValueError, match=r"categorical x must lie in \[0, 2\)"):
        cat(graph(4, categorical=True))


def test_module_and_datamodule_errors(tmp_path):
    model = build(GINModel, None)
    module = GraphClassificationModule(model, num_classes=4)
    with pytest.raises(ValueError, match=r"expected \(2, 4\)"):
        module.training_step(Batch.from_data_list([graph(4), graph(5)]).update({"y": torch.tensor([0, 1])}), 0)
    with pytest.raises(TypeError, match="model must be an nn.Module"):
        GraphClassificationModule("gin", num_classes=2)
    with pytest.raises(ValueError, match="num_classes must be >= 2"):
        GraphClassificationModule(model, num_classes=1)
    dataset = CSLDataset(root=tmp_path / "csl", skips=(2, 3), graphs_per_class=1)
    with pytest.raises(ValueError, match=r"splits must be \(train_idx, val_idx, test_idx\)"):
        GraphDataModule(dataset, ([0], [1]))
    with pytest.raises(ValueError, match=r"val indices must lie in \[0, 2\)"):
        GraphDataModule(dataset, ([0], [5], [1]))
