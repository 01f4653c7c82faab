""":class:`SurvivalNextUse` (``pbkv-survival``): the typical gap is the app's median gap with ends, by hand."""

from __future__ import annotations

import pytest

from pbkv_server.engine.policies.pbkv_survival import SurvivalNextUse


def test_typical_gap_is_the_median_with_ends():
    nu = SurvivalNextUse()
    # w's gaps: 1 s (finish 0, call 1), 3 s (finish 2, call 5), 10 s (finish 6, call 16)
    # (each call admitted at once; the finishes carry no admission, so no duration is learnt: D = 0)
    for i, (fin, call) in enumerate(((0.0, 1.0), (2.0, 5.0), (6.0, 16.0))):
        nu.finished("w", "code", f"r{i}", fin)
        nu.invocation("w", "code", "main", call)
        nu.admitted("w", "code", "main", None, call, False)
    nu.finished("w", "code", "r3", 20.0)
    assert nu.next_t["w"] == 23.0  # 20 + median(1, 3, 10); the running mean would give 20 + 4.67
    nu.ended("w")  # in its gap: an end (infinite gap): median of 1, 3, 10, inf is still 3 (2 of 4)
    assert nu._d_g("code")[1] == 3.0
    nu.finished("v", "code", "s0", 30.0)
    nu.ended("v")  # 1, 3, 10, inf, inf: 3 of 5 by 10 s
    assert nu._d_g("code")[1] == 10.0


def test_without_outcomes_the_mean_stays():
    nu = SurvivalNextUse()
    nu.finished("w", "code", "r0", 0.0)
    assert nu.next_t["w"] == pytest.approx(0.0)  # no gap seen yet: typical gap 0, as NextUse
