import numpy as np

from diagnoser.trace import intervals as iv


def s(*pairs):
    return np.array([p[0] for p in pairs], np.int64), np.array([p[1] for p in pairs], np.int64)


def as_pairs(x):
    return list(zip(x[0].tolist(), x[1].tolist()))


def test_merge_joins_overlapping_and_touching_intervals():
    merged = iv.merge(*s((5, 7), (0, 3), (3, 4), (6, 10), (12, 13)))
    assert as_pairs(merged) == [(0, 4), (5, 10), (12, 13)]
    assert iv.total(merged) == 4 + 5 + 1


def test_intersect_subtract_union_clip_by_hand():
    a = iv.merge(*s((0, 10), (20, 30)))
    b = iv.merge(*s((5, 25)))
    assert as_pairs(iv.intersect(a, b)) == [(5, 10), (20, 25)]
    assert as_pairs(iv.subtract(a, b)) == [(0, 5), (25, 30)]
    assert as_pairs(iv.subtract(b, a)) == [(10, 20)]
    assert as_pairs(iv.union(a, b)) == [(0, 30)]
    assert as_pairs(iv.clip(a, 8, 22)) == [(8, 10), (20, 22)]


def test_empty_sets_and_epoch_nanoseconds_keep_exact_values():
    base = 1_700_000_000_000_000_000
    a = iv.merge(*s((base + 1, base + 3)))
    assert as_pairs(iv.intersect(a, iv.EMPTY)) == []
    assert as_pairs(iv.subtract(a, iv.EMPTY)) == [(base + 1, base + 3)]
    assert iv.total(iv.subtract(a, iv.merge(*s((base + 2, base + 5))))) == 1
