"""The ``topics`` package: the inbox shapes producers may send, topic names,
the codec, and the public names of ``topics`` and ``compiler`` (docs/kafka.md)."""

from __future__ import annotations

import types
from typing import Any

import orjson
import pytest
from pydantic import TypeAdapter

import compiler
import topics
from topics import (
    MAX_DEPTH,
    MAX_RECORD_BYTES,
    SCHEMA,
    TOPIC_NAMES,
    DeadLetter,
    DecisionRecord,
    InboxEvent,
    JobSnapshot,
    JobStart,
    MilestoneSnapshot,
    PlaybookRecord,
    RecordError,
    RecordOrigin,
    TaskClosedRecord,
    TaskOpenedRecord,
    TaskRecord,
    TickRecord,
    Topics,
    decode_inbox,
    encode,
)

# The two inbox shapes pinned by the issue, byte for byte as written there.
START_JSON = (
    b'{"type": "job.start", "key": "job-1", "playbook_key": "onboarding", '
    b'"subject": {}, "contacts": []}'
)
EVENT_JSON = (
    b'{"type": "event", "key": "job-1", "action": "id_uploaded", "value": null, '
    b'"properties": {}, "idempotency_key": "evt-1", "source": "world"}'
)


def reason_of(raw: bytes | None, key: bytes | None = None) -> str:
    with pytest.raises(RecordError) as caught:
        decode_inbox(raw, key)
    assert str(caught.value) == caught.value.reason
    return caught.value.reason


def ev(**fields: Any) -> bytes:
    return orjson.dumps({"type": "event", "key": "job-1", "action": "paid", **fields})


# -- decode_inbox: what is accepted ---------------------------------------------------


def test_the_pinned_job_start_shape_decodes() -> None:
    message = decode_inbox(START_JSON)
    assert isinstance(message, JobStart)
    assert (message.type, message.key, message.playbook_key) == ("job.start", "job-1", "onboarding")
    assert message.subject == {}
    assert message.contacts == []
    assert message.schema_ == 1


def test_the_pinned_event_shape_decodes() -> None:
    message = decode_inbox(EVENT_JSON, b"job-1")
    assert isinstance(message, InboxEvent)
    assert (message.type, message.key, message.action) == ("event", "job-1", "id_uploaded")
    assert message.value is None
    assert message.properties == {}
    assert message.idempotency_key == "evt-1"
    assert message.source == "world"
    assert message.schema_ == 1


def test_optional_fields_default() -> None:
    start = decode_inbox(b'{"type": "job.start", "key": "j", "playbook_key": "p"}')
    assert isinstance(start, JobStart)
    assert (start.subject, start.contacts) == ({}, [])
    event = decode_inbox(b'{"type": "event", "key": "j", "action": "a"}')
    assert isinstance(event, InboxEvent)
    assert event.source == "world"
    assert (event.value, event.properties, event.idempotency_key) == (None, {}, None)


@pytest.mark.parametrize("source", ["world", "tool", "agent"])
def test_every_source_is_accepted(source: str) -> None:
    assert decode_inbox(ev(source=source)).source == source


@pytest.mark.parametrize("value", [None, "won", 3, -5, 99.5, True])
def test_scalar_values_are_accepted(value: object) -> None:
    message = decode_inbox(ev(value=value))
    assert message.value == value
    assert type(message.value) is type(value)


def test_schema_one_is_accepted_and_a_higher_schema_is_refused() -> None:
    assert decode_inbox(ev(schema=1)).schema_ == 1
    assert SCHEMA == 1
    reason = reason_of(ev(schema=2))
    assert "schema" in reason
    assert "schema" in reason_of(ev(schema=0))
    start = orjson.dumps({"type": "job.start", "key": "j", "playbook_key": "p", "schema": 9})
    assert "schema" in reason_of(start)


# -- decode_inbox: what is refused, and why --------------------------------------------


def test_an_unknown_field_is_named() -> None:
    reason = reason_of(ev(colour="red"))
    assert "colour" in reason
    assert "unknown field" in reason
    start = orjson.dumps({"type": "job.start", "key": "j", "playbook_key": "p", "extra": 1})
    assert "extra" in reason_of(start)


