"""Edit without restart: a running worker picks up a new playbook version, or a
changed ``schedules.yaml``, from its playbooks folder (docs/operations.md,
"Reloading").

A :class:`FolderWatch` polls the folder's files about once a second. A changed
playbook file is checked first (compiled, as at start); then:

* a (key, version) the registry does not know is published on the ``playbooks``
  topic (the gateway and every later start read it there) and added to the
  running worker's registry: the next job started on the key starts on it, and
  every job keeps the version it pinned;
* the same content as a version registered already changes nothing;
* other content under a version registered already is refused, with a message
  saying to bump the version, since a running job pinned to that version must
  keep deciding as it did. Under ``lemongraph dev`` only (``next_version``), it
  is registered as the key's next version instead, and the line says which and why.

A changed ``schedules.yaml`` is registered as at start
(:func:`register_schedules`: what the topic does not hold as
it is, is published). One line says what was registered, or why not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiokafka.errors import KafkaError
from pydantic import ValidationError

from compiler import Playbook, PlaybookError, compile_playbook, to_iso
from stream.engine.registry import Registry
from stream.runtime.config import Settings
from stream.runtime.errors import ShellError
from stream.runtime.files import (
    FolderWatch,
    load_playbook_file,
    load_schedules_file,
    playbook_files,
    schedules_file,
)
from stream.runtime.kafka import bootstrap_of, producer, read_topic
from stream.runtime.partitions import home_partition
from topics import AuditRecord, PlaybookRecord, ScheduleRecord, Topics, encode

__all__ = ["SCHEDULES_FILE_BY", "PlaybookReload", "Verdict", "judge", "register_schedules"]

log = logging.getLogger("lemongraph.worker")


@dataclass(frozen=True)
class Verdict:
    """What to do with a playbook file that changed: register ``playbook``
    (None: nothing), and the line that says so."""

    playbook: Playbook | None
    line: str


def judge(path: Path, playbook: Playbook, registry: Registry, *, next_version: bool) -> Verdict:
    """The verdict on ``playbook``, read from ``path``, against what ``registry``
    knows (no I/O)."""
    key, version = playbook.key, playbook.version
    known = registry.graph(key, version)
    if known is None:
        return Verdict(
            playbook,
            f"reload: registered {key} v{version} from {path}: new {key} jobs start on it, "
            "running ones keep their version",
        )
    body = playbook.to_json()
    if known.playbook.to_json() == body:
        return Verdict(None, "")  # saved again unchanged: nothing to say
    versions = [p.version for p in registry.playbooks() if p.key == key]
    for p in registry.playbooks():
        if p.key == key and p.version > version and _same_but_version(p, body):
            return Verdict(None, "")  # registered as that next version already
    if not next_version:
        return Verdict(
            None,
            f"reload: refused {path}: {key} v{version} is registered already with other "
            f"content, and running jobs keep deciding by it: bump its version "
            f"(to v{max(versions) + 1})",
        )
    bumped = max(versions) + 1
    spec = {**body, "version": bumped}
    return Verdict(
        compile_playbook(spec, f"{path} (as v{bumped})"),
        f"reload: registered {path} as {key} v{bumped}: v{version} is registered already with "
        f"other content, which running jobs keep; `lemongraph dev` registers a changed "
        f"version as the next one (a worker refuses it): set `version: {bumped}` in the file",
    )


def _same_but_version(registered: Playbook, body: dict[str, object]) -> bool:
    return {**registered.to_json(), "version": body.get("version")} == body


class PlaybookReload:
    """The worker's watch of its playbooks folder (:meth:`poll`, a Faust timer)."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        say: Callable[[str], None],
        *,
        next_version: bool = False,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.say = say
        self.next_version = next_version
        self.watch = FolderWatch(settings.playbooks_dir)
        self.running: asyncio.Future[None] | None = None

    async def poll(self) -> None:
        """Register what changed in the folder since the last poll, in a task of
        its own: a registration waits for the broker, and the timer must not
        overlap itself (Faust warns when it does)."""
        if self.running is not None and not self.running.done():
            return  # the files it did not see yet are seen at the next poll
        changed = self.watch.changed()
        if changed:
            self.running = asyncio.ensure_future(self.take(changed))

    async def take(self, changed: list[Path]) -> None:
        """Register the playbooks and the schedules among ``changed``. A broker
        that does not take the registration is said; the worker goes on with
        what it had, and the file is taken when it changes again."""
        folder = self.settings.playbooks_dir
        playbooks = set(playbook_files(folder))
        try:
            for path in changed:
                if path in playbooks:
                    await self.reload_playbook(path)
            if schedules_file(folder) in changed:
                await self.reload_schedules()
        except (KafkaError, ShellError, OSError) as exc:
            self.say(f"reload: not registered: {exc!r}; save the file again to retry")

    async def reload_playbook(self, path: Path) -> None:
        """Check ``path``, then register it, or say why not."""
        try:
            playbook = load_playbook_file(path)
        except PlaybookError as exc:
            first = str(exc.problems[0]) if exc.problems else str(exc).splitlines()[0]
            if not first.startswith(str(path)):
                first = f"{path}: {first}"
            self.say(f"reload: refused: {first}")
            return
        verdict = judge(path, playbook, self.registry, next_version=self.next_version)
        if verdict.playbook is not None:
            await self.publish(verdict.playbook)
            self.registry.add(verdict.playbook)
        if verdict.line:
            self.say(verdict.line)

    async def publish(self, playbook: Playbook) -> None:
        """Put ``playbook`` on the ``playbooks`` topic, as a worker's start does."""
        topics = Topics(self.settings.topic_prefix)
        record = PlaybookRecord(key=playbook.key, version=playbook.version, spec=playbook.to_json())
        async with producer(
            bootstrap_of(self.settings.kafka_url or ""), security=self.settings.kafka_security
        ) as client:
            await client.send_and_wait(topics.playbooks, encode(record), key=record.record_key)

    async def reload_schedules(self) -> None:
        """Register ``schedules.yaml`` again (what changed in it is published)."""
        problems = await register_schedules(self.settings, self.say)
        for problem in problems:
            self.say(f"reload: refused in schedules: {problem}")


