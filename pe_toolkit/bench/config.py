"""Configs: YAML presets with command-line overrides, validated into a benchmark's typed dataclass.

One system for every benchmark: ``presets/<benchmark>/<preset>.yaml`` (``quick``, ``full``, ``gpu``),
a user's ``--config FILE`` deep-merged over it (it may hold only what it changes), then each
``--set KEY.PATH=VALUE`` (VALUE parsed as YAML). The merged mapping is validated in one place,
:func:`to_dataclass`: a key that the dataclass does not have is a ``ValueError`` naming it and the
allowed keys, and jsonargparse (a maintained library, already a dependency of the ``train`` extra)
checks every value against the field's type annotation and builds the dataclass.

An optional ``run:`` section holds runner options (:class:`RunOptions`: executor, jobs, threads, Ray
address, accelerator, ...), so that a preset can be pointed at a cluster; flags given on the command
line win over it.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ACCELERATORS", "PRECISIONS", "Dropout", "ModelSize", "RunOptions", "TrainingGrid", "load_config", "merge",
           "parse_override", "quiet_trainer", "read_yaml", "to_dataclass", "trainer_options"]

ACCELERATORS = ("auto", "cpu", "gpu", "cuda")
PRECISIONS = ("32-true", "64-true", "bf16-mixed", "16-mixed", "bf16-true")
EXECUTORS = ("local", "ray")


try:  # a core dependency; a --no-deps install gets _require_config_libraries' message when it loads a preset
    from jsonargparse.typing import NonNegativeInt, PositiveInt, restricted_number_type

    Dropout = restricted_number_type("Dropout", float, [(">=", 0.0), ("<", 1.0)], join="and")
    """A dropout probability in [0, 1). Defined once: jsonargparse refuses a second type with the same bounds."""
except ImportError:  # pragma: no cover
    PositiveInt, NonNegativeInt, Dropout = int, int, float


@dataclasses.dataclass
class ModelSize:
    """A Transformer trunk's size: the ``model: {dim, num_heads, num_layers}`` section of many presets."""

    dim: PositiveInt
    num_heads: PositiveInt
    num_layers: PositiveInt


@dataclasses.dataclass
class TrainingGrid:
    """A ``training:`` section whose learning rate the runner tunes: steps, batch size and the lr grid.

    ``lrs`` is the grid every method gets on the first seed; an edge choice is extended past the edge by at most
    ``max_extensions`` values on ``scale`` (:class:`~pe_toolkit.bench.Tuning`).
    """

    steps: PositiveInt
    batch_size: PositiveInt
    lrs: list[float]  # checked by the benchmark (checks.positives names the key)
    max_extensions: NonNegativeInt = 0
    scale: typing.Literal["log", "linear"] = "log"

    def lr_tuning(self, *, metric: str, maximize: bool, group: str) -> Any:
        """The :class:`~pe_toolkit.bench.Tuning` of ``lr`` over this grid, per ``group``, scored by ``metric``."""
        from pe_toolkit.bench.protocol import Tuning

        return Tuning(param="lr", values=list(self.lrs), metric=metric, maximize=maximize, group=group,
                      scale=self.scale, max_extensions=self.max_extensions)


@dataclasses.dataclass
class RunOptions:
    """How the runs execute (not what they compute; device, precision and threads are part of each run's spec)."""

    executor: str = "local"
    jobs: int = 1
    threads: int = 1
    ray_address: str | None = None
    accelerator: str = "auto"
    devices: int = 1
    precision: str = "32-true"
    resume: bool = False

    def __post_init__(self) -> None:
        for name, allowed in (("executor", EXECUTORS), ("accelerator", ACCELERATORS), ("precision", PRECISIONS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {list(allowed)}, got {getattr(self, name)!r}")
        for name in ("jobs", "threads", "devices"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.ray_address is not None and self.executor != "ray":
            raise ValueError(f"ray_address={self.ray_address!r} needs executor 'ray', got {self.executor!r}")

    def device(self) -> dict[str, Any]:
        return {"accelerator": self.accelerator, "devices": self.devices, "precision": self.precision}


def trainer_options(device: Mapping[str, Any] | None) -> dict[str, Any]:
    """Keyword arguments of ``lightning.Trainer`` for a run's ``spec["device"]`` (``None``: CPU, float32)."""
    if device is None:
        return {"accelerator": "cpu", "devices": 1, "precision": "32-true"}
    unknown = set(device) - {"accelerator", "devices", "precision"}
    if unknown:
        raise ValueError(f"device has unknown keys {sorted(unknown)}; allowed: accelerator, devices, precision")
    options = RunOptions(accelerator=device.get("accelerator", "auto"), devices=device.get("devices", 1),
                         precision=device.get("precision", "32-true"))
    return options.device()


def quiet_trainer(device: Mapping[str, Any] | None, **options: Any) -> Any:
    """A ``lightning.Trainer`` for a benchmark run on ``spec["device"]``: no logger, checkpoints, progress bar or
    model summary (the runner reports progress); ``options`` go to the Trainer (``max_steps``, ...)."""
    import lightning

    defaults = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                "enable_model_summary": False}
    return lightning.Trainer(**trainer_options(device), **{**defaults, **options})


# ------------------------------------------------------------------------------------------ YAML and merging
CONFIG_LIBRARIES = {"jsonargparse": "jsonargparse", "yaml": "pyyaml"}
"""What reading and validating a preset needs: core dependencies (a ``--no-deps`` install may lack them)."""


def _require_config_libraries() -> None:
    # the toolkit's message (what to install) before a bare import error
    import importlib.util

    missing = [module for module in CONFIG_LIBRARIES if importlib.util.find_spec(module) is None]
    if missing:
        names = " ".join(f"'{CONFIG_LIBRARIES[m]}'" for m in missing)
        raise ImportError(f"{__name__} reads and checks presets with jsonargparse and PyYAML; not installed: "
                          f"{', '.join(missing)}. Install: pip install {names} (dependencies of torch-pe-toolkit "
                          "itself; a --no-deps install leaves them out)", name=missing[0])


def read_yaml(path: str | Path, *, what: str) -> dict[str, Any]:
    """The mapping in the YAML file ``path``; ``ValueError`` naming the file when it is not one."""
    _require_config_libraries()
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what} {str(path)!r} is not a file")
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f"{what} {str(path)!r} is not valid YAML: {error}") from error
    if not isinstance(data, dict):
        raise ValueError(f"{what} {str(path)!r} must hold a mapping at the top level, got {type(data).__name__}")
    return data


