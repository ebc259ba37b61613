"""The smoothed rates and the ETA behind the progress bar (ragport/cli/pace.py)."""

from __future__ import annotations

import pytest

from ragport.cli.pace import MERGE_S, WARMUP_S, Pace, SmoothedRate


def test_a_burst_of_reports_is_one_lump_over_the_time_it_took():
    """Ten files written within a second after 20 s of embedding are 10 files in 20 s (0.5/s),
    not ten rates of a file a millisecond: the rate of a group written at once stays the
    group's.

    If this fails, check SmoothedRate.add's merging of reports closer than MERGE_S."""
    rate = SmoothedRate()
    rate.begin(0.0)
    for step in range(3):
        for n in range(10):
            rate.add(1, 20.0 * (step + 1) + n * 0.01)
        assert rate.rate == pytest.approx(10 / 20.0, rel=0.01)
    assert rate.interval == pytest.approx(20.0, rel=0.01)


def test_the_average_moves_by_the_weight_of_the_interval():
    """A rate that doubles moves the average part of the way, more for a longer interval.

    If this fails, check SmoothedRate._folded (weight 1 - exp(-span / tau))."""
    rate = SmoothedRate(tau=60.0)
    rate.begin(0.0)
    rate.add(10, 10.0)  # 1/s
    rate.add(20, 20.0)  # 2/s over 10 s
    assert 1.1 < (rate.rate or 0) < 1.2
    longer = SmoothedRate(tau=60.0)
    longer.begin(0.0)
    longer.add(10, 10.0)
    longer.add(120, 70.0)  # 2/s over 60 s
    assert 1.6 < (longer.rate or 0) < 1.7


def test_no_eta_during_the_warm_up_then_a_countdown_that_waits_for_the_next_report():
    """No ETA before WARMUP_S and three files; then remaining work over the rate, counted down
    between reports for at most the usual interval (no run to 0:00 while a report is late).

    If this fails, check Pace.eta."""
    pace = Pace(total=20)
    pace.begin(-0.5)
    for done in range(1, 4):  # a file of 10 chunks every 5 s
        pace.embedded(10, 5.0 * done - 0.5)
        pace.finished(done, 5.0 * done, chunks=10)
        if done < 3:
            assert pace.eta(5.0 * done + MERGE_S) is None
    assert pace.eta(WARMUP_S - 0.1) is None
    at = 15.0 + MERGE_S
    eta = pace.eta(at)
    assert eta == pytest.approx(17 * 5.0 - (at - 14.5), rel=0.02)  # 17 files at 5 s each
    late = pace.eta(14.5 + 60.0)  # the next report is a minute late
    assert late == pytest.approx(17 * 5.0 - 5.0, rel=0.02)  # counted down one interval only


def test_without_chunks_the_eta_is_the_items_left_at_the_items_rate():
    """sync and reindex report items only: the ETA is items left over the smoothed item rate.

    If this fails, check the fallback branch of Pace.eta."""
    pace = Pace(total=10)
    pace.begin(0.0)
    for done in range(1, 6):
        pace.finished(done, 4.0 * done)
    assert pace.eta(20.0 + MERGE_S) == pytest.approx(5 * 4.0 - MERGE_S, rel=0.02)
    pace.finished(10, 40.0)
    assert pace.eta(40.0) == 0.0
