"""A saved ``/metrics`` scrape of vLLM or SGLang, or several scrapes of one server as a window.

One scrape holds the server's lifetime: every request since it started, warm-up included, and
its figures say so in their source. Two or more scrapes of one server are put in the order their
counters grew (file names and times are not trusted to say it); the first and the last bound the
window, the ones between are read for their gauges only (a queue seen mid-load).
"""

from __future__ import annotations

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.formats import Format
from diagnoser.errors import InputError
from diagnoser.readers.facts import Sourced, SourcedFacts
from diagnoser.readers.metrics_info import from_scrape
from diagnoser.readers.prometheus import Scrape, parse_scrape
from diagnoser.readers.serving_metrics import from_window

_ENGINE_PREFIXES = ("vllm:", "sglang:")


def recognise(artifact: Artifact) -> bool:
    """Exposition comments and a sample named by a serving engine, within the first lines."""
    head = artifact.lines[:400]
    commented = any(line.startswith(("# HELP ", "# TYPE ")) for line in head)
    return commented and any(line.startswith(_ENGINE_PREFIXES) for line in head)


def _parse(artifact: Artifact) -> Scrape:
    try:
        return parse_scrape(artifact.text)
    except InputError as err:
        raise InputError(f"{artifact.name}: {err}") from None


def _cumulative_total(scrape: Scrape) -> float:
    return sum(sum(scrape.samples[name].values()) for name in scrape.cumulative & scrape.names)


def _resourced(facts: SourcedFacts, where: str) -> SourcedFacts:
    """The window's facts name the files instead of the live endpoint."""
    found = SourcedFacts(missing=list(facts.missing), conflicts=list(facts.conflicts))
    for path, sourced in facts.facts.items():
        found.facts[path] = Sourced(sourced.value, f"{where} {sourced.source.removeprefix('/metrics ')}")
    return found


def read(artifact: Artifact) -> SourcedFacts:
    return combine([artifact])


def combine(artifacts: list[Artifact]) -> SourcedFacts:
    scrapes = sorted(((_parse(a), a) for a in artifacts), key=lambda pair: _cumulative_total(pair[0]))
    (first, first_file), (last, last_file) = scrapes[0], scrapes[-1]
    facts = SourcedFacts()
    for scrape, artifact in scrapes:
        facts.merge(from_scrape(scrape, artifact.name))
    if len(scrapes) == 1:
        window = _resourced(from_window(Scrape({}, last.cumulative), last), f"{last_file.name} (the server's lifetime, warm-up included)")
        window.add("observations.metrics.window_includes_warmup", True, f"{last_file.name}: one scrape counts from the server's start")
    else:
        try:
            counted = from_window(first, last, [s for s, _ in scrapes[1:-1]])
        except InputError as err:
            raise InputError(f"{first_file.name} and {last_file.name}: {err}") from None
        window = _resourced(counted, f"{first_file.name} -> {last_file.name}")
    return facts.merge(window)


FORMAT = Format(
    name="prometheus",
    what="a /metrics scrape of vLLM or SGLang (two or more of one server: the window between them)",
    recognise=recognise,
    read=read,
    combine=combine,
)
