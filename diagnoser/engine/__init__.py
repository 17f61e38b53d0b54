"""The rule engine: facts from a case, rules from packs, ranked hypotheses out.

Rule authors need only this module: ``RuleSet``, ``rule``, ``load_specs`` (or ``RuleSpec``
inline), ``Finding``, ``ev``, the fact classes and the experta pattern names.
"""

from diagnoser.engine.facts import (
    Bound,
    Boundaries,
    BoundaryPair,
    Budget,
    Claim,
    ClaimedStep,
    Collective,
    ConfoundedChange,
    ContextSweep,
    Device,
    Expectation,
    Graph,
    Holds,
    Host,
    HostCostFact,
    KernelClass,
    KernelSum,
    Layout,
    Memory,
    Metrics,
    ObservedStep,
    Platform,
    Probe,
    QuotedBound,
    RankBudget,
    Reference,
    RepeatDecline,
    Routing,
    RunDiff,
    Server,
    Shares,
    Speculation,
    StepMix,
    Stream,
    Traffic,
)
from diagnoser.engine.loader import Rulebook, load_rulebook
from diagnoser.engine.runner import diagnose
from diagnoser.engine.spec import (
    Finding,
    RemedySpec,
    RuleSet,
    RuleSpec,
    ev,
    load_specs,
    rule,
    undo,
)
from diagnoser.experta_compat import AS, MATCH, NOT, OR, TEST, L, P, W
from diagnoser.models.hypothesis import Check, Grade, Kind

__all__ = [
    "AS", "MATCH", "NOT", "OR", "TEST", "L", "P", "W",
    "Bound", "Boundaries", "BoundaryPair", "Budget", "Claim", "ClaimedStep", "Collective", "ConfoundedChange", "ContextSweep", "Device",
    "Graph", "Holds", "Host", "KernelClass", "KernelSum", "Layout", "Probe", "QuotedBound", "RankBudget",
    "Reference", "RepeatDecline", "Server", "Speculation", "Expectation", "HostCostFact", "Memory", "Metrics", "ObservedStep", "Platform", "Routing",
    "RunDiff", "Shares", "StepMix", "Stream", "Traffic",
    "Check", "Finding", "Grade", "Kind", "RemedySpec", "RuleSet", "RuleSpec", "Rulebook",
    "diagnose", "ev", "load_rulebook", "load_specs", "rule", "undo",
]
