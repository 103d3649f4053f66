"""FitClock: the wall time of a fit, continued across a resumption through its checkpoint state."""

from __future__ import annotations

import pytest

from pe_toolkit.training import callbacks
from pe_toolkit.training.callbacks import FitClock


@pytest.fixture
def clock_time(monkeypatch):
    """A controllable ``time.perf_counter`` as seen by the callbacks module."""
    now = [100.0]
    monkeypatch.setattr(callbacks.time, "perf_counter", lambda: now[0])
    return now


def test_a_fresh_fit_measures_its_own_time(clock_time):
    clock = FitClock()
    clock.on_fit_start(None, None)
    clock_time[0] += 7.5
    assert clock.state_dict() == {"seconds": 7.5}  # what a checkpoint taken now records
    clock_time[0] += 2.5
    clock.on_fit_end(None, None)
    assert clock.resumed_seconds == 0.0 and clock.seconds == 10.0


def test_a_resumed_fit_adds_the_time_recorded_in_its_checkpoint(clock_time):
    interrupted = FitClock()
    interrupted.on_fit_start(None, None)
    clock_time[0] += 30.0
    state = interrupted.state_dict()  # the checkpoint; the process then dies
    resumed = FitClock()
    resumed.load_state_dict(state)
    resumed.on_fit_start(None, None)
    clock_time[0] += 12.0
    resumed.on_fit_end(None, None)
    assert resumed.resumed_seconds == 30.0 and resumed.seconds == 42.0
