"""Prometheus text exposition, read into a ``Scrape``, and the window between two scrapes.

A server's counters and histograms add up everything since it started, so one scrape says
nothing about the load someone measured; the difference between a scrape taken before the load
and one taken after does (``window``). Percentiles come from the windowed bucket counts the way
Prometheus's ``histogram_quantile`` computes them, so a figure here matches the one a Grafana
panel over the same interval would show.

The parser is our own rather than ``prometheus_client``'s: that package is only in the ``lab``
extra, and a reader of the core tool should not need it. It reads the text format (0.0.4) and
the OpenMetrics counter spelling (``x_total`` under ``# TYPE x counter``), and refuses input too
large to be a scrape (64 MiB of text or 200,000 samples) before it fills memory.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from diagnoser.errors import InputError

MAX_CHARS = 64 * 2**20
MAX_SAMPLES = 200_000

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
_SAMPLE = re.compile(rf"({_NAME})\s*(?:\{{((?:[^\"}}]|{_QUOTED})*)\}})?\s+(\S+)(?:\s+-?\d+)?\s*")
_LABEL = re.compile(rf'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*({_QUOTED})\s*(?:,|$)')
_TYPE = re.compile(rf"#\s+TYPE\s+({_NAME})\s+(\w+)")
_ESCAPE = re.compile(r"\\(.)")

# The samples of each family type that only grow while the server runs.
_CUMULATIVE_SUFFIXES = {"counter": ("", "_total"), "histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum")}


@dataclass(frozen=True)
class Histogram:
    """One histogram's figures, summed over its series (engines, model names)."""

    count: float
    sum: float
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), ascending, +Inf last

    @property
    def mean(self) -> float:
        return self.sum / self.count

    def quantile(self, q: float) -> float | None:
        """The q-quantile where the buckets place it between two finite bounds, else None.

        In the lowest bucket Prometheus interpolates up from 0, as if the observations were
        spread evenly down to nothing; a latency never is, and there the figure is a guess
        the mean can refute (a queue-time p50 of 150 ms over a mean of 0.03 ms, all in the
        bucket up to 0.3 s). Beyond the highest finite bound only that bound is known.
        """
        value = bucket_quantile(q, self.buckets)
        if value is None or value <= self.buckets[0][0] or q * self.buckets[-1][1] > self.buckets[-2][1]:
            return None
        return value


