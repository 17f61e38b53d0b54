"""A bounded stream load, and the server's /metrics scraped around and during it.

Counters and histograms are lifetime totals: a figure for the load is the difference between
the scrape before and the scrape after it. Gauges (requests waiting, KV usage) are sampled
while the load runs, since a queue that formed and drained is gone from both ends.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from diagnoser.errors import InputError
from diagnoser.http import Client, HttpError
from diagnoser.live.prompts import sized
from diagnoser.probes.base import ProbeTimeout
from diagnoser.probes.sse_client import StreamedResponse, request_body, stream
from diagnoser.probes.wakeup import WakeupMonitor

GAUGE_INTERVAL_S = 0.5
MAX_GAUGE_SAMPLES = 600  # five minutes of samples; a longer load keeps the first ones
METRICS_TIMEOUT_S = 10


@dataclass(frozen=True)
class Shape:
    """What each request of a load asks for."""

    requests: int
    concurrency: int
    prompt_tokens: int
    max_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)  # sampling fields, response_format, ...


@dataclass
class Window:
    """A load and the scrapes around it."""

    responses: list[StreamedResponse]
    before: str
    after: str
    gauges: list[str]
    duration_s: float
    failed: list[str] = field(default_factory=list)
    client_delay_p99_ms: float | None = None  # how late this client's own threads woke during the load
    client_stalled_share: float | None = None  # the share of the load this client could not run


def scrape(http: Client, url: str) -> str | None:
    """The /metrics text, or None where the server exposes none (or none that is usable)."""
    try:
        reply = http.get(f"{url}/metrics", timeout_s=METRICS_TIMEOUT_S)
    except HttpError:
        return None
    return reply.text if reply.status_code == 200 else None


class GaugeSampler:
    """Scrapes /metrics every half second in a thread of its own until stopped."""

    def __init__(self, url: str) -> None:
        self.url, self.samples = url, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)

    def _run(self) -> None:
        with Client(self.url, timeout_s=METRICS_TIMEOUT_S) as http:
            while not self._stop.wait(GAUGE_INTERVAL_S) and len(self.samples) < MAX_GAUGE_SAMPLES:
                text = scrape(http, self.url)
                if text is not None:
                    self.samples.append(text)

    def __enter__(self) -> "GaugeSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=METRICS_TIMEOUT_S + 1)


def run_load(url: str, model: str, shape: Shape, tokens_per_word: float, deadline: float, seed: int = 0) -> Window:
    """``shape.requests`` streams, ``shape.concurrency`` at a time, each with its own prompt; requests
    not started by ``deadline`` are not sent, and a stream still open at the deadline is cut there."""
    endpoint = f"{url}/v1/completions"
    failed: list[str] = []

    def one(i: int, http: Client) -> StreamedResponse | None:
        remaining = deadline - time.monotonic()
        if remaining <= 1:
            return None
        body = request_body("completions", model, sized(shape.prompt_tokens, tokens_per_word, seed + i), shape.max_tokens, {})
        body.update(shape.extra)
        try:
            return stream(http, endpoint, body, remaining)
        except (InputError, ProbeTimeout) as err:
            failed.append(str(err))
            return None

    with Client(url, timeout_s=60) as http:
        before = scrape(http, url) or ""
        start = time.monotonic()
        with GaugeSampler(url) as sampler, ThreadPoolExecutor(shape.concurrency) as pool, WakeupMonitor() as wake:
            done = list(pool.map(lambda i: one(i, http), range(shape.requests)))
        duration = time.monotonic() - start
        after = scrape(http, url) or ""
    return Window([r for r in done if r is not None], before, after, sampler.samples, duration, failed, wake.p99_ms(),
                  wake.stalled_share())
