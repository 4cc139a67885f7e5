"""``lemongraph schedule ...``: add, list, show, pause, resume, remove, wake (one
or many), run now, abort a run, and read the runs of schedules, and ``next`` to
check an expression (README.md, "Commands"; docs/schedules.md).

Like ``start-job``, these commands talk to Kafka directly (LEMONGRAPH_KAFKA_URL),
not to the gateway: a write is a definition (or tombstone) on ``schedules``, a
``schedule.wake`` on the inbox, and an ``audit`` record (``by: cli``); a read
reads ``schedules`` and ``schedule-runs`` from the beginning. ``next`` is pure.

Exit codes: 0 done; 1 refused (an invalid definition or expression, an unknown
schedule, an id in use without ``--replace``, a broker that cannot be reached);
2 a usage error (a bad option or argument).
"""

from __future__ import annotations

import re
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import click
import orjson

import stream.gateway.schedule_ops as ops
from compiler import LemongraphError, ScheduleHealth, load_located
from stream.cli.checks import schedule_problems
from stream.gateway.readmodels.run_verdicts import decision_mark, judge, run_marks
from stream.runtime.broker import ensure_all_topics
from stream.runtime.command import env_settings, require_kafka
from stream.runtime.config import Settings
from stream.runtime.errors import ExitCode
from stream.runtime.kafka import producer, read_topic, topic_partitions
from stream.runtime.kafka import run as run_async
from stream.runtime.partitions import home_partition
from topics import Topics

__all__ = ["schedule"]

BY = "cli"
_DONE = {"create": "created", "update": "updated", "pause": "paused", "resume": "resumed"}


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(ExitCode.FAILED)


def _json(data: Any) -> str:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2).decode()


# -- Kafka --------------------------------------------------------------------------------


def _definitions(settings: Settings) -> dict[str, dict[str, Any]]:
    """The ``schedules`` topic as it stands: id → record (a tombstone deletes)."""
    bootstrap = require_kafka(settings)
    name = Topics(settings.topic_prefix).schedules

    async def go() -> dict[str, dict[str, Any]]:
        held: dict[str, dict[str, Any]] = {}
        async for r in read_topic(bootstrap, name, idle=0.3, security=settings.kafka_security):
            if r.key is None:
                continue
            sid = r.key.decode("utf-8", "replace")
            record = ops.decode(r.value)
            if record is None:
                held.pop(sid, None)
            elif record.get("type") == "schedule" and isinstance(record.get("spec"), dict):
                record["spec"] = {**record["spec"], "id": sid}
                held[sid] = record
        return held

    return dict(run_async(go()))


def _runs(settings: Settings, sid: str) -> list[dict[str, Any]]:
    """Schedule ``sid``'s runs from ``schedule-runs``, newest first; one whose
    input the core refused (on ``decisions``) reads ``refused``."""
    return _history(settings, sid)[0]


def _history(settings: Settings, sid: str) -> tuple[list[dict[str, Any]], ScheduleHealth]:
    """:func:`_runs`, and the schedule's health from the same records
    (docs/schedules.md, "Health")."""
    bootstrap = require_kafka(settings)
    topics = Topics(settings.topic_prefix)
    wanted = sid.encode()

    async def go() -> tuple[list[dict[str, Any]], ScheduleHealth]:
        records = []
        async for r in read_topic(
            bootstrap, topics.schedule_runs, idle=0.3, security=settings.kafka_security
        ):
            if r.key == wanted:
                record = ops.decode(r.value)
                if record is not None:
                    records.append(record)
        runs = ops.runs_of(records)
        marks = {mark for run in runs for mark in run_marks(run)}
        if not marks:
            return runs, ops.health_of(records, {})
        verdicts: dict[str, str | None] = {}
        jobs = {str(run["job_key"]).encode() for run in runs if run.get("job_key")}
        # Only the jobs' partitions: a job's decisions are on the partition of
        # that number of decisions as its home partition of the inbox.
        count = len(await topic_partitions(bootstrap, topics.inbox, settings.kafka_security))
        homes = {home_partition(job, count): 0 for job in jobs} if count else None
        async for r in read_topic(
            bootstrap, topics.decisions, idle=0.3, start=homes, security=settings.kafka_security
        ):
            found = decision_mark(ops.decode(r.value) or {}) if r.key in jobs else None
            if found is not None and found[0] in marks:
                verdicts.setdefault(*found)  # the first decision of an input counts
        return [judge(run, verdicts) for run in runs], ops.health_of(records, verdicts)

    found, health = run_async(go())
    return list(found), health


