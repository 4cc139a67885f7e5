"""The step function of flows: its state, its inputs and its actions, as values
(docs/flows.md, "Running a flow").

``FlowRun(flow).next(state, input, now)`` is pure: it reads no clock (``now`` is
an argument), calls no model, tool or registered function, and draws no random
number. It returns the new state and the actions the runtime must carry out;
the runtime feeds each action's result back as the next input. Registered
functions (handlers, routers) are run by the runtime too, so a replay reads
their recorded results and never calls them again.

Every model is frozen and JSON-serialisable: ``x.model_dump(mode="json", by_alias=True)`` and
``Model.model_validate(data)`` round-trip it (``input_from_json`` and
``action_from_json`` read the unions by their ``kind``).

Ids (docs/flows.md, "Ids") come from our own data only, never from a model's
output: a call is ``{run_id}/{node}/{visit}/{attempt}``, with ``/{item}`` after
it for a fan-out copy (the item's 0-based index); an interrupt is
``{run_id}/{node}/{visit}``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

if TYPE_CHECKING:
    from ._flow import Flow

__all__ = [
    "Action",
    "Answer",
    "Ask",
    "AwaitApproval",
    "Branch",
    "CallHandler",
    "CallModel",
    "CallRouter",
    "CallTool",
    "Fail",
    "Finish",
    "FlowFailure",
    "FlowInput",
    "FlowRun",
    "FlowStart",
    "FlowState",
    "FlowTick",
    "HandlerResult",
    "Interrupt",
    "Join",
    "ModelReply",
    "RouterResult",
    "ToolResult",
    "action_from_json",
    "call_id",
    "input_from_json",
    "interrupt_id",
]


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def call_id(run_id: str, node: str, visit: int, attempt: int, item: int | None = None) -> str:
    """The id of one call a node makes: ``{run_id}/{node}/{visit}/{attempt}``,
    plus ``/{item}`` for a fan-out copy. ``visit`` and ``attempt`` are 1-based."""
    base = f"{run_id}/{node}/{visit}/{attempt}"
    return base if item is None else f"{base}/{item}"


def interrupt_id(run_id: str, node: str, visit: int, item: int | None = None) -> str:
    """The id of one question or approval: ``{run_id}/{node}/{visit}`` (plus
    ``/{item}`` for a fan-out copy): a second visit asks anew, with a new id."""
    base = f"{run_id}/{node}/{visit}"
    return base if item is None else f"{base}/{item}"


# ---------------------------------------------------------------------------
# State


class Branch(_Value):
    """One place the run is at: a node about to run, running, or waiting.

    A run has one branch, except while a fan-out's copies run (one branch per
    item, ``fanout`` and ``item`` set).
    """

    node: str
    #: How many times this node has been entered in this run, this one included
    #: (1-based; fan-out copies of one spread share the visit).
    visit: int = Field(ge=1)
    #: The attempt at the node (1-based; ``retry.max_attempts`` bounds it).
    attempt: int = Field(1, ge=1)
    #: The fan-out node that made this copy, and the copy's item index (0-based).
    fanout: str | None = None
    item: int | None = None
    #: The value of the fan-out's ``as`` channel for this copy.
    item_value: Any = None
    #: The call this branch waits on (``CallModel``/``CallTool``/``CallHandler``/
    #: ``CallRouter``), or None while it is not waiting on a call.
    call_id: str | None = None
    #: What the branch waits on when ``call_id`` is set.
    waiting: Literal["model", "tool", "handler", "router"] | None = None


class Join(_Value):
    """A fan-out in progress: ``items`` copies of ``target``; the node after
    ``target`` runs once, when every index is in ``done``."""

    fanout: str
    visit: int = Field(ge=1)
    target: str
    items: int = Field(ge=0)
    done: tuple[int, ...] = ()


class Interrupt(_Value):
    """The question or approval the run is suspended on (one at a time)."""

    interrupt_id: str
    node: str
    kind: Literal["ask", "approval"]
    question: str
    #: The allowed answers (empty: any answer).
    answers: tuple[str, ...] = ()
    #: Approval only: the node that runs on yes, and the ``show`` channels' values.
    before: str | None = None
    show: dict[str, Any] = Field(default_factory=dict)
    expires_at: datetime | None = None
    #: The fan-out item of the branch that asked, if any.
    item: int | None = None


class FlowFailure(_Value):
    """Why a node failed (also the value of the built-in ``last_error`` channel)."""

    node: str
    message: str


class FlowState(_Value):
    """Everything a flow run is: what ``next`` reads and returns.

    Treat the dicts as read-only: ``next`` returns a new state, never edits one.
    """

    #: The flow's name, version and digest (``Flow.digest``, a hash of its
    #: canonical spec): a state is only ever stepped by the flow it started on.
    flow: str
    version: str
    digest: str
    run_id: str
    #: Channel values by name (declared channels, ``conversation``, ``last_error``).
    channels: dict[str, Any] = Field(default_factory=dict)
    #: Where the run is (empty once finished or failed).
    branches: tuple[Branch, ...] = ()
    #: Fan-outs whose copies are still running.
    joins: tuple[Join, ...] = ()
    #: Times each node has been entered in this run (ids use it as ``visit``).
    visits: dict[str, int] = Field(default_factory=dict)
    #: Route limits: ``"{from}/{route}"`` → times the route was taken since the
    #: run started or since the limit's ``per`` node last ran.
    limit_counts: dict[str, int] = Field(default_factory=dict)
    #: The attempt each node is on (1-based; a success resets it).
    attempts: dict[str, int] = Field(default_factory=dict)
    #: Call ids issued and not yet answered (a result for any other id is stale).
    pending: tuple[str, ...] = ()
    #: The suspended question or approval, if any.
    interrupt: Interrupt | None = None
    #: The nodes that completed, in order (what a replay compares).
    trail: tuple[str, ...] = ()
    status: Literal["running", "waiting", "finished", "failed"] = "running"
    #: Set when finished: the ``outputs`` channels' values.
    outputs: dict[str, Any] | None = None
    #: Set when failed.
    failure: FlowFailure | None = None


# ---------------------------------------------------------------------------
# Inputs


class FlowStart(_Value):
    """Start run ``run_id`` with the flow's ``inputs`` (channel name → value)."""

    kind: Literal["start"] = "start"
    run_id: str
    inputs: dict[str, Any] = Field(default_factory=dict)


