"""The Nsight Systems SQLite reader on real exports and on hand-built schema variants."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from diagnoser.errors import InputError
from diagnoser.trace.model import CopyKind, RuntimeKind
from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.kineto import runtime_kind
from diagnoser.trace import nsys_sqlite
from diagnoser.trace.nsys_sqlite import read_nsys_exports, read_nsys_sqlite

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
NSYS_AI = SHARED / "data" / "nsys" / "nsys-ai"
GLOBAL = 1 << 24  # pid field of globalTid / globalPid


def real(name: str) -> Path:
    path = NSYS_AI / name
    if not path.is_file():
        pytest.skip(f"shared data absent: {path}")
    return path


def names(trace, table: str) -> list[str]:
    rows = trace.all_ranges() if table == "ranges" else getattr(trace, table)  # the reader keeps step marks only
    return [trace.strings[i] for i in rows["name"]]


def launch_rows(trace) -> np.ndarray:
    """Row of each kernel's launching call in the rank's runtime table (-1 when absent)."""
    calls = {int(c): i for i, c in enumerate(trace.runtime["correlation"])}
    assert len(calls) == len(trace.runtime), "correlation ids must be unique within a rank"
    return np.array([calls.get(int(c), -1) for c in trace.kernels["correlation"]], dtype=np.int64)


# --- real exports ---------------------------------------------------------------------------


def test_two_gpu_training_export_gives_one_rank_per_gpu_with_joined_launches():
    ranks = read_nsys_sqlite(real("mfu_2gpu_before.sqlite"))
    assert [r.rank for r in ranks] == [0, 1]
    # Row counts checked with sqlite3 by hand: KERNEL 4010 = 1993 (pid 144, dev 0) + 2017 (pid 145, dev 1).
    assert [len(r.kernels) for r in ranks] == [1993, 2017]
    assert "pid 144, device 0" in ranks[0].source and "pid 145, device 1" in ranks[1].source
    # nsys.md: the (pid, correlationId) join matches 3986 of 4010 kernels; 24 launched before the window.
    unmatched = sum(int(np.count_nonzero(launch_rows(r) < 0)) for r in ranks)
    assert unmatched == 4010 - 3986
    assert [n for n in ranks[0].notes if "launch call" in n] == [
        "12 of 1993 kernels have no launch call in the export (launched before its window)",
        "4 of 643 copies have no launch call in the export (launched before its window)",
    ]
    for r in ranks:
        k = r.kernels
        assert np.all(np.diff(k["start"]) >= 0)
        launch = launch_rows(r)
        hit = np.flatnonzero(launch >= 0)
        call = launch[hit]
        # A launch call starts before its kernel does; the kernel runs on the launcher's process.
        assert np.all(r.runtime["start"][call] <= k["start"][hit])
        assert set(r.runtime["pid"].tolist()) == {int(k["pid"][0])}
        kinds = set(r.runtime["kind"][call].tolist())
        assert kinds <= {int(RuntimeKind.kernel_launch)}
        assert r.device_sm_count is None and any("TARGET_INFO_GPU" in n for n in r.notes)


def test_nccl_kernels_and_registered_nvtx_names_are_read_on_both_gpus():
    ranks = read_nsys_sqlite(real("mfu_2gpu_before.sqlite"))
    total = 0
    for r in ranks:
        nccl = [i for i, n in enumerate(names(r, "kernels")) if n.startswith("ncclDevKernel_SendRecv")]
        assert nccl, f"rank {r.rank} has no NCCL kernel"
        total += len(nccl)
        durations = r.kernels["end"][nccl] - r.kernels["start"][nccl]
        assert np.all(durations > 0)
        # NCCL's NVTX ranges use registered strings (textId, text NULL) in domain 1.
        range_names = set(names(r, "ranges"))
        assert {"ncclSend", "ncclRecv", "ncclGroupStart"} <= range_names
        assert set(r.all_ranges()["domain"].tolist()) == {0, 1}
    assert total == 66  # 66 ncclDevKernel_SendRecv rows in KERNEL


def test_sync_records_and_copy_kinds_are_joined():
    r = read_nsys_sqlite(real("mfu_2gpu_before.sqlite"))[0]
    api = names(r, "runtime")
    syncs = [i for i, n in enumerate(api) if n.startswith("cudaStreamSynchronize")]
    assert syncs and all(r.runtime["kind"][i] == RuntimeKind.sync for i in syncs)
    assert all(r.runtime["sync_type"][i] == 3 for i in syncs)  # CUPTI stream synchronize
    waits = [i for i, n in enumerate(api) if n.startswith("cudaStreamWaitEvent")]
    assert waits and all(r.runtime["sync_type"][i] == 2 for i in waits)
    kinds = set(r.copies["kind"].tolist())
    assert {int(CopyKind.h2d), int(CopyKind.d2d), int(CopyKind.memset)} <= kinds


def test_ranks_share_one_session_clock_mapped_to_utc():
    ranks = read_nsys_sqlite(real("mfu_2gpu_before.sqlite"))
    # TARGET_INFO_SESSION_START_TIME: utcEpochNs 1779782330176752435, systemClockNs 28254349605.
    assert {r.clock_offset_ns for r in ranks} == {1779782330176752435 - 28254349605}


def test_minimal_synthetic_export_loads_with_notes_of_what_is_missing():
    (r,) = read_nsys_sqlite(real("healthy_1pct.sqlite"))
    assert len(r.kernels) == 400 and len(r.runtime) == 400 and len(r.ranges) == 0
    assert r.device_name == "NVIDIA H100 80GB HBM3"
    assert set(names(r, "kernels")) == {
        "void cutlass::gemm_nn_128x128<float>(float*, float*)",
        "void at::native::elementwise_add<float>(float*, float*)",
    }
    assert r.kernels["grid"][0] == 128 and r.kernels["block"][0] == 256
    assert np.all(launch_rows(r) >= 0)
    joined = " | ".join(r.notes)
    for missing in ("NVTX_EVENTS", "globalPid", "session start", "SYNCHRONIZATION"):
        assert missing in joined


# --- hand-built schema variants -------------------------------------------------------------

KERNEL_316 = (
    "start INT, end INT, deviceId INT, contextId INT, streamId INT, correlationId INT, globalPid INT, "
    "demangledName INT, shortName INT, registersPerThread INT, gridX INT, gridY INT, gridZ INT, "
    "blockX INT, blockY INT, blockZ INT, staticSharedMemory INT, dynamicSharedMemory INT, graphNodeId INT"
)


def build(path: Path, *, kernel_ddl: str | None = KERNEL_316, extra: str = "") -> Path:
    """An export in the shape of schema 3.16 (no graphId), two processes on two GPUs."""
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE META_DATA_EXPORT(name TEXT, value TEXT);
        INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.16.1');
        CREATE TABLE StringIds(id INT, value TEXT);
        INSERT INTO StringIds VALUES (1, 'cudaLaunchKernel_v7000'), (2, 'gemm'), (3, 'cudaStreamSynchronize_v3020'),
            (4, 'ncclAllReduce'), (5, 'cudaGraphLaunch_v10000'), (6, 'ncclDevKernel_AllReduce_Sum_bf16_RING_LL');
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME(start INT, end INT, eventClass INT, globalTid INT, correlationId INT, nameId INT);
        CREATE TABLE TARGET_INFO_GPU(id INT, name TEXT, smCount INT);
        INSERT INTO TARGET_INFO_GPU VALUES (0, 'GPU-A', 132), (1, 'GPU-B', 114);
        CREATE TABLE TARGET_INFO_SESSION_START_TIME(utcEpochNs INT, utcTime TEXT);
        INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (5000000000, 'x');
        CREATE TABLE ANALYSIS_DETAILS(startTime INT);
        INSERT INTO ANALYSIS_DETAILS VALUES (1000);
        CREATE TABLE NVTX_EVENTS(start INT, end INT, eventType INT, text TEXT, globalTid INT, textId INT, domainId INT);
        """
    )
    if kernel_ddl:
        db.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL({kernel_ddl})")
        # Both processes use correlation id 7: only (pid, id) tells the launches apart.
        rows = [
            (100, 200, 0, 1, 7, 7, 10 * GLOBAL, 2, 2, 32, 4, 1, 1, 128, 1, 1, 1024, 0, 0),
            (300, 340, 1, 1, 7, 7, 11 * GLOBAL, 6, 6, 64, 8, 1, 1, 512, 1, 1, 0, 4096, 0),
        ]
        db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * 19)})", rows)
    db.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?)",
        [
            (50, 60, 0, 10 * GLOBAL + 3, 7, 1),  # pid 10 launches its gemm
            (250, 270, 0, 11 * GLOBAL + 4, 7, 1),  # pid 11 launches its NCCL kernel
            (400, 900, 0, 11 * GLOBAL + 4, 8, 3),  # pid 11 waits on its stream
            (10, 20, 0, 99 * GLOBAL + 1, 1, 1),  # a process with no GPU work
        ],
    )
    db.executemany(
        "INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?)",
        [
            (40, 210, 59, "decode_step", 10 * GLOBAL + 3, None, 0),
            (240, 360, 59, None, 11 * GLOBAL + 4, 4, 1),  # registered string
            (245, None, 59, "never closed", 11 * GLOBAL + 4, None, 0),
            (30, None, 34, "a mark", 10 * GLOBAL + 3, None, 0),
        ],
    )
    db.executescript(extra)
    db.commit()
    db.close()
    return path