def test_a_missing_type_is_named() -> None:
    reason = reason_of(b'{"key": "job-1", "action": "paid"}')
    assert reason.startswith("type")
    assert "missing" in reason


def test_an_unknown_type_is_refused() -> None:
    reason = reason_of(b'{"type": "launch", "key": "job-1"}')
    assert "launch" in reason
    assert "type" in reason


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"action": 5}, "action"),
        ({"key": 5}, "key"),
        ({"key": ""}, "key"),
        ({"key": "a\nb"}, "key"),
        ({"action": ""}, "action"),
        ({"value": {"nested": 1}}, "value"),
        ({"value": [1, 2]}, "value"),
        ({"properties": []}, "properties"),
        ({"idempotency_key": 7}, "idempotency_key"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"source": "boss"}, "source"),
    ],
)
def test_a_wrong_type_is_refused_naming_the_field(fields: dict[str, Any], named: str) -> None:
    assert named in reason_of(ev(**fields))


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"playbook_key": 1}, "playbook_key"),
        ({"subject": []}, "subject"),
        ({"contacts": {}}, "contacts"),
    ],
)
def test_a_wrong_type_in_a_start_is_named(fields: dict[str, Any], named: str) -> None:
    raw = orjson.dumps({"type": "job.start", "key": "j", "playbook_key": "p", **fields})
    assert named in reason_of(raw)


def test_a_missing_required_field_is_named() -> None:
    assert "action" in reason_of(b'{"type": "event", "key": "job-1"}')
    assert "playbook_key" in reason_of(b'{"type": "job.start", "key": "job-1"}')
    assert "key" in reason_of(b'{"type": "event", "action": "paid"}')


@pytest.mark.parametrize("raw", [b"[1, 2]", b'"text"', b"42", b"null", b"true"])
def test_json_that_is_not_an_object_is_refused(raw: bytes) -> None:
    assert "expected a JSON object" in reason_of(raw)


@pytest.mark.parametrize("raw", [b"\xff\xfe{}", b"not json", b"{", b""])
def test_bytes_that_are_not_json_are_refused(raw: bytes) -> None:
    assert reason_of(raw).startswith("not JSON")


def test_a_record_without_a_value_is_refused() -> None:
    assert reason_of(None) == "empty record (no value)"


def test_the_record_key_must_be_the_job_key() -> None:
    assert decode_inbox(EVENT_JSON, b"job-1").key == "job-1"
    assert reason_of(EVENT_JSON, b"job-2") == "record key 'job-2' is not the job key 'job-1'"
    assert "job-1" in reason_of(START_JSON, b"\xffjob-1")


def test_record_keys_that_are_not_utf8_are_not_the_job_key() -> None:
    """The partition is chosen from the key's bytes: two record keys that are not
    UTF-8 decode alike (to U+FFFD) and, compared as text, would be one job key on
    two partitions. Compared as bytes, only the key's own UTF-8 is it."""
    message = orjson.dumps({"type": "event", "key": "\ufffd", "action": "a"})
    assert decode_inbox(message, "\ufffd".encode()).key == "\ufffd"
    for raw in (b"\xff", b"\xfe", b"\xed\xa0\x80"):
        assert "is not the job key" in reason_of(message, raw)


