"""The model: one call of the official ``openai`` client, over the Responses
API (default, ``store=False``, the full input each call) or Chat Completions
(``LEMONGRAPH_OPENAI_API=chat``). docs/agents.md, "The model".

The client retries 429 and 5xx answers itself, with backoff
(``LEMONGRAPH_MODEL_RETRIES``). Whatever still fails, and an answer that is
not a usable reply, is a :class:`ModelError` with a ``kind``: the run records it
and goes on; it never crashes the service. So is a reply over
``LEMONGRAPH_MAX_REPLY_BYTES`` (its text and tool-call arguments together): it is
never kept (docs/agents.md, "Output bounds").
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue
from stream.runtime.tracing import annotate, span

from agents.compose import ModelRequest
from agents.errors import AgentsError

if TYPE_CHECKING:
    import openai

__all__ = [
    "MAX_REPLY_BYTES",
    "Completion",
    "Exchange",
    "Model",
    "ModelError",
    "ModelSettings",
    "ToolCall",
    "Usage",
    "whole_number",
]

#: The default bound of one model reply: its text and its tool calls' arguments,
#: in UTF-8 bytes (docs/agents.md, "Output bounds").
MAX_REPLY_BYTES = 65_536


@dataclass(frozen=True)
class ModelSettings:
    """How to reach the model. ``api_key`` is never logged or journaled."""

    api_key: str
    base_url: str | None = None
    model: str = "gpt-4o"
    api: Literal["responses", "chat"] = "responses"
    retries: int = 3
    timeout: float = 60.0
    #: A reply over this many bytes (text and arguments) is refused: ``too_large``.
    max_reply_bytes: int = MAX_REPLY_BYTES

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ModelSettings:
        """``OPENAI_API_KEY``, ``OPENAI_BASE_URL``, ``OPENAI_MODEL``,
        ``LEMONGRAPH_OPENAI_API`` (responses | chat), ``LEMONGRAPH_MODEL_RETRIES``,
        ``LEMONGRAPH_MAX_REPLY_BYTES``."""
        api = env.get("LEMONGRAPH_OPENAI_API", "responses").strip() or "responses"
        if api not in ("responses", "chat"):
            raise ValueError(f"LEMONGRAPH_OPENAI_API: {api!r} is not responses or chat")
        return cls(
            api_key=env.get("OPENAI_API_KEY", ""),
            base_url=env.get("OPENAI_BASE_URL") or None,
            model=env.get("OPENAI_MODEL", "gpt-4o").strip() or "gpt-4o",
            api="chat" if api == "chat" else "responses",
            retries=whole_number(env, "LEMONGRAPH_MODEL_RETRIES", 3, least=0),
            max_reply_bytes=whole_number(env, "LEMONGRAPH_MAX_REPLY_BYTES", MAX_REPLY_BYTES),
        )


def whole_number(env: Mapping[str, str], name: str, default: int, *, least: int = 1) -> int:
    """The setting ``name`` of ``env`` as a whole number of at least ``least``
    (``default`` when unset or empty); ``ValueError`` naming it otherwise."""
    text = env.get(name, "").strip().replace("_", "")
    if not text:
        return default
    if not text.isdigit() or int(text) < least:
        raise ValueError(f"{name}: {text!r} is not a whole number of at least {least}")
    return int(text)


@dataclass(frozen=True)
class ToolCall:
    """A function call the model asked for. ``call_id`` is the model's: it is
    sent back with the result and never used to name a side effect."""

    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Exchange:
    """A tool call of this run and what the executor answered."""

    call: ToolCall
    output: str


@dataclass(frozen=True)
class Usage:
    """Tokens, as the server reported them."""

    input: int
    output: int
    cached: int
    total: int


@dataclass(frozen=True)
class Completion:
    """Text for the person, or tool calls (or both), with usage and latency."""

    text: str | None
    calls: tuple[ToolCall, ...]
    usage: Usage | None
    seconds: float


class ModelError(AgentsError):
    """A model call that gave no usable reply. ``kind``: ``status`` (an HTTP
    error after the retries), ``transport`` (no answer), ``garbage`` (an answer
    that is no reply), ``too_large`` (a reply over ``max_reply_bytes``)."""

    def __init__(
        self, kind: Literal["status", "transport", "garbage", "too_large"], message: str
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Model:
    """Calls the model for one request and the run's exchanges so far."""

    def __init__(self, settings: ModelSettings) -> None:
        self.settings = settings
        self._client: openai.AsyncOpenAI | None = None

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The ``openai`` client, made at the first call: importing ``openai``
        costs a process about 0.7 s of CPU, which the agents service, the gateway's
        tests and ``dev`` spend only once a model is called."""
        if self._client is None:
            import openai

            settings = self.settings
            self._client = openai.AsyncOpenAI(
                api_key=settings.api_key or "unset",
                base_url=settings.base_url,
                max_retries=settings.retries,
                timeout=settings.timeout,
            )
        return self._client

    def warm(self) -> None:
        """Import ``openai`` and make the client now, not at the first call: a
        service that will call the model pays it before it is ready, not while
        a burst of tasks waits (about 0.5 s of CPU: benchmarks/README.md, "The
        agents service")."""
        self.client  # noqa: B018 - made for its side effect

    async def close(self) -> None:
        """Release the HTTP connections (none before the first call)."""
        if self._client is not None:
            await self._client.close()

    async def call(
        self,
        request: ModelRequest,
        exchanges: Sequence[Exchange] = (),
        *,
        output_schema: Mapping[str, Any] | None = None,
    ) -> Completion:
        """One model call. Raises :class:`ModelError`. With ``output_schema`` (a
        JSON Schema) the answer is asked for as JSON of that shape, through the
        API's structured output (a flow's llm node with a ``schema``).

        Traced as a GenAI ``chat MODEL`` span (docs/operations.md, "Tracing"):
        the models and the token counts, never the prompt or the reply."""
        model = self.settings.model
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
            "gen_ai.agent.name": request.agent,
        }
        with span("agents", f"chat {model}", attributes, SpanKind.CLIENT) as traced:
            try:
                reply = await self._call(request, exchanges, output_schema)
            except ModelError as exc:
                if traced is not None:
                    traced.set_attribute("error.type", exc.kind)
                raise
            if traced is not None and reply.usage is not None:
                traced.set_attributes(
                    {
                        "gen_ai.usage.input_tokens": reply.usage.input,
                        "gen_ai.usage.output_tokens": reply.usage.output,
                    }
                )
            return reply

    async def _call(
        self,
        request: ModelRequest,
        exchanges: Sequence[Exchange],
        output_schema: Mapping[str, Any] | None,
    ) -> Completion:
        import openai  # for its errors: a model is called (see ``client``)

        started = time.monotonic()
        try:
            if self.settings.api == "chat":
                reply = await self._chat(request, exchanges, output_schema)
            else:
                reply = await self._responses(request, exchanges, output_schema)
        except openai.APIStatusError as exc:
            raise ModelError("status", f"HTTP {exc.status_code}: {_short(exc.message)}") from None
        except openai.APIConnectionError as exc:
            raise ModelError("transport", _short(str(exc)) or type(exc).__name__) from None
        except (openai.OpenAIError, ValueError, TypeError, AttributeError, KeyError) as exc:
            raise ModelError("garbage", f"{type(exc).__name__}: {_short(str(exc))}") from None
        text, calls, usage = reply
        if not text and not calls:
            raise ModelError("garbage", "the reply has neither text nor a tool call")
        self._bounded(text, calls)
        return Completion(text or None, calls, usage, time.monotonic() - started)

    def _bounded(self, text: str, calls: Sequence[ToolCall]) -> None:
        """Refuse a reply whose text and tool-call arguments are over the bound
        before anything keeps it (docs/agents.md, "Output bounds")."""
        bound = self.settings.max_reply_bytes
        size = len(text.encode()) + sum(len(c.arguments.encode()) for c in calls)
        if size > bound:
            what = "text" if not calls else "tool-call arguments" if not text else "text and calls"
            raise ModelError(
                "too_large",
                f"the reply ({what}) is {size:,} bytes, over LEMONGRAPH_MAX_REPLY_BYTES "
                f"({bound:,}): not kept",
            )

    async def _responses(
        self,
        request: ModelRequest,
        exchanges: Sequence[Exchange],
        output_schema: Mapping[str, Any] | None = None,
    ) -> tuple[str, tuple[ToolCall, ...], Usage | None]:
        items: list[Any] = [{"role": role, "content": text} for role, text in request.messages]
        if request.images and items:
            # The Responses API's image input: parts of the last message.
            items[-1]["content"] = [
                {"type": "input_text", "text": items[-1]["content"]},
                *({"type": "input_image", "image_url": url} for url in request.images),
            ]
        for exchange in exchanges:
            call = exchange.call
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": call.arguments,
                }
            )
            items.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": exchange.output}
            )
        tools: list[Any] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": dict(t.parameters),
                "strict": False,
            }
            for t in request.tools
        ]
        options: dict[str, Any] = {}
        if output_schema is not None:
            options["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": "answer",
                    "schema": dict(output_schema),
                    "strict": False,
                }
            }
        body = {
            "model": self.settings.model,
            "instructions": request.instructions,
            "input": items,
            "tools": tools,
            "store": False,
            **options,
        }
        # The client's own POST (its auth, retries, timeouts and errors), the body
        # as built here and the reply read as JSON: ``responses.create`` walks the
        # body through the SDK's typed transform and builds its models from the
        # reply, 60 % of a call's CPU for plain JSON both ways
        # (benchmarks/README.md, "The agents service").
        raw = await self.client.post("/responses", body=body, cast_to=bytes)
        return _read_response(orjson.loads(raw))

    async def _chat(
        self,
        request: ModelRequest,
        exchanges: Sequence[Exchange],
        output_schema: Mapping[str, Any] | None = None,
    ) -> tuple[str, tuple[ToolCall, ...], Usage | None]:
        messages: list[Any] = [{"role": "system", "content": request.instructions}]
        messages.extend({"role": role, "content": text} for role, text in request.messages)
        if request.images and len(messages) > 1:
            # Chat completions' image input: parts of the last message.
            messages[-1]["content"] = [
                {"type": "text", "text": messages[-1]["content"]},
                *({"type": "image_url", "image_url": {"url": url}} for url in request.images),
            ]
        for exchange in exchanges:
            call = exchange.call
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                    ],
                }
            )
            messages.append(
                {"role": "tool", "tool_call_id": call.call_id, "content": exchange.output}
            )
        tools: list[Any] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                },
            }
            for t in request.tools
        ]
        options: dict[str, Any] = {"tools": tools} if tools else {}
        if output_schema is not None:
            options["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": dict(output_schema), "strict": False},
            }
        completion = await self.client.chat.completions.create(
            model=self.settings.model, messages=messages, **options
        )
        annotate({"gen_ai.response.model": completion.model, "gen_ai.response.id": completion.id})
        if not completion.choices:
            raise ValueError("the completion has no choices")
        message = completion.choices[0].message
        calls = tuple(
            ToolCall(str(c.id), str(c.function.name), str(c.function.arguments))
            for c in message.tool_calls or []
            if c.type == "function"
        )
        usage = None
        if completion.usage is not None:
            u = completion.usage
            details = u.prompt_tokens_details
            cached = details.cached_tokens if details and details.cached_tokens else 0
            usage = Usage(u.prompt_tokens, u.completion_tokens, cached, u.total_tokens)
        return message.content or "", calls, usage


