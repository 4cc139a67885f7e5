"""decode_inbox reads the common inbox records without the model, and takes and
refuses exactly what the model does (topics/_codec.py, "the common records,
without the model"; topics/build.py's ``inbox_event_fields`` and
``job_start_fields``).

For generated records, valid and not, through JSON as a producer writes them:
whenever the hand-written check takes a record, the model takes it too and
makes the equal message (fields, the fields given, its dump and its text);
``decode_inbox`` gives the model's message or the model's refusal, word for
word; and the check does take the plain records an inbox is made of (else it
would be correct and useless).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from topics import InboxEvent, JobStart, RecordError, decode_inbox
from topics._codec import _INBOX, checked_inbox
from topics._errors import describe_errors

#: Texts that test the key and label rules at their edges: plain, empty, too
#: long, spaces at an end, '/', '.', control, format and invisible characters,
#: not NFC, non-ASCII that is fine.
_EDGY: list[str] = [
    "job-1",
    "",
    "x" * 200,
    "x" * 201,
    " job",
    "job ",
    "a/b",
    ".",
    "..",
    "a\tb",
    "a\u200bb",
    "a\u2800b",
    "cafe\u0301",
    "café",
    "ключ",
    "k\x7f",
    "evt 1",
]
_EDGY_TEXT = st.sampled_from(_EDGY)
_TEXT = st.one_of(_EDGY_TEXT, st.text(max_size=12))
_JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    _TEXT,
)
_JSON = st.recursive(
    _JSON_LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
#: Any value a field might hold: right or wrong for it.
_ANY = st.one_of(_JSON, _TEXT, st.just({}), st.just([]))
_CONTACT = st.one_of(
    _TEXT,
    st.fixed_dictionaries(
        {}, optional={"email": st.one_of(_TEXT, _JSON), "name": _TEXT, "id": _ANY}
    ),
    _JSON,
)


def _record(kind: str, fields: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, **fields, **extra}


_SCHEMA = st.one_of(st.just(1), st.sampled_from([0, 2, 1.0, True, "1", None]))


def _records(kind: str, optional: dict[str, Any], strangers: list[str]) -> Any:
    """Records of ``kind``: a key of any kind, any of ``optional``'s fields,
    sometimes fields the model does not have."""
    return st.builds(
        _record,
        st.just(kind),
        st.fixed_dictionaries(
            {"key": st.one_of(_TEXT, _ANY)}, optional={"schema": _SCHEMA, **optional}
        ),
        st.one_of(st.just({}), st.dictionaries(st.sampled_from(strangers), _ANY)),
    )


_OBJECT = st.one_of(st.dictionaries(st.text(max_size=4), _JSON), _ANY)
_EVENT = _records(
    "event",
    {
        "action": st.one_of(_TEXT, _ANY),
        "value": _ANY,
        "properties": _OBJECT,
        "idempotency_key": st.one_of(_TEXT, st.none(), _ANY),
        "source": st.one_of(st.sampled_from(["world", "tool", "agent", "World"]), _ANY),
    },
    ["extra", "schema_", "id"],
)
_START = _records(
    "job.start",
    {
        "playbook_key": st.one_of(_TEXT, _ANY),
        "subject": _OBJECT,
        "contacts": st.one_of(st.lists(_CONTACT, max_size=3), _ANY),
    },
    ["extra", "schema_", "value"],
)
#: Plain records, as producers write them: the check must take these itself.
_PLAIN_KEY = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,30}", fullmatch=True)


def _plain(kind: str, required: dict[str, Any], optional: dict[str, Any]) -> Any:
    return st.builds(
        _record,
        st.just(kind),
        st.fixed_dictionaries({"key": _PLAIN_KEY, **required}, optional=optional),
        st.just({}),
    )


_PLAIN_OBJECT = st.dictionaries(st.text(max_size=4), _JSON, max_size=3)
_PLAIN_EVENT = _plain(
    "event",
    {"action": _PLAIN_KEY},
    {
        "schema": st.just(1),
        "value": _JSON_LEAF,
        "properties": _PLAIN_OBJECT,
        "idempotency_key": st.one_of(st.none(), _PLAIN_KEY),
        "source": st.sampled_from(["world", "tool", "agent"]),
    },
)
_PLAIN_START = _plain(
    "job.start",
    {"playbook_key": _PLAIN_KEY},
    {
        "subject": _PLAIN_OBJECT,
        "contacts": st.lists(st.one_of(_PLAIN_KEY, st.fixed_dictionaries({"email": _PLAIN_KEY}))),
    },
)


#: What a field is set to, one at a time, in an otherwise plain record.
_TAMPER = st.one_of(_ANY, _TEXT, _SCHEMA, st.lists(_CONTACT, max_size=3))
_TAMPERED_FIELDS = [
    "schema",
    "key",
    "action",
    "value",
    "properties",
    "idempotency_key",
    "source",
    "playbook_key",
    "subject",
    "contacts",
    "schema_",
    "extra",
]


@st.composite
def _one_off(draw: st.DrawFn) -> dict[str, Any]:
    """A plain record with one field changed to anything, or left out: the
    boundary between what the check takes and what it leaves to the model."""
    data: dict[str, Any] = dict(draw(st.one_of(_PLAIN_EVENT, _PLAIN_START)))
    name = draw(st.sampled_from(_TAMPERED_FIELDS))
    if draw(st.booleans()) and name in data:
        del data[name]
    else:
        data[name] = draw(_TAMPER)
    return data


def _model(data: dict[str, Any]) -> Any:
    """What the model makes of ``data``: the message, or its refusal's text."""
    try:
        return _INBOX.validate_python(data)
    except ValidationError as exc:
        return describe_errors(exc)


