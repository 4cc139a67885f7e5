"""What an agent is told of its job's subject (docs/memory.md, "Given to agents",
"Retrieval"): the subject's current facts, most relevant first, within a token
budget. Pure: the facts and the texts they are ranked against come in, lines
come out (agents/compose.py puts them in the request).

**Relevance** is BM25 (rank-bm25's ``BM25Plus``: its idf never goes negative,
as Okapi's does for a word in more than half of a small profile, which would
rank a match last), over each fact as words (its name split at ``_``, its value,
its properties' names and values) against the open tasks' milestones and
instructions and the person's latest turn. Equal scores (and a query that
matches nothing) go newest first, then by name: the order is deterministic.

**Tokens** are estimated as characters / 4, rounded up (the project has no
tokenizer; the model's own count is only known after the call).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from compiler import from_iso
from topics import GROUNDED_SOURCES, ProfileFact, ProfileNote

__all__ = [
    "EARLIER",
    "MEMORY_TOKENS",
    "VALUE_CHARS",
    "earlier_lines",
    "estimate_tokens",
    "known_lines",
    "ranked",
    "words",
]

#: The section's budget by default (``LEMONGRAPH_MEMORY_TOKENS``).
MEMORY_TOKENS = 400
#: A fact's value and properties as shown, at most (a long one ends with "…").
VALUE_CHARS = 160

_WORD = re.compile(r"[0-9a-z]+")
#: How a job's own rolling summary is introduced (docs/memory.md, "Summaries are
#: claims"): a model's words, said to be so.
EARLIER = "Earlier in this conversation (our own summary, not verified; turns {}-{}):"


def estimate_tokens(text: str) -> int:
    """Characters / 4, rounded up."""
    return math.ceil(len(text) / 4)


def words(text: str) -> list[str]:
    """Lower-case letters and digits runs (``plan_chosen`` is ``plan``, ``chosen``)."""
    return _WORD.findall(text.lower())


def _document(fact: ProfileFact) -> list[str]:
    shown = [fact.name, str(fact.value) if fact.value is not None else ""]
    shown += [f"{k} {v}" for k, v in sorted(fact.properties.items())]
    return words(" ".join(shown))


def ranked(facts: Sequence[ProfileFact], query: Iterable[str]) -> list[ProfileFact]:
    """``facts`` most relevant to the ``query`` texts first (see the module's
    docstring); only the grounded ones (a model's words never enter)."""
    kept = [f for f in facts if f.source in GROUNDED_SOURCES]
    if not kept:
        return []
    asked = sorted({w for text in query for w in words(text)})
    documents = [_document(f) for f in kept]
    scores: list[float] = [0.0] * len(kept)
    if asked and any(documents):
        # Imported here: rank-bm25 brings numpy, about 0.1 s of CPU that a
        # process which never recalls a fact (a worker of the agents service
        # without memory, the gateway) need not spend at start.
        from rank_bm25 import BM25Plus

        index = BM25Plus([d or ["_"] for d in documents])
        known = [w for w in asked if w in index.idf]  # the others score every fact alike
        if known:
            scores = [float(s) for s in index.get_scores(known)]
    since = [-from_iso(f.valid_from).timestamp() for f in kept]  # newest first
    order = sorted(range(len(kept)), key=lambda i: (-round(scores[i], 9), since[i], kept[i].name))
    return [kept[i] for i in order]


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def fact_line(fact: ProfileFact) -> str:
    """``- plan_chosen: pro (world, 2026-12-01, event e-17, job job-a)``."""
    said = []
    if fact.value is not None:
        said.append(_shown(fact.value))
    if fact.properties:
        said.append(_shown(dict(sorted(fact.properties.items()))))
    what = f"{fact.name}: {' '.join(said)}" if said else fact.name
    day = fact.valid_from[:10]
    return f"- {what} ({fact.source}, {day}, event {fact.event_id}, job {fact.job_key})"


def known_lines(
    subject: str, facts: Sequence[ProfileFact], query: Iterable[str], budget: int
) -> list[str]:
    """The section: ``What we know about <subject>:`` and one line per current
    fact, most relevant first, while the whole stays within ``budget`` tokens
    (a line saying how many more there are included); [] when no fact fits."""
    current = [f for f in facts if f.valid_to is None]
    order = ranked(current, query)
    head = f"What we know about {subject}:"
    lines = [head]
    used = estimate_tokens(head)
    for shown, fact in enumerate(order):
        line = fact_line(fact)
        rest = len(order) - shown - 1
        more = f"({rest} more facts not shown.)" if rest else ""
        cost = estimate_tokens(line) + 1  # the newline
        if used + cost + (estimate_tokens(more) + 1 if more else 0) > budget:
            missing = len(order) - shown
            if shown == 0:
                return []
            lines.append(f"({missing} more facts not shown.)")
            return lines
        lines.append(line)
        used += cost
    return lines if len(lines) > 1 else []


def earlier_lines(note: ProfileNote | None) -> list[str]:
    """The section of a job's own summary of its turns no longer shown (none
    without one): a separate section, labelled as our own unverified words,
    never among the facts."""
    if note is None or note.source != "agent" or not note.text.strip():
        return []
    return [EARLIER.format(note.turn_from, note.turn_to), note.text.strip()]