def _playbook_keys(settings: Settings) -> set[str]:
    """The keys of the playbooks registered (the ``playbooks`` topic)."""
    bootstrap = require_kafka(settings)
    name = Topics(settings.topic_prefix).playbooks

    async def go() -> set[str]:
        keys = set()
        async for r in read_topic(bootstrap, name, idle=0.3, security=settings.kafka_security):
            record = ops.decode(r.value)
            if record is not None and isinstance(record.get("key"), str):
                keys.add(record["key"])
        return keys

    return set(run_async(go()))


def _audited(settings: Settings, action: str, request_id: str) -> dict[str, dict[str, Any]]:
    """The ``audit`` records of ``action`` (``wake``, ``run``, ``abort``) with
    ``request_id`` (written by the CLI or the gateway with the command), by
    schedule id: one read of the topic, however many schedules are asked."""
    bootstrap = require_kafka(settings)
    name = Topics(settings.topic_prefix).audit

    async def go() -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        async for r in read_topic(bootstrap, name, idle=0.3, security=settings.kafka_security):
            record = ops.decode(r.value) if r.key is not None else None
            detail = record.get("detail") if record is not None else None
            if (
                record is not None
                and r.key is not None
                and record.get("action") == action
                and isinstance(detail, dict)
                and detail.get("request_id") == request_id
            ):
                found[r.key.decode("utf-8", "replace")] = record
        return found

    return dict(run_async(go()))


def _publish(settings: Settings, writes: list[ops.Write]) -> list[tuple[int, int]]:
    """Produce ``writes`` in order, each acknowledged; (partition, offset) each.
    The topics are created first when missing (a compacted ``schedules`` must
    not be created by a producer's default)."""
    bootstrap = require_kafka(settings)
    topics = Topics(settings.topic_prefix)

    async def go() -> list[tuple[int, int]]:
        await ensure_all_topics(settings)
        out = []
        async with producer(bootstrap, security=settings.kafka_security, acks="all") as client:
            for w in writes:
                meta = await client.send_and_wait(w.full_topic(topics), w.value, key=w.key.encode())
                out.append((meta.partition, meta.offset))
        return out

    return list(run_async(go()))


def _found(settings: Settings, sid: str) -> dict[str, Any]:
    record = _definitions(settings).get(sid)
    if record is None:
        _fail(f"no schedule {sid!r}")
    return record


# -- output -------------------------------------------------------------------------------


def _next_line(spec: dict[str, Any]) -> str:
    if spec.get("enabled", True) is False:
        return "paused"
    slots = ops.spec_slots(spec, datetime.now(UTC), 1)
    return slots[0].line() if slots else "no next slot"


def _when(spec: dict[str, Any]) -> str:
    """A definition's ``schedule``, or ``at <instant>`` for a one-shot."""
    return str(spec["schedule"]) if spec.get("schedule") else f"at {spec.get('at')}"


def _started(run: dict[str, Any]) -> str:
    """When a run started (or its slot, or its record: a missed run never started)."""
    return str(run.get("started_at") or run.get("slot") or run.get("at"))


def _millis(instant: object) -> str:
    """An instant as a run line prints it: milliseconds at most (a worker's
    record may carry microseconds: ``21:24:00.996000Z`` prints ``21:24:00.996Z``)."""
    text = str(instant or "")
    return re.sub(r"(T\d\d:\d\d:\d\d\.\d{3})\d+", r"\1", text)


def _changes(action: str, detail: dict[str, Any], spec: dict[str, Any]) -> str:
    """What a write did: ``created``, ``paused``, ``resumed``, or ``updated
    (name, timeout)``, ``and resumed`` / ``and paused`` when ``enabled`` changed
    too (--replace replaces the whole definition: ``enabled`` left out is true)."""
    if action != "update":
        return _DONE[action]
    changed = [str(n) for n in detail.get("changed", ())]
    said = f"updated ({', '.join(n for n in changed if n != 'enabled')})"
    if "enabled" in changed:
        said += " and resumed" if spec.get("enabled", True) is not False else " and paused"
    return said


