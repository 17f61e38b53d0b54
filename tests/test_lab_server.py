"""The lab server as a client sees it: SSE the probes and a stock OpenAI client read, metrics that
parse, 4xx JSON errors, profiles, and a clean SIGINT shutdown that leaves no process behind."""

from __future__ import annotations

import json
import signal

import httpx
import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from diagnoser.lab.process import LabServer, _children, still_running  # noqa: E402
from diagnoser.http import Client  # noqa: E402
from diagnoser.probes.sse_client import request_body, stream  # noqa: E402

MODEL = "lab-tiny-moe"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    server = LabServer([], profile_dir=tmp_path_factory.mktemp("profiles"))
    url = server.__enter__()
    yield server, url
    server.stop()
    assert not _children(server.proc.pid)


def test_probe_reads_the_stream(lab):
    _, url = lab
    with Client(url) as client:
        for api, path in (("completions", "/v1/completions"), ("chat", "/v1/chat/completions")):
            body = request_body(api, MODEL, "the decode loop", 12, {})
            response = stream(client, url + path, body, 60)
            texts = [c.text for c in response.chunks if c.text]
            assert response.completion_tokens == 12
            assert [c.completion_tokens for c in response.chunks if c.text] == list(range(1, 13))
            assert all(c.emitted_ns and c.step_ms and c.step_ms > 0 for c in response.chunks if c.text)
            assert "".join(texts).strip()


def test_stock_openai_client_reads_the_stream(lab):
    openai = pytest.importorskip("openai")
    _, url = lab
    client = openai.OpenAI(base_url=url + "/v1", api_key="none")
    chunks = list(client.completions.create(model=MODEL, prompt="hello", max_tokens=6, stream=True, extra_body={"ignore_eos": True}))
    assert sum(1 for c in chunks if c.choices and c.choices[0].text is not None) == 6
    assert chunks[-1].choices[0].finish_reason == "length"
    chat = list(client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True))
    assert chat[0].choices[0].delta.role == "assistant"
    whole = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert whole.usage.completion_tokens <= 4 and whole.choices[0].message.content is not None


def test_text_is_the_detokenized_ids(lab):
    from diagnoser.lab.tokenizer import Tokenizer

    _, url = lab
    tokenizer = Tokenizer(32768)
    ids = tokenizer.encode("kato bazu")
    reply = httpx.post(url + "/v1/completions", json={"prompt": ids, "max_tokens": 3, "ignore_eos": True}, timeout=60).json()
    assert reply["usage"] == {"prompt_tokens": len(ids), "completion_tokens": 3, "total_tokens": len(ids) + 3}
    assert tokenizer.decode(tokenizer.encode(reply["choices"][0]["text"])) == reply["choices"][0]["text"]


def test_metrics_parse_with_vllm_names(lab):
    from prometheus_client.parser import text_string_to_metric_families

    _, url = lab
    httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 4, "ignore_eos": True}, timeout=60)
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(url + "/metrics").text)}
    for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:request_decode_time_seconds",
                 "vllm:iteration_tokens_total", "vllm:num_requests_running", "vllm:generation_tokens"):
        assert name in families, name
    counts = [s.value for s in families["vllm:inter_token_latency_seconds"].samples if s.name.endswith("_count")]
    assert counts and counts[0] >= 3


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/completions", {"prompt": [10**6], "max_tokens": 2}, 400),
        ("/v1/completions", {"prompt": "x", "max_tokens": -1}, 400),
        ("/v1/completions", {"prompt": "x", "max_tokens": 10**7}, 400),
        ("/v1/completions", {"max_tokens": 2}, 400),
        ("/v1/completions", {"prompt": "x", "model": "other"}, 404),
        ("/v1/chat/completions", {"messages": "hi"}, 400),
        ("/v1/completions", "not json", 400),
        ("/v1/nowhere", {}, 404),
        ("/stop_profile", None, 409),
    ],
)
def test_bad_requests_get_4xx_json(lab, path, body, status):
    _, url = lab
    content = body if isinstance(body, str) else json.dumps(body) if body is not None else None
    reply = httpx.post(url + path, content=content, headers={"Content-Type": "application/json"}, timeout=30)
    assert reply.status_code == status
    assert reply.json()["error"]["code"] == status and reply.json()["error"]["message"]


