"""The HTML report: well formed, same content and order as the JSON, every text escaped."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import pytest

from conftest import REPO, run_cli
from diagnoser.engine import diagnose, load_rulebook
from diagnoser.models.case import Case, load_case
from diagnoser.report import render_html

MOE = REPO / "examples" / "case-moe-small-experts.yaml"
VOID = {"meta", "br", "hr", "img", "link", "input"}


class Outline(HTMLParser):
    """Checks nesting and collects what a reader would see."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.articles: list[tuple[str, str]] = []  # (class, id)
        self.bars: list[str] = []
        self.scripts = 0
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self.scripts += 1
        if tag == "article":
            self.articles.append((attrs["class"], attrs["id"]))
        if tag == "div" and attrs.get("class") == "bar":
            self.bars.append(attrs["style"])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def outline(page: str) -> Outline:
    parser = Outline()
    parser.feed(page)
    parser.close()
    return parser


@pytest.fixture(scope="module")
def moe():
    return diagnose(load_case(MOE), load_rulebook())


def test_page_is_well_formed_and_self_contained(moe):
    page = render_html(moe)
    o = outline(page)
    assert o.problems == [] and o.stack == []
    assert o.scripts == 0 and "http" not in page  # nothing to fetch, nothing to run


def test_same_hypotheses_in_the_same_order_as_the_json(moe):
    o = outline(render_html(moe))
    assert [hid for _, hid in o.articles] == [h.id for h in moe.hypotheses]
    assert [cls for cls, _ in o.articles] == [h.kind.value for h in moe.hypotheses]
    text = " ".join(o.text)
    assert "Verdict: leading cause small-expert-kernels (measured, at most 1.619x" in text
    for h in moe.hypotheses:
        for e in h.evidence:
            assert e.name in text


def test_gain_bars_show_the_share_of_the_step(moe):
    o = outline(render_html(moe))
    causes = [h for h in moe.hypotheses if h.gain is not None]
    assert o.bars == [f"width: {100 * h.gain.share_of_step:.1f}%" for h in causes]
    top = causes[0]
    assert top.gain.share_of_step == pytest.approx(top.gain.removable_ms / top.gain.step_ms)


def test_every_text_is_escaped():
    hostile = "<script>alert('x')</script> & </article>"
    case = Case.model_validate({"title": hostile, "observations": {"budget": {"step_ms": 9, "device_ms": 5.5, "launch_ms": 2.5, "host_ms": 1}}})
    page = render_html(diagnose(case, load_rulebook()))
    o = outline(page)
    assert o.scripts == 0 and o.problems == []
    assert hostile not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;/article&gt;" in page
    assert f"Diagnosis: {hostile}" in " ".join(o.text)  # a reader still sees the title as written


def test_backticked_commands_are_code_not_literal_backticks(moe):
    page = render_html(moe)
    assert "`" not in " ".join(outline(page).text)  # checks, remedies, questions: every `command` is set as code
    assert "<code>diagnoser bound</code>" in page


def test_cli_writes_the_page_and_refuses_two_formats(tmp_path):
    target = tmp_path / "report.html"
    out = run_cli("diagnose", str(MOE), "--html", "-o", str(target))
    assert out.returncode == 0 and out.stdout == ""
    assert target.read_text().startswith("<!doctype html>")
    out = run_cli("diagnose", str(MOE), "--html", "--json")
    assert out.returncode == 2 and out.stderr.strip() == "diagnoser: error: --json and --html: choose one output format"
    data = json.loads(run_cli("diagnose", str(MOE), "--json").stdout)
    assert all("share_of_step" in h["gain"] for h in data["hypotheses"] if h["gain"])