# -- the job key rule (topics/_keys.py) ---------------------------------------------------


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("a/b", "key has '/' at position 1: a key is one URL path segment"),
        ("job\x00", "key has U+0000 at position 3: a control character is not allowed"),
        ("job\n1", "key has U+000A at position 3: a control character is not allowed"),
        ("x\x7f", "key has U+007F at position 1: a control character is not allowed"),
        ("x\x85", "key has U+0085 at position 1: a control character is not allowed"),
        (
            "pay\u202egpj",
            "key has U+202E (RIGHT-TO-LEFT OVERRIDE) at position 3: a format character "
            "(bidi control, zero-width or similar) is not allowed",
        ),
        ("job\u200b1", "key has U+200B (ZERO WIDTH SPACE) at position 3: a format character"),
        ("\ufeffjob", "key has U+FEFF (ZERO WIDTH NO-BREAK SPACE) at position 0: a format"),
        ("job\u00a01", "key has U+00A0 (NO-BREAK SPACE) at position 3: a space other than"),
        ("a\u2028", "key has U+2028 (LINE SEPARATOR) at position 1: a line separator"),
        ("a\ue000", "key has U+E000 at position 1: a private-use character is not allowed"),
        ("a\udc00", "key has U+DC00 at position 1: a surrogate is not allowed"),
        (" job", "key starts or ends with a space"),
        ("job ", "key starts or ends with a space"),
        (".", "key '.' is not allowed (clients rewrite it in a URL path)"),
        ("..", "key '..' is not allowed (clients rewrite it in a URL path)"),
        ("", "key is empty"),
        ("k" * 201, "key is 201 characters long: at most 200"),
        ("key\ufe0f", "key has U+FE0F (VARIATION SELECTOR-16) at position 3: a character that"),
        ("key\u034f", "key has U+034F (COMBINING GRAPHEME JOINER) at position 3: a character"),
        ("a\u3164b", "key has U+3164 (HANGUL FILLER) at position 1: a character that shows"),
        ("a\u115fb", "key has U+115F (HANGUL CHOSEONG FILLER) at position 1: a character"),
        ("\u2800x", "key has U+2800 (BRAILLE PATTERN BLANK) at position 0: a character that"),
        ("cafe\u0301", "key is not in Unicode normal form NFC: write it as 'café'"),
    ],
)
def test_a_key_that_breaks_the_rule_is_refused_naming_the_character(key: str, reason: str) -> None:
    with pytest.raises(topics.JobKeyError) as caught:
        topics.check_key(key)
    assert str(caught.value).startswith(reason)
    for fields in ({"playbook_key": "p"}, {"action": "a"}):
        message = {"type": "job.start" if "playbook_key" in fields else "event", "key": key}
        with pytest.raises(ValueError, match="key"):
            TypeAdapter(topics.InboxMessage).validate_python({**message, **fields})
    if "\udc00" not in key:  # orjson cannot write a lone surrogate
        raw = orjson.dumps({"type": "event", "key": key, "action": "a"})
        assert reason.split(": at most")[0] in reason_of(raw)


@pytest.mark.parametrize("key", ["job-1", "a.b", "...", "Rechnung 2026", "日本語", "ü", "k" * 200])
def test_printable_keys_are_accepted(key: str) -> None:
    assert topics.check_key(key) == key
    assert decode_inbox(orjson.dumps({"type": "event", "key": key, "action": "a"})).key == key


# -- decode_inbox: the limits (the gateway's, applied to any producer) -------------------


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_nesting_up_to_the_limit_is_accepted_and_deeper_is_refused_naming_where() -> None:
    assert decode_inbox(ev(properties=nested(MAX_DEPTH))).properties == nested(MAX_DEPTH)
    reason = reason_of(ev(properties=nested(MAX_DEPTH + 1)))
    assert reason.startswith("properties.a.a")
    assert reason.endswith(f"nested deeper than {MAX_DEPTH} levels")
    # ~252 levels: orjson reads it, but could never write it back
    deep = b'{"type":"event","key":"k","action":"a","properties":' + b'{"a":' * 252
    deep += b"1" + b"}" * 253
    assert "nested deeper" in reason_of(deep)
    subject = orjson.dumps(
        {"type": "job.start", "key": "k", "playbook_key": "p", "subject": nested(40)}
    )
    assert reason_of(subject).startswith("subject.a")


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (b'{"type":"event","key":"k","action":"a","value":1180591620717411303424}', "value"),
        (b'{"type":"event","key":"k","action":"a","value":-9223372036854775809}', "value"),
        (
            b'{"type":"event","key":"k","action":"a","properties":{"n":[1,2,99999999999999999999]}}',
            "properties",
        ),
    ],
    ids=["2**70", "below-int64", "in-a-list"],
)
def test_an_integer_beyond_64_bits_is_refused_not_turned_into_a_float(
    raw: bytes, named: str
) -> None:
    assert "beyond 64 bits" in reason_of(raw)


