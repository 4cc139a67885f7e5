"""`lemongraph dev`, every part on this machine, on the module's two dev
processes in one folder: the first with every part up, whose embedded broker is
killed (it is reported and the run ends non-zero), then the next, which starts
from fresh state and says so (docs/operations.md, "When the broker was reset").
The module's other tests share that second dev, testing what a running dev does:
the README's loop offline, the stand-in script of its .env file, a token minted
while it runs, a playbook reloaded without a restart, and last, Ctrl-C, which
stops it within seconds. --keep is in test_dev_keep.py.

The folder holds a copy of the bundled playbooks (the reload test edits them)
and a .env naming a stand-in script whose one rule answers only a message about
the lighthouse (the built-in policy answers the rest, docs/agents.md "The
stand-in model"). Each test has job keys of its own. The README loop is the
first to use the API: it counts the gateway's requests and the open tasks from
dev's start. Ctrl-C is the last test."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from stream.runtime.broker import free_port
from tests.lanes import LEMONGRAPH, ROOT, WorkerProcess, wait_for
from tests.scrape import Samples, metrics_urls, scrape, value
from tests.stream.cli.test_cli_token_dev import token

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


#: The stand-in script the dev's .env names (LEMONGRAPH_STANDIN_SCRIPT).
KEEPER = """\
rules:
  - when: {last_message_contains: "lighthouse"}
    say: "The scripted keeper answers: the lighthouse is lit."
"""

BROKEN = """\
key: broken
version: 1
name: Broken
milestones:
  - id: first
    condition: id_uploaded WITHIN
"""

#: Where dev writes the API token secret it made up, under its working folder.
SECRET_FILE = Path("data") / "dev-api-token-secret"


@dataclass
class RunningDev:
    """The module's `lemongraph dev`: its process, working folder, playbooks
    folder (a copy of the bundled one), API port and the dev token it printed."""

    process: WorkerProcess
    cwd: Path
    playbooks: Path
    api_port: int

    @property
    def said(self) -> str:
        return "".join(self.process.lines)

    @property
    def token(self) -> str:
        found: list[str] = re.findall(r"dev token \([^)]*\): (lemongraph_sk_\S+)", self.said)
        [token] = found
        return token

    def client(self) -> httpx.Client:
        """An API client with the dev token."""
        return httpx.Client(
            base_url=f"http://127.0.0.1:{self.api_port}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=10,
        )

    def until(self, check: Callable[[], Any], what: str, timeout: float = 60) -> Any:
        """Poll ``check`` until it returns something truthy; on a timeout, what
        dev said last."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = check()
            if found:
                return found
            time.sleep(0.3)
        last = "".join(self.process.lines[-30:])
        raise AssertionError(f"timed out waiting for {what}:\n{last}")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's dev folder: a copy of the bundled playbooks, a stand-in
    script and a .env naming it."""
    cwd = tmp_path_factory.mktemp("dev")
    shutil.copytree(ROOT / "examples", cwd / "playbooks")
    (cwd / "keeper.yaml").write_text(KEEPER)
    (cwd / ".env").write_text("LEMONGRAPH_STANDIN_SCRIPT=keeper.yaml\n")
    return cwd


@dataclass
class DiedDev:
    """What the first dev said, and its exit code, after its broker was killed."""

    code: int
    said: str


@pytest.fixture(scope="module")
def died(folder: Path) -> DiedDev:
    """A dev with every part up whose embedded broker is killed: it exits by itself."""
    port = free_port()
    first = start_dev(folder, port, LEMONGRAPH_PLAYBOOKS_DIR=str(folder / "playbooks"))
    try:
        first.wait_for(": ready (group", timeout=90)
        first.wait_for("agents: partitions", timeout=90)  # every part up
        first.wait_for("mail: ready", timeout=90)
        os.kill(broker_pid(port), signal.SIGKILL)
        code = exit_within(first, 30)
    finally:
        first.stop(signal.SIGKILL)
    return DiedDev(code, "".join(first.lines))


@pytest.fixture(scope="module")
def dev(folder: Path, died: DiedDev) -> Iterator[RunningDev]:
    """The next dev in the same folder, with every part up (worker, gateway,
    agents, mail, memory): the one the module's other tests share. Killed after
    the module's last test if that one did not stop it."""
    api_port = free_port()
    playbooks = folder / "playbooks"
    process = start_dev(
        folder,
        free_port(),
        LEMONGRAPH_API_PORT=str(api_port),
        LEMONGRAPH_PLAYBOOKS_DIR=str(playbooks),
    )
    try:
        process.wait_for(": ready (group", timeout=90)
        process.wait_for("agents: ready", timeout=90)
        process.wait_for("mail: ready", timeout=90)
        process.wait_for("memory: reading", timeout=90)  # the memory processor (docs/memory.md)
        yield RunningDev(process, folder, playbooks, api_port)
    finally:
        process.stop(signal.SIGKILL)


def test_dev_reports_a_dead_broker_and_exits_non_zero(died: DiedDev) -> None:
    assert died.code != 0, died.said
    assert "broker: the embedded broker exited unexpectedly" in died.said
    assert "Run `lemongraph dev` again to start afresh" in died.said


