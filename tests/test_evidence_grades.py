"""Evidence grades: no cause is measured without a measured time, and no gain without one.

Walks every bundled fixture through the engine, so a rule added later is held to the same
contract without a test of its own.
"""

import pytest

from diagnoser.engine import diagnose, load_rulebook
from diagnoser.engine.fixtures import bundled_fixtures, fixture_files, load_fixtures
from diagnoser.models.case import Case
from diagnoser.models.hypothesis import Grade, Kind

ALL = [(f.name, fx) for f in fixture_files(bundled_fixtures()) for fx in load_fixtures(f)]


@pytest.fixture(scope="module")
def book():
    return load_rulebook()


def test_the_fixtures_cover_every_grade(book):
    seen = {h.grade for _, fx in ALL for h in diagnose(fx.case, book).of_kind(Kind.cause)}
    assert seen >= {Grade.measured, Grade.indicated, Grade.possible}


@pytest.mark.parametrize("fixture", [fx for _, fx in ALL], ids=[f"{f}:{fx.name}" for f, fx in ALL])
def test_grades_follow_the_evidence(fixture, book):
    d = diagnose(fixture.case, book)
    for h in d.hypotheses:
        if h.kind is not Kind.cause:
            assert h.grade is None, f"{h.id} is a {h.kind.value} with a grade"
            continue
        assert h.grade is not None, h.id
        if h.grade is Grade.measured:
            assert h.claimed_ms is not None, f"{h.id} is measured without a measured time"
        else:
            assert h.gain is None and h.claimed_ms is None, f"{h.id} is {h.grade.value} but bounds a gain"
        if h.gain is not None:
            assert h.grade is Grade.measured and h.gain.removable_ms <= h.claimed_ms + 1e-9
        if h.implied_by is not None:
            assert h.grade is not Grade.measured and h.gain is None


def test_a_config_only_case_names_indicated_causes_and_the_measurement_that_bounds_them(book):
    case = Case.model_validate({"observations": {"server": {"cuda_graphs": False, "custom_allreduce": False, "interconnect": "pcie"}}})
    d = diagnose(case, book)
    causes = {h.rule: h for h in d.of_kind(Kind.cause)}
    assert {"graphs-off", "custom-allreduce-off", "launch-gaps", "exposed-comm"} <= set(causes)
    for h in causes.values():
        assert h.grade is Grade.indicated and h.gain is None
        assert "budget" in h.bounded_by
    assert d.questions[0].input == "budget"
    assert {"graphs-off", "launch-gaps"} <= set(d.questions[0].would_bound)


def test_an_indicated_refinement_ranks_before_the_parent_it_implies(book):
    case = Case.model_validate({"observations": {"server": {"cuda_graphs": False}}})
    ranked = [h.rule for h in diagnose(case, book).of_kind(Kind.cause)]
    assert ranked.index("graphs-off") < ranked.index("launch-gaps")
    implied = next(h for h in diagnose(case, book).of_kind(Kind.cause) if h.rule == "launch-gaps")
    assert implied.implied_by == "graphs-off"


def test_a_concluded_rule_is_never_asked_for(book):
    """graph-capture-too-small concludes from the capture list; no question may say it cannot evaluate."""
    case = Case.model_validate(
        {"observations": {"graph": {"status": "partial", "captured_batch_sizes": [1, 2, 4, 8, 16], "live_batch_size": 48}}}
    )
    d = diagnose(case, book)
    concluded = {h.rule for h in d.hypotheses}
    assert "graph-capture-too-small" in concluded
    assert all(not set(q.would_evaluate) & concluded for q in d.questions)


def test_faster_than_the_floor_leads_and_no_launch_or_kernel_cause_does(book):
    case = Case.model_validate(
        {
            "workload": {"model": "qwen3-8b", "hardware": "h100-sxm", "batch": 1, "context": 1024, "observed": {"step_ms": 3},
                         "precision": {"weights": "bf16", "kv_cache": "bf16"}},
            "observations": {"budget": {"step_ms": 3, "device_ms": 1.5, "launch_ms": 1.5}},
        }
    )
    d = diagnose(case, book)
    assert d.hypotheses[0].rule == "faster-than-floor" and d.hypotheses[0].leads
    assert d.bound.observed_step_ms < d.bound.floor_ms