def _run_line(run: dict[str, Any]) -> str:
    parts = [
        _millis(run.get("at")),
        f"{run.get('status', ''):<10}",
        f"{run.get('triggered_by', ''):<8}",
        str(run.get("run_id", "")),
    ]
    if run.get("slot"):
        parts.append(f"slot {_millis(run['slot'])}")
    if run.get("missed_count"):
        parts.append(f"({run['missed_count']} slots to {_millis(run.get('slot_last'))})")
    if run.get("job_key"):
        parts.append(f"job {run['job_key']}")
    if run.get("error"):
        parts.append(f"error: {run['error']}")
    if run.get("exit_code") is not None:  # a command run's (docs/schedules.md)
        parts.append(f"exit code {run['exit_code']}")
    if run.get("output"):
        parts.append(f"output: {str(run['output'])[:80]!r}")
    return "  ".join(parts)


# -- the commands -------------------------------------------------------------------------


@click.group("schedule")
def schedule() -> None:
    """Schedules: start jobs, send events or run agent prompts on a clock
    (docs/schedules.md). Writes and reads go through Kafka, as start-job's do;
    `next` needs no broker. Exit 0 done, 1 refused, 2 usage."""


@dataclass(frozen=True)
class _Item:
    """A definition read from a file: the value, the file's name, its line
    (None: not known) and a label (``schedules[1] (third)``)."""

    data: Any
    name: str
    line: int | None
    label: str
    path: tuple[str | int, ...]

    def where(self, located: Any, field: str | None = None) -> str:
        """``FILE:LINE: LABEL``: the field's line when known, else the item's
        (as ``lemongraph check`` names a schedules.yaml's definitions)."""
        line = self.line
        if field:
            found = located.position(self.path + tuple(field.split(".")))
            line = found.line if found is not None else line
        return (
            f"{self.name}:{line}: {self.label}"
            if line is not None
            else self.name + ": " + self.label
        )


def _read_definitions(source: str) -> tuple[list[_Item], Any]:
    """FILE's definitions (one, a list, or a schedules.yaml), each with its
    line, read by the loader ``lemongraph check`` uses (compiler.load_located):
    a YAML or JSON syntax error names the file and its line:column."""
    name = "<stdin>" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"{name}: cannot read: {exc}")
    try:
        located = load_located(text, name)
    except LemongraphError as exc:
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        at = f"{name}:{line}:{column}" if line is not None else name
        reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
        _fail(f"{at}: not YAML or JSON: {reason}")
    data = located.data
    if isinstance(data, dict) and isinstance(data.get("schedules"), list):
        base: tuple[str | int, ...] = ("schedules",)  # a schedules.yaml
        items, prefix = list(data["schedules"]), "schedules"
    elif isinstance(data, list):
        base, items, prefix = (), data, ""
    else:
        base, items, prefix = (), [data], None
    out = []
    for index, item in enumerate(items):
        path = (*base, index) if prefix is not None else ()
        ident = item.get("id") or item.get("name") if isinstance(item, dict) else None
        label = f"{prefix}[{index}]" if prefix is not None else "definition"
        if isinstance(ident, str):
            label += f" ({ident})"
        found = located.position(path)
        out.append(_Item(item, name, found.line if found else None, label, path))
    return out, located


