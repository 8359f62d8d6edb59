"""The RIO/AIO rule: the digest's decision table, sizing, bounds and hysteresis (pure, no sockets)."""

from __future__ import annotations

import pytest

from malleable.adhocfs._rule import RuleConfig, Scaling, decide

CFG = RuleConfig(rio=100, tolerance=10, k=3, n_min=1, n_max=8, cooldown=30)


@pytest.mark.parametrize(
    "window,expected,avg_d",
    [
        ([80, 85, 75], Scaling.EXPAND, -20),
        ([95, 105, 100], Scaling.KEEP, 0),
        ([130, 120, 125], Scaling.SHRINK, 25),
    ],
)
def test_decision_table(window, expected, avg_d):
    d = decide(window, n=4, cfg=CFG)
    assert d.action is expected and d.avg_d == pytest.approx(avg_d)
    assert "RIO 100" in d.reason and "avg_d" in d.reason


def test_only_last_k_samples_count():
    assert decide([10, 10, 10, 95, 105, 100], 4, CFG).action is Scaling.KEEP


def test_window_must_be_full():
    d = decide([80, 85], 4, CFG)
    assert d.action is Scaling.KEEP and "window not full" in d.reason


def test_band_edges_keep():
    assert decide([90, 90, 90], 4, CFG).action is Scaling.KEEP
    assert decide([110, 110, 110], 4, CFG).action is Scaling.KEEP


def test_expand_count_from_per_server_rate_and_cap():
    # 2 servers achieving 40 MB/s in total (20 each); short by 60 -> 3 more servers
    d = decide([40, 40, 40], 2, RuleConfig(rio=100, tolerance=10, k=3, n_max=8))
    assert d.action is Scaling.EXPAND and d.count == 3
    d = decide([40, 40, 40], 2, RuleConfig(rio=100, tolerance=10, k=3, n_max=4))
    assert d.count == 2  # capped at n_max
    d = decide([40, 40, 40], 4, RuleConfig(rio=100, tolerance=10, k=3, n_max=4))
    assert d.action is Scaling.KEEP and "n_max" in d.reason


def test_shrink_count_and_floor():
    # 4 servers achieving 400 (100 each) for RIO 100 -> 3 to spare, but never below n_min
    d = decide([400] * 3, 4, RuleConfig(rio=100, tolerance=10, k=3, n_min=1, n_max=8))
    assert d.action is Scaling.SHRINK and d.count == 3
    d = decide([400] * 3, 4, RuleConfig(rio=100, tolerance=10, k=3, n_min=3, n_max=8))
    assert d.count == 1
    d = decide([400] * 3, 3, RuleConfig(rio=100, tolerance=10, k=3, n_min=3, n_max=8))
    assert d.action is Scaling.KEEP and "n_min" in d.reason


def test_cooldown_and_fresh_samples_give_hysteresis():
    win = [80, 85, 75]
    assert decide(win, 4, CFG, now=100, last_change=80).action is Scaling.KEEP  # within 30 s
    assert decide(win, 4, CFG, now=100, last_change=60, samples_since_change=2).action is Scaling.KEEP
    assert decide(win, 4, CFG, now=100, last_change=60, samples_since_change=3).action is Scaling.EXPAND


def test_no_oscillation_on_a_noisy_steady_load():
    """A load hovering inside the band never changes the size."""
    import random

    rng = random.Random(5)
    samples = []
    for _ in range(200):
        samples.append(100 + rng.uniform(-9, 9))
        assert decide(samples, 4, CFG).action is Scaling.KEEP


def test_bad_config():
    for kw in [dict(k=0), dict(n_min=0), dict(n_min=5, n_max=4), dict(tolerance=-1)]:
        with pytest.raises(ValueError):
            RuleConfig(rio=100, **{"tolerance": 10, **kw})
    with pytest.raises(ValueError):
        decide([1, 2, 3], 0, CFG)