#: Who an audit record says registered a schedule of the playbooks folder.
SCHEDULES_FILE_BY = "schedules.yaml"


async def register_schedules(
    settings: Settings, say: Callable[[str], None] = log.info
) -> list[str]:
    """Publish the definitions of ``schedules.yaml`` in the playbooks folder
    (docs/schedules.md, "schedules.yaml") that the ``schedules`` topic does not
    hold as they are, each with an ``audit`` record (``by: "schedules.yaml"``).
    Returns the problems of the file (its invalid definitions are left out)."""
    assert settings.kafka_url is not None
    path = schedules_file(settings.playbooks_dir)
    if path is None:
        return []
    found = load_schedules_file(path)
    bootstrap = bootstrap_of(settings.kafka_url)
    topics = Topics(settings.topic_prefix)
    current: dict[str, object] = {}
    #: id → who wrote its current record, and when
    written: dict[str, tuple[str, str]] = {}
    async for record in read_topic(
        bootstrap, topics.schedules, idle=0.5, security=settings.kafka_security
    ):
        if record.key is None:
            continue
        name = record.key.decode("utf-8", "replace")
        if record.value is None:
            # Removed: whoever wrote it last no longer holds it, and the file's
            # definition is published again (docs/schedules.md, "schedules.yaml").
            current.pop(name, None)
            written.pop(name, None)
            continue
        try:
            held = ScheduleRecord.model_validate_json(record.value)
            current[name] = held.spec
            written[name] = (held.by, held.updated_at)
        except ValidationError:
            current[name] = None  # unreadable: replaced by the file's
            written.pop(name, None)
    published: list[str] = []
    now = datetime.now(UTC)
    at = to_iso(now)
    async with producer(bootstrap, security=settings.kafka_security) as client:
        for schedule in found.schedules:
            spec = schedule.to_json()
            if current.get(schedule.id) == spec:
                continue
            if (
                schedule.at_ms is not None
                and schedule.id not in current
                and schedule.at_ms <= now.timestamp() * 1000
            ):
                # A one-shot whose instant passed: it ran and was removed, or it
                # never will (docs/schedules.md, "One-shot schedules").
                say(
                    f"schedules: one-shot {schedule.id!r} of {path}: its instant has passed, "
                    "so it is not registered (take it out of the file)"
                )
                continue
            by, when = written.get(schedule.id, (SCHEDULES_FILE_BY, ""))
            if by != SCHEDULES_FILE_BY:
                # An operator's change (API or CLI) wins over the file until the
                # schedule is removed (docs/schedules.md, "schedules.yaml").
                say(
                    f"schedules: {schedule.id!r} of {path} was changed by {by!r} at {when}; "
                    "the file's definition is not applied (remove the schedule through the "
                    "API or `lemongraph schedule remove` to have the file's back at the next start)"
                )
                continue
            action = "create" if schedule.id not in current else "update"
            key = schedule.id.encode()
            partition = home_partition(key, settings.partitions)
            definition = ScheduleRecord(spec=spec, updated_at=at, by=SCHEDULES_FILE_BY)
            audit = AuditRecord(
                action=action,
                target=f"schedule:{schedule.id}",
                by=SCHEDULES_FILE_BY,
                at=at,
                detail={"file": str(path), "spec": spec},
            )
            await client.send_and_wait(
                topics.schedules, encode(definition), key=key, partition=partition
            )
            await client.send_and_wait(topics.audit, encode(audit), key=key, partition=partition)
            published.append(schedule.id)
    say(
        f"schedules: {len(found.schedules)} in {path}; "
        + (f"{len(published)} published ({', '.join(published)})" if published else "none changed")
    )
    return found.problems
