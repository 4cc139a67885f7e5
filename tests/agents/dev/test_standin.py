"""The stand-in model through the real ``openai`` client, over HTTP: both
APIs, streaming and not, tool calls, usage, script rules; and the model
wrapper's errors. Nothing is mocked in-process."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import yaml
from fastapi import FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse

from agents.compose import DELEGATE_PARAMETERS, TOOL_TURN, ModelRequest, ToolOffer
from agents.dev.standin import StandinScript, _seen, build_standin, load_script
from agents.model import Exchange, Model, ModelError, ModelSettings, ToolCall
from stream.runtime.broker import free_port
from tests.inprocess import LEMONGRAPH, invoke

if TYPE_CHECKING:
    import openai

BOOK = ToolOffer(
    "schedule_meeting",
    "Book a meeting.",
    {"type": "object", "properties": {"when": {"type": "string"}}, "required": ["when"]},
)
SCRIPT = StandinScript.model_validate(
    {
        "rules": [
            {"when": {"agent": "crm_agent", "tool_result": "update_crm"}, "say": "CRM updated."},
            {"when": {"agent": "crm_agent"}, "call": {"tool": "update_crm", "args": {"d": 1}}},
            {"when": {"last_message_contains": "BOOK"},
             "call": {"tool": "schedule_meeting", "args": {"when": "tomorrow 10:00"}}},
            {"when": {"tool_result": "schedule_meeting"}, "say": "Your meeting is booked."},
            {"when": {"next_step": "record"}, "say": "Let us record the deal."},
            {"say": "I have booked the meeting."},
        ]
    }
)  # fmt: skip


def request(agent: str = "conversation", step: str = "bookCall", said: str = "hi") -> ModelRequest:
    return ModelRequest(
        agent,
        f"Agent: {agent}\nDo the work.\nNext best step: {step}\n  Book it.",
        (("user", said),),
        (BOOK,),
    )


def ask(settings: ModelSettings, req: ModelRequest) -> Any:
    """One call on a fresh client, closed after it."""

    async def go() -> Any:
        model = Model(settings)
        try:
            return await model.call(req)
        finally:
            await model.close()

    return asyncio.run(go())


@pytest.fixture(params=["responses", "chat"])
def settings(request: pytest.FixtureRequest, serve: Callable[[Any], str]) -> ModelSettings:
    base = serve(build_standin(SCRIPT))
    return ModelSettings(api_key="sk-test", base_url=f"{base}/v1", api=request.param)


def test_text_tool_calls_usage_and_tool_results(settings: ModelSettings) -> None:
    async def go() -> None:
        model = Model(settings)
        try:
            await conversation(model)
        finally:
            await model.close()

    async def conversation(model: Model) -> None:
        reply = await model.call(request(said="hello"))
        assert reply.text == "I have booked the meeting."
        assert reply.calls == ()
        assert reply.usage is not None
        assert reply.usage.input > 0
        assert reply.usage.output > 0
        assert reply.usage.total == reply.usage.input + reply.usage.output
        booked = await model.call(request(said="please book a call"))
        assert booked.text is None
        [call] = booked.calls
        assert (call.name, json.loads(call.arguments)) == (
            "schedule_meeting",
            {"when": "tomorrow 10:00"},
        )
        after = await model.call(
            request(said="please book a call"), [Exchange(call, '{"ok": true}')]
        )
        assert after.text == "Your meeting is booked."
        assert (await model.call(request(step="record"))).text == "Let us record the deal."
        # a delegate, by the agent line; it calls a tool the request did not offer
        [crm] = (await model.call(request(agent="crm_agent"))).calls
        assert crm.name == "update_crm"
        done = await model.call(request(agent="crm_agent"), [Exchange(crm, "{}")])
        assert done.text == "CRM updated."

    asyncio.run(go())


def test_both_apis_stream(serve: Callable[[Any], str]) -> None:
    # openai (about 1 s of CPU to import) is imported where it is used, not by every
    # test process collecting the suite (docs/operations.md, "How long a start takes").
    import openai

    base = serve(build_standin(SCRIPT))
    with openai.OpenAI(api_key="sk-test", base_url=f"{base}/v1", max_retries=0) as client:
        streamed(client)


def streamed(client: openai.OpenAI) -> None:
    events = list(
        client.responses.create(
            model="m", instructions="Agent: x", input="hello", stream=True, store=False
        )
    )
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "I have booked the meeting."
    assert events[-1].response.usage is not None
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "book it"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    said = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert said == ""  # it called the tool instead
    calls = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]
    assert calls[0][0].function.name == "schedule_meeting"
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0


def failing(status: int | None) -> FastAPI:
    app = FastAPI()
    app.state.hits = 0

    @app.post("/v1/responses", response_model=None)
    async def answer() -> Any:
        app.state.hits += 1
        if status is None:
            return PlainTextResponse("<html>not json</html>")
        return JSONResponse({"error": {"message": "overloaded"}}, status_code=status)

    return app


def test_a_server_error_is_retried_then_a_model_error(serve: Callable[[Any], str]) -> None:
    app = failing(503)
    base = serve(app)
    with pytest.raises(ModelError) as caught:
        ask(ModelSettings(api_key="sk-test", base_url=f"{base}/v1", retries=1), request())
    assert caught.value.kind == "status"
    assert "HTTP 503" in caught.value.message
    assert app.state.hits == 2  # one retry


def test_an_answer_that_is_no_reply_is_garbage_not_a_crash(serve: Callable[[Any], str]) -> None:
    base = serve(failing(None))
    with pytest.raises(ModelError) as caught:
        ask(ModelSettings(api_key="sk-test", base_url=f"{base}/v1", retries=0), request())
    assert caught.value.kind == "garbage"


def test_no_server_is_a_transport_error() -> None:
    port = free_port()
    model = Model(
        ModelSettings(api_key="sk-test", base_url=f"http://127.0.0.1:{port}/v1", retries=0)
    )
    with pytest.raises(ModelError) as caught:
        asyncio.run(model.call(request()))
    assert caught.value.kind == "transport"


def test_the_standin_command_serves_a_script(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text('rules:\n  - when: {next_step: bookCall}\n    say: "Shall we book?"\n')
    assert load_script(script).rules[0].say == "Shall we book?"
    port = free_port()
    proc = subprocess.Popen(
        [str(LEMONGRAPH), "standin", "--port", str(port), "--script", str(script)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60  # a process start on a busy 2-core machine
        while True:
            try:
                httpx.post(f"http://127.0.0.1:{port}/v1/responses", json={}, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the stand-in did not start"
                time.sleep(0.1)
        local = ModelSettings(api_key="sk-x", base_url=f"http://127.0.0.1:{port}/v1")
        assert ask(local, request()).text == "Shall we book?"
    finally:
        proc.terminate()
        proc.wait(10)


def test_a_bad_script_is_refused_naming_the_file(tmp_path: Path) -> None:
    script = tmp_path / "bad.yaml"
    script.write_text("rules:\n  - when: {agent: x}\n    say: a\n    call: {tool: t}\n")
    # in the test's process (tests/inprocess.py); the script of the command that
    # serves runs as a real process above
    done = invoke(["standin", "--script", str(script)], env=os.environ, cwd=Path.cwd())
    assert done.returncode != 0
    assert str(script) in done.stdout + done.stderr
    assert "exactly one of say or call" in done.stdout + done.stderr


def test_the_model_call_id_is_kept_verbatim() -> None:
    # The executor never names a side effect by it (agents/tools/executor.py); it is
    # only echoed back to the model.
    call = ToolCall("call_xyz", "schedule_meeting", "{}")
    assert Exchange(call, "{}").call.call_id == "call_xyz"


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_tool_failed_holds_only_for_a_result_that_says_it_failed(
    api: str, serve: Callable[[Any], str]
) -> None:
    script = StandinScript.model_validate(
        {
            "rules": [
                {"when": {"tool_failed": "schedule_meeting"}, "say": "It failed; again."},
                {"when": {"tool_result": "schedule_meeting"}, "say": "Booked."},
            ]
        }
    )
    base = serve(build_standin(script))
    settings = ModelSettings(api_key="sk-test", base_url=f"{base}/v1", api=api)  # type: ignore[arg-type]
    call = ToolCall("call_1", "schedule_meeting", '{"when": "10:00"}')
    failed = Exchange(call, '{"ok": false, "error": "HTTP 500: down"}')
    done = Exchange(call, '{"ok": true, "result": {"when": "10:00"}}')

    async def go(exchange: Exchange) -> str | None:
        model = Model(settings)
        try:
            return (await model.call(request(), [exchange])).text
        finally:
            await model.close()

    assert asyncio.run(go(failed)) == "It failed; again."
    assert asyncio.run(go(done)) == "Booked."


CRM = ToolOffer("crm_agent", "Keeps the CRM.", DELEGATE_PARAMETERS, "delegate")


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_builtin_policy_hands_a_persons_answer_to_the_delegate(
    api: str, serve: Callable[[Any], str]
) -> None:
    base = serve(build_standin())
    settings = ModelSettings(api_key="sk-test", base_url=f"{base}/v1", api=api)  # type: ignore[arg-type]
    instructions = "Agent: conversation\nNext best step: activateAccount\n  Activate it."

    def ask_with(messages: tuple[tuple[str, str], ...]) -> Any:
        return ask(settings, ModelRequest("conversation", instructions, messages, (CRM,)))  # type: ignore[arg-type]

    # the person answered: their words go to the delegate
    reply = ask_with((("user", "Yes, activate my account please."),))
    [call] = reply.calls
    assert (call.name, json.loads(call.arguments)) == (
        "crm_agent",
        {"request": "Yes, activate my account please."},
    )
    # the last thing is the agent's, or an earlier tool result: nobody asked, so it greets
    for last in (("assistant", "Done: it is booked."), ("user", f"{TOOL_TURN}x) ok")):
        quiet = ask_with((("user", "Please book tomorrow."), last))
        assert quiet.calls == ()
        assert quiet.text == "Hello! Let us work on activateAccount together."


ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_builtin_policy_answers_a_heartbeat_with_heartbeat_ok(
    api: str, serve: Callable[[Any], str]
) -> None:
    """`lemongraph dev`'s heartbeat (examples/schedules.yaml, queue-check) on the
    built-in policy, as the agents service composes it from examples/catalog.yaml:
    asked to answer HEARTBEAT_OK when nothing needs a person, the stand-in (which
    sees nothing) answers exactly that, so the run is suppressed, not an alert."""
    from agents.catalog import load_catalog_file
    from agents.compose import OpenTask, Turn, compose

    catalog = load_catalog_file(ROOT / "examples" / "catalog.yaml")
    schedules = yaml.safe_load((ROOT / "examples" / "schedules.yaml").read_text())
    [check] = [s for s in schedules["schedules"] if s.get("id") == "queue-check"]
    prompt = check["action"]["prompt"]
    base = serve(build_standin())
    settings = ModelSettings(api_key="sk-test", base_url=f"{base}/v1", api=api)  # type: ignore[arg-type]

    def heartbeat(text: str, agent: str = check["action"]["agent"]) -> ModelRequest:
        task = OpenTask("sl-1", "schedule", text, "2026-03-09T10:00:00Z", ())
        return compose(
            catalog,
            playbook_instructions="",
            tasks=[task],
            subject={},
            contacts=[],
            turns=[Turn("person", text)],
            agent=agent,
        )

    assert ask(settings, heartbeat(prompt)).text == "HEARTBEAT_OK"
    woken = f'{prompt}\n\nContext: {{"ticket": "T-41"}}'  # a wake's context after it
    assert ask(settings, heartbeat(woken)).text == "HEARTBEAT_OK"
    # Only the prompt or the agent's instructions make it a heartbeat.
    greeting = ask(settings, heartbeat("Say hello.", "conversation")).text
    assert greeting == "Hello! Let us work on schedule together."
    # An agent with a tool looks first (its first tool), then answers.
    check_queue = ToolOffer("check_queue", "Count the queue.", {"type": "object"})
    req = ModelRequest("watcher", "Agent: watcher\nAnswer HEARTBEAT_OK if all is well.",
                       (("user", "Check the queue."),), (check_queue,))  # fmt: skip
    [call] = ask(settings, req).calls
    assert call.name == "check_queue"

    async def after_the_result() -> Any:
        model = Model(settings)
        try:
            return await model.call(req, [Exchange(call, '{"ok": true, "result": {"n": 0}}')])
        finally:
            await model.close()

    assert asyncio.run(after_the_result()).text == "HEARTBEAT_OK"


def test_the_heartbeat_examples_of_docs_agents_md_are_the_catalogs_and_run() -> None:
    """docs/agents.md, "Scheduled prompts and heartbeats": its catalog block is
    examples/catalog.yaml's queue_watcher, and its script alerts on a wake's
    context and fails on "fail", leaving the rest to the built-in HEARTBEAT_OK."""
    from agents.dev.standin import policy

    page = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    section = page.split("## Scheduled prompts and heartbeats", 1)[1].split("\n## ", 1)[0]
    agents_block, script_block = re.findall(r"```yaml norun\n(.*?)```", section, re.S)[:2]
    catalog = yaml.safe_load((ROOT / "examples" / "catalog.yaml").read_text())
    shown = yaml.safe_load(agents_block)["agents"]
    assert shown == {"queue_watcher": catalog["agents"]["queue_watcher"]}
    script = StandinScript.model_validate(yaml.safe_load(script_block))
    instructions = f"Agent: queue_watcher\n{shown['queue_watcher']['instructions']}"

    def answer(prompt: str) -> Any:
        steps = [("user", "", "", prompt)]
        return policy(_seen(instructions, steps, []), script)

    assert answer("Check the support queue.").say == "HEARTBEAT_OK"
    alert = answer('Check the support queue.\n\nContext: {"ticket":"T-41"}').say
    assert alert == "Ticket T-41 has waited two days."
    assert answer("Check it, or fail.").fail == 500
