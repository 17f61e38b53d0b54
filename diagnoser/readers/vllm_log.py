"""A vLLM server log: its settings (``server_args.vllm_log_config``) and what the engine said while it ran.

The engine's own periodic figures are scheduler counts, not what a client saw, so the serving
figures taken from them carry ``boundary = engine``. Where each wording comes from (repository
vllm-project/vllm, checked against the real 0.32 CPU logs in tests/data/vllm and GPU logs pasted in
issue threads, named in tests/data/artifacts/vllm-log/README.md):

- ``Engine 000: Avg prompt throughput ..., Running: N reqs, Waiting: M reqs, GPU KV cache usage: Z%``:
  ``vllm/v1/metrics/loggers.py`` (``LoggingStatLogger.log``; CPU builds say ``CPU KV cache usage``);
  V0's ``vllm/engine/metrics.py`` printed the same without ``Engine NNN:``, with ``Swapped`` and
  ``Pending`` for the waiting queue.
- ``SpecDecoding metrics: Mean acceptance length: ..., Accepted: N tokens, Drafted: M tokens, ...``:
  ``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingLogging.log``), an interval's counts.
- ``Sequence group X is preempted by PreemptionMode.RECOMPUTE mode ... total_num_cumulative_preemption=N``:
  V0's ``vllm/core/scheduler.py``; the V1 scheduler logs no preemption (its count is only in /metrics).
- ``Graph capturing finished in N secs``, ``Capturing CUDA graphs (...)``:
  ``vllm/v1/worker/gpu_model_runner.py``; ``Capping cudagraph capture sizes from max A to B``:
  ``vllm/config/compilation.py``.
- ``Using FLASH_ATTN attention backend out of potential backends: [...]`` (``vllm/platforms/cuda.py``),
  older ``Using Flash Attention backend on V1 engine.`` and V0's ``Using XFormers backend.``.
- ``GPU KV cache size: N tokens``: ``vllm/v1/core/kv_cache_utils.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.errors import InputError
from diagnoser.readers.facts import SourcedFacts
from diagnoser.readers.server_args import vllm_log_config
from diagnoser.readers.vllm_config import SERVER

_RECOGNISE_CHARS = 8 * 1024 * 1024  # a vLLM log shows one of its signs long before this
_SIGNS = re.compile(
    r"non-default args: \{|Initializing an? (?:V1 )?LLM engine \(|Avg prompt throughput: \S+ tokens/s, Avg generation throughput"
    r"|SpecDecoding metrics: |Using \w+ attention backend out of potential backends|is preempted (?:by|in) PreemptionMode\.|\b(?:GPU|CPU|XPU) KV cache size: [\d,]+ tokens"
)
_STATS = re.compile(r"(?:Engine (\d+): )?Avg prompt throughput: .*Avg generation throughput: ")
_STATS_FIELDS = re.compile(
    r"Avg generation throughput: (?P<gen>\S+) tokens/s, Running: (?P<running>\S+) reqs, (?:Swapped: \S+ reqs, )?"
    r"(?:Waiting|Pending): (?P<waiting>\S+) reqs, (?:\w+: \S+ reqs, )*(?:\w+ )?KV cache usage: (?P<kv>\S+?)%"
)
_SPEC = re.compile(r"SpecDecoding metrics: ")
_SPEC_FIELDS = {key: re.compile(pattern) for key, pattern in (
    ("accepted", r"Accepted: (\S+) tokens"), ("drafted", r"Drafted: (\S+) tokens"), ("mean", r"Mean acceptance length: ([^,\s]+)"))}
_PREEMPTED = re.compile(r"is preempted (?:by|in) PreemptionMode\.\w+ mode(?:.*total_num_cumulative_preemption=(\d+))?")
_GRAPHS_CAPTURED = re.compile(r"Graph capturing finished in \d+ secs|Capturing CUDA graphs \(")
_GRAPHS_CAPPED = re.compile(r"Capping cudagraph capture sizes from max \d+ to (\d+)")
_BACKEND = re.compile(r"Using (?:AttentionBackendEnum\.)?(\w+(?: Attention)?) (?:attention )?backend(?: out of potential| on V1|\.|$)")
_KV_TOKENS = re.compile(r"\b(?:GPU|CPU|XPU) KV cache size: ([\d,]+) tokens")


def _number(text: str, artifact: Artifact, line: int, what: str) -> float:
    try:
        return float(text.rstrip(","))
    except ValueError:
        raise InputError(f"{artifact.at(line)}: the {what} {text!r} is not a number") from None


@dataclass
class _Seen:
    """What the periodic and one-off lines said, with the lines that said it."""

    engine: str | None = None  # the first engine index seen: with data parallelism each engine logs its own line
    other_engines: bool = False
    stats: list[tuple[int, float, float, float, float]] = field(default_factory=list)  # line, gen tok/s, running, waiting, kv %
    spec: list[tuple[int, float, float, float | None]] = field(default_factory=list)  # line, accepted, drafted, mean length
    preempt_lines: list[int] = field(default_factory=list)
    preempt_total: tuple[int, int] | None = None  # the last cumulative count and its line
    once: dict[str, tuple[int, object]] = field(default_factory=dict)  # fact path -> (line, value), the first seen


def _stats_line(seen: _Seen, artifact: Artifact, number: int, line: str, engine: str | None) -> None:
    if seen.engine is None:
        seen.engine = engine
    if engine != seen.engine:
        seen.other_engines = True
        return
    m = _STATS_FIELDS.search(line)
    if m is None:
        raise InputError(f"{artifact.at(number)}: the engine stats line is cut short or reworded")
    values = [_number(m.group(k), artifact, number, what) for k, what in
              (("gen", "generation throughput"), ("running", "running count"), ("waiting", "waiting count"), ("kv", "KV cache usage"))]
    seen.stats.append((number, *values))


def _spec_line(seen: _Seen, artifact: Artifact, number: int, line: str) -> None:
    found = {k: p.search(line) for k, p in _SPEC_FIELDS.items()}
    if found["accepted"] is None or found["drafted"] is None:
        raise InputError(f"{artifact.at(number)}: the SpecDecoding line has no Accepted/Drafted token counts")
    accepted = _number(found["accepted"].group(1), artifact, number, "accepted count")
    drafted = _number(found["drafted"].group(1), artifact, number, "drafted count")
    mean = _number(found["mean"].group(1), artifact, number, "mean acceptance length") if found["mean"] else None
    seen.spec.append((number, accepted, drafted, mean))


def _once(seen: _Seen, path: str, number: int, value: object) -> None:
    seen.once.setdefault(path, (number, value))


def _scan(artifact: Artifact) -> _Seen:
    seen = _Seen()
    for number, line in enumerate(artifact.lines, 1):
        if (m := _STATS.search(line)) is not None:
            _stats_line(seen, artifact, number, line, m.group(1))
        elif _SPEC.search(line):
            _spec_line(seen, artifact, number, line)
        elif (m := _PREEMPTED.search(line)) is not None:
            seen.preempt_lines.append(number)
            if m.group(1):
                seen.preempt_total = (int(m.group(1)), number)
        elif (m := _KV_TOKENS.search(line)) is not None:
            _once(seen, SERVER + "kv_cache_tokens", number, int(m.group(1).replace(",", "")))
        elif _GRAPHS_CAPTURED.search(line):
            _once(seen, SERVER + "cuda_graphs", number, True)
        elif (m := _GRAPHS_CAPPED.search(line)) is not None:
            _once(seen, SERVER + "cuda_graph_max_batch", number, int(m.group(1)))
        elif (m := _BACKEND.search(line)) is not None:
            _once(seen, SERVER + "attention_backend", number, m.group(1))
    return seen


def _lines(artifact: Artifact, numbers: list[int]) -> str:
    shown = ",".join(str(n) for n in numbers) if len(numbers) <= 4 else f"{numbers[0]}-{numbers[-1]}"
    return f"{artifact.name}:{shown}"


def _stats_facts(facts: SourcedFacts, artifact: Artifact, seen: _Seen) -> None:
    if not seen.stats:
        return
    every = _lines(artifact, [s[0] for s in seen.stats])
    label = f"Engine {seen.engine}" if seen.engine is not None else "engine stats"
    peak = lambda i: max(seen.stats, key=lambda s: s[i])  # noqa: E731 - the line holding the largest value of field i
    running, waiting, kv = peak(2), peak(3), peak(4)
    facts.add("observations.metrics.waiting_requests", waiting[3], f"{artifact.at(waiting[0])} Waiting (most of {every})")
    if running[2] > 0:
        facts.add("observations.metrics.running_sequences", running[2], f"{artifact.at(running[0])} Running (most of {every})")
    facts.add("observations.memory.kv_cache_usage", kv[4] / 100, f"{artifact.at(kv[0])} KV cache usage (most of {every})")
    busy = [s for s in seen.stats if s[2] > 0]
    if busy:
        mean = sum(s[1] for s in busy) / len(busy)
        facts.add("observations.metrics.output_tokens_per_s", mean,
                  f"{_lines(artifact, [s[0] for s in busy])} Avg generation throughput (mean of the {len(busy)} {label} lines with Running > 0)")
    facts.add("observations.metrics.boundary", "engine", f"{every} ({label}: the engine's own counts)")
    if seen.other_engines:
        facts.missing.append(f"{artifact.name}: several engines log their own stats lines; only {label}'s were read")


def _spec_facts(facts: SourcedFacts, artifact: Artifact, seen: _Seen) -> None:
    drafted = sum(s[2] for s in seen.spec)
    if not drafted:
        return
    every = _lines(artifact, [s[0] for s in seen.spec])
    facts.add("observations.speculation.acceptance_rate", sum(s[1] for s in seen.spec) / drafted, f"{every} Accepted / Drafted (summed)")
    if all(s[3] is not None for s in seen.spec):
        # weighted by drafted tokens: each interval's drafts, when every draft proposes the same number of tokens
        mean = sum(s[3] * s[2] for s in seen.spec) / drafted
        facts.add("observations.speculation.mean_accepted_per_cycle", mean, f"{every} Mean acceptance length (weighted by Drafted)")


def _preemption_facts(facts: SourcedFacts, artifact: Artifact, seen: _Seen) -> None:
    if seen.preempt_total is not None:  # V0 warns only every 50th preemption in later versions: its running total is the count
        total, number = seen.preempt_total
        facts.add("observations.memory.preemptions", total, f"{artifact.at(number)} total_num_cumulative_preemption")
    elif seen.preempt_lines:
        facts.add("observations.memory.preemptions", len(seen.preempt_lines),
                  f"{_lines(artifact, seen.preempt_lines)} preemption warnings (counted)")


def read(artifact: Artifact) -> SourcedFacts:
    facts = vllm_log_config(artifact) or SourcedFacts()
    seen = _scan(artifact)
    facts.add(SERVER + "engine", "vllm", f"{artifact.name} (a vLLM server log)")
    for path, (number, value) in seen.once.items():
        facts.add(path, value, artifact.at(number))
    _stats_facts(facts, artifact, seen)
    _spec_facts(facts, artifact, seen)
    _preemption_facts(facts, artifact, seen)
    return facts


def recognise(artifact: Artifact) -> bool:
    return _SIGNS.search(artifact.text, 0, _RECOGNISE_CHARS) is not None


FORMAT = Format(
    name="vllm-log",
    what="a vLLM server log (its 'non-default args' and 'Engine 000: Avg prompt throughput' lines)",
    recognise=recognise,
    read=read,
)
