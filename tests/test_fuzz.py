"""Property-based tests of every loader: a generated document is accepted or refused in one line.

Documents come from the JSON Schemas of the models (valid, and hostile with bad leaves) and
from mutations of real traces and presets. Whatever comes in, the only exception allowed out
is ``InputError`` with a one-line message; an accepted document yields only finite figures;
the file read is left as it was; no warning is printed. Examples are few and bounded so the
whole module stays well inside the suite's budget.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, seed, settings
from hypothesis import strategies as st
from schema_strategy import BAD_LEAVES, from_schema

from diagnoser.errors import InputError

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
# One seed for every run: derandomize hashes the test's code object, file path included, so a
# clone elsewhere would draw other examples than the run that passed here.
SEED = 20261201
PRESETS = st.sampled_from(["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "qwen2.5-7b"])
HARDWARE = st.sampled_from(["h100-sxm", "h200", "a100-80gb", "mi300x", "b200"])


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def _one_line(err: InputError) -> None:
    event("refused")
    text = str(err)
    assert text and "\n" not in text.strip() and "Traceback" not in text


def _write(tmp_path: Path, name: str, doc) -> Path:
    path = tmp_path / name
    text = yaml.safe_dump(doc, sort_keys=False) if name.endswith(".yaml") else json.dumps(doc, allow_nan=True)
    path.write_text(text)
    return path


def _unchanged(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before


@functools.cache
def bundled_rules():
    from diagnoser.engine import load_rulebook

    return load_rulebook(())


def _case_schema() -> dict:
    from diagnoser.models.case import Case

    return Case.model_json_schema()


def _workload_schema() -> dict:
    from diagnoser.models.workload import Workload

    return Workload.model_json_schema()


# Layouts and batches a model can run, so most generated workloads reach the bound instead of
# its cross-field checks; the hostile tests cover the rest.
POWERS = st.sampled_from([1, 2, 4, 8])
WORKLOAD_OVERRIDES = {
    "model": PRESETS,
    "hardware": HARDWARE,
    "expert_token_histogram": st.none(),
    "layout": st.fixed_dictionaries({}, optional={"tp": POWERS, "ep": POWERS, "pp": POWERS, "expert_tp": POWERS}),
    "batch": st.sampled_from([1, 8, 64, 1024, 10**12]),
    "context": st.integers(0, 10**7) | st.floats(0, 1e9),
}


@FUZZ
@seed(SEED)
@given(doc=from_schema(_case_schema(), hostile=True, overrides=WORKLOAD_OVERRIDES), suffix=st.sampled_from([".yaml", ".json"]))
def test_hostile_cases_load_or_are_refused_in_one_line(tmp_path_factory, doc, suffix):
    from diagnoser.models.case import load_case

    path = _write(tmp_path_factory.mktemp("case"), "case" + suffix, doc)
    before = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            case = load_case(path)
        except InputError as err:
            _one_line(err)
        else:
            assert _finite(case.model_dump(mode="json"))
    _unchanged(path, before)


@FUZZ
@seed(SEED)
@given(doc=from_schema(_case_schema(), overrides=WORKLOAD_OVERRIDES))
@example(doc={"workload": {"model": "llama-3.1-8b", "hardware": "h100-sxm"}, "observations": {"budget": {"step_ms": 1e-9}}})
# a CI run drew repeats a factor of two apart, whose spread (1.0) the model refused after computing it
@example(doc={"observations": {"runs": [{"name": "0", "figures": {"per_token_ms": 1.0}},
                                        {"name": "1", "figures": {"per_token_ms": 1.0}, "repeats": [1.0, 0.5]}]}})
def test_schema_valid_cases_diagnose_with_finite_figures(tmp_path_factory, doc):
    from diagnoser.engine import diagnose
    from diagnoser.models.case import load_case
    from diagnoser.report import render_json, render_markdown, render_text

    path = _write(tmp_path_factory.mktemp("case"), "case.json", doc)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            result = diagnose(load_case(path), bundled_rules())
        except InputError as err:
            _one_line(err)
            return
    event("diagnosed")
    assert not result.rule_errors, result.rule_errors  # a bundled rule that raises on valid input is a bug
    assert _finite(json.loads(render_json(result)))
    render_text(result)
    render_markdown(result)


@FUZZ
@seed(SEED)
@given(doc=from_schema(_workload_schema(), overrides=WORKLOAD_OVERRIDES))
def test_schema_valid_workloads_give_a_finite_bound(doc):
    from pydantic import ValidationError

    from diagnoser.bound import compute_bound
    from diagnoser.models.workload import Workload

    try:
        report = compute_bound(Workload.model_validate(doc))
    except (InputError, ValidationError) as err:  # cross-field checks: dp must divide the batch, TP the heads
        event(f"refused: {type(err).__name__}")
        if isinstance(err, InputError):
            _one_line(err)
        return
    event("bound computed")
    assert _finite(report.model_dump(mode="json"))
    assert report.step_floor_ms > 0


def _preset_configs() -> dict:
    return json.loads((REPO / "diagnoser" / "data" / "models.json").read_text())["presets"]


CONFIGS = _preset_configs()


@FUZZ
@seed(SEED)
@given(
    preset=st.sampled_from(sorted(CONFIGS)),
    changes=st.dictionaries(st.sampled_from(sorted({k for p in CONFIGS.values() for k in p["config"]})), BAD_LEAVES | st.integers(-5, 10**10), max_size=3),
)
def test_mutated_config_json_is_read_or_refused(tmp_path_factory, preset, changes):
    from diagnoser.bound import compute_bound
    from diagnoser.models.workload import Workload

    cfg = {**CONFIGS[preset]["config"], **changes}
    path = _write(tmp_path_factory.mktemp("cfg"), "config.json", cfg)
    before = path.read_bytes()
    try:
        report = compute_bound(Workload(model=str(path)))
    except InputError as err:
        _one_line(err)
    else:
        assert _finite(report.model_dump(mode="json"))
    _unchanged(path, before)


def _probe_report_model():
    from diagnoser.models.probe_report import ProbeReport

    return ProbeReport


@FUZZ
@seed(SEED)
@given(doc=from_schema(_probe_report_model().model_json_schema(), hostile=True))
def test_probe_reports_load_render_and_merge_or_are_refused(tmp_path_factory, doc):
    from diagnoser.models.case import Case
    from diagnoser.models.probe_report import load_report
    from diagnoser.probes.to_case import merge_observations, observation_updates
    from diagnoser.report.probe import render_markdown, render_text

    path = _write(tmp_path_factory.mktemp("probe"), "probe.json", doc)
    before = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            report = load_report(path)
        except InputError as err:
            _one_line(err)
        else:
            render_text(report, 100)
            render_markdown(report)
            try:
                merged = merge_observations(Case(title="t").observations, observation_updates(report))
            except InputError as err:
                _one_line(err)
            else:
                assert _finite(merged.model_dump(mode="json"))
    _unchanged(path, before)


def _events() -> dict:
    return json.loads((REPO / "tests" / "data" / "trace" / "synthetic" / "rank0.json").read_text())


TRACE = _events()
EVENT_KEYS = st.sampled_from(["ts", "dur", "ph", "cat", "name", "pid", "tid", "args", "id"])


@FUZZ
@seed(SEED)
@given(
    edits=st.lists(st.tuples(st.integers(0, len(TRACE["traceEvents"]) - 1), EVENT_KEYS, BAD_LEAVES | st.integers(-(2**63), 2**63)), min_size=1, max_size=6),
    drop=st.booleans(),
)
def test_mutated_kineto_traces_analyze_or_are_refused(tmp_path_factory, edits, drop):
    from diagnoser.trace.analysis import analyze_traces
    from diagnoser.trace.facts import to_observations
    from diagnoser.trace.load import load_traces

    trace = copy.deepcopy(TRACE)
    for index, key, value in edits:
        event = trace["traceEvents"][index]
        if drop:
            event.pop(key, None)
        else:
            event[key] = value
    path = _write(tmp_path_factory.mktemp("trace"), "t.json", trace)
    before = path.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            analysis = analyze_traces(load_traces([path]), None, "clock", "auto")
            observations = to_observations(analysis)
        except InputError as err:
            _one_line(err)
        else:
            assert _finite(analysis.model_dump(mode="json"))
            assert _finite(observations.model_dump(mode="json"))
    _unchanged(path, before)


NSYS = SHARED / "nsys" / "nsys-ai" / "healthy_1pct.sqlite"


@pytest.mark.skipif(not NSYS.is_file(), reason="shared/ data folder not present beside the checkout")
@seed(SEED)
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(flips=st.lists(st.tuples(st.integers(100, 57_000), st.integers(0, 255)), min_size=1, max_size=8))
@example(flips=[(3527, 39)])  # a damaged schema: SQLite's message quotes it over several lines
@example(flips=[(3119, 128)])  # a string that is no longer UTF-8
def test_corrupted_nsight_exports_are_read_or_refused(tmp_path_factory, flips):
    from diagnoser.trace.analysis import analyze_traces
    from diagnoser.trace.load import load_traces

    path = tmp_path_factory.mktemp("nsys") / "t.sqlite"
    shutil.copyfile(NSYS, path)
    data = bytearray(path.read_bytes())
    for offset, value in flips:
        if offset < len(data):
            data[offset] = value
    path.write_bytes(bytes(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            analysis = analyze_traces(load_traces([path]), None, "clock", "auto")
        except InputError as err:
            _one_line(err)
        else:
            assert _finite(analysis.model_dump(mode="json"))
    assert path.read_bytes() == bytes(data)
