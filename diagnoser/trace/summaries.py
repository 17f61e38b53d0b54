"""Per-rank summaries on disk: analyse where the traces live, merge the results anywhere.

    summaries_text(summaries) -> str          JSON, what ``analyze --summary-out`` writes
    read_summaries(paths) -> list[RankSummary]  from several such files, sorted by rank

A 64-rank profile is GBs a rank, on as many nodes; moving it to one machine costs more than
analysing it. Each node runs ``analyze --summary-out`` on its own ranks and writes kilobytes
per step, and ``analyze --merge`` of all the files gives the analysis of the traces together
(``analysis.merge_ranks``; see docs/trace-scale.md for running it under Slurm, Ray or Dask).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from diagnoser.errors import InputError
from diagnoser.trace.analysis import RankSummary
from diagnoser.trace.trace_file import read_bytes

FORMAT = "diagnoser-rank-summaries/1"


def summaries_text(summaries: list[RankSummary]) -> str:
    payload = {"format": FORMAT, "summaries": [s.model_dump(mode="json") for s in summaries]}
    return orjson.dumps(payload).decode()


def read_summaries(paths: list[Path]) -> list[RankSummary]:
    found: list[RankSummary] = []
    for path in paths:
        try:
            payload = orjson.loads(read_bytes(path))
        except orjson.JSONDecodeError as err:
            raise InputError(f"{path}: not valid JSON ({err})") from None
        if not isinstance(payload, dict) or payload.get("format") != FORMAT or not isinstance(payload.get("summaries"), list):
            raise InputError(f"{path}: not a rank summary file (write one with: diagnoser analyze TRACE... --summary-out FILE)")
        try:
            found += [RankSummary.model_validate(s) for s in payload["summaries"]]
        except ValueError as err:
            raise InputError(f"{path}: a rank summary does not read ({str(err).splitlines()[0]})") from None
    if not found:
        raise InputError(f"{', '.join(map(str, paths))}: no rank summaries in these files")
    return sorted(found, key=lambda s: s.rank)
