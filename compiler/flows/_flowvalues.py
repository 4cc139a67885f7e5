"""A flow run's values (docs/flows.md, "Running a flow"): its state, the
inputs the runtime feeds it and the actions it asks the runtime to carry out,
and the ids of its calls and interrupts.

Every model is frozen and JSON-serialisable: ``x.model_dump(mode="json", by_alias=True)`` and
``Model.model_validate(data)`` round-trip it (``input_from_json`` and
``action_from_json`` read the unions by their ``kind``).

Ids (docs/flows.md, "Ids") come from our own data only, never from a model's
output: a call is ``{run_id}/{node}/{visit}/{attempt}``, with ``/{item}`` after
it for a fan-out copy (the item's 0-based index); an interrupt is
``{run_id}/{node}/{visit}``; a router's call is its edge's ``from`` node's call
id plus ``/route``. A ``tools`` node's call is ``{run_id}/tools/{tool}/{digest}``
(``tool_call_id``): what the call does (its tool and canonical arguments), hashed
under the run's id, never the ``id`` a model gave it; the same call is the same id
all through the run.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

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
    "FlowStart",
    "FlowState",
    "FlowTick",
    "FlowValue",
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
    "tool_call_id",
]


class FlowValue(BaseModel):
    """What every state, input and action of a flow run is: frozen, no unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def call_id(run_id: str, node: str, visit: int, attempt: int, item: int | None = None) -> str:
    """The id of one call a node makes: ``{run_id}/{node}/{visit}/{attempt}``,
    plus ``/{item}`` for a fan-out copy. ``visit`` and ``attempt`` are 1-based."""
    base = f"{run_id}/{node}/{visit}/{attempt}"
    return base if item is None else f"{base}/{item}"


