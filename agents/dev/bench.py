"""``lemongraph bench-agents``: what one ``lemongraph agents`` process sustains
(docs/agents.md, "Measuring the agents service").

Every figure comes from one run on one machine, side by side:

1. **direct**: the same work without the service: for each job, compose the
   request, call the stand-in model, call the tool endpoint, call the model
   with the result; ``concurrency`` jobs at a time, in this process, through the
   same ``openai`` client and the same HTTP tool endpoint. This is the ceiling
   the stand-in and the tool endpoint allow on this machine.
2. **service**: a real ``lemongraph agents`` process on a real broker, with
   ``jobs`` ``task.opened`` records produced at once, then a few more one at a
   time (the latency of a service that is not queueing). Each job's run makes the
   same two model calls and one tool call, and checkpoints, journals, publishes.
   The figures are read from the journal the service wrote: model and tool
   calls per second from the first record produced to the last run's end, and
   the time from a job's ``task.opened`` being produced to its first model
   request (``at`` minus ``latency_ms`` of its first ``journal.model_call``).

The ratio service/direct is the layer's own cost.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx2
import orjson
from fastapi import FastAPI, Request
from stream.runtime.broker import EmbeddedBroker, free_port
from stream.runtime.kafka import bootstrap_of, producer, read_topic
from stream.runtime.processes import ChildProcess, collector_paused
from topics import TaskOpenedRecord, Topics, encode

from agents.catalog import Catalog, load_catalog, load_catalog_file
from agents.compose import OpenTask, Turn, compose
from agents.dev.serving import AppThread
from agents.model import Exchange, Model, ModelSettings
from agents.service.state import AGENT_CONCURRENCY

__all__ = ["AgentFigures", "onboarding_tokens", "run_agents_bench"]

PARTITIONS = 4
#: After the burst: this many tasks (as many as the burst's when fewer: a small
#: run is small throughout), one every QUIET_SPACING seconds.
QUIET_JOBS = 40
QUIET_SPACING = 0.25

CATALOG = """\
integrations:
  calendar: {tools: [schedule_meeting]}
agents:
  conversation: {instructions: "You help the customer book a call."}
tools:
  schedule_meeting:
    description: Book a meeting at a given time.
    parameters: {type: object, properties: {when: {type: string}}, required: [when]}
    http: {url: "${BENCH_TOOLS_URL}/book", method: POST}
    idempotent: true
    records: {fact: meeting_scheduled, properties: {when: "$.when"}}
"""
SCRIPT = """\
rules:
  - when: {tool_result: schedule_meeting}
    say: "Your call is booked."
  - call: {tool: schedule_meeting, args: {when: "tomorrow 10:00"}}
