"""``diagnoser rules new ID``: a YAML rule and its fixture pair, green from the first run.

The scaffold is a complete rule (a measured part of the budget over a named threshold) so that
`rules test` passes before the author changes anything; each field says what to put there.
"""

from __future__ import annotations

import re
from pathlib import Path

from diagnoser.errors import InputError
from diagnoser.fileio import write_atomic

RULE_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

RULE_TEMPLATE = """\
# {rule_id}: a rule written only in YAML (docs/writing-rules.md, "A rule in YAML only").
# `diagnoser rules facts` lists the fields a condition may name; `diagnoser rules test {fixtures} --rules {rules}` runs it.
# Every TODO is yours to write. The condition and claim are a worked example (time a step spends queued on its
# stream) so the fixtures pass from the start: replace them, then the fixtures, with the physics of {rule_id}.
{rule_id}:
  title: "TODO: {rule_id}, the cause in one line"
  thresholds:                       # every cut-off the condition reads: value, unit and why that value
    MIN_SHARE: {{value: 0.1, unit: fraction, why: "TODO: why this cut-off (the example's: below a tenth of the step is ordinary)"}}
  when: Budget.queue_ms >= MIN_SHARE * Budget.step_ms
  claims: Budget.queue_ms           # the measured time it may remove (or `parent`, or leave out: indicated)
  explanation: "TODO: what {rule_id} costs per step, and why the condition shows it"
  check:
    measure: "TODO: the measurement that tells {rule_id} from the causes it could be mistaken for"
    confirms: "TODO: what that measurement shows when {rule_id} holds"
    refutes: "TODO: what it shows when it does not"
  remedies:
  - action: "TODO: the change that removes it"
    cost: "TODO: configuration, engine flag, code change, hardware"
    risk: "TODO: what the change could break"
  undo:
  - metric: per_user_latency
    revert_if: "TODO: what, measured after the change, says to revert it"
"""

FIXTURE_TEMPLATE = """\
# Fixtures for {rule_id}: one case where it must fire, one near miss that differs only in the deciding fact.
fixtures:
  - name: {rule_id} fires - 3 of 10 ms queued (the worked example; TODO your case)
    case:
      observations:
        budget: {{step_ms: 10, device_ms: 7, queue_ms: 3}}
    fires: [{rule_id}]
    grades: {{{rule_id}: measured}}
    speedup: {{{rule_id}: 1.4286}}   # 10 / (10 - 3)
  - name: {rule_id} near miss - 0.5 of 10 ms queued is under the threshold (TODO the same case, the deciding fact just short)
    case:
      observations:
        budget: {{step_ms: 10, device_ms: 9.5, queue_ms: 0.5}}
    silent: [{rule_id}]
"""


def scaffold(rule_id: str, folder: Path, known_ids: set[str]) -> tuple[Path, Path]:
    """Write ``ID.yaml`` and ``ID-fixtures.yaml`` in ``folder``; refuse a bad or taken id and existing files."""
    if not RULE_ID.match(rule_id):
        raise InputError(f"rule id {rule_id!r}: lower-case words joined by hyphens, e.g. queued-behind-stream")
    if rule_id in known_ids:
        raise InputError(f"rule id {rule_id!r} is already a loaded rule; `diagnoser rules show {rule_id}` shows it")
    if not folder.is_dir():
        raise InputError(f"{folder}: not a folder")
    rules, fixtures = folder / f"{rule_id}.yaml", folder / f"{rule_id}-fixtures.yaml"
    for path in (rules, fixtures):
        if path.exists():
            raise InputError(f"{path}: already exists; choose another id or folder")
    write_atomic(rules, RULE_TEMPLATE.format(rule_id=rule_id, rules=rules, fixtures=fixtures))
    write_atomic(fixtures, FIXTURE_TEMPLATE.format(rule_id=rule_id))
    return rules, fixtures