def _same_message(mine: Any, theirs: Any) -> None:
    assert type(mine) is type(theirs)
    assert mine == theirs
    assert mine.model_fields_set == theirs.model_fields_set
    assert mine.dump() == theirs.dump()
    assert mine.compact() == theirs.compact()
    assert repr(mine) == repr(theirs)


def _agree(data: dict[str, Any]) -> Any:
    raw = orjson.dumps(data)
    data = orjson.loads(raw)  # as the decoder reads it
    theirs = _model(dict(data))
    mine = checked_inbox(dict(data))
    if mine is not None:
        assert not isinstance(theirs, str), f"the check took what the model refuses: {theirs}"
        _same_message(mine, theirs)
    try:
        decoded: Any = decode_inbox(raw)
    except RecordError as exc:
        decoded = exc.reason
    if isinstance(theirs, str):
        assert decoded == theirs
    else:
        _same_message(decoded, theirs)
    return mine


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_EVENT, _START))
def test_the_check_takes_and_refuses_what_the_model_does(data: dict[str, Any]) -> None:
    _agree(data)


@settings(max_examples=100, deadline=None)
@given(st.one_of(_PLAIN_EVENT, _PLAIN_START))
def test_the_check_takes_plain_records_itself(data: dict[str, Any]) -> None:
    assert _agree(data) is not None


@settings(max_examples=150, deadline=None)
@given(_one_off())
def test_one_field_off_a_plain_record(data: dict[str, Any]) -> None:
    _agree(data)


#: Values at the edges of every field's rule, and of the wrong types.
_EDGES: list[Any] = [
    *_EDGY,
    None,
    True,
    0,
    1,
    2,
    1.0,
    -1.5,
    "1",
    "world",
    "tool",
    "agent",
    "World",
    [],
    ["a@b.c"],
    [{"email": " a@b.c "}],
    [{"email": "a\u200bb"}],
    [{"name": 3, "id": "x/y"}],
    [7, None],
    {},
    {"a": 1},
]


def test_every_field_at_its_edges() -> None:
    """Each field of a plain event and job start set, one at a time, to each
    edge value (and left out): the check and the model agree on every one."""
    plain = [
        {"type": "event", "key": "job-1", "action": "paid"},
        {"type": "job.start", "key": "job-1", "playbook_key": "onboarding"},
    ]
    taken = 0
    for record in plain:
        for name in _TAMPERED_FIELDS:
            without = {k: v for k, v in record.items() if k != name}
            taken += _agree(without) is not None
            for value in _EDGES:
                taken += _agree({**record, name: value}) is not None
    assert taken > 100  # and the check took a good part of them itself


@pytest.mark.parametrize(
    ("data", "model"),
    [
        ({"type": "event", "key": "job-1", "action": "paid"}, InboxEvent),
        (
            {
                "type": "event",
                "schema": 1,
                "key": "ключ",
                "action": "a",
                "value": 1.5,
                "properties": {"a": [1]},
                "idempotency_key": "évt 1",
                "source": "tool",
            },
            InboxEvent,
        ),
        ({"type": "job.start", "key": "job-1", "playbook_key": "p"}, JobStart),
        (
            {
                "type": "job.start",
                "key": "j",
                "playbook_key": "p",
                "subject": {"n": 1},
                "contacts": ["a@b.c", {"email": "x@y.z", "name": "X"}, 3],
            },
            JobStart,
        ),
    ],
)
def test_common_records_are_read_without_the_model(data: dict[str, Any], model: type) -> None:
    message = _agree(data)
    assert type(message) is model


@pytest.mark.parametrize(
    "data",
    [
        {"type": "event", "key": "job-1", "action": "paid", "schema": True},
        {"type": "event", "key": "job-1", "action": "paid", "schema": 1.0},
        {"type": "event", "key": "job-1", "action": "paid", "value": [1]},
        {"type": "event", "key": "job-1", "action": "paid", "properties": None},
        {"type": "event", "key": "a/b", "action": "paid"},
        {"type": "event", "key": "job-1", "action": "", "source": "world"},
        {"type": "event", "key": "job-1", "action": "paid", "idempotency_key": " k"},
        {"type": "event", "key": "job-1", "action": "paid", "schema_": 1},
        {"type": "job.start", "key": "j", "playbook_key": "p", "contacts": ["a\u200bb"]},
        {"type": "job.start", "key": "j", "playbook_key": "p", "subject": []},
        {"type": "schedule.wake", "schedule_id": "s"},
    ],
)
def test_the_model_decides_what_is_not_plain(data: dict[str, Any]) -> None:
    assert _agree(data) is None
