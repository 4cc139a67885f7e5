"""lemongraph's functional core: the condition language, playbooks, the JobGraph
decision function and the scenario simulator.

This package contains no I/O, reads no clock and draws no random numbers: give it
data (text, events, ``now``), get data back. A lint rule (``compiler/ruff.toml``)
keeps it that way.

Compiled: the modules on a decision's path are compiled with mypyc at install
time (``setup.py``; ``stream/native.py`` says whether they are). The source is
plain, typed Python and runs unchanged when not compiled. Two habits serve the
compiled build: the value classes a decision makes many of spell out their
``__init__`` (mypyc compiles what is written; the methods ``dataclass``
generates stay interpreted, and constructing through them cost ~10x more),
and code states its types exactly, because a compiled function checks them
(``Event(id=3)`` is a TypeError there). Compiled value classes cannot be
copied with ``copy`` or pickled; nothing here does either.
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
from ._durations import format_offset, parse_duration
from ._effects import (
    Effect,
    JobFinished,
    Step,
    TaskClosed,
    TaskOpened,
    TimerCancelled,
    TimerSet,
    Transition,
    task_id,
)
from ._errors import ConditionError, GraphMismatch, LemongraphError
from ._facts import Fact
from ._inputs import Event, Input, Source, Start, Tick, input_from_json
from ._jobgraph import JobGraph, refusal
from ._parser import DEFAULT_WINDOW, MAX_WINDOW, Duration
from ._playbook import (
    Milestone,
    MilestoneSpec,
    Playbook,
    PlaybookError,
    PlaybookProblem,
    PlaybookSpec,
    compile_playbook,
    load_playbook,
)
from ._simulate import (
    Coverage,
    Expectation,
    Scenario,
    ScenarioError,
    ScenarioEvent,
    ScenarioFile,
    ScenarioResult,
    parse_scenarios,
    run_scenario,
)
from ._source import Located, SourceError, field_problem, load_located
from ._state import MAX_REMEMBERED_KEYS, JobState, MilestoneState, Timer, canonical_json
from ._time import from_iso, to_iso
from ._verdict import Verdict

__all__ = [
    "DEFAULT_WINDOW",
    "MAX_REMEMBERED_KEYS",
    "MAX_WINDOW",
    "And",
    "Atom",
    "AtomReport",
    "Compare",
    "Condition",
    "ConditionError",
    "Count",
    "Coverage",
    "Duration",
    "Effect",
    "Event",
    "Exists",
    "Expectation",
    "Explanation",
    "Expr",
    "Fact",
    "FactRef",
    "GraphMismatch",
    "Input",
    "JobFinished",
    "JobGraph",
    "JobState",
    "LemongraphError",
    "Located",
    "Member",
    "Milestone",
    "MilestoneSpec",
    "MilestoneState",
    "Monitor",
    "Not",
    "Or",
    "Playbook",
    "PlaybookError",
    "PlaybookProblem",
    "PlaybookSpec",
    "Scenario",
    "ScenarioError",
    "ScenarioEvent",
    "ScenarioFile",
    "ScenarioResult",
    "Source",
    "SourceError",
    "Start",
    "Step",
    "Tally",
    "TaskClosed",
    "TaskOpened",
    "Tick",
    "Timer",
    "TimerCancelled",
    "TimerSet",
    "Transition",
    "Verdict",
    "canonical_json",
    "compile_condition",
    "compile_playbook",
    "field_problem",
    "format_offset",
    "from_iso",
    "input_from_json",
    "load_located",
    "load_playbook",
    "parse_duration",
    "parse_scenarios",
    "refusal",
    "run_scenario",
    "task_id",
    "to_iso",
]
