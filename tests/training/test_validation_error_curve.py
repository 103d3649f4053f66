"""ValidationErrorCurve: the validation exact-match error after each validation, and the stop below a target."""

import pytest

from pe_toolkit.training.callbacks import ValidationErrorCurve


class Trainer:
    def __init__(self, step, sanity_checking=False):
        self.global_step, self.sanity_checking, self.should_stop = step, sanity_checking, False


class Module:
    def __init__(self, val_results):
        self.val_results = val_results


def test_the_error_is_one_minus_the_exact_match_over_every_length_and_stops_below_the_target():
    curve = ValidationErrorCurve(0.05)
    trainer = Trainer(250)
    curve.on_validation_end(trainer, Module({3: (48, 50), 9: (49, 50)}))  # 3 wrong of 100
    assert trainer.should_stop and curve.reached_at == 250 and curve.history == [(250, pytest.approx(0.03))]
    trainer = Trainer(250)
    ValidationErrorCurve(0.05).on_validation_end(trainer, Module({3: (90, 100)}))
    assert not trainer.should_stop


def test_without_stop_it_records_the_whole_curve_and_the_first_step_below_the_target():
    recorder = ValidationErrorCurve(0.05, stop=False)
    for step, results in ((250, {3: (97, 100)}), (500, {3: (99, 100)}), (750, {3: (90, 100)})):
        trainer = Trainer(step)
        recorder.on_validation_end(trainer, Module(results))
        assert not trainer.should_stop
    assert recorder.reached_at == 250 and [s for s, _ in recorder.history] == [250, 500, 750]
    assert recorder.history[2][1] == pytest.approx(0.10)
    restored = ValidationErrorCurve(0.05, stop=False)
    restored.load_state_dict(recorder.state_dict())  # a resumed fit continues the curve
    assert restored.history == recorder.history and restored.reached_at == 250


def test_sanity_checks_are_not_recorded():
    curve = ValidationErrorCurve(0.5)
    curve.on_validation_end(Trainer(0, sanity_checking=True), Module({1: (1, 1)}))
    assert curve.history == [] and curve.reached_at is None


@pytest.mark.parametrize("target", [0.0, 1.0, -0.1, True, "0.1"])
def test_a_target_outside_0_1_is_refused(target):
    with pytest.raises(ValueError, match=r"target_error must be a number in \(0, 1\)"):
        ValidationErrorCurve(target)
