"""Patch positions, the procedural scenes at any resolution, ImageFolder, the ViT and one short Lightning run."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pe_toolkit.domains.vision import (
    CLASSES,
    ImageFolderDataset,
    ShapeRelations,
    ViT,
    ViTConfig,
    make_scene,
    mrope_positions,
    patch_grid,
    patch_positions,
    render_scene,
    save_image_folder,
)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------------------------------------- positions
def test_patch_positions_by_hand():
    assert patch_positions(2, 3).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert patch_positions(1, 2, num_prefix_tokens=2, axes=3, frame=5).tolist() == [
        [0, 0, 0], [0, 0, 0], [5, 0, 0], [5, 0, 1]]
    assert patch_positions(2, 2, layout="normalized").tolist() == [[-0.5, -0.5], [-0.5, 0.5], [0.5, -0.5], [0.5, 0.5]]
    # 4 patches resampled onto a 2-grid: centres (i + 0.5) * 2 / 4 - 0.5
    assert patch_positions(1, 4, layout="resample", reference_grid=(1, 2)).tolist() == [
        [0, -0.25], [0, 0.25], [0, 0.75], [0, 1.25]]
    torch.testing.assert_close(patch_positions(3, 5, layout="resample", reference_grid=(3, 5)), patch_positions(3, 5))


def test_patch_grid_and_position_errors():
    assert patch_grid(32, 48, 4) == (8, 12)
    with pytest.raises(ValueError, match="image height 33 is not divisible by patch_size 4; use a multiple of 4 "
                                         "such as 32 or 36"):
        patch_grid(33, 32, 4)
    with pytest.raises(ValueError, match="image width 30 is not divisible by patch_size 8"):
        patch_grid(32, 30, 8)
    with pytest.raises(TypeError, match="image height must be an int"):
        patch_grid(32.0, 32, 4)
    with pytest.raises(ValueError, match="layout 'resample' needs reference_grid"):
        patch_positions(2, 2, layout="resample")
    with pytest.raises(ValueError, match="reference_grid is for layout 'resample' only"):
        patch_positions(2, 2, reference_grid=4)
    with pytest.raises(ValueError, match="axes must be one of"):
        patch_positions(2, 2, axes=4)
    with pytest.raises(ValueError, match="spatial_merge_size 2"):
        mrope_positions([("image", (1, 3, 4))], spatial_merge_size=2)
    with pytest.raises(ValueError, match="kind must be one of"):
        mrope_positions([("audio", 3)])


# ---------------------------------------------------------------------------------------------- data
def test_scenes_are_seeded_and_labelled_by_the_relation():
    first, again, other = make_scene(0, 5), make_scene(0, 5), make_scene(1, 5)
    assert first == again and first != other
    for index in range(40):
        scene = make_scene(3, index)
        disc = next(s for s in scene.shapes if s.colour == (0.9, 0.15, 0.1))
        square = next(s for s in scene.shapes if s.colour == (0.1, 0.3, 0.95))
        dx, dy = square.x - disc.x, square.y - disc.y
        expected = ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else ("below" if dy > 0 else "above")
        assert CLASSES[scene.label] == expected
    labels = torch.tensor([make_scene(0, i).label for i in range(400)])
    assert torch.bincount(labels, minlength=4).min() > 60  # all four relations are common


def test_one_scene_at_any_resolution():
    scene = make_scene(0, 7)
    small, large = render_scene(scene, 32), render_scene(scene, 64)
    assert small.shape == (3, 32, 32) and large.shape == (3, 64, 64)
    assert render_scene(scene, (24, 40)).shape[1:] == (24, 40)
    assert 0 <= small.min() and small.max() <= 1
    assert (F.avg_pool2d(large[None], 2)[0] - small).abs().mean() < 0.01  # the same picture, finer
    data = ShapeRelations(6, 32, seed=2)
    bigger = data.at_resolution(48)
    assert torch.equal(bigger.labels, data.labels) and bigger.images.shape == (6, 3, 48, 48)
    image, label = data[3]
    assert image.shape == (3, 32, 32) and label == int(data.labels[3])


def test_image_folder_round_trip(tmp_path):
    data = ShapeRelations(8, 16, seed=0)
    save_image_folder(data, tmp_path / "shapes")
    folder = ImageFolderDataset(tmp_path / "shapes")
    assert folder.classes == tuple(sorted({CLASSES[int(label)] for label in data.labels}))
    assert len(folder) == 8
    by_name = {path.stem: (path, label) for path, label in folder.samples}
    image, label = folder[folder.samples.index(by_name["000003"])]
    assert folder.classes[label] == CLASSES[int(data.labels[3])]
    assert (image - data.images[3]).abs().max() <= 0.5 / 255 + 1e-6  # 8-bit PNG of the same image
    resized = ImageFolderDataset(tmp_path / "shapes", image_size=(12, 20))
    assert resized[0][0].shape == (3, 12, 20)
    with pytest.raises(ValueError, match="is not a folder"):
        ImageFolderDataset(tmp_path / "missing")
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no image"):
        ImageFolderDataset(tmp_path / "empty")


@pytest.mark.parametrize("damage", ["text", "truncated_header", "truncated_pixels", "empty"])
def test_a_corrupt_image_file_names_itself(tmp_path, damage):
    """Issue 29: a file that is not a readable image raised PIL's UnidentifiedImageError / OSError ("image file is
    truncated") from the data loader; it is now a ValueError naming the file and its class."""
    data = ShapeRelations(2, 16, seed=0)
    save_image_folder(data, tmp_path / "shapes")
    folder = ImageFolderDataset(tmp_path / "shapes")
    path, label = folder.samples[1]
    content = path.read_bytes()
    path.write_bytes({"text": b"not an image", "truncated_header": content[:40],
                      "truncated_pixels": content[: len(content) - 30], "empty": b""}[damage])
    expected = (rf"ImageFolderDataset: '.*{path.name}' \(item 1, class '{folder.classes[label]}'\) is not a "
                rf"readable image")
    with pytest.raises(ValueError, match=expected):
        folder[1]
    assert folder[0][0].shape == (3, 16, 16)  # the other file still reads


