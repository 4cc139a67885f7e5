"""The agents service's intake: each record of ``tasks`` or ``messages`` to the
method that takes its kind (docs/agents.md, "The agents service"). A record
that is not of its topic's shape, or whose taking fails, is dead-lettered byte
for byte with the reason (docs/kafka.md, "Dead letters"); the stream goes on.

The app's stream takes records in batches (``batched``): the checkpoints of a
batch's conversations are written together and acknowledged, then the runs
they owe start, then the batch's records are acknowledged to Kafka
(docs/agents.md, "Taking a burst"). One acknowledged write per record held a
burst of 1,000 tasks to one broker round trip each.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from topics import (
    MessageRecord,
    ScheduleCommandTask,
    SchedulePromptTask,
    TaskClosedRecord,
    TaskOpenedRecord,
    TaskRecord,
    first_error,
)

from agents.conversation import take_answer
from agents.flows.talking import first_turn, take_turn
from agents.run import Conversation
from agents.service.runs import Runs
from agents.service.state import Taken, Where, log
from agents.stores import CheckpointTooLarge

__all__ = ["Intake"]

_TASKS: TypeAdapter[Any] = TypeAdapter(TaskRecord)


class Intake(Runs):
    """Taking the records of ``tasks`` and ``messages``."""

    async def on_record(self, value: bytes | None, where: Where | None = None) -> None:
        """Take one record of ``tasks`` or ``messages`` (``where`` says which; a
        task record without it); start the run it owes. A record that is not of
        its topic's shape is dead-lettered, byte for byte, with the reason."""
        if where is not None:
            caught_up = self.partitions.get(where.partition)
            if caught_up is None:
                return  # revoked meanwhile: its new owner reads it
            await caught_up.wait()
        self.stats.records += 1
        record = await self._read(value, where)
        if record is None:
            return
        if getattr(record, "job_key", None) in self.unsaved:
            # The job changed earlier in this batch: that change is stored first,
            # so a record whose taking fails leaves no half change to store.
            await self.stored()
        partition = where.partition if where is not None else None
        self._taking = Taken(record, value, where, contextvars.copy_context())
        # each kind of record to its method (_TAKERS, below the class)
        try:
            await _TAKERS[type(record)](self, record, partition)
        except Exception as exc:  # one job's poison never stops the stream
            await self._not_taken(record, value, where, exc)
        finally:
            self.changing = None

    #: The record being taken, for :meth:`_settle` in a batch.
    _taking: Taken | None = None

    async def stored(self) -> None:
        """The end of a batch: every conversation it changed is checkpointed
        (the writes go together, each acknowledged), then the runs it owes
        start, each in the context its record was taken in. A conversation
        whose checkpoint cannot be written is read again from the store, and the
        record that changed it is dead-lettered (:meth:`_not_taken`)."""
        unsaved, self.unsaved = self.unsaved, {}
        owed, self.owed = self.owed, {}
        if not unsaved and not owed:
            return
        try:
            # Each checkpoint in the trace of the record that changed it.
            saves = [
                asyncio.create_task(self.save(conv), context=taken.context.copy())
                for conv, taken in unsaved.values()
            ]
            done = await asyncio.gather(*saves, return_exceptions=True)
            for (key, (_conv, taken)), outcome in zip(unsaved.items(), done, strict=True):
                if isinstance(outcome, BaseException):
                    if not isinstance(outcome, Exception):
                        raise outcome  # cancelled: the stream stops
                    owed.pop(key, None)
                    await self._dead_letter_taken(taken, outcome)
        finally:
            for key, context in owed.items():
                context.run(self.start, key)

    async def _dead_letter_taken(self, taken: Taken, exc: Exception) -> None:
        """A record whose batch's checkpoint could not be written: dead-lettered
        in its own trace (:meth:`_not_taken`). When even that cannot be written,
        it is logged and the batch goes on."""
        try:
            await asyncio.create_task(
                self._not_taken(taken.record, taken.value, taken.where, exc),
                context=taken.context.copy(),
            )
        except Exception as again:
            log.error("agents: a record of %s neither taken nor dead-lettered: %s: %s",
                      taken.where.topic if taken.where else "tasks",
                      type(again).__name__, again)  # fmt: skip

    async def _not_taken(
        self, record: BaseModel, value: bytes | None, where: Where | None, exc: Exception
    ) -> None:
        """A record whose taking failed (docs/agents.md, "Output bounds"): the
        job's conversation is read back from its last checkpoint, as after a
        crash (its run in flight, stopped, resumes from there), and the record is
        dead-lettered byte for byte with the reason; the stream goes on."""
        self.stats.refused += 1
        job = str(getattr(record, "job_key", "") or "")
        reason = f"not taken: {type(exc).__name__}: {exc}"[:1000]
        log.error("agents: %s: a record of %s %s", job, where.topic if where else "tasks",
                  reason, exc_info=not isinstance(exc, CheckpointTooLarge))  # fmt: skip
        if job:
            await self._read_again(job)
        if where is None:
            raise exc
        await self.dead_letter(where, value, reason)

    async def _read_again(self, job: str) -> None:
        """Forget the job's conversation held in memory (a record may have
        changed it halfway); a run in flight is stopped and started again, to
        resume from the store."""
        run = self.running.pop(job, None)
        in_flight = run is not None and not run.done()
        if run is not None and in_flight:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            if self.flush is not None:
                await self.flush()
        self.live.pop(job, None)
        if in_flight:
            self.start(job)

    async def _read(self, value: bytes | None, where: Where | None) -> BaseModel | None:
        """The record, of its topic's shape; else None, and it is dead-lettered."""
        message = where is not None and where.topic == self.topics.messages
        try:
            if message:
                return MessageRecord.model_validate_json(value or b"")
            record: BaseModel = _TASKS.validate_json(value or b"")
            return record
        except ValidationError as exc:
            self.stats.refused += 1
            reason = f"not a {'message' if message else 'task'} record: "
            reason += first_error(exc, "value")
            log.warning("%s: %s", "messages" if message else "tasks", reason)
            if where is not None:
                await self.dead_letter(where, value, reason)
            return None

    def _conversation(self, job_key: str, partition: int | None) -> Conversation:
        """The job's conversation, noted as on the partition its record came on."""
        self.changing = job_key
        conv = self.load(job_key)
        if partition is not None:
            conv.partition = partition
        return conv

    async def _settle(self, conv: Conversation, owes: bool) -> None:
        """Checkpoint the conversation a record changed; start the run it owes.
        In a batch, both wait for its end (:meth:`stored`)."""
        if not self.batched:
            await self.save(conv)
            if owes:
                self.start(conv.job_key)
            return
        # One record per job per batch (on_record stores a job's earlier change
        # first): the record being taken is the one that changed it.
        assert self._taking is not None  # set by on_record, the only way here
        self.unsaved[conv.job_key] = (conv, self._taking)
        if owes:
            self.owed[conv.job_key] = self._taking.context

    async def _take_message(self, record: MessageRecord, partition: int | None) -> None:
        """A person's message: an answer to a flow's open question, else a turn
        of the conversation."""
        if record.direction != "in":
            return  # what an agent said: written by us, delivered by its channel
        conv = self._conversation(record.job_key, partition)
        if record.message_id in conv.received:
            return  # re-delivered
        taken = self._answer(conv, record)
        if taken is None:  # a conversational flow's turn (docs/flows.md, "Conversational flows")
            taken = take_turn(conv, record, self.flows)
        await self._settle(conv, conv.receive(record) if taken is None else taken)

    async def _take_prompt(
        self, record: SchedulePromptTask | ScheduleCommandTask, partition: int | None
    ) -> None:
        """A schedule's run (docs/agents.md, "Scheduled prompts and heartbeats";
        docs/schedules.md, "Command jobs")."""
        await self.prompts.take(record, partition)

    async def _take_opened(self, record: TaskOpenedRecord, partition: int | None) -> None:
        """A task opened: its flow's run when its milestone names one, else the
        conversation agent's."""
        conv = self._conversation(record.job_key, partition)
        flow = self.flows.of(record.playbook_key, record.milestone)
        if flow:
            known = await self.memory.channel(record.subject, record.contacts)  # docs/flows.md
            inputs = self.flows.inputs(
                flow, record.subject, conv.turns, conv.remembered.get(flow), known
            )
            owes = conv.open_flow(record, flow, inputs)
            if owes and self.flows.conversational(flow):  # a run per message
                owes = first_turn(conv, conv.flows[record.milestone], record.at)
        else:
            owes = conv.apply(record)
        await self._settle(conv, owes)

    async def _take_closed(self, record: TaskClosedRecord, partition: int | None) -> None:
        """A task closed: its flow's run stops; else the conversation drops it."""
        conv = self._conversation(record.job_key, partition)
        if record.milestone not in conv.flows:
            await self._settle(conv, conv.apply(record))
            return
        track = conv.flows[record.milestone]
        if record.task_id not in conv.closed:
            conv.closed.append(record.task_id)
        conv.frontier = [m for m in conv.frontier if m != record.milestone]
        await self.flow_driver().stop(conv, track)
        await self._settle(conv, False)

    def _answer(self, conv: Conversation, record: MessageRecord) -> bool | None:
        """A person's message that answers a flow's open question
        (:func:`agents.conversation.take_answer`)."""
        return take_answer(conv, record, self.flows)


#: The method that takes each kind of record: a person's or agent's message,
#: and the four kinds of ``tasks`` records (topics' ``TaskRecord``).
_TAKERS: dict[type[BaseModel], Callable[[Intake, Any, int | None], Awaitable[None]]] = {
    MessageRecord: Intake._take_message,
    SchedulePromptTask: Intake._take_prompt,
    ScheduleCommandTask: Intake._take_prompt,
    TaskOpenedRecord: Intake._take_opened,
    TaskClosedRecord: Intake._take_closed,
}
