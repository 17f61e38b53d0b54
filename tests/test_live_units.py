"""``diagnoser live``'s pieces that need no server: URLs, request fields, sizes, the profiler folder, bounds."""

from __future__ import annotations

import gzip
import json
import re
import statistics
import threading
import time
from pathlib import Path

import pytest

from conftest import run_cli
from diagnoser.cli.live_cmd import _base_url, _extra_body
from diagnoser.errors import InputError
from diagnoser.live.measure import PROFILED_TOKENS, PROFILED_TOKENS_MAX, Options, profiled_tokens
from diagnoser.live.profile import settled
from diagnoser.live.prompts import fit, sized, words

NGRAM = Path(__file__).parent / "data" / "vllm" / "ngram" / "profile_decode"


@pytest.mark.parametrize("given", ["http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1",
                                   "http://127.0.0.1:8000/v1/completions", "http://127.0.0.1:8000/v1/chat/completions"])
def test_the_server_url_is_read_from_what_users_paste(given):
    assert _base_url(given) == "http://127.0.0.1:8000"


@pytest.mark.parametrize("bad", ["127.0.0.1:8000", "ftp://host/", "http://"])
def test_a_url_that_is_not_http_is_refused(bad):
    with pytest.raises(InputError):
        _base_url(bad)


def test_extra_body_is_a_json_object_that_leaves_the_load_its_own_fields():
    assert _extra_body('{"temperature": 0.7, "response_format": {"type": "json_object"}}')["temperature"] == 0.7
    for bad in ("[1]", "{not json", '{"max_tokens": 3}', '{"stream": false}'):
        with pytest.raises(InputError):
            _extra_body(bad)


def test_prompts_and_outputs_fit_the_context_limit_with_room_for_the_word_estimate():
    assert fit(64, 128, 4096) == (64, 128)
    prompt, out = fit(8000, 4096, 4096)
    assert prompt + out <= 0.9 * 4096 and out <= 4096 // 2
    assert fit(64, 128, None) == (64, 128)
    assert words(10, 1) != words(10, 2) and len(words(10, 1).split()) == 10  # distinct prompts: no prefix-cache hit
    assert len(sized(100, 2.0, 0).split()) == 50


@pytest.mark.parametrize("field,value", [("requests", 0), ("requests", 257), ("concurrency", 65), ("max_tokens", 4097),
                                         ("duration_s", 5), ("duration_s", 1801)])
def test_bounds_no_option_lifts(field, value):
    with pytest.raises(InputError):
        Options(**{field: value}).check()


def test_the_profile_lasts_long_enough_for_other_clients_requests_to_land_in_it():
    # by hand: 5 foreign requests a second at 4 ms a step: 3 arrivals take 0.6 s, 150 steps
    assert profiled_tokens(5.0, 4.0, 1024) == 150
    assert profiled_tokens(0.0, 4.0, 1024) == PROFILED_TOKENS  # nobody else: the usual window
    assert profiled_tokens(50.0, 4.0, 1024) == PROFILED_TOKENS  # they arrive often enough already
    assert profiled_tokens(0.1, 4.0, 1024) == PROFILED_TOKENS_MAX  # rare arrivals cannot stretch the trace
    assert profiled_tokens(5.0, 4.0, 64) == 64  # never past the load's own length
    assert profiled_tokens(5.0, None, 1024) == PROFILED_TOKENS


def test_profile_files_are_taken_once_their_sizes_stop_changing(tmp_path):
    old = tmp_path / "rank0.old.pt.trace.json.gz"
    old.write_bytes(b"x")
    new = tmp_path / "rank0.new.pt.trace.json.gz"

    def write_slowly():  # as the profiler does after /stop_profile answered
        for _ in range(3):
            with open(new, "ab") as out:
                out.write(b"y" * 1000)
            time.sleep(0.4)

    writer = threading.Thread(target=write_slowly)
    writer.start()
    found = settled(tmp_path, {old}, timeout_s=20)
    writer.join()
    assert found == [new] and new.stat().st_size == 3000