def test_the_next_dev_starts_from_fresh_state_and_says_so(dev: RunningDev) -> None:
    assert "state: fresh: removed" in dev.said, dev.said


def test_the_dev_loop_of_the_readme_closes_offline(dev: RunningDev) -> None:
    """README, "Try it": the one run command, an onboarding job, the person's answers
    through the API (as the UI's box sends them), the stand-in model and the demo
    tools; the job ends done with every milestone settled by a world or tool event."""
    said = dev.said
    assert "agents: demo tools at" in said
    # Both demo MCP servers the bundled catalog names are served: none is left unstarted.
    [served] = re.findall(r"agents: demo MCP servers at (.*) \(docs/agents.md\)", said)
    assert re.fullmatch(
        r"http://127.0.0.1:\d+/mcp for SETUP_MCP_URL, "
        r"http://127.0.0.1:\d+/mcp for ORDERS_MCP_URL",
        served,
    ), served
    assert "MCP servers not started" not in said
    assert "mail: outbound mail is caught at smtp://" in said
    token = dev.token
    # The UI's address, signed in: the token in the fragment (docs/operations.md, "The UI").
    [ui] = re.findall(r"open the UI \(signed in with the dev token\): (\S+)", said)
    assert ui.endswith(f"/ui/#token={token}"), ui
    page = httpx.get(ui.split("#")[0])  # what a browser asks for: the fragment stays
    assert page.status_code == 200
    assert '<script src="/ui/app.js">' in page.text
    until = dev.until
    with dev.client() as client:

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
        [gateway_metrics] = metrics_urls(dev.process.lines)["gateway"]
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
        metered = _metrics_after_the_walk(dev)
        listed = client.get("/v1/jobs", params={"limit": 500}).json()["jobs"]
        open_listed = sum(s == "open" for j in listed for s in j["milestones"].values())
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
    _check_the_walk_s_metrics(metered, dev.said)
    # The gauge is what the gateway lists: job-1 done, its tasks closed.
    assert ("lemongraph_tasks_open", ()) in metered["gateway"], metered["gateway"]
    assert value(metered["gateway"], "lemongraph_tasks_open") == open_listed, open_listed
    by_tool = [d for d in trail if d["input"].get("source") == "tool" and d["transitions"]]
    assert [d["input"]["action"] for d in by_tool] == ["account_activated"]
    claims = [d for d in trail if d["input"].get("source") == "agent"]
    assert claims, "the agent's words were recorded as agent events"
    assert all(not d["transitions"] for d in claims)


def _metrics_after_the_walk(dev: RunningDev) -> dict[str, Samples]:
    """Each process's /metrics once the walk's counts are in (docs/operations.md,
    "Metrics"): the dev line of each names where."""
    urls = metrics_urls(dev.process.lines)
    assert sorted(urls) == ["agents", "gateway", "mail-ingress", "memory", "worker"], urls
    assert all(len(found) == 1 for found in urls.values()), urls

    def settled() -> dict[str, Samples] | None:
        got = {process: scrape(url) for process, [url] in urls.items()}
        lags = [v for (n, _ls), v in got["worker"].items() if n == "lemongraph_consumer_lag"]
        done = value(got["worker"], "lemongraph_schedule_runs_total", status="suppressed")
        return got if lags and not any(lags) and done >= 1 else None

    found: dict[str, Samples] = dev.until(settled, "the worker's lag at 0 and the run counted")
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


def test_dev_answers_with_the_script_of_its_env_file_and_names_the_stand_in(
    dev: RunningDev,
) -> None:
    """dev answers with the stand-in script named by LEMONGRAPH_STANDIN_SCRIPT
    (here from the .env of its folder) and with the flows' own
    ``NAME.standin.yaml``, and says so: its model line names the stand-in and its
    scripts, and the agents it starts call the stand-in, not gpt-4o
    (docs/agents.md, "The stand-in model"; docs/operations.md, "Commands")."""
    said = dev.said
    # the agents process calls the stand-in by its name (OPENAI_MODEL=standin), not
    # the default gpt-4o; dev says so on the one model line (its child repeats nothing)
    [line] = [s for s in dev.process.lines if s.startswith("agents: model standin: ")]
    flows = dev.playbooks / "flows"
    assert line.startswith(
        f"agents: model standin: the stand-in (script {flows / 'approve-refund.standin.yaml'}, "
    ), line
    assert re.search(r"keeper\.yaml\) at http://127\.0\.0\.1:\d+/v1 \(LEMONGRAPH_STANDIN", line)
    assert "gpt-4o" not in said
    with dev.client() as client:

        def out() -> list[str]:
            got = client.get("/v1/jobs/keeper-1/messages").json().get("messages", [])
            return [m["text"] for m in got if m["direction"] == "out"]

        started = {"key": "keeper-1", "playbook_key": "onboarding", "contacts": [{"name": "Ada"}]}
        assert client.post("/v1/jobs", json=started).status_code == 202
        dev.until(out, "the agent's first words")
        sent = client.post("/v1/jobs/keeper-1/messages", json={"text": "Is the lighthouse lit?"})
        assert sent.status_code == 202, sent.text
        dev.until(
            lambda: "The scripted keeper answers: the lighthouse is lit." in out(),
            "the script's reply",
        )


