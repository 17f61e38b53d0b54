"""The lab server lets go of what a client abandons (hardening class 9): a request cancelled while
it waits leaves the API server's table, an unstreamed request whose client left stops generating,
an oversized body is refused before it is read, and a profile nobody stops records a bounded
number of steps."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")

from diagnoser.lab import engine as engine_module  # noqa: E402
from diagnoser.lab.engine import Engine, Request  # noqa: E402
from diagnoser.lab.process import LabServer  # noqa: E402
from diagnoser.lab.served import ModelConfig  # noqa: E402
from diagnoser.lab.server import MAX_BODY_BYTES  # noqa: E402
from diagnoser.lab.tokenizer import Tokenizer  # noqa: E402

CFG = ModelConfig(vocab=1024, max_context=128, max_seqs=1)


def running_engine(outputs: list):
    engine = Engine(frozenset(), CFG, "cpu", Tokenizer(CFG.vocab), outputs.append)
    loop = threading.Thread(target=engine.run, daemon=True)
    loop.start()
    return engine, loop


def wait_for(predicate, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_request_cancelled_while_waiting_is_finished_so_the_server_lets_go(one_thread_restored):
    outputs: list = []
    engine, loop = running_engine(outputs)
    try:
        engine.submit(Request(0, [1, 2, 3], max_tokens=40, ignore_eos=True))  # takes the one slot
        engine.submit(Request(1, [4, 5], max_tokens=40, ignore_eos=True))  # waits behind it
        engine.cancel(1)
        finished = lambda: {rid: why for out in list(outputs) for rid, why in out.finished}  # noqa: E731
        assert wait_for(lambda: 0 in finished(), 120)
        assert finished()[1] == "abort"  # without it the API server held request 1 for ever
        assert not any(rid == 1 for out in outputs for rid, *_ in out.tokens)
    finally:
        engine.stop()
        loop.join(30)


def test_a_profile_nobody_stops_records_a_bounded_number_of_steps(monkeypatch, tmp_path, one_thread_restored):
    monkeypatch.setattr(engine_module, "MAX_PROFILED_STEPS", 5)
    outputs: list = []
    engine, loop = running_engine(outputs)
    try:
        engine.profile_command("start")
        engine.submit(Request(0, [1, 2, 3], max_tokens=20, ignore_eos=True))
        assert wait_for(lambda: any(out.finished for out in list(outputs)), 120)
        assert engine.profiler is None and engine.held_profile is not None  # stopped itself at the cap
        written = engine.profile_command("stop", tmp_path / "t.json")
        events = json.loads(written[0].read_text())["traceEvents"]
        steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
        assert len(steps) == 5  # 20 steps ran; the first five were recorded
        assert engine.profile_command("stop", tmp_path / "again.json") == []  # written once; the server says 409
    finally:
        engine.stop()
        loop.join(30)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with LabServer([], profile_dir=tmp_path_factory.mktemp("profiles")) as url:
        yield url


def test_an_oversized_body_is_refused_before_it_is_read(lab):
    big = json.dumps({"prompt": "x" * (MAX_BODY_BYTES + 10), "max_tokens": 2}).encode()
    declared = httpx.post(lab + "/v1/completions", content=big, headers={"Content-Type": "application/json"}, timeout=30)
    assert declared.status_code == 413 and declared.json()["error"]["code"] == 413

    def chunks():  # no Content-Length: the server counts as it reads
        for i in range(0, len(big), 65536):
            yield big[i:i + 65536]

    streamed = httpx.post(lab + "/v1/completions", content=chunks(), headers={"Content-Type": "application/json"}, timeout=30)
    assert streamed.status_code == 413
    assert httpx.post(lab + "/v1/completions", json={"prompt": "x", "max_tokens": 2}, timeout=60).status_code == 200


def test_an_unstreamed_request_whose_client_left_stops_generating(lab):
    def generated() -> float:
        text = httpx.get(lab + "/metrics", timeout=30).text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:generation_tokens_total"))

    def running() -> float:
        text = httpx.get(lab + "/metrics", timeout=30).text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:num_requests_running"))

    before = generated()
    max_tokens = 4000
    with pytest.raises(httpx.TimeoutException):
        httpx.post(lab + "/v1/completions", json={"prompt": "x", "max_tokens": max_tokens, "ignore_eos": True}, timeout=1.5)
    assert wait_for(lambda: running() == 0, 60)
    # it stopped where its client left, not at the end: the full request is thousands of steps
    assert generated() - before < max_tokens / 2
