"""Whom the agents write to: the job's contacts (``task.opened``'s ``contacts``:
dicts with ``email``, ``name`` or ``id``, or plain strings) and no one else
(docs/agents.md, "Email"). Someone who wrote on the job's channels but is not
one of them is not answered: the agent writes to the first contact instead, so
that a stranger who got hold of a reply address or a chat cannot turn the job's
mail towards themselves. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from topics.replies import normal_address

from agents.compose import Turn

__all__ = ["addressee", "approves", "first_contact", "is_contact", "named", "same_contact"]

#: A contact's fields that name it, in the order the agents write to them.
_NAMED_BY = ("email", "name", "id")


def _names(contact: Any) -> list[str]:
    if isinstance(contact, dict):
        return [str(contact[n]) for n in _NAMED_BY if isinstance(contact.get(n), str)]
    return [str(contact)] if contact is not None else []


def first_contact(contacts: Sequence[Any]) -> str | None:
    """What the first contact is written to: its email, else its name or id."""
    if not contacts:
        return None
    names = _names(contacts[0])
    return names[0] if names else None


def named(contacts: Iterable[Any], who: str | None) -> str | None:
    """The contact ``who`` (an address, a name or an id) names, as the contact
    spells it; None when it names none. Compared by
    :func:`~topics.replies.normal_address`: case, surrounding space and angle
    brackets aside, nothing else."""
    if not who or not who.strip():
        return None
    wanted = normal_address(who)
    for contact in contacts:
        for name in _names(contact):
            if normal_address(name) == wanted:
                return name
    return None


def is_contact(contacts: Iterable[Any], who: str | None) -> bool:
    """``who`` is one of ``contacts`` (:func:`named`)."""
    return named(contacts, who) is not None


def addressee(contacts: Sequence[Any], turns: Sequence[Turn]) -> str | None:
    """Whom the agent answers: the person who wrote last when they are one of
    the job's contacts (as the contact spells it), else the first contact."""
    for turn in reversed(turns):
        if turn.role == "person" and turn.name:
            found = named(contacts, turn.name)
            if found is not None:
                return found
            break  # a stranger wrote last: they are not answered
    return first_contact(contacts)


def same_contact(contacts: Iterable[Any], one: str | None, other: str | None) -> bool:
    """``one`` and ``other`` name the same person: the same address (as
    :func:`named` compares them), or two names of one of ``contacts`` (its email
    and its name, say). Never when either is missing."""
    if not one or not other or not one.strip() or not other.strip():
        return False
    if normal_address(one) == normal_address(other):
        return True
    wanted = {normal_address(one), normal_address(other)}
    return any(wanted <= {normal_address(n) for n in _names(c)} for c in contacts)


def approves(approvers: Sequence[str], who: str | None, contacts: Sequence[Any]) -> bool:
    """Whether ``who`` (a person writing on a channel) may answer an approval
    whose ``approvers`` are given (docs/flows.md, "Who approves"): an address
    named there, or any of the job's contacts when ``contacts`` is. ``operators``
    answer through the API, never on a channel."""
    named_ones = [a for a in approvers if a not in ("operators", "contacts")]
    if any(same_contact(contacts, who, a) for a in named_ones):
        return True
    return "contacts" in approvers and is_contact(contacts, who)
