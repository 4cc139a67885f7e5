"""The inbox against producers nobody here wrote, on the real broker and real
`lemongraph worker` processes (docs/kafka.md, "Partitioning" and "Dead letters").

The librdkafka producer (confluent-kafka, the client kcat and most non-Java
clients are built on) partitions keys by CRC32, so most records land on another
partition than the job's home; some are sent to an explicit wrong partition and
some have no key. Every keyed record must be decided exactly once, on the home
partition; the keyless ones are dead-lettered.
"""

from __future__ import annotations

import asyncio
import collections
import signal
import time
from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from stream.runtime.partitions import home_partition
from tests.lanes import END_MARKER, Lane

pytestmark = [pytest.mark.broker, pytest.mark.timeout(300)]

PARTITIONS = 4


def start(key: str, playbook: str = "onboarding") -> dict[str, Any]:
    return {"type": "job.start", "key": key, "playbook_key": playbook}


def event(key: str, action: str, **extra: Any) -> dict[str, Any]:
    return {"type": "event", "key": key, "action": action, **extra}


def librdkafka_produce(
    lane: Lane, records: Sequence[tuple[bytes | None, bytes, int | None]]
) -> list[tuple[bytes | None, bytes, int, int]]:
    """Produce (key, value, partition or None) with librdkafka's own default
    partitioner; returns (key, value, partition, offset) as delivered."""
    from confluent_kafka import Producer

    client = Producer(
        {"bootstrap.servers": lane.bootstrap, "linger.ms": 5, "partitioner": "consistent_random"}
    )
    delivered: list[tuple[bytes | None, bytes, int, int]] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.key(), msg.value(), msg.partition(), msg.offset()))

    for key, value, partition in records:
        extra = {} if partition is None else {"partition": partition}
        client.produce(lane.topics.inbox, value=value, key=key, on_delivery=report, **extra)
        client.poll(0)
    assert client.flush(30) == 0
    assert errors == []
    return delivered


