"""The stand-in model: a local OpenAI-compatible HTTP server, deterministic and
scriptable, so the agents run offline through the real ``openai`` client
(docs/agents.md, "The stand-in model").

It serves ``POST /v1/responses`` and ``POST /v1/chat/completions``, streaming
(server-sent events) and not, with tool calls and usage figures. Each call is
answered by the first matching rule of a script, or by the built-in policy:

    rules:
      - when: {agent: crm_agent, tool_result: update_crm}   # every key must hold
        say: "The CRM is updated."
      - when: {last_message_contains: "book"}
        call: {tool: schedule_meeting, args: {when: "tomorrow 10:00"}}
      - say: "I have booked the meeting."                   # no when: always

``when`` keys: ``agent`` (the agent being run), ``next_step`` (the frontier's
next best step), ``tool_result`` (the call answers a tool result: the tool it
came from), ``tool_failed`` (the same, and that result said ``"ok": false``),
``last_message_contains`` (the call answers the person: their
latest message contains this, in any case), ``closing`` (true: the call is a
closing turn, asked once no task is open: docs/agents.md, "The closing turn");
a conversation's summary call is ``agent: summary`` (docs/memory.md, "Summaries
are claims"; built in, it answers with the opening of each person's turn). For a flow's llm node
(docs/flows.md, "Running a flow at the terminal"): ``flow`` (the flow's name),
``flow_node`` (the node's id), ``prompt_contains`` (its prompt contains this, in
any case; an image given with it reads as ``[image image/png, 84213 bytes]``),
``schema`` (true: the node asked for JSON of a shape; false: it did not). A
rule answers with ``say`` (text), ``call`` (a tool call), ``json`` (a JSON
value, sent as its text) or ``fail`` (an HTTP error status, 400-599: a model
that fails); a node asking for JSON that no rule answers gets
the smallest value of its shape (the first of an enum, ``""``, ``0``, ``false``,
``[]``). A call answers either the person or
a tool result, so a rule that books on "book" does not book again once the
booking's result is in. A call to a tool the request did not offer is still
sent, so refusals can be tested.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import re
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agents.compose import TOOL_TURN
from agents.dev.serving import AppThread

__all__ = [
    "Seen",
    "StandinReply",
    "StandinScript",
    "StandinThread",
    "build_standin",
    "load_script",
    "policy",
    "smallest",
]

#: What a heartbeat answers when nothing needs a person (docs/schedules.md).
HEARTBEAT_OK = "HEARTBEAT_OK"
_AGENT = re.compile(r"^Agent: (\S+)\s*$", re.MULTILINE)
_NEXT = re.compile(r"^Next best step: (\S+)\s*$", re.MULTILINE)
#: A closing turn (agents/compose.py, ``compose_closing``) and what it says was done.
_CLOSING = re.compile(r"^Closing: ", re.MULTILINE)
_DONE = re.compile(r"^Done: (.+?)\s*$", re.MULTILINE)
_FLOW = re.compile(r"^Flow: (\S+)\s*$", re.MULTILINE)
_NODE = re.compile(r"^Node: (\S+)\s*$", re.MULTILINE)
#: A conversation's summary call (agents/memory/summary.py) and the turns it covers.
_SUMMARISE = re.compile(r"^Summarise: turns (\d+-\d+)", re.MULTILINE)


class _When(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str | None = None
    next_step: str | None = None
    tool_result: str | None = None
    tool_failed: str | None = None
    last_message_contains: str | None = None
    flow: str | None = None
    flow_node: str | None = None
    prompt_contains: str | None = None
    schema_: bool | None = Field(None, alias="schema")
    closing: bool | None = None


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    when: _When = Field(default_factory=_When)
    say: str | None = None
    call: _Call | None = None
    json_: Any = Field(None, alias="json")
    #: Answer the call with this HTTP error status instead (a model that fails).
    fail: int | None = Field(None, ge=400, le=599)

    @model_validator(mode="after")
    def _one_answer(self) -> _Rule:
        answers = (
            (self.say is not None)
            + (self.call is not None)
            + ("json_" in self.model_fields_set)
            + (self.fail is not None)
        )
        if answers != 1:
            raise ValueError(
                "a rule answers with exactly one of say or call, or with json, or fail"
            )
        return self


class StandinScript(BaseModel):
    """A script: rules tried in order on each model call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rules: list[_Rule]


