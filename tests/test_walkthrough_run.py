"""The reference walkthrough accepts the reference's figures and rejects its common mistakes, by name.

Answer files in tests/data/walkthrough_answers drive the UI-free run object, the way a class or
the CLI's --answers does; the figures themselves are recomputed here from the calculators.
"""

import pytest
import yaml

from conftest import REPO
from diagnoser.walkthroughs import WalkthroughRun, load_catalogue
from diagnoser.walkthroughs.answers import Unreadable
from diagnoser.walkthroughs.result import Outcome

ANSWERS = REPO / "tests" / "data" / "walkthrough_answers"


@pytest.fixture(scope="module")
def catalogue():
    return load_catalogue()


def scripted(prepared, answers: dict):
    run = WalkthroughRun(prepared)
    while (view := run.view()) is not None:
        run.submit(answers.get(view.id))
    return run.result()


def by_step(result):
    return {v.step: v for v in result.steps}


def test_the_reference_figures_as_the_reference_writes_them_are_all_accepted(catalogue):
    answers = yaml.safe_load((ANSWERS / "decode-gap-reference.yaml").read_text())
    result = scripted(catalogue["decode-gap"], answers)
    steps = by_step(result)
    # 5 ms, 200 tokens/s, 50 tokens/s, 25 %, 1.125x, 4.161 and 2.34x, 0.70x, 8 tokens at acceptance 1
    for step, written in [("floor-ms", "5 ms"), ("ceiling", "200 tokens/s"), ("observed-rate", "50 tokens/s"),
                          ("fraction", "25 %"), ("graph-gain", "1.125x"), ("spec-tokens", "4.161"),
                          ("spec-speedup", "2.34x"), ("spec-low", "0.70x"), ("spec-tokens-a1", "8 tokens")]:
        assert str(answers[step]) == written
        assert steps[step].outcome is Outcome.correct, (step, steps[step].why)
    assert [v.step for v in result.steps if v.outcome is not Outcome.correct] == []
    assert result.complete and result.earned == result.possible == len(result.steps)


def test_each_common_mistake_is_recognised_as_its_trap_and_explained_by_the_engine(catalogue):
    answers = yaml.safe_load((ANSWERS / "decode-gap-mistakes.yaml").read_text())
    steps = by_step(scripted(catalogue["decode-gap"], answers))
    assert {s for s in answers if steps[s].outcome is not Outcome.trap} == set()
    named = {
        "moe-floor": ("active-parameter bytes as traffic", "[active-params-as-traffic]"),
        "spec-speedup": ("a speculation gain without draft and verify cost", "[speculation-without-cost]"),
        "ranks-step": ("overlapped rank durations added into one step", "[overlap-summed]"),
        "graph-gain": ("a graph promised to remove a whole gap", "[graphs-remove-launch-share-only]"),
    }
    for step, (trap, guard) in named.items():
        verdict = steps[step]
        assert verdict.trap == trap and verdict.earned == 0
        assert any(guard in line for line in verdict.why), verdict.why  # the engine, run on the mistake, names it
    assert any("speed-up is 2.34x, not 4.16x" in line for line in steps["spec-speedup"].why)
    assert any("at most 1.5 of 9 ms" in line for line in steps["graph-gain"].why)


def test_a_wrong_number_that_is_no_known_mistake_is_wrong_not_a_trap(catalogue):
    run = WalkthroughRun(catalogue["decode-gap"])
    run.submit("b d a e c f")
    run.submit("a")
    verdict = run.submit("7 ms")  # floor-ms
    assert verdict.outcome is Outcome.wrong and verdict.trap is None and verdict.expected.startswith("5 ms")
    # its working also holds the answers to steps 4-7, so it waits for step 7, the last that reads it
    assert verdict.worked == ["shown after step 7, the last that reads this calculation (it holds the answers up to there)"]
    for answer in ("200 tokens/s", "50 tokens/s", "25%", "15 ms"):
        verdict = run.submit(answer)
    assert verdict.outcome is Outcome.correct
    assert any("memory-only floor = 10 GB / 2 TB/s = 5 ms" in line for line in verdict.worked)


