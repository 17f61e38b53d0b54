"""Traces read at bounded memory: streamed in pieces, with the same result as a whole read."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

import diagnoser.trace.chunked_json as chunked
import diagnoser.trace.trace_file as trace_file
from diagnoser.errors import InputError
from diagnoser.trace.kineto import _route_in_parts, read_kineto

SYNTH = Path(__file__).resolve().parent / "data" / "trace" / "synthetic"


def _tables(trace):
    return {
        (name, col): values.tolist()
        for name in ("kernels", "copies", "runtime", "ranges", "shapes")
        for col, values in getattr(trace, name).columns.items()
    }


class _Trickle(io.BytesIO):
    """A stream that hands out a few bytes a read, so cuts straddle reads."""

    def read(self, size=-1):
        return super().read(min(size, 37) if size and size > 0 else size)


def test_streamed_pieces_equal_pieces_of_the_bytes(monkeypatch):
    data = (SYNTH / "rank0.json").read_bytes()
    monkeypatch.setattr(chunked, "PIECE_BYTES", 300)
    from_bytes = list(chunked.event_pieces(data))
    from_stream = list(chunked.event_pieces(_Trickle(data)))
    assert len(from_bytes) > 3
    assert sum((events for _, events in from_stream), []) == sum((events for _, events in from_bytes), [])
    assert from_stream[-1][0].keys() == from_bytes[-1][0].keys()


@pytest.mark.parametrize("packed", [False, True])
def test_a_streamed_read_equals_a_whole_read(monkeypatch, tmp_path, packed):
    raw = (SYNTH / "rank0.json").read_bytes()
    path = tmp_path / ("r.json.gz" if packed else "r.json")
    path.write_bytes(gzip.compress(raw) if packed else raw)
    whole = read_kineto(path)  # far below two pieces: parsed whole
    monkeypatch.setattr(chunked, "PIECE_BYTES", 300)
    assert _tables(read_kineto(path)) == _tables(whole)


def test_a_stream_past_the_limit_is_refused(monkeypatch, tmp_path):
    path = tmp_path / "r.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": [{"pad": "x" * 5000}]}).encode()))
    monkeypatch.setattr(trace_file, "MAX_TRACE_BYTES", 1000)
    with trace_file.open_stream(path) as stream, pytest.raises(InputError, match="decompresses to more than"):
        while stream.read(300):
            pass


def test_ranks_are_read_as_many_at_a_time_as_fit_the_budget(tmp_path):
    from diagnoser.trace.memory_budget import parse_size, read_plan, working_set

    small, large = tmp_path / "rank-0.json", tmp_path / "rank-1.json.gz"
    small.write_bytes(b" " * 1000)
    large.write_bytes(gzip.compress(b" " * 3_000_000))
    need = working_set(small) + working_set(large)
    assert working_set(large) > working_set(small)  # the trailer's size, not the compressed one
    assert read_plan([small, large], need, cpus=2) == ([1, 0], 2, [])
    order, workers, notes = read_plan([small, large], need - 1, cpus=2)
    assert (order, workers) == ([1, 0], 1) and "1 of 2 ranks read at a time, not 2" in notes[0]
    assert parse_size("2G") == 2 << 30 and parse_size("512M") == 512 << 20
    with pytest.raises(ValueError):
        parse_size("lots")


def test_a_budget_changes_how_ranks_are_read_not_what_they_say():
    from diagnoser.trace.analysis import analyze_traces
    from diagnoser.trace.kineto import read_kineto_many

    paths = sorted(SYNTH.glob("rank*.json"))
    free = analyze_traces(read_kineto_many(paths, workers=2))
    tight = analyze_traces(read_kineto_many(paths, workers=2, memory=1))
    assert any("ranks read at a time" in n for n in tight.notes)
    assert tight.model_dump(exclude={"notes"}) == free.model_dump(exclude={"notes"})


def _many_steps(tmp_path, copies: int = 60, extra: list | None = None, cpu_only_head: bool = True) -> Path:
    """rank0's events repeated ``copies`` times a step apart, CPU ops (and a numeric name) ahead of any GPU event,
    python calls and ``extra`` events at the end: enough pieces at a small piece size for several parts."""
    doc = json.loads((SYNTH / "rank0.json").read_text())
    events = doc["traceEvents"]
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events) - min(e["ts"] for e in events if "ts" in e) + 10
    head = [{"ph": "X", "cat": "cpu_op", "name": 7 if i == 0 else f"aten::op{i}", "pid": 1, "tid": 1,
             "ts": events[0]["ts"] - 100 + i, "dur": 1} for i in range(5)] if cpu_only_head else []
    calls = [{"ph": "X", "cat": "python_function", "name": "f", "ts": events[0]["ts"] + i, "dur": 1} for i in range(3)]
    doc["traceEvents"] = head + [
        {**e, "ts": e["ts"] + k * span} if "ts" in e else e for k in range(copies) for e in events
    ] + calls + (extra or [])
    path = tmp_path / "rank-0.json"
    path.write_text(json.dumps(doc, indent=1))
    return path


def _everything(trace):
    return (_tables(trace), trace.strings, trace.notes, trace.python_calls.tolist(),
            {k: v.tolist() for k, v in trace.cpu_ops.columns.items()}, trace.rank, trace.device_name)


@pytest.mark.parametrize("parts", [2, 3])
def test_a_rank_read_in_parts_equals_one_pass(monkeypatch, tmp_path, parts):
    path = _many_steps(tmp_path)
    monkeypatch.setattr(chunked, "PIECE_BYTES", 4096)
    cut = chunked.array_parts(path, parts)
    assert len(cut) == parts and cut[-1].last and not cut[0].last
    assert _route_in_parts(path, parts) is not None  # read in parts, not fallen back to one pass
    assert _everything(read_kineto(path, workers=parts)) == _everything(read_kineto(path))


def test_cpu_ops_of_a_trace_without_gpu_events_survive_the_parts(monkeypatch, tmp_path):
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": f"aten::op{i % 7}", "pid": 1, "tid": 1 + i % 2,
                            "ts": 1_700_000_000_000_000 + 10 * i, "dur": 5} for i in range(3000)]}
    doc["traceEvents"].insert(0, {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1,
                                  "ts": 1_700_000_000_000_000, "dur": 30_000})
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(doc, indent=1))
    monkeypatch.setattr(chunked, "PIECE_BYTES", 4096)
    assert _route_in_parts(path, 2) is not None
    one, two = read_kineto(path), read_kineto(path, workers=2)
    assert len(two.cpu_ops) == 3000 and _everything(two) == _everything(one)


def test_an_error_in_a_later_part_is_named_as_one_pass_names_it(monkeypatch, tmp_path):
    mtia = {"ph": "X", "cat": "mtia_runtime", "name": "launch", "pid": 1, "tid": 1, "ts": 1_700_000_000_000_000, "dur": 1}
    path = _many_steps(tmp_path, extra=[mtia])
    monkeypatch.setattr(chunked, "PIECE_BYTES", 4096)
    with pytest.raises(InputError) as one:
        read_kineto(path)
    with pytest.raises(InputError) as parts:
        read_kineto(path, workers=2)
    assert str(parts.value) == str(one.value) and "traceEvents[" in str(one.value)
    assert _route_in_parts(path, 2) is None  # the part that holds the error sends the reading back to one pass


def test_a_gzip_rank_is_read_in_one_pass(monkeypatch, tmp_path):
    plain = _many_steps(tmp_path)
    packed = tmp_path / "rank-0.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    monkeypatch.setattr(chunked, "PIECE_BYTES", 4096)

    def refuse(*_):
        raise AssertionError("a compressed file cannot be cut where it lies")

    import diagnoser.trace.kineto as kineto

    monkeypatch.setattr(kineto, "array_parts", refuse)
    assert _tables(read_kineto(packed, workers=2)) == _tables(read_kineto(plain))


def test_a_large_rank_is_read_in_as_many_parts_as_fit_the_budget(tmp_path):
    from diagnoser.trace.memory_budget import BASE_BYTES, PARTS_FROM_BYTES, PARTS_PER_BYTE, part_count

    small, large = tmp_path / "small.json", tmp_path / "large.json"
    small.write_bytes(b" " * 1000)
    with open(large, "wb") as handle:  # sparse: only its size is read
        handle.truncate(PARTS_FROM_BYTES * 4)
    assert part_count(small, 1 << 40, cpus=8) == (1, [])
    assert part_count(large, 1 << 40, cpus=1) == (1, [])
    need = int(PARTS_PER_BYTE * PARTS_FROM_BYTES * 4)
    assert part_count(large, need + 5 * BASE_BYTES, cpus=8) == (4, [])
    parts, notes = part_count(large, need + 2 * BASE_BYTES, cpus=8)
    assert parts == 1 and "read in one pass, not in 8 parts" in notes[0]


def test_the_cycle_collector_is_paused_while_reading_and_restored_after(tmp_path):
    import gc

    from diagnoser.trace.collector import without_cycle_collection

    seen = []

    @without_cycle_collection
    def work(fail: bool):
        seen.append(gc.isenabled())
        if fail:
            raise InputError("bad")
        return 1

    assert gc.isenabled()
    assert work(False) == 1 and seen == [False] and gc.isenabled()
    with pytest.raises(InputError):
        work(True)
    assert gc.isenabled()
    gc.disable()
    try:
        work(False)
        assert not gc.isenabled()  # a caller that paused it keeps it paused
    finally:
        gc.enable()
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(InputError):
        read_kineto(bad)
    assert gc.isenabled()