def test_correlation_ids_are_joined_per_process(tmp_path):
    r0, r1 = read_nsys_sqlite(build(tmp_path / "old.sqlite"))
    assert (r0.device_name, r0.device_sm_count, r1.device_name, r1.device_sm_count) == ("GPU-A", 132, "GPU-B", 114)
    assert [r0.runtime["start"][i] for i in launch_rows(r0)] == [50]
    assert [r1.runtime["start"][i] for i in launch_rows(r1)] == [250]
    # Launch geometry is CTAs per launch and threads per CTA: gridX*gridY*gridZ, blockX*blockY*blockZ.
    assert r1.kernels["grid"].tolist() == [8] and r1.kernels["block"].tolist() == [512]
    # The sync launched nothing: it stays with its process's rank; pid 99 ran no GPU work.
    assert r1.runtime["kind"].tolist() == [RuntimeKind.kernel_launch, RuntimeKind.sync]
    assert any("1 runtime calls from processes without GPU work" in n for n in r0.notes)
    assert r0.kernels["registers"].tolist() == [32] and r1.kernels["shared_mem"].tolist() == [4096]
    assert r0.kernels["graph_node"].tolist() == [-1]


def test_nvtx_text_and_text_id_ranges_marks_and_open_ranges(tmp_path):
    r0, r1 = read_nsys_sqlite(build(tmp_path / "old.sqlite"))
    assert names(r0, "ranges") == ["decode_step"] and names(r1, "ranges") == ["ncclAllReduce"]
    assert r1.all_ranges()["domain"].tolist() == [1]
    assert any("1 NVTX ranges were still open" in n for n in r0.notes)


