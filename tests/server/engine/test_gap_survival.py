""":class:`GapSurvival`: the empirical survival of a call's gap, by hand."""

from __future__ import annotations

import math

import pytest

from pbkv_server.engine.policies.gap_survival import GapSurvival


def _code() -> GapSurvival:
    """App "code": gaps 1, 2, 2, 10 s and two ends (n = 6)."""
    s = GapSurvival()
    for g in (2.0, math.inf, 1.0, 10.0, math.inf, 2.0):
        s.observe("code", g)
    return s


def test_survival_counts_ends_as_longer_than_every_gap():
    s = _code()
    assert [s.survival("code", t) for t in (0.0, 1.0, 2.0, 100.0)] == [1.0, 5 / 6, 0.5, 2 / 6]


def test_reuse_within_is_conditional_on_the_time_waited():
    s = _code()
    assert s.reuse_within("code", 0.0, 2.0) == 0.5  # 1, 2, 2 of 6
    assert s.reuse_within("code", 2.0, 10.0) == 3 / 5  # of 2, 2, 10, inf, inf (gap >= 2): 2, 2, 10
    assert s.reuse_within("code", 2.5, 10.0) == 1 / 3  # of 10, inf, inf: 10


def test_residual_median():
    s = _code()
    assert s.residual("code") == 2.0  # 3 of 6 by 2 s
    assert s.residual("code", 1.5) == 8.5  # of 2, 2, 10, inf, inf: 3 of 5 by 10 s, 8.5 s from 1.5
    assert s.residual("code", 2.0) == 8.0  # of 2, 2, 10, inf, inf: 3 of 5 by 10 s
    assert s.residual("code", 2.5) == math.inf  # of 10, inf, inf: 1 of 3 ever calls


def test_a_zero_gap_counts_at_the_start():
    s = GapSurvival()
    s.observe("a", 0.0)
    assert s.residual("a") == 0.0 and s.reuse_within("a", 0.0, 0.0) == 1.0


def test_window_forgets_the_oldest_outcome_and_unknown_keys_use_the_pool():
    s = GapSurvival(window=3)
    for g in (1.0, math.inf, 5.0, 7.0):
        s.observe("a", g)
    assert s.outcomes("a") == 3 and s.survival("a", 6.0) == 2 / 3  # inf, 5, 7
    assert s.survival("b", 6.0) == 2 / 3  # the pool (None) saw the same outcomes
    assert GapSurvival().residual("a") == math.inf and GapSurvival().survival("a", 1.0) == 1.0
    with pytest.raises(ValueError):
        GapSurvival(window=0)
