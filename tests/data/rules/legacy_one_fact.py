"""The Python forms of the rules that moved to rules/one_fact.yaml, kept to replay every fixture
through both forms (tests/test_declarative_rules.py) while both exist."""

from pathlib import Path

import yaml

from diagnoser.engine import MATCH, TEST, Finding, Graph, Host, RuleSet, RuleSpec, ev, rule
from diagnoser.engine.declarative import DECLARATIVE_KEYS

_YAML = Path(__file__).resolve().parents[3] / "rules" / "one_fact.yaml"
SPECS = {
    rule_id: RuleSpec.model_validate({"id": rule_id, **{k: v for k, v in raw.items() if k not in DECLARATIVE_KEYS}})
    for rule_id, raw in yaml.safe_load(_YAML.read_text()).items()
}

# GIL busy above 80 % means the step loop queues for it most of the time.
GIL_BUSY = 0.8


class LegacyOneFactRules(RuleSet):
    @rule(SPECS["graph-partial"], Graph(status="partial"))
    def legacy_graph_partial(self, parent_cap_ms):
        return Finding(evidence=[ev("graph.status", "partial")], removable_ms=parent_cap_ms)

    @rule(SPECS["gil-contention"], Host(python_gil_busy_fraction=MATCH.busy), TEST(lambda busy: busy >= GIL_BUSY))
    def legacy_gil_contention(self, busy, parent_cap_ms):
        return Finding(evidence=[ev("host.python_gil_busy_fraction", busy)], removable_ms=parent_cap_ms)
