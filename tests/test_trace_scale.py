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
