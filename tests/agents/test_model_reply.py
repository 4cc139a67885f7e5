"""How the model's Responses API reply is read (agents/model.py,
``_read_response``): what the ``openai`` SDK's own models make of the same JSON
(``Response.output_text``, its function calls, its usage), and garbage refused."""

from __future__ import annotations

from typing import Any

import pytest
from openai.types.responses import Response

from agents.model import ToolCall, Usage, _read_response


def reply(output: list[dict[str, Any]], cached: int = 0) -> dict[str, Any]:
    return {
        "id": "resp_1", "object": "response", "created_at": 1767603600, "model": "m",
        "status": "completed", "output": output, "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [],
        "usage": {
            "input_tokens": 120, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": 7, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 127,
        },
    }  # fmt: skip


def message(*texts: str) -> dict[str, Any]:
    return {
        "type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": t, "annotations": []} for t in texts],
    }  # fmt: skip


def call(n: int) -> dict[str, Any]:
    return {
        "type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
        "name": "schedule_meeting", "arguments": f'{{"when": "day {n}"}}', "status": "completed",
    }  # fmt: skip


REPLIES = {
    "text": reply([message("Hello.")]),
    "two parts, two messages": reply([message("One. ", "Two."), message(" Three.")], cached=64),
    "calls": reply([call(1), call(2)]),
    "text and a call": reply([message("Booking."), call(3)]),
}


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_read_as_the_sdk_reads_it(name: str) -> None:
    data = REPLIES[name]
    sdk = Response.construct(**data)  # as the SDK builds a reply: no validation
    text, calls, usage = _read_response(data)
    assert text == sdk.output_text
    assert calls == tuple(
        ToolCall(i.call_id, i.name, i.arguments) for i in sdk.output if i.type == "function_call"
    )
    assert sdk.usage is not None
    assert usage == Usage(
        sdk.usage.input_tokens,
        sdk.usage.output_tokens,
        sdk.usage.input_tokens_details.cached_tokens,
        sdk.usage.total_tokens,
    )


def test_a_null_text_is_no_text_and_a_null_count_is_zero() -> None:
    data = reply(
        [message("Hi."), {**message("x"), "content": [{"type": "output_text", "text": None}]}]
    )
    data["usage"]["total_tokens"] = None
    text, calls, usage = _read_response(data)
    assert text == Response.construct(**reply([message("Hi.")])).output_text == "Hi."
    assert calls == ()
    assert usage == Usage(120, 7, 0, 0)


def test_no_usage_is_none() -> None:
    data = reply([message("Hi.")])
    del data["usage"]
    assert _read_response(data) == ("Hi.", (), None)


@pytest.mark.parametrize(
    "garbage",
    [[], "text", {"id": "resp_1"}, {"output": "no list"}, {"output": ["not an item"]}],
)
def test_what_is_no_responses_object_is_refused(garbage: Any) -> None:
    with pytest.raises(ValueError, match="not"):
        _read_response(garbage)


def test_a_call_without_its_fields_is_refused() -> None:
    with pytest.raises(KeyError):
        _read_response(reply([{"type": "function_call", "name": "x"}]))


def test_warm_makes_the_client_before_the_first_call() -> None:
    from agents.model import Model, ModelSettings

    def made(model: Model) -> Any:
        return model._client

    model = Model(ModelSettings(api_key="sk-test", base_url="http://127.0.0.1:9/v1"))
    assert made(model) is None  # nothing made (and openai not needed) until asked
    model.warm()
    assert str(made(model).base_url) == "http://127.0.0.1:9/v1/"
