"""Carries out a flow's actions (docs/flows.md, "Running a flow"): the step
function (``compiler.FlowRun``) says what to do, this does it and returns the
input to feed back.

- ``CallModel``: one call of the model (agents/model.py); with a ``schema``
  the answer is asked for as JSON of that shape (the API's structured output),
  and the step function checks it. The instructions name the flow and the node
  (``Flow: NAME`` / ``Node: ID`` lines), so the stand-in's rules can match them.
- ``CallTool``: the trusted executor (agents/tools/executor.py) runs the catalog
  tool, with the action's ``call_id`` as the idempotency key (made from the
  run's own data, never from the model); with a job, the fact a confirmed call
  records goes to the inbox as ``source: tool`` evidence, as an agent's does.
- ``CallHandler`` / ``CallRouter``: the registry (agents/flows/handlers.py).

Every call is journaled with the flow's name and the node's id. A transport
failure is tried again with the same key (the model client retries itself; a
tool is only tried again when it is idempotent).
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from compiler import (
    Action,
    CallHandler,
    CallModel,
    CallRouter,
    CallTool,
    HandlerResult,
    ModelReply,
    RouterResult,
    ToolResult,
    to_iso,
)
from pydantic import BaseModel
from stream.runtime.filestore import FileStore
from topics import JournalHandlerCall, JournalModelCall, JournalToolCall, Tokens

from agents.compose import ModelRequest
from agents.flows.handlers import HandlerContext, HandlerRegistry
from agents.model import Model, ModelError
from agents.publish import Publish
from agents.tools.executor import Executor, Outcome

__all__ = [
    "FLOW_AGENT",
    "MODEL_IMAGE_TYPES",
    "FlowExecutor",
    "Publish",
    "flow_instructions",
    "json_schema_of",
    "model_input",
]

#: The ``agent`` of a flow's journal records (``flow`` and ``node`` say more).
FLOW_AGENT = "flow"
#: How much of a long text the journal keeps (as agents/run.py).
_EXCERPT = 2000

FlowResult = ModelReply | ToolResult | HandlerResult | RouterResult


def json_schema_of(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A flow schema (docs/flows.md, "Schemas": ``list``, not ``array``) as JSON
    Schema, for the model's structured output."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and value == "list":
            out[key] = "array"
        elif key == "properties" and isinstance(value, Mapping):
            out[key] = {
                k: json_schema_of(v) if isinstance(v, Mapping) else v for k, v in value.items()
            }
        elif key == "items" and isinstance(value, Mapping):
            out[key] = json_schema_of(value)
        else:
            out[key] = value
    return out


def flow_instructions(flow: str, node: str, schema: Mapping[str, Any] | None) -> str:
    """What the model is told besides the prompt: the flow, the node and, with a
    schema, that it answers with JSON of that shape only."""
    lines = [
        f"Flow: {flow}",
        f"Node: {node}",
        "You are one step of a procedure. Answer the request below, and nothing else.",
    ]
    if schema is not None:
        shape = orjson.dumps(json_schema_of(schema), option=orjson.OPT_SORT_KEYS).decode()
        lines.append(f"Answer with one JSON value of this shape and no other text: {shape}")
    return "\n".join(lines)


class FlowExecutor:
    """Runs the call actions of flow runs.

    ``model`` is needed for ``CallModel``, ``tools`` (the trusted executor) for
    ``CallTool``; without one, such an action fails (``ok: false`` or an empty
    reply) and says why. ``publish`` receives the journal records
    (``"journal"``) and the facts of confirmed tool calls (``"inbox"``, only
    when ``execute`` is given a ``job_key``). ``tool_retries``: extra goes of an
    idempotent tool whose endpoint did not answer (same key).
    """

    def __init__(
        self,
        model: Model | None,
        tools: Executor | None,
        registry: HandlerRegistry,
        publish: Publish | None = None,
        *,
        clock: Callable[[], datetime] | None = None,
        tool_retries: int = 2,
        retry_delay: float = 0.2,
        files: FileStore | None = None,
    ) -> None:
        self.model = model
        #: The uploads a model is given an image from (docs/flows.md, "A model reads a file").
        self.files = files
        self.tools = tools
        self.registry = registry
        self.publish = publish
        self.clock = clock or (lambda: datetime.now(UTC))
        self.tool_retries = tool_retries
        self.retry_delay = retry_delay
        #: Calls made, by kind (``model``, ``tool``, ``handler``, ``router``).
        self.calls: dict[str, int] = {"model": 0, "tool": 0, "handler": 0, "router": 0}

    async def execute(
        self,
        action: Action,
        *,
        job_key: str | None,
        flow: str,
        run_id: str | None = None,
    ) -> FlowResult:
        """Carry out one call action; the input to feed back to ``FlowRun.next``.
        ``run_id`` (the run's, for the journal) defaults to the call id. Another
        action (ask, approval, finish, fail) is the flow driver's, not a call."""
        if not isinstance(action, CallModel | CallTool | CallHandler | CallRouter):
            raise TypeError(f"{type(action).__name__} is not a call the executor carries out")
        run = run_id or action.call_id
        if isinstance(action, CallModel):
            return await self._model(action, job_key, flow, run)
        if isinstance(action, CallTool):
            return await self._tool(action, job_key, flow, run)
        return await self._registered(action, job_key, flow, run)

    async def _registered(
        self, action: CallHandler | CallRouter, job_key: str | None, flow: str, run: str
    ) -> HandlerResult | RouterResult:
        """A handler or a router, run by the registry and journaled."""
        started = time.monotonic()
        result: HandlerResult | RouterResult
        if isinstance(action, CallHandler):
            kind: Literal["handler", "router"] = "handler"
            node, name = action.node, action.handler
            context = HandlerContext(
                job_key, run, action.call_id, flow, node, self.publish, self.tools
            )
            result = await self.registry.call_handler(action, context)
        else:
            kind, node, name = "router", action.edge_from, action.router
            result = await self.registry.call_router(action)
        self.calls[kind] += 1
        await self._journal_handler(
            job_key, run, flow, node, kind, name, action.call_id, result, started
        )
        return result

    # -- the model ------------------------------------------------------------------

    async def _model(
        self, action: CallModel, job_key: str | None, flow: str, run: str
    ) -> ModelReply:
        if self.model is None:
            return _model_reply(action.call_id, "", "no model is configured")
        self.calls["model"] += 1
        prompt, images = model_input(action.prompt, action.files, self.files)
        request = ModelRequest(
            agent=FLOW_AGENT,
            instructions=flow_instructions(flow, action.node, action.schema_),
            messages=(("user", prompt),),
            images=images,
        )
        schema = json_schema_of(action.schema_) if action.schema_ is not None else None
        started = time.monotonic()
        tokens: Tokens | None = None
        error: str | None = None
        text = ""
        try:
            reply = await self.model.call(request, output_schema=schema)
        except ModelError as exc:
            outcome: Any = exc.kind
            error = exc.message
            if exc.kind == "too_large":  # over LEMONGRAPH_MAX_REPLY_BYTES: docs/flows.md, "Bounds"
                error = f"output_too_large: {exc.message}"
            seconds = time.monotonic() - started
            answer = exc.message
        else:
            outcome = "ok"
            text = reply.text or ""
            answer = text + " ".join(f"[call {c.name} {c.arguments}]" for c in reply.calls)
            seconds = reply.seconds
            u = reply.usage
            if u is not None:
                tokens = Tokens(input=u.input, output=u.output, cached=u.cached, total=u.total)
        await self._emit(
            job_key,
            JournalModelCall(
                **self._head(job_key, run),
                agent=FLOW_AGENT,
                request=_excerpt(f"{request.instructions}\n---\n{action.prompt}"),
                response=_excerpt(answer.strip()),
                latency_ms=_ms(seconds),
                tokens=tokens,
                outcome=outcome,
                flow=flow,
                node=action.node,
            ),
        )
        return _model_reply(action.call_id, text, error)

    # -- tools ----------------------------------------------------------------------

    async def _tool(self, action: CallTool, job_key: str | None, flow: str, run: str) -> ToolResult:
        if self.tools is None:
            return ToolResult(
                call_id=action.call_id, ok=False, error="no tool executor is configured"
            )
        self.calls["tool"] += 1
        arguments = orjson.dumps(action.args, option=orjson.OPT_SORT_KEYS).decode()
        spec = self.tools.catalog.tools.get(action.tool)
        started = time.monotonic()
        goes = 1 + (self.tool_retries if spec is not None and spec.idempotent else 0)
        outcome: Outcome | None = None
        for go in range(goes):
            if go:
                await asyncio.sleep(self.retry_delay * go)
            outcome = await self.tools.run(
                job_key=job_key or "flow",
                task_id=action.call_id,
                name=action.tool,
                arguments=arguments,
                granted=(action.tool,),
                occurrence=1,
                key=action.call_id,
            )
            # Only an unanswered idempotent call is tried again (same key).
            if not (outcome.status == "failed" and outcome.http_status is None and outcome.url):
                break
        assert outcome is not None
        fact = outcome.fact if job_key is not None else None
        await self._emit(
            job_key,
            JournalToolCall(
                **self._head(job_key, run),
                agent=FLOW_AGENT,
                tool=action.tool,
                task_id=None,
                arguments=_excerpt(arguments),
                outcome=outcome.status,
                key=outcome.key,
                http_status=outcome.http_status,
                url=outcome.url,
                result=_excerpt(outcome.output),
                latency_ms=_ms(time.monotonic() - started),
                fact=fact.action if fact is not None else None,
                flow=flow,
                node=action.node,
                **outcome.journaled(),
            ),
        )
        if fact is not None and self.publish is not None and job_key is not None:
            await self.publish("inbox", job_key, fact)
        if outcome.status == "done":
            return ToolResult(call_id=action.call_id, ok=True, result=outcome.data)
        return ToolResult(call_id=action.call_id, ok=False, error=_error_of(outcome))

    # -- the journal ----------------------------------------------------------------

    async def _journal_handler(
        self,
        job_key: str | None,
        run: str,
        flow: str,
        node: str,
        kind: Literal["handler", "router"],
        name: str,
        call_id: str,
        result: HandlerResult | RouterResult,
        started: float,
    ) -> None:
        if isinstance(result, RouterResult):
            ok = bool(result.route)
            shown = result.route if ok else (self.registry.last_error or "no route")
        elif result.ok:
            ok, shown = True, orjson.dumps(result.result).decode()
        else:
            ok, shown = False, result.error or ""
        await self._emit(
            job_key,
            JournalHandlerCall(
                **self._head(job_key, run),
                flow=flow,
                node=node,
                kind=kind,
                name=name,
                call_id=call_id,
                outcome="ok" if ok else "error",
                result=_excerpt(shown),
                latency_ms=_ms(time.monotonic() - started),
            ),
        )

    def _head(self, job_key: str | None, run: str) -> dict[str, Any]:
        return {"job_key": job_key or "", "run_id": run, "at": to_iso(self.clock())}

    async def _emit(self, job_key: str | None, record: BaseModel) -> None:
        if self.publish is not None:
            await self.publish("journal", job_key or "", record)


#: The image types a model reads (the Responses API's ``input_image``).
MODEL_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def model_input(
    prompt: str, files: Sequence[Mapping[str, Any]], store: FileStore | None
) -> tuple[str, tuple[str, ...]]:
    """The prompt and the images a model is given for an llm node's file values
    (docs/flows.md, "A model reads a file"): a stored image as a ``data:`` URL,
    anything else (or an image this process cannot read) named in the text."""
    images: list[str] = []
    named: list[str] = []
    for value in files:
        stored = store.get(str(value.get("id"))) if store is not None else None
        if stored is not None and stored.media_type in MODEL_IMAGE_TYPES:
            data = base64.b64encode(stored.path.read_bytes()).decode("ascii")
            images.append(f"data:{stored.media_type};base64,{data}")
        else:
            named.append(
                f"- {value.get('name')} ({value.get('mediaType')}, {value.get('bytes')} bytes, "
                f"{value.get('url')})"
            )
    if named:
        prompt += "\n\nFiles given (not shown to you):\n" + "\n".join(named)
    return prompt, tuple(images)


def _model_reply(call_id: str, text: str, error: str | None) -> ModelReply:
    """The reply to feed back; a model that gave none is an empty reply, with
    the error when the step function's input can carry one."""
    if error is not None and "error" in ModelReply.model_fields:
        return ModelReply.model_validate({"call_id": call_id, "text": text, "error": error})
    return ModelReply(call_id=call_id, text=text)


def _error_of(outcome: Outcome) -> str:
    try:
        told = orjson.loads(outcome.output)
    except orjson.JSONDecodeError:
        return outcome.output
    if isinstance(told, dict) and "error" in told:
        error = told["error"]
        return error if isinstance(error, str) else orjson.dumps(error).decode()
    return outcome.output


def _excerpt(text: str, limit: int = _EXCERPT) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))