class ModelReply(_Value):
    """The model's answer to ``CallModel`` ``call_id`` (the raw text)."""

    kind: Literal["model_reply"] = "model_reply"
    call_id: str
    text: str


class ToolResult(_Value):
    """The result of ``CallTool`` ``call_id``: ``result`` when ``ok``, else ``error``."""

    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    ok: bool
    result: Any = None
    error: str | None = None


class HandlerResult(_Value):
    """The result of ``CallHandler`` ``call_id`` (the value written to the
    node's ``output``), or the error it raised."""

    kind: Literal["handler_result"] = "handler_result"
    call_id: str
    ok: bool
    result: Any = None
    error: str | None = None


class RouterResult(_Value):
    """The route a registered router chose for ``CallRouter`` ``call_id``."""

    kind: Literal["router_result"] = "router_result"
    call_id: str
    route: str


class Answer(_Value):
    """The person's answer to the interrupt ``interrupt_id`` (ask or approval)."""

    kind: Literal["answer"] = "answer"
    interrupt_id: str
    answer: Any


class FlowTick(_Value):
    """Time passed (``now`` is the argument of ``next``): expiries are checked."""

    kind: Literal["tick"] = "tick"


FlowInput: TypeAlias = Annotated[
    FlowStart | ModelReply | ToolResult | HandlerResult | RouterResult | Answer | FlowTick,
    Field(discriminator="kind"),
]


# ---------------------------------------------------------------------------
# Actions


class CallModel(_Value):
    """Ask the model ``prompt`` (already rendered) for node ``node``; with
    ``schema`` the answer must fit it (docs/flows.md, "Schemas")."""

    kind: Literal["call_model"] = "call_model"
    call_id: str
    node: str
    prompt: str
    schema_: dict[str, Any] | None = Field(None, alias="schema")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CallTool(_Value):
    """Call catalog tool ``tool`` with ``args`` (templates already filled)."""

    kind: Literal["call_tool"] = "call_tool"
    call_id: str
    node: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class CallHandler(_Value):
    """Run the registered handler ``handler`` on ``view`` (the channels it reads)."""

    kind: Literal["call_handler"] = "call_handler"
    call_id: str
    node: str
    handler: str
    view: dict[str, Any] = Field(default_factory=dict)


class CallRouter(_Value):
    """Run the registered router ``router`` of the conditional edge from
    ``edge_from`` on ``view`` (the channels); it returns a route name."""

    kind: Literal["call_router"] = "call_router"
    call_id: str
    edge_from: str
    router: str
    view: dict[str, Any] = Field(default_factory=dict)


class Ask(_Value):
    """Put ``question`` to the person; the run waits for an ``Answer``."""

    kind: Literal["ask"] = "ask"
    interrupt_id: str
    node: str
    question: str
    answers: tuple[str, ...] = ()
    expires_at: datetime | None = None


class AwaitApproval(_Value):
    """Ask the person to approve running node ``before``, showing only the
    ``show`` channels; the run waits for an ``Answer``."""

    kind: Literal["await_approval"] = "await_approval"
    interrupt_id: str
    node: str
    before: str
    question: str = ""
    show: dict[str, Any] = Field(default_factory=dict)
    expires_at: datetime | None = None


class Finish(_Value):
    """The run reached END: the flow's ``outputs`` channels' values."""

    kind: Literal["finish"] = "finish"
    outputs: dict[str, Any] = Field(default_factory=dict)


class Fail(_Value):
    """The run failed at ``node`` (no retry or ``onError`` left)."""

    kind: Literal["fail"] = "fail"
    node: str
    error: str


Action: TypeAlias = Annotated[
    CallModel | CallTool | CallHandler | CallRouter | Ask | AwaitApproval | Finish | Fail,
    Field(discriminator="kind"),
]

_INPUTS: TypeAdapter[FlowInput] = TypeAdapter(FlowInput)
_ACTIONS: TypeAdapter[Action] = TypeAdapter(Action)


def input_from_json(data: Any) -> FlowInput:
    """An input from its JSON form (``kind`` says which)."""
    return _INPUTS.validate_python(data)


def action_from_json(data: Any) -> Action:
    """An action from its JSON form (``kind`` says which)."""
    return _ACTIONS.validate_python(data)


# ---------------------------------------------------------------------------
# The step function


class FlowRun:
    """Runs one compiled :class:`~compiler.Flow`, one pure step at a time."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow

    def start(
        self, run_id: str, inputs: dict[str, Any], now: datetime
    ) -> tuple[FlowState, list[Action]]:
        """A new run: the same as ``next`` on an empty state with ``FlowStart``."""
        raise NotImplementedError("FlowRun.start: the step function is not written yet")

    def next(
        self, state: FlowState, input: FlowInput, now: datetime
    ) -> tuple[FlowState, list[Action]]:
        """The state after ``input`` and the actions to carry out, in order.

        A result whose id is not pending, an answer to another interrupt, and
        anything given to a finished or failed run change nothing (the state is
        returned as it was, with no action).
        """
        raise NotImplementedError("FlowRun.next: the step function is not written yet")
