"""Seeded synthetic tasks for length-generalization experiments.

Every task generates ``Example(prompt, answer, length, meta)`` token lists, has a train and a test
range of its length measure, a deterministic vocabulary and an exact-match checker::

    >>> from pe_toolkit.tasks import get_task, list_tasks, Vocabulary
    >>> task = get_task("addition", scratchpad="icovr")
    >>> train = task.generate(4, split="train", seed=0)       # lengths in task.train_lengths
    >>> test = task.generate(4, split="test", seed=0)         # lengths in task.test_lengths
    >>> vocab = Vocabulary(task.vocabulary())
    >>> ids, answer_start = vocab.encode(train[0])            # <bos> prompt <sep> answer <eos>
    >>> task.check(train[0], train[0].answer)
    True

Families (one module each): :mod:`~pe_toolkit.tasks.copy`, :mod:`~pe_toolkit.tasks.reverse`,
:mod:`~pe_toolkit.tasks.arithmetic` (addition, polynomial, summation, parity), :mod:`~pe_toolkit.tasks.sort`,
:mod:`~pe_toolkit.tasks.lego`, :mod:`~pe_toolkit.tasks.scan`, :mod:`~pe_toolkit.tasks.pcfg`
(Kazemnejad et al. 2023), :mod:`~pe_toolkit.tasks.counting` (Golkar et al. 2024) and
:mod:`~pe_toolkit.tasks.cope_tasks` (Golovneva et al. 2024). The unified scratchpad (32 formats)
lives in :mod:`~pe_toolkit.tasks.scratchpad`.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from collections.abc import Callable
from typing import Any

from pe_toolkit.tasks.arithmetic import AdditionTask, ParityTask, PolynomialTask, SummationTask
from pe_toolkit.tasks.base import SPECIAL_TOKENS, Example, Task, Vocabulary
from pe_toolkit.tasks.cope_tasks import CopeCountingTask, FlipFlopTask, SelectiveCopyTask
from pe_toolkit.tasks.copy import CopyTask
from pe_toolkit.tasks.counting import ContextualCountingTask
from pe_toolkit.tasks.lego import LegoTask
from pe_toolkit.tasks.pcfg import PcfgProductivityTask, interpret_pcfg
from pe_toolkit.tasks.reverse import ReverseTask
from pe_toolkit.tasks.scan import ScanLengthTask, interpret_scan
from pe_toolkit.tasks.scratchpad import (
    ScratchpadFormat,
    ScratchpadMarkers,
    ScratchpadParseError,
    ScratchpadStep,
    ScratchpadTask,
    parse_scratchpad,
    render_scratchpad,
)
from pe_toolkit.tasks.sort import SortMultiDigitTask, SortSingleTokenTask

# name -> (class, fixed options). Fixed options select the variant and cannot be overridden.
_TASKS: dict[str, tuple[Callable[..., Task], dict[str, Any]]] = {
    "copy_repeat": (CopyTask, {"variant": "repeat"}),
    "copy_replace": (CopyTask, {"variant": "replace"}),
    "copy_random": (CopyTask, {"variant": "random"}),
    "copy_repeat_x2": (CopyTask, {"variant": "repeat_x2"}),
    "copy_random_x2": (CopyTask, {"variant": "random_x2"}),
    "reverse": (ReverseTask, {"variant": "plain"}),
    "reverse_x2": (ReverseTask, {"variant": "x2"}),
    "reverse_copy": (ReverseTask, {"variant": "copy"}),
    "addition": (AdditionTask, {}),
    "polynomial": (PolynomialTask, {}),
    "sort_single": (SortSingleTokenTask, {}),
    "sort_multi": (SortMultiDigitTask, {}),
    "summation": (SummationTask, {}),
    "parity": (ParityTask, {}),
    "lego": (LegoTask, {"permuted": False}),
    "lego_permuted": (LegoTask, {"permuted": True}),
    "scan_length": (ScanLengthTask, {}),
    "pcfg_productivity": (PcfgProductivityTask, {}),
    "contextual_counting": (ContextualCountingTask, {}),
    "cope_counting": (CopeCountingTask, {}),
    "selective_copy": (SelectiveCopyTask, {}),
    "flip_flop": (FlipFlopTask, {}),
}


def register_task(name: str, factory: Callable[..., Task], **fixed_options: Any) -> None:
    """Register ``factory(**fixed_options, **options)`` as task ``name``.

    Raises:
        TypeError: if ``name`` is not a str or ``factory`` is not callable.
        ValueError: if ``name`` is already registered.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_task: name must be a non-empty str, got {name!r}")
    if not callable(factory):
        raise TypeError(f"register_task: factory must be callable, got {type(factory).__name__}")
    if name in _TASKS:
        raise ValueError(f"register_task: task {name!r} is already registered")
    _TASKS[name] = (factory, dict(fixed_options))


def list_tasks(pattern: str | None = None) -> list[str]:
    """Sorted names of the registered tasks, optionally filtered by an fnmatch ``pattern`` (``"copy_*"``)."""
    names = sorted(_TASKS)
    return names if pattern is None else fnmatch.filter(names, pattern)


def task_options(name: str) -> list[str]:
    """The keyword options ``get_task(name, ...)`` accepts."""
    factory, fixed = _lookup(name)
    if isinstance(factory, type):
        targets = [cls.__init__ for cls in factory.__mro__ if "__init__" in vars(cls) and cls is not object]
    else:
        targets = [factory]
    options = {p.name for t in targets for p in inspect.signature(t).parameters.values()
               if p.kind is p.KEYWORD_ONLY and p.name not in fixed}
    return sorted(options)


def _lookup(name: str) -> tuple[Callable[..., Task], dict[str, Any]]:
    if not isinstance(name, str):
        raise TypeError(f"task name must be a str, got {type(name).__name__}")
    if name not in _TASKS:
        close = difflib.get_close_matches(name, list(_TASKS), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"unknown task {name!r}{hint} Registered: {', '.join(sorted(_TASKS))}")
    return _TASKS[name]


def get_task(name: str, **options: Any) -> Task:
    """Build the task registered as ``name`` with keyword ``options``.

    Example:
        >>> get_task("copy_random", train_lengths=(4, 10), num_symbols=20).name
        'copy_random'

    Raises:
        ValueError: unknown name (with suggestions), or an option that fixes the variant
            (e.g. ``variant`` of ``copy_repeat``).
        TypeError: an unknown option (the message lists the accepted ones).
    """
    factory, fixed = _lookup(name)
    clash = sorted(set(options) & set(fixed))
    if clash:
        raise ValueError(f"task {name!r} fixes {', '.join(f'{k}={fixed[k]!r}' for k in clash)}; "
                         f"pick another registered task instead (list_tasks())")
    allowed = task_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(f"task {name!r} got unknown option(s) {unknown}; allowed: {allowed}")
    return factory(**fixed, **options)


__all__ = [
    "SPECIAL_TOKENS", "AdditionTask", "ContextualCountingTask", "CopeCountingTask", "CopyTask", "Example",
    "FlipFlopTask", "LegoTask", "ParityTask", "PcfgProductivityTask", "PolynomialTask", "ReverseTask",
    "ScanLengthTask", "ScratchpadFormat", "ScratchpadMarkers", "ScratchpadParseError", "ScratchpadStep",
    "ScratchpadTask", "SelectiveCopyTask", "SortMultiDigitTask", "SortSingleTokenTask", "SummationTask",
    "Task",
    "Vocabulary", "get_task", "interpret_pcfg", "interpret_scan", "list_tasks", "parse_scratchpad",
    "register_task", "render_scratchpad", "task_options",
]
