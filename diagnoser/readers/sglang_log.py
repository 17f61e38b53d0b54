"""An SGLang server log: its ``ServerArgs`` and what the scheduler said while it ran.

The scheduler's batch lines are its own counts at each logged step (every ``decode_log_interval``
decode steps), so serving figures from them carry ``boundary = engine``. Where each wording comes
from (repository sgl-project/sglang; real excerpts named in tests/data/artifacts/sglang-log/README.md):

- ``server_args=ServerArgs(...)``: ``python/sglang/srt/server_args.py`` / ``launch_server`` logs the
  dataclass repr, read with the same repr parser as vLLM's engine line.
- ``Decode batch[.,] #running-req: N, #token: T, token usage: U, [accept len: L, accept rate: R,]
  cuda graph: B, gen throughput (token/s): X, #queue-req: Q`` and ``Prefill batch[.,] #new-seq: ...``:
  ``python/sglang/srt/managers/scheduler_metrics_mixin.py`` (``log_decode_stats``,
  ``log_prefill_stats``; older releases print them from ``scheduler.py`` with ``.`` after ``batch``).
  Hybrid-attention models say ``full token usage`` for the full-attention pool.
- ``Decode out of memory happened. #retracted_reqs: N``: ``scheduler.py`` when decode retracts requests.
- ``Capture cuda graph bs [...]``: ``python/sglang/srt/model_executor/cuda_graph_runner.py``.
- ``KV Cache is allocated. [dtype: ..., ]#tokens: N``: ``python/sglang/srt/mem_cache/memory_pool.py``;
  ``max_total_num_tokens=N, chunked_prefill_size=..., max_running_requests=..., context_len=...``:
  the scheduler's start-up line (``scheduler.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.errors import InputError
from diagnoser.readers.facts import SourcedFacts
from diagnoser.readers.server_args import from_sglang_args
from diagnoser.readers.vllm_config import SERVER, repr_fields, repr_value

_RECOGNISE_CHARS = 8 * 1024 * 1024
_SIGNS = re.compile(
    r"server_args=ServerArgs\(|(?:Decode|Prefill) batch[.,] #|KV Cache is allocated\. |Capture cuda graph bs \["
    r"|max_total_num_tokens=\d+|Decode out of memory happened\. #retracted_reqs"
)
_SERVER_ARGS = re.compile(r"server_args=(ServerArgs\(.*)$")
_BATCH = re.compile(r"(Decode|Prefill) batch[.,] (#.*)$")
_RETRACTED = re.compile(r"(?:(TP\d+)\S*\] )?Decode out of memory happened\. #retracted_reqs: (\S+?),")
_CAPTURE = re.compile(r"Capture cuda graph bs (\[[^\]]*\])")
_KV_TOKENS = re.compile(r"KV Cache is allocated\. .*?#tokens: (\d+)")
_SCHEDULER_LIMITS = re.compile(r"(max_total_num_tokens=\d+.*)$")
_NUMBER_KEYS = ("#running-req", "#queue-req", "token usage", "full token usage", "gen throughput (token/s)", "accept len", "accept rate")


@dataclass
class _Seen:
    decode: list[tuple[int, dict]] = field(default_factory=list)
    prefill: list[tuple[int, dict]] = field(default_factory=list)
    retracted: list[tuple[int, float]] = field(default_factory=list)  # one rank's: every tensor-parallel rank logs the same retraction
    retracting_rank: str | None = None
    graph_sizes: tuple[int, list[int]] | None = None
    kv_tokens: tuple[int, int] | None = None
    server_args: tuple[int, dict] | None = None
    limits: tuple[int, dict] | None = None


def _fields(artifact: Artifact, number: int, body: str) -> dict:
    """``#running-req: 5, token usage: 0.29, cuda graph: True, ...`` with the numbers as numbers."""
    pairs = dict(part.split(": ", 1) for part in body.split(", ") if ": " in part)
    out: dict = {"cuda graph": pairs.get("cuda graph")}
    for key in _NUMBER_KEYS:
        if key in pairs:
            try:
                out[key] = float(pairs[key].rstrip(", "))
            except ValueError:
                raise InputError(f"{artifact.at(number)}: the batch line's {key} {pairs[key]!r} is not a number") from None
    if "#running-req" not in out:
        raise InputError(f"{artifact.at(number)}: the batch line has no #running-req count (cut short?)")
    return out


def _server_args(artifact: Artifact, number: int, text: str) -> dict:
    args = repr_value(text)
    if not isinstance(args, dict) or not args:
        raise InputError(f"{artifact.at(number)}: the ServerArgs(...) line is cut short or not readable")
    return args


def _scan(artifact: Artifact) -> _Seen:
    seen = _Seen()
    for number, line in enumerate(artifact.lines, 1):
        if (m := _BATCH.search(line)) is not None:
            (seen.decode if m.group(1) == "Decode" else seen.prefill).append((number, _fields(artifact, number, m.group(2))))
        elif (m := _SERVER_ARGS.search(line)) is not None:
            seen.server_args = (number, _server_args(artifact, number, m.group(1)))
        elif (m := _RETRACTED.search(line)) is not None:
            seen.retracting_rank = seen.retracting_rank or m.group(1)
            if m.group(1) != seen.retracting_rank:
                continue
            try:
                seen.retracted.append((number, float(m.group(2))))
            except ValueError:
                raise InputError(f"{artifact.at(number)}: the retracted count {m.group(2)!r} is not a number") from None
        elif (m := _CAPTURE.search(line)) is not None and seen.graph_sizes is None:
            sizes = repr_value(m.group(1))
            if not isinstance(sizes, list) or not all(isinstance(n, int) and n > 0 for n in sizes):
                raise InputError(f"{artifact.at(number)}: the captured batch sizes are not a list of whole numbers")
            seen.graph_sizes = (number, sizes)
        elif (m := _KV_TOKENS.search(line)) is not None and seen.kv_tokens is None:
            seen.kv_tokens = (number, int(m.group(1)))
        elif (m := _SCHEDULER_LIMITS.search(line)) is not None:
            seen.limits = (number, repr_fields(m.group(1)))
    return seen


