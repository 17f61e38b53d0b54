"""Real vLLM 0.32 (CPU build) profiles: engine steps from vLLM's step annotations, the budget of
the decode-only ones, the others counted apart, and the API server's empty trace skipped.

Every expected figure is recomputed here from the raw Kineto JSON, not copied from a run."""

from __future__ import annotations

import gzip
import re
import shutil
from functools import cache
from pathlib import Path

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from conftest import run_cli

from diagnoser.cli import cli
from diagnoser.errors import InputError
from diagnoser.trace.analysis import analyze_traces
from diagnoser.trace.facts import to_observations
from diagnoser.trace.load import load_traces
from diagnoser.trace.steps import engine_step_kind

HEALTHY = Path(__file__).parent / "data" / "vllm" / "healthy"
FOLDERS = ["profile_decode", "profile_mixed"]
# written independently of diagnoser's own pattern: requests and tokens in prefill, requests in decode
ANNOTATION = re.compile(r"^execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)$")


def worker(folder: str) -> Path:
    (path,) = (HEALTHY / folder).glob("rank0.*.pt.trace.json.gz")
    return path


def api_server(folder: str) -> Path:
    (path,) = (HEALTHY / folder).glob("*.async_llm.*.pt.trace.json.gz")
    return path


def events(path: Path) -> list[dict]:
    return orjson.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


@cache
def raw_steps(folder: str) -> list[tuple[str, float, int]]:
    """(kind, start in µs, prompt tokens) of each step annotation, in time order."""
    out = []
    for e in events(worker(folder)):
        found = ANNOTATION.match(e.get("name", "")) if e.get("cat") == "user_annotation" else None
        if found:
            prefill, tokens, decode = int(found[1]), int(found[2]), int(found[3])
            kind = {(True, True): "mixed", (True, False): "prefill", (False, True): "decode"}.get((prefill > 0, decode > 0), "empty")
            out.append((kind, float(e["ts"]), tokens))
    return sorted(out, key=lambda s: s[1])


def raw_median_ms(folder: str, kind: str) -> float:
    """Median over steps of one kind of (annotation start to the next annotation's start)."""
    steps = raw_steps(folder)
    return float(np.median([(b[1] - a[1]) / 1000 for a, b in zip(steps, steps[1:]) if a[0] == kind]))


@cache
def analysis(folder: str):
    return analyze_traces(load_traces([HEALTHY / folder]))


@pytest.mark.parametrize("folder", FOLDERS)
def test_steps_come_from_the_annotations_with_their_kinds(folder):
    result = analysis(folder)
    raw = raw_steps(folder)
    assert result.method == "engine_step" and len(result.steps) == len(raw)
    assert [s.kind for s in result.steps] == [kind for kind, _, _ in raw]
    assert [s.prefill_tokens for s in result.steps] == [tokens for _, _, tokens in raw]
    mix = to_observations(result).step_mix
    assert (mix.decode_steps, mix.prefill_steps, mix.mixed_steps) == tuple(
        sum(kind == k for kind, _, _ in raw) for k in ("decode", "prefill", "mixed")
    )
    assert mix.decode_steps > 50 and mix.prefill_steps == 1


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_budget_is_the_median_decode_only_step(folder):
    result = analysis(folder)
    facts = to_observations(result)
    expected = raw_median_ms(folder, "decode")
    # Kineto writes µs with nanosecond decimals; the reader rounds each time to a whole ns
    assert facts.step_mix.decode_step_ms == pytest.approx(expected, abs=2e-6)
    assert result.median_step_ms == pytest.approx(expected, abs=2e-6) and result.decode_only
    assert facts.budget.segmentation == "engine_step"
    representative = next(s for s in result.steps if s.key == result.representative)
    assert representative.kind == "decode"
    assert facts.budget.device_ms + facts.budget.host_ms == pytest.approx(facts.budget.step_ms)


def test_the_three_long_prompts_are_mixed_steps_apart_from_the_budget():
    result = analysis("profile_mixed")
    mixed = [s for s in result.steps if s.kind == "mixed"]
    assert len(mixed) == 3 and [s.prefill_tokens for s in mixed] == [2000] * 3
    mix = to_observations(result).step_mix
    assert mix.prefill_tokens_per_mixed_step == 2000
    assert mix.mixed_step_ms == pytest.approx(raw_median_ms("profile_mixed", "mixed"), abs=2e-6)
    assert mix.mixed_step_ms > 20 * mix.decode_step_ms
    # the decode budget's spread is of decode steps only: no 2000-token prefill inside it
    assert result.step_spread_ms < mix.decode_step_ms


