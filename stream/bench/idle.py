"""Sleeping jobs through the real worker: its RSS holding many idle jobs, its
restart to a first new decision with them in its local table, and a cold
restore of that table from the changelog (issue 19).

The jobs are written straight into the worker's own RocksDB databases (one per
partition, where Faust keeps them) rather than through the broker: a real
worker (``python -m stream worker``, what ``lemongraph worker`` runs) is started
once on fresh topics, so that it creates its partitions' databases and writes
each partition's due-time index mark, and is stopped; then each partition gets
its share of the jobs, each stored as the engine stores it (``stream/engine/store.py``:
the header, then the state) with its due-time index row (``stream/engine/timers.py``),
due a week ahead. The worker measured is then started again on that table: from
its start to the first new decision (an event for one of the stored jobs) is
the restart's time, and its RSS once idle (a few ticks later) the memory.

The rows so written are not in the changelog, which is what a restart on the
same disk needs: a worker re-reads only the changelog's last record at an
assignment (``JobTable.catch_up``), the index mark the first run wrote.

A cold restore is measured apart: the same rows are produced to the table's
changelog topic (the mark last in each partition, as a worker's batches end),
and a worker with an empty data folder is started on them, so that Faust's
recovery and ``catch_up`` rebuild the table from the changelog.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import rocksdict

from compiler import Start
from stream.bench.cluster import PARTITIONS, Cluster, produce
from stream.engine.registry import Registry
from stream.engine.store import next_due_ms
from stream.engine.timers import DUE_VALUE, INDEX_MARK, JOBS, due_key
from stream.runtime.broker import ensure_topics
from stream.runtime.errors import BenchError
from stream.runtime.files import load_playbook_file
from stream.runtime.kafka import producer
from stream.runtime.partitions import home_partition
from stream.runtime.processes import rss_mb
from topics import InboxEvent, JobStart, Topics, encode

__all__ = ["Idle", "IdleRun", "Seeded", "job_rows", "partition_databases", "write_jobs"]

#: Rows per RocksDB write batch (and per produced chunk) when filling.
CHUNK = 20_000
#: Seconds the worker idles (ticks every second) before its RSS is read.
IDLE_SECONDS = 6.0


@dataclass
class IdleRun:
    """What one restart with ``jobs`` stored jobs measured."""

    jobs: int
    #: Seconds from the restarted worker's start to its first new decision.
    recovery_s: float
    #: The worker's RSS once idle after the restart (MB): the median of a few
    #: reads a second apart, and the highest.
    rss_mb: float
    rss_mb_peak: float
    #: Seconds to write the jobs into the databases (not the worker's).
    fill_s: float
    #: The databases' size on disk after the worker's run (MB).
    disk_mb: float
    #: What was produced to the changelog (cold restore; keys and values, MB).
    produced_mb: float = 0.0


def job_rows(
    playbooks: Path, jobs: int, partitions: int, now: datetime | None = None, prefix: str = "idle"
) -> Iterator[tuple[int, bytes, bytes]]:
    """``(partition, key, value)`` rows of ``jobs`` onboarding jobs started at
    ``now`` (each waiting on its 7-day timer) and their due-time index rows, as
    the engine stores them. Every job holds the same state but for its key."""
    registry = Registry([load_playbook_file(playbooks / "onboarding.yaml")])
    graph = registry.latest("onboarding")
    assert graph is not None
    state = graph.next(None, now or datetime.now(UTC), Start("template", "onboarding")).state
    assert state is not None
    due_ms = next_due_ms(state)
    assert due_ms is not None
    body = state.to_bytes()
    assert body.count(b'"template"') == 1, "the key is expected once in the state"
    before, after = body.split(b'"template"')
    for i in range(jobs):
        key = f"{prefix}-{i:07d}".encode()
        p = home_partition(key, partitions)
        yield p, key, b'LG2 %d %d -\n%s"%s"%s' % (p, due_ms, before, key, after)
        yield p, due_key(JOBS, due_ms, key.decode()).encode(), DUE_VALUE


def partition_databases(data: Path) -> dict[int, Path]:
    """The job table's RocksDB databases under a worker's data folder, by partition."""
    found = {}
    for path in data.rglob("jobstate-*.db"):
        found[int(path.name.removeprefix("jobstate-").removesuffix(".db"))] = path
    return found


def write_jobs(
    databases: dict[int, Path], rows: Iterator[tuple[int, bytes, bytes]], flush: bool = True
) -> int:
    """Write ``rows`` into the databases (the worker must not be running) with
    the worker's own RocksDB options (its bloom filters, block format and
    memory: LEMONGRAPH_ROCKSDB_*); returns the rows written."""
    from stream.runtime.config import RocksDBMemory
    from stream.runtime.faust_tuning import BoundedRocksDBOptions

    options = BoundedRocksDBOptions(RocksDBMemory.from_env(dict(os.environ)))
    dbs = {
        p: rocksdict.Rdict(str(path), options=options.as_options()) for p, path in databases.items()
    }
    try:
        batches = {p: rocksdict.WriteBatch(raw_mode=True) for p in dbs}
        pending = written = 0
        for p, key, value in rows:
            batches[p].put(key, value)
            pending += 1
            if pending >= CHUNK:
                for q, batch in batches.items():
                    dbs[q].write(batch)
                batches = {q: rocksdict.WriteBatch(raw_mode=True) for q in dbs}
                written += pending
                pending = 0
        for q, batch in batches.items():
            dbs[q].write(batch)
        written += pending
        if flush:
            for db in dbs.values():
                db.flush()
        for db in dbs.values():
            if INDEX_MARK.encode() not in db:
                raise RuntimeError("a partition's database has no due-time index mark")
        return written
    finally:
        for db in dbs.values():
            db.close()


def _disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def _rss_samples(pid: int, seconds: float, read: Callable[[int], float]) -> list[float]:
    samples = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append(read(pid))
        time.sleep(1.0)
    return samples


@dataclass(frozen=True)
class Seeded:
    """A worker's topics and data folder, its partitions' databases created."""

    name: str
    topics: Topics
    env: dict[str, str]
    data: Path


def _databases(seeded: Seeded) -> dict[int, Path]:
    """The partitions' databases a seed worker left (every partition's)."""
    dbs = partition_databases(seeded.data)
    if sorted(dbs) != list(range(PARTITIONS)):
        raise RuntimeError(
            f"{seeded.name}: expected {PARTITIONS} partition databases, found {sorted(dbs)}"
        )
    return dbs


class Idle:
    """The idle jobs' figures of one bench run (``stream/bench/run.py``)."""

    def __init__(
        self, bench: Cluster, idle_seconds: float = IDLE_SECONDS, settle_seconds: float = 1.5
    ) -> None:
        self.bench = bench
        self.idle_seconds = idle_seconds
        #: after the seed's decisions: the batch's writes stored, the offsets committed
        self.settle_seconds = settle_seconds

    def seed(self, *names: str) -> list[Seeded]:
        """A worker per name on fresh topics (all at once) decides one job
        start and stops: its partitions' databases exist, each with the index
        mark."""
        bench = self.bench
        seeded = []
        for name in names:
            prefix = f"bench-{bench.run_id}-{name}."
            data = bench.workdir / name
            seeded.append(Seeded(name, Topics(prefix), bench.worker_env(prefix, data), data))
        workers = [self.bench.start_worker(s.env) for s in seeded]
        try:
            start = encode(JobStart(key="seed", playbook_key="onboarding").compact())
            for worker, s in zip(workers, seeded, strict=True):
                worker.wait_for("ready", 120)
                asyncio.run(produce(bench.bootstrap, s.topics.inbox, [(b"seed", start)]))
            for s in seeded:
                bench.wait_decisions(s.topics.decisions, 1, 120)
            time.sleep(self.settle_seconds)  # the batch's writes stored, the offsets committed
        finally:
            # All asked at once, then each waited for: a clean stop takes up to
            # 6 s (docs/operations.md, "How a worker stops"), the slowest's, not the sum.
            for worker in workers:
                if worker.proc.poll() is None:
                    worker.proc.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.proc.wait(30)
                worker.kill()  # gone already: closes its output
        for s in seeded:
            _databases(s)
        return seeded

    def unseeded(self, name: str) -> Seeded:
        """Fresh topics for a cold restore, with no worker run on them: the inbox,
        the decisions and the table's changelog are created (the worker creates
        the rest when it starts); the data folder is empty."""
        bench = self.bench
        prefix = f"bench-{bench.run_id}-{name}."
        topics = Topics(prefix)
        changelog = topics.jobstate
        names = {topics.inbox: PARTITIONS, topics.decisions: PARTITIONS, changelog: PARTITIONS}
        asyncio.run(ensure_topics(bench.bootstrap, names, {changelog}, security=bench.security))
        data = bench.workdir / name
        data.mkdir(parents=True, exist_ok=True)
        return Seeded(name, topics, bench.worker_env(prefix, data), data)

    def restart(self, seeded: Seeded, jobs: int, keep: bool = False) -> IdleRun:
        """Write ``jobs`` jobs into a seeded worker's databases, restart it and
        measure (see the module); ``keep``: its data folder stays, for a run with
        more jobs written over the same keys and more."""
        began = time.perf_counter()
        rows = job_rows(self.bench.playbooks, jobs, PARTITIONS, prefix=seeded.name)
        write_jobs(_databases(seeded), rows)
        return self._measure(seeded, jobs, time.perf_counter() - began, 300, keep)

    def cold_restore(self, seeded: Seeded, jobs: int, keep: bool = False) -> IdleRun:
        """Drop a seeded worker's data folder, produce the same rows to the
        table's changelog (the index mark last in each partition) and start a
        worker on the empty folder. ``keep``: the worker is stopped cleanly and
        its data folder stays, the partitions' databases it restored with their
        index marks: a seed for ``restart`` (as ``seed`` makes one) with these
        ``jobs`` in its table."""
        shutil.rmtree(seeded.data)
        changelog = seeded.topics.jobstate
        began = time.perf_counter()
        rows = list(job_rows(self.bench.playbooks, jobs, PARTITIONS, prefix=seeded.name))
        rows.extend((p, INDEX_MARK.encode(), DUE_VALUE) for p in range(PARTITIONS))
        asyncio.run(_produce_partitioned(self.bench.bootstrap, changelog, rows))
        produced = sum(len(key) + len(value) for _p, key, value in rows) / 1e6
        del rows
        run = self._measure(seeded, jobs, time.perf_counter() - began, 1800, keep)
        run.produced_mb = produced
        return run

    def _measure(
        self, seeded: Seeded, jobs: int, fill_s: float, timeout: float, keep: bool = False
    ) -> IdleRun:
        """Start the worker, time its first decision of an event for a stored
        job, let it idle, read its RSS, stop it."""
        bench, topics, data = self.bench, seeded.topics, seeded.data
        decided = bench.decisions_so_far(topics.decisions)
        started = time.time()
        worker = self.bench.start_worker(seeded.env)
        try:
            key = f"{seeded.name}-{jobs // 2:07d}"
            probe = encode(InboxEvent(key=key, action="meeting_cancelled").compact())
            asyncio.run(produce(bench.bootstrap, topics.inbox, [(key.encode(), probe)]))
            try:
                stamps = bench.wait_decisions(topics.decisions, decided + 1, timeout)
            except BenchError as exc:  # what the worker said, for whoever looks into it
                said = "".join(worker.lines[-40:])
                raise BenchError(f"{exc}; the worker's last output:\n{said}") from None
            recovery = max(stamps) / 1000 - started
            samples = _rss_samples(worker.proc.pid, self.idle_seconds, rss_mb)
        finally:
            # kept for another run: a clean stop, as the seed's, so that the next
            # worker joins the group at once (a killed one holds it for its
            # session timeout)
            worker.kill(signal.SIGTERM if keep else signal.SIGKILL)
        run = IdleRun(
            jobs,
            recovery,
            statistics.median(samples[len(samples) // 2 :]),
            max(samples),
            fill_s,
            _disk_mb(data),
        )
        if not keep:
            shutil.rmtree(data, ignore_errors=True)
        return run


async def _produce_partitioned(
    bootstrap: str, topic: str, rows: list[tuple[int, bytes, bytes]]
) -> None:
    """Produce ``(partition, key, value)`` rows, each to its partition, and
    wait for every acknowledgement."""
    async with producer(bootstrap) as client:
        for start in range(0, len(rows), CHUNK):
            futures = [
                await client.send(topic, value, key=key, partition=p)
                for p, key, value in rows[start : start + CHUNK]
            ]
            await asyncio.gather(*futures)
