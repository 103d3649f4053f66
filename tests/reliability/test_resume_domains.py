"""Resume without loss for every domain: a fit stopped mid-epoch and resumed from its checkpoint with
``ckpt_path=`` ends with bit-identical parameters to an uninterrupted fit (CPU, seeded).

The runs keep their training randomness on (dropout and a random per-access transform for graphs,
sampled BCE negatives and dropout for recsys, dropout for music, multirobot and translation, diffusion
noise and timesteps for crossmodal), so the tests cover the data order and every random draw."""

from __future__ import annotations

import logging
import warnings

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from pe_toolkit.domains.graphs import CSLDataset
from pe_toolkit.domains.graphs.lightning_module import GraphClassificationModule, GraphDataModule
from pe_toolkit.domains.graphs.models import GINModel
from pe_toolkit.domains.graphs.transforms import RandomWalkPE
from pe_toolkit.domains.recsys.data import build_sequences
from pe_toolkit.domains.recsys.lightning_module import SASRecModule, SequentialRecDataModule
from pe_toolkit.domains.recsys.synthetic import contextual_count_log

TINY_DETECTOR = dict(num_classes=3, dim=8, num_heads=2, ffn_dim=16, dynamic_dim=4, pooler_resolution=2,
                     num_proposals=4, num_stages=2, backbone_channels=(8, 8), recursive=True, box_pe=True,
                     centerness_pe=True)

TOTAL_STEPS, STOP_AT = 11, 6  # 4 batches per epoch: the stop falls inside the second epoch


def _trainer(max_steps: int, checkpoint_dir) -> L.Trainer:
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    callbacks = [ModelCheckpoint(dirpath=checkpoint_dir, every_n_train_steps=STOP_AT, save_top_k=-1)]
    return L.Trainer(
        max_steps=max_steps, logger=False, enable_checkpointing=checkpoint_dir is not None,
        callbacks=callbacks if checkpoint_dir is not None else [], enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=0, accelerator="cpu", devices=1,
    )


def _assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(x, y), f"{name} differs after resuming (max |diff| {float((x - y).abs().max()):.3g})"


def _resume_check(fit, tmp_path) -> None:
    uninterrupted = fit(TOTAL_STEPS)
    fit(STOP_AT, checkpoint_dir=tmp_path / "ckpt")
    (checkpoint,) = (tmp_path / "ckpt").glob("*.ckpt")
    resumed = fit(TOTAL_STEPS, ckpt_path=checkpoint)
    # sanity: training moved the weights, so equality is not trivially true
    assert any(not torch.equal(p, q) for p, q in zip(fit(0).parameters(), uninterrupted.parameters()))
    _assert_same_parameters(uninterrupted, resumed)


def _noisy_features(data):
    """A per-access transform with randomness (global RNG), as a user's augmentation would have."""
    data = data.clone()
    data.x = data.x + 0.1 * torch.randn_like(data.x)
    return data


