"""Serving figures from AIPerf's exports (``aiperf profile --artifact-dir D``).

Four files, one format each: the summary ``profile_export_aiperf.json`` (metric tag -> unit, avg
and percentiles) and ``.csv`` (the same metrics under their display headers, e.g. "Time to First
Token (ms)", then a "Metric,Value" table of totals); the per-request ``profile_export.jsonl``;
and ``server_metrics_export.json``, AIPerf's scrapes of the server's ``/metrics`` over the
profiling phase. Tags and headers are those of ai-dynamo/aiperf ``src/aiperf/metrics/types/*.py``
(``tag``, ``header``); the server export is written by ``src/aiperf/server_metrics/json_exporter.py``.

AIPerf's names are not vLLM's: its ``inter_token_latency`` is per request (E2E - TTFT) over the
tokens after the first chunk, which is what vLLM calls TPOT, and its ``inter_chunk_latency`` is
the gap between streamed chunks, vLLM's ITL. Token counts prefer the server's own usage figures
(``usage_*_tokens``, the tokens the engine prefilled and decoded, chat template included) to
AIPerf's re-tokenisation of the text.
"""

from __future__ import annotations

import csv
import re
import statistics
from collections.abc import Callable
from typing import Any

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.readers.bench_common import (
    METRICS, Damaged, mapping, number, percentiles_ms, positive, reader, shown, stream_facts,
)
from diagnoser.readers.facts import Sourced, SourcedFacts
from diagnoser.readers.metrics_info import from_scrape
from diagnoser.readers.prometheus import Scrape
from diagnoser.readers.serving_metrics import from_window

_MS = {"ms": 1.0, "sec": 1e3, "s": 1e3, "ns": 1e-6}
# case latency -> AIPerf tag, display header
_LATENCIES = {
    "ttft_ms": ("time_to_first_token", "Time to First Token"),
    "tpot_ms": ("inter_token_latency", "Inter Token Latency"),
    "itl_ms": ("inter_chunk_latency", "Inter Chunk Latency"),
    "request_latency_ms": ("request_latency", "Request Latency"),
}
# case figure -> (tag, header) in the order preferred
_SCALARS = {
    "output_tokens_per_s": (("output_token_throughput", "Output Token Throughput"),),
    "per_user_tokens_per_s": (("output_token_throughput_per_user", "Output Token Throughput Per User"),),
    "requests_per_s": (("request_throughput", "Request Throughput"),),
    "duration_s": (("benchmark_duration", "Benchmark Duration"),),
    "input_tokens": (("usage_prompt_tokens", "Usage Prompt Tokens"), ("input_sequence_length", "Input Sequence Length")),
    "output_tokens": (("usage_completion_tokens", "Usage Completion Tokens"), ("output_sequence_length", "Output Sequence Length")),
}
_HEADER = re.compile(r"(.*?)(?: \(([^()]*)\))?")  # "Time to First Token (ms)" -> header, unit


def _figures(metrics: dict[str, dict], source: Callable[[str | None], str], scalars: dict = _SCALARS) -> SourcedFacts:
    """Facts from ``tag -> {unit, avg, p50, ...}``, the shape every export is read into."""
    facts = SourcedFacts()
    facts.add(f"{METRICS}.boundary", "client_receipt", source(None) + " (AIPerf, a client)")
    for path, (tag, _) in _LATENCIES.items():
        stats = metrics.get(tag)
        if stats is not None:
            unit = stats.get("unit", "ms")
            if unit not in _MS:
                raise Damaged(f"{tag} is in {shown(unit)}, not a time unit")
            facts.add(f"{METRICS}.{path}", percentiles_ms({**stats, "mean": stats.get("avg")}, tag, _MS[unit]), source(tag))
    for path, choices in scalars.items():
        tag = next((t for t, _ in choices if t in metrics), None)
        if tag is not None:
            facts.add(f"{METRICS}.{path}", positive(metrics[tag].get("avg"), f"{tag} avg"), source(tag))
    if METRICS + ".output_tokens_per_s" in facts:  # total output over the benchmark, prefill included
        facts.add(f"{METRICS}.rate_includes_prefill", True, facts.facts[f"{METRICS}.output_tokens_per_s"].source)
    if len(facts.facts) < 2:
        raise Damaged("it holds none of request_latency, time_to_first_token, output_token_throughput")
    return facts


# --- profile_export_aiperf.json

