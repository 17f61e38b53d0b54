"""Broken and hostile traces, made by mutating real ones: each run ends in a note and exit 0, or
in one line on stderr and exit 2; never a traceback, a NaN, a numpy warning or a changed input."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import sqlite3
from pathlib import Path

import orjson
import pytest
from conftest import SHARED, run_cli

from diagnoser.errors import InputError

DATA = SHARED / "data"
KINETO = {
    "decode-eager-b200": DATA / "decode" / "TraceLens" / "eager_trace.json.gz",
    "hta-event-sync-a100": DATA / "hta" / "critical_path" / "cuda_event_sync" / "event_sync_trace.json.gz",
    "hta-old-categories": DATA / "hta" / "trace_file_list" / "inference_rank_1.json.gz",
}
NSYS = DATA / "nsys" / "nsys-ai" / "healthy_1pct.sqlite"
KERNEL_CATS = ("kernel", "Kernel")
NOT_A_NUMBER = re.compile(r"\b(nan|NaN|inf|Infinity)\b")


def _first_kernel(doc: dict) -> dict:
    return next(e for e in doc["traceEvents"] if e.get("cat") in KERNEL_CATS and e.get("ph") == "X")


def _set(field, value):
    def mutate(doc):
        _first_kernel(doc)[field] = value

    return mutate


def _delete(field):
    def mutate(doc):
        del _first_kernel(doc)[field]

    return mutate


def _top(field, value):
    def mutate(doc):
        doc[field] = value

    return mutate


def _args(field, value):
    def mutate(doc):
        _first_kernel(doc)["args"][field] = value

    return mutate


def _duplicate_every_event(doc):
    doc["traceEvents"] = [e for e in doc["traceEvents"] for _ in (0, 1)]


def _mtia_categories(doc):
    for e in doc["traceEvents"]:
        if e.get("cat") in KERNEL_CATS:
            e["cat"] = "mtia_ccp_events"
        elif e.get("cat") in ("cuda_runtime", "Runtime"):
            e["cat"] = "mtia_runtime"


# name -> (mutation, "note" or "error", what the note or the message says). Mutations of events
# run on every trace (old and new categories, eager and graph-free); those of the document's
# other fields or of parse structure run on one.
EVENT_MUTATIONS = {
    "dur 1e300": (_set("dur", 1e300), "error", "beyond a capture's length"),
    "dur two days": (_set("dur", 2 * 86_400e6), "error", "beyond a capture's length"),
    "ts 1e300": (_set("ts", 1e300), "error", "beyond a capture's length"),
    "ts -1e300": (_set("ts", -1e300), "error", "beyond any clock"),
    "ts in ns, not µs": (_set("ts", 1.7e18), "error", "beyond a capture's length"),
    "negative dur": (_set("dur", -3), "error", "negative duration"),
    "no dur": (_delete("dur"), "note", "had no ts or dur and were left out (1 kernel)"),
    "no ts": (_delete("ts"), "note", "had no ts or dur and were left out (1 kernel)"),
    "every event twice": (_duplicate_every_event, "note", "were exact copies of an earlier event and were dropped"),
    "correlation 1e300": (_args("correlation", 1e300), "error", "beyond 64-bit integers"),
    "MTIA categories": (_mtia_categories, "error", "device type not supported: MTIA"),
}
DOCUMENT_MUTATIONS = {
    "dur as text": (_set("dur", "long"), "error", "non-numeric ts or dur"),
    "grid 2**70": (_args("grid", [2**35, 2**35, 1]), "error", "grid"),
    "args a list": (_set("args", [1, 2]), "error", "args is not an object"),
    "name a list": (_set("name", ["k"]), "error", "wrong type"),
    "deviceProperties an object": (_top("deviceProperties", {"id": 0}), "note", "deviceProperties is a dict, not a list"),
    "deviceProperties of strings": (_top("deviceProperties", ["gpu", 3]), "note", "2 deviceProperties entries are not objects"),
    "deviceProperties wrong types": (
        _top("deviceProperties", [{"id": 0, "name": 5, "numSms": "many"}]), "note", "numSms is 'many', not an SM count"),
    "deviceProperties negative SMs": (
        _top("deviceProperties", [{"id": 0, "name": "GPU", "numSms": -4}]), "note", "numSms is -4, not an SM count"),
    "baseTimeNanoseconds past 64 bits": (_top("baseTimeNanoseconds", 2**64 - 1), "note", "not a clock in range"),
    "rank a bool": (_top("distributedInfo", {"rank": True}), "note", "distributedInfo.rank is True"),
    "MTIA deviceProperties": (
        _top("deviceProperties", [{"id": 0, "name": "ARTEMIS", "runtimeMajorVersion": 1, "maxGridHeight": 8}]),
        "error", "device type not supported: MTIA"),
    "MTIA backend": (_top("distributedInfo", {"backend": "mtia:hccl", "rank": 0}), "error", "device type not supported"),
}
CASES = [(trace, name) for trace in KINETO for name in EVENT_MUTATIONS] + [
    ("hta-event-sync-a100", name) for name in DOCUMENT_MUTATIONS
]


@pytest.fixture(scope="module")
def documents() -> dict[str, dict]:
    if not all(p.is_file() for p in KINETO.values()):
        pytest.skip("shared traces absent")
    return {name: orjson.loads(gzip.decompress(path.read_bytes())) for name, path in KINETO.items()}


def _check(done, expect: str, needle: str, path: Path) -> None:
    assert "Traceback" not in done.stderr and "RuntimeWarning" not in done.stderr, done.stderr
    if expect == "error":
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert needle in lines[0] and str(path) in lines[0], lines[0]
    else:
        assert done.returncode == 0, done.stderr
        assert done.stderr == "" and not NOT_A_NUMBER.search(done.stdout)
        assert needle in done.stdout, done.stdout[-2000:]


@pytest.mark.parametrize("trace, mutation", CASES)
def test_a_mutated_kineto_trace_gives_a_note_or_one_line(tmp_path, documents, trace, mutation):
    mutate, expect, needle = {**EVENT_MUTATIONS, **DOCUMENT_MUTATIONS}[mutation]
    doc = orjson.loads(orjson.dumps(documents[trace]))
    mutate(doc)
    path = tmp_path / "mutated.json"
    path.write_bytes(orjson.dumps(doc))
    before = path.read_bytes()
    _check(run_cli("analyze", str(path)), expect, needle, path)
    assert path.read_bytes() == before


def test_duplicates_are_noted_in_json_and_leave_the_budget_as_it_was(tmp_path, documents):
    doc = documents["decode-eager-b200"]
    twice = orjson.loads(orjson.dumps(doc))
    _duplicate_every_event(twice)
    runs = {}
    for name, content in (("once", doc), ("twice", twice)):
        path = tmp_path / f"{name}.json"
        path.write_bytes(orjson.dumps(content))
        done = run_cli("analyze", str(path), "--json")
        assert done.returncode == 0, done.stderr
        runs[name] = orjson.loads(done.stdout)["analysis"]
    kernels = sum(1 for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X")
    note = next(n for n in runs["twice"]["notes"] if "exact copies" in n)
    assert f"{kernels} kernels" in note
    for field in ("kernel_table", "collectives", "steps"):
        assert runs["twice"][field] == runs["once"][field]
    parts = [[r["parts_ns"] for r in run["rank_steps"]] for run in (runs["once"], runs["twice"])]
    assert parts[0] == parts[1]


@pytest.mark.parametrize(
    "content, needle",
    [
        (b'{"title": "a case, not a trace"}', "not a Chrome/Kineto trace"),
        (b"[1, 2, 3]", "not a Chrome/Kineto trace"),
        (b'"just a string"', "not a Chrome/Kineto trace"),
    ],
)
def test_json_that_is_not_a_chrome_trace(tmp_path, content, needle):
    path = tmp_path / "other.json"
    path.write_bytes(content)
    done = run_cli("analyze", str(path))
    _check(done, "error", needle, path)


# --- Nsight SQLite ------------------------------------------------------------------------------

K, R = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"
SQL_MUTATIONS = {
    "end 1e300": (f'UPDATE {K} SET "end" = start + 1e300 WHERE rowid = 1', "error", "non-integer values"),
    "end at int64 max": (f'UPDATE {K} SET "end" = 9223372036854775807 WHERE rowid = 1', "error", "beyond any clock"),
    "start at int64 min": (f"UPDATE {K} SET start = -9223372036854775808 WHERE rowid = 1", "error", "beyond any clock"),
    "a kernel two days long": (f'UPDATE {K} SET "end" = start + 172800000000000 WHERE rowid = 1', "error",
                               "a capture longer than a day"),
    "negative duration": (f'UPDATE {K} SET "end" = start - 5 WHERE rowid = 1', "error", "negative duration"),
    "no end": (f'UPDATE {K} SET "end" = NULL WHERE rowid = 1', "error", "non-integer values"),
    "every kernel twice": (f"INSERT INTO {K} SELECT * FROM {K}", "note", "identical to an earlier row were dropped: 400 in"),
    "every call twice": (f"INSERT INTO {R} SELECT * FROM {R}", "note", "identical to an earlier row were dropped: 400 in"),
}


@pytest.mark.parametrize("mutation", list(SQL_MUTATIONS))
def test_a_mutated_nsight_export_gives_a_note_or_one_line(tmp_path, mutation):
    if not NSYS.is_file():
        pytest.skip("shared Nsight export absent")
    sql, expect, needle = SQL_MUTATIONS[mutation]
    path = tmp_path / "mutated.sqlite"
    shutil.copyfile(NSYS, path)
    with sqlite3.connect(path) as db:
        db.execute(sql)
    db.close()
    before = path.read_bytes()
    _check(run_cli("analyze", str(path)), expect, needle, path)
    assert path.read_bytes() == before


# --- what is not a trace file at all ------------------------------------------------------------


@pytest.mark.parametrize("command", [("analyze",), ("nsys", "show")])
def test_devices_and_pipes_are_refused_before_they_are_read(tmp_path, command):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)  # opening it would block until a writer came
    for path in ("/dev/zero", str(fifo)):
        done = run_cli(*command, path)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert f"{path}: not a regular file" in done.stderr


def test_the_size_caps(tmp_path, monkeypatch):
    from diagnoser.trace import trace_file

    plain = tmp_path / "big.json"
    plain.write_bytes(b'{"traceEvents": []}' + b" " * 4096)
    packed = tmp_path / "bomb.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    monkeypatch.setattr(trace_file, "MAX_TRACE_BYTES", 1024)
    monkeypatch.setattr(trace_file, "_CHUNK", 256)
    with pytest.raises(InputError, match="over the .* a trace may hold"):
        trace_file.read_bytes(plain)
    with pytest.raises(InputError, match="decompresses to more than"):
        trace_file.read_bytes(packed)


def test_a_folder_without_traces_names_what_it_holds(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    _check(run_cli("analyze", str(empty)), "error", "empty folder", empty)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "README.txt").write_text("not a trace")
    done = run_cli("analyze", str(docs))
    _check(done, "error", "found README.txt", docs)
    assert "pass trace files explicitly" in done.stderr


def test_a_folder_of_nsight_exports_is_read(tmp_path):
    if not NSYS.is_file():
        pytest.skip("shared Nsight export absent")
    folder = tmp_path / "ranks"
    folder.mkdir()
    shutil.copyfile(NSYS, folder / "rank0.sqlite")
    done = run_cli("analyze", str(folder))
    assert done.returncode == 0, done.stderr
    assert "critical rank 0" in done.stdout