def test_no_working_gives_away_a_later_steps_answer_or_repeats(catalogue):
    from diagnoser.walkthroughs import explain
    from diagnoser.walkthroughs.model import NumberStep

    for name, prepared in catalogue.items():
        steps = prepared.doc.steps
        shown = []
        for i, step in enumerate(steps):
            working = explain.worked(prepared, step)
            text = " ".join(working)
            for later in steps[i + 1:]:
                if isinstance(later, NumberStep) and len(explain.worked(prepared, later)) > 1:
                    figure = explain.expected_text(prepared, later).split(" ")[0]
                    if len(figure.strip("0.")) >= 3:  # a figure distinctive enough to be the answer, not a coincidence
                        assert figure not in text, f"{name}: step {i + 1}'s working gives away {later.id} ({figure})"
            if len(working) > 1:
                assert working not in shown, f"{name}: step {i + 1} repeats a working already shown"
                shown.append(working)


def test_answers_are_read_in_the_steps_unit_and_unreadable_ones_say_what_was_expected(catalogue):
    run = WalkthroughRun(catalogue["decode-gap"])
    with pytest.raises(Unreadable, match="all 6 items"):
        run.read("a b")
    assert run.read(["pin", "bound", "trace", "critical-path", "bound-change", "service"])[0] == "pin"
    run.submit("b d a e c f")
    with pytest.raises(Unreadable, match="one letter"):
        run.read("z")
    assert run.read("A") == "count-and-boundary"
    run.submit("a")
    assert run.read("5ms") == run.read(5) == 5.0
    with pytest.raises(Unreadable, match="this step is in ms"):
        run.read("5 s")
    assert run.submit("five").outcome is Outcome.unreadable
    assert run.view().id == "ceiling"  # a scripted unreadable answer is recorded and the run moves on


def test_the_score_breaks_down_by_skill_and_unreached_steps_count_as_skipped(catalogue):
    run = WalkthroughRun(catalogue["decode-gap"])
    run.submit("b d a e c f")  # method, right
    run.submit("tune-kernels")  # method, wrong
    run.submit(None)  # floor, skipped
    result = run.result()
    assert not result.complete and len(result.steps) == 24
    skills = {s.skill: s for s in result.skills}
    assert (skills["method"].earned, skills["method"].possible) == (1, 3)
    assert skills["floor"].earned == 0 and skills["floor"].steps == 6
    assert sum(s.possible for s in result.skills) == result.possible
    assert result.steps[2].outcome is Outcome.skipped and result.steps[-1].why == ["not reached"]
    assert result.percent == pytest.approx(100 / 24)


def test_a_case_walkthrough_reveals_the_engine_ranking_and_what_the_thread_found(catalogue):
    prepared = catalogue["case-d16-graph-replay"]
    result = scripted(prepared, {"next-measurement": "graph-launches", "cause": "graph-not-replaying", "gain": "a"})
    assert result.percent == 100
    cause = by_step(result)["cause"]
    assert cause.engine[-2].startswith("engine ranks 1. [graph-not-replaying]")
    assert "32 x 16 = 512" in result.debrief and result.source.startswith("https://github.com/sgl-project/")


def test_case_d16_reads_the_capture_limit_the_scenario_gives(catalogue):
    """The scenario says graphs are captured up to 160 (the case writes it as the server's setting);
    the engine reads it as the capture limit and does not ask for it again."""
    from diagnoser.engine import diagnose
    from diagnoser.models.case import load_case

    book = catalogue["case-d16-graph-replay"].book
    d = diagnose(load_case(REPO / "diagnoser" / "walkthroughs" / "scenarios" / "cases" / "D16.yaml"), book)
    hit = next(h for h in d.hypotheses if h.rule == "graph-not-replaying")
    assert {(e.name, e.value) for e in hit.evidence} >= {("graph.max_captured_batch", 160), ("graph.live_units", 32)}
    assert not any(q.input.startswith(("graph", "server")) for q in d.questions)