def _summary(artifact: Artifact) -> dict | None:
    doc = artifact.json
    if isinstance(doc, dict) and "aiperf_version" in doc and isinstance(doc.get("request_latency"), dict):
        return doc
    return None


def _read_json(artifact: Artifact) -> SourcedFacts:
    doc = _summary(artifact)
    if doc is None:
        raise Damaged("it is not one complete JSON object with request_latency (cut short?)")
    metrics = {tag: mapping(v, tag) for tag, v in doc.items() if isinstance(v, dict) and ("avg" in v or "unit" in v)}
    facts = _figures(metrics, lambda tag: artifact.key(tag, "avg") if tag else artifact.key("aiperf_version"))
    phases = mapping(doc.get("input_config", {}), "input_config").get("phases", [])
    profiling = [p for p in phases if isinstance(p, dict) and p.get("kind") == "profiling"]
    if profiling:
        where = f"input_config.phases[{phases.index(profiling[-1])}].concurrency"
        facts.add(f"{METRICS}.concurrency", positive(profiling[-1].get("concurrency"), where), artifact.key(where))
    return facts


# --- profile_export_aiperf.csv

def _recognise_csv(artifact: Artifact) -> bool:
    head = artifact.lines[:200]
    return bool(head) and head[0].startswith("Metric,avg,") and any(line.startswith("Request Latency (") for line in head)


def _read_csv(artifact: Artifact) -> SourcedFacts:
    if not _recognise_csv(artifact):
        raise Damaged('its first line is not "Metric,avg,..." or it has no "Request Latency" row')
    headers = {header: tag for table in (_LATENCIES.values(), *_SCALARS.values()) for tag, header in table}
    metrics: dict[str, dict] = {}
    rows: dict[str, int] = {}
    columns: list[str] = []
    for line, row in enumerate(csv.reader(artifact.lines), start=1):
        if row and row[0] == "Metric":
            columns = ["avg" if c == "Value" else c for c in row]
            continue
        name, unit = _HEADER.fullmatch(row[0]).groups() if row else ("", None)
        if name in headers:
            if len(row) != len(columns):
                raise Damaged(f"line {line} has {len(row)} fields under a header of {len(columns)}")
            metrics[headers[name]] = {"unit": unit, **{c: v for c, v in zip(columns[1:], row[1:]) if v != ""}}
            rows[headers[name]] = line
    return _figures(metrics, lambda tag: artifact.at(rows[tag]) if tag else artifact.at(1))


# --- profile_export.jsonl

def _records(artifact: Artifact) -> list[dict] | None:
    rows = artifact.jsonl
    if rows and all(isinstance(r.get("metadata"), dict) and "metrics" in r for r in rows[:3]):
        return rows
    return None


def _read_records(artifact: Artifact) -> SourcedFacts:
    """Percentiles over the requests as AIPerf's summary takes them (linear between ranks)."""
    rows = _records(artifact)
    if rows is None:
        raise Damaged("its lines are not all JSON objects with metadata and metrics (cut short?)")
    values: dict[str, list[Any]] = {}
    for line, row in enumerate(rows, start=1):
        if row["metadata"].get("benchmark_phase", "profiling") != "profiling" or row.get("error"):
            continue
        for tag, metric in mapping(row["metrics"], f"line {line} metrics").items():
            values.setdefault(tag, []).append(mapping(metric, f"line {line} {tag}").get("value"))
    gaps = [[number(g, "inter_chunk_latency") for g in r] for r in values.get("inter_chunk_latency", []) if isinstance(r, list)]
    metrics = {}
    for tag, found in values.items():
        flat = [x for v in found for x in (v if isinstance(v, list) else [v])]
        numbers = [n for x in flat if (n := number(x, f"{tag} value")) is not None]
        if numbers:
            metrics[tag] = {"avg": statistics.fmean(numbers), **_quantiles(numbers)}

    def where(tag: str | None) -> str:
        return f"{artifact.key('metrics', tag, 'value')} over the requests" if tag else artifact.key("metadata")

    # rates need the benchmark's window, which only the summary has
    facts = _figures(metrics, where, {path: _SCALARS[path] for path in ("input_tokens", "output_tokens")})
    return facts.merge(stream_facts(gaps, artifact.key("metrics", "inter_chunk_latency", "value")))


def _quantiles(numbers: list[float]) -> dict[str, float]:
    if len(numbers) < 2:
        return {"p50": numbers[0], "p90": numbers[0], "p99": numbers[0]}
    cuts = statistics.quantiles(numbers, n=100, method="inclusive")
    return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98]}


