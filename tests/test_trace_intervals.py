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
    assert as_pairs(iv.clip(a, 12, 18)) == [] and as_pairs(iv.clip(a, 10, 20)) == []
    assert as_pairs(iv.clip(a, -5, 50)) == [(0, 10), (20, 30)] and as_pairs(iv.clip(a, 25, 26)) == [(25, 26)]


def test_empty_sets_and_epoch_nanoseconds_keep_exact_values():
    base = 1_700_000_000_000_000_000
    a = iv.merge(*s((base + 1, base + 3)))
    assert as_pairs(iv.intersect(a, iv.EMPTY)) == []
    assert as_pairs(iv.subtract(a, iv.EMPTY)) == [(base + 1, base + 3)]
    assert iv.total(iv.subtract(a, iv.merge(*s((base + 2, base + 5))))) == 1


def test_matmul_costs_by_hand():
    from diagnoser.models.precision import DType
    from diagnoser.models.hardware import match_hardware
    from diagnoser.trace.roofline import matmul_cost

    assert matmul_cost("aten::mm", [[64, 4096], [4096, 4096]], ["c10::BFloat16"] * 2) == (
        2_147_483_648.0,
        34_603_008.0,
        DType.bf16,
    )
    # linear: x [2, 8, 16] (M = 16 rows), weight [32, 16]: 2*16*32*16 FLOPs; (16*16 + 32*16 + 16*32) fp32 elements
    assert matmul_cost("aten::linear", [[2, 8, 16], [32, 16], [32]], ["float"] * 3) == (16384.0, 5120.0, DType.fp32)
    # addmm(bias, a, b) and bmm with a batch
    assert matmul_cost("aten::addmm", [[8], [4, 2], [2, 8]], ["c10::Half"] * 3)[0] == 2 * 4 * 2 * 8
    assert matmul_cost("aten::bmm", [[3, 4, 2], [3, 2, 5]], ["float"] * 2)[0] == 2 * 3 * 4 * 2 * 5
    assert matmul_cost("aten::mm", [[], []], ["float"] * 2) is None
    assert match_hardware("NVIDIA A100-SXM4-80GB").sm_count == 108 and match_hardware("Some NPU") is None


def test_covered_between_by_hand():
    merged = iv.merge(*s((0, 10), (20, 30), (40, 45)))
    lo = np.array([0, 5, 12, 25, 50, 30])
    hi = np.array([100, 22, 18, 42, 60, 20])
    # [0,100): 10+10+5; [5,22): 5+2; [12,18): 0; [25,42): 5+2; [50,60): 0; empty window: 0
    assert iv.covered_between(merged, lo, hi).tolist() == [25, 7, 0, 7, 0, 0]
    assert iv.covered_between(iv.EMPTY, lo, hi).tolist() == [0] * 6


def test_union_by_group_is_each_groups_merge_alone():
    rng = np.random.default_rng(7)
    for base, spread in ((0, 50), (1_700_000_000_000_000_000, 10**6), (0, 2**61)):  # the last needs several lifts
        group = np.sort(rng.integers(0, 6, 200)).astype(np.int32)
        starts = base + rng.integers(0, spread, 200)
        ends = starts + rng.integers(0, max(spread // 10, 2), 200)
        order = np.lexsort((starts, group))
        group, starts, ends = group[order], starts[order], ends[order]
        expected = [iv.total(iv.merge(starts[group == g], ends[group == g])) for g in range(8)]  # 6 and 7 empty
        assert iv.union_by_group(group, starts, ends, 8).tolist() == expected
        reach = iv.running_max_by_group(group, ends)
        assert reach.tolist() == [int(ends[(group == g) & (np.arange(200) <= k)].max()) for k, g in enumerate(group)]
        assert iv.group_sums(group, ends - starts, 8).tolist() == [int((ends - starts)[group == g].sum()) for g in range(8)]
        first = iv.group_edge(group, starts, 8).tolist()
        assert first == [int(starts[group == g][0]) if (group == g).any() else 0 for g in range(8)]


def test_running_max_before_starts_each_group_at_its_initial_value():
    group = np.array([0, 0, 0, 2, 2], np.int32)
    values = np.array([5, 3, 9, 1, 4], np.int64)
    assert iv.running_max_before(group, values, np.array([4, 0, 2])).tolist() == [4, 5, 5, 2, 2]
    assert iv.union_by_group(group[:0], values[:0], values[:0], 3).tolist() == [0, 0, 0]


def test_step_batches_cut_at_the_step_count_or_the_op_count_and_keep_a_big_step_alone():
    from diagnoser.trace.steps import BATCH_OPS, step_batches

    assert step_batches([], 3) == []
    assert [list(b) for b in step_batches([1] * 7, 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    big = BATCH_OPS + 1
    assert [list(b) for b in step_batches([5, big, 5, 5], 1024)] == [[0], [1], [2, 3]]
    assert [list(b) for b in step_batches([BATCH_OPS // 2] * 3, 1024)] == [[0, 1], [2]]
