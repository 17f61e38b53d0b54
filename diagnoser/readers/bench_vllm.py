"""Serving figures from ``vllm bench serve --save-result``: one JSON object per run.

Keys are those vllm-project/vllm ``vllm/benchmarks/serve.py`` writes (``benchmark`` and
``main_async``): ``<stat>_<metric>_ms`` for ttft, tpot, itl and e2el, where the stats are mean,
median and the ``--metric-percentiles`` asked for (p99 alone by default); ``max_concurrency``
is null when the client did not cap it. ``--save-detailed`` adds per-request lists, among them
``itls``: each request's gaps between streamed chunks in seconds, which say whether the client
read the stream in bursts. SGLang's result shares the latency keys (``bench_sglang.percentiles``
reads both) but echoes ``dataset_name`` and ``sharegpt_output_len``, which vLLM's never writes.
"""

from __future__ import annotations

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.errors import InputError
from diagnoser.readers.bench_common import METRICS, Damaged, number, positive, reader, shown, stream_facts
from diagnoser.readers.bench_sglang import percentiles
from diagnoser.readers.facts import SourcedFacts

KIND = "a vllm bench serve result"
_SIGNATURE = ("model_id", "tokenizer_id", "num_prompts", "completed", "duration")
# case figure -> the stem vLLM writes as {mean,median,p90,p99}_<stem>_ms
_LATENCIES = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "request_latency_ms": "e2el"}


def recognise(artifact: Artifact) -> bool:
    doc = artifact.json
    return isinstance(doc, dict) and all(k in doc for k in _SIGNATURE) and "sharegpt_output_len" not in doc


def _read(artifact: Artifact) -> SourcedFacts:
    run = artifact.json
    if not recognise(artifact):
        missing = [k for k in _SIGNATURE if k not in run] if isinstance(run, dict) else []
        raise Damaged(f"it has no {', '.join(missing)}" if missing else "it is not one complete JSON object (cut short?)")
    key = artifact.key
    completed, duration = (positive(run[k], k) for k in ("completed", "duration"))
    if not completed or not duration:
        raise Damaged("it completed no request or took no time; nothing to read")
    facts = SourcedFacts()
    facts.add(f"{METRICS}.boundary", "client_receipt", f"{key('backend')} (vllm bench serve, a client)")
    for path, stem in _LATENCIES.items():
        try:
            figure = percentiles(run, stem, lambda k: k)
        except InputError as err:  # bench_sglang's wording: "<key> is "abc", not a number"
            raise Damaged(str(err)) from None
        facts.add(f"{METRICS}.{path}", figure, key(f"*_{stem}_ms"))
    facts.add(f"{METRICS}.duration_s", duration, key("duration"))
    output_rate = positive(run.get("output_throughput"), "output_throughput")
    facts.add(f"{METRICS}.output_tokens_per_s", output_rate, key("output_throughput"))
    if output_rate is not None:  # total output over the whole run: prompts' prefill time included
        facts.add(f"{METRICS}.rate_includes_prefill", True, key("output_throughput"))
    facts.add(f"{METRICS}.requests_per_s", positive(run.get("request_throughput"), "request_throughput"), key("request_throughput"))
    facts.add(f"{METRICS}.concurrency", positive(run.get("max_concurrency"), "max_concurrency"), key("max_concurrency"))
    for path, total in (("input_tokens", "total_input_tokens"), ("output_tokens", "total_output_tokens")):
        tokens = number(run.get(total), total)
        facts.add(f"{METRICS}.{path}", tokens / completed if tokens is not None else None, key(f"{total} / completed"))
    return facts.merge(stream_facts(_gaps(run), key("itls")))


def _gaps(run: dict) -> list[list[float]]:
    """Each request's chunk gaps in ms (``--save-detailed``); none without it."""
    itls = run.get("itls")
    if itls is None:
        return []
    if not isinstance(itls, list) or not all(isinstance(gaps, list) for gaps in itls):
        raise Damaged(f"itls is {shown(itls)}, not a list of each request's gaps")
    return [[number(gap, "itls") * 1e3 for gap in gaps] for gaps in itls]


FORMAT = Format(
    name="vllm-bench-serve",
    what="`vllm bench serve --save-result` JSON",
    recognise=recognise,
    read=reader(KIND, _read),
)
