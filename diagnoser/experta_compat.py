"""The one place that imports experta.

experta 1.9.4 pins frozendict 1.2, which subclasses ``collections.Mapping``; that alias left
the stdlib in Python 3.10. Restoring the ``collections.abc`` names before the import keeps the
stock pins (so a plain ``pip install`` resolves) and works on 3.10-3.13. Import experta from
here only: anywhere else the alias may not be set yet.
"""

from __future__ import annotations

import collections
import collections.abc

for _name in ("Mapping", "MutableMapping", "Sequence", "Iterable", "Hashable", "Callable"):
    if not hasattr(collections, _name):
        setattr(collections, _name, getattr(collections.abc, _name))

# experta/__init__.py swallows ImportError, hiding a missing dependency behind a confusing
# "cannot import name KnowledgeEngine"; importing the engine module first surfaces the real cause.
import experta.engine  # noqa: E402,F401
from experta import AND, AS, MATCH, OR, TEST, Fact, KnowledgeEngine, L, P, Rule, W  # noqa: E402
from experta import NOT as _NOT  # noqa: E402
from experta.fieldconstraint import ANDFC, NOTFC, ORFC  # noqa: E402


class NOT(_NOT):
    """experta's NOT, held to the one pattern it honours: its network wires only a NOT's first element and drops
    the rest without a word, so ``NOT(A, TEST(...))`` reads as ``NOT(A)`` and ``NOT(AND(A, B))`` is turned into
    ``NOT(A) or NOT(B)``. A condition across several facts belongs in the rule's body (return None) or in a fact
    derived beforehand."""

    def __new__(cls, *patterns):
        if len(patterns) != 1 or not isinstance(patterns[0], Fact):
            raise TypeError(f"NOT takes one fact pattern, got {len(patterns)} element(s): experta ignores all but the first")
        return super().__new__(cls, *patterns)

__all__ = ["AND", "ANDFC", "AS", "MATCH", "NOT", "NOTFC", "OR", "ORFC", "TEST", "Fact", "KnowledgeEngine", "L", "P", "Rule", "W"]
