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
(:func:`stream.engine.worker.register_schedules`: what the topic does not hold as
it is, is published). One line says what was registered, or why not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiokafka.errors import KafkaError

from compiler import Playbook, PlaybookError, compile_playbook
from stream.engine.registry import Registry
from stream.engine.worker import register_schedules
from stream.runtime.config import Settings
from stream.runtime.errors import ShellError
from stream.runtime.files import FolderWatch, load_playbook_file, playbook_files, schedules_file
from stream.runtime.kafka import bootstrap_of, producer
from topics import PlaybookRecord, Topics, encode

__all__ = ["PlaybookReload", "Verdict", "judge"]


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
