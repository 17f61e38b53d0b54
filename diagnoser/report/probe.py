"""A probe report as the figures an engineer reads: one section per probe that ran.

``diagnoser probe`` prints these on the terminal and ``--markdown`` writes them as a document;
the GPU bench commits the same Markdown under ``bench/results/``. Each section is built once as
plain lines and tables, so the terminal and the document cannot drift apart. Numbers are the
probes' own; this module only formats them, and says why a probe has no figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from diagnoser.probes.report import ProbeReport, ProbeResult


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


def _stats_row(name: str, stats: dict[str, float] | None) -> tuple[str, ...]:
    if not stats:
        return (name, "n/a", "n/a", "n/a", "n/a", "0")
    return (name, *(fixed(stats[k], 2) for k in ("mean", "p50", "p90", "p99")), str(stats["n"]))


def device_section(f: dict[str, Any]) -> Section:
    s = Section("Device")
    if f.get("nvml") != "ok":
        s.lines.append(f"NVML: {f.get('nvml')}; torch CUDA: {f.get('torch_cuda')}")
        return s
    s.lines.append(
        f"driver {f.get('driver_version') or 'n/a'}, CUDA driver {f.get('cuda_driver_version') or 'n/a'}, "
        f"torch CUDA {f.get('torch_cuda')}, {f.get('device_count')} device(s)"
    )
    rows = []
    for d in f.get("devices", []):
        clocks = f"{d.get('sm_clock_mhz') or '?'}/{d.get('max_sm_clock_mhz') or '?'} SM, {d.get('mem_clock_mhz') or '?'}/{d.get('max_mem_clock_mhz') or '?'} mem"
        nvlink = d.get("nvlink") or {}
        memory = d.get("memory_total_bytes")
        rows.append(
            (
                str(d.get("index")),
                str(d.get("name")),
                f"{memory / 2**30:.0f} GiB" if memory else "n/a",
                str(d.get("sm_count") or "n/a"),
                fixed(d.get("theoretical_bandwidth_gbs"), 0),
                clocks,
                ", ".join(d.get("clock_event_reasons") or []) or "none",
                f"{fixed(d.get('power_w'), 0)}/{fixed(d.get('power_limit_w'), 0)} W",
                f"gen{d.get('pcie_generation') or '?'} x{d.get('pcie_width') or '?'}",
                f"{nvlink.get('active_links', 0)}/{nvlink.get('links_checked', 0)}",
                {True: "on", False: "off"}.get(d.get("mig_enabled"), "n/a"),
            )
        )
    headers = ("#", "name", "memory", "SMs", "theory GB/s", "clocks MHz (now/max)", "clock events", "power", "PCIe", "NVLink", "MIG")
    s.tables.append(TableData(headers, rows))
    for d in f.get("devices", []):
        s.lines += [f"device {d.get('index')}: {name} not read ({why})" for name, why in (d.get("missing") or {}).items()]
    return s


def bandwidth_section(f: dict[str, Any]) -> Section:
    load = f.get("under_load") or {}
    lines = [
        f"buffer {f['buffer_bytes'] / 2**20:.0f} MiB per side ({fixed(f.get('buffer_over_cache'), 1)}x the last-level cache), {f['dtype']} on {f['device']}",
        f"read {f['read_gbs']:.1f} GB/s, copy {f['copy_gbs']:.1f} GB/s; a copy counts {f['copy_bytes_counted']}",
        f"probe figure {f['measured_bandwidth_gbs']:.1f} GB/s = {pct(f['fraction_of_best_torch_copy'])} of the best torch copy "
        f"({f['best_torch_copy_gbs']:.1f} GB/s, {f['best_torch_copy_variant']})",
    ]
    theory = f.get("theoretical_bandwidth_gbs")
    lines.append(
        f"theoretical {theory:.0f} GB/s ({f['theoretical_source']}), achieved {pct(f.get('fraction_of_theoretical'))}"
        if theory
        else f"theoretical: {f['theoretical_source']}"
    )
    if load.get("sm_clock_mhz") is not None:
        reasons = ", ".join(load.get("clock_event_reasons") or []) or "none"
        lines.append(f"under load: SM {load['sm_clock_mhz']} MHz, memory {load.get('mem_clock_mhz')} MHz, clock events: {reasons}")
    return Section("Bandwidth", lines)


def graphs_section(f: dict[str, Any]) -> Section:
    s = Section("Eager launches vs CUDA graph replay", [f"{f['layers']} layers, hidden {f['hidden']}, {f['dtype']}; mode: {f['mode']}"])
    if f.get("graph_skipped_reason"):
        s.lines.append(f["graph_skipped_reason"])
    rows = [
        (
            str(p["batch"]),
            str(p["launches_per_step"]),
            fixed(p["eager_step_ms"]),
            fixed(p["graph_step_ms"]) if "graph_step_ms" in p else p.get("capture_error", "eager only"),
            f"{p['graph_gain']:.2f}x" if "graph_gain" in p else "n/a",
            fixed(p.get("launch_cost_us"), 2),
            str(p.get("replay_matches_eager", "n/a")),
        )
        for p in f["batches"]
    ]
    headers = ("batch", "launches/step", "eager ms", "graph ms", "gain", "launch cost us", "replay matches eager")
    s.tables.append(TableData(headers, rows))
    return s


def gemm_section(f: dict[str, Any]) -> Section:
    peaks = ", ".join(f"{d} {t:g}" for d, t in (f.get("peak_tflops") or {}).items()) or "n/a"
    s = Section(
        "Expert GEMM sweep",
        [
            f"shapes from {f['shapes_source']}; swept {', '.join(f['dtypes'])}; peak TFLOP/s: {peaks}; "
            f"{f.get('peak_bandwidth_gbs') or 'n/a'} GB/s ({f.get('hardware') or 'no preset'})"
            f"{'; shapes scaled down for the CPU' if f.get('scaled_for_cpu') else ''}"
        ],
    )
    s.lines += [f"{d} not swept: {why}" for d, why in f.get("dtypes_skipped", {}).items()]
    s.lines += [f"{k['name']} in {k['dtype']} not swept: {k['reason']}" for k in f.get("skipped", [])]
    headers = ("M", "time us", "TFLOP/s", "GB/s", "% peak FLOP/s", "% peak BW", "% roofline")
    for shape in f["shapes"]:
        rows = [
            (
                str(p["m"]),
                fixed(p["time_us"], 1),
                sig(p["tflops"]),
                sig(p["gbs"]),
                pct(p.get("fraction_of_peak_flops")),
                pct(p.get("fraction_of_peak_bandwidth")),
                pct(p.get("fraction_of_roofline")),
            )
            for p in shape["points"]
        ]
        caption = (
            f"{shape['name']}, {shape['dtype']}: N={shape['n']} K={shape['k']}, {shape['weight_copies']} weight copies; "
            f"time doubles at M={shape['m_doubling_time_at'] or 'none swept'}"
        )
        s.tables.append(TableData(headers, rows, caption))
    return s


def collectives_section(f: dict[str, Any]) -> Section:
    s = Section(
        "Collectives",
        [f"{f['world_size']} ranks over {f['backend']}, {f['dtype']}; clock: {f['clock']}"],
    )
    if f.get("backend_note"):
        s.lines.append(f["backend_note"])
    injected = f.get("injected_delay")
    if injected:
        s.lines.append(f"injected: rank {injected['rank']} sleeps {injected['ms']:g} ms before each collective")
    late = f.get("late_rank")
    s.lines.append(
        f"late participant: rank {late} (the wait outweighs the transfer)" if late is not None else "late participant: none stands out"
    )
    rows = [
        (
            c["op"],
            f"{c['message_bytes']:,}",
            fixed(c["interval_ms"]),
            fixed(c["transfer_ms"]),
            fixed(c["wait_ms"]),
            f"{c['late_rank']} ({pct(c['late_fraction'])})",
            sig(c["bus_bandwidth_gbs"]),
        )
        for c in f["collectives"]
    ]
    headers = ("op", "bytes", "interval ms", "transfer ms", "wait ms", "late rank (share of calls)", "bus GB/s")
    s.tables.append(TableData(headers, rows))
    return s


def client_section(f: dict[str, Any]) -> Section:
    bunching = f.get("bunching") or {}
    s = Section(
        "Client gaps",
        [
            f"{f['endpoint']} ({f['api']}), model {f['model']}: {f['requests']} request(s) at concurrency {f['concurrency']}, "
            f"max_tokens {f['max_tokens']}",
            f"definitions: {f['definitions']}",
            f"output {fixed(f.get('output_throughput_tok_s'), 1)} tok/s in all, {fixed(f.get('per_user_tok_s'), 1)} tok/s per user; "
            f"{fixed(f.get('tokens_per_chunk'), 2)} tokens per chunk ({f['tokens_per_chunk_source']})",
        ],
    )
    if bunching:
        s.lines.append(
            f"bunched chunks: {pct(bunching.get('bunched_fraction'))}, bursts of {fixed(bunching.get('mean_burst_chunks'), 1)} "
            f"chunks on average, {bunching.get('max_burst_chunks')} at most"
        )
    if f.get("itl_growth_ms_per_1k_output") is not None:
        s.lines.append(f"inter-token latency grows {f['itl_growth_ms_per_1k_output']:.3f} ms per 1k output tokens")
    server = f.get("server_timing")
    if server:
        s.lines.append(
            f"per token: device step {fixed(server.get('device_step_ms'))} ms, server emission {fixed(server.get('server_emission_ms'))} ms, "
            f"client receipt {fixed(server.get('client_receipt_ms'))} ms; buffered p50 {fixed(server.get('buffered_p50_ms'))} ms, "
            f"p99 {fixed(server.get('buffered_p99_ms'))} ms"
        )
    headers = ("metric (ms)", "mean", "p50", "p90", "p99", "n")
    rows = [_stats_row(name.upper(), f.get(f"{name}_ms")) for name in ("ttft", "tpot", "itl", "e2el")]
    s.tables.append(TableData(headers, rows))
    return s


def context_sweep_section(f: dict[str, Any]) -> Section:
    s = Section("Context sweep", [f"{f['endpoint']}, model {f['model']}, {f['repeats']} request(s) per prompt length"])
    slope = f.get("step_ms_per_1k_context")
    if slope is not None:
        s.lines.append(
            f"step time grows {slope:.3f} ms per 1k tokens of context (intercept {fixed(f.get('step_intercept_ms'))} ms, "
            f"R² {fixed(f.get('step_fit_r2'))}); TTFT grows {fixed(f.get('ttft_ms_per_1k_prompt'))} ms per 1k prompt tokens"
        )
    rows = [
        (str(p["prompt_tokens"]), fixed(p["output_tokens"], 0), fixed(p["context"], 0), fixed(p["step_ms"]), fixed(p["ttft_ms"], 1))
        for p in f["points"]
    ]
    s.tables.append(TableData(("prompt tokens", "output tokens", "mean context", "step ms", "TTFT ms"), rows))
    return s


SECTIONS: dict[str, Callable[[dict[str, Any]], Section]] = {
    "device": device_section,
    "bandwidth": bandwidth_section,
    "gemm": gemm_section,
    "graphs": graphs_section,
    "collectives": collectives_section,
    "client": client_section,
    "context_sweep": context_sweep_section,
}


def status_table(report: ProbeReport) -> TableData:
    rows = [(r.name, r.status, f"{r.duration_s:.2f}", r.reason or "") for r in report.results]
    return TableData(("probe", "status", "seconds", "reason"), rows)


def section(result: ProbeResult) -> Section | None:
    """The figures of one probe that succeeded; None for a skip or failure (the status table says why)."""
    build = SECTIONS.get(result.name)
    if result.status != "ok" or build is None:
        return None
    try:
        return build(result.facts)
    except (KeyError, TypeError) as err:
        # a report saved by another version can lack a figure; say so rather than stop the others
        return Section(result.name, [f"facts not in the form this version reads ({type(err).__name__}: {err})"])


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

    table = Table(title=title or None, title_justify="left")
    for header in t.headers:
        table.add_column(header)
    for cells in t.rows:
        table.add_row(*cells)
    return table


def render_text(report: ProbeReport, width: int) -> str:
    """The status of every probe, then the figures of each that succeeded, as terminal text."""
    import io

    from rich.console import Console
    from rich.markup import escape

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, highlight=False, color_system=None)
    console.print(_rich_table(status_table(report), f"diagnoser probe on {report.host}"))
    for s in sections(report):
        console.print(f"\n[bold]{escape(s.title)}[/bold]")
        for line in s.lines:
            console.print(escape(line))
        for t in s.tables:
            if t.caption:
                console.print(escape(t.caption))
            console.print(_rich_table(t))
    return buffer.getvalue()