@dataclass(frozen=True)
class Scrape:
    """The samples of one scrape (or of a window), keyed by metric name and then by labels.

    Series stay apart per ``engine`` and ``model_name``: ``total`` sums them (requests waiting
    anywhere on the server) and ``largest`` takes the fullest one (one engine's KV cache can be
    full while the sum over engines says nothing meaningful).
    """

    samples: Mapping[str, Mapping[Labels, float]]
    cumulative: frozenset[str] = field(default_factory=frozenset)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.samples)

    def series(self, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
        """The series of ``name`` whose labels include ``match``."""
        found = []
        for labels, value in self.samples.get(name, {}).items():
            as_dict = dict(labels)
            if all(as_dict.get(k) == v for k, v in match.items()):
                found.append((as_dict, value))
        return found

    def total(self, name: str, **match: str) -> float | None:
        """The sum over the matching series; None when the server does not export ``name``."""
        values = [value for _, value in self.series(name, **match)]
        return math.fsum(values) if values else None

    def largest(self, name: str, **match: str) -> float | None:
        return max((value for _, value in self.series(name, **match)), default=None)

    def histogram(self, name: str) -> Histogram | None:
        """The histogram ``name`` over all its series; None when it has no observations."""
        count = self.total(f"{name}_count")
        if count is None or count <= 0:
            return None
        by_bound: dict[float, float] = {}
        for labels, value in self.series(f"{name}_bucket"):
            bound = _float(labels.get("le", ""))
            if bound is not None and not math.isnan(bound):
                by_bound[bound] = by_bound.get(bound, 0.0) + value
        return Histogram(count, self.total(f"{name}_sum") or 0.0, tuple(sorted(by_bound.items())))


def bucket_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """The q-quantile by linear interpolation inside the bucket that holds it, as Prometheus does.

    A quantile in the +Inf bucket is the highest finite bound (all the buckets can say: at least
    that much); one in a first bucket whose bound is not above zero is that bound. Counts are
    made monotonic first, since a scrape is not atomic and a bucket read a moment later can
    hold more than the next one.
    """
    if len(buckets) < 2 or not math.isinf(buckets[-1][0]):
        return None
    bounds = [bound for bound, _ in buckets]
    counts = list(accumulate((count for _, count in buckets), max))
    if counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    b = next(i for i, count in enumerate(counts) if count >= rank)
    if b == len(buckets) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, below = (bounds[b - 1], counts[b - 1]) if b > 0 else (0.0, 0.0)
    return start + (bounds[b] - start) * (rank - below) / (counts[b] - below)


def parse_scrape(text: str) -> Scrape:
    """Read Prometheus text exposition; any line that is not one is an error naming its number."""
    if len(text) > MAX_CHARS:
        raise InputError(f"the metrics text is {len(text) / 2**20:.0f} MiB, more than the {MAX_CHARS // 2**20} MiB a scrape is read to")
    samples: dict[str, dict[Labels, float]] = {}
    cumulative: set[str] = set()
    seen = 0
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            cumulative |= _cumulative_names(line)
            continue
        name, labels, value = _sample(line, number)
        seen += 1
        if seen > MAX_SAMPLES:
            raise InputError(f"the metrics text has more than {MAX_SAMPLES} samples, more than a server's scrape holds")
        series = samples.setdefault(name, {})
        if labels in series:
            raise InputError(f"line {number}: {name}{_show(labels)} appears twice: is this two scrapes in one file?")
        if math.isfinite(value):
            series[labels] = value
    return Scrape(samples, frozenset(cumulative))


def window(before: Scrape, after: Scrape) -> Scrape:
    """What the counters and histograms counted between two scrapes of one server.

    A series absent before counts from zero (servers create labelled series when first used).
    A series that went down means the server restarted in between, and no difference of the
    two says anything about the load.
    """
    _same_process(before, after)
    samples: dict[str, dict[Labels, float]] = {}
    for name in after.cumulative & after.names:
        earlier = before.samples.get(name, {})
        for labels, value in after.samples[name].items():
            start = earlier.get(labels, 0.0)
            if value < start:
                raise InputError(
                    f"{name}{_show(labels)} went from {start:g} to {value:g} between the scrapes: the server restarted "
                    "in between (or the scrapes are of two servers); take both from one run of the server"
                )
            samples.setdefault(name, {})[labels] = value - start
    return Scrape(samples, after.cumulative)


def _same_process(before: Scrape, after: Scrape) -> None:
    """A restart whose counters already grew past the earlier values shows in the start time."""
    started = [s.largest("process_start_time_seconds") for s in (before, after)]
    if None not in started and started[0] != started[1]:
        raise InputError("process_start_time_seconds differs between the scrapes: the server restarted in between; take both from one run")


def _cumulative_names(comment: str) -> set[str]:
    found = _TYPE.fullmatch(comment)
    if found is None:
        return set()
    family, kind = found.groups()
    return {family + suffix for suffix in _CUMULATIVE_SUFFIXES.get(kind, ())}


def _sample(line: str, number: int) -> tuple[str, Labels, float]:
    found = _SAMPLE.fullmatch(line)
    value = _float(found.group(3)) if found else None
    labels = _labels(found.group(2) or "") if found else None
    if found is None or value is None or labels is None:
        raise InputError(f"line {number} is not Prometheus text exposition: {line[:120]!r}")
    return found.group(1), labels, value


def _labels(body: str) -> Labels | None:
    """The label pairs of ``{...}``, sorted; None when the body is not a label list."""
    pairs, at = [], 0
    while at < len(body.rstrip()):
        found = _LABEL.match(body, at)
        if found is None:
            return None
        pairs.append((found.group(1), _ESCAPE.sub(_unescape, found.group(2)[1:-1])))
        at = found.end()
    return tuple(sorted(pairs))


def _unescape(found: re.Match[str]) -> str:
    return "\n" if found.group(1) == "n" else found.group(1)


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _show(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}" if labels else ""