def test_profile_has_one_range_per_step(lab):
    _, url = lab
    assert httpx.post(url + "/start_profile", timeout=30).status_code == 200
    httpx.post(url + "/v1/completions", json={"prompt": "x", "max_tokens": 8, "ignore_eos": True}, timeout=60)
    traces = httpx.post(url + "/stop_profile", timeout=120).json()["traces"]
    events = json.loads(open(traces[0]).read())["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    assert len(steps) >= 8  # a prefill step and one per decode token
    assert any(e.get("cat") == "cpu_op" for e in events)


def test_sigint_mid_stream_exits_cleanly(tmp_path):
    server = LabServer([], profile_dir=tmp_path)
    url = server.__enter__()
    try:
        helpers = _children(server.proc.pid)
        assert helpers  # the engine core runs in a process of its own
        with httpx.Client() as client, client.stream(
            "POST", url + "/v1/completions", json={"prompt": "x", "max_tokens": 3000, "stream": True, "ignore_eos": True}, timeout=60
        ) as reply:
            lines = reply.iter_lines()
            assert next(lines).startswith("data:")
            server.proc.send_signal(signal.SIGINT)
            for _ in lines:  # the server ends the stream instead of hanging on it
                pass
        assert server.proc.wait(timeout=30) == 0
        assert not still_running(helpers)  # before stop(), which kills leftovers: the server took them down itself
    finally:
        server.stop()


def test_the_slow_decoder_agrees_with_the_fast_one_and_skips_special_ids():
    """Only its cost differs: reserved special tokens make each call rebuild and scan their table."""
    from diagnoser.lab.tokenizer import EOS, Tokenizer

    plain, reserved = Tokenizer(32768), Tokenizer(32768, reserved=64)
    ids = plain.encode("bakadu mipero tasuna")
    assert plain.slow_decode(ids) == reserved.slow_decode(ids) == plain.decode(ids) == "bakadu mipero tasuna"
    special = [ids[0], EOS, 32768 + 5, *ids[1:]]
    assert reserved.slow_decode(special) == "bakadu mipero tasuna"
    assert len(reserved.added_vocab()) == 64 and plain.added_vocab() == {}


def test_metrics_follow_the_core_steps_under_vllm_definitions():
    """TTFT from arrival to the first token, queue time to first scheduling, ITL between a request's
    own tokens, decode time first to last token; a core that goes away ends every open stream."""
    from prometheus_client.parser import text_string_to_metric_families

    from diagnoser.lab.core import StepOutput
    from diagnoser.lab.metrics import LabMetrics
    from diagnoser.lab.server import Requests

    requests = Requests(LabMetrics(MODEL))
    job = requests.add([1, 2, 3], max_tokens=3, ignore_eos=True)
    other = requests.add([4], max_tokens=5, ignore_eos=True)
    t0 = job.arrival
    requests.on_step(StepOutput(tokens=[(job.rid, 7, None, 4.0, t0 + 0.030, t0 + 0.010)], batch_tokens=3, prompt_tokens=3, running=1))
    requests.on_step(StepOutput(tokens=[(job.rid, 8, None, 4.0, t0 + 0.035, None)], batch_tokens=1, running=1))
    requests.on_step(StepOutput(tokens=[(job.rid, 9, "x", 4.0, t0 + 0.041, None)], finished=[(job.rid, "length")], batch_tokens=1))
    got = [job.queue.get_nowait() for _ in range(4)]
    assert got == [(7, None, 4.0), (8, None, 4.0), (9, "x", 4.0), (None, None, 0.0)]
    requests.on_step(None)
    assert other.queue.get_nowait() == (None, None, 0.0) and not requests.jobs

    text = requests.metrics.text().decode()
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels.get("le")}
    assert samples["vllm:time_to_first_token_seconds_sum"] == pytest.approx(0.030)
    assert samples["vllm:request_queue_time_seconds_sum"] == pytest.approx(0.010)
    assert samples["vllm:request_prefill_time_seconds_sum"] == pytest.approx(0.020)
    assert samples["vllm:inter_token_latency_seconds_count"] == 2
    assert samples["vllm:inter_token_latency_seconds_sum"] == pytest.approx(0.011)
    assert samples["vllm:request_decode_time_seconds_sum"] == pytest.approx(0.011)
    assert samples["vllm:e2e_request_latency_seconds_sum"] == pytest.approx(0.041)
    assert samples["vllm:generation_tokens_total"] == 3 and samples["vllm:prompt_tokens_total"] == 3
    assert samples["vllm:iteration_tokens_total_count"] == 3
    assert samples['vllm:request_success_total'] == 1
