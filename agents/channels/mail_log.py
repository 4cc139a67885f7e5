"""The mail service's sent-log: the compacted ``mail-log`` topic, shared by every
``mail-ingress`` of a group (docs/agents.md, "Email").

Each process reads the whole topic (every partition, in no consumer group) into
memory, and writes to it:

- ``out:<message id>``: an outbound message, ``attempt`` (written before the
  SMTP send), then ``sent`` or ``failed``. A process that takes a partition over
  reads the log to its end before it sends: what another process sent, it does
  not send again. The short reply and bounce tokens of the messages here are the
  lookup a reply address is resolved by (:func:`topics.mail.reply_routes`).
- ``in:<mail id>:<kind>:<job>:<contact>``: a received mail taken for one of its
  reply (or bounce) addresses: the same mail delivered again writes nothing.

Compaction keeps the latest entry of each key.

The process keeps no folder: it reads the log at every start. A broker that is
another one than at the start (restarted empty, replaced), or a log that went
back (recreated), is noticed before the log is read again (before every send):
what was read of the old log is forgotten and the log is read again from its
beginning (docs/operations.md, "When the broker was reset").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from stream.runtime.config import Settings
from stream.runtime.kafka import bootstrap_of, new_consumer, partitions_of
from stream.runtime.resets import ClusterWatch
from topics import Topics
from topics.mail import MailLogEntry, MailSettings, reply_routes
from topics.replies import ReplyRoute, normal_address

__all__ = ["MailLog"]

log = logging.getLogger(__name__)

#: Writes one record: topic, key, value.
Produce = Callable[[str, str, bytes], Awaitable[None]]


class MailLog:
    """The ``mail-log`` topic as this process has read it, and its writer."""

    def __init__(self, settings: Settings, mail: MailSettings, produce: Produce) -> None:
        self.settings = settings
        self.mail = mail
        self.produce = produce
        self.topic = Topics(settings.topic_prefix).mail_log
        self.entries: dict[str, MailLogEntry] = {}
        #: short token → what it names, from the ``out:`` entries.
        self.tokens: dict[str, ReplyRoute] = {}
        #: contact address (normal) → {``out:`` key: when it was sent, epoch seconds}.
        self.sends: dict[str, dict[str, float]] = {}
        self.consumer: AIOKafkaConsumer | None = None
        self.partitions: list[TopicPartition] = []
        self.reading = asyncio.Lock()
        bootstrap = bootstrap_of(settings.kafka_url or "")
        self.watch = ClusterWatch(bootstrap, "", settings.kafka_security)
        #: The broker's cluster id when the log was read from its beginning.
        self.cluster = ""
        #: Per partition, the offset after the last entry read.
        self.next: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        """Read the whole log (the topic exists: ``ensure_all_topics``)."""
        consumer = new_consumer(
            bootstrap_of(self.settings.kafka_url or ""),
            self.settings.kafka_security,
            offsets="earliest",  # a log that went back is read from its beginning
        )
        await consumer.start()
        self.consumer = consumer
        self.cluster = await self.watch.current()
        count = await partitions_of(consumer, self.topic)
        self.partitions = [TopicPartition(self.topic, p) for p in count]
        consumer.assign(self.partitions)
        await consumer.seek_to_beginning(*self.partitions)
        await self.catch_up()

    async def catch_up(self) -> None:
        """Read the log up to its end as it is now: whatever another process
        wrote before this call (before it gave a partition up) is known after."""
        consumer = self.consumer
        if consumer is None or not self.partitions:
            return  # not started (a sender under test): what this process wrote
        async with self.reading:
            await self._check_broker(consumer)
            ends = await consumer.end_offsets(self.partitions)
            while True:
                positions = {tp: await consumer.position(tp) for tp in self.partitions}
                if any(positions[tp] > ends[tp] for tp in self.partitions):
                    await self._read_again(consumer, "it now ends before what was read of it")
                    continue
                behind = [tp for tp in self.partitions if positions[tp] < ends[tp]]
                if not behind:
                    return
                batches = await consumer.getmany(*behind, timeout_ms=500)
                await self._take(consumer, batches)

    async def _take(self, consumer: AIOKafkaConsumer, batches: dict[TopicPartition, Any]) -> None:
        """Apply what was read; a partition whose offsets went back (its log
        recreated) has the log read again."""
        for tp, records in batches.items():
            for r in records:
                if r.offset < self.next.get(tp, 0):
                    await self._read_again(
                        consumer, f"partition {tp.partition} went back to offset {r.offset}"
                    )
                    return
                self.next[tp] = r.offset + 1
                self._apply(r.key.decode() if r.key else "", r.value)

    async def _check_broker(self, consumer: AIOKafkaConsumer) -> None:
        """A broker that is another one than the log was read from (restarted
        empty, replaced): the log is read again from this one."""
        try:
            now = await self.watch.current(patience=5.0)
        except Exception:  # not answering: the read below says so
            return
        if self.cluster and now != self.cluster:
            self.cluster = now
            await self._read_again(consumer, f"the broker is now cluster {now!r}")

    async def _read_again(self, consumer: AIOKafkaConsumer, why: str) -> None:
        log.warning(
            "mail: the %s log was reset (%s): what was read of it is forgotten and it is "
            "read again from its beginning (docs/operations.md, 'When the broker was reset')",
            self.topic, why,
        )  # fmt: skip
        self.entries.clear()
        self.tokens.clear()
        self.next.clear()
        await consumer.seek_to_beginning(*self.partitions)

    def _apply(self, key: str, value: bytes | None) -> None:
        if value is None:  # a tombstone
            gone = self.entries.pop(key, None)
            if gone is not None and gone.contact:
                self.sends.get(normal_address(gone.contact), {}).pop(key, None)
            return
        try:
            entry = MailLogEntry.model_validate_json(value)
        except ValueError:
            return  # not ours to read (written by a newer version)
        self.entries[key] = entry
        if key.startswith("out:") and entry.contact:
            self.tokens.update(
                reply_routes(
                    self.mail, entry.message_id, entry.job_key, entry.contact, entry.written_at
                )
            )
            self._count(key, entry)

    def _count(self, key: str, entry: MailLogEntry) -> None:
        """Keep what the per-contact bound counts: a mail sent, or being sent."""
        sends = self.sends.setdefault(normal_address(entry.contact or ""), {})
        if entry.state in ("attempt", "sent"):
            sends[key] = _epoch(entry.at)
        else:
            sends.pop(key, None)

    def sent_to(self, contact: str, since: datetime) -> int:
        """How many mails the group sent (or was sending) to ``contact`` since
        ``since``, as far as this process has read the log; older ones are
        forgotten here."""
        sends = self.sends.get(normal_address(contact), {})
        edge = since.timestamp()
        for key in [k for k, at in sends.items() if at < edge]:
            del sends[key]
        return len(sends)

    def get(self, key: str) -> MailLogEntry | None:
        """The latest entry of ``key`` this process has read or written."""
        return self.entries.get(key)

    async def write(self, key: str, entry: MailLogEntry) -> None:
        """Write an entry (acknowledged by the broker) and know it here."""
        value = entry.model_dump_json().encode()
        await self.produce(self.topic, key, value)
        self._apply(key, value)

    async def route(self, token: str) -> ReplyRoute | None:
        """What a short token names; the log is read to its end first when it is
        not known yet (its mail may have been sent by another process a moment ago)."""
        if token not in self.tokens:
            await self.catch_up()
        return self.tokens.get(token)

    async def stop(self) -> None:
        """Stop reading (a broker that is gone does not hold this up)."""
        await self.watch.close()
        if self.consumer is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.consumer.stop(), 5)
            self.consumer = None


def _epoch(at: str) -> float:
    """An entry's ``at`` (ISO 8601, UTC) in seconds; 0 when unreadable."""
    try:
        return datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
