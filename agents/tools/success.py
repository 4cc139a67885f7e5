"""What a tool's answer says: whether a 2xx response body confirms the call
(docs/agents.md, "What success is").

A pure judgement, no I/O: the executor hands over the body's bytes and the
tool's ``success:`` rule, and gets a :class:`Judgement` back. There are three
verdicts, not two, because a non-idempotent tool must tell "the endpoint said it
did not happen" (safe to say it failed) from "the answer says nothing we can
read" (it may have happened, like a timeout).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import orjson

from agents.catalog import Success

__all__ = ["Judgement", "Verdict", "judge", "response_path"]


class Verdict(Enum):
    """What a 2xx answer says about the call."""

    #: The body is JSON and passes the tool's rule: the call is confirmed.
    SUCCEEDED = "succeeded"
    #: The body says the call did not succeed.
    FAILED = "failed"
    #: The body does not say: not JSON, or JSON without what the rule reads.
    UNSAID = "unsaid"


@dataclass(frozen=True)
class Judgement:
    """A verdict, the parsed body (None when it is not JSON) and, unless it
    succeeded, why, in a few words for the model and the journal."""

    verdict: Verdict
    data: Any = None
    why: str = ""


def response_path(data: Any, path: str) -> tuple[bool, Any]:
    """(found, value) at ``$`` or ``$.a.b`` in JSON data."""
    if path == "$":
        return True, data
    value = data
    for part in path.removeprefix("$.").split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return False, None
    return True, value


def judge(rule: Success | None, body: bytes) -> Judgement:
    """Judge a 2xx answer's body by the tool's ``success:`` rule, or by the
    default rule when it has none."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return Judgement(Verdict.UNSAID, None, "the answer is not JSON")
    if rule is None:
        if not isinstance(data, dict):
            return Judgement(Verdict.UNSAID, data, "the answer is not a JSON object")
        said = _says_failure(data)
        if said is not None:
            return Judgement(Verdict.FAILED, data, said)
        return Judgement(Verdict.SUCCEEDED, data)
    found, value = response_path(data, rule.path)
    if found:
        if _passes(rule, value):
            return Judgement(Verdict.SUCCEEDED, data)
        shown = orjson.dumps(value, default=str).decode()
        return Judgement(Verdict.FAILED, data, f"{rule.path} is {_cut(shown)}, {_wanted(rule)}")
    if rule.exists is False:
        return Judgement(Verdict.SUCCEEDED, data)
    # The rule's path is missing: the answer only says it failed if it says
    # so in the usual words.
    said = _says_failure(data) if isinstance(data, dict) else None
    if said is not None:
        return Judgement(Verdict.FAILED, data, said)
    return Judgement(Verdict.UNSAID, data, f"the answer has no {rule.path}")


def _says_failure(data: dict[str, Any]) -> str | None:
    """Why a JSON object says it failed (``"ok": false``, or an ``error`` that
    is not null or false), or None."""
    if data.get("ok") is False:
        return 'the answer says "ok": false'
    error = data.get("error")
    if error is not None and error is not False:
        return f"the answer carries an error: {_cut(orjson.dumps(error, default=str).decode())}"
    return None


def _passes(rule: Success, value: Any) -> bool:
    if "equals" in rule.model_fields_set:
        return _same(value, rule.equals)
    if rule.in_ is not None:
        return any(_same(value, one) for one in rule.in_)
    return rule.exists is True


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``true`` is not ``1``."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _wanted(rule: Success) -> str:
    if "equals" in rule.model_fields_set:
        return f"not {orjson.dumps(rule.equals).decode()}"
    if rule.in_ is not None:
        return f"not one of {orjson.dumps(list(rule.in_)).decode()}"
    return "and the rule says it must be absent"


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
