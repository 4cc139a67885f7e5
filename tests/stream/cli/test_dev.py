"""`lemongraph dev` with its own embedded broker: a broker that dies is reported
and ends the run non-zero; the next run starts from fresh state and says so; and
Ctrl-C stops it within seconds (docs/operations.md, "When the broker was reset")."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from stream.runtime.broker import free_port
from tests.lanes import LEMONGRAPH, ROOT, WorkerProcess
from tests.scrape import Samples, metrics_urls, scrape, value

pytestmark = [pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(240)]


def start_dev(cwd: Path, broker_port: int, *flags: str, **extra: str) -> WorkerProcess:
    """`lemongraph dev` on free ports (with ``flags``, e.g. ``--keep``), its
    output collected as a worker's is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEMONGRAPH_")}
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "CALENDAR_URL", "CRM_URL", "BILLING_URL",
                 "REPLY_TOKEN_SECRET", "API_TOKEN_SECRET"):  # fmt: skip
        env.pop(name, None)  # the stand-in, demo tools and mail catcher, as on a fresh machine
    env.update(
        LEMONGRAPH_PLAYBOOKS_DIR=str(ROOT / "examples"),
        LEMONGRAPH_API_PORT=str(free_port()),
        LEMONGRAPH_UI_PORT=str(free_port()),
        LEMONGRAPH_TICK_INTERVAL="0.5",
        LEMONGRAPH_MAIL_INGRESS_PORT=str(free_port()),
    )
    env.update(extra)
    proc = subprocess.Popen(
        [str(LEMONGRAPH), "dev", "--broker-port", str(broker_port), *flags],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    dev = WorkerProcess(proc)
    assert proc.stdout is not None
    stream = proc.stdout
    dev.reader = threading.Thread(target=lambda: dev.lines.extend(stream), daemon=True)
    dev.reader.start()
    return dev


def exit_within(dev: WorkerProcess, seconds: float) -> int:
    """Wait up to ``seconds`` for ``dev`` to exit by itself; its exit code."""
    try:
        return dev.proc.wait(seconds)
    finally:
        dev.stop(signal.SIGKILL)  # only if still running; closes its output


def broker_pid(port: int) -> int:
    """The pid of the Tansu process listening on ``port`` (from /proc)."""
    wanted = f"tcp://127.0.0.1:{port}"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"broker" in argv and wanted.encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no broker process listens on {wanted}")


def test_dev_reports_a_dead_broker_exits_non_zero_and_starts_fresh_next_time(
    tmp_path: Path,
) -> None:
    port = free_port()
    first = start_dev(tmp_path, port)
    try:
        first.wait_for(": ready (group", timeout=90)
        first.wait_for("agents: partitions", timeout=90)  # every part up
        first.wait_for("mail: ready", timeout=90)
        os.kill(broker_pid(port), signal.SIGKILL)
        code = exit_within(first, 30)
    finally:
        first.stop(signal.SIGKILL)
    said = "".join(first.lines)
    assert code != 0, said
    assert "broker: the embedded broker exited unexpectedly" in said
    assert "Run `lemongraph dev` again to start afresh" in said

    second = start_dev(tmp_path, free_port())
    try:
        second.wait_for(": ready (group", timeout=90)
        assert "state: fresh: removed" in "".join(second.lines)
        second.proc.send_signal(signal.SIGINT)  # Ctrl-C
        exit_within(second, 30)
    finally:
        second.stop(signal.SIGKILL)
    assert "broker: stopped" in "".join(second.lines)


def test_the_dev_loop_of_the_readme_closes_offline(tmp_path: Path) -> None:
    """README, "Try it": the one run command, an onboarding job, the person's answers
    through the API (as the UI's box sends them), the stand-in model and the demo
    tools; the job ends done with every milestone settled by a world or tool event."""
    api_port = free_port()
    env_port = {"LEMONGRAPH_API_PORT": str(api_port)}
    dev = start_dev(tmp_path, free_port(), **env_port)
    try:
        dev.wait_for(": ready (group", timeout=90)
        dev.wait_for("agents: ready", timeout=90)
        dev.wait_for("mail: ready", timeout=90)
        dev.wait_for("memory: reading", timeout=90)  # the memory processor (docs/memory.md)
        said = "".join(dev.lines)
        assert "agents: demo tools at" in said
        assert "mail: outbound mail is caught at smtp://" in said
        [token] = re.findall(r"dev token \([^)]*\): (lemongraph_sk_\S+)", said)
        # The UI's address, signed in: the token in the fragment (docs/operations.md, "The UI").
        [ui] = re.findall(r"open the UI \(signed in with the dev token\): (\S+)", said)
        assert ui.endswith(f"/ui/#token={token}"), ui
        page = httpx.get(ui.split("#")[0])  # what a browser asks for: the fragment stays
        assert page.status_code == 200
        assert '<script src="/ui/app.js">' in page.text
        api = f"http://127.0.0.1:{api_port}"
        with httpx.Client(base_url=api, headers={"Authorization": f"Bearer {token}"}) as client:

            def until(check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    found = check()
                    if found:
                        return found
                    time.sleep(0.3)
                raise AssertionError(f"timed out waiting for {what}:\n{''.join(dev.lines[-30:])}")

            def agent_said(words: str) -> Any:
                messages = client.get("/v1/jobs/job-1/messages").json().get("messages", [])
                return any(m["direction"] == "out" and words in m["text"] for m in messages)

            def answer(text: str) -> None:
                sent = client.post("/v1/jobs/job-1/messages", json={"text": text})
                assert sent.status_code == 202, sent.text

            contact = {"name": "Ada", "email": "ada@example.com"}
            started = client.post(
                "/v1/jobs",
                json={"key": "job-1", "playbook_key": "onboarding", "contacts": [contact]},
            )
            assert started.status_code == 202, started.text
            event = {"key": "job-1", "action": "id_uploaded", "idempotency_key": "evt-1"}
            assert client.post("/v1/events", json=event).status_code == 202
            until(lambda: agent_said("bookCall"), "the agent to write about bookCall")
            # bookCall and selfServe are open now (docs/operations.md, "Metrics").
            [gateway_metrics] = metrics_urls(dev.lines)["gateway"]
            until(
                lambda: value(scrape(gateway_metrics), "lemongraph_tasks_open") >= 2,
                "the gateway to count bookCall's and selfServe's tasks open",
            )
            # Ada has an email address: the agent's first words went to her by email,
            # caught by dev's mail catcher, with a signed reply address.
            caught = until(
                lambda: client.get("/v1/dev/mail").json()["mails"], "the agent's email caught"
            )
            assert caught[0]["to"] == ["ada@example.com"]
            assert caught[0]["reply_to"].startswith("reply+r2.")
            assert caught[0]["job_key"] == "job-1"
            answer("Please book a call tomorrow at 10:00")
            until(lambda: agent_said("schedule_meeting confirmed it"), "the booking")
            event = {"key": "job-1", "action": "self_service_completed"}
            assert client.post("/v1/events", json=event).status_code == 202
            until(lambda: agent_said("activateAccount"), "the agent to write about activation")
            answer("Yes, please activate my account")
            done = until(
                lambda: (j := client.get("/v1/jobs/job-1").json())["status"] == "done" and j,
                "the job to be done",
            )
            # The turn that completed the job is answered too (docs/agents.md, "The
            # closing turn"), and by then every message the walk produced is out.
            until(lambda: agent_said("All done"), "the closing reply")
            said_out = [
                m
                for m in client.get("/v1/jobs/job-1/messages").json()["messages"]
                if m["direction"] == "out"
            ]
            emailed = [m for m in said_out if m["channel"] == "email"]
            mails = until(
                lambda: len(m := client.get("/v1/dev/mail").json()["mails"]) >= len(emailed) and m,
                "every message of the agent caught as an email",
            )
            trail = client.get("/v1/jobs/job-1/decisions").json()["decisions"]
            # The heartbeat dev runs (examples/schedules.yaml, queue-check), woken:
            # the stand-in answers HEARTBEAT_OK, so the run is suppressed, no alert.
            woken = client.post("/v1/schedules/queue-check/wake", json={"request_id": "dev-1"})
            assert woken.status_code == 202, woken.text
            run_id = woken.json()["run_id"]

            def heartbeat_ended() -> Any:
                runs = client.get("/v1/schedules/queue-check/runs").json().get("runs", [])
                [run] = [r for r in runs if r["run_id"] == run_id] or [None]
                return run if run and run["status"] not in ("pending", "running") else None

            beat = until(heartbeat_ended, "the woken heartbeat's end")
            metered = _metrics_after_the_walk(dev, until)
            listed = client.get("/v1/jobs", params={"limit": 500}).json()["jobs"]
            open_listed = sum(s == "open" for j in listed for s in j["milestones"].values())
        # Ctrl-C: everything stops cleanly, and the worker's stop deadline (armed by
        # the signal) does not fire afterwards while dev stops the rest.
        stopped_at = len(dev.lines)
        code = dev.stop(signal.SIGINT, timeout=40)
        time.sleep(0.1)
        after = "".join(dev.lines[stopped_at:])
        assert "worker: stopped after" in after
        assert "did not stop within" not in after, after
        assert code == 0, after
    finally:
        dev.stop(signal.SIGKILL)
    assert (beat["status"], beat["output"], beat["delivered_to"]) == (
        "suppressed",
        "HEARTBEAT_OK",
        None,
    ), beat
    # One message per frontier change, never the same one twice: id_uploaded opens
    # bookCall and selfServe, and the agent greets them once; each went out once by email.
    texts = [m["text"] for m in said_out]
    assert len(texts) == len(set(texts)), texts
    assert sum("Let us work on bookCall" in t for t in texts) == 1, texts
    assert texts[-1].startswith("All done"), texts
    assert len(mails) == len(emailed), (mails, texts)
    settled = {m["id"]: m for m in done["milestones"]}
    assert {k: m["state"] for k, m in settled.items()} == {
        "collectIdentity": "done",
        "bookCall": "dropped",
        "selfServe": "done",
        "activateAccount": "done",
    }
    # every milestone that completed, completed on a world or tool event, never an agent's
    for decision in trail:
        moved = [t for t in decision["transitions"] if t["to"] == "done"]
        if moved:
            assert decision["input"].get("source") in ("world", "tool"), decision["input"]
    _check_the_walk_s_metrics(metered, "".join(dev.lines))
    # The gauge is what the gateway lists: job-1 done, its tasks closed.
    assert ("lemongraph_tasks_open", ()) in metered["gateway"], metered["gateway"]
    assert value(metered["gateway"], "lemongraph_tasks_open") == open_listed, open_listed
    by_tool = [d for d in trail if d["input"].get("source") == "tool" and d["transitions"]]
    assert [d["input"]["action"] for d in by_tool] == ["account_activated"]
    claims = [d for d in trail if d["input"].get("source") == "agent"]
    assert claims, "the agent's words were recorded as agent events"
    assert all(not d["transitions"] for d in claims)


def _metrics_after_the_walk(dev: WorkerProcess, until: Callable[..., Any]) -> dict[str, Samples]:
    """Each process's /metrics once the walk's counts are in (docs/operations.md,
    "Metrics"): the dev line of each names where."""
    urls = metrics_urls(dev.lines)
    assert sorted(urls) == ["agents", "gateway", "mail-ingress", "memory", "worker"], urls
    assert all(len(found) == 1 for found in urls.values()), urls

    def settled() -> dict[str, Samples] | None:
        got = {process: scrape(url) for process, [url] in urls.items()}
        lags = [v for (n, _ls), v in got["worker"].items() if n == "lemongraph_consumer_lag"]
        done = value(got["worker"], "lemongraph_schedule_runs_total", status="suppressed")
        return got if lags and not any(lags) and done >= 1 else None

    found: dict[str, Samples] = until(settled, "the worker's lag at 0 and the run counted")
    return found


def _check_the_walk_s_metrics(metered: dict[str, Samples], said: str) -> None:
    worker, gateway, agents = metered["worker"], metered["gateway"], metered["agents"]
    decided = "lemongraph_decisions_total"
    assert value(worker, decided, playbook="onboarding", outcome="applied") >= 4, worker
    assert value(worker, "lemongraph_decision_seconds_count") >= 4
    requests = "lemongraph_gateway_requests_total"
    assert value(gateway, requests, route="/v1/jobs", status="202") == 1, gateway
    assert value(gateway, requests, route="/v1/jobs/{key}/messages", status="202") == 2
    assert value(gateway, requests, route="/v1/jobs/{key}/messages", status="200") >= 1
    assert value(agents, "lemongraph_tool_calls_total", tool="schedule_meeting", outcome="done")
    calls = [v for (n, ls), v in agents.items() if n == "lemongraph_model_calls_total"]
    assert sum(calls) >= 3, agents
    tokens = [v for (n, ls), v in agents.items() if n == "lemongraph_model_tokens_total"]
    assert sum(tokens) > 0, agents
    assert value(metered["mail-ingress"], "lemongraph_mails_total", outcome="sent") >= 1
    # No job key in any label of any process.
    for samples in metered.values():
        assert not [ls for (_n, ls) in samples if any("job-1" in v for _k, v in ls)]
    # Quiet (issue 34): no start-up line twice, no Faust warning at start.
    assert said.count("topics: ") == 1, said
    assert said.count("agents: model") == 1, said
    assert "Missing sensor state" not in said, said