def test_a_token_minted_while_dev_runs_is_accepted_by_it(dev: RunningDev) -> None:
    """A token minted with `lemongraph token` works against a running dev that
    made up its own secret: dev writes it (mode 0600, never printed) under
    LEMONGRAPH_DATA_DIR, and `token` signs with it while API_TOKEN_SECRET is unset.
    That the secret goes with dev when it stops: the module's last test."""
    said = dev.said
    assert f"written to {SECRET_FILE} (mode 0600)" in said, said
    secret_file = dev.cwd / SECRET_FILE
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    secret = secret_file.read_text(encoding="utf-8").strip()
    assert secret not in said  # never printed

    minted = token(dev.cwd)
    assert minted.returncode == 0, minted.stderr
    assert "signed with the secret of `lemongraph dev`" in minted.stderr
    assert secret not in minted.stdout + minted.stderr
    bearer = minted.stdout.splitlines()[-1]
    answer = httpx.get(
        f"http://127.0.0.1:{dev.api_port}/v1/jobs",
        headers={"Authorization": f"Bearer {bearer}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text


def job(client: httpx.Client, key: str) -> dict[str, Any]:
    """A job as the API shows it ({} while it is not there)."""
    answer = client.get(f"/v1/jobs/{key}")
    return answer.json() if answer.status_code == 200 else {}


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, old
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def test_a_new_playbook_version_is_used_by_the_next_job_without_a_restart(
    dev: RunningDev,
) -> None:
    """Edit without restart (docs/operations.md, "Reloading"): files changed in the
    playbooks folder of a running dev are checked and registered, or refused with
    the reason, by its worker and its agents service; a new playbook version is
    used by the next job, and a running job keeps its own."""
    folder, process = dev.playbooks, dev.process
    onboarding = folder / "onboarding.yaml"
    with dev.client() as client:
        started = client.post("/v1/jobs", json={"key": "reload-1", "playbook_key": "onboarding"})
        assert started.status_code == 202, started.text
        wait_for(lambda: job(client, "reload-1").get("playbook_version") == 1, what="v1")

        # A new version dropped into the folder: registered, used by the next job.
        edit(onboarding, "version: 1", "version: 2")
        process.wait_for("reload: registered onboarding v2 from", timeout=30)
        started = client.post("/v1/jobs", json={"key": "reload-2", "playbook_key": "onboarding"})
        assert started.status_code == 202, started.text
        wait_for(lambda: job(client, "reload-2").get("playbook_version") == 2, what="v2")
        assert job(client, "reload-1")["playbook_version"] == 1  # pinned

        # Other content under v2, registered already: dev registers it as v3, saying so.
        edit(onboarding, "name: Customer onboarding", "name: Customer onboarding, edited")
        process.wait_for("as onboarding v3: v2 is registered already with other content", 30)
        # A file that does not compile is refused, with its problem.
        (folder / "broken.yaml").write_text(BROKEN, encoding="utf-8")
        process.wait_for(f"reload: refused: {folder / 'broken.yaml'}:6:", timeout=30)
        # The agents service takes a changed catalog, and refuses a broken one.
        catalog = folder / "catalog.yaml"
        edit(catalog, "agents:", "agents:\n  reviewer:\n    instructions: Review it.")
        process.wait_for(f"agents: reload: took {catalog}", timeout=30)
        edit(catalog, "agents:", "agents: [")
        process.wait_for(f"agents: reload: refused: {catalog}:", timeout=30)
        # A schedule added to schedules.yaml is published.
        edit(
            folder / "schedules.yaml",
            "schedules:",
            "schedules:\n  - {id: added-live, name: Added live, schedule: every 1h, "
            "action: {type: start_job, playbook_key: onboarding}}",
        )
        process.wait_for("published (added-live)", timeout=30)
        wait_for(
            lambda: client.get("/v1/schedules/added-live").status_code == 200,
            what="the gateway to read the schedule",
        )
    for line in dev.said.splitlines():
        if "reload:" in line:
            print(line)


def test_ctrl_c_stops_everything_cleanly_and_the_secret_goes_with_dev(dev: RunningDev) -> None:
    """Ctrl-C: everything stops cleanly within seconds, the broker too, the
    worker's stop deadline (armed by the signal) does not fire afterwards while dev
    stops the rest, and the API token secret dev made up for this session is
    removed."""
    secret_file = dev.cwd / SECRET_FILE
    assert secret_file.exists()
    stopped_at = len(dev.process.lines)
    code = dev.process.stop(signal.SIGINT, timeout=40)  # its output read to the end
    after = "".join(dev.process.lines[stopped_at:])
    assert "worker: stopped after" in after
    assert "did not stop within" not in after, after
    assert code == 0, after
    assert "broker: stopped" in after
    assert not secret_file.exists(), after  # this session's secret goes with it
