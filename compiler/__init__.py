"""lemongraph's functional core: the condition language, playbooks, the JobGraph
decision function, the scenario simulator, and flows (the language and
the interface of their step function, docs/flows.md).

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
from ._flow import (
    BUILTIN_CHANNELS,
    END,
    FLOW_RULES,
    FLOW_WARNINGS,
    Flow,
    FlowError,
    FlowMilestone,
    FlowProblem,
    FlowReport,
    FlowSpec,
    FlowTool,
    check_flow,
    load_flow,
)
from ._flowrun import (
    Action,
    Answer,
    Ask,
    AwaitApproval,
    Branch,
    CallHandler,
    CallModel,
    CallRouter,
    CallTool,
    Fail,
    Finish,
    FlowFailure,
    FlowInput,
    FlowRun,
    FlowStart,
    FlowState,
    FlowTick,
    HandlerResult,
    Interrupt,
    Join,
    ModelReply,
    RouterResult,
    ToolResult,
    action_from_json,
    call_id,
    interrupt_id,
)
from ._flowrun import input_from_json as flow_input_from_json
from ._flowschema import check_schema
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
    "BUILTIN_CHANNELS",
    "DEFAULT_WINDOW",
    "END",
    "FLOW_RULES",
    "FLOW_WARNINGS",
    "MAX_REMEMBERED_KEYS",
    "MAX_WINDOW",
    "Action",
    "And",
    "Answer",
    "Ask",
    "Atom",
    "AtomReport",
    "AwaitApproval",
    "Branch",
    "CallHandler",
    "CallModel",
    "CallRouter",
    "CallTool",
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
    "Fail",
    "Finish",
    "Flow",
    "FlowError",
    "FlowFailure",
    "FlowInput",
    "FlowMilestone",
    "FlowProblem",
    "FlowReport",
    "FlowRun",
    "FlowSpec",
    "FlowStart",
    "FlowState",
    "FlowTick",
    "FlowTool",
    "GraphMismatch",
    "HandlerResult",
    "Input",
    "Interrupt",
    "JobFinished",
    "JobGraph",
    "JobState",
    "Join",
    "LemongraphError",
    "Located",
    "Member",
    "Milestone",
    "MilestoneSpec",
    "MilestoneState",
    "ModelReply",
    "Monitor",
    "Not",
    "Or",
    "Playbook",
    "PlaybookError",
    "PlaybookProblem",
    "PlaybookSpec",
    "RouterResult",
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
    "ToolResult",
    "Transition",
    "Verdict",
    "action_from_json",
    "call_id",
    "canonical_json",
    "check_flow",
    "check_schema",
    "compile_condition",
    "compile_playbook",
    "field_problem",
    "flow_input_from_json",
    "format_offset",
    "from_iso",
    "input_from_json",
    "interrupt_id",
    "load_flow",
    "load_located",
    "load_playbook",
    "parse_duration",
    "parse_scenarios",
    "refusal",
    "run_scenario",
    "task_id",
    "to_iso",
]
