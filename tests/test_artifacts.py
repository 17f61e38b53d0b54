"""``case from`` and ``diagnose FILE...``: recognition by content, merging with sources, disagreements
side by side, scrapes as a window, runs, and real fault recordings diagnosed from their files alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from diagnoser.artifacts.artifact import Artifact
from diagnoser.artifacts.build import case_from, read_artifacts
from diagnoser.artifacts.formats import FORMAT_NAMES, formats, recognise
from diagnoser.errors import InputError
from diagnoser.models.case import load_case
from diagnoser.readers.prometheus import parse_scrape
from diagnoser.readers.serving_metrics import from_window

DATA = Path(__file__).parent / "data"
SAMPLES = DATA / "artifacts"
RECORDINGS = DATA / "recordings"
HEALTHY = DATA / "vllm" / "healthy"
# Real files kept elsewhere that are samples of a format too.
ELSEWHERE = {
    "prometheus": [*sorted((DATA / "vllm").glob("*/metrics_*.txt")), *sorted(RECORDINGS.glob("*/metrics_*.txt"))],
    "vllm-log": [*sorted((DATA / "vllm").glob("*/server.log")), *sorted(RECORDINGS.glob("*/server.log"))],
    "vllm-bench-serve": sorted(RECORDINGS.glob("*/bench.json")),
}


def samples() -> list[tuple[str, Path]]:
    found = [(d.name, f) for d in sorted(SAMPLES.iterdir()) if d.is_dir() for f in sorted(d.iterdir()) if f.name != "README.md"]
    return found + [(name, f) for name, files in ELSEWHERE.items() for f in files]


@pytest.mark.parametrize("expected, path", samples(), ids=lambda v: v.name if isinstance(v, Path) else v)
def test_each_sample_is_its_format_and_no_other(expected, path):
    artifact = Artifact.load(path)
    claimed = [f.name for f in formats() if f.recognise(artifact)]
    assert claimed == [expected]


def test_every_format_has_a_real_sample():
    names = {f.name for f in formats()}
    assert len(names) == len(FORMAT_NAMES)
    real = {name for name, path in samples() if "lookalike" not in path.name}
    assert names <= real, names - real


def test_a_file_of_no_known_format_gets_one_line_naming_the_formats(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("we saw 100 tokens/s and expected 1000\n")
    with pytest.raises(InputError) as err:
        read_artifacts([notes])
    message = str(err.value)
    assert "\n" not in message and "notes.txt" in message and "vllm bench serve" in message and "nvidia-smi" in message
    done = run_cli("case", "from", str(notes))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def test_two_scrapes_are_a_window_whichever_order_they_come_in():
    before, after = HEALTHY / "metrics_before.txt", HEALTHY / "metrics_after.txt"
    forward, backward = read_artifacts([before, after]).facts, read_artifacts([after, before]).facts
    assert {p: s.value for p, s in forward.facts.items()} == {p: s.value for p, s in backward.facts.items()}
    direct = from_window(parse_scrape(before.read_text()), parse_scrape(after.read_text()))
    assert forward.value("observations.metrics.tpot_ms") == direct.value("observations.metrics.tpot_ms")
    source = forward.facts["observations.metrics.tpot_ms"].source
    assert source.startswith("metrics_before.txt -> metrics_after.txt") and "request_time_per_output_token" in source
    assert "observations.metrics.window_includes_warmup" not in forward


def test_one_scrape_is_the_servers_lifetime_and_says_so():
    facts = read_artifacts([HEALTHY / "metrics_after.txt"]).facts
    assert facts.value("observations.metrics.window_includes_warmup") is True
    assert "lifetime" in facts.facts["observations.metrics.tpot_ms"].source


def test_scrapes_of_two_servers_are_refused_in_one_line(tmp_path):
    other = DATA / "vllm" / "variants" / "metrics_after.txt"
    with pytest.raises(InputError) as err:
        read_artifacts([HEALTHY / "metrics_after.txt", other])
    assert "\n" not in str(err.value) and "metrics_after.txt" in str(err.value)


def test_files_that_disagree_are_shown_side_by_side(tmp_path):
    # the log's engine line is what ran; a command line only what was asked: the log's value fills the case
    command = tmp_path / "launch.sh"
    command.write_text("vllm serve /models/tiny --max-num-seqs 8\n")
    log = RECORDINGS / "max-num-seqs-1" / "server.log"
    found = read_artifacts([command, log])
    path = "observations.server.max_num_seqs"
    assert found.facts.value(path) == 1
    disagreement = next(line for line in found.disagreements() if line.startswith(path))
    assert "1 (server.log:" in disagreement and "8 (launch.sh:1" in disagreement
    done = run_cli("case", "from", str(command), str(log), "-o", str(tmp_path / "case.yaml"))
    assert done.returncode == 0, done.stderr
    assert f"case: disagree: {path}: 1" in done.stderr
    text = (tmp_path / "case.yaml").read_text()
    assert text.startswith("# built by diagnoser case from launch.sh, server.log") and f"# disagree: {path}" in text


def test_a_benchmark_beside_engine_scrapes_gives_boundary_timings_not_a_second_metrics_set():
    folder = RECORDINGS / "max-num-seqs-1"
    found = read_artifacts([folder / "bench.json", folder / "metrics_before.txt", folder / "metrics_after.txt"])
    bench = json.loads((folder / "bench.json").read_text())
    assert found.facts.value("observations.metrics.boundary") == "engine"
    assert found.facts.value("observations.boundaries.client_p99_ms") == pytest.approx(bench["p99_itl_ms"])
    assert found.facts.value("observations.boundaries.ttft_ms") == pytest.approx(bench["median_ttft_ms"])
    assert found.facts.value("observations.metrics.concurrency") == 4  # the load's shape is the client's
    assert any("tpot_ms" in line and "bench.json" in line for line in found.set_aside)
    assert not [c for c in found.facts.conflicts if c.path.startswith("observations.metrics.")], found.disagreements()


def test_case_from_writes_a_case_whose_every_fact_names_its_source(tmp_path):
    folder = RECORDINGS / "max-num-seqs-1"
    files = [folder / "bench.json", folder / "server.log", folder / "metrics_before.txt", folder / "metrics_after.txt"]
    out = tmp_path / "case.yaml"
    done = run_cli("case", "from", *map(str, files), "-o", str(out), "--title", "queueing")
    assert done.returncode == 0, done.stderr
    for file, kind in (("bench.json", "vllm-bench-serve"), ("server.log", "vllm-log"), ("metrics_after.txt", "prometheus")):
        assert f"case: read {file} as {kind}" in done.stderr
    case = yaml.safe_load(out.read_text())
    assert case["title"] == "queueing"
    metrics = case["observations"]["metrics"]
    bench = json.loads((folder / "bench.json").read_text())
    assert metrics["concurrency"] == bench["max_concurrency"] == 4
    assert case["observations"]["server"]["max_num_seqs"] == 1
    sources = case["sources"]
    assert sources["observations.server.max_num_seqs"].startswith("server.log:")
    assert sources["observations.metrics.concurrency"].startswith("bench.json")
    assert sources["observations.metrics.queue_ms"].startswith("metrics_before.txt -> metrics_after.txt")
    again = run_cli("diagnose", str(out), "--json")
    direct = run_cli("diagnose", *map(str, files), "--json")
    assert again.returncode == direct.returncode == 0, direct.stderr
    assert [h["rule"] for h in json.loads(again.stdout)["hypotheses"]] == [h["rule"] for h in json.loads(direct.stdout)["hypotheses"]]


def test_a_case_file_with_artifacts_laid_over_it(tmp_path):
    base = tmp_path / "base.yaml"
    base.write_text("title: my slow server\nobservations:\n  expected: {kind: analytic_bound, per_token_ms: 1.0}\n")
    bench = RECORDINGS / "max-num-seqs-1" / "bench.json"
    case, _ = case_from([bench], base=load_case(base))
    assert case.title == "my slow server" and case.observations.expected.per_token_ms == 1.0
    assert case.observations.metrics.concurrency == 4
    done = run_cli("diagnose", str(base), str(bench))
    assert done.returncode == 0, done.stderr
    two = run_cli("diagnose", str(base), str(base))
    assert two.returncode == 2 and "two case files" in two.stderr


def test_a_case_whose_comment_quotes_a_server_log_line_is_read_as_a_case(tmp_path):
    """A case's comments may quote what a format is known by (a vLLM stats line): the mapping of case fields decides."""
    case = tmp_path / "quoted.yaml"
    case.write_text("# the server printed:\n"
                    "#   INFO metrics.py:396] Avg prompt throughput: 72.1 tokens/s, Avg generation throughput: 1.4 tokens/s, "
                    "Running: 1 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%\n"
                    "title: quoted log\nobservations:\n  metrics: {boundary: engine, tpot_ms: {p50: 20}}\n")
    done = run_cli("diagnose", str(case), "--json")
    assert done.returncode == 0, done.stderr
    assert "read quoted.yaml as" not in done.stderr and json.loads(done.stdout)["title"] == "quoted log"