@schedule.command("add")
@click.argument("source", metavar="FILE|-")
@click.option("--replace", is_flag=True, help="Update a schedule whose id is in use.")
def add(source: str, replace: bool) -> None:
    """Add the schedule(s) defined in FILE (YAML or JSON; `-` reads stdin): one
    definition, a list, or a schedules.yaml (`schedules: [...]`). All are
    validated before anything is written (a problem names FILE:LINE and the
    definition); an id in use is refused (exit 1) unless --replace, which
    replaces the whole definition (a field left out returns to its default,
    `enabled` included: a paused schedule resumes). Prints what each write did
    (created, updated (fields), paused, resumed) and its next slot; a
    `start_job` naming a playbook not registered is written with a warning."""
    settings = env_settings()
    specs: list[dict[str, Any]] = []
    problems = []
    items, located = _read_definitions(source)
    first: dict[str, _Item] = {}
    for item in items:
        try:
            spec = ops.normalise(item.data, item.where(located))
        except ops.Invalid as exc:
            problems.append(f"{item.where(located, exc.field)}: {exc.message}")
            continue
        specs.append(spec)
        sid = str(spec["id"])
        if sid in first:
            problems.append(
                f"{item.where(located, 'id')}: id {sid!r} is also used by {first[sid].label}"
            )
        first.setdefault(sid, item)
    catalog = settings.catalog_file  # a command's tool and args, when it is at hand
    where = [(first[str(s["id"])].where(located), s) for s in specs]
    problems += schedule_problems(where, [catalog] if catalog.is_file() else [])
    if problems:
        for problem in problems:
            click.echo(f"error: {problem}", err=True)
        sys.exit(ExitCode.FAILED)
    held = _definitions(settings)
    taken = [s["id"] for s in specs if s["id"] in held]
    if taken and not replace:
        _fail(f"id in use: {', '.join(taken)} (--replace updates them)")
    now = datetime.now(UTC)
    for spec in specs:
        before = held.get(str(spec["id"]))
        if before is None or before["spec"].get("at") != spec.get("at"):
            try:  # a one-shot's instant must be to come (docs/schedules.md)
                ops.refuse_past(spec, now)
            except ops.Invalid as exc:
                _fail(f"{spec['id']}: {exc.message}")
    writes: list[ops.Write] = []
    said: list[str] = []
    at = ops.now_iso()
    for spec in specs:
        sid = str(spec["id"])
        earlier = held.get(sid)
        if earlier is None:
            action, detail = "create", {"spec": spec}
        elif earlier["spec"] == spec:
            said.append(f"{sid}: unchanged; next {_next_line(spec)}")
            continue
        else:
            action, detail = ops.change_action(earlier["spec"], spec)
        writes += [ops.definition(spec, BY, at), ops.audit(action, sid, BY, detail, at)]
        said.append(f"{sid}: {_changes(action, detail, spec)}; next {_next_line(spec)}")
    if writes:
        _publish(settings, writes)
    for line in said:
        click.echo(line)
    if any((s.get("action") or {}).get("type") == "start_job" for s in specs):
        registered = _playbook_keys(settings)
        for spec in specs:
            for warning in ops.playbook_warnings(spec, registered):
                click.echo(f"warning: {spec['id']}: {warning}", err=True)


@schedule.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per schedule, a line each.")
def list_(as_json: bool) -> None:
    """The schedules, by id: enabled or paused, expression, timezone and next slot."""
    held = _definitions(env_settings())
    for sid in sorted(held):
        spec = held[sid]["spec"]
        if as_json:
            click.echo(orjson.dumps(spec).decode())
            continue
        state = "enabled" if spec.get("enabled", True) is not False else "paused"
        click.echo(
            f"{sid}  {state}  {_when(spec)!r}  {spec.get('timezone', 'UTC')}  "
            f"next {_next_line(spec)}"
        )
    if not as_json:
        click.echo(f"{len(held)} schedule(s)", err=True)


@schedule.command("show")
@click.argument("schedule_id", metavar="ID")
@click.option("--count", default=5, show_default=True, type=click.IntRange(1, 100))
def show(schedule_id: str, count: int) -> None:
    """A schedule's definition (as stored), its cron, its catch-up window in
    effect, its next slots and its last runs."""
    settings = env_settings()
    record = _found(settings, schedule_id)
    spec = record["spec"]
    click.echo(_json(spec))
    click.echo(f"updated {record.get('updated_at')} by {record.get('by')}")
    tz = spec.get("timezone") or "UTC"
    click.echo(f"cron: {ops.cron_of(spec)}  ({_when(spec)!r} in {tz})")
    click.echo(f"catch-up window: {ops.catchup_window(spec)}")
    slots = ops.spec_slots(spec, datetime.now(UTC), count)
    click.echo("next:" if slots else "next: none (paused)")
    for slot in slots:
        click.echo(f"  {slot.line()}")
    runs, health = _history(settings, schedule_id)
    click.echo(ops.health_line(health.to_json(ops.iso(slots[0].utc) if slots else None)))
    click.echo(f"runs: {len(runs)}" + (" (newest first)" if runs else ""))
    for run in runs[:5]:
        click.echo(f"  {_run_line(run)}")