def test_session_start_falls_back_to_analysis_details_on_old_schemas(tmp_path):
    r0, _ = read_nsys_sqlite(build(tmp_path / "old.sqlite"))
    assert r0.clock_offset_ns == 5000000000 - 1000


def test_physical_gpu_ids_order_the_ranks(tmp_path):
    extra = """
        CREATE TABLE TARGET_INFO_CUDA_DEVICE(gpuId INT, cudaId INT, pid INT, numMultiprocessors INT);
        INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (1, 0, 10, 114), (0, 1, 11, 132);
    """
    r0, r1 = read_nsys_sqlite(build(tmp_path / "swapped.sqlite", extra=extra))
    # pid 11 drives physical GPU 0, so it is rank 0 even though its CUDA device id is 1.
    assert int(r0.kernels["pid"][0]) == 11 and int(r1.kernels["pid"][0]) == 10
    assert r0.device_name == "GPU-A"


def test_sm_count_falls_back_to_the_cuda_device_table(tmp_path):
    extra = """
        CREATE TABLE TARGET_INFO_CUDA_DEVICE(gpuId INT, cudaId INT, pid INT, numMultiprocessors INT);
        INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (0, 0, 10, 132), (1, 1, 11, 78);
        UPDATE TARGET_INFO_GPU SET smCount = NULL WHERE id = 1;
    """
    r0, r1 = read_nsys_sqlite(build(tmp_path / "sms.sqlite", extra=extra))
    assert (r0.device_sm_count, r1.device_sm_count) == (132, 78)
    assert (r0.device_name, r1.device_name) == ("GPU-A", "GPU-B")


