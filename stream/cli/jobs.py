"""``lemongraph start-job``, ``send-event`` and ``tail``: write to the inbox and
say what the worker decided (stream/cli/outcome.py), or read a topic
(docs/operations.md, "What `start-job` and `send-event` say")."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any

import click
import orjson
from pydantic import ValidationError

from stream.cli.outcome import describe, send_and_wait, unread_action
from stream.runtime.command import env_settings, require_kafka, say
from stream.runtime.config import Settings
from stream.runtime.kafka import ConsumedRecord, read_topic, run
from topics import (
    SOURCES,
    DeadLetter,
    InboxEvent,
    JobStart,
    LimitError,
    PlaybookRecord,
    RecordError,
    Topics,
    decode_inbox,
    encode,
    plain_json,
    stored_job_state,
)

__all__ = ["send_event", "start_job", "tail"]


def _parse_value(raw: str) -> object:
    """A command-line value: JSON when it parses (3, 2.5, true, "x"), else the text."""
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _send_inbox(
    settings: Settings, key: str, message: JobStart | InboxEvent, wait: bool, timeout: float
) -> None:
    """Send ``message`` to the inbox; unless ``wait`` is off, wait for its decision
    and say what it was (stream/cli/outcome.py). Exit 0 applied or duplicate, 1
    refused, 3 when no decision came within ``timeout`` seconds."""
    try:
        # Refused here for what the worker would refuse (size, nesting, 64-bit
        # integers): the same limits and decoder, before anything is sent.
        for name, item in message.dump().items():
            plain_json(item, name)
        decode_inbox(encode(message), key.encode())
    except LimitError as exc:
        raise click.ClickException(f"not sent: {exc}") from None
    except RecordError as exc:
        raise click.ClickException(f"not sent: {exc.reason}") from None
    bootstrap = require_kafka(settings)
    topics = Topics(settings.topic_prefix)
    sent = run(
        send_and_wait(
            bootstrap,
            topics,
            f"{settings.topic_prefix}engine",  # the workers' group (stream/engine/app.py)
            key,
            encode(message),
            timeout if wait else None,
            idempotent=bool(getattr(message, "idempotency_key", None)),
            security=settings.kafka_security,
        )
    )
    dumped = message.dump()
    for line in describe(sent, dumped, timeout):
        say(line)
    action = dumped.get("action")
    if isinstance(action, str) and sent.kind in ("sent", "applied"):
        decision = sent.decision or {}
        warning = unread_action(
            action,
            decision.get("playbook_key"),
            decision.get("playbook_version"),
            settings.playbooks_dir,
            lambda pkey, version: run(_registered_spec(bootstrap, topics, pkey, version)),
        )
        if warning is not None:
            click.echo(warning, err=True)
    if sent.exit_code:
        sys.exit(sent.exit_code)


async def _registered_spec(
    bootstrap: str, topics: Topics, key: str, version: int
) -> dict[str, Any] | None:
    """Playbook ``key`` version ``version`` as a worker registered it (playbooks topic)."""
    found: dict[str, Any] | None = None
    async for r in read_topic(bootstrap, topics.playbooks, idle=0.3):
        if r.value is None:
            continue
        record = PlaybookRecord.model_validate_json(r.value)
        if record.key == key and record.version == version:
            found = dict(record.spec)
    return found


def _wait_options(command: Callable[..., None]) -> Callable[..., None]:
    command = click.option(
        "--no-wait",
        is_flag=True,
        help="Only send: print where the record went, not what the worker decided.",
    )(command)
    return click.option(
        "--timeout",
        default=10.0,
        show_default=True,
        type=click.FloatRange(min=0, min_open=True),
        help="Seconds to wait for the decision (exit 3 when none came).",
    )(command)


@click.command("start-job")
@click.argument("key")
@click.argument("playbook")
@click.option("--subject", default="{}", help="The job's subject, as a JSON object.")
@click.option("--contact", "contacts", multiple=True, help="A contact (JSON or text); repeatable.")
@_wait_options
def start_job(
    key: str, playbook: str, subject: str, contacts: tuple[str, ...], timeout: float, no_wait: bool
) -> None:
    """Start job KEY on PLAYBOOK (a job.start record on the inbox), wait for its
    decision and say what it was: exit 0 applied, 1 refused, 3 no decision in
    time (--no-wait: only send)."""
    parsed = _parse_value(subject)
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--subject")
    try:
        message = JobStart(
            key=key,
            playbook_key=playbook,
            subject=parsed,
            contacts=[_parse_value(c) for c in contacts],
        )
    except ValidationError as exc:
        raise click.ClickException(str(exc)) from None
    _send_inbox(env_settings(), key, message, not no_wait, timeout)


@click.command("send-event")
@click.argument("key")
@click.argument("action")
@click.option("--value", help="The event's value (JSON or text).")
@click.option("--prop", "props", multiple=True, metavar="K=V", help="A property; repeatable.")
@click.option("--idempotency-key", help="Retries with the same key apply once.")
@click.option(
    "--source",
    type=click.Choice(list(SOURCES)),
    default="world",
    show_default=True,
    help="Who vouches for it; agent events never count.",
)
@_wait_options
def send_event(
    key: str,
    action: str,
    value: str | None,
    props: tuple[str, ...],
    idempotency_key: str | None,
    source: str,
    timeout: float,
    no_wait: bool,
) -> None:
    """Send event ACTION to job KEY (an event record on the inbox), wait for its
    decision and say what it was: exit 0 applied or duplicate, 1 refused, 3 no
    decision in time (--no-wait: only send). Warns when no condition of the
    job's playbook reads ACTION."""
    properties: dict[str, object] = {}
    for prop in props:
        name, sep, raw = prop.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{prop!r} is not K=V", param_hint="--prop")
        properties[name] = _parse_value(raw)
    try:
        message = InboxEvent(
            key=key,
            action=action,
            value=_parse_value(value) if value is not None else None,
            properties=properties,
            idempotency_key=idempotency_key,
            source=source,
        )
    except ValidationError as exc:
        raise click.ClickException(str(exc)) from None
    _send_inbox(env_settings(), key, message, not no_wait, timeout)


