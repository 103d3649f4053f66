"""Benchmark presets: YAML files, ``--config`` merged over them, ``--set`` overrides, devices."""

import importlib

import pytest

from benchmarks import common

presets = importlib.import_module("presets")  # the module benchmarks.common imports (it put benchmarks/ on sys.path)


@pytest.fixture
def preset_root(tmp_path, monkeypatch):
    root = tmp_path / "presets"
    (root / "demo").mkdir(parents=True)
    (root / "demo" / "full.yaml").write_text("seeds: [0, 1, 2]\ntraining:\n  steps: 100\n  lr: 0.001\n")
    (root / "demo" / "quick.yaml").write_text("seeds: [0]\ntraining:\n  steps: 5\n  lr: 0.003\n")
    monkeypatch.setattr(presets, "PRESETS_ROOT", root)
    return root


def test_load_preset_reads_the_file_and_names_itself(preset_root):
    assert presets.available_presets("demo") == ["full", "quick"]
    assert presets.load_preset("demo", "quick") == {"seeds": [0], "training": {"steps": 5, "lr": 0.003},
                                                    "preset": "quick"}


def test_config_file_and_overrides_merge_in_order(preset_root, tmp_path):
    user = tmp_path / "mine.yaml"
    user.write_text("training:\n  steps: 7\n")
    data = presets.load_preset("demo", "full", config=user, overrides=["training.steps=9", "seeds=[4, 5]"])
    assert data["training"] == {"steps": 9, "lr": 0.001} and data["seeds"] == [4, 5]
    data = presets.load_preset("demo", "full", config=user)
    assert data["training"]["steps"] == 7


def test_unknown_keys_and_bad_files_are_errors_that_name_them(preset_root, tmp_path):
    with pytest.raises(ValueError, match=r"'training.stpes' does not exist; keys here: \['lr', 'steps'\]"):
        presets.load_preset("demo", "full", overrides=["training.stpes=3"])
    with pytest.raises(ValueError, match=r"preset must be one of \['full', 'quick'\] for 'demo', got 'gpu'"):
        presets.load_preset("demo", "gpu")
    with pytest.raises(ValueError, match="--set expects KEY.PATH=VALUE"):
        presets.parse_override("training.steps")
    with pytest.raises(ValueError, match="non-empty dotted key"):
        presets.parse_override("training..steps=3")
    with pytest.raises(ValueError, match="not valid YAML"):
        presets.parse_override("seeds=[0, 1")
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ValueError, match=r"--config '.*broken.yaml' is not valid YAML"):
        presets.load_preset("demo", "full", config=broken)
    listing = tmp_path / "list.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="must hold a mapping at the top level, got list"):
        presets.load_preset("demo", "full", config=listing)
    with pytest.raises(ValueError, match="is not a file"):
        presets.load_preset("demo", "full", config=tmp_path / "missing.yaml")


def test_parser_resolves_quick_preset_config_and_set(preset_root):
    parser = common.standard_argparser("demo", presets="demo")
    args = parser.parse_args(["--quick", "--set", "training.lr=0.5"])
    assert presets.preset_from_args(args, "demo")["training"] == {"steps": 5, "lr": 0.5}
    assert args.preset == "quick" and args.quick is True
    args = parser.parse_args([])
    assert presets.preset_from_args(args, "demo")["preset"] == "full" and args.quick is False
    args = parser.parse_args(["--preset", "quick"])
    assert presets.preset_from_args(args, "demo")["seeds"] == [0] and args.quick is True
    with pytest.raises(ValueError, match="--quick and --preset full contradict"):
        presets.preset_from_args(parser.parse_args(["--quick", "--preset", "full"]), "demo")
    with pytest.raises(SystemExit):
        parser.parse_args(["--preset", "gpu"])


def test_trainer_options_validate_the_device():
    assert presets.trainer_options(None) == {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    with pytest.raises(ValueError, match="accelerator must be one of"):
        presets.trainer_options({"accelerator": "tpu"})
    with pytest.raises(ValueError, match="precision must be one of"):
        presets.trainer_options({"precision": "8"})
    with pytest.raises(ValueError, match="devices must be a positive int, got 0"):
        presets.trainer_options({"devices": 0})
    with pytest.raises(ValueError, match=r"unknown keys \['gpus'\]"):
        presets.trainer_options({"gpus": 1})


def test_every_preset_file_in_the_repository_parses():
    files = sorted(presets.PRESETS_ROOT.glob("*/*.yaml"))
    for path in files:
        assert isinstance(presets.read_yaml_mapping(path, what="preset file"), dict), path
        assert path.stem in presets.PRESET_NAMES, f"{path}: preset names are {presets.PRESET_NAMES}"


@pytest.mark.parametrize("seeds, message", [
    ([], "non-empty list of non-negative ints"), ((0, 1), "non-empty list of non-negative ints"),
    ([0, True], "non-empty list of non-negative ints"), ([0, 1.0], "non-empty list of non-negative ints"),
    ([0, -1], "non-empty list of non-negative ints"), ([1, 1], "distinct"),
])
def test_check_seeds_names_seeds_and_what_is_allowed(seeds, message):
    with pytest.raises(ValueError, match=f"seeds must be .*{message}"):
        presets.check_seeds(seeds)
    presets.check_seeds([2, 0, 1])  # a good list passes
    with pytest.raises(ValueError, match="sbm_seeds must be distinct"):
        presets.check_seeds([1, 1], "sbm_seeds")  # the key it came from is named
