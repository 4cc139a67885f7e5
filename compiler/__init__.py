"""lemongraph's functional core: the condition language, playbooks, the JobGraph
decision function and the scenario simulator.

This package contains no I/O, reads no clock and draws no random numbers: give it
data (text, events, ``now``), get data back. A lint rule (``compiler/ruff.toml``)
keeps it that way.
"""

from ._ast import And, Atom, Compare, Count, Exists, Expr, FactRef, Member, Not, Or
from ._condition import (
    AtomReport,
    Condition,
    Explanation,
    Monitor,
    Tally,
    compile_condition,
)
from ._errors import ConditionError, LemongraphError
from ._facts import Fact
from ._parser import DEFAULT_WINDOW, MAX_WINDOW, Duration
from ._verdict import Verdict

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_WINDOW",
    "And",
    "Atom",
    "AtomReport",
    "Compare",
    "Condition",
    "ConditionError",
    "Count",
    "Duration",
    "Exists",
    "Explanation",
    "Expr",
    "Fact",
    "FactRef",
    "LemongraphError",
    "Member",
    "Monitor",
    "Not",
    "Or",
    "Tally",
    "Verdict",
    "compile_condition",
]