def _set_enabled(schedule_id: str, enabled: bool) -> None:
    settings = env_settings()
    spec = _found(settings, schedule_id)["spec"]
    if (spec.get("enabled", True) is not False) == enabled:
        click.echo(f"{schedule_id}: already {'enabled' if enabled else 'paused'}")
        return
    new = ops.normalise({**spec, "enabled": enabled}, schedule_id)
    action, detail = ops.change_action(spec, new)
    at = ops.now_iso()
    _publish(
        settings,
        [ops.definition(new, BY, at), ops.audit(action, schedule_id, BY, detail, at)],
    )
    click.echo(f"{schedule_id}: {'resumed; next ' + _next_line(new) if enabled else 'paused'}")


@schedule.command("pause")
@click.argument("schedule_id", metavar="ID")
def pause(schedule_id: str) -> None:
    """Pause a schedule: nothing fires until it is resumed (audit `pause`)."""
    _set_enabled(schedule_id, False)


@schedule.command("resume")
@click.argument("schedule_id", metavar="ID")
def resume(schedule_id: str) -> None:
    """Resume a paused schedule from its next slot; the paused span is not
    caught up (audit `resume`)."""
    _set_enabled(schedule_id, True)


@schedule.command("remove")
@click.argument("schedule_id", metavar="ID")
def remove(schedule_id: str) -> None:
    """Delete a schedule: a tombstone on `schedules` (audit `delete`). Its runs
    stay on `schedule-runs`; an active run is recorded aborted."""
    settings = env_settings()
    _found(settings, schedule_id)
    _publish(settings, [ops.tombstone(schedule_id), ops.audit("delete", schedule_id, BY)])
    click.echo(f"{schedule_id}: removed")


def _context(context_json: str | None) -> dict[str, Any] | None:
    """``--context``: a JSON object, else a usage error."""
    if context_json is None:
        return None
    try:
        parsed = orjson.loads(context_json)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--context")
    return parsed


@dataclass(frozen=True)
class _Command:
    """A ``schedule.wake`` to send (docs/schedules.md, "Wake", "Run now",
    "Abort"): its control, request id, and what the run carries."""

    control: str
    request_id: str
    given: bool  # the request id was given (else made up: no duplicate to look for)
    context: dict[str, Any] | None = None
    skip_if_running: bool = False
    run_id: str | None = None  # an abort's run


def _send(settings: Settings, sids: list[str], command: _Command) -> None:
    """Send ``command`` to each of ``sids`` (each once per request id: one the
    ``audit`` topic already has is a ``duplicate``, sent nothing), with its
    ``audit`` record; a line each."""
    action = command.control
    earlier = _audited(settings, action, command.request_id) if command.given else {}
    rid = command.request_id
    writes: list[ops.Write] = []
    said: list[str] = []
    for sid in sids:
        if sid in earlier:
            record = earlier[sid]
            click.echo(
                f"{sid}: duplicate: already {_SENT[action]} with request id {rid} "
                f"(run {record['detail'].get('run_id')}, {record.get('at')} by "
                f"{record.get('by')}); nothing sent"
            )
            continue
        try:
            writes.append(
                ops.wake(
                    sid, rid, command.context, command.skip_if_running, (), action, command.run_id
                )
            )
        except ValueError as exc:
            _fail(f"not sent: {str(exc).splitlines()[0]}")
        if action == "abort":
            run_id = str(command.run_id)
            detail: dict[str, Any] = {"request_id": rid, "run_id": run_id}
        else:
            made = ops.manual_run_id if action == "run" else ops.wake_run_id
            run_id = made(sid, rid)
            detail = {
                "request_id": rid,
                "run_id": run_id,
                "skip_if_running": command.skip_if_running,
                "context": command.context,
            }
        writes.append(ops.audit(action, sid, BY, detail))
        said.append(f"{sid}: {_SENT[action]} (request {rid}, run {run_id}")
    where = _publish(settings, writes) if writes else []
    for line, (partition, offset) in zip(said, where[::2], strict=True):
        click.echo(f"{line}, inbox p{partition}@{offset})")


_SENT = {"wake": "woken", "run": "run now", "abort": "abort sent"}


def _matching(
    held: dict[str, dict[str, Any]], labels: dict[str, str], agent: str | None
) -> list[str]:
    """The enabled schedules whose ``meta`` has each of ``labels``, or the
    enabled prompt schedules of ``agent`` (docs/schedules.md, "Waking many")."""
    out = []
    for sid in sorted(held):
        spec = held[sid]["spec"]
        if spec.get("enabled", True) is False:
            continue
        meta, action = spec.get("meta") or {}, spec.get("action") or {}
        if labels:
            if all(meta.get(k) == v for k, v in labels.items()):
                out.append(sid)
        elif action.get("type") == "prompt" and action.get("agent") == agent:
            out.append(sid)
    return out