"""


@dataclass
class AgentFigures:
    """The figures of one run."""

    jobs: int
    concurrency: int
    direct_model_calls_per_s: float = 0.0
    direct_tool_calls_per_s: float = 0.0
    service_model_calls_per_s: float = 0.0
    service_tool_calls_per_s: float = 0.0
    service_vs_direct: float = 0.0
    first_request_p50_ms: float = 0.0
    first_request_p99_ms: float = 0.0
    first_request_max_ms: float = 0.0
    #: The same, for tasks opened one at a time on an idle service.
    quiet_first_request_p50_ms: float = 0.0
    quiet_first_request_p99_ms: float = 0.0
    #: Input tokens of the onboarding request with 60 turns of history, as the
    #: stand-in counts them: bounded (the default 20 turns) and unbounded.
    tokens_onboarding_first: int = 0
    tokens_onboarding_bounded: int = 0
    tokens_onboarding_unbounded: int = 0


def tools_app() -> FastAPI:
    """The tool endpoint: books at once."""
    app = FastAPI()
    app.state.calls = 0

    @app.post("/book")
    async def book(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.calls += 1
        return {"when": body.get("when"), "id": f"B-{app.state.calls}"}

    return app


def _task(key: str) -> TaskOpenedRecord:
    return TaskOpenedRecord(
        task_id=f"{key}/book",
        job_key=key,
        milestone="book",
        at="2026-01-05T09:00:00Z",
        instructions="Book an onboarding call with the customer.",
        playbook_instructions="Be brief and friendly.",
        integrations=["calendar"],
        deadline="2026-01-08T09:00:00Z",
        frontier=["book"],
        playbook_key="bench",
        subject={"company": "Acme"},
        contacts=[{"name": "Ada"}],
    )


async def _direct(
    catalog: Catalog, model_url: str, tools_url: str, jobs: int, concurrency: int
) -> tuple[float, int, int]:
    """The same calls without the service: (seconds, model calls, tool calls)."""
    model = Model(ModelSettings(api_key="sk-bench", base_url=model_url))
    limit = asyncio.Semaphore(concurrency)
    counts = [0, 0]
    async with httpx2.AsyncClient() as client:

        async def one(i: int) -> None:
            task = _task(f"direct-{i}")
            open_task = OpenTask(
                task.task_id, task.milestone, task.instructions, task.deadline, ("calendar",)
            )
            async with limit:
                request = compose(
                    catalog,
                    playbook_instructions=task.playbook_instructions,
                    tasks=[open_task],
                    subject=task.subject,
                    contacts=task.contacts,
                    turns=[],
                )
                reply = await model.call(request)
                [call] = reply.calls
                response = await client.post(
                    f"{tools_url}/book", content=call.arguments, timeout=10
                )
                await model.call(request, [Exchange(call, response.text)])
                counts[0] += 2
                counts[1] += 1

        started = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(jobs)))
        seconds = time.perf_counter() - started
    await model.close()
    return seconds, counts[0], counts[1]


def _start(command: list[str], env: dict[str, str], ready: str, cwd: Path) -> ChildProcess:
    child = ChildProcess([str(Path(sys.executable).parent / "lemongraph"), *command], env, cwd)
    child.wait_for(ready, timeout=120)
    return child


def _until_serving(url: str, timeout: float = 15.0) -> None:
    """Wait until something answers HTTP at ``url``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            httpx2.get(url, timeout=1.0)
            return
        except httpx2.TransportError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"nothing serves {url}") from None
            time.sleep(0.05)


async def _service(
    kafka_url: str, prefix: str, keys: list[str], spacing: float, wait: float
) -> tuple[float, list[float], int, int]:
    """Produce a task.opened record for each of ``keys`` (all at once, or one
    every ``spacing`` seconds); read the journal until each of their runs ended.
    (seconds, first-request latencies in ms, model calls, tool calls)."""
    topics = Topics(prefix)
    bootstrap = bootstrap_of(kafka_url)
    sent_at: dict[str, float] = {}
    async with producer(bootstrap) as client:
        started = time.time()
        futures = []
        for key in keys:
            sent_at[key] = time.time()
            futures.append(await client.send(topics.tasks, encode(_task(key)), key=key.encode()))
            if spacing:
                await futures[-1]
                await asyncio.sleep(spacing)
        await asyncio.gather(*futures)
    first: dict[str, float] = {}
    ended: float = started
    runs = model_calls = tool_calls = 0
    deadline = time.monotonic() + wait
    seen: set[tuple[int, int]] = set()
    while runs < len(keys):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service ended {runs} of {len(keys)} runs in {wait:.0f} s")
        async for record in read_topic(bootstrap, topics.journal, idle=0.5):
            if (record.partition, record.offset) in seen or record.value is None:
                continue
            seen.add((record.partition, record.offset))
            value = orjson.loads(record.value)
            key = value["job_key"]
            if key not in sent_at:
                continue
            at = datetime.fromisoformat(value["at"].replace("Z", "+00:00")).timestamp()
            if value["type"] == "journal.model_call":
                model_calls += 1
                began = at - value["latency_ms"] / 1000
                first[key] = min(first.get(key, began), began)
            elif value["type"] == "journal.tool_call":
                tool_calls += 1
            elif value["type"] == "journal.run":
                runs += 1
                ended = max(ended, at)
    latencies = sorted((first[k] - sent_at[k]) * 1000 for k in first)
    return ended - started, latencies, model_calls, tool_calls


