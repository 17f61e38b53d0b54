"""A rule explanation as text: the verdict first, then each way the rule can conclude."""

from __future__ import annotations

from diagnoser.models.explanation import RuleExplanation

VERDICTS = {
    "concluded": "concluded",
    "declined": "its conditions held, but its body declined (returned nothing)",
    "raised": "raised an error",
    "silent": "silent: no way to conclude matched the case",
}


def render_explanation(x: RuleExplanation) -> str:
    lines = [f"{x.rule} ({x.kind.value}): {x.title}"]
    if x.parent:
        lines.append(f"  refines {x.parent}")
    if x.requires:
        missing = f"; missing: {', '.join(x.missing_inputs)}" if x.missing_inputs else "; all present"
        lines.append(f"  requires {', '.join(x.requires)}{missing}")
    verdict = VERDICTS[x.outcome]
    if x.hypotheses:
        verdict += f": {', '.join(x.hypotheses)}"
    if x.error:
        verdict += f": {x.error}"
    lines.append(f"  verdict: {verdict}")
    for body in x.bodies:
        lines.append(f"  {body.body} ({body.defined_at}): {'matched' if body.matched else 'did not match'}")
        for c in body.conditions:
            lines.append(f"    {'ok ' if c.holds else 'NO '} {c.condition}")
            if c.detail:
                lines.append(f"         {c.detail}")
    return "\n".join(lines) + "\n"


def render_overview(explanations: list[RuleExplanation]) -> str:
    """One line per rule, for "why does nothing fire here?"."""
    lines = []
    for x in explanations:
        if x.outcome == "concluded":
            detail = ", ".join(x.hypotheses)
        elif x.outcome == "raised":
            detail = x.error or ""
        elif x.outcome == "declined":
            detail = "conditions held; the body returned nothing"
        else:
            detail = x.stopped_at
        lines.append(f"{x.rule:34} {x.kind.value:7} {x.outcome:9} {detail}")
    return "\n".join(lines) + "\n"