def tool_call_id(run_id: str, tool: str, args: dict[str, Any]) -> str:
    """The id of one call of a ``tools`` node: ``{run_id}/tools/{tool}/{digest}``,
    the digest a hash of the tool's name and its canonical arguments. The same
    call anywhere in the run has the same id (and so the same idempotency key),
    whatever the visit: a loop back does not make it a new call."""
    canonical = json.dumps(args, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(f"{tool}\n{canonical}".encode()).hexdigest()[:16]
    return f"{run_id}/tools/{tool}/{digest}"


def interrupt_id(run_id: str, node: str, visit: int, item: int | None = None) -> str:
    """The id of one question or approval: ``{run_id}/{node}/{visit}`` (plus
    ``/{item}`` for a fan-out copy): a second visit asks anew, with a new id."""
    base = f"{run_id}/{node}/{visit}"
    return base if item is None else f"{base}/{item}"


# ---------------------------------------------------------------------------
# State


class Branch(FlowValue):
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
    #: A ``tools`` node: each call it made, in order, as ``{call_id, id, name,
    #: done, result, error}`` (``call_id`` is ours: ``tool_call_id``).
    calls: tuple[dict[str, Any], ...] = ()


class Join(FlowValue):
    """A fan-out in progress: ``items`` copies of ``target``; the node after
    ``target`` runs once, when every index is in ``done``."""

    fanout: str
    visit: int = Field(ge=1)
    target: str
    items: int = Field(ge=0)
    done: tuple[int, ...] = ()
    #: The copies whose target failed (past its retries) into its ``onError``:
    #: once every copy is done, the run goes to that ``onError`` instead of on.
    failed: tuple[int, ...] = ()


class Interrupt(FlowValue):
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


class FlowFailure(FlowValue):
    """Why a node failed (also the value of the built-in ``last_error`` channel)."""

    node: str
    message: str


class FlowState(FlowValue):
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
    #: The results of the ``tools`` nodes' calls that succeeded, by call id
    #: (``tool_call_id``): a call answered once in the run is not issued again.
    tool_results: dict[str, Any] = Field(default_factory=dict)
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


class FlowStart(FlowValue):
    """Start run ``run_id`` with the flow's ``inputs`` (channel name → value)."""

    kind: Literal["start"] = "start"
    run_id: str
    inputs: dict[str, Any] = Field(default_factory=dict)


class ModelReply(FlowValue):
    """The model's answer to ``CallModel`` ``call_id`` (the raw text), or the
    ``error`` the call ended with."""

    kind: Literal["model_reply"] = "model_reply"
    call_id: str
    text: str
    #: The model call failed (no reply): the node fails with it (retry, onError).
    error: str | None = None


class ToolResult(FlowValue):
    """The result of ``CallTool`` ``call_id``: ``result`` when ``ok``, else ``error``."""

    kind: Literal["tool_result"] = "tool_result"
    call_id: str
    ok: bool
    result: Any = None
    error: str | None = None


class HandlerResult(FlowValue):
    """The result of ``CallHandler`` ``call_id`` (the value written to the
    node's ``output``), or the error it raised."""

    kind: Literal["handler_result"] = "handler_result"
    call_id: str
    ok: bool
    result: Any = None
    error: str | None = None


class RouterResult(FlowValue):
    """The route a registered router chose for ``CallRouter`` ``call_id``."""

    kind: Literal["router_result"] = "router_result"
    call_id: str
    route: str


class Answer(FlowValue):
    """The person's answer to the interrupt ``interrupt_id`` (ask or approval)."""

    kind: Literal["answer"] = "answer"
    interrupt_id: str
    answer: Any


class FlowTick(FlowValue):
    """Time passed (``now`` is the argument of ``next``): expiries are checked."""

    kind: Literal["tick"] = "tick"


FlowInput: TypeAlias = Annotated[
    FlowStart | ModelReply | ToolResult | HandlerResult | RouterResult | Answer | FlowTick,
    Field(discriminator="kind"),
]


# ---------------------------------------------------------------------------
# Actions


class CallModel(FlowValue):
    """Ask the model ``prompt`` (already rendered) for node ``node``; with
    ``schema`` the answer must fit it (docs/flows.md, "Schemas")."""

    kind: Literal["call_model"] = "call_model"
    call_id: str
    node: str
    prompt: str
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    #: The file values the prompt names (docs/flows.md, "A model reads a file"):
    #: an image is given to the model as an image, another file as its name.
    files: tuple[dict[str, Any], ...] = ()

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class CallTool(FlowValue):
    """Call catalog tool ``tool`` with ``args`` (templates already filled)."""

    kind: Literal["call_tool"] = "call_tool"
    call_id: str
    node: str
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)


class CallHandler(FlowValue):
    """Run the registered handler ``handler`` on ``view`` (the channels it reads)."""

    kind: Literal["call_handler"] = "call_handler"
    call_id: str
    node: str
    handler: str
    view: dict[str, Any] = Field(default_factory=dict)


class CallRouter(FlowValue):
    """Run the registered router ``router`` of the conditional edge from
    ``edge_from`` on ``view`` (the channels); it returns a route name."""

    kind: Literal["call_router"] = "call_router"
    call_id: str
    edge_from: str
    router: str
    view: dict[str, Any] = Field(default_factory=dict)


class Ask(FlowValue):
    """Put ``question`` to the person; the run waits for an ``Answer``."""

    kind: Literal["ask"] = "ask"
    interrupt_id: str
    node: str
    question: str
    answers: tuple[str, ...] = ()
    expires_at: datetime | None = None
    #: ``file`` when the answer goes to a file channel (docs/flows.md, "File
    #: channels"): it is a file value, of a media type ``accept`` allows.
    expects: Literal["text", "file"] = "text"
    accept: str | None = None


class AwaitApproval(FlowValue):
    """Ask the person to approve running node ``before``, showing only the
    ``show`` channels; the run waits for an ``Answer``."""

    kind: Literal["await_approval"] = "await_approval"
    interrupt_id: str
    node: str
    before: str
    question: str = ""
    show: dict[str, Any] = Field(default_factory=dict)
    expires_at: datetime | None = None


class Finish(FlowValue):
    """The run reached END: the flow's ``outputs`` channels' values."""

    kind: Literal["finish"] = "finish"
    outputs: dict[str, Any] = Field(default_factory=dict)


class Fail(FlowValue):
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