def _labels(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: write KEY=VALUE", param_hint="--label")
        out[key] = value
    return out


@schedule.command("wake")
@click.argument("schedule_ids", metavar="[ID]...", nargs=-1)
@click.option("--label", "labels", multiple=True, help="KEY=VALUE: the enabled schedules whose "
              "meta has it (repeat: each).")  # fmt: skip
@click.option("--agent", help="The enabled prompt schedules of this agent.")
@click.option("--context", "context_json", help="A JSON object the run carries.")
@click.option("--skip-if-running", is_flag=True, help="Record it skipped while a run is active.")
@click.option("--request-id", help="Names the request: the same one again is one wake.")
def wake_(
    schedule_ids: tuple[str, ...],
    labels: tuple[str, ...],
    agent: str | None,
    context_json: str | None,
    skip_if_running: bool,
    request_id: str | None,
) -> None:
    """Fire schedules now (a schedule.wake on the inbox each; audit `wake`):
    the IDs given, or those chosen by --label or --agent (one of the three).
    Prints each run id; `lemongraph schedule runs ID` shows how it went. A
    --request-id already used for a schedule (an `audit` wake record has it)
    sends it nothing and says `duplicate`."""
    context = _context(context_json)
    if sum(map(bool, (schedule_ids, labels, agent))) != 1:
        raise click.UsageError("give schedule IDs, --label or --agent (one of them)")
    wanted = _labels(labels)
    settings = env_settings()
    held = _definitions(settings)
    if schedule_ids:
        missing = [sid for sid in schedule_ids if sid not in held]
        if missing:
            _fail(f"no schedule {', '.join(repr(m) for m in missing)}")
        sids = list(dict.fromkeys(schedule_ids))
    else:
        sids = _matching(held, wanted, agent)
        if not sids:
            asked = ", ".join(labels) if labels else f"agent {agent}"
            _fail(f"no enabled schedule matches {asked}")
    rid = request_id or f"cli-{uuid.uuid4().hex}"
    _send(settings, sids, _Command("wake", rid, request_id is not None, context, skip_if_running))


@schedule.command("run")
@click.argument("schedule_id", metavar="ID")
@click.option("--context", "context_json", help="A JSON object the run carries.")
@click.option("--skip-if-running", is_flag=True, help="Record it skipped while a run is active.")
@click.option("--request-id", help="Names the request: the same one again is the same run.")
def run_(
    schedule_id: str, context_json: str | None, skip_if_running: bool, request_id: str | None
) -> None:
    """Run a schedule now, paused or not (a schedule.wake with control `run`;
    audit `run`): a run triggered by `manual`, not retried, that does not move
    the schedule's clock. Prints its run id (`mn-`, from the request id)."""
    context = _context(context_json)
    settings = env_settings()
    _found(settings, schedule_id)
    rid = request_id or f"cli-{uuid.uuid4().hex}"
    command = _Command("run", rid, request_id is not None, context, skip_if_running)
    _send(settings, [schedule_id], command)


@schedule.command("abort")
@click.argument("schedule_id", metavar="ID")
@click.argument("run_id", metavar="RUN")
@click.option("--request-id", help="Names the request (default: abort-RUN).")
def abort_(schedule_id: str, run_id: str, request_id: str | None) -> None:
    """Abort a prompt or command run still going (a schedule.wake with control
    `abort`; audit `abort`): the worker records it `aborted`, and a report
    that comes for it later changes nothing. Refused (exit 1) for a run that
    is not running."""
    settings = env_settings()
    _found(settings, schedule_id)
    run = next((r for r in _runs(settings, schedule_id) if r.get("run_id") == run_id), None)
    if run is None:
        _fail(f"no run {run_id!r} of schedule {schedule_id!r}")
    if run.get("status") not in ("pending", "running"):
        _fail(f"run {run_id!r} is not running: it ended {run.get('status')}")
    rid = request_id or f"abort-{run_id}"
    _send(settings, [schedule_id], _Command("abort", rid, True, run_id=run_id))


def _audit_records(settings: Settings) -> list[dict[str, Any]]:
    """Every record of the ``audit`` topic, as written (oldest first per partition)."""
    bootstrap = require_kafka(settings)
    name = Topics(settings.topic_prefix).audit

    async def go() -> list[dict[str, Any]]:
        out = []
        async for r in read_topic(bootstrap, name, idle=0.3, security=settings.kafka_security):
            record = ops.decode(r.value)
            if record is not None and record.get("type") == "audit":
                out.append(record)
        return out

    return list(run_async(go()))


@schedule.command("audit")
@click.argument("schedule_id", metavar="[ID]", required=False)
@click.option("--action", type=click.Choice(ops.AUDIT_ACTIONS), help="Only this action.")
@click.option("--since", "since_text", metavar="INSTANT", help="Only those at INSTANT or after.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 1_000_000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per record, a line each.")
def audit_(
    schedule_id: str | None, action: str | None, since_text: str | None, limit: int, as_json: bool
) -> None:
    """The operators' actions on schedules (the `audit` topic), newest first:
    create, update, pause, resume, delete, wake, run, abort; each with who did it,
    when, and its detail. ID: only that schedule's."""
    since = _instant(since_text, "--since") if since_text is not None else None
    target = f"schedule:{schedule_id}" if schedule_id is not None else None
    records = sorted(_audit_records(env_settings()), key=lambda r: str(r.get("at")))
    shown = 0
    for record in reversed(records):
        if shown == limit:
            break
        if target is not None and record.get("target") != target:
            continue
        if action is not None and record.get("action") != action:
            continue
        if since is not None and str(record.get("at")) < since.strftime("%Y-%m-%dT%H:%M:%S"):
            continue
        shown += 1
        if as_json:
            click.echo(orjson.dumps(record).decode())
            continue
        detail = orjson.dumps(record.get("detail") or {}).decode()
        click.echo(
            f"{record.get('at')}  {record.get('action', ''):<7}  {record.get('target')}  "
            f"by {record.get('by')}  {detail}"
        )
    if not as_json:
        click.echo(f"{shown} record(s)", err=True)


@schedule.command("runs")
@click.argument("schedule_id", metavar="ID")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--since", "since_text", metavar="INSTANT", help="Only runs started at INSTANT "
              "or after (or slotted, or recorded).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, a line each.")