def test_integers_at_the_64_bit_edges_and_long_digit_strings_are_exact() -> None:
    edge = b'{"type":"event","key":"k","action":"a","value":9223372036854775807}'
    assert decode_inbox(edge).value == 2**63 - 1
    low = b'{"type":"event","key":"k","action":"a","value":-9223372036854775808}'
    assert decode_inbox(low).value == -(2**63)
    text = b'{"type":"event","key":"k","action":"a","value":"12345678901234567890123"}'
    assert decode_inbox(text).value == "12345678901234567890123"
    fraction = b'{"type":"event","key":"k","action":"a","value":0.12345678901234567890123}'
    assert decode_inbox(fraction).value == pytest.approx(0.123456789012345678)


def test_a_record_larger_than_the_limit_is_refused_with_its_size() -> None:
    big = ev(properties={"text": "x" * MAX_RECORD_BYTES})
    assert reason_of(big) == (
        f"record of {len(big):,} bytes is larger than the limit of {MAX_RECORD_BYTES:,}"
    )
    assert reason_of(b"\x01" * (1 << 20)).startswith("record of 1,048,576 bytes")


# -- dead letters ------------------------------------------------------------------------


def test_a_dead_letter_is_headers_around_the_original_bytes() -> None:
    letter = DeadLetter.of("lemongraph.inbox", 1, 2, "not JSON: x", "2026-01-05T09:00:00Z", 17)
    headers = letter.headers([("trace", b"\xff"), ("lemongraph.dlq.reason", b"forged")])
    assert headers[0] == ("trace", b"\xff")  # the original's own headers are kept
    assert [v for n, v in headers if n == "lemongraph.dlq.reason"] == [b"not JSON: x"]
    assert DeadLetter.from_headers(headers) == letter
    described = letter.describe(b"job-1", b"\xff\x00")
    assert described["key"] == "job-1"
    assert (described["value_text"], described["value_b64"]) == (None, "/wA=")
    assert described["value_bytes"] == 2
    assert (described["topic"], described["partition"], described["offset"]) == (
        "lemongraph.inbox",
        1,
        2,
    )
    assert sum(len(n) + len(v) for n, v in letter.headers()) < 300


def test_a_long_reason_is_cut_so_the_headers_stay_small() -> None:
    letter = DeadLetter.of("t", 0, 0, "why " * 10_000, "2026-01-05T09:00:00Z")
    assert len(letter.reason) == 1000
    assert letter.reason.endswith("...")


def test_headers_that_are_not_a_dead_letter_are_refused() -> None:
    with pytest.raises(ValueError, match="reason"):
        DeadLetter.from_headers([("lemongraph.dlq.topic", b"t")])


def test_record_error_is_a_value_error() -> None:
    assert issubclass(RecordError, ValueError)
    assert RecordError("why").reason == "why"


# -- topic names ------------------------------------------------------------------------

SHORT = [
    "inbox",
    "ticks",
    "tasks",
    "decisions",
    "engine-jobstate-changelog",
    "playbooks",
    "deadletter",
    "messages",
    "journal",
    "conversations",
    "schedules",
    "schedule-runs",
    "audit",
    "mail-log",
    "memory-facts",
    "memory",
]


def test_the_default_prefix_names_every_topic_of_the_spec() -> None:
    names = Topics()
    assert names.prefix == "lemongraph."
    assert names.inbox == "lemongraph.inbox"
    assert names.ticks == "lemongraph.ticks"
    assert names.tasks == "lemongraph.tasks"
    assert names.decisions == "lemongraph.decisions"
    # the workers' table changelog: Faust's name for the table of app `<prefix>engine`
    assert names.jobstate == "lemongraph.engine-jobstate-changelog"
    assert names.playbooks == "lemongraph.playbooks"
    assert names.deadletter == "lemongraph.deadletter"
    assert names.messages == "lemongraph.messages"
    assert names.journal == "lemongraph.journal"
    assert names.all() == {s: f"lemongraph.{s}" for s in SHORT}
    assert sorted(TOPIC_NAMES) == sorted(SHORT)


def test_only_the_latest_state_topics_are_compacted() -> None:
    assert {s for s, (_what, compacted) in TOPIC_NAMES.items() if compacted} == {
        "engine-jobstate-changelog",
        "playbooks",
        "conversations",
        "schedules",
        "mail-log",
        "memory",
    }
    assert all(what for what, _compacted in TOPIC_NAMES.values())