def _read_response(data: Any) -> tuple[str, tuple[ToolCall, ...], Usage | None]:
    """A Responses API reply: its text (every ``output_text`` part of its
    messages, as the SDK's ``output_text`` joins them), its function calls and
    its usage. ValueError when it is no Responses object."""
    if not isinstance(data, dict) or not isinstance(data.get("output"), list):
        raise ValueError("the answer is not a Responses object")
    annotate(
        {"gen_ai.response.model": str(data.get("model")), "gen_ai.response.id": str(data.get("id"))}
    )
    texts: list[str] = []
    calls: list[ToolCall] = []
    for item in data["output"]:
        if not isinstance(item, dict):
            raise ValueError("an output item is not an object")
        kind = item.get("type")
        if kind == "function_call":
            calls.append(ToolCall(str(item["call_id"]), str(item["name"]), str(item["arguments"])))
        elif kind == "message":
            texts.extend(
                part["text"]
                for part in item.get("content") or ()
                if isinstance(part, dict)
                and part.get("type") == "output_text"
                and isinstance(part.get("text"), str)  # as the SDK's output_text: no null
            )
    usage = None
    u = data.get("usage")
    if isinstance(u, dict):
        details = u.get("input_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else 0
        # A count a server leaves out or null is 0 (the reply is kept).
        usage = Usage(
            int(u.get("input_tokens") or 0),
            int(u.get("output_tokens") or 0),
            int(cached or 0),
            int(u.get("total_tokens") or 0),
        )
    return "".join(texts), tuple(calls), usage


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
