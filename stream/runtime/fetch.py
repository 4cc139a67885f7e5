"""Whole fetches to one batch handler, instead of one event at a time.

Faust delivers a record to an agent through several layers, each per record:
the fetcher awaits ``wait_first(callback(message), suspend_flow.wait())`` (two
futures and an ``asyncio.wait``), the conductor takes a lock, decodes the
record into an Event and queues it, and the agent's stream dequeues it, acks
the previous one and runs its processors. Measured here, that path alone caps
a Faust agent that does nothing at 7,000-10,000 events/s: through it, the
engine managed about 1,600-2,000 events/s; without it, about 4,000-5,000.

:class:`BatchConsumer` keeps everything else Faust does — group membership,
assignment and rebalances, table recovery, offset commits of acknowledged
messages, flow control — and replaces only the per-record delivery for the
topics given to :meth:`BatchApp.consume_in_batches`: each fetch (at most
``broker_max_poll_records``) is handed to one coroutine as a batch; every
message is tracked before and acknowledged after it, so a rebalance waits for
a batch in progress (Faust's ``wait_empty``) and a commit never passes a
record not yet handled. Records of any other topic still go through Faust's
own delivery.

At a steady rate a fetch brings a few records, and a batch's fixed costs (the
produce requests, the fetches, the table's write) dominate: a worker took about
1 ms of CPU per event at 500 events/s against 0.1 ms in a burst. So after a
batch of fewer than :data:`LINGER_BELOW` records the loop waits ``linger``
seconds (``LEMONGRAPH_BATCH_LINGER_MS``, docs/operations.md, "Batches at a
steady rate") before it takes the next: the fetcher goes on buffering
meanwhile, and the next batch is what came. The wait holds no record: the
batch before it is acknowledged, so a rebalance or a stop during it waits for
nothing, and the first record after a quiet spell is taken at once.

With ``stream/engine/table.py`` and ``stream/runtime/faust_tuning.py`` this is one of the
three places that reach into Faust's internals; tests/stream/runtime/test_stream_faust.py pins
them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from stream.runtime.errors import ExitCode, StopWorker

__all__ = [
    "LAST_WORDS",
    "LINGER_BELOW",
    "BatchApp",
    "BatchConsumer",
    "BatchHandler",
    "StopWorker",
    "exit_now",
]

log = logging.getLogger("lemongraph.worker")

#: Called, in order, just before the process ends without Python's own
#: shutdown (``exit_now``): for a runner that has something to say first (``lemongraph
#: dev`` tells that its broker died, when that is why).
LAST_WORDS: list[Callable[[], None]] = []


def exit_now(code: int) -> None:
    """End the process now (no cleanup that could wait for a broker), after
    ``LAST_WORDS`` and with the logs flushed."""
    for words in LAST_WORDS:
        with contextlib.suppress(Exception):  # nothing may keep the process from ending
            words()
    logging.shutdown()
    os._exit(code)


#: After a batch of fewer records than this, the next waits (``BatchConsumer.linger``).
LINGER_BELOW = 500

#: Receives a batch of Faust messages (``.topic .partition .offset .key .value
#: .timestamp``), in fetch order; returns once the batch is fully handled.
BatchHandler = Callable[[Sequence[Any]], Awaitable[None]]


class BatchConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer with batch delivery for some topics."""

    batch_topics: frozenset[str] = frozenset()
    batch_handler: BatchHandler | None = None
    batch_max: int = 5000
    #: Seconds the next take waits after a batch of fewer than ``LINGER_BELOW`` records.
    linger: float = 0.0
    #: (topic, partition) → (last offset read, the lower one that came next),
    #: for the batch handler to look into; it removes what it has looked at.
    rewound: dict[tuple[str, int], tuple[int, int]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.rewound = {}
        #: TP → the last offset read and handled: copied from Faust's read
        #: offsets once a fetch's batches are all handled (``lag``).
        self.handled: dict[Any, int | None] = {}

    def lag(self) -> dict[tuple[str, int], int]:
        """(topic, partition) → records of an assigned partition of the batch
        topics not handled yet: its end as last fetched, less the next offset
        to handle (docs/operations.md, "Metrics"). A partition not fetched yet
        is left out. Read from the metrics server's thread: it only reads."""
        found: dict[tuple[str, int], int] = {}
        for tp in list(self.assignment()):
            if tp.topic not in self.batch_topics:
                continue
            try:
                # None until a fetch response told it (aiokafka), whatever Faust's type says
                end: int | None = self.highwater(tp)
            except Exception:  # noqa: S112 - revoked under us, or not fetched yet
                continue
            if end is None:
                continue
            last = self.handled.get(tp, self._read_offset.get(tp))
            found[(tp.topic, tp.partition)] = max(0, end - (last + 1 if last is not None else 0))
        return found

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - run by brokers
        # Faust's loop (faust/transport/consumer.py, Consumer._drain_messages),
        # with delivery per fetch instead of per record.
        consumer_stopped = self._stopped.is_set
        fetcher_stopped = fetcher._stopped.is_set
        linger = self.linger
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                await self.sleep(0)
                if self.should_stop:
                    continue
                batch: list[Any] = []
                await self._take(batch, 1.0)
                step = self.batch_max
                for start in range(0, len(batch), step):
                    # Shielded: stopping the fetcher must not cut a batch in two.
                    await asyncio.shield(self._deliver(batch[start : start + step]))
                if batch:
                    self.handled = dict(self._read_offset)
                if self._commit_every is not None and self._n_acked >= self._commit_every:
                    self._n_acked = 0
                    await self.commit()
                if batch and linger > 0 and len(batch) < LINGER_BELOW:
                    # A small batch: let the fetcher buffer before the next
                    # take. Every record taken is acknowledged by now.
                    await asyncio.sleep(linger)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise

    async def _take(self, batch: list[Any], timeout: float) -> None:
        """Add what one ``getmany`` returns within ``timeout`` s to ``batch``
        (records of other topics go to Faust's own delivery)."""
        callback = self.callback
        read_offset = self._read_offset
        acks_enabled_for = self.app.topics.acks_enabled_for
        batch_topics = self.batch_topics
        async for tp, message in self.getmany(timeout=timeout):
            offset = message.offset
            last = read_offset[tp]
            if last is not None and offset < last:
                # Seen before a seek (Faust drops these too), or the log
                # was reset under us: the handler asks the broker which.
                if message.topic in batch_topics:
                    self.rewound.setdefault((message.topic, tp.partition), (last, offset))
                continue
            if last and offset - last > 1 and acks_enabled_for(message.topic):
                await self._add_gap(tp, last + 1, offset)
            read_offset[tp] = offset
            if message.topic in batch_topics:
                self.track_message(message)
                batch.append(message)
            else:
                await callback(message)

    async def _deliver(self, messages: list[Any]) -> None:
        handler = self.batch_handler
        assert handler is not None
        try:
            await handler(messages)
        except StopWorker as exc:
            log.critical("%s", exc)
            exit_now(exc.code)
        except BaseException:
            # An acknowledged message gets committed: carrying on past a batch
            # that failed part-way would lose it. Stop the process instead; the
            # batch is re-delivered to whoever takes the partitions over.
            log.exception("batch failed; exiting so that it is re-delivered")
            exit_now(ExitCode.BATCH_FAILED)  # EX_SOFTWARE
        ack = self.ack
        for message in messages:
            ack(message)


class _BatchTransport(faust_aiokafka.Transport):
    Consumer = BatchConsumer
    batch: tuple[frozenset[str], BatchHandler, int, float] | None = None

    def create_consumer(self, callback: Any, **kwargs: Any) -> Any:
        consumer = super().create_consumer(callback, **kwargs)
        if self.batch is not None and isinstance(consumer, BatchConsumer):
            topics, handler, batch_max, linger = self.batch
            consumer.batch_topics = topics
            consumer.batch_handler = handler
            consumer.batch_max = batch_max
            consumer.linger = linger
        return consumer


class BatchApp(faust.App):
    """A Faust app whose consumer can hand whole fetches of some topics to one
    coroutine (:meth:`consume_in_batches`)."""

    def _new_transport(self) -> Any:
        return _BatchTransport(self.conf.broker_consumer, self)

    def kafka_producer(self) -> Any:
        """The ``aiokafka.AIOKafkaProducer`` under Faust's producer (started with
        the app), for :func:`stream.runtime.produce.produce_batches`."""
        return self.producer._ensure_producer()  # type: ignore[attr-defined]

    def consume_in_batches(
        self, topic: Any, handler: BatchHandler, batch_max: int, linger: float = 0.0
    ) -> None:
        """Subscribe to ``topic`` (a Faust topic, possibly of several names) and
        hand its records to ``handler`` in batches of at most ``batch_max``, in
        the order fetched; after a batch of fewer than ``LINGER_BELOW`` records,
        the next is taken ``linger`` seconds later. Call before the app starts;
        one handler per app."""
        transport = self.transport
        assert isinstance(transport, _BatchTransport)
        if transport.batch is not None:
            raise RuntimeError("this app already consumes in batches")
        transport.batch = (frozenset(topic.topics), handler, batch_max, linger)
        self.topics.add(topic)
