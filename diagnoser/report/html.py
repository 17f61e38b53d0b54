"""A diagnosis as one self-contained HTML page: no scripts, no external assets, every text
escaped, so it can be attached to a ticket or mailed and opened anywhere.

Same order and wording as the text report, after the charts a person looks at first (the bound
against the observation, the budget, bytes by component, gains against their caps); each cause
also gets a bar for the share of the step it could remove at most.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from html import escape

from diagnoser.models.hypothesis import Diagnosis, Hypothesis, Kind
from diagnoser.report.charts import ChartInputs, charts_html
from diagnoser.report.diagnosis import QUESTIONS_SHOWN, gain_text, mark_suffix, question_text, sections, summary_lines
from diagnoser.report.figures import ms, quantity

_CODE_SPAN = re.compile(r"`([^`]+)`")

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; max-width: 64rem; margin: 2rem auto; padding: 0 1rem; color: #1d2330; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ccd; } h3 { font-size: 1.05rem; margin-bottom: .3rem; }
ul.summary { list-style: none; padding: 0; } ul.summary li { margin: .2rem 0; }
article { border-left: 4px solid #ccd; padding: .2rem 0 .4rem 1rem; margin: 1rem 0; }
article.cause { border-color: #c0392b; } article.guard { border-color: #d68910; }
article.check { border-color: #2874a6; } article.lesson { border-color: #7d8b99; }
.gain { display: flex; align-items: center; gap: .6rem; } .track { width: 14rem; height: .7rem; background: #eef; }
.bar { height: 100%; background: #c0392b; } table { border-collapse: collapse; margin: .4rem 0; }
td, th { border: 1px solid #dde; padding: .15rem .5rem; text-align: left; vertical-align: top; }
.grade { font-size: .8rem; padding: 0 .4rem; border-radius: .6rem; background: #eef; }
.grade.measured { background: #f5d5d0; } .grade.indicated { background: #fae5c0; } .unbounded { color: #7d5b00; }
article.marked-refuted h3 { text-decoration: line-through; color: #7d8b99; }
figure { margin: 1rem 0; } svg.chart { max-width: 100%; height: auto; }
dt { font-weight: 600; } dd { margin: 0 0 .3rem 1rem; } code { background: #f3f3f8; padding: 0 .2rem; }
"""


def _gain(h: Hypothesis) -> str:
    if h.gain is None:
        text = gain_text(h)
        return f'<p class="unbounded">{escape(text)}</p>' if text else ""
    width = f"{100 * h.gain.share_of_step:.1f}%"
    return (
        f'<div class="gain"><div class="track" title="share of the step it can remove">'
        f'<div class="bar" style="width: {width}"></div></div><span>{escape(gain_text(h))}</span></div>'
    )


def _evidence(h: Hypothesis) -> str:
    if not h.evidence:
        return ""
    rows = "".join(
        f"<tr><td><code>{escape(e.name)}</code></td><td>{escape(quantity(e.value, e.unit))}</td></tr>"
        for e in h.evidence
    )
    return f'<table class="evidence"><tr><th>evidence</th><th>value</th></tr>{rows}</table>'


def _check(h: Hypothesis) -> str:
    if h.check is None:
        return ""
    c = h.check
    return (
        f'<dl class="check"><dt>check</dt><dd>{with_code(c.measure)}</dd><dt>confirms</dt><dd>{with_code(c.confirms)}</dd>'
        f"<dt>refutes</dt><dd>{with_code(c.refutes)}</dd></dl>"
    )


def _remedies(h: Hypothesis) -> str:
    remedies = []
    for r in h.remedies:
        predicted = f" &rarr; {escape(ms(r.predicted_step_ms))}, {r.predicted_speedup:.3f}x" if r.predicted_speedup else ""
        remedies.append(f"<li>{with_code(r.action)} <em>(cost: {escape(r.cost)}; risk: {escape(r.risk)})</em>{predicted}</li>")
    undo = [f"<li><code>{escape(u.metric.value)}</code>: {with_code(u.revert_if)}</li>" for u in h.undo]
    out = f'<dl><dt>remedies</dt><dd><ul class="remedies">{"".join(remedies)}</ul></dd></dl>' if remedies else ""
    return out + (f'<dl><dt>undo when</dt><dd><ul class="undo">{"".join(undo)}</ul></dd></dl>' if undo else "")


def with_code(text: str) -> str:
    """Escaped text with its `backticked` spans set as code, as Markdown would show them."""
    return _CODE_SPAN.sub(r"<code>\1</code>", escape(text))


def _article(h: Hypothesis, index: int, marks: Mapping[str, str] | None) -> str:
    refines = f'<p class="refines">refines <code>{escape(h.parent)}</code></p>' if h.parent else ""
    grade = f' <span class="grade {h.grade.value}">{h.grade.value}</span>' if h.grade else ""
    mark = (marks or {}).get(h.id)
    css = h.kind.value + (f" marked-{mark.replace(' ', '-')}" if mark else "")
    return (
        f'<article class="{css}" id="{escape(h.id)}">'
        f"<h3>{index}. <code>{escape(h.id)}</code> {escape(h.title)}{grade}{escape(mark_suffix(h, marks))}</h3>"
        f"{_gain(h)}{refines}<p>{with_code(h.explanation)}</p>{_evidence(h)}{_check(h)}{_remedies(h)}</article>"
    )


def render_html(
    d: Diagnosis, verdict: str | None = None, marks: Mapping[str, str] | None = None, charts: ChartInputs | None = None
) -> str:
    title = f"Diagnosis: {d.title}" if d.title else "Diagnosis"
    summary = "".join(f"<li>{escape(line)}</li>" for line in summary_lines(d, verdict))
    body = [f"<h1>{escape(title)}</h1>", f'<ul class="summary">{summary}</ul>', charts_html(d, charts)]
    for css, heading, items in sections(d):
        body.append(f'<section class="{css}"><h2>{escape(heading)}</h2>')
        body += [_article(h, i, marks) for i, h in enumerate(items, 1)]
        body.append("</section>")
    if not d.of_kind(Kind.cause):
        body.append("<p><em>No cause named yet.</em></p>")
    if d.questions:
        asked = "".join(f"<li>{with_code(question_text(q))}</li>" for q in d.questions[:QUESTIONS_SHOWN])
        body.append(f'<section id="questions"><h2>Next questions</h2><ol>{asked}</ol></section>')
    if d.rule_errors:
        errors = "".join(f"<li><code>{escape(e.rule)}</code>: {escape(e.error)}</li>" for e in d.rule_errors)
        body.append(f'<section id="rule-errors"><h2>Rule errors (the other rules still ran)</h2><ul>{errors}</ul></section>')
    body.append(f"<footer><p>{d.rules_loaded} rules loaded.</p></footer>")
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
