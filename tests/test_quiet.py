"""``pe_toolkit.quiet.quiet_third_party``: known third-party noise goes, everything else stays.

Warning filters are changed only inside ``warnings.catch_warnings()`` and logger filters are put
back by a fixture, so nothing leaks into other tests; the Lightning run is a subprocess.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from pe_toolkit import quiet
from pe_toolkit.quiet import LIGHTNING_LOGGERS, WARNING_FILTERS, quiet_third_party

REPO_ROOT = Path(__file__).resolve().parents[1]

# One real message per row of WARNING_FILTERS, with the module Python attributes it to.
KNOWN_WARNINGS = [
    ("`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec) and "
     "treespec.is_leaf()` instead.", FutureWarning, "lightning.pytorch.utilities._pytree"),
    ("`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec) and "
     "treespec.is_leaf()` instead.", FutureWarning, "pytorch_lightning.utilities._pytree"),
    ("Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading (when "
     "num_workers > 1), `__len__` could be inaccurate", UserWarning, "lightning.pytorch.utilities.data"),
    ("The 'train_dataloader' does not have many workers which may be a bottleneck. Consider increasing the "
     "value of the `num_workers` argument", UserWarning, "lightning.pytorch.trainer.connectors.data_connector"),
    ("`torch.jit.script` is deprecated. Please switch to `torch.compile` or `torch.export`.", DeprecationWarning,
     "torch.jit._script"),
]


def _emit(message: str, category: type[Warning], module: str) -> None:
    filename = "/site-packages/" + module.replace(".", "/") + ".py"
    warnings.warn_explicit(message, category, filename, 21, module=module)


def _shown(message: str, category: type[Warning], module: str, *, quiet_first: bool) -> list[str]:
    """The warnings that reach the user when ``message`` is raised from ``module``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # as loud as it gets: nothing hidden by Python's defaults
        if quiet_first:
            quiet_third_party()
        _emit(message, category, module)
    return [str(w.message) for w in caught]


@pytest.fixture(autouse=True)
def _restore_logger_filters():
    saved = {name: list(logging.getLogger(name).filters) for name in LIGHTNING_LOGGERS}
    yield
    for name, filters in saved.items():
        logging.getLogger(name).filters[:] = filters


def test_every_filter_has_an_example():
    covered = {(category, module) for _, category, module in KNOWN_WARNINGS}
    for _, category, module_pattern in WARNING_FILTERS:
        assert any(c is category and re.match(module_pattern, m) for c, m in covered), module_pattern


@pytest.mark.parametrize(("message", "category", "module"), KNOWN_WARNINGS, ids=lambda v: str(v)[:30])
def test_known_third_party_warnings_are_silenced(message, category, module):
    assert _shown(message, category, module, quiet_first=False) == [message]  # really raised ...
    assert _shown(message, category, module, quiet_first=True) == []  # ... and silenced


@pytest.mark.parametrize("module", ["pe_toolkit.data.byte_lm", "pe_toolkit", "domains.music.scores", "__main__",
                                    "speed", "lightning_extras", "torch.jit._script_helpers"])
@pytest.mark.parametrize(("message", "category"), [(m, c) for m, c, _ in KNOWN_WARNINGS[::2]],
                         ids=lambda v: str(v)[:30])
def test_the_same_message_from_another_module_still_shows(message, category, module):
    assert _shown(message, category, module, quiet_first=True) == [message]


@pytest.mark.parametrize(("message", "category", "module"), [
    ("`Trainer.fit` was given a checkpoint that does not exist", UserWarning, "lightning.pytorch.trainer.trainer"),
    ("some future deprecation", FutureWarning, "lightning.pytorch.utilities._pytree"),
    ("torch.load with weights_only=False is deprecated", FutureWarning, "torch.serialization"),
    ("pkg_resources is deprecated as an API", DeprecationWarning, "pretty_midi"),
    ("The 'train_dataloader' does not have many workers", RuntimeWarning,
     "lightning.pytorch.trainer.connectors.data_connector"),
])
def test_unknown_third_party_warnings_still_show(message, category, module):
    assert _shown(message, category, module, quiet_first=True) == [message]


