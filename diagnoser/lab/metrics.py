"""The lab server's Prometheus metrics, under vLLM's names for the same quantities.

One registry per server (not the process-global default), so tests can start servers side by
side. Histogram buckets follow vLLM's ranges for each metric; every series carries the
``model_name`` label vLLM uses.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
ITL_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class LabMetrics:
    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        labels = ["model_name"]
        r = self.registry

        def hist(name: str, doc: str, buckets: tuple) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=r).labels(model_name)

        self.running = Gauge("vllm:num_requests_running", "Requests in the decode batch.", labels, registry=r).labels(model_name)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting for a slot.", labels, registry=r).labels(model_name)
        self.ttft = hist("vllm:time_to_first_token_seconds", "Arrival to first token emitted.", LATENCY_BUCKETS)
        self.itl = hist("vllm:inter_token_latency_seconds", "Between consecutive tokens of a request.", ITL_BUCKETS)
        self.e2e = hist("vllm:e2e_request_latency_seconds", "Arrival to last token.", LATENCY_BUCKETS)
        self.prefill_time = hist("vllm:request_prefill_time_seconds", "First scheduled to first token.", LATENCY_BUCKETS)
        self.decode_time = hist("vllm:request_decode_time_seconds", "First token to last token.", LATENCY_BUCKETS)
        self.queue_time = hist("vllm:request_queue_time_seconds", "Arrival to first scheduled.", LATENCY_BUCKETS)
        self.iteration_tokens = hist("vllm:iteration_tokens_total", "Tokens (prompt and generated) per engine step.", TOKEN_BUCKETS)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefilled prompt tokens.", labels, registry=r).labels(model_name)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generated tokens.", labels, registry=r).labels(model_name)
        self.success = Counter("vllm:request_success", "Finished requests.", [*labels, "finished_reason"], registry=r)
        # the lab's own, not vLLM's: requests the API server still holds, whether or not the engine
        # runs them, so a request abandoned on the way in or out is seen to be let go
        self.api_requests = Gauge("lab:api_server_requests", "Requests the API server holds.", labels, registry=r).labels(model_name)
        self.model_name = model_name

    def finished(self, reason: str) -> None:
        self.success.labels(self.model_name, reason).inc()

    def text(self) -> bytes:
        return generate_latest(self.registry)