def test_sampling_after_the_annotation_is_charged_to_its_step():
    """vLLM samples after the step's annotation ends: each step that ran the model owns one argmax."""
    raw = events(worker("profile_decode"))
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in raw if ANNOTATION.match(e.get("name", ""))]
    argmax = [e["ts"] for e in raw if e.get("name") == "_C::greedy_argmax"]
    assert argmax and not any(lo <= t < hi for t in argmax for lo, hi in windows)
    trace = load_traces([HEALTHY / "profile_decode"])[0]
    from diagnoser.trace.cpu_steps import cpu_run
    from diagnoser.trace.ops import device_ops
    from diagnoser.trace.steps import segment_steps

    trace = cpu_run(trace)
    ops = device_ops(trace)
    names = np.array([trace.strings[n] for n in trace.kernels["name"]])
    for step in segment_steps(trace, ops).steps:
        sampled = int((names[ops.row[step.ops]] == "_C::greedy_argmax").sum())
        assert sampled == (0 if step.kind == "empty" else 1)
    # the step mark is not a model part: op names are not prefixed with it
    assert not any(row.top_kernel.startswith("execute_context") for row in analysis("profile_decode").kernel_table)


def test_the_annotations_are_the_marks_of_steps_from():
    traces = load_traces([worker("profile_decode")])
    assert analyze_traces(traces, steps_from="marks").method == "engine_step"
    with pytest.raises(InputError, match="--steps-from graphs"):
        analyze_traces(traces, steps_from="graphs")
    ranged = analyze_traces(traces, step_range="execute_context")  # the annotation alone, sampling left out
    assert ranged.method == "range" and len(ranged.steps) == len(raw_steps("profile_decode"))


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_api_server_trace_is_skipped_and_named(folder):
    traces = load_traces([HEALTHY / folder])
    assert [t.source for t in traces] == [str(worker(folder))]
    skipped = [n for n in traces[0].notes if n.startswith("skipped ")]
    assert len(skipped) == 1 and str(api_server(folder)) in skipped[0]


def test_files_with_nothing_are_refused_in_one_line(tmp_path):
    for i in range(2):
        shutil.copy(api_server("profile_decode"), tmp_path / f"host_{i}.async_llm.{i}.pt.trace.json.gz")
    with pytest.raises(InputError, match="no kernels, copies or CPU ops in any of these traces"):
        load_traces([tmp_path])
    done = run_cli("analyze", str(tmp_path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "host_0" in lines[0] and "host_1" in lines[0]


@pytest.mark.parametrize("folder", FOLDERS)
def test_analyze_the_profiler_folder(folder):
    done = CliRunner().invoke(cli, ["analyze", str(HEALTHY / folder)], terminal_width=300)
    assert done.exit_code == 0, done.output
    counts = {k: sum(kind == k for kind, _, _ in raw_steps(folder)) for k in ("decode", "mixed")}
    assert f"steps: {counts['decode']} decode-only (median {raw_median_ms(folder, 'decode'):.3g} ms)" in done.output
    assert (f"{counts['mixed']} mixed" in done.output) == bool(counts["mixed"])
    assert "median decode-only step" in done.output and "Kernel classes, rank 0, decode-only steps" in done.output
    assert f"skipped {api_server(folder)}" in done.output
    facts = orjson.loads(CliRunner().invoke(cli, ["analyze", str(HEALTHY / folder), "--json"]).output)["observations"]
    assert facts["budget"]["segmentation"] == "engine_step" and facts["step_mix"]["decode_steps"] == counts["decode"]


def _rewritten(tmp_path: Path, rename) -> Path:
    """The decode worker trace with its step annotations renamed."""
    doc = orjson.loads(gzip.decompress(worker("profile_decode").read_bytes()))
    for e in doc["traceEvents"]:
        if ANNOTATION.match(e.get("name", "")):
            e["name"] = rename(e["name"])
    path = tmp_path / "rank0.json"
    path.write_bytes(orjson.dumps(doc))
    return path


def test_annotations_without_counts_still_segment(tmp_path):
    path = _rewritten(tmp_path, lambda name: re.sub(r"\(\d+\)", "", name))
    result = analyze_traces(load_traces([path]))
    assert result.method == "engine_step"
    assert [s.kind for s in result.steps] == [kind for kind, _, _ in raw_steps("profile_decode")]
    assert {s.prefill_tokens for s in result.steps} == {None}
    assert to_observations(result).step_mix.decode_step_ms == pytest.approx(raw_median_ms("profile_decode", "decode"), abs=2e-6)


def test_without_decode_only_steps_the_budget_is_of_all_steps(tmp_path):
    path = _rewritten(tmp_path, lambda name: name.replace("execute_context_0(0)", "execute_context_1(3)"))
    result = analyze_traces(load_traces([path]))
    assert not result.decode_only and not any(s.kind == "decode" for s in result.steps)
    assert result.median_step_ms == pytest.approx(float(np.median([s.step_ms for s in result.steps])))
    assert any("no decode-only step: the budget, median and kernel table are of all" in n for n in result.notes)


@pytest.mark.parametrize(
    "name, kind, tokens",
    [
        ("execute_context_0(0)_generation_8(8)", "decode", 0),
        ("execute_context_3(1264)_generation_1(1)", "mixed", 1264),
        ("execute_context_1(888_788544)_generation_0(0)", "prefill", 888),
        ("execute_context_2_generation_0", "prefill", None),
        ("execute_context_0_generation_0", "empty", None),
        ("ProfilerStep#3", None, None),
        ("execute_context_1(5)_generation_0(0)_extra", None, None),
    ],
)
def test_annotation_names(name, kind, tokens):
    assert engine_step_kind(name) == (kind, tokens)