@click.command()
@click.argument("topic")
@click.option(
    "--follow/--no-follow", default=True, show_default=True, help="Keep waiting for new records."
)
def tail(topic: str, follow: bool) -> None:
    """Print the records of TOPIC (inbox, tasks, decisions, playbooks, deadletter,
    ticks, engine-jobstate-changelog...; or a full name) as JSON lines, from the
    beginning. Of the job table's changelog, a job's row shows its state."""
    settings = env_settings()
    bootstrap = require_kafka(settings)
    try:
        name = Topics(settings.topic_prefix).name(topic)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TOPIC") from None

    deadletter = Topics(settings.topic_prefix).deadletter
    jobstate = Topics(settings.topic_prefix).jobstate

    async def go() -> None:
        async for r in read_topic(bootstrap, name, follow=follow):
            if r.topic == deadletter:
                click.echo(orjson.dumps(_dead_letter_line(r)).decode())
                continue
            value: object = None
            state = stored_job_state(r.key, r.value) if r.topic == jobstate else None
            if state is not None:  # docs/kafka.md, "The job table's changelog"
                value = orjson.loads(state)
            elif r.value is not None:
                try:
                    value = orjson.loads(r.value)
                except orjson.JSONDecodeError:
                    value = r.value.decode("utf-8", "replace")
            line = {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "timestamp": r.timestamp_ms,
                "key": r.key.decode("utf-8", "replace") if r.key is not None else None,
                "value": value,
            }
            click.echo(orjson.dumps(line).decode())

    with contextlib.suppress(KeyboardInterrupt):
        run(go())


def _dead_letter_line(r: ConsumedRecord) -> dict[str, object]:
    """A dead letter as a JSON line: where it was read, and its headers, key and
    value (text, or base64 when not UTF-8) as ``DeadLetter.describe`` gives them."""
    line: dict[str, object] = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp_ms,
    }
    try:
        line["value"] = DeadLetter.from_headers(r.headers).describe(r.key, r.value)
    except ValueError as exc:
        line["value"] = {"error": f"not a dead letter of this version: {exc}".splitlines()[0]}
    return line
