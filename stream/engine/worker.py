"""Starting a worker: topics, the playbook registry, then the Faust worker."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

import orjson
from pydantic import ValidationError

from compiler import LemongraphError, to_iso
from stream.engine.registry import Registry
from stream.engine.reload import PlaybookReload, register_schedules
from stream.runtime.broker import cluster_id, ensure_all_topics, is_tansu
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode
from stream.runtime.fetch import exit_now
from stream.runtime.files import load_playbooks_dir
from stream.runtime.kafka import bootstrap_of, producer, read_topic, run
from stream.runtime.metrics import DEADLETTERS, serve_metrics
from stream.runtime.processes import dump_tasks_on_signal
from stream.runtime.tracing import start_tracing
from topics import (
    DeadLetter,
    PlaybookRecord,
    Topics,
    encode,
)

if TYPE_CHECKING:
    import faust

__all__ = ["ensure_all_topics", "prepare_registry", "register_schedules", "run_worker"]

log = logging.getLogger("lemongraph.worker")


async def prepare_registry(
    settings: Settings, say: Callable[[str], None] = log.info
) -> tuple[Registry, list[str]]:
    """Register the playbooks folder on the ``playbooks`` topic, then read the
    topic back so that versions registered elsewhere are known too.

    Returns the registry and the problems found (invalid files or records).
    """
    assert settings.kafka_url is not None
    bootstrap = bootstrap_of(settings.kafka_url)
    topics = Topics(settings.topic_prefix)
    found = load_playbooks_dir(settings.playbooks_dir)
    problems = [str(p).splitlines()[0] for p in found.problems]
    registry = Registry()
    known: dict[tuple[str, int], bytes] = {}
    dead: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
    async for record in read_topic(bootstrap, topics.playbooks, idle=0.5):
        try:
            message = PlaybookRecord.model_validate_json(record.value or b"")
            playbook = registry.add_spec(message.spec, f"{topics.playbooks}@{record.offset}")
            known[(playbook.key, playbook.version)] = orjson.dumps(playbook.to_json())
        except (ValidationError, LemongraphError, ValueError) as exc:
            reason = f"invalid playbook record: {exc}".splitlines()[0]
            problems.append(f"{topics.playbooks} offset {record.offset}: {reason}")
            letter = DeadLetter.of(
                record.topic,
                record.partition,
                record.offset,
                reason,
                to_iso(datetime.now(UTC)),
                record.timestamp_ms,
            )
            dead.append((record.key, record.value, letter.headers(record.headers)))
            DEADLETTERS.labels(record.topic, "invalid_playbook").inc()
    published = 0
    async with producer(bootstrap) as client:
        for playbook in found.by_key.values():
            body = orjson.dumps(playbook.to_json())
            previous = known.get((playbook.key, playbook.version))
            if previous is not None and previous != body:
                problems.append(
                    f"{settings.playbooks_dir}: playbook {playbook.key} v{playbook.version} "
                    "differs from the version already registered; bump its version"
                )
                continue
            registry.add(playbook)
            if previous is None:
                registration = PlaybookRecord(
                    key=playbook.key, version=playbook.version, spec=playbook.to_json()
                )
                await client.send_and_wait(
                    topics.playbooks, encode(registration), key=registration.record_key
                )
                published += 1
        for key, value, headers in dead:
            await client.send_and_wait(topics.deadletter, value, key=key, headers=headers)
    say(
        f"playbooks: {len(registry)} version(s) known ("
        + ", ".join(f"{p.key} v{p.version}" for p in registry.playbooks())
        + f"); {published} newly registered"
    )
    return registry, problems


def run_worker(
    settings: Settings,
    registry: Registry,
    *,
    tansu: bool,
    ticker: bool = True,
    cluster: str = "",
    loglevel: str = "warning",
    status_every: float = 0.0,
    say: Callable[[str], None] = print,
    reload_every: float = 0.0,
    next_version: bool = False,
) -> int:
    """Run a Faust worker in this process until SIGINT/SIGTERM; returns its exit code.
    With ``reload_every``, it watches its playbooks folder that often
    (stream/engine/reload.py; ``next_version``: as ``lemongraph dev`` does)."""
    from stream.engine.app import build_app

    _Worker = _worker_class()

    running = build_app(settings, registry, tansu=tansu, ticker=ticker, cluster=cluster)
    app, stats, engine = running.app, running.stats, running.engine

    @app.task  # type: ignore[untyped-decorator]
    async def ready() -> None:
        tune_gc()
        dump_tasks_on_signal()  # docs/operations.md, "A process that seems stuck"
        mode = "worker + ticker" if ticker else "worker"
        say(
            f"{mode}: ready (group {app.conf.id}, {settings.partitions} partitions, "
            f"tick every {settings.tick_interval:g}s)"
        )

    if status_every > 0:
        said: list[str] = []

        @app.timer(status_every)  # type: ignore[untyped-decorator]
        async def status() -> None:
            line = (
                f"worker: {stats.records} records, {stats.decisions} decisions, "
                f"{stats.forwarded} forwarded to their home partition, "
                f"{stats.bounded} at a bounded clock, "
                f"{stats.deadletters} dead-lettered, {stats.skipped} re-deliveries and "
                f"{stats.duplicates} retried keys ignored"
            )
            # Quiet when idle (docs/operations.md, "Metrics"): a line only when
            # something but the ticks' records changed; the metrics say the rest.
            if said[-1:] != [line.split(", ", 1)[1]]:
                said[:] = [line.split(", ", 1)[1]]
                say(line)

    if reload_every > 0:
        reload = PlaybookReload(settings, registry, say, next_version=next_version)
        app.timer(reload_every, name="reload")(reload.poll)

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    metrics = serve_metrics("worker", settings.metrics_port, settings.metrics_host, say)
    tracing = start_tracing("worker", say)  # docs/operations.md, "Tracing"
    worker = _Worker(app, loglevel=loglevel, quiet=True, redirect_stdouts=False)
    worker.tell = say  # type: ignore[attr-defined]
    worker.spinner = None  # its terminal escapes would garble the status lines
    started = time.monotonic()
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        worker.disarm()  # type: ignore[attr-defined]
        code = exc.code if isinstance(exc.code, int) else 0
        say(
            f"worker: stopped after {time.monotonic() - started:.1f}s; {stats.records} records, "
            f"{stats.decisions} decisions, {stats.forwarded} forwarded, "
            f"{stats.skipped} re-deliveries skipped, "
            f"{stats.duplicates} retried keys ignored, {stats.deadletters} dead-lettered; "
            f"{stats.batches} batches, {stats.rate()}; time: {stats.phases()}; "
            f"state cache {engine.cache_hits} hits, {engine.cache_misses} misses; "
            f"{stats.ticks_sent} ticks sent"
        )
        return code
    finally:
        if metrics is not None:
            metrics.stop()
        if tracing is not None:
            tracing.stop()


#: Seconds a worker has to stop cleanly after SIGTERM or SIGINT. Faust's own
#: shutdown waits for the broker (a last commit, leaving the group), which is
#: forever when the broker is gone; past this the process exits anyway. That
#: loses nothing: what was not committed is re-delivered and recognised.
STOP_GRACE_SECONDS = 6.0


def _stop_anyway(say: Callable[[str], None]) -> None:
    say(
        f"worker: did not stop within {STOP_GRACE_SECONDS:g}s of the signal "
        "(is the broker reachable?): exiting now; uncommitted records will be re-delivered"
    )
    exit_now(ExitCode.STOP_TIMEOUT)


def _worker_class() -> type[faust.Worker]:
    from stream.runtime.faust_tuning import PromptWorker

    class StoppingWorker(PromptWorker):
        """Faust's worker, with a deadline on stopping (STOP_GRACE_SECONDS) and
        without its fixed waits at the end (PromptWorker)."""

        tell: Callable[[str], None] = print
        _deadline: threading.Timer | None = None

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = threading.Timer(STOP_GRACE_SECONDS, _stop_anyway, (self.tell,))
                self._deadline.daemon = True
                self._deadline.start()

        def disarm(self) -> None:
            """The worker stopped in time: the deadline must not fire later (in
            ``lemongraph dev`` the process goes on to stop the gateway and the
            broker, and would exit 75 with a false warning)."""
            if self._deadline is not None:
                self._deadline.cancel()

        def _on_sigint(self) -> None:
            self._arm()
            super()._on_sigint()

        def _on_sigterm(self) -> None:
            self._arm()
            super()._on_sigterm()

    return StoppingWorker


#: Allocations between two young-generation collections (Python's default: 700).
GC_YOUNG_THRESHOLD = 1_000_000


def tune_gc() -> None:
    """Collect garbage rarely, and never walk what start-up allocated.

    A worker keeps thousands of decoded job states alive (the engine's cache),
    and each decision allocates a few hundred short-lived objects, almost none
    in reference cycles: over the onboarding mix (35,120 records) the collector
    found 2,400 unreachable objects in all, and with Python's defaults it ran
    1,700 times and took ~2.1 s of a ~7 s run. Reference counting frees the
    rest. A young collection walks the young objects still alive, so the rarer
    it runs the less it walks: every 200,000 allocations it ran 3 times in that
    run; every 1,000,000 the compiled engine decided ~5% faster again (89-92
    against 95-97 us per record, in-process, alternating runs). ``gc.freeze``
    moves the modules, Faust and the registry out of the collector's sight.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 50, 50)


@dataclass(frozen=True)
class Prepared:
    """What a worker needs before its loop starts."""

    registry: Registry
    #: The broker is Tansu (the embedded one): work around its quirks.
    tansu: bool
    #: The broker's cluster id: a worker stops when it changes under it.
    cluster: str = ""


def prepare(settings: Settings, say: Callable[[str], None] = print) -> Prepared:
    """Topics and registry, synchronously (before the worker's loop starts)."""
    assert settings.kafka_url is not None

    async def go() -> tuple[list[str], Registry, list[str], str]:
        cluster = await cluster_id(bootstrap_of(settings.kafka_url or ""), settings.kafka_security)
        names = await ensure_all_topics(settings)
        registry, problems = await prepare_registry(settings, say)
        problems += await register_schedules(settings, say)
        return names, registry, problems, cluster

    names, registry, problems, cluster = cast(tuple[list[str], Registry, list[str], str], run(go()))
    say(f"topics: {len(names)} ready under prefix {settings.topic_prefix!r}")
    for problem in problems:
        say(f"playbooks: problem: {problem}")
    return Prepared(registry, is_tansu(cluster), cluster)
