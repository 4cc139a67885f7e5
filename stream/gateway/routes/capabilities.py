"""What each token source may do: the one table every write route reads
(docs/api.md, "Sources and what they may do").

A token's source is a capability, not a label. ``world`` is the outside world
(an operator, the customer-facing site's backend): it starts jobs, sends events,
writes a person's messages and answers questions, and answers approvals when
the token also holds the ``approver`` role. ``agent`` and ``tool`` write only
events stamped with their own source: they never start a job, write a person's
message or answer a question or an approval, because each of those is evidence
from the world. A route that a source may not use answers 403
``source_not_allowed`` and writes nothing; nothing is ever restamped.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, TypeAlias

from stream.gateway.errors import ApiError
from stream.gateway.tokens import Principal
from topics import Source

__all__ = ["ALLOWED", "WHAT", "Capability", "require"]

Capability: TypeAlias = Literal[
    "start_job",
    "send_event",
    "write_message",
    "answer_question",
    "answer_approval",
    "write_schedules",
    "read_profile",
    "erase_subject",
]

#: The sources that may use each capability. ``answer_approval`` also needs the
#: ``approver`` role (checked by :func:`require`).
ALLOWED: Mapping[Capability, frozenset[Source]] = MappingProxyType(
    {
        "start_job": frozenset({"world"}),
        # Stamped with the token's own source: an agent's event never counts
        # as evidence (docs/conditions.md), a tool's is a tool's.
        "send_event": frozenset({"world", "tool", "agent"}),
        "write_message": frozenset({"world"}),
        "answer_question": frozenset({"world"}),
        "answer_approval": frozenset({"world"}),
        "write_schedules": frozenset({"world"}),
        # What the world and verified tools said about a person: read by those
        # who vouch for it; an agent is given its subject's current facts by the
        # agents service, bounded (docs/memory.md, "Given to agents").
        "read_profile": frozenset({"world", "tool"}),
        # An operator's act: never an agent's or a tool's (docs/memory.md, "Erasing").
        "erase_subject": frozenset({"world"}),
    }
)

#: What each capability is, in the words of a refusal.
WHAT: Mapping[Capability, str] = MappingProxyType(
    {
        "start_job": "jobs are started",
        "send_event": "events are sent",
        "write_message": "a person's messages are written",
        "answer_question": "questions are answered",
        "answer_approval": "approvals are answered",
        "write_schedules": "schedules are written",
        "read_profile": "a subject's profile and jobs are read",
        "erase_subject": "a subject is erased",
    }
)


def require(principal: Principal, capability: Capability) -> None:
    """Nothing when ``principal`` may use ``capability``; else :class:`ApiError`
    403: ``source_not_allowed`` (the token's source may not), or
    ``not_an_approver`` (an approval, and the token lacks the approver role)."""
    allowed = ALLOWED[capability]
    if principal.source not in allowed:
        sources = " or ".join(sorted(allowed))
        raise ApiError(
            403,
            "source_not_allowed",
            f"{WHAT[capability]} with a {sources} token; this token's source is "
            f"{principal.source} (docs/api.md, 'Sources and what they may do')",
        )
    if capability == "answer_approval" and not principal.approver:
        raise ApiError(
            403,
            "not_an_approver",
            f"token {principal.name!r} is not an approver's: approvals are answered by "
            "approvers only (`lemongraph token --approver`, or a contact the approval "
            "names; docs/api.md, 'Approvals')",
        )