def load_script(path: Path) -> StandinScript:
    """Read a script file. Raises ``ValueError`` naming the file and the problem."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        return StandinScript.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise ValueError(f"{path}: not a stand-in script: {exc}") from None


@dataclass(frozen=True)
class Seen:
    """What a model call shows the stand-in: the agent, the next best step, the
    tools offered, the tool the last result came from, the person's last words."""

    agent: str | None
    next_step: str | None
    tools: tuple[str, ...]
    tool_result: str | None
    last_message: str | None
    text: str = ""  # everything sent, for the usage figures
    #: The last tool result said it failed (its output has ``"ok": false``).
    tool_failed: bool = False
    #: The call answers the person: their message is the last thing in it.
    answering: bool = False
    #: The offered functions that are delegate agents.
    delegates: tuple[str, ...] = ()
    #: A flow's llm node (``Flow:``/``Node:`` lines of the instructions), and
    #: the JSON Schema it asked its answer to fit, if any.
    flow: str | None = None
    node: str | None = None
    schema: Mapping[str, Any] | None = None
    #: A heartbeat: the instructions or the person's latest message ask for
    #: ``HEARTBEAT_OK`` (docs/schedules.md, "Heartbeats").
    heartbeat: bool = False
    #: A closing turn: what its ``Done:`` line lists ("" when not one).
    closing: str | None = None


@dataclass(frozen=True)
class StandinReply:
    """Text, or one tool call."""

    say: str | None = None
    tool: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    #: An HTTP error status to answer with instead of a reply.
    fail: int | None = None


def _matches(when: _When, seen: Seen) -> bool:
    if when.agent is not None and when.agent != seen.agent:
        return False
    if when.next_step is not None and when.next_step != seen.next_step:
        return False
    if when.tool_result is not None and when.tool_result != seen.tool_result:
        return False
    if when.tool_failed is not None and (
        when.tool_failed != seen.tool_result or not seen.tool_failed
    ):
        return False
    if when.flow is not None and when.flow != seen.flow:
        return False
    if when.flow_node is not None and when.flow_node != seen.node:
        return False
    prompt = (seen.last_message or "").lower()
    if when.prompt_contains is not None and when.prompt_contains.lower() not in prompt:
        return False
    if when.schema_ is not None and when.schema_ != (seen.schema is not None):
        return False
    if when.closing is not None and when.closing != (seen.closing is not None):
        return False
    if when.last_message_contains is not None:
        if not seen.answering:
            return False  # this call answers a tool result or follows the agent, not the person
        said = (seen.last_message or "").lower()
        if when.last_message_contains.lower() not in said:
            return False
    return True


def policy(seen: Seen, script: StandinScript | None = None) -> StandinReply:
    """The answer to one call: the first matching rule, else the built-in policy."""
    if script is not None:
        for rule in script.rules:
            if _matches(rule.when, seen):
                if rule.call is not None:
                    return StandinReply(tool=rule.call.tool, args=dict(rule.call.args))
                if rule.fail is not None:
                    return StandinReply(fail=rule.fail)
                if "json_" in rule.model_fields_set:
                    return StandinReply(say=json.dumps(rule.json_, sort_keys=True))
                return StandinReply(say=rule.say)
    if seen.schema is not None:
        return StandinReply(say=json.dumps(smallest(seen.schema), sort_keys=True))
    if seen.node is not None:
        return StandinReply(say=f"The stand-in's answer for {seen.node}.")
    return _builtin(seen)


def smallest(schema: Mapping[str, Any]) -> Any:
    """The smallest value of a JSON Schema's shape: every property, the first of
    an enum, the minimum of a number, ``""``, ``false``, ``[]``."""
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {k: smallest(v) for k, v in properties.items() if isinstance(v, Mapping)}
    if kind == "array":
        return []
    if kind == "number" or kind == "integer":
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "string":
        return "x" * int(schema.get("minLength", 0))
    return None