def test_runs_from_two_configurations_differ_in_what_their_files_state(tmp_path):
    eager, default = RECORDINGS / "enforce-eager", RECORDINGS / "none"
    case, _ = case_from([], runs=[("default", [default / "bench.json", default / "server.log"]),
                                  ("eager", [eager / "bench.json", eager / "server.log"])])
    first, second = case.observations.runs
    assert (first.name, second.name) == ("default", "eager")
    assert second.settings.get("cuda_graphs") is False or second.settings.get("torch_compile") is False
    assert "concurrency" not in first.settings  # the same in both: not what was compared
    bench = json.loads((eager / "bench.json").read_text())
    assert second.figures.per_token_ms == pytest.approx(bench["median_tpot_ms"])
    lone = run_cli("case", "from", "--run", f"a:{eager / 'bench.json'}")
    assert lone.returncode == 2 and "two or more runs" in lone.stderr
    bad = run_cli("case", "from", "--run", "nofiles")
    assert bad.returncode == 2 and "NAME:FILE" in bad.stderr


# Real vLLM 0.32 (CPU build) with one fault each, recorded by diagnoser/real_vllm/record.py: the
# server's log, `vllm bench serve --save-result`, and /metrics before and after the benchmark.
FAULT_CAUSES = {"max-num-seqs-1": "admission-queueing", "enforce-eager": "compile-off", "default-penalties": "default-penalties",
                "long-prompts": "prefill-stalls", "ngram-low-acceptance": "speculation-low-acceptance",
                "kv-cache-small": "kv-cache-pressure"}


