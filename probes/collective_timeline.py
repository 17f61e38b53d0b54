"""Who held a collective up: arrival skew across ranks, separated from the transfer itself.

A long all-reduce interval on one rank says nothing by itself: the bytes may be slow to move,
or one participant may simply arrive late because it had more work before the call. Both look
the same from inside the waiting rank. With every rank's arrival and departure on one clock,
the two parts separate: everything before the last arrival is waiting, everything after it is
transfer, and the last rank to arrive is the one whose preceding work deserves a look.

Pure functions over plain records so the arithmetic is checked with hand-worked numbers.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from diagnoser.models.probe_results import CollectiveSummary

# Bytes each rank moves per byte of message, relative to the message size (the nccl-tests
# "bus bandwidth" convention), so figures are comparable with link speeds across group sizes.
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}


class CallRecord(BaseModel):
    """One rank's view of one call: when it arrived, when it left, what it did before."""

    model_config = ConfigDict(extra="forbid")

    rank: int = Field(ge=0)
    op: str
    message_bytes: int = Field(ge=0)
    iteration: int = Field(ge=0)
    arrival_ns: int = Field(description="host clock just before entering the collective")
    departure_ns: int = Field(description="host clock once the result is complete on this rank")
    compute_ns: int = Field(ge=0, description="time since this rank's previous departure (its work before arriving)")


def _ms(ns: float) -> float:
    return ns / 1e6


def _group(records: Iterable[CallRecord]) -> dict[tuple[str, int], dict[int, dict[int, CallRecord]]]:
    """(op, bytes) -> iteration -> rank -> record."""
    grouped: dict[tuple[str, int], dict[int, dict[int, CallRecord]]] = defaultdict(lambda: defaultdict(dict))
    for rec in records:
        grouped[(rec.op, rec.message_bytes)][rec.iteration][rec.rank] = rec
    return grouped


def bus_bandwidth_gbs(op: str, message_bytes: int, group_size: int, transfer_ms: float) -> float | None:
    factor = BUS_FACTOR.get(op)
    if factor is None or transfer_ms <= 0 or message_bytes <= 0:
        return None
    return message_bytes * factor(group_size) / (transfer_ms / 1e3) / 1e9


def summarise(records: Iterable[CallRecord], group_size: int) -> list[CollectiveSummary]:
    """Per (op, message size): waiting versus transfer, and which rank the others waited for.

    ``hold_up`` for a rank in one iteration is how much later it arrived than every other rank
    (zero unless it was last): the delay that rank alone added. Summed over ranks it never
    exceeds the total skew, so it attributes waiting without double counting.
    """
    summaries = []
    for (op, size), iterations in sorted(_group(records).items()):
        complete = {i: ranks for i, ranks in iterations.items() if len(ranks) == group_size}
        if not complete:
            continue
        intervals, transfers, waits, lates = [], [], [], []
        hold_up = defaultdict(list)
        waited = defaultdict(list)
        compute = defaultdict(list)
        for ranks in complete.values():
            arrivals = {r: rec.arrival_ns for r, rec in ranks.items()}
            first, last = min(arrivals.values()), max(arrivals.values())
            late = max(arrivals, key=arrivals.__getitem__)
            lates.append(late)
            intervals.append(max(rec.departure_ns for rec in ranks.values()) - first)
            transfers.append(statistics.median(rec.departure_ns - last for rec in ranks.values()))
            waits.append(last - first)
            for r, rec in ranks.items():
                others = max(a for q, a in arrivals.items() if q != r)
                hold_up[r].append(max(0, rec.arrival_ns - others))
                waited[r].append(last - rec.arrival_ns)
                compute[r].append(rec.compute_ns)
        late_rank, late_count = Counter(lates).most_common(1)[0]
        others_compute = [c for r, values in compute.items() if r != late_rank for c in values]
        transfer_ms = _ms(statistics.median(transfers))
        summaries.append(
            CollectiveSummary(
                op=op,
                message_bytes=size,
                group_size=group_size,
                iterations=len(complete),
                interval_ms=_ms(statistics.median(intervals)),
                transfer_ms=transfer_ms,
                wait_ms=_ms(statistics.median(waits)),
                late_rank=late_rank,
                late_fraction=late_count / len(complete),
                late_by_ms=_ms(statistics.median(hold_up[late_rank])),
                hold_up_ms=[_ms(statistics.fmean(hold_up[r])) for r in range(group_size)],
                mean_wait_ms=[_ms(statistics.fmean(waited[r])) for r in range(group_size)],
                preceding_compute_ms=_ms(statistics.median(compute[late_rank])),
                extra_compute_ms=_ms(statistics.median(compute[late_rank]) - statistics.median(others_compute)),
                bus_bandwidth_gbs=bus_bandwidth_gbs(op, size, group_size, transfer_ms),
            )
        )
    return summaries
