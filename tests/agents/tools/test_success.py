"""What a tool's 2xx answer says (agents/tools/success.py, docs/agents.md "What
success is"): the pure judgement, rule by rule, on bodies as bytes."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agents.catalog import Success
from agents.tools.success import Verdict, judge

SUCCEEDED, FAILED, UNSAID = Verdict.SUCCEEDED, Verdict.FAILED, Verdict.UNSAID


def rule(**spec: Any) -> Success:
    return Success.model_validate(spec)


@pytest.mark.parametrize(
    ("body", "verdict"),
    [
        ({}, SUCCEEDED),
        ({"id": "B-1"}, SUCCEEDED),
        ({"ok": True}, SUCCEEDED),
        ({"ok": "false"}, SUCCEEDED),  # only JSON false says it
        ({"error": None}, SUCCEEDED),
        ({"error": False}, SUCCEEDED),
        ({"ok": False}, FAILED),
        ({"ok": False, "id": "B-1"}, FAILED),
        ({"error": "declined"}, FAILED),
        ({"error": ""}, FAILED),
        ({"error": True}, FAILED),
        ({"error": {"code": 7}}, FAILED),
        ([], UNSAID),
        ("booked", UNSAID),
        (1, UNSAID),
        (None, UNSAID),
    ],
)
def test_the_default_rule(body: Any, verdict: Verdict) -> None:
    judged = judge(None, orjson.dumps(body))
    assert judged.verdict is verdict
    assert judged.data == body
    assert (judged.why == "") == (verdict is SUCCEEDED)


@pytest.mark.parametrize("body", [b"", b"<html>502</html>", b'{"ok": true', b"\xff\xfe"])
def test_a_body_that_is_not_json_says_nothing(body: bytes) -> None:
    for one in (None, rule(path="$.id", exists=True)):
        assert judge(one, body) == judge(None, b"nope")
        assert judge(one, body).why == "the answer is not JSON"


@pytest.mark.parametrize(
    ("spec", "body", "verdict"),
    [
        ({"path": "$.status", "equals": "confirmed"}, {"status": "confirmed"}, SUCCEEDED),
        ({"path": "$.status", "equals": "confirmed"}, {"status": "confirmed", "ok": False},
         SUCCEEDED),  # judged by the rule only
        ({"path": "$.status", "equals": "confirmed"}, {"status": "declined"}, FAILED),
        ({"path": "$.status", "equals": "confirmed"}, {"status": None}, FAILED),
        ({"path": "$.status", "equals": "confirmed"}, {}, UNSAID),
        ({"path": "$.status", "equals": "confirmed"}, {"error": "declined"}, FAILED),
        ({"path": "$.status", "equals": "confirmed"}, ["confirmed"], UNSAID),
        ({"path": "$.active", "equals": True}, {"active": True}, SUCCEEDED),
        ({"path": "$.active", "equals": True}, {"active": 1}, FAILED),  # true is not 1
        ({"path": "$.count", "equals": 1}, {"count": 1.0}, SUCCEEDED),
        ({"path": "$.count", "equals": 1}, {"count": True}, FAILED),
        ({"path": "$.left", "equals": None}, {"left": None}, SUCCEEDED),
        ({"path": "$.left", "equals": None}, {}, UNSAID),
        ({"path": "$", "equals": "OK"}, "OK", SUCCEEDED),
        ({"path": "$.0.id", "equals": "B-1"}, [{"id": "B-1"}], SUCCEEDED),
        ({"path": "$.status", "in": ["confirmed", "booked"]}, {"status": "booked"}, SUCCEEDED),
        ({"path": "$.status", "in": ["confirmed", "booked"]}, {"status": "pending"}, FAILED),
        ({"path": "$.booking.id", "exists": True}, {"booking": {"id": "B-1"}}, SUCCEEDED),
        ({"path": "$.booking.id", "exists": True}, {"booking": {"id": None}}, SUCCEEDED),
        ({"path": "$.booking.id", "exists": True}, {"booking": {}}, UNSAID),
        ({"path": "$.booking.id", "exists": True}, {"ok": False}, FAILED),
        ({"path": "$.errors", "exists": False}, {"id": "B-1"}, SUCCEEDED),
        ({"path": "$.errors", "exists": False}, {"errors": []}, FAILED),
    ],
)  # fmt: skip
def test_a_success_rule(spec: dict[str, Any], body: Any, verdict: Verdict) -> None:
    assert judge(rule(**spec), orjson.dumps(body)).verdict is verdict


def test_why_names_what_the_answer_said() -> None:
    status = rule(path="$.status", equals="confirmed")
    assert judge(status, b'{"status":"declined"}').why == (
        '$.status is "declined", not "confirmed"'
    )
    assert judge(status, b"{}").why == "the answer has no $.status"
    long = orjson.dumps({"status": "x" * 500})
    assert len(judge(status, long).why) < 120
    absent = rule(path="$.errors", exists=False)
    assert judge(absent, b'{"errors":[1]}').why == (
        "$.errors is [1], and the rule says it must be absent"
    )