def merge(base: Mapping[str, Any], update: Mapping[str, Any], *, where: str = "") -> dict[str, Any]:
    """``base`` with ``update`` merged in: nested mappings merge, other values replace.

    Example:
        >>> merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}})
        {'a': {'b': 1, 'c': 3}}
    """
    merged = copy.deepcopy(dict(base))
    for key, value in update.items():
        path = f"{where}.{key}" if where else str(key)
        if isinstance(merged.get(key), dict) and isinstance(value, Mapping):
            merged[key] = merge(merged[key], value, where=path)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def parse_override(text: str) -> dict[str, Any]:
    """``"training.steps=400"`` -> ``{"training": {"steps": 400}}`` (the value parsed as YAML).

    Example:
        >>> parse_override("seeds=[0, 1, 2]")
        {'seeds': [0, 1, 2]}
    """
    _require_config_libraries()
    import yaml

    if not isinstance(text, str) or "=" not in text:
        raise ValueError(f"--set expects KEY.PATH=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if not all(parts):
        raise ValueError(f"--set expects KEY.PATH=VALUE with a non-empty dotted key, got {text!r}")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as error:
        raise ValueError(f"--set {text!r}: the value is not valid YAML: {error}") from error
    for part in reversed(parts):
        value = {part: value}
    return value


# ------------------------------------------------------------------------------------------ validation
def _check_keys(cls: type, data: Mapping[str, Any], where: str) -> None:
    """``ValueError`` for the first key of ``data`` (recursively) that ``cls`` has no field for."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            raise ValueError(f"config key {path!r} does not exist; allowed keys here: {sorted(fields)}")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise ValueError(f"config key {path!r} is a section: a mapping of the keys "
                                 f"{sorted(f.name for f in dataclasses.fields(hint))}, got {value!r}")
            _check_keys(hint, value, path)
        elif typing.get_origin(hint) is dict and isinstance(value, Mapping):  # dict[str, a dataclass]
            inner = typing.get_args(hint)[1] if len(typing.get_args(hint)) == 2 else None
            if dataclasses.is_dataclass(inner):
                for name, item in value.items():
                    if isinstance(item, Mapping):
                        _check_keys(inner, item, f"{path}.{name}")
    missing = [f.name for f in fields.values() if f.name not in data and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"config {where or 'top level'!r} lacks required key(s) {missing}")


def to_dataclass(cls: type, data: Mapping[str, Any]) -> Any:
    """Validate ``data`` against the dataclass ``cls`` and build it (nested dataclasses included).

    Raises:
        ValueError: a key ``cls`` does not have (named, with the allowed ones), a missing required key,
            or a value whose type does not match its field (named, with the expected type).
    """
    _require_config_libraries()
    from jsonargparse import ArgumentError as JsonArgumentError
    from jsonargparse import ArgumentParser

    if not isinstance(data, Mapping):
        raise ValueError(f"a config must be a mapping, got {type(data).__name__}")
    _check_keys(cls, data, "")
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "config")
    try:
        namespace = parser.parse_object({"config": dict(data)})
        instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes
        return instantiate(namespace).config
    except (JsonArgumentError, TypeError) as error:
        raise ValueError(f"invalid config: {str(error).strip()}") from error


def load_config(benchmark: Any, preset: str, *, config_file: str | Path | None = None,
                overrides: Sequence[str] = ()) -> tuple[Any, dict[str, Any]]:
    """``(config, run section)`` of ``benchmark``'s ``preset`` with ``config_file`` and ``overrides`` applied.

    The ``run:`` section (runner options) is returned as a dict, checked against :class:`RunOptions`.
    """
    names = benchmark.preset_names()
    if preset not in names:
        raise ValueError(f"preset must be one of {names} for {benchmark.name!r}, got {preset!r}")
    data = read_yaml(benchmark.preset_folder() / f"{preset}.yaml", what="preset file")
    if config_file is not None:
        data = merge(data, read_yaml(config_file, what="--config"))
    for text in overrides:
        data = merge(data, parse_override(text))
    run = data.pop("run", None) or {}
    if not isinstance(run, Mapping):
        raise ValueError(f"the 'run' section must be a mapping, got {run!r}")
    _check_keys(RunOptions, run, "run")
    config = to_dataclass(benchmark.Config, data)
    if isinstance(getattr(config, "seeds", None), list):  # every benchmark's replicates: checked here, once
        from pe_toolkit.bench.checks import distinct

        distinct("seeds", config.seeds)
    benchmark.check(config)
    return config, dict(run)
