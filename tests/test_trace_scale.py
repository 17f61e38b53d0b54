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
from diagnoser.trace.kineto import read_kineto

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
