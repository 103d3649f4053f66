"""Silence known third-party noise: :func:`quiet_third_party`.

Benchmark and training logs fill up with lines that dependencies print on every run and that say
nothing about the run: Lightning's device banner and advertising tips, its notes on how a fit
ended, and warnings that dependencies raise about *their own* code. :func:`quiet_third_party`
silences exactly the messages listed below, each one matched by its text and, for warnings, by
the third-party module it is raised from; everything else is left as it was:

* a warning raised from a ``pe_toolkit`` module, ``domains/`` or a benchmark script is never
  filtered (module names are anchored on the third-party package), even when its text matches;
* no category is ignored as a whole, and a warning not in the table keeps Python's (or the
  caller's) filters;
* only the listed Lightning info lines are dropped; its other info lines (``Restored all
  states from the checkpoint``, ```Trainer.fit` stopped: No training batches``, ...) and every
  warning or error it logs still show.

Warnings: ``warnings.filterwarnings("ignore", message=..., category=..., module=...)``, the
message matched at its start, the module anchored at both ends (:data:`WARNING_FILTERS`):

==================================  ================================  ================================================
message (category)                  raised from (``module=``)         why it is safe to silence
==================================  ================================  ================================================
```isinstance(treespec, LeafSpec)`  ``lightning.pytorch.utilities.``  torch deprecated ``LeafSpec``; Lightning's own
is deprecated`` (FutureWarning)     ``_pytree`` (or ``pytorch_``      collation code still checks for it in every fit.
                                    ``lightning.utilities._pytree``)  Nothing a caller can change; a Lightning fix.
``Your `IterableDataset` has        ``lightning.pytorch.utilities.``  a caution for ``num_workers > 1``; the byte-LM
`__len__` defined`` (UserWarning)   ``data``                          windows of ``pe_toolkit.data`` are an iterable
                                                                      data set with a length, loaded in-process.
``The '<loader>' does not have      ``lightning.pytorch.trainer.``    a performance hint (``PossibleUserWarning``) on
many workers ...`` (UserWarning)    ``connectors.data_connector``     machines with 3+ CPUs; the toy data sets load
                                                                      in-process on purpose (workers: start-up cost).
```torch.jit.script` is             ``torch.jit._script``             raised while ``torch_geometric`` is imported (it
deprecated`` (DeprecationWarning)                                     scripts helpers then); ``pe_toolkit`` never calls
                                                                      ``torch.jit.script``.
==================================  ================================  ================================================

Lightning info lines: one :class:`logging.Filter` on each rank-zero logger of
:data:`LIGHTNING_LOGGERS` (``rank_zero_info`` logs through whichever one was imported last)
drops INFO records matching :data:`LIGHTNING_INFO_LINES`. A filter, not a log level: Lightning
resets ``lightning.pytorch`` to INFO when it is imported, and a level would also hide the
info lines that matter:

============================================  ==========================================================================
line (matched at its start)                   why it is safe to silence
============================================  ==========================================================================
``GPU available: False, used: False``,        the device banner of every ``Trainer``; the device is the caller's own
``TPU available: ...`` (``HPU`` / ``IPU``     ``accelerator=``. The *warning* ``GPU available but not used`` still
in older Lightning)                           shows.
``💡 Tip: For seamless cloud ...``             advertising (litlogger, litmodels) from every ``Trainer``, the litlogger
                                              one even with ``logger=False``. The litmodels one is avoided at its cause
                                              by ``enable_checkpointing=False`` or an explicit ``ModelCheckpoint``.
```Trainer.fit` stopped: `max_steps=N`        the normal end of a fit whose budget the caller set; other stop reasons
reached.`` (or ``max_epochs``)                (``No training batches``, ...) still show.
``Restoring states from the checkpoint        a test run loading the checkpoint it was given (``trainer.test(
path at ...``, ``Loaded model weights from    ckpt_path=...)``); a resumed *fit* still prints ``Restored all states
the checkpoint at ...``                       from the checkpoint at ...``.
============================================  ==========================================================================

Where a message can be avoided at its cause, callers should do that instead (the benchmarks pass
``enable_model_summary=False``, ``enable_progress_bar=False``, ``enable_checkpointing=False`` and
``seed_everything(..., verbose=False)``); these filters are for the lines no argument turns off.

This module imports only :mod:`warnings`, :mod:`logging` and :mod:`re` (``import pe_toolkit.quiet``
never imports Lightning): the loggers are configured by name, before or after Lightning is imported.
"""

