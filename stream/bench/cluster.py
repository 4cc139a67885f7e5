"""The broker and the workers one benchmark run measures through: its topics
(a fresh prefix per part, ``PARTITIONS`` each), a worker's environment and
process, producing records and waiting for decisions. ``Bench``
(``stream/bench/run.py``) and the idle jobs' figures (``stream/bench/idle.py``)
both run on it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from stream.bench.figures import Parameters
from stream.runtime.broker import EmbeddedBroker
from stream.runtime.errors import BenchError
from stream.runtime.kafka import bootstrap_of, configured_security, producer, read_topic
from stream.runtime.processes import ChildProcess

__all__ = [
    "PARTITIONS",
    "Cluster",
    "Site",
    "bench_site",
    "count_records",
    "produce",
]

PARTITIONS = 4


async def produce(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], compression: str | None = None
) -> float:
    """Produce and wait for every ack; returns the elapsed seconds (``compression``:
    the environment's codec when None)."""
    async with producer(bootstrap, compression=compression) as client:
        started = time.perf_counter()
        futures = [await client.send(topic, value, key=key) for key, value in records]
        await asyncio.gather(*futures)
        return time.perf_counter() - started


async def count_records(bootstrap: str, topic: str) -> tuple[int, list[tuple[int, int]]]:
    """Records of a topic, and each record's (timestamp, partition)."""
    stamps = [(r.timestamp_ms, r.partition) async for r in read_topic(bootstrap, topic, idle=0.3)]
    return len(stamps), stamps


@dataclass(frozen=True)
class Site:
    """Where a run measures: the broker (its process when embedded), a scratch
    folder, and the playbooks folder holding ``onboarding.yaml``."""

    url: str
    broker_pid: int | None
    workdir: Path
    playbooks: Path


@contextmanager
def bench_site(say: Callable[[str], None], playbooks: Path | None) -> Iterator[Site]:
    """The broker of LEMONGRAPH_KAFKA_URL, else an embedded one started here,
    and a scratch folder; both gone at the end. ``playbooks``: the folder of
    the onboarding playbook (None: the project's ``examples/``)."""
    playbooks = (playbooks or Path(__file__).resolve().parents[2] / "examples").resolve()
    if not (playbooks / "onboarding.yaml").is_file():
        raise BenchError(
            f"the benchmark runs the onboarding playbook: {playbooks / 'onboarding.yaml'} is "
            "missing (set LEMONGRAPH_PLAYBOOKS_DIR to the project's playbooks folder)"
        )
    url = os.environ.get("LEMONGRAPH_KAFKA_URL", "").strip()
    workdir = Path(tempfile.mkdtemp(prefix="lemongraph-bench-"))
    broker = None
    try:
        if not url:
            broker = EmbeddedBroker()
            broker.start()
            url = broker.url
        say(f"broker: {url}{' (embedded Tansu)' if broker else ''}; cores: {os.cpu_count()}")
        yield Site(url, broker.pid if broker is not None else None, workdir, playbooks)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class Cluster:
    """One run's broker, workdir and playbooks, and the workers started on them."""

    def __init__(
        self,
        url: str,
        params: Parameters,
        say: Callable[[str], None],
        playbooks: Path,
        workdir: Path,
        broker_pid: int | None = None,
    ) -> None:
        self.url = url
        self.bootstrap = bootstrap_of(url)
        #: The environment's Kafka security (the bench's workers read it too).
        self.security = configured_security()
        self.params = params
        self.say = say
        self.playbooks = playbooks
        self.workdir = workdir
        self.run_id = uuid.uuid4().hex[:8]
        #: The embedded broker's process (None: another broker), whose CPU the
        #: codec comparison measures.
        self.broker_pid = broker_pid

    def worker_env(self, prefix: str, data: Path) -> dict[str, str]:
        """A worker's environment: this broker, the topics under ``prefix``,
        its data folder, the playbooks, a tick every second."""
        env = dict(os.environ)
        env.update(
            LEMONGRAPH_KAFKA_URL=self.url,
            LEMONGRAPH_TOPIC_PREFIX=prefix,
            LEMONGRAPH_PARTITIONS=str(PARTITIONS),
            LEMONGRAPH_DATA_DIR=str(data),
            LEMONGRAPH_PLAYBOOKS_DIR=str(self.playbooks),
            LEMONGRAPH_TICK_INTERVAL="1",
        )
        return env

    def start_worker(self, env: dict[str, str]) -> ChildProcess:
        """A worker process (``python -m stream worker``) with ``env``."""
        return ChildProcess([sys.executable, "-m", "stream", "worker"], env, self.workdir)

    def decisions_so_far(self, topic: str) -> int:
        """The records in a decisions topic now."""
        return asyncio.run(count_records(self.bootstrap, topic))[0]

    def wait_decisions(self, topic: str, expected: int, timeout: float) -> list[int]:
        """Wait until ``topic`` holds ``expected`` records; their broker timestamps."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            count, stamps = asyncio.run(count_records(self.bootstrap, topic))
            if count >= expected:
                return [t for t, _ in stamps]
            time.sleep(0.5)
        raise BenchError(f"{topic}: {count} of {expected} decisions after {timeout}s")
