"""Configs: YAML preset + --config + --set, validated into the typed dataclass in one place."""

from __future__ import annotations

import pytest
from tiny_benchmark import Config, Steps, Tiny

from pe_toolkit.bench.config import RunOptions, load_config, merge, parse_override, to_dataclass, trainer_options


def test_a_preset_loads_into_the_typed_config():
    config, run = load_config(Tiny(), "quick")
    assert config == Config(seeds=[0], methods=["small", "large"], lrs=[0.01, 0.1], steps=Steps(count=20, batch=8))
    assert run == {}


def test_overrides_and_a_config_file_merge_over_the_preset(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("steps: {batch: 4}\nrun: {executor: local, jobs: 2}\n")
    config, run = load_config(Tiny(), "full", config_file=mine, overrides=["seeds=[5, 6]", "steps.count=3"])
    assert config.seeds == [5, 6] and config.steps == Steps(count=3, batch=4) and config.lrs == [0.01, 0.1, 0.3]
    assert run == {"executor": "local", "jobs": 2}


@pytest.mark.parametrize(("override", "message"), [
    ("stepz.count=3", "config key 'stepz' does not exist; allowed keys here: ['log', 'lrs', 'methods', 'pause', "
                      "'seeds', 'steps']"),
    ("steps.cuont=3", "config key 'steps.cuont' does not exist; allowed keys here: ['batch', 'count']"),
])
def test_an_unknown_key_is_named_with_the_allowed_ones(override, message):
    with pytest.raises(ValueError) as error:
        load_config(Tiny(), "quick", overrides=[override])
    assert str(error.value) == message


@pytest.mark.parametrize(("value", "shown"), [("[20, 8]", "[20, 8]"), ("20", "20"), ("null", "None")])
def test_a_section_given_as_a_value_is_named_with_its_keys(value, shown):
    with pytest.raises(ValueError) as error:
        load_config(Tiny(), "quick", overrides=[f"steps={value}"])
    assert str(error.value) == f"config key 'steps' is a section: a mapping of the keys ['batch', 'count'], got {shown}"


@pytest.mark.parametrize(("override", "key"), [("steps.count=2.5", "config.steps.count"),
                                               ("seeds=zero", "config.seeds"), ("lrs=[a]", "config.lrs")])
def test_a_mistyped_value_is_named(override, key):
    with pytest.raises(ValueError, match=f"invalid config: .*{key}"):
        load_config(Tiny(), "quick", overrides=[override])


def test_the_benchmark_check_runs_on_the_loaded_config():
    with pytest.raises(ValueError, match="steps.count must be >= 1, got 0"):
        load_config(Tiny(), "quick", overrides=["steps.count=0"])


def test_missing_required_key_and_bad_preset_and_run_section(tmp_path):
    with pytest.raises(ValueError, match=r"lacks required key\(s\) \['methods', 'lrs', 'steps'\]"):
        to_dataclass(Config, {"seeds": [0]})
    with pytest.raises(ValueError, match=r"preset must be one of \['full', 'quick'\] for 'tiny', got 'gpu'"):
        load_config(Tiny(), "gpu")
    with pytest.raises(ValueError, match=r"config key 'run.jobz' does not exist; allowed keys here: \[.*'jobs'"):
        load_config(Tiny(), "quick", overrides=["run.jobz=2"])
    broken = tmp_path / "broken.yaml"
    broken.write_text("seeds: [0\n")
    with pytest.raises(ValueError, match="--config .*broken.yaml' is not valid YAML"):
        load_config(Tiny(), "quick", config_file=broken)


def test_merge_and_parse_override():
    assert merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}}
    assert parse_override("a.b=[1, 2]") == {"a": {"b": [1, 2]}}
    for bad in ("a", "=1", "a..b=1"):
        with pytest.raises(ValueError, match="--set expects KEY.PATH=VALUE"):
            parse_override(bad)


@pytest.mark.parametrize(("options", "message"), [
    ({"executor": "dask"}, "executor must be one of ['local', 'ray'], got 'dask'"),
    ({"jobs": 0}, "jobs must be a positive int, got 0"),
    ({"threads": True}, "threads must be a positive int, got True"),
    ({"accelerator": "tpu"}, "accelerator must be one of"),
    ({"precision": "8-true"}, "precision must be one of"),
    ({"ray_address": "head:6379"}, "ray_address='head:6379' needs executor 'ray', got 'local'"),
])
def test_run_options_are_checked(options, message):
    with pytest.raises(ValueError) as error:
        RunOptions(**options)
    assert str(error.value).startswith(message)


def test_trainer_options():
    assert trainer_options(None) == {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    assert trainer_options({"accelerator": "cuda", "devices": 2, "precision": "bf16-mixed"}) == {
        "accelerator": "cuda", "devices": 2, "precision": "bf16-mixed"}
    with pytest.raises(ValueError, match=r"device has unknown keys \['gpus'\]"):
        trainer_options({"gpus": 1})


def test_configs_need_the_core_jsonargparse_and_pyyaml_only(tmp_path):
    import subprocess
    import sys

    # neither Lightning nor jsonargparse's [signatures] packages: the core dependencies read every preset
    code = ("import sys\nfor m in ('lightning', 'torchmetrics', 'docstring_parser', 'typeshed_client'):\n"
            "    sys.modules[m] = None\n"
            "from pe_toolkit.bench import get_benchmark, load_config\n"
            "config, _ = load_config(get_benchmark('speed'), 'quick')\nprint(config.layer.lengths)\n"
            "sys.modules['jsonargparse'] = None\n"
            "try:\n    load_config(get_benchmark('speed'), 'quick')\nexcept ImportError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lengths, message = result.stdout.splitlines()
    assert lengths == "[512, 1024]"  # the quick preset, read without Lightning
    assert "not installed: jsonargparse. Install: pip install 'jsonargparse'" in message
