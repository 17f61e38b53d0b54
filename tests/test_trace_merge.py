"""``analyze --merge``: the ranks' summaries, each made apart (one process per node), merged give
the analysis of the traces together."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from diagnoser.errors import InputError
from diagnoser.trace.analysis import analyze_traces, merge_ranks, summarize_traces
from diagnoser.trace.load import load_traces
from diagnoser.trace.summaries import read_summaries, summaries_text

DATA = Path(__file__).resolve().parent / "data"
TRACE_FILTER = DATA.parents[2] / "shared" / "data" / "hta" / "trace_filter"
# vLLM's folder holds the worker's trace beside the API server's empty one: one node's input, whole
SETS = [DATA / "trace" / "synthetic", TRACE_FILTER, DATA / "vllm" / "healthy" / "profile_decode"]


def _apart(folder: Path, tmp_path: Path) -> list[Path]:
    """One summary file per trace file, as nodes holding one rank each would write them."""
    whole = folder.name.startswith("profile_")
    out = []
    for trace in [folder] if whole else sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz"))):
        path = tmp_path / f"{trace.name}.summary.json"
        path.write_text(summaries_text(summarize_traces(load_traces([trace]))))
        out.append(path)
    return out


@pytest.mark.parametrize("folder", SETS, ids=lambda p: p.name)
def test_merged_summaries_are_the_analysis_of_the_ranks_together(folder, tmp_path):
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    together = analyze_traces(load_traces([folder]))
    merged = merge_ranks(read_summaries(_apart(folder, tmp_path)))
    assert merged.model_dump() == together.model_dump()
    assert [r.segments for r in merged.rank_steps] == [r.segments for r in together.rank_steps]
    assert merged.budget() is not None


def test_a_rank_in_two_summaries_and_a_file_that_is_none_are_refused(tmp_path):
    files = _apart(DATA / "trace" / "synthetic", tmp_path)
    with pytest.raises(InputError, match="rank 0 appears in more than one summary"):
        merge_ranks(read_summaries([files[0], files[0]]))
    other = tmp_path / "x.json"
    other.write_text('{"traceEvents": []}')
    with pytest.raises(InputError, match="not a rank summary file"):
        read_summaries([other])


def test_the_cli_merges_what_it_summarised(tmp_path):
    folder = DATA / "trace" / "synthetic"
    files = []
    for trace in sorted(folder.glob("*.json")):
        files.append(tmp_path / f"{trace.stem}.summary.json")
        done = subprocess.run([sys.executable, "-m", "diagnoser", "analyze", str(trace), "--summary-out", str(files[-1])],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    merged = subprocess.run([sys.executable, "-m", "diagnoser", "analyze", "--merge", *map(str, files), "--json"],
                            capture_output=True, text=True)
    together = subprocess.run([sys.executable, "-m", "diagnoser", "analyze", str(folder), "--json"],
                              capture_output=True, text=True)
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout == together.stdout