def test_a_custom_prefix() -> None:
    names = Topics("acme.t1.")
    assert names.inbox == "acme.t1.inbox"
    assert names.deadletter == "acme.t1.deadletter"
    assert names.all()["engine-jobstate-changelog"] == "acme.t1.engine-jobstate-changelog"
    assert names.name("tasks") == "acme.t1.tasks"
    assert names.name("acme.t1.tasks") == "acme.t1.tasks"  # a full name passes through
    assert Topics("acme.t1.") == names  # a value: equal by prefix


@pytest.mark.parametrize("short", SHORT)
def test_name_of_every_short_name(short: str) -> None:
    assert Topics("p-").name(short) == f"p-{short}"
    prop = {"engine-jobstate-changelog": "jobstate"}.get(short, short.replace("-", "_"))
    assert getattr(Topics("p-"), prop) == f"p-{short}"


@pytest.mark.parametrize("bad", ["nope", "lemongraph.inbox", "acme.nope", "", "INBOX"])
def test_name_refuses_what_is_not_a_topic(bad: str) -> None:
    with pytest.raises(ValueError, match="unknown topic") as caught:
        Topics("acme.").name(bad)
    assert repr(bad) in str(caught.value)
    assert "inbox" in str(caught.value)  # it lists what would do


# -- encode and round trips ----------------------------------------------------------------


def test_encode_writes_schema_under_its_wire_name() -> None:
    data = orjson.loads(encode(JobStart(key="job-1", playbook_key="onboarding")))
    assert data == {
        "type": "job.start",
        "schema": 1,
        "key": "job-1",
        "playbook_key": "onboarding",
        "subject": {},
        "contacts": [],
    }


def test_encode_passes_plain_data_through() -> None:
    assert encode({"a": [1, "x"]}) == b'{"a":[1,"x"]}'


def test_inbox_messages_round_trip() -> None:
    start = JobStart(key="job-1", playbook_key="onboarding", subject={"n": 1}, contacts=["x"])
    assert decode_inbox(encode(start), b"job-1") == start
    event = InboxEvent(
        key="job-1",
        action="id_uploaded",
        value=2.5,
        properties={"a": {"b": [1]}},
        idempotency_key="evt-1",
        source="tool",
    )
    assert decode_inbox(encode(event)) == event


def test_the_pinned_shapes_round_trip_to_equal_json() -> None:
    for raw in (START_JSON, EVENT_JSON):
        again = orjson.loads(encode(decode_inbox(raw)))
        assert again == {**orjson.loads(raw), "schema": 1}


def test_every_other_message_round_trips() -> None:
    messages = [
        TickRecord(partition=3, at="2026-01-05T09:00:00Z"),
        TaskOpenedRecord(
            task_id="job-1/collect",
            job_key="job-1",
            milestone="collect",
            at="2026-01-05T09:00:00Z",
            instructions="Ask.",
            playbook_key="onboarding",
            playbook_instructions="Be kind.",
            integrations=["email"],
            deadline="2026-01-12T09:00:00Z",
            frontier=["collect"],
        ),
        TaskClosedRecord(
            task_id="job-1/collect",
            job_key="job-1",
            milestone="collect",
            at="2026-01-05T10:00:00Z",
            outcome="timed_out",
        ),
        DecisionRecord(
            job_key="job-1",
            playbook_key="onboarding",
            playbook_version=1,
            origin=RecordOrigin(topic="lemongraph.inbox", partition=0, offset=7),
            now="2026-01-05T09:00:00Z",
            input={"type": "tick"},
            outcome="applied",
            seq=2,
            state_hash="a" * 64,
            prev_state_hash="b" * 64,
        ),
        JobSnapshot(
            key="job-1",
            status="running",
            playbook_key="onboarding",
            playbook_version=1,
            seq=1,
            started_at="2026-01-05T09:00:00Z",
            updated_at=None,
            milestones={"collect": "open"},
            detail={"collect": MilestoneSnapshot(state="open")},
            frontier=["collect"],
            timers=[],
            state_hash="c" * 64,
        ),
        PlaybookRecord(key="onboarding", version=2, spec={"key": "onboarding"}),
    ]
    for message in messages:
        raw = encode(message)
        assert orjson.loads(raw)["schema"] == 1
        assert type(message).model_validate_json(raw) == message


