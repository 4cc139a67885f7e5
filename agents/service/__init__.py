"""``lemongraph agents``: the service that turns tasks into conversations
(docs/agents.md, "The agents service").

A Faust app with its own consumer group reads ``tasks`` (agents/app.py) and
hands each record to :class:`AgentService`, which is composed of one class per
responsibility, each in its own module:

- :mod:`agents.service.state`: the conversations, their store and changelog,
  what is produced, and the clients runs use;
- :mod:`agents.service.runs`: starting and driving a job's runs, and ticking
  flow questions that expire;
- :mod:`agents.service.partitions`: partitions of ``tasks`` assigned (their
  changelog read back, their owed runs resumed) and revoked;
- :mod:`agents.service.intake`: each record of ``tasks`` or ``messages`` to the
  method that takes its kind.
"""

from __future__ import annotations

from agents.service.intake import Intake
from agents.service.partitions import Partitions
from agents.service.state import AgentStats, Where, data_path

__all__ = ["AgentService", "AgentStats", "Where", "data_path"]


class AgentService(Intake, Partitions):
    """The conversations, their store, and the runs in flight."""