def _diagnosis(folder: Path):
    from diagnoser.engine import diagnose, load_rulebook

    files = [folder / n for n in ("bench.json", "server.log", "metrics_before.txt", "metrics_after.txt")]
    case, _ = case_from(files)
    return diagnose(case, load_rulebook())


@pytest.mark.parametrize("fault, cause", FAULT_CAUSES.items())
def test_recorded_fault_is_named_first_from_its_files(fault, cause):
    found = _diagnosis(RECORDINGS / fault)
    causes = [h.rule for h in found.hypotheses if h.kind == "cause"]
    assert causes and causes[0] == cause, causes


def test_the_healthy_recording_names_no_measured_cause():
    found = _diagnosis(RECORDINGS / "none")
    assert not [h.rule for h in found.hypotheses if h.kind == "cause" and h.grade is not None and h.grade.value == "measured"]


@pytest.mark.real_vllm
def test_a_fault_recorded_now_is_named_from_its_files(tmp_path):
    from diagnoser.real_vllm import Unavailable
    from diagnoser.real_vllm.record import record

    try:
        folder = record("max-num-seqs-1", tmp_path / "rec")
    except Unavailable as err:
        pytest.skip(str(err))
    causes = [h.rule for h in _diagnosis(folder).hypotheses if h.kind == "cause"]
    assert causes[0] == "admission-queueing", causes


def test_case_formats_lists_every_format_and_case_from_needs_files():
    listed = run_cli("case", "formats")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [f.name for f in formats()]
    empty = run_cli("case", "from")
    assert empty.returncode == 2 and len(empty.stderr.strip().splitlines()) == 1
