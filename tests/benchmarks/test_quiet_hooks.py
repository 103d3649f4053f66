"""Every benchmark run is quiet: ``standard_argparser`` and the ``worker_pool`` workers call ``quiet_third_party``."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from benchmarks import common
from pe_toolkit.quiet import LIGHTNING_LOGGERS, WARNING_FILTERS

REPO_ROOT = Path(__file__).resolve().parents[2]
LEAFSPEC = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."


@pytest.fixture(autouse=True)
def _restore_logger_filters():
    saved = {name: list(logging.getLogger(name).filters) for name in LIGHTNING_LOGGERS}
    yield
    for name, filters in saved.items():
        logging.getLogger(name).filters[:] = filters


def _raise_both() -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        common.standard_argparser("demo")
        warnings.warn_explicit(LEAFSPEC, FutureWarning, "_pytree.py", 21, module="lightning.pytorch.utilities._pytree")
        warnings.warn_explicit(LEAFSPEC, FutureWarning, "common.py", 1, module="benchmarks.common")
    return [w.filename for w in caught]


def test_standard_argparser_quiets_third_party_noise_only():
    assert _raise_both() == ["common.py"]  # the benchmark's own warning still shows
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "GPU available: False, used: False", (), None)
    assert not logger.filter(record)


def test_importing_common_changes_no_filter():
    # common now re-exports the harness (pe_toolkit.bench, so torch): the baseline is taken after torch's own
    # import-time filters; importing common must add none of the toolkit's quiet() filters.
    code = ("import sys, warnings, torch, pe_toolkit; before = list(warnings.filters); "
            "sys.path.insert(0, 'benchmarks'); import common; assert warnings.filters == before; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_worker_pool_workers_are_quiet():
    # a spawned worker starts from Python's defaults: it must install the filters itself
    probe = ("[f[1].pattern for f in __import__('warnings').filters if f[0] == 'ignore' and f[1] is not None], "
             "len(__import__('logging').getLogger('lightning.pytorch.utilities.rank_zero').filters)")
    with common.worker_pool(1) as pool:
        patterns, logger_filters = pool.submit(eval, probe).result(timeout=120)
    assert {message for message, _, _ in WARNING_FILTERS} <= set(patterns)
    assert logger_filters == 1
