"""How late the measuring client itself runs: the delay a loaded host adds to every receipt time.

A chunk's receipt time is when the client's reader ran, not when the bytes arrived. On a host
busy with other work the reader waits for a core, and the chunks it then reads look held, as a
buffering proxy holds them. A thread that sleeps a short, fixed period over and over and notes
how late it woke measures that wait on the same host, in the same process, during the same
reads (the technique of cyclictest); a gap the client measured is the server's or a proxy's
only beyond it.
"""

from __future__ import annotations

import threading
import time

PERIOD_S = 0.002
# 2 ms apart, an hour of samples; a probe is bounded far below that, and past it the monitor stops noting
MAX_SAMPLES = 1_800_000
MIN_SAMPLES = 20


class WakeupMonitor:
    """``with WakeupMonitor() as wake: ...`` then ``wake.p99_ms()``: the p99 oversleep, in ms."""

    def __init__(self) -> None:
        self.late_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wakeup-monitor", daemon=True)

    def __enter__(self) -> "WakeupMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(1.0)

    def _run(self) -> None:
        while not self._stop.is_set() and len(self.late_ms) < MAX_SAMPLES:
            start = time.perf_counter()
            time.sleep(PERIOD_S)
            self.late_ms.append(max(0.0, (time.perf_counter() - start - PERIOD_S) * 1e3))

    def stalled_share(self) -> float | None:
        """The share of the run the monitor spent waiting beyond its sleeps: how much of the time this client
        could not run (other processes on its cores, its own threads holding the GIL). Tokens that arrive while
        the reader cannot run are read together, so this share of a stream's gaps is near zero by the client's
        own doing. Unlike a percentile it holds with few wake-ups: a monitor that woke 8 times in a 10 s load was
        kept waiting nearly all of it (the real vLLM's long-prompts fault on 2 cores). None if it never woke."""
        late = self.late_ms
        if not late:
            return None
        waited = sum(late)
        return waited / (waited + len(late) * PERIOD_S * 1e3)

    def p99_ms(self) -> float | None:
        """The delay this client's own host adds to a chunk that arrives at a random moment, at its p99. A chunk
        arriving during a stall of L ms waits what is left of it, so long stalls count for the time they last, not
        once each as wake-ups do: on a busy box most wake-ups are on time while a few stalls of hundreds of ms hold a
        tenth of the read (the wake-ups' own p99 read 30 ms where the chunks' was far longer). None with too few
        wake-ups to judge by (a run of a few tens of ms)."""
        if len(self.late_ms) < MIN_SAMPLES:
            return None
        return time_weighted_quantile(self.late_ms, PERIOD_S * 1e3, 0.99)


def time_weighted_quantile(late_ms: list[float], period_ms: float, q: float) -> float:
    """The delay d with a share 1 - q of moments waiting longer than d: a moment inside a stall of L waits a share of
    L uniformly, so the share waiting longer than d is the sum of (L - d) over stalls longer than d, over the whole
    time (each sleep's period plus its lateness). Piecewise linear in d; solved between the sorted stalls."""
    total = sum(late_ms) + len(late_ms) * period_ms
    allowed = (1 - q) * total
    longest_first = sorted(late_ms, reverse=True)
    beyond = 0.0  # sum of the longer stalls seen so far
    for count, stall in enumerate(longest_first, 1):
        following = longest_first[count] if count < len(longest_first) else 0.0
        # with d in [following, stall], the time waiting beyond d is beyond + stall - count * d
        if beyond + stall - count * following >= allowed:
            return max(following, (beyond + stall - allowed) / count)
        beyond += stall
    return 0.0
