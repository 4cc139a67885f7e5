"""``lemongraph subject show ID [--as-of T] [--json]``: what is remembered of a
subject (docs/memory.md, "Reading it").

Like ``schedule show``, it talks to Kafka directly (LEMONGRAPH_KAFKA_URL), not to
the gateway: it reads the compacted ``memory`` topic from its beginning and takes
the subject's newest record (a tombstone: erased). Without ``--as-of`` the
current facts; with it the versions in force at that instant. One line per
fact: its name and value, its source, since when, the event that proved it and
its job (``--json``: the gateway's ``GET /v1/subjects/{id}/profile`` body).

Exit codes: 0 shown; 1 no profile (never remembered, or erased) or a broker that
cannot be reached; 2 a usage error (a bad option, an ``--as-of`` that is not an
ISO-8601 instant with an offset).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click
import orjson

from compiler import from_iso
from stream.gateway.readmodels.memory import current_facts, facts_as_of
from stream.runtime.command import env_settings, require_kafka
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode
from stream.runtime.kafka import read_topic
from stream.runtime.kafka import run as run_async
from topics import SubjectProfile, Topics

__all__ = ["fact_line", "subject"]


@click.group()
def subject() -> None:
    """What is remembered of a subject (docs/memory.md)."""


def _profile(settings: Settings, key: str) -> SubjectProfile | None:
    """The subject's newest record on ``memory``; None for none or a tombstone."""
    bootstrap = require_kafka(settings)
    name = Topics(settings.topic_prefix).memory
    wanted = key.encode()

    async def go() -> bytes | None:
        held: bytes | None = None
        async for r in read_topic(bootstrap, name, idle=0.3, security=settings.kafka_security):
            if r.key == wanted:
                held = r.value
        return held

    raw = run_async(go())
    return SubjectProfile.model_validate_json(raw) if raw is not None else None


def _instant(_ctx: click.Context, _param: click.Parameter, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return from_iso(text).astimezone(UTC)
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO-8601 instant with an offset (e.g. 2026-12-01T09:00:00Z)"
        ) from None


def fact_line(fact: dict[str, Any]) -> str:
    """``plan_chosen: pro  (world, since 2026-12-01T09:00:00Z, event e-17, job job-a)``."""
    said = [] if fact["value"] is None else [str(fact["value"])]
    if fact["properties"]:
        said.append(orjson.dumps(fact["properties"], option=orjson.OPT_SORT_KEYS).decode())
    what = f"{fact['name']}: {' '.join(said)}" if said else fact["name"]
    until = f" until {fact['valid_to']}" if fact.get("valid_to") else ""
    return (
        f"{what}  ({fact['source']}, since {fact['valid_from']}{until}, "
        f"event {fact['event_id']}, job {fact['job_key']})"
    )


@subject.command("show")
@click.argument("subject_id", metavar="ID")
@click.option(
    "--as-of", "as_of", callback=_instant, metavar="T",
    help="An ISO-8601 instant: the facts in force then (default: now).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="The profile as JSON.")
def show(subject_id: str, as_of: datetime | None, as_json: bool) -> None:
    """A subject's facts, one line each, with their source, date, event and job."""
    found = _profile(env_settings(), subject_id)
    if found is None:
        click.echo(f"error: no profile for subject {subject_id!r} (never remembered, or erased)",
                   err=True)  # fmt: skip
        sys.exit(ExitCode.FAILED)
    facts = current_facts(found) if as_of is None else facts_as_of(found, as_of)
    if as_json:
        body = {"subject": subject_id, "facts": facts}
        click.echo(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
        return
    when = "now" if as_of is None else f"as of {as_of.isoformat().replace('+00:00', 'Z')}"
    click.echo(f"{subject_id}: {len(facts)} facts {when}")
    for fact in facts:
        click.echo(f"  {fact_line(fact)}")