def test_graph_mode_rows_stand_in_for_their_kernels(tmp_path):
    extra = f"""
        CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE(start INT, end INT, deviceId INT, streamId INT,
            correlationId INT, globalPid INT, graphId INT, graphExecId INT);
        INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (1000, 1500, 0, 7, 20, {10 * GLOBAL}, 3, 4);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (900, 950, 0, {10 * GLOBAL + 3}, 20, 5);
    """
    r0, _ = read_nsys_sqlite(build(tmp_path / "graph.sqlite", extra=extra))
    assert r0.kernels["whole_graph"].tolist() == [False, True]
    assert names(r0, "kernels")[1].startswith("CUDA graph 3")
    assert r0.kernels["grid"][1] == -1 and r0.kernels["registers"][1] == -1
    launch = launch_rows(r0)[1]
    assert r0.runtime["kind"][launch] == RuntimeKind.graph_launch
    assert any("1 CUDA graph launches but no per-node kernels" in n for n in r0.notes)


def test_nsys_runtime_names_with_version_suffixes_are_classified():
    assert runtime_kind("cudaLaunchKernel_v7000") is RuntimeKind.kernel_launch
    assert runtime_kind("cudaLaunchKernelExC_v11060") is RuntimeKind.kernel_launch
    assert runtime_kind("cuLaunchKernelEx") is RuntimeKind.kernel_launch
    assert runtime_kind("cudaGraphLaunch_v10000") is RuntimeKind.graph_launch
    assert runtime_kind("cudaEventSynchronize_v3020") is RuntimeKind.sync
    assert runtime_kind("cudaMemcpyAsync_v3020") is RuntimeKind.memcpy
    assert runtime_kind("cudaMemsetAsync_v3020") is RuntimeKind.memset
    assert runtime_kind("cudaEventQuery_v3020") is RuntimeKind.other


# --- bad input -------------------------------------------------------------------------------


def test_export_without_kernel_table_is_an_input_error(tmp_path):
    path = build(tmp_path / "nokernel.sqlite", kernel_ddl=None)
    with pytest.raises(InputError, match=r"nokernel\.sqlite: no CUPTI_ACTIVITY_KIND_KERNEL table"):
        read_nsys_sqlite(path)


def test_negative_kernel_duration_is_an_input_error(tmp_path):
    path = build(tmp_path / "neg.sqlite")
    db = sqlite3.connect(path)
    db.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 5 WHERE deviceId = 1')
    db.commit()
    db.close()
    with pytest.raises(InputError, match=r"neg\.sqlite: 1 rows of CUPTI_ACTIVITY_KIND_KERNEL end before they start"):
        read_nsys_sqlite(path)


@pytest.mark.parametrize(
    "content, problem",
    [(b"", "empty file"), (b'{"traceEvents": []}', "not an SQLite database")],
)
def test_empty_or_foreign_files_are_input_errors(tmp_path, content, problem):
    path = tmp_path / "bad.sqlite"
    path.write_bytes(content)
    with pytest.raises(InputError, match=problem):
        read_nsys_sqlite(path)