def _builtin(seen: Seen) -> StandinReply:
    """Good enough for the bundled playbooks (docs/agents.md, "The stand-in
    model"): after a tool result, say it is done; when the person asks to book
    and a booking tool is offered, book what they said; when the person answers
    and a delegate is offered, hand their words to it; a delegate calls its first
    tool; else greet the person with the next best step. A closing turn says
    what its request lists as done. A heartbeat (asked
    to answer ``HEARTBEAT_OK`` when all is well) sees nothing that needs a
    person: it answers ``HEARTBEAT_OK``, after calling its agent's first tool
    if it has one."""
    if seen.heartbeat:
        if seen.tool_result is None and seen.tools and seen.agent not in (None, "conversation"):
            return StandinReply(tool=seen.tools[0], args={})
        return StandinReply(say=HEARTBEAT_OK)
    if seen.closing is not None:
        return StandinReply(say=f"All done: {seen.closing}. Thank you!")
    if seen.agent == "summary":
        return StandinReply(say=_summary(seen))
    if seen.tool_result is not None:
        return StandinReply(say=f"Done: {seen.tool_result} confirmed it.")
    said = (seen.last_message or "").strip()
    if seen.answering:
        for tool in seen.tools:
            if tool.startswith("schedule_") and re.search(r"\b(book|schedule|meet)", said, re.I):
                return StandinReply(tool=tool, args={"when": said})
        if seen.agent in (None, "conversation") and seen.delegates:
            return StandinReply(tool=seen.delegates[0], args={"request": said})
    if seen.agent not in (None, "conversation") and seen.tools:
        return StandinReply(tool=seen.tools[0], args={})
    if seen.next_step:
        return StandinReply(say=f"Hello! Let us work on {seen.next_step} together.")
    return StandinReply(say="Hello! How can I help?")


def _summary(seen: Seen) -> str:
    """A summary call's answer: the turns it covers and the opening of each
    thing a person said in them, in order (at most 600 characters)."""
    span = _SUMMARISE.search(seen.text)
    said = [
        line.split(": ", 1)[1][:60]
        for line in (seen.last_message or "").splitlines()
        if ". person" in line and ": " in line
    ]
    told = "; ".join(said) if said else "nothing"
    return f"Summary of turns {span.group(1) if span else '?'}: the person said {told}"[:600]


# -- reading requests -----------------------------------------------------------------


_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,([A-Za-z0-9+/=]*)")


def _image_text(url: Any) -> str:
    """An image part as the stand-in reads it: ``[image TYPE, N bytes]`` for a
    ``data:`` URL (the form a flow's llm node sends: docs/flows.md, "A model reads
    a file"), ``[image URL]`` for an address, ``[image invalid]`` else."""
    text = str(url or "")
    given = _DATA_URL.fullmatch(text)
    if given is not None:
        try:
            size = len(base64.b64decode(given.group(2), validate=True))
        except binascii.Error:
            return "[image invalid]"
        return f"[image {given.group(1)}, {size} bytes]"
    return f"[image {text}]" if text.startswith(("http://", "https://")) else "[image invalid]"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "input_image":  # the Responses API
                parts.append(_image_text(part.get("image_url")))
            elif part.get("type") == "image_url":  # chat completions
                image = part.get("image_url")
                parts.append(_image_text(image.get("url") if isinstance(image, dict) else None))
            else:
                parts.append(str(part.get("text") or ""))
        return "".join(parts)
    return ""


def seen_in_responses(body: Mapping[str, Any]) -> Seen:
    """What a ``/v1/responses`` request shows."""
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    steps: list[_Step] = []
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "function_call":
            steps.append(("call", str(item.get("call_id")), str(item.get("name")),
                          str(item.get("arguments") or "")))  # fmt: skip
        elif kind == "function_call_output":
            steps.append(("output", str(item.get("call_id")), "", str(item.get("output") or "")))
        else:
            steps.append((str(item.get("role")), "", "", _text_of(item.get("content"))))
    tools = [
        (str(t.get("name")), t.get("parameters"))
        for t in body.get("tools") or []
        if isinstance(t, dict)
    ]
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    schema = (
        fmt.get("schema") if isinstance(fmt, dict) and fmt.get("type") == "json_schema" else None
    )
    return _seen(str(body.get("instructions") or ""), steps, tools, schema)


def seen_in_chat(body: Mapping[str, Any]) -> Seen:
    """What a ``/v1/chat/completions`` request shows."""
    steps: list[_Step] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = str(message.get("role"))
        text = _text_of(message.get("content"))
        if role == "tool":
            steps.append(("output", str(message.get("tool_call_id")), "", text))
            continue
        steps.append((role, "", "", text))
        for call in message.get("tool_calls") or [] if role == "assistant" else []:
            function = call.get("function") or {}
            steps.append(("call", str(call.get("id")), str(function.get("name")),
                          str(function.get("arguments") or "")))  # fmt: skip
    tools = [
        (str((t.get("function") or {}).get("name")), (t.get("function") or {}).get("parameters"))
        for t in body.get("tools") or []
        if isinstance(t, dict)
    ]
    fmt = body.get("response_format")
    inner = fmt.get("json_schema") if isinstance(fmt, dict) else None
    schema = inner.get("schema") if isinstance(inner, dict) else None
    return _seen("", steps, tools, schema)


