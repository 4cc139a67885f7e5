"""`lemongraph dev --keep`: stopped and started again, the embedded broker is given
back what it held (docs/operations.md, "Keeping dev state"): the jobs, the schedules
added at run time, the conversations and the journal, and the worker decides on from
there."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import signal
from pathlib import Path

import httpx
import pytest

from stream.cli.dev import KeptState
from stream.runtime.broker import EmbeddedBroker, ensure_topics, free_port
from stream.runtime.config import Settings
from stream.runtime.kafka import KafkaSecurity, producer
from tests.lanes import WorkerProcess, wait_for
from tests.stream.cli.test_dev import exit_within, job, start_dev

pytestmark = [pytest.mark.broker]
PLAIN = KafkaSecurity()

SCHEDULE = {
    "id": "nightly-review",
    "name": "Nightly review",
    "schedule": "daily at 02:00",
    "action": {"type": "start_job", "playbook_key": "onboarding", "key": "review-{date}"},
}


def client_of(dev: WorkerProcess, api_port: int) -> httpx.Client:
    """An API client with the dev token ``dev`` printed."""
    [token] = re.findall(r"dev token \([^)]*\): (lemongraph_sk_\S+)", "".join(dev.lines))
    return httpx.Client(
        base_url=f"http://127.0.0.1:{api_port}",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )


def decisions_of(client: httpx.Client, key: str) -> list[dict[str, object]]:
    listed: list[dict[str, object]] = client.get(f"/v1/jobs/{key}/decisions").json()["decisions"]
    return listed


def stop(dev: WorkerProcess) -> str:
    """Ctrl-C, as a developer stops it; what it said."""
    dev.proc.send_signal(signal.SIGINT)
    assert exit_within(dev, 60) == 0, "".join(dev.lines)
    return "".join(dev.lines)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dev_keep_restarts_with_the_jobs_and_schedules_it_had(tmp_path: Path) -> None:
    api_port = free_port()
    first = start_dev(tmp_path, free_port(), "--keep", LEMONGRAPH_API_PORT=str(api_port))
    try:
        first.wait_for(": ready (group", timeout=90)
        assert "starting fresh" in "".join(first.lines)
        with client_of(first, api_port) as client:
            started = client.post(
                "/v1/jobs",
                json={"key": "job-1", "playbook_key": "onboarding"},
            )
            assert started.status_code == 202, started.text
            for action in ("id_uploaded", "self_service_completed", "account_activated"):
                sent = client.post("/v1/events", json={"key": "job-1", "action": action})
                assert sent.status_code == 202, sent.text
            wait_for(lambda: job(client, "job-1").get("status") == "done", what="job-1 done")
            added = client.post("/v1/schedules", json=SCHEDULE)
            assert added.status_code == 201, added.text
            # The gateway reads a job's snapshot and its decisions from two topics:
            # "done" can be read before the decision that made it so.
            wait_for(
                lambda: any(d.get("status") == "done" for d in decisions_of(client, "job-1")),
                what="job-1's last decision read",
            )
            decisions = decisions_of(client, "job-1")
        said = stop(first)
    finally:
        first.stop(signal.SIGKILL)
    assert "state: kept: wrote" in said, said

    api_port = free_port()
    second = start_dev(tmp_path, free_port(), "--keep", LEMONGRAPH_API_PORT=str(api_port))
    try:
        second.wait_for(": ready (group", timeout=90)
        said = "".join(second.lines)
        assert "state: kept: restored" in said, said
        assert "did not stop cleanly" not in said, said
        with client_of(second, api_port) as client:
            assert job(client, "job-1")["status"] == "done"
            # Every decision kept, none made again. The agents service may still
            # have answered after the list above was read (its agent_said event is
            # decided after "done"): a later decision is one more, never a copy.
            restored = decisions_of(client, "job-1")
            assert restored[: len(decisions)] == decisions
            origins = [str(d["origin"]) for d in restored]
            assert len(set(origins)) == len(origins), origins
            kept = client.get("/v1/schedules/nightly-review")
            assert kept.status_code == 200, kept.text
            assert kept.json()["name"] == "Nightly review"
            assert kept.json()["by"] == "dev"  # the token's name: written through the API
            # The worker decides on past what it had applied: a new job is
            # started (not skipped as a re-delivery, not stopped as a reset).
            started = client.post("/v1/jobs", json={"key": "job-2", "playbook_key": "onboarding"})
            assert started.status_code == 202, started.text
            wait_for(lambda: job(client, "job-2").get("status") == "running", what="job-2")
        said = stop(second)
    finally:
        second.stop(signal.SIGKILL)
    # What keeping costs, in the test's report (docs/operations.md, "Keeping dev state").
    print(*(line for line in said.splitlines() if line.startswith("state: kept")), sep="\n")


def kept_state(tmp_path: Path) -> tuple[KeptState, EmbeddedBroker]:
    """A ``dev --keep`` folder with a snapshot of a broker that holds one record,
    local state beside it, and the broker the next start restores into."""
    settings = Settings(data_dir=tmp_path)
    with EmbeddedBroker() as source:
        asyncio.run(ensure_topics(source.bootstrap, {"inbox": 1}, security=PLAIN))
        asyncio.run(produce_one(source.bootstrap))
        kept = KeptState(tmp_path / "embedded")
        kept.save(source, dataclasses.replace(settings, kafka_url=source.url))
    (kept.data_dir / "faust").mkdir()
    header = kept.snapshot()
    assert header is not None
    return kept, EmbeddedBroker(cluster_id=header.cluster_id)


async def produce_one(bootstrap: str) -> None:
    async with producer(bootstrap, security=PLAIN) as client:
        await client.send_and_wait("inbox", b"{}", key=b"job-1", partition=0)


@pytest.mark.timeout(60)
def test_a_clean_stop_keeps_the_local_state_an_unclean_one_rebuilds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept, broker = kept_state(tmp_path)
    assert "state: kept: wrote 1 records of 1 topics" in capsys.readouterr().out
    with broker:
        kept.restore(broker, Settings(kafka_url=broker.url))
    said = capsys.readouterr().out
    assert "state: kept: restored 1 records" in said
    assert (kept.data_dir / "faust").is_dir()  # the snapshot's own state: kept
    assert not kept.mark.exists()  # from now on the state is the new run's

    # That run was killed: no snapshot of its own, so its local state is newer
    # than the snapshot's logs, and it is removed (rebuilt from the changelogs).
    with EmbeddedBroker(cluster_id=broker.cluster_id) as again:
        kept.restore(again, Settings(kafka_url=again.url))
    assert "the last run did not stop cleanly" in capsys.readouterr().out
    assert not (kept.data_dir / "faust").exists()
    assert kept.file.exists()
