"""What the benchmark clients' readers share: checked numbers, one latency family, the stream's bursts.

vLLM ``bench serve``, AIPerf and GuideLLM each spell a latency as a mean and some percentiles in
their own keys; each reader gathers them into ``{mean, p50, p90, p99}`` and ``percentiles_ms``
keeps the positive ones (a 0 is "nothing measured" to the rules, never a time). A number that
is not one is ``Damaged``: ``reader`` turns it into the one-line error that names the file and
what it looked like, so no reader repeats that wording.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from diagnoser.artifacts.artifact import Artifact
from diagnoser.errors import InputError
from diagnoser.models.runtime import BURSTY_FRACTION
from diagnoser.probes.serving_metrics import burst_sizes
from diagnoser.readers.facts import SourcedFacts

METRICS = "observations.metrics"
STREAM = "observations.stream"
STATS = ("mean", "p50", "p90", "p99")


class Damaged(Exception):
    """What is wrong inside a file already taken to be of one kind."""


def reader(kind: str, read: Callable[[Artifact], SourcedFacts]) -> Callable[[Artifact], SourcedFacts]:
    """``read`` with its ``Damaged`` said as ``<file>: looks like <kind> but <what>``, one line."""

    def guarded(artifact: Artifact) -> SourcedFacts:
        try:
            return read(artifact)
        except Damaged as err:
            raise InputError(f"{artifact.name}: looks like {kind} but {err}") from None

    return guarded


def shown(value: Any) -> str:
    """A value as the file spelled it, short and on one line."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def number(value: Any, where: str) -> float | None:
    """A finite number, or None where the file has none; anything else is damage."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise Damaged(f"{where} is {shown(value)}, not a number") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Damaged(f"{where} is {shown(value)}, not a number")
    return float(value)


def positive(value: Any, where: str) -> float | None:
    found = number(value, where)
    return found if found is not None and found > 0 else None


def percentiles_ms(stats: Mapping[str, Any], where: str, scale: float = 1.0) -> dict[str, float] | None:
    """``{mean, p50, p90, p99}`` in ms from the same stats in the file's unit (``scale`` ms each)."""
    found = {stat: v * scale for stat in STATS if (v := positive(stats.get(stat), f"{where} {stat}")) is not None}
    return found or None


def mapping(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise Damaged(f"{where} is {shown(value)}, not a mapping")
    return value


def stream_facts(gaps_per_request: Iterable[list[float]], source: str) -> SourcedFacts:
    """The share of chunk gaps too short to be a step, counted as the client probe counts them."""
    bunched = total = 0
    for gaps in gaps_per_request:
        bunched += burst_sizes(gaps)[1]
        total += len(gaps)
    facts = SourcedFacts()
    if total:
        facts.add(f"{STREAM}.near_zero_gap_fraction", bunched / total, source)
        facts.add(f"{STREAM}.bursty", bunched / total >= BURSTY_FRACTION, source)
    return facts