def test_no_new_trace_within_the_wait_gives_nothing(tmp_path):
    assert settled(tmp_path, set(), timeout_s=2) == []


def test_live_against_nothing_listening_is_one_line_and_exit_2():
    done = run_cli("live", "http://127.0.0.1:9", "--duration", "10")
    assert done.returncode == 2
    assert done.stderr.count("\n") <= 2 and "error" in done.stderr and "Traceback" not in done.stderr


def test_live_refuses_a_bad_option_before_measuring(tmp_path):
    done = run_cli("live", "http://127.0.0.1:9", "--concurrency", "100")
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_a_speculating_trace_gives_the_ordinary_step_and_the_verify_cycle_at_one_batch():
    from diagnoser.trace.analysis import analyze_traces
    from diagnoser.trace.facts import to_observations
    from diagnoser.trace.kineto import read_kineto_many

    found = to_observations(analyze_traces(read_kineto_many(sorted(NGRAM.glob("*.gz")))))
    # the same medians from the raw annotations: each step runs from its annotation's start to the next one's
    events = json.load(gzip.open(next(NGRAM.glob("rank0*.gz"))))["traceEvents"]
    marks = sorted((e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_context")),
                   key=lambda e: e["ts"])
    plain: dict[int, list[float]] = {}
    verify: dict[int, list[float]] = {}
    drafted: dict[int, list[int]] = {}
    for mark, nxt in zip(marks, marks[1:]):
        m = re.match(r"execute_context_0\(0\)_generation_(\d+)\((\d+)\)$", mark["name"])
        if m and int(m[1]):
            side = verify if int(m[2]) > int(m[1]) else plain
            side.setdefault(int(m[1]), []).append((nxt["ts"] - mark["ts"]) / 1e3)
            drafted.setdefault(int(m[1]), []).append(int(m[2]) - int(m[1]))
    batch = max((b for b in plain if len(plain[b]) >= 3 and len(verify.get(b, [])) >= 3),
                key=lambda b: len(plain[b]) + len(verify[b]))
    assert found.speculation.ordinary_step_ms == pytest.approx(statistics.median(plain[batch]), rel=0.02)
    assert found.speculation.verify_ms == pytest.approx(statistics.median(verify[batch]), rel=0.02)
    # the same window's share of verify steps and the drafted tokens each sequence fed a step, for the time per emitted token
    assert found.speculation.verify_step_share == pytest.approx(len(verify[batch]) / (len(plain[batch]) + len(verify[batch])))
    assert found.speculation.drafted_per_sequence_step == pytest.approx(sum(drafted[batch]) / (batch * len(drafted[batch])))


def test_ablations_alternate_their_order_take_each_sides_median_and_stop_at_the_deadline(monkeypatch):
    """ABBA rounds so drift falls on both sides; a median, so one stalled load (the 40 ms below) decides nothing;
    the rounds stop once the stage's time is spent (the first always runs)."""
    from diagnoser.live import measure as m
    from diagnoser.live.load import Shape

    order: list[bool] = []
    served_ms = iter([5.0, 40.0, 5.2])  # one stalled load among the served ones
    clock = iter([0.0, 0.0, 10.0])  # checked before each round after the first: the fourth finds the deadline passed

    def fake_load(url, model, shape, tokens_per_word, deadline, seed=0):
        served = "frequency_penalty" not in shape.extra
        order.append(served)
        return ("served" if served else "undone", next(served_ms) if served else 3.0)

    monkeypatch.setattr(m, "run_load", fake_load)
    monkeypatch.setattr(m, "_per_token_ms", lambda window: (window[1], "engine"))
    monkeypatch.setattr(m.time, "monotonic", lambda: next(clock, 10.0))
    runs = m._ablation_runs([m.ABLATIONS["penalties"]], "http://x", "tiny", Shape(4, 4, 64, 64, {}), 1.0, deadline=5.0)
    assert order == [True, False, False, True, True, False]
    baseline, undone = runs
    assert baseline.figures.per_token_ms == 5.2  # the median of 5.0, 40 and 5.2 (their mean would be 16.7)
    assert undone.figures.per_token_ms == 3.0
