"""What ``lemongraph start-job`` and ``send-event`` say happened to what they sent.

A decision names its input by where the producer put it (``origin``: the inbox
topic, partition and offset, docs/kafka.md), which is how the gateway's read
model settles its pending writes; the CLI matches the same way. It takes the
``decisions`` end offsets *before* it produces, then reads only the partitions
the job's decision can be on (the one its record went to, and the job's home
partition), from those offsets, keeping records keyed by the job: the wait costs
a few fetches, not a read of the topic.

A retried idempotency key writes no decision (stream/engine/engine.py: applied once
already, nothing changes). So the CLI also watches the engine group's committed
offset on the record's inbox partition: outputs are acknowledged before the
offset is committed (stream/engine/app.py), so once it has passed the record and the
decisions read so far hold none for it, the worker took it without a decision:
a duplicate when the event carried an idempotency key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import RecordMetadata, TopicPartition

from compiler import LemongraphError, compile_playbook
from stream.runtime.errors import ExitCode
from stream.runtime.files import load_playbooks_dir
from stream.runtime.kafka import (
    KafkaSecurity,
    caught_up,
    client_kwargs,
    new_consumer,
    partitions_of,
    producer,
    start_consumer,
)
from topics import Topics

__all__ = ["Sent", "describe", "send_and_wait", "unread_action"]

Kind = Literal["sent", "applied", "duplicate", "refused", "undecided", "timeout"]

#: Exit codes: applied and duplicate are success; refused (or a record read
#: with no decision) is 1; no decision in time is 3.
EXIT_CODES: dict[str, int] = {
    "sent": ExitCode.OK,
    "applied": ExitCode.OK,
    "duplicate": ExitCode.OK,
    "refused": ExitCode.FAILED,
    "undecided": ExitCode.FAILED,
    "timeout": ExitCode.NO_DECISION,
}


@dataclass(frozen=True, slots=True)
class Sent:
    """Where the record went, and what came of it (``decision`` when one was read)."""

    topic: str
    partition: int
    offset: int
    kind: Kind
    decision: dict[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]


def _home(key: bytes, partitions: int) -> int:
    from stream.runtime.partitions import home_partition

    return home_partition(key, partitions)


async def _committed(admin: AIOKafkaAdminClient, group: str, tp: TopicPartition) -> int:
    """The engine group's committed offset on ``tp`` (-1: none yet)."""
    offsets = await admin.list_consumer_group_offsets(group, partitions=[tp])
    found = offsets.get(tp)
    return found.offset if found is not None else -1


async def _produce(
    bootstrap: str, security: KafkaSecurity, inbox: str, value: bytes, raw_key: bytes
) -> RecordMetadata:
    """Produce ``value`` to the inbox under ``raw_key``: where it went."""
    async with producer(bootstrap, security=security) as client:
        return await client.send_and_wait(inbox, value, key=raw_key)


def _decision_partitions(partition: int, raw_key: bytes, count: int) -> set[int]:
    """The ``decisions`` partitions the record's decision can be on: the one its
    record went to, and the job's home partition (of ``count``)."""
    wanted = {partition}
    if count:
        wanted.add(_home(raw_key, count))
    return wanted


def _read_from_ends(
    consumer: AIOKafkaConsumer, tps: list[TopicPartition], ends: dict[TopicPartition, int]
) -> None:
    """Assign ``tps`` to ``consumer``, each from a little before its end taken."""
    if tps:
        consumer.assign(tps)
        for tp in tps:
            # A little before the end taken: records are matched by origin
            # anyway, and the embedded broker's ListOffsets answer can be off
            # by up to a batch (stream/runtime/kafka.py).
            consumer.seek(tp, max(0, ends.get(tp, 0) - 100))


def _decided(decision: dict[str, Any]) -> Kind:
    """What a decision says came of the record it names."""
    said = decision.get("outcome")
    return said if said in ("duplicate", "refused") else "applied"


