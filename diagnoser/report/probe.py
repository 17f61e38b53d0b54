"""A probe report as the figures an engineer reads: one section per probe that ran.

``diagnoser probe`` prints these on the terminal and ``--markdown`` writes them as a document;
the GPU bench commits the same Markdown under ``bench/results/``. Each section is built once as
plain lines and tables, so the terminal and the document cannot drift apart. Numbers are the
probes' own, read from their typed facts; this module only formats them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diagnoser.models.probe_report import ProbeReport
from diagnoser.models.probe_results import (
    BandwidthFacts,
    ClientFacts,
    CollectivesFacts,
    ContextSweepFacts,
    DeviceFacts,
    GemmFacts,
    GraphsFacts,
    LatencyStats,
    ProbeResult,
)


@dataclass(frozen=True)
class TableData:
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]
    caption: str = ""


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)
    tables: list[TableData] = field(default_factory=list)


def pct(value: float | None) -> str:
    return f"{100 * value:.1f}%" if value is not None else "n/a"


def fixed(value: float | None, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if value is not None else "n/a"


def sig(value: float | None) -> str:
    """Three significant figures: rates span 0.003 TFLOP/s on a CPU to 900 on an H200."""
    return f"{value:.3g}" if value is not None else "n/a"


def _stats_row(name: str, stats: LatencyStats | None) -> tuple[str, ...]:
    if stats is None:
        return (name, "n/a", "n/a", "n/a", "n/a", "0")
    return (name, *(fixed(v, 2) for v in (stats.mean, stats.p50, stats.p90, stats.p99)), str(stats.n))


def device_section(f: DeviceFacts) -> Section:
    s = Section("Device")
    if f.nvml != "ok":
        s.lines.append(f"NVML: {f.nvml}; torch CUDA: {f.torch_cuda}")
        return s
    s.lines.append(
        f"driver {f.driver_version or 'n/a'}, CUDA driver {f.cuda_driver_version or 'n/a'}, "
        f"torch CUDA {f.torch_cuda}, {f.device_count} device(s)"
    )
    rows = []
    for d in f.devices:
        clocks = f"{d.sm_clock_mhz or '?'}/{d.max_sm_clock_mhz or '?'} SM, {d.mem_clock_mhz or '?'}/{d.max_mem_clock_mhz or '?'} mem"
        rows.append(
            (
                str(d.index),
                str(d.name),
                f"{d.memory_total_bytes / 2**30:.0f} GiB" if d.memory_total_bytes else "n/a",
                str(d.sm_count or "n/a"),
                fixed(d.theoretical_bandwidth_gbs, 0),
                clocks,
                ", ".join(d.clock_event_reasons or []) or "none",
                f"{fixed(d.power_w, 0)}/{fixed(d.power_limit_w, 0)} W",
                f"gen{d.pcie_generation or '?'} x{d.pcie_width or '?'}",
                f"{d.nvlink.active_links}/{d.nvlink.links_checked}",
                {True: "on", False: "off"}.get(d.mig_enabled, "n/a"),
            )
        )
    headers = ("#", "name", "memory", "SMs", "theory GB/s", "clocks MHz (now/max)", "clock events", "power", "PCIe", "NVLink", "MIG")
    s.tables.append(TableData(headers, rows))
    s.lines += [f"device {d.index}: {name} not read ({why})" for d in f.devices for name, why in d.missing.items()]
    return s


def bandwidth_section(f: BandwidthFacts) -> Section:
    lines = [
        f"buffer {f.buffer_bytes / 2**20:.0f} MiB per side ({fixed(f.buffer_over_cache, 1)}x the last-level cache), {f.dtype} on {f.device}",
        f"read {f.read_gbs:.1f} GB/s, copy {f.copy_gbs:.1f} GB/s; a copy counts {f.copy_bytes_counted}",
        f"probe figure {f.measured_bandwidth_gbs:.1f} GB/s = {pct(f.fraction_of_best_torch_copy)} of the best torch copy "
        f"({f.best_torch_copy_gbs:.1f} GB/s, {f.best_torch_copy_variant})",
    ]
    theory = f.theoretical_bandwidth_gbs
    lines.append(
        f"theoretical {theory:.0f} GB/s ({f.theoretical_source}), achieved {pct(f.fraction_of_theoretical)}"
        if theory
        else f"theoretical: {f.theoretical_source}"
    )
    load = f.under_load
    if load is not None and load.sm_clock_mhz is not None:
        reasons = ", ".join(load.clock_event_reasons or []) or "none"
        lines.append(f"under load: SM {load.sm_clock_mhz} MHz, memory {load.mem_clock_mhz} MHz, clock events: {reasons}")
    return Section("Bandwidth", lines)


def graphs_section(f: GraphsFacts) -> Section:
    s = Section("Eager launches vs CUDA graph replay", [f"{f.layers} layers, hidden {f.hidden}, {f.dtype}; mode: {f.mode}"])
    if f.graph_skipped_reason:
        s.lines.append(f.graph_skipped_reason)
    rows = [
        (
            str(p.batch),
            str(p.launches_per_step),
            fixed(p.eager_step_ms),
            fixed(p.graph_step_ms) if p.graph_step_ms is not None else p.capture_error or "eager only",
            f"{p.graph_gain:.2f}x" if p.graph_gain is not None else "n/a",
            fixed(p.launch_cost_us, 2),
            str(p.replay_matches_eager) if p.replay_matches_eager is not None else "n/a",
        )
        for p in f.batches
    ]
    headers = ("batch", "launches/step", "eager ms", "graph ms", "gain", "launch cost µs", "replay matches eager")
    s.tables.append(TableData(headers, rows))
    return s


def gemm_section(f: GemmFacts) -> Section:
    peaks = ", ".join(f"{d} {t:g}" for d, t in (f.peak_tflops or {}).items()) or "n/a"
    s = Section(
        "Expert GEMM sweep",
        [
            f"shapes from {f.shapes_source}; swept {', '.join(f.dtypes)}; peak TFLOP/s: {peaks}; "
            f"{f.peak_bandwidth_gbs or 'n/a'} GB/s ({f.hardware or 'no preset'})"
            f"{'; shapes scaled down for the CPU' if f.scaled_for_cpu else ''}"
        ],
    )
    s.lines += [f"{d} not swept: {why}" for d, why in f.dtypes_skipped.items()]
    s.lines += [f"{k.name} in {k.dtype} not swept: {k.reason}" for k in f.skipped]
    headers = ("M", "time µs", "TFLOP/s", "GB/s", "% peak FLOP/s", "% peak BW", "% roofline")
    for shape in f.shapes:
        rows = [
            (
                str(p.m),
                fixed(p.time_us, 1),
                sig(p.tflops),
                sig(p.gbs),
                pct(p.fraction_of_peak_flops),
                pct(p.fraction_of_peak_bandwidth),
                pct(p.fraction_of_roofline),
            )
            for p in shape.points
        ]
        caption = (
            f"{shape.name}, {shape.dtype}: N={shape.n} K={shape.k}, {shape.weight_copies} weight copies; "
            f"time doubles at M={shape.m_doubling_time_at or 'none swept'}"
        )
        s.tables.append(TableData(headers, rows, caption))
    return s


def collectives_section(f: CollectivesFacts) -> Section:
    s = Section("Collectives", [f"{f.world_size} ranks over {f.backend}, {f.dtype}; clock: {f.clock}"])
    if f.backend_note:
        s.lines.append(f.backend_note)
    if f.injected_delay:
        s.lines.append(f"injected: rank {f.injected_delay.rank} sleeps {f.injected_delay.ms:g} ms before each collective")
    s.lines.append(
        f"late participant: rank {f.late_rank} (the wait outweighs the transfer)"
        if f.late_rank is not None
        else "late participant: none stands out"
    )
    rows = [
        (
            c.op,
            f"{c.message_bytes:,}",
            fixed(c.interval_ms),
            fixed(c.transfer_ms),
            fixed(c.wait_ms),
            f"{c.late_rank} ({pct(c.late_fraction)})",
            sig(c.bus_bandwidth_gbs),
        )
        for c in f.collectives
    ]
    headers = ("op", "bytes", "interval ms", "transfer ms", "wait ms", "late rank (share of calls)", "bus GB/s")
    s.tables.append(TableData(headers, rows))
    return s


def client_section(f: ClientFacts) -> Section:
    s = Section(
        "Client gaps",
        [
            f"{f.endpoint} ({f.api}), model {f.model}: {f.requests} request(s) at concurrency {f.concurrency}, "
            f"max_tokens {f.max_tokens}",
            f"definitions: {f.definitions}",
            f"output {fixed(f.output_throughput_tok_s, 1)} tok/s in all, {fixed(f.per_user_tok_s, 1)} tok/s per user; "
            f"{fixed(f.tokens_per_chunk, 2)} tokens per chunk ({f.tokens_per_chunk_source})",
        ],
    )
    if f.bunching:
        s.lines.append(
            f"bunched chunks: {pct(f.bunching.bunched_fraction)}, bursts of {fixed(f.bunching.mean_burst_chunks, 1)} "
            f"chunks on average, {f.bunching.max_burst_chunks} at most"
        )
    if f.itl_growth_ms_per_1k_output is not None:
        s.lines.append(f"inter-token latency grows {f.itl_growth_ms_per_1k_output:.3f} ms per 1k output tokens")
    server = f.server_timing
    if server:
        s.lines.append(
            f"per token: device step {fixed(server.device_step_ms)} ms, server emission {fixed(server.server_emission_ms)} ms, "
            f"client receipt {fixed(server.client_receipt_ms)} ms; buffered p50 {fixed(server.buffered_p50_ms)} ms, "
            f"p99 {fixed(server.buffered_p99_ms)} ms"
        )
    headers = ("metric (ms)", "mean", "p50", "p90", "p99", "n")
    stats = (("TTFT", f.ttft_ms), ("TPOT", f.tpot_ms), ("ITL", f.itl_ms), ("E2EL", f.e2el_ms))
    s.tables.append(TableData(headers, [_stats_row(name, values) for name, values in stats]))
    return s


def context_sweep_section(f: ContextSweepFacts) -> Section:
    s = Section("Context sweep", [f"{f.endpoint}, model {f.model}, {f.repeats} request(s) per prompt length"])
    if f.step_ms_per_1k_context is not None:
        s.lines.append(
            f"step time grows {f.step_ms_per_1k_context:.3f} ms per 1k tokens of context (intercept {fixed(f.step_intercept_ms)} ms, "
            f"R² {fixed(f.step_fit_r2)}); TTFT grows {fixed(f.ttft_ms_per_1k_prompt)} ms per 1k prompt tokens"
        )
    rows = [(str(p.prompt_tokens), fixed(p.output_tokens, 0), fixed(p.context, 0), fixed(p.step_ms), fixed(p.ttft_ms, 1)) for p in f.points]
    s.tables.append(TableData(("prompt tokens", "output tokens", "mean context", "step ms", "TTFT ms"), rows))
    return s


# one section per form of facts, so every probe the report can hold has one
SECTIONS: dict[type, Callable[[Any], Section]] = {
    DeviceFacts: device_section,
    BandwidthFacts: bandwidth_section,
    GemmFacts: gemm_section,
    GraphsFacts: graphs_section,
    CollectivesFacts: collectives_section,
    ClientFacts: client_section,
    ContextSweepFacts: context_sweep_section,
}


def status_table(report: ProbeReport) -> TableData:
    rows = [(r.name, r.status, f"{r.duration_s:.2f}", r.reason or "") for r in report.results]
    return TableData(("probe", "status", "seconds", "reason"), rows)


def section(result: ProbeResult) -> Section | None:
    """The figures of one probe that succeeded; None for a skip or failure (the status table says why)."""
    return SECTIONS[type(result.facts)](result.facts) if result.facts is not None else None


def sections(report: ProbeReport) -> list[Section]:
    return [s for r in report.results if (s := section(r)) is not None]


def _markdown_table(t: TableData) -> list[str]:
    def row(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    caption = [f"**{t.caption}**", ""] if t.caption else []
    return [*caption, row(t.headers), "|" + "---|" * len(t.headers), *map(row, t.rows), ""]


def markdown_sections(items: list[Section], level: int = 2) -> list[str]:
    out: list[str] = []
    for s in items:
        out += [f"{'#' * level} {s.title}", "", *(f"- {line}" for line in s.lines)]
        if s.lines:
            out.append("")
        for t in s.tables:
            out += _markdown_table(t)
    return out


def render_markdown(report: ProbeReport, title: str | None = None, notes: tuple[str, ...] = ()) -> str:
    """The whole report as one document; ``notes`` are lines a caller adds under the heading."""
    lines = [
        f"# {title or f'diagnoser probe on {report.host}'}",
        "",
        f"{report.created}, host {report.host}, torch {report.torch_version or 'not installed'}",
        "",
        *(f"- {note}" for note in notes),
        *([""] if notes else []),
        *_markdown_table(status_table(report)),
        *markdown_sections(sections(report)),
    ]
    return "\n".join(lines).rstrip() + "\n"


def _rich_table(t: TableData, title: str = "") -> Any:
    from rich.table import Table

    from diagnoser.report.untrusted import markup_safe

    table = Table(title=markup_safe(title) or None, title_justify="left")
    for header in t.headers:
        table.add_column(markup_safe(header))
    for cells in t.rows:
        table.add_row(*map(markup_safe, cells))
    return table


def render_text(report: ProbeReport, width: int) -> str:
    """The status of every probe, then the figures of each that succeeded, as terminal text."""
    import io

    from rich.console import Console

    from diagnoser.report.untrusted import markup_safe

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, highlight=False, color_system=None)
    console.print(_rich_table(status_table(report), f"diagnoser probe on {report.host}"))
    for s in sections(report):
        console.print(f"\n[bold]{markup_safe(s.title)}[/bold]")
        for line in s.lines:
            console.print(markup_safe(line))
        for t in s.tables:
            if t.caption:
                console.print(markup_safe(t.caption))
            console.print(_rich_table(t))
    return buffer.getvalue()