def runs(schedule_id: str, limit: int, since_text: str | None, as_json: bool) -> None:
    """A schedule's runs from `schedule-runs`, newest first: status (completed,
    refused, failed, timeout, aborted, suppressed, missed, skipped, running), what
    triggered it, its slot, job, error and output. A removed schedule's runs
    are shown too."""
    settings = env_settings()
    found = _runs(settings, schedule_id)
    if not found and schedule_id not in _definitions(settings):
        _fail(f"no schedule {schedule_id!r} and no runs of one")
    if since_text is not None:
        since = _instant(since_text, "--since")
        found = [r for r in found if _instant(_started(r), "--since") >= since]
    for run in found[:limit]:
        click.echo(orjson.dumps(run).decode() if as_json else _run_line(run))
    if not as_json:
        click.echo(f"{min(limit, len(found))} of {len(found)} run(s)", err=True)


def _instant(text: str, hint: str = "--from") -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not an ISO 8601 instant (2026-03-08T07:00:00Z)", param_hint=hint
        ) from None
    if at.tzinfo is None:
        raise click.BadParameter(
            f"{text!r} has no offset: add Z or +HH:MM", param_hint=hint
        ) from None
    return at.astimezone(UTC)


@schedule.command("next")
@click.argument("expr", metavar='"EXPR"')
@click.option("--tz", default="UTC", show_default=True, help="An IANA time zone.")
@click.option("--from", "start", help="Slots strictly after this instant (default: now).")
@click.option("--count", default=5, show_default=True, type=click.IntRange(1, 1000))
def next_(expr: str, tz: str, start: str | None, count: int) -> None:
    """The next COUNT slots of EXPR (5-field cron or a shorthand) in TZ, one a
    line: the UTC instant, then the local time. No broker needed; an invalid
    expression or time zone exits 1 naming the field (and the position)."""
    after = _instant(start) if start is not None else datetime.now(UTC)
    try:
        slots = ops.next_slots(expr, tz, after, count)
    except ops.Invalid as exc:
        _fail(exc.message)
    for slot in slots:
        click.echo(slot.line())