def onboarding_tokens(catalog_file: Path, model_url: str) -> tuple[int, int, int]:
    """Input tokens (the stand-in's figures) the onboarding playbook's first
    request spends: with no history, with 60 turns bounded to 20, unbounded."""
    catalog = load_catalog_file(catalog_file)
    task = OpenTask(
        "job-1/bookCall",
        "bookCall",
        "Book an onboarding call with the customer.",
        "2026-01-08T09:00:00Z",
        ("email", "calendar"),
    )
    turns = [
        Turn("person" if i % 2 == 0 else "agent", f"Message {i}: when could we talk this week?")
        for i in range(60)
    ]

    async def go() -> tuple[int, int, int]:
        model = Model(ModelSettings(api_key="sk-bench", base_url=model_url))
        out = []
        try:
            for kept, history in (([], 20), (turns, 20), (turns, -1)):
                request = compose(
                    catalog,
                    playbook_instructions="You are onboarding a new business customer.",
                    tasks=[task],
                    subject={"company": "Acme"},
                    contacts=[{"name": "Ada", "email": "ada@example.com"}],
                    turns=kept,
                    history=history,
                )
                reply = await model.call(request)
                out.append(reply.usage.input if reply.usage is not None else 0)
        finally:
            await model.close()
        return out[0], out[1], out[2]

    return asyncio.run(go())


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def run_agents_bench(
    jobs: int = 1000,
    concurrency: int = AGENT_CONCURRENCY,
    say: Callable[[str], None] = print,
    bundled_catalog: Path | None = None,
) -> AgentFigures:
    """Run both parts and return the figures."""
    figures = AgentFigures(jobs=jobs, concurrency=concurrency)
    work = Path(tempfile.mkdtemp(prefix="lemongraph-bench-agents-"))
    url = os.environ.get("LEMONGRAPH_KAFKA_URL", "").strip()
    broker = None
    procs: list[ChildProcess] = []
    try:
        if not url:
            broker = EmbeddedBroker()
            broker.start()
            url = broker.url
        (work / "playbooks").mkdir()
        (work / "playbooks" / "catalog.yaml").write_text(CATALOG)
        (work / "script.yaml").write_text(SCRIPT)
        catalog = load_catalog(CATALOG, "bench catalog")
        port = free_port()
        env = dict(os.environ)
        prefix = f"bench-agents-{uuid.uuid4().hex[:8]}."
        env.update(
            LEMONGRAPH_KAFKA_URL=url,
            LEMONGRAPH_TOPIC_PREFIX=prefix,
            LEMONGRAPH_PARTITIONS=str(PARTITIONS),
            LEMONGRAPH_DATA_DIR=str(work / "data"),
            LEMONGRAPH_PLAYBOOKS_DIR=str(work / "playbooks"),
            LEMONGRAPH_CATALOG=str(work / "playbooks" / "catalog.yaml"),
            LEMONGRAPH_AGENT_CONCURRENCY=str(concurrency),
            OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1",
            OPENAI_API_KEY="sk-bench",
        )
        env.pop("LEMONGRAPH_STANDIN_SCRIPT", None)
        say(f"broker: {url}{' (embedded Tansu)' if broker else ''}; cores: {os.cpu_count()}")
        procs.append(
            _start(
                ["standin", "--port", str(port), "--script", str(work / "script.yaml")],
                env,
                "standin: ",
                work,
            )
        )
        _until_serving(f"http://127.0.0.1:{port}/")
        model_url = env["OPENAI_BASE_URL"]
        tools = AppThread(tools_app(), "127.0.0.1", free_port(), "bench tool endpoint").start()
        try:
            env["BENCH_TOOLS_URL"] = tools.url
            seconds, model_calls, tool_calls = asyncio.run(
                _direct(catalog, model_url, tools.url, jobs, concurrency)
            )
            figures.direct_model_calls_per_s = model_calls / seconds
            figures.direct_tool_calls_per_s = tool_calls / seconds
            say(
                f"direct ({concurrency} at a time, no service): {model_calls:,} model calls and "
                f"{tool_calls:,} tool calls in {seconds:.1f} s"
            )
            procs.append(_start(["agents"], env, "agents: ready", work))
            keys = [f"job-{i:05d}" for i in range(jobs)]
            seconds, latencies, model_calls, tool_calls = asyncio.run(
                _service(url, prefix, keys, spacing=0.0, wait=600)
            )
            quiet = [f"quiet-{i:03d}" for i in range(min(QUIET_JOBS, jobs))]
            # This process's own collections are not the service's latency: a
            # task is stamped here before it is sent (benchmarks/README.md,
            # "The agents service"). The burst keeps them: it is timed against
            # the direct calls, which pay them too.
            with collector_paused():
                _, quiet_latencies, _, _ = asyncio.run(
                    _service(url, prefix, quiet, spacing=QUIET_SPACING, wait=120)
                )
        finally:
            tools.stop()
        figures.service_model_calls_per_s = model_calls / seconds
        figures.service_tool_calls_per_s = tool_calls / seconds
        figures.service_vs_direct = figures.service_model_calls_per_s / max(
            figures.direct_model_calls_per_s, 1e-9
        )
        figures.first_request_p50_ms = _percentile(latencies, 50)
        figures.first_request_p99_ms = _percentile(latencies, 99)
        figures.first_request_max_ms = latencies[-1] if latencies else 0.0
        figures.quiet_first_request_p50_ms = _percentile(quiet_latencies, 50)
        figures.quiet_first_request_p99_ms = _percentile(quiet_latencies, 99)
        say(
            f"service: {model_calls:,} model calls and {tool_calls:,} tool calls in {seconds:.1f} s"
        )
        if bundled_catalog is not None and bundled_catalog.is_file():
            tokens = onboarding_tokens(bundled_catalog, model_url)
            (
                figures.tokens_onboarding_first,
                figures.tokens_onboarding_bounded,
                figures.tokens_onboarding_unbounded,
            ) = tokens
        return figures
    finally:
        for proc in procs:
            proc.kill(signal.SIGTERM)
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def render(f: AgentFigures) -> str:
    """The figures as a table."""
    rows = [
        (f"direct calls, {f.concurrency} at a time (ceiling)",
         f"{f.direct_model_calls_per_s:,.0f} model/s, {f.direct_tool_calls_per_s:,.0f} tool/s"),
        (f"lemongraph agents, {f.jobs:,} jobs at once",
         f"{f.service_model_calls_per_s:,.0f} model/s, {f.service_tool_calls_per_s:,.0f} tool/s"),
        ("service / direct", f"{f.service_vs_direct:.2f}x"),
        (f"task.opened -> first model request ({f.jobs:,} at once)",
         f"p50 {f.first_request_p50_ms:,.0f} ms, p99 {f.first_request_p99_ms:,.0f} ms, "
         f"max {f.first_request_max_ms:,.0f} ms"),
        (f"task.opened -> first model request (one every {QUIET_SPACING * 1000:.0f} ms)",
         f"p50 {f.quiet_first_request_p50_ms:,.1f} ms, "
         f"p99 {f.quiet_first_request_p99_ms:,.1f} ms"),
    ]  # fmt: skip
    if f.tokens_onboarding_first:
        rows.append(
            (
                "onboarding request, input tokens",
                f"{f.tokens_onboarding_first:,} (no history), "
                f"{f.tokens_onboarding_bounded:,} (60 turns, bound 20), "
                f"{f.tokens_onboarding_unbounded:,} (60 turns, unbounded)",
            )
        )
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def figures_json(f: AgentFigures) -> bytes:
    """The figures as one JSON object."""
    return orjson.dumps(asdict(f), option=orjson.OPT_INDENT_2)