@dataclass(frozen=True, slots=True)
class _Watch:
    """The wait for the decision of the record at ``inbox`` ``partition``
    ``offset``: the ``decisions`` partitions ``tps`` it can be on, read by
    ``consumer``, and the engine ``group``'s committed offset there, asked of
    ``admin``."""

    consumer: AIOKafkaConsumer
    admin: AIOKafkaAdminClient
    group: str
    tps: list[TopicPartition]
    raw_key: bytes
    inbox: str
    partition: int
    offset: int

    def sent(self, kind: Kind, decision: dict[str, Any] | None = None) -> Sent:
        return Sent(self.inbox, self.partition, self.offset, kind, decision)

    def names_record(self, decision: dict[str, Any]) -> bool:
        """Whether ``decision``'s origin is the record waited for."""
        origin = decision.get("origin") or {}
        return (
            origin.get("topic") == self.inbox
            and origin.get("partition") == self.partition
            and origin.get("offset") == self.offset
        )

    async def decision(self) -> dict[str, Any] | None:
        """The record's decision among the next records read, if it is there."""
        if not self.tps:
            await asyncio.sleep(0.2)
            return None
        batches = await self.consumer.getmany(timeout_ms=200, max_records=2000)
        for records in batches.values():
            for r in records:
                if r.key != self.raw_key or r.value is None:
                    continue
                decision: dict[str, Any] = orjson.loads(r.value)
                if self.names_record(decision):
                    return decision
        return None

    async def outcome(self, deadline: float, idempotent: bool) -> Sent:
        """Wait until the decision is read, the worker took the record without
        one, or ``deadline`` (a monotonic time) passes."""
        inbox_tp = TopicPartition(self.inbox, self.partition)
        passed_at: float | None = None
        next_check = 0.0
        while True:
            decision = await self.decision()
            if decision is not None:
                return self.sent(_decided(decision), decision)
            now = time.monotonic()
            if passed_at is None and now >= next_check:
                next_check = now + 0.3
                if await _committed(self.admin, self.group, inbox_tp) > self.offset:
                    passed_at = now
            settled = passed_at is not None and now - passed_at >= 0.5
            if settled and (not self.tps or await caught_up(self.consumer, self.tps)):
                return self.sent("duplicate" if idempotent else "undecided")
            if now >= deadline:
                return self.sent("timeout")


async def send_and_wait(
    bootstrap: str,
    topics: Topics,
    group: str,
    key: str,
    value: bytes,
    timeout: float | None,
    idempotent: bool = False,
    *,
    security: KafkaSecurity,
) -> Sent:
    """Produce ``value`` to the inbox under ``key``; with ``timeout``, wait up to
    that many seconds for its decision (None: do not wait). ``idempotent``: the
    record is an event with an idempotency key, so a record the worker took
    without a decision is a duplicate. ``security``: the settings' (every
    client made here uses it)."""
    raw_key = key.encode()
    if timeout is None:
        meta = await _produce(bootstrap, security, topics.inbox, value, raw_key)
        return Sent(topics.inbox, meta.partition, meta.offset, "sent")
    consumer = new_consumer(bootstrap, security)
    await start_consumer(consumer)
    admin: AIOKafkaAdminClient | None = None
    try:
        partitions = await partitions_of(consumer, topics.decisions)
        every = [TopicPartition(topics.decisions, p) for p in partitions]
        # Before producing: the decision cannot be at or before these.
        ends: dict[TopicPartition, int] = await consumer.end_offsets(every) if every else {}
        meta = await _produce(bootstrap, security, topics.inbox, value, raw_key)
        deadline = time.monotonic() + timeout
        wanted = _decision_partitions(meta.partition, raw_key, len(partitions))
        tps = [tp for tp in every if tp.partition in wanted]
        _read_from_ends(consumer, tps, ends)
        admin = AIOKafkaAdminClient(**client_kwargs(bootstrap, security))
        await admin.start()
        watch = _Watch(
            consumer, admin, group, tps, raw_key, topics.inbox, meta.partition, meta.offset
        )
        return await watch.outcome(deadline, idempotent)
    finally:
        if admin is not None:
            await admin.close()
        await consumer.stop()