def test_graph_classification_resumes_without_loss(tmp_path):
    dataset = CSLDataset(root=tmp_path / "csl", graphs_per_class=2, pre_transform=RandomWalkPE(4))

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        data = GraphDataModule(dataset, (list(range(16)), [16, 17], [18, 19]), transform=_noisy_features,
                               batch_size=4, seed=3)
        model = GINModel(num_classes=10, hidden=8, layers=1, in_features=1, pe="rwse", pe_options={"in_features": 4},
                         dropout=0.3)
        module = GraphClassificationModule(model, num_classes=10, lr=1e-2, warmup_steps=2, max_steps=TOTAL_STEPS)
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_sasrec_bce_resumes_without_loss(tmp_path):
    sequences = build_sequences(contextual_count_log(32, length=(8, 12), num_signal_items=12, num_filler_items=6,
                                                     seed=3))

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        data = SequentialRecDataModule(sequences, max_len=12, batch_size=8, negatives=True, seed=3)
        module = SASRecModule(sequences.num_items, max_len=12, dim=8, num_heads=2, num_layers=1, dropout=0.2,
                              loss="bce", lr=1e-2, warmup_steps=2, max_steps=TOTAL_STEPS, encoding="learned")
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_music_resumes_without_loss(tmp_path):
    from pe_toolkit.domains.music.lightning_module import ChoraleDataModule, PianoRollModule
    from pe_toolkit.domains.music.models import MusicModelConfig
    from pe_toolkit.domains.music.scores import Piece
    from pe_toolkit.domains.music.structure import LABEL_FIELDS

    def piece(seed):  # four voices of random pitches, 4/4 bars of 16 steps
        g = torch.Generator().manual_seed(seed)
        roll = torch.zeros(40, 4, 128, dtype=torch.bool)
        roll[torch.arange(40)[:, None], torch.arange(4), 48 + torch.randint(0, 30, (40, 4), generator=g)] = True
        t = torch.arange(40)
        labels = torch.zeros(40, len(LABEL_FIELDS), dtype=torch.long)
        for name, values in (("time", t), ("bar", t // 16), ("beat", t % 16), ("phrase", t // 16)):
            labels[:, LABEL_FIELDS.index(name)] = values
        return Piece(f"random{seed}", roll, labels)

    pieces = [piece(s) for s in range(3)]

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        # 2 training pieces of 40 steps, windows of 16 with stride 5: 14 windows, 4 batches of 4
        data = ChoraleDataModule((pieces[:2], pieces[2:], pieces[2:]), task="accompaniment", length=16, stride=5,
                                 batch_size=4, seed=3)
        module = PianoRollModule(MusicModelConfig(task="accompaniment", encoding="s_rpe", dim=8, num_heads=2,
                                                  num_layers=1, dropout=0.3), lr=1e-2, max_steps=TOTAL_STEPS)
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_detection_resumes_without_loss(tmp_path):
    from pe_toolkit.domains.detection.data import ShapesDetectionDataset
    from pe_toolkit.domains.detection.lightning_module import DetectionDataModule, DetectionModule

    train = ShapesDetectionDataset(16, image_size=24, max_size=10, seed=0)

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        data = DetectionDataModule(train, batch_size=4, seed=3)
        module = DetectionModule(TINY_DETECTOR, warmup_steps=2, max_steps=TOTAL_STEPS)
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_multirobot_resumes_without_loss(tmp_path):
    from pe_toolkit.domains.multirobot.data import PairDataModule
    from pe_toolkit.domains.multirobot.lightning_module import NOPEModule
    from pe_toolkit.domains.multirobot.model import NOPEConfig
    from pe_toolkit.domains.multirobot.simulator import SimConfig

    sim = SimConfig()

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        data = PairDataModule(sim, num_train=16, num_val=4, num_test=4, batch_size=4, seed=3)
        module = NOPEModule(NOPEConfig(descriptor_dim=sim.descriptor_dim, dim=16, num_heads=2, graph_layers=1,
                                       cross_layers=1, sinkhorn_iterations=5, dropout=0.3), lr=3e-3)
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_crossmodal_resumes_without_loss(tmp_path):
    from pe_toolkit.domains.crossmodal.data import generate_clips
    from pe_toolkit.domains.crossmodal.lightning_module import AVDataModule, JointDiffusionModule

    clips = generate_clips(16, seed=0, video_frames=8, audio_frames=16, frame_size=8, freq_bins=4)

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        data = AVDataModule(clips, clips, batch_size=4, seed=3)
        module = JointDiffusionModule((8, 8, 8), (16, 4), dim=16, num_heads=2, num_layers=1, num_steps=20,
                                      warmup_steps=2, max_steps=TOTAL_STEPS)
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_translation_resumes_without_loss(tmp_path):
    from pe_toolkit.domains.translation.data import Vocabulary, generate_corpus
    from pe_toolkit.domains.translation.lightning_module import (
        TranslationDataModule,
        TranslationDataset,
        TranslationModule,
        oracle_positions,
    )

    pairs = generate_corpus(16, seed=0, max_depth=0)
    source_vocab, target_vocab = (Vocabulary(w for p in pairs for w in p.source),
                                  Vocabulary(w for p in pairs for w in p.target))
    dataset = TranslationDataset(pairs, source_vocab, target_vocab, oracle_positions(pairs))

    def fit(max_steps, *, checkpoint_dir=None, ckpt_path=None):
        L.seed_everything(0, verbose=False)
        data = TranslationDataModule(dataset, dataset, batch_size=4, seed=3)
        module = TranslationModule(target_vocab.itos, len(source_vocab),
                                   {"dim": 16, "num_heads": 2, "encoder_layers": 1, "decoder_layers": 1,
                                    "encoding": "xl_pe", "dropout": 0.3}, warmup_steps=2, max_steps=TOTAL_STEPS)
        if max_steps:
            _trainer(max_steps, checkpoint_dir).fit(module, datamodule=data, ckpt_path=ckpt_path)
        return module

    _resume_check(fit, tmp_path)


def test_data_seed_defaults_to_the_run_seed_and_rejects_non_ints(tmp_path):

    dataset = CSLDataset(root=tmp_path / "csl", graphs_per_class=1)
    sequences = build_sequences(contextual_count_log(8, length=(8, 10), num_signal_items=6, num_filler_items=4, seed=1))
    for make in (lambda seed: GraphDataModule(dataset, ([0, 1], [2], [3]), seed=seed),
                 lambda seed: SequentialRecDataModule(sequences, max_len=8, seed=seed)):
        L.seed_everything(17, verbose=False)
        assert make(None).seed == 17 and make(5).seed == 5
        with pytest.raises(TypeError, match="seed must be an int or None, got float"):
            make(1.5)
