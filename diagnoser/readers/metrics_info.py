"""Configuration facts from vLLM's Prometheus info gauges, for servers whose /server_info is off.

vLLM publishes each ``<section>_config`` it exports as a gauge ``vllm:<section>_config_info`` whose
labels are that section's fields as text (``block_size="128"``, ``enable_prefix_caching="True"``);
0.32 exports only ``cache_config``. The labels are read back into the section's values and go
through the same decisions as ``/server_info``'s JSON, so both documents agree on what a key means.
The text is read by the project's own bounded parser (``readers.prometheus``), so the core tool
needs no Prometheus client.
"""

from __future__ import annotations

import re
from typing import Any

from diagnoser.errors import InputError
from diagnoser.readers.facts import SourcedFacts
from diagnoser.readers.prometheus import Scrape, parse_scrape
from diagnoser.readers.vllm_config import SERVER, facts_from_sections

_INFO = re.compile(r"vllm:(\w+_config)_info")
_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?\d+\.\d*(e-?\d+)?")


def label_value(label: str) -> Any:
    """A label's text as the value it was printed from (Python's str of a bool, None or number)."""
    known = {"True": True, "False": False, "None": None}
    if label in known:
        return known[label]
    if _INT.fullmatch(label):
        return int(label)
    if _FLOAT.fullmatch(label):
        return float(label)
    return label


def info_sections(scrape: Scrape) -> dict[str, list[dict]]:
    """Each ``vllm:*_config_info`` gauge's samples as label dicts (one per engine)."""
    return {
        match.group(1): [{k: label_value(v) for k, v in labels} for labels in scrape.samples[name]]
        for name in sorted(scrape.names)
        if (match := _INFO.fullmatch(name)) is not None
    }


def from_metrics_text(text: str, where: str = "/metrics") -> SourcedFacts:
    try:
        scrape = parse_scrape(text)
    except InputError as err:
        raise InputError(f"{where}: {err}") from None
    return from_scrape(scrape, where)


def from_scrape(scrape: Scrape, where: str = "/metrics") -> SourcedFacts:
    """Facts from the info gauges; every engine's sample is read, so engines that differ show as conflicts."""
    sections, seen_vllm = info_sections(scrape), any(name.startswith("vllm:") for name in scrape.names)
    facts = SourcedFacts()
    for name, samples in sections.items():
        for labels in samples:
            engine = f',engine="{labels["engine"]}"' if "engine" in labels else ""
            facts.merge(facts_from_sections({name: labels}, lambda s, k: f"{where} vllm:{s}_info{{{k}{engine}}}"))
    if seen_vllm:
        facts.add(SERVER + "engine", "vllm", f"{where} vllm:* metric names")
    if seen_vllm and not sections:
        facts.missing.append(f"{where}: no vllm:*_config_info gauge; start vLLM with VLLM_SERVER_DEV_MODE=1 and read "
                             "/server_info?config_format=json, or give the server's command line or log")
    return facts
