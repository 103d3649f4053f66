"""The self-extending tuning grid: interior optimum reached, cap stated, divergence never chosen."""

import math

import pytest

from pe_toolkit.bench.tuning import GridSearch, extend_value, tune


def parabola(optimum):
    return lambda lr: -((math.log10(lr) - math.log10(optimum)) ** 2)


def test_interior_optimum_needs_no_extension():
    calls = []
    result = tune(lambda v: calls.append(v) or parabola(1e-3)(v), [1e-4, 1e-3, 1e-2], higher_is_better=True)
    assert result.chosen == 1e-3 and result.extensions == 0 and not result.cap_hit
    assert calls == [1e-4, 1e-3, 1e-2]


def test_edge_optimum_extends_until_interior():
    result = tune(parabola(3e-2), [1e-4, 1e-3], higher_is_better=True, max_extensions=3)
    assert result.chosen == pytest.approx(1e-2) and result.extensions == 2  # 1e-2 then 1e-1 added
    assert not result.cap_hit and result.edge is None
    assert result.values[0] < result.chosen < result.values[-1]


def test_low_edge_extends_downwards_lower_is_better():
    result = tune(lambda v: (math.log10(v) + 5) ** 2, [1e-3, 1e-2], higher_is_better=False, max_extensions=4)
    assert result.chosen == pytest.approx(1e-5)
    assert min(result.values) == pytest.approx(1e-6)


def test_cap_hit_is_reported_with_its_edge():
    result = tune(parabola(1.0), [1e-4, 1e-3], higher_is_better=True, max_extensions=1)
    assert result.cap_hit and result.edge == "high" and result.extensions == 1
    assert result.chosen == pytest.approx(1e-2)


def test_divergence_counts_as_worst_and_bounds_the_search():
    # the optimum (10^-2.5) lies between 1e-3 and the first extension, 1e-2, which diverges
    result = tune(lambda lr: -abs(math.log10(lr) + 2.5) if lr < 5e-3 else math.nan, [1e-4, 1e-3],
                  higher_is_better=True)
    assert result.chosen == pytest.approx(1e-3)
    assert math.isnan(result.scores[max(result.values)])
    assert not result.cap_hit


def test_limits_stop_extension_and_count_as_cap():
    result = tune(lambda p: p, [0.5, 0.9], higher_is_better=True, scale="linear", limits=(0.0, 0.95))
    assert result.cap_hit and result.edge == "high" and result.values == [0.5, 0.9]


def test_details_are_kept_and_ties_go_to_the_first_evaluated():
    result = tune(lambda v: (1.0, {"run": v}), [0.1, 0.2, 0.3], higher_is_better=True, scale="linear",
                  max_extensions=0)
    assert result.chosen == 0.1 and result.details[0.2] == {"run": 0.2}
    assert result.cap_hit  # 0.1 is the low edge and no extension was allowed


def test_extend_value_scales():
    assert extend_value([1e-3, 1e-2], "high", "log") == pytest.approx(1e-1)
    assert extend_value([1e-3, 1e-2], "low", "log") == pytest.approx(1e-4)
    assert extend_value([0.1, 0.3], "high", "linear") == pytest.approx(0.5)
    assert extend_value([0.1, 0.3], "low", "linear") == pytest.approx(-0.1)


@pytest.mark.parametrize("grid, kwargs, match", [
    ([], {}, "at least one value"),
    ([1e-3, 1e-3], {}, "distinct"),
    ([0.0, 1e-3], {}, "positive values"),
    ([1e-3], {"scale": "cubic"}, "scale must be one of"),
    ([1e-3], {"max_extensions": -1}, "max_extensions"),
    ([2.0], {"limits": (0.0, 1.0)}, "within limits"),
])
def test_bad_arguments(grid, kwargs, match):
    with pytest.raises(ValueError, match=match):
        tune(lambda v: 0.0, grid, higher_is_better=True, **kwargs)


def test_grid_search_in_rounds_matches_tune():
    search = GridSearch([1e-4, 1e-3], higher_is_better=True, max_extensions=3)
    rounds = []
    while not search.done:
        values = search.pending()
        rounds.append(values)
        for value in values:
            search.record(value, parabola(3e-2)(value))
    assert rounds == [[1e-4, 1e-3], [pytest.approx(1e-2)], [pytest.approx(1e-1)]]
    assert search.result() == tune(parabola(3e-2), [1e-4, 1e-3], higher_is_better=True, max_extensions=3)
    assert extend_value([1e-4, 1e-3], "low", "log") == 1e-5  # rounded: no float noise in a run's name


def test_grid_search_errors():
    search = GridSearch([0.1, 0.2], higher_is_better=True, scale="linear")
    with pytest.raises(ValueError, match=r"the search is not done: values \[0.1, 0.2\] still need a score"):
        search.result()
    with pytest.raises(ValueError, match=r"value 0.3 is not pending; pending: \[0.1, 0.2\]"):
        search.record(0.3, 1.0)
    with pytest.raises(ValueError, match="grid values must be finite numbers"):
        GridSearch([0.1, math.inf], higher_is_better=True)