# ---------------------------------------------------------------------------------------------- model
@pytest.mark.parametrize("encoding", ["rope_axial", "rope_mixed", "mrope", "sincos_2d", "learned_2d", "nope"])
def test_vit_runs_at_any_resolution(encoding):
    model = ViT(ViTConfig(num_classes=4, dim=32, num_heads=4, num_layers=1, encoding=encoding, num_register_tokens=1))
    for size in ((32, 32), (48, 64), (96, 96)):
        assert model(torch.rand(2, 3, *size)).shape == (2, 4)
    if encoding == "learned_2d":  # the table has the training grid, and larger images are resampled onto it
        assert model.trunk.encodings[0].grid_size == (8, 8) and model.layout == "resample"
    with pytest.raises(ValueError, match="image height 30 is not divisible by patch_size 4"):
        model(torch.rand(1, 3, 30, 32))


def test_vit_prefix_tokens_and_errors():
    model = ViT(ViTConfig(num_classes=3, dim=32, num_heads=4, num_layers=1, num_register_tokens=2, pool="mean"))
    positions = model.positions(2, 2)
    assert positions.shape == (7, 2) and positions[:3].abs().sum() == 0
    assert model.features(torch.rand(1, 3, 8, 8)).shape == (1, 7, 32)
    with pytest.raises(ValueError, match=r"images must have shape \(B, 3, H, W\)"):
        model(torch.rand(3, 32, 32))
    with pytest.raises(ValueError, match="takes 1-D positions"):
        ViT(ViTConfig(num_classes=3, dim=32, num_heads=4, num_layers=1, encoding="rope"))
    with pytest.raises(ValueError, match="image height 30 is not divisible"):
        ViT(ViTConfig(num_classes=3, image_size=30))


def test_short_lightning_training_learns_and_evaluates_at_a_larger_resolution():
    import lightning as L

    from pe_toolkit.domains.vision.lightning_module import ImageDataModule, ViTClassifier, accuracy

    L.seed_everything(0, verbose=False)
    train = ShapeRelations(64, 16, seed=0)
    module = ViTClassifier(ViTConfig(num_classes=4, image_size=16, patch_size=4, dim=32, num_heads=4, num_layers=1),
                           lr=3e-3, max_steps=6)
    trainer = L.Trainer(max_steps=6, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", limit_val_batches=0, num_sanity_val_steps=0)
    before = [p.detach().clone() for p in module.parameters()]
    trainer.fit(module, ImageDataModule(train, batch_size=32))
    assert all(not torch.equal(a, b) for a, b in zip(before, module.parameters()))
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    module.model.train()
    predicted = module.model.eval()(train.at_resolution(24).images[:10]).argmax(-1)
    module.model.train()
    score = accuracy(module.model, train.at_resolution(24))  # eval mode inside, the mode restored after
    assert module.model.training
    assert score == pytest.approx((module.model.eval()(train.at_resolution(24).images).argmax(-1)
                                   == train.labels).float().mean().item())
    assert predicted.shape == (10,)