def test_every_format_shows_the_grade_the_unbounded_gain_and_at_most_three_questions(tmp_path):
    from conftest import run_cli

    path = tmp_path / "case.yaml"
    path.write_text("observations:\n  graph: {status: partial, captured_batch_sizes: [1, 2, 4, 8, 16], live_batch_size: 48}\n")
    text = run_cli("diagnose", str(path)).stdout
    assert "[graph-capture-too-small] Graphs are captured, but not for the live batch size (indicated)" in text
    assert "gain: not bounded yet: needs budget" in text
    asked = text.split("Next questions (what would settle the most):\n")[1].split("\n\n")[0].splitlines()
    assert len(asked) == 3 and asked[0].startswith("  1. step budget: profile ~20 decode steps")
    assert "bounds graph-capture-too-small, graph-partial, launch-gaps" in asked[0]
    markdown = run_cli("diagnose", str(path), "--markdown").stdout
    assert "(indicated)" in markdown and "## Next questions" in markdown
    assert markdown.split("## Next questions\n\n")[1].strip().count("\n") == 2
    html = run_cli("diagnose", str(path), "--html").stdout
    assert '<span class="grade indicated">indicated</span>' in html and '<section id="questions">' in html
    assert html.split('<section id="questions">')[1].count("<li>") == 3
    import json

    data = json.loads(run_cli("diagnose", str(path), "--json").stdout)
    assert len(data["questions"]) > 3 and data["questions"][0]["input"] == "budget"
    scores = [q["score"] for q in data["questions"]]
    assert scores == sorted(scores, reverse=True)
    assert {h["rule"]: h["grade"] for h in data["hypotheses"] if h["kind"] == "cause"} == {
        "graph-capture-too-small": "indicated", "graph-partial": "indicated", "launch-gaps": "indicated",
    }


def test_no_predicted_step_goes_below_the_physical_floor(book):
    # qwen3-8b at batch 1 on an H100 needs ~4.6 ms for its bytes; 6 of a 9 ms step cannot all go
    case = Case.model_validate(
        {
            "workload": {"model": "qwen3-8b", "hardware": "h100-sxm", "batch": 1, "context": 1024},
            "observations": {"budget": {"step_ms": 9, "device_ms": 3, "host_ms": 6}},
        }
    )
    d = diagnose(case, book)
    floor = d.bound.floor_ms
    host = next(h for h in d.hypotheses if h.rule == "host-overhead")
    assert host.claimed_ms == 6 and host.gain.capped_by == "the bound's floor"
    assert host.gain.after_ms == pytest.approx(floor)
    assert all(r.predicted_step_ms >= floor - 1e-9 for h in d.hypotheses for r in h.remedies if r.predicted_step_ms)


def test_a_cause_ranked_on_the_step_a_stream_sees_says_so(book):
    """Host time in the 4.73 ms decode step against 3.48 ms of prefill on top of it: both leave the 8.21 ms a
    stream waits per token, so host time ranks on that step, and the report gives both figures."""
    from diagnoser.report.diagnosis import render_text

    case = Case.model_validate({"observations": {
        "budget": {"step_ms": 4.73, "device_ms": 2.3, "launch_ms": 0.19, "host_ms": 2.24},
        "step_mix": {"decode_steps": 40, "mixed_steps": 10, "decode_step_ms": 4.73, "mixed_step_ms": 22.13},
    }})
    d = diagnose(case, book)
    causes = {h.rule: h for h in d.of_kind(Kind.cause)}
    prefill, host = causes["prefill-stalls"].gain, causes["host-overhead"].gain
    assert prefill.over_ms == 4.73 and prefill.step_ms == pytest.approx(8.21) and prefill.stream_step_ms is None
    assert host.step_ms == 4.73 and host.speedup == pytest.approx(4.73 / 2.49)  # its own figure stays
    assert host.stream_step_ms == pytest.approx(8.21) and host.stream_speedup == pytest.approx(8.21 / 5.97)
    assert [h.rule for h in d.of_kind(Kind.cause)][:2] == ["prefill-stalls", "host-overhead"]
    assert "ranked on the 8.21 ms a stream sees: 1.375x" in render_text(d)


def test_a_cause_the_case_names_ranks_before_one_the_floor_alone_names(book):
    """gpt-oss at batch 1, its step 2.5x the floor: few rows per expert holds for every deployment of the model at that
    batch, the quantized format on this GPU is what this case states; both are possible, the stated one leads."""
    case = Case.model_validate({
        "workload": {"model": "openai/gpt-oss-120b", "hardware": "NVIDIA GB10", "batch": 1, "precision": {"weights": "mxfp4"}},
        "observations": {"metrics": {"boundary": "engine", "per_user_tokens_per_s": 40, "concurrency": 1},
                         "server": {"quantization": "mxfp4"}},
    })
    causes = [h for h in diagnose(case, book).of_kind(Kind.cause) if h.grade is Grade.possible]
    ranked = [h.rule for h in causes]
    assert {"small-expert-kernels", "slow-kernel-path"} <= set(ranked)
    small = next(h for h in causes if h.rule == "small-expert-kernels")
    assert all(e.name.startswith("bound.") for e in small.evidence)
    assert ranked.index("slow-kernel-path") < ranked.index("small-expert-kernels")