# --- server_metrics_export.json

def _server_export(artifact: Artifact) -> dict | None:
    doc = artifact.json
    if isinstance(doc, dict) and "aiperf_version" in doc and "metrics_phase" in doc and isinstance(doc.get("metrics"), dict):
        return doc
    return None


def _read_server(artifact: Artifact) -> SourcedFacts:
    """The phase's counter and histogram deltas as a window from nothing, its gauges as seen during it."""
    doc = _server_export(artifact)
    if doc is None:
        raise Damaged("it is not one complete JSON object with metrics_phase and metrics (cut short?)")
    counted, gauges = _scrapes(doc["metrics"])
    phase = doc["metrics_phase"]
    span = mapping(mapping(mapping(doc.get("summary"), "summary").get("phase_time_ranges"), "summary.phase_time_ranges").get(phase), phase)
    start, end = (number(span.get(k), f"summary.phase_time_ranges.{phase}.{k}") for k in ("start_ns", "end_ns"))
    duration = (end - start) / 1e9 if start is not None and end is not None and end > start else None
    window = from_window(Scrape({}, counted.cumulative), counted, [gauges], duration)
    facts = SourcedFacts(missing=window.missing, conflicts=window.conflicts)
    for path, sourced in window.facts.items():
        source = sourced.source.removeprefix("/metrics ").replace("window of 2 scrapes", f"AIPerf's {phase} phase")
        facts.facts[path] = Sourced(sourced.value, f"{artifact.name} {source}")
    return facts.merge(from_scrape(gauges, artifact.name))


def _scrapes(metrics: dict) -> tuple[Scrape, Scrape]:
    """The export's series as samples: counters' phase totals (under their ``_total`` name, which
    AIPerf's parser strips), histograms' phase buckets, and each gauge's largest value in the phase."""
    counted: dict[str, dict] = {}
    gauges: dict[str, dict] = {}
    for name, family in metrics.items():
        family = mapping(family, f"metrics.{name}")
        kind = family.get("type")
        for i, series in enumerate(family.get("series") or []):
            where = f"metrics.{name}.series[{i}]"
            series = mapping(series, where)
            labels = tuple(sorted(mapping(series.get("labels") or {}, f"{where}.labels").items()))
            stats = mapping(series.get("stats") or {}, f"{where}.stats")
            if kind == "counter":
                counted.setdefault(name.removesuffix("_total") + "_total", {})[labels] = number(stats.get("total"), f"{where}.stats.total") or 0.0
            elif kind == "histogram":
                for le, count in mapping(series.get("buckets") or {}, f"{where}.buckets").items():
                    counted.setdefault(f"{name}_bucket", {})[(*labels, ("le", le))] = number(count, f"{where}.buckets.{le}") or 0.0
                counted.setdefault(f"{name}_count", {})[labels] = number(stats.get("count"), f"{where}.stats.count") or 0.0
                counted.setdefault(f"{name}_sum", {})[labels] = number(stats.get("sum"), f"{where}.stats.sum") or 0.0
            elif kind == "gauge" and (peak := number(stats.get("max"), f"{where}.stats.max")) is not None:
                gauges.setdefault(name, {})[labels] = peak
    return Scrape(counted, frozenset(counted)), Scrape(gauges)


def _recognise_summary(artifact: Artifact) -> bool:
    return _summary(artifact) is not None


def _recognise_records(artifact: Artifact) -> bool:
    return _records(artifact) is not None


def _recognise_server(artifact: Artifact) -> bool:
    return _server_export(artifact) is not None


SUMMARY_JSON = Format(
    name="aiperf-json",
    what="AIPerf's profile_export_aiperf.json",
    recognise=_recognise_summary,
    read=reader("an AIPerf profile_export_aiperf.json", _read_json),
)
SUMMARY_CSV = Format(
    name="aiperf-csv",
    what="AIPerf's profile_export_aiperf.csv",
    recognise=_recognise_csv,
    read=reader("an AIPerf profile_export_aiperf.csv", _read_csv),
)
RECORDS = Format(
    name="aiperf-records",
    what="AIPerf's per-request profile_export.jsonl",
    recognise=_recognise_records,
    read=reader("an AIPerf profile_export.jsonl", _read_records),
)
SERVER_METRICS = Format(
    name="aiperf-server-metrics",
    what="AIPerf's server_metrics_export.json (the server's /metrics over the run)",
    recognise=_recognise_server,
    read=reader("an AIPerf server_metrics_export.json", _read_server),
)
