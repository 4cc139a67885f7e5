"""Lanes: what a test against a real Kafka broker works in.

A session fixture (``kafka_url``, in tests/conftest.py, shared with the gateway
tests) starts the embedded Tansu broker on a free port, unless
LEMONGRAPH_KAFKA_URL points at one. A test gets its own topic prefix (and so its
own consumer group) and its own data folder (``lane``), or shares its module's
(``module_lane``) with the tests that share its processes, each with job keys of
its own; workers run as real `lemongraph worker` processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner

from stream.runtime.kafka import bootstrap_of, new_consumer, producer, read_topic
from tests import zygote
from tests.inprocess import invoke
from tests.zygote import ForkedProcess
from topics import DeadLetter, Topics, stored_job_state

ROOT = Path(__file__).resolve().parents[1]
LEMONGRAPH = Path(sys.executable).parent / "lemongraph"
#: The job keys of ``Lane.drain``'s end markers begin so.
END_MARKER = "end-marker-"


def start_lemongraph(
    args: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.Popen[str] | ForkedProcess:
    """``lemongraph ARGS`` as a process with stdout and stderr on one text pipe:
    forked from the test process's fork server for the long-running services
    (tests/zygote.py), else through the console script."""
    if zygote.enabled(args):
        return zygote.spawn(args, cwd, env)
    return console_process(args, cwd, env)


def console_process(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """``lemongraph ARGS`` through the console script, stdout and stderr on one text pipe."""
    return subprocess.Popen(
        [str(LEMONGRAPH), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_lines(proc: subprocess.Popen[str] | ForkedProcess, lines: list[str]) -> threading.Thread:
    """A thread appending what ``proc`` prints to ``lines`` until its output ends;
    join it before closing ``proc.stdout``."""
    assert proc.stdout is not None
    reader = threading.Thread(target=_append_lines, args=(proc.stdout, lines), daemon=True)
    reader.start()
    return reader


def _append_lines(stream: Iterable[str], lines: list[str]) -> None:
    for line in stream:
        lines.append(line)


@dataclass
class WorkerProcess:
    """A `lemongraph worker` subprocess and what it printed."""

    proc: subprocess.Popen[str] | ForkedProcess
    lines: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"worker never printed {text!r}; output:\n" + "".join(self.lines))

    @property
    def group(self) -> str:
        """The consumer group it named when it was ready (a worker's, or the
        agents service's: "ready (group NAME, ..." or "ready (group NAME)")."""
        for line in self.lines:
            _, found, rest = line.partition("ready (group ")
            if found:
                return rest.split(",")[0].split(")")[0].strip()
        raise AssertionError("it never said its group; output:\n" + "".join(self.lines))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        if self.reader is not None:
            self.reader.join(timeout)  # it ends at EOF, once the process is gone
        code = self.proc.wait()  # at once: it has ended
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


@dataclass
class Lane:
    """One test's own topics, group, data folder and playbooks, on the shared broker."""

    kafka_url: str
    prefix: str
    root: Path
    workers: list[WorkerProcess] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return bootstrap_of(self.kafka_url)

    @property
    def topics(self) -> Topics:
        return Topics(self.prefix)

    @property
    def playbooks(self) -> Path:
        return self.root / "examples"

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            LEMONGRAPH_KAFKA_URL=self.kafka_url,
            LEMONGRAPH_TOPIC_PREFIX=self.prefix,
            LEMONGRAPH_PARTITIONS="4",
            LEMONGRAPH_DATA_DIR=str(self.root / "data"),
            LEMONGRAPH_PLAYBOOKS_DIR=str(self.playbooks),
            LEMONGRAPH_TICK_INTERVAL="0.2",
        )
        env.update(extra)
        return env

    def start_worker(self, **extra: str) -> WorkerProcess:
        # "ready (group", not "topics: N ready"
        return self.start(["worker", "--loglevel", "warning"], ": ready (group", **extra)

    def join_worker(self, *options: str, **extra: str) -> WorkerProcess:
        """A worker joining the group of a worker already running: returned once
        the group has rebalanced and it has recovered the tables of the partitions
        it was given (Faust's "Worker ready", which it logs at info), not after a
        guessed while."""
        worker = self.start(["worker", *options, "--loglevel", "info"], ": ready (group", **extra)
        worker.wait_for("Worker ready", timeout=90)
        return worker

    def start(self, command: list[str], ready: str, **extra: str) -> WorkerProcess:
        """``lemongraph COMMAND`` in this lane, once it printed ``ready``; it is
        killed at the end of the test."""
        proc = start_lemongraph(command, self.root, self.env(**extra))
        worker = WorkerProcess(proc)
        worker.reader = read_lines(proc, worker.lines)
        self.workers.append(worker)
        worker.wait_for(ready, timeout=90)
        return worker

    def kill_workers(self) -> None:
        """SIGKILL every process this lane started (at the end of its tests)."""
        for worker in self.workers:
            worker.stop(signal.SIGKILL)

    def drop_topics(self) -> None:
        """Delete every topic under this lane's prefix (at the end of its tests,
        once its processes are gone). The session's broker then holds the topics
        of the lanes in use only: the embedded broker answers a client's first
        metadata request with every topic it has (stream/runtime/kafka.py,
        ``topics_metadata``), which took 0.1-0.3 s per client start once a few
        hundred lanes had each left their 16-odd topics."""

        async def go() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                ours = [t for t in await admin.list_topics() if t.startswith(self.prefix)]
                if ours:
                    await admin.delete_topics(ours)
            finally:
                await admin.close()

        def drop() -> None:
            try:
                asyncio.run(go())
            except Exception as exc:  # a clean-up: the next lanes' topics are their own
                print(f"lane {self.prefix}: its topics were not deleted: {exc!r}")

        # A thread of its own: a browser test's thread runs Playwright's event loop,
        # in which asyncio.run cannot start another.
        thread = threading.Thread(target=drop, name="drop-topics")
        thread.start()
        thread.join(60)

    def cli(
        self, *args: str, check: bool = True, process: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """``lemongraph ARGS`` on this lane: in the test's process (tests/inprocess.py),
        or with ``process`` as its own process through the console script."""
        if process:
            result = subprocess.run(
                [str(LEMONGRAPH), *args],
                cwd=self.root,
                env=self.env(),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        else:
            result = invoke(args, env=self.env(), cwd=self.root)
        if check and result.returncode != 0:
            raise AssertionError(
                f"lemongraph {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
            )
        return result

    def produce(self, records: list[tuple[bytes | None, bytes]], topic: str = "inbox") -> None:
        """Produce (key, value) records in order, waiting for each batch's acks."""
        name = self.topics.name(topic)

        async def go() -> None:
            async with producer(self.bootstrap) as client:
                futures = [await client.send(name, value, key=key) for key, value in records]
                await asyncio.gather(*futures)

        asyncio.run(go())

    def send(self, *messages: dict[str, Any]) -> None:
        self.produce([(m["key"].encode(), orjson.dumps(m)) for m in messages])

    def read(self, topic: str, idle: float = 0.5) -> list[dict[str, Any]]:
        """Every record of the topic so far, values decoded, with their offsets.
        Of the job table's changelog, the jobs' rows only, each as its state."""

        async def go() -> list[dict[str, Any]]:
            out = []
            name = self.topics.name(topic)
            async for r in read_topic(self.bootstrap, name, idle=idle):
                value: Any
                if name == self.topics.deadletter:
                    # A dead letter's value is the original bytes; its headers say why.
                    value = DeadLetter.from_headers(r.headers).describe(r.key, r.value)
                elif name == self.topics.jobstate:
                    state = stored_job_state(r.key, r.value)
                    if state is None:
                        continue  # a worker's own row
                    value = orjson.loads(state)
                else:
                    value = orjson.loads(r.value) if r.value is not None else None
                out.append(
                    {
                        "partition": r.partition,
                        "offset": r.offset,
                        "timestamp": r.timestamp_ms,
                        "key": r.key.decode() if r.key else None,
                        "value": value,
                    }
                )
            return out

        return asyncio.run(go())

    def drain(self, rounds: int = 1) -> None:
        """An observed end instead of a guessed while: an end marker (an event of
        a job that does not exist, which the worker refuses in a decision and which
        opens no task) on every partition of the inbox, and wait until the worker
        has decided each. A partition is decided in order, so whatever was on the
        inbox before the markers has been decided by then. A second round also
        covers what the first round's records forwarded to their home partition.
        The markers' decisions have keys that begin with END_MARKER."""
        for _ in range(rounds):
            self._mark_end()

    def _mark_end(self) -> None:
        partitions = int(self.env()["LEMONGRAPH_PARTITIONS"])
        every = list(range(partitions))
        choose = DefaultPartitioner()  # the partition lane.send's records go to
        keys: dict[int, str] = {}
        while len(keys) < partitions:
            key = f"{END_MARKER}{uuid.uuid4().hex[:8]}"
            keys.setdefault(choose(key.encode(), every, every), key)
        marked = set(keys.values())
        self.send(*({"type": "event", "key": k, "action": "end"} for k in marked))
        self.wait_until("decisions", lambda rs: marked <= {r["key"] for r in rs})

    def committed(self, group: str, topic: str, partitions: list[int]) -> dict[int, int]:
        """The offsets ``group`` has committed on these partitions of ``topic``
        (the next one it will read; -1 for none yet). Read without joining the
        group: no rebalance of the processes under test."""
        name = self.topics.name(topic)

        async def go() -> dict[int, int]:
            consumer = new_consumer(self.bootstrap, group=group)  # subscribes to nothing
            await consumer.start()
            try:
                out: dict[int, int] = {}
                for partition in partitions:
                    offset = await consumer.committed(TopicPartition(name, partition))
                    out[partition] = -1 if offset is None else offset
                return out
            finally:
                await consumer.stop()

        return asyncio.run(go())

    def wait_handled(
        self, group: str, topic: str, records: list[dict[str, Any]], timeout: float = 60
    ) -> None:
        """An observed end: wait until ``group`` has committed offsets past each
        of ``records`` (of ``topic``, as :meth:`read` returns them). The
        project's consumers commit a record only once it is handled: the worker
        after its batch's outputs were acknowledged, the agents service after its
        handler returned, the mail service after the send. What handling a
        record produced is on its topics by then."""
        last: dict[int, int] = {}
        for r in records:
            last[r["partition"]] = max(last.get(r["partition"], -1), r["offset"])
        self.wait_committed(group, topic, last, timeout)

    def wait_committed(
        self, group: str, topic: str, past: dict[int, int], timeout: float = 60
    ) -> None:
        """Wait until ``group`` has committed past the offset given for each
        partition of ``topic`` (``past``: partition → offset)."""
        wait_for(
            lambda: all(
                done > past[p] for p, done in self.committed(group, topic, sorted(past)).items()
            ),
            timeout,
            0.3,
            f"{group} to commit past offsets {past} of {topic}",
        )

    def wait_until(
        self, topic: str, predicate: Callable[[list[dict[str, Any]]], bool], timeout: float = 60
    ) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        records: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            records = self.read(topic, idle=0.2)
            if predicate(records):
                return records
            for worker in self.workers:
                if worker.proc.poll() is not None and worker.proc.returncode not in (0, -9):
                    raise AssertionError("worker died:\n" + "".join(worker.lines))
            time.sleep(0.3)
        raise AssertionError(
            f"timed out waiting on {topic}; last {len(records)} records: "
            f"{[r['value'] for r in records][-5:]}"
        )


def wait_for(
    check: Callable[[], Any], timeout: float = 60, interval: float = 0.2, what: str = "condition"
) -> Any:
    """Poll ``check`` until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


def restart_empty(broker: Any, lane: Lane) -> Any:
    """Stop ``broker`` (an ``EmbeddedBroker``) and start another on its port:
    empty, with another cluster id; the lane's topics are made again (as an
    operator would). The new broker."""
    from stream.runtime.broker import EmbeddedBroker, ensure_all_topics
    from stream.runtime.config import Settings

    port = broker.port
    broker.stop()
    again = EmbeddedBroker(port)
    again.start()
    partitions = int(lane.env()["LEMONGRAPH_PARTITIONS"])
    settings = Settings(kafka_url=again.url, topic_prefix=lane.prefix, partitions=partitions)
    asyncio.run(ensure_all_topics(settings))
    return again
