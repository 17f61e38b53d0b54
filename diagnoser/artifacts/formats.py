"""The formats diagnoser reads, in the order they are tried: the most specific first.

A format is data plus two functions, like a rule: ``recognise`` looks at an ``Artifact`` and
answers whether this is that kind of file (cheaply, without raising); ``read`` returns its facts
or raises one ``InputError`` line when the file is that kind but damaged. Each reader module
exports one or more ``Format`` objects; the list below names them so ``--help`` imports none.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from diagnoser.artifacts.artifact import Artifact
from diagnoser.readers.facts import SourcedFacts


@dataclass(frozen=True)
class Format:
    name: str  # short and stable: shown in sources and in "formats it knows"
    what: str  # how a person would recognise the file
    recognise: Callable[[Artifact], bool]
    read: Callable[[Artifact], SourcedFacts]
    # several files of this format that make one set of facts together (two scrapes of a server
    # are a window); when set, all the format's files go to it at once instead of one by one
    combine: Callable[[list[Artifact]], SourcedFacts] | None = None


# "module:attribute" of each Format, most specific first (a vLLM log before any plain text)
FORMAT_NAMES: tuple[str, ...] = (
    "diagnoser.readers.bench_vllm:FORMAT",
    "diagnoser.readers.bench_sglang:FORMAT",
    "diagnoser.readers.bench_aiperf:SUMMARY_JSON",
    "diagnoser.readers.bench_aiperf:SUMMARY_CSV",
    "diagnoser.readers.bench_aiperf:RECORDS",
    "diagnoser.readers.bench_aiperf:SERVER_METRICS",
    "diagnoser.readers.bench_guidellm:FORMAT",
    "diagnoser.readers.prometheus_file:FORMAT",
    "diagnoser.readers.vllm_log:FORMAT",
    "diagnoser.readers.sglang_log:FORMAT",
    "diagnoser.readers.engine_args_file:COMMAND_LINE",
    "diagnoser.readers.engine_args_file:ENGINE_ARGS_YAML",
    "diagnoser.readers.nvidia_smi:QUERY",
    "diagnoser.readers.nvidia_smi:QUERY_CSV",
    "diagnoser.readers.nvidia_smi:TOPOLOGY",
    "diagnoser.readers.collect_env:FORMAT",
)


def formats() -> list[Format]:
    found = []
    for target in FORMAT_NAMES:
        module, attribute = target.split(":")
        found.append(getattr(importlib.import_module(module), attribute))
    return found


def known() -> str:
    """One line naming every format, for the refusal of a file that is none of them."""
    return "; ".join(f.what for f in formats())


def recognise(artifact: Artifact) -> Format | None:
    return next((f for f in formats() if f.recognise(artifact)), None)