def by_job(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in records:
        out[r["key"]].append(r["value"])
    return out


def test_a_crc32_producer_wrong_partitions_and_keyless_records_lose_and_fork_nothing(
    lane: Lane,
) -> None:
    worker = lane.start_worker()
    jobs = [f"crc-{i:03d}" for i in range(200)]
    starts: list[tuple[bytes | None, bytes, int | None]] = [
        (key.encode(), orjson.dumps(start(key)), None) for key in jobs
    ]
    keyless = [start(f"keyless-{i}") for i in range(5)]
    starts.extend((None, orjson.dumps(m), None) for m in keyless)
    delivered = librdkafka_produce(lane, starts)
    # Events after their jobs have started (records on two partitions keep no
    # order between them, so an event could otherwise overtake its job.start).
    lane.wait_until("decisions", lambda rs: len(rs) >= 200, timeout=120)
    events: list[tuple[bytes | None, bytes, int | None]] = []
    for i, key in enumerate(jobs):
        # Every tenth event goes to an explicit partition that is not its home.
        wrong = (home_partition(key.encode(), PARTITIONS) + 1) % PARTITIONS if i % 10 == 0 else None
        events.append((key.encode(), orjson.dumps(event(key, "id_uploaded")), wrong))
        events.append((key.encode(), orjson.dumps(event(key, "self_service_completed")), None))
    delivered += librdkafka_produce(lane, events)
    assert len(delivered) == len(starts) + len(events)
    strays = [d for d in delivered if d[0] and d[2] != home_partition(d[0], PARTITIONS)]
    assert len(strays) > 300  # CRC32 disagrees with murmur2 for most keys

    lane.wait_until("decisions", lambda rs: len(rs) >= 600, timeout=120)
    # A second decision of anything, and of the strays forwarded home, would be
    # decided before the end markers of two rounds.
    lane.drain(rounds=2)
    decisions = [d for d in lane.read("decisions") if not d["key"].startswith(END_MARKER)]
    assert len(decisions) == 600
    per_job = by_job(decisions)
    assert sorted(per_job) == jobs
    for key, mine in per_job.items():
        assert [d["seq"] for d in mine] == [1, 2, 3], key
        assert [d["outcome"] for d in mine] == ["applied"] * 3, key
        actions = [d["input"].get("action") for d in mine]
        assert actions[0] is None
        assert sorted(actions[1:]) == ["id_uploaded", "self_service_completed"]
    home = {key: home_partition(key.encode(), PARTITIONS) for key in jobs}
    assert all(r["partition"] == home[r["key"]] for r in decisions)  # decided at home
    # Each decision names where the producer put its record.
    where = {(d[0], d[1]): (d[2], d[3]) for d in delivered}
    for d in (r["value"] for r in decisions):
        raw = orjson.dumps(
            start(d["job_key"])
            if d["input"]["type"] == "job.start"
            else event(d["job_key"], d["input"]["action"])
        )
        partition, offset = where[(d["job_key"].encode(), raw)]
        assert (d["origin"]["partition"], d["origin"]["offset"]) == (partition, offset)
        assert ("forwarded" in d["origin"]) == (partition != home[d["job_key"]])

    tasks = lane.read("tasks")
    seen = collections.Counter((t["value"]["type"], t["value"]["task_id"]) for t in tasks)
    assert max(seen.values()) == 1  # no task opened or closed twice
    assert seen[("task.opened", "crc-000/collectIdentity")] == 1

    letters = lane.wait_until("deadletter", lambda rs: len(rs) >= 5)
    assert len(letters) == 5
    assert {r["value"]["reason"] for r in letters} == {
        "no record key: an inbox record's key must be its job key"
    }
    assert sorted(orjson.loads(r["value"]["value_text"])["key"] for r in letters) == [
        f"keyless-{i}" for i in range(5)
    ]
    verified = lane.cli("replay", "--verify")  # exits 1 on any mismatch
    assert "MISMATCH" not in verified.stdout

    assert worker.stop() == 0
    [summary] = [line for line in worker.lines if "worker: stopped after" in line]
    forwarded = int(summary.split(" forwarded")[0].rsplit(" ", 1)[1])
    assert forwarded == len(strays)


def test_poison_records_are_dead_letters_and_the_worker_decides_what_follows(
    lane: Lane,
) -> None:
    lane.start_worker()
    deep = b'{"type":"event","key":"job-x","action":"a","properties":' + b'{"a":' * 252
    deep += b"1" + b"}" * 253
    control = bytes(range(32)) * (1 << 15)  # 1 MiB of control bytes
    huge_int = b'{"type":"event","key":"job-x","action":"a","value":1180591620717411303424}'
    late = 253_402_300_800_000 + 1000  # after 9999-12-31

    async def go() -> None:
        client = AIOKafkaProducer(bootstrap_servers=lane.bootstrap, max_request_size=4 << 20)
        await client.start()
        try:
            for value, stamp in [
                (orjson.dumps(start("job-x")), None),
                (deep, None),
                (control, None),
                (huge_int, None),
                (orjson.dumps(event("job-x", "late")), late),
                (orjson.dumps(event("job-x", "id_uploaded")), None),
            ]:
                await client.send_and_wait(
                    lane.topics.inbox, value, key=b"job-x", timestamp_ms=stamp
                )
        finally:
            await client.stop()

    asyncio.run(go())
    decisions = lane.wait_until("decisions", lambda rs: len(rs) >= 2)
    assert [r["value"]["input"].get("action") for r in decisions] == [None, "id_uploaded"]
    letters = [r["value"] for r in lane.wait_until("deadletter", lambda rs: len(rs) >= 4)]
    reasons = [d["reason"] for d in letters]
    assert "nested deeper than 32 levels" in reasons[0]
    assert reasons[1] == "record of 1,048,576 bytes is larger than the limit of 1,000,000"
    assert reasons[2] == "integer 1180591620717411303424 is beyond 64 bits"
    assert "not an instant a decision can be made at" in reasons[3]
    assert letters[3]["timestamp"] == late
    # `lemongraph tail deadletter` shows the same, one JSON line each.
    shown = [
        orjson.loads(line)
        for line in lane.cli("tail", "deadletter", "--no-follow").stdout.splitlines()
    ]
    assert [line["value"]["reason"] for line in shown] == reasons
    assert shown[2]["value"]["value_text"] == huge_int.decode()
    assert shown[1]["value"]["value_bytes"] == len(control)

    # The dead letter of the 1 MiB record is that record, byte for byte, plus
    # headers of under 1 KB.
    async def sizes() -> list[tuple[int, int]]:
        from stream.runtime.kafka import read_topic

        out = []
        async for r in read_topic(lane.bootstrap, lane.topics.deadletter, idle=0.5):
            headers = sum(len(n) + len(v) for n, v in r.headers)
            out.append((len(r.value or b""), len(r.key or b"") + headers))
            if r.value == control:
                assert len(r.value) == len(control)
        return out

    big = [(v, extra) for v, extra in asyncio.run(sizes()) if v == len(control)]
    assert len(big) == 1
    assert big[0][1] < 1024


def test_a_future_stamped_event_and_a_future_tick_fail_no_job(lane: Lane) -> None:
    worker = lane.start_worker(LEMONGRAPH_MAX_CLOCK_SKEW="5m")
    home = home_partition(b"job-f", PARTITIONS)
    far = 202_000_000_000_000  # in the year 8371
    ahead = "2099-01-01T00:00:00Z"
    future: list[int] = []  # the future tick's offset

    async def go() -> None:
        client = AIOKafkaProducer(bootstrap_servers=lane.bootstrap)
        await client.start()
        try:
            await client.send_and_wait(
                lane.topics.inbox, orjson.dumps(start("job-f")), key=b"job-f"
            )
            await client.send_and_wait(
                lane.topics.inbox,
                orjson.dumps(event("job-f", "noted")),
                key=b"job-f",
                timestamp_ms=far,
            )
            tick = {"type": "tick", "schema": 1, "partition": home, "at": ahead}
            sent_tick = await client.send_and_wait(
                lane.topics.ticks, orjson.dumps(tick), key=b"tick", partition=home
            )
            future.append(sent_tick.offset)
        finally:
            await client.stop()

    sent = time.time()
    asyncio.run(go())
    decisions = lane.wait_until("decisions", lambda rs: len(rs) >= 2)
    noted = decisions[1]["value"]
    assert noted["clock"]["bound"] == "worker_clock"
    assert noted["clock"]["record_timestamp"] == far
    now = time.mktime(time.strptime(noted["now"][:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert sent + 240 < now < time.time() + 301  # the worker's clock + 5 minutes
    [letter] = [r["value"] for r in lane.wait_until("deadletter", lambda rs: len(rs) >= 1)]
    assert letter["reason"].startswith(f"tick at {ahead} is ahead of this worker")
    # Real ticks keep arriving: none may fail the job. Five of them after the
    # future one, decided (the worker committed past them, after their outputs;
    # the topic never goes quiet to be read to its end).
    lane.wait_committed(worker.group, "ticks", {home: future[0] + 5})
    statuses = [r["value"]["status"] for r in lane.read("decisions")]
    assert "failed" not in statuses
    assert lane.read("engine-jobstate-changelog")[-1]["value"]["status"] == "running"


def test_sigterm_stops_a_worker_whose_broker_is_gone_within_seconds(
    lane: Lane, tmp_path: Any
) -> None:
    from stream.runtime.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        mine = Lane(broker.url, lane.prefix, tmp_path / "own")
        mine.playbooks.mkdir(parents=True)
        for path in lane.playbooks.iterdir():
            (mine.playbooks / path.name).write_bytes(path.read_bytes())
        worker = mine.start_worker()
        mine.send(start("job-s"))
        mine.wait_until("decisions", lambda rs: len(rs) >= 1)
        broker.stop()
        time.sleep(0.5)
        assert worker.proc.poll() is None
        began = time.monotonic()
        code = worker.stop(signal.SIGTERM, timeout=30)  # SIGKILL only after 30 s
        took = time.monotonic() - began
    assert took < 12, f"took {took:.1f}s"
    assert code != -signal.SIGKILL
    assert any(
        "worker: stopped after" in line or "did not stop within" in line for line in worker.lines
    )


def own_lane(url: str, like: Lane, root: Any) -> Lane:
    """A lane on a broker of the test's own (one it can stop and restart)."""
    mine = Lane(url, like.prefix, root)
    mine.playbooks.mkdir(parents=True)
    for path in like.playbooks.iterdir():
        (mine.playbooks / path.name).write_bytes(path.read_bytes())
    return mine


def test_a_broker_that_comes_back_empty_stops_the_worker_and_fails_healthz(
    lane: Lane, tmp_path: Any
) -> None:
    import subprocess

    import httpx

    from stream.runtime.broker import EmbeddedBroker, free_port
    from tests.lanes import LEMONGRAPH, restart_empty

    broker = EmbeddedBroker()
    broker.start()
    gateway: subprocess.Popen[str] | None = None
    mine = own_lane(broker.url, lane, tmp_path / "own")
    try:
        worker = mine.start_worker()
        api = free_port()
        gateway = subprocess.Popen(
            [str(LEMONGRAPH), "gateway"],
            cwd=mine.root,
            env=mine.env(
                LEMONGRAPH_API_PORT=str(api),
                LEMONGRAPH_UI_PORT=str(free_port()),
                API_TOKEN_SECRET="s" * 32,
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        mine.send(*(start(f"before-{i}") for i in range(20)))
        mine.wait_until("decisions", lambda rs: len(rs) >= 20)

        def health() -> httpx.Response | None:
            try:
                return httpx.get(f"http://127.0.0.1:{api}/healthz", timeout=5)
            except httpx.TransportError:
                return None

        deadline = time.monotonic() + 60
        while (answer := health()) is None or answer.status_code != 200:
            assert time.monotonic() < deadline, answer
            time.sleep(0.3)

        # The broker restarts empty, on the same port; an operator recreates the topics.
        broker = restart_empty(broker, mine)
        mine.send(*(start(f"after-{i}") for i in range(6)))  # acknowledged by the new broker

        assert worker.proc.wait(60) == 78
        said = "".join(worker.lines)
        assert "worker: stopped:" in said
        assert "docs/operations.md, 'When the broker was reset'" in said
        # Nothing acknowledged by the new broker was decided, or skipped as decided.
        assert mine.read("decisions") == []
        # The read model noticed too.
        deadline = time.monotonic() + 60
        while (answer := health()) is None or answer.status_code != 503:
            assert time.monotonic() < deadline, answer
            time.sleep(0.3)
        assert "was reset or recreated" in answer.json()["problem"]

        # Restarted with the same state, the worker refuses the same way.
        again = mine.start_worker()
        assert again.proc.wait(60) == 78
        assert "was reset or recreated" in "".join(again.lines)
        assert "the broker is now cluster" in "".join(again.lines)
        assert mine.read("decisions") == []
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(20)
        for process in mine.workers:
            process.stop(signal.SIGKILL)
        broker.stop()
