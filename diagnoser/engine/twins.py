"""Does a new rule say what a bundled one already says? Judged by behaviour, not by text.

Two rules are the same claim when, on the new rule's own fixtures, a bundled cause concludes
wherever the new one does with the same removable time, and stays silent on the new rule's
near misses. That reads any rule alike (YAML or Python), whatever facts it names.
"""

from __future__ import annotations

from diagnoser.engine.fixtures import Diagnosed
from diagnoser.models.hypothesis import Kind

SAME_GAIN = 0.01  # removable times within 1 % are the same claim (fixture figures are exact)


def twins(diagnosed: list[Diagnosed], own: set[str]) -> dict[str, list[str]]:
    """For each of ``own`` rules, the other rules that fired with its gain on every fixture it
    fired on and were silent on every fixture that must keep it silent."""
    agreeing: dict[str, list[set[str]]] = {r: [] for r in own}  # per fixture it fired on: who claimed the same
    differing: dict[str, set[str]] = {r: set() for r in own}  # who fired on a near miss of it
    for one in diagnosed:
        causes = [h for h in one.diagnosis.hypotheses if h.kind is Kind.cause and h.gain]
        for rule in own:
            mine = [h.gain.removable_ms for h in causes if h.rule == rule]
            if rule in one.fixture.silent:
                differing[rule] |= {h.rule for h in causes}
            elif mine:
                agreeing[rule].append({
                    h.rule for h in causes
                    if h.rule not in own and abs(h.gain.removable_ms - mine[0]) <= SAME_GAIN * max(mine[0], 1e-9)
                })
    found = {rule: set.intersection(*sets) - differing[rule] for rule, sets in agreeing.items() if sets}
    return {rule: sorted(names) for rule, names in found.items() if names}
