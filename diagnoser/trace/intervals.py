"""Interval arithmetic on int64 nanosecond arrays.

A step budget is a partition of elapsed time, so every figure must come from unions,
intersections and differences of intervals, never from sums of durations (overlapping
kernels on several streams would be counted twice). A "set" here is a pair ``(starts, ends)``
of sorted, disjoint, non-abutting intervals, as returned by :func:`merge`.
"""

from __future__ import annotations

import numpy as np

IntervalSet = tuple[np.ndarray, np.ndarray]

EMPTY: IntervalSet = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def merge(starts: np.ndarray, ends: np.ndarray) -> IntervalSet:
    """Union of arbitrary intervals; touching intervals join (HTA's rule: new group only when start > running end)."""
    if len(starts) == 0:
        return EMPTY
    s, e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    if not (s[1:] >= s[:-1]).all():  # a rank's ops come sorted: at 10^7 of them the sort's copies are GBs
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    running_end = np.maximum.accumulate(e)
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > running_end[:-1]
    group_first = np.flatnonzero(new_group)
    group_last = np.append(group_first[1:] - 1, len(s) - 1)
    return s[group_first], running_end[group_last]


def total(interval_set: IntervalSet) -> int:
    starts, ends = interval_set
    return int((ends - starts).sum())


def _combine(a: IntervalSet, b: IntervalSet, keep_a_not_b: bool) -> IntervalSet:
    """Sweep over both sets; keep where inside a and (inside b, or not inside b)."""
    if len(a[0]) == 0:
        return EMPTY
    if len(b[0]) == 0:
        return a if keep_a_not_b else EMPTY
    points = np.concatenate([a[0], a[1], b[0], b[1]])
    na, nb = len(a[0]), len(b[0])
    delta_a = np.concatenate([np.ones(na, np.int64), -np.ones(na, np.int64), np.zeros(2 * nb, np.int64)])
    delta_b = np.concatenate([np.zeros(2 * na, np.int64), np.ones(nb, np.int64), -np.ones(nb, np.int64)])
    order = np.argsort(points, kind="stable")
    points = points[order]
    in_a = np.cumsum(delta_a[order]) > 0
    in_b = np.cumsum(delta_b[order]) > 0
    keep = in_a & (~in_b if keep_a_not_b else in_b)
    seg_start, seg_end = points[:-1][keep[:-1]], points[1:][keep[:-1]]
    nonempty = seg_end > seg_start
    return merge(seg_start[nonempty], seg_end[nonempty])


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    return _combine(a, b, keep_a_not_b=False)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    return _combine(a, b, keep_a_not_b=True)


def union(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    return merge(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))


def clip(interval_set: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """The part of a set inside [lo, hi); a set's ends are sorted too, so two binary searches find it."""
    starts, ends = interval_set
    first = int(np.searchsorted(ends, lo, side="right"))
    last = int(np.searchsorted(starts, hi, side="left"))
    if last <= first:
        return EMPTY
    s, e = starts[first:last].copy(), ends[first:last].copy()
    s[0], e[-1] = max(int(s[0]), lo), min(int(e[-1]), hi)
    return s, e


def cut(interval_set: IntervalSet, points: np.ndarray) -> IntervalSet:
    """The set's intervals split at every point strictly inside one: a union of abutting windows cut
    back into the windows' own pieces (the pieces touch, so this is no longer a merged set)."""
    starts, ends = interval_set
    if not len(starts):
        return interval_set
    i = np.searchsorted(starts, points, side="right") - 1
    safe = np.maximum(i, 0)
    cuts = np.unique(points[(i >= 0) & (points > starts[safe]) & (points < ends[safe])])
    return np.sort(np.concatenate([starts, cuts])), np.sort(np.concatenate([ends, cuts]))


def covered_between(interval_set: IntervalSet, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Length of the set inside each [lo, hi), by prefix sums (one pass, however many windows)."""
    starts, ends = interval_set
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(len(lo), dtype=np.int64)
    prefix = np.concatenate([[0], np.cumsum(ends - starts)])

    def before(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(starts, t, side="right") - 1
        safe = np.maximum(i, 0)
        return np.where(i >= 0, prefix[safe] + np.minimum(t, ends[safe]) - starts[safe], 0)

    return np.where(hi > lo, before(hi) - before(lo), 0)


def group_bounds(group: np.ndarray, groups: int) -> np.ndarray:
    """Where each of ``groups`` groups begins in ``group`` (ascending ids), and where the last ends:
    ``groups + 1`` positions, so an empty group is two equal ones."""
    return np.searchsorted(group, np.arange(groups + 1, dtype=group.dtype), side="left")


def group_edge(group: np.ndarray, values: np.ndarray, groups: int, last: bool = False) -> np.ndarray:
    """Each group's first value (or last), 0 for an empty group: of start-sorted steps' ops, the
    first start, or (of running ends) the last end."""
    bounds = group_bounds(group, groups)
    worked = np.flatnonzero(bounds[1:] > bounds[:-1])
    out = np.zeros(groups, np.int64)
    out[worked] = values[bounds[1:][worked] - 1] if last else values[bounds[:-1][worked]]
    return out


def group_sums(group: np.ndarray, values: np.ndarray, groups: int) -> np.ndarray:
    """Each group's sum of ``values``, exact in int64 (``np.bincount``'s weights are float64), by prefix
    sums: one pass for any number of groups, where a sum per step is a numpy call per step."""
    prefix = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    bounds = group_bounds(group, groups)
    return prefix[bounds[1:]] - prefix[bounds[:-1]]


def running_max_by_group(group: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.maximum.accumulate`` of ``values`` restarted at each group (ascending ids): the running end
    of many steps' intervals in one pass. Each group's values are lifted above every earlier group's
    (its id times the values' width), so no maximum carries into the next group; as many groups go
    in one pass as int64 holds lifted (all of them unless the values span years)."""
    if not len(values):
        return np.zeros(0, np.int64)
    low = int(values.min())
    width = int(values.max()) - low + 1
    per = max(1, 2**62 // width)
    out = np.empty(len(values), np.int64)
    first, last = int(group[0]), int(group[-1])
    for at in range(first, last + 1, per):
        lo, hi = np.searchsorted(group, [at, at + per], side="left")
        lift = group[lo:hi].astype(np.int64)
        lift -= at
        lift *= width
        running = values[lo:hi].astype(np.int64)  # in place from here: a whole-trace step is 10^7 values
        running -= low
        running += lift
        np.maximum.accumulate(running, out=running)
        running -= lift
        running += low
        out[lo:hi] = running
    return out


def running_max_before(group: np.ndarray, values: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """For each element, the largest of its group's ``initial`` and the group's earlier ``values``
    (ascending group ids): where each of many steps' intervals could start adding new time."""
    reach = running_max_by_group(group, values)
    earlier = np.empty(len(values), np.int64)
    earlier[1:] = reach[:-1]
    opens = np.ones(len(values), dtype=bool)
    opens[1:] = group[1:] != group[:-1]
    return np.where(opens, initial[group], np.maximum(earlier, initial[group]))


def union_by_group(group: np.ndarray, starts: np.ndarray, ends: np.ndarray, groups: int) -> np.ndarray:
    """Length of the union of each group's intervals, as ``total(merge(...))`` of each group alone,
    for intervals sorted by group and then start: each interval adds what it reaches past the ends
    of its group's earlier ones."""
    if not len(starts):
        return np.zeros(groups, np.int64)
    reach = running_max_before(group, ends, np.full(groups, np.iinfo(np.int64).min))
    added = np.maximum(0, ends - np.maximum(starts, reach))
    return group_sums(group, added, groups)