#: One input item: (kind, call id, tool name, text); ``kind`` is a role
#: (``system``, ``developer``, ``user``, ``assistant``), ``call`` or ``output``.
_Step = tuple[str, str, str, str]


def _seen(
    instructions: str,
    steps: Iterable[_Step],
    tools: list[tuple[str, Any]],
    schema: Any = None,
) -> Seen:
    names: dict[str, str] = {}
    tool_result = last_message = None
    answering = False
    output = ""
    texts = [instructions]
    for kind, call_id, name, text in steps:
        texts.append(text)
        if kind == "call":
            names[call_id] = name
            tool_result, answering = None, False
        elif kind == "output":
            tool_result, output, answering = names.get(call_id, "?"), text, False
        elif kind in ("system", "developer"):
            instructions += "\n" + text
        elif kind == "user" and not text.startswith(TOOL_TURN):
            last_message, tool_result, answering = text, None, True
        else:  # what an agent said, or an earlier tool result in the history
            tool_result, answering = None, False
    agent = _AGENT.search(instructions)
    step = _NEXT.search(instructions)
    return Seen(
        agent.group(1) if agent else None,
        step.group(1) if step else None,
        tuple(n for n, _ in tools),
        tool_result,
        last_message,
        "\n".join(texts),
        tool_result is not None and _failed(output),
        answering,
        tuple(n for n, parameters in tools if _is_delegate(parameters)),
        flow.group(1) if (flow := _FLOW.search(instructions)) else None,
        node.group(1) if (node := _NODE.search(instructions)) else None,
        schema if isinstance(schema, dict) else None,
        HEARTBEAT_OK in instructions or HEARTBEAT_OK in (last_message or ""),
        _closing(instructions),
    )


def _closing(instructions: str) -> str | None:
    """What a closing turn's request says was done; None when not one."""
    if not _CLOSING.search(instructions):
        return None
    done = _DONE.search(instructions)
    return done.group(1) if done else ""


def _is_delegate(parameters: Any) -> bool:
    """A delegate is offered as a function of one plain-language ``request``."""
    if not isinstance(parameters, dict):
        return False
    properties = parameters.get("properties")
    return isinstance(properties, dict) and set(properties) == {"request"}


def _failed(output: str) -> bool:
    """A tool result that says ``"ok": false`` (as the trusted executor tells it)."""
    try:
        data = json.loads(output)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("ok") is False


def _tokens(text: str) -> int:
    """About four characters a token, as OpenAI's rule of thumb has it."""
    return max(1, math.ceil(len(text) / 4)) if text else 0


# -- the server -------------------------------------------------------------------------


def build_standin(script: StandinScript | None = None) -> FastAPI:
    """The stand-in as an ASGI app. ``app.state.calls`` counts the calls answered."""
    app = FastAPI(title="lemongraph stand-in model", docs_url=None, redoc_url=None)
    app.state.calls = 0
    counter = itertools.count(1)

    def ids(prefix: str) -> str:
        return f"{prefix}_standin{next(counter):08d}"

    async def body_of(request: Request) -> dict[str, Any] | JSONResponse:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        return body

    @app.post("/v1/responses", response_model=None)
    async def responses(request: Request) -> Any:
        body = await body_of(request)
        if isinstance(body, JSONResponse):
            return body
        app.state.calls += 1
        seen = seen_in_responses(body)
        answer = policy(seen, script)
        if answer.fail is not None:
            return _failure(answer.fail)
        model = str(body.get("model") or "standin")
        if answer.tool is not None:
            out_text = json.dumps(dict(answer.args), sort_keys=True)
            item: dict[str, Any] = {
                "type": "function_call",
                "id": ids("fc"),
                "call_id": ids("call"),
                "name": answer.tool,
                "arguments": out_text,
                "status": "completed",
            }
        else:
            out_text = answer.say or ""
            item = {
                "type": "message",
                "id": ids("msg"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": out_text, "annotations": []}],
            }
        usage = {
            "input_tokens": _tokens(seen.text),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": _tokens(out_text),
            "output_tokens_details": {"reasoning_tokens": 0},
        }
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]  # type: ignore[operator]
        response = {
            "id": ids("resp"),
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": "completed",
            "output": [item],
            "parallel_tool_calls": False,
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "usage": usage,
            "store": bool(body.get("store", False)),
        }
        if not body.get("stream"):
            return JSONResponse(response)
        return StreamingResponse(_responses_stream(response, item), media_type="text/event-stream")

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> Any:
        body = await body_of(request)
        if isinstance(body, JSONResponse):
            return body
        app.state.calls += 1
        seen = seen_in_chat(body)
        answer = policy(seen, script)
        if answer.fail is not None:
            return _failure(answer.fail)
        message: dict[str, Any] = {"role": "assistant", "content": None}
        finish: Literal["stop", "tool_calls"] = "stop"
        if answer.tool is not None:
            out_text = json.dumps(dict(answer.args), sort_keys=True)
            message["tool_calls"] = [
                {
                    "id": ids("call"),
                    "type": "function",
                    "function": {"name": answer.tool, "arguments": out_text},
                }
            ]
            finish = "tool_calls"
        else:
            out_text = answer.say or ""
            message["content"] = out_text
        prompt, completion = _tokens(seen.text), _tokens(out_text)
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
        completion_id = ids("chatcmpl")
        created = int(time.time())
        model = str(body.get("model") or "standin")
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        options = body.get("stream_options") or {}
        include_usage = bool(options.get("include_usage")) if isinstance(options, dict) else False
        chunks = _chat_chunks(completion_id, created, model, message, finish, usage, include_usage)
        return StreamingResponse(chunks, media_type="text/event-stream")

    return app


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"message": message, "type": "invalid_request_error"}}, status_code=status
    )