def describe(sent: Sent, message: dict[str, Any], timeout: float | None) -> list[str]:
    """The lines that say what happened (the first names the outcome)."""
    where = f"{sent.topic} partition {sent.partition} offset {sent.offset}"
    key = message.get("key")
    idem = message.get("idempotency_key")
    if sent.kind == "sent":
        return [f"sent to {where} (not waiting for its decision)"]
    if sent.kind == "timeout":
        return [
            f"no decision within {timeout:g} s: sent to {where}, but no worker decided it "
            "(is `lemongraph worker` or `lemongraph dev` running on this LEMONGRAPH_KAFKA_URL "
            "and LEMONGRAPH_TOPIC_PREFIX? A longer --timeout waits longer)"
        ]
    if sent.kind == "duplicate":
        return [
            f"duplicate: job {key!r} already applied an event with idempotency key "
            f"{idem!r}; nothing changed ({where})"
        ]
    if sent.kind == "undecided":
        return [
            f"no decision: the worker read {where} and wrote none for it "
            "(see `lemongraph tail deadletter`)"
        ]
    decision = sent.decision or {}
    if sent.kind == "refused":
        reason = str(decision.get("refused") or "refused")
        if reason.startswith("unknown job") and key is not None:
            # The core's reason (recorded in histories) does not name the job.
            reason = f"unknown job {key!r}" + reason.removeprefix("unknown job")
        return [f"refused: {reason} ({where})"]
    playbook = decision.get("playbook_key")
    version = decision.get("playbook_version")
    on = f" on {playbook} v{version}" if playbook is not None else ""
    what = "started" if message.get("type") == "job.start" else f"took {message.get('action')!r}"
    lines = [f"applied: job {key!r} {what}{on} (decision seq {decision.get('seq')}, {where})"]
    for moved in decision.get("transitions") or []:
        lines.append(
            f"  {moved.get('milestone')}: {moved.get('from')} -> {moved.get('to')}"
            f" ({moved.get('reason')})"
        )
    if not decision.get("transitions"):
        lines.append("  no milestone moved")
    frontier = decision.get("frontier") or []
    status = decision.get("status")
    if status is not None and status != "running":
        lines.append(f"  job {status}")
    elif frontier:
        lines.append(f"  open: {', '.join(frontier)}")
    return lines


def unread_action(
    action: str,
    playbook_key: str | None,
    playbook_version: int | None,
    folder: Path,
    spec_of: Callable[[str, int], dict[str, Any] | None],
) -> str | None:
    """A warning when no condition reads ``action``, else None.

    With the job's playbook known (``playbook_key`` and ``playbook_version``,
    from its decision) it checks that version: from ``folder`` when the file
    there is that version, else as registered (``spec_of``, the playbooks topic).
    Without it (``--no-wait``) it warns only when no playbook in ``folder``
    reads the action: the job's own playbook is not known then, and a playbook
    that does read it may be the job's. It says nothing when it cannot tell."""
    found = load_playbooks_dir(folder).by_key if folder.is_dir() else {}
    if playbook_key is None:
        if not found or any(action in p.atoms_by_fact for p in found.values()):
            return None
        return (
            f"warning: no condition of any playbook under {folder} reads {action!r}: "
            "it is recorded and counts for nothing (a typo?)"
        )
    playbook = found.get(playbook_key)
    if playbook is None or playbook.version != playbook_version:
        spec = spec_of(playbook_key, playbook_version) if playbook_version is not None else None
        if spec is None:
            return None
        try:
            playbook = compile_playbook(spec)
        except (LemongraphError, ValueError, TypeError):
            return None
    if action in playbook.atoms_by_fact:
        return None
    read = sorted(playbook.atoms_by_fact)
    near = _close(action, read)
    return (
        f"warning: no condition of {playbook_key} v{playbook_version} reads {action!r}: "
        "it is recorded and counts for nothing"
        + (f" (did you mean {near!r}?)" if near else "")
        + (f"; its conditions read {', '.join(read)}" if read else "")
    )


def _close(word: str, choices: list[str]) -> str | None:
    import difflib

    matches = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return matches[0] if matches else None
