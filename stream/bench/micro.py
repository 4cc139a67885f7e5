"""In-process figures: the pure core's decision rate and the cost of a tick."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from compiler import Event, JobGraph, Start, Tick, to_iso
from stream.engine import Engine, Record
from stream.files import load_playbook_file
from stream.registry import Registry
from stream.store import NOTHING_APPLIED, encode_stored
from topics import JobStart, TickRecord, Topics, encode

from .workload import onboarding_mix

__all__ = ["core_decisions_per_s", "tick_cost_ms"]

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def core_decisions_per_s(playbooks: Path, jobs: int) -> float:
    """Decisions per second of ``JobGraph.next`` alone on the onboarding mix."""
    graph = JobGraph(load_playbook_file(playbooks / "onboarding.yaml"))
    mix = onboarding_mix(jobs, seed=3)
    states: dict[str, object] = {}
    started = time.perf_counter()
    for i, message in enumerate(mix):
        now = T0 + timedelta(seconds=i)
        key = message.key
        if isinstance(message, JobStart):
            step = graph.next(None, now, Start(key, "onboarding"))
        else:
            event = Event(
                message.action,
                None,
                message.properties or None,
                message.source,
                message.idempotency_key,
            )
            step = graph.next(states[key], now, event)  # type: ignore[arg-type]
        states[key] = step.state
    # And the deadlines: advance every job past its windows.
    late = T0 + timedelta(days=40)
    for key, state in states.items():
        states[key] = graph.next(state, late, Tick()).state  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    return (len(mix) + len(states)) / elapsed


def _loader(store: dict[str, bytes]) -> Callable[[str, int], bytes | None]:
    def load(key: str, _partition: int) -> bytes | None:
        return store.get(key)

    return load


def tick_cost_ms(playbooks: Path, pending: int, due: int, repeats: int = 3) -> float:
    """Milliseconds for the engine to handle one tick that finds ``due`` jobs due
    among ``pending`` jobs waiting on timers (median of ``repeats``)."""
    topics = Topics("bench.")
    playbook = load_playbook_file(playbooks / "onboarding.yaml")
    registry = Registry([playbook])
    graph = registry.latest("onboarding")
    assert graph is not None
    # The due jobs are real stored jobs; the others exist only as index entries
    # far in the future, which is all a tick may look at.
    template = graph.next(None, T0, Start("template", "onboarding")).state
    assert template is not None
    samples = []
    for _ in range(repeats):
        store: dict[str, bytes] = {}
        engine = Engine(topics, registry, _loader(store), partitions=1)
        for i in range(due):
            key = f"due-{i}"
            state = graph.next(None, T0, Start(key, "onboarding")).state
            assert state is not None
            store[key] = encode_stored(0, NOTHING_APPLIED, state)
            engine.timers.set(0, key, int(state.timers[0].at.timestamp() * 1000))
        far = int((T0 + timedelta(days=365)).timestamp() * 1000)
        for i in range(pending - due):
            engine.timers.set(0, f"idle-{i}", far + i)
        at = T0 + timedelta(days=8)  # past collectIdentity's 7-day window
        tick = Record(
            topics.ticks,
            0,
            0,
            b"tick",
            encode(TickRecord(partition=0, at=to_iso(at))),
            int(at.timestamp() * 1000),
        )
        started = time.perf_counter()
        batch = engine.process([tick])
        samples.append((time.perf_counter() - started) * 1000)
        assert batch.decisions == due, (batch.decisions, due)
    return statistics.median(samples)
