"""The agents service's partitions of ``tasks`` (docs/agents.md, "The agents
service", "Scaling out").

When a partition of ``tasks`` is assigned, its changelog partition is read
from where this store last read it (another process may have owned it
meanwhile) before any of its records is taken, and the runs owed on it are
resumed: a conversation whose run was owed (``due``) when its partition came to
this process is run again, its recorded steps replayed, its tool calls taking
effect once (docs/agents.md, "Crash safety"). When one is revoked, its runs are
stopped and resumed by the new owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import orjson
from compiler import from_iso

from agents.schedule_runs import KIND as PROMPT_RUN
from agents.service.runs import Runs
from agents.service.state import log

__all__ = ["Partitions"]


class Partitions(Runs):
    """Assigning and revoking the partitions of ``tasks``."""

    async def assign(self, partitions: Iterable[int]) -> tuple[int, int]:
        """Partitions of ``tasks`` now ours: read each one's changelog partition
        from where this store last read it to its end (another process may have
        written it meanwhile), then resume the runs owed on it. Records of a
        partition wait until then. What the store holds of a changelog the
        broker no longer has (reset, recreated) is forgotten first, and read
        again. (records read, runs resumed)"""
        async with self.assigning:
            return await self._assign(set(partitions))

    async def check_broker(self) -> None:
        """Before a record is taken: a broker that is not the one the store was
        read from (restarted empty, replaced) is checked as at an assignment,
        and the partitions held are read again from it (stream/runtime/resets.py)."""
        if not self.partitions or not await self.changelog.moved():
            return
        async with self.assigning:
            mine = set(self.partitions)
            await self.revoke(mine)
            await self._assign(mine)

    async def _assign(self, mine: set[int]) -> tuple[int, int]:
        reset = await self.changelog.resets(mine)
        if reset:
            await self.revoke(reset)  # their runs stop; read again below
            gone = self.changelog.forget(reset)
            stale = [k for k, c in self.live.items() if c.partition in reset or c.partition is None]
            for key in stale:
                self.live.pop(key)
            log.warning("agents: forgot %d stored records of partitions %s; reading them "
                        "again from the broker", gone, sorted(reset))  # fmt: skip
        new = sorted(p for p in mine if p not in self.partitions)
        if not new:
            return 0, 0
        for partition in new:
            self.partitions[partition] = asyncio.Event()
        read = await self.changelog.read_back(new)
        for raw in read:
            self.live.pop(raw.decode(), None)  # what this process held may be older
        for partition in new:
            self.partitions[partition].set()
        return len(read), self._resume(set(new))

    def _resume(self, mine: set[int]) -> int:
        """Start every run owed on these partitions: of a conversation, whether
        just read back or already in the store (a run resumed once and cut short
        again before it wrote anything is owed still), or a prompt run; note
        when their open flow questions expire. The number of runs resumed."""
        resumed = 0
        for stored in self.db.values():
            data = orjson.loads(stored)
            if data.get("partition") not in mine:
                continue
            if data.get("kind") == PROMPT_RUN:
                resumed += self.prompts.resume(data)
                continue
            if data.get("flow_expires"):
                self.expiring[str(data["job_key"])] = from_iso(data["flow_expires"])
            if data.get("due") or data.get("flow_due"):
                self.start(str(data["job_key"]))
                resumed += 1
        return resumed

    async def revoke(self, partitions: Iterable[int]) -> int:
        """Partitions of ``tasks`` no longer ours: stop the runs on them (another
        process resumes them from the changelog) and forget what is held in
        memory. The number of runs stopped."""
        gone = set(partitions) & set(self.partitions)
        for partition in gone:
            del self.partitions[partition]
        if not gone:
            return 0
        keys = [k for k, c in self.live.items() if c.partition in gone or c.partition is None]
        stopping = [self.running.pop(k) for k in keys if k in self.running]
        for task in stopping:
            task.cancel()
        if stopping:
            await asyncio.gather(*stopping, return_exceptions=True)
        stopping += await self.prompts.stop(gone)
        if self.flush is not None:
            await self.flush()
        for key in keys:
            self.live.pop(key, None)
            self.expiring.pop(key, None)
        return sum(1 for t in stopping if t.cancelled())
