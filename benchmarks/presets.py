"""Benchmark presets as YAML files, with command-line overrides, and the device a run trains on.

A benchmark's presets live in ``benchmarks/presets/<benchmark>/<preset>.yaml`` (``quick``: what
``make bench`` runs, under 2 minutes here; ``full``: the CPU preset, within 2 hours on 2 cores with
``--jobs 2``; ``gpu``: sized for one H200-class GPU, under 8 minutes). A preset is one nested
mapping; the benchmark reads it as a dict. On the command line::

    python benchmarks/extrapolation.py --preset gpu --accelerator cuda
    python benchmarks/extrapolation.py --config my_preset.yaml            # merged over --preset
    python benchmarks/extrapolation.py --set training.steps=400 --set seeds=[0,1,2]

``--config FILE`` is deep-merged over the chosen preset (a file may hold only what it changes),
then each ``--set KEY.PATH=VALUE`` (VALUE parsed as YAML) replaces one entry. A key that the preset
does not have is an error naming the key and the keys that are there: nothing is silently ignored.

For the scripts not yet on the harness: the preset is the nested dict they consume. Benchmarks on
``pe_toolkit.bench`` load presets into a typed dataclass instead (:mod:`pe_toolkit.bench.config`, whose
YAML reading and ``--set`` parsing this module uses).

Device: ``--accelerator``, ``--devices`` and ``--precision`` become :func:`device_options`, which a
benchmark puts into each run's spec (they change the numbers, so they are part of a run's identity,
and spawned workers get them from the spec, not from this process's globals);
:func:`trainer_options` turns them into ``lightning.Trainer`` keyword arguments.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pe_toolkit.bench.config import parse_override, read_yaml  # noqa: F401  (parse_override: re-exported)

PRESETS_ROOT = Path(__file__).resolve().parent / "presets"
PRESET_NAMES = ("quick", "full", "gpu")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
PRECISIONS = ("32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true")


def preset_path(benchmark: str, preset: str) -> Path:
    """``benchmarks/presets/<benchmark>/<preset>.yaml``."""
    return PRESETS_ROOT / benchmark / f"{preset}.yaml"


def available_presets(benchmark: str) -> list[str]:
    """The preset names that have a file for ``benchmark``, sorted."""
    return sorted(p.stem for p in (PRESETS_ROOT / benchmark).glob("*.yaml"))


def read_yaml_mapping(path: str | Path, *, what: str) -> dict[str, Any]:
    """The mapping in the YAML file ``path`` (:func:`pe_toolkit.bench.config.read_yaml`)."""
    return read_yaml(path, what=what)


def merge_preset(base: Mapping[str, Any], update: Mapping[str, Any], *, where: str = "") -> dict[str, Any]:
    """``base`` with ``update`` merged in: nested mappings merge, other values replace.

    A key of ``update`` that ``base`` lacks raises ``ValueError`` naming it (a typo never passes
    silently).

    Example:
        >>> merge_preset({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}})
        {'a': {'b': 1, 'c': 3}}
    """
    merged = copy.deepcopy(dict(base))
    for key, value in update.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in merged:
            raise ValueError(f"preset key {path!r} does not exist; keys here: {sorted(map(str, merged))}")
        if isinstance(merged[key], dict) and isinstance(value, Mapping):
            merged[key] = merge_preset(merged[key], value, where=path)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def load_preset(
    benchmark: str, preset: str, *, config: str | Path | None = None, overrides: Sequence[str] = ()
) -> dict[str, Any]:
    """The preset ``preset`` of ``benchmark``, with ``config`` merged over it, then ``overrides``.

    Args:
        benchmark: the benchmark's name (``benchmarks/presets/<benchmark>/``).
        preset: one of :func:`available_presets`.
        config: a user's YAML file merged over the preset (only keys the preset has).
        overrides: ``KEY.PATH=VALUE`` strings (see :func:`parse_override`).

    Returns:
        The preset as a dict, with ``"preset"`` set to ``preset``.
    """
    names = available_presets(benchmark)
    if preset not in names:
        raise ValueError(f"preset must be one of {names} for {benchmark!r}, got {preset!r}")
    data = read_yaml_mapping(preset_path(benchmark, preset), what="preset file")
    if config is not None:
        data = merge_preset(data, read_yaml_mapping(config, what="--config"))
    for text in overrides:
        data = merge_preset(data, parse_override(text))
    data["preset"] = preset
    return data


def add_preset_arguments(parser: argparse.ArgumentParser, benchmark: str) -> None:
    """``--preset``, ``--config`` and ``--set`` for a benchmark whose presets are YAML files.

    ``--quick`` (which :func:`common.standard_argparser` adds) stays a synonym of ``--preset quick``;
    :func:`preset_from_args` resolves the two.
    """
    names = available_presets(benchmark)
    parser.add_argument("--preset", choices=names, default=None,
                        help=f"preset file benchmarks/presets/{benchmark}/PRESET.yaml (default full; --quick = quick)")
    parser.add_argument("--config", type=Path, default=None,
                        help="a YAML file merged over the preset (it may hold only the keys it changes)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="replace one preset entry (VALUE is YAML), e.g. --set training.steps=400; repeatable")


def preset_from_args(args: argparse.Namespace, benchmark: str) -> dict[str, Any]:
    """The preset that ``--preset`` / ``--quick``, ``--config`` and ``--set`` select."""
    if args.quick and args.preset not in (None, "quick"):
        raise ValueError(f"--quick and --preset {args.preset} contradict each other; give one")
    name = "quick" if args.quick else (args.preset or "full")
    args.quick = name == "quick"
    args.preset = name
    return load_preset(benchmark, name, config=args.config, overrides=args.overrides)


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """``--accelerator``, ``--devices``, ``--precision`` (Lightning's meanings)."""
    parser.add_argument("--accelerator", choices=ACCELERATORS, default="auto",
                        help="Lightning accelerator of the training runs (default auto: a GPU when there is one)")
    parser.add_argument("--devices", type=_positive_int, default=1,
                        help="devices per training run (default 1)")
    parser.add_argument("--precision", choices=PRECISIONS, default="32-true",
                        help="Lightning precision of the training runs (default 32-true)")


def check_seeds(seeds: Any, name: str = "seeds") -> None:
    """``ValueError`` naming ``name`` unless ``seeds`` is a non-empty list of distinct non-negative ints (bools
    refused; ``lightning.seed_everything`` refuses negative seeds)."""
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                                           for s in seeds):
        raise ValueError(f"{name} must be a non-empty list of non-negative ints, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"{name} must be distinct, got {seeds}")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--devices must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--devices must be a positive integer, got {value}")
    return value


def device_options(args: argparse.Namespace) -> dict[str, Any]:
    """``{"accelerator", "devices", "precision"}`` from the parsed arguments, for a run's spec."""
    return {"accelerator": args.accelerator, "devices": args.devices, "precision": args.precision}


def trainer_options(device: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of ``lightning.Trainer`` for ``device`` (see :func:`device_options`).

    ``None`` (a caller that passes no device) is the CPU in float32 on one device.
    """
    if device is None:
        return {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    unknown = set(device) - {"accelerator", "devices", "precision"}
    if unknown:
        raise ValueError(f"device has unknown keys {sorted(unknown)}; allowed: accelerator, devices, precision")
    accelerator = device.get("accelerator", "auto")
    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator must be one of {ACCELERATORS}, got {accelerator!r}")
    precision = device.get("precision", "32-true")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    devices = device.get("devices", 1)
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices must be a positive int, got {devices!r}")
    return {"accelerator": accelerator, "devices": devices, "precision": precision}