def test_truncated_export_is_an_input_error(tmp_path):
    whole = build(tmp_path / "whole.sqlite").read_bytes()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(whole[: len(whole) // 3])
    with pytest.raises(InputError, match=r"cut\.sqlite: "):
        read_nsys_sqlite(cut)


def test_reading_never_modifies_the_export(tmp_path):
    path = build(tmp_path / "keep.sqlite")
    before = path.read_bytes(), path.stat().st_mtime_ns
    read_nsys_sqlite(path)
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.sqlite"]


def test_node_mode_graph_replay_is_detected_and_its_kernels_are_in_the_budget(tmp_path):
    # One cudaGraphLaunch (correlation 30) replays three kernels that carry its correlation id.
    pid10 = 10 * GLOBAL
    extra = f"""
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1000, 1010, 0, {pid10 + 3}, 30, 5);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
            (1100, 1200, 0, 1, 7, 30, {pid10}, 2, 2, 32, 4, 1, 1, 128, 1, 1, 0, 0, 101),
            (1200, 1300, 0, 1, 7, 30, {pid10}, 2, 2, 32, 4, 1, 1, 128, 1, 1, 0, 0, 102),
            (1310, 1400, 0, 1, 7, 30, {pid10}, 2, 2, 32, 4, 1, 1, 128, 1, 1, 0, 0, 103);
    """
    r0, _ = read_nsys_sqlite(build(tmp_path / "node.sqlite", extra=extra))
    assert r0.kernels["graph_node"].tolist() == [-1, 101, 102, 103]
    assert not any("no per-node kernels" in n for n in r0.notes)
    step = analyze_traces([r0], step_range="decode_step").budget(rank=0)
    assert step is None or step.graph_ops == 0  # the NVTX step holds only the eager gemm
    whole = analyze_traces([r0]).budget(rank=0)
    assert (whole.graph_launches, whole.graph_ops, whole.kernels) == (1, 3, 4)
    assert whole.graph_status in ("partial", "full")


def test_names_missing_from_string_ids_get_a_placeholder_not_minus_one(tmp_path):
    path = build(tmp_path / "nostrings.sqlite", extra="DELETE FROM StringIds WHERE id = 2;")
    r0, r1 = read_nsys_sqlite(path)
    assert names(r0, "kernels") == ["<name not in the export>"]
    assert names(r1, "kernels") == ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]


def test_null_times_are_an_input_error(tmp_path):
    path = build(tmp_path / "nulls.sqlite", extra='UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = NULL WHERE start = 50;')
    with pytest.raises(InputError, match=r"nulls\.sqlite: CUPTI_ACTIVITY_KIND_RUNTIME has empty or non-integer values"):
        read_nsys_sqlite(path)


def test_schema_versions_outside_the_tested_range_are_noted(tmp_path):
    newer = build(tmp_path / "with space 3.30.sqlite", extra="UPDATE META_DATA_EXPORT SET value = '3.30.2';")
    r0, _ = read_nsys_sqlite(newer)
    assert "export schema 3.30.2 is outside the tested range 3.16-3.25" in r0.notes
    r0, _ = read_nsys_sqlite(build(tmp_path / "old.sqlite"))  # 3.16.1 is inside
    assert not any("outside the tested range" in n for n in r0.notes)


def test_one_export_per_rank_is_numbered_in_natural_name_order(tmp_path):
    later = build(tmp_path / "run_10.sqlite")
    first = build(tmp_path / "run_2.sqlite", extra="UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = 7000000000;")
    ranks = read_nsys_exports([later, first])
    assert [r.rank for r in ranks] == [0, 1, 2, 3]
    assert [Path(r.source.split(" (")[0]).name for r in ranks] == ["run_2.sqlite"] * 2 + ["run_10.sqlite"] * 2
    # Each report keeps its own clock offset (its session start on UTC), so the ranks align.
    assert [r.clock_offset_ns for r in ranks] == [7000000000 - 1000] * 2 + [5000000000 - 1000] * 2


def test_columns_read_a_row_at_a_time_equal_columns_read_whole(tmp_path, monkeypatch):
    """Fields grow narrow as fetched and widen when a later piece needs it: a correlation id past a
    byte, a name index past a byte once an NVTX text is interned after 300 registered strings."""
    registered = ", ".join(f"({i}, 's{i}')" for i in range(100, 400))
    extra = f"""
        INSERT INTO StringIds VALUES {registered};
        UPDATE NVTX_EVENTS SET textId = 2 WHERE text = 'decode_step';
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (950, 960, 0, {11 * GLOBAL + 4}, 100000, 3);
    """
    path = build(tmp_path / "wide.sqlite", extra=extra)
    whole = read_nsys_sqlite(path)
    monkeypatch.setattr(nsys_sqlite, "FETCH_ROWS", 1)
    for a, b in zip(whole, read_nsys_sqlite(path), strict=True):
        for table in ("kernels", "copies", "runtime", "ranges", "all_ranges"):
            x, y = (a.all_ranges(), b.all_ranges()) if table == "all_ranges" else (getattr(a, table), getattr(b, table))
            for key, column in x.columns.items():
                assert column.dtype == y[key].dtype and column.tolist() == y[key].tolist()
    assert names(whole[0], "ranges") == ["decode_step"] and whole[0].all_ranges()["name"].dtype == np.int16
    assert whole[1].runtime["correlation"].tolist() == [7, 8, 100000] and whole[1].runtime["correlation"].dtype == np.int32


# --- ranges no step rule reads unasked are left out as they are fetched -------------------------

STEP_MARKS = f"""
    INSERT INTO NVTX_EVENTS VALUES (35, 220, 59, 'ProfilerStep#1', {10 * GLOBAL + 3}, NULL, 0),
        (220, 1000, 59, 'ProfilerStep#2', {10 * GLOBAL + 3}, NULL, 0),
        (60, 90, 59, 'aten::mm', {10 * GLOBAL + 3}, NULL, 0), (120, 130, 60, 'aten::mm', {10 * GLOBAL + 3}, NULL, 0);
"""
LEFT_OUT = "\"end\" IS NOT NULL AND eventType IN (59, 60) AND COALESCE(text, '') NOT LIKE 'ProfilerStep#%'"


def test_ranges_no_step_rule_reads_are_left_out_and_change_no_analysis(tmp_path):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    full = read_nsys_sqlite(build(tmp_path / "a" / "x.sqlite", extra=STEP_MARKS))
    bare = read_nsys_sqlite(build(tmp_path / "b" / "x.sqlite", extra=STEP_MARKS + f"DELETE FROM NVTX_EVENTS WHERE {LEFT_OUT};"))
    r0 = full[0]
    assert [r0.strings[i] for i in r0.ranges["name"]] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert names(r0, "ranges") == ["ProfilerStep#1", "decode_step", "aten::mm", "aten::mm", "ProfilerStep#2"]
    assert r0.all_ranges()["start"].tolist() == [35, 40, 60, 120, 220] and len(full[1].all_ranges()) == 1
    assert bare[0].more_ranges is None and not len(bare[1].ranges)
    one, other = (analyze_traces(t).model_dump(exclude={"sources"}) for t in (full, bare))
    assert one["method"] == "profiler_step/whole_trace" and one == other  # rank 1 has no step marks
    # a named range may be one the reader left out: it is read again
    named = analyze_traces(read_nsys_sqlite(tmp_path / "a" / "x.sqlite")[:1], step_range="decode_step")
    assert named.method == "range" and [s.step_ms * 1e6 for s in named.steps] == pytest.approx([100])  # its kernel


def test_left_out_ranges_still_count_as_duplicates_and_are_checked(tmp_path):
    copy = "INSERT INTO NVTX_EVENTS SELECT * FROM NVTX_EVENTS WHERE text = 'decode_step';"
    r0, _ = read_nsys_sqlite(build(tmp_path / "dup.sqlite", extra=STEP_MARKS + copy))
    assert "rows identical to an earlier row were dropped: 1 in NVTX_EVENTS" in r0.notes
    assert names(r0, "ranges").count("decode_step") == 1
    negative = build(tmp_path / "neg.sqlite", extra="UPDATE NVTX_EVENTS SET \"end\" = 10 WHERE text = 'decode_step';")
    with pytest.raises(InputError, match=r"1 rows of NVTX_EVENTS end before they start"):
        read_nsys_sqlite(negative)
    long = build(tmp_path / "long.sqlite", extra="UPDATE NVTX_EVENTS SET \"end\" = 172800000000000 WHERE text = 'decode_step';")
    with pytest.raises(InputError, match=r"NVTX_EVENTS has an event ending .* longer than a day"):
        read_nsys_sqlite(long)
