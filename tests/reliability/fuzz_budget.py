"""How many examples a fuzz test tries: its default budget, times the hypothesis profile's factor.

``make test`` runs the ``repeatable`` profile (derandomized, the default 100-example budget: factor
1). ``pytest tests/reliability --hypothesis-profile=long`` (registered in ``tests/conftest.py``,
2,000 examples per test as the base) multiplies every fuzz test's budget by 20 and searches fresh
random examples.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

BASE_EXAMPLES = 100


def fuzz(examples: int) -> settings:
    """Settings for a fuzz test whose ``make test`` budget is ``examples``."""
    factor = max(1, settings.default.max_examples // BASE_EXAMPLES)
    return settings(max_examples=examples * factor, deadline=None, suppress_health_check=[HealthCheck.too_slow])
