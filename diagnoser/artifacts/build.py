"""Artifacts into one case: each file recognised by content, read, and merged with its sources.

Facts from different files that disagree are all kept (``SourcedFacts.conflicts``) and shown
side by side; the case field takes the most direct measurement's (``_PRECEDENCE``), and among
files of one kind the first given. Files of a format that reads several at once (scrapes of one
server) go to it together.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format, known, recognise
from diagnoser.errors import InputError
from diagnoser.models.case import Case
from diagnoser.models.serving import MetricBoundary, Run, RunFigures
from diagnoser.readers.facts import SourcedFacts, apply_facts

MAX_FILES = 64


@dataclass
class Imported:
    facts: SourcedFacts
    formats: list[tuple[str, str]] = field(default_factory=list)  # (file, format name) in the order given
    set_aside: list[str] = field(default_factory=list)  # figures read but not put in the case, and why

    def disagreements(self) -> list[str]:
        return [f"{c.path}: {c.kept.value!r} ({c.kept.source}) against {c.other.value!r} ({c.other.source})" for c in self.facts.conflicts]


# Which file's figure fills a case field when files disagree: the most direct measurement first
# (the engine's counters over the window, then a benchmark client's, then what a log summarises),
# then what the engine resolved (its log) before what was asked (a command line); the user's order
# decides within one kind.
_PRECEDENCE = {
    "prometheus": 0, "aiperf-server-metrics": 0,
    "vllm-bench-serve": 1, "sglang-bench-serving": 1, "aiperf-json": 1, "aiperf-csv": 1, "aiperf-records": 1, "guidellm": 1,
    "vllm-log": 2, "sglang-log": 2,
    "command-line": 3, "engine-args-yaml": 3,
}
_METRICS = "observations.metrics."
_BOUNDARY = _METRICS + "boundary"
_STATED = re.compile(r"((?:observations|workload)\.[\w.]+)")  # the fact a "not stated" note opens with
_TIMED = ("ttft_ms", "tpot_ms", "itl_ms", "request_latency_ms", "queue_ms", "prefill_ms")


def read_artifacts(paths: Sequence[str | Path]) -> Imported:
    if len(paths) > MAX_FILES:
        raise InputError(f"{len(paths)} files: more than the {MAX_FILES} one case is built from")
    recognised: list[tuple[Artifact, Format]] = []
    for path in paths:
        artifact = Artifact.load(path)
        found = recognise(artifact)
        if found is None:
            raise InputError(f"{artifact.name}: not a format diagnoser reads; it knows: {known()}")
        recognised.append((artifact, found))
    pieces: list[tuple[int, int, SourcedFacts]] = []
    combined: set[str] = set()
    for order, (artifact, found) in enumerate(recognised):
        if found.combine is None:
            facts = found.read(artifact)
        elif found.name in combined:
            continue
        else:
            combined.add(found.name)
            facts = found.combine([a for a, f in recognised if f.name == found.name])
        pieces.append((_PRECEDENCE.get(found.name, len(_PRECEDENCE)), order, facts))
    pieces.sort(key=lambda piece: piece[:2])
    imported = Imported(SourcedFacts(), [(a.name, f.name) for a, f in recognised])
    imported.set_aside = _one_boundary([facts for _, _, facts in pieces])
    for _, _, facts in pieces:
        imported.facts.merge(facts)
    # a file that could not give a figure says so; another file that gave it makes the note stale
    imported.facts.missing = [line for line in imported.facts.missing if _STATED.match(line) is None
                              or _STATED.match(line).group(1) not in imported.facts]
    return imported


def _timed(facts: SourcedFacts) -> bool:
    return any(_METRICS + name in facts for name in _TIMED)


def _one_boundary(pieces: list[SourcedFacts]) -> list[str]:
    """``observations.metrics`` is read at one boundary. When the engine's own latencies are there
    (a scrape window), a client's become boundary timings (its median and p99 gap, its first
    token), the client-side TPOT and latency are set aside and said so; a file with no latency
    at all (a log's peaks and rates) does not claim a boundary."""
    engine_timed = any(p.value(_BOUNDARY) == "engine" and _timed(p) for p in pieces)
    set_aside = []
    for piece in pieces:
        if not _timed(piece):
            piece.facts.pop(_BOUNDARY, None)
            continue
        if not engine_timed or piece.value(_BOUNDARY) == "engine":
            continue
        boundary = piece.facts.pop(_BOUNDARY, None)
        itl, ttft = piece.facts.pop(_METRICS + "itl_ms", None), piece.facts.pop(_METRICS + "ttft_ms", None)
        if itl is not None:
            for field, key in (("client_p50_ms", "p50"), ("client_receipt_ms", "p50"), ("client_p99_ms", "p99")):
                piece.add(f"observations.boundaries.{field}", itl.value.get(key), f"{itl.source} {key}")
        if ttft is not None:
            piece.add("observations.boundaries.ttft_ms", ttft.value.get("p50") or ttft.value.get("mean"), ttft.source)
        for name in _TIMED:
            if (dropped := piece.facts.pop(_METRICS + name, None)) is not None:
                where = boundary.value if boundary is not None else "client"
                set_aside.append(f"{dropped.source}: the {where} {name} (the case's metrics are the engine's, from the scrapes)")
    return set_aside


# Case paths that are a setting of the run, and the name ``Run.settings`` knows it by.
_SETTING_PATHS = {
    "observations.server.cuda_graphs": "cuda_graphs",
    "observations.server.max_num_seqs": "max_num_seqs",
    "observations.server.max_context": "max_context",
    "observations.server.attention_backend": "attention_backend",
    "observations.server.quantization": "quantization",
    "observations.server.speculative": "speculative",
    "observations.server.structured_output": "structured_output",
    "observations.speculation.draft_length": "draft_length",
    "workload.layout.tp": "tp",
    "workload.layout.pp": "pp",
    "workload.layout.ep": "ep",
    "observations.metrics.concurrency": "concurrency",
}
_SERVER = "observations.server."


def _settings(facts: SourcedFacts) -> dict[str, str | float | int | bool]:
    """What a run's artifacts state about how it ran: the known settings by their names, and any
    other server setting under its own field name."""
    found: dict[str, str | float | int | bool] = {}
    for path, sourced in facts.facts.items():
        name = _SETTING_PATHS.get(path) or (path.removeprefix(_SERVER) if path.startswith(_SERVER) else None)
        if name and isinstance(sourced.value, (str, int, float, bool)):
            found[name] = sourced.value
    return found


def _figures(facts: SourcedFacts) -> tuple[RunFigures, MetricBoundary]:
    metrics = "observations.metrics."

    def typical(name: str) -> float | None:
        value = facts.value(metrics + name) or {}
        return value.get("p50") or value.get("mean")

    figures = {
        "per_token_ms": typical("tpot_ms") or typical("itl_ms"),
        "output_tokens_per_s": facts.value(metrics + "output_tokens_per_s"),
        "duration_s": facts.value(metrics + "duration_s"),
        "ttft_ms": typical("ttft_ms"),
    }
    return RunFigures(**figures), MetricBoundary(facts.value(metrics + "boundary", "unknown"))


def runs_from(named: Sequence[tuple[str, Sequence[str]]]) -> tuple[list[Run], list[Imported]]:
    """One run per name; settings are kept only where the runs differ, which is what was compared."""
    imports = [read_artifacts(files) for _, files in named]
    settings = [_settings(i.facts) for i in imports]
    varied = {k for s in settings for k in s if len({repr(other.get(k)) for other in settings}) > 1}
    runs = []
    for (name, files), imported, stated in zip(named, imports, settings):
        try:
            figures, boundary = _figures(imported.facts)
        except ValueError:
            raise InputError(f"run {name}: {', '.join(map(str, files))} give no figure to compare (a benchmark result or a metrics window)") from None
        runs.append(Run(name=name, settings={k: v for k, v in stated.items() if k in varied}, figures=figures, boundary=boundary))
    return runs, imports


def case_from(paths: Sequence[str | Path], *, title: str = "", runs: Sequence[tuple[str, Sequence[str]]] = (),
              base: Case | None = None) -> tuple[Case, Imported]:
    """The case the artifacts make, over ``base`` when given; runs are compared operating points."""
    imported = read_artifacts(paths) if paths else Imported(SourcedFacts())
    if runs:
        found, run_imports = runs_from(runs)
        imported.facts.add("observations.runs", [r.model_dump(mode="json", exclude_none=True) for r in found],
                           "; ".join(f"run {name}: {', '.join(map(str, files))}" for name, files in runs))
        for (name, _), run_import in zip(runs, run_imports):
            imported.formats += [(f"{file} (run {name})", kind) for file, kind in run_import.formats]
            imported.facts.missing += run_import.facts.missing
    start = base if base is not None else Case()
    if title:
        start = start.model_copy(update={"title": title})
    elif not start.title:
        start = start.model_copy(update={"title": "from " + ", ".join(file for file, _ in imported.formats[:4])})
    return apply_facts(start, imported.facts), imported


def _is_case(artifact: Artifact) -> bool:
    """A mapping whose keys are all a case's: a case file, not an artifact."""
    doc = artifact.mapping
    return doc is not None and bool(doc) and set(doc) <= set(Case.model_fields)


def load_inputs(paths: Sequence[str]) -> tuple[Case, Imported | None]:
    """``diagnose``'s inputs: one case file, artifacts, or a case file and artifacts laid over it."""
    from diagnoser.models.case import load_case

    cases, artifacts = [], []
    for path in paths:
        artifact = Artifact.load(path)
        # a case first: its comments may quote what a format is recognised by (a server log's stats line)
        if _is_case(artifact):
            cases.append(path)
        elif recognise(artifact) is not None:
            artifacts.append(path)
        elif len(paths) == 1:
            return load_case(path), None  # a damaged case: the case reader says what is wrong with it
        else:
            raise InputError(f"{artifact.name}: neither a case file nor a format diagnoser reads; it knows: {known()}")
    if len(cases) > 1:
        raise InputError(f"{cases[0]} and {cases[1]}: two case files; give one case and any artifacts to lay over it")
    base = load_case(cases[0]) if cases else None
    if base is not None and not artifacts:
        return base, None
    return case_from(artifacts, base=base)
