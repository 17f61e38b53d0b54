"""The Kineto reader: columns, units, ranks, and one-line errors for bad files."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from diagnoser.errors import InputError
from diagnoser.trace.kineto import read_kineto
from diagnoser.trace.load import load_traces
from diagnoser.trace.model import CopyKind, RuntimeKind

SYNTH = Path(__file__).resolve().parent / "data" / "trace" / "synthetic"
BASE_NS = 1_700_000_000_000_000_000


def test_columns_units_and_kinds():
    t = read_kineto(SYNTH / "rank0.json")
    assert t.rank == 0 and t.device_sm_count == 100 and t.device_name == "NVIDIA H100 SXM5 80GB (synthetic)"
    assert len(t.shapes) == 1 and t.shapes["flops"][0] == 2_147_483_648
    assert len(t.kernels) == 7 and len(t.copies) == 1 and len(t.runtime) == 8 and len(t.ranges) == 2
    # microseconds become exact int64 nanoseconds even at epoch scale
    assert t.kernels["start"].dtype == np.int64
    assert t.kernels["start"].min() == BASE_NS + 10_000
    assert t.kernels["grid"][0] == 64 and t.kernels["block"][0] == 128 and t.kernels["registers"][0] == 32
    assert t.copies["kind"][0] == CopyKind.d2h and t.copies["bytes"][0] == 4096
    kinds = {t.strings[n]: RuntimeKind(k) for n, k in zip(t.runtime["name"], t.runtime["kind"])}
    assert kinds["cudaGraphLaunch"] == RuntimeKind.graph_launch
    assert kinds["cudaStreamSynchronize"] == RuntimeKind.sync
    assert kinds["cudaMemcpyAsync"] == RuntimeKind.memcpy


def test_float_microseconds_keep_nanosecond_resolution(tmp_path):
    doc = json.loads((SYNTH / "rank1.json").read_text())
    for e in doc["traceEvents"]:
        e["ts"] = e["ts"] - 1_700_000_000_000_000 + 1365627862757.064
    path = tmp_path / "float.json"
    path.write_text(json.dumps(doc))
    t = read_kineto(path)
    assert int(t.kernels["start"].min()) == 1365627862757064 + 10_000


def test_gzip_and_directory_of_ranks(tmp_path):
    for rank in (0, 1):
        with gzip.open(tmp_path / f"r{rank}.json.gz", "wb") as out:
            out.write((SYNTH / f"rank{rank}.json").read_bytes())
    traces = load_traces([tmp_path], workers=2)
    assert [t.rank for t in traces] == [0, 1]
    assert len(traces[1].kernels) == 4


def test_duplicate_rank_is_an_input_error(tmp_path):
    shutil.copy(SYNTH / "rank0.json", tmp_path / "a.json")
    shutil.copy(SYNTH / "rank0.json", tmp_path / "b.json")
    with pytest.raises(InputError, match="rank 0 already read"):
        load_traces([tmp_path], workers=1)


def test_rank_from_file_name_when_distributed_info_is_missing(tmp_path):
    doc = json.loads((SYNTH / "rank1.json").read_text())
    del doc["distributedInfo"]
    path = tmp_path / "trace_rank-3.json"
    path.write_text(json.dumps(doc))
    t = read_kineto(path)
    assert t.rank == 3 and any("file name" in n for n in t.notes)


def _write(tmp_path, name, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "name, make, message",
    [
        ("trunc.json.gz", lambda raw: gzip.compress(raw)[:200], "truncated or corrupt gzip"),
        ("bad.json", lambda raw: raw[:-40], "not valid JSON"),
        ("empty.json", lambda raw: b"", "file is empty"),
        ("notrace.json", lambda raw: b'{"hello": 1}', "no traceEvents"),
        ("neg.json", lambda raw: raw.replace(b'"dur": 20', b'"dur": -20', 1), "negative duration"),
        (
            "nogpu.json",
            lambda raw: b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}]}',
            "no kernel",
        ),
    ],
)
def test_malformed_inputs_raise_one_line_input_errors(tmp_path, name, make, message):
    path = _write(tmp_path, name, make((SYNTH / "rank0.json").read_bytes()))
    with pytest.raises(InputError) as err:
        load_traces([path], workers=1)
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


def test_the_input_file_is_not_modified(tmp_path):
    path = tmp_path / "r.json"
    shutil.copy(SYNTH / "rank0.json", path)
    before = path.read_bytes()
    load_traces([path], workers=1)
    assert path.read_bytes() == before


def _tables(trace):
    return {
        (name, col): values.tolist()
        for name in ("kernels", "copies", "runtime", "ranges", "shapes")
        for col, values in getattr(trace, name).columns.items()
    }


def test_piecewise_parse_equals_whole_parse(monkeypatch, tmp_path):
    import diagnoser.trace.chunked_json as chunked

    doc = json.loads((SYNTH / "rank0.json").read_text())
    # an event whose name holds the cut pattern: a cut there must be rejected, not mis-parsed
    doc["traceEvents"].insert(
        5, {"ph": "X", "cat": "cpu_op", "name": "odd }, { name", "ts": 1_700_000_000_000_001, "dur": 1}
    )
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    whole = read_kineto(path)  # the file is far below two pieces: parsed whole
    monkeypatch.setattr(chunked, "PIECE_BYTES", 300)
    pieces = list(chunked.event_pieces(path.read_bytes()))
    assert len(pieces) > 3 and sum(len(events) for _, events in pieces) == len(doc["traceEvents"])
    assert pieces[-1][0]["distributedInfo"]["rank"] == 0
    assert _tables(read_kineto(path)) == _tables(whole)


def test_a_cut_inside_an_event_falls_back_to_a_whole_parse(monkeypatch):
    import diagnoser.trace.chunked_json as chunked

    data = b'{"traceEvents": [{"args": {"x": [{"a": 1}, {"b": 2}]}, "pad": "' + b"p" * 40 + b'"}, {"c": 3}]}'
    with pytest.raises(chunked.NotSplittable):
        list(chunked.event_pieces(data, piece_bytes=20))
