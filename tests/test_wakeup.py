"""The client measures how late its own threads run, so a loaded client is not taken for a proxy."""

from __future__ import annotations

import threading
import time

from diagnoser.probes.wakeup import WakeupMonitor


def test_a_reader_kept_from_the_gil_shows_as_late_and_mostly_stalled():
    """A busy Python loop in the same process hands the GIL over once per switch interval (5 ms), so
    the monitor wakes up to that late, one wake-up per interval with 2 ms of it asleep: it waits most
    of the time. Other load on the host only makes both larger, so the floors hold on a busy machine."""
    with WakeupMonitor() as held:
        end = time.perf_counter() + 0.6
        while time.perf_counter() < end:
            sum(range(20000))
    assert held.p99_ms() is not None and held.p99_ms() >= 1.0
    assert held.stalled_share() is not None and held.stalled_share() >= 0.3


def test_too_short_a_window_has_no_p99():
    with WakeupMonitor() as wake:
        pass
    assert wake.p99_ms() is None


def test_the_monitor_stops_with_its_block():
    with WakeupMonitor() as wake:
        time.sleep(0.3)
    count = len(wake.late_ms)
    time.sleep(0.05)
    assert len(wake.late_ms) == count and not any(t.name == "wakeup-monitor" for t in threading.enumerate())


def test_the_stalled_share_is_the_time_spent_waiting_beyond_the_sleeps():
    """Two wake-ups 8 ms late and two on time, against 2 ms sleeps: 16 of 24 ms waited (exact, from the samples)."""
    wake = WakeupMonitor()
    wake.late_ms = [8.0, 0.0, 8.0, 0.0]
    assert wake.stalled_share() == 16 / 24
    assert WakeupMonitor().stalled_share() is None  # it never woke


def test_the_p99_counts_each_stall_for_the_time_it_lasts():
    """One 100 ms stall among a hundred 2 ms sleeps: 300 ms in all, of which 3 ms (1 %) wait longer than 97 ms. The
    wake-ups' own p99 would be 0: ninety-nine of a hundred were on time, yet a third of the read was one stall."""
    from diagnoser.probes.wakeup import time_weighted_quantile

    assert time_weighted_quantile([100.0] + [0.0] * 99, 2.0, 0.99) == 97.0
    assert time_weighted_quantile([1.0] * 100, 2.0, 0.99) == 0.97  # 100 x (1 - d) = 3
    assert time_weighted_quantile([0.0] * 100, 2.0, 0.99) == 0.0
    wake = WakeupMonitor()
    wake.late_ms = [100.0] + [0.0] * 99
    assert wake.p99_ms() == 97.0