def _lines(artifact: Artifact, numbers: list[int]) -> str:
    shown = ",".join(str(n) for n in numbers) if len(numbers) <= 4 else f"{numbers[0]}-{numbers[-1]}"
    return f"{artifact.name}:{shown}"


def _peak(facts: SourcedFacts, artifact: Artifact, rows: list[tuple[int, dict]], key: str, path: str, scale: float = 1) -> None:
    having = [(n, f[key]) for n, f in rows if key in f]
    if having:
        number, value = max(having, key=lambda r: r[1])
        facts.add(path, value * scale, f"{artifact.at(number)} {key} (most of {_lines(artifact, [n for n, _ in having])})")


def _batch_facts(facts: SourcedFacts, artifact: Artifact, seen: _Seen) -> None:
    rows = sorted(seen.decode + seen.prefill)
    if not rows:
        return
    usage = "full token usage" if any("full token usage" in f for _, f in rows) else "token usage"
    _peak(facts, artifact, rows, "#queue-req", "observations.metrics.waiting_requests")
    _peak(facts, artifact, [r for r in rows if r[1]["#running-req"] > 0], "#running-req", "observations.metrics.running_sequences")
    _peak(facts, artifact, rows, usage, "observations.memory.kv_cache_usage")
    decode = [(n, f) for n, f in seen.decode if f["#running-req"] > 0 and "gen throughput (token/s)" in f]
    if decode:
        mean = sum(f["gen throughput (token/s)"] for _, f in decode) / len(decode)
        facts.add("observations.metrics.output_tokens_per_s", mean,
                  f"{_lines(artifact, [n for n, _ in decode])} gen throughput (mean of {len(decode)} Decode batch lines)")
    facts.add("observations.metrics.boundary", "engine", f"{_lines(artifact, [n for n, _ in rows])} (the scheduler's own counts)")
    replayed = {f["cuda graph"] for _, f in seen.decode if f["cuda graph"] in ("True", "False")}
    if len(replayed) == 1:  # every logged decode batch ran the same way
        facts.add("observations.graph.replayed_at_live_batch", replayed == {"True"},
                  f"{_lines(artifact, [n for n, _ in seen.decode])} cuda graph")
    spec = [(n, f) for n, f in seen.decode if "accept len" in f]
    if spec:
        where = _lines(artifact, [n for n, _ in spec])
        facts.add("observations.speculation.mean_accepted_per_cycle", sum(f["accept len"] for _, f in spec) / len(spec),
                  f"{where} accept len (mean of {len(spec)} Decode batch lines)")
        rates = [f["accept rate"] for _, f in spec if "accept rate" in f]
        if len(rates) == len(spec):
            facts.add("observations.speculation.acceptance_rate", sum(rates) / len(rates), f"{where} accept rate (mean of {len(rates)} lines)")


def _start_up_facts(facts: SourcedFacts, artifact: Artifact, seen: _Seen) -> None:
    if seen.server_args is not None:
        number, args = seen.server_args
        facts.merge(from_sglang_args(args, lambda key: f"{artifact.at(number)} {key}"))
    if seen.limits is not None:
        number, limits = seen.limits
        renamed = {"context_length" if k == "context_len" else k: v for k, v in limits.items()}
        facts.merge(from_sglang_args(renamed, lambda key: f"{artifact.at(number)} {'context_len' if key == 'context_length' else key}"))
    if seen.kv_tokens is not None:
        facts.add(SERVER + "kv_cache_tokens", seen.kv_tokens[1], f"{artifact.at(seen.kv_tokens[0])} KV Cache is allocated #tokens")
    if seen.graph_sizes is not None:
        number, sizes = seen.graph_sizes
        source = f"{artifact.at(number)} Capture cuda graph bs"
        facts.add("observations.graph.captured_batch_sizes", sizes, source)
        facts.add("observations.graph.capture_unit", "sequences", source)
        facts.add(SERVER + "cuda_graphs", True, source)
        facts.add(SERVER + "cuda_graph_max_batch", max(sizes), source)
    if seen.retracted:
        facts.add("observations.memory.preemptions", sum(n for _, n in seen.retracted),
                  f"{_lines(artifact, [n for n, _ in seen.retracted])} #retracted_reqs (summed)")


def read(artifact: Artifact) -> SourcedFacts:
    seen = _scan(artifact)
    facts = SourcedFacts()
    facts.add(SERVER + "engine", "sglang", f"{artifact.name} (an SGLang server log)")
    _start_up_facts(facts, artifact, seen)
    _batch_facts(facts, artifact, seen)
    return facts


def recognise(artifact: Artifact) -> bool:
    return _SIGNS.search(artifact.text, 0, _RECOGNISE_CHARS) is not None


FORMAT = Format(
    name="sglang-log",
    what="an SGLang server log (its 'server_args=ServerArgs(...)' and 'Decode batch' lines)",
    recognise=recognise,
    read=read,
)
