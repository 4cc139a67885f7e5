"""Topic names. The prefix is configurable (``LEMONGRAPH_TOPIC_PREFIX``)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TOPIC_NAMES", "Topics"]

#: topic → (what it carries, compacted?)
TOPIC_NAMES: dict[str, tuple[str, bool]] = {
    "inbox": ("job starts, events (by job key) and schedule wakes (by schedule id)", False),
    "ticks": ("clock ticks, one per partition, co-partitioned with the inbox", False),
    "tasks": (
        "task.opened / task.closed (by job key), schedule.prompt and schedule.command "
        "(by schedule id)",
        False,
    ),
    "decisions": ("one record per decision: the audit log, replayable", False),
    "engine-jobstate-changelog": (
        "the workers' table changelog: each job's state by job key (the gateway's job "
        "views are built from it), and the workers' own rows (keys starting with NUL)",
        True,
    ),
    "playbooks": ("the playbook registry, keyed KEY@vN (one key per version)", True),
    "deadletter": ("records that could not be decoded or were invalid, with the reason", False),
    "messages": ("the conversation: every message in and out, keyed by job key", False),
    "journal": ("every model call and tool call, with tokens and outcome, by job key", False),
    "conversations": ("the agents' conversation state (their changelog), by job key", True),
    "schedules": ("schedule definitions, keyed by schedule id; a tombstone deletes", True),
    "schedule-runs": ("every run of a schedule, and the agents' reports, by schedule id", False),
    "audit": ("operator actions on schedules, keyed by schedule id", False),
    "mail-log": ("the mail service's sent-log and received mail ids, shared by its group", True),
    "memory-facts": ("facts jobs remembered and subject erasures, keyed by subject", False),
    "memory": ("each subject's profile (docs/memory.md); a tombstone erases it", True),
}


@dataclass(frozen=True)
class Topics:
    """The full names of lemongraph's topics under one prefix."""

    prefix: str = "lemongraph."

    @property
    def inbox(self) -> str:
        """Job starts and events."""
        return f"{self.prefix}inbox"

    @property
    def ticks(self) -> str:
        """Clock ticks, co-partitioned with the inbox."""
        return f"{self.prefix}ticks"

    @property
    def tasks(self) -> str:
        """task.opened / task.closed."""
        return f"{self.prefix}tasks"

    @property
    def decisions(self) -> str:
        """The audit log."""
        return f"{self.prefix}decisions"

    @property
    def jobstate(self) -> str:
        """The workers' table changelog (compacted): each job's stored state
        (``topics.stored_job_state``), written only by the workers."""
        return f"{self.prefix}engine-jobstate-changelog"

    @property
    def playbooks(self) -> str:
        """Compacted playbook registry."""
        return f"{self.prefix}playbooks"

    @property
    def deadletter(self) -> str:
        """Undecodable or invalid records."""
        return f"{self.prefix}deadletter"

    @property
    def messages(self) -> str:
        """The conversation, message by message."""
        return f"{self.prefix}messages"

    @property
    def journal(self) -> str:
        """Every model call and tool call."""
        return f"{self.prefix}journal"

    @property
    def conversations(self) -> str:
        """The agents' conversation state (compacted: their changelog)."""
        return f"{self.prefix}conversations"

    @property
    def schedules(self) -> str:
        """Compacted schedule definitions."""
        return f"{self.prefix}schedules"

    @property
    def schedule_runs(self) -> str:
        """Every run of a schedule, and the agents' reports."""
        return f"{self.prefix}schedule-runs"

    @property
    def audit(self) -> str:
        """Operator actions on schedules."""
        return f"{self.prefix}audit"

    @property
    def mail_log(self) -> str:
        """The mail service's compacted sent-log (docs/agents.md, "Email")."""
        return f"{self.prefix}mail-log"

    @property
    def memory_facts(self) -> str:
        """Facts jobs remembered, and erasures, by subject (docs/memory.md)."""
        return f"{self.prefix}memory-facts"

    @property
    def memory(self) -> str:
        """Compacted subject profiles (docs/memory.md)."""
        return f"{self.prefix}memory"

    def all(self) -> dict[str, str]:
        """short name → full name, for every topic."""
        return {name: f"{self.prefix}{name}" for name in TOPIC_NAMES}

    def name(self, short: str) -> str:
        """The full name of ``short`` (``inbox``, ``tasks``...); a full name passes through."""
        if short in TOPIC_NAMES:
            return f"{self.prefix}{short}"
        if short.startswith(self.prefix) and short[len(self.prefix) :] in TOPIC_NAMES:
            return short
        known = ", ".join(TOPIC_NAMES)
        raise ValueError(f"unknown topic {short!r}: use one of {known}")