from __future__ import annotations

import logging
import re
import warnings

__all__ = ["WARNING_FILTERS", "LIGHTNING_INFO_LINES", "LIGHTNING_LOGGERS", "quiet_third_party"]

_LIGHTNING = r"(?:lightning\.pytorch|pytorch_lightning)"

WARNING_FILTERS: tuple[tuple[str, type[Warning], str], ...] = (
    # (message regex, category, module regex); see the module docstring's table
    (r"`isinstance\(treespec, LeafSpec\)` is deprecated", FutureWarning, _LIGHTNING + r"\.utilities\._pytree$"),
    (r"Your `IterableDataset` has `__len__` defined", UserWarning, _LIGHTNING + r"\.utilities\.data$"),
    (r"The '\w+' does not have many workers which may be a bottleneck", UserWarning,
     _LIGHTNING + r"\.trainer\.connectors\.data_connector$"),
    (r"`torch\.jit\.script` is deprecated", DeprecationWarning, r"torch\.jit\._script$"),
)
"""The warnings :func:`quiet_third_party` ignores: ``(message, category, module)``."""

LIGHTNING_INFO_LINES: tuple[str, ...] = (
    r"(?:GPU|TPU|HPU|IPU) available: ",
    r"💡 Tip: ",
    r"`Trainer\.fit` stopped: `max_(?:steps|epochs)=-?\d+` reached\.$",
    r"Restoring states from the checkpoint path at ",
    r"Loaded model weights from the checkpoint at ",
)
"""The Lightning info lines :func:`quiet_third_party` drops (regular expressions matched at the start)."""

LIGHTNING_LOGGERS: tuple[str, ...] = (
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric.utilities.rank_zero",
    "lightning_utilities.core.rank_zero",
    "pytorch_lightning.utilities.rank_zero",
    "lightning_fabric.utilities.rank_zero",
)
"""The loggers Lightning's ``rank_zero_info`` writes to (one of them, depending on import order)."""


class _KnownLightningLines(logging.Filter):
    """Drops INFO-and-below records whose message matches :data:`LIGHTNING_INFO_LINES`."""

    _pattern = re.compile("|".join(f"(?:{p})" for p in LIGHTNING_INFO_LINES))

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot format itself: not ours to judge
            return True
        return self._pattern.match(message) is None


def quiet_third_party() -> None:
    """Silence the known third-party warnings and Lightning info lines of this module's tables.

    Puts one ``ignore`` entry per row of :data:`WARNING_FILTERS` at the front of :mod:`warnings`'
    filters (so they win over ``-W default`` and earlier filters; :func:`warnings.filterwarnings`
    moves an identical entry to the front instead of adding a second one) and adds one
    :class:`logging.Filter` to each of :data:`LIGHTNING_LOGGERS` unless it has one. Idempotent:
    a second call adds nothing. Affects this process and the children it forks; a spawned
    process (``multiprocessing`` "spawn", a subprocess) must call it itself. Nothing else is
    changed: no category is ignored as a whole, no log level is set, and warnings raised from
    ``pe_toolkit`` or any other module not named in the table still show.

    Undo it within a scope with ``warnings.catch_warnings()`` (the warning filters) and by
    removing the filter from the loggers (``logging.getLogger(name).filters``).
    """
    for message, category, module in reversed(WARNING_FILTERS):  # reversed: they end up in table order
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _KnownLightningLines) for f in logger.filters):
            logger.addFilter(_KnownLightningLines())