def test_no_category_is_ignored_as_a_whole():
    with warnings.catch_warnings():
        before = list(warnings.filters)
        quiet_third_party()
        added = [f for f in warnings.filters if f not in before]
    assert len(added) == len(WARNING_FILTERS)
    for action, message, category, module, lineno in added:
        assert action == "ignore" and lineno == 0
        assert message is not None and message.pattern and module is not None and module.pattern
        assert category is not Warning


def test_calling_it_twice_adds_nothing():
    with warnings.catch_warnings():
        quiet_third_party()
        once = list(warnings.filters)
        quiet_third_party()
        assert warnings.filters == once
    for name in LIGHTNING_LOGGERS:
        assert sum(isinstance(f, quiet._KnownLightningLines) for f in logging.getLogger(name).filters) == 1


def test_it_wins_over_a_later_catch_all_filter():
    message, category, module = KNOWN_WARNINGS[0]
    with warnings.catch_warnings(record=True) as caught:
        quiet_third_party()
        warnings.simplefilter("always")  # e.g. pytest's or ``-W default``: comes first now ...
        quiet_third_party()  # ... until it is called again
        _emit(message, category, module)
    assert caught == []


@pytest.mark.parametrize(("line", "dropped"), [
    ("GPU available: False, used: False", True),
    ("GPU available: True (cuda), used: True", True),
    ("TPU available: False, using: 0 TPU cores", True),
    ("HPU available: False, using: 0 HPUs", True),
    ("💡 Tip: For seamless cloud logging and experiment tracking, try installing [litlogger](...)", True),
    ("💡 Tip: For seamless cloud uploads and versioning, try installing [litmodels](...)", True),
    ("`Trainer.fit` stopped: `max_steps=40` reached.", True),
    ("`Trainer.fit` stopped: `max_epochs=5` reached.", True),
    ("Restoring states from the checkpoint path at /tmp/x/epoch=3-step=20.ckpt", True),
    ("Loaded model weights from the checkpoint at /tmp/x/epoch=3-step=20.ckpt", True),
    ("`Trainer.fit` stopped: No training batches.", False),
    ("Restored all states from the checkpoint at /tmp/x/last.ckpt", False),
    ("LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0]", False),
    ("Seed set to 0", False),
])
def test_lightning_info_lines(line, dropped):
    quiet_third_party()
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, line, (), None)
    assert logger.filter(record) is (not dropped)
    warning = logger.makeRecord(logger.name, logging.WARNING, __file__, 1, line, (), None)
    assert logger.filter(warning)  # only info lines are dropped


def test_import_is_light():
    code = "import sys, pe_toolkit.quiet; print(sorted(m for m in ('lightning', 'pytorch_lightning', 'matplotlib') " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert out.stdout.strip() == "[]"


FIT = textwrap.dedent(
    """
    import sys
    import warnings

    if sys.argv[1] == "quiet":
        from pe_toolkit.quiet import quiet_third_party

        quiet_third_party()
    import lightning as L
    import lightning.fabric.utilities.data as fabric_data
    import torch

    fabric_data._num_cpus_available = lambda: 8  # Lightning's num_workers hint then fires on any machine


    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, _):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)


    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    trainer = L.Trainer(max_steps=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), data)
    warnings.warn_explicit("`isinstance(treespec, LeafSpec)` is deprecated (raised by the project)",
                           FutureWarning, "pe_toolkit/fake.py", 1, module="pe_toolkit.fake")
    print("FIT OK", trainer.global_step)
    """
)
NOISE = ("GPU available", "TPU available", "Tip:", "`Trainer.fit` stopped", "LeafSpec)` is deprecated, use",
         "does not have many workers")


@pytest.mark.slow
def test_a_lightning_fit_is_quiet(tmp_path):
    script = tmp_path / "fit.py"
    script.write_text(FIT)
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    runs = {
        mode: subprocess.Popen([sys.executable, str(script), mode], cwd=tmp_path, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for mode in ("loud", "quiet")
    }
    output = {mode: run.communicate(timeout=300)[0] for mode, run in runs.items()}
    for mode, run in runs.items():
        assert run.returncode == 0, output[mode]
        assert "FIT OK 1" in output[mode], output[mode]
        assert "raised by the project" in output[mode], output[mode]  # the project's warning always shows
    for noise in NOISE:
        assert noise in output["loud"], f"{noise!r} not printed without quiet_third_party: the test is stale"
        assert noise not in output["quiet"], output["quiet"]