def _failure(status: int) -> JSONResponse:
    """A scripted failure (a rule's ``fail``), as an OpenAI error body."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return JSONResponse(
        {"error": {"message": f"the stand-in's script fails this call ({status})", "type": kind}},
        status_code=status,
    )


def _sse(event: str | None, data: Mapping[str, Any] | str) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


async def _responses_stream(response: dict[str, Any], item: dict[str, Any]) -> AsyncIterator[bytes]:
    sequence = itertools.count()
    started = {**response, "status": "in_progress", "output": []}
    yield _sse(
        "response.created",
        {"type": "response.created", "response": started, "sequence_number": next(sequence)},
    )
    pending = {**item, "status": "in_progress"}
    if item["type"] == "message":
        pending["content"] = []
    yield _sse(
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": pending,
            "sequence_number": next(sequence),
        },
    )
    if item["type"] == "message":
        text = item["content"][0]["text"]
        for i in range(0, max(len(text), 1), 16):
            yield _sse(
                "response.output_text.delta",
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": text[i : i + 16],
                    "logprobs": [],
                    "sequence_number": next(sequence),
                },
            )
    else:
        yield _sse(
            "response.function_call_arguments.done",
            {
                "type": "response.function_call_arguments.done",
                "item_id": item["id"],
                "output_index": 0,
                "arguments": item["arguments"],
                "sequence_number": next(sequence),
            },
        )
    yield _sse(
        "response.output_item.done",
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": item,
            "sequence_number": next(sequence),
        },
    )
    yield _sse(
        "response.completed",
        {"type": "response.completed", "response": response, "sequence_number": next(sequence)},
    )


async def _chat_chunks(
    completion_id: str,
    created: int,
    model: str,
    message: dict[str, Any],
    finish: str,
    usage: dict[str, Any],
    include_usage: bool,
) -> AsyncIterator[bytes]:
    def chunk(delta: dict[str, Any], reason: str | None) -> dict[str, Any]:
        return {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
        }

    yield _sse(None, chunk({"role": "assistant", "content": ""}, None))
    if message.get("tool_calls"):
        calls = [{"index": 0, **message["tool_calls"][0]}]
        yield _sse(None, chunk({"tool_calls": calls}, None))
    else:
        text = str(message.get("content") or "")
        for i in range(0, len(text), 16):
            yield _sse(None, chunk({"content": text[i : i + 16]}, None))
    yield _sse(None, chunk({}, finish))
    if include_usage:
        yield _sse(
            None,
            {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
            },
        )
    yield _sse(None, "[DONE]")


class StandinThread(AppThread):
    """The stand-in served from a thread of this process (``lemongraph dev``);
    ``url`` is its ``/v1`` base."""

    def __init__(self, host: str, port: int, script: StandinScript | None = None) -> None:
        super().__init__(build_standin(script), host, port, "stand-in model")
        self.url = f"{self.url}/v1"