def test_task_records_are_told_apart_by_type() -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(TaskRecord)
    closed = TaskClosedRecord(task_id="j/m", job_key="j", milestone="m", at="x", outcome="done")
    assert isinstance(adapter.validate_json(encode(closed)), TaskClosedRecord)
    with pytest.raises(ValueError, match="outcome"):
        TaskClosedRecord.model_validate(
            {"task_id": "j/m", "job_key": "j", "milestone": "m", "at": "x", "outcome": "meh"}
        )


def test_messages_are_frozen_and_refuse_unknown_fields() -> None:
    start = JobStart(key="j", playbook_key="p")
    with pytest.raises(ValueError, match="frozen"):
        start.key = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="colour"):
        TickRecord.model_validate({"partition": 0, "at": "x", "colour": 1})
    with pytest.raises(ValueError, match="partition"):
        TickRecord.model_validate({"partition": -1, "at": "x"})


# -- the public names --------------------------------------------------------------------


def public_names(module: types.ModuleType) -> set[str]:
    """Public names, and public submodules of the package (``topics.build``);
    modules it merely imports are not its names, nor compiler's folders of private
    modules (``compiler.jobs``: the package is the API). ``dir``, not ``vars``:
    compiler loads a name's module when it is first used (compiler/__init__.py)."""
    values = {name: getattr(module, name) for name in dir(module)}
    return {
        name
        for name, value in values.items()
        if not name.startswith("_")
        and name != "annotations"
        and (
            not isinstance(value, types.ModuleType) or value.__name__ == f"{module.__name__}.{name}"
        )
        and not (module is compiler and name in COMPILER_FOLDERS)
    }


#: compiler/'s layers, each a folder of private modules behind compiler/__init__.py
COMPILER_FOLDERS = {"conditions", "jobs", "schedules", "flows", "scenarios"}


@pytest.mark.parametrize("module", [topics, compiler], ids=["topics", "compiler"])
def test_all_exports_exactly_the_public_names(module: types.ModuleType) -> None:
    exported = module.__all__
    assert len(exported) == len(set(exported))
    assert set(exported) == public_names(module)
    for name in exported:
        assert getattr(module, name) is not None


def test_topics_exports_the_documented_names() -> None:
    documented = {
        "SCHEMA",
        "TOPIC_NAMES",
        "Topics",
        "RecordError",
        "decode_inbox",
        "encode",
        "JobStart",
        "InboxEvent",
        "InboxMessage",
        "TickRecord",
        "TaskOpenedRecord",
        "TaskClosedRecord",
        "TaskRecord",
        "DecisionRecord",
        "RecordOrigin",
        "JobSnapshot",
        "MilestoneSnapshot",
        "PlaybookRecord",
        "DeadLetter",
        "DecisionInput",
        "Effect",
        "TimerRecord",
        "VerdictRecord",
        "TransitionRecord",
        "MilestoneStatus",
        "JobStatus",
        "TaskOutcome",
        "build",
    }
    assert documented <= set(topics.__all__)


def test_compiler_exports_the_documented_names() -> None:
    documented = {
        "compile_condition",
        "ConditionError",
        "Fact",
        "Verdict",
        "JobGraph",
        "JobState",
        "Step",
        "Start",
        "Event",
        "Tick",
        "load_playbook",
        "compile_playbook",
        "Playbook",
        "PlaybookError",
    }
    assert documented <= set(compiler.__all__)


def test_a_compact_message_leaves_out_defaults_and_reads_back_the_same() -> None:
    event = InboxEvent(key="job-1", action="id_uploaded", idempotency_key="evt-1")
    assert event.compact() == {
        "type": "event",
        "key": "job-1",
        "action": "id_uploaded",
        "idempotency_key": "evt-1",
    }
    assert InboxEvent.model_validate(event.compact()) == event
    start = JobStart(key="job-1", playbook_key="onboarding", subject={"n": 1})
    assert start.compact() == {
        "type": "job.start",
        "key": "job-1",
        "playbook_key": "onboarding",
        "subject": {"n": 1},
    }
    assert decode_inbox(encode(start.compact()), b"job-1") == start
