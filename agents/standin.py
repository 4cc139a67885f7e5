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
latest message contains this, in any case). A call answers either the person or
a tool result, so a rule that books on "book" does not book again once the
booking's result is in. A call to a tool the request did not offer is still
sent, so refusals can be tested.
"""

from __future__ import annotations

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

__all__ = [
    "Answer",
    "Seen",
    "StandinScript",
    "StandinThread",
    "build_standin",
    "load_script",
    "policy",
]

_AGENT = re.compile(r"^Agent: (\S+)\s*$", re.MULTILINE)
_NEXT = re.compile(r"^Next best step: (\S+)\s*$", re.MULTILINE)


class _When(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: str | None = None
    next_step: str | None = None
    tool_result: str | None = None
    tool_failed: str | None = None
    last_message_contains: str | None = None


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)


class _Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    when: _When = Field(default_factory=_When)
    say: str | None = None
    call: _Call | None = None

    @model_validator(mode="after")
    def _one_answer(self) -> _Rule:
        if (self.say is None) == (self.call is None):
            raise ValueError("a rule answers with exactly one of say or call")
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


@dataclass(frozen=True)
class Answer:
    """Text, or one tool call."""

    say: str | None = None
    tool: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)


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
    if when.last_message_contains is not None:
        if seen.tool_result is not None:
            return False  # this call answers a tool result, not the person
        said = (seen.last_message or "").lower()
        if when.last_message_contains.lower() not in said:
            return False
    return True


def policy(seen: Seen, script: StandinScript | None = None) -> Answer:
    """The answer to one call: the first matching rule, else the built-in policy."""
    if script is not None:
        for rule in script.rules:
            if _matches(rule.when, seen):
                if rule.call is not None:
                    return Answer(tool=rule.call.tool, args=dict(rule.call.args))
                return Answer(say=rule.say)
    return _builtin(seen)


def _builtin(seen: Seen) -> Answer:
    """Good enough for the bundled playbooks: after a tool result, say it is
    done; when the person asks to book and a booking tool is offered, book what
    they said; a delegate asked something calls its first tool; else greet the
    person with the next best step."""
    if seen.tool_result is not None:
        return Answer(say=f"Done: {seen.tool_result} confirmed it.")
    said = (seen.last_message or "").strip()
    for tool in seen.tools:
        if tool.startswith("schedule_") and re.search(r"\b(book|schedule|meet)", said, re.I):
            return Answer(tool=tool, args={"when": said})
    if seen.agent not in (None, "conversation") and seen.tools:
        return Answer(tool=seen.tools[0], args={})
    if seen.next_step:
        return Answer(say=f"Hello! Let us work on {seen.next_step} together.")
    return Answer(say="Hello! How can I help?")


# -- reading requests -----------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                parts.append(str(part.get("text") or ""))
        return "".join(parts)
    return ""


def seen_in_responses(body: Mapping[str, Any]) -> Seen:
    """What a ``/v1/responses`` request shows."""
    instructions = str(body.get("instructions") or "")
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    items = items if isinstance(items, list) else []
    names: dict[str, str] = {}
    tool_result = last_message = None
    output = ""
    texts = [instructions]
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
            texts.append(str(item.get("arguments") or ""))
            tool_result = None
        elif kind == "function_call_output":
            tool_result = names.get(str(item.get("call_id")), "?")
            output = str(item.get("output") or "")
            texts.append(output)
        else:
            text = _text_of(item.get("content"))
            texts.append(text)
            role = item.get("role")
            if role in ("system", "developer"):
                instructions += "\n" + text
            elif role == "user":
                last_message, tool_result = text, None
            else:
                tool_result = None
    tools = tuple(str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict))
    return _seen(instructions, tools, tool_result, last_message, texts, output)


def seen_in_chat(body: Mapping[str, Any]) -> Seen:
    """What a ``/v1/chat/completions`` request shows."""
    instructions = ""
    names: dict[str, str] = {}
    tool_result = last_message = None
    output = ""
    texts: list[str] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        text = _text_of(message.get("content"))
        texts.append(text)
        if role in ("system", "developer"):
            instructions += "\n" + text
        elif role == "user":
            last_message, tool_result = text, None
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                names[str(call.get("id"))] = str(function.get("name"))
                texts.append(str(function.get("arguments") or ""))
            tool_result = None
        elif role == "tool":
            tool_result = names.get(str(message.get("tool_call_id")), "?")
            output = text
    tools = tuple(
        str((t.get("function") or {}).get("name"))
        for t in body.get("tools") or []
        if isinstance(t, dict)
    )
    return _seen(instructions, tools, tool_result, last_message, texts, output)


def _seen(
    instructions: str,
    tools: tuple[str, ...],
    tool_result: str | None,
    last_message: str | None,
    texts: Iterable[str],
    output: str,
) -> Seen:
    agent = _AGENT.search(instructions)
    step = _NEXT.search(instructions)
    return Seen(
        agent.group(1) if agent else None,
        step.group(1) if step else None,
        tools,
        tool_result,
        last_message,
        "\n".join(texts),
        tool_result is not None and _failed(output),
    )


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


class StandinThread:
    """The stand-in served from a thread of this process (``lemongraph dev``)."""

    def __init__(self, host: str, port: int, script: StandinScript | None = None) -> None:
        import threading

        import uvicorn

        class _Server(uvicorn.Server):
            def install_signal_handlers(self) -> None:  # the process owns signals
                pass

        config = uvicorn.Config(build_standin(script), host=host, port=port, log_level="warning")
        self.server = _Server(config)
        self.url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(target=self.server.run, name="standin", daemon=True)

    def start(self, timeout: float = 15.0) -> None:
        """Start serving; raises ``RuntimeError`` when it does not come up."""
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the stand-in model did not start on {self.url}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop serving."""
        self.server.should_exit = True
        self._thread.join(5)
